"""Fused convolution + bias (+ residual) + activation: :class:`ConvBiasActPlan` and
:func:`conv_bias_act`.

``out = act(alpha * conv(x, w) + alpha2 * z + bias)``.  The candidates, best guess first:

- on the graph API (``Options.conv_graph_api`` on, ``algo="find"``/``"heuristic"``, not float64): one
  operation graph -- the convolution into a virtual float32 tensor, pointwise ADD of the bias,
  [ADD of ``alpha2 * z``], [RELU] -- which cuDNN's runtime-fusion engines compile into one
  kernel (they typically want channels-last float16/bfloat16 data with channel counts that are
  multiples of 8);
- without ``z`` and with ``alpha == 1``, when more than one candidate is wanted: the plain
  convolution's own plan followed by one ``channel_bias_act`` pass in place on ``out``
  (``backend == "graph+kernel"``), which autotune keeps when it times faster than every fused
  engine, and which serves problems no engine fuses;
- otherwise ``cudnnConvolutionBiasActivationForward`` (legacy), implicit-precomputed GEMM
  first: it fuses every problem.

The epilogue kernel comes from the shipped kernel library through
:func:`cudalibs.runtime.ptxlib.launch_channel_bias_act`, its arguments prepared with the plan.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ...driver.array import DeviceArray
from ...driver.stream import as_stream
from ...runtime import front as _front
from ...runtime import ptxlib as _ptxlib
from ...runtime.cache import KeyKind
from ...runtime.operand import operands as _operands
from ...runtime.options import CURRENT as _CURRENT
from ...runtime.options import PROCESS as _PROCESS
from ...runtime.plan import scratch as _scratch
from .._base import env, raise_for
from .._common import check_overlap, hashable, output, scalar
from ..descriptors import (activation_descriptor, convolution_descriptor, packed_strides,
                           tensor_descriptor)
from ..handle import workspace_limit as _default_limit
from . import legacy as _legacy
from . import lower as _lower
from .plan import LegacyRun, byte_strides
from .plans import ConvForwardPlan, check_bias

__all__ = ["ConvBiasActPlan", "conv_bias_act", "FUSED_KEY"]

#: The cache key of :func:`conv_bias_act`'s plans.
FUSED_KEY = KeyKind("cudnn_conv_bias_act", (
    "device", "dtype", "x_shape", "x_strides", "w_shape", "w_strides", "stride", "padding",
    "dilation", "groups", "algo", "math", "deterministic", "workspace_limit", "out_strides",
    "activation", "with_z", "alpha", "alpha2", "graph_api", "env"))


class _CompositeRun:
    """The plain convolution's plan, then one ``channel_bias_act`` pass over its output."""

    __slots__ = ("fwd", "epilogue", "workspace")

    def __init__(self, fwd, epilogue):
        self.fwd = fwd
        self.epilogue = epilogue        # (n, channels, inner, relu), fixed by the problem
        self.workspace = 0              # the forward plan takes its own


