"""Scaled dot-product attention through cuDNN's graph API: forward, backward, and their plans.

::

    o = cudnn.sdpa(q, k, v, causal=True)                       # softmax(q k^T / sqrt(d)) v
    o, stats = cudnn.sdpa(q, k, v, causal=True, training=True)
    dq, dk, dv = cudnn.sdpa_backward(q, k, v, o, do, stats, causal=True)

    plan = cudnn.SdpaPlan(q, k, v, causal=True)                # or hold the plan yourself
    plan.autotune()                                             # time every engine once
    o = plan.execute(q, k, v, out=o)

Operands are logical ``[b, h, s, d]``: ``q`` ``[b, h_q, s_q, d]``, ``k`` ``[b, h_kv, s_kv, d]``,
``v`` ``[b, h_kv, s_kv, d_v]``, float16 or bfloat16, with float32 accumulation.  Any strides
whose head dimension is contiguous and whose other strides are multiples of 16 bytes are
read in place -- ``[b, h, s, d]`` contiguous, the ``[b, s, h, d]`` layout seen through a
transposed view, slices of a packed ``qkv`` tensor -- and new outputs take their input's
layout (``o`` and ``dq`` like ``q``, ``dk`` like ``k``, ``dv`` like ``v``).

Options (the same for the forward and the backward, which must agree):

- ``scale``: multiplies ``q k^T`` (default ``1 / sqrt(d)``);
- ``causal``: top-left causal mask, query ``i`` sees keys ``j <= i``;
- ``bias``: added to the scaled scores, ``[1 or b, 1 or h_q, s_q, s_kv]`` of the operands' dtype;
- ``seq_lens_q`` / ``seq_lens_kv``: per-batch sequence lengths (padding masks), given together:
  host sequences are checked (``1 <= len <= s``) and copied; int32 device arrays of ``b``
  elements are used as they are (their values are the caller's to keep in range); output rows
  beyond a sequence's length are left unspecified;
- ``dropout`` (with ``seed``): the probabilities are dropped with probability ``dropout`` and
  the rest scaled by ``1 / (1 - dropout)``; ``seed`` is an int, a ``(seed, offset)`` pair of
  ints (passed by value), or a pair of one-element int64 device arrays (read when the kernel
  runs, so a captured graph can advance them).  The backward given the same seed and offset
  regenerates the same mask;
- ``training``: the forward also returns the softmax statistics, float32 ``[b, h_q, s_q, 1]``
  (``max + log(sum(exp))`` per row), which the backward needs.

Grouped-query and multi-query attention: ``h_kv`` divides ``h_q``; query head ``i`` reads
key/value head ``i // (h_q // h_kv)`` (what ``repeat_interleave`` of ``k`` and ``v`` gives), and
the backward sums ``dk``/``dv`` over each group.

Limits (cuDNN 9's fused attention engines): head dims multiples of 8, up to 256 forward and 128
backward, compute capability 8.0 or later.  Everything is checked before any library call.

Lowering (:mod:`cudalibs.cudnn.attention_graph`): a composite graph of matmuls, pointwise
operations and reductions that cuDNN's runtime-compiled flash-attention engines fuse (for the
backward also a variant without the float32 ``dQ`` accumulator, ``"composite_dp"``), and,
where it applies, cuDNN's single SDPA operation (in cuDNN 9.19 the forward only: its graph
refuses ``SDPA_BWD``, which the plan records in ``unavailable``).  The plan's candidates come
from all of them, the heuristics' first choice runs unless
:meth:`~cudalibs.driver.plan.Plan.autotune` is called, which keeps the fastest.  The one-shot functions find
their plans in the one plan cache (:data:`SDPA_KEY`, :data:`SDPA_BACKWARD_KEY`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math

import numpy as np

from .. import dtypes as _dtypes
from ..driver.array import DeviceArray, byte_extent, spans_overlap, to_device
from ..driver.memory import alloc_async
from ..driver.operand import operand as _operand
from ..driver.operand import operands as _operands
from ..driver.plan import KeyKind, Plan, cache as _cache, scratch as _scratch
from ..driver.stream import as_stream
from ..errors import CudaLibsError
from . import attention_graph as _ag
from . import conv_graph as _cg
from ._base import last_error_string, raise_for, version
from .conv_plan import env
from .handle import handle_for, workspace
from .handle import workspace_limit as _default_limit

__all__ = ["sdpa", "sdpa_backward", "SdpaPlan", "SdpaBackwardPlan", "SDPA_KEY",
           "SDPA_BACKWARD_KEY", "MAX_HEAD_DIM", "MAX_HEAD_DIM_BACKWARD", "GRAPHS",
           "BACKWARD_GRAPHS", "AUTOTUNE"]

#: The largest head dim the forward and the backward engines take (multiples of 8).
MAX_HEAD_DIM = 256
MAX_HEAD_DIM_BACKWARD = 128
#: The lowerings a forward plan draws candidates from, in the order tried (see the module
#: docstring); the backward adds ``"composite_dp"`` (``dQ`` without the float32 accumulator).
GRAPHS = ("composite", "unified")
BACKWARD_GRAPHS = ("composite", "composite_dp", "unified")
#: Whether the one-shot functions autotune a plan on first use (else the heuristics' first
#: engine runs untimed); read at every cache miss.
AUTOTUNE = False

_DTYPES = tuple(d for d in (np.dtype(np.float16), _dtypes.bfloat16) if d is not None)
_F32 = np.dtype(np.float32)
_ALIGN = 16

_COMMON = ("scale", "causal", "bias_shape", "bias_strides", "padding", "dropout", "seed_by_value")
#: The cache keys of the one-shot functions (``entry.key["q_strides"]``...).
SDPA_KEY = KeyKind("cudnn_sdpa", ("device", "dtype", "q_shape", "q_strides", "k_shape",
                                  "k_strides", "v_shape", "v_strides", "out_strides")
                   + _COMMON + ("training", "env"))
SDPA_BACKWARD_KEY = KeyKind("cudnn_sdpa_backward", (
    "device", "dtype", "q_shape", "q_strides", "k_shape", "k_strides", "v_shape", "v_strides",
    "o_strides", "do_strides", "out_strides") + _COMMON + ("env",))


# -- checks (no library call) ---------------------------------------------------------------------
def _elem_strides(a: DeviceArray, name: str, op: str) -> tuple:
    """Element strides of a ``[b, h, s, d]`` operand: the last 1, the others positive
    multiples of 16 bytes (a size-1 dimension, never stepped, keeps a stride that is one,
    else gets one past the rest)."""
    it = a._dtype.itemsize
    shape, st = a._shape, a._strides
    if shape[3] > 1 and st[3] != it:
        raise ValueError(f"{op}: {name} must have a contiguous last (head) dimension; its byte "
                         f"strides are {st}")
    out = []
    for n, s in zip(shape[:3], st[:3]):
        if s <= 0 or s % _ALIGN:
            if n > 1:
                raise ValueError(f"{op}: {name}'s byte strides {st} must be positive multiples "
                                 f"of {_ALIGN} bytes (cuDNN reads rows of 16-byte vectors)")
            s = max((m * t for m, t in zip(shape, st) if m > 1 and t > 0), default=it)
        out.append(s // it)
    return (*out, 1)


def _same_steps(a: tuple, b: tuple, shape: tuple) -> bool:
    """Whether element strides ``a`` and ``b`` step alike through ``shape`` (size-1
    dimensions are never stepped)."""
    return all(x == y for n, x, y in zip(shape, a, b) if n > 1)


def _check_qkv(op: str, q, k, v, limit: int) -> tuple:
    """``(b, h_q, h_kv, s_q, s_kv, d, d_v)`` of checked operands."""
    for a, n in ((q, "q"), (k, "k"), (v, "v")):
        if a.ndim != 4:
            raise ValueError(f"{op}: {n} must be 4-D [b, h, s, d], got shape {a.shape}")
        if a.size == 0:
            raise ValueError(f"{op}: {n} is empty (shape {a.shape})")
        if a._dtype not in _DTYPES:
            raise TypeError(f"{op}: {n} has dtype {a._dtype}; cuDNN's fused attention takes "
                            f"{', '.join(str(d) for d in _DTYPES)}")
    if k._dtype != q._dtype or v._dtype != q._dtype:
        raise TypeError(f"{op}: q, k, v must share one dtype, got {q._dtype}, {k._dtype}, "
                        f"{v._dtype}")
    b, h_q, s_q, d = q.shape
    bk, h_kv, s_kv, dk = k.shape
    if bk != b or dk != d or tuple(v.shape[:3]) != (b, h_kv, s_kv):
        raise ValueError(f"{op}: mismatched shapes q {q.shape}, k {k.shape}, v {v.shape}: "
                         "expected q [b, h_q, s_q, d], k [b, h_kv, s_kv, d], "
                         "v [b, h_kv, s_kv, d_v]")
    if h_q % h_kv:
        raise ValueError(f"{op}: k and v have {h_kv} heads, which does not divide q's {h_q} "
                         "(grouped-query attention needs h_q % h_kv == 0)")
    d_v = v.shape[3]
    what = "backward" if limit == MAX_HEAD_DIM_BACKWARD else "forward"
    for name, n in (("q and k", d), ("v", d_v)):
        if n % 8 or n > limit:
            raise ValueError(f"{op}: the head dim of {name} is {n}; cuDNN 9's fused attention "
                             f"{what} takes multiples of 8 up to {limit}")
    return b, h_q, h_kv, s_q, s_kv, d, d_v


def _check_device(op: str, dev) -> None:
    cc = tuple(dev.compute_capability)
    if cc < (8, 0):
        raise CudaLibsError(f"{op}: cuDNN's fused attention needs compute capability 8.0 or "
                            f"later; device {dev.ordinal} has {cc[0]}.{cc[1]}")


@functools.lru_cache(maxsize=256)
def _bytes(est: tuple, itemsize: int) -> tuple:
    """Byte strides of element strides ``est``."""
    return tuple(x * itemsize for x in est)


def _like(strides: tuple, shape: tuple) -> tuple:
    """Packed element strides for ``shape`` whose dimensions lie in memory in the order of
    ``strides`` (largest first; the head dimension last)."""
    order = sorted(range(3), key=lambda i: (-strides[i], i)) + [3]
    out = [0] * 4
    acc = 1
    for i in reversed(order):
        out[i] = acc
        acc *= shape[i]
    return tuple(out)


def _seed_by_value(op: str, seed) -> bool:
    """Whether ``seed`` is passed by value (ints) rather than as int64 device arrays."""
    if seed is None or isinstance(seed, (int, np.integer)):
        return True
    if isinstance(seed, (tuple, list)) and len(seed) == 2:
        kinds = {isinstance(x, (int, np.integer)) for x in seed}
        if kinds == {True}:
            return True
        if kinds == {False}:
            return False
    raise TypeError(f"{op}: seed must be an int, a (seed, offset) pair of ints, or a pair of "
                    f"one-element int64 device arrays, not {seed!r}")


def _seed_ints(op: str, seed) -> tuple:
    s, o = (seed, 0) if isinstance(seed, (int, np.integer)) else seed
    for n, x in (("seed", s), ("offset", o)):
        if not 0 <= int(x) < 2 ** 63:
            raise ValueError(f"{op}: the dropout {n} must be in [0, 2**63), got {x}")
    return int(s), int(o)


def _check_dropout(op: str, dropout, seed) -> float:
    p = float(dropout)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{op}: dropout must be in [0, 1), got {dropout}")
    if p and seed is None:
        raise ValueError(f"{op}: dropout={p} needs seed= (an int, a (seed, offset) pair, or "
                         "two int64 device arrays) so that the backward can replay the mask")
    return p


def _bias_spec(op: str, bias, dtype, b, h_q, s_q, s_kv):
    if bias is None:
        return None
    if bias.ndim != 4 or bias.shape[0] not in (1, b) or bias.shape[1] not in (1, h_q) \
            or tuple(bias.shape[2:]) != (s_q, s_kv):
        raise ValueError(f"{op}: bias must be [1 or {b}, 1 or {h_q}, {s_q}, {s_kv}] (it is "
                         f"added to the scores), got shape {bias.shape}")
    if bias._dtype != dtype:
        raise TypeError(f"{op}: bias has dtype {bias._dtype}; it must match q ({dtype})")
    return (tuple(bias.shape), _elem_strides(bias, "bias", op))


def _padding(op: str, seq_lens_q, seq_lens_kv) -> bool:
    if (seq_lens_q is None) != (seq_lens_kv is None):
        raise ValueError(f"{op}: give seq_lens_q and seq_lens_kv together (the padding mask "
                         "needs both)")
    return seq_lens_q is not None


def _problem_text(s: _ag.Spec) -> str:
    heads = f"h{s.h_q}" if s.h_q == s.h_kv else f"hq{s.h_q} hkv{s.h_kv}"
    dims = f"d{s.d}" if s.d == s.d_v else f"d{s.d} dv{s.d_v}"
    opts = [n for n, on in (("causal", s.causal), ("bias", s.bias is not None),
                            ("padding", s.padding), (f"dropout {s.dropout:g}", s.dropout))
            if on]
    return (f"{'backward' if s.backward else 'forward'} {s.dtype} b{s.b} {heads} "
            f"sq{s.s_q} skv{s.s_kv} {dims}" + (f" ({', '.join(opts)})" if opts else ""))


# -- what runs a candidate ----------------------------------------------------------------------------
class _Run:
    """A finalized execution plan of one lowering, with how a call's pointers map to it."""

    __slots__ = ("gplan", "lowered", "kind", "slots", "fixed", "aux", "workspace")

    def __init__(self, gplan, lowered: _ag.Lowered, aux: dict):
        self.gplan = gplan
        self.lowered = lowered             # holds the by-value scalars the addresses name
        self.kind = lowered.kind
        self.slots = lowered.slots
        self.fixed = {s: ctypes.addressof(v) for s, v in lowered.scalars.items()
                      if s not in ("seed", "offset")}
        off = (gplan.workspace_size + 255) // 256 * 256
        self.aux = {}
        for slot, nbytes in aux.items():   # float32 scratch after the engine's workspace
            if slot in self.slots:
                self.aux[slot] = off
                off += nbytes
        self.workspace = off if self.aux else gplan.workspace_size

    def pointers(self, vals: dict, ws: int) -> tuple:
        fixed, aux = self.fixed, self.aux
        out = []
        for n in self.slots:
            p = fixed.get(n)
            if p is None:
                off = aux.get(n)
                p = vals[n] if off is None else ws + off
            out.append(p)
        return tuple(out)


