"""What the attention plans share: the checks of the operands, the lowerings' candidates,
the call.

:class:`SdpaPlanBase` draws candidates from every lowering asked for
(:mod:`cudalibs.cudnn.attention.lower`) through the engine search every graph-API plan shares,
and runs the chosen one through :meth:`cudalibs.cudnn.backend.ExecutionPlan.run` (recorded
kernels once a call is recorded).  The checks are functions of the problem, used by both the
forward and the backward plan (:mod:`cudalibs.cudnn.attention.sdpa`).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math

import numpy as np

from ... import dtypes as _dtypes
from ...driver.array import DeviceArray, byte_extent, spans_overlap, to_device
from ...driver.memory import alloc_async
from ...driver.stream import as_stream
from ...errors import CudaLibsError
from ...runtime.operand import operand as _operand
from ...runtime.operand import operands as _operands
from ...runtime.options import options as _current_options
from ...runtime.plan import Plan, scratch as _scratch
from .. import backend as _be
from .._base import last_error_string, raise_for, version, version_int
from ..handle import handle_for, workspace
from ..handle import workspace_limit as _default_limit
from . import lower as _ag
from . import masks as _mk
from . import serving as _sv

__all__ = ["SdpaPlanBase", "Run", "MAX_HEAD_DIM", "MAX_HEAD_DIM_BACKWARD", "ALIGN", "F32",
           "check_qkv", "check_arch", "check_dropout", "elem_strides", "same_steps",
           "byte_strides", "like", "seed_by_value", "seed_ints", "bias_spec", "padding_of",
           "problem_text", "forward_operands", "backward_operands", "grad_strides",
           "out3"]

#: The largest head dim the forward and the backward engines take (multiples of 8).
MAX_HEAD_DIM = 256
MAX_HEAD_DIM_BACKWARD = 128

_DTYPES = tuple(d for d in (np.dtype(np.float16), _dtypes.bfloat16) if d is not None)
F32 = np.dtype(np.float32)
ALIGN = 16

# -- checks (no library call) ---------------------------------------------------------------------
def elem_strides(a: DeviceArray, name: str, op: str) -> tuple:
    """Element strides of a ``[b, h, s, d]`` operand: the last 1, the others positive
    multiples of 16 bytes (a size-1 dimension, never stepped, keeps a stride that is one,
    else gets one past the rest)."""
    it = a.dtype.itemsize
    shape, st = a.shape, a.strides
    if shape[3] > 1 and st[3] != it:
        raise ValueError(f"{op}: {name} must have a contiguous last (head) dimension; its byte "
                         f"strides are {st}")
    out = []
    for n, s in zip(shape[:3], st[:3]):
        if s <= 0 or s % ALIGN:
            if n > 1:
                raise ValueError(f"{op}: {name}'s byte strides {st} must be positive multiples "
                                 f"of {ALIGN} bytes (cuDNN reads rows of 16-byte vectors)")
            s = max((m * t for m, t in zip(shape, st) if m > 1 and t > 0), default=it)
        out.append(s // it)
    return (*out, 1)


def same_steps(a: tuple, b: tuple, shape: tuple) -> bool:
    """Whether element strides ``a`` and ``b`` step alike through ``shape`` (size-1
    dimensions are never stepped)."""
    return all(x == y for n, x, y in zip(shape, a, b) if n > 1)


def check_qkv(op: str, q, k, v, limit: int, *, dtypes=_DTYPES, multiple: int = 8,
              what: str = "cuDNN 9's fused attention", backward: bool | None = None) -> tuple:
    """``(b, h_q, h_kv, s_q, s_kv, d, d_v)`` of checked operands: 4-D, of one of ``dtypes``,
    head dims multiples of ``multiple`` up to ``limit`` (``what`` and the direction name the
    engines in messages)."""
    for a, n in ((q, "q"), (k, "k"), (v, "v")):
        if a.ndim != 4:
            raise ValueError(f"{op}: {n} must be 4-D [b, h, s, d], got shape {a.shape}")
        if a.size == 0:
            raise ValueError(f"{op}: {n} is empty (shape {a.shape})")
        if a.dtype not in dtypes:
            raise TypeError(f"{op}: {n} has dtype {a.dtype}; {what} takes "
                            f"{', '.join(str(d) for d in dtypes)}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"{op}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, "
                        f"{v.dtype}")
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
    if backward is None:
        backward = limit == MAX_HEAD_DIM_BACKWARD
    for name, n in (("q and k", d), ("v", d_v)):
        if n % multiple or n > limit:
            raise ValueError(f"{op}: the head dim of {name} is {n}; {what} "
                             f"{'backward' if backward else 'forward'} takes multiples of "
                             f"{multiple} up to {limit}")
    return b, h_q, h_kv, s_q, s_kv, d, d_v


def check_arch(op: str, dev, need=(8, 0), what="cuDNN's fused attention") -> tuple:
    """The device's compute capability, at least ``need`` (else :class:`CudaLibsError`)."""
    cc = tuple(dev.compute_capability)
    if cc < tuple(need):
        raise CudaLibsError(f"{op}: {what} needs compute capability {need[0]}.{need[1]} or "
                            f"later; device {dev.ordinal} has {cc[0]}.{cc[1]}")
    return cc


