"""Layer norm and RMS norm, forward (training and inference) and backward, on cuDNN's graph API.

Normalisation runs over the last ``normalized_ndim`` dimensions of ``x`` (default 1, the
hidden dimension of a transformer): ``x`` is viewed as ``(rows, features)``, ``rows`` the
product of the leading dimensions.  Each call is one cuDNN backend norm operation
(``CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR`` / ``..._NORM_BACKWARD_DESCRIPTOR`` with
``CUDNN_LAYER_NORM`` or ``CUDNN_RMS_NORM``, phase ``CUDNN_NORM_FWD_TRAINING`` or
``_INFERENCE``), the lowering cudnn-frontend uses: ``x`` as a 4-D tensor ``(rows, features,
1, 1)`` with channels-last strides, weight and bias ``(1, features, 1, 1)``, the statistics
``(rows, 1, 1, 1)`` and epsilon a float32 scalar passed by value.

Formulas (what :mod:`cudalibs.testing.ref` computes in float64)::

    layer norm:  y = (x - mean) * inv_std * weight + bias,  inv_std = 1 / sqrt(var + eps)
    RMS norm:    y = x * inv_rms * weight,                  inv_rms = 1 / sqrt(mean(x^2) + eps)

with the biased variance, as PyTorch's ``F.layer_norm`` / ``F.rms_norm``.

Data types: ``x`` (and ``dy``, ``y``, ``dx``) float32, float16 or bfloat16; the weight (and
bias) in ``x``'s dtype or float32, ``dweight`` / ``dbias`` in the weight's dtype; the
statistics float32.  cuDNN accumulates in float32 either way.  On cuDNN 9.19 (H100) weights in
``x``'s dtype reach its specialised norm engines; float32 weights with half data get only the
generic engine for the forward, so there the forward plans run the layer/RMS norm kernel of
the shipped ``norm.ptx`` first (the same formulas in float32, one pass over the data: 3.1x the
generic engine at bfloat16 16384 x 4096); with same-dtype weights the kernel is a later
candidate that an autotune may pick.  Statistics have torch's ``native_layer_norm`` shape,
``x.shape[:-normalized_ndim] + (1,) * normalized_ndim``; the backwards take any float32
C-contiguous statistics with one element per row.  Every array is C-contiguous; outputs are
allocated stream-ordered unless given (``out=``: one array, or a tuple with an entry per
output, None entries allocated); an output that shares memory with an input is refused.

Every engine cuDNN 9.19 offers for these graphs is compiled at run time, when its execution
plan is finalized (about half a second each on an H100): a new problem (shape, dtypes, eps,
phase) costs that once, the one-shots (``algo="heuristic"``) finalize the heuristics' first
engine only, ``algo="find"`` / :meth:`autotune` up to three.

Plans: :class:`NormForwardPlan` and :class:`NormBackwardPlan` (``mode="layer"`` or ``"rms"``)
follow the plan protocol (:class:`~cudalibs.runtime.plan.Plan`): construct (the operation graph
is finalized host-side), ``plan()`` (cuDNN's heuristics, mode A then the fallback list, each
engine finalized into an execution plan with its workspace), ``autotune()`` (the one timer;
the choice kept in the tuning store), ``execute(...)`` (pointers only; a variant pack per
pointer set), ``close()``.  The one-shot functions :func:`layer_norm`,
:func:`layer_norm_backward`, :func:`rms_norm`, :func:`rms_norm_backward` find them in the one
plan cache under :data:`NORM_FORWARD_KEY` / :data:`NORM_BACKWARD_KEY`.
"""

from __future__ import annotations

import contextlib
import ctypes

import numpy as np

from ...driver.array import empty
from ...driver.stream import as_stream
from ...runtime.front import planned as _planned
from ...runtime.norms import launch_norm_forward
from ...runtime.cache import KeyKind, cache as _cache
from ...runtime.operand import operand as _operand
from ...runtime.operand import operands as _operands
from ...runtime.plan import Plan, scratch as _scratch
from .. import backend as _be
from .._base import last_error_string, raise_for, version, version_int
from .._common import check_overlap
from ..handle import handle_for, workspace
from ..handle import workspace_limit as _default_limit
from .checks import (F32, MAX_ALIGNMENT, NAMES, NORM_MODES, NoNormEngineError, alignment_of,
                     check_algo, check_backward, check_eps, check_forward, check_mode,
                     check_ndim, check_stats, given_outs, outs_of, require_aligned, split_rows)
