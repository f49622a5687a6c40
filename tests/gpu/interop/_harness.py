"""The interop tier's one harness: an op called the way frameworks call it, on every kind of
stream, thread and memory they bring, and compared with the same call made through the
library with recorded relaunches off.

A *combination* (:class:`Combo`) names a stream kind, a thread kind and a memory kind:

- streams: a cudalibs :class:`~cudalibs.Stream`; PyTorch's default stream
  (``torch.cuda.current_stream()`` outside any context); a PyTorch side stream (inside
  ``with torch.cuda.stream(...)``, passing ``torch.cuda.current_stream()``); a PyTorch
  high-priority stream passed as the object; a non-blocking CuPy stream passed as the object;
  the legacy default stream (``stream=0``) and the per-thread default stream (``stream=2``);
- threads: the test's own thread, a fresh thread (:func:`tests.gpu._threads.in_threads`), a new
  ``ThreadPoolExecutor``'s worker, and PyTorch's autograd worker thread (the op runs inside the
  backward of a ``torch.autograd.Function`` whose forward returned a CUDA tensor);
- memory: cudalibs' pool (``cl.to_device``, outputs allocated by the op), PyTorch's caching
  allocator and CuPy's pool (their arrays passed as they are, and outputs given through
  ``out=`` as their arrays; float8, which CuPy has no arrays of (nor bfloat16 before CuPy 14),
  comes from CuPy's pool as raw integer arrays seen through
  :meth:`~cudalibs.DeviceArray.view`).

Not the full cross product: every stream on the main thread with cudalibs memory, every thread
kind on a PyTorch side stream with cudalibs memory, and every memory kind on PyTorch's current
stream on the main thread -- each its own test id.  ``HYPOTHESIS_PROFILE=sanitizer`` (the run
under compute-sanitizer) keeps one kind of each.

:func:`run` makes one op's call :data:`CALLS` times, on fresh random inputs each time (so a
relaunch is recorded on the second call and used from the third), synchronizes the stream it
used, and compares every output with the same call made with ``relaunch=False``: bit for bit
where the engine is deterministic, else within the dtype's bound of
:func:`cudalibs.testing.assert_close`.  For the ops that relaunch it requires, through
``plan.relaunch_info()``, that the relaunch is recorded, used by some thread and never failed,
and, off the main thread, that the worker thread itself launched it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from typing import Callable, NamedTuple

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import testing as T

from .._threads import in_threads

#: How often each combination makes its call (the relaunch is recorded on the second).
CALLS = 3

STREAMS = ("cudalibs", "torch_default", "torch_side", "torch_priority", "cupy", "legacy",
           "per_thread")
THREADS = ("main", "thread", "pool", "autograd")
MEMORY = ("cudalibs", "torch", "cupy")

#: The ml_dtypes element types (which numpy, PyTorch's from_numpy and older CuPy lack).
_ML = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


class Combo(NamedTuple):
    """One stream kind, thread kind and memory kind."""

    stream: str
    thread: str
    memory: str

    @property
    def id(self) -> str:
        return f"{self.stream}-{self.thread}-{self.memory}"


def sanitizer() -> bool:
    """Whether this run is the one under compute-sanitizer (few cases: every CUDA call is
    many times slower there)."""
    return os.environ.get("HYPOTHESIS_PROFILE") == "sanitizer"


def combos(few: bool | None = None) -> list[Combo]:
    """The combinations each op runs in (see the module docstring)."""
    if few is None:
        few = sanitizer()
    streams, threads, memory = ((("torch_side",), ("autograd",), ("torch",)) if few
                                else (STREAMS, THREADS, MEMORY))
    out = [Combo(s, "main", "cudalibs") for s in streams]
    out += [Combo("torch_side", t, "cudalibs") for t in threads]
    out += [Combo("torch_default", "main", m) for m in memory]
    seen, unique = set(), []
    for c in out:
        if c not in seen:
            seen.add(c)
            unique.append(c)
    return unique


COMBOS = combos()

#: ``@each_combo`` parametrizes a test over :data:`COMBOS`, one test id per combination.
each_combo = pytest.mark.parametrize("combo", COMBOS, ids=[c.id for c in COMBOS])


# -- streams ------------------------------------------------------------------------------------
class _StreamKind:
    """A stream kind: made in the test's thread, entered (:meth:`use`) in the worker thread,
    which passes what ``use`` yields as ``stream=`` and synchronizes it with :meth:`sync`."""

    def use(self):
        raise NotImplementedError

    def sync(self, arg) -> None:
        arg.synchronize()

    def close(self) -> None:
        pass


class _CudalibsStream(_StreamKind):
    def __init__(self):
        self.s = cl.Stream()

    @contextlib.contextmanager
    def use(self):
        yield self.s

    def sync(self, arg) -> None:
        arg.sync()

    def close(self) -> None:
        self.s.close()


class _TorchDefault(_StreamKind):
    @contextlib.contextmanager
    def use(self):
        import torch

        yield torch.cuda.current_stream()


class _TorchSide(_StreamKind):
    def __init__(self):
        import torch

        self.side = torch.cuda.Stream()

    @contextlib.contextmanager
    def use(self):
        import torch

        # The framework's idiom: make the side stream current, pass whatever is current.
        with torch.cuda.stream(self.side):
            yield torch.cuda.current_stream()


class _TorchPriority(_StreamKind):
    def __init__(self):
        import torch

        self.s = torch.cuda.Stream(priority=-1)

    @contextlib.contextmanager
    def use(self):
        yield self.s


class _CupyStream(_StreamKind):
    def __init__(self):
        import cupy

        self.s = cupy.cuda.Stream(non_blocking=True)

    @contextlib.contextmanager
    def use(self):
        yield self.s


class _RawStream(_StreamKind):
    """The legacy (0) or per-thread (2) default stream, passed as the raw handle."""

    def __init__(self, handle):
        self.handle = handle

    @contextlib.contextmanager
    def use(self):
        yield self.handle

    def sync(self, arg) -> None:
        # Handle 2 is the calling thread's own stream: synchronized from the worker thread.
        cl.Stream.from_handle(arg).sync()


_STREAM_KINDS = {
    "cudalibs": _CudalibsStream, "torch_default": _TorchDefault, "torch_side": _TorchSide,
    "torch_priority": _TorchPriority, "cupy": _CupyStream,
    "legacy": lambda: _RawStream(0), "per_thread": lambda: _RawStream(2),
}


# -- memory -------------------------------------------------------------------------------------
class _MemoryKind:
    """Where a call's arrays live.  ``gives_out``: outputs are given through ``out=`` (a
    framework's own arrays, written in place) instead of being allocated by the op."""

    gives_out = False

    def put(self, host: np.ndarray):
        raise NotImplementedError

    def upload(self, host: dict, outs) -> dict:
        """The device arrays of one call: its inputs, and its poisoned outputs (NaN, or the
        integer types' poison) where this memory gives them."""
        d = {k: (None if v is None else self.put(v)) for k, v in host.items()}
        if self.gives_out and outs:
            spec = outs(host) if callable(outs) else outs
            for k, (shape, dtype) in spec.items():
                d[k] = self.put(np.full(shape, T.poison_value(dtype), dtype))
        return d


