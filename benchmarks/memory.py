"""Copy bandwidth of cudalibs beside PyTorch and CuPy: host-to-device, device-to-host, on-device.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/memory.py

What is measured
----------------
Five copies, each at 1 MiB, 64 MiB and 1 GiB of ``uint8``, on device 0:

========================  ==================================================================
``H2D pinned``            page-locked host array -> device array
``H2D pageable``          ordinary (malloc'd) host array -> device array
``D2H pinned``            device array -> page-locked host array
``D2H pageable``          device array -> ordinary host array
``D2D``                   device array -> another device array on the same GPU
========================  ==================================================================

Each library does them through its public API, every copy queued on a stream of its own
(non-blocking, created for the benchmark) and asked to be asynchronous:

* cudalibs: ``dst.copy_(host, stream=s, blocking=False)``, ``src.get(out=host, stream=s, blocking=False)``,
  ``dst.copy_(src, stream=s)``; pinned memory from :func:`cudalibs.pinned_empty`;
* PyTorch: ``dst.copy_(src, non_blocking=True)`` under ``torch.cuda.stream(s)``; pinned
  memory from ``torch.empty(..., pin_memory=True)``;
* CuPy: ``dst.set(host, stream=s)``, ``src.get(stream=s, out=host, blocking=False)``,
  ``cupy.copyto(dst, src)`` under ``with s:`` (a ``cudaMemcpyAsync`` for contiguous arrays);
  pinned memory from ``cupyx.empty_pinned``.

The pageable host array is one numpy array shared by all three (PyTorch sees it through
``torch.from_numpy``). Copies from or to pageable memory block the host
whatever the flags say: the driver stages them through its own pinned buffers.

How it is measured
------------------
All libraries run in the same process, one after another at each size, and each frees its
memory (and empties its caching allocators) before the next begins. For each case:
warm-up calls, then a timed loop of back-to-back copies between two CUDA events recorded
with that library's own event type on the stream doing the copies, repeated; the cell is
the median per-copy time of the repeats (see ``benchmarks/_common.py``). The events bracket
the calls, so host-side costs that keep the next copy from starting (argument handling, a
synchronisation inside a call, the staging of pageable memory) count.

Bandwidth is in GB/s with 1 GB = 1e9 bytes: ``size / time`` for H2D and D2H, and
``2 * size / time`` for D2D, which reads and writes every byte. ``ours/torch`` and
``ours/cupy`` are cudalibs' bandwidth over the peer's: above 1 means cudalibs is faster.
Cases whose repeats spread by more than 10% (interquartile range over median) are listed
under the table: pageable copies, which depend on the host's memory system, are the usual
ones. 1 MiB on-device copies take about a microsecond on the GPU, so they measure how fast
each library issues copies from Python rather than the memory.
A peer that is not installed (neither is a dependency of cudalibs) shows ``n/a``. Without a
GPU the script prints one line and exits with status 0.
"""

from __future__ import annotations

import dataclasses
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.memory
    from . import _common as common

import cudalibs as cl

OPS = ("H2D pinned", "H2D pageable", "D2H pinned", "D2H pageable", "D2D")
LIBS = ("cudalibs", "torch", "cupy")
# D2D runs ~50x faster than a PCIe copy, so it loops longer to fill a comparable time.
D2D_ITER_SCALE = 10
# Cases whose repeats have an interquartile range above this fraction of their median
# are listed under the table.
NOISY = 0.10
# Each library's whole set of measurements is repeated this many times per size.
ROUNDS = 3


@dataclasses.dataclass(frozen=True)
class Size:
    label: str
    nbytes: int
    iters: int  # copies per timed loop
    repeats: int  # timed loops; the median is reported
    warmup: int  # untimed copies first


SIZES = (
    Size("1 MiB", 1 << 20, iters=100, repeats=21, warmup=10),
    Size("64 MiB", 64 << 20, iters=10, repeats=11, warmup=3),
    Size("1 GiB", 1 << 30, iters=2, repeats=3, warmup=1),
)


def _measure(cases: dict, clock: common.Clock, size: Size) -> dict[str, tuple[float, float]]:
    """For each op of ``cases`` (op -> callable doing one copy): GB/s of the median repeat,
    and the spread of the repeats."""
    out = {}
    for op, fn in cases.items():
        scale = D2D_ITER_SCALE if op == "D2D" else 1
        times = common.time_calls(fn, clock, iters=size.iters * scale, repeats=size.repeats,
                                  warmup=size.warmup * scale)
        ms, spread = common.median_spread(times)
        out[op] = (common.gbps(2 * size.nbytes if op == "D2D" else size.nbytes, ms), spread)
    return out