from .lower import (BIAS, DBIAS, DSCALE, DX, DY, EPS, INV, MEAN, SCALE, X, Y, backward_graph,
                    forward_graph)

__all__ = ["layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward",
           "NormForwardPlan", "NormBackwardPlan", "NormPlan", "NoNormEngineError",
           "forward_graph", "backward_graph", "NORM_FORWARD_KEY", "NORM_BACKWARD_KEY",
           "NORM_MODES", "norm_cache", "clear_norm_cache"]

_COMMON = ("device", "mode", "dtype", "weight_dtype", "x_shape", "normalized_ndim",
           "alignment", "algo", "deterministic", "workspace_limit")
#: The cache keys of the one-shot norms (``entry.key["x_shape"]``...).
NORM_FORWARD_KEY = KeyKind("cudnn_norm_forward", _COMMON + ("training", "bias", "eps"))
NORM_BACKWARD_KEY = KeyKind("cudnn_norm_backward", _COMMON)
_KINDS = (NORM_FORWARD_KEY.name, NORM_BACKWARD_KEY.name)


def norm_cache() -> list:
    """The cached norm plans (:class:`~cudalibs.runtime.plan.CacheEntry` objects, keys by
    field name), least recently used first."""
    return [e for e in _cache.entries() if e.kind in _KINDS]


def clear_norm_cache() -> None:
    """Forget every cached norm plan."""
    for kind in _KINDS:
        _cache.clear(kind)


# -- the plans -------------------------------------------------------------------------------
class _KernelRun:
    """The forward kernel of ``norm.ptx`` as a candidate of a forward plan: no cuDNN engine,
    no workspace, nothing recorded to relaunch."""

    __slots__ = ()
    name = "norm.ptx"
    workspace_size = 0


_KERNEL = _KernelRun()

