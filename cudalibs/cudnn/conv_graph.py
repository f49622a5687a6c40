"""The graph (backend) API route of the convolutions: operation graphs and engine candidates.

A convolution (or the fused convolution + bias [+ residual] [+ ReLU]) becomes an operation
graph; cuDNN's heuristics (mode A, then the fallback list) propose engine configurations,
which are filtered -- numerical notes the dtype / math / determinism forbid, int8 reorders,
the workspace limit, a bound on runtime-compiled engines -- and finalized into execution
plans.  These are the graph candidates of a :class:`~cudalibs.cudnn.conv_plan.ConvPlan`.
Any failure here becomes :class:`NoGraph`, whose message the plan records as the reason it
runs on the legacy API.
"""

from __future__ import annotations

import numpy as np

from ..errors import CudnnError
from . import graph as _graph
from ._base import last_error_string
from .descriptors import packed_strides

__all__ = ["NoGraph", "why", "banned_notes", "tensor", "candidates", "conv_graph",
           "fused_graph", "ALIGNMENT", "FIND_MAX_PLANS", "FIND_MAX_COMPILED"]

#: The most execution plans a plan finalizes as candidates (in heuristic order), and the most
#: of those that need runtime compilation (each costs a compile at plan time).
FIND_MAX_PLANS = 16
FIND_MAX_COMPILED = 3
#: Byte alignment the graph plans declare for every tensor; a call whose pointers are less
#: aligned runs on the plan's legacy twin instead (pool allocations are 256-byte aligned).
ALIGNMENT = 16

_BANNED_BEHAVIOR = frozenset({"requires_filter_int8x32_reorder",
                              "requires_bias_int8x32_reorder"})


class NoGraph(Exception):
    """The graph API has no usable plan for a problem (the message says why)."""


def why(exc) -> str:
    """A short account of a failure of the graph route."""
    if isinstance(exc, CudnnError):
        return f"{exc.function}: {exc.name}" + (f" ({exc.detail})" if exc.detail else "")
    return f"{type(exc).__name__}: {exc}"


def banned_notes(dtype, math_name: str, deterministic: bool) -> frozenset:
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


def tensor(uid, dtype, shape, cl, virtual=False):
    """A packed graph tensor of layout ``cl`` (channels-last when True)."""
    return _graph.tensor(uid, dtype, shape, packed_strides(shape, cl), alignment=ALIGNMENT,
                         virtual=virtual)


def candidates(h, graph, uids, banned, limit: int, max_plans: int) -> list:
    """``[(candidate dict, ExecutionPlan), ...]``: up to ``max_plans`` finalized plans of
    ``graph`` in heuristic order that pass the filters.

    Raises
    ------
    NoGraph
        None passes (the message lists why, for the first few).
    """
    errors = []
    configs = _graph.engine_configs(graph, ("a", "fallback"), errors)
    if not configs:
        raise NoGraph("the heuristics offer no engine for this graph"
                      + (f" ({'; '.join(errors)})" if errors else ""))
    out, rejected, compiled = [], [], 0
    for cfg in configs:
        reason = None
        bad = cfg.numerical_notes & banned
        if bad:
            reason = "notes " + ",".join(sorted(bad))
        elif cfg.behavior_notes & _BANNED_BEHAVIOR:
            reason = "needs reordered int8 data"
        elif "runtime_compilation" in cfg.behavior_notes and compiled >= FIND_MAX_COMPILED:
            reason = "runtime-compiled candidates already at the limit"
        if reason is None:
            try:
                p = _graph.execution_plan(h.raw, cfg, uids)
            except CudnnError as exc:
                last_error_string()
                reason = f"does not finalize ({exc.name})"
            else:
                if p.workspace_size > limit:
                    reason = f"needs {p.workspace_size} B of workspace"
                else:
                    notes = tuple(sorted(cfg.numerical_notes)) + tuple(sorted(cfg.behavior_notes))
                    out.append(({"name": cfg.name, "id": f"graph:{cfg.name}",
                                 "backend": "graph", "algo": cfg.engine,
                                 "workspace": p.workspace_size, "notes": notes,
                                 "deterministic": "nondeterministic" not in cfg.numerical_notes},
                                p))
                    if "runtime_compilation" in cfg.behavior_notes:
                        compiled += 1
                    if len(out) >= max_plans:
                        break
        if reason is not None:
            rejected.append(f"{cfg.name}: {reason}")
    if not out:
        raise NoGraph(f"no engine passes the filters (workspace limit {limit}): "
                      + "; ".join(rejected[:8]) + ("; ..." if len(rejected) > 8 else ""))
    return out


def conv_graph(h, op_name: str, dtype, cl, shapes, pad, stride, dil):
    """The operation graph of one convolution: tensors 1, 2 (inputs) and 3 (output) of
    ``shapes``, in the order the operation takes them."""
    a, b, c = (tensor(uid, dtype, shape, cl) for uid, shape in zip((1, 2, 3), shapes))
    conv = _graph.convolution(pad, stride, dil, compute=np.float32)
    op = _graph.conv_operation(op_name, a, b, c, conv)
    return _graph.operation_graph([op], h.raw)


def fused_graph(h, dtype, cl, x_shape, w_shape, y_shape, pad, stride, dil, alpha, alpha2,
                with_z: bool, activation: str):
    """``act(alpha * conv(x, w) + bias [+ alpha2 * z])``: the convolution into a virtual
    float32 tensor, then pointwise ADD bias, [ADD alpha2 * z], [RELU] into y -- the pattern
    cuDNN's runtime-fusion engines generate one kernel for.  Tensors: x 1, w 2, y 3, bias 4,
    z 5."""
    nd = len(y_shape)
    bshape = (1, y_shape[1]) + (1,) * (nd - 2)
    xt = tensor(1, dtype, x_shape, cl)
    wt = tensor(2, dtype, w_shape, cl)
    yt = tensor(3, dtype, y_shape, cl)
    bt = tensor(4, dtype, bshape, cl)
    acc = np.float32
    cur = tensor(101, acc, y_shape, cl, virtual=True)
    ops = [_graph.conv_operation("forward", xt, wt, cur,
                                 _graph.convolution(pad, stride, dil, compute=acc), alpha=alpha)]
    steps = [("add", bt, 1.0)]
    if with_z:
        steps.append(("add", tensor(5, dtype, y_shape, cl), alpha2))
    if activation == "relu":
        steps.append(("relu", None, 1.0))
    for i, (mode, operand, a2) in enumerate(steps):
        nxt = yt if i == len(steps) - 1 else tensor(102 + i, acc, y_shape, cl, virtual=True)
        ops.append(_graph.pointwise_operation(_graph.pointwise(mode, compute=acc), cur, nxt,
                                              operand, alpha2=a2))
        cur = nxt
    return _graph.operation_graph(ops, h.raw)