# -- the plan base ----------------------------------------------------------------------------------
class _SdpaPlanBase(Plan):
    """What the forward and backward plans share: candidates from the lowerings, the call."""

    library = "cuDNN"
    _builders: dict = {}

    def _setup(self, spec: _ag.Spec, dev, graphs, max_candidates) -> None:
        known = tuple(self._builders)
        graphs = known if graphs is None else tuple(graphs)
        bad = [g for g in graphs if g not in known]
        if bad or not graphs:
            raise ValueError(f"graphs must name some of {known}, got {graphs!r}")
        self._spec = spec
        self._graphs = graphs
        self._max = _cg.FIND_MAX_PLANS if max_candidates is None else max(1, int(max_candidates))
        self._objs: list = []
        self._exe = None
        self._unavailable: dict = {}
        self._text = _problem_text(spec)
        self._specs = self._operand_specs()
        # (shape, element strides) and the byte extent of every operand, by slot: a call's
        # overlap checks are then a few integer comparisons
        self._slot = {n: (shape, est) for n, shape, est in self._specs}
        if spec.bias is not None:
            self._slot["bias"] = spec.bias
        self._ext = {}
        for n, (shape, est) in self._slot.items():
            it = 4 if n in ("stats", "mask") else spec.dtype.itemsize
            self._ext[n] = byte_extent(shape, _bytes(est, it), it)
        self._init_plan(dev)
        self._borrow()      # the execution plans are freed with the candidates

    # -- Plan hooks ------------------------------------------------------------------------------
    def _problem(self) -> str:
        return self._text

    def _tuning_key(self):
        s = self._spec._asdict()
        s["dtype"] = str(s["dtype"])
        return {"spec": s, "graphs": list(self._graphs), "max": self._max}

    def _library_version(self) -> str:
        return str(version())

    def _heuristics(self) -> list[dict]:
        dev = self._device
        h = handle_for(dev, as_stream(None, dev)._handle)
        aux = dict(zip(("softmax_sum", "dq_accum"), _ag.aux_bytes(self._spec)))
        cands, objs, why = [], [], {}
        for kind in self._graphs:
            if kind == "unified":
                reason = _ag.unified_applies(self._spec)
                if reason is not None:
                    why[kind] = reason
                    continue
            room = self._max - len(cands)
            if room <= 0:
                break
            try:
                low = self._builders[kind](self._spec, h.raw)
                found = _cg.candidates(h, low.graph, low.uids, frozenset(), _default_limit(),
                                       room)
            except Exception as exc:   # noqa: BLE001 - a lowering no engine takes: say why
                last_error_string()
                why[kind] = str(exc) if isinstance(exc, _cg.NoGraph) else _cg.why(exc)
                continue
            for c, p in found:
                run = _Run(p, low, aux)
                c = dict(c, name=f"{kind} {c['name']}", id=f"{kind}:{c['name']}",
                         backend=kind, workspace=run.workspace)
                cands.append(c)
                objs.append(run)
        self._unavailable = why
        if not cands:
            raise CudaLibsError(f"{type(self).__name__}: cuDNN {version()} has no engine for "
                                f"{self._text}: " + "; ".join(f"{k}: {w}" for k, w in why.items()))
        self._objs = objs
        return cands

    def _select(self, i: int) -> None:
        self._exe = self._objs[i]

    @contextlib.contextmanager
    def _runner(self, stream):
        dev = self._device
        vals, keep = self._scratch_operands(stream)
        # the workspace grown once to the largest need: every candidate's pack binds it
        ws_ptr, _ = workspace(dev, stream._handle, max(r.workspace for r in self._objs))
        packs = [r.gplan.pack_uncached(r.pointers(vals, ws_ptr), ws_ptr) for r in self._objs]
        yield lambda i: self._exec(self._objs[i], dev, stream, packs[i])
        del packs, keep

    def _scratch_operands(self, stream):
        """``(slot -> pointer, arrays to keep)`` of random inputs and outputs for timing."""
        dev, s = self._device, self._spec
        it = s.dtype.itemsize
        arrays = {}
        for slot, shape, est in self._specs:
            dt = s.dtype if slot not in ("stats", "mask") else _F32
            arrays[slot] = _scratch(shape, dt, dev, stream,
                                    strides=tuple(x * np.dtype(dt).itemsize for x in est))
        if s.bias is not None:
            shape, est = s.bias
            arrays["bias"] = _scratch(shape, s.dtype, dev, stream,
                                      strides=tuple(x * it for x in est))
        if s.padding:       # full lengths: the timing of the real work
            arrays["seq_q"] = to_device(np.full(s.b, s.s_q, np.int32), device=dev, stream=stream)
            arrays["seq_kv"] = to_device(np.full(s.b, s.s_kv, np.int32), device=dev,
                                         stream=stream)
        vals = {k: a.ptr for k, a in arrays.items()}
        keep = [arrays]
        if s.dropout:
            if s.seed_by_value:
                objs = (ctypes.c_int64(1234), ctypes.c_int64(0))
                keep.append(objs)
                vals["seed"], vals["offset"] = (ctypes.addressof(o) for o in objs)
            else:
                for n in ("seed", "offset"):
                    arrays[n] = to_device(np.ones(1, np.int64), device=dev, stream=stream)
                    vals[n] = arrays[n].ptr
        return vals, keep

    # -- running ---------------------------------------------------------------------------------
    def _exec(self, r: _Run, dev, s, vp) -> None:
        h = handle_for(dev, s._handle)
        g = r.gplan
        st = g._exec(h.raw, g._raw, vp._raw)
        if st:
            raise_for(st, "cudnnBackendExecute", f"plan: {self!r}")

    def _launch(self, dev, s, vals: dict, by_value: bool) -> None:
        r = self._exe
        ws_ptr, _ = workspace(dev, s._handle, r.workspace)
        ptrs = r.pointers(vals, ws_ptr)
        g = r.gplan
        if by_value:       # host scalars at per-call addresses: a pack for this call only
            self._exec(r, dev, s, g.pack_uncached(ptrs, ws_ptr))
        else:
            h = handle_for(dev, s._handle)
            g.execute(h.raw, ptrs, ws_ptr)

    def _front(self, op, named, stream):
        """Operands through the one path, checked against the plan's shapes and strides."""
        self._live()
        if self._exe is None:
            self.plan()
        *arrs, dev = _operands(op, *named, stream=stream)
        if dev is not self._device:
            raise ValueError(f"{op}: the operands are on device {dev.ordinal}, the plan on "
                             f"device {self._device.ordinal}")
        return arrs, dev, as_stream(stream, dev)

    def _match(self, op, arr, name, shape, est, dtype, packed=False) -> None:
        """``arr`` has the plan's shape, dtype and strides (element strides ``est``; ``packed``
        operands -- statistics, the mask -- must match exactly) and is 16-byte aligned."""
        if arr._shape != shape or arr._dtype != dtype:
            raise ValueError(f"{op}: {name} is {arr._dtype} {arr._shape}; the plan was made for "
                             f"{dtype} {shape}")
        if arr._strides != _bytes(est, arr._dtype.itemsize) and (
                packed or not _same_steps(_elem_strides(arr, name, op), est, shape)):
            raise ValueError(f"{op}: {name} has byte strides {arr._strides}; the plan was made "
                             f"for element strides {est}")
        if arr._ptr % _ALIGN:
            raise ValueError(f"{op}: {name} must be {_ALIGN}-byte aligned (address "
                             f"{arr._ptr:#x})")

    def _extras(self, op, vals, bias, seq_lens_q, seq_lens_kv, seed, dev, s):
        """Bias, sequence lengths and seed of a call into ``vals``; returns what must stay
        alive until the call is queued."""
        sp = self._spec
        keep = []
        if (bias is None) != (sp.bias is None):
            raise ValueError(f"{op}: the plan was made {'with' if sp.bias else 'without'} a "
                             "bias")
        if bias is not None:
            bias = _operand(bias, "bias", op, device=dev)
            self._match(op, bias, "bias", sp.bias[0], sp.bias[1], sp.dtype)
            vals["bias"] = bias._ptr
        if _padding(op, seq_lens_q, seq_lens_kv) != sp.padding:
            raise ValueError(f"{op}: the plan was made {'with' if sp.padding else 'without'} "
                             "sequence lengths")
        if sp.padding:
            for slot, x, n in (("seq_q", seq_lens_q, sp.s_q), ("seq_kv", seq_lens_kv, sp.s_kv)):
                arr = self._lengths(op, slot, x, n, dev, s)
                keep.append(arr)
                vals[slot] = arr._ptr
        if sp.dropout:
            if seed is None:
                raise ValueError(f"{op}: the plan has dropout {sp.dropout}; pass seed=")
            if _seed_by_value(op, seed) != sp.seed_by_value:
                raise TypeError(f"{op}: the plan was made for seeds "
                                f"{'by value' if sp.seed_by_value else 'in device arrays'}")
            if sp.seed_by_value:
                objs = tuple(ctypes.c_int64(x) for x in _seed_ints(op, seed))
                keep.append(objs)
                vals["seed"], vals["offset"] = (ctypes.addressof(o) for o in objs)
            else:
                for n, x in zip(("seed", "offset"), seed):
                    a = _operand(x, n, op, device=dev)
                    if a._dtype != np.int64 or a.size != 1:
                        raise ValueError(f"{op}: the dropout {n} must be one int64 element, got "
                                         f"{a._dtype} {a._shape}")
                    vals[n] = a._ptr
        return keep

    def _lengths(self, op, slot, x, n, dev, s):
        name = "seq_lens_q" if slot == "seq_q" else "seq_lens_kv"
        b = self._spec.b
        if isinstance(x, (list, tuple, np.ndarray)):
            host = np.asarray(x)
            if host.dtype.kind not in "iu" or host.size != b:
                raise ValueError(f"{op}: {name} must hold {b} integers, got {host!r}")
            if host.min() < 1 or host.max() > n:
                raise ValueError(f"{op}: {name} = {host.tolist()} must lie in 1..{n} (the "
                                 "sequence dimension)")
            return to_device(host.reshape(b).astype(np.int32), device=dev, stream=s)
        arr = _operand(x, name, op, device=dev)
        if arr._dtype != np.int32 or arr.size != b or not arr.is_c_contiguous:
            raise ValueError(f"{op}: {name} must be {b} contiguous int32 values, got "
                             f"{arr._dtype} {arr._shape}")
        return arr

    def _output(self, op, out, name, slot, dtype, dev, s, inputs, packed=False):
        """``out`` checked (shape, dtype, the plan's strides, no overlap with ``inputs``, pairs
        of slot and array) or a new array of the plan's layout for ``slot``."""
        shape, est = self._slot[slot]
        if out is None:
            it = np.dtype(dtype).itemsize
            buf = alloc_async(it * math.prod(shape), s, dev)
            return DeviceArray.from_buffer(buf, shape, dtype, _bytes(est, it))
        out = _operand(out, name, op, device=dev)
        self._match(op, out, name, shape, est, dtype, packed)
        ext, p = self._ext[slot], out._ptr
        for n, a in inputs:
            if spans_overlap(p, ext, a._ptr, self._ext[n]):
                raise ValueError(f"{op}: {name} overlaps {n} (it shares memory with another "
                                 "operand); give a separate array")
        return out

    # -- inspection ------------------------------------------------------------------------------
    @property
    def spec(self) -> _ag.Spec:
        """The problem: shapes, element strides, options (a named tuple)."""
        return self._spec

    @property
    def backend(self) -> str:
        """``"composite"``, ``"composite_dp"`` or ``"unified"``: the chosen candidate's
        lowering."""
        self.plan()
        return self._exe.kind

    @property
    def unavailable(self) -> dict:
        """``{lowering: why it has no candidate}`` for the lowerings that gave none."""
        self.plan()
        return dict(self._unavailable)

    @property
    def gplan(self):
        """The chosen candidate's graph execution plan."""
        self.plan()
        return self._exe.gplan

    def close(self) -> None:
        """Release the plan: its execution plans are dropped (freed when no call still runs
        them); later use raises :class:`~cudalibs.errors.ClosedError`."""
        Plan.close(self)
        self._objs, self._exe = [], None

    def _alive(self) -> bool:
        e = self._exe
        return not self.closed and (e is None or not e.gplan.descriptor.closed)


