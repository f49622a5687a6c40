"""Scaled dot-product attention through cudalibs' cuDNN graph plans beside PyTorch's cuDNN and
flash backends.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/attention.py [--rows 0,4] [--quick] [--fp8]

What is measured
----------------
The rows of the attention table of the cuDNN issue, bfloat16, ``d = 128`` unless said:
b4 h32 s2048; the same causal; b1 h32 s8192 causal; b1 hq64 hkv8 s8192 causal (GQA);
b16 h16 s512 d64.  For each:

``fwd``   the training forward (writes the softmax statistics): ours is an autotuned
          :class:`~cudalibs.cudnn.attention.SdpaPlan` executed with ``out=``/``stats=`` given;
          torch is ``F.scaled_dot_product_attention`` on inputs that require grad, under
          ``torch.nn.attention.sdpa_kernel`` pinned to ``CUDNN_ATTENTION`` and to
          ``FLASH_ATTENTION`` in turn.
``bwd``   ours an autotuned :class:`~cudalibs.cudnn.attention.SdpaBackwardPlan`; torch
          ``torch.autograd.grad(o, (q, k, v), do)`` of the forward above (the backward only).
``1-shot`` the forward through the one-shot ``cudnn.attention.sdpa(..., out=o)`` (plan cache
          lookup + argument checks per call), to show what the per-call cost adds.

TFLOP/s: forward ``4 b h_q s_q s_kv d`` (halved when causal), backward 2.5 times that.  Each
library on its own stream with its own CUDA events, warm-up calls first, then the median of
loops of calls, the contenders' loops interleaved (benchmarks/_common.py).  Ratios are ours
over torch's fastest backend: above 1 means cudalibs is faster.  Nothing here asserts a time.

``--fp8`` measures instead, on the ``d = 128`` training rows, cudalibs' fp8 attention
(:class:`~cudalibs.cudnn.attention.SdpaFp8Plan` with ``training=True`` and
:class:`~cudalibs.cudnn.attention.SdpaFp8BackwardPlan`, float8_e4m3fn, every scale a device
scalar, autotuned) beside our own bfloat16 plans of the same problem and torch's fastest
bfloat16 backend: torch has no fp8 attention (``F.scaled_dot_product_attention`` refuses
float8 tensors), so its bf16 is the peer a user would otherwise run.  The same FLOP counts, so
the ratios are of speed.

``--serving`` measures attention for serving (benchmarks/_serving.py): decode (one query row,
GQA 32:4) against contiguous and paged caches of 4k to 128k keys at batch 1, 32 and 128, and
causal prefill of packed batches of mixed lengths, beside torch's fastest backend on the
contiguous, padded problem.

``--frontend [PATH]`` measures the training rows beside cuDNN's own Python frontend
(``nvidia-cudnn-frontend``; never a dependency: install it beside the run, e.g. ``pip install
--no-deps --target PATH``): the same cuDNN library, the frontend's fastest of all the plans its
heuristics rank, on the same inputs (benchmarks/_cudnn_fe.py).

``--window`` measures sliding-window causal attention (``causal=True, window=(W - 1, None)``:
each query sees its last ``W`` keys, Mistral's window) at long sequences, forward and
backward, beside torch's SDPA given the same window as a boolean ``attn_mask`` (its flash and
cuDNN backends take no mask, so it runs the memory-efficient backend).  TFLOP/s count the
keys each query sees, ``4 b h_q d (s W - W (W - 1) / 2)`` forward.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
    import _cudnn_fe
    import _serving
else:  # python -m benchmarks.attention
    from . import _common as common
    from . import _cudnn_fe
    from . import _serving

import cudalibs as cl
from cudalibs import cudnn, dtypes
from cudalibs.cudnn import attention as attn

#: (label, b, h_q, h_kv, s, d, causal)
ROWS = [("b4 h32 s2048", 4, 32, 32, 2048, 128, False),
        ("b4 h32 s2048 causal", 4, 32, 32, 2048, 128, True),
        ("b1 h32 s8192 causal", 1, 32, 32, 8192, 128, True),
        ("b1 hq64 hkv8 s8192 causal (GQA)", 1, 64, 8, 8192, 128, True),
        ("b16 h16 s512 d64", 16, 16, 16, 512, 64, False)]
#: (label, b, h_q, h_kv, s, d, window length W) of ``--window``
WINDOW_ROWS = [("b1 h32 s16384 window 4096", 1, 32, 32, 16384, 128, 4096),
               ("b2 hq32 hkv8 s8192 window 1024 (GQA)", 2, 32, 8, 8192, 128, 1024)]
ITERS, REPEATS, WARMUP = 10, 5, 2


def _tflops(flops, ms):
    return flops / (ms * 1e-3) / 1e12 if isinstance(ms, float) else None


def _fmt(v):
    return f"{v:.0f}" if isinstance(v, float) else common.NA


def _torch_cases(torch, ts, q, k, v, do, causal, gqa):
    """{backend: (fwd fn, bwd fn)} for torch's cuDNN and flash backends (those that run)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    F = torch.nn.functional
    tq, tk, tv = (torch.from_dlpack(a).detach().requires_grad_(True) for a in (q, k, v))
    tdo = torch.from_dlpack(do)
    out = {}
    for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("flash", SDPBackend.FLASH_ATTENTION)):
        def fwd(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal,
                                                      enable_gqa=gqa)
        try:
            with torch.cuda.stream(ts):
                o = fwd()
                torch.autograd.grad(o, (tq, tk, tv), tdo, retain_graph=True)
            ts.synchronize()
        except Exception as exc:  # noqa: BLE001 - a backend that refuses the problem
            out[name] = f"n/a ({type(exc).__name__})"
            continue

        def bwd(o=o):
            return torch.autograd.grad(o, (tq, tk, tv), tdo, retain_graph=True)
        out[name] = (fwd, bwd)
    return out


