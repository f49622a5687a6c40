"""Shared plumbing of the benchmarks: GPU check, optional peers, CUDA-event timing, tables.

Every benchmark measures cudalibs beside its peers (PyTorch, CuPy) in one process, on one
device, by one method (:func:`time_calls`):

1. warm up: call the case a few times, then wait for its stream;
2. record a CUDA event on the stream that does the work, issue ``iters`` back-to-back calls,
   record a second event, wait for it and divide the elapsed time by ``iters``;
3. repeat step 2 ``repeats`` times; the benchmark reports the median, and can flag cases
   whose repeats spread widely (:func:`median_spread`).

Each library is timed with its own events on its own stream (:func:`cudalibs_clock`,
:func:`torch_clock`, :func:`cupy_clock`), so no other library's code runs inside a timed loop.
The events bracket the calls, so the host time a call spends before the GPU can start the
next one (argument checks, a synchronisation inside the call) is part of the measurement:
the numbers are what a user of each API gets, not the bare speed of the copy engine.

Peers are optional, never dependencies: :func:`load_torch` and :func:`load_cupy` import what
is installed and can reach a GPU, and say why when it cannot; a benchmark prints ``n/a``
for them.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import timeit
from typing import Any, Callable

import numpy as np

import cudalibs as cl

__all__ = ["Peer", "Clock", "arg_parser", "exit_if_no_gpu", "load_torch", "load_cupy",
           "cudalibs_clock", "torch_clock", "cupy_clock", "time_calls", "median_spread", "gbps",
           "fmt_rate", "fmt_ratio", "markdown_table", "Lanes", "lanes", "host_us", "rel_diff"]

NA = "n/a"


# -- command line and environment -----------------------------------------------------------
def arg_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line, parsed before any GPU is looked for.

    Parameters
    ----------
    doc : str
        The benchmark's module docstring; its first paragraph describes the command.

    Returns
    -------
    argparse.ArgumentParser
        Whose ``--help`` shows each option's default, and which refuses unknown options with
        status 2, on any machine.
    """
    return argparse.ArgumentParser(description=" ".join(doc.split("\n\n")[0].split()),
                                   formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def exit_if_no_gpu(script: str, gpus: int = 1) -> None:
    """Print one line naming what is missing and exit with status 2 unless ``gpus`` GPUs are
    usable.

    Status 2 rather than 0: a benchmark that measured nothing must not read as one that ran.
    """
    reason = cl.unavailable_reason()
    if reason is None and cl.device_count() < gpus:
        reason = f"{cl.device_count()} visible"
    if reason is not None:
        print(f"{script}: needs {'a GPU' if gpus == 1 else f'{gpus} GPUs'}: {reason}")
        sys.exit(2)


@dataclasses.dataclass(frozen=True)
class Peer:
    """A peer library, or why it is missing.

    Attributes
    ----------
    name : str
    module : module or None
        The imported module; ``None`` when the peer is not usable.
    version : str
        For the report header; the reason it is missing when ``module`` is ``None``.
    """

    name: str
    module: Any
    version: str

    @property
    def ok(self) -> bool:
        return self.module is not None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load_torch() -> Peer:
    """Import PyTorch if it is installed and sees a CUDA GPU."""
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install failing in its own way
        return Peer("torch", None, f"not available ({_first_line(exc)})")
    if not torch.cuda.is_available():
        return Peer("torch", None, f"{torch.__version__} sees no CUDA GPU")
    return Peer("torch", torch, f"{torch.__version__} (CUDA {torch.version.cuda})")


def load_cupy() -> Peer:
    """Import CuPy (and cupyx) if it is installed and sees a CUDA GPU."""
    try:
        import importlib

        import cupy
        # cupyx (cupyx.empty_pinned) must be importable too; it is used through cupy's namespace.
        importlib.import_module("cupyx")

        cupy.cuda.runtime.getDeviceCount()
        rt = cupy.cuda.runtime.runtimeGetVersion()
    except Exception as exc:  # ImportError, or CUDARuntimeError when no GPU is reachable
        return Peer("cupy", None, f"not available ({_first_line(exc)})")
    return Peer("cupy", cupy, f"{cupy.__version__} (CUDA runtime {rt // 1000}.{rt % 1000 // 10})")


# -- timing ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Clock:
    """How one library times work on one of its streams with CUDA events.

    Attributes
    ----------
    event : callable
        ``event()`` makes a new timing event.
    record : callable
        ``record(ev)`` records ``ev`` on the work stream.
    elapsed_ms : callable
        ``elapsed_ms(start, end)`` waits for ``end`` and returns the milliseconds between them.
    sync : callable
        ``sync()`` waits until the work stream is idle.
    """

    event: Callable[[], Any]
    record: Callable[[Any], None]
    elapsed_ms: Callable[[Any, Any], float]
    sync: Callable[[], None]


def cudalibs_clock(stream: cl.Stream) -> Clock:
    """A :class:`Clock` of cudalibs :class:`~cudalibs.Event` objects on ``stream``."""
    def elapsed(start, end):
        end.sync()
        return start.elapsed_ms(end)

    return Clock(event=lambda: cl.Event(stream.device), record=lambda ev: ev.record(stream),
                 elapsed_ms=elapsed, sync=stream.sync)


def torch_clock(torch, stream) -> Clock:
    """A :class:`Clock` of ``torch.cuda.Event`` objects on the torch stream ``stream``."""
    def elapsed(start, end):
        end.synchronize()
        return start.elapsed_time(end)

    return Clock(event=lambda: torch.cuda.Event(enable_timing=True),
                 record=lambda ev: ev.record(stream), elapsed_ms=elapsed,
                 sync=stream.synchronize)


def cupy_clock(cupy, stream) -> Clock:
    """A :class:`Clock` of ``cupy.cuda.Event`` objects on the CuPy stream ``stream``."""
    def elapsed(start, end):
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end)

    return Clock(event=lambda: cupy.cuda.Event(), record=lambda ev: ev.record(stream),
                 elapsed_ms=elapsed, sync=stream.synchronize)


