"""fp8 throughput of cudalibs beside PyTorch: cuBLASLt GEMMs in every scale mode.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/fp8.py            # on a Hopper GPU, a few minutes
    PYTHONPATH=. python3 benchmarks/fp8.py --quick    # 4096^3 only

What is measured
----------------
**fp8 GEMM**, ``e4m3 x e4m3 -> bfloat16``, M = N = K in {4096, 8192}: a
:class:`~cudalibs.cublas.Matmul` plan (the heuristic's first algorithm, as torch uses) per
scale mode -- per tensor, per row (cuBLASLt's outer vectors), 1x128 blocks on both operands,
and 1x128 with 128x128 blocks either way round -- executed with its scales on each call, fast
accumulation off and, for the modes that have it (per tensor, per row), on.  Beside each: the
same product through ``torch._scaled_mm`` where torch offers the mode (per tensor and per row,
its ``use_fast_accum`` matching), and the bfloat16 product of the same shape through
``cublas.matmul`` and ``torch.matmul`` as the baseline fp8 is measured against.  TFLOP/s =
2 M N K / time; "ours/torch" is the ratio of throughputs (above 1: cudalibs faster); "vs bf16"
is our fp8 over our bfloat16 throughput; "rel diff" is ``||ours - torch|| / ||torch||`` of the
two results (both round the same fp32 sums to bfloat16).  The block modes and the per-row mode
run on compute capability 9.0 only; elsewhere their rows say so.

Each library is timed on its own stream with its own CUDA events, warm-up calls first, then the
median of loops of back-to-back calls with the contenders' loops interleaved
(benchmarks/_common.py).  Inputs are random; the scales are ones in each mode's layout (the
time does not depend on their values).  Nothing here asserts a time.

The sections are the functions listed in ``SECTIONS``; another one (fp8 attention, say) is a
function of ``(torch, args)`` returning a Markdown table, added to that list.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.fp8
    from . import _common as common

import cudalibs as cl
from cudalibs import cublas

E4, BF16 = cl.dtypes.float8_e4m3fn, cl.dtypes.bfloat16
TENSOR, ROW = ("tensor", "tensor"), ("row", "row")

#: (label, scale modes of a and b, fast_accum, the torch mode beside it or None)
GEMM_ROWS = [("tensor", TENSOR, False, "tensor"), ("tensor", TENSOR, True, "tensor"),
             ("row", ROW, False, "row"), ("row", ROW, True, "row"),
             ("block128", ("block128", "block128"), False, None),
             ("block128 x block128x128", ("block128", "block128x128"), False, None),
             ("block128x128 x block128", ("block128x128", "block128"), False, None)]


def _fmt(x, digits=0):
    return f"{x:.{digits}f}" if isinstance(x, float) else common.NA


def _tflops(n, ms):
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12 if isinstance(ms, float) else None


def _iters(fn, sync, budget_ms=80.0) -> int:
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    ms = (time.perf_counter() - t0) * 1e3
    return int(max(3, min(200, budget_ms / max(ms, 1e-3))))


def _ones(spec, s):
    """A device array of ones in the layout ``spec`` (a plan's ScaleSpec) describes: one
    float32, a C-contiguous array, or the transpose of one."""
    if spec.shapes is None:
        return cl.to_device(np.ones(1, np.float32), stream=s)
    shape, strides = spec.shapes[-1], spec.strides[-1]
    if len(shape) == 1 or strides[-1] == 4:
        return cl.to_device(np.ones(shape, np.float32), stream=s)
    return cl.to_device(np.ones(shape[::-1], np.float32), stream=s).T


def _torch_scales(torch, mode, n):
    if mode == "tensor":
        return (torch.ones((), device="cuda"), torch.ones((), device="cuda"))
    return (torch.ones((n, 1), device="cuda"), torch.ones((1, n), device="cuda"))


def _time_pair(fn, s, tfn, torch, ts):
    """Median ms per call of ours (and of torch's, or None), the loops interleaved."""
    clock = common.cudalibs_clock(s)
    cases = [(fn, clock)]
    if tfn is not None:
        cases.append((tfn, common.torch_clock(torch, ts)))
        torch.cuda.set_stream(ts)
    try:
        times = common.time_interleaved(cases, iters=_iters(fn, s.sync), repeats=5, warmup=3)
    finally:
        if tfn is not None:
            torch.cuda.set_stream(torch.cuda.default_stream())
    medians = [common.median_spread(t)[0] for t in times]
    return medians[0], (medians[1] if tfn is not None else None)


def _bf16_baseline(torch, n, a_h, w_h, s, ts):
    """TFLOP/s of the bfloat16 product of the same shape: ours, torch's."""
    a = cl.to_device(a_h.astype(BF16), stream=s)
    w = cl.to_device(w_h.astype(BF16), stream=s)
    out = cl.empty((n, n), BF16, stream=s)
    fn = lambda: cublas.matmul(a, w.T, out=out, stream=s)  # noqa: E731
    tfn = None
    if torch:
        ta = torch.from_numpy(a_h).to("cuda", torch.bfloat16)
        tw = torch.from_numpy(w_h).to("cuda", torch.bfloat16)
        tfn = lambda: torch.matmul(ta, tw.t())  # noqa: E731
    ours, theirs = _time_pair(fn, s, tfn, torch, ts)
    return _tflops(n, ours), _tflops(n, theirs)


def gemm_section(torch, args) -> str:
    """The fp8 GEMM table (see the module docstring)."""
    dev = cl.Device(0)
    if dev.compute_capability < (8, 9):
        return f"n/a: fp8 needs compute capability 8.9 or newer (this GPU: {dev.arch})"
    sizes = (4096,) if args.quick else (4096, 8192)
    rows = []
    s = cl.Stream()
    ts = torch.cuda.Stream() if torch else None
    for n in sizes:
        rng = np.random.default_rng(n)
        a_h = rng.uniform(-1, 1, (n, n)).astype(np.float32)
        w_h = rng.uniform(-1, 1, (n, n)).astype(np.float32)       # b = w.T, column-major
        bf16_ours, bf16_torch = _bf16_baseline(torch, n, a_h, w_h, s, ts)
        rows.append([f"{n}", "bf16 baseline", "-", _fmt(bf16_ours), _fmt(bf16_torch),
                     common.fmt_ratio(bf16_ours, bf16_torch), "1.00x", common.NA])
        a = cl.to_device(a_h.astype(E4), stream=s)
        w = cl.to_device(w_h.astype(E4), stream=s)
        out = cl.empty((n, n), BF16, stream=s)
        ta = tw = None
        if torch:
            with torch.cuda.stream(ts):
                ta = torch.from_dlpack(a.view(np.uint8)).view(torch.float8_e4m3fn)
                tw = torch.from_dlpack(w.view(np.uint8)).view(torch.float8_e4m3fn)
        for label, modes, fast, tmode in GEMM_ROWS:
            cells = [f"{n}", label, "on" if fast else "off"]
            try:
                plan = cublas.Matmul(a, w.T, out=out, scale_mode=modes, fast_accum=fast)
                sa, sb = (_ones(spec, s) for spec in plan.scale_specs)
                fn = lambda: plan.execute(a, w.T, out=out, a_scale=sa, b_scale=sb,  # noqa
                                          stream=s)
                tfn = tout = None
                if torch and tmode:
                    tsa, tsb = _torch_scales(torch, tmode, n)
                    tfn = lambda: torch._scaled_mm(ta, tw.t(), scale_a=tsa,  # noqa: E731
                                                   scale_b=tsb, out_dtype=torch.bfloat16,
                                                   use_fast_accum=fast)
                    with torch.cuda.stream(ts):
                        tout = tfn()
                ours_ms, theirs_ms = _time_pair(fn, s, tfn, torch, ts)
                ours_tf, theirs_tf = _tflops(n, ours_ms), _tflops(n, theirs_ms)
                diff = common.NA
                if tout is not None:
                    fn()
                    ours_h = out.get(stream=s).astype(np.float32)
                    diff = f"{common.rel_diff(ours_h, tout.float().cpu().numpy()):.1e}"
                cells += [_fmt(ours_tf), _fmt(theirs_tf), common.fmt_ratio(ours_tf, theirs_tf),
                          common.fmt_ratio(ours_tf, bf16_ours), diff]
                plan.close()
            except ValueError as exc:       # a mode this GPU or library lacks: said, not run
                cells += [f"refused: {str(exc).split(';')[0][:60]}"] + [common.NA] * 4
            except Exception as exc:        # noqa: BLE001 - one broken row must not hide others
                cells += [f"error: {type(exc).__name__}: {str(exc)[:60]}"] + [common.NA] * 4
            rows.append(cells)
            print(f"  fp8 {n} {label} fast_accum={fast}: {cells[3]} TFLOP/s "
                  f"(torch {cells[4]})", file=sys.stderr)
        a = w = out = ta = tw = None
    s.sync()
    return common.markdown_table(["M=N=K", "scale mode (a x b)", "fast_accum",
                                  "cudalibs TFLOP/s", "torch._scaled_mm TFLOP/s",
                                  "ours/torch", "vs bf16", "rel diff"], rows,
                                 right=range(3, 8))


#: The benchmark's sections, in order: ``(title, function(torch, args) -> Markdown table)``.
#: Another section (fp8 attention through cuDNN, say) is one more entry here.
SECTIONS = [
    ("fp8 GEMM, e4m3 x e4m3 -> bfloat16", gemm_section),
]


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="4096^3 only, for a smoke run")
    args = ap.parse_args(argv)
    common.exit_if_no_gpu("benchmarks/fp8.py")
    torch_p = common.load_torch()
    torch = torch_p.module
    dev = cl.Device(0)
    print(f"# fp8 benchmark: {dev.name} (sm_{dev.compute_capability[0]}"
          f"{dev.compute_capability[1]}), cuBLASLt {'.'.join(map(str, cublas.lt_version()))}, "
          f"torch {torch_p.version}\n")
    for title, run in SECTIONS:
        t0 = time.perf_counter()
        try:
            table = run(torch, args)
        except Exception as exc:  # one broken section must not hide the others
            import traceback

            traceback.print_exc()
            table = f"error: {type(exc).__name__}: {exc}"
        print(f"## {title}  ({time.perf_counter() - t0:.0f} s)\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