# -- the forward --------------------------------------------------------------------------------------
class SdpaPlan(_SdpaPlanBase):
    """A planned attention forward ``o = softmax(q k^T * scale [+ bias], masked) [dropout] v``.

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        Example operands: their shapes, dtype, strides and device make the problem.
    scale, causal, bias, seq_lens_q, seq_lens_kv, dropout, seed, training
        As for :func:`sdpa`; ``bias``, ``seq_lens_*`` and ``seed`` are examples too (whether
        given, the bias's shape and strides, whether the seed is by value).
    out : DeviceArray, optional
        An example output (its strides); by default ``o`` takes ``q``'s layout.
    dump_mask : bool
        With dropout, also write the keep-mask as float32 ``[b, h_q, s_q, s_kv]`` into
        ``mask_out`` at every execution (for checking; it costs bandwidth).
    graphs : sequence of str, optional
        The lowerings to draw candidates from (default :data:`GRAPHS`).
    max_candidates : int, optional
        The most engine configurations finalized, the lowerings in :data:`GRAPHS` order and
        each in its heuristics' order (default 16; each costs a runtime compilation).

    Examples
    --------
    >>> plan = cudnn.SdpaPlan(q, k, v, causal=True, training=True)   # doctest: +SKIP
    >>> plan.autotune(); o, stats = plan.execute(q, k, v)              # doctest: +SKIP
    """

    kind = "cudnn_sdpa"
    _builders = {"composite": _ag.forward_graph, "unified": _ag.unified_forward_graph}

    def __init__(self, q, k, v, *, scale=None, causal=False, bias=None, seq_lens_q=None,
                 seq_lens_kv=None, dropout=0.0, seed=None, training=False, out=None,
                 dump_mask=False, graphs=None, max_candidates=None):
        op = "SdpaPlan"
        q, k, v, bias, out, dev = _operands(op, (q, "q"), (k, "k"), (v, "v"), (bias, "bias"),
                                            (out, "out"))
        b, h_q, h_kv, s_q, s_kv, d, d_v = _check_qkv(op, q, k, v, MAX_HEAD_DIM)
        _check_device(op, dev)
        p = _check_dropout(op, dropout, seed)
        qs = _elem_strides(q, "q", op)
        o_shape = (b, h_q, s_q, d_v)
        if out is not None:
            if tuple(out.shape) != o_shape or out._dtype != q._dtype:
                raise ValueError(f"{op}: out must be {q._dtype} {o_shape}, got {out._dtype} "
                                 f"{out.shape}")
            os_ = _elem_strides(out, "out", op)
        else:
            os_ = _like(qs, o_shape)
        if dump_mask and not p:
            raise ValueError(f"{op}: dump_mask needs dropout > 0")
        spec = _ag.Spec(q._dtype, b, h_q, h_kv, s_q, s_kv, d, d_v, qs,
                        _elem_strides(k, "k", op), _elem_strides(v, "v", op), os_,
                        float(1.0 / math.sqrt(d) if scale is None else scale), bool(causal),
                        _bias_spec(op, bias, q._dtype, b, h_q, s_q, s_kv),
                        _padding(op, seq_lens_q, seq_lens_kv), p, _seed_by_value(op, seed),
                        bool(training), bool(dump_mask))
        self._setup(spec, dev, graphs, max_candidates)

    def _operand_specs(self):
        s = self._spec
        specs = [("q", (s.b, s.h_q, s.s_q, s.d), s.q_strides),
                 ("k", (s.b, s.h_kv, s.s_kv, s.d), s.k_strides),
                 ("v", (s.b, s.h_kv, s.s_kv, s.d_v), s.v_strides),
                 ("o", (s.b, s.h_q, s.s_q, s.d_v), s.o_strides)]
        if s.stats:
            specs.append(("stats", (s.b, s.h_q, s.s_q, 1), _ag.stats_strides(s)))
        if s.dump_mask:
            shape = (s.b, s.h_q, s.s_q, s.s_kv)
            specs.append(("mask", shape, _like((3, 2, 1, 1), shape)))
        return specs

    @property
    def out_shape(self) -> tuple:
        """``o``'s shape, ``[b, h_q, s_q, d_v]``."""
        s = self._spec
        return (s.b, s.h_q, s.s_q, s.d_v)

    def execute(self, q, k, v, *, out=None, stats=None, bias=None, seq_lens_q=None,
                seq_lens_kv=None, seed=None, mask_out=None, stream=None):
        """Run the attention forward on ``stream``.

        Parameters
        ----------
        q, k, v : DeviceArray
            Of the plan's shapes, dtype and strides.
        out, stats : DeviceArray, optional
            Allocated stream-ordered if None (``stats`` only when the plan has ``training``).
        bias, seq_lens_q, seq_lens_kv, seed
            Exactly when the plan was made with them (see :func:`sdpa`).
        mask_out : DeviceArray, optional
            float32 ``[b, h_q, s_q, s_kv]``, required by a plan with ``dump_mask``.
        stream : Stream, optional

        Returns
        -------
        DeviceArray or (DeviceArray, DeviceArray)
            ``o``, or ``(o, stats)`` for a plan with ``training``.
        """
        op = "SdpaPlan.execute"
        (q, k, v), dev, s = self._front(op, ((q, "q"), (k, "k"), (v, "v")), stream)
        sp = self._spec
        dt = sp.dtype
        for arr, (name, shape, est) in zip((q, k, v), self._specs):
            self._match(op, arr, name, shape, est, dt)
        if stats is not None and not sp.stats:
            raise ValueError(f"{op}: the plan was made without training=True; it writes no "
                             "stats")
        vals = {"q": q._ptr, "k": k._ptr, "v": v._ptr}
        keep = self._extras(op, vals, bias, seq_lens_q, seq_lens_kv, seed, dev, s)
        ins = (("q", q), ("k", k), ("v", v))
        o = self._output(op, out, "out", "o", dt, dev, s, ins)
        vals["o"] = o._ptr
        st = None
        if sp.stats:
            st = self._output(op, stats, "stats", "stats", _F32, dev, s, ins + (("o", o),), True)
            vals["stats"] = st._ptr
        if sp.dump_mask:
            if mask_out is None:
                raise ValueError(f"{op}: the plan has dump_mask; pass mask_out=")
            m = self._output(op, mask_out, "mask_out", "mask", _F32, dev, s, ins + (("o", o),),
                             True)
            vals["mask"] = m._ptr
        self._launch(dev, s, vals, bool(sp.dropout and sp.seed_by_value))
        del keep
        return (o, st) if sp.stats else o