class _Training:
    """One bfloat16 training problem: inputs, outputs and gradients, and our autotuned forward
    and backward plans (the forward run once, so ``o`` and ``stats`` hold its results)."""

    def __init__(self, s, b, h_q, h_kv, sq, d, causal):
        bf16 = dtypes.bfloat16
        rng = np.random.default_rng(0)

        def mk(shape):
            return cl.to_device((rng.standard_normal(shape, np.float32) * 0.5).astype(bf16))

        self.q, self.k, self.v = mk((b, h_q, sq, d)), mk((b, h_kv, sq, d)), mk((b, h_kv, sq, d))
        self.do = mk((b, h_q, sq, d))
        self.o = cl.empty((b, h_q, sq, d), bf16)
        self.st = cl.empty((b, h_q, sq, 1), np.float32)
        self.dq, self.dk, self.dv = (cl.empty(a.shape, bf16) for a in (self.q, self.k, self.v))
        t0 = time.perf_counter()
        q, k, v, o, do = self.q, self.k, self.v, self.o, self.do
        self.fplan = attn.SdpaPlan(q, k, v, causal=causal, training=True)
        self.fplan.autotune(stream=s)
        self.bplan = attn.SdpaBackwardPlan(q, k, v, o, do, causal=causal)
        self.bplan.autotune(stream=s)
        self.fplan.execute(q, k, v, out=o, stats=self.st, stream=s)
        self.plan_s = time.perf_counter() - t0
        self.flops = 4.0 * b * h_q * sq * sq * d / (2 if causal else 1)

    def cases(self, s):
        """``(forward case, backward case)`` of our plans, timed on ``s``."""
        clock = common.cudalibs_clock(s)
        q, k, v, o, st, do = self.q, self.k, self.v, self.o, self.st, self.do
        return ((lambda: self.fplan.execute(q, k, v, out=o, stats=st, stream=s), clock),
                (lambda: self.bplan.execute(q, k, v, o, do, st, out=(self.dq, self.dk, self.dv),
                                            stream=s), clock))

    def engines(self) -> str:
        f, b = self.fplan, self.bplan
        return f"{f.candidates[f.choice]['name']} / {b.candidates[b.choice]['name']}"


def _time_both(torch, ts, fwd_cases, bwd_cases):
    """Median milliseconds of every forward and every backward case, interleaved, with torch's
    current stream set to ``ts`` meanwhile (when torch is there)."""
    if torch is not None:
        torch.cuda.set_stream(ts)
    try:
        return tuple([common.median_spread(t)[0] for t in common.time_interleaved(
            cases, iters=ITERS, repeats=REPEATS, warmup=WARMUP)] for cases in (fwd_cases,
                                                                             bwd_cases))
    finally:
        if torch is not None:
            torch.cuda.set_stream(torch.cuda.default_stream())


