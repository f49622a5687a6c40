"""The descriptors of the RNN plan (dropout, the RNN itself, the data of one batch shape) and
the state a training forward leaves."""

from __future__ import annotations

import ctypes

import numpy as np

from ...driver.args import int_arg, int_tuple
from ...driver.array import to_device
from .. import _lib
from .._base import raise_for
from ..descriptors import Descriptor
from .weights import RNNSpec

__all__ = ["DropoutDescriptor", "RNNDescriptor", "RNNDataDescriptor", "RNNData", "RNNState",
           "RNN_ALGOS"]

#: algo= names -> cudnnRNNAlgo_t, in the order the candidates are offered.
RNN_ALGOS = {
    "standard": _lib.CUDNN_RNN_ALGO_STANDARD,
    "persist_static": _lib.CUDNN_RNN_ALGO_PERSIST_STATIC,
    "persist_static_small_h": _lib.CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H,
    "persist_dynamic": _lib.CUDNN_RNN_ALGO_PERSIST_DYNAMIC,
}


# The padding symbol of the data descriptors: zero bits read as the data's type (8 bytes
# cover every type); kept for the process, as cuDNN may read it after the set call.
_ZERO_FILL = ctypes.c_double(0.0)


# -- descriptors ----------------------------------------------------------------------------------
class DropoutDescriptor(Descriptor):
    """``cudnnDropoutDescriptor_t``: the inter-layer dropout of an RNN and its random states.

    Parameters
    ----------
    handle : cudnnHandle_t
        Initialises the states (a kernel on the handle's stream).
    p : float
        Probability of dropping an element (0: no dropout, no states).
    seed : int
    states : DeviceArray, optional
        ``cudnnDropoutGetStatesSize`` bytes; kept alive by the descriptor.
    """

    __slots__ = ("_states", "_handle")
    _kind = "Dropout"

    def __init__(self, handle, p: float, seed: int, states=None):
        op = "DropoutDescriptor"
        if not isinstance(handle, _lib.cudnnHandle_t) or not handle:
            raise TypeError(f"{op}: handle must be a live cudnnHandle_t (a cuDNN handle's raw), "
                            f"not {handle!r}")
        try:
            p = float(p)
        except (TypeError, ValueError):
            raise TypeError(f"{op}: p must be a number, not {p!r}") from None
        seed = int_arg(seed, f"{op}: seed")
        self._states = states
        self._handle = handle
        try:
            super().__init__((p, seed))
        finally:
            self._handle = None       # only the set call needs it

    def _set(self, L, raw, p, seed):
        states = self._states
        ptr, size = (states.address, states.nbytes) if states is not None else (None, 0)
        st = L.cudnnSetDropoutDescriptor(raw, self._handle, p, ptr, size, seed)
        if st:
            raise_for(st, "cudnnSetDropoutDescriptor", f"dropout {p}, {size} bytes of states")

    def _describe(self) -> str:
        p, seed = self._key
        return f"p={p:g} seed={seed}"


class RNNDescriptor(Descriptor):
    """``cudnnRNNDescriptor_t`` of one algorithm for an :class:`~.rnn_weights.RNNSpec`.

    Made with ``cudnnSetRNNDescriptor_v8``: linear input, double bias (none without
    ``bias``), ``projSize`` the projection size or ``hiddenSize`` (cuDNN's "no projection"),
    padded input and output enabled (the unpacked layouts need it).  No GPU is needed.
    """

    __slots__ = ("_dropout",)
    _kind = "RNN"

    def __init__(self, spec: RNNSpec, algo: int, dropout: DropoutDescriptor | None = None):
        if not isinstance(spec, RNNSpec):
            raise TypeError(f"RNNDescriptor: spec must be an RNNSpec (from rnn_spec), not "
                            f"{type(spec).__name__}")
        algo = int_arg(algo, "RNNDescriptor: algo")
        self._dropout = dropout       # the descriptor refers to it: keep it alive
        bias = _lib.CUDNN_RNN_DOUBLE_BIAS if spec.bias else _lib.CUDNN_RNN_NO_BIAS
        dirs = _lib.CUDNN_BIDIRECTIONAL if spec.dirs == 2 else _lib.CUDNN_UNIDIRECTIONAL
        super().__init__((algo, spec.cell, bias, dirs, spec.data_type, spec.math_prec,
                          spec.math_type, spec.input_size, spec.hidden_size, spec.out_size,
                          spec.num_layers, _lib.CUDNN_RNN_PADDED_IO_ENABLED))

    def _set(self, L, raw, algo, cell, bias, dirs, dt, prec, mtype, inp, hid, proj, layers,
             aux):
        drop = self._dropout.raw if self._dropout is not None else None
        st = L.cudnnSetRNNDescriptor_v8(raw, algo, cell, bias, dirs, _lib.CUDNN_LINEAR_INPUT,
                                        dt, prec, mtype, inp, hid, proj, layers, drop, aux)
        if st:
            raise_for(st, "cudnnSetRNNDescriptor_v8", f"key {self._key}")

    def read(self) -> dict:
        """What cuDNN holds (``cudnnGetRNNDescriptor_v8``), by parameter name."""
        names = ("algo", "cellMode", "biasMode", "dirMode", "inputMode", "dataType",
                 "mathPrec", "mathType", "inputSize", "hiddenSize", "projSize", "numLayers")
        vals = [ctypes.c_int() for _ in names]
        drop, aux = _lib.cudnnDropoutDescriptor_t(), ctypes.c_uint32()
        st = _lib.get().cudnnGetRNNDescriptor_v8(self.raw, *map(ctypes.byref, vals),
                                                 ctypes.byref(drop), ctypes.byref(aux))
        if st:
            raise_for(st, "cudnnGetRNNDescriptor_v8")
        out = {n: v.value for n, v in zip(names, vals)}
        out["auxFlags"] = aux.value
        out["dropoutDesc"] = ctypes.cast(drop, ctypes.c_void_p).value
        return out

    def _describe(self) -> str:
        algo = next((k for k, v in RNN_ALGOS.items() if v == self._key[0]), self._key[0])
        return f"{algo} {self._key[1:]}"


