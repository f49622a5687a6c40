"""GEMM throughput and call overhead of cudalibs beside PyTorch and CuPy.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/gemm.py            # on a GPU, about 2-3 minutes
    PYTHONPATH=. python3 benchmarks/gemm.py --quick    # fewer sizes, for a smoke run
    PYTHONPATH=. python3 benchmarks/gemm.py --fake     # no GPU: Python overhead of gemm()

What is measured
----------------
1. **Square GEMM** 1024/4096/8192 in bf16, fp16, fp32 and tf32: ``cublas.gemm(a, b)`` vs
   ``torch.matmul`` and ``cupy.matmul`` (each allocating its output). TF32 is
   ``compute="tf32"`` here and ``torch.backends.cuda.matmul.allow_tf32 = True`` for torch
   (False for the fp32 rows); CuPy decides TF32 from ``CUPY_TF32`` at import, so its tf32
   cells are ``n/a``. TFLOP/s = 2·M·N·K / time.
2. **Host cost** of a 64×64 fp32 call: wall time of 100 back-to-back calls without
   synchronising (the GPU keeps up), per call; the median of 30 rounds, the rounds of all
   contenders interleaved.  From the second call of a call shape on, cudalibs launches the
   kernels it recorded from the library call again with the new addresses (a relaunch, see
   :class:`cudalibs.Options`), on either route.  The ``backend=`` rows pin the route with
   ``cl.option_context(gemm_backend=...)`` around each round, outside the timed calls.
   ``replay=`` is accepted and ignored (there are no per-call graphs), so the ``replay=True``
   rows run the same path as the rows without it and say so.  The bare ctypes
   ``cublasGemmEx`` call on the same handle (with ``argtypes``, as a plain ctypes binding makes
   it) shows what the library call itself costs from Python; cudalibs' own call skips ctypes'
   argument conversions (``unchecked``).  The bare ``cublasLtMatmul`` row is the prepared call
   of the plan's cuBLASLt route (its :class:`~cudalibs.cublas.Matmul`): what a relaunch
   replaces.
3. **Strided-batched fp16**, 256 × (128×64 @ 64×128): ``cublas.gemm_strided_batched`` (new
   output, and into ``out``; ``replay=True`` rows as in 2.), an autotuned cuBLASLt plan, and
   the bare ctypes call, vs ``torch.bmm`` and ``cupy.matmul``.
4. **cuBLASLt matmul + bias + GELU** (bf16, one fused call through ``cublas.matmul``) vs
   torch ``x @ w`` → ``+ b`` → ``gelu(approximate="tanh")``.
5. **Autotuned vs heuristic** cuBLASLt plans (bf16, no epilogue) on transformer shapes,
   M ∈ {16, 128, 2048, 8192}, N = K ∈ {4096, 11008}, with torch.matmul for reference.

GPU times are CUDA-event times of back-to-back calls on each library's own stream, median
of the repeats (``benchmarks/_common.py``; for the square GEMMs the repeats of the contenders
alternate); inputs are random. Ratios are ours/theirs in
throughput (above 1: cudalibs faster), or theirs/ours in time for the host cost.

``--fake`` needs no GPU: it replaces the cuBLAS library and the driver's context call by a
C function that returns 0 at once, and reports what ``cublas.gemm`` itself costs in Python
per call (plan lookup, checks, argument conversion); output allocation and the stream's
workspace are faked too, so the pool allocation (about 1-2 µs on a GPU) is not included.
Recording a relaunch needs a GPU, so the fake runs with ``relaunch=False``: every call takes
the ``cublasGemmEx`` route to its (no-op) library call.
"""

from __future__ import annotations

import contextlib
import ctypes
import platform
import statistics
import sys
import time
import types
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.gemm
    from . import _common as common

import cudalibs as cl
from cudalibs import cublas

DTYPES = ("bf16", "fp16", "fp32", "tf32")


def _np_dtype(name):
    return {"bf16": cl.dtypes.bfloat16, "fp16": np.dtype(np.float16)}.get(
        name, np.dtype(np.float32))


def _iters_for(ms_estimate: float, budget_ms: float = 60.0) -> int:
    return int(max(2, min(200, budget_ms / max(ms_estimate, 1e-3))))