class ConvBiasActPlan(ConvForwardPlan):
    """A planned ``y = act(alpha * conv(x, w) + alpha2 * z + bias)`` (see the module
    docstring for the candidates).

    Parameters
    ----------
    x, w : DeviceArray or CUDA array
        Example input and filter (shapes, dtype, layout, device).
    activation : {"relu", "identity"}
    with_z : bool
        Whether calls bring a residual ``z``.
    alpha, alpha2 : float
        Fixed per plan (baked into the graph).
    stride, padding, dilation, groups, algo, math, deterministic, workspace_limit, out,
    graph_api, max_candidates
        As for :class:`~cudalibs.cudnn.ConvForwardPlan`.
    """

    op = "fused"
    legacy_op = "forward"
    # Its legacy candidates fuse bias and activation differently (one algorithm for an
    # activation): offered only when the graph API has no engine.
    legacy_alongside = False
    kind = "cudnn_conv_bias_act"

    def __init__(self, x, w, *, activation="relu", with_z=False, alpha=1.0, alpha2=1.0,
                 stride=1, padding=0, dilation=1, groups=1, algo="heuristic", math=None,
                 deterministic=False, workspace_limit=None, out=None, graph_api=None,
                 max_candidates=None):
        if activation not in ("relu", "identity"):
            raise ValueError(f"activation must be 'relu' or 'identity' (what cuDNN fuses), "
                             f"not {activation!r}")
        self._act = activation
        self._with_z = bool(with_z)
        self._falpha = float(alpha)
        self._alpha2 = float(alpha2) if with_z else 0.0
        # alpha is baked into the fused graph: the base's graph test sees the default.
        super().__init__(x, w, stride=stride, padding=padding, dilation=dilation,
                         groups=groups, algo=algo, math=math, deterministic=deterministic,
                         workspace_limit=workspace_limit, out=out, graph_api=graph_api,
                         max_candidates=max_candidates)
        shape = (1, self._out_shape[1]) + (1,) * (len(self._out_shape) - 2)
        self._bias_desc = tensor_descriptor(self._dtype, shape, packed_strides(shape, False))
        self._act_desc = activation_descriptor(activation)
        self._fwd = None

    def _problem(self) -> str:
        z = f" + {self._alpha2} * z" if self._with_z else ""
        return f"{self._act}({self._falpha} * conv{z} + bias) {self._text}"

    def _tuning_extra(self) -> dict:
        return {"activation": self._act, "with_z": self._with_z, "alpha": self._falpha,
                "alpha2": self._alpha2}

    def _make_graph(self, h):
        pad, st_, dil, _ = self._conv
        x_shape, w_shape, y_shape = self._c_shapes
        return _lower.fused_graph(h, self._dtype, self._cl, x_shape, w_shape, y_shape, pad, st_,
                               dil, self._falpha, self._alpha2, self._with_z, self._act)

    def _uids(self):
        return (1, 2, 3, 4, 5) if self._with_z else (1, 2, 3, 4)

    def _extra_candidates(self, h, have_graph: bool):
        if not (self._graph and self._max > 1 and not self._with_z and self._falpha == 1.0):
            return [], []
        fwd = object.__new__(ConvForwardPlan)
        fwd._adopt(self, _fallback=None, _bias_desc=None)
        fwd.plan()
        if fwd.backend != "graph":
            return [], []
        self._fwd = fwd
        shape = self._out_shape
        n = int(np.prod(shape))
        inner = 1 if self._cl else int(np.prod(shape[2:]))
        run = _CompositeRun(fwd, (n, shape[1], inner, self._act == "relu"))
        return [self._composite_candidate(fwd)], [run]

    @staticmethod
    def _composite_candidate(fwd) -> dict:
        return {"name": f"{fwd.algo_name} + channel_bias_act", "id": "composite",
                "backend": "graph+kernel", "algo": fwd.algo, "workspace": fwd.workspace_size,
                "notes": fwd.notes, "deterministic": fwd.deterministic}

    def _legacy_candidates(self, h):
        lop = _legacy.OPS["forward"]
        compute, req_math, _ = self._mathinfo
        a, b, c = self._legacy_descs
        conv = convolution_descriptor(*self._conv, compute, req_math)
        raws = (a.raw, b.raw, conv.raw, c.raw)
        # implicit-precomputed GEMM fuses every problem: first, so a heuristic choice runs.
        if self._act == "identity":
            algo = _legacy.PRECOMP_GEMM
        else:
            algo = self._algo
        cands = _legacy.candidates(lop, h, raws, algo, self._det, self._limit, req_math,
                                   self._text)
        if isinstance(algo, str):
            first = [c_ for c_ in cands if c_["algo"] == _legacy.PRECOMP_GEMM]
            cands = first + [c_ for c_ in cands if c_["algo"] != _legacy.PRECOMP_GEMM]
        self._algo_legacy = algo
        objs = []
        for cand in cands:
            m = cand["math"]
            cd = conv if m == req_math else convolution_descriptor(*self._conv, compute, m)
            objs.append(LegacyRun("cudnnConvolutionBiasActivationForward", (a, b, cd, c),
                                   cand["algo"], cand["workspace"], self._double))
        return cands, objs

    def _select(self, i: int) -> None:
        e = self._objs[i]
        if type(e) is _CompositeRun:
            self._candidates[i].update(self._composite_candidate(e.fwd))
        self._exe = e

    def autotune(self, *, stream=None, rounds: int = 5, store: bool = True,
                 force: bool = False) -> list[dict]:
        """Autotune (see :meth:`~cudalibs.runtime.plan.Plan.autotune`); the composite
        candidate's convolution plan is autotuned first, so the pair is timed at its best."""
        self.plan()
        if self._fwd is not None:
            self._fwd.autotune(stream=stream, rounds=rounds, store=store, force=force)
        return super().autotune(stream=stream, rounds=rounds, store=store, force=force)

    @contextlib.contextmanager
    def _runner(self, stream):
        dev = self._device
        x_shape, w_shape, y_shape = self._c_shapes
        it = self._dtype.itemsize
        x = _scratch(x_shape, self._dtype, dev, stream, strides=byte_strides(x_shape, self._cl,
                                                                              it))
        w = _scratch(w_shape, self._dtype, dev, stream, strides=byte_strides(w_shape, self._cl,
                                                                              it))
        y = _scratch(y_shape, self._dtype, dev, stream, strides=self._out_strides)
        b = _scratch((y_shape[1],), self._dtype, dev, stream)
        z = _scratch(y_shape, self._dtype, dev, stream, strides=self._out_strides) \
            if self._with_z else None
        ptrs = (x.ptr, w.ptr, y.ptr, b.ptr) + ((z.ptr,) if z is not None else ())
        packs: dict = {}

        def run(i):
            self._call(self._objs[i], dev, stream, ptrs, packs, i)

        try:
            yield run
        finally:
            packs.clear()
            del x, w, y, b, z

    def _call(self, e, dev, s, ptrs, packs=None, slot=None):
        if type(e) is _CompositeRun:
            f = e.fwd
            f._call(f._exe, dev, s, ptrs[:3], packs, ("composite", slot))
            n, channels, inner, relu = e.epilogue
            _ptxlib.launch_channel_bias_act(dev, self._dtype, ptrs[2], 0, 1.0, ptrs[3], n,
                                            channels, inner, relu, s)
            return
        super()._call(e, dev, s, ptrs, packs, slot)

    def _legacy_call(self, e, h, s, ptrs, ws_ptr, ws_size):
        a, b, conv, c = e.raws
        d = e.double
        # cuDNN requires a z; without one it is the output itself, scaled by 0.
        z_ptr = ptrs[4] if self._with_z else ptrs[2]
        st = e.fn(h.raw, scalar(self._falpha, d), a, ptrs[0], b, ptrs[1], conv, e.algo, ws_ptr,
                  ws_size, scalar(self._alpha2, d), c, z_ptr, self._bias_desc.raw, ptrs[3],
                  self._act_desc.raw, c, ptrs[2])
        if st:
            raise_for(st, "cudnnConvolutionBiasActivationForward", f"plan: {self!r}")

    def relaunch_slots(self) -> list:
        slots = super().relaunch_slots()
        for o in self._objs:
            if type(o) is _CompositeRun:
                slots += o.fwd.relaunch_slots()
        return slots

    @property
    def composite(self):
        """The convolution plan of the chosen ``graph+kernel`` candidate (else None)."""
        self.plan()
        e = self._exe
        return e.fwd if type(e) is _CompositeRun else None

    @property
    def epilogue(self):
        """``(n, channels, inner, relu)`` of the chosen composite's pass (else None)."""
        e = self._exe
        return e.epilogue if type(e) is _CompositeRun else None

    def execute(self, x, w, bias, *, z=None, out=None, stream=None):
        """``y = act(alpha * conv(x, w) + alpha2 * z + bias)`` on ``stream``.

        Parameters
        ----------
        x, w : DeviceArray
            Of the plan's shapes, dtype and layout.
        bias : DeviceArray
            ``(K,)``.
        z : DeviceArray, optional
            Required exactly when the plan was made ``with_z``.
        out : DeviceArray, optional
            Allocated if None; must not overlap an input.
        stream : Stream, optional

        Returns
        -------
        DeviceArray
        """
        op = "ConvBiasActPlan.execute"
        x, w, y, dev, s = self._check_operands(x, w, out, stream, op)
        return self._run(x, w, bias, z, y, dev, s, op, out is not None)

    def _run(self, x, w, bias, z, y, dev, s, op, check_out):
        if (z is not None) != self._with_z:
            raise ValueError(f"{op}: the plan was made {'with' if self._with_z else 'without'}"
                             " a residual z")
        bias = check_bias(bias, self._out_shape, self._dtype, dev, op)
        ptrs = (x.address, w.address, y.address, bias.address)
        if z is not None:
            z = output(z, self._out_shape, self._dtype, self._cl, dev, s, "z", op=op)
            ptrs += (z.address,)
        if check_out:
            check_overlap(op, y, x=x, w=w, bias=bias, z=z)
        self._call(self._exe, dev, s, ptrs)
        return y