def row(torch, s, ts, label, b, h_q, h_kv, sq, d, causal):
    P = _Training(s, b, h_q, h_kv, sq, d, causal)
    q, k, v, o, do = P.q, P.k, P.v, P.o, P.do
    for p in (P.fplan, P.bplan):     # every candidate's time, for the record
        print(f"  {label} {p.kind}: " + ", ".join(f"{c['name']} {c.get('ms', float('nan')):.3f} ms"
                                               for c in p.candidates), file=sys.stderr)
    fcase, bcase = P.cases(s)
    fwd_cases = [fcase, (lambda: attn.sdpa(q, k, v, causal=causal, out=o, stream=s),
                         common.cudalibs_clock(s))]
    bwd_cases = [bcase]
    names = []
    if torch is not None:
        tclock = common.torch_clock(torch, ts)
        s.sync()
        for name, fns in _torch_cases(torch, ts, q, k, v, do, causal, h_q != h_kv).items():
            if isinstance(fns, str):
                names.append((name, fns))
                continue
            names.append((name, None))
            fwd_cases.append((fns[0], tclock))
            bwd_cases.append((fns[1], tclock))
    fwd, bwd = _time_both(torch, ts, fwd_cases, bwd_cases)
    flops = P.flops
    ours_f, oneshot_f = _tflops(flops, fwd[0]), _tflops(flops, fwd[1])
    ours_b = _tflops(2.5 * flops, bwd[0])
    theirs = {}
    i = 2
    for name, why in names:
        if why is None:
            theirs[name] = (_tflops(flops, fwd[i]), _tflops(2.5 * flops, bwd[i - 1]))
            i += 1
        else:
            theirs[name] = (why, why)
    best_f = max((t[0] for t in theirs.values() if isinstance(t[0], float)), default=None)
    best_b = max((t[1] for t in theirs.values() if isinstance(t[1], float)), default=None)
    cu = theirs.get("cudnn", (None, None))
    fl = theirs.get("flash", (None, None))
    return [label, _fmt(ours_f), _fmt(oneshot_f), _fmt(cu[0]) if isinstance(cu[0], float)
            else str(cu[0] or common.NA), _fmt(fl[0]) if isinstance(fl[0], float)
            else str(fl[0] or common.NA), common.fmt_ratio(ours_f, best_f), _fmt(ours_b),
            _fmt(cu[1]) if isinstance(cu[1], float) else str(cu[1] or common.NA),
            _fmt(fl[1]) if isinstance(fl[1], float) else str(fl[1] or common.NA),
            common.fmt_ratio(ours_b, best_b), P.engines(), f"{P.plan_s:.1f}"]


def _fp8_inputs(rng, shapes):
    """fp8 (e4m3) tensors of normal values, each with its descale (a power of two)."""
    e4 = dtypes.float8_e4m3fn
    out = []
    for shape in shapes:
        x = rng.standard_normal(shape, np.float32) * 0.5
        sc = 2.0 ** np.floor(np.log2(448.0 / float(np.abs(x).max()) / 2))
        out.append((cl.to_device(np.clip(x * sc, -448, 448).astype(e4)), 1.0 / sc))
    return out