def _time(fn, clock, est_ms):
    times = common.time_calls(fn, clock, iters=_iters_for(est_ms), repeats=5, warmup=2)
    return common.median_spread(times)[0]


def _estimate(fn, sync) -> float:
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t0) * 1e3


def _tflops(m, n, k, ms, batch=1):
    return 2.0 * m * n * k * batch / (ms * 1e-3) / 1e12 if isinstance(ms, float) else None


def _fmt(x, digits=1):
    return f"{x:.{digits}f}" if isinstance(x, float) else common.NA


# -- 1. square GEMM --------------------------------------------------------------------------
def square(torch, cupy, sizes):
    rows = []
    s = cl.Stream()
    clock = common.cudalibs_clock(s)
    ts = torch.cuda.Stream() if torch else None
    cs = cupy.cuda.Stream(non_blocking=True) if cupy else None
    for n in sizes:
        rng = np.random.default_rng(n)
        a_h = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        b_h = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        for name in DTYPES:
            dt = _np_dtype(name)
            a = cl.to_device(a_h.astype(dt), stream=s)
            b = cl.to_device(b_h.astype(dt), stream=s)
            compute = "tf32" if name == "tf32" else None
            fn = lambda: cublas.gemm(a, b, compute=compute, stream=s)  # noqa: E731
            cases = [(fn, clock)]
            if torch:
                tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(name, torch.float32)
                torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
                ta = torch.from_numpy(a_h).to("cuda", tdt)
                tb = torch.from_numpy(b_h).to("cuda", tdt)
                cases.append((lambda: torch.matmul(ta, tb), common.torch_clock(torch, ts)))
                torch.cuda.set_stream(ts)
            with_cupy = cupy is not None and name in ("fp16", "fp32")  # no bf16; tf32: above
            if with_cupy:
                ca, cb = cupy.asarray(a_h.astype(dt)), cupy.asarray(b_h.astype(dt))
                cs.use()
                cases.append((lambda: cupy.matmul(ca, cb), common.cupy_clock(cupy, cs)))
            # The contenders' timed loops alternate, so clock and host drifts hit all alike.
            try:
                times = common.time_interleaved(cases, iters=_iters_for(_estimate(fn, s.sync)),
                                                repeats=5, warmup=2)
            finally:
                if torch:
                    torch.cuda.set_stream(torch.cuda.default_stream())
                    torch.backends.cuda.matmul.allow_tf32 = False
                if with_cupy:
                    cupy.cuda.Stream.null.use()
            medians = [common.median_spread(t)[0] for t in times]
            ours = medians.pop(0)
            theirs_t = medians.pop(0) if torch else None
            theirs_c = medians.pop(0) if with_cupy else None
            a = b = ta = tb = ca = cb = None
            ours_tf, t_tf, c_tf = (_tflops(n, n, n, x) for x in (ours, theirs_t, theirs_c))
            rows.append([f"{n}", name, _fmt(ours_tf), _fmt(t_tf), _fmt(c_tf),
                         common.fmt_ratio(ours_tf, t_tf), common.fmt_ratio(ours_tf, c_tf)])
            print(f"  square {n} {name}: {_fmt(ours_tf)} TFLOP/s (torch {_fmt(t_tf)})",
                  file=sys.stderr)
    s.sync()
    return common.markdown_table(
        ["n", "dtype", "cudalibs TFLOP/s", "torch TFLOP/s", "cupy TFLOP/s", "ours/torch",
         "ours/cupy"], rows, right=range(2, 7))


# -- 2. host cost ----------------------------------------------------------------------------
def _host_us(cases: dict, calls=100, rounds=30) -> dict:
    """``{label: (fn, sync[, scope])} -> {label: median µs per call}``.

    Wall time of ``calls`` back-to-back calls, synchronising between rounds; the rounds of the
    cases are interleaved, so a drift in the host's speed (large on shared machines) hits every
    case alike and the ratios stay fair.  ``scope()``, where given, is a context manager entered
    around each round (and the warm-up) but outside the timed calls: options such as the gemm
    backend then cost nothing inside the figure.
    """
    def parts(case):
        fn, sync, *rest = case
        return fn, sync, (rest[0] if rest else contextlib.nullcontext)

    for case in cases.values():
        fn, sync, scope = parts(case)
        with scope():
            for _ in range(20):
                fn()
        sync()
    per: dict = {k: [] for k in cases}
    for _ in range(rounds):
        for k, case in cases.items():
            fn, sync, scope = parts(case)
            with scope():
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                per[k].append((time.perf_counter() - t0) / calls * 1e6)
            sync()
    return {k: statistics.median(v) for k, v in per.items()}


