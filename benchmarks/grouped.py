"""Grouped GEMM of mixture-of-experts layers: cudalibs' two paths beside torch._grouped_mm and
a loop of torch.matmul, bf16.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/grouped.py            # on a GPU, about 1-2 minutes
    PYTHONPATH=. python3 benchmarks/grouped.py --quick    # the small shapes only
    PYTHONPATH=. python3 benchmarks/grouped.py --wgrad    # the weight gradient only
    PYTHONPATH=. python3 benchmarks/grouped.py --forward  # the product only (1 and 2)
    PYTHONPATH=. python3 benchmarks/grouped.py --routing  # the routing only (4)

What is measured
----------------
1. **One expert layer**: ``T`` tokens routed to ``E`` experts with Zipf-like skewed counts
   (expert ``i`` of the ranking gets a share proportional to ``1 / (i + 1)``, the ranking
   shuffled; for 64 experts the least popular one gets no token), ``out[rows of e] = x[rows
   of e] @ w[e]``, for E = 8 and 64 and hidden sizes 4096 -> 14336 and 2048 -> 1408:

   - ``kernels.grouped_mm``: the device-offsets kernels through held :class:`GroupedMM`
     plans, autotuned (every candidate timed by the plan's own timer, not kept on disk; on
     compute capability 9.0 the Hopper wgmma/TMA tiles are among them, on any GPU the sm_80
     kernel's), w as (E, K, N) and as the transposed view of an (E, N, K) tensor ("nk", how
     a Linear layer keeps its weight); the "kernel tiles" column names each plan's choice;
   - ``cublas.GroupedGemm``'s two candidates through held plans, each picked with
     ``select``: one ``cublasGemmGroupedBatchedEx`` ("cuBLAS grouped call") and one prepared
     cuBLAS GEMM per expert queued back to back ("per-group GEMMs");
   - ``cublas.gemm_grouped`` (the one-shot, running its plan's heuristic choice, named in
     the "one-shot runs" column) over lists of views made once, and with the views made
     from the host counts on every call (what a step that knows its counts on the host
     pays);
   - ``torch._grouped_mm(x, w, offs)`` (where torch has it), with w in both layouts, and a
     Python loop of ``torch.matmul`` over the experts; the ratios set the kernel beside each
     (kn beside torch's kn, nk beside torch's nk).

   TFLOP/s = 2 T K N / time (the tokens each do one K x N product).  Every library runs on
   the same memory (torch tensors, borrowed by cudalibs once, outside the timing), each on a
   stream of its own, timed with its own CUDA events; the contenders' repeats alternate.
2. **Captured replay with changing counts**: the device-offsets kernel captured once as a
   CUDA graph (capacity T), then replayed with three count vectors written into the device
   offsets between replays: the time of a replay (the copy of the offsets not included)
   beside a direct call, and ``torch._grouped_mm`` captured with ``torch.cuda.graph`` and
   replayed the same way, where that works.

3. **Weight gradient** (``--wgrad`` runs only this): ``dw[e] = x[rows of e]^T @ dy[rows of
   e]`` for K = 4096, N = 1408 and 14336, 16384 tokens, E = 8 and 64, skewed counts as above:

   - ``kernels.grouped_mm_wgrad`` through held :class:`GroupedMMWgrad` plans (heuristic
     tiles): a float32 gradient, the same accumulated into (``accumulate=True``, which also
     reads dw), and a bfloat16 one;
   - ``torch._grouped_mm(x.t(), dy, offs)``, what torch's backward of ``_grouped_mm`` runs for
     w (where this torch has it and runs it; else ``n/a``, the reason on stderr), and a Python
     loop of ``torch.matmul(x_e^T, dy_e)`` into a bfloat16 dw;
   - the relative difference of the kernel's float32 gradient from the loop's.

   TFLOP/s = 2 T K N / time, as above.

4. **Routing** (``--routing`` runs only this): the router's bf16 logits (T, E) to the top-k
   weights and ids (``kernels.topk_softmax``), then the slots sorted by expert with their
   offsets (``kernels.moe_routing``), beside torch's usual spelling of the same (softmax in
   float32, ``topk``, a stable ``argsort`` of the flattened ids, the counts by
   ``scatter_add`` and their ``cumsum``).  Both sides are captured as one CUDA graph each
   and the replays timed, so the figure is the GPU's work, not the host's; the ids of the
   two sides are compared first (as sets per token: bf16 logits often tie, and either side
   may break a tie).

Ratios are ours/theirs in throughput (above 1: cudalibs faster).  No result is asserted:
this is a measurement.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.grouped
    from . import _common as common

import cudalibs as cl
from cudalibs import cublas, kernels

#: (experts, K, N, tokens) of each layer measured; the first two are the --quick ones.
LAYERS = ((8, 2048, 1408, 4096), (64, 2048, 1408, 16384), (8, 4096, 14336, 8192),
          (64, 4096, 14336, 16384))
#: (experts, K, N, tokens) of the weight-gradient rows; the first two are the --quick ones.
WGRAD_LAYERS = ((8, 4096, 1408, 16384), (64, 4096, 1408, 16384), (8, 4096, 14336, 16384),
                (64, 4096, 14336, 16384))


def _counts(tokens: int, experts: int, rng) -> np.ndarray:
    """Zipf-like token counts: shares proportional to 1 / rank, shuffled; with more than 8
    experts the last one of the ranking gets no token (an empty group)."""
    share = 1.0 / np.arange(1, experts + 1)
    if experts > 8:
        share[-1] = 0.0
    counts = np.floor(tokens * share / share.sum()).astype(np.int64)
    counts[0] += tokens - counts.sum()
    return rng.permutation(counts)


def _fmt(x, digits=1):
    return f"{x:.{digits}f}" if isinstance(x, float) else common.NA


def _tflops(t, k, n, ms):
    return 2.0 * t * k * n / (ms * 1e-3) / 1e12 if isinstance(ms, float) else None


def _rates(cases, times, t, k, n) -> dict:
    """TFLOP/s of each case, from the median of its repeats."""
    return {name: _tflops(t, k, n, common.median_spread(ms)[0]) for name, ms in zip(cases, times)}


def _iters(fn, sync, budget_ms=60.0) -> int:
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = (time.perf_counter() - t0) * 1e3
    return int(max(2, min(100, budget_ms / max(one, 1e-3))))


class _Layer:
    """One expert layer's data, made by torch on the device (random, seeded) and borrowed by
    cudalibs without a copy."""

    def __init__(self, torch, experts, k, n, tokens, seed):
        rng = np.random.default_rng(seed)
        self.shape = (experts, k, n, tokens)
        self.counts = _counts(tokens, experts, rng)
        self.ends = np.cumsum(self.counts)
        gen = torch.Generator(device="cuda").manual_seed(seed)
        bf = torch.bfloat16
        self.tx = torch.randn(tokens, k, device="cuda", dtype=bf, generator=gen)
        self.tw = torch.randn(experts, k, n, device="cuda", dtype=bf, generator=gen) / k ** 0.5
        self.tw_nk = self.tw.transpose(1, 2).contiguous().transpose(1, 2)
        self.toffs = torch.tensor(self.ends, device="cuda", dtype=torch.int32)
        self.tout = torch.empty(tokens, n, device="cuda", dtype=bf)
        self.x, self.w, self.w_nk, self.offs, self.out = (
            cl.asarray(t) for t in (self.tx, self.tw, self.tw_nk, self.toffs, self.tout))
        torch.cuda.synchronize()        # cudalibs' streams read what torch's made

    def views(self, starts_ends=None):
        """Lists of per-expert views (a, b, out) for cublas.gemm_grouped."""
        e = self.ends if starts_ends is None else starts_ends
        lo = np.concatenate([[0], e[:-1]])
        return ([self.x[a:b] for a, b in zip(lo, e)],
                [self.w[g] for g in range(len(e))],
                [self.out[a:b] for a, b in zip(lo, e)])


def _autotuned(x, w, offs, out, s):
    """A GroupedMM plan of the layer, every candidate timed on ``s`` (nothing kept on disk:
    a benchmark measures, it does not teach later runs)."""
    plan = kernels.GroupedMM(x, w, offs, out)
    plan.autotune(stream=s, store=False)
    return plan


def _layer_row(torch, d, s, clock, tclock) -> list[str]:
    """Time one layer's contenders (their repeats alternating); its table row."""
    experts, k, n, tokens = d.shape
    plan = _autotuned(d.x, d.w, d.offs, d.out, s)
    plan_nk = _autotuned(d.x, d.w_nk, d.offs, d.out, s)
    al, bl, ol = d.views()
    starts = np.concatenate([[0], d.ends[:-1]])
    held = {}
    for cid in ("grouped", "per_group"):
        gp = held[cid] = cublas.GroupedGemm(al, bl, ol)
        gp.select([c["id"] for c in gp.plan().candidates].index(cid))
    heuristic = cublas.GroupedGemm(al, bl, ol).plan()
    pick = heuristic.candidates[heuristic.choice]["id"]
    heuristic.close()

    def per_call():
        # what a step with host counts does: views from the counts, then one call
        a, b, o = d.views(np.cumsum(d.counts))
        return cublas.gemm_grouped(a, b, o, stream=s)

    def loop():
        for g, (lo, hi) in enumerate(zip(starts, d.ends)):
            torch.matmul(d.tx[lo:hi], d.tw[g], out=d.tout[lo:hi])

    cases = {
        "kernel": (lambda: plan.execute(d.x, d.w, d.offs, d.out, stream=s), clock),
        "kernel nk": (lambda: plan_nk.execute(d.x, d.w_nk, d.offs, d.out, stream=s), clock),
        "grouped call": (lambda: held["grouped"].execute(al, bl, ol, stream=s), clock),
        "per-group": (lambda: held["per_group"].execute(al, bl, ol, stream=s), clock),
        "cublas": (lambda: cublas.gemm_grouped(al, bl, ol, stream=s), clock),
        "cublas per call": (per_call, clock),
        "torch loop": (loop, tclock),
    }
    if hasattr(torch, "_grouped_mm"):
        cases["torch._grouped_mm"] = (lambda: torch._grouped_mm(d.tx, d.tw, d.toffs), tclock)
        cases["torch gmm nk"] = (lambda: torch._grouped_mm(d.tx, d.tw_nk, d.toffs), tclock)
    try:
        iters = _iters(cases["kernel"][0], s.sync)
        times = common.time_interleaved(list(cases.values()), iters=iters, repeats=5,
                                        warmup=2)
    finally:
        tile = (f"{plan.candidates[plan.choice]['id']} / "
                f"{plan_nk.candidates[plan_nk.choice]['id']}")
        plan.close()
        plan_nk.close()
        for gp in held.values():
            gp.close()
        s.sync()
    tf = _rates(cases, times, tokens, k, n)
    ref, ref_nk = tf.get("torch._grouped_mm"), tf.get("torch gmm nk")
    print(f"  E={experts} {k}->{n}: kernel ({tile}) {_fmt(tf['kernel'])} / "
          f"{_fmt(tf['kernel nk'])} (nk) TFLOP/s, cuBLAS grouped call "
          f"{_fmt(tf['grouped call'])}, per-group GEMMs {_fmt(tf['per-group'])}, "
          f"torch._grouped_mm {_fmt(ref)} / {_fmt(ref_nk)} (nk), torch.matmul loop "
          f"{_fmt(tf['torch loop'])}", file=sys.stderr)
    return [f"E={experts} {k}->{n} T={tokens}", tile,
            *(_fmt(tf.get(c)) for c in ("kernel", "kernel nk", "grouped call", "per-group")),
            pick,
            *(_fmt(tf.get(c)) for c in ("cublas", "cublas per call", "torch._grouped_mm",
                                        "torch gmm nk", "torch loop")),
            common.fmt_ratio(tf["kernel"], ref), common.fmt_ratio(tf["kernel nk"], ref_nk),
            common.fmt_ratio(tf["kernel"], tf["torch loop"]),
            common.fmt_ratio(tf["cublas"], ref)]


