"""Convolution forward and backward, with algorithm search and cached plans.

Every call is described by a *problem key* -- operation, device, dtype, the shapes and byte
strides of the operands, padding/stride/dilation/groups, math type, algorithm request,
determinism, workspace limit, device architecture and cuDNN version -- and the first call of
a key builds a :class:`ConvPlan`: the descriptors, the chosen algorithm and its workspace size,
the output shape and layout.  Later calls with the same key do one dict lookup and the cuDNN
call itself.  :func:`algo_cache` shows the plans; :func:`clear_algo_cache` forgets them.

Choosing an algorithm
---------------------
``algo="find"``
    ``cudnnFind*AlgorithmEx`` times every algorithm on the caller's inputs, writing only to a
    scratch output allocated for the search (the caller's ``out`` is never touched), with a
    workspace from the shared per-(device, stream) pool no larger than the limit.
``algo="heuristic"``
    ``cudnnGet*Algorithm_v7``: cuDNN's ranking, no timing.
an int or a name
    That algorithm (``"implicit_precomp_gemm"``, ``"winograd"``, ...; see :data:`FWD_ALGOS`,
    :data:`BWD_DATA_ALGOS`, :data:`BWD_FILTER_ALGOS`).

The first candidate that succeeded, fits ``workspace_limit`` and (with ``deterministic=True``)
is reported deterministic is used; when none fits, :class:`NoAlgorithmError` says what the
smallest one needs.

Backends
--------
With ``algo="find"`` or ``"heuristic"``, ``alpha == 1`` and ``beta == 0`` (the default), the
convolutions and :func:`conv_bias_act` first go through cuDNN's graph (backend) API
(:mod:`cudalibs.cudnn.graph`): an operation graph, engine heuristics (mode A, then the
fallback list), execution plans filtered by workspace limit, determinism and numerical notes,
and -- for ``"find"`` -- each candidate timed with CUDA events on scratch outputs (a warm-up
run, then the median of a few), as ``torch.backends.cudnn.benchmark`` does.  This reaches
engines the legacy API does not (Hopper kernels, runtime-fused convolution + bias + ReLU).
float64, explicit legacy algorithms, other ``alpha``/``beta`` (baked into a graph), and any
problem no graph engine takes use the legacy API; the plan records why
(``ConvPlan.fallback``).  Set :data:`GRAPH_API` to ``False`` to use the legacy API only (the
switch is part of the cache key, so plans of both kinds coexist).

Math types
----------
float32 computes with ``CUDNN_FMA_MATH`` by default: plain float32 arithmetic, so results meet
float32 tolerances.  ``math="tf32"`` allows TF32 tensor cores (``CUDNN_DEFAULT_MATH``; what
PyTorch does when ``torch.backends.cudnn.allow_tf32`` is set).  float16 and bfloat16 use
``CUDNN_TENSOR_OP_MATH`` and accumulate in float32 (cuDNN's pseudo-half configurations);
``math="allow_conversion"`` also lets cuDNN convert float32 data to half internally.
float64 uses ``CUDNN_DEFAULT_MATH`` with double accumulation.

Layouts and shapes
------------------
Arrays are logical ``(N, C, H, W)`` / ``(N, C, D, H, W)``; filters ``(K, C/groups, R, S)`` /
``(K, C/groups, T, R, S)``.  The layout (channels-first or channels-last) is read from the
strides (see :mod:`cudalibs.cudnn.descriptors`); input, filter and output share it, and new
outputs are allocated in it.
"""

from __future__ import annotations

import ctypes
import threading
import types

import numpy as np

from .. import kernels as _kernels
from ..driver.stream import Event
from ..errors import CudaLibsError, CudnnError
from . import _lib
from . import graph as _graph
from ._base import last_error_string, raise_for, version
from ._common import (as_array, check_float, is_double, layout_of, operands, out_hint,
                      out_key, output, pick_layout, same_device, scalar, scratch, stream_of,
                      tuple_arg)
from .descriptors import (MATH_TYPES, activation_descriptor, check_conv_params,
                          convolution_descriptor, filter_descriptor, layout_name,
                          packed_strides, tensor_descriptor)
from .handle import handle_for, workspace
from .handle import workspace_limit as _default_limit

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias",
           "conv_bias_act", "conv_output_shape", "ConvPlan", "NoAlgorithmError", "algo_cache",
           "clear_algo_cache", "FWD_ALGOS", "BWD_DATA_ALGOS", "BWD_FILTER_ALGOS", "GRAPH_API"]

#: Use cuDNN's graph (backend) API where it applies (see the module docstring).  ``False``
#: forces the legacy API; read at every call and part of the plan cache key.
GRAPH_API = True
#: The most execution plans ``algo="find"`` times on the graph API (in heuristic order), and
#: the most of those that need runtime compilation (each costs a compile at plan time).
FIND_MAX_PLANS = 16
FIND_MAX_COMPILED = 3
# Timed samples per candidate plan in "find" (after one warm-up run; the median is kept), each
# a loop of back-to-back runs lasting about _FIND_SAMPLE_MS (at most _FIND_MAX_REPS runs).
_FIND_RUNS = 3
_FIND_SAMPLE_MS = 0.5
_FIND_MAX_REPS = 25
# Byte alignment the graph plans declare for every tensor; a call whose pointers are less
# aligned runs on a legacy plan instead (pool allocations are 256-byte aligned).
_GRAPH_ALIGNMENT = 16

#: Forward algorithm names -> cudnnConvolutionFwdAlgo_t.
FWD_ALGOS = {
    "implicit_gemm": 0, "implicit_precomp_gemm": 1, "gemm": 2, "direct": 3, "fft": 4,
    "fft_tiling": 5, "winograd": 6, "winograd_nonfused": 7,
}
#: Backward-data algorithm names -> cudnnConvolutionBwdDataAlgo_t.
BWD_DATA_ALGOS = {
    "algo_0": 0, "algo_1": 1, "fft": 2, "fft_tiling": 3, "winograd": 4, "winograd_nonfused": 5,
}
#: Backward-filter algorithm names -> cudnnConvolutionBwdFilterAlgo_t.
BWD_FILTER_ALGOS = {
    "algo_0": 0, "algo_1": 1, "fft": 2, "algo_3": 3, "winograd": 4, "winograd_nonfused": 5,
    "fft_tiling": 6,
}
# The algorithms cuDNN documents as non-deterministic (atomics), per operation.
_NONDETERMINISTIC = {"backward_data": {0}, "backward_filter": {0, 3}, "forward": set()}



def _not_supported(status: int) -> bool:
    # cuDNN 9: CUDNN_STATUS_NOT_SUPPORTED (3000) and its refinements 3001..3999.
    return _lib.CUDNN_STATUS_NOT_SUPPORTED <= status < _lib.CUDNN_STATUS_NOT_SUPPORTED + 1000


class NoAlgorithmError(CudaLibsError, ValueError):
    """No convolution algorithm satisfies the request (workspace limit, determinism)."""


class _Op:
    """The cuDNN entry points of one convolution operation (forward, backward data/filter).

    The three share one argument pattern: ``(a, b, conv, c)`` descriptors, where ``a`` and
    ``b`` are the inputs and ``c`` the output, in the order each function takes them.
    """

    def __init__(self, name, algos, count, heuristic, find, ws, run, perf):
        self.name, self.algos = name, algos
        self.count, self.heuristic, self.find, self.ws, self.run = count, heuristic, find, ws, run
        self.perf = perf
        self.algo_names = {v: k for k, v in algos.items()}