def _bare_gemm(s, a, b, out, n):
    """The bare ctypes ``cublasGemmEx`` call (with argtypes) ``cublas.gemm(a, b, out)`` makes
    (fp32, n x n), on the same handle and stream."""
    from cudalibs.cublas import _lib as blas_lib, handle as handle_mod

    L = blas_lib.get()
    h = handle_mod.cublas_handle(s.device, s.handle)
    one, zero = ctypes.c_float(1), ctypes.c_float(0)
    r32, c32 = cl.dtypes.CUDA_R["R_32F"], cl.dtypes.COMPUTE["COMPUTE_32F"]
    pa, pb, po = a.ptr, b.ptr, out.ptr
    return lambda: L.cublasGemmEx(h, 0, 0, n, n, n, ctypes.addressof(one), pb, r32, n, pa, r32,
                                  n, ctypes.addressof(zero), po, r32, n, c32, -1)


def _bare_lt(s, a, b, out):
    """The prepared ``cublasLtMatmul`` call of ``gemm(a, b, out)``'s plan: its cuBLASLt route's
    :class:`~cudalibs.cublas.Matmul`, called with the arguments it prepared (what a relaunch
    replaces), or None when the plan has no cuBLASLt route."""
    import importlib

    from cudalibs.cublas import handle as handle_mod

    lt_mod = importlib.import_module("cudalibs.cublas.lt")
    p = next((e.plan for e in cl.plan_cache.entries("gemm")
              if e.key["a_shape"] == a.shape and e.key["out_shape"] == out.shape), None)
    mm = getattr(p, "lt", None)
    if not mm:
        return None
    dev = s.device
    ws = handle_mod.workspace(dev, s.raw_handle)
    la, lb, lc = (x._raw for x in mm._layouts)
    fn, desc, algo_ref = mm._fn, mm._desc._raw, ctypes.byref(mm._algo)
    alpha_p, beta_p, ws_bytes, lt_handle = mm._alpha_p, mm._beta_p, lt_mod._WS_BYTES, \
        handle_mod.lt_handle

    def call():
        # The per-call work of the plan's own call: the handle lookup and the pointers.
        cp = ctypes.c_void_p(out.ptr)
        return fn(lt_handle(dev), desc, alpha_p, ctypes.c_void_p(b.ptr), la,
                  ctypes.c_void_p(a.ptr), lb, beta_p, cp, lc, cp, lc, algo_ref, ctypes.c_void_p(ws),
                  ws_bytes, s.raw)
    return call


