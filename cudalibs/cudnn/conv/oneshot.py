"""Convolution forward and backward: the one-shot functions over cached plans.

Every call is described by a *problem key* -- device, dtype, the shapes and byte strides of
the operands, padding/stride/dilation/groups, algorithm request, math type, determinism,
workspace limit, the strides of a given ``out``, ``alpha``/``beta``, the graph-API option,
device architecture and cuDNN version -- and the first call of a key builds a plan
(:class:`~cudalibs.cudnn.ConvForwardPlan`, :class:`~cudalibs.cudnn.ConvBackwardDataPlan`,
:class:`~cudalibs.cudnn.ConvBackwardFilterPlan`; :func:`conv_bias_act` a
:class:`~cudalibs.cudnn.ConvBiasActPlan`) and keeps it in the one bounded plan cache
(:data:`cudalibs.plan_cache`).  Later calls with the same key look it up and make the
cuDNN call.  :func:`algo_cache` lists the convolution entries with their named keys;
:func:`clear_algo_cache` forgets them.  Hold a plan yourself to skip even the lookup.

Choosing an algorithm
---------------------
``algo="find"``
    The plan is autotuned on first use: every candidate timed with the one timer
    (:func:`~cudalibs.runtime.plan.time_candidates`: median of loops, fresh random inputs,
    L2 flushed), the choice kept in the tuning store so the next process skips the timing.
``algo="heuristic"``
    cuDNN's first choice, no timing.
an int or a name
    That legacy algorithm (``"implicit_precomp_gemm"``, ``"winograd"``, ...; see
    :data:`FWD_ALGOS`, :data:`BWD_DATA_ALGOS`, :data:`BWD_FILTER_ALGOS`).

Candidates must fit ``workspace_limit`` and, with ``deterministic=True``, be reported
deterministic; when none does, :class:`NoAlgorithmError` says what each needs.

Backends
--------
With ``algo="find"`` or ``"heuristic"``, ``alpha == 1`` and ``beta == 0`` (the default), the
plans use cuDNN's graph (backend) API (:mod:`cudalibs.cudnn.backend`): an operation graph,
engine heuristics (mode A, then the fallback list), execution plans filtered by workspace
limit, determinism and numerical notes.  This reaches engines the legacy API does not
(Hopper kernels, runtime-fused convolution + bias + ReLU).  float64, explicit legacy
algorithms, other ``alpha``/``beta`` and any problem no graph engine takes use the legacy API;
the plan records why (``plan.fallback``).  :attr:`cudalibs.Options.conv_graph_api` ``=
False`` uses the legacy API only (the option is part of the key, so plans of both kinds
coexist).

Math types
----------
float32 computes with ``CUDNN_FMA_MATH`` by default: plain float32 arithmetic, so results meet
float32 tolerances.  ``math="tf32"`` allows TF32 tensor cores (``CUDNN_DEFAULT_MATH``; what
PyTorch does when ``torch.backends.cudnn.allow_tf32`` is set).  float16 and bfloat16 use
``CUDNN_TENSOR_OP_MATH`` and accumulate in float32; ``math="allow_conversion"`` also lets
cuDNN convert float32 data to half internally.  float64 uses ``CUDNN_DEFAULT_MATH``.

Layouts and shapes
------------------
Arrays are logical ``(N, C, H, W)`` / ``(N, C, D, H, W)``; filters ``(K, C/groups, R, S)`` /
``(K, C/groups, T, R, S)``.  The layout (channels-first or channels-last) is read from the
strides (see :mod:`cudalibs.cudnn.descriptors`); input, filter and output share it, and new
outputs are allocated in it.  An ``out`` that shares memory with an input is refused.
"""

from __future__ import annotations

from ...driver.args import int_tuple
from ...driver.stream import as_stream
from ...runtime import front as _front
from ...runtime.cache import KeyKind, cache as _cache
from ...runtime.operand import operand as _operand
from ...runtime.operand import operands as _operands
from ...runtime.options import CURRENT as _CURRENT
from ...runtime.options import PROCESS as _PROCESS
from .. import _lib
from .._base import env, raise_for
from .._common import (check_float, check_overlap, hashable, is_double, layout_of, output, pick_layout,
                       scalar)
from ..descriptors import DescriptorSet, packed_strides, tensor_descriptor
from ..handle import handle_for
from ..handle import workspace_limit as _default_limit
from .fused import FUSED_KEY, ConvBiasActPlan, conv_bias_act
from .legacy import BWD_DATA_ALGOS, BWD_FILTER_ALGOS, FWD_ALGOS, NoAlgorithmError
from .plan import ConvPlan, conv_output_shape
from .plans import ConvBackwardDataPlan, ConvBackwardFilterPlan, ConvForwardPlan

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias",
           "conv_bias_act", "conv_output_shape", "ConvPlan", "ConvForwardPlan",
           "ConvBackwardDataPlan", "ConvBackwardFilterPlan", "ConvBiasActPlan",
           "NoAlgorithmError", "algo_cache", "clear_algo_cache", "FWD_ALGOS",
           "BWD_DATA_ALGOS", "BWD_FILTER_ALGOS", "FORWARD_KEY",
           "BACKWARD_DATA_KEY", "BACKWARD_FILTER_KEY", "FUSED_KEY"]