class _CudalibsMemory(_MemoryKind):
    def put(self, host):
        return cl.to_device(np.ascontiguousarray(host))


class _TorchMemory(_MemoryKind):
    gives_out = True

    def put(self, host):
        return torch_tensor(host)


class _CupyMemory(_MemoryKind):
    gives_out = True

    def put(self, host):
        import cupy

        host = np.ascontiguousarray(host)
        if host.dtype.name in _ML:
            try:
                return cupy.asarray(host)
            except (TypeError, ValueError):     # "Unsupported dtype": CuPy has no such arrays
                raw = cupy.asarray(host.view(np.uint16 if host.dtype.itemsize == 2
                                             else np.uint8))
                return cl.asarray(raw).view(host.dtype)
        return cupy.asarray(host)


_MEMORY_KINDS = {"cudalibs": _CudalibsMemory, "torch": _TorchMemory, "cupy": _CupyMemory}


def torch_tensor(host: np.ndarray):
    """A CUDA tensor from PyTorch's caching allocator holding ``host`` (bfloat16 and float8
    through their bits: ``torch.from_numpy`` knows no ml_dtypes types)."""
    import torch

    host = np.ascontiguousarray(host)
    name = host.dtype.name
    if name in _ML:
        raw = host.view(np.int16 if host.dtype.itemsize == 2 else np.int8)
        return torch.from_numpy(raw.copy()).to("cuda").view(getattr(torch, name))
    return torch.from_numpy(host.copy()).to("cuda")


def host(x) -> np.ndarray:
    """A host copy of a result: a DeviceArray, or any CUDA array cudalibs takes."""
    if isinstance(x, np.ndarray):
        return x
    if type(x) is not cl.DeviceArray:
        x = cl.asarray(x)
    return x.get()