def _on_streams(torch, shapes, row) -> list:
    """``row(i, shape, stream, clock, torch clock)`` for each shape: cudalibs on a stream of
    its own, torch on another (made torch's current meanwhile)."""
    s = cl.Stream()
    clock = common.cudalibs_clock(s)
    ts = torch.cuda.Stream()
    tclock = common.torch_clock(torch, ts)
    torch.cuda.set_stream(ts)
    try:
        return [row(i, shape, s, clock, tclock) for i, shape in enumerate(shapes)]
    finally:
        torch.cuda.set_stream(torch.cuda.default_stream())


def layers(torch, shapes):
    rows = _on_streams(torch, shapes, lambda i, shape, s, clock, tclock: _layer_row(
        torch, _Layer(torch, *shape, seed=i), s, clock, tclock))
    return common.markdown_table(
        ["bf16 layer (skewed counts)", "kernel tiles (autotuned, kn / nk)", "kernel TFLOP/s",
         "kernel nk", "cuBLAS grouped call", "per-group GEMMs", "one-shot runs",
         "cuBLAS one-shot", "cuBLAS, views per call", "torch._grouped_mm", "torch gmm nk",
         "torch.matmul loop", "kernel/torch gmm", "kernel nk/torch gmm nk",
         "kernel/torch loop", "cuBLAS one-shot/torch gmm"], rows,
        right=[*range(2, 6), *range(7, 16)])