_COMMON = ("stride", "padding", "dilation", "groups", "algo", "math", "deterministic",
           "workspace_limit", "out_strides", "alpha", "beta", "graph_api", "env")
#: The cache keys of the one-shot convolutions (``entry.key["out_strides"]``...).
FORWARD_KEY = KeyKind("cudnn_conv_forward", ("device", "dtype", "x_shape", "x_strides",
                                             "w_shape", "w_strides") + _COMMON)
BACKWARD_DATA_KEY = KeyKind("cudnn_conv_backward_data", (
    "device", "dtype", "dy_shape", "dy_strides", "w_shape", "w_strides", "x_shape") + _COMMON)
BACKWARD_FILTER_KEY = KeyKind("cudnn_conv_backward_filter", (
    "device", "dtype", "x_shape", "x_strides", "dy_shape", "dy_strides", "w_shape") + _COMMON)
BIAS_GRAD_KEY = KeyKind("cudnn_conv_backward_bias", ("dtype", "shape", "strides"))
_CONV_KINDS = (FORWARD_KEY.name, BACKWARD_DATA_KEY.name, BACKWARD_FILTER_KEY.name,
               FUSED_KEY.name)


def algo_cache() -> list:
    """The cached convolution plans: :class:`~cudalibs.runtime.plan.CacheEntry` objects
    (``entry.kind``, ``entry.key`` by field name, ``entry.plan``), least recently used first."""
    return [e for e in _cache.entries() if e.kind in _CONV_KINDS]


def clear_algo_cache() -> None:
    """Forget every cached convolution plan (the next call of each problem plans again)."""
    for kind in _CONV_KINDS:
        _cache.clear(kind)


def problem_key(kind, dev, a, b, extra, stride, padding, dilation, groups, algo, math,
                deterministic, limit, out, alpha, beta, graph) -> tuple:
    """The cache key of a one-shot convolution (``kind``: one of the ``*_KEY`` kinds; its
    fields name the values).  ``extra``: the backward ops' third shape (ignored forward)."""
    head = (kind, dev.ordinal, a.dtype, a.shape, a.strides, b.shape, b.strides)
    if kind is not FORWARD_KEY:
        head += (extra,)
    return head + (stride if type(stride) is int else hashable(stride),
                   padding if type(padding) is int else hashable(padding),
                   dilation if type(dilation) is int else hashable(dilation), groups,
                   algo if type(algo) is str else hashable(algo), math, bool(deterministic), limit,
                   None if out is None else out.strides,
                   float(alpha), float(beta), graph, env(dev))


#: The hit path of the one front (a plan is looked up, then built and inserted on a miss).
_lookup = _front.lookup


def _prepare(algo, s):
    """How a new one-shot plan is prepared: autotuned on ``s`` for ``algo="find"``, else
    planned by the heuristics."""
    return _front.tuned(s) if algo == "find" else _front.PLAN