class NormPlan(Plan):
    """What the norm plans share: the problem, its graph, its engines (see the module
    docstring).  Build :class:`NormForwardPlan` or :class:`NormBackwardPlan`.

    Attributes
    ----------
    mode : str
        ``"layer"`` or ``"rms"``.
    rows, features : int
        ``x`` as normalised: ``(rows, features)``.
    stats_shape : tuple of int
        The shape of the statistics the forward returns.
    alignment : int
        The byte alignment the graph declares; every pointer of a call must have it.
    """

    library = "cuDNN"
    op = ""

    def _setup(self, dev, mode, x, k, wdtype, alignment, deterministic, workspace_limit,
               max_candidates):
        self._mode = mode
        self._dtype = x.dtype
        self._wdtype = np.dtype(wdtype)
        self._shape = x.shape
        self._k = k
        self._wshape = x.shape[len(x.shape) - k:]
        self._rows, self._feats, self._stats_shape = split_rows(x.shape, k)
        self._align = int(alignment)
        if self._align < 1 or self._align & (self._align - 1) or self._align > MAX_ALIGNMENT:
            raise ValueError(f"alignment must be a power of two <= {MAX_ALIGNMENT}, got "
                             f"{alignment}")
        require_aligned(type(self).__name__, self._align)
        self._det = bool(deterministic)
        self._limit = _default_limit() if workspace_limit is None else int(workspace_limit)
        self._max = _be.engines.FIND_MAX_PLANS if max_candidates is None else max(1, int(max_candidates))
        self._objs: list = []
        self._exe = None
        self._graph, self._uids = self._build_graph()
        self._init_plan(dev)
        self._borrow()    # graph descriptors free themselves; nothing owned directly

    def _build_graph(self, handle=None):
        raise NotImplementedError

    # -- Plan hooks ------------------------------------------------------------------------
    def _problem(self) -> str:
        w = "" if self._wdtype == self._dtype else f", weight {self._wdtype}"
        return (f"{NAMES[self._mode]} {self.op} {self._dtype} x {self._shape} over the last "
                f"{self._k} dim(s) ({self._rows} x {self._feats}){w}{self._extra_text()}")

    def _extra_text(self) -> str:
        return ""

    def _tuning_key(self):
        return {"mode": self._mode, "op": self.op, "dtype": str(self._dtype),
                "weight_dtype": str(self._wdtype), "rows": self._rows,
                "features": self._feats, "alignment": self._align,
                "deterministic": self._det, "limit": self._limit, "max_candidates": self._max,
                **self._tuning_extra()}

    def _tuning_extra(self) -> dict:
        return {}

    def _library_version(self) -> str:
        return str(version_int())

    def _heuristics(self) -> list[dict]:
        h = handle_for(self._device, as_stream(None, self._device).raw_handle)
        banned = _be.banned_notes(self._dtype, "default", self._det)
        self._graph, self._uids = self._build_graph(h.raw)    # the heuristics see the device
        try:
            pairs = _be.candidates(h, self._graph, self._uids, banned, self._limit, self._max)
        except _be.NoGraph as exc:
            last_error_string()
            hint = "; try the weight in x's dtype" if self._wdtype != self._dtype else ""
            cudnn = ".".join(map(str, version()))
            raise NoNormEngineError(f"cuDNN {cudnn} has no engine for {self._problem()} "
                                    f"on {self._device.arch}{hint}: {exc}") from None
        self._objs = [p for _, p in pairs]
        return [c for c, _ in pairs]

    def _select(self, i: int) -> None:
        self._exe = self._objs[i]

    def _specs(self):
        """``(uid, shape, dtype)`` of each pointer the graph binds, in uid order (epsilon
        has shape None: a host value)."""
        x, w, s = self._shape, self._wshape, self._stats_shape
        table = {X: (x, self._dtype), Y: (x, self._dtype), DY: (x, self._dtype),
                 DX: (x, self._dtype), SCALE: (w, self._wdtype), BIAS: (w, self._wdtype),
                 DSCALE: (w, self._wdtype), DBIAS: (w, self._wdtype), MEAN: (s, F32),
                 INV: (s, F32), EPS: (None, F32)}
        return [(u, *table[u]) for u in self._uids]

    @contextlib.contextmanager
    def _runner(self, stream):
        dev = self._device
        bufs = [None if shape is None else _scratch(shape, dt, dev, stream)
                for _, shape, dt in self._specs()]
        ptrs = [self._host_ptr(u) if b is None else b.ptr
                for (u, _, _), b in zip(self._specs(), bufs)]
        ws = max((c.get("workspace", 0) for c in self._candidates), default=0)
        ws_ptr, _ = workspace(dev, stream.raw_handle, ws)      # grown once, before timing
        packs: dict = {}

        def run(i):
            e = self._objs[i]
            if e is _KERNEL:
                self._run_kernel(ptrs, stream)
                return
            vp = packs.get(i)
            if vp is None:
                vp = packs[i] = e.pack_uncached(ptrs, ws_ptr)
            h = handle_for(dev, stream.raw_handle)
            st = e._exec(h.raw, e._raw, vp._raw)
            if st:
                raise_for(st, "cudnnBackendExecute", f"engine {e.name}")

        try:
            yield run
        finally:
            packs.clear()
            del bufs

    def _host_ptr(self, uid) -> int:
        raise NotImplementedError

    # -- running ---------------------------------------------------------------------------
    def _ready(self):
        """The chosen execution plan (planning first if needed)."""
        e = self._exe
        if e is None:
            self.plan()
            e = self._exe
            if e is None:    # closed meanwhile
                self._live()
        return e

    def _aligned(self, op, arrays) -> None:
        """Refuse device pointers less aligned than the graph declared."""
        al = self._align
        for a in arrays:
            if a is not None and a.address & (max(al, a.dtype.itemsize) - 1):
                raise ValueError(f"{op}: an operand's address is less aligned than the plan "
                                 f"declared ({al} bytes or its element); build a plan from "
                                 "these arrays (the one-shot functions key on alignment)")

    def _run_kernel(self, ptrs, s) -> None:
        raise NotImplementedError

    def _launch(self, e, dev, s, ptrs) -> None:
        """Run execution plan ``e`` on ``ptrs`` (uid order) on stream ``s``."""
        if e is _KERNEL:
            self._run_kernel(ptrs, s)
            return
        ws_ptr = workspace(dev, s.raw_handle, e.workspace_size)[0] if e.workspace_size else 0
        # Recorded with probes at 4 bytes or the plan's alignment: every tensor declares at
        # least its element size (float32 statistics: 4).
        e.run(dev, s, tuple(ptrs), ws_ptr, max(self._align, 4), self._fixed)

    #: Indices of the pointers that are host scalars the plan keeps (epsilon, forward).
    _fixed = ()

    def relaunch_slots(self) -> list:
        return [e.relaunches for e in self._objs if e is not _KERNEL]

    def _front(self, op, stream, required, *named):
        """The execute front: operands through the one path (the first ``required`` ones
        required), on the plan's device."""
        self._live()
        *arrs, dev = _operands(op, *named, stream=stream, required=required)
        if dev is not self._device:
            raise ValueError(f"{op}: the operands are on device {dev.ordinal}, the plan on "
                             f"device {self._device.ordinal}")
        return arrs, dev

    def _match(self, arr, name, op, param=False):
        """An input against the plan's problem (data, or weight / bias with ``param``)."""
        shape, dtype = (self._wshape, self._wdtype) if param else (self._shape, self._dtype)
        if arr.shape != shape or arr.dtype != dtype or not arr.is_c_contiguous:
            raise ValueError(f"{op}: {name} is {arr.dtype} {arr.shape} (strides "
                             f"{arr.strides}); the plan was made for C-contiguous {dtype} "
                             f"{shape}")

    def _new(self, arr, shape, dtype, name, op, dev, s, inputs):
        """An output: ``arr`` checked (shape, dtype, contiguity, no overlap with ``inputs``),
        or a new array allocated on ``s``."""
        if arr is None:
            return empty(shape, dtype, device=dev, stream=s)
        arr = _operand(arr, name, op, device=dev, written=True)
        if arr.shape != shape or arr.dtype != dtype or not arr.is_c_contiguous:
            raise ValueError(f"{op}: {name} is {arr.dtype} {arr.shape} (strides "
                             f"{arr.strides}); expected C-contiguous {np.dtype(dtype)} "
                             f"{shape}")
        check_overlap(op, arr, **inputs)
        return arr

    def close(self) -> None:
        """Close the plan; its engines go as soon as no call still runs them."""
        Plan.close(self)            # closed first: a racing execute raises ClosedError
        del self._objs[:]
        self._exe = None

    def usable(self) -> bool:
        e = self._exe
        return not (self.closed or e is not None and e is not _KERNEL and e.descriptor.closed)

    # -- inspection ------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """``"layer"`` or ``"rms"``."""
        return self._mode

    @property
    def rows(self) -> int:
        """How many rows are normalised."""
        return self._rows

    @property
    def features(self) -> int:
        """How many elements each row has."""
        return self._feats

    @property
    def stats_shape(self) -> tuple:
        """The shape of the statistics (``x.shape[:-k] + (1,) * k``)."""
        return self._stats_shape

    @property
    def alignment(self) -> int:
        """The byte alignment every pointer of a call must have."""
        return self._align

    @property
    def engine(self) -> str:
        """The chosen engine and knobs (``"eng3 k18=2"``)."""
        self.plan()
        return self._candidates[self._choice]["name"]

    @property
    def notes(self) -> tuple:
        """The chosen engine's numerical and behaviour notes."""
        self.plan()
        return tuple(self._candidates[self._choice].get("notes", ()))


