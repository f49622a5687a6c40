"""The GPU tier's one harness for work from many threads at once.

- :func:`in_threads` runs ``work(t, stream)`` in several threads started together (a barrier),
  each with the device current and a stream of its own, and gives back what each returned; an
  exception in any thread fails the test, naming the thread.
- :func:`match_serial` runs calls once each, serially, then from many threads (each on its own
  stream, repeatedly, interleaved), and requires every thread's results to equal the serial
  ones bit for bit: a plan or cache shared between threads must never let one thread's call
  see another's pointers, workspace or descriptor state.
"""

import threading

import numpy as np

import cudalibs as cl

#: Threads of a run unless a test asks for another number.
THREADS = 8


def in_threads(device, work, threads=THREADS, *, timeout=120.0):
    """``[work(t, stream) for t in range(threads)]``, run by ``threads`` threads at once.

    Each thread makes ``device`` current, opens a :class:`cudalibs.Stream` of its own (closed
    after ``work`` returns), waits for the others at a barrier, then calls ``work``.  With
    ``device=None`` (host-only work, such as the CPU tier's recording fakes) the threads get
    no device and ``stream`` is None.

    Returns
    -------
    list
        What ``work`` returned, by thread index.

    Raises
    ------
    AssertionError
        A thread raised (the first one's exception is chained; a thread that failed before
        the barrier releases the others instead of leaving them waiting).
    """
    results = [None] * threads
    errors = []
    start = threading.Barrier(threads)

    def run(t):
        try:
            if device is None:
                start.wait(timeout)
                results[t] = work(t, None)
                return
            device.set_current()
            with cl.Stream(device) as s:
                start.wait(timeout)
                results[t] = work(t, s)
        except BaseException as exc:   # noqa: BLE001 - reported by the caller's thread
            errors.append((t, exc))
            start.abort()

    pool = [threading.Thread(target=run, args=(t,), name=f"worker-{t}")
            for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    if errors:
        # a broken barrier is the consequence of another thread's failure: report the cause
        errors.sort(key=lambda e: isinstance(e[1], threading.BrokenBarrierError))
        t, exc = errors[0]
        raise AssertionError(f"thread {t} of {threads} raised {type(exc).__name__}: {exc} "
                             f"({len(errors)} thread(s) failed)") from exc
    return results


def host(result, stream=None):
    """``[(label, numpy array)]``: host copies of a result -- a DeviceArray or numpy array,
    or a tuple, list, dict (or anything iterable, such as a BatchNormState) of them."""
    if result is None or isinstance(result, np.ndarray):
        return [("", None if result is None else np.array(result))]
    if hasattr(result, "get") and hasattr(result, "shape") and hasattr(result, "dtype"):
        return [("", np.array(result.get(stream=stream)))]
    items = result.items() if isinstance(result, dict) else enumerate(result)
    return [(f"[{k!r}]{label}", arr) for k, r in items for label, arr in host(r, stream)]


def _differences(got, want) -> list[str]:
    """What differs between two lists of ``(label, array)``, one line per output."""
    if [g[0] for g in got] != [w[0] for w in want]:
        return [f"outputs {[g[0] for g in got]}, serially {[w[0] for w in want]}"]
    out = []
    for (label, a), (_, b) in zip(got, want):
        name = f"output {label or 0}"
        if a is None or b is None:
            if (a is None) != (b is None):
                out.append(f"{name}: {a!r} vs serial {b!r}")
        elif a.shape != b.shape or a.dtype != b.dtype:
            out.append(f"{name}: {a.dtype}{a.shape} vs serial {b.dtype}{b.shape}")
        else:
            ab = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            bb = np.ascontiguousarray(b).reshape(-1).view(np.uint8)
            if not np.array_equal(ab, bb):
                k = max(a.dtype.itemsize, 1)
                wrong = np.flatnonzero((ab != bb).reshape(-1, k).any(axis=1))
                j = int(wrong[0])
                out.append(f"{name}: {wrong.size} of {a.size} elements differ, first at flat "
                           f"index {j}: {a.reshape(-1)[j]} vs serial {b.reshape(-1)[j]}")
    return out


def match_serial(device, calls, *, threads=THREADS, repeats=12, pick=None, copy_each=False):
    """Every thread's results must equal, bit for bit, what the same calls give serially.

    Parameters
    ----------
    device : Device
    calls : sequence of callables
        ``fn(stream) -> result``: one operation queued on ``stream``, its result anything
        :func:`host` copies.
    threads, repeats : int
        Each thread (on its own stream) runs ``repeats`` rounds.
    pick : callable, optional
        ``pick(t, r) -> indices``: which calls thread ``t`` runs in round ``r`` (default:
        all, in order).
    copy_each : bool
        Copy each result to the host right after its call (the thread's memory is then
        recycled between calls) instead of after the thread's last round (everything queued
        first, so that the streams' work overlaps on the device).

    Returns
    -------
    list
        The serial results, ``host(calls[i](stream))`` for each ``i``, for checks against a
        reference.

    Raises
    ------
    AssertionError
        Naming, for each wrong result, the thread, the round, the call and the output, and
        what differs.
    """
    with cl.Stream(device) as s:
        serial = [host(fn(s), s) for fn in calls]
        s.sync()
    device.synchronize()
    order = pick if pick is not None else (lambda t, r: range(len(calls)))

    def work(t, s):
        got = []
        for r in range(repeats):
            for i in order(t, r):
                res = calls[i](s)
                got.append((r, i, host(res, s) if copy_each else res))
        s.sync()
        return got if copy_each else [(r, i, host(res, s)) for r, i, res in got]

    bad, n = [], 0
    for t, got in enumerate(in_threads(device, work, threads)):
        for r, i, res in got:
            n += 1
            bad += [f"thread {t}, round {r}, call {i}, {d}" for d in _differences(res, serial[i])]
    assert not bad, (f"{len(bad)} output(s) of {n} results from {threads} threads differ from "
                     "the serial ones:\n  " + "\n  ".join(bad[:12]))
    return serial