# -- the three libraries ---------------------------------------------------------------------
# Each runner allocates what it needs, measures every op, and frees it all before returning,
# so the next library (and the next size) starts with the device and host memory released.

def run_cudalibs(size: Size, pageable: np.ndarray) -> dict[str, tuple[float, float]]:
    dev = cl.Device(0)
    s = cl.Stream(dev)
    n = size.nbytes
    pinned = cl.pinned_empty(n, np.uint8)
    pinned.fill(1)
    src = cl.empty(n, np.uint8, device=dev, stream=s)
    dst = cl.empty(n, np.uint8, device=dev, stream=s)
    try:
        src.fill(1, stream=s)
        cases = {
            "H2D pinned": lambda: dst.copy_(pinned, stream=s, blocking=False),
            "H2D pageable": lambda: dst.copy_(pageable, stream=s, blocking=False),
            "D2H pinned": lambda: src.get(out=pinned, stream=s, blocking=False),
            "D2H pageable": lambda: src.get(out=pageable, stream=s, blocking=False),
            "D2D": lambda: dst.copy_(src, stream=s),
        }
        return _measure(cases, common.cudalibs_clock(s), size)
    finally:
        s.sync()  # pinned memory must not be freed under a queued copy
        src.close()
        dst.close()
        s.sync()  # the stream-ordered frees have run, so trim can return the memory
        dev.memory_pool.trim()
        s.close()