class _WgradLayer:
    """One expert layer's backward data: x (T, K) and dy (T, N) made by torch (random,
    seeded), the skewed counts, float32 and bfloat16 gradients; borrowed by cudalibs."""

    def __init__(self, torch, experts, k, n, tokens, seed):
        rng = np.random.default_rng(seed)
        self.shape = (experts, k, n, tokens)
        self.counts = _counts(tokens, experts, rng)
        self.ends = np.cumsum(self.counts)
        self.starts = np.concatenate([[0], self.ends[:-1]])
        gen = torch.Generator(device="cuda").manual_seed(seed)
        bf = torch.bfloat16
        self.tx = torch.randn(tokens, k, device="cuda", dtype=bf, generator=gen)
        self.tdy = torch.randn(tokens, n, device="cuda", dtype=bf, generator=gen) / k ** 0.5
        self.toffs = torch.tensor(self.ends, device="cuda", dtype=torch.int32)
        self.tdw32 = torch.empty(experts, k, n, device="cuda", dtype=torch.float32)
        self.tdw16 = torch.empty(experts, k, n, device="cuda", dtype=bf)
        self.x, self.dy, self.offs, self.dw32, self.dw16 = (
            cl.asarray(t) for t in (self.tx, self.tdy, self.toffs, self.tdw32, self.tdw16))
        torch.cuda.synchronize()        # cudalibs' streams read what torch's made


