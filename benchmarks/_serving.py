"""The ``--serving`` tables of benchmarks/attention.py: single-token decode against contiguous
and paged caches, and prefill of packed (ragged) batches, beside torch's attention.

Decode: ``b`` sequences of one query each, grouped-query heads 32:4, ``d = 128``, bfloat16,
against ``s_kv`` cached keys.  Ours are the plans the one-shots make (the heuristics' first
engine, no autotuning) of each lowering -- the composite graph and cuDNN's SDPA operation --
and an autotuned plan ("tuned": every candidate of both lowerings timed, the fastest kept),
on a contiguous cache (no sequence lengths) and on a paged one (64-token pages shuffled
through a pool, every sequence full length).  torch is ``F.scaled_dot_product_attention(q,
k, v, enable_gqa=True)`` on the contiguous cache, the fastest of its default dispatch and its
flash, memory-efficient and cuDNN backends (torch has no paged attention: the contiguous
problem is what its users run).  Latency per call in microseconds; the bandwidth is the cache
bytes read (``2 b s_kv h_kv d`` elements) over our fastest time.

Prefill: causal attention over sequences of mixed lengths.  Ours packs them
(``ragged_batch``, no padding) and runs them padded (sequence lengths on ``[b, h, max, d]``);
torch runs them padded with ``is_causal=True`` (right padding: every valid query sees only
valid keys), its fastest backend.  TFLOP/s count the useful work, ``2 h_q d len^2`` per
sequence.

Ratios are torch's time over ours: above 1 means cudalibs is faster.  Nothing asserts a time.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import cudalibs as cl
from cudalibs import cudnn, dtypes
from cudalibs.cudnn import attention as attn
from cudalibs.errors import CudaLibsError

__all__ = ["main_serving", "DECODE_ROWS", "PREFILL_ROWS"]

#: (b, s_kv) of the decode rows
DECODE_ROWS = [(1, 4096), (1, 32768), (1, 131072), (32, 4096), (32, 16384), (128, 4096),
               (128, 8192)]
#: (label, b, shortest, longest) of the prefill rows: lengths drawn uniformly between
PREFILL_ROWS = [("b8 lengths 128..4096", 8, 128, 4096), ("b32 lengths 64..1024", 32, 64, 1024)]
H_Q, H_KV, D, PAGE = 32, 4, 128, 64
BF16 = dtypes.bfloat16
NA = "n/a"


def _random(torch, shape, rng):
    """A bfloat16 device array of random values (made on the device by torch when it is
    there: gigabytes of caches from the host would take longer than the measurements)."""
    if torch is not None:
        g = torch.Generator(device="cuda").manual_seed(int(rng.integers(2**31)))
        t = torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g) * 0.5
        return cl.asarray(t)
    return cl.empty(shape, BF16).fill(0.25)


def _plan(make, stream=None, tune=False):
    """``(plan, engine name)`` of a plan made and planned by ``make`` (with ``tune``, every
    candidate timed on ``stream`` and the fastest chosen, nothing kept on disk), or ``(None,
    why)``."""
    try:
        plan = make().plan()
        if tune:
            plan.autotune(stream=stream, store=False)
    except (CudaLibsError, ValueError) as exc:
        return None, f"{NA} ({str(exc).splitlines()[0][:60]})"
    return plan, plan.candidates[plan.choice]["name"]


def _torch_fns(torch, ts, call):
    """``{name: fn}`` of torch's default dispatch and each backend that runs ``call``."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {}
    for name, backend in (("default", None), ("flash", SDPBackend.FLASH_ATTENTION),
                          ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                          ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        def fn(backend=backend):
            if backend is None:
                return call()
            with sdpa_kernel(backend):
                return call()
        try:
            with torch.cuda.stream(ts):
                fn()
            ts.synchronize()
        except Exception:  # noqa: BLE001 - a backend that refuses the problem
            continue
        out[name] = fn
    return out


def _time(common, torch, ts, ours, torch_call, timing):
    """Median milliseconds per call of ``ours`` (callables on our stream, with its clock) and
    of each torch backend that runs ``torch_call``, their loops interleaved: ``(our times,
    {backend: time})``."""
    cases = list(ours)
    names = []
    if torch is not None:
        tclock = common.torch_clock(torch, ts)
        for name, fn in _torch_fns(torch, ts, torch_call).items():
            names.append(name)
            cases.append((fn, tclock))
        torch.cuda.set_stream(ts)
    iters, repeats, warmup = timing
    try:
        ms = [common.median_spread(t)[0] for t in common.time_interleaved(
            cases, iters=iters, repeats=repeats, warmup=warmup)]
    finally:
        if torch is not None:
            torch.cuda.set_stream(torch.cuda.default_stream())
    return ms[:len(ours)], dict(zip(names, ms[len(ours):]))


def _us(ms):
    return f"{ms * 1e3:.1f}" if isinstance(ms, float) else str(ms)


def decode_row(common, torch, s, ts, b, s_kv, timing):
    rng = np.random.default_rng(b * 7 + s_kv)
    q = _random(torch, (b, H_Q, 1, D), rng)
    k, v = (_random(torch, (b, H_KV, s_kv, D), rng) for _ in range(2))
    per = s_kv // PAGE
    pool_k, pool_v = (_random(torch, (b * per, H_KV, PAGE, D), rng) for _ in range(2))
    table = cl.to_device(rng.permutation(b * per).reshape(b, per).astype(np.int32))
    ones = cl.to_device(np.ones(b, np.int32))
    full = cl.to_device(np.full(b, s_kv, np.int32))
    o = cl.empty(q.shape, BF16)
    if torch is not None:
        torch.cuda.synchronize()
    clock = common.cudalibs_clock(s)
    ours = []           # (label, plan or None, engine or why, fn)
    kw = dict(page_table_k=table, seq_lens_q=ones, seq_lens_kv=full)
    # each lowering's heuristic engine, then every candidate of both lowerings timed
    for graphs in ("composite", "unified", None):
        tag = graphs or "tuned"
        plan, name = _plan(lambda g=graphs: attn.SdpaPlan(q, k, v, graphs=g and (g,),
                                                          max_candidates=g and 1), s, not graphs)
        ours.append((f"contiguous {tag}", plan, name,
                     None if plan is None else
                     (lambda p=plan: p.execute(q, k, v, out=o, stream=s))))
        plan, name = _plan(lambda g=graphs: attn.SdpaPlan(q, pool_k, pool_v, graphs=g and (g,),
                                                          max_candidates=g and 1, **kw),
                           s, not graphs)
        ours.append((f"paged {tag}", plan, name,
                     None if plan is None else
                     (lambda p=plan: p.execute(q, pool_k, pool_v, out=o, stream=s, **kw))))
    cases = [(fn, clock) for _, _, _, fn in ours if fn is not None]
    call = None
    if torch is not None:
        tq, tk, tv = (torch.from_dlpack(a) for a in (q, k, v))
        call = lambda: torch.nn.functional.scaled_dot_product_attention(   # noqa: E731
            tq, tk, tv, enable_gqa=True)
    ms, theirs = _time(common, torch, ts, cases, call, timing)
    times, i = {}, 0
    for label, plan, name, fn in ours:
        if fn is None:
            times[label] = name
        else:
            times[label] = ms[i]
            i += 1
        print(f"  decode b{b} skv{s_kv} {label}: {name}", file=sys.stderr)
    best_t = min(theirs.items(), key=lambda x: x[1]) if theirs else (NA, None)
    contig = [times[x] for x in ("contiguous composite", "contiguous unified",
                                 "contiguous tuned") if isinstance(times[x], float)]
    paged = [times[x] for x in ("paged composite", "paged unified", "paged tuned")
             if isinstance(times[x], float)]
    best_c, best_p = min(contig, default=None), min(paged, default=None)
    kv_bytes = 2 * b * s_kv * H_KV * D * 2
    return [f"b{b} skv{s_kv // 1024}k", _us(times["contiguous composite"]),
            _us(times["contiguous unified"]), _us(times["contiguous tuned"]),
            _us(times["paged composite"]), _us(times["paged unified"]),
            _us(times["paged tuned"]),
            f"{_us(best_t[1])} ({best_t[0]})" if best_t[1] else NA,
            common.fmt_ratio(best_t[1], best_c) if best_t[1] and best_c else NA,
            common.fmt_ratio(best_t[1], best_p) if best_t[1] and best_p else NA,
            f"{kv_bytes / (best_c * 1e-3) / 1e9:.0f}" if best_c else NA]


def prefill_row(common, torch, s, ts, label, b, lo, hi, timing):
    rng = np.random.default_rng(b + hi)
    lens = [int(x) for x in rng.integers(lo, hi + 1, b)]
    total, longest = sum(lens), max(lens)
    q = _random(torch, (total, H_Q, D), rng)
    k, v = (_random(torch, (total, H_KV, D), rng) for _ in range(2))
    qp = _random(torch, (b, H_Q, longest, D), rng)
    kp, vp = (_random(torch, (b, H_KV, longest, D), rng) for _ in range(2))
    dev_lens = cl.to_device(np.array(lens, np.int32))
    o, op = cl.empty(q.shape, BF16), cl.empty(qp.shape, BF16)
    # one bound for every batch a server would run: a plan made once
    r = attn.ragged_batch(lens, lens, q=q, k=k, max_seq_len_q=hi, max_seq_len_kv=hi)
    if torch is not None:
        torch.cuda.synchronize()
    clock = common.cudalibs_clock(s)
    kw = dict(seq_lens_q=dev_lens, seq_lens_kv=dev_lens)
    packed, pname = _plan(lambda: attn.SdpaPlan(q, k, v, ragged=r, causal=True,
                                                max_candidates=1, **kw))
    padded, dname = _plan(lambda: attn.SdpaPlan(qp, kp, vp, causal=True, max_candidates=1,
                                                **kw))
    cases, names = [], []
    if packed is not None:
        cases.append((lambda: packed.execute(q, k, v, out=o, ragged=r, stream=s, **kw), clock))
        names.append("packed")
    if padded is not None:
        cases.append((lambda: padded.execute(qp, kp, vp, out=op, stream=s, **kw), clock))
        names.append("padded")
    print(f"  prefill {label}: packed {pname}; padded {dname}", file=sys.stderr)
    call = None
    if torch is not None:
        tq, tk, tv = (torch.from_dlpack(a) for a in (qp, kp, vp))
        call = lambda: torch.nn.functional.scaled_dot_product_attention(   # noqa: E731
            tq, tk, tv, is_causal=True, enable_gqa=True)
    ms, theirs = _time(common, torch, ts, cases, call, timing)
    flops = sum(2.0 * H_Q * D * n * n for n in lens)
    tf = {n: flops / (t * 1e-3) / 1e12 for n, t in zip(names, ms)}
    best_t = min(theirs.items(), key=lambda x: x[1]) if theirs else (NA, None)
    mine = dict(zip(names, ms))
    return [label, f"{total}", f"{tf['packed']:.0f}" if "packed" in tf else pname,
            f"{tf['padded']:.0f}" if "padded" in tf else dname,
            f"{flops / (best_t[1] * 1e-3) / 1e12:.0f} ({best_t[0]})" if best_t[1] else NA,
            common.fmt_ratio(best_t[1], mine["packed"]) if best_t[1] and "packed" in mine
            else NA,
            common.fmt_ratio(mine["padded"], mine["packed"]) if len(mine) == 2 else NA]


def _rows(t0, width, work) -> list:
    """The rows of ``work`` (``(label, make row)`` pairs), a failing one reported in its place
    and the rest measured; each printed as it is done, so a run cut short still reports."""
    rows = []
    for label, make in work:
        try:
            rows.append(make())
        except Exception as exc:  # noqa: BLE001 - report the row and go on
            rows.append([label, f"error: {type(exc).__name__}: {str(exc)[:120]}"]
                        + [""] * (width - 2))
        print(f"  {' | '.join(rows[-1])} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr,
              flush=True)
    return rows


def main_serving(common, torch, torch_peer, dev, s, ts, quick=False) -> int:
    """Print the ``--serving`` tables (see the module docstring)."""
    timing = (10, 3, 2) if quick else (20, 5, 3)
    print("## Attention for serving (bfloat16, GQA 32:4, d 128)\n")
    print(f"- device: {dev.name} ({dev.arch}); cuDNN {'.'.join(map(str, cudnn.version()))}"
          f" via cudalibs {cl.__version__}; {torch_peer.name} {torch_peer.version}")
    print(f"- median of {timing[1]} loops of {timing[0]} calls; our plans' heuristic engines "
          "and autotuned plans; ratios: torch's time over ours (above 1: cudalibs faster)\n")
    t0 = time.perf_counter()
    rows = _rows(t0, 11, [(f"b{b} skv{s_kv // 1024}k",
                           lambda b=b, s_kv=s_kv: decode_row(common, torch, s, ts, b, s_kv,
                                                             timing))
                          for b, s_kv in DECODE_ROWS])
    print("### Decode (s_q = 1), latency in us\n")
    print(common.markdown_table(
        ["problem", "contiguous composite", "contiguous unified", "contiguous tuned",
         "paged composite", "paged unified", "paged tuned", "torch best (backend)",
         "torch/ours contiguous", "torch/ours paged", "cache GB/s (ours)"], rows,
        right=set(range(1, 11))))
    rows = _rows(t0, 7, [(spec[0], lambda spec=spec: prefill_row(common, torch, s, ts, *spec,
                                                                 timing))
                         for spec in PREFILL_ROWS])
    print("\n### Prefill of mixed lengths, causal, TFLOP/s of the useful work\n")
    print(common.markdown_table(
        ["problem", "tokens", "ours packed", "ours padded", "torch padded (backend)",
         "torch/ours packed", "padded/packed (ours)"], rows, right={1, 2, 3, 4, 5, 6}))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0