def run_torch(torch, size: Size, pageable: np.ndarray) -> dict[str, tuple[float, float]]:
    dev = torch.device("cuda", 0)
    s = torch.cuda.Stream(dev)
    n = size.nbytes
    pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    pinned.fill_(1)
    host = torch.from_numpy(pageable)
    try:
        with torch.cuda.stream(s):
            src = torch.empty(n, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            src.fill_(1)
            cases = {
                "H2D pinned": lambda: dst.copy_(pinned, non_blocking=True),
                "H2D pageable": lambda: dst.copy_(host, non_blocking=True),
                "D2H pinned": lambda: pinned.copy_(src, non_blocking=True),
                "D2H pageable": lambda: host.copy_(src, non_blocking=True),
                "D2D": lambda: dst.copy_(src, non_blocking=True),
            }
            return _measure(cases, common.torch_clock(torch, s), size)
    finally:
        s.synchronize()
        cases = src = dst = pinned = host = None  # drop the tensors so the caches can empty
        torch.cuda.synchronize(dev)
        torch.cuda.empty_cache()
        _torch_empty_host_cache(torch)


def _torch_empty_host_cache(torch) -> None:
    # Pinned memory sits in torch's caching host allocator after the tensor dies; the public
    # way to release it is recent (torch.accelerator.memory.empty_host_cache).
    mem = getattr(getattr(torch, "accelerator", None), "memory", None)
    fn = getattr(mem, "empty_host_cache", None) or getattr(torch._C, "_host_emptyCache", None)
    if fn is not None:
        fn()


def run_cupy(cupy, size: Size, pageable: np.ndarray) -> dict[str, tuple[float, float]]:
    import cupyx

    n = size.nbytes
    with cupy.cuda.Device(0):
        s = cupy.cuda.Stream(non_blocking=True)
        pinned = cupyx.empty_pinned(n, dtype=np.uint8)
        pinned.fill(1)
        try:
            with s:
                src = cupy.empty(n, dtype=cupy.uint8)
                dst = cupy.empty_like(src)
                src.fill(1)
                cases = {
                    "H2D pinned": lambda: dst.set(pinned, stream=s),
                    "H2D pageable": lambda: dst.set(pageable, stream=s),
                    "D2H pinned": lambda: src.get(stream=s, out=pinned, blocking=False),
                    "D2H pageable": lambda: src.get(stream=s, out=pageable, blocking=False),
                    "D2D": lambda: cupy.copyto(dst, src),
                }
                return _measure(cases, common.cupy_clock(cupy, s), size)
        finally:
            s.synchronize()
            cases = src = dst = pinned = None  # drop the arrays so the pools can free them
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()


# -- report ----------------------------------------------------------------------------------
def _header(dev: cl.Device, peers: dict[str, common.Peer]) -> str:
    major, minor, _ = cl.driver_version()
    lines = [
        "## Memory copy bandwidth",
        "",
        f"- device: {dev.name} ({dev.arch}, {dev.total_memory / 2**30:.0f} GiB), "
        f"driver supports CUDA {major}.{minor}",
        f"- cudalibs {cl.__version__}, numpy {np.__version__}, Python "
        f"{platform.python_version()}",
    ]
    lines += [f"- {p.name} {p.version}" for p in peers.values()]
    lines += [
        "- GB/s = 1e9 bytes/s. H2D and D2H: size / time. D2D: read + write, 2 x size / time.",
        "- median over timed loops of back-to-back copies, CUDA events of each library on the "
        f"stream doing the copies, then the median of {ROUNDS} rounds run in rotated library "
        "order; ours/peer > 1 means cudalibs is faster.",
    ]
    return "\n".join(lines)


def _table(results: dict) -> str:
    rows = []
    for op in OPS:
        for size in SIZES:
            r = {lib: results.get((lib, size.label), {}).get(op) for lib in LIBS}
            rows.append([op, size.label, *(common.fmt_rate(r[lib]) for lib in LIBS),
                         common.fmt_ratio(r["cudalibs"], r["torch"]),
                         common.fmt_ratio(r["cudalibs"], r["cupy"])])
    headers = ["op", "size", "cudalibs GB/s", "torch GB/s", "cupy GB/s", "ours/torch",
               "ours/cupy"]
    return common.markdown_table(headers, rows, right={1, 2, 3, 4, 5, 6})


def _noisy(spreads: dict) -> list[str]:
    out = []
    for op in OPS:
        for size in SIZES:
            libs = [f"{lib} {spreads[lib, size.label, op]:.0%}" for lib in LIBS
                    if spreads.get((lib, size.label, op), 0) > NOISY]
            if libs:
                out.append(f"{op} {size.label} ({', '.join(libs)})")
    return out


def main(argv=None) -> int:
    common.arg_parser(__doc__).parse_args(argv)
    common.exit_if_no_gpu("benchmarks/memory.py")
    t0 = time.perf_counter()
    peers = {"torch": common.load_torch(), "cupy": common.load_cupy()}
    dev = cl.Device(0)
    runners = {"cudalibs": run_cudalibs}
    if peers["torch"].ok:
        runners["torch"] = lambda size, host: run_torch(peers["torch"].module, size, host)
    if peers["cupy"].ok:
        runners["cupy"] = lambda size, host: run_cupy(peers["cupy"].module, size, host)

    results: dict[tuple[str, str], dict[str, float | str]] = {}  # (lib, size) -> op -> GB/s
    spreads: dict[tuple[str, str, str], float] = {}  # (lib, size, op) -> spread of repeats
    failed = False
    for size in SIZES:
        pageable = np.ones(size.nbytes, dtype=np.uint8)  # touched, so every page is resident
        rates: dict[str, dict[str, list[float]]] = {lib: {} for lib in runners}
        order = list(runners)
        # Several rounds in rotated library order, so slow drifts of the host (page cache,
        # clocks) do not always favour whichever library runs first; the median round counts.
        for r in range(ROUNDS):
            for lib in order[r % len(order):] + order[:r % len(order)]:
                if results.get((lib, size.label)) == "error":
                    continue
                try:
                    measured = runners[lib](size, pageable)
                except Exception:
                    failed = True
                    results[lib, size.label] = "error"
                    print(f"{lib} {size.label} failed:\n{traceback.format_exc()}",
                          file=sys.stderr)
                    continue
                for op, (rate, sp) in measured.items():
                    rates[lib].setdefault(op, []).append(rate)
                    key = (lib, size.label, op)
                    spreads[key] = max(spreads.get(key, 0.0), sp)
                cells = ", ".join(f"{op} {rate:.1f}" for op, (rate, _) in measured.items())
                print(f"  {lib:<8} {size.label:>6} round {r + 1}: {cells} GB/s",
                      file=sys.stderr, flush=True)
        for lib in runners:
            if results.get((lib, size.label)) == "error":
                results[lib, size.label] = dict.fromkeys(OPS, "error")
            else:
                results[lib, size.label] = {op: float(np.median(v))
                                            for op, v in rates[lib].items()}
        del pageable

    print(_header(dev, peers))
    print()
    print(_table(results))
    noisy = _noisy(spreads)
    if noisy:
        print(f"\nRepeats spread by more than {NOISY:.0%} (interquartile range over median), "
              "so compare these with care: " + "; ".join(noisy) + ".")
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