def time_calls(fn: Callable[[], Any], clock: Clock, *, iters: int, repeats: int,
               warmup: int) -> list[float]:
    """Milliseconds per call of ``fn``, once per repeat (see the module docstring).

    Parameters
    ----------
    fn : callable
        Queues the work on the clock's stream (it may also block the host).
    clock : Clock
    iters : int
        Calls between the two events of one repeat.
    repeats : int
        Timed loops.
    warmup : int
        Untimed calls first; the stream is idle before the first timed loop.

    Returns
    -------
    list of float
        One per-call time for each repeat, in the order measured.
    """
    for _ in range(warmup):
        fn()
    clock.sync()
    start, end = clock.event(), clock.event()
    times = []
    for _ in range(repeats):
        clock.record(start)
        for _ in range(iters):
            fn()
        clock.record(end)
        times.append(clock.elapsed_ms(start, end) / iters)
    return times


def time_interleaved(cases, *, iters: int, repeats: int, warmup: int) -> list[list[float]]:
    """:func:`time_calls` for several ``(fn, clock)`` cases with their repeats interleaved
    (case 1, case 2, ..., case 1, ...), so a drift in clocks or host speed during the run
    hits every case alike and their ratios stay fair.

    Returns
    -------
    list of list of float
        Per case, one per-call time for each repeat.
    """
    for fn, clock in cases:
        for _ in range(warmup):
            fn()
        clock.sync()
    events = [(clock.event(), clock.event()) for _, clock in cases]
    times: list[list[float]] = [[] for _ in cases]
    for _ in range(repeats):
        for i, (fn, clock) in enumerate(cases):
            start, end = events[i]
            clock.record(start)
            for _ in range(iters):
                fn()
            clock.record(end)
            times[i].append(clock.elapsed_ms(start, end) / iters)
    return times