def host_cost(torch, cupy):
    rng = np.random.default_rng(0)
    a_h = rng.uniform(-1, 1, (64, 64)).astype(np.float32)
    s = cl.Stream()
    a, b = cl.to_device(a_h, stream=s), cl.to_device(a_h, stream=s)
    out = cl.empty((64, 64), np.float32, stream=s)

    def on(backend):
        return lambda: cl.option_context(gemm_backend=backend)

    same = " (same path as default)"   # replay= is accepted and ignored
    cases = {
        "cublas.gemm(a, b)": (lambda: cublas.gemm(a, b, stream=s), s.sync),
        # The same call pinned to each library, the option set around the round.
        "cublas.gemm(a, b), backend=lt (prepared cublasLtMatmul)": (
            lambda: cublas.gemm(a, b, stream=s), s.sync, on("lt")),
        "cublas.gemm(a, b), backend=cublas (cublasGemmEx)": (
            lambda: cublas.gemm(a, b, stream=s), s.sync, on("cublas")),
        "cublas.gemm(a, b, out)": (lambda: cublas.gemm(a, b, out, stream=s), s.sync),
        "cublas.gemm(a, b, replay=True)" + same: (
            lambda: cublas.gemm(a, b, stream=s, replay=True), s.sync),
        "cublas.gemm(a, b, out, replay=True)" + same: (
            lambda: cublas.gemm(a, b, out, stream=s, replay=True), s.sync),
        "cublas.matmul(a, b) (Lt, cached plan)": (lambda: cublas.matmul(a, b, stream=s),
                                                  s.sync),
    }
    cublas.gemm(a, b, out, stream=s)            # plans the problem (and its cuBLASLt route)
    cases["bare ctypes cublasGemmEx (with argtypes)"] = (_bare_gemm(s, a, b, out, 64), s.sync)
    bare_lt = _bare_lt(s, a, b, out)
    if bare_lt is not None:
        cases["bare cublasLtMatmul, prepared arguments"] = (bare_lt, s.sync)
    if torch:
        ts = torch.cuda.Stream()
        ta = torch.from_numpy(a_h).to("cuda")
        cases["torch"] = (lambda: torch.matmul(ta, ta), ts.synchronize)
        torch.cuda.set_stream(ts)
    if cupy:
        cs = cupy.cuda.Stream(non_blocking=True)
        with cs:
            ca = cupy.asarray(a_h)
        cs.use()
        cases["cupy"] = (lambda: cupy.matmul(ca, ca), cs.synchronize)
    res = _host_us(cases)
    if torch:
        torch.cuda.set_stream(torch.cuda.default_stream())
    if cupy:
        cupy.cuda.Stream.null.use()
    t, c = res.get("torch"), res.get("cupy")
    rows = [[k, _fmt(v, 2), _fmt(t, 2), _fmt(c, 2), common.fmt_ratio(t, v),
             common.fmt_ratio(c, v)] for k, v in res.items() if k not in ("torch", "cupy")]
    return common.markdown_table(["64x64 fp32 call", "cudalibs µs", "torch µs", "cupy µs",
                                  "torch/ours", "cupy/ours"], rows, right=range(1, 6)) + (
        "\n\n" + _relaunch_note(a, out))


def _relaunch_note(a, out) -> str:
    """Whether the 64x64 plans' calls relaunch: the figures above mean something else when
    the recordings were refused (then every call is the library call)."""
    parts = []
    for e in cl.plan_cache.entries("gemm"):
        if e.key["a_shape"] != a.shape or e.key["out_shape"] not in (None, out.shape):
            continue
        r = e.plan.relaunch_info()
        text = ", ".join(f"{r[k]} {k}" for k in ("recorded", "refused", "failed", "pending")
                         if r[k]) or "nothing recorded"
        why = "; ".join(f"{n}x {k}" for k, n in list(r["reasons"].items())[:2])
        call = "gemm(a, b)" if e.key["out_shape"] is None else "gemm(a, b, out)"
        parts.append(f"{call}: {text}" + (f" ({why})" if why else ""))
    return "relaunches of the 64x64 plans: " + ("; ".join(parts) or "no cached plan found")


# -- 3. strided batched ----------------------------------------------------------------------
def _bare_batched(s, a, b, out, B, M, N, K):
    """The bare ctypes call ``gemm_strided_batched(a, b, out)`` makes (fp16 in and out,
    fp32 compute), on the same handle and stream."""
    from cudalibs.cublas import _lib as blas_lib, handle as handle_mod

    L = blas_lib.get()
    h = handle_mod.cublas_handle(s.device, s.handle)
    one, zero = ctypes.c_float(1), ctypes.c_float(0)
    r16, c32 = cl.dtypes.CUDA_R["R_16F"], cl.dtypes.COMPUTE["COMPUTE_32F"]
    pa, pb, po = a.ptr, b.ptr, out.ptr
    return lambda: L.cublasGemmStridedBatchedEx(
        h, 0, 0, N, M, K, ctypes.addressof(one), pb, r16, N, K * N, pa, r16, K, M * K,
        ctypes.addressof(zero), po, r16, N, M * N, B, c32, -1)