@functools.lru_cache(maxsize=256)
def byte_strides(est: tuple, itemsize: int) -> tuple:
    """Byte strides of element strides ``est``."""
    return tuple(x * itemsize for x in est)


def like(strides: tuple, shape: tuple) -> tuple:
    """Packed element strides for ``shape`` whose dimensions lie in memory in the order of
    ``strides`` (largest first; the head dimension last)."""
    order = sorted(range(3), key=lambda i: (-strides[i], i)) + [3]
    out = [0] * 4
    acc = 1
    for i in reversed(order):
        out[i] = acc
        acc *= shape[i]
    return tuple(out)


def grad_strides(op: str, outs, ins, shapes, dtype=None) -> list:
    """Element strides of the gradients ``outs`` (``dq, dk, dv``; each None takes the layout
    of its input's element strides in ``ins``), each checked against its shape in ``shapes``
    (and ``dtype`` unless None)."""
    out = []
    for g, n, ref, shape in zip(outs, ("dq", "dk", "dv"), ins, shapes):
        if g is None:
            out.append(like(ref, shape))
            continue
        if tuple(g.shape) != shape or (dtype is not None and g.dtype != dtype):
            raise ValueError(f"{op}: {n} must be {'' if dtype is None else f'{dtype} '}"
                             f"{shape}, got {g.dtype} {g.shape}")
        out.append(elem_strides(g, n, op))
    return out


def out3(op: str, out) -> tuple:
    """``(dq, dk, dv)`` of a backward's ``out=`` (None: three Nones)."""
    if out is None:
        return None, None, None
    if not isinstance(out, (tuple, list)) or len(out) != 3:
        raise TypeError(f"{op}: out must be a (dq, dk, dv) tuple (entries may be None), not "
                        f"{type(out).__name__}")
    return tuple(out)


def seed_by_value(op: str, seed) -> bool:
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


def seed_ints(op: str, seed) -> tuple:
    s, o = (seed, 0) if isinstance(seed, (int, np.integer)) else seed
    for n, x in (("seed", s), ("offset", o)):
        if not 0 <= int(x) < 2 ** 63:
            raise ValueError(f"{op}: the dropout {n} must be in [0, 2**63), got {x}")
    return int(s), int(o)


def check_dropout(op: str, dropout, seed) -> float:
    p = float(dropout)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{op}: dropout must be in [0, 1), got {dropout}")
    if p and seed is None:
        raise ValueError(f"{op}: dropout={p} needs seed= (an int, a (seed, offset) pair, or "
                         "two int64 device arrays) so that the backward can replay the mask")
    return p