@dataclasses.dataclass
class Lanes:
    """Where each library's timed work runs: a stream of its own and a :class:`Clock` on it,
    per library, on one device (a peer's fields are None when the peer is missing).

    Attributes
    ----------
    device : cudalibs.Device
    stream : cudalibs.Stream
    clock : Clock
    torch, cupy : module or None
        The peers' modules.
    torch_stream, torch_clock, cupy_stream, cupy_clock
        Their streams and clocks.
    """

    device: Any
    stream: Any
    clock: Clock
    torch: Any = None
    torch_stream: Any = None
    torch_clock: Clock | None = None
    cupy: Any = None
    cupy_stream: Any = None
    cupy_clock: Clock | None = None


def lanes(torch_peer: Peer, cupy_peer: Peer, device: int = 0) -> Lanes:
    """A :class:`Lanes` on ``device``: a cudalibs stream, a torch side stream and a
    non-blocking CuPy stream, each with its clock."""
    dev = cl.Device(device)
    s = cl.Stream(dev)
    out = Lanes(dev, s, cudalibs_clock(s))
    if torch_peer.ok:
        torch = out.torch = torch_peer.module
        out.torch_stream = torch.cuda.Stream()
        out.torch_clock = torch_clock(torch, out.torch_stream)
    if cupy_peer.ok:
        cupy = out.cupy = cupy_peer.module
        out.cupy_stream = cupy.cuda.Stream(non_blocking=True)
        out.cupy_clock = cupy_clock(cupy, out.cupy_stream)
    return out


def host_us(fn: Callable[[], Any], sync: Callable[[], None], *, calls: int = 2000,
            rounds: int = 5, warmup: int = 50) -> float:
    """Microseconds of host time per call of ``fn``: the best of ``rounds`` loops of ``calls``
    calls, each loop ended by ``sync()`` (so queued work counts once it backs up), after
    ``warmup`` untimed calls.  For tiny problems, whose GPU time is about a launch, it is what
    a call costs its caller."""
    for _ in range(warmup):
        fn()
    sync()

    def loop():
        for _ in range(calls):
            fn()
        sync()

    return min(timeit.repeat(loop, number=1, repeat=rounds)) / calls * 1e6


def rel_diff(a, b) -> float:
    """``‖a − b‖ / ‖b‖`` in float64 (complex128 for complex inputs): how far two libraries'
    results are apart."""
    kind = np.complex128 if np.iscomplexobj(a) or np.iscomplexobj(b) else np.float64
    a, b = np.asarray(a).astype(kind), np.asarray(b).astype(kind)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def median_spread(times: list[float]) -> tuple[float, float]:
    """The median of ``times`` and their interquartile range relative to it.

    The quartile spread, unlike max - min, is not set by one stray repeat (a page fault, a
    context switch), so it flags cases that are noisy throughout.
    """
    mid = statistics.median(times)
    if len(times) < 2:
        return mid, 0.0
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return mid, (q3 - q1) / mid


def gbps(nbytes: int, ms: float) -> float:
    """Bandwidth in GB/s, 1 GB = 1e9 bytes."""
    return nbytes / (ms * 1e-3) / 1e9


# -- reporting ------------------------------------------------------------------------------
def fmt_rate(value) -> str:
    """A GB/s cell: a float with one decimal, or the string given (``n/a``, ``error``)."""
    if isinstance(value, float):
        return f"{value:.1f}"
    return NA if value is None else str(value)


def fmt_ratio(ours, theirs) -> str:
    """``ours / theirs`` as ``1.23x``; ``n/a`` unless both are numbers."""
    if isinstance(ours, float) and isinstance(theirs, float) and theirs > 0:
        return f"{ours / theirs:.2f}x"
    return NA


def markdown_table(headers: list[str], rows: list[list[str]], right=()) -> str:
    """A Markdown table padded to line up in a terminal too.

    Parameters
    ----------
    headers : list of str
    rows : list of list of str
    right : collection of int, optional
        Indices of the columns to right-align (numbers).
    """
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]

    def line(cells):
        padded = [c.rjust(w) if i in right else c.ljust(w)
                  for i, (c, w) in enumerate(zip(cells, widths))]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + ":" if i in right else "-" * (w + 2)
                          for i, w in enumerate(widths)) + "|"
    return "\n".join([line(headers), rule, *map(line, rows)])
