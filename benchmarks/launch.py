"""Kernel-launch overhead of cudalibs beside cuda.core, CuPy and PyTorch: host microseconds per
launch of an empty kernel, and per kernel of a replayed CUDA graph.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/launch.py

What is measured
----------------
* ``2 args`` / ``8 args``: an empty kernel taking a pointer and an int, or four pointers and
  four ints, launched on a non-blocking stream of each library:

  - cudalibs ``plain``: ``kernel.launch(1, 32, *args, stream=s)`` (arguments checked and
    packed each call, geometry looked up in the kernel's cache);
  - cudalibs ``prepared``: ``launcher(*args)`` from ``kernel.prepare(1, 32, stream=s)``;
  - cuda.core: ``launch(stream, LaunchConfig(grid=1, block=32), kernel, *args)``;
  - CuPy: ``RawKernel((1,), (32,), args)`` under ``with stream:``;
  - PyTorch: one single-kernel op, ``x.add_(1)`` on a 1-element tensor (its own argument
    count; PyTorch has no user-kernel launch, so this shows a framework op's dispatch cost).

* ``graph, per kernel``: 100 launches of the 2-argument empty kernel captured into one CUDA
  graph and replayed; wall time of ``GRAPH_REPLAYS`` replays up to the end of the last one
  (GPU time included: that is the cost a graph saves), divided by the kernels run
  (cudalibs, CuPy, PyTorch graphs).

How it is measured
------------------
Host wall time (``time.perf_counter``) over ``N`` launches issued in chunks of ``CHUNK``, with
a stream synchronisation between chunks outside the timed region.  A chunk stays well below
the driver's queue of pending launches, so a launch never waits for the GPU to retire earlier
ones (back-to-back empty kernels retire at a few microseconds each, about as fast as a host
issues them, and a long unbroken loop would time the GPU instead): the time is the host's
cost per launch.  Each case is measured in
``ROUNDS`` rounds, with the order of the cases rotated between rounds so that no library
always runs first (or warm); the cell is the median round.  ``speedup`` columns are the
peer's time over ours: above 1 means cudalibs launches faster.  The issue's reference points
on an H100: the C floor (``cuLaunchKernel`` from C) 3.1 us, cuda.core 6.8 us, CuPy 8.3 us;
targets prepared <= 4.5 us, plain <= 6 us, graph <= 1 us per kernel.  A peer that is not
installed shows ``n/a`` with the reason under the table.  Without a GPU the script prints one
line and exits with status 0.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.launch
    from . import _common as common

import cudalibs as cl

N = 20000          # launches per timed round
ROUNDS = 7         # the median round is reported
GRAPH_KERNELS = 100
GRAPH_REPLAYS = 500

SOURCE = r"""
extern "C" __global__ void empty2(float* p, unsigned int n) {}
extern "C" __global__ void empty8(float* a, float* b, float* c, float* d,
                                  unsigned int e, unsigned int f, unsigned int g,
                                  unsigned int h) {}
