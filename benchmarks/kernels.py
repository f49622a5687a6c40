"""The matrix-product kernels of ptx/ beside the vendor libraries, in TFLOP/s.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/kernels.py

What is measured
----------------
Three tables, every case on device 0, each library on a stream of its own:

1. **Batched matmul, float32**: ``cudalibs.kernels.bmm`` (the shared-memory tiled kernel, one
   batch element per grid z) against ``torch.bmm`` and ``cupy.matmul`` (both cuBLAS batched
   SGEMM, TF32 off, i.e. true float32 arithmetic on both sides).
2. **Tiled vs naive matmul, float32**, square 1024 / 2048 / 4096: the textbook pair of
   ``cudalibs.kernels``, with ``torch.matmul`` (cuBLAS SGEMM, TF32 off) as the ceiling.
3. **WMMA GEMM, float16 in, float32 accumulation**, square 1024 / 2048 / 4096:
   ``cudalibs.kernels.wmma_gemm`` (float32 and float16 output) against ``torch.matmul`` on
   float16 tensors (cuBLAS HGEMM on tensor cores; its output is float16) and, when the
   cuBLAS binding of cudalibs exists, ``cudalibs.cublas.gemm`` on the same arrays.

The kernel library's kernels are teaching-grade: single-buffered shared-memory tiles, no
``cp.async``, TMA or wgmma.  cuBLAS uses all of those on an H100, so the ratios say how far a
straightforward kernel is from the vendor's, not a target.

How it is measured
------------------
``benchmarks/_common.time_calls``: warm-up calls, then timed loops of back-to-back calls
between two CUDA events of each library on the stream doing the work; the cell is the median
loop, as ``2 * B * M * N * K / time`` in TFLOP/s (1e12).  The number of calls per loop is set
from one trial call so that a loop lasts about 0.2 s.  Each case first checks cudalibs'
result against torch's (relative norm-wise error, printed on stderr) so that a fast wrong
kernel cannot go unnoticed.  A peer that is not installed shows ``n/a``; without a GPU the
script prints one line and exits with status 0.
"""

from __future__ import annotations

import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.kernels
    from . import _common as common

import cudalibs as cl
from cudalibs import kernels as K

NA = "n/a"
LOOP_SECONDS = 0.2
REPEATS = 5

BMM_CASES = ((256, 128, 128, 64), (64, 512, 512, 512))   # (batch, M, K, N)
SQUARE = (1024, 2048, 4096)


def _tflops(flops: float, ms) -> float | str:
    return flops / (ms * 1e-3) / 1e12 if isinstance(ms, float) else ms


def _time(fn, clock: common.Clock) -> float:
    """Median milliseconds per call, loops sized from one trial call."""
    trial = common.time_calls(fn, clock, iters=1, repeats=1, warmup=1)[0]
    iters = max(1, min(1000, int(LOOP_SECONDS * 1e3 / max(trial, 1e-3))))
    times = common.time_calls(fn, clock, iters=iters, repeats=REPEATS, warmup=min(iters, 3))
    return common.median_spread(times)[0]


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.2f}" if v < 100 else f"{v:.0f}"
    return NA if v is None else str(v)


def _rel_err(ours: np.ndarray, theirs: np.ndarray) -> float:
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