def address(x) -> int:
    return (x if type(x) is cl.DeviceArray else cl.asarray(x)).address


def given(d: dict, *names):
    """``out=`` for an op with several outputs: the tuple of ``d[name]`` (None where not
    given), or None when the memory kind gives no outputs."""
    if not any(n in d for n in names):
        return None
    return tuple(d.get(n) for n in names)


# -- threads ------------------------------------------------------------------------------------
def in_thread(kind: str, work: Callable):
    """``work()`` run in a thread of ``kind``; its result, or its exception re-raised here."""
    if kind == "main":
        return work()
    box: dict = {}

    def guarded():
        try:
            box["result"] = work()
        except BaseException as exc:   # noqa: BLE001 - re-raised in the test's thread
            box["error"] = exc

    if kind == "thread":
        # The GPU tier's thread harness: one fresh thread, device current, its own failure
        # reported as the thread's.
        in_threads(cl.Device(0), lambda t, s: guarded(), threads=1)
    elif kind == "pool":
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(guarded).result()
    elif kind == "autograd":
        _in_autograd(guarded)
    else:
        raise AssertionError(f"unknown thread kind {kind!r}")
    if "error" in box:
        raise box["error"]
    return box["result"]


def _in_autograd(work: Callable) -> None:
    """Run ``work()`` inside the backward of an autograd Function: PyTorch runs the backward of
    CUDA tensors on its autograd worker thread for the device, not on the caller's."""
    import torch

    class _Backward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            work()
            return grad

    x = torch.zeros(1, device="cuda", requires_grad=True)
    _Backward.apply(x).sum().backward()


# -- plans and relaunches -----------------------------------------------------------------------
def cached_plan(kind: str, match: Callable | None = None):
    """The most recently used cached plan of ``kind`` whose key ``match`` accepts (None when
    there is none yet)."""
    found = [e.plan for e in cl.plan_cache.entries(kind) if match is None or match(e.key)]
    return found[-1] if found else None


def engine_deterministic(plan) -> bool:
    """Whether cuDNN reports the plan's chosen engine deterministic (convolution plans say it
    directly; attention and norm plans in their chosen candidate)."""
    det = getattr(plan, "deterministic", None)
    if det is None:
        det = plan.candidates[plan.choice].get("deterministic")
    return bool(det)


def _threads(plan) -> int:
    return 0 if plan is None else plan.relaunch_info()["threads"]


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" or a.dtype.name in _ML


def bitwise_diff(a: np.ndarray, b: np.ndarray) -> str | None:
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{a.shape} vs {b.dtype}{b.shape}"
    ab = np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, -1)
    bb = np.ascontiguousarray(b).reshape(-1).view(np.uint8).reshape(b.size, -1)
    wrong = np.flatnonzero((ab != bb).any(axis=1))
    if not wrong.size:
        return None
    j = int(wrong[0])
    return (f"{wrong.size} of {a.size} elements differ bitwise, first at flat index {j}: "
            f"{a.reshape(-1)[j]} vs {b.reshape(-1)[j]}")