class RNNDataDescriptor(Descriptor):
    """``cudnnRNNDataDescriptor_t``: a padded batch of sequences (unpacked layout).

    Parameters
    ----------
    dtype : int
        ``cudnnDataType_t``.
    layout : int
        ``cudnnRNNDataLayout_t``.
    seq_len, batch, vector_size : int
    lengths : tuple of int
        Valid steps of each sequence; padded outputs are written as zeros.
    """

    __slots__ = ()
    _kind = "RNNData"

    def __init__(self, dtype: int, layout: int, seq_len: int, batch: int, vector_size: int,
                 lengths):
        op = "RNNDataDescriptor"
        key = tuple(int_arg(v, f"{op}: {n}") for v, n in (
            (dtype, "dtype"), (layout, "layout"), (seq_len, "seq_len"), (batch, "batch"),
            (vector_size, "vector_size")))
        lengths = int_tuple(lengths, f"{op}: lengths", scalar=False)
        if len(lengths) != key[3]:
            raise ValueError(f"{op}: lengths has {len(lengths)} entries for a batch of {key[3]}")
        super().__init__(key + (lengths,))

    def _set(self, L, raw, dtype, layout, seq_len, batch, vec, lengths):
        arr = (ctypes.c_int * batch)(*lengths)
        st = L.cudnnSetRNNDataDescriptor(raw, dtype, layout, seq_len, batch, vec, arr,
                                         ctypes.addressof(_ZERO_FILL))
        if st:
            raise_for(st, "cudnnSetRNNDataDescriptor",
                      f"layout {layout}, T={seq_len}, B={batch}, {vec} features")

    def _describe(self) -> str:
        dt, layout, t, b, vec, lengths = self._key
        return f"T={t} B={b} F={vec} layout={layout} lengths={lengths[:8]}"


class RNNData:
    """One batch shape: the ``x`` and ``y`` data descriptors and the sequence lengths on the
    device (``cudnnRNNForward`` reads them there, asynchronously).  Immutable once built."""

    __slots__ = ("x_desc", "y_desc", "x_raw", "y_raw", "dev_lengths", "lengths_ptr", "padded",
                 "__weakref__")

    def __init__(self, dtype, layout, t, b, x_size, y_size, lengths, device, stream):
        full = lengths if lengths is not None else (t,) * b
        self.x_desc = RNNDataDescriptor(dtype, layout, t, b, x_size, full)
        self.y_desc = RNNDataDescriptor(dtype, layout, t, b, y_size, full)
        self.x_raw, self.y_raw = self.x_desc.raw, self.y_desc.raw
        self.dev_lengths = to_device(np.asarray(full, dtype=np.int32), device=device,
                                     stream=stream)
        self.lengths_ptr = self.dev_lengths.address
        self.padded = lengths is not None
        stream.sync()       # shared by every stream from now on

    def usable(self) -> bool:
        """Whether both descriptors are open (what the plan cache asks)."""
        return not (self.x_desc.closed or self.y_desc.closed)

    def close(self) -> None:
        self.x_desc.close()
        self.y_desc.close()


# -- the state a training forward leaves -----------------------------------------------------------
class RNNState:
    """What a training :meth:`RNN.forward` leaves for :meth:`RNN.backward_data` and
    :meth:`RNN.backward_weights`: the reserve space and the forward's operands.

    Attributes
    ----------
    reserve : DeviceArray
        cuDNN's reserve space (uint8), written by the forward, read and updated by the
        backward passes.
    x, hx, cx, y : DeviceArray or None
        The forward's input, initial states and output (referenced, not copied: leave them
        unchanged until the backward passes have run).
    algo : str
        The algorithm the forward ran (the backward passes run the same).
    stage : str
        ``"forward"``, ``"backward_data"`` or ``"backward_weights"``: what has run.
    """

    __slots__ = ("plan", "index", "data", "x", "hx", "cx", "y", "reserve", "seq_len", "batch",
                 "algo", "stage")

    def __repr__(self) -> str:
        return (f"<RNNState {self.algo} T={self.seq_len} B={self.batch}, reserve "
                f"{self.reserve.nbytes} B, after {self.stage}>")