class Runner:
    """Holds the peers and one stream per library; each ``case`` returns ms or an error tag."""

    def __init__(self, torch_peer: common.Peer, cupy_peer: common.Peer):
        self.dev = cl.Device(0)
        self.stream = cl.Stream(self.dev)
        self.clock = common.cudalibs_clock(self.stream)
        self.torch = torch_peer.module
        self.cupy = cupy_peer.module
        if self.torch is not None:
            # True float32 for the float32 comparisons: cuBLAS would otherwise be allowed TF32.
            self.torch.backends.cuda.matmul.allow_tf32 = False
            self.torch_stream = self.torch.cuda.Stream()
            self.torch_clock = common.torch_clock(self.torch, self.torch_stream)
        if self.cupy is not None:
            self.cupy_stream = self.cupy.cuda.Stream(non_blocking=True)
            self.cupy_clock = common.cupy_clock(self.cupy, self.cupy_stream)
        self.failed = False

    def guarded(self, label: str, fn, *, optional: bool = False):
        """``fn()``, or "error" (with the traceback on stderr) when it raises; a failure of an
        ``optional`` peer does not fail the run."""
        try:
            return fn()
        except Exception:
            self.failed = self.failed or not optional
            print(f"{label} failed:\n{traceback.format_exc()}", file=sys.stderr)
            return "error"

    # -- cudalibs ---------------------------------------------------------------------------
    def ours(self, op, a_host, b_host, out_shape, result_dtype, **kw):
        s = self.stream
        a, b = cl.to_device(a_host, stream=s), cl.to_device(b_host, stream=s)
        out = cl.empty(out_shape, result_dtype, device=self.dev, stream=s)
        try:
            op(a, b, out=out, stream=s, **kw)
            s.sync()
            result = out.get(stream=s)
            ms = _time(lambda: op(a, b, out=out, stream=s, **kw), self.clock)
            return ms, result
        finally:
            s.sync()
            for x in (a, b, out):
                x.close()

    def cublas(self, a_host, b_host):
        """``cudalibs.cublas.gemm`` into a float16 output (what torch's HGEMM writes)."""
        try:
            from cudalibs.cublas import gemm
        except ImportError as exc:
            return f"n/a ({type(exc).__name__})", None
        return self.ours(lambda a, b, out, stream: gemm(a, b, out=out, stream=stream),
                         a_host, b_host, (a_host.shape[0], b_host.shape[1]), np.float16)

    # -- peers ------------------------------------------------------------------------------
    def torch_case(self, fn_name, a_host, b_host):
        torch = self.torch
        if torch is None:
            return NA, None
        with torch.cuda.stream(self.torch_stream):
            a = torch.from_numpy(a_host).cuda()
            b = torch.from_numpy(b_host).cuda()
            fn = getattr(torch, fn_name)
            out = fn(a, b)
            self.torch_stream.synchronize()
            result = out.float().cpu().numpy()
            ms = _time(lambda: fn(a, b, out=out), self.torch_clock)
        self.torch_stream.synchronize()
        return ms, result

    def cupy_case(self, a_host, b_host):
        cupy = self.cupy
        if cupy is None:
            return NA
        with self.cupy_stream:
            a, b = cupy.asarray(a_host), cupy.asarray(b_host)
            out = cupy.matmul(a, b)
            ms = _time(lambda: cupy.matmul(a, b, out=out), self.cupy_clock)
        self.cupy_stream.synchronize()
        return ms


def _check(label: str, ours, theirs) -> None:
    if isinstance(ours, np.ndarray) and isinstance(theirs, np.ndarray):
        print(f"  {label}: relative error vs torch {_rel_err(ours, theirs):.1e}", file=sys.stderr)