def batched(torch, cupy):
    B, M, N, K = 256, 128, 128, 64
    rng = np.random.default_rng(1)
    a_h = rng.uniform(-1, 1, (B, M, K)).astype(np.float16)
    b_h = rng.uniform(-1, 1, (B, K, N)).astype(np.float16)
    s = cl.Stream()
    a, b = cl.to_device(a_h, stream=s), cl.to_device(b_h, stream=s)
    clock = common.cudalibs_clock(s)
    out = cl.empty((B, M, N), np.float16, stream=s)
    plan = cublas.Matmul(a, b, out=out)
    plan.autotune(stream=s)
    cases = [(lambda: cublas.gemm_strided_batched(a, b, stream=s), clock),
             (lambda: cublas.gemm_strided_batched(a, b, out, stream=s), clock),
             (lambda: cublas.gemm_strided_batched(a, b, stream=s, replay=True), clock),
             (lambda: cublas.gemm_strided_batched(a, b, out, stream=s, replay=True), clock),
             (lambda: plan.execute(a, b, out=out, stream=s), clock),
             (_bare_batched(s, a, b, out, B, M, N, K), clock)]
    if torch:
        ts = torch.cuda.Stream()
        ta, tb = torch.from_numpy(a_h).cuda(), torch.from_numpy(b_h).cuda()
        cases.append((lambda: torch.bmm(ta, tb), common.torch_clock(torch, ts)))
        torch.cuda.set_stream(ts)
    if cupy:
        cs = cupy.cuda.Stream(non_blocking=True)
        ca, cb = cupy.asarray(a_h), cupy.asarray(b_h)
        cs.use()
        cases.append((lambda: cupy.matmul(ca, cb), common.cupy_clock(cupy, cs)))
    try:    # interleaved: see square()
        times = common.time_interleaved(cases, iters=100, repeats=7, warmup=20)
    finally:
        if torch:
            torch.cuda.set_stream(torch.cuda.default_stream())
        if cupy:
            cupy.cuda.Stream.null.use()
    medians = [common.median_spread(x)[0] for x in times]
    ours, ours_out, ours_rep, ours_out_rep, ours_lt, ours_bare = medians[:6]
    t = medians[6] if torch else None
    c = medians[-1] if cupy else None
    tt, cc = (_tflops(M, N, K, x, B) if x else None for x in (t, c))
    rows = []
    for name, x in (("gemm_strided_batched(a, b)", ours),
                    ("gemm_strided_batched(a, b, out)", ours_out),
                    ("gemm_strided_batched(a, b, replay=True) (same path as default)",
                     ours_rep),
                    ("gemm_strided_batched(a, b, out, replay=True) (same path as default)",
                     ours_out_rep),
                    ("cuBLASLt Matmul plan, autotuned, out", ours_lt),
                    ("bare ctypes cublasGemmStridedBatchedEx, out (with argtypes)", ours_bare)):
        o = _tflops(M, N, K, x, B)
        rows.append([name, _fmt(x * 1e3), _fmt(t * 1e3 if t else None),
                     _fmt(c * 1e3 if c else None), common.fmt_ratio(o, tt),
                     common.fmt_ratio(o, cc)])
    plan.free()
    return common.markdown_table(
        ["fp16 batch 256 x (128x64 @ 64x128)", "cudalibs µs", "torch.bmm µs", "cupy µs",
         "ours/torch", "ours/cupy"], rows, right=range(1, 6))


# -- 4. fused epilogue -----------------------------------------------------------------------
def fused(torch, shapes):
    rows = []
    s = cl.Stream()
    bf16 = cl.dtypes.bfloat16
    for M, N, K in shapes:
        rng = np.random.default_rng(2)
        x_h = rng.uniform(-1, 1, (M, K)).astype(np.float32)
        w_h = rng.uniform(-1, 1, (K, N)).astype(np.float32) / np.sqrt(K)
        b_h = rng.uniform(-1, 1, (N,)).astype(np.float32)
        x, w, b = (cl.to_device(v.astype(bf16), stream=s) for v in (x_h, w_h, b_h))
        fn = lambda: cublas.matmul(x, w, bias=b, epilogue="bias_gelu", stream=s)  # noqa: E731
        ours = _time(fn, common.cudalibs_clock(s), _estimate(fn, s.sync))
        t = None
        if torch:
            ts = torch.cuda.Stream()
            F = torch.nn.functional
            with torch.cuda.stream(ts):
                tx, tw, tb = (torch.from_numpy(v).cuda().to(torch.bfloat16)
                              for v in (x_h, w_h, b_h))
                tfn = lambda: F.gelu(torch.matmul(tx, tw) + tb, approximate="tanh")  # noqa
                t = _time(tfn, common.torch_clock(torch, ts), _estimate(tfn, ts.synchronize))
        o, tt = _tflops(M, N, K, ours), _tflops(M, N, K, t)
        rows.append([f"{M}x{K} @ {K}x{N}", _fmt(ours * 1e3), _fmt(t * 1e3 if t else None),
                     common.fmt_ratio(o, tt)])
    return common.markdown_table(["bf16 matmul+bias+GELU", "cudalibs Lt µs",
                                  "torch mm→add→gelu µs", "ours/torch"], rows,
                                 right=range(1, 4))