# -- the run ------------------------------------------------------------------------------------
def run(combo: Combo, rng, *, inputs: Callable, call: Callable, dtype: str, outs=None,
        kind: str | None = None, match: Callable | None = None, plan: Callable | None = None,
        exact=True, relaunch: bool = True, name: str = "") -> list:
    """Make ``call`` :data:`CALLS` times in ``combo`` and check it against the library call.

    Parameters
    ----------
    combo : Combo
    rng : numpy.random.Generator
    inputs : callable
        ``inputs(rng) -> {name: host array}``: one call's inputs, fresh for every call.
    call : callable
        ``call(d, stream) -> tuple``: the op on the device arrays ``d`` (the inputs, the
        outputs given through ``out=`` where the memory kind gives them, and ``d["plan"]``
        for a held plan), on ``stream``; returns every output to compare.
    dtype : str
        The element type whose bound applies where results are compared within a tolerance.
    outs : dict or callable, optional
        ``{name: (shape, dtype)}`` (or a function of the host inputs giving it) of the outputs
        passed through ``out=`` when the memory kind gives them.
    kind, match : str, callable, optional
        The plan cache kind (and a predicate on the named key) of the op's cached plan, for
        the relaunch checks.
    plan : callable, optional
        ``plan(d) -> plan``: a held plan, built in the test's thread from the first call's
        arrays and passed to every call as ``d["plan"]``.
    exact : bool, callable or tuple
        Bitwise comparison (True), within the bound (False), ``exact(plan)`` deciding it, or
        one such value per output.
    relaunch : bool
        Whether the op relaunches recorded kernels (checked when the plan is known).
    name : str, optional
        The op's name in messages (default ``call``'s name).

    Returns
    -------
    list
        The host results, ``[[output, ...] per call]`` (for further checks).
    """
    name = name or getattr(call, "__name__", "op")
    mem = _MEMORY_KINDS[combo.memory]()
    hosts = [inputs(rng) for _ in range(CALLS)]
    devs = [mem.upload(h, outs) for h in hosts]
    held = plan(devs[0]) if plan is not None else None
    if held is not None:
        for d in devs:
            d["plan"] = held
    # Every upload done, whatever stream the memory's owner queued it on.
    cl.Device(0).synchronize()
    find = (lambda: held) if held is not None else (
        (lambda: cached_plan(kind, match)) if kind is not None else None)
    check = relaunch and find is not None
    main = threading.get_ident()
    streams = _STREAM_KINDS[combo.stream]()

    def work():
        with streams.use() as s:
            before = _threads(find()) if check else 0
            results = [tuple(call(d, s)) for d in devs]
            streams.sync(s)
            after = _threads(find()) if check else 0
        return threading.get_ident(), results, before, after

    try:
        ident, results, before, after = in_thread(combo.thread, work)
        got = [[host(r) for r in res] for res in results]
    finally:
        streams.close()
    if combo.thread != "main":
        assert ident != main, f"{name}: the {combo.thread} work ran on the test's own thread"
    if mem.gives_out and outs:
        # The framework's arrays are the outputs, written in place: no copy in between.
        for i, (d, res) in enumerate(zip(devs, results)):
            written = {address(r) for r in res}
            for k in (outs(hosts[i]) if callable(outs) else outs):
                assert address(d[k]) in written, \
                    f"{name}: call {i + 1} did not return the {combo.memory} array given as {k}"

    # The same calls through the library itself: relaunches off, fresh copies of the inputs
    # (some ops update their inputs in place, batch-norm's running statistics).
    refs = [mem.upload(h, outs) for h in hosts]
    for d in refs:
        if held is not None:
            d["plan"] = held
    cl.Device(0).synchronize()
    rs = cl.Stream()
    try:
        with cl.option_context(relaunch=False):
            ref_results = [tuple(call(d, rs)) for d in refs]
        rs.sync()
        want = [[host(r) for r in res] for res in ref_results]
    finally:
        rs.close()

    p = find() if find is not None else None
    for i, (g_res, w_res) in enumerate(zip(got, want)):
        assert len(g_res) == len(w_res), f"{name}: call {i + 1} gave {len(g_res)} outputs, " \
                                         f"the library call {len(w_res)}"
        for j, (g, w) in enumerate(zip(g_res, w_res)):
            label = f"{name} [{combo.id}] call {i + 1}, output {j}"
            if _is_float(g):
                assert np.isfinite(g.astype(np.float64)).all(), \
                    f"{label}: non-finite values (an output left unwritten?)"
            ex = exact[j] if isinstance(exact, tuple) else exact
            if callable(ex):
                ex = ex(p)
            if ex:
                diff = bitwise_diff(g, w)
                assert diff is None, f"{label} differs from the library call: {diff}" + (
                    "" if p is None else f" (plan {p!r})")
            else:
                T.assert_close(g, w.astype(np.float64) if _is_float(w) else w, dtype=dtype,
                               msg=f"{label} against the library call")

    if check:
        assert p is not None, f"{name}: no cached plan of kind {kind!r} after the calls"
        info = p.relaunch_info()
        assert info["failed"] == 0, f"{name}: a relaunch failed at launch: {info}"
        # A thread's executable graph lives as long as the thread: a worker that has ended
        # is counted by what it saw itself, right after its calls.
        threads = info["threads"] if combo.thread == "main" else after
        assert info["recorded"] >= 1 and threads >= 1, \
            f"{name}: the relaunch is not in use after {CALLS} calls: {info}, {threads} " \
            f"thread(s) launching it ({p!r})"
        if combo.thread != "main":
            assert after > before, \
                f"{name}: the {combo.thread} thread did not launch the recorded kernels " \
                f"(threads {before} -> {after}): {info}"
    return got