# -- forward --------------------------------------------------------------------------------------
def conv_forward(x, w, *, bias=None, stride=1, padding=0, dilation=1, groups=1, algo="find",
                 math=None, deterministic=False, workspace_limit=None, out=None, alpha=1.0,
                 beta=0.0, stream=None):
    """2-D or 3-D convolution (cross-correlation), ``out = alpha * conv(x, w) + beta * out
    (+ bias)``.

    Parameters
    ----------
    x : DeviceArray or CUDA array
        Input, logical ``(N, C, H, W)`` or ``(N, C, D, H, W)``, packed channels-first or
        channels-last.
    w : DeviceArray or CUDA array
        Filter ``(K, C/groups, R, S)`` or ``(K, C/groups, T, R, S)`` in the same layout.
    bias : DeviceArray, optional
        ``(K,)``, added to every output position after the convolution (same dtype).
    stride, padding, dilation : int or sequence of int
        Per spatial dimension; padding is symmetric zero padding.
    groups : int
        Grouped convolution; must divide ``C`` and ``K``.
    algo : {"find", "heuristic"} or int or str
        How to choose the algorithm (see the module docstring).
    math : str, optional
        ``"fma"``, ``"tf32"``, ``"default"``, ``"tensor_op"`` or ``"allow_conversion"``;
        default per dtype (float32: ``"fma"``).
    deterministic : bool
        Only algorithms cuDNN reports deterministic.
    workspace_limit : int, optional
        Most workspace bytes the algorithm may use; default :func:`workspace_limit`.
    out : DeviceArray, optional
        Where to write ``(N, K, ...)``; allocated stream-ordered in the input's layout if
        None.  Must not share memory with ``x`` or ``w``.
    alpha, beta : float
    stream : Stream, optional
        The thread's current stream by default.

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    ValueError
        Channel mismatch, groups not dividing channels, negative padding, stride or dilation
        below 1, an output dimension below 1, layouts that differ or are not packed, operands
        on different devices, ``out`` of the wrong shape or layout or overlapping an input.
    TypeError
        A dtype other than float32/float16/bfloat16/float64, or dtypes that differ.
    NoAlgorithmError
        No algorithm fits the workspace limit (or determinism).
    CudnnError
        cuDNN rejected the problem (the message says which and includes its own account).
    """
    x, w, out, dev = _operands("conv_forward", (x, "x"), (w, "w"), (out, "out"),
                               stream=stream, required=2)
    s = as_stream(stream, dev)
    limit = _default_limit() if workspace_limit is None else int(workspace_limit)
    graph = (_CURRENT.get() or _PROCESS[0]).conv_graph_api
    key = problem_key(FORWARD_KEY, dev, x, w, None, stride, padding, dilation, groups, algo,
                      math, deterministic, limit, out, alpha, beta, graph)
    plan = _lookup(key) or _front.insert(key, ConvForwardPlan(
        x, w, stride=stride, padding=padding, dilation=dilation, groups=groups, algo=algo,
        math=math, deterministic=deterministic, workspace_limit=limit, alpha=alpha, beta=beta,
        out=out, graph_api=graph, max_candidates=1 if algo == "heuristic" else None),
        _prepare(algo, s))
    y = plan.output_for(out, dev, s, "conv_forward")
    if out is not None and plan._overlaps(y, x, w):
        check_overlap("conv_forward", y, x=x, w=w)
    return plan._forward(x, w, y, bias, dev, s, "conv_forward")


# -- backward data --------------------------------------------------------------------------------
def conv_backward_data(dy, w, x_shape=None, *, stride=1, padding=0, dilation=1, groups=1,
                       algo="find", math=None, deterministic=False, workspace_limit=None,
                       out=None, alpha=1.0, beta=0.0, stream=None):
    """Gradient of the convolution with respect to its input: ``dx = alpha * conv^T(dy, w) +
    beta * dx``.

    Parameters
    ----------
    dy : DeviceArray
        Gradient of the output, ``(N, K, ...)``.
    w : DeviceArray
        The filter, ``(K, C/groups, ...)``, in ``dy``'s layout.
    x_shape : tuple of int, optional
        The input's shape; taken from ``out`` when given, else the smallest input that gives
        ``dy``'s shape (a strided convolution drops trailing rows, so pass it then).
    stride, padding, dilation, groups, algo, math, deterministic, workspace_limit, alpha,
    beta, stream
        As for :func:`conv_forward`.
    out : DeviceArray, optional
        ``dx``; allocated in ``dy``'s layout if None; must not overlap ``dy`` or ``w``.

    Returns
    -------
    DeviceArray
        ``dx`` of ``x_shape``.

    Raises
    ------
    ValueError, TypeError, NoAlgorithmError, CudnnError
        As for :func:`conv_forward`; also when ``x_shape`` does not convolve to ``dy``'s shape.
    """
    if x_shape is None and out is not None:
        x_shape = _operand(out, "out", "conv_backward_data").shape
    xs = None if x_shape is None else int_tuple(x_shape, "conv_backward_data: x_shape",
                                                scalar=False)
    return _backward("conv_backward_data", BACKWARD_DATA_KEY, ConvBackwardDataPlan,
                     (dy, "dy"), (w, "w"), xs, (1, 0), stride, padding, dilation, groups,
                     algo, math, deterministic, workspace_limit, out, alpha, beta, stream)