def bmm_table(r: Runner, rng) -> str:
    rows = []
    for batch, m, k, n in BMM_CASES:
        a = rng.uniform(-1, 1, (batch, m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (batch, k, n)).astype(np.float32)
        flops = 2.0 * batch * m * n * k
        label = f"bmm B={batch} M={m} K={k} N={n}"
        ours = r.guarded(label, lambda: r.ours(K.bmm, a, b, (batch, m, n), np.float32))
        torch = r.guarded(label + " torch", lambda: r.torch_case("bmm", a, b))
        cupy = r.guarded(label + " cupy", lambda: r.cupy_case(a, b))
        o_ms, o_res = ours if isinstance(ours, tuple) else (ours, None)
        t_ms, t_res = torch if isinstance(torch, tuple) else (torch, None)
        _check(label, o_res, t_res)
        o, t, c = _tflops(flops, o_ms), _tflops(flops, t_ms), _tflops(flops, cupy)
        rows.append([f"{batch}x{m}x{k}x{n}", _fmt(o), _fmt(t), _fmt(c), common.fmt_ratio(o, t),
                     common.fmt_ratio(o, c)])
    headers = ["B x M x K x N", "cudalibs bmm", "torch.bmm", "cupy.matmul", "ours/torch",
               "ours/cupy"]
    return ("### Batched matmul, float32 (TFLOP/s)\n\n"
            + common.markdown_table(headers, rows, right={1, 2, 3, 4, 5}))


def matmul_table(r: Runner, rng) -> str:
    rows = []
    for s in SQUARE:
        a = rng.uniform(-1, 1, (s, s)).astype(np.float32)
        b = rng.uniform(-1, 1, (s, s)).astype(np.float32)
        flops = 2.0 * s ** 3
        torch = r.guarded(f"sgemm {s} torch", lambda: r.torch_case("matmul", a, b))
        t_ms, t_res = torch if isinstance(torch, tuple) else (torch, None)
        cells = {}
        for name, fn in (("naive", K.matmul_naive), ("tiled", K.matmul_tiled)):
            res = r.guarded(f"{name} {s}", lambda: r.ours(fn, a, b, (s, s), np.float32))
            ms, out = res if isinstance(res, tuple) else (res, None)
            _check(f"matmul_{name} {s}", out, t_res)
            cells[name] = _tflops(flops, ms)
        t = _tflops(flops, t_ms)
        rows.append([str(s), _fmt(cells["naive"]), _fmt(cells["tiled"]), _fmt(t),
                     common.fmt_ratio(cells["tiled"], cells["naive"]),
                     common.fmt_ratio(cells["tiled"], t)])
    headers = ["M = N = K", "naive", "tiled", "torch (cuBLAS SGEMM)", "tiled/naive",
               "tiled/torch"]
    return ("### Tiled vs naive matmul, float32 (TFLOP/s)\n\n"
            + common.markdown_table(headers, rows, right={1, 2, 3, 4, 5}))


def wmma_table(r: Runner, rng) -> str:
    rows = []
    for s in SQUARE:
        a = rng.uniform(-1, 1, (s, s)).astype(np.float16)
        b = rng.uniform(-1, 1, (s, s)).astype(np.float16)
        flops = 2.0 * s ** 3
        torch = r.guarded(f"hgemm {s} torch", lambda: r.torch_case("matmul", a, b))
        t_ms, t_res = torch if isinstance(torch, tuple) else (torch, None)
        cells = {}
        for odt in (np.float32, np.float16):
            res = r.guarded(f"wmma {s} {np.dtype(odt).name}",
                            lambda: r.ours(K.wmma_gemm, a, b, (s, s), odt, out_dtype=odt))
            ms, out = res if isinstance(res, tuple) else (res, None)
            _check(f"wmma_gemm {s} -> {np.dtype(odt).name}", out, t_res)
            cells[odt] = _tflops(flops, ms)
        cub = r.guarded(f"cublas.gemm {s}", lambda: r.cublas(a, b), optional=True)
        c_ms, c_res = cub if isinstance(cub, tuple) else (cub, None)
        _check(f"cudalibs.cublas.gemm {s}", c_res, t_res)
        t, c = _tflops(flops, t_ms), _tflops(flops, c_ms)
        rows.append([str(s), _fmt(cells[np.float32]), _fmt(cells[np.float16]), _fmt(t),
                     _fmt(c), common.fmt_ratio(cells[np.float16], t),
                     common.fmt_ratio(cells[np.float16], c if isinstance(c, float) else None)])
    headers = ["M = N = K", "wmma -> f32", "wmma -> f16", "torch f16 (cuBLAS)",
               "cudalibs.cublas.gemm", "wmma f16/torch", "wmma f16/cublas"]
    return ("### WMMA GEMM, float16 in, float32 accumulation (TFLOP/s)\n\n"
            + common.markdown_table(headers, rows, right={1, 2, 3, 4, 5, 6}))


def _header(dev: cl.Device, peers) -> str:
    major, minor, _ = cl.driver_version()
    lines = [
        "## Kernel library: matrix products",
        "",
        f"- device: {dev.name} ({dev.arch}, {dev.total_memory / 2**30:.0f} GiB), "
        f"driver supports CUDA {major}.{minor}",
        f"- cudalibs {cl.__version__} (kernels from ptx/: PTX ISA 8.0 for sm_75, "
        f"JIT-compiled by the driver), numpy {np.__version__}, Python "
        f"{platform.python_version()}",
    ]
    lines += [f"- {p.name} {p.version}" for p in peers.values()]
    lines += [
        "- TFLOP/s = 2 B M N K / time / 1e12; median of timed loops between CUDA events of each "
        "library on its own stream; ratios > 1 mean cudalibs is faster.",
        "- float32 peers run with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False).",
    ]
    return "\n".join(lines)


def main(argv=None) -> int:
    common.arg_parser(__doc__).parse_args(argv)
    common.exit_if_no_gpu("benchmarks/kernels.py")
    t0 = time.perf_counter()
    peers = {"torch": common.load_torch(), "cupy": common.load_cupy()}
    r = Runner(peers["torch"], peers["cupy"])
    rng = np.random.default_rng(0)
    tables = [bmm_table(r, rng), matmul_table(r, rng), wmma_table(r, rng)]
    print(_header(r.dev, peers))
    for t in tables:
        print()
        print(t)
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