class NormForwardPlan(NormPlan):
    """A planned layer norm or RMS norm forward (training or inference).

    Parameters
    ----------
    x : DeviceArray or CUDA array
        Example input: its shape, dtype, device and pointer alignment are used.
    weight : DeviceArray or CUDA array
        Example weight, shape ``x.shape[-normalized_ndim:]``, float32 or ``x``'s dtype.
    bias : DeviceArray or CUDA array, optional
        Layer norm only: like ``weight``.  Without it the graph has no bias.
    mode : {"layer", "rms"}
    eps : float
        Added to the variance (mean square); fixed per plan.
    training : bool
        Also write the statistics the backward needs (mean and inverse deviation for layer
        norm, inverse RMS for RMS norm).
    normalized_ndim : int
        How many trailing dimensions are normalised together.
    deterministic : bool
        Only engines cuDNN reports deterministic.
    workspace_limit : int, optional
        Bytes of workspace a candidate may need (default: the cuDNN workspace limit).
    max_candidates : int, optional
        The most engines finalized as candidates.
    alignment : int, optional
        The byte alignment to declare (default: what the example arrays' pointers have, at
        most 16).

    Examples
    --------
    >>> plan = NormForwardPlan(x, w, b, training=True)       # doctest: +SKIP
    >>> plan.autotune(); y, mean, inv_std = plan.execute(x, w, b)   # doctest: +SKIP
    """

    kind = "cudnn_norm_forward"
    op = "forward"

    def __init__(self, x, weight, bias=None, *, mode="layer", eps=1e-5, training=False,
                 normalized_ndim=1, deterministic=False, workspace_limit=None,
                 max_candidates=None, alignment=None):
        name = type(self).__name__
        mode = check_mode(mode)
        x, w, b, dev = _operands(name, (x, "x"), (weight, "weight"), (bias, "bias"),
                                 required=2)
        check_forward(name, mode, x, w, b, normalized_ndim)
        self._eps = check_eps(eps, name)
        self._training = bool(training)
        self._bias = b is not None
        # A host float32 that every variant pack binds to epsilon (read at each execute).
        self._eps_box = ctypes.c_float(self._eps)
        self._fixed = (3 if self._bias else 2,)     # epsilon's place among the pointers
        self._setup(dev, mode, x, check_ndim(normalized_ndim, x, name), w.dtype,
                    alignment_of(x, w, b) if alignment is None else alignment, deterministic,
                    workspace_limit, max_candidates)

    def _build_graph(self, handle=None):
        return forward_graph(self._mode, self._training, self._dtype, self._wdtype, self._rows,
                             self._feats, bias=self._bias, alignment=self._align, handle=handle)

    def _extra_text(self) -> str:
        return (f", {'training' if self._training else 'inference'}"
                f"{', bias' if self._bias else ''}, eps {self._eps:g}")

    def _tuning_extra(self) -> dict:
        return {"training": self._training, "bias": self._bias}

    def _host_ptr(self, uid) -> int:
        return ctypes.addressof(self._eps_box)

    def _heuristics(self) -> list[dict]:
        """cuDNN's engines and the ``norm.ptx`` forward kernel.  The kernel comes first for
        float32 weights on 16-bit data, which cuDNN 9.19 runs only on its generic engine
        (bfloat16 16384 x 4096 layer norm on an H100: 315 us against the kernel's 102, the
        same as with bfloat16 weights), and serves alone a problem no engine takes; else it
        follows the engines, for an autotune to weigh."""
        try:
            cands = NormPlan._heuristics(self)
        except NoNormEngineError:
            cands, self._objs = [], []
        kernel = {"name": _KERNEL.name, "id": "kernel:norm.ptx", "backend": "kernel",
                  "workspace": 0, "notes": (), "deterministic": True}
        if cands and self._wdtype == self._dtype:
            self._objs.append(_KERNEL)
            return cands + [kernel]
        self._objs.insert(0, _KERNEL)
        return [kernel] + cands

    def _run_kernel(self, ptrs, s) -> None:
        # ptrs in uid order: x, weight, [bias], epsilon, y, then the statistics in training
        x, w = ptrs[0], ptrs[1]
        b = ptrs[2] if self._bias else 0
        y = ptrs[self._fixed[0] + 1]
        stats = ptrs[self._fixed[0] + 2:]
        mean, rstd = ((stats[0], stats[1]) if self._mode == "layer" else (0, stats[0])) \
            if self._training else (0, 0)
        launch_norm_forward(self._device, self._mode == "rms", self._dtype, x, 0, y, 0, w,
                            self._wdtype, b, self._wdtype, mean, rstd, self._rows, self._feats,
                            self._eps, s)

    @property
    def training(self) -> bool:
        """Whether the forward writes the statistics."""
        return self._training

    @property
    def eps(self) -> float:
        """The epsilon baked into the plan."""
        return self._eps

    @property
    def has_bias(self) -> bool:
        """Whether the plan adds a bias (layer norm)."""
        return self._bias

    def execute(self, x, weight, bias=None, *, out=None, stream=None):
        """Normalise ``x`` on ``stream``.

        Parameters
        ----------
        x, weight, bias : DeviceArray
            Of the plan's shapes and dtypes (``bias`` exactly when the plan has one).
        out : DeviceArray or tuple, optional
            ``y``, or ``(y, mean, inv_std)`` (layer norm, training) / ``(y, inv_rms)`` (RMS
            norm, training); None entries are allocated.
        stream : Stream, optional

        Returns
        -------
        DeviceArray or tuple
            ``y``; in training ``(y, mean, inv_std)`` or ``(y, inv_rms)``.
        """
        op = f"{type(self).__name__}.execute"
        (x, w, b), dev = self._front(op, stream, 2, (x, "x"), (weight, "weight"),
                                     (bias, "bias"))
        self._match(x, "x", op)
        self._match(w, "weight", op, True)
        if (b is not None) != self._bias:
            raise ValueError(f"{op}: the plan was made {'with' if self._bias else 'without'} "
                             "a bias")
        if b is not None:
            self._match(b, "bias", op, True)
        return self._forward(op, dev, as_stream(stream, dev), x, w, b, out)

    def _forward(self, op, dev, s, x, w, b, out):
        """Outputs made or checked, pointers bound, the engine run: on checked inputs."""
        e = self._ready()
        n = (3 if self._mode == "layer" else 2) if self._training else 1
        outs = outs_of(out, n, op)
        ins = {"x": x, "weight": w, "bias": b}
        y = self._new(outs[0], self._shape, self._dtype, "out", op, dev, s, ins)
        ptrs = [x.address, w.address]
        if b is not None:
            ptrs.append(b.address)
        ptrs += [ctypes.addressof(self._eps_box), y.address]
        res = [y]
        if self._training:
            for o, name in zip(outs[1:], ("mean", "inv_std") if self._mode == "layer"
                               else ("inv_rms",)):
                st = self._new(o, self._stats_shape, F32, f"out[{name}]", op, dev, s, ins)
                res.append(st)
                ptrs.append(st.address)
        self._aligned(op, (x, w, b, *res))
        self._launch(e, dev, s, ptrs)
        return tuple(res) if self._training else y


