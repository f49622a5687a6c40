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
probe addresses are never dereferenced: nothing captured is run.  The caller must only
relaunch with addresses at least as aligned as it declared.

Threads: each thread launches through an executable graph of its own (made on its first
launch), so threads never share per-call state and launches of different threads on different
streams stay independent.
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from ctypes import byref, c_int, c_size_t, c_void_p

from .._ffi import Resource, capture_open
from . import _lib
from .device import Device
from .graph import capture
from .stream import Stream

__all__ = ["record", "KernelRelaunch", "RelaunchSlots", "capture_stream", "ENABLED",
           "WORKSPACE_ALIGN"]

#: Whether libraries may use recorded relaunches (``CUDALIBS_RELAUNCH=0`` turns them off).
ENABLED = os.environ.get("CUDALIBS_RELAUNCH", "1").strip() not in ("0", "false", "no", "off")

_KERNEL_NODE, _MEMSET_NODE = 0, 2     # CU_GRAPH_NODE_TYPE_KERNEL / _MEMSET
_MAX_NODES = 4                       # a GEMM: a kernel, a split-K reduction, a memset or two
_PARAM_END, _PARAM_BUFFER, _PARAM_SIZE = 0, 1, 2     # CU_LAUNCH_PARAM_*
_SPAN = 4096                         # probe addresses: the second set is aligned to this
_MAX_OFFSET = 1 << 31                # an address plus more than this is no operand address
#: The alignment library workspaces have (pool blocks have at least this); relaunches are
#: recorded for, and used with, workspaces this aligned.
WORKSPACE_ALIGN = 256

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
    if L.cuGraphGetNodes(graph._h, None, byref(n)):
        return "cuGraphGetNodes failed"
    if not 0 < n.value <= _MAX_NODES:
        return f"the call recorded {n.value} graph nodes"
    nodes = (_lib.CUgraphNode * n.value)()
    if L.cuGraphGetNodes(graph._h, nodes, byref(n)):
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


def record(device: Device, enqueue, bases, aligns, *, name: str = "kernel"):
    """Record a library call for relaunching.

    Parameters
    ----------
    device : Device
    enqueue : callable
        ``enqueue(stream, addresses)`` queues the call on ``stream`` with these operand
        addresses (a tuple like ``bases``), raising if the library refuses.
    bases : tuple of int
        The operand addresses of a real call; the probe addresses are placed near them.
    aligns : tuple of int
        The alignment (a power of two, below 4096) each operand address will have at every
        relaunch.
    name : str
        What the call is, for the repr.

    Returns
    -------
    KernelRelaunch or str
        The relaunch, or why the call cannot be relaunched.
    """
    if not ENABLED:
        return "relaunching is turned off (CUDALIBS_RELAUNCH=0)"
    if capture_open():
        return "a graph capture is open"
    L = _lib.get()
    if "cuFuncGetParamInfo" in L.missing:
        return "the driver has no cuFuncGetParamInfo (CUDA 12.4)"
    roots = [b - b % _SPAN for b in bases]
    set1 = tuple(r + a for r, a in zip(roots, aligns))
    set2 = tuple(r + _SPAN * (i + 1) for i, r in enumerate(roots))
    cs = capture_stream(device)
    graphs, recs = [], []
    try:
        for probe in (set1, set2):
            with capture(cs) as g:
                graphs.append(g)
                enqueue(cs, probe)
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
        return KernelRelaunch._make(device, keep, r1, places, name)
    finally:
        for g in graphs:
            g.close()


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
                 "_set_kernel", "_set_memset", "_launch", "name")

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

    def _thread_state(self) -> _ThreadState:
        """This thread's executable graph and parameter blocks (made on its first launch)."""
        self._live()
        t = _ThreadState()
        t.exec = self._graph.instantiate()
        self._execs.add(t.exec)
        t.raw = c_void_p(t.exec.handle)
        t.nodes = []
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
            t.nodes.append(ns)
        t.last = None
        self._tls.state = t
        return t

    def launch(self, addresses: tuple, stream_h) -> int:
        """Launch the call with these operand addresses on raw stream ``stream_h``.

        The caller has checked the addresses' alignment, that no capture is open and that the
        context is current.  Returns the CUDA status (0 on success).
        """
        if not self._alive[0]:
            self._live()
        try:
            t = self._tls.state
        except AttributeError:
            t = self._thread_state()
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
                        st = self._set_memset(t.raw, rec.node, ns.ref, self._device._ctx)
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

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.patched_words} address words"
        kinds = "+".join("kernel" if r.kind == _KERNEL_NODE else "memset" for r in self._recs)
        return (f"<KernelRelaunch {self.name} on device {self._device.ordinal}: {kinds}, "
                f"{sum(len(r.blob) for r in self._recs)}-byte parameters, {state}>")


class RelaunchSlots:
    """The relaunches of one plan, by call shape (which optional pointers a call passes, ...).

    A call shape is recorded on its second call, so a one-off call pays nothing; a refusal is
    remembered (:meth:`why`) and the library call kept for that shape.  Bounded: at most
    :attr:`MAX` shapes.  Closed with the plan that owns it.
    """

    MAX = 16

    __slots__ = ("_d", "_why", "_lock")

    def __init__(self):
        self._d: dict = {}          # key -> calls seen (1, 2 while recording), a relaunch, False
        self._why: dict = {}
        self._lock = threading.Lock()

    def get(self, key) -> KernelRelaunch | None:
        """The relaunch of this call shape, if it has one (the hot path: one lookup)."""
        r = self._d.get(key)
        return r if r.__class__ is KernelRelaunch else None

    def due(self, key) -> bool:
        """Count a call of a shape without a relaunch; True on the one call that should
        :meth:`record` it (its second)."""
        r = self._d.get(key)
        if r is False or r == 2:    # refused, or being recorded: no lock on this path
            return False
        with self._lock:
            r = self._d.get(key)
            if r is None:
                if len(self._d) < self.MAX:
                    self._d[key] = 1
                return False
            if r == 1:
                self._d[key] = 2
                return True
            return False

    def record(self, key, device: Device, enqueue, bases, aligns, *, name: str):
        """:func:`record` the call shape ``key``; the relaunch, or None (the reason kept)."""
        try:
            r = record(device, enqueue, bases, aligns, name=name)
        except Exception as exc:    # noqa: BLE001 - any failure keeps the library call
            r = f"recording failed: {exc}"
        with self._lock:
            if isinstance(r, str):
                self._why[key] = r
                self._d[key] = False
                return None
            self._d[key] = r
            return r

    def state(self, key):
        """The relaunch of ``key``, the reason it has none, or None when not recorded yet."""
        r = self._d.get(key)
        if r.__class__ is KernelRelaunch:
            return r
        return self._why.get(key)

    def reasons(self) -> dict:
        """``{call shape: why it has no relaunch}``."""
        return dict(self._why)

    def close(self) -> None:
        """Close every relaunch (the owning plan is being closed)."""
        with self._lock:
            items = list(self._d.values())
            self._d.clear()
        for r in items:
            if r.__class__ is KernelRelaunch:
                r.close()

    def __len__(self) -> int:
        return sum(1 for r in self._d.values() if r.__class__ is KernelRelaunch)

    def __repr__(self) -> str:
        return f"<RelaunchSlots: {len(self)} recorded, {len(self._why)} refused>"