# -- 5. autotune vs heuristic ----------------------------------------------------------------
def autotune(torch, Ms, NKs):
    rows = []
    s = cl.Stream()
    bf16 = cl.dtypes.bfloat16
    clock = common.cudalibs_clock(s)
    for nk in NKs:
        rng = np.random.default_rng(3)
        w_h = rng.uniform(-1, 1, (nk, nk)).astype(np.float32)
        w = cl.to_device(w_h.astype(bf16), stream=s)
        tw = torch.from_numpy(w_h).cuda().to(torch.bfloat16) if torch else None
        for M in Ms:
            x_h = rng.uniform(-1, 1, (M, nk)).astype(np.float32)
            x = cl.to_device(x_h.astype(bf16), stream=s)
            out = cl.empty((M, nk), bf16, stream=s)
            plan = cublas.Matmul(x, w, out=out)
            fn = lambda: plan.execute(x, w, out=out, stream=s)  # noqa: E731
            est = _estimate(fn, s.sync)
            heur = _time(fn, clock, est)
            plan.autotune(iterations=5, stream=s)
            chosen = plan.algorithm
            tuned = _time(fn, clock, est)
            t = None
            if torch:
                ts = torch.cuda.Stream()
                with torch.cuda.stream(ts):
                    tx = torch.from_numpy(x_h).cuda().to(torch.bfloat16)
                    tfn = lambda: torch.matmul(tx, tw)  # noqa: E731
                    t = _time(tfn, common.torch_clock(torch, ts), est)
                tx = None
            h_tf, a_tf, t_tf = (_tflops(M, nk, nk, v) for v in (heur, tuned, t))
            rows.append([f"{M}", f"{nk}", _fmt(h_tf), _fmt(a_tf), f"{chosen['index']}",
                         _fmt(t_tf), common.fmt_ratio(a_tf, h_tf), common.fmt_ratio(a_tf, t_tf)])
            plan.free()
            print(f"  autotune M={M} N=K={nk}: heuristic {_fmt(h_tf)}, tuned {_fmt(a_tf)}",
                  file=sys.stderr)
    return common.markdown_table(["M", "N=K", "heuristic TFLOP/s", "autotuned TFLOP/s",
                                  "chosen", "torch TFLOP/s", "tuned/heuristic", "tuned/torch"],
                                 rows, right=range(2, 8))


