"""The problem of a recurrent layer and its weight space, PyTorch's parameters as views into it.

:func:`rnn_spec` checks the options of :class:`~cudalibs.cudnn.rnn.RNN` in Python, before any
C call, and works out every size and enum the cuDNN calls take.  :class:`RNNWeights` is one
device buffer (cuDNN's *weight space*) with a view for every parameter, named and shaped as
``torch.nn.LSTM`` / ``GRU`` / ``RNN`` name and shape theirs (``weight_ih_l0`` ``(G*H, in)``,
``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, ``weight_hr_l0``, ``..._reverse``), so a
module's ``state_dict()`` loads with one copy per tensor and gradients come back under the same
names.

Where each parameter lies is asked of cuDNN (``cudnnGetRNNWeightParams``, per pseudo-layer --
``layer * D + direction`` -- and per linear layer: LSTM ``0..3`` the input matrices of the
``i, f, g, o`` gates, ``4..7`` the recurrent ones, ``8`` the projection; GRU ``0..2`` / ``3..5``
for ``r, z, n``; Elman ``0`` / ``1``), and each gate's matrices (and biases) must follow one
another in PyTorch's gate order, so that ``weight_ih`` is one contiguous ``(G*H, in)`` block.
That is the layout PyTorch's own cuDNN path relies on; a library that laid them out otherwise
is refused with the offsets it reported, not misread.
"""

from __future__ import annotations

import ctypes
import math
import operator
from collections.abc import Mapping

import numpy as np

from ... import dtypes as _dtypes
from ...driver.array import DeviceArray
from ...errors import CudaLibsError
from ...runtime.operand import operand
from .. import _lib
from .._base import raise_for
from ..descriptors import MATH_TYPES, TensorDescriptor, cudnn_dtype

__all__ = ["RNN_MODES", "RNN_DTYPES", "RNN_MATH", "RNNSpec", "rnn_spec", "RNNWeights",
           "weight_layout"]

#: mode= names -> (cudnnRNNMode_t, gates per weight matrix).
RNN_MODES = {
    "lstm": (_lib.CUDNN_LSTM, 4),
    "gru": (_lib.CUDNN_GRU, 3),
    "rnn_tanh": (_lib.CUDNN_RNN_TANH, 1),
    "rnn_relu": (_lib.CUDNN_RNN_RELU, 1),
}

#: Data types of the RNN calls; each computes in float32 (float64 in float64).
RNN_DTYPES = ("float32", "float16", "bfloat16", "float64")

#: math= names -> cudnnMathType_t: the convolutions' names.
RNN_MATH = MATH_TYPES

_KINDS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr")


def _positive(value, name) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"RNN: {name} must be an int, not {value!r}") from None
    if isinstance(value, bool) or v < 1 or v >= 2 ** 31:
        raise ValueError(f"RNN: {name} must be a positive int below 2**31, got {value!r}")
    return v


class RNNSpec:
    """The checked options of a recurrent layer (see :func:`rnn_spec`).

    Attributes
    ----------
    mode : str
    cell : int
        ``cudnnRNNMode_t``.
    gates : int
        Gates stacked in one weight matrix (4, 3 or 1).
    input_size, hidden_size, proj_size : int
        ``proj_size`` is 0 without a projection.
    out_size : int
        Features per direction of the output and of ``h``: ``proj_size or hidden_size``.
    num_layers, dirs : int
    bias, batch_first : bool
    dropout : float
    dtype : numpy.dtype
    data_type, math_prec, math_type : int
        The ``cudnnDataType_t`` of the data and of the arithmetic, the ``cudnnMathType_t``.
    math : str
        The ``math=`` name.
    """

    __slots__ = ("mode", "cell", "gates", "input_size", "hidden_size", "proj_size", "out_size",
                 "num_layers", "dirs", "bias", "dropout", "batch_first", "dtype", "data_type",
                 "math_prec", "math_type", "math")

    @property
    def layer_dirs(self) -> int:
        """``num_layers * dirs``: the first dimension of ``hx``, ``hy``, ``cx``, ``cy``."""
        return self.num_layers * self.dirs

    @property
    def y_size(self) -> int:
        """Features of the output: ``dirs * out_size``."""
        return self.dirs * self.out_size

    @property
    def lstm(self) -> bool:
        return self.mode == "lstm"

    def params(self) -> list[tuple[str, int, str, tuple]]:
        """``(name, pseudo_layer, kind, shape)`` of every parameter, in PyTorch's order."""
        g, h, p = self.gates, self.hidden_size, self.out_size
        out = []
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else self.dirs * p
            for d in range(self.dirs):
                sfx = f"_l{layer}" + ("_reverse" if d else "")
                pseudo = layer * self.dirs + d
                shapes = {"weight_ih": (g * h, width), "weight_hh": (g * h, p),
                          "bias_ih": (g * h,), "bias_hh": (g * h,), "weight_hr": (p, h)}
                for kind in _KINDS:
                    if kind.startswith("bias") and not self.bias:
                        continue
                    if kind == "weight_hr" and not self.proj_size:
                        continue
                    out.append((kind + sfx, pseudo, kind, shapes[kind]))
        return out

    def describe(self) -> str:
        parts = [f"{self.mode} {self.input_size}->{self.hidden_size}"]
        if self.proj_size:
            parts.append(f"proj {self.proj_size}")
        parts.append(f"{self.num_layers} layer{'s' if self.num_layers > 1 else ''}")
        if self.dirs == 2:
            parts.append("bidirectional")
        if not self.bias:
            parts.append("no bias")
        if self.dropout:
            parts.append(f"dropout {self.dropout:g}")
        parts.append(str(self.dtype))
        parts.append("batch-first" if self.batch_first else "seq-first")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"<RNNSpec {self.describe()}>"