def conv_bias_act(x, w, bias, *, activation="relu", z=None, alpha=1.0, alpha2=1.0, stride=1,
                  padding=0, dilation=1, groups=1, algo="find", math=None,
                  deterministic=False, workspace_limit=None, out=None, stream=None):
    """Fused ``out = act(alpha * conv(x, w) + alpha2 * z + bias)``.

    The plan comes from the one plan cache (built on the first call of a problem; with
    ``algo="find"`` autotuned then, the choice kept in the tuning store).  See
    :class:`ConvBiasActPlan` and the module docstring for the candidates.

    Parameters
    ----------
    x, w
        As for :func:`~cudalibs.cudnn.conv_forward`.
    bias : DeviceArray
        ``(K,)`` of the data's dtype.
    activation : {"relu", "identity"}
        The legacy call runs ``"identity"`` only with the implicit-precomputed-GEMM
        algorithm, which is then used whatever ``algo`` says.
    z : DeviceArray, optional
        A residual of the output's shape and layout, scaled by ``alpha2``; without it
        ``alpha2`` is ignored.
    alpha, alpha2 : float
    stride, padding, dilation, groups, algo, math, deterministic, workspace_limit, out, stream
        As for :func:`~cudalibs.cudnn.conv_forward`.

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    ValueError
        An unknown activation, ``z``/``bias`` of the wrong shape, dtype, layout or device,
        an ``out`` overlapping an input, and everything :func:`conv_forward` raises.
    """
    if activation not in ("relu", "identity"):
        raise ValueError(f"activation must be 'relu' or 'identity' (what cuDNN fuses), "
                         f"not {activation!r}")
    x, w, out, dev = _operands("conv_bias_act", (x, "x"), (w, "w"), (out, "out"),
                               stream=stream, required=2)
    if type(bias) is not DeviceArray:
        # The plan checks a DeviceArray bias against the problem; anything else (None, a
        # foreign array) goes through the operand path here, before any C call.
        bias = _operands("conv_bias_act", (bias, "bias"), stream=stream, required=1)[0]
    s = as_stream(stream, dev)
    graph = (_CURRENT.get() or _PROCESS[0]).conv_graph_api
    limit = _default_limit() if workspace_limit is None else int(workspace_limit)
    with_z = z is not None
    key = (FUSED_KEY, dev.ordinal, x.dtype, x.shape, x.strides, w.shape, w.strides,
           hashable(stride), hashable(padding), hashable(dilation), groups, hashable(algo), math,
           bool(deterministic), limit, None if out is None else out.strides, activation,
           with_z, float(alpha), float(alpha2) if with_z else 0.0, graph, env(dev))
    plan = _front.lookup(key)
    if plan is None:
        plan = _front.insert(key, ConvBiasActPlan(
            x, w, activation=activation, with_z=with_z, alpha=alpha, alpha2=alpha2,
            stride=stride, padding=padding, dilation=dilation, groups=groups, algo=algo,
            math=math, deterministic=deterministic, workspace_limit=limit, out=out,
            graph_api=graph, max_candidates=1 if algo == "heuristic" else None),
            _front.tuned(s) if algo == "find" else _front.PLAN)
    y = plan.output_for(out, dev, s, "conv_bias_act")
    return plan._run(x, w, bias, z, y, dev, s, "conv_bias_act", out is not None)
