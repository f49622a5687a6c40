"""Recurrent layers (LSTM, GRU, Elman tanh / ReLU) on cuDNN's v8 RNN API, as a plan.

::

    rnn = cudnn.RNN("lstm", 512, 512, num_layers=2, dtype=np.float16,
                    seq_len=128, batch_size=64)        # descriptors + weight space
    rnn.load_torch_state(module.state_dict())          # or write into rnn.parameters()
    rnn.autotune()                                     # time the algorithms, keep the fastest
    y, hy, cy = rnn.forward(x)                         # inference
    y, hy, cy, state = rnn.forward(x, training=True)   # training: the reserve space in state
    dx, dhx, dcx = rnn.backward_data(state, dy)
    dw = rnn.backward_weights(state)                   # RNNWeights: gradients by name

One :class:`RNN` owns everything cuDNN needs for a layer stack: the RNN descriptor of each
algorithm it may run (the algorithm is part of the descriptor), the dropout descriptor and its
random states, and the weight space, with a view for every parameter under PyTorch's name and
shape (:mod:`cudalibs.cudnn.rnn_weights`).  Sequence length and batch are not part of it: each
call describes its batch with two RNN data descriptors (``x`` and ``y``) and the sequence
lengths on the device, kept in the one plan cache (``cudnn_rnn_data`` keys) so that a repeated
shape costs a dict lookup.  Padded batches of sequences of different lengths use the unpacked
layouts (``SEQ_MAJOR_UNPACKED`` for ``(T, B, F)``, ``BATCH_MAJOR_UNPACKED`` for batch-first
``(B, T, F)``), with zeros written at the padded steps of the outputs.

Algorithms: :meth:`~cudalibs.runtime.plan.Plan.plan` offers ``standard``, ``persist_static``,
``persist_static_small_h`` and ``persist_dynamic`` (compiled at run time for one batch size,
so only with ``batch_size=``); one that cuDNN refuses for the example problem
(``seq_len=``, ``batch_size=``) is dropped, with cuDNN's reason kept in :attr:`RNN.refused`.
The heuristic choice is ``standard``; :meth:`~cudalibs.runtime.plan.Plan.autotune` times every
candidate (a training step -- forward, backward data, backward weights -- or, with
``inference_only=True``, an inference forward) with the one timer and keeps the fastest.  A
call whose shape the chosen algorithm refuses (another batch size than a dynamic build's, a
persistent kernel that does not take it) runs ``standard`` instead.

Nothing per call is stored on the plan: threads may share one.  A training forward with
dropout advances the dropout states, so concurrent training calls with dropout draw from one
random sequence in an unspecified order.
"""

from __future__ import annotations

import contextlib
import ctypes
import math

import numpy as np

from ...driver.array import DeviceArray, empty
from ...driver.device import as_device
from ...driver.stream import as_stream
from ...errors import CudnnError
from ...runtime import front as _front
from ...runtime.cache import KeyKind
from ...runtime.operand import operands
from ...runtime.plan import Plan, scratch as _scratch
from .. import _lib
from .._base import last_error_string, raise_for, version_int
from .._common import check_overlap, output
from ..descriptors import tensor_descriptor
from ..handle import handle_for, workspace
from .descriptors import (RNN_ALGOS, DropoutDescriptor, RNNData, RNNDataDescriptor,
                          RNNDescriptor, RNNState)
from .weights import RNNSpec, RNNWeights, rnn_spec, weight_layout

__all__ = ["RNN", "RNNState", "RNNDescriptor", "RNNDataDescriptor", "DropoutDescriptor",
           "RNN_ALGOS", "RNN_DATA_KEY"]

#: The plan-cache keys of the per-shape data descriptors and device sequence lengths.
RNN_DATA_KEY = KeyKind("cudnn_rnn_data", ("dtype", "layout", "seq_len", "batch", "x_size",
                                          "y_size", "seq_lengths", "device"))

_INFER, _TRAIN = _lib.CUDNN_FWD_MODE_INFERENCE, _lib.CUDNN_FWD_MODE_TRAINING


def _refusal(status: int) -> bool:
    """cuDNN's "not supported" (3000s) and "bad parameter" (2000s) families: statuses with
    which an algorithm turns a problem down."""
    return 2000 <= status < 4000


def _algo_names(algo) -> tuple[str, ...]:
    if algo in (None, "auto"):
        return tuple(RNN_ALGOS)
    names = (algo,) if isinstance(algo, str) else tuple(algo)
    for n in names:
        if n not in RNN_ALGOS:
            raise ValueError(f"RNN: algo must be 'auto' or among {sorted(RNN_ALGOS)}, "
                             f"not {n!r}")
    if not names:
        raise ValueError("RNN: algo names no algorithm")
    return tuple(dict.fromkeys(names))