class NormBackwardPlan(NormPlan):
    """A planned layer norm or RMS norm backward: ``(dx, dweight[, dbias])`` from ``dy``.

    Parameters
    ----------
    dy, x, weight : DeviceArray or CUDA array
        Example output gradient, input and weight (shapes, dtypes, device, alignment).
    mode : {"layer", "rms"}
    normalized_ndim, deterministic, workspace_limit, max_candidates, alignment
        As for :class:`NormForwardPlan`.

    Notes
    -----
    Layer norm always gives ``dbias`` (the row sum of ``dy``; cheap beside ``dx``).
    """

    kind = "cudnn_norm_backward"
    op = "backward"

    def __init__(self, dy, x, weight, *, mode="layer", normalized_ndim=1, deterministic=False,
                 workspace_limit=None, max_candidates=None, alignment=None):
        name = type(self).__name__
        mode = check_mode(mode)
        dy, x, w, dev = _operands(name, (dy, "dy"), (x, "x"), (weight, "weight"), required=3)
        k = check_backward(name, x, dy, w, normalized_ndim)
        self._setup(dev, mode, x, k, w.dtype,
                    alignment_of(dy, x, w) if alignment is None else alignment, deterministic,
                    workspace_limit, max_candidates)

    def _build_graph(self, handle=None):
        return backward_graph(self._mode, self._dtype, self._wdtype, self._rows, self._feats,
                              alignment=self._align, handle=handle)

    def execute(self, dy, x, weight, mean=None, inv_std=None, *, out=None, stream=None):
        """The gradients on ``stream``.

        Parameters
        ----------
        dy, x, weight : DeviceArray
            Of the plan's shapes and dtypes.
        mean : DeviceArray or None
            Layer norm: the saved mean (float32, one per row); RMS norm: None.
        inv_std : DeviceArray
            The saved inverse deviation (layer norm) or inverse RMS (RMS norm).
        out : DeviceArray or tuple, optional
            ``dx``, or ``(dx, dweight[, dbias])``; None entries are allocated.
        stream : Stream, optional

        Returns
        -------
        tuple
            ``(dx, dweight, dbias)`` for layer norm, ``(dx, dweight)`` for RMS norm.
        """
        op = f"{type(self).__name__}.execute"
        (dy, x, w, m, r), dev = self._front(op, stream, 3, (dy, "dy"), (x, "x"),
                                            (weight, "weight"), (mean, "mean"),
                                            (inv_std, "inv_std"))
        self._match(dy, "dy", op)
        self._match(x, "x", op)
        self._match(w, "weight", op, True)
        m, r = check_stats(op, self._mode, m, r, self._rows)
        return self._backward(op, dev, as_stream(stream, dev), dy, x, w, m, r, out)

    def _backward(self, op, dev, s, dy, x, w, m, r, out):
        e = self._ready()
        layer = self._mode == "layer"
        outs = outs_of(out, 3 if layer else 2, op)
        ins = {"dy": dy, "x": x, "weight": w, "mean": m, "inv_std": r}
        dx = self._new(outs[0], self._shape, self._dtype, "dx", op, dev, s, ins)
        dw = self._new(outs[1], self._wshape, self._wdtype, "dweight", op, dev, s, ins)
        ptrs = [dy.address, x.address, w.address]
        if layer:
            db = self._new(outs[2], self._wshape, self._wdtype, "dbias", op, dev, s, ins)
            ptrs += [m.address, r.address, dx.address, dw.address, db.address]
            self._aligned(op, (dy, x, w, m, r, dx, dw, db))
            self._launch(e, dev, s, ptrs)
            return dx, dw, db
        ptrs += [r.address, dx.address, dw.address]
        self._aligned(op, (dy, x, w, r, dx, dw))
        self._launch(e, dev, s, ptrs)
        return dx, dw