def bias_spec(op: str, bias, dtype, b, h_q, s_q, s_kv):
    if bias is None:
        return None
    if bias.ndim != 4 or bias.shape[0] not in (1, b) or bias.shape[1] not in (1, h_q) \
            or tuple(bias.shape[2:]) != (s_q, s_kv):
        raise ValueError(f"{op}: bias must be [1 or {b}, 1 or {h_q}, {s_q}, {s_kv}] (it is "
                         f"added to the scores), got shape {bias.shape}")
    if bias.dtype != dtype:
        raise TypeError(f"{op}: bias has dtype {bias.dtype}; it must match q ({dtype})")
    return (tuple(bias.shape), elem_strides(bias, "bias", op))


def padding_of(op: str, seq_lens_q, seq_lens_kv) -> bool:
    if (seq_lens_q is None) != (seq_lens_kv is None):
        raise ValueError(f"{op}: give seq_lens_q and seq_lens_kv together (the padding mask "
                         "needs both)")
    return seq_lens_q is not None


def problem_text(s: _ag.Spec) -> str:
    heads = f"h{s.h_q}" if s.h_q == s.h_kv else f"hq{s.h_q} hkv{s.h_kv}"
    dims = f"d{s.d}" if s.d == s.d_v else f"d{s.d} dv{s.d_v}"
    opts = [n for n, on in (("causal", s.causal), ("bias", s.bias is not None),
                            ("padding", s.padding), (f"dropout {s.dropout:g}", s.dropout))
            if on] + _mk.describe(s) + _sv.problem_opts(s)
    if s.fp8 is not None:       # the fp8 problems' other types: o [, dO, gradients]
        opts.append(f"o {s.fp8.o}" + (f", do {s.fp8.do}, grads {s.fp8.dq}" if s.backward
                                       else ""))
    return (f"{'backward' if s.backward else 'forward'} {s.dtype} b{s.b} {heads} "
            f"sq{s.s_q} skv{s.s_kv} {dims}" + (f" ({', '.join(opts)})" if opts else ""))


def forward_operands(s: _ag.Spec) -> list:
    """``[(slot, shape, element strides)]`` of a forward's operands: q, k, v, o [, stats]."""
    specs = [("q", (s.b, s.h_q, s.s_q, s.d), s.q_strides),
             ("k", (s.b, s.h_kv, s.s_kv, s.d), s.k_strides),
             ("v", (s.b, s.h_kv, s.s_kv, s.d_v), s.v_strides),
             ("o", (s.b, s.h_q, s.s_q, s.d_v), s.o_strides)]
    if s.stats:
        specs.append(("stats", (s.b, s.h_q, s.s_q, 1), _ag.stats_strides(s)))
    return _sv.physical(s, specs)       # packed tensors and page pools as a call passes them


def backward_operands(s: _ag.Spec) -> list:
    """``[(slot, shape, element strides)]`` of a backward's operands, in the order its execute
    takes them: q, k, v, o, do, stats, dq, dk, dv."""
    return _sv.physical(s, [("q", (s.b, s.h_q, s.s_q, s.d), s.q_strides),
                            ("k", (s.b, s.h_kv, s.s_kv, s.d), s.k_strides),
                            ("v", (s.b, s.h_kv, s.s_kv, s.d_v), s.v_strides),
                            ("o", (s.b, s.h_q, s.s_q, s.d_v), s.o_strides),
                            ("do", (s.b, s.h_q, s.s_q, s.d_v), s.do_strides),
                            ("stats", (s.b, s.h_q, s.s_q, 1), _ag.stats_strides(s)),
                            ("dq", (s.b, s.h_q, s.s_q, s.d), s.dq_strides),
                            ("dk", (s.b, s.h_kv, s.s_kv, s.d), s.dk_strides),
                            ("dv", (s.b, s.h_kv, s.s_kv, s.d_v), s.dv_strides)])