_OPS = {
    "forward": _Op("forward", FWD_ALGOS, "cudnnGetConvolutionForwardAlgorithmMaxCount",
                   "cudnnGetConvolutionForwardAlgorithm_v7",
                   "cudnnFindConvolutionForwardAlgorithmEx",
                   "cudnnGetConvolutionForwardWorkspaceSize", "cudnnConvolutionForward",
                   _lib.cudnnConvolutionFwdAlgoPerf_t),
    "backward_data": _Op("backward_data", BWD_DATA_ALGOS,
                         "cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
                         "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                         "cudnnFindConvolutionBackwardDataAlgorithmEx",
                         "cudnnGetConvolutionBackwardDataWorkspaceSize",
                         "cudnnConvolutionBackwardData", _lib.cudnnConvolutionBwdDataAlgoPerf_t),
    "backward_filter": _Op("backward_filter", BWD_FILTER_ALGOS,
                           "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount",
                           "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
                           "cudnnFindConvolutionBackwardFilterAlgorithmEx",
                           "cudnnGetConvolutionBackwardFilterWorkspaceSize",
                           "cudnnConvolutionBackwardFilter",
                           _lib.cudnnConvolutionBwdFilterAlgoPerf_t),
}


class ConvPlan:
    """A prepared convolution: descriptors, algorithm and workspace size for one problem key.

    Attributes
    ----------
    op : str
        ``"forward"``, ``"backward_data"``, ``"backward_filter"`` or ``"fused"``.
    key : tuple
        The problem key it is cached under.
    algo : int
        The cuDNN algorithm enum value; ``algo_name`` its name.
    source : str
        ``"find"``, ``"heuristic"`` or ``"explicit"``.
    time_ms : float or None
        The time ``find`` measured for it.
    workspace_size : int
        Bytes of workspace the algorithm needs.
    math : int
        The ``cudnnMathType_t`` it runs with.
    deterministic : bool or None
        What cuDNN reported (None for an explicit choice).
    out_shape : tuple of int
        The output's logical shape; ``layout`` its layout name.
    backend : str
        ``"graph"`` (cuDNN's backend API) or ``"legacy"``.  For a graph plan ``algo`` is the
        engine's global index and ``algo_name`` the engine and its knob choices
        (``"eng12 k2=1,k3=0"``).
    notes : tuple of str
        The engine's numerical and behaviour notes (graph plans; ``()`` for legacy ones).
    fallback : str or None
        Why a call that could have used the graph API got a legacy plan.
    candidates : int
        How many plans ``find`` timed (graph) or how many the heuristics offered.
    composite : ConvPlan or None
        For a fused plan (``backend == "graph+kernel"``): the forward plan whose output the
        ``channel_bias_act`` kernel then finishes in one pass -- what ``find`` chose when that
        pair timed faster than every fused engine.
    """

    __slots__ = ("op", "key", "algo", "algo_name", "source", "time_ms", "workspace_size",
                 "math", "deterministic", "out_shape", "out_dtype", "channels_last", "layout",
                 "out_strides", "descs", "raws", "double", "run", "bias_desc", "act_desc", "arch",
                 "cudnn_version", "backend", "notes", "fallback", "candidates", "gplan",
                 "legacy", "legacy_build", "composite", "epilogue", "__weakref__")

    def __repr__(self) -> str:
        t = f", {self.time_ms:.3f} ms" if self.time_ms is not None else ""
        m = {v: k for k, v in MATH_TYPES.items() if k != "tf32"}.get(self.math, self.math)
        extra = ""
        if self.backend == "graph":
            extra = f", notes {','.join(self.notes) or '-'}"
        elif self.fallback:
            extra = f", graph API not used: {self.fallback}"
        return (f"<ConvPlan {self.op} {self.backend} {self.algo_name} ({self.source}{t}), "
                f"workspace {self.workspace_size} B, math={m}, out {self.out_shape} "
                f"{self.layout} {self.out_dtype}{extra}>")

    def _alive(self) -> bool:
        for d in self.descs:
            if not d._finalizer.alive:
                return False
        return True

    def _legacy(self, s) -> "ConvPlan":
        """The legacy plan of the same problem, for calls whose pointers are less aligned than
        the graph plan declared (built on first need, by heuristic: no data is read)."""
        lp = self.legacy
        if lp is None or not lp._alive():
            lp = self.legacy = self.legacy_build(s)
        return lp


_plans: dict = {}
_plans_lock = threading.Lock()
_arch_of: dict = {}


def algo_cache() -> types.MappingProxyType:
    """A read-only view of the cached plans: problem key -> :class:`ConvPlan`."""
    return types.MappingProxyType(_plans)


def clear_algo_cache() -> None:
    """Forget every cached plan (the next call of each problem chooses again)."""
    with _plans_lock:
        _plans.clear()


def _arch(dev) -> tuple[int, int]:
    return _env(dev)[0]


def _env(dev) -> tuple:
    """``((major, minor), cuDNN version)`` of a device, looked up once: part of every key, so
    a plan chosen for one architecture or library is never reused on another."""
    e = _arch_of.get(dev.ordinal)
    if e is None:
        e = _arch_of[dev.ordinal] = (tuple(dev.compute_capability), version())
    return e


def _hashable(v):
    return v if isinstance(v, (int, str)) or v is None else tuple(v)


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
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    nsp = len(x_shape) - 2
    if nsp < 1 or len(w_shape) != len(x_shape):
        raise ValueError(f"input {x_shape} and filter {w_shape} need the same number (>= 3) "
                         "of dimensions")
    stride = tuple_arg(stride, nsp, "stride")
    padding = tuple_arg(padding, nsp, "padding")
    dilation = tuple_arg(dilation, nsp, "dilation")
    check_conv_params(padding, stride, dilation, int(groups))
    _check_channels(x_shape[1], w_shape, groups)
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


def _check_channels(c, w_shape, groups) -> None:
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


def _defaults(dtype, math):
    """(compute cudnnDataType_t, requested math type int, math name)."""
    dt = np.dtype(dtype)
    compute = _lib.CUDNN_DATA_DOUBLE if dt == np.float64 else _lib.CUDNN_DATA_FLOAT
    if math is None:
        math = ("fma" if dt == np.float32 else "default" if dt == np.float64 else "tensor_op")
    if math not in MATH_TYPES:
        raise ValueError(f"math must be one of {sorted(MATH_TYPES)}, not {math!r}")
    return compute, MATH_TYPES[math], math


def _resolve_algo(op: _Op, algo):
    if isinstance(algo, str):
        if algo in ("find", "heuristic"):
            return algo
        if algo not in op.algos:
            raise ValueError(f"{op.name} algorithm must be 'find', 'heuristic', an int or one "
                             f"of {sorted(op.algos)}, not {algo!r}")
        return op.algos[algo]
    if isinstance(algo, (int, np.integer)) and not isinstance(algo, bool):
        if int(algo) not in op.algo_names:
            raise ValueError(f"{op.name} algorithm {algo} is not one of "
                             f"{sorted(op.algo_names)}")
        return int(algo)
    raise TypeError(f"algo must be 'find', 'heuristic', an int or a name, not {algo!r}")


def _math_ok(requested: int, got: int) -> bool:
    # float32 without TF32 must never run a tensor-op kernel; elsewhere cuDNN's own choice
    # (recorded in the perf result) is what the algorithm was measured with.
    if requested == _lib.CUDNN_FMA_MATH:
        return got in (_lib.CUDNN_FMA_MATH, _lib.CUDNN_DEFAULT_MATH)
    return True