# -- --fake: Python overhead without a GPU ---------------------------------------------------
def fake_overhead(calls: int = 200_000) -> str:
    """Per-call Python cost of cublas.gemm with the C calls replaced by a no-op C function."""
    import importlib

    from cudalibs.cublas import _lib as blas_lib, handle as handle_mod
    from cudalibs.driver import _lib as drv_lib
    from cudalibs.runtime.handles import Handle
    from cudalibs.driver.array import DeviceArray
    from cudalibs.driver.device import Device

    gemm_mod = importlib.import_module("cudalibs.cublas.gemm")
    libc = ctypes.CDLL(None)

    def noop(argtypes):
        # abs(0) returns 0 at once; the argument conversion ctypes does for the real
        # prototype (which dominates a ctypes call) is kept by giving it the same argtypes.
        f = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(("abs", libc))
        return f

    table = {p.name: p for p in blas_lib.TABLE}
    fake_blas = type("FakeCublas", (), {})()
    fake_blas.cublasGemmEx = noop(table["cublasGemmEx"].argtypes)
    fake_blas.cublasGemmStridedBatchedEx = noop(table["cublasGemmStridedBatchedEx"].argtypes)
    unchecked = libc["abs"]                 # a fresh pointer without argtypes, as unchecked()
    unchecked.restype = ctypes.c_int
    fake_blas.unchecked = lambda name: unchecked
    fake_drv = type("FakeDriver", (), {})()
    fake_drv.cuCtxSetCurrent = noop([drv_lib.CUcontext])

    dev = object.__new__(Device)
    dev._ordinal = 0
    dev._ctx = drv_lib.CUcontext()          # NULL: abs(0) == 0
    h = Handle(blas_lib.cublasHandle_t(), dev, None)
    h.stream = 0                            # already bound to the legacy stream
    handle_mod._cublas_handles._local.handles = {0: h}
    dt = cl.dtypes.lookup(np.float32)

    def arr(ptr):
        return DeviceArray._view(ptr, (64, 64), (256, 4), dt, dev, None, None)

    a, b, out = arr(1 << 20), arr(1 << 21), arr(1 << 22)
    saved = (blas_lib.get, drv_lib.get, gemm_mod.empty)
    # The cublasGemmEx route looks up the stream's workspace (its address is part of a
    # recorded relaunch): a stand-in buffer at an aligned address, so nothing is allocated.
    ws_key = (0, 0)                         # (device ordinal, legacy stream handle)
    handle_mod._workspaces._buffers[ws_key] = types.SimpleNamespace(
        size=handle_mod.WORKSPACE_BYTES, ptr=1 << 24, device=dev)
    # The cuBLASLt route plans with the real library on first use: measure the cublasGemmEx
    # route, whose Python is the same up to the final call.  Recording a relaunch needs a GPU.
    blas_lib.get = lambda: fake_blas
    drv_lib.get = lambda: fake_drv
    gemm_mod.empty = lambda shape, dtype, device=None, stream=None: arr(1 << 23)
    try:
        with cl.option_context(gemm_backend="cublas", relaunch=False):
            results = {}
            for label, fn in (("gemm(a, b, out)", lambda: cublas.gemm(a, b, out)),
                              ("gemm(a, b)  [allocation faked]", lambda: cublas.gemm(a, b)),
                              ("gemm(a, b.T, out, alpha=0.5)",
                               lambda: cublas.gemm(a, b.T, out, alpha=0.5)),
                              ("bare ctypes cublasGemmEx call (argtypes)",
                               lambda: fake_blas.cublasGemmEx(
                                   h.raw, 0, 0, 64, 64, 64, 1, 2, 0, 64, 3, 0, 64, 4, 5, 0, 64,
                                   68, -1))):
                fn()
                best = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    for _ in range(calls // 5):
                        fn()
                    best.append((time.perf_counter() - t0) / (calls // 5) * 1e6)
                results[label] = min(best)
    finally:
        blas_lib.get, drv_lib.get, gemm_mod.empty = saved
        handle_mod._cublas_handles._local.handles = {}
        handle_mod._workspaces._buffers.pop(ws_key, None)
    rows = [[k, f"{v:.2f}"] for k, v in results.items()]
    return common.markdown_table(["64x64 fp32, C calls replaced by a no-op (relaunch off)",
                                  "µs per call"], rows, right=(1,))


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer and smaller cases")
    ap.add_argument("--fake", action="store_true", help="no GPU: Python overhead only")
    args = ap.parse_args(argv)
    if args.fake:
        print(f"# cudalibs gemm() Python overhead ({platform.python_version()}, "
              f"{platform.processor() or platform.machine()})\n")
        print(fake_overhead())
        return 0
    common.exit_if_no_gpu("benchmarks/gemm.py")
    torch_p, cupy_p = common.load_torch(), common.load_cupy()
    torch, cupy = torch_p.module, cupy_p.module
    dev = cl.Device(0)
    print(f"# GEMM benchmark: {dev.name} (sm_{dev.compute_capability[0]}"
          f"{dev.compute_capability[1]}), cuBLAS {'.'.join(map(str, cublas.version()))}, "
          f"torch {torch_p.version}, cupy {cupy_p.version}\n")
    sizes = (1024, 4096) if args.quick else (1024, 4096, 8192)
    sections = [
        ("Square GEMM", lambda: square(torch, cupy, sizes)),
        ("Host cost of a 64x64 fp32 call", lambda: host_cost(torch, cupy)),
        ("Strided-batched fp16", lambda: batched(torch, cupy)),
        ("cuBLASLt fused bias + GELU", lambda: fused(
            torch, [(2048, 4096, 4096)] if args.quick else [(2048, 4096, 4096),
                                                            (8192, 4096, 4096)])),
        ("cuBLASLt autotuned vs heuristic (bf16)", lambda: autotune(
            torch, (16, 2048) if args.quick else (16, 128, 2048, 8192),
            (4096,) if args.quick else (4096, 11008))),
    ]
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
