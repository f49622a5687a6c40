"""A library call's kernels, recorded once and launched again with new operand addresses.

A small GEMM through cuBLASLt costs about 10 µs of host time, most of it the library
assembling the same kernel parameters it assembled last time; only the operand addresses
change between calls of one prepared problem.  :func:`record` captures the library call into
a CUDA graph twice, with two sets of probe addresses, and compares the two recordings byte by
byte.  When the call is a short chain of kernel launches and memsets (a split-K GEMM is a
kernel and a reduction, or a memset of semaphores and a kernel) and every byte that differs
is an operand address plus a constant offset, :class:`KernelRelaunch` can launch it again
with any addresses: it writes them at those places (only in the nodes whose operands changed
since this thread's last launch), updates those nodes of an executable graph
(``cuGraphExecKernelNodeSetParams``, ``cuGraphExecMemsetNodeSetParams``) and launches the
graph.  Launch configurations, cluster shapes and other attributes are those the library gave
the nodes.

What :func:`record` refuses (the caller keeps making the library call):

- other node kinds (copies, host callbacks, allocations, events) or more than four nodes;
- different kernels, grids, blocks, shared memory, cluster shapes or memset shapes between
  the two recordings;
- any differing byte that is not part of an address plus a constant offset, for example a
  value derived from an address's alignment, or an address of the library's own memory;
- a driver without ``cuFuncGetParamInfo`` (CUDA 12.4).

Probe addresses.  In the first capture each operand sits exactly at its guaranteed alignment
(an address aligned to 16 bytes but not 32, say), in the second at a multiple of 4096.  A
library that rounds an address, picks a kernel by alignment or stores an alignment-derived
field therefore shows a difference that no constant offset explains, and is refused.  The
probe addresses are never dereferenced: nothing captured is run.  But the driver checks a
memset node's destination range against the allocation it lies in when a graph is
instantiated (a probe near the end of a small allocation runs past it), so the recorded graph
is never instantiated with probes in it: each thread's executable graph is instantiated from
the template with the real addresses of that thread's first launch written in.  The caller
must only relaunch with addresses at least as aligned as it declared.

Threads: each thread launches through an executable graph of its own (made on its first
launch), so threads never share per-call state and launches of different threads on different
streams stay independent.

The fast path never changes what a call does (:class:`RelaunchSlots`): a call shape is
recorded on its second call with everything the recording needs (the thread's library handle,
its binding to the private capture stream) made before the capture begins; a recording that
fails for its own circumstances (an exception while recording) is tried again on a later
call, a few times; one the comparison refuses is kept refused; and a relaunch that fails at
launch is turned off for its call shape, logged once and counted, while that very call is made
through the library.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import weakref
from ctypes import byref, c_int, c_size_t, c_void_p
from typing import Callable, NamedTuple

from .. import _ffi
from .._ffi import Resource, capture_open
from ..driver import _lib
from ..driver._core import raise_for
from ..driver.device import Device
from ..driver.graph import capture
from ..driver.stream import Stream
from ..errors import CudaError
from . import log as _log
from .options import CURRENT as _CURRENT
from .options import PROCESS as _PROCESS

__all__ = ["record", "Recording", "KernelRelaunch", "RelaunchSlots", "capture_stream",
           "WORKSPACE_ALIGN", "summarise", "totals", "stream_capturing"]

_logger = _log.get("runtime")

_KERNEL_NODE, _MEMSET_NODE = 0, 2     # CU_GRAPH_NODE_TYPE_KERNEL / _MEMSET
_MAX_NODES = 4                       # a GEMM: a kernel, a split-K reduction, a memset or two
_PARAM_END, _PARAM_BUFFER, _PARAM_SIZE = 0, 1, 2     # CU_LAUNCH_PARAM_*
_SPAN = 4096                         # probe addresses: the second set is aligned to this
_MAX_OFFSET = 1 << 31                # an address plus more than this is no operand address
#: The alignment library workspaces have (pool blocks have at least this); relaunches are
#: recorded for, and used with, workspaces this aligned.
WORKSPACE_ALIGN = 256
#: How often a call shape whose recording raised is recorded again before it is refused.
RETRIES = 3

_capture_streams = threading.local()


def capture_stream(device: Device) -> Stream:
    """A private stream of the calling thread on ``device``, for capturing library calls
    (no other thread's work can join a capture on it)."""
    cs = getattr(_capture_streams, "streams", None)
    if cs is None:
        cs = _capture_streams.streams = {}
    s = cs.get(device.ordinal)
    if s is None or s.closed:
        s = cs[device.ordinal] = Stream(device)
    return s


def stream_capturing(stream: Stream) -> bool:
    """Whether ``stream`` is capturing into a graph now, whoever began the capture (a
    framework's ``torch.cuda.graph`` included); an error of the query counts as capturing
    (the legacy stream answers one while another stream captures in a mode that forbids
    touching it)."""
    status = c_int()
    st = _lib.get().cuStreamIsCapturing(stream.raw, byref(status))
    return bool(st) or status.value != 0


# -- what a recording needs -----------------------------------------------------------------
class Recording(NamedTuple):
    """How to record one call shape, given by the owner of a :class:`RelaunchSlots`.

    Attributes
    ----------
    enqueue : callable
        ``enqueue(stream, addresses)`` queues the library call on ``stream`` with these
        operand addresses (a tuple like the call's), raising if the library refuses.
    aligns : tuple of int
        The alignment (a power of two, below 4096) each operand address will have at every
        relaunch.
    name : str
        What the call is, for reprs and logs.
    prepare : callable, optional
        ``prepare(stream)``, run before the captures with the private capture stream: makes
        whatever the call needs that cannot be made inside a capture (the thread's library
        handle, its binding to that stream).
    lock : lock, optional
        Held across both captures: the owner's lock over state that ``enqueue`` writes probe
        addresses into and other threads' calls read (a descriptor's pointers).
    """

    enqueue: Callable
    aligns: tuple
    name: str
    prepare: Callable | None = None
    lock: object = None


class _Recorded:
    """One node of a recording: a kernel (its launch shape and parameter block) or a memset
    (its destination in the parameter block's place, the rest in its shape)."""

    __slots__ = ("node", "kind", "params", "shape", "blob", "layout")


def _read_kernel(node, L) -> _Recorded | str:
    p = _lib.CUDA_KERNEL_NODE_PARAMS_v2()
    if L.cuGraphKernelNodeGetParams_v2(node, byref(p)):
        return "cuGraphKernelNodeGetParams failed"
    layout = []
    while True:
        off, size = c_size_t(), c_size_t()
        if L.cuFuncGetParamInfo(p.func, len(layout), byref(off), byref(size)):
            break
        layout.append((off.value, size.value))
    nbytes = max((o + s for o, s in layout), default=0)
    blob = bytearray(nbytes)
    if not layout:
        pass                    # a kernel without parameters: nothing to patch
    elif p.kernelParams:
        for i, (off, size) in enumerate(layout):
            blob[off:off + size] = ctypes.string_at(p.kernelParams[i], size)
    elif p.extra:
        buf, size, i = None, None, 0
        while (p.extra[i] or _PARAM_END) != _PARAM_END:
            if p.extra[i] == _PARAM_BUFFER:
                buf = p.extra[i + 1]
            elif p.extra[i] == _PARAM_SIZE:
                size = ctypes.cast(p.extra[i + 1], ctypes.POINTER(c_size_t))[0]
            i += 2
        if not buf or size is None or size < nbytes:
            return "a kernel's parameter buffer is unreadable"
        blob[:] = ctypes.string_at(buf, nbytes)
    else:
        return "a kernel node has no parameters to read"
    cluster = _lib.CUlaunchAttributeValue()
    if L.cuGraphKernelNodeGetAttribute(node, _lib.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                                       byref(cluster)):
        return "a kernel node's cluster shape is unreadable"
    r = _Recorded()
    r.node, r.kind, r.params, r.blob, r.layout = node, _KERNEL_NODE, p, bytes(blob), tuple(layout)
    func = ctypes.cast(p.func, c_void_p).value
    r.shape = (func, p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY,
               p.blockDimZ, p.sharedMemBytes, ctypes.string_at(ctypes.addressof(cluster), 12))
    return r


def _read_memset(node, L) -> _Recorded | str:
    p = _lib.CUDA_MEMSET_NODE_PARAMS()
    if L.cuGraphMemsetNodeGetParams(node, byref(p)):
        return "cuGraphMemsetNodeGetParams failed"
    r = _Recorded()
    r.node, r.kind, r.params, r.layout = node, _MEMSET_NODE, p, ()
    r.blob = int(p.dst).to_bytes(8, "little")
    r.shape = (p.pitch, p.value, p.elementSize, p.width, p.height)
    return r


def _read(graph, L) -> list | str:
    """The nodes of ``graph`` (kernels and memsets, in the order captured), or why not."""
    n = c_size_t(0)
    if L.cuGraphGetNodes(graph.raw, None, byref(n)):
        return "cuGraphGetNodes failed"
    if not 0 < n.value <= _MAX_NODES:
        return f"the call recorded {n.value} graph nodes"
    nodes = (_lib.CUgraphNode * n.value)()
    if L.cuGraphGetNodes(graph.raw, nodes, byref(n)):
        return "cuGraphGetNodes failed"
    out = []
    for node in nodes:
        kind = c_int(-1)
        if L.cuGraphNodeGetType(node, byref(kind)):
            return "cuGraphNodeGetType failed"
        if kind.value == _KERNEL_NODE:
            r = _read_kernel(node, L)
        elif kind.value == _MEMSET_NODE:
            r = _read_memset(node, L)
        else:
            return f"the call recorded a graph node of type {kind.value}"
        if isinstance(r, str):
            return r
        out.append(r)
    if not any(r.kind == _KERNEL_NODE for r in out):
        return "the call recorded no kernel"
    return out


def _explain(b1: bytes, b2: bytes, set1, set2):
    """Per operand, the ``(word index, offset)`` places where the blocks hold its address plus
    a constant; None when some differing byte is not explained so."""
    places = [[] for _ in set1]
    covered = set()
    for w in range(0, len(b1) - 7, 8):
        v1 = int.from_bytes(b1[w:w + 8], "little")
        v2 = int.from_bytes(b2[w:w + 8], "little")
        if v1 == v2:
            continue
        hits = [i for i in range(len(set1)) if v1 - set1[i] == v2 - set2[i]
                and abs(v1 - set1[i]) < _MAX_OFFSET]
        if len(hits) != 1:
            return None
        places[hits[0]].append((w // 8, v1 - set1[hits[0]]))
        covered.update(range(w, w + 8))
    if any(b1[k] != b2[k] and k not in covered for k in range(len(b1))):
        return None
    return tuple(tuple(p) for p in places)


def record(device: Device, how: Recording, bases):
    """Record a library call for relaunching.

    Parameters
    ----------
    device : Device
    how : Recording
        The call, its operands' alignments and what to make before capturing.
    bases : tuple of int
        The operand addresses of a real call; the probe addresses are placed near them.

    Returns
    -------
    KernelRelaunch or str
        The relaunch, or why the call cannot be relaunched (a refusal that recording again
        would repeat).

    Raises
    ------
    Exception
        Whatever failed while recording (the caller may try again later).
    """
    if capture_open():
        raise _Transient("a graph capture is open")
    L = _lib.get()
    if "cuFuncGetParamInfo" in L.missing:
        return "the driver has no cuFuncGetParamInfo (CUDA 12.4)"
    roots = [b - b % _SPAN for b in bases]
    set1 = tuple(r + a for r, a in zip(roots, how.aligns))
    set2 = tuple(r + _SPAN * (i + 1) for i, r in enumerate(roots))
    cs = capture_stream(device)
    if how.prepare is not None:
        how.prepare(cs)
    graphs, recs = [], []
    try:
        for probe in (set1, set2):
            if how.lock is not None:
                how.lock.acquire()
            try:
                with capture(cs) as g:
                    graphs.append(g)
                    how.enqueue(cs, probe)
            finally:
                if how.lock is not None:
                    how.lock.release()
            r = _read(g, L)
            if isinstance(r, str):
                return r
            recs.append(r)
        r1, r2 = recs
        if [(x.kind, x.shape, x.layout) for x in r1] != [(x.kind, x.shape, x.layout) for x in r2]:
            return "the two recordings launched different kernels or launch shapes"
        places = []
        for x, y in zip(r1, r2):
            pl = _explain(x.blob, y.blob, set1, set2)
            if pl is None:
                return "a recorded node holds values other than operand addresses that " \
                       "change with them"
            places.append(pl)
        keep = graphs[0]
        graphs.remove(keep)
        rl = KernelRelaunch._make(device, keep, r1, places, how.name)
    finally:
        for g in graphs:
            g.close()
    # An executable graph of the real call, made now: a recording that cannot be
    # instantiated is refused here, where the library call still runs, not at a launch.
    try:
        rl._thread_state(tuple(bases))
    except Exception as exc:    # noqa: BLE001 - refused, with the driver's words
        rl.close()
        return f"the recorded graph cannot be instantiated: {exc}"
    return rl


class _Transient(Exception):
    """A recording that failed for its own circumstances: try again on a later call."""


class _ThreadState:
    __slots__ = ("exec", "raw", "nodes", "last")


class _NodeState:
    """One node's parameters as this thread last gave them to its executable graph."""

    __slots__ = ("words", "ref", "keep")


def _close_all(graph, execs, alive) -> None:
    alive[0] = False
    for e in list(execs):
        e.close()
    graph.close()


class KernelRelaunch(Resource):
    """A recorded library call (a short chain of kernels and memsets), launched again with
    new operand addresses.

    Made by :func:`record`.  :meth:`launch` costs one parameter update per node whose
    addresses changed since this thread's last launch, and one graph launch, instead of the
    library's host work.  Closing it destroys the recorded graph and every thread's
    executable graph.
    """

    __slots__ = ("_device", "_graph", "_recs", "_patch", "_tls", "_execs", "_alive",
                 "_set_kernel", "_set_memset", "_launch", "_lock", "name")

    @classmethod
    def _make(cls, device, graph, recs, places, name) -> "KernelRelaunch":
        self = object.__new__(cls)
        self._device = device
        self._graph = graph
        self._recs = tuple(recs)
        # Per node: ((operand index, ((word, offset), ...)), ...) for the operands it holds.
        self._patch = tuple(tuple((i, pl) for i, pl in enumerate(per) if pl) for per in places)
        self._tls = threading.local()
        self._execs = weakref.WeakSet()
        self._lock = threading.Lock()       # the template's parameters, while instantiating
        L = _lib.get()
        self._set_kernel = L.unchecked("cuGraphExecKernelNodeSetParams_v2")
        self._set_memset = L.unchecked("cuGraphExecMemsetNodeSetParams")
        self._launch = L.unchecked("cuGraphLaunch")
        self.name = name
        # Read by every launch: a closed relaunch must not reach its destroyed graphs through
        # another thread's state.
        self._alive = [True]
        self._own(_close_all, graph, self._execs, self._alive)
        return self

    def _node_states(self) -> list:
        """Parameter blocks of every node, as recorded (one set per thread)."""
        nodes = []
        for rec in self._recs:
            ns = _NodeState()
            src = rec.params
            if rec.kind == _KERNEL_NODE:
                n = max((len(rec.blob) + 7) // 8 * 8, 8)
                buf = (ctypes.c_ubyte * n).from_buffer_copy(rec.blob + bytes(n - len(rec.blob)))
                ns.words = memoryview(buf).cast("B").cast("Q")
                base = ctypes.addressof(buf)
                kp = (c_void_p * max(len(rec.layout), 1))(
                    *[base + off for off, _ in rec.layout])
                p = _lib.CUDA_KERNEL_NODE_PARAMS_v2()
                p.func = src.func
                p.gridDimX, p.gridDimY, p.gridDimZ = src.gridDimX, src.gridDimY, src.gridDimZ
                p.blockDimX, p.blockDimY, p.blockDimZ = \
                    src.blockDimX, src.blockDimY, src.blockDimZ
                p.sharedMemBytes = src.sharedMemBytes
                p.kernelParams = ctypes.cast(kp, ctypes.POINTER(c_void_p))
                p.kern, p.ctx = src.kern, src.ctx
                ns.keep = (buf, kp, p)          # p points into kp, kp into buf
            else:
                # The destination is the struct's first word: patched in the struct itself.
                p = _lib.CUDA_MEMSET_NODE_PARAMS.from_buffer_copy(src)
                ns.words = memoryview(p).cast("B").cast("Q")
                ns.keep = (p,)
            ns.ref = byref(p)
            nodes.append(ns)
        return nodes

    def _write(self, nodes, addresses) -> None:
        for k, patch in enumerate(self._patch):
            words = nodes[k].words
            for i, places in patch:
                a = addresses[i]
                for w, d in places:
                    words[w] = a + d

    def _thread_state(self, addresses) -> _ThreadState:
        """This thread's executable graph, instantiated from the template with
        ``addresses`` written into it (the driver validates a memset's destination range at
        instantiation, so the template never carries the probes then)."""
        self._live()
        t = _ThreadState()
        t.nodes = self._node_states()
        self._write(t.nodes, addresses)
        L = _lib.get()
        with self._lock:
            L.cuCtxSetCurrent(self._device.raw_context)
            for rec, ns in zip(self._recs, t.nodes):
                if rec.kind == _KERNEL_NODE:
                    st = L.cuGraphKernelNodeSetParams_v2(rec.node, ns.ref)
                    fn = "cuGraphKernelNodeSetParams_v2"
                else:
                    st = L.cuGraphMemsetNodeSetParams(rec.node, ns.ref)
                    fn = "cuGraphMemsetNodeSetParams"
                if st:
                    raise_for(st, fn, f"the template of {self.name}")
            t.exec = self._graph.instantiate()
        self._execs.add(t.exec)
        t.raw = c_void_p(t.exec.handle)
        t.last = tuple(addresses)
        self._tls.state = t
        return t

    def launch(self, addresses: tuple, stream_h) -> int:
        """Launch the call with these operand addresses on raw stream ``stream_h``.

        The caller has checked the addresses' alignment, that no capture is open and that the
        context is current.  Returns the CUDA status (0 on success); raises when this
        thread's executable graph cannot be made.
        """
        if not self._alive[0]:
            self._live()
        try:
            t = self._tls.state
        except AttributeError:
            t = self._thread_state(addresses)
        last = t.last
        if addresses != last:
            t.last = None           # until the driver has taken every new parameter
            for k, patch in enumerate(self._patch):
                ns = None
                for i, places in patch:
                    a = addresses[i]
                    if last is None or a != last[i]:
                        ns = t.nodes[k]
                        words = ns.words
                        for w, d in places:
                            words[w] = a + d
                if ns is not None:
                    rec = self._recs[k]
                    if rec.kind == _KERNEL_NODE:
                        st = self._set_kernel(t.raw, rec.node, ns.ref)
                    else:
                        st = self._set_memset(t.raw, rec.node, ns.ref, self._device.raw_context)
                    if st:
                        return st
            t.last = addresses
        return self._launch(t.raw, stream_h)

    @property
    def nodes(self) -> int:
        """How many graph nodes the call recorded."""
        return len(self._recs)

    @property
    def patched_words(self) -> int:
        """How many 8-byte parameter words hold operand addresses."""
        return sum(len(pl) for patch in self._patch for _, pl in patch)

    @property
    def threads(self) -> int:
        """How many threads have launched it (each has an executable graph)."""
        return len(self._execs)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.patched_words} address words"
        kinds = "+".join("kernel" if r.kind == _KERNEL_NODE else "memset" for r in self._recs)
        return (f"<KernelRelaunch {self.name} on device {self._device.ordinal}: {kinds}, "
                f"{sum(len(r.blob) for r in self._recs)}-byte parameters, {state}>")


# -- the one relaunch front -----------------------------------------------------------------
class _Refused:
    """A call shape that keeps the library call: why, and whether it failed at launch."""

    __slots__ = ("why", "failed")

    def __init__(self, why: str, failed: bool = False):
        self.why = why
        self.failed = failed


class _Pending:
    """A call shape seen, not recorded yet: calls since the last try, tries that raised."""

    __slots__ = ("calls", "tries")

    def __init__(self):
        self.calls = 1
        self.tries = 0


_RECORDING = object()
_CAPTURE_OPEN = _ffi.CAPTURE_OPEN
_serials = itertools.count()
_totals = {"recorded": 0, "refused": 0, "retried": 0, "failed": 0}
_totals_lock = threading.Lock()


def _count(what: str) -> None:
    with _totals_lock:
        _totals[what] += 1


def totals() -> dict:
    """Process-wide counts: call shapes ``recorded``, ``refused``, recordings ``retried``
    after they raised, relaunches ``failed`` at launch (and turned off)."""
    with _totals_lock:
        return dict(_totals)


class RelaunchSlots:
    """The relaunches of one plan, by call shape: the one relaunch front of every library.

    :meth:`launch` is all a library's hot path calls: it launches the recorded kernels of a
    call shape, or records them on the shape's second call, and answers False whenever the
    caller must make the library call itself -- relaunches turned off, a capture open (ours
    or a framework's, on this stream), a shape refused or not yet seen twice, or any failure
    of the relaunch machinery (which also turns the relaunch of that shape off, logs it once
    and counts it).  A one-off call pays nothing; a library error still comes from the
    library call.  Bounded: at most :attr:`MAX` call shapes.  Closed with the plan that owns
    it.
    """

    MAX = 16

    __slots__ = ("_d", "_lock", "_serial", "__weakref__")

    def __init__(self):
        self._d: dict = {}
        self._lock = threading.Lock()
        # Names this object in "said once" log keys (an id() can be reused by a later one).
        self._serial = next(_serials)

    def launch(self, key, addresses: tuple, stream: Stream, owner, device: Device) -> bool:
        """Run call shape ``key`` with ``addresses`` on ``stream`` through its recorded
        kernels; False when the caller must make the library call.

        ``owner.recording(key)`` gives the :class:`Recording` of a shape when it is due (its
        second call).  The caller has made ``device``'s context current and checked the
        addresses' alignment against what its recording declares.
        """
        if _CAPTURE_OPEN[0] or not (_CURRENT.get() or _PROCESS[0]).relaunch:
            return False
        # A foreign stream may be capturing into a framework's graph (the legacy stream never
        # is: it cannot be captured).
        if not stream.owned and stream.raw_handle and stream_capturing(stream):
            return False
        r = self._d.get(key)
        if r.__class__ is KernelRelaunch:
            try:
                st = r.launch(addresses, stream.raw)
            except Exception as exc:    # noqa: BLE001 - the machinery's failure, not the call's
                st = exc
            if not st:
                return True
            self._failed(key, r, st)
            return False
        if r.__class__ is not _Pending:
            if r is None and len(self._d) < self.MAX:
                with self._lock:
                    self._d.setdefault(key, _Pending())
            return False
        with self._lock:
            if self._d.get(key) is not r:
                return False
            r.calls += 1
            if r.calls < 2:
                return False
            self._d[key] = _RECORDING
        return self._record(key, r, addresses, stream, owner, device)

    def _record(self, key, pending, addresses, stream, owner, device) -> bool:
        try:
            how = owner.recording(key)
            rl = "the call shape has no recording" if how is None else \
                record(device, how, addresses)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # An interrupt: the shape goes back to waiting, so it is not stuck recording.
                with self._lock:
                    self._d[key] = pending
                raise
            pending.tries += 1
            pending.calls = 0
            why = f"recording failed: {exc}"
            if pending.tries < RETRIES:
                _count("retried")
                _logger.debug("relaunch of %r: %s; tried again on a later call", key, why)
                with self._lock:
                    self._d[key] = pending
                return False
            rl = f"{why} (after {RETRIES} tries)"
        if isinstance(rl, str):
            _count("refused")
            _log.once(_logger, 20, ("refused", self._serial, key),
                      "relaunch refused for %s: %s; the library call is kept", key, rl)
            with self._lock:
                self._d[key] = _Refused(rl)
            return False
        _count("recorded")
        _logger.debug("relaunch recorded: %r", rl)
        with self._lock:
            self._d[key] = rl
        device.set_current()
        return self.launch(key, addresses, stream, owner, device)

    def _failed(self, key, rl, status) -> None:
        """A recorded relaunch failed at launch: off for this shape, said once, counted."""
        if isinstance(status, BaseException):
            why = f"{type(status).__name__}: {status}"
        else:
            why = str(CudaError.from_status(int(status), "cuGraphLaunch"))
        _count("failed")
        _log.once(_logger, 30, ("failed", self._serial, key),
                  "relaunch of %s failed at launch (%s); the library call is made instead, "
                  "from now on", rl.name, why)
        with self._lock:
            if self._d.get(key) is rl:
                self._d[key] = _Refused(f"relaunch failed at launch: {why}", failed=True)
        # Not closed here: another thread may be launching it; it is freed once collected.

    # -- inspection -------------------------------------------------------------------------
    def get(self, key) -> KernelRelaunch | None:
        """The relaunch of this call shape, if it has one."""
        r = self._d.get(key)
        return r if r.__class__ is KernelRelaunch else None

    def state(self, key):
        """The relaunch of ``key``, the reason it has none, or None when not recorded yet."""
        r = self._d.get(key)
        if r.__class__ is KernelRelaunch:
            return r
        if r.__class__ is _Refused:
            return r.why
        return None

    def reasons(self) -> dict:
        """``{call shape: why it has no relaunch}``."""
        return {k: r.why for k, r in list(self._d.items()) if r.__class__ is _Refused}

    def close(self) -> None:
        """Close every relaunch (the owning plan is being closed)."""
        with self._lock:
            items = list(self._d.values())
            self._d.clear()
        for r in items:
            if r.__class__ is KernelRelaunch:
                r.close()

    def __len__(self) -> int:
        return sum(1 for r in list(self._d.values()) if r.__class__ is KernelRelaunch)

    def __repr__(self) -> str:
        out = {"recorded": 0, "refused": 0, "pending": 0, "failed": 0, "threads": 0,
               "reasons": {}}
        summarise(self, out)
        return (f"<RelaunchSlots: {out['recorded']} recorded, {out['refused']} refused, "
                f"{out['failed']} failed, {out['pending']} pending>")


def summarise(slots: RelaunchSlots, out: dict) -> None:
    """Add ``slots``' call shapes to the counts of ``out`` (see
    :meth:`cudalibs.runtime.cache.PlanCache.info`)."""
    for key, r in list(slots._d.items()):
        if r.__class__ is KernelRelaunch:
            out["recorded"] += 1
            out["threads"] += r.threads
        elif r.__class__ is _Refused:
            out["failed" if r.failed else "refused"] += 1
            out["reasons"][r.why] = out["reasons"].get(r.why, 0) + 1
        else:
            out["pending"] += 1