def _select(op: _Op, h, descs, ptrs, out_nbytes, algo, deterministic, limit,
            requested_math, s, dev, problem: str):
    """Choose an algorithm; returns (algo, workspace bytes, math, time_ms, det, source)."""
    L = _lib.get()
    a, b, conv, c = (d.raw for d in descs)
    if not isinstance(algo, str):
        size = ctypes.c_size_t()
        st = getattr(L, op.ws)(h.raw, a, b, conv, c, algo, ctypes.byref(size))
        if st:
            raise_for(st, op.ws, f"{op.name} algorithm {op.algo_names[algo]} on {problem}")
        if deterministic and algo in _NONDETERMINISTIC[op.name]:
            raise NoAlgorithmError(f"{op.name} algorithm {op.algo_names[algo]} is not "
                                   "deterministic; drop deterministic=True or pick another")
        if size.value > limit:
            raise NoAlgorithmError(f"{op.name} algorithm {op.algo_names[algo]} needs "
                                   f"{size.value} bytes of workspace, over the limit of {limit}")
        return algo, size.value, requested_math, None, None, "explicit"

    count = ctypes.c_int()
    st = getattr(L, op.count)(h.raw, ctypes.byref(count))
    if st:
        raise_for(st, op.count)
    n = max(count.value, 1)
    perf = (op.perf * n)()
    got = ctypes.c_int()
    if algo == "heuristic":
        st = getattr(L, op.heuristic)(h.raw, a, b, conv, c, n, ctypes.byref(got), perf)
        if st:
            raise_for(st, op.heuristic, problem)
    else:
        # The workspace for the search: the largest any algorithm needs, up to the limit, so
        # the slow-but-lean ones are not the only ones timed.
        need = 0
        size = ctypes.c_size_t()
        for i in op.algo_names:
            if getattr(L, op.ws)(h.raw, a, b, conv, c, i, ctypes.byref(size)) == 0:
                if size.value <= limit:
                    need = max(need, size.value)
        last_error_string()  # the unsupported ones above leave messages; clear them
        ws_ptr, ws_size = workspace(dev, s._handle, need)
        out_buf = scratch(out_nbytes, s, dev)
        try:
            st = getattr(L, op.find)(h.raw, a, ptrs[0], b, ptrs[1], conv, c, out_buf.ptr, n,
                                     ctypes.byref(got), perf, ws_ptr, ws_size)
            if st:
                raise_for(st, op.find, problem)
        finally:
            out_buf.close(s)
    rejected = []
    for p in perf[:got.value]:
        if p.status != 0:
            continue
        why = None
        if p.memory > limit:
            why = f"needs {p.memory} B of workspace"
        elif deterministic and p.determinism != _lib.CUDNN_DETERMINISTIC:
            why = "not deterministic"
        elif not _math_ok(requested_math, p.mathType):
            why = f"math type {p.mathType}"
        if why:
            rejected.append(f"{op.algo_names.get(p.algo, p.algo)}: {why}")
            continue
        math = requested_math if requested_math == _lib.CUDNN_FMA_MATH else p.mathType
        t = float(p.time) if algo == "find" and p.time >= 0 else None
        return (int(p.algo), int(p.memory), int(math), t,
                p.determinism == _lib.CUDNN_DETERMINISTIC, algo)
    raise NoAlgorithmError(
        f"no {op.name} algorithm for {problem} fits workspace_limit={limit}"
        f"{' and deterministic=True' if deterministic else ''}; candidates: "
        f"{'; '.join(rejected) or 'none succeeded'}")


def _build_plan(op_name, key, dev, s, dtype, cl, a_desc, b_desc, c_desc, ptrs, c_shape,
                conv_params, math, algo, deterministic, limit, problem, use_graph=False):
    fallback = None
    if use_graph:
        try:
            plan = _graph_conv_plan(op_name, key, dev, s, dtype, cl,
                                    (a_desc.key[1], b_desc.key[1], tuple(c_shape)), ptrs,
                                    conv_params, math, algo, deterministic, limit, problem)
        except _NoGraph as exc:
            fallback = str(exc)
        else:
            plan.legacy_build = lambda s_: _build_plan(
                op_name, key, dev, s_, dtype, cl, a_desc, b_desc, c_desc, ptrs, c_shape,
                conv_params, math, "heuristic", deterministic, limit, problem)
            return plan
    op = _OPS[op_name]
    compute, req_math, _ = math
    pad, stride, dil, groups = conv_params
    conv = convolution_descriptor(pad, stride, dil, groups, compute, req_math)
    descs = (a_desc, b_desc, conv, c_desc)
    h = handle_for(dev, s._handle)
    out_nbytes = int(np.prod(c_shape)) * np.dtype(dtype).itemsize
    chosen, ws, m, t, det, source = _select(op, h, descs, ptrs, out_nbytes, algo,
                                            deterministic, limit, req_math, s, dev, problem)
    if m != req_math:
        conv = convolution_descriptor(pad, stride, dil, groups, compute, m)
        descs = (a_desc, b_desc, conv, c_desc)
    plan = ConvPlan()
    plan.op, plan.key, plan.algo, plan.algo_name = op_name, key, chosen, op.algo_names[chosen]
    plan.source, plan.time_ms, plan.workspace_size, plan.math = source, t, ws, m
    plan.deterministic = det
    plan.out_shape, plan.out_dtype, plan.channels_last = tuple(c_shape), np.dtype(dtype), cl
    plan.layout = layout_name(len(c_shape), cl)
    plan.out_strides = tuple(v * plan.out_dtype.itemsize for v in packed_strides(c_shape, cl))
    plan.descs = descs
    plan.raws = tuple(d.raw for d in descs)
    plan.double = is_double(dtype)
    plan.run = getattr(_lib.get(), op.run)
    plan.bias_desc = plan.act_desc = None
    plan.arch, plan.cudnn_version = _arch(dev), version()
    plan.backend, plan.notes, plan.fallback, plan.candidates = "legacy", (), fallback, 0
    plan.gplan = plan.legacy = plan.legacy_build = plan.composite = plan.epilogue = None
    return plan


# -- the graph (backend) API ----------------------------------------------------------------------
class _NoGraph(Exception):
    """The graph API has no usable plan for a problem (the message says why)."""


def _why(exc) -> str:
    if isinstance(exc, CudnnError):
        return f"{exc.function}: {exc.name}" + (f" ({exc.detail})" if exc.detail else "")
    return f"{type(exc).__name__}: {exc}"


def _graph_eligible(algo, alpha, beta) -> bool:
    """Whether a call may use the graph API: a search (not an explicit legacy algorithm) and
    the default scaling (alpha and beta are baked into a graph's operation)."""
    return (GRAPH_API and alpha == 1.0 and beta == 0.0 and type(algo) is str
            and (algo == "find" or algo == "heuristic"))


def _banned_notes(dtype, math_name: str, deterministic: bool) -> frozenset:
    """The numerical notes that disqualify an engine for this dtype / math / determinism.

    float32 with ``math="fma"`` must give true float32 results: no tensor cores, no
    down-conversion, no reduced-precision accumulation.  TF32 (``"tf32"``, ``"default"``,
    ``"tensor_op"``) allows tensor cores but not conversion to half.  float16/bfloat16
    accumulate in float32 (what the compute type asks for), so engines that reduce in lower
    precision are dropped too.  ``"allow_conversion"`` allows everything.
    """
    banned = {"nondeterministic"} if deterministic else set()
    dt = np.dtype(dtype)
    if math_name == "allow_conversion":
        return frozenset(banned)
    if dt == np.float32:
        banned |= {"down_convert_inputs", "reduced_precision_reduction"}
        if math_name == "fma":
            banned.add("tensor_core")
    else:
        banned.add("reduced_precision_reduction")
    return frozenset(banned)


_BANNED_BEHAVIOR = frozenset({"requires_filter_int8x32_reorder",
                              "requires_bias_int8x32_reorder"})