# -- backward filter ------------------------------------------------------------------------------
def conv_backward_filter(x, dy, filter_shape=None, *, stride=1, padding=0, dilation=1,
                         groups=1, algo="find", math=None, deterministic=False,
                         workspace_limit=None, out=None, alpha=1.0, beta=0.0, stream=None):
    """Gradient of the convolution with respect to its filter: ``dw = alpha * (x ⋆ dy) +
    beta * dw``.

    Parameters
    ----------
    x : DeviceArray
        The forward input ``(N, C, ...)``.
    dy : DeviceArray
        Gradient of the output ``(N, K, ...)``, in ``x``'s layout.
    filter_shape : tuple of int, optional
        ``(K, C/groups, R, S)``; taken from ``out`` when omitted (one of them is needed).
    stride, padding, dilation, groups, algo, math, deterministic, workspace_limit, alpha,
    beta, stream
        As for :func:`conv_forward`.
    out : DeviceArray, optional
        ``dw``; allocated in ``x``'s layout if None; must not overlap ``x`` or ``dy``.

    Returns
    -------
    DeviceArray
        ``dw``.

    Raises
    ------
    ValueError, TypeError, NoAlgorithmError, CudnnError
        As for :func:`conv_forward`; also when neither ``filter_shape`` nor ``out`` is given.
    """
    if filter_shape is None:
        if out is None:
            raise ValueError("conv_backward_filter needs filter_shape or out")
        filter_shape = _operand(out, "out", "conv_backward_filter").shape
    fs = int_tuple(filter_shape, "conv_backward_filter: filter_shape", scalar=False)
    return _backward("conv_backward_filter", BACKWARD_FILTER_KEY, ConvBackwardFilterPlan,
                     (x, "x"), (dy, "dy"), fs, (0, 1), stride, padding, dilation, groups,
                     algo, math, deterministic, workspace_limit, out, alpha, beta, stream)


def _backward(op, kind, cls, a, b, extra, order, stride, padding, dilation, groups, algo,
              math, deterministic, workspace_limit, out, alpha, beta, stream):
    """The two backward one-shots: operands, key, cached plan, output, the call.  ``order``:
    which of the two inputs the library call takes first."""
    (a, an), (b, bn) = a, b
    a, b, out, dev = _operands(op, (a, an), (b, bn), (out, "out"), stream=stream, required=2)
    s = as_stream(stream, dev)
    limit = _default_limit() if workspace_limit is None else int(workspace_limit)
    graph = (_CURRENT.get() or _PROCESS[0]).conv_graph_api
    key = problem_key(kind, dev, a, b, extra, stride, padding, dilation, groups, algo, math,
                      deterministic, limit, out, alpha, beta, graph)
    plan = _lookup(key) or _front.insert(key, cls(
        a, b, extra, stride=stride, padding=padding, dilation=dilation, groups=groups,
        algo=algo, math=math, deterministic=deterministic, workspace_limit=limit, alpha=alpha,
        beta=beta, out=out, graph_api=graph, max_candidates=1 if algo == "heuristic" else None),
        _prepare(algo, s))
    c = plan.output_for(out, dev, s, op)
    if out is not None and plan._overlaps(c, a, b):
        check_overlap(op, c, **{an: a, bn: b})
    ins = (a, b)
    plan._call(plan._exe, dev, s, (ins[order[0]].address, ins[order[1]].address, c.address))
    return c


# -- backward bias --------------------------------------------------------------------------------
def _bias_grad_descs(dy):
    check_float(dy, "conv_backward_bias: dy")
    if dy.dtype.name == "bfloat16":
        # cuDNN 9 answers CUDNN_STATUS_NOT_SUPPORTED; say so before the call.
        raise TypeError("cudnnConvolutionBackwardBias does not support bfloat16 (cuDNN "
                        "supports float32, float64 and float16 here); reduce dy over "
                        "N and the spatial axes in float32 instead")
    cl = pick_layout((layout_of(dy, "dy"), "dy"))
    bshape = (1, dy.shape[1]) + (1,) * (dy.ndim - 2)
    return DescriptorSet((tensor_descriptor(dy.dtype, dy.shape, packed_strides(dy.shape, cl)),
                          tensor_descriptor(dy.dtype, bshape, packed_strides(bshape, False))))


def conv_backward_bias(dy, *, out=None, alpha=1.0, beta=0.0, stream=None):
    """Gradient of the bias: ``db[k] = alpha * sum(dy[:, k, ...]) + beta * db[k]``.

    Parameters
    ----------
    dy : DeviceArray
        ``(N, K, ...)``, 4-D or 5-D, packed in either layout.
    out : DeviceArray, optional
        ``(K,)`` of ``dy``'s dtype.
    alpha, beta : float
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``db`` of shape ``(K,)``.
    """
    dy = _operand(dy, "dy", "conv_backward_bias", stream=stream)
    dev = dy.device
    s = as_stream(stream, dev)
    descs = _front.planned((BIAS_GRAD_KEY, dy.dtype, dy.shape, dy.strides),
                           lambda: _bias_grad_descs(dy), prepare=None).descriptors
    db = output(out, (dy.shape[1],), dy.dtype, False, dev, s, op="conv_backward_bias")
    h = handle_for(dev, s.raw_handle)
    d = is_double(dy.dtype)
    st = _lib.get().cudnnConvolutionBackwardBias(h.raw, scalar(alpha, d), descs[0].raw, dy.ptr,
                                                 scalar(beta, d), descs[1].raw, db.ptr)
    if st:
        raise_for(st, "cudnnConvolutionBackwardBias", f"dy {dy.dtype} {dy.shape}")
    return db