# -- what runs a candidate ----------------------------------------------------------------------------
class Run:
    """A finalized execution plan of one lowering, with how a call's pointers map to it."""

    __slots__ = ("gplan", "lowered", "kind", "slots", "fixed", "fixed_slots", "aux",
                 "workspace")

    def __init__(self, gplan, lowered: _ag.Lowered, aux: dict):
        self.gplan = gplan
        self.lowered = lowered             # holds the by-value scalars the addresses name
        self.kind = lowered.kind
        self.slots = lowered.slots
        self.fixed = {s: ctypes.addressof(v) for s, v in lowered.scalars.items()
                      if s not in ("seed", "offset")}
        # Where the pointers are host scalars the plan keeps (by-value tensors): not probed
        # when the call is recorded for relaunching.
        self.fixed_slots = tuple(i for i, n in enumerate(self.slots) if n in self.fixed)
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
class SdpaPlanBase(Plan):
    """What the forward and backward plans share: candidates from the lowerings, the call."""

    library = "cuDNN"
    _builders: dict = {}
    #: The :class:`cudalibs.Options` field that names the default lowerings (None: all of
    #: :attr:`_builders`).
    _lowerings_option = "sdpa_lowerings"

    def _setup(self, spec: _ag.Spec, dev, graphs, max_candidates) -> None:
        known = tuple(self._builders)
        if graphs is None:
            graphs = known if self._lowerings_option is None else \
                getattr(_current_options(), self._lowerings_option)
        graphs = (graphs,) if isinstance(graphs, str) else tuple(graphs)
        bad = [g for g in graphs if g not in known]
        if bad or not graphs:
            raise ValueError(f"graphs must name some of {known}, got {graphs!r}")
        self._spec = spec
        self._graphs = graphs
        self._max = _be.engines.FIND_MAX_PLANS if max_candidates is None else max(1, int(max_candidates))
        self._objs: list = []
        self._exe = None
        self._unavailable: dict = {}
        self._text = problem_text(spec)
        self._specs = self._operand_specs()
        # (shape, element strides) and the byte extent of every operand, by slot: a call's
        # overlap checks are then a few integer comparisons
        self._slot = {n: (shape, est) for n, shape, est in self._specs}
        if spec.bias is not None:
            self._slot["bias"] = spec.bias
        self._ext = {}
        for n, (shape, est) in self._slot.items():
            it = self._slot_dtype(n).itemsize
            self._ext[n] = byte_extent(shape, byte_strides(est, it), it)
        self._init_plan(dev)
        self._borrow()      # the execution plans are freed with the candidates

    def _slot_dtype(self, slot: str) -> np.dtype:
        """The element type of the operand bound to ``slot``."""
        f = self._spec.fp8
        if f is not None and slot in _ag.Fp8._fields:
            return getattr(f, slot)
        return F32 if slot in ("stats", "mask", "alibi_slopes") else self._spec.dtype

    # -- Plan hooks ------------------------------------------------------------------------------
    def _problem(self) -> str:
        return self._text

    def _tuning_key(self):
        s = self._spec._asdict()
        s["dtype"] = str(s["dtype"])
        if s["fp8"] is not None:
            s["fp8"] = [None if t is None else str(t) for t in s["fp8"]]
        return {"spec": s, "graphs": list(self._graphs), "max": self._max}

    def _library_version(self) -> str:
        return str(version_int())

    def _heuristics(self) -> list[dict]:
        dev = self._device
        h = handle_for(dev, as_stream(None, dev).raw_handle)
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
                found = _be.candidates(h, low.graph, low.uids, frozenset(), _default_limit(),
                                       room)
            except Exception as exc:   # noqa: BLE001 - a lowering no engine takes: say why
                last_error_string()
                why[kind] = str(exc) if isinstance(exc, _be.NoGraph) else _be.why(exc)
                continue
            for c, p in found:
                run = Run(p, low, aux)
                c = dict(c, name=f"{kind} {c['name']}", id=f"{kind}:{c['name']}",
                         backend=kind, workspace=run.workspace)
                cands.append(c)
                objs.append(run)
        self._unavailable = why
        if not cands:
            cudnn = ".".join(map(str, version()))
            raise CudaLibsError(f"{type(self).__name__}: cuDNN {cudnn} has no engine for "
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
        ws_ptr, _ = workspace(dev, stream.raw_handle, max(r.workspace for r in self._objs))
        packs = [r.gplan.pack_uncached(r.pointers(vals, ws_ptr), ws_ptr) for r in self._objs]
        yield lambda i: self._exec(self._objs[i], dev, stream, packs[i])
        packs.clear()       # the scratch packs go before the scratch arrays they name
        del keep

    def _scratch_operands(self, stream):
        """``(slot -> pointer, arrays to keep)`` of random inputs and outputs for timing."""
        dev, s = self._device, self._spec
        it = s.dtype.itemsize
        arrays = {}
        for slot, shape, est in self._specs:
            dt = self._slot_dtype(slot)
            arrays[slot] = _scratch(shape, dt, dev, stream,
                                    strides=tuple(x * dt.itemsize for x in est))
        if s.bias is not None:
            shape, est = s.bias
            arrays["bias"] = _scratch(shape, s.dtype, dev, stream,
                                      strides=tuple(x * it for x in est))
        if s.padding:       # full lengths: the timing of the real work
            arrays["seq_q"] = to_device(np.full(s.b, s.s_q, np.int32), device=dev, stream=stream)
            arrays["seq_kv"] = to_device(np.full(s.b, s.s_kv, np.int32), device=dev,
                                         stream=stream)
        if s.fp8 is not None:       # scales of 1 (what real data's scales keep near), amax outputs
            way = "backward" if s.backward else "forward"
            for slot in _ag.FP8_SCALES[way] + _ag.FP8_AMAX[way]:
                arrays[slot] = to_device(np.ones(1, F32), device=dev, stream=stream)
        arrays.update(_sv.scratch(s, dev, stream))     # page tables, packed lengths
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
    def _exec(self, r: Run, dev, s, vp) -> None:
        h = handle_for(dev, s.raw_handle)
        g = r.gplan
        st = g._exec(h.raw, g._raw, vp._raw)
        if st:
            raise_for(st, "cudnnBackendExecute", f"plan: {self!r}")

    def _launch(self, dev, s, vals: dict, by_value: bool) -> None:
        r = self._exe
        ws_ptr, _ = workspace(dev, s.raw_handle, r.workspace)
        ptrs = r.pointers(vals, ws_ptr)
        g = r.gplan
        if by_value:       # host scalars at per-call addresses: a pack for this call only
            self._exec(r, dev, s, g.pack_uncached(ptrs, ws_ptr))
        else:
            g.run(dev, s, ptrs, ws_ptr, ALIGN, r.fixed_slots)

    def relaunch_slots(self) -> list:
        return [r.gplan.relaunches for r in self._objs]

    def _front(self, op, named, stream):
        """Operands through the one path, checked against the plan's shapes and strides."""
        self._live()
        if self._exe is None:
            self.plan()
        *arrs, dev = _operands(op, *named, stream=stream, required=len(named))
        if dev is not self._device:
            raise ValueError(f"{op}: the operands are on device {dev.ordinal}, the plan on "
                             f"device {self._device.ordinal}")
        return arrs, dev, as_stream(stream, dev)

    def _match(self, op, arr, name, shape, est, dtype, packed=False) -> None:
        """``arr`` has the plan's shape, dtype and strides (element strides ``est``; ``packed``
        operands -- statistics, the mask -- must match exactly) and is 16-byte aligned."""
        if arr.shape != shape or arr.dtype != dtype:
            raise ValueError(f"{op}: {name} is {arr.dtype} {arr.shape}; the plan was made for "
                             f"{dtype} {shape}")
        # in bytes, dimension by dimension: packed [tokens, h, d] operands have three
        want = byte_strides(est, arr.dtype.itemsize)
        if arr.strides != want and (packed or not same_steps(arr.strides, want, shape)):
            raise ValueError(f"{op}: {name} has byte strides {arr.strides}; the plan was made "
                             f"for element strides {est}")
        if arr.address % ALIGN:
            raise ValueError(f"{op}: {name} must be {ALIGN}-byte aligned (address "
                             f"{arr.address:#x})")

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
            vals["bias"] = bias.address
        if padding_of(op, seq_lens_q, seq_lens_kv) != sp.padding:
            raise ValueError(f"{op}: the plan was made {'with' if sp.padding else 'without'} "
                             "sequence lengths")
        if sp.padding:
            for slot, x, n in (("seq_q", seq_lens_q, sp.s_q), ("seq_kv", seq_lens_kv, sp.s_kv)):
                arr = self._lengths(op, slot, x, n, dev, s)
                keep.append(arr)
                vals[slot] = arr.address
        if sp.dropout:
            if seed is None:
                raise ValueError(f"{op}: the plan has dropout {sp.dropout}; pass seed=")
            if seed_by_value(op, seed) != sp.seed_by_value:
                raise TypeError(f"{op}: the plan was made for seeds "
                                f"{'by value' if sp.seed_by_value else 'in device arrays'}")
            if sp.seed_by_value:
                objs = tuple(ctypes.c_int64(x) for x in seed_ints(op, seed))
                keep.append(objs)
                vals["seed"], vals["offset"] = (ctypes.addressof(o) for o in objs)
            else:
                for n, x in zip(("seed", "offset"), seed):
                    a = _operand(x, n, op, device=dev)
                    if a.dtype != np.int64 or a.size != 1:
                        raise ValueError(f"{op}: the dropout {n} must be one int64 element, got "
                                         f"{a.dtype} {a.shape}")
                    vals[n] = a.address
        return keep

    def _stats_in(self, op, stats) -> None:
        """The forward's statistics, checked against this problem's packed float32 layout."""
        _, shape, est = next(x for x in self._specs if x[0] == "stats")
        if stats.shape != shape or stats.dtype != F32 or \
                stats.strides != byte_strides(est, 4) or stats.address % ALIGN:
            raise ValueError(f"{op}: stats is {stats.dtype} {stats.shape} with byte strides "
                             f"{stats.strides}; this problem's forward gives packed float32 "
                             f"{shape}, 16-byte aligned (statistics from another problem?)")

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
        if arr.dtype != np.int32 or arr.size != b or not arr.is_c_contiguous:
            raise ValueError(f"{op}: {name} must be {b} contiguous int32 values, got "
                             f"{arr.dtype} {arr.shape}")
        return arr

    def _output(self, op, out, name, slot, dtype, dev, s, inputs, packed=False):
        """``out`` checked (shape, dtype, the plan's strides, no overlap with ``inputs``, pairs
        of slot and array) or a new array of the plan's layout for ``slot``."""
        shape, est = self._slot[slot]
        if out is None:
            it = np.dtype(dtype).itemsize
            # the extent, not the element count: a packed output shares its input's token
            # stride, which may leave room between rows
            buf = alloc_async(max(it * math.prod(shape), self._ext[slot][1]), s, dev)
            return DeviceArray.from_buffer(buf, shape, dtype, byte_strides(est, it))
        out = _operand(out, name, op, device=dev, written=True)
        self._match(op, out, name, shape, est, dtype, packed)
        ext, p = self._ext[slot], out.address
        for n, a in inputs:
            if spans_overlap(p, ext, a.address, self._ext[n]):
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
        """``"composite"``, ``"composite_dp"``, ``"unified"`` or ``"fp8"``: the chosen
        candidate's lowering."""
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

    def usable(self) -> bool:
        e = self._exe
        return not self.closed and (e is None or not e.gplan.descriptor.closed)


