"""CUDA graphs: capture the work queued on a stream once, replay it for a fraction of the cost.

::

    s = cudalibs.Stream()
    with cudalibs.graph.capture(s) as g:       # nothing runs: launches are recorded
        kernel.launch(grid, block, x, n, stream=s)
    exe = g.instantiate()                       # a GraphExec
    exe.replay()                                # runs every captured launch again

Anything that queues work on the capturing stream is captured: kernel launches, copies,
memsets, and (later) cuBLAS, cuDNN and NCCL calls.  The values of kernel arguments are
copied at capture, so replays run with the arguments of the capture; capture again and
:meth:`GraphExec.update` to change them without re-instantiating.

Memory allocated from a pool on the capturing stream (``cudalibs.empty(..., stream=s)``)
becomes an allocation node of the graph; close such arrays inside the capture block (a free
node), so that each replay allocates and frees them again.

Lifetime: a graph keeps the modules whose kernels it launches alive, and
:meth:`Module.close <cudalibs.driver.module.Module.close>` refuses while an executable graph
uses them.  Arrays captured by pointer are the caller's to keep alive, as with any
asynchronous launch.
"""

from __future__ import annotations

import ctypes
import os

from .._ffi import Resource
from ..errors import CudaLibsError
from . import _capture, _lib, launch as _launch
from ._core import raise_for
from .device import Device, as_device
from .stream import Stream, as_stream

__all__ = ["capture", "Graph", "GraphExec", "is_capturing", "CAPTURE_MODES"]

#: ``mode=`` of :func:`capture` -> ``CUstreamCaptureMode``.
CAPTURE_MODES = {
    "global": _lib.CU_STREAM_CAPTURE_MODE_GLOBAL,
    "thread_local": _lib.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
    "relaxed": _lib.CU_STREAM_CAPTURE_MODE_RELAXED,
}

_UPDATE_RESULTS = {
    _lib.CU_GRAPH_EXEC_UPDATE_ERROR: "the update failed for an unexpected reason",
    _lib.CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: "the graph topology changed",
    _lib.CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: "a node's type changed",
    _lib.CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED: "a kernel node's function changed",
    _lib.CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED: "a node's parameters changed in a way "
    "that cannot be updated",
    _lib.CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED: "something about a node is not supported "
    "by update",
    _lib.CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE: "a kernel's function changed "
    "in an unsupported way",
    _lib.CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED: "a node's attributes changed",
}


def is_capturing(stream=None) -> bool:
    """Whether ``stream`` (the current stream by default) is capturing into a graph."""
    s = as_stream(stream)
    return _capture_status(_lib.get(), s._h) == _lib.CU_STREAM_CAPTURE_STATUS_ACTIVE


def _capture_status(L, h) -> int:
    """The ``CUstreamCaptureStatus`` of the stream ``h``: none, active or invalidated."""
    status = ctypes.c_int()
    st = L.cuStreamIsCapturing(h, ctypes.byref(status))
    if st:
        raise_for(st, "cuStreamIsCapturing")
    return status.value


class Graph(Resource):
    """A captured CUDA graph (``CUgraph``): a template to :meth:`instantiate`.

    Made by :func:`capture`.  Destroyed by :meth:`close`, a ``with`` block or garbage
    collection; executable graphs made from it stay valid after it is closed.
    """

    __slots__ = ("_h", "_device", "_modules", "_capturing")

    def __init__(self):
        raise TypeError("make graphs with cudalibs.graph.capture(stream)")

    @classmethod
    def _empty(cls, device: Device) -> "Graph":
        self = object.__new__(cls)
        self._h = None
        self._device = device
        self._modules = set()
        self._capturing = True
        return self

    def _adopt(self, h) -> None:
        self._h = h
        self._capturing = False
        self._own(_lib.get().cuGraphDestroy, h, ctx=self._device._ctx)

    def _check(self):
        if self._capturing:
            raise CudaLibsError("the graph is still being captured: leave the capture block "
                                "first")
        self._live()
        return self._h

    @property
    def device(self) -> Device:
        return self._device

    @property
    def closed(self) -> bool:
        """Whether the graph was closed (or its capture failed); ``False`` while capturing."""
        return not self._capturing and Resource.closed.fget(self)

    @property
    def handle(self) -> int:
        """The raw ``CUgraph``."""
        return ctypes.cast(self._check(), ctypes.c_void_p).value or 0

    @property
    def raw(self):
        """The ``CUgraph`` as its ctypes handle, for the raw layer (checked open and
        captured)."""
        return self._check()

    @property
    def num_nodes(self) -> int:
        """Number of nodes (kernel launches, copies, memsets, allocations, ...)."""
        h = self._check()
        n = ctypes.c_size_t()
        st = _lib.get().cuGraphGetNodes(h, None, ctypes.byref(n))
        if st:
            raise_for(st, "cuGraphGetNodes")
        return n.value

    def instantiate(self, *, upload: bool = False, auto_free_on_launch: bool = False,
                    stream=None) -> "GraphExec":
        """Build an executable graph.

        Parameters
        ----------
        upload : bool, default False
            Upload the graph to the device at once (``cuGraphUpload`` on ``stream``) rather
            than on its first replay.  (The driver's ``CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD``
            is accepted only by ``cuGraphInstantiateWithParams``, which names a stream, so
            the upload is a separate call here.)
        auto_free_on_launch : bool, default False
            Free memory allocated by the graph and not freed in it when the graph is launched
            again (``CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH``).
        stream : Stream, optional
            Where the upload is queued when ``upload`` is true; ``None`` is the current stream.
        """
        h = self._check()
        flags = _lib.CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH if auto_free_on_launch else 0
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        e = _lib.CUgraphExec()
        st = L.cuGraphInstantiateWithFlags(ctypes.byref(e), h, flags)
        if st:
            raise_for(st, "cuGraphInstantiateWithFlags")
        exe = GraphExec._make(e, self._device, set(self._modules))
        if upload:
            exe.upload(stream)
        return exe

    def debug_dot(self, path) -> None:
        """Write the graph in Graphviz DOT form to ``path`` (``cuGraphDebugDotPrint``)."""
        h = self._check()
        st = _lib.get().cuGraphDebugDotPrint(h, os.fsencode(path), 0)
        if st:
            raise_for(st, "cuGraphDebugDotPrint", f"path {path!r}")

    def close(self) -> None:
        """Destroy the graph (executable graphs made from it remain usable). Idempotent."""
        Resource.close(self)
        self._modules = set()

    def __enter__(self) -> "Graph":
        return self   # usable as ``with capture(s) as g:`` result, also while capturing

    def __repr__(self) -> str:
        if self._capturing:
            return f"<Graph on device {self._device.ordinal}, capturing>"
        if self.closed:
            return f"<Graph on device {self._device.ordinal}, closed>"
        return f"<Graph on device {self._device.ordinal}: {self.num_nodes} nodes>"