def fp8_row(torch, s, ts, label, b, h_q, h_kv, sq, d, causal):
    """One row of the ``--fp8`` table: our fp8 and bf16 plans, torch's bf16 backends."""
    bf16, e4 = dtypes.bfloat16, dtypes.float8_e4m3fn
    rng = np.random.default_rng(0)
    (q8, dq_), (k8, dk_), (v8, dv_), (do8, ddo) = _fp8_inputs(
        rng, ((b, h_q, sq, d), (b, h_kv, sq, d), (b, h_kv, sq, d), (b, h_q, sq, d)))
    sc = {n: cl.to_device(np.array([x], np.float32)) for n, x in (
        ("descale_q", dq_), ("descale_k", dk_), ("descale_v", dv_), ("descale_s", 1 / 64),
        ("scale_s", 64.0), ("scale_o", 64.0), ("descale_o", 1 / 64), ("descale_do", ddo),
        ("descale_dp", 1 / 64), ("scale_dp", 64.0), ("scale_dq", 8.0), ("scale_dk", 8.0),
        ("scale_dv", 8.0))}
    fwd_sc = {n: sc[n] for n in ("descale_q", "descale_k", "descale_v", "descale_s",
                                 "scale_s", "scale_o")}
    bwd_sc = {n: x for n, x in sc.items() if n != "scale_o"}
    o8, st = cl.empty((b, h_q, sq, d), e4), cl.empty((b, h_q, sq, 1), np.float32)
    grads8 = tuple(cl.empty(x.shape, e4) for x in (q8, k8, v8))
    amax = {n: cl.empty((1,), np.float32) for n in ("amax_s", "amax_o", "amax_dq", "amax_dk",
                                                    "amax_dv", "amax_dp")}
    # bfloat16 twins of the same values, for our bf16 plans and torch
    q, k, v, do = (cl.to_device((x.get().astype(np.float32) * ds).astype(bf16))
                   for x, ds in ((q8, dq_), (k8, dk_), (v8, dv_), (do8, ddo)))
    o, stb = cl.empty(q.shape, bf16), cl.empty(st.shape, np.float32)
    grads = tuple(cl.empty(x.shape, bf16) for x in (q, k, v))
    t0 = time.perf_counter()
    f8 = attn.SdpaFp8Plan(q8, k8, v8, causal=causal, training=True)
    f8.autotune(stream=s)
    f8.execute(q8, k8, v8, out=o8, stats=st, **fwd_sc, stream=s)
    b8 = attn.SdpaFp8BackwardPlan(q8, k8, v8, o8, do8, causal=causal)
    b8.autotune(stream=s)
    fb = attn.SdpaPlan(q, k, v, causal=causal, training=True)
    fb.autotune(stream=s)
    fb.execute(q, k, v, out=o, stats=stb, stream=s)
    bb = attn.SdpaBackwardPlan(q, k, v, o, do, causal=causal)
    bb.autotune(stream=s)
    plan_s = time.perf_counter() - t0
    clock = common.cudalibs_clock(s)
    fwd_cases = [(lambda: f8.execute(q8, k8, v8, out=o8, stats=st, amax_s=amax["amax_s"],
                                     amax_o=amax["amax_o"], **fwd_sc, stream=s), clock),
                 (lambda: fb.execute(q, k, v, out=o, stats=stb, stream=s), clock)]
    bwd_cases = [(lambda: b8.execute(q8, k8, v8, o8, do8, st, out=grads8,
                                     **{n: amax[n] for n in ("amax_dq", "amax_dk", "amax_dv",
                                                             "amax_dp")},
                                     **bwd_sc, stream=s), clock),
                 (lambda: bb.execute(q, k, v, o, do, stb, out=grads, stream=s), clock)]
    names = []
    if torch is not None:
        tclock = common.torch_clock(torch, ts)
        s.sync()
        for name, fns in _torch_cases(torch, ts, q, k, v, do, causal, h_q != h_kv).items():
            if not isinstance(fns, str):
                names.append(name)
                fwd_cases.append((fns[0], tclock))
                bwd_cases.append((fns[1], tclock))
        torch.cuda.set_stream(ts)
    flops = 4.0 * b * h_q * sq * sq * d / (2 if causal else 1)
    try:
        fwd, bwd = ([_tflops(f, common.median_spread(t)[0]) for t in common.time_interleaved(
            cases, iters=ITERS, repeats=REPEATS, warmup=WARMUP)]
            for f, cases in ((flops, fwd_cases), (2.5 * flops, bwd_cases)))
    finally:
        if torch is not None:
            torch.cuda.set_stream(torch.cuda.default_stream())

    def best(xs):
        """torch's fastest backend: (TFLOP/s, name)."""
        got = [(x, n) for x, n in zip(xs, names) if isinstance(x, float)]
        return max(got) if got else (None, common.NA)

    (best_f, name_f), (best_b, name_b) = best(fwd[2:]), best(bwd[2:])
    return [label, _fmt(fwd[0]), _fmt(fwd[1]), _fmt(best_f), common.fmt_ratio(fwd[0], fwd[1]),
            common.fmt_ratio(fwd[0], best_f), _fmt(bwd[0]), _fmt(bwd[1]), _fmt(best_b),
            common.fmt_ratio(bwd[0], bwd[1]), common.fmt_ratio(bwd[0], best_b),
            f"{name_f} / {name_b}",
            f"{f8.candidates[f8.choice]['name']} / {b8.candidates[b8.choice]['name']}",
            f"{plan_s:.1f}"]