"""


CHUNK = 200        # launches between synchronisations (well under the pending-launch queue)


def _time_host(fn, sync, n=N, include_sync=False) -> float:
    """Microseconds per call of ``fn`` over ``n`` calls.

    Launches are timed in chunks of ``CHUNK`` with ``sync()`` between them, untimed; with
    ``include_sync`` (graph replays, whose GPU time is the cost being measured) the calls run
    back to back and the final ``sync()`` is timed."""
    if include_sync:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return (time.perf_counter() - t0) / n * 1e6
    total, done = 0.0, 0
    perf = time.perf_counter
    while done < n:
        m = min(CHUNK, n - done)
        sync()
        t0 = perf()
        for _ in range(m):
            fn()
        total += perf() - t0
        done += m
    sync()
    return total / n * 1e6


# -- each library builds its cases: name -> (callable, sync, calls per call) ------------------
def cases_cudalibs():
    s = cl.Stream()
    m = cl.compile(SOURCE)
    k2, k8 = m["empty2"], m["empty8"]
    a = [cl.empty(256, np.float32, stream=s) for _ in range(4)]
    p2 = k2.prepare(1, 32, stream=s)
    p8 = k8.prepare(1, 32, stream=s)
    out = {
        ("2 args", "cudalibs plain"): (lambda: k2.launch(1, 32, a[0], 256, stream=s), s.sync),
        ("2 args", "cudalibs prepared"): (lambda: p2(a[0], 256), s.sync),
        ("8 args", "cudalibs plain"): (
            lambda: k8.launch(1, 32, a[0], a[1], a[2], a[3], 1, 2, 3, 4, stream=s), s.sync),
        ("8 args", "cudalibs prepared"): (lambda: p8(a[0], a[1], a[2], a[3], 1, 2, 3, 4),
                                          s.sync),
    }
    with cl.graph.capture(s) as g:
        for _ in range(GRAPH_KERNELS):
            p2(a[0], 256)
    exe = g.instantiate(upload=True)
    out[("graph, per kernel", "cudalibs prepared")] = (lambda: exe.replay(s), s.sync)
    return out, (s, m, a, exe, g)


def cases_cuda_core():
    try:
        try:
            from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
        except ImportError:
            from cuda.core.experimental import (Device, LaunchConfig, Program, ProgramOptions,
                                                launch)
    except Exception as exc:  # not installed, or an API this script does not know
        return f"not available ({type(exc).__name__}: {exc})"
    dev = Device(0)
    dev.set_current()
    s = dev.create_stream()
    cc = dev.compute_capability
    prog = Program(SOURCE, code_type="c++",
                   options=ProgramOptions(arch=f"sm_{cc[0]}{cc[1]}", std="c++17"))
    code = prog.compile("cubin")
    k2, k8 = code.get_kernel("empty2"), code.get_kernel("empty8")
    bufs = [dev.allocate(1024, stream=s) for _ in range(4)]
    cfg = LaunchConfig(grid=1, block=32)
    u = np.uint32
    return {
        ("2 args", "cuda.core"): (lambda: launch(s, cfg, k2, bufs[0], u(256)), s.sync),
        ("8 args", "cuda.core"): (
            lambda: launch(s, cfg, k8, bufs[0], bufs[1], bufs[2], bufs[3], u(1), u(2), u(3),
                           u(4)), s.sync),
    }, (s, bufs, code)


def cases_cupy(cupy):
    s = cupy.cuda.Stream(non_blocking=True)
    k2 = cupy.RawKernel(SOURCE, "empty2")
    k8 = cupy.RawKernel(SOURCE, "empty8")
    a = [cupy.empty(256, cupy.float32) for _ in range(4)]
    u = np.uint32

    def launch2():
        with s:
            k2((1,), (32,), (a[0], u(256)))

    def launch8():
        with s:
            k8((1,), (32,), (a[0], a[1], a[2], a[3], u(1), u(2), u(3), u(4)))

    out = {("2 args", "cupy"): (launch2, s.synchronize),
           ("8 args", "cupy"): (launch8, s.synchronize)}
    try:
        launch2()
        s.synchronize()
        with s:
            s.begin_capture()
            for _ in range(GRAPH_KERNELS):
                k2((1,), (32,), (a[0], u(256)))
            graph = s.end_capture()
        out[("graph, per kernel", "cupy")] = (lambda: graph.launch(s), s.synchronize)
    except Exception as exc:  # CuPy built without graph support
        print(f"cupy graphs: n/a ({type(exc).__name__}: {exc})")
        graph = None
    return out, (s, a, graph)


def cases_torch(torch):
    s = torch.cuda.Stream()
    x = torch.zeros(1, device="cuda")

    def op():  # on PyTorch's current stream, as a framework op runs
        x.add_(1)

    out = {("2 args", "torch add_"): (op, torch.cuda.synchronize),
           ("8 args", "torch add_"): (op, torch.cuda.synchronize)}
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        for _ in range(3):
            x.add_(1)
    s.synchronize()
    with torch.cuda.graph(g, stream=s):
        for _ in range(GRAPH_KERNELS):
            x.add_(1)
    out[("graph, per kernel", "torch add_")] = (g.replay, torch.cuda.synchronize)
    return out, (s, x, g)


# -- driver -----------------------------------------------------------------------------------
def main(argv=None) -> None:
    common.arg_parser(__doc__).parse_args(argv)
    common.exit_if_no_gpu("benchmarks/launch.py")
    dev = cl.Device(0)
    torch, cupy = common.load_torch(), common.load_cupy()
    print(f"# Kernel launch overhead on {dev!r}")
    print(f"python {platform.python_version()}, cudalibs {cl.__version__}, driver CUDA "
          f"{'.'.join(map(str, cl.driver_version()[:2]))}, torch {torch.version}, cupy "
          f"{cupy.version}")
    cases: dict = {}
    keep = []
    notes = []
    builders = [("cudalibs", cases_cudalibs), ("cuda.core", cases_cuda_core)]
    if cupy.ok:
        builders.append(("cupy", lambda: cases_cupy(cupy.module)))
    else:
        notes.append(f"cupy: {cupy.version}")
    if torch.ok:
        builders.append(("torch", lambda: cases_torch(torch.module)))
    else:
        notes.append(f"torch: {torch.version}")
    for name, build in builders:
        try:
            got = build()
        except Exception:  # a peer failing to set up must not stop the others
            notes.append(f"{name}: setup failed:\n{traceback.format_exc(limit=3)}")
            continue
        if isinstance(got, str):
            notes.append(f"{name}: {got}")
            continue
        c, refs = got
        cases.update(c)
        keep.append(refs)

    names = list(cases)
    samples: dict = {key: [] for key in names}
    for key in names:  # warm up every case once
        fn, sync = cases[key]
        _time_host(fn, sync, n=200)
    for r in range(ROUNDS):
        order = names[r % len(names):] + names[:r % len(names)]
        for key in order:
            fn, sync = cases[key]
            try:
                graph = key[0] == "graph, per kernel"
                us = _time_host(fn, sync, n=GRAPH_REPLAYS if graph else N, include_sync=graph)
            except Exception as exc:
                notes.append(f"{key}: {type(exc).__name__}: {exc}")
                cases[key] = (lambda: None, lambda: None)
                continue
            if key[0] == "graph, per kernel":
                us /= GRAPH_KERNELS
            samples[key].append(us)

    med = {k: statistics.median(v) for k, v in samples.items() if v}
    peers = ["cuda.core", "cupy", "torch add_"]
    headers = ["case", "cudalibs plain (us)", "cudalibs prepared (us)", *[f"{p} (us)" for p in
               peers], *[f"speedup vs {p}" for p in peers]]
    rows = []
    for case in ("2 args", "8 args", "graph, per kernel"):
        plain = med.get((case, "cudalibs plain"))
        prep = med.get((case, "cudalibs prepared"))
        best = prep if prep is not None else plain
        row = [case, _fmt(plain), _fmt(prep)]
        row += [_fmt(med.get((case, p))) for p in peers]
        row += [common.fmt_ratio(med.get((case, p)), best) for p in peers]
        rows.append(row)
    print()
    print(common.markdown_table(headers, rows, right=set(range(1, len(headers)))))
    print()
    print(f"{N} launches per round ({GRAPH_REPLAYS} replays of {GRAPH_KERNELS} kernels for "
          f"graphs), median of {ROUNDS} rounds; speedup = peer time / cudalibs prepared time "
          "(plain where there is no prepared form).")
    print("Reference (issue 3, H100): C floor 3.1 us, cuda.core 6.8 us, CuPy 8.3 us; targets "
          "prepared <= 4.5 us, plain <= 6 us, graph <= 1 us per kernel.")
    spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in samples.items() if v}
    noisy = [f"{k[0]} / {k[1]}: rounds spread {100 * s:.0f}%" for k, s in spread.items()
             if s > 0.15]
    for line in noisy + notes:
        print(f"- {line}")


def _fmt(us) -> str:
    return common.NA if us is None else f"{us:.2f}"


if __name__ == "__main__":
    main()
