"""Convolution plans: forward, backward data and backward filter as user-held plans.

A plan is built once per problem -- operand shapes, dtype, layout, padding / stride /
dilation / groups, math type, determinism, workspace limit, ``alpha``/``beta`` -- and then
executed as often as wanted, from any number of threads at once::

    plan = cudnn.ConvForwardPlan(x, w, padding=1)   # example arrays: shape, dtype, layout
    plan.autotune()                                   # optional: time every candidate
    y = plan.execute(x, w)                            # writes pointers only
    plan.close()

:meth:`~cudalibs.runtime.plan.Plan.plan` asks cuDNN's heuristics for candidates: on the graph
(backend) API first (engines the legacy API lacks: Hopper kernels, runtime fusion), else --
float64, an explicit legacy algorithm, other ``alpha``/``beta``, ``Options.conv_graph_api`` off, or no
engine taking the problem -- the legacy algorithms, with the reason kept in :attr:`fallback`.
A graph plan of a plain convolution lists the legacy algorithms after its engines, for the
autotune to weigh (some kernels, such as float32 Winograd, exist only there).
:meth:`~cudalibs.runtime.plan.Plan.autotune` times them with the one timer
(:func:`~cudalibs.runtime.plan.time_candidates`) on scratch inputs and keeps the choice in the
tuning store, so the next process picks it without timing.  A graph plan whose call brings
pointers less aligned than it declared runs that call on its legacy twin.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

import numpy as np

from ...driver.args import int_tuple
from ...driver.stream import as_stream
from ...errors import CudaLibsError
from ...runtime import log as _log
from ...runtime.operand import operands as _operands
from ...runtime.options import options as _current_options
from ...runtime.plan import Plan, scratch as _scratch
from .. import _lib
from .. import backend as _be
from .._base import last_error_string, raise_for, version_int
from .._common import (check_float, check_overlap, is_double, layout_of, out_hint, output,
                      pick_layout, scalar)
from ..descriptors import (MATH_TYPES, check_conv_params, convolution_descriptor,
                          filter_descriptor, layout_name, packed_strides, tensor_descriptor)
from ..handle import handle_for, workspace
from ..handle import workspace_limit as _default_limit
from . import legacy as _legacy
from . import lower as _lower

__all__ = ["ConvPlan", "conv_output_shape", "check_channels", "math_defaults", "check_pair",
           "conv_params", "byte_strides", "GraphRun", "LegacyRun"]

_logger = _log.get("cudnn")


# -- problem checks (no library call) ------------------------------------------------------------
def conv_output_shape(x_shape, w_shape, *, stride=1, padding=0, dilation=1, groups=1
                      ) -> tuple[int, ...]:
    """The output shape of a convolution, by the formula (no library call).

    ``out = (in + 2 * padding - dilation * (window - 1) - 1) // stride + 1`` per spatial
    dimension; ``(N, K, ...)`` overall.

    Raises
    ------
    ValueError
        Mismatched channels, groups not dividing them, bad parameters, or an output
        dimension below 1.
    """
    op = "conv_output_shape: "
    x_shape = int_tuple(x_shape, op + "x_shape", scalar=False)
    w_shape = int_tuple(w_shape, op + "w_shape", scalar=False)
    nsp = len(x_shape) - 2
    if nsp < 1 or len(w_shape) != len(x_shape):
        raise ValueError(f"{op}x_shape {x_shape} and w_shape {w_shape} need the same number "
                         "(>= 3) of dimensions")
    stride = int_tuple(stride, op + "stride", nsp)
    padding = int_tuple(padding, op + "padding", nsp)
    dilation = int_tuple(dilation, op + "dilation", nsp)
    check_conv_params(padding, stride, dilation, int(groups))
    check_channels(x_shape[1], w_shape, groups)
    out = [x_shape[0], w_shape[0]]
    for i in range(nsp):
        size = (x_shape[2 + i] + 2 * padding[i] - dilation[i] * (w_shape[2 + i] - 1) - 1
                ) // stride[i] + 1
        if size < 1:
            raise ValueError(
                f"output too small: spatial dimension {i} of the input ({x_shape[2 + i]}, "
                f"padding {padding[i]}) is smaller than the dilated filter "
                f"({dilation[i] * (w_shape[2 + i] - 1) + 1}); the output would have size {size}")
        out.append(size)
    return tuple(out)


def check_channels(c, w_shape, groups) -> None:
    k, cg = w_shape[0], w_shape[1]
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    if c % groups:
        raise ValueError(f"groups={groups} does not divide the {c} input channels")
    if k % groups:
        raise ValueError(f"groups={groups} does not divide the {k} output channels (filters)")
    if cg * groups != c:
        raise ValueError(f"channel mismatch: the input has {c} channels, the filter expects "
                         f"{cg} per group x {groups} group(s) = {cg * groups}")


def math_defaults(dtype, math):
    """(compute cudnnDataType_t, requested math type int, math name)."""
    dt = np.dtype(dtype)
    compute = _lib.CUDNN_DATA_DOUBLE if dt == np.float64 else _lib.CUDNN_DATA_FLOAT
    if math is None:
        math = ("fma" if dt == np.float32 else "default" if dt == np.float64 else "tensor_op")
    if math not in MATH_TYPES:
        raise ValueError(f"math must be one of {sorted(MATH_TYPES)}, not {math!r}")
    return compute, MATH_TYPES[math], math


def check_pair(a, b, an, bn, op):
    check_float(a, f"{op}: {an}")
    if b.dtype != a.dtype:
        raise TypeError(f"{op}: {bn} has dtype {b.dtype} but {an} has {a.dtype}; they must "
                        "match")
    if b.ndim != a.ndim:
        raise ValueError(f"{op}: {an} {a.shape} and {bn} {b.shape} need the same number of "
                         "dimensions (4 for 2-D convolution, 5 for 3-D)")


def conv_params(nsp, stride, padding, dilation, groups):
    """Checked ``(padding, stride, dilation, groups)``."""
    stride = int_tuple(stride, "stride", nsp)
    padding = int_tuple(padding, "padding", nsp)
    dilation = int_tuple(dilation, "dilation", nsp)
    groups = int(groups)
    check_conv_params(padding, stride, dilation, groups)
    return padding, stride, dilation, groups


def tdesc(dtype, shape, cl):
    return tensor_descriptor(dtype, shape, packed_strides(shape, cl))


def library_output_dims(conv_desc, x_desc, w_desc, nd) -> tuple[int, ...]:
    dims = (ctypes.c_int * nd)()
    st = _lib.get().cudnnGetConvolutionNdForwardOutputDim(conv_desc.raw, x_desc.raw,
                                                          w_desc.raw, nd, dims)
    if st:
        raise_for(st, "cudnnGetConvolutionNdForwardOutputDim")
    return tuple(dims)


def describe(dtype, x_shape, w_shape, cl, pad, stride, dil, groups) -> str:
    return (f"{np.dtype(dtype)} {layout_name(len(x_shape), cl)} input {tuple(x_shape)}, "
            f"filter {tuple(w_shape)}, padding {pad}, stride {stride}, dilation {dil}, "
            f"groups {groups}")


def byte_strides(shape, cl, itemsize):
    return tuple(v * itemsize for v in packed_strides(shape, cl))


# -- what runs a candidate -----------------------------------------------------------------------
class GraphRun:
    """A finalized graph execution plan as a candidate."""

    __slots__ = ("gplan", "workspace")

    def __init__(self, gplan):
        self.gplan = gplan
        self.workspace = gplan.workspace_size


class LegacyRun:
    """A legacy algorithm with its descriptors (the convolution descriptor of its math)."""

    __slots__ = ("fn", "name", "raws", "descs", "algo", "workspace", "double")

    def __init__(self, fn_name, descs, algo, workspace, double):
        self.fn = getattr(_lib.get(), fn_name)
        self.name = fn_name
        self.descs = descs              # held: the raws below stay valid
        self.raws = tuple(d.raw for d in descs)
        self.algo = algo
        self.workspace = workspace
        self.double = double


# -- the plan base -------------------------------------------------------------------------------
class ConvPlan(Plan):
    """The shared front of the convolution plans (see the module docstring).

    Subclasses (:class:`ConvForwardPlan`, :class:`ConvBackwardDataPlan`,
    :class:`ConvBackwardFilterPlan`, :class:`~cudalibs.cudnn.fused.ConvBiasActPlan`) say
    which operands they take; construction checks the problem and builds the legacy
    descriptors, :meth:`plan` finalizes the candidates, ``execute`` runs the chosen one.

    Attributes
    ----------
    op : str
        ``"forward"``, ``"backward_data"``, ``"backward_filter"`` or ``"fused"``.
    out_shape : tuple of int
        The output's logical shape; :attr:`layout` its layout, :attr:`out_strides` its
        packed byte strides.
    backend : str
        ``"graph"``, ``"legacy"`` (or ``"graph+kernel"`` for a fused plan's composite).
    fallback : str or None
        Why a plan that could have used the graph API has legacy candidates only.
    """

    kind = "cudnn_conv"
    library = "cuDNN"
    # Timed with a warm L2, as cuDNN's own find and torch's benchmark mode time: in a network
    # a convolution reads the activations the layer before it has just written.  Measured on
    # an H100 (fp16 NHWC, batch 32, 256->64 1x1 at 56x56): the cold-L2 winner ran 34.9 us in
    # a warm loop where another engine ran 27.6 us.
    tune_flush_l2 = False
    op = ""
    legacy_op = ""
    #: Whether a graph plan's candidates include the legacy algorithms after its engines.
    legacy_alongside = True
    names = ("a", "b")

    # -- construction ----------------------------------------------------------------------------
    def _setup(self, a, b, extra, *, stride, padding, dilation, groups, algo, math,
               deterministic, workspace_limit, alpha, beta, out, graph_api, max_candidates):
        an, bn = self.names
        opname = f"{type(self).__name__}"
        a, b, dev = _operands(opname, (a, an), (b, bn), required=2)
        check_pair(a, b, an, bn, opname)
        cl = pick_layout((layout_of(a, an), an), (layout_of(b, bn), bn), prefer=out_hint(out))
        pad, st_, dil, groups = conv_params(a.ndim - 2, stride, padding, dilation, groups)
        self._dtype = np.dtype(a.dtype)
        self._cl = cl
        self._conv = (pad, st_, dil, groups)
        self._in = ((a.shape, byte_strides(a.shape, cl, a.itemsize)),
                    (b.shape, byte_strides(b.shape, cl, b.itemsize)))
        c_shape, c_shapes, problem = self._shapes(a.shape, b.shape, extra)
        self._out_shape = tuple(c_shape)
        self._out_strides = byte_strides(c_shape, cl, self._dtype.itemsize)
        self._c_shapes = c_shapes          # (A, B, C) in the library call's order
        # bytes each packed operand spans from its pointer (a, b as execute takes them, out):
        # the overlap test of a call is then a few integer comparisons
        it = self._dtype.itemsize
        self._spans = (int(np.prod(a.shape)) * it, int(np.prod(b.shape)) * it,
                       int(np.prod(c_shape)) * it)
        self._text = problem
        self._mathinfo = math_defaults(self._dtype, math)
        self._request = algo
        self._algo = _legacy.resolve_algo(_legacy.OPS[self.legacy_op], algo)
        self._det = bool(deterministic)
        self._limit = _default_limit() if workspace_limit is None else int(workspace_limit)
        self._alpha, self._beta = float(alpha), float(beta)
        self._double = is_double(self._dtype)
        self._max = _be.engines.FIND_MAX_PLANS if max_candidates is None else max(1, int(max_candidates))
        graph = _current_options().conv_graph_api if graph_api is None else bool(graph_api)
        self._graph = (graph and self._alpha == 1.0 and self._beta == 0.0
                       and isinstance(self._algo, str))
        self._fallback = None
        if self._graph and self._double:
            self._graph, self._fallback = False, "float64 runs on the legacy API"
        self._objs: list = []
        self._exe = None
        self._twin = None
        self._twin_lock = threading.Lock()
        self._legacy_descs = self._build_descs()
        self._init_plan(dev)
        self._borrow()      # the descriptors are shared (cached) ones: nothing of its own

    def _shapes(self, a_shape, b_shape, extra):
        """``(output shape, (A, B, C) shapes in the call's order, problem text)``."""
        raise NotImplementedError

    def _build_descs(self):
        """The legacy ``(A, B, C)`` descriptors."""
        dt, cl = self._dtype, self._cl
        shapes = self._c_shapes
        filt = self._filter_slot()
        return tuple(filter_descriptor(dt, sh, cl) if i == filt else tdesc(dt, sh, cl)
                     for i, sh in enumerate(shapes))

    def _filter_slot(self) -> int:
        raise NotImplementedError

    # -- Plan hooks ------------------------------------------------------------------------------
    def _problem(self) -> str:
        return f"{self.op} {self._text}"

    def _tuning_key(self):
        return {"op": self.op, "dtype": str(self._dtype), "layout": self.layout,
                "shapes": [list(s) for s in self._c_shapes], "conv": [list(v) if
                                                                      isinstance(v, tuple)
                                                                      else v for v in self._conv],
                "math": self._mathinfo[2], "deterministic": self._det, "limit": self._limit,
                "alpha": self._alpha, "beta": self._beta, "graph": self._graph,
                # "find" and "heuristic" offer the same candidates; a named algorithm, one
                "algo": self._algo if not isinstance(self._algo, str) else "search",
                "max_candidates": self._max, "l2": "warm",
                "legacy_alongside": self._graph and self.legacy_alongside,
                **self._tuning_extra()}

    def _tuning_extra(self) -> dict:
        return {}

    def _library_version(self) -> str:
        return str(version_int())

    def _handle(self):
        return handle_for(self._device, as_stream(None, self._device).raw_handle)

    def _heuristics(self) -> list[dict]:
        h = self._handle()
        cands, objs = [], []
        if self._graph:
            try:
                graph = self._make_graph(h)
                banned = _be.banned_notes(self._dtype, self._mathinfo[2], self._det)
                for c, p in _be.candidates(h, graph, self._uids(), banned, self._limit,
                                           self._max):
                    cands.append(c)
                    objs.append(GraphRun(p))
            except Exception as exc:   # noqa: BLE001 - any failure of the graph route: legacy
                last_error_string()
                self._fallback = str(exc) if isinstance(exc, _be.NoGraph) else _be.why(exc)
                cands, objs = [], []
        extra_c, extra_o = self._extra_candidates(h, bool(cands))
        cands += extra_c
        objs += extra_o
        if cands and self.legacy_alongside:
            # The legacy API still has kernels no graph engine offers for some problems
            # (float32 Winograd for 3x3 backward data: 0.56x the time of the best graph
            # engine on an H100), so an autotune weighs them too.  After the graph
            # candidates: the heuristic choice stays the graph API's first engine.
            try:
                leg_c, leg_o = self._legacy_candidates(h)
            except CudaLibsError:
                last_error_string()
                leg_c, leg_o = [], []
            cands += leg_c[:self._max]
            objs += leg_o[:self._max]
        if not cands:
            cands, objs = self._legacy_candidates(h)
            if self._fallback:
                _logger.info("%s %s: the graph API has no engine (%s); legacy algorithms",
                             type(self).__name__, self._text, self._fallback)
        self._objs = objs
        return cands

    def _make_graph(self, h):
        pad, st_, dil, _ = self._conv
        return _lower.conv_graph(h, self.op, self._dtype, self._cl, self._c_shapes, pad, st_, dil)

    def _uids(self):
        return (1, 2, 3)

    def _extra_candidates(self, h, have_graph: bool):
        return [], []

    def _legacy_candidates(self, h):
        lop = _legacy.OPS[self.legacy_op]
        compute, req_math, _ = self._mathinfo
        pad, st_, dil, groups = self._conv
        a, b, c = self._legacy_descs
        conv = convolution_descriptor(pad, st_, dil, groups, compute, req_math)
        cands = _legacy.candidates(lop, h, (a.raw, b.raw, conv.raw, c.raw), self._algo,
                                   self._det, self._limit, req_math, self._text)
        objs = []
        for cand in cands:
            m = cand["math"]
            cd = conv if m == req_math else convolution_descriptor(pad, st_, dil, groups,
                                                                    compute, m)
            objs.append(LegacyRun(self._legacy_fn(), (a, b, cd, c), cand["algo"],
                                   cand["workspace"], self._double))
        return cands, objs

    def _legacy_fn(self) -> str:
        return _legacy.OPS[self.legacy_op].run

    def _select(self, i: int) -> None:
        self._exe = self._objs[i]

    @contextlib.contextmanager
    def _runner(self, stream):
        dev = self._device
        ins = [_scratch(sh, self._dtype, dev, stream, strides=st) for sh, st in
               self._scratch_specs()]
        outs = _scratch(self._out_shape, self._dtype, dev, stream, strides=self._out_strides)
        ws = max((c.get("workspace", 0) for c in self._candidates), default=0)
        packs: dict = {}

        def run(i):
            ptrs = self._call_ptrs(ins, outs)
            self._call(self._objs[i], dev, stream, ptrs, packs, i)

        try:
            workspace(dev, stream.raw_handle, ws)     # grown once, before the timed loops
            yield run
        finally:
            packs.clear()
            del ins, outs

    def _scratch_specs(self):
        """``(shape, byte strides)`` of each scratch input, in the call's order."""
        return [(sh, byte_strides(sh, self._cl, self._dtype.itemsize))
                for sh in self._c_shapes[:2]]

    def _call_ptrs(self, ins, out):
        return (ins[0].ptr, ins[1].ptr, out.ptr)

    # -- running ---------------------------------------------------------------------------------
    def _call(self, e, dev, s, ptrs, packs=None, slot=None):
        """Run candidate ``e`` on pointers ``ptrs`` (the call's order) on stream ``s``."""
        ws_ptr, ws_size = workspace(dev, s.raw_handle, e.workspace)
        if type(e) is GraphRun:
            g = e.gplan
            if packs is not None:       # timing: packs of scratch pointers, not kept
                vp = packs.get(slot)
                if vp is None:
                    vp = packs[slot] = g.pack_uncached(ptrs, ws_ptr)
                g.run_pack(handle_for(dev, s.raw_handle).raw, vp)
                return
            m = 0
            for p in ptrs:
                m |= p
            if m % _be.ALIGNMENT:
                # Less aligned than the plan declared: the legacy twin takes any.
                twin = self._legacy_twin()
                return twin._call(twin._exe, dev, s, ptrs)
            g.run(dev, s, ptrs, ws_ptr, _be.ALIGNMENT, aligned=True)
            return
        self._legacy_call(e, handle_for(dev, s.raw_handle), s, ptrs, ws_ptr, ws_size)

    def _legacy_call(self, e, h, s, ptrs, ws_ptr, ws_size):
        a, b, conv, c = e.raws
        d = e.double
        st = e.fn(h.raw, scalar(self._alpha, d), a, ptrs[0], b, ptrs[1], conv, e.algo, ws_ptr,
                  ws_size, scalar(self._beta, d), c, ptrs[2])
        if st:
            raise_for(st, e.name, f"plan: {self!r}")

    def _legacy_twin(self):
        """This problem's legacy plan (heuristic choice), for calls whose pointers are less
        aligned than a graph plan declares; built on first need."""
        t = self._twin
        if t is None:
            with self._twin_lock:
                t = self._twin
                if t is None:
                    t = self._make_twin()
                    t.plan()
                    self._twin = t
        return t

    def _make_twin(self):
        """A legacy-only copy of this plan's problem (heuristic choice)."""
        t = object.__new__(type(self))
        t._adopt(self, _graph=False, _algo="heuristic", _request="heuristic",
                 _fallback="the call's pointers are less aligned than the graph plan declares")
        return t

    def _adopt(self, src, **changes) -> None:
        """Become an unplanned copy of ``src``'s problem (``changes`` applied): a legacy twin,
        or the plain convolution inside a fused plan."""
        self.__dict__.update(src.__dict__)
        self.__dict__.update(changes)
        self._objs, self._exe, self._twin, self._twin_lock = [], None, None, threading.Lock()
        self._init_plan(src.device)
        self._borrow()

    #: Which of ``execute``'s two inputs the library call takes first.
    order = (0, 1)

    def execute(self, a, b, *, out=None, stream=None):
        """Run the convolution on ``stream``; the two inputs in :attr:`names` order
        (``dy, w`` for backward data, ``x, dy`` for backward filter).

        Parameters
        ----------
        a, b : DeviceArray
            Of the plan's shapes, dtype and layout.
        out : DeviceArray, optional
            Allocated stream-ordered if None; must not overlap an input.
        stream : Stream, optional

        Returns
        -------
        DeviceArray
            ``out``.
        """
        a, b, c, dev, s = self._check_operands(a, b, out, stream,
                                               f"{type(self).__name__}.execute")
        ins = (a, b)
        self._call(self._exe, dev, s, (ins[self.order[0]].address, ins[self.order[1]].address,
                                       c.address))
        return c

    def output_for(self, out, dev, s, op):
        """The call's output: ``out`` checked against the plan's shape, dtype and layout, or a
        new array of them allocated on ``s``.  ``out`` has been through the operand path (the
        one-shots pass it with their inputs), so one that matches exactly is taken as is."""
        if out is not None and out.device is dev and out.shape == self._out_shape and \
                out.strides == self._out_strides and out.dtype == self._dtype:
            return out
        return output(out, self._out_shape, self._dtype, self._cl, dev, s,
                      strides=self._out_strides, op=op)

    def _overlaps(self, c, a, b) -> bool:
        """Whether the packed output ``c`` shares memory with the packed inputs ``a``/``b``."""
        sa, sb, sc = self._spans
        cp = c.address
        ce = cp + sc
        return (a.address < ce and cp < a.address + sa) or (b.address < ce and cp < b.address + sb)

    def _check_operands(self, a, b, out, stream, op):
        """The execute front: operands through the one path, checked against the plan."""
        self._live()
        if self._exe is None:
            self.plan()
        an, bn = self.names
        a, b, dev = _operands(op, (a, an), (b, bn), stream=stream, required=2)
        if dev is not self._device:
            raise ValueError(f"{op}: the operands are on device {dev.ordinal}, the plan on "
                             f"device {self._device.ordinal}")
        for arr, name, (shape, strides) in ((a, an, self._in[0]), (b, bn, self._in[1])):
            if arr.dtype != self._dtype or arr.shape != shape or (
                    arr.strides != strides and arr.size > 1
                    and self._cl not in layout_of(arr, name)):
                raise ValueError(f"{op}: {name} is {arr.dtype} {arr.shape} strides "
                                 f"{arr.strides}; the plan was made for {self._dtype} "
                                 f"{shape} {self.layout}")
        s = as_stream(stream, dev)
        y = output(out, self._out_shape, self._dtype, self._cl, dev, s,
                   strides=self._out_strides, op=op)
        if out is not None and self._overlaps(y, a, b):
            check_overlap(op, y, **{an: a, bn: b})
        return a, b, y, dev, s

    def __repr__(self) -> str:
        r = Plan.__repr__(self)
        if self.closed or self._choice < 0:
            return r
        c = self._candidates[self._choice]
        # the backend before the engine, and why the graph API was not used, if it was not
        r = r.replace(f": {c['name']} [", f": {c['backend']} {c['name']} [", 1)
        if self._fallback and c["backend"] == "legacy":
            r = f"{r[:-1]}; graph API not used: {self._fallback}>"
        return r

    def relaunch_slots(self) -> list:
        slots = [o.gplan.relaunches for o in self._objs if type(o) is GraphRun]
        twin = self._twin
        return slots + (twin.relaunch_slots() if twin is not None else [])

    def usable(self) -> bool:
        """Whether the chosen candidate can still run: open, and none of its descriptors
        closed behind its back (the one-shots then build the plan again)."""
        e = self._exe
        if e is None:
            return not self.closed
        if type(e) is GraphRun:
            return not e.gplan.descriptor.closed
        if type(e) is LegacyRun:
            for d in e.descs:
                if d.closed:
                    return False
        return True

    def close(self) -> None:
        """Release the plan: its execution plans and legacy twin are dropped (freed when no
        call still runs them); later use raises :class:`~cudalibs.errors.ClosedError`."""
        Plan.close(self)
        self._objs, self._exe, self._twin = [], None, None

    # -- inspection ------------------------------------------------------------------------------
    def _chosen(self) -> dict:
        self.plan()
        return self._candidates[self._choice]

    @property
    def operand_shapes(self) -> dict:
        """``{name: shape}`` of the two inputs ``execute`` takes (``{"x": ..., "w": ...}``)."""
        return {self.names[0]: self._in[0][0], self.names[1]: self._in[1][0]}

    @property
    def out_shape(self) -> tuple:
        """The output's logical shape."""
        return self._out_shape

    @property
    def out_dtype(self):
        """The output's dtype."""
        return self._dtype

    @property
    def out_strides(self) -> tuple:
        """The output's packed byte strides."""
        return self._out_strides

    @property
    def channels_last(self) -> bool:
        """Whether the operands are channels-last."""
        return self._cl

    @property
    def layout(self) -> str:
        """``"NCHW"``, ``"NHWC"``, ``"NCDHW"`` or ``"NDHWC"``."""
        return layout_name(len(self._out_shape), self._cl)

    @property
    def backend(self) -> str:
        """``"graph"``, ``"legacy"`` or ``"graph+kernel"`` (the chosen candidate's)."""
        return self._chosen()["backend"]

    @property
    def algo(self) -> int:
        """The chosen engine's global index (graph) or algorithm enum value (legacy)."""
        return self._chosen().get("algo", -1)

    @property
    def algo_name(self) -> str:
        """The chosen engine and knobs (``"eng12 k2=1"``) or legacy algorithm name."""
        return self._chosen()["name"]

    @property
    def source(self) -> str:
        """``"explicit"`` (an algorithm was named), ``"find"`` (autotuned) or
        ``"heuristic"``."""
        if not isinstance(self._algo, str):
            return "explicit"
        return "find" if self._tuned else "heuristic"

    @property
    def notes(self) -> tuple:
        """The chosen engine's numerical and behaviour notes (``()`` for legacy ones)."""
        return tuple(self._chosen().get("notes", ()))

    @property
    def deterministic(self) -> bool | None:
        """Whether cuDNN reports the chosen candidate deterministic."""
        return self._chosen().get("deterministic")

    @property
    def workspace_size(self) -> int:
        """Bytes of workspace the chosen candidate needs."""
        return int(self._chosen().get("workspace", 0))

    @property
    def fallback(self) -> str | None:
        """Why a plan that could have used the graph API runs legacy candidates (or None)."""
        return self._fallback

    @property
    def gplan(self):
        """The chosen graph execution plan (None for a legacy candidate)."""
        self.plan()
        e = self._exe
        return e.gplan if type(e) is GraphRun else None

    @property
    def legacy(self):
        """The legacy twin, once a less aligned call needed it (else None)."""
        return self._twin

    @property
    def composite(self):
        """The forward plan of a fused plan's ``graph+kernel`` candidate (None here)."""
        return None

    @property
    def math(self) -> int:
        """The cudnnMathType_t the chosen candidate runs with."""
        return int(self._chosen().get("math", self._mathinfo[1]))