def host_overhead(torch, s, ts):
    """Microseconds per call on a cache hit, tiny problem (b1 h1 s64 d64, GPU time ~ the
    launch): cudalibs' plan and one-shot, the bare ``cudnnBackendExecute`` they wrap, torch."""
    rng = np.random.default_rng(3)
    bf16 = dtypes.bfloat16
    q = cl.to_device(rng.standard_normal((1, 1, 64, 64), np.float32).astype(bf16))
    o = cl.empty(q.shape, bf16)
    plan = attn.SdpaPlan(q, q, q)
    plan.execute(q, q, q, out=o, stream=s)
    n = 2000

    def per_call(fn, sync):
        for _ in range(50):
            fn()
        sync()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            sync()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        return best

    run = plan._exe
    h = cudnn.handle.handle_for(s.device, s.handle)
    ws_ptr, _ = cudnn.handle.workspace(s.device, s.handle, run.workspace)
    ptrs = run.pointers({"q": q.ptr, "k": q.ptr, "v": q.ptr, "o": o.ptr}, ws_ptr)
    g = run.gplan
    vp = g.pack(ptrs, ws_ptr)
    L = cudnn._lib.get()
    hr, pr, vr = h.raw, g._raw, vp._raw
    rows = [["cudalibs SdpaPlan.execute(out=o)",
             f"{per_call(lambda: plan.execute(q, q, q, out=o, stream=s), s.sync):.1f}"],
            ["cudalibs sdpa(out=o) (plan cache hit)",
             f"{per_call(lambda: attn.sdpa(q, q, q, out=o, stream=s), s.sync):.1f}"],
            [f"bare cudnnBackendExecute via ctypes ({run.kind} {g.name})",
             f"{per_call(lambda: L.cudnnBackendExecute(hr, pr, vr), s.sync):.1f}"]]
    if torch is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        tq = torch.from_dlpack(q)
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("flash", SDPBackend.FLASH_ATTENTION)):
            def call(backend=backend):
                with sdpa_kernel(backend):
                    torch.nn.functional.scaled_dot_product_attention(tq, tq, tq)
            try:
                with torch.cuda.stream(ts):
                    rows.append([f"torch F.scaled_dot_product_attention ({name})",
                                 f"{per_call(call, ts.synchronize):.1f}"])
            except Exception as exc:  # noqa: BLE001
                rows.append([f"torch ({name})", f"n/a ({type(exc).__name__})"])
    return rows


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__)
    ap.add_argument("--rows", default=None,
                    help="comma-separated indices of the rows to measure (None: all)")
    ap.add_argument("--quick", action="store_true", help="fewer timed loops")
    ap.add_argument("--fp8", action="store_true",
                    help="fp8 attention beside our bf16 and torch's (the d = 128 rows)")
    ap.add_argument("--serving", action="store_true",
                    help="decode against contiguous and paged caches, packed prefill")
    ap.add_argument("--window", action="store_true",
                    help="sliding-window causal attention beside torch with the same mask")
    ap.add_argument("--frontend", nargs="?", const="", default=None, metavar="PATH",
                    help="the training rows beside cuDNN's own Python frontend "
                         "(nvidia-cudnn-frontend, importable or installed under PATH)")
    args = ap.parse_args(argv)
    global ITERS, REPEATS
    if args.quick:
        ITERS, REPEATS = 5, 3
    common.exit_if_no_gpu("benchmarks/attention.py")
    torch_peer = common.load_torch()
    torch = torch_peer.module
    dev = cl.Device(0)
    s = cl.Stream(dev)
    ts = torch.cuda.Stream() if torch is not None else None
    if args.fp8:
        return main_fp8(torch, torch_peer, dev, s, ts, args.rows)
    if args.window:
        return main_window(torch, torch_peer, dev, s, ts, args.rows)
    if args.serving:
        return _serving.main_serving(common, torch, torch_peer, dev, s, ts, args.quick)
    if args.frontend is not None:
        return main_frontend(torch, torch_peer, dev, s, ts, args.rows, args.frontend or None)
    print("## Scaled dot-product attention (bfloat16)\n")
    print(f"- device: {dev.name} ({dev.arch}); cuDNN {'.'.join(map(str, cudnn.version()))}"
          f" via cudalibs {cl.__version__}; {torch_peer.name} {torch_peer.version}")
    print(f"- TFLOP/s, median of {REPEATS} loops of {ITERS} calls; ratios: ours over torch's "
          "fastest backend\n")
    t0 = time.perf_counter()
    rows = []
    picked = ROWS if args.rows is None else [ROWS[int(i)] for i in args.rows.split(",") if i]
    for spec in picked:
        try:
            rows.append(row(torch, s, ts, *spec))
        except Exception as exc:  # noqa: BLE001 - report the row and go on
            rows.append([spec[0], f"error: {type(exc).__name__}: {str(exc)[:120]}"] +
                        [""] * 10)
        # each row as it is done, so a run cut short still reports what it measured
        print(f"  {' | '.join(rows[-1])} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr,
              flush=True)
    print(common.markdown_table(
        ["problem", "fwd ours", "fwd 1-shot", "fwd torch cuDNN", "fwd torch flash",
         "fwd ours/best", "bwd ours", "bwd torch cuDNN", "bwd torch flash", "bwd ours/best",
         "our engines (fwd / bwd)", "plan+tune s"], rows, right={1, 2, 3, 4, 5, 6, 7, 8, 9, 11}))
    print()
    print(common.markdown_table(["host time per call (cache hit, b1 h1 s64 d64 forward)",
                                 "us"], host_overhead(torch, s, ts), right={1}))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