def _graph_select(h, graph, uids, ptrs, out_slot, out_nbytes, banned, algo, limit, dev, s,
                  problem):
    """Finalize execution plans for ``graph`` in heuristic order and pick one.

    ``"heuristic"`` takes the first that passes the filters and finalizes; ``"find"``
    finalizes up to :data:`FIND_MAX_PLANS` and times each on a scratch output (slot
    ``out_slot`` of ``ptrs``; the other pointers are inputs, only read).

    Returns ``(ExecutionPlan, time_ms or None, number of candidates)``.
    """
    errors = []
    configs = _graph.engine_configs(graph, ("a", "fallback"), errors)
    if not configs:
        raise _NoGraph("the heuristics offer no engine for this graph"
                       + (f" ({'; '.join(errors)})" if errors else ""))
    plans, rejected, compiled = [], [], 0
    for cfg in configs:
        why = None
        bad = cfg.numerical_notes & banned
        if bad:
            why = "notes " + ",".join(sorted(bad))
        elif cfg.behavior_notes & _BANNED_BEHAVIOR:
            why = "needs reordered int8 data"
        elif (algo == "find" and "runtime_compilation" in cfg.behavior_notes
              and compiled >= FIND_MAX_COMPILED):
            why = "runtime-compiled candidates already at the limit"
        if why is None:
            try:
                p = _graph.execution_plan(h.raw, cfg, uids)
            except CudnnError as exc:
                last_error_string()
                why = f"does not finalize ({exc.name})"
            else:
                if p.workspace_size > limit:
                    why = f"needs {p.workspace_size} B of workspace"
                else:
                    plans.append(p)
                    if "runtime_compilation" in cfg.behavior_notes:
                        compiled += 1
                    if algo == "heuristic" or len(plans) >= FIND_MAX_PLANS:
                        break
        if why is not None:
            rejected.append(f"{cfg.name}: {why}")
    if not plans:
        raise _NoGraph(f"no engine passes the filters (workspace limit {limit}): "
                       + "; ".join(rejected[:8]) + ("; ..." if len(rejected) > 8 else ""))
    if algo == "heuristic":
        return plans[0], None, len(configs)
    ws_ptr, _ = workspace(dev, s._handle, max(p.workspace_size for p in plans))
    out_buf = scratch(out_nbytes, s, dev)
    start, end = Event(dev), Event(dev)
    best, best_t = None, float("inf")
    try:
        args = list(ptrs)
        args[out_slot] = out_buf.ptr
        args = tuple(args)
        for p in plans:
            try:
                t = _median_ms(lambda: p.execute(h.raw, args, ws_ptr), s, start, end)
            except CudnnError:
                last_error_string()
                continue
            finally:
                p._packs.clear()  # bound to the scratch output: of no use later
            if t < best_t:
                best, best_t = p, t
    finally:
        out_buf.close(s)
        start.close()
        end.close()
    if best is None:
        raise _NoGraph(f"every candidate plan failed to run on {problem}")
    return best, best_t, len(plans)


def _graph_plan_object(op_name, key, dev, dtype, cl, c_shape, mathinfo, gplan, t, n, source):
    plan = ConvPlan()
    cfg = gplan.config
    plan.op, plan.key, plan.algo, plan.algo_name = op_name, key, cfg.engine, cfg.name
    plan.source, plan.time_ms, plan.workspace_size = source, t, gplan.workspace_size
    plan.math = mathinfo[1]
    plan.deterministic = "nondeterministic" not in cfg.numerical_notes
    plan.out_shape, plan.out_dtype, plan.channels_last = tuple(c_shape), np.dtype(dtype), cl
    plan.layout = layout_name(len(c_shape), cl)
    plan.out_strides = tuple(v * plan.out_dtype.itemsize for v in packed_strides(c_shape, cl))
    plan.descs = (gplan.descriptor,)
    plan.raws = ()
    plan.double = is_double(dtype)
    plan.run = None
    plan.bias_desc = plan.act_desc = None
    plan.arch, plan.cudnn_version = _arch(dev), version()
    plan.backend = "graph"
    plan.notes = tuple(sorted(cfg.numerical_notes)) + tuple(sorted(cfg.behavior_notes))
    plan.fallback, plan.candidates = None, n
    plan.gplan, plan.legacy, plan.legacy_build, plan.composite = gplan, None, None, None
    plan.epilogue = None
    return plan


def _graph_tensor(uid, dtype, shape, cl, virtual=False):
    return _graph.tensor(uid, dtype, shape, packed_strides(shape, cl),
                         alignment=_GRAPH_ALIGNMENT, virtual=virtual)


def _graph_plan_from(op_name, key, dev, s, dtype, cl, out_shape, mathinfo, algo,
                     deterministic, limit, problem, build):
    """Build an operation graph with ``build(handle) -> (graph, uids, ptrs)`` (the output in
    slot 2), choose its execution plan and wrap it in a :class:`ConvPlan`.  Any failure of the
    graph route becomes :class:`_NoGraph`, so the caller falls back to the legacy API."""
    try:
        h = handle_for(dev, s._handle)
        graph, uids, ptrs = build(h)
        out_nbytes = int(np.prod(out_shape)) * np.dtype(dtype).itemsize
        gplan, t, n = _graph_select(h, graph, uids, ptrs, 2, out_nbytes,
                                    _banned_notes(dtype, mathinfo[2], deterministic), algo,
                                    limit, dev, s, problem)
    except _NoGraph:
        raise
    except Exception as exc:  # any failure of the graph route falls back to the legacy API
        last_error_string()
        raise _NoGraph(_why(exc)) from None
    return _graph_plan_object(op_name, key, dev, dtype, cl, out_shape, mathinfo, gplan, t, n,
                              algo)


def _graph_conv_plan(op_name, key, dev, s, dtype, cl, shapes, ptrs, conv_params, mathinfo,
                     algo, deterministic, limit, problem):
    """A graph-API :class:`ConvPlan` for one convolution, or :class:`_NoGraph`."""
    if is_double(dtype):
        raise _NoGraph("float64 runs on the legacy API")
    pad, stride, dil, _ = conv_params

    def build(h):
        a, b, c = (_graph_tensor(uid, dtype, shape, cl)
                   for uid, shape in zip((1, 2, 3), shapes))
        conv = _graph.convolution(pad, stride, dil, compute=np.float32)
        op = _graph.conv_operation(op_name, a, b, c, conv)
        return _graph.operation_graph([op], h.raw), (1, 2, 3), (ptrs[0], ptrs[1], 0)

    return _graph_plan_from(op_name, key, dev, s, dtype, cl, shapes[2], mathinfo, algo,
                            deterministic, limit, problem, build)


def _tdesc(dtype, shape, cl):
    return tensor_descriptor(dtype, shape, packed_strides(shape, cl))


def _problem(dtype, x_shape, w_shape, cl, pad, stride, dil, groups) -> str:
    return (f"{np.dtype(dtype)} {layout_name(len(x_shape), cl)} input {tuple(x_shape)}, "
            f"filter {tuple(w_shape)}, padding {pad}, stride {stride}, dilation {dil}, "
            f"groups {groups}")


def _common_key(op, dev, x, w, stride, padding, dilation, groups, algo, math, deterministic,
                limit, extra=(), graph=False):
    # ``graph`` last: whether the call may use the graph API (GRAPH_API, default scaling), so
    # a legacy plan made for alpha/beta != (1, 0) is never returned to a call that could use
    # a graph plan, nor the reverse.
    return (op, dev.ordinal, x.dtype, x.shape, x.strides, w.shape, w.strides,
            _hashable(stride), _hashable(padding), _hashable(dilation), groups,
            algo if isinstance(algo, (str, int)) else repr(algo), math, bool(deterministic),
            limit, extra, _env(dev), graph)