def rnn_spec(mode, input_size, hidden_size, *, num_layers=1, bidirectional=False, proj_size=0,
             bias=True, dropout=0.0, batch_first=False, dtype=np.float32,
             math=None) -> RNNSpec:
    """Check the options of a recurrent layer; no C call.

    Parameters are those of :class:`~cudalibs.cudnn.rnn.RNN`.

    Raises
    ------
    ValueError, TypeError
        An unknown mode or math name, a size that is not a positive int, a projection on a
        cell other than LSTM or not smaller than ``hidden_size``, dropout outside ``[0, 1)``,
        a dtype other than float32, float16, bfloat16 or float64.
    """
    if mode not in RNN_MODES:
        raise ValueError(f"RNN: mode must be one of {sorted(RNN_MODES)}, not {mode!r}")
    s = RNNSpec()
    s.mode = mode
    s.cell, s.gates = RNN_MODES[mode]
    s.input_size = _positive(input_size, "input_size")
    s.hidden_size = _positive(hidden_size, "hidden_size")
    s.num_layers = _positive(num_layers, "num_layers")
    proj = 0 if proj_size is None else operator.index(proj_size)
    if proj < 0:
        raise ValueError(f"RNN: proj_size must be >= 0, got {proj_size}")
    if proj and mode != "lstm":
        raise ValueError(f"RNN: proj_size is an LSTM option (cuDNN projects LSTM outputs only); "
                         f"mode {mode!r} takes none")
    if proj >= s.hidden_size:
        raise ValueError(f"RNN: proj_size ({proj}) must be smaller than hidden_size "
                         f"({s.hidden_size})")
    s.proj_size = proj
    s.out_size = proj or s.hidden_size
    s.dirs = 2 if bidirectional else 1
    s.bias = bool(bias)
    s.batch_first = bool(batch_first)
    p = float(dropout)
    if not 0.0 <= p < 1.0 or math is not None and not isinstance(math, str):
        raise ValueError(f"RNN: dropout must be in [0, 1), got {dropout!r}"
                         if not 0.0 <= p < 1.0 else f"RNN: math must be a name, not {math!r}")
    s.dropout = p
    row = _dtypes.lookup(dtype)
    if row.name not in RNN_DTYPES:
        raise TypeError(f"RNN: dtype must be one of {', '.join(RNN_DTYPES)}, not {row.name}")
    s.dtype = np.dtype(row.numpy)
    s.data_type = cudnn_dtype(s.dtype)
    double = row.name == "float64"
    s.math_prec = _lib.CUDNN_DATA_DOUBLE if double else _lib.CUDNN_DATA_FLOAT
    if math is None:
        math = ("default" if double else "fma" if row.name == "float32" else "tensor_op")
    if math not in RNN_MATH:
        raise ValueError(f"RNN: math must be one of {sorted(RNN_MATH)}, not {math!r}")
    s.math, s.math_type = math, RNN_MATH[math]
    return s