# -- the one-shot functions ------------------------------------------------------------------
def _norm_forward(op, mode, x, weight, bias, eps, training, normalized_ndim, out, stream,
                  algo, deterministic):
    x, w, b, dev = _operands(op, (x, "x"), (weight, "weight"), (bias, "bias"), stream=stream,
                             required=2)
    k = check_forward(op, mode, x, w, b, normalized_ndim)
    e = check_eps(eps, op)
    training = bool(training)
    check_algo(algo, op)
    outs = given_outs(outs_of(out, (3 if mode == "layer" else 2) if training else 1, op), op, dev)
    al = alignment_of(x, w, b, *outs)
    require_aligned(op, al)
    key = (NORM_FORWARD_KEY, dev.ordinal, mode, x.dtype, w.dtype, x.shape, k, al, algo,
           bool(deterministic), _default_limit(), training, b is not None, e)
    s = as_stream(stream, dev)
    plan = _planned(key, lambda: NormForwardPlan(
        x, w, b, mode=mode, eps=e, training=training, normalized_ndim=k,
        deterministic=deterministic, alignment=al,
        max_candidates=1 if algo == "heuristic" else None), tune=algo == "find", stream=s)
    return plan._forward(op, dev, s, x, w, b, outs)


def _norm_backward(op, mode, dy, x, weight, mean, inv, normalized_ndim, out, stream, algo,
                   deterministic):
    dy, x, w, m, r, dev = _operands(op, (dy, "dy"), (x, "x"), (weight, "weight"),
                                    (mean, "mean"), (inv, "inv_std" if mode == "layer"
                                                     else "inv_rms"), stream=stream,
                                    required=3)
    k = check_backward(op, x, dy, w, normalized_ndim)
    rows = split_rows(x.shape, k)[0]
    m, r = check_stats(op, mode, m, r, rows)
    check_algo(algo, op)
    outs = given_outs(outs_of(out, 3 if mode == "layer" else 2, op), op, dev)
    al = alignment_of(dy, x, w, m, r, *outs)
    require_aligned(op, al)
    key = (NORM_BACKWARD_KEY, dev.ordinal, mode, x.dtype, w.dtype, x.shape, k, al, algo,
           bool(deterministic), _default_limit())
    s = as_stream(stream, dev)
    plan = _planned(key, lambda: NormBackwardPlan(
        dy, x, w, mode=mode, normalized_ndim=k, deterministic=deterministic, alignment=al,
        max_candidates=1 if algo == "heuristic" else None), tune=algo == "find", stream=s)
    return plan._backward(op, dev, s, dy, x, w, m, r, outs)