def _check_pair(a, b, an, bn):
    check_float(a, an)
    if b.dtype != a.dtype:
        raise TypeError(f"{bn} has dtype {b.dtype} but {an} has {a.dtype}; they must match")
    if b.ndim != a.ndim:
        raise ValueError(f"{an} {a.shape} and {bn} {b.shape} need the same number of "
                         "dimensions (4 for 2-D convolution, 5 for 3-D)")


def _params(nsp, stride, padding, dilation, groups):
    stride = tuple_arg(stride, nsp, "stride")
    padding = tuple_arg(padding, nsp, "padding")
    dilation = tuple_arg(dilation, nsp, "dilation")
    groups = int(groups)
    check_conv_params(padding, stride, dilation, groups)
    return padding, stride, dilation, groups


def _library_output_dims(conv_desc, x_desc, w_desc, nd) -> tuple[int, ...]:
    dims = (ctypes.c_int * nd)()
    st = _lib.get().cudnnGetConvolutionNdForwardOutputDim(conv_desc.raw, x_desc.raw,
                                                          w_desc.raw, nd, dims)
    if st:
        raise_for(st, "cudnnGetConvolutionNdForwardOutputDim")
    return tuple(dims)


def _execute(plan, dev, s, a_ptr, b_ptr, c_ptr, alpha, beta):
    h = handle_for(dev, s._handle)
    ws_ptr, ws_size = workspace(dev, s._handle, plan.workspace_size)
    g = plan.gplan
    if g is not None:
        # The hot path of a graph plan: the variant pack of these pointers (cached in the
        # plan) and one cudnnBackendExecute.
        vp = g._packs.get((a_ptr, b_ptr, c_ptr, ws_ptr))
        if vp is None:
            if (a_ptr | b_ptr | c_ptr) % _GRAPH_ALIGNMENT:
                return _execute(plan._legacy(s), dev, s, a_ptr, b_ptr, c_ptr, alpha, beta)
            vp = g.pack((a_ptr, b_ptr, c_ptr), ws_ptr)
        st = g._exec(h.raw, g._raw, vp._raw)
        if st:
            raise_for(st, "cudnnBackendExecute", f"plan: {plan!r}")
        return h
    a, b, conv, c = plan.raws
    d = plan.double
    st = plan.run(h.raw, scalar(alpha, d), a, a_ptr, b, b_ptr, conv, plan.algo, ws_ptr,
                  ws_size, scalar(beta, d), c, c_ptr)
    if st:
        raise_for(st, plan.run.__name__, f"plan: {plan!r}")
    return h


def _lookup(key):
    plan = _plans.get(key)
    if plan is not None and not plan._alive():
        plan = None
    return plan


def _store(key, plan):
    with _plans_lock:
        _plans[key] = plan
    return plan


def _planned(op, a, an, b, bn, extra, out, stream, workspace_limit, conv, build, alpha=1.0,
             beta=0.0):
    """The shared front of the three convolutions: check and coerce the operands, find the
    plan for the problem in the cache (``build(key, a, b, dev, s, limit, prefer, graph)``
    makes it on a miss) and check or allocate the output.

    Returns ``(plan, dev, stream, a, b, out)``.
    """
    a, b, dev, s = operands(stream, (a, an), (b, bn))
    limit = _default_limit() if workspace_limit is None else int(workspace_limit)
    graph = _graph_eligible(conv[4], alpha, beta)
    key = _common_key(op, dev, a, b, *conv, limit, (extra, out_key(out)), graph)
    plan = _lookup(key)
    if plan is None:
        plan = _store(key, build(key, a, b, dev, s, limit, out_hint(out), graph))
    y = output(out, plan.out_shape, plan.out_dtype, plan.channels_last, dev, s,
               strides=plan.out_strides)
    return plan, dev, s, a, b, y


# -- forward --------------------------------------------------------------------------------------
def _forward_problem(x, w, stride, padding, dilation, groups, math, prefer):
    """Checked forward parameters: (channels_last, pad, stride, dilation, groups, y_shape,
    math info)."""
    _check_pair(x, w, "x", "w")
    cl = pick_layout((layout_of(x, "x"), "x"), (layout_of(w, "w"), "w"), prefer=prefer)
    pad, st_, dil, groups = _params(x.ndim - 2, stride, padding, dilation, groups)
    y_shape = conv_output_shape(x.shape, w.shape, stride=st_, padding=pad, dilation=dil,
                                groups=groups)
    return cl, pad, st_, dil, groups, y_shape, _defaults(x.dtype, math)