def fe_row(torch, fe, s, ts, label, b, h_q, h_kv, sq, d, causal):
    """One row of the ``--frontend`` table: our autotuned plans, the cuDNN frontend's fastest
    plan and torch's fastest backend, forward and backward, on the same arrays."""
    P = _Training(s, b, h_q, h_kv, sq, d, causal)
    s.sync()
    fcase, bcase = P.cases(s)
    fwd_cases, bwd_cases = [fcase], [bcase]
    tclock = common.torch_clock(torch, ts)
    # The frontend writes into copies, so our o/stats (read by our backward) stay ours.
    t = {n: torch.from_dlpack(getattr(P, n)).clone()
         for n in ("q", "k", "v", "o", "st", "do", "dq", "dk", "dv")}
    t["stats"] = t.pop("st")
    torch.cuda.synchronize()
    fe_engines = ""
    try:
        fcase = _cudnn_fe.sdpa_cases(fe, torch, ts, t, causal=causal, scale=d ** -0.5)
    except Exception as exc:  # noqa: BLE001 - report why and go on with the others
        fcase = {"why": f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"}
    if "why" not in fcase:
        fwd_cases.append((fcase["fwd"], tclock))
        bwd_cases.append((fcase["bwd"], tclock))
        fe_engines = fcase["engines"]
    for name, fns in _torch_cases(torch, ts, P.q, P.k, P.v, P.do, causal, h_q != h_kv).items():
        if not isinstance(fns, str):
            fwd_cases.append((fns[0], tclock))
            bwd_cases.append((fns[1], tclock))
    fwd, bwd = _time_both(torch, ts, fwd_cases, bwd_cases)
    tf = [_tflops(P.flops, ms) for ms in fwd]
    tb = [_tflops(2.5 * P.flops, ms) for ms in bwd]
    j = 1
    if "why" in fcase:
        fe_f = fe_b = None
    else:
        fe_f, fe_b, j = tf[1], tb[1], 2
    torch_f, torch_b = max(tf[j:], default=None), max(tb[j:], default=None)
    why = fcase.get("why", common.NA)
    return [label, _fmt(tf[0]), _fmt(fe_f) if fe_f else why,
            _fmt(torch_f) if torch_f else common.NA, common.fmt_ratio(tf[0], fe_f),
            common.fmt_ratio(tf[0], torch_f), _fmt(tb[0]), _fmt(fe_b) if fe_b else why,
            _fmt(torch_b) if torch_b else common.NA, common.fmt_ratio(tb[0], fe_b),
            common.fmt_ratio(tb[0], torch_b), P.engines(), fe_engines]


def main_frontend(torch, torch_peer, dev, s, ts, rows_arg, path) -> int:
    """The ``--frontend`` table: the training rows beside cuDNN's own Python frontend."""
    fe, fe_version = _cudnn_fe.load(path)
    print("## Scaled dot-product attention beside cuDNN's Python frontend (bfloat16)\n")
    print(f"- device: {dev.name} ({dev.arch}); cuDNN {'.'.join(map(str, cudnn.version()))}"
          f" via cudalibs {cl.__version__}; {fe_version}; {torch_peer.name} "
          f"{torch_peer.version}")
    print(f"- TFLOP/s, median of {REPEATS} loops of {ITERS} calls; the frontend's fastest of "
          "all its ranked plans; ratios: ours over the peer\n")
    if fe is None or torch is None:
        print("the frontend and torch are both needed for this table")
        return 0
    t0 = time.perf_counter()
    picked = ROWS if rows_arg is None else [ROWS[int(i)] for i in rows_arg.split(",") if i]
    rows = _measured(lambda spec: fe_row(torch, fe, s, ts, *spec), picked, 11, t0)
    print(common.markdown_table(
        ["problem", "fwd ours", "fwd FE", "fwd torch best", "fwd ours/FE", "fwd ours/torch",
         "bwd ours", "bwd FE", "bwd torch best", "bwd ours/FE", "bwd ours/torch",
         "our engines (fwd / bwd)", "FE plans (fwd / bwd)"], rows,
        right={1, 2, 3, 4, 5, 6, 7, 8, 9, 10}))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


def _measured(measure, specs, blanks, t0) -> list:
    """``[measure(spec) for spec in specs]``, a row that raises reported as its error (and
    ``blanks`` empty cells), each row printed to stderr as it is done, so that a run cut
    short still reports what it measured."""
    rows = []
    for spec in specs:
        try:
            rows.append(measure(spec))
        except Exception as exc:  # noqa: BLE001 - report the row and go on
            rows.append([spec[0], f"error: {type(exc).__name__}: {str(exc)[:160]}"]
                        + [""] * blanks)
        print(f"  {' | '.join(rows[-1])} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr,
              flush=True)
    return rows


def main_fp8(torch, torch_peer, dev, s, ts, rows_arg) -> int:
    """The ``--fp8`` table: fp8 attention at the training rows of head dim 128."""
    print("## Scaled dot-product attention in fp8 (float8_e4m3fn)\n")
    print(f"- device: {dev.name} ({dev.arch}); cuDNN {'.'.join(map(str, cudnn.version()))}"
          f" via cudalibs {cl.__version__}; {torch_peer.name} {torch_peer.version} (bf16: "
          "torch has no fp8 attention)")
    print(f"- TFLOP/s, median of {REPEATS} loops of {ITERS} calls; fp8/bf16: our fp8 over our "
          "bf16; fp8/torch: over torch's fastest bf16 backend\n")
    t0 = time.perf_counter()
    picked = [r for r in ROWS if r[5] == 128]
    if rows_arg is not None:
        picked = [picked[int(i)] for i in rows_arg.split(",") if i]
    rows = _measured(lambda spec: fp8_row(torch, s, ts, *spec), picked, 12, t0)
    print(common.markdown_table(
        ["problem", "fwd fp8", "fwd bf16", "fwd torch bf16", "fwd fp8/bf16", "fwd fp8/torch",
         "bwd fp8", "bwd bf16", "bwd torch bf16", "bwd fp8/bf16", "bwd fp8/torch",
         "torch backend (fwd / bwd)", "our fp8 engines (fwd / bwd)", "plan+tune s"], rows,
        right={1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13}))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


def window_row(torch, s, ts, label, b, h_q, h_kv, sq, d, w):
    """One row of ``--window``: our autotuned plans of a causal window of ``w`` keys and
    torch's memory-efficient SDPA with the same boolean mask, forward and backward."""
    bf16 = dtypes.bfloat16
    rng = np.random.default_rng(0)
    mk = lambda shape: cl.to_device((rng.standard_normal(shape, np.float32) * 0.5).astype(bf16))  # noqa: E731
    q, k, v, do = (mk(x) for x in ((b, h_q, sq, d), (b, h_kv, sq, d), (b, h_kv, sq, d),
                                   (b, h_q, sq, d)))
    o, st = cl.empty(q.shape, bf16), cl.empty((b, h_q, sq, 1), np.float32)
    grads = (cl.empty(q.shape, bf16), cl.empty(k.shape, bf16), cl.empty(v.shape, bf16))
    kw = dict(causal=True, window=(w - 1, None))
    fplan = attn.SdpaPlan(q, k, v, training=True, **kw)
    fplan.autotune(stream=s)
    fplan.execute(q, k, v, out=o, stats=st, stream=s)
    bplan = attn.SdpaBackwardPlan(q, k, v, o, do, **kw)
    bplan.autotune(stream=s)
    clock = common.cudalibs_clock(s)
    fwd_cases = [(lambda: fplan.execute(q, k, v, out=o, stats=st, stream=s), clock)]
    bwd_cases = [(lambda: bplan.execute(q, k, v, o, do, st, out=grads, stream=s), clock)]
    why = common.NA
    if torch is not None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        i = torch.arange(sq, device="cuda")
        mask = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - w)
        tq, tk, tv = (torch.from_dlpack(a).detach().requires_grad_(True) for a in (q, k, v))
        tdo = torch.from_dlpack(do)

        def tfwd():
            with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(
                    tq, tk, tv, attn_mask=mask, enable_gqa=h_q != h_kv)
        try:
            with torch.cuda.stream(ts):
                to = tfwd()
                torch.autograd.grad(to, (tq, tk, tv), tdo, retain_graph=True)
            ts.synchronize()
            tclock = common.torch_clock(torch, ts)
            fwd_cases.append((tfwd, tclock))
            bwd_cases.append((lambda: torch.autograd.grad(to, (tq, tk, tv), tdo,
                                                          retain_graph=True), tclock))
            why = None
        except Exception as exc:  # noqa: BLE001 - a backend that refuses the problem
            why = f"n/a ({type(exc).__name__})"
        s.sync()
        torch.cuda.set_stream(ts)
    try:
        fwd, bwd = ([common.median_spread(t)[0] for t in common.time_interleaved(
            cases, iters=ITERS, repeats=REPEATS, warmup=WARMUP)] for cases in (fwd_cases,
                                                                                bwd_cases))
    finally:
        if torch is not None:
            torch.cuda.set_stream(torch.cuda.default_stream())
    flops = 4.0 * b * h_q * d * (sq * w - w * (w - 1) / 2)
    ours_f, ours_b = _tflops(flops, fwd[0]), _tflops(2.5 * flops, bwd[0])
    th_f = _tflops(flops, fwd[1]) if why is None else None
    th_b = _tflops(2.5 * flops, bwd[1]) if why is None else None
    return [label, _fmt(ours_f), _fmt(th_f) if why is None else why,
            common.fmt_ratio(ours_f, th_f), _fmt(ours_b), _fmt(th_b) if why is None else why,
            common.fmt_ratio(ours_b, th_b),
            f"{fplan.candidates[fplan.choice]['name']} / {bplan.candidates[bplan.choice]['name']}"]


def main_window(torch, torch_peer, dev, s, ts, rows_arg) -> int:
    """The ``--window`` table: sliding-window causal attention."""
    print("## Sliding-window causal attention (bfloat16)\n")
    print(f"- device: {dev.name} ({dev.arch}); cuDNN {'.'.join(map(str, cudnn.version()))}"
          f" via cudalibs {cl.__version__}; {torch_peer.name} {torch_peer.version} (memory-"
          "efficient backend, boolean attn_mask)")
    print(f"- TFLOP/s of the keys each query sees, median of {REPEATS} loops of {ITERS} "
          "calls; ratios: ours over torch's\n")
    t0 = time.perf_counter()
    picked = WINDOW_ROWS if rows_arg is None else [WINDOW_ROWS[int(i)]
                                                   for i in rows_arg.split(",") if i]
    rows = _measured(lambda spec: window_row(torch, s, ts, *spec), picked, 6, t0)
    print(common.markdown_table(
        ["problem", "fwd ours", "fwd torch", "fwd ours/torch", "bwd ours", "bwd torch",
         "bwd ours/torch", "our engines (fwd / bwd)"], rows, right={1, 2, 3, 4, 5, 6}))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