def layer_norm(x, weight, bias=None, *, eps=1e-5, training=False, normalized_ndim=1, out=None,
               stream=None, algo="heuristic", deterministic=False):
    """Layer norm over the last ``normalized_ndim`` dimensions of ``x``.

    ``y = (x - mean) * inv_std * weight + bias`` with ``inv_std = 1 / sqrt(var + eps)`` (the
    biased variance), as ``torch.nn.functional.layer_norm``.

    Parameters
    ----------
    x : DeviceArray or CUDA array
        float32, float16 or bfloat16, C-contiguous.
    weight : DeviceArray or CUDA array
        Shape ``x.shape[-normalized_ndim:]``, float32 or ``x``'s dtype.
    bias : DeviceArray or CUDA array, optional
        Like ``weight`` (same dtype).
    eps : float
    training : bool
        Also return the statistics :func:`layer_norm_backward` needs.
    normalized_ndim : int
        How many trailing dimensions are normalised together.
    out : DeviceArray or tuple, optional
        ``y``, or ``(y, mean, inv_std)`` in training; None entries are allocated.
    stream : Stream, optional
    algo : {"heuristic", "find"}
        ``"find"`` autotunes the plan on its first use (the choice kept in the tuning store).
    deterministic : bool
        Only engines cuDNN reports deterministic.

    Returns
    -------
    DeviceArray or tuple
        ``y`` (``x``'s shape and dtype); in training ``(y, mean, inv_std)``, the statistics
        float32 of shape ``x.shape[:-normalized_ndim] + (1,) * normalized_ndim``.

    Raises
    ------
    TypeError, ValueError
        Bad dtypes, shapes, layouts, devices, ``eps`` -- before any cuDNN call.
    NoNormEngineError
        cuDNN offers no engine for the problem on this device.
    """
    return _norm_forward("layer_norm", "layer", x, weight, bias, eps, training,
                         normalized_ndim, out, stream, algo, deterministic)