def _forward_plan(key, x, w, dev, s, stride, padding, dilation, groups, algo, math,
                  deterministic, limit, op_name="forward", prefer=None, graph=False):
    cl, pad, st_, dil, groups, y_shape, mathinfo = _forward_problem(
        x, w, stride, padding, dilation, groups, math, prefer)
    algo = _resolve_algo(_OPS["forward"], algo)
    xd = _tdesc(x.dtype, x.shape, cl)
    wd = filter_descriptor(x.dtype, w.shape, cl)
    yd = _tdesc(x.dtype, y_shape, cl)
    problem = _problem(x.dtype, x.shape, w.shape, cl, pad, st_, dil, groups)
    lib_dims = _library_output_dims(
        convolution_descriptor(pad, st_, dil, groups, mathinfo[0], mathinfo[1]), xd, wd, x.ndim)
    if lib_dims != y_shape:  # the formula and cuDNN must agree, or the descriptors are wrong
        raise CudaLibsError(f"cuDNN computes output {lib_dims}, the formula {y_shape}, for "
                            f"{problem}")
    plan = _build_plan("forward", key, dev, s, x.dtype, cl, xd, wd, yd, (x.ptr, w.ptr),
                       y_shape, (pad, st_, dil, groups), mathinfo, algo, deterministic, limit,
                       problem, use_graph=graph)
    plan.op = op_name
    return plan


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
        Where to write ``(N, K, ...)``; allocated stream-ordered in the input's layout if None.
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
        on different devices, ``out`` of the wrong shape or layout.
    TypeError
        A dtype other than float32/float16/bfloat16/float64, or dtypes that differ.
    NoAlgorithmError
        No algorithm fits the workspace limit (or determinism).
    CudnnError
        cuDNN rejected the problem (the message says which and includes its own account).
    """
    plan, dev, s, x, w, y = _planned(
        "forward", x, "x", w, "w", None, out, stream, workspace_limit,
        (stride, padding, dilation, groups, algo, math, deterministic),
        lambda key, x, w, dev, s, limit, prefer, graph: _forward_plan(
            key, x, w, dev, s, stride, padding, dilation, groups, algo, math, deterministic,
            limit, prefer=prefer, graph=graph), alpha, beta)
    if bias is not None:
        bias = _bias_arg(bias, plan, dev)
    _execute(plan, dev, s, x._ptr, w._ptr, y.ptr, alpha, beta)
    if bias is not None:
        _add_bias(plan, dev, s, bias, y)
    return y



def _bias_arg(bias, plan, dev):
    return _check_bias(bias, plan.out_shape, plan.out_dtype, dev)


def _check_bias(bias, out_shape, dtype, dev):
    bias = as_array(bias, "bias")
    k = out_shape[1]
    if bias._device is not dev:
        same_device(dev, bias=bias)
    if bias.shape != (k,) and bias.shape != (1, k) + (1,) * (len(out_shape) - 2):
        raise ValueError(f"bias must have shape ({k},), got {bias.shape}")
    if bias.dtype != dtype:
        raise TypeError(f"bias has dtype {bias.dtype}, expected {dtype}")
    if bias.strides[-1] != bias.itemsize and bias.size > 1:
        raise ValueError("bias must be contiguous")
    return bias


def _bias_desc(plan):
    d = plan.bias_desc
    if d is None or not d._finalizer.alive:
        shape = (1, plan.out_shape[1]) + (1,) * (len(plan.out_shape) - 2)
        d = plan.bias_desc = tensor_descriptor(plan.out_dtype, shape,
                                               packed_strides(shape, False))
    return d


def _add_bias(plan, dev, s, bias, y):
    h = handle_for(dev, s._handle)
    bd = _bias_desc(plan)
    d = plan.double
    # A graph plan holds no legacy descriptor of its output: make one (cached by the
    # descriptor layer) from the plan's shape and layout.
    yd = plan.raws[3] if len(plan.raws) > 3 else _tdesc(plan.out_dtype, plan.out_shape,
                                                        plan.channels_last).raw
    st = _lib.get().cudnnAddTensor(h.raw, scalar(1.0, d), bd.raw, bias.ptr, scalar(1.0, d),
                                   yd, y.ptr)
    if st:
        raise_for(st, "cudnnAddTensor", f"bias {bias.shape} onto {y.shape}")


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
        ``dx``; allocated in ``dy``'s layout if None.

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
        x_shape = as_array(out, "out").shape
    xs = None if x_shape is None else tuple(int(v) for v in x_shape)
    plan, dev, s, dy, w, dx = _planned(
        "backward_data", dy, "dy", w, "w", xs, out, stream, workspace_limit,
        (stride, padding, dilation, groups, algo, math, deterministic),
        lambda key, dy, w, dev, s, limit, prefer, graph: _backward_data_plan(
            key, dy, w, xs, dev, s, stride, padding, dilation, groups, algo, math,
            deterministic, limit, prefer=prefer, graph=graph), alpha, beta)
    _execute(plan, dev, s, w._ptr, dy._ptr, dx.ptr, alpha, beta)
    return dx


def _backward_data_plan(key, dy, w, xs, dev, s, stride, padding, dilation, groups, algo,
                        math, deterministic, limit, prefer=None, graph=False):
    _check_pair(dy, w, "dy", "w")
    cl = pick_layout((layout_of(dy, "dy"), "dy"), (layout_of(w, "w"), "w"), prefer=prefer)
    nsp = dy.ndim - 2
    pad, st_, dil, groups = _params(nsp, stride, padding, dilation, groups)
    if xs is None:
        c = w.shape[1] * groups
        xs = (dy.shape[0], c) + tuple(
            (dy.shape[2 + i] - 1) * st_[i] - 2 * pad[i] + dil[i] * (w.shape[2 + i] - 1) + 1
            for i in range(nsp))
        if any(v < 1 for v in xs):
            raise ValueError(f"no input shape gives dy {dy.shape} with these parameters")
    if len(xs) != dy.ndim:
        raise ValueError(f"x_shape {xs} must have {dy.ndim} dimensions")
    expect = conv_output_shape(xs, w.shape, stride=st_, padding=pad, dilation=dil,
                               groups=groups)
    if expect != dy.shape:
        raise ValueError(f"an input of shape {xs} convolves to {expect}, but dy is {dy.shape}")
    mathinfo = _defaults(dy.dtype, math)
    algo = _resolve_algo(_OPS["backward_data"], algo)
    wd = filter_descriptor(dy.dtype, w.shape, cl)
    dyd = _tdesc(dy.dtype, dy.shape, cl)
    dxd = _tdesc(dy.dtype, xs, cl)
    problem = _problem(dy.dtype, xs, w.shape, cl, pad, st_, dil, groups)
    return _build_plan("backward_data", key, dev, s, dy.dtype, cl, wd, dyd, dxd,
                       (w.ptr, dy.ptr), xs, (pad, st_, dil, groups), mathinfo, algo,
                       deterministic, limit, problem, use_graph=graph)


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
        ``dw``; allocated in ``x``'s layout if None.

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
        filter_shape = as_array(out, "out").shape
    ws_ = tuple(int(v) for v in filter_shape)
    plan, dev, s, x, dy, dw = _planned(
        "backward_filter", x, "x", dy, "dy", ws_, out, stream, workspace_limit,
        (stride, padding, dilation, groups, algo, math, deterministic),
        lambda key, x, dy, dev, s, limit, prefer, graph: _backward_filter_plan(
            key, x, dy, ws_, dev, s, stride, padding, dilation, groups, algo, math,
            deterministic, limit, prefer=prefer, graph=graph), alpha, beta)
    _execute(plan, dev, s, x._ptr, dy._ptr, dw.ptr, alpha, beta)
    return dw


def _backward_filter_plan(key, x, dy, ws_, dev, s, stride, padding, dilation, groups, algo,
                          math, deterministic, limit, prefer=None, graph=False):
    _check_pair(x, dy, "x", "dy")
    cl = pick_layout((layout_of(x, "x"), "x"), (layout_of(dy, "dy"), "dy"), prefer=prefer)
    pad, st_, dil, groups = _params(x.ndim - 2, stride, padding, dilation, groups)
    if len(ws_) != x.ndim or any(v < 1 for v in ws_):
        raise ValueError(f"filter_shape {ws_} must have {x.ndim} positive dimensions")
    expect = conv_output_shape(x.shape, ws_, stride=st_, padding=pad, dilation=dil,
                               groups=groups)
    if expect != dy.shape:
        raise ValueError(f"x {x.shape} with a filter {ws_} convolves to {expect}, but dy is "
                         f"{dy.shape}")
    mathinfo = _defaults(x.dtype, math)
    algo = _resolve_algo(_OPS["backward_filter"], algo)
    xd = _tdesc(x.dtype, x.shape, cl)
    dyd = _tdesc(x.dtype, dy.shape, cl)
    dwd = filter_descriptor(x.dtype, ws_, cl)
    problem = _problem(x.dtype, x.shape, ws_, cl, pad, st_, dil, groups)
    return _build_plan("backward_filter", key, dev, s, x.dtype, cl, xd, dyd, dwd,
                       (x.ptr, dy.ptr), ws_, (pad, st_, dil, groups), mathinfo, algo,
                       deterministic, limit, problem, use_graph=graph)


# -- backward bias --------------------------------------------------------------------------------
_bias_descs: dict = {}


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
    dy = as_array(dy, "dy")
    dev = dy._device
    s = stream_of(stream, dev)
    key = (dy.dtype, dy.shape, dy.strides)
    descs = _bias_descs.get(key)
    if descs is None or not all(d._finalizer.alive for d in descs):
        check_float(dy, "dy")
        if dy.dtype.name == "bfloat16":
            # cuDNN 9 answers CUDNN_STATUS_NOT_SUPPORTED; say so before the call.
            raise TypeError("cudnnConvolutionBackwardBias does not support bfloat16 (cuDNN "
                            "supports float32, float64 and float16 here); reduce dy over "
                            "N and the spatial axes in float32 instead")
        cl = pick_layout((layout_of(dy, "dy"), "dy"))
        bshape = (1, dy.shape[1]) + (1,) * (dy.ndim - 2)
        descs = _bias_descs[key] = (_tdesc(dy.dtype, dy.shape, cl),
                                    tensor_descriptor(dy.dtype, bshape,
                                                      packed_strides(bshape, False)))
    db = output(out, (dy.shape[1],), dy.dtype, False, dev, s)
    h = handle_for(dev, s._handle)
    d = is_double(dy.dtype)
    st = _lib.get().cudnnConvolutionBackwardBias(h.raw, scalar(alpha, d), descs[0].raw, dy.ptr,
                                                 scalar(beta, d), descs[1].raw, db.ptr)
    if st:
        raise_for(st, "cudnnConvolutionBackwardBias", f"dy {dy.dtype} {dy.shape}")
    return db


# -- fused convolution + bias + activation --------------------------------------------------------
def conv_bias_act(x, w, bias, *, activation="relu", z=None, alpha=1.0, alpha2=1.0, stride=1,
                  padding=0, dilation=1, groups=1, algo="find", math=None,
                  deterministic=False, workspace_limit=None, out=None, stream=None):
    """Fused ``out = act(alpha * conv(x, w) + alpha2 * z + bias)`` in one cuDNN call.

    On the graph API (``algo="find"``/``"heuristic"``, :data:`GRAPH_API` on) this is one
    operation graph -- the convolution into a virtual float32 tensor, pointwise ADD of the
    bias, [ADD of ``alpha2 * z``], [RELU] -- which cuDNN's runtime-fusion engines compile
    into one kernel (they typically want channels-last float16/bfloat16 data with channel
    counts that are multiples of 8).  Without ``z`` and with ``alpha == 1``, ``"find"`` also
    times the fastest plain convolution followed by one ``channel_bias_act`` pass (in place
    on ``out``) and keeps that pair when it is faster than every fused engine, or when no
    engine fuses the graph (``plan.backend == "graph+kernel"``).  Otherwise, or for an
    explicit algorithm, ``cudnnConvolutionBiasActivationForward`` (legacy) runs it.

    Parameters
    ----------
    x, w
        As for :func:`conv_forward`.
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
        As for :func:`conv_forward`.  On the graph API ``"find"`` times the fused plans; on
        the legacy one it times the plain convolution and falls back to
        implicit-precomputed GEMM when cuDNN cannot fuse the algorithm it found.

    Returns
    -------
    DeviceArray
        ``out``.

    Raises
    ------
    ValueError
        An unknown activation, ``z``/``bias`` of the wrong shape, dtype, layout or device,
        and everything :func:`conv_forward` raises.
    """
    if activation not in ("relu", "identity"):
        raise ValueError(f"activation must be 'relu' or 'identity' (what cuDNN fuses), "
                         f"not {activation!r}")
    x, w, dev, s = operands(stream, (x, "x"), (w, "w"))
    limit = _default_limit() if workspace_limit is None else int(workspace_limit)
    if not _graph_eligible(algo, 1.0, 0.0):
        return _conv_bias_act_legacy(x, w, bias, activation, z, alpha, alpha2, stride, padding,
                                     dilation, groups, algo, math, deterministic, limit, out,
                                     dev, s, None)
    # alpha and alpha2 are baked into the graph, and z adds an operation: all in the key.
    with_z = z is not None
    okey = out_key(out)
    key = _common_key("fused", dev, x, w, stride, padding, dilation, groups, algo, math,
                      deterministic, limit,
                      (activation, okey, with_z, float(alpha), float(alpha2) if with_z else 0.0),
                      True)
    plan = _lookup(key)
    if plan is None:
        why = None
        try:
            plan = _graph_fused_plan(key, x, w, bias, z, dev, s, stride, padding, dilation,
                                     groups, algo, math, deterministic, limit, activation,
                                     float(alpha), float(alpha2), out_hint(out))
        except _NoGraph as exc:
            plan, why = None, str(exc)
        if algo == "find" and alpha == 1.0 and not with_z and not is_double(x.dtype):
            # The fastest convolution plus one epilogue pass can beat every fused engine
            # (and serves problems no engine fuses): find times that pair too.
            plan = _composite_plan(key, x, w, out, dev, s, stride, padding, dilation, groups,
                                   math, deterministic, limit, activation, plan)
        if plan is None:
            # No engine fuses this problem: the legacy fused call, cached under this key.
            return _conv_bias_act_legacy(x, w, bias, activation, z, alpha, alpha2, stride,
                                         padding, dilation, groups, algo, math, deterministic,
                                         limit, out, dev, s, key, why)
        _store(key, plan)
    if plan.composite is not None:
        bias = _bias_arg(bias, plan, dev)
        y = output(out, plan.out_shape, plan.out_dtype, plan.channels_last, dev, s,
                   strides=plan.out_strides)
        _execute(plan.composite, dev, s, x._ptr, w._ptr, y.ptr, 1.0, 0.0)
        _epilogue(plan, dev, s, y.ptr, bias.ptr)
        return y
    if plan.gplan is None:
        return _conv_bias_act_legacy(x, w, bias, activation, z, alpha, alpha2, stride, padding,
                                     dilation, groups, algo, math, deterministic, limit, out,
                                     dev, s, key)
    bias = _bias_arg(bias, plan, dev)
    y = output(out, plan.out_shape, plan.out_dtype, plan.channels_last, dev, s,
               strides=plan.out_strides)
    if with_z:
        z = output(z, plan.out_shape, plan.out_dtype, plan.channels_last, dev, s, "z")
        ptrs = (x._ptr, w._ptr, y.ptr, bias.ptr, z.ptr)
    else:
        ptrs = (x._ptr, w._ptr, y.ptr, bias.ptr)
    h = handle_for(dev, s._handle)
    ws_ptr, _ = workspace(dev, s._handle, plan.workspace_size)
    g = plan.gplan
    vp = g._packs.get((*ptrs, ws_ptr))
    if vp is None:
        if any(p % _GRAPH_ALIGNMENT for p in ptrs):
            # Less aligned than the plan declared: the legacy fused call takes any pointer.
            return _conv_bias_act_legacy(x, w, bias, activation, z, alpha, alpha2, stride,
                                         padding, dilation, groups, algo, math, deterministic,
                                         limit, out, dev, s, None)
        vp = g.pack(ptrs, ws_ptr)
    st = g._exec(h.raw, g._raw, vp._raw)
    if st:
        raise_for(st, "cudnnBackendExecute", f"plan: {plan!r}")
    return y


def _composite_plan(key, x, w, out, dev, s, stride, padding, dilation, groups, math,
                    deterministic, limit, activation, fused):
    """The fused plan "forward plan + ``channel_bias_act`` pass" if ``find`` times it faster
    than ``fused`` (a graph plan, or None), else ``fused``."""
    fkey = _common_key("forward", dev, x, w, stride, padding, dilation, groups, "find", math,
                       deterministic, limit, (None, out_key(out)), True)
    fplan = _lookup(fkey)       # conv_forward's own plan for this problem, shared
    if fplan is None:
        fplan = _store(fkey, _forward_plan(fkey, x, w, dev, s, stride, padding, dilation,
                                           groups, "find", math, deterministic, limit,
                                           prefer=out_hint(out), graph=True))
    if fplan.gplan is None or fplan.time_ms is None:
        return fused
    t_pass = _time_epilogue(fplan, dev, s, activation)
    if fused is not None and fused.time_ms is not None and \
            fused.time_ms <= fplan.time_ms + t_pass:
        return fused
    plan = ConvPlan()
    for name in ConvPlan.__slots__[:-1]:    # all but __weakref__
        setattr(plan, name, getattr(fplan, name, None))
    plan.op, plan.key, plan.composite = "fused", key, fplan
    shape = fplan.out_shape
    plan.epilogue = (int(np.prod(shape)), shape[1],
                     1 if fplan.channels_last else int(np.prod(shape[2:])),
                     activation == "relu")
    plan.backend = "graph+kernel"
    plan.algo_name = f"{fplan.algo_name} + channel_bias_act"
    plan.time_ms = fplan.time_ms + t_pass
    plan.legacy = plan.legacy_build = None
    plan.fallback = (None if fused is None else
                     f"fused engine {fused.algo_name} took {fused.time_ms:.3f} ms")
    return plan


def _epilogue(plan, dev, s, y_ptr, bias_ptr) -> None:
    """The composite plan's ``channel_bias_act`` pass (arguments prepared with the plan)."""
    n, channels, inner, relu = plan.epilogue
    _kernels._launch_channel_bias_act(dev, plan.out_dtype, y_ptr, 0, 1.0, bias_ptr, n,
                                      channels, inner, relu, s)


