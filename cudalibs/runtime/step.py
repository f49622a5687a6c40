"""A step of work -- a training step, an inference step -- captured once and replayed.

A training loop runs the same work on every batch: the same kernels, cuBLAS and cuDNN calls
on the same buffers, only the batch's values differ.  :class:`StepGraph` runs that work once
as a CUDA graph per batch: it copies the batch into *static* input buffers, launches the
graph, and hands back *static* outputs, so a whole forward, backward and optimizer update
costs one ``cuGraphLaunch`` of host time instead of hundreds of library calls.

The protocol, and why:

1. **Warm-up, eagerly.**  The function runs ``warmup`` times on the step's stream before it
   is captured.  That is when plans are found (heuristics, autotuning), library handles are
   made and workspaces grow -- none of which can be recorded into a graph: each of those
   raises :class:`~cudalibs.errors.CaptureError` naming itself if first met during the
   capture.  It also tells the outputs' shapes and dtypes.
2. **Capture.**  The function is called once more inside :func:`~cudalibs.graph.capture`, on
   the static inputs: its work is recorded, not run (the parameters are updated by the
   warm-up and by each replay only).  Its temporaries come from the stream-ordered pool and are freed inside the
   capture, so they become allocation and free nodes of the graph; its outputs are copied into
   static output buffers allocated before the capture, so that the graph owns no memory that
   outlives a replay and can be launched again and again.
3. **Replay.**  :meth:`StepGraph.__call__` copies each new input into its static buffer
   (device-to-device, or host-to-device from a numpy array) on the step's stream and
   launches the graph there.

What the function reads and writes besides its inputs -- parameters, optimizer state, a step
counter kept on the device -- is captured by address: updated in place on every replay, like
any asynchronous work.  Values the host computes while the function runs (a Python float
learning rate, a step count held in Python) are frozen into the graph at capture; keep such
values in device arrays and update them with a kernel (or a copy) inside the step, or copy
new values into them before each call.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .._ffi import Resource
from ..driver import graph as _graph
from ..driver.array import DeviceArray, empty
from ..driver.device import as_device
from ..driver.stream import Stream, as_stream
from .operand import operand

__all__ = ["StepGraph", "capture_step"]


def _flatten(result) -> tuple[list[DeviceArray], Any]:
    """The arrays a step returned, and how to rebuild its structure from them."""
    if result is None:
        return [], None
    if type(result) is DeviceArray:
        return [result], "one"
    if isinstance(result, (tuple, list)):
        kind = type(result)
        return list(result), kind
    if isinstance(result, dict):
        return list(result.values()), ("dict", tuple(result))
    raise TypeError(f"StepGraph: the step function must return None, a DeviceArray, or a "
                    f"tuple, list or dict of them, not {type(result).__name__}")


def _copy_all(srcs, dsts, s) -> None:
    # A function, so that no loop variable outlives the copies and keeps an output alive.
    for src, dst in zip(srcs, dsts):
        dst.copy_(src, s)


def _rebuild(arrays: list[DeviceArray], structure):
    if structure is None:
        return None
    if structure == "one":
        return arrays[0]
    if isinstance(structure, tuple):
        return dict(zip(structure[1], arrays))
    return structure(arrays)


class StepGraph(Resource):
    """``fn(*inputs)`` captured into a CUDA graph, replayed per call on new inputs.

    Parameters
    ----------
    fn : callable
        The step: takes DeviceArrays (one per input), queues its work on the current stream
        (every cudalibs call's ``stream=None``), and returns None, a DeviceArray, or a
        tuple, list or dict of DeviceArrays (a loss kept on the device, say).  It must not
        read device values on the host.
    *inputs : array-like
        Example inputs (device arrays, or host numpy arrays, copied to the device): they fix
        the shapes and dtypes of the static input buffers, and the warm-up and the capture
        run on copies of them.
    stream : Stream, optional
        The non-default stream the step is captured and replayed on; a new one by default.
    warmup : int, default 1
        Eager runs before the capture, at least 1 (they update parameters like any step).
    device : Device or int, optional
        Where the static inputs live when every example input is on the host; by default the
        device of the first device input, or the current device.
    mode : {"thread_local", "global", "relaxed"}, default "thread_local"
        The capture mode (see :func:`cudalibs.graph.capture`).

    Attributes
    ----------
    inputs : tuple of DeviceArray
        The static input buffers; writing into them directly and calling :meth:`replay` is
        the same as calling the step with those values.
    outputs
        The static outputs, in the structure ``fn`` returns; overwritten by every call.
    stream : Stream
    replays : int
        How many times the graph was launched.

    Raises
    ------
    CaptureError
        Something in ``fn`` cannot be captured (named in the message) and was not done during
        the warm-up.
    TypeError, ValueError
        Bad inputs, a bad ``warmup`` or stream, or ``fn`` returned something other than
        device arrays.

    Examples
    --------
    >>> step = cudalibs.StepGraph(train_step, x0, y0)     # doctest: +SKIP
    >>> for x, y in batches:                               # doctest: +SKIP
    ...     loss = step(x, y)           # one graph launch; loss is a static device array
    """

    __slots__ = ("fn", "stream", "inputs", "outputs", "replays", "_out_list", "_graph",
                 "_exec", "_device", "_name")

    def __init__(self, fn: Callable, *inputs, stream=None, warmup: int = 1, device=None,
                 mode: str = "thread_local"):
        _check_callable(fn, "StepGraph")
        if type(warmup) is not int or warmup < 1:
            # The warm-up finds the plans and workspaces the capture cannot make, and tells
            # the outputs' shapes, so that their buffers exist before the capture.
            raise ValueError(f"StepGraph: warmup must be an int >= 1, got {warmup!r}")
        if mode not in _graph.CAPTURE_MODES:
            raise ValueError(f"StepGraph: mode must be one of {', '.join(_graph.CAPTURE_MODES)}, "
                             f"not {mode!r}")
        self.fn = fn
        self._name = getattr(fn, "__qualname__", None) or type(fn).__name__
        dev = None if device is None else as_device(device)
        if dev is None:
            for x in inputs:
                if not isinstance(x, np.ndarray):
                    dev = operand(x, "inputs[0]", "StepGraph").device
                    break
        if stream is None:
            if dev is None:
                dev = as_device(None)
            s = Stream(device=dev)
        else:
            s = as_stream(stream, dev)
            if s.is_default:
                raise ValueError("StepGraph: the default stream cannot be captured; pass a "
                                 "cudalibs.Stream() or leave stream=None")
            dev = s.device if s.device is not None else (dev or as_device(None))
        self._device = dev
        self.stream = s
        statics = []
        for i, x in enumerate(inputs):
            if isinstance(x, np.ndarray):
                buf = empty(x.shape, x.dtype, device=dev, stream=s)
            else:
                x = operand(x, f"inputs[{i}]", "StepGraph", device=dev)
                buf = empty(x.shape, x.dtype, device=dev, stream=s)
            buf.copy_(x, s)
            statics.append(buf)
        self.inputs = tuple(statics)
        self.replays = 0
        with s:
            for _ in range(warmup):
                result = fn(*self.inputs)
        outs, structure = _flatten(result)
        self._check_outputs(outs)
        # The static outputs are ordinary pool memory, allocated outside the capture: the
        # graph copies its results into them, so it frees every allocation it makes and can be
        # launched again without freeing anything first.
        static_outs = [empty(o.shape, o.dtype, device=dev, stream=s) for o in outs]
        # Until the first replay the outputs hold the last warm-up's values (the capture
        # records the step without running it).
        _copy_all(outs, static_outs, s)
        del result, outs
        # Everything the warm-up queued (and the frees it made) finishes before the capture,
        # so that the graph's pool allocations do not wait on eager work.
        s.synchronize()
        with _graph.capture(s, mode) as g:
            with s:
                result = fn(*self.inputs)
            outs, _ = _flatten(result)
            if len(outs) != len(static_outs) or any(
                    o.shape != t.shape or o.dtype != t.dtype
                    for o, t in zip(outs, static_outs)):
                raise ValueError("StepGraph: the step returned other outputs during the "
                                 "capture than during the warm-up")
            _copy_all(outs, static_outs, s)
            # The step's own outputs must be freed inside the capture (free nodes): memory the
            # graph allocates and does not free would forbid launching it again.
            del result, outs
        self._graph = g
        self._exec = g.instantiate(upload=True, stream=s)
        self._out_list = static_outs
        self.outputs = _rebuild(static_outs, structure)
        self._borrow()

    @staticmethod
    def _check_outputs(outs) -> None:
        for i, o in enumerate(outs):
            if type(o) is not DeviceArray:
                raise TypeError(f"StepGraph: output {i} of the step is a "
                                f"{type(o).__name__}, not a DeviceArray")

    # -- running ----------------------------------------------------------------------------
    def __call__(self, *inputs):
        """Copy ``inputs`` into the static buffers, replay the step, return :attr:`outputs`.

        Each input must have the shape and dtype of its static buffer (host numpy arrays are
        copied host-to-device; the static buffer itself is not copied).  The outputs are the
        same static arrays on every call: copy one to keep its value past the next call.
        """
        self._live()
        if len(inputs) != len(self.inputs):
            raise TypeError(f"StepGraph({self._name}) takes {len(self.inputs)} inputs, got "
                            f"{len(inputs)}")
        s = self.stream
        for i, (x, buf) in enumerate(zip(inputs, self.inputs)):
            if x is buf:
                continue
            if isinstance(x, np.ndarray):
                if x.shape != buf.shape or x.dtype != buf.dtype:
                    raise ValueError(f"StepGraph({self._name}): input {i} is {x.shape} "
                                     f"{x.dtype}, the captured step takes {buf.shape} "
                                     f"{buf.dtype}")
            else:
                x = operand(x, f"inputs[{i}]", f"StepGraph({self._name})",
                            device=self._device)
                if x.shape != buf.shape or x.dtype != buf.dtype:
                    raise ValueError(f"StepGraph({self._name}): input {i} is {x.shape} "
                                     f"{x.dtype}, the captured step takes {buf.shape} "
                                     f"{buf.dtype}")
            buf.copy_(x, s)
        self._exec.replay(s)
        self.replays += 1
        return self.outputs

    def replay(self):
        """Launch the step on the values already in :attr:`inputs`; returns :attr:`outputs`."""
        self._live()
        self._exec.replay(self.stream)
        self.replays += 1
        return self.outputs

    @property
    def num_nodes(self) -> int:
        """Nodes of the captured graph (kernels, copies, memsets, allocations, frees)."""
        self._live()
        return self._graph.num_nodes

    @property
    def device(self):
        return self._device

    def close(self) -> None:
        """Free the graph and its executable form (the static buffers go with this object)."""
        if not self.closed:
            self._exec.close()
            self._graph.close()
        super().close()

    def __repr__(self) -> str:
        def desc(a):
            return f"{tuple(a.shape)} {a.dtype}"
        ins = ", ".join(desc(a) for a in self.inputs)
        if self.closed:
            return f"<StepGraph {self._name}, closed>"
        outs = ", ".join(desc(a) for a in self._out_list) or "none"
        return (f"<StepGraph {self._name}: inputs [{ins}], outputs [{outs}], "
                f"{self._graph.num_nodes} nodes, {self.replays} replays, "
                f"device {self._device.ordinal}>")


def _check_callable(fn, op: str) -> None:
    """Refuse an ``fn`` that cannot be called, in ``op``'s name, before any capture."""
    if not callable(fn):
        raise TypeError(f"{op}: fn must be callable, not {type(fn).__name__}")


def capture_step(fn: Callable, *inputs, stream=None, warmup: int = 1, device=None,
                 mode: str = "thread_local") -> StepGraph:
    """Capture ``fn(*inputs)`` into a replayable :class:`StepGraph` (see there)."""
    _check_callable(fn, "capture_step")
    return StepGraph(fn, *inputs, stream=stream, warmup=warmup, device=device, mode=mode)
