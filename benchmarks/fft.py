"""cuFFT through cudalibs beside torch.fft and cupy.fft: device time and host time per call.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/fft.py [--tables 1d,2d,3d] [--quick]

What is measured
----------------
float32 data, every case on device 0, each library on a stream of its own:

1. **1-D, batched**: C2C (``fft`` of complex64) and R2C (``rfft`` of float32) transforms of
   2^10 to 2^24 points, batched so that every case holds 2^24 points in all (16384
   transforms of 2^10 ... one of 2^24).
2. **2-D**: C2C ``fft2`` and R2C ``rfft2`` of 256², 512², 1024², 2048².
3. **3-D**: C2C ``fftn`` and R2C ``rfftn`` of 64³, 128³, 256³, 512³.

cudalibs calls its one-shot (``cudalibs.cufft.fft`` ...) with ``out=`` given, after a warm-up
call planned it (every timed call is a cache hit); torch calls ``torch.fft.*`` with ``out=``;
CuPy calls ``cupy.fft.*`` (its plan cache on, as by default; CuPy has no ``out=``, so it
allocates each result from its pool).  Device time: warm-up calls, then timed loops of
back-to-back calls between two CUDA events of each library on the stream doing the work,
the three libraries' loops interleaved (``benchmarks/_common.time_interleaved``); the cell is
the median loop's time per call, in milliseconds.  Ratios are the peer's time over ours:
above 1 means cudalibs is faster.  Each case first compares cudalibs' result with torch's
(the relative norm-wise difference is printed on stderr), so a fast wrong result cannot pass
unnoticed; nothing here asserts a time.

A last table gives the **host time of a cached-plan call** (a 256-point C2C transform, whose
GPU time is about a kernel launch): microseconds per call over a loop of calls, for the
one-shot, a held ``FFTPlan.execute``, torch and CuPy.  A peer that is not installed shows
``n/a``.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.fft
    from . import _common as common

import cudalibs as cl
from cudalibs import cufft

NA = "n/a"
REPEATS, WARMUP, LOOP_MS = 5, 3, 100.0
TOTAL_1D = 1 << 24
TABLES = {
    "1d": [(("fft", "rfft"), (TOTAL_1D >> k, 1 << k)) for k in (10, 12, 14, 16, 18, 20, 22, 24)],
    "2d": [(("fft2", "rfft2"), (n, n)) for n in (256, 512, 1024, 2048)],
    "3d": [(("fftn", "rfftn"), (n, n, n)) for n in (64, 128, 256, 512)],
}


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    return NA if v is None else str(v)


def _ratio(ours, theirs) -> str:
    # peer time / our time: above 1 means ours is faster
    return common.fmt_ratio(theirs, ours) if isinstance(ours, float) else NA


class Runner:
    """The lanes (one stream and clock per library) and the failures so far; each case returns
    per-library milliseconds."""

    def __init__(self, torch_peer: common.Peer, cupy_peer: common.Peer):
        self.lanes = common.lanes(torch_peer, cupy_peer)
        self.failed = False

    def case(self, op: str, shape, rng) -> list:
        """``[ours ms, torch ms, cupy ms]`` (or ``"error"`` / ``n/a``) of one problem."""
        real = op.startswith("r")
        host = rng.standard_normal(shape, dtype=np.float32)
        if not real:
            host = (host + 1j * rng.standard_normal(shape, dtype=np.float32)).astype(np.complex64)
        ln = self.lanes
        s = ln.stream
        x = cl.to_device(host, stream=s)
        fn = getattr(cufft, op)
        out = fn(x, stream=s)                       # plans it; the timed calls are hits
        ours = out.get(stream=s)
        cases = {"cudalibs": (lambda: fn(x, out=out, stream=s), ln.clock)}
        if ln.torch is not None:
            torch = ln.torch
            tfn = getattr(torch.fft, op)
            with torch.cuda.stream(ln.torch_stream):
                t_in = torch.from_numpy(host).cuda()
                t_out = tfn(t_in)
            ln.torch_stream.synchronize()
            print(f"  {op} {shape}: cudalibs vs torch "
                  f"{common.rel_diff(ours, t_out.cpu().numpy()):.1e}", file=sys.stderr)

            def torch_call():
                with torch.cuda.stream(ln.torch_stream):
                    tfn(t_in, out=t_out)

            cases["torch"] = (torch_call, ln.torch_clock)
        if ln.cupy is not None:
            cfn = getattr(ln.cupy.fft, op)
            with ln.cupy_stream:
                c_in = ln.cupy.asarray(host)
                cfn(c_in)
            ln.cupy_stream.synchronize()

            def cupy_call():
                with ln.cupy_stream:
                    cfn(c_in)

            cases["cupy"] = (cupy_call, ln.cupy_clock)
        trial = common.time_calls(*cases["cudalibs"], iters=1, repeats=1, warmup=1)[0]
        iters = max(1, min(200, int(LOOP_MS / max(trial, 1e-3))))
        times = common.time_interleaved(list(cases.values()), iters=iters, repeats=REPEATS,
                                        warmup=WARMUP)
        res = {label: common.median_spread(t)[0] for label, t in zip(cases, times)}
        for arr in (x, out):
            arr.close()
        return [res["cudalibs"], res.get("torch", NA), res.get("cupy", NA)]

    def guarded(self, label, fn):
        try:
            return fn()
        except Exception:   # noqa: BLE001 - report the case and go on
            self.failed = True
            print(f"{label} failed:\n{traceback.format_exc()}", file=sys.stderr)
            return ["error", "error", "error"]


def table(r: Runner, name: str, rng) -> str:
    rows = []
    for ops, shape in TABLES[name]:
        for op in ops:
            label = f"{op} {'x'.join(map(str, shape))}"
            ours, torch, cupy = r.guarded(label, lambda: r.case(op, shape, rng))
            rows.append([label, _fmt(ours), _fmt(torch), _fmt(cupy), _ratio(ours, torch),
                         _ratio(ours, cupy)])
    title = {"1d": "1-D, batched to 2^24 points", "2d": "2-D", "3d": "3-D"}[name]
    return (f"### {title}, float32 (ms per call, device time)\n\n" + common.markdown_table(
        ["transform", "cudalibs", "torch.fft", "cupy.fft", "torch/ours", "cupy/ours"], rows,
        right={1, 2, 3, 4, 5}))


def host_time(r: Runner, rng) -> str:
    """Microseconds of host time per cached-plan call of a 256-point C2C transform."""
    ln = r.lanes
    host = (rng.standard_normal(256) + 1j * rng.standard_normal(256)).astype(np.complex64)
    s = ln.stream
    x = cl.to_device(host, stream=s)
    out = cufft.fft(x, stream=s)
    plan = cufft.FFTPlan(x)
    plan.execute(x, out, stream=s)
    rows = [["cudalibs cufft.fft(x, out=...) (plan cache hit)",
             common.host_us(lambda: cufft.fft(x, out=out, stream=s), s.sync)],
            ["cudalibs FFTPlan.execute(x, out)",
             common.host_us(lambda: plan.execute(x, out, stream=s), s.sync)]]
    if ln.torch is not None:
        torch = ln.torch
        with torch.cuda.stream(ln.torch_stream):
            tx = torch.from_numpy(host).cuda()
            to = torch.fft.fft(tx)
            rows.append(["torch.fft.fft(x, out=...)",
                         common.host_us(lambda: torch.fft.fft(tx, out=to),
                                        ln.torch_stream.synchronize)])
    if ln.cupy is not None:
        with ln.cupy_stream:
            cx = ln.cupy.asarray(host)
            rows.append(["cupy.fft.fft(x)", common.host_us(lambda: ln.cupy.fft.fft(cx),
                                                           ln.cupy_stream.synchronize)])
    plan.close()
    return ("### Host time per cached-plan call, 256-point C2C (us)\n\n"
            + common.markdown_table(["call", "us"], [[c, f"{us:.1f}"] for c, us in rows],
                                    right={1}))


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__)
    ap.add_argument("--tables", default="1d,2d,3d",
                    help="comma-separated tables to measure, of 1d, 2d, 3d")
    ap.add_argument("--quick", action="store_true",
                    help="the smaller half of each table's sizes and fewer timed loops")
    args = ap.parse_args(argv)
    names = [t for t in args.tables.split(",") if t]
    unknown = [t for t in names if t not in TABLES]
    if unknown:
        ap.error(f"unknown table(s) {', '.join(unknown)}: choose from {', '.join(TABLES)}")
    common.exit_if_no_gpu("benchmarks/fft.py")
    global REPEATS
    if args.quick:
        REPEATS = 3
        for k in TABLES:
            TABLES[k] = TABLES[k][:len(TABLES[k]) // 2]
    t0 = time.perf_counter()
    peers = {"torch": common.load_torch(), "cupy": common.load_cupy()}
    r = Runner(peers["torch"], peers["cupy"])
    rng = np.random.default_rng(0)
    dev = r.lanes.device
    major, minor, _ = cl.driver_version()
    print("## cuFFT: cudalibs beside torch.fft and cupy.fft\n")
    print(f"- device: {dev.name} ({dev.arch}), driver supports CUDA {major}.{minor}; cuFFT "
          f"{'.'.join(map(str, cufft.version()))} via cudalibs {cl.__version__}")
    for p in peers.values():
        print(f"- {p.name} {p.version}")
    print(f"- median of {REPEATS} interleaved loops between CUDA events; ratios are the peer's "
          "time over ours (above 1: cudalibs is faster)")
    for name in names:
        print()
        print(table(r, name, rng), flush=True)
    print()
    print(host_time(r, rng))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