def _time_epilogue(fplan, dev, s, activation) -> float:
    """Milliseconds of one ``channel_bias_act`` pass over ``fplan``'s output (scratch data:
    its values do not matter to the time)."""
    n, channels = int(np.prod(fplan.out_shape)), fplan.out_shape[1]
    inner = 1 if fplan.channels_last else n // (fplan.out_shape[0] * channels)
    y_buf = scratch(n * fplan.out_dtype.itemsize, s, dev)
    b_buf = scratch(channels * fplan.out_dtype.itemsize, s, dev)
    start, end = Event(dev), Event(dev)
    try:
        y_buf.memset(0, s)
        b_buf.memset(0, s)
        return _median_ms(lambda: _kernels._launch_channel_bias_act(
            dev, fplan.out_dtype, y_buf.ptr, 0, 1.0, b_buf.ptr, n, channels, inner,
            activation == "relu", s), s, start, end)
    finally:
        y_buf.close(s)
        b_buf.close(s)
        start.close()
        end.close()


def _median_ms(run, s, start, end) -> float:
    """Median milliseconds of ``run()`` on stream ``s``, timed with the events ``start`` and
    ``end``: a warm-up run (lazy loading, caches), one run that sizes the loops, then
    _FIND_RUNS samples, each ``reps`` back-to-back runs of about _FIND_SAMPLE_MS, because
    single short runs are too noisy to rank engines within a few percent of each other."""
    run()
    start.record(s)
    run()
    end.record(s)
    end.sync()
    reps = max(1, min(_FIND_MAX_REPS, int(_FIND_SAMPLE_MS / max(start.elapsed_ms(end), 1e-3))))
    times = []
    for _ in range(_FIND_RUNS):
        start.record(s)
        for _ in range(reps):
            run()
        end.record(s)
        end.sync()
        times.append(start.elapsed_ms(end) / reps)
    return sorted(times)[len(times) // 2]


def _graph_fused_plan(key, x, w, bias, z, dev, s, stride, padding, dilation, groups, algo,
                      math, deterministic, limit, activation, alpha, alpha2, prefer):
    """A graph-API plan of ``act(alpha * conv(x, w) + bias [+ alpha2 * z])``: the convolution
    into a virtual float32 tensor, then pointwise ADD bias, [ADD alpha2 * z], [RELU] into y --
    the pattern cuDNN's runtime-fusion engines generate one kernel for."""
    cl, pad, st_, dil, groups, y_shape, mathinfo = _forward_problem(
        x, w, stride, padding, dilation, groups, math, prefer)
    dtype = x.dtype
    if is_double(dtype):
        raise _NoGraph("float64 runs on the legacy API")
    bias = _check_bias(bias, y_shape, dtype, dev)
    if z is not None:
        z = output(z, y_shape, dtype, cl, dev, s, "z")
    problem = _problem(dtype, x.shape, w.shape, cl, pad, st_, dil, groups)
    nd = len(y_shape)
    bshape = (1, y_shape[1]) + (1,) * (nd - 2)

    def build(h):
        xt = _graph_tensor(1, dtype, x.shape, cl)
        wt = _graph_tensor(2, dtype, w.shape, cl)
        yt = _graph_tensor(3, dtype, y_shape, cl)
        bt = _graph_tensor(4, dtype, bshape, cl)
        acc = np.float32
        cur = _graph_tensor(101, acc, y_shape, cl, virtual=True)
        ops = [_graph.conv_operation("forward", xt, wt, cur,
                                     _graph.convolution(pad, st_, dil, compute=acc),
                                     alpha=alpha)]
        steps = [("add", bt, 1.0)]
        if z is not None:
            steps.append(("add", _graph_tensor(5, dtype, y_shape, cl), alpha2))
        if activation == "relu":
            steps.append(("relu", None, 1.0))
        for i, (mode, operand, a2) in enumerate(steps):
            nxt = yt if i == len(steps) - 1 else _graph_tensor(102 + i, acc, y_shape, cl,
                                                               virtual=True)
            ops.append(_graph.pointwise_operation(_graph.pointwise(mode, compute=acc), cur, nxt,
                                                  operand, alpha2=a2))
            cur = nxt
        uids = (1, 2, 3, 4) + ((5,) if z is not None else ())
        ptrs = (x.ptr, w.ptr, 0, bias.ptr) + ((z.ptr,) if z is not None else ())
        return _graph.operation_graph(ops, h.raw), uids, ptrs

    return _graph_plan_from("fused", key, dev, s, dtype, cl, y_shape, mathinfo, algo,
                            deterministic, limit, problem, build)


def _conv_bias_act_legacy(x, w, bias, activation, z, alpha, alpha2, stride, padding, dilation,
                          groups, algo, math, deterministic, limit, out, dev, s, key,
                          fallback=None):
    """``cudnnConvolutionBiasActivationForward``; ``key`` None: the legacy plan key."""
    if activation == "identity":
        algo = "implicit_precomp_gemm"
    if key is None:
        key = _common_key("fused", dev, x, w, stride, padding, dilation, groups, algo, math,
                          deterministic, limit, (activation, out_key(out)))
    plan = _lookup(key)
    fresh = plan is None or plan.gplan is not None
    if fresh:
        plan = _forward_plan(key, x, w, dev, s, stride, padding, dilation, groups, algo, math,
                             deterministic, limit, op_name="fused", prefer=out_hint(out))
        plan.act_desc = activation_descriptor(activation)
        plan.run = _lib.get().cudnnConvolutionBiasActivationForward
        plan.fallback = fallback
    bias = _bias_arg(bias, plan, dev)
    y = output(out, plan.out_shape, plan.out_dtype, plan.channels_last, dev, s,
               strides=plan.out_strides)
    if z is not None:
        z = output(z, plan.out_shape, plan.out_dtype, plan.channels_last, dev, s, "z")
        z_ptr, a2 = z.ptr, alpha2
    else:
        # cuDNN requires a z; with alpha2 = 0 it is the output itself.
        z_ptr, a2 = y.ptr, 0.0
    st = _fused_call(plan, dev, s, x, w, z_ptr, bias, y, alpha, a2)
    if _not_supported(st) and fresh and plan.algo != 1:
        # Not every algorithm find picks is fusable; implicit-precomputed GEMM always is.
        plan = _forward_plan(key, x, w, dev, s, stride, padding, dilation, groups,
                             "implicit_precomp_gemm", math, deterministic, limit,
                             op_name="fused", prefer=out_hint(out))
        plan.act_desc = activation_descriptor(activation)
        plan.run = _lib.get().cudnnConvolutionBiasActivationForward
        plan.fallback = fallback
        st = _fused_call(plan, dev, s, x, w, z_ptr, bias, y, alpha, a2)
    if st:
        raise_for(st, "cudnnConvolutionBiasActivationForward", f"plan: {plan!r}")
    if fresh:
        _store(key, plan)
    return y


def _fused_call(plan, dev, s, x, w, z_ptr, bias, y, alpha, alpha2) -> int:
    h = handle_for(dev, s._handle)
    ws_ptr, ws_size = workspace(dev, s._handle, plan.workspace_size)
    xd, wd, conv, yd = plan.raws
    d = plan.double
    return plan.run(h.raw, scalar(alpha, d), xd, x._ptr, wd, w._ptr, conv, plan.algo, ws_ptr,
                    ws_size, scalar(alpha2, d), yd, z_ptr, _bias_desc(plan).raw, bias.ptr,
                    plan.act_desc.raw, yd, y.ptr)