def _example(seq_len, batch_size):
    if (seq_len is None) != (batch_size is None):
        raise ValueError("RNN: give seq_len and batch_size together (the example problem the "
                         "algorithms are checked and timed on), or neither")
    if seq_len is None:
        return None
    out = []
    for v, n in ((seq_len, "seq_len"), (batch_size, "batch_size")):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v < 2 ** 31:
            raise ValueError(f"RNN: {n} must be a positive int, got {v!r}")
        out.append(int(v))
    return tuple(out)


def _contiguous(arr, name, shape, dtype, op) -> None:
    if arr.dtype != dtype:
        raise TypeError(f"{op}: {name} has dtype {arr.dtype}; the plan was made for {dtype}")
    if arr.shape != shape:
        raise ValueError(f"{op}: {name} must have shape {shape}, got {arr.shape}")
    if not arr.is_c_contiguous:
        raise ValueError(f"{op}: {name} must be C-contiguous (strides {arr.strides}); make a "
                         "contiguous copy with .copy()")


def _ptr(a) -> int:
    return a.address if a is not None else 0


# -- the plan --------------------------------------------------------------------------------------
class RNN(Plan):
    """A stack of recurrent layers on cuDNN, with its weights: the plan behind an LSTM, GRU
    or Elman RNN (see the module docstring).

    Parameters
    ----------
    mode : {"lstm", "gru", "rnn_tanh", "rnn_relu"}
    input_size, hidden_size : int
    num_layers : int, default 1
    bidirectional : bool, default False
    proj_size : int, default 0
        LSTM only: project ``h`` to this many features (``0 < proj_size < hidden_size``).
    bias : bool, default True
        Two bias vectors per gate (``bias_ih``, ``bias_hh``), as in PyTorch.
    dropout : float, default 0
        Dropout between layers, in training calls only.
    batch_first : bool, default False
        ``x`` and ``y`` are ``(B, T, F)`` instead of ``(T, B, F)``.
    dtype : float32, float16, bfloat16 or float64
        Of the data and the weights; arithmetic in float32 (float64 for float64).
    device : Device or int, optional
        The current device by default.
    algo : "auto", a name of :data:`RNN_ALGOS` or a sequence of them
        The algorithms offered as candidates.
    math : {"fma", "default", "tensor_op", "allow_conversion"}, optional
        cuDNN's math type: default ``"fma"`` for float32 (no TF32), ``"tensor_op"`` for
        float16 and bfloat16.
    seq_len, batch_size : int, optional
        An example problem: the candidates are checked on it (a refused one is dropped,
        see :attr:`refused`), ``persist_dynamic`` is compiled for ``batch_size``, and
        :meth:`autotune` times on it.
    inference_only : bool, default False
        Offer algorithms that run inference only (training calls are then refused), and
        autotune on an inference forward rather than a training step.
    seed : int, default 0
        Seeds the initial weights (uniform in ``±1/sqrt(hidden_size)``, as PyTorch) and the
        dropout states.

    Examples
    --------
    >>> rnn = cudnn.RNN("gru", 32, 64, num_layers=2, batch_first=True)   # doctest: +SKIP
    >>> y, hy, _ = rnn.forward(x, seq_lengths=[7, 5, 2])                  # doctest: +SKIP
    """

    kind = "cudnn_rnn"
    library = "cuDNN"

    def __init__(self, mode, input_size, hidden_size, *, num_layers=1, bidirectional=False,
                 proj_size=0, bias=True, dropout=0.0, batch_first=False, dtype=np.float32,
                 device=None, algo="auto", math=None, seq_len=None, batch_size=None,
                 inference_only=False, seed=0):
        spec = rnn_spec(mode, input_size, hidden_size, num_layers=num_layers,
                        bidirectional=bidirectional, proj_size=proj_size, bias=bias,
                        dropout=dropout, batch_first=batch_first, dtype=dtype, math=math)
        self._algos = _algo_names(algo)
        self._example = _example(seq_len, batch_size)
        self._inference_only = bool(inference_only)
        self._seed = int(seed)
        self._spec = spec
        self._layout_enum = (_lib.CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED if spec.batch_first
                             else _lib.CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED)
        self._descs: list = []
        self._raws: list = []
        self._refused: dict = {}
        self._std = None
        dev = as_device(device)
        self._init_plan(dev)
        self._borrow()      # everything it holds is an object with its own finalizer
        s = as_stream(None, dev)
        h = handle_for(dev, s.raw_handle)
        self._dropout = self._make_dropout(h, s)
        self._base = RNNDescriptor(spec, _lib.CUDNN_RNN_ALGO_STANDARD, self._dropout)
        self._wbytes = self._weight_space_bytes(h, self._base)
        item = spec.dtype.itemsize
        space = empty((self._wbytes // item,), spec.dtype, device=dev, stream=s)
        self._layout = weight_layout(h.raw, self._base.raw, spec, space.address, self._wbytes)
        self._weights = RNNWeights(space, self._layout)
        self._init_weights(s)
        s.sync()

    # -- construction helpers ------------------------------------------------------------------
    def _make_dropout(self, h, s) -> DropoutDescriptor:
        spec = self._spec
        if spec.dropout and spec.num_layers > 1:
            size = ctypes.c_size_t()
            st = _lib.get().cudnnDropoutGetStatesSize(h.raw, ctypes.byref(size))
            if st:
                raise_for(st, "cudnnDropoutGetStatesSize")
            states = empty((max(size.value, 1),), np.uint8, device=self._device, stream=s)
            return DropoutDescriptor(h.raw, spec.dropout, self._seed, states)
        return DropoutDescriptor(h.raw, 0.0, self._seed)

    @staticmethod
    def _weight_space_bytes(h, desc) -> int:
        size = ctypes.c_size_t()
        st = _lib.get().cudnnGetRNNWeightSpaceSize(h.raw, desc.raw, ctypes.byref(size))
        if st:
            raise_for(st, "cudnnGetRNNWeightSpaceSize", repr(desc))
        return int(size.value)

    def _init_weights(self, s) -> None:
        """PyTorch's initialisation: every parameter uniform in ``±1/sqrt(hidden_size)``;
        whatever else the space holds, zeros."""
        rng = np.random.default_rng(self._seed)
        host = np.zeros(self._wbytes // self._spec.dtype.itemsize, dtype=np.float64)
        k = 1.0 / math.sqrt(self._spec.hidden_size)
        for off, shape in self._layout.values():
            n = math.prod(shape)
            host[off:off + n] = rng.uniform(-k, k, n)
        self._weights.space.copy_(host.astype(self._spec.dtype), s)

    # -- Plan hooks ----------------------------------------------------------------------------
    def _problem(self) -> str:
        ex = f", example T={self._example[0]} B={self._example[1]}" if self._example else ""
        return f"{self._spec.describe()}{ex}"

    def _tuning_key(self):
        if self._example is None:
            return None
        s = self._spec
        return {"mode": s.mode, "input": s.input_size, "hidden": s.hidden_size,
                "proj": s.proj_size, "layers": s.num_layers, "dirs": s.dirs, "bias": s.bias,
                "dropout": s.dropout, "batch_first": s.batch_first, "dtype": str(s.dtype),
                "math": s.math, "example": list(self._example),
                "inference_only": self._inference_only, "algos": list(self._algos)}

    def _library_version(self) -> str:
        return str(version_int())

    def _heuristics(self) -> list[dict]:
        s = as_stream(None, self._device)
        h = handle_for(self._device, s.raw_handle)
        data = self._data(*self._example, None, s) if self._example else None
        modes = (_INFER,) if self._inference_only else (_INFER, _TRAIN)
        cands, descs, refused = [], [], {}
        for name in self._algos:
            try:
                cand, desc = self._candidate(h, name, data, modes)
            except CudnnError as exc:
                detail = (exc.detail or "").strip().splitlines()
                refused[name] = str(exc).splitlines()[0] + (f" ({detail[-1]})" if detail
                                                            else "")
                last_error_string()
                continue
            except ValueError as exc:
                refused[name] = str(exc)
                continue
            cands.append(cand)
            descs.append(desc)
        self._refused = refused
        self._descs = descs
        self._raws = [d.raw for d in descs]
        self._std = next((i for i, c in enumerate(cands) if c["name"] == "standard"), None)
        if not cands:
            raise ValueError(f"RNN: cuDNN refuses every algorithm for {self._problem()}: "
                             + "; ".join(f"{k}: {v}" for k, v in refused.items()))
        return cands

    def _candidate(self, h, name, data, modes):
        algo = RNN_ALGOS[name]
        desc = self._base if name == "standard" else RNNDescriptor(self._spec, algo,
                                                                   self._dropout)
        size = self._weight_space_bytes(h, desc)
        if size != self._wbytes:
            raise ValueError(f"its weight space would be {size} bytes, the standard one's "
                             f"{self._wbytes}")
        built = None
        if name == "persist_dynamic":
            if self._example is None:
                raise ValueError("it is compiled for one batch size: give batch_size=")
            built = self._example[1]
            st = _lib.get().cudnnBuildRNNDynamic(h.raw, desc.raw, built)
            if st:
                raise_for(st, "cudnnBuildRNNDynamic", f"batch {built}")
        ws = rs = 0
        if data is not None:
            for m in modes:
                w, r = self._temp(h.raw, desc.raw, m, data)
                ws, rs = max(ws, w), max(rs, r)
        return ({"name": name, "id": name, "algo": algo, "workspace": ws, "reserve": rs,
                 "batch": built, "inference_only": self._inference_only}, desc)

    def _select(self, i: int) -> None:
        if not 0 <= i < len(self._raws):
            raise IndexError(f"candidate {i} out of range")

    @contextlib.contextmanager
    def _runner(self, stream):
        if self._example is None:
            raise ValueError("RNN.autotune needs the example problem: build the plan with "
                             "seq_len= and batch_size=")
        t, b = self._example
        spec, dev = self._spec, self._device
        data = self._data(t, b, None, stream)
        x_shape, y_shape = self._io_shapes(t, b)
        hs, cs = self._state_shapes(b)
        x = _scratch(x_shape, spec.dtype, dev, stream)
        dy = _scratch(y_shape, spec.dtype, dev, stream)
        hx = _scratch(hs, spec.dtype, dev, stream)
        cx = _scratch(cs, spec.dtype, dev, stream) if spec.lstm else None
        outs = [empty(sh, spec.dtype, device=dev, stream=stream)
                for sh in (y_shape, hs, cs, x_shape, hs, cs)]
        dw = self.new_weights(stream)
        rs = max((c.get("reserve", 0) for c in self._candidates), default=0)
        reserve = empty((max(rs, 1),), np.uint8, device=dev, stream=stream)
        hd, cd = self._state_descs(b)
        workspace(dev, stream.raw_handle, max(c.get("workspace", 0) for c in self._candidates))

        def run(i):
            h = handle_for(dev, stream.raw_handle)
            raw = self._raws[i]
            y, hy, cy, dx, dhx, dcx = outs
            if not spec.lstm:
                cy = dcx = None
            mode = _INFER if self._inference_only else _TRAIN
            ws, rsz = self._temp(h.raw, raw, mode, data)
            wsp = workspace(dev, stream.raw_handle, ws)
            res = (reserve.address, rsz) if mode == _TRAIN else (0, 0)
            self._check(self._c_forward(h.raw, raw, mode, data, x, y, hx, hy, cx, cy, hd, cd,
                                        wsp, res), "cudnnRNNForward", i)
            if mode == _TRAIN:
                self._check(self._c_backward_data(h.raw, raw, data, y, dy, dx, hx, None, dhx,
                                                  cx, None, dcx, hd, cd, wsp, res),
                            "cudnnRNNBackwardData_v8", i)
                self._check(self._c_backward_weights(h.raw, raw, data, x, hx, y, dw, hd, wsp,
                                                     res), "cudnnRNNBackwardWeights_v8", i)

        yield run     # the scratch arrays go with this frame

    # -- shapes and descriptors of a call ----------------------------------------------------------
    def _io_shapes(self, t, b):
        s = self._spec
        if s.batch_first:
            return (b, t, s.input_size), (b, t, s.y_size)
        return (t, b, s.input_size), (t, b, s.y_size)

    def _state_shapes(self, b):
        s = self._spec
        return (s.layer_dirs, b, s.out_size), (s.layer_dirs, b, s.hidden_size)

    def _state_descs(self, b):
        s = self._spec
        hs, cs = self._state_shapes(b)
        hd = tensor_descriptor(s.dtype, hs, (b * s.out_size, s.out_size, 1))
        cd = tensor_descriptor(s.dtype, cs, (b * s.hidden_size, s.hidden_size, 1)) \
            if s.lstm else hd
        return hd.raw, cd.raw

    def _data(self, t, b, lengths, stream) -> RNNData:
        """The cached data descriptors of one batch shape (built on a miss)."""
        s = self._spec
        dev = self._device
        key = (RNN_DATA_KEY, s.data_type, self._layout_enum, t, b, s.input_size, s.y_size,
               lengths, dev.ordinal)
        return _front.planned(key, lambda: RNNData(s.data_type, self._layout_enum, t, b,
                                                    s.input_size, s.y_size, lengths, dev,
                                                    stream), prepare=None)

    @staticmethod
    def _temp(h_raw, desc_raw, mode, data) -> tuple[int, int]:
        ws, rs = ctypes.c_size_t(), ctypes.c_size_t()
        st = _lib.get().cudnnGetRNNTempSpaceSizes(h_raw, desc_raw, mode, data.x_raw,
                                                  ctypes.byref(ws), ctypes.byref(rs))
        if st:
            raise_for(st, "cudnnGetRNNTempSpaceSizes",
                      "inference" if mode == _INFER else "training")
        return int(ws.value), int(rs.value)

    def _check(self, st, fn, i) -> None:
        if st:
            raise_for(st, fn, f"algorithm {self._candidates[i]['name']} of {self._problem()}")

    # -- the raw calls (pointers prepared by the callers) ------------------------------------------
    def _c_forward(self, h, raw, mode, data, x, y, hx, hy, cx, cy, hd, cd, wsp, res):
        w = self._weights.space
        return _lib.get().cudnnRNNForward(
            h, raw, mode, data.lengths_ptr, data.x_raw, x.address, data.y_raw, y.address, hd,
            _ptr(hx), hy.address, cd, _ptr(cx), _ptr(cy), self._wbytes, w.address, wsp[1], wsp[0],
            res[1], res[0])

    def _c_backward_data(self, h, raw, data, y, dy, dx, hx, dhy, dhx, cx, dcy, dcx, hd, cd,
                         wsp, res):
        w = self._weights.space
        return _lib.get().cudnnRNNBackwardData_v8(
            h, raw, data.lengths_ptr, data.y_raw, y.address, dy.address, data.x_raw, dx.address, hd,
            _ptr(hx), _ptr(dhy), dhx.address, cd, _ptr(cx), _ptr(dcy), _ptr(dcx), self._wbytes,
            w.address, wsp[1], wsp[0], res[1], res[0])

    def _c_backward_weights(self, h, raw, data, x, hx, y, dw, hd, wsp, res):
        return _lib.get().cudnnRNNBackwardWeights_v8(
            h, raw, _lib.CUDNN_WGRAD_MODE_ADD, data.lengths_ptr, data.x_raw, x.address, hd,
            _ptr(hx), data.y_raw, y.address, self._wbytes, dw.space.address, wsp[1], wsp[0],
            res[1], res[0])

    # -- checks of a call ------------------------------------------------------------------------
    def _ready(self) -> None:
        self._live()
        if not self._planned:
            self.plan()

    def _inputs(self, op, x, hx, cx, seq_lengths, stream):
        """The forward's operands checked against the plan: ``(x, hx, cx, T, B, lengths,
        device, stream)``."""
        spec = self._spec
        x, hx, cx, dev = operands(op, (x, "x"), (hx, "hx"), (cx, "cx"), stream=stream)
        if dev is not self._device:
            raise ValueError(f"{op}: the operands are on device {dev.ordinal}, the plan on "
                             f"device {self._device.ordinal}")
        if len(x.shape) != 3:
            raise ValueError(f"{op}: x must be 3-D, {'(B, T, F)' if spec.batch_first else '(T, B, F)'}"
                             f", got shape {x.shape}")
        t, b = (x.shape[1], x.shape[0]) if spec.batch_first else x.shape[:2]
        if x.shape[2] != spec.input_size:
            raise ValueError(f"{op}: x has {x.shape[2]} features; the plan was made for "
                             f"input_size {spec.input_size}")
        if t < 1 or b < 1:
            raise ValueError(f"{op}: x is empty (shape {x.shape})")
        _contiguous(x, "x", x.shape, spec.dtype, op)
        self._check_states(op, b, (hx, "hx"), (cx, "cx"))
        lengths = self._lengths(seq_lengths, t, b, op)
        return x, hx, cx, t, b, lengths, dev, as_stream(stream, dev)

    def _check_states(self, op, b, h, c) -> None:
        """``h`` (``(L*D, B, P)``) and ``c`` (LSTM only, ``(L*D, B, H)``), each an
        ``(array or None, name)`` pair."""
        spec = self._spec
        hs, cs = self._state_shapes(b)
        if h[0] is not None:
            _contiguous(h[0], h[1], hs, spec.dtype, op)
        if c[0] is not None:
            if not spec.lstm:
                raise ValueError(f"{op}: {c[1]} belongs to an LSTM's cell state; a "
                                 f"{spec.mode} plan takes none")
            _contiguous(c[0], c[1], cs, spec.dtype, op)

    @staticmethod
    def _lengths(seq_lengths, t, b, op):
        """The per-sequence lengths as a tuple of ints in ``[1, T]`` (None: all ``T``)."""
        if seq_lengths is None:
            return None
        if isinstance(seq_lengths, DeviceArray) or hasattr(seq_lengths,
                                                           "__cuda_array_interface__"):
            raise TypeError(f"{op}: seq_lengths must be host integers (cuDNN describes the "
                            "batch with them on the host; the plan puts them on the device)")
        arr = np.asarray(seq_lengths)
        if arr.ndim != 1 or arr.shape[0] != b or arr.dtype.kind not in "iu":
            raise ValueError(f"{op}: seq_lengths must be {b} integers (one per sequence), got "
                             f"{seq_lengths!r}")
        lengths = tuple(int(v) for v in arr)
        bad = [v for v in lengths if not 1 <= v <= t]
        if bad:
            raise ValueError(f"{op}: seq_lengths must lie in [1, {t}] (T, the padded length); "
                             f"got {bad[:4]}")
        return None if all(v == t for v in lengths) else lengths

    def _outputs(self, op, out, names, shapes, dev, s):
        """Each output: the given array checked, else a new one (None where no shape)."""
        out = tuple(out) if out is not None else ()
        if len(out) > len(names):
            raise ValueError(f"{op}: out takes at most {len(names)} arrays {names}")
        out = out + (None,) * (len(names) - len(out))
        res = []
        for o, name, shape in zip(out, names, shapes):
            if shape is None:
                if o is not None:
                    raise ValueError(f"{op}: {name} is an LSTM output; pass None for it")
                res.append(None)
                continue
            st = tuple(math.prod(shape[i + 1:]) * self._spec.dtype.itemsize
                       for i in range(len(shape)))
            res.append(output(o, shape, self._spec.dtype, False, dev, s, name, strides=st,
                              op=op))
        return res, any(o is not None for o in out)

    def _pick(self, h_raw, mode, data, batch):
        """``(candidate, workspace, reserve)`` for a call: the chosen algorithm, or standard
        where the chosen one refuses this call's shape or mode."""
        i = self._choice
        c = self._candidates[i]
        if c["batch"] is None or c["batch"] == batch:
            try:
                return (i, *self._temp(h_raw, self._raws[i], mode, data))
            except CudnnError as exc:
                last_error_string()
                if self._std is None or i == self._std or not _refusal(exc.status):
                    raise
            i = self._std
        else:
            i = self._std
        if i is None:
            raise ValueError(f"RNN: the chosen algorithm {c['name']} cannot run this call "
                             f"(batch {batch}) and standard is not among the candidates")
        return (i, *self._temp(h_raw, self._raws[i], mode, data))

    # -- the calls -------------------------------------------------------------------------------
    def forward(self, x, hx=None, cx=None, *, seq_lengths=None, training=False, out=None,
                stream=None):
        """Run the layers over a batch of sequences.

        Parameters
        ----------
        x : DeviceArray or CUDA array
            ``(T, B, input_size)`` (``(B, T, input_size)`` batch-first), C-contiguous, of the
            plan's dtype.
        hx, cx : DeviceArray, optional
            Initial states ``(L*D, B, P)`` and (LSTM) ``(L*D, B, H)``; zeros when omitted.
        seq_lengths : sequence of int, optional
            Valid steps of each sequence (host integers in ``[1, T]``, any order); the rest of
            ``x`` is padding, and ``y`` is zero there.
        training : bool
            Training mode: dropout applies and an :class:`RNNState` is returned for the
            backward passes.
        out : tuple of DeviceArray, optional
            ``(y, hy, cy)`` to write into (any may be None: allocated then).
        stream : Stream, optional

        Returns
        -------
        tuple
            ``(y, hy, cy)`` (``cy`` None except for LSTM), plus the :class:`RNNState` when
            ``training``.
        """
        op = "RNN.forward"
        self._ready()
        if training and self._inference_only:
            raise ValueError(f"{op}: the plan was built with inference_only=True")
        x, hx, cx, t, b, lengths, dev, s = self._inputs(op, x, hx, cx, seq_lengths, stream)
        spec = self._spec
        hs, cs = self._state_shapes(b)
        (y, hy, cy), given = self._outputs(op, out, ("y", "hy", "cy"),
                                           (self._io_shapes(t, b)[1], hs,
                                            cs if spec.lstm else None), dev, s)
        if given:
            for o in (y, hy, cy):
                if o is not None:
                    check_overlap(op, o, x=x, hx=hx, cx=cx)
        data = self._data(t, b, lengths, s)
        hd, cd = self._state_descs(b)
        h = handle_for(dev, s.raw_handle)
        mode = _TRAIN if training else _INFER
        i, ws, rs = self._pick(h.raw, mode, data, b)
        while True:
            reserve = empty((max(rs, 1),), np.uint8, device=dev, stream=s) if training else None
            wsp = workspace(dev, s.raw_handle, ws)
            res = (reserve.address, rs) if training else (0, 0)
            st = self._c_forward(h.raw, self._raws[i], mode, data, x, y, hx, hy, cx, cy, hd,
                                 cd, wsp, res)
            if not st:
                break
            if i == self._std or self._std is None or not _refusal(st):
                self._check(st, "cudnnRNNForward", i)
            last_error_string()
            i = self._std
            ws, rs = self._temp(h.raw, self._raws[i], mode, data)
        if not training:
            return y, hy, cy
        state = RNNState()
        state.plan, state.index, state.data = self, i, data
        state.x, state.hx, state.cx, state.y, state.reserve = x, hx, cx, y, reserve
        state.seq_len, state.batch = t, b
        state.algo, state.stage = self._candidates[i]["name"], "forward"
        return y, hy, cy, state

    def _state(self, state, op, stage):
        if not isinstance(state, RNNState):
            raise TypeError(f"{op}: state must be the RNNState of a training forward, not "
                            f"{type(state).__name__}")
        if state.plan is not self:
            raise ValueError(f"{op}: state comes from another RNN plan ({state.plan!r})")
        if state.stage == stage:
            return
        if state.stage == "forward":
            raise ValueError(f"{op}: run backward_data on this state first (cuDNN's weight "
                             "gradients read what it leaves in the reserve space)")
        raise ValueError(f"{op}: {state.stage} already ran on this state; the backward passes "
                         "update cuDNN's reserve space, so each training forward takes one "
                         "backward_data, then one backward_weights")

    def backward_data(self, state, dy, dhy=None, dcy=None, *, out=None, stream=None):
        """Gradients by the inputs of a training forward.

        Parameters
        ----------
        state : RNNState
            From ``forward(..., training=True)`` of this plan, before any backward pass: the
            passes update the reserve space (a second ``backward_data`` on one state gives
            wrong gradients in cuDNN 9.19, so it is refused).
        dy : DeviceArray
            Gradient by ``y`` (its shape; padded steps are ignored).
        dhy, dcy : DeviceArray, optional
            Gradients by ``hy`` and (LSTM) ``cy``; zeros when omitted.
        out : tuple of DeviceArray, optional
            ``(dx, dhx, dcx)`` to write into.
        stream : Stream, optional

        Returns
        -------
        tuple
            ``(dx, dhx, dcx)``; ``dx`` is zero at padded steps, ``dcx`` None except for LSTM.
        """
        op = "RNN.backward_data"
        self._live()
        self._state(state, op, "forward")
        spec = self._spec
        dy, dhy, dcy, dev = operands(op, (dy, "dy"), (dhy, "dhy"), (dcy, "dcy"),
                                     stream=stream)
        if dev is not self._device:
            raise ValueError(f"{op}: dy is on device {dev.ordinal}, the plan on device "
                             f"{self._device.ordinal}")
        b = state.batch
        hs, cs = self._state_shapes(b)
        _contiguous(dy, "dy", state.y.shape, spec.dtype, op)
        self._check_states(op, b, (dhy, "dhy"), (dcy, "dcy"))
        s = as_stream(stream, dev)
        (dx, dhx, dcx), given = self._outputs(op, out, ("dx", "dhx", "dcx"),
                                              (state.x.shape, hs,
                                               cs if spec.lstm else None), dev, s)
        if given:
            for o in (dx, dhx, dcx):
                if o is not None:
                    check_overlap(op, o, dy=dy, dhy=dhy, dcy=dcy, y=state.y)
        data = state.data
        if data.padded:
            # cuDNN 9.19 writes the padding symbol (zeros) at the padded steps of dx itself
            # (seen with the standard algorithm); one memset keeps that true whatever the
            # algorithm or library version.
            dx.fill(0, s)
        hd, cd = self._state_descs(b)
        h = handle_for(dev, s.raw_handle)
        raw = self._raws[state.index]
        ws, _ = self._temp(h.raw, raw, _TRAIN, data)
        wsp = workspace(dev, s.raw_handle, ws)
        res = (state.reserve.address, state.reserve.nbytes)
        self._check(self._c_backward_data(h.raw, raw, data, state.y, dy, dx, state.hx, dhy,
                                          dhx, state.cx, dcy, dcx, hd, cd, wsp, res),
                    "cudnnRNNBackwardData_v8", state.index)
        state.stage = "backward_data"
        return dx, dhx, dcx

    def backward_weights(self, state, dweights=None, *, accumulate=True, stream=None):
        """Weight gradients of a training forward, added into a weight-gradient space.

        Parameters
        ----------
        state : RNNState
            After :meth:`backward_data` on it (cuDNN reads what that pass leaves in the
            reserve space).
        dweights : RNNWeights, optional
            Of this plan (:meth:`new_weights`); a new zeroed one when omitted.
        accumulate : bool, default True
            Add to ``dweights`` (cuDNN's only mode); False zeroes it first.
        stream : Stream, optional

        Returns
        -------
        RNNWeights
            ``dweights``, whose views hold each parameter's gradient under its name.
        """
        op = "RNN.backward_weights"
        self._live()
        self._state(state, op, "backward_data")
        dev = self._device
        s = as_stream(stream, dev)
        if dweights is None:
            dweights = self.new_weights(s)
        else:
            if not isinstance(dweights, RNNWeights):
                raise TypeError(f"{op}: dweights must be an RNNWeights (RNN.new_weights()), "
                                f"not {type(dweights).__name__}")
            sp = dweights.space
            if (sp.nbytes != self._wbytes or sp.dtype != self._spec.dtype
                    or sp.device is not dev or list(dweights) != list(self._layout)):
                raise ValueError(f"{op}: dweights is not a weight space of this plan "
                                 f"({sp.nbytes} B of {sp.dtype}; need {self._wbytes} B of "
                                 f"{self._spec.dtype} on device {dev.ordinal})")
            if not accumulate:
                dweights.zero_(s)
        data = state.data
        hd, _ = self._state_descs(state.batch)
        h = handle_for(dev, s.raw_handle)
        raw = self._raws[state.index]
        ws, _ = self._temp(h.raw, raw, _TRAIN, data)
        wsp = workspace(dev, s.raw_handle, ws)
        res = (state.reserve.address, state.reserve.nbytes)
        self._check(self._c_backward_weights(h.raw, raw, data, state.x, state.hx, state.y,
                                             dweights, hd, wsp, res),
                    "cudnnRNNBackwardWeights_v8", state.index)
        state.stage = "backward_weights"
        return dweights

    # -- weights -----------------------------------------------------------------------------------
    @property
    def weights(self) -> RNNWeights:
        """The weight space and its views by PyTorch's parameter names."""
        self._live()
        return self._weights

    def parameters(self) -> dict:
        """``{name: DeviceArray view}`` like ``torch.nn.LSTM.named_parameters()``."""
        return dict(self.weights)

    def load_torch_state(self, state_dict, *, strict=True, stream=None) -> None:
        """Copy a PyTorch module's parameters (``module.state_dict()``, host or CUDA tensors,
        or any arrays by those names) into the weight space; all checked before any copy."""
        self.weights.load(state_dict, strict=strict, stream=stream)

    def new_weights(self, stream=None) -> RNNWeights:
        """A new zeroed weight space of this plan's layout (for weight gradients)."""
        self._live()
        space = empty(self._weights.space.shape, self._spec.dtype, device=self._device,
                      stream=stream)
        return RNNWeights(space.fill(0, stream), self._layout)

    # -- inspection --------------------------------------------------------------------------------
    @property
    def spec(self) -> RNNSpec:
        """The checked options."""
        return self._spec

    @property
    def weight_space_bytes(self) -> int:
        """Bytes of the weight space (``cudnnGetRNNWeightSpaceSize``)."""
        return self._wbytes

    @property
    def refused(self) -> dict:
        """``{algorithm: cuDNN's reason}`` for each algorithm dropped from the candidates."""
        self.plan()
        return dict(self._refused)

    @property
    def algo(self) -> str:
        """The name of the chosen algorithm."""
        self.plan()
        return self._candidates[self._choice]["name"]

    @property
    def descriptor(self) -> RNNDescriptor:
        """The RNN descriptor of the chosen algorithm."""
        self.plan()
        return self._descs[self._choice]

    def close(self) -> None:
        """Release the descriptors (freed once no call still uses them); the weight space
        lives on while its views are held.  Later use raises
        :class:`~cudalibs.errors.ClosedError`."""
        Plan.close(self)
        self._descs, self._raws, self._base, self._dropout = [], [], None, None

    def __repr__(self) -> str:
        r = Plan.__repr__(self)
        if not self.closed and self._refused:
            r = r[:-1] + "; refused: " + ", ".join(self._refused) + ">"
        return r