class GraphExec(Resource):
    """An executable graph (``CUgraphExec``): :meth:`replay` it on any stream of its device."""

    __slots__ = ("_h", "_device", "_modules")

    def __init__(self):
        raise TypeError("make executable graphs with Graph.instantiate()")

    @classmethod
    def _make(cls, h, device: Device, modules: set) -> "GraphExec":
        L = _lib.get()
        self = object.__new__(cls)
        self._h = h
        self._device = device
        self._own(L.cuGraphExecDestroy, h, ctx=device._ctx)
        self._modules = set()
        self._pin(modules)
        return self

    def _pin(self, modules) -> None:
        for m in modules:
            m._pins.add(self)
        self._modules |= set(modules)

    def _check(self):
        self._live()
        return self._h

    @property
    def device(self) -> Device:
        return self._device

    @property
    def handle(self) -> int:
        """The raw ``CUgraphExec``."""
        return ctypes.cast(self._check(), ctypes.c_void_p).value or 0

    def replay(self, stream=None) -> None:
        """Launch the whole graph on ``stream`` (the current stream by default)."""
        h = self._check()
        s = as_stream(stream, self._device)
        st = _lib.get().cuGraphLaunch(h, s._h)
        if st:
            raise_for(st, "cuGraphLaunch")

    launch = replay

    def upload(self, stream=None) -> None:
        """Upload the graph's work to the device ahead of the first replay."""
        h = self._check()
        s = as_stream(stream, self._device)
        st = _lib.get().cuGraphUpload(h, s._h)
        if st:
            raise_for(st, "cuGraphUpload")

    def update(self, graph: Graph) -> None:
        """Take the parameters of ``graph`` (same topology, e.g. a capture of the same launches
        with other arguments) without re-instantiating.

        Raises
        ------
        CudaError
            ``CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE`` with the reason (topology changed, a
            kernel's function changed, ...): instantiate ``graph`` instead.
        """
        if not isinstance(graph, Graph):
            raise TypeError(f"update takes a Graph, not {type(graph).__name__}")
        h = self._check()
        gh = graph._check()
        if graph._device is not self._device:
            raise ValueError(f"the graph is on device {graph._device.ordinal}, this executable "
                             f"graph on device {self._device.ordinal}")
        info = _lib.CUgraphExecUpdateResultInfo()
        L = _lib.get()
        L.cuCtxSetCurrent(self._device._ctx)
        st = L.cuGraphExecUpdate_v2(h, gh, ctypes.byref(info))
        if st:
            why = _UPDATE_RESULTS.get(info.result, f"update result {info.result}")
            raise_for(st, "cuGraphExecUpdate_v2", f"{why}; instantiate the new graph instead")
        self._pin(graph._modules)

    def close(self) -> None:
        """Destroy the executable graph. Idempotent."""
        Resource.close(self)
        for m in self._modules:
            m._pins.discard(self)
        self._modules = set()

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"<GraphExec on device {self._device.ordinal}{state}>"