def rms_norm(x, weight, *, eps=1e-5, training=False, normalized_ndim=1, out=None, stream=None,
             algo="heuristic", deterministic=False):
    """RMS norm over the last ``normalized_ndim`` dimensions of ``x``.

    ``y = x * inv_rms * weight`` with ``inv_rms = 1 / sqrt(mean(x**2) + eps)``, as
    ``torch.nn.functional.rms_norm`` (whose default ``eps`` is the dtype's machine epsilon:
    pass it explicitly to compare).

    Parameters
    ----------
    x, weight, eps, normalized_ndim, stream, algo, deterministic
        As for :func:`layer_norm`.
    training : bool
        Also return ``inv_rms`` for :func:`rms_norm_backward`.
    out : DeviceArray or tuple, optional
        ``y``, or ``(y, inv_rms)`` in training.

    Returns
    -------
    DeviceArray or tuple
        ``y``; in training ``(y, inv_rms)`` (float32, the statistics' shape).
    """
    return _norm_forward("rms_norm", "rms", x, weight, None, eps, training, normalized_ndim,
                         out, stream, algo, deterministic)


def layer_norm_backward(dy, x, weight, mean, inv_std, *, normalized_ndim=1, out=None,
                        stream=None, algo="heuristic", deterministic=False):
    """Gradients of :func:`layer_norm`: ``(dx, dweight, dbias)``.

    Parameters
    ----------
    dy : DeviceArray or CUDA array
        The output gradient (``x``'s shape and dtype).
    x, weight : DeviceArray or CUDA array
        As given to the forward.
    mean, inv_std : DeviceArray or CUDA array
        The statistics the training forward returned (float32, one per row).
    normalized_ndim, stream, algo, deterministic
        As for :func:`layer_norm`.
    out : DeviceArray or tuple, optional
        ``dx``, or ``(dx, dweight, dbias)``; None entries are allocated.

    Returns
    -------
    tuple
        ``dx`` (``x``'s shape and dtype), ``dweight`` and ``dbias`` (the weight's shape and
        dtype).
    """
    return _norm_backward("layer_norm_backward", "layer", dy, x, weight, mean, inv_std,
                          normalized_ndim, out, stream, algo, deterministic)


def rms_norm_backward(dy, x, weight, inv_rms, *, normalized_ndim=1, out=None, stream=None,
                      algo="heuristic", deterministic=False):
    """Gradients of :func:`rms_norm`: ``(dx, dweight)``.

    Parameters
    ----------
    dy, x, weight
        As for :func:`layer_norm_backward`.
    inv_rms : DeviceArray or CUDA array
        The statistic the training forward returned (float32, one per row).
    normalized_ndim, out, stream, algo, deterministic
        As for :func:`layer_norm_backward` (``out``: ``dx`` or ``(dx, dweight)``).

    Returns
    -------
    tuple
        ``(dx, dweight)``.
    """
    return _norm_backward("rms_norm_backward", "rms", dy, x, weight, None, inv_rms,
                          normalized_ndim, out, stream, algo, deterministic)