# -- the backward ------------------------------------------------------------------------------------
class SdpaBackwardPlan(_SdpaPlanBase):
    """A planned attention backward: ``(dq, dk, dv)`` from ``q, k, v, o, do`` and the forward's
    statistics.

    Parameters
    ----------
    q, k, v, o, do : DeviceArray or CUDA array
        Example operands (shapes, dtype, strides, device).
    scale, causal, bias, seq_lens_q, seq_lens_kv, dropout, seed
        Those of the forward (see :func:`sdpa`).
    out : tuple of (DeviceArray or None), optional
        Example ``(dq, dk, dv)``: their strides (default: the layouts of ``q``, ``k``, ``v``).
    graphs : sequence of str, optional
        The lowerings to draw candidates from (default :data:`BACKWARD_GRAPHS`).
    max_candidates : int, optional
        As for :class:`SdpaPlan`.
    """

    kind = "cudnn_sdpa_backward"
    _builders = {"composite": _ag.backward_graph, "composite_dp": _ag.backward_graph_dp,
                 "unified": _ag.unified_backward_graph}

    def __init__(self, q, k, v, o, do, *, scale=None, causal=False, bias=None,
                 seq_lens_q=None, seq_lens_kv=None, dropout=0.0, seed=None, out=None,
                 graphs=None, max_candidates=None):
        op = "SdpaBackwardPlan"
        dq, dk, dv = _out3(op, out)
        q, k, v, o, do, bias, dq, dk, dv, dev = _operands(
            op, (q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (bias, "bias"),
            (dq, "dq"), (dk, "dk"), (dv, "dv"))
        b, h_q, h_kv, s_q, s_kv, d, d_v = _check_qkv(op, q, k, v, MAX_HEAD_DIM_BACKWARD)
        _check_device(op, dev)
        p = _check_dropout(op, dropout, seed)
        for arr, n in ((o, "o"), (do, "do")):
            if arr.ndim != 4 or tuple(arr.shape) != (b, h_q, s_q, d_v) or arr._dtype != q._dtype:
                raise ValueError(f"{op}: {n} must be {q._dtype} {(b, h_q, s_q, d_v)} (the "
                                 f"forward's output), got {arr._dtype} {arr.shape}")
        qs, ks, vs = (_elem_strides(a, n, op) for a, n in ((q, "q"), (k, "k"), (v, "v")))
        grads = []
        for g, n, like, shape in ((dq, "dq", qs, (b, h_q, s_q, d)),
                                  (dk, "dk", ks, (b, h_kv, s_kv, d)),
                                  (dv, "dv", vs, (b, h_kv, s_kv, d_v))):
            if g is None:
                grads.append(_like(like, shape))
            else:
                if tuple(g.shape) != shape or g._dtype != q._dtype:
                    raise ValueError(f"{op}: {n} must be {q._dtype} {shape}, got {g._dtype} "
                                     f"{g.shape}")
                grads.append(_elem_strides(g, n, op))
        spec = _ag.Spec(q._dtype, b, h_q, h_kv, s_q, s_kv, d, d_v, qs, ks, vs,
                        _elem_strides(o, "o", op),
                        float(1.0 / math.sqrt(d) if scale is None else scale), bool(causal),
                        _bias_spec(op, bias, q._dtype, b, h_q, s_q, s_kv),
                        _padding(op, seq_lens_q, seq_lens_kv), p, _seed_by_value(op, seed),
                        True, False, True, _elem_strides(do, "do", op), *grads)
        self._setup(spec, dev, graphs, max_candidates)

    def _operand_specs(self):
        s = self._spec
        return [("q", (s.b, s.h_q, s.s_q, s.d), s.q_strides),
                ("k", (s.b, s.h_kv, s.s_kv, s.d), s.k_strides),
                ("v", (s.b, s.h_kv, s.s_kv, s.d_v), s.v_strides),
                ("o", (s.b, s.h_q, s.s_q, s.d_v), s.o_strides),
                ("do", (s.b, s.h_q, s.s_q, s.d_v), s.do_strides),
                ("stats", (s.b, s.h_q, s.s_q, 1), _ag.stats_strides(s)),
                ("dq", (s.b, s.h_q, s.s_q, s.d), s.dq_strides),
                ("dk", (s.b, s.h_kv, s.s_kv, s.d), s.dk_strides),
                ("dv", (s.b, s.h_kv, s.s_kv, s.d_v), s.dv_strides)]

    def execute(self, q, k, v, o, do, stats, *, bias=None, seq_lens_q=None, seq_lens_kv=None,
                seed=None, out=None, stream=None):
        """Run the attention backward on ``stream``.

        Parameters
        ----------
        q, k, v, o, do : DeviceArray
            Of the plan's shapes, dtype and strides.
        stats : DeviceArray
            float32 ``[b, h_q, s_q, 1]`` from the forward with ``training=True``.
        bias, seq_lens_q, seq_lens_kv, seed
            Those the forward ran with.
        out : tuple of (DeviceArray or None), optional
            ``(dq, dk, dv)``; each None is allocated stream-ordered.
        stream : Stream, optional

        Returns
        -------
        (DeviceArray, DeviceArray, DeviceArray)
            ``dq``, ``dk``, ``dv``.
        """
        op = "SdpaBackwardPlan.execute"
        dq, dk, dv = _out3(op, out)
        (q, k, v, o, do, stats), dev, s = self._front(
            op, ((q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (stats, "stats")), stream)
        sp = self._spec
        specs = self._specs
        for arr, (name, shape, est) in zip((q, k, v, o, do), specs):
            self._match(op, arr, name, shape, est, sp.dtype)
        _, shape, est = specs[5]
        if stats._shape != shape or stats._dtype != _F32 or \
                stats._strides != _bytes(est, 4) or stats._ptr % _ALIGN:
            raise ValueError(f"{op}: stats is {stats._dtype} {stats._shape} with byte strides "
                             f"{stats._strides}; this problem's forward gives packed float32 "
                             f"{shape}, 16-byte aligned (statistics from another problem?)")
        vals = {"q": q._ptr, "k": k._ptr, "v": v._ptr, "o": o._ptr, "do": do._ptr,
                "stats": stats._ptr}
        keep = self._extras(op, vals, bias, seq_lens_q, seq_lens_kv, seed, dev, s)
        ins = [("q", q), ("k", k), ("v", v), ("o", o), ("do", do), ("stats", stats)]
        grads = []
        for g, name in zip((dq, dk, dv), ("dq", "dk", "dv")):
            g = self._output(op, g, name, name, sp.dtype, dev, s, ins)
            ins.append((name, g))
            vals[name] = g._ptr
            grads.append(g)
        self._launch(dev, s, vals, bool(sp.dropout and sp.seed_by_value))
        del keep
        return tuple(grads)


def _out3(op, out):
    if out is None:
        return None, None, None
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise TypeError(f"{op}: out must be a (dq, dk, dv) tuple (entries may be None), not "
                        f"{type(out).__name__}")
    return tuple(out)


# -- the one-shot functions ----------------------------------------------------------------------------
def _planned(key, make, s):
    plan = _cache.get(key)
    if plan is None or not plan._alive():
        if plan is not None:
            _cache.pop(key)
        plan = make(None if AUTOTUNE else 1)
        if AUTOTUNE:
            plan.autotune(stream=s)
        else:
            plan.plan()
        plan = _cache.put(key, plan)
    return plan


def _common_key(bias, scale, causal, seq_lens_q, seq_lens_kv, dropout, seed):
    return (None if scale is None else float(scale), bool(causal),
            None if bias is None else bias._shape, None if bias is None else bias._strides,
            seq_lens_q is not None or seq_lens_kv is not None, float(dropout),
            _seed_by_value("sdpa", seed))


def sdpa(q, k, v, *, scale=None, causal=False, bias=None, seq_lens_q=None, seq_lens_kv=None,
         dropout=0.0, seed=None, training=False, out=None, stream=None):
    """Scaled dot-product attention, ``softmax(q k^T * scale [+ bias], masked) [dropout] v``.

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        ``[b, h_q, s_q, d]``, ``[b, h_kv, s_kv, d]``, ``[b, h_kv, s_kv, d_v]``, float16 or
        bfloat16, any layout with a contiguous head dimension (see the module docstring).
    scale : float, optional
        Multiplies ``q k^T`` (default ``1 / sqrt(d)``).
    causal : bool
        Top-left causal mask.
    bias : DeviceArray, optional
        ``[1 or b, 1 or h_q, s_q, s_kv]``, added to the scaled scores.
    seq_lens_q, seq_lens_kv : sequence of int or int32 DeviceArray, optional
        Per-batch sequence lengths (both or neither).
    dropout : float
        Probability of dropping each attention weight (needs ``seed``).
    seed : int or (int, int) or (DeviceArray, DeviceArray), optional
        The dropout seed and offset.
    training : bool
        Also return the statistics the backward needs.
    out : DeviceArray, optional
        ``[b, h_q, s_q, d_v]``; allocated stream-ordered in ``q``'s layout if None.
    stream : Stream, optional

    Returns
    -------
    DeviceArray or (DeviceArray, DeviceArray)
        ``o``, or ``(o, stats)`` with ``training`` (float32 ``[b, h_q, s_q, 1]``).
    """
    q, k, v, bias, out, dev = _operands("sdpa", (q, "q"), (k, "k"), (v, "v"), (bias, "bias"),
                                        (out, "out"), stream=stream)
    key = (SDPA_KEY, dev.ordinal, q._dtype, q._shape, q._strides, k._shape, k._strides,
           v._shape, v._strides, None if out is None else out._strides,
           *_common_key(bias, scale, causal, seq_lens_q, seq_lens_kv, dropout, seed),
           bool(training), env(dev))
    plan = _planned(key, lambda m: SdpaPlan(
        q, k, v, scale=scale, causal=causal, bias=bias, seq_lens_q=seq_lens_q,
        seq_lens_kv=seq_lens_kv, dropout=dropout, seed=seed, training=training, out=out,
        max_candidates=m), stream)
    return plan.execute(q, k, v, out=out, bias=bias, seq_lens_q=seq_lens_q,
                        seq_lens_kv=seq_lens_kv, seed=seed, stream=stream)


def sdpa_backward(q, k, v, o, do, stats, *, scale=None, causal=False, bias=None,
                  seq_lens_q=None, seq_lens_kv=None, dropout=0.0, seed=None, out=None,
                  stream=None):
    """The gradients of :func:`sdpa`: ``(dq, dk, dv)`` given the output gradient ``do``.

    Parameters
    ----------
    q, k, v : DeviceArray or CUDA array
        The forward's inputs.
    o, stats : DeviceArray
        The forward's output and statistics (``sdpa(..., training=True)``).
    do : DeviceArray
        The gradient of ``o``, ``[b, h_q, s_q, d_v]``.
    scale, causal, bias, seq_lens_q, seq_lens_kv, dropout, seed
        Those of the forward (the same seed and offset replay its dropout mask).
    out : tuple of (DeviceArray or None), optional
        ``(dq, dk, dv)``; each None is allocated stream-ordered in its input's layout.
    stream : Stream, optional

    Returns
    -------
    (DeviceArray, DeviceArray, DeviceArray)
    """
    dq, dk, dv = _out3("sdpa_backward", out)
    q, k, v, o, do, bias, dq, dk, dv, dev = _operands(
        "sdpa_backward", (q, "q"), (k, "k"), (v, "v"), (o, "o"), (do, "do"), (bias, "bias"),
        (dq, "dq"), (dk, "dk"), (dv, "dv"), stream=stream)
    outs = (dq, dk, dv)
    key = (SDPA_BACKWARD_KEY, dev.ordinal, q._dtype, q._shape, q._strides, k._shape,
           k._strides, v._shape, v._strides, o._strides, do._strides,
           tuple(None if g is None else g._strides for g in outs),
           *_common_key(bias, scale, causal, seq_lens_q, seq_lens_kv, dropout, seed), env(dev))
    plan = _planned(key, lambda m: SdpaBackwardPlan(
        q, k, v, o, do, scale=scale, causal=causal, bias=bias, seq_lens_q=seq_lens_q,
        seq_lens_kv=seq_lens_kv, dropout=dropout, seed=seed, out=outs, max_candidates=m),
        stream)
    return plan.execute(q, k, v, o, do, stats, bias=bias, seq_lens_q=seq_lens_q,
                        seq_lens_kv=seq_lens_kv, seed=seed, out=outs, stream=stream)