class capture:
    """Capture the work queued on ``stream`` into a :class:`Graph`.

    ``with capture(stream) as g:`` begins capturing on entry and ends on exit, after which
    ``g`` is a complete :class:`Graph`.

    Parameters
    ----------
    stream : Stream
        A non-default stream (the legacy default stream cannot be captured).
    mode : {"thread_local", "global", "relaxed"}, default "thread_local"
        Where potentially unsafe calls (synchronous allocation or free, legacy-stream work,
        ...) invalidate the capture (``CUstreamCaptureMode``): ``"thread_local"``, only in
        the capturing thread, so that service threads of other libraries (NCCL's proxy
        threads, a framework's allocator) cannot break it; ``"global"``, in any thread;
        ``"relaxed"``, nowhere.  Frees and destroys that cudalibs' own finalizers would make
        during the block wait until it ends, whatever the mode.

    Notes
    -----
    An error or an interruption (``KeyboardInterrupt``) while the block is entered or left
    ends the stream's capture, discards what was captured and lets the held frees run before
    it propagates, so the stream and the process are left as they were before the block.

    Raises
    ------
    ValueError
        The default stream, or an unknown mode.
    CudaError
        The capture was invalidated (for example by a synchronising call on the stream):
        ``CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`` at the end of the block.
    """

    __slots__ = ("_stream", "_mode", "_graph", "_sink", "_before")

    def __init__(self, stream: Stream, mode: str = "thread_local"):
        if stream is None:
            raise ValueError("capture needs an explicit non-default stream "
                             "(cudalibs.Stream())")
        s = as_stream(stream, what="capture: stream")
        if s.is_default:
            raise ValueError("the default stream cannot be captured: use a cudalibs.Stream()")
        try:
            self._mode = CAPTURE_MODES[mode]
        except (KeyError, TypeError):
            raise ValueError(f"mode must be one of {', '.join(CAPTURE_MODES)}, not {mode!r}") \
                from None
        self._stream = s
        self._graph = None
        self._sink = None
        self._before = 0

    # Entry and exit keep three things paired whatever interrupts them (a KeyboardInterrupt
    # can arrive after any call returns): the driver's capture on the stream, this block's
    # hold on the process-wide gate that defers frees (held by name, see
    # begin_capture_block), and the module sink.  Every step sits inside ``except
    # BaseException``, and _unwind reads what actually happened (the stream's capture
    # status, whether the gate is held) rather than trusting how far the code got.
    def __enter__(self) -> Graph:
        if self._graph is not None:
            raise CudaLibsError("this capture block was already used; call capture() again")
        s = self._stream
        dev = s._device if s._device is not None else as_device(None)
        h = s._check()
        L = _lib.get()
        L.cuCtxSetCurrent(dev._ctx)
        # A capture that was open before (someone else's) is never ended here.
        self._before = _capture_status(L, h)
        self._graph = Graph._empty(dev)
        self._sink = set()
        try:
            # The gate first: from the moment the capture begins, a finalizer's free must wait.
            _capture.begin(self)
            _launch.add_capture_sink(self._sink)
            st = L.cuStreamBeginCapture_v2(h, self._mode)
            if st:
                raise_for(st, "cuStreamBeginCapture_v2")
        except BaseException:
            self._unwind(L, _lib.CUgraph())
            raise
        return self._graph

    def __exit__(self, exc_type, exc, tb) -> None:
        g = self._graph
        if g is None or not g._capturing:
            return None        # never entered, or already finished
        L = _lib.get()
        made = _lib.CUgraph()
        try:
            _launch.remove_capture_sink(self._sink)
            st = L.cuStreamEndCapture(self._stream._h, ctypes.byref(made))
            # The capture has ended: the frees that waited for it run now.
            _capture.end(self)
            if exc_type is None and not st:
                g._modules = self._sink
                g._adopt(made)
                return None
            g._capturing = False
            if made:
                # The block failed: discard whatever was captured.  The handle is cleared
                # before the destroy so that an interruption cannot destroy it twice.
                dead, made = made, _lib.CUgraph()
                L.cuGraphDestroy(dead)
            if exc_type is not None:
                return None    # let the block's error through
            raise_for(st, "cuStreamEndCapture",
                      "a call during the capture invalidated it (a synchronisation, or work "
                      "from another stream joined without an event)" if st == 901 else None)
        except BaseException:
            self._unwind(L, made)
            raise

    def _unwind(self, L, made) -> None:
        """Leave nothing of a block that failed or was interrupted: end the stream's capture
        if it is still open, destroy a graph that was made and not handed over, and release
        the gate (which runs the frees that waited).  Each step runs even when the one before
        it is interrupted; errors of the driver here never hide the error being raised."""
        g = self._graph
        g._capturing = False
        try:
            try:
                _launch.remove_capture_sink(self._sink)
                h = self._stream._h
                if not self._before and _capture_status(L, h):
                    L.cuStreamEndCapture(h, ctypes.byref(made))
            except Exception:   # noqa: BLE001 - the error being raised is the one to report
                pass
            finally:
                # A graph handed to ``g`` (``_h`` set) is g's to destroy, never ours.
                if made and g._h is None:
                    try:
                        L.cuGraphDestroy(made)
                    except Exception:   # noqa: BLE001 - as above
                        pass
        finally:
            _capture.end(self)