# -- where cuDNN puts each parameter --------------------------------------------------------------
def _read_tensor(desc) -> tuple[tuple, tuple]:
    dt, nb = ctypes.c_int(), ctypes.c_int()
    dims, strides = (ctypes.c_int * 8)(), (ctypes.c_int * 8)()
    st = _lib.get().cudnnGetTensorNdDescriptor(desc.raw, 8, ctypes.byref(dt), ctypes.byref(nb),
                                               dims, strides)
    if st:
        raise_for(st, "cudnnGetTensorNdDescriptor")
    return tuple(dims[:nb.value]), tuple(strides[:nb.value])


def _lin_ids(spec, kind) -> list[int]:
    g = spec.gates
    return {"weight_ih": list(range(g)), "bias_ih": list(range(g)),
            "weight_hh": list(range(g, 2 * g)), "bias_hh": list(range(g, 2 * g)),
            "weight_hr": [2 * g]}[kind]


def weight_layout(handle, desc_raw, spec: RNNSpec, space_ptr: int, space_bytes: int,
                  report: list | None = None) -> dict[str, tuple[int, tuple]]:
    """``{name: (element offset, shape)}`` of every parameter in the weight space.

    Asks ``cudnnGetRNNWeightParams`` for each pseudo-layer and linear layer and checks that
    the gates of one parameter lie one after another, each of its expected size.  With
    ``report`` (a list), one dict per library answer is appended to it (pseudo-layer, linear
    layer, byte offsets, the descriptors' dimensions and strides), for inspection.

    Raises
    ------
    CudaLibsError
        The library's layout is not PyTorch's: a gate elsewhere, or of another size.
    """
    L = _lib.get()
    item = spec.dtype.itemsize
    m_desc = TensorDescriptor(spec.dtype, (1, 1, 1), (1, 1, 1))
    b_desc = TensorDescriptor(spec.dtype, (1, 1, 1), (1, 1, 1))
    answers: dict = {}
    try:
        for pseudo in range(spec.layer_dirs):
            for lin in range(2 * spec.gates + (1 if spec.proj_size else 0)):
                m_addr, b_addr = ctypes.c_void_p(), ctypes.c_void_p()
                st = L.cudnnGetRNNWeightParams(handle, desc_raw, pseudo, space_bytes,
                                               space_ptr, lin, m_desc.raw,
                                               ctypes.byref(m_addr), b_desc.raw,
                                               ctypes.byref(b_addr))
                if st:
                    raise_for(st, "cudnnGetRNNWeightParams",
                              f"pseudo-layer {pseudo}, linear layer {lin} of {spec!r}")
                m = (m_addr.value - space_ptr, _read_tensor(m_desc)) if m_addr.value else None
                b = (b_addr.value - space_ptr, _read_tensor(b_desc)) if b_addr.value else None
                answers[pseudo, lin] = (m, b)
                if report is not None:
                    report.append({"pseudo_layer": pseudo, "lin_layer": lin,
                                   "matrix": m, "bias": b})
    finally:
        m_desc.close()
        b_desc.close()
    layout = {}
    for name, pseudo, kind, shape in spec.params():
        ids = _lin_ids(spec, kind)
        part = shape[0] // len(ids) if kind != "weight_hr" else shape[0]
        part_elems = part * (shape[1] if len(shape) == 2 else 1)
        which = 1 if kind.startswith("bias") else 0
        start = None
        for k, lin in enumerate(ids):
            got = answers[pseudo, lin][which]
            if got is None:
                raise CudaLibsError(f"cuDNN reports no {kind} for pseudo-layer {pseudo}, "
                                    f"linear layer {lin} of {spec!r}")
            off, (dims, _) = got
            if start is None:
                start = off
            n = math.prod(dims)
            if off != start + k * part_elems * item or n != part_elems or off % item:
                raise CudaLibsError(
                    f"cuDNN's weight space does not hold {name} as PyTorch's {shape} block: "
                    f"gate {k} (linear layer {lin}) is at byte {off} with dims {dims}, "
                    f"expected byte {start + k * part_elems * item} and {part_elems} elements")
        if start + math.prod(shape) * item > space_bytes:
            raise CudaLibsError(f"{name} at byte {start} reaches past the {space_bytes}-byte "
                                "weight space")
        layout[name] = (start // item, shape)
    return layout


# -- the weight space ---------------------------------------------------------------------------
class RNNWeights(Mapping):
    """A cuDNN weight space and a view of it for every parameter, by PyTorch's names.

    A read-only mapping ``name -> DeviceArray`` (views: writing into one changes the space),
    in PyTorch's parameter order.  Made by :class:`~cudalibs.cudnn.rnn.RNN` (its
    :attr:`~cudalibs.cudnn.rnn.RNN.weights`, and every weight-gradient space).

    Attributes
    ----------
    space : DeviceArray
        The whole space, 1-D, of the layer's dtype (what the cuDNN calls take).
    """

    __slots__ = ("space", "_views")

    def __init__(self, space: DeviceArray, layout: dict):
        space = operand(space, "space", "RNNWeights")
        if not isinstance(layout, Mapping):
            raise TypeError(f"RNNWeights: layout must be a mapping name -> (offset, shape), not "
                            f"{type(layout).__name__}")
        self.space = space
        self._views = {name: space[off:off + math.prod(shape)].reshape(shape)
                       for name, (off, shape) in layout.items()}

    def __getitem__(self, name) -> DeviceArray:
        try:
            return self._views[name]
        except KeyError:
            raise KeyError(f"no parameter {name!r}; the parameters are "
                           f"{', '.join(self._views)}") from None

    def __iter__(self):
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole space."""
        return self.space.nbytes

    def zero_(self, stream=None) -> "RNNWeights":
        """Set the whole space to zero (stream-ordered)."""
        self.space.fill(0, stream)
        return self

    def to_host(self) -> dict:
        """``{name: numpy array}`` copies of every parameter."""
        return {k: np.asarray(v.get()) for k, v in self._views.items()}

    def load(self, values: Mapping, *, strict: bool = True, stream=None) -> "RNNWeights":
        """Copy ``values`` (``{name: array}``) into the views; all are checked first.

        Host arrays (numpy, CPU tensors) of any floating dtype are converted to the space's
        dtype on the host; device arrays (DeviceArray, CUDA tensors) must have its dtype.

        Raises
        ------
        KeyError
            A parameter missing from ``values`` (``strict``), or a name that is none of ours
            (``strict``).
        ValueError, TypeError
            A shape or dtype that does not fit; nothing is copied then.
        """
        missing = [k for k in self._views if k not in values]
        extra = [k for k in values if k not in self._views]
        if strict and (missing or extra):
            raise KeyError(f"RNNWeights.load: missing {missing or 'none'}, unexpected "
                           f"{extra or 'none'} (the parameters are {', '.join(self._views)})")
        staged = []
        dt = self.space.dtype
        for name, view in self._views.items():
            if name not in values:
                continue
            src = _source(values[name], name, view.device, dt)
            if tuple(src.shape) != view.shape:
                raise ValueError(f"RNNWeights.load: {name} has shape {tuple(src.shape)}, "
                                 f"expected {view.shape}")
            staged.append((view, src))
        for view, src in staged:
            view.copy_(src, stream)
        return self

    def __repr__(self) -> str:
        names = list(self._views)
        shown = ", ".join(f"{k} {self._views[k].shape}" for k in names[:4])
        more = f", ... {len(names) - 4} more" if len(names) > 4 else ""
        return (f"<RNNWeights {self.space.dtype} {self.nbytes} B: {shown}{more}>")


def _is_host(value) -> bool:
    if isinstance(value, (np.ndarray, list, tuple, float, int)):
        return True
    if type(value) is DeviceArray or hasattr(value, "__cuda_array_interface__"):
        return False
    dev = getattr(value, "__dlpack_device__", None)
    if dev is not None:
        return dev()[0] == 1          # kDLCPU
    return hasattr(value, "__array__")


def _is_float(dt) -> bool:
    try:
        return "float" in _dtypes.lookup(dt).name
    except TypeError:
        return False


def _source(value, name, device, dtype):
    """A host array converted to ``dtype``, or a checked device array of ``dtype``."""
    if _is_host(value):
        host = np.asarray(value)
        if host.dtype != dtype and not _is_float(host.dtype):
            raise TypeError(f"RNNWeights.load: {name} has dtype {host.dtype}; give floating "
                            "values")
        return np.ascontiguousarray(host.astype(dtype, copy=False))
    return operand(value, name, "RNNWeights.load", device=device, dtypes=(dtype,))