def _torch_gmm_wgrad(torch, d):
    """``torch._grouped_mm(x^T, dy, offs)`` -- what its backward runs for w -- if this torch
    has it and runs it here; else None, saying why."""
    if not hasattr(torch, "_grouped_mm"):
        return None
    try:
        torch._grouped_mm(d.tx.t(), d.tdy, d.toffs)
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run this case: n/a
        print(f"  torch._grouped_mm(x.t(), dy, offs): {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return None
    return lambda: torch._grouped_mm(d.tx.t(), d.tdy, d.toffs)


def _wgrad_row(torch, d, s, clock, tclock) -> list[str]:
    """Time one layer's weight-gradient contenders (their repeats alternating); its row."""
    experts, k, n, tokens = d.shape
    plan = kernels.GroupedMMWgrad(d.x, d.dy, d.offs, d.dw32).plan()
    plan16 = kernels.GroupedMMWgrad(d.x, d.dy, d.offs, d.dw16).plan()

    def loop():
        for g, (lo, hi) in enumerate(zip(d.starts, d.ends)):
            torch.matmul(d.tx[lo:hi].T, d.tdy[lo:hi], out=d.tdw16[g])

    cases = {
        "kernel f32": (lambda: plan.execute(d.x, d.dy, d.offs, d.dw32, stream=s), clock),
        "kernel f32 +=": (lambda: plan.execute(d.x, d.dy, d.offs, d.dw32, accumulate=True,
                                               stream=s), clock),
        "kernel bf16": (lambda: plan16.execute(d.x, d.dy, d.offs, d.dw16, stream=s), clock),
        "torch loop": (loop, tclock),
    }
    gmm = _torch_gmm_wgrad(torch, d)
    if gmm is not None:
        cases["torch gmm"] = (gmm, tclock)
    try:
        iters = _iters(cases["kernel f32"][0], s.sync)
        times = common.time_interleaved(list(cases.values()), iters=iters, repeats=5,
                                        warmup=2)
        # how far the kernel's float32 gradient is from torch's loop (bf16): a sanity check
        plan.execute(d.x, d.dy, d.offs, d.dw32, stream=s)
        s.sync()
        loop()
        torch.cuda.synchronize()
        num = den = 0.0
        for g in range(experts):          # a group at a time: dw may not fit twice
            ref = d.tdw16[g].float()
            num += float(((d.tdw32[g] - ref) ** 2).sum())
            den += float((ref ** 2).sum())
        diff = (num / den) ** 0.5 if den else 0.0
    finally:
        tile = plan.candidates[plan.choice]["name"]
        plan.close()
        plan16.close()
        s.sync()
    tf = _rates(cases, times, tokens, k, n)
    ref = tf.get("torch gmm")
    print(f"  wgrad E={experts} {k}x{n} T={tokens}: kernel {_fmt(tf['kernel f32'])} TFLOP/s "
          f"(f32), {_fmt(tf['kernel bf16'])} (bf16), torch gmm {_fmt(ref)}, torch loop "
          f"{_fmt(tf['torch loop'])}", file=sys.stderr)
    return [f"E={experts} {k}x{n} T={tokens}", tile,
            *(_fmt(tf.get(c)) for c in ("kernel f32", "kernel f32 +=", "kernel bf16",
                                        "torch gmm", "torch loop")),
            common.fmt_ratio(tf["kernel f32"], ref), common.fmt_ratio(tf["kernel bf16"], ref),
            common.fmt_ratio(tf["kernel bf16"], tf["torch loop"]), f"{diff:.1e}"]


def wgrad(torch, shapes):
    def row(i, shape, s, clock, tclock):
        try:
            return _wgrad_row(torch, _WgradLayer(torch, *shape, seed=300 + i), s, clock,
                              tclock)
        finally:
            torch.cuda.empty_cache()      # the next layer's gradients need the room

    rows = _on_streams(torch, shapes, row)
    return common.markdown_table(
        ["bf16 wgrad (skewed counts)", "kernel tiles", "kernel f32 TFLOP/s", "kernel f32 +=",
         "kernel bf16", "torch gmm (x^T, dy)", "torch.matmul loop", "f32/torch gmm",
         "bf16/torch gmm", "bf16/loop", "rel diff vs loop"], rows,
        right=[*range(2, 11)])


def _replays(run, write, vectors, sync, event) -> list[float]:
    """Milliseconds per replay for each count vector: ``write(v)`` then ``run()`` ``reps``
    times between two events, the median of 5 such loops."""
    out = []
    for v in vectors:
        write(v)
        sync()
        reps = _iters(run, sync)
        loops = []
        for _ in range(5):
            start, end = event(), event()
            start.record()
            for _ in range(reps):
                run()
            end.record()
            loops.append(end.elapsed(start) / reps)
        out.append(sorted(loops)[2])
    return out


def captured(torch, shapes):
    rows = []
    for i, (experts, k, n, tokens) in enumerate(shapes):
        d = _Layer(torch, experts, k, n, tokens, seed=100 + i)
        rng = np.random.default_rng(200 + i)
        vectors = [_counts(tokens, experts, rng), _counts(tokens // 2, experts, rng),
                   np.eye(1, experts, experts // 2, dtype=np.int64)[0] * tokens]
        s = cl.Stream()
        offs = cl.empty((experts,), np.int32, stream=s)
        offs.copy_(np.cumsum(vectors[0]).astype(np.int32), s)
        kernels.grouped_mm(d.x, d.w, offs, d.out, stream=s)   # plans, loads: not captured
        s.sync()
        with cl.graph.capture(s) as g:
            kernels.grouped_mm(d.x, d.w, offs, d.out, stream=s)
        exe = g.instantiate()

        class _Ev:
            def __init__(self):
                self.e = cl.Event(s.device)

            def record(self):
                self.e.record(s)

            def elapsed(self, start):
                self.e.sync()
                return start.e.elapsed_ms(self.e)

        def write(v):
            offs.copy_(np.cumsum(v).astype(np.int32), s)

        ours = _replays(lambda: exe.replay(s), write, vectors, s.sync, _Ev)
        direct = _replays(lambda: kernels.grouped_mm(d.x, d.w, offs, d.out, stream=s), write,
                          vectors, s.sync, _Ev)
        theirs = [None] * len(vectors)
        if hasattr(torch, "_grouped_mm"):
            try:
                tg = torch.cuda.CUDAGraph()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    torch._grouped_mm(d.tx, d.tw, d.toffs)        # warm-up, not captured
                torch.cuda.synchronize()
                with torch.cuda.graph(tg):
                    torch._grouped_mm(d.tx, d.tw, d.toffs)

                class _TEv:
                    def __init__(self):
                        self.e = torch.cuda.Event(enable_timing=True)

                    def record(self):
                        self.e.record()

                    def elapsed(self, start):
                        self.e.synchronize()
                        return start.e.elapsed_time(self.e)

                theirs = _replays(tg.replay, lambda v: d.toffs.copy_(torch.tensor(
                    np.cumsum(v), dtype=torch.int32)), vectors, torch.cuda.synchronize, _TEv)
            except Exception as exc:  # noqa: BLE001 - a peer that cannot be captured: n/a
                print(f"  torch._grouped_mm capture: {type(exc).__name__}: {exc}",
                      file=sys.stderr)
        for v, o, dct, t in zip(vectors, ours, direct, theirs):
            used = int(v.sum())
            rows.append([f"E={experts} {k}->{n} cap={tokens}", f"{used} tokens",
                         _fmt(o * 1e3), _fmt(dct * 1e3), _fmt(t * 1e3 if t else None),
                         _fmt(_tflops(used, k, n, o)),
                         common.fmt_ratio(t / o if t else None, 1.0)])
        exe.close()
        g.close()
        s.sync()
    return common.markdown_table(
        ["captured once", "this replay", "kernel replay µs", "kernel direct call µs",
         "torch gmm replay µs", "kernel TFLOP/s", "torch/ours time"], rows, right=range(2, 7))


#: (tokens, experts, k) of the routing rows.
ROUTING = ((8192, 64, 2), (16384, 8, 2), (16384, 128, 8), (65536, 64, 6))


def _graph_of(fn, s):
    """``fn`` (queued on ``s``) captured once; the executable graph, warmed up."""
    fn()
    s.sync()
    with cl.graph.capture(s) as g:
        fn()
    exe = g.instantiate()
    exe.replay(s)
    return g, exe


def routing(torch):
    rows = []
    s = cl.Stream()
    clock = common.cudalibs_clock(s)
    ts = torch.cuda.Stream()
    tclock = common.torch_clock(torch, ts)
    for i, (tokens, experts, k) in enumerate(ROUTING):
        gen = torch.Generator(device="cuda").manual_seed(i)
        tl = torch.randn(tokens, experts, device="cuda", dtype=torch.bfloat16, generator=gen)
        torch.cuda.synchronize()
        logits = cl.asarray(tl)
        w, ids = kernels.topk_softmax(logits, k, stream=s)
        r = kernels.moe_routing(ids, experts, stream=s)

        def ours():
            kernels.topk_softmax(logits, k, weights=w, ids=ids, stream=s)
            kernels.moe_routing(ids, experts, out=r, stream=s)

        def theirs():
            tw, tids = torch.topk(torch.softmax(tl.float(), dim=-1), k, dim=-1)
            flat = tids.flatten()
            order = torch.argsort(flat, stable=True)
            # bincount reads its maximum back to the host, which a graph cannot hold
            counts = torch.zeros(experts, dtype=flat.dtype, device=flat.device)
            offs = torch.cumsum(counts.scatter_add_(0, flat, torch.ones_like(flat)), 0)
            return tw, tids, order, offs

        g, exe = _graph_of(ours, s)
        with torch.cuda.stream(ts):
            want = theirs()
            ts.synchronize()
            tg = torch.cuda.CUDAGraph()
            with torch.cuda.graph(tg, stream=ts):
                theirs()
        s.sync()
        # Rows compared as sets: bf16 logits tie often, and a tie may be broken either way.
        same = np.mean((np.sort(ids.get(stream=s), axis=1)
                        == np.sort(want[1].cpu().numpy(), axis=1)).all(axis=1))
        fns = [(lambda: exe.replay(s), clock), (tg.replay, tclock)]
        with torch.cuda.stream(ts):
            times = common.time_interleaved(fns, iters=50, repeats=7, warmup=3)
        ours_us, theirs_us = (common.median_spread(t)[0] * 1e3 for t in times)
        rows.append([f"T={tokens} E={experts} k={k}", _fmt(ours_us), _fmt(theirs_us),
                     common.fmt_ratio(theirs_us / ours_us, 1.0), f"{same:.2%}"])
        exe.close()
        g.close()
    s.sync()
    return common.markdown_table(
        ["router (bf16 logits)", "ours: topk_softmax + moe_routing µs (graph replay)",
         "torch: softmax, topk, argsort, counts, cumsum µs (graph replay)", "torch/ours time",
         "rows with the same experts"], rows, right=range(1, 5))


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="the small layers only")
    ap.add_argument("--wgrad", action="store_true",
                    help="the weight-gradient rows only (grouped_mm_wgrad)")
    ap.add_argument("--forward", action="store_true",
                    help="the product only: the layers and the captured replays")
    ap.add_argument("--routing", action="store_true",
                    help="the routing only: top-k softmax and the sort by expert")
    args = ap.parse_args(argv)
    common.exit_if_no_gpu("benchmarks/grouped.py")
    torch_p = common.load_torch()
    if not torch_p.ok:
        # The layers' data and the peers are torch's: without it there is nothing to compare.
        print(f"benchmarks/grouped.py: needs PyTorch with a GPU: {torch_p.version}")
        return 2
    torch = torch_p.module
    dev = cl.Device(0)
    if tuple(dev.compute_capability) < (8, 0):
        print(f"benchmarks/grouped.py: needs compute capability 8.0 or newer, device 0 has "
              f"{dev.compute_capability}")
        return 2
    print(f"# Grouped GEMM benchmark: {dev.name} (sm_{dev.compute_capability[0]}"
          f"{dev.compute_capability[1]}), cuBLAS {'.'.join(map(str, cublas.version()))}, "
          f"torch {torch_p.version}, torch._grouped_mm "
          f"{'present' if hasattr(torch, '_grouped_mm') else 'absent'}\n")
    shapes = LAYERS[:2] if args.quick else LAYERS
    wshapes = WGRAD_LAYERS[:2] if args.quick else WGRAD_LAYERS
    sections = [
        ("One expert layer, bf16, skewed token counts", lambda: layers(torch, shapes)),
        ("Captured once, replayed with new device counts", lambda: captured(
            torch, shapes[:1] if args.quick else (shapes[1], shapes[2]))),
        ("Weight gradient, bf16, skewed token counts", lambda: wgrad(torch, wshapes)),
        ("Routing: top-k softmax and the sort by expert", lambda: routing(torch)),
    ]
    if args.wgrad:
        sections = sections[2:3]
    elif args.forward:
        sections = sections[:2]
    elif args.routing:
        sections = sections[3:]
    for title, run in sections:
        t0 = time.perf_counter()
        try:
            table = run()
        except Exception as exc:  # one broken section must not hide the others
            import traceback

            traceback.print_exc()
            table = f"error: {type(exc).__name__}: {exc}"
        print(f"## {title}  ({time.perf_counter() - t0:.0f} s)\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
