"""cuDNN's graph (backend) API, part two: engines, the engine search and execution plans.

- :func:`engine_configs`: the engine configurations cuDNN's heuristics propose for an
  operation graph, best first, with their numerical and behaviour notes;
- :func:`candidates`: the search every graph-API plan of cudalibs shares (convolutions, the
  fused convolution, attention, layer/RMS norm): configurations filtered by the notes a
  problem forbids, int8 reorders, a workspace limit and a bound on runtime-compiled engines,
  finalized into execution plans; :class:`NoGraph` when none passes, with why;
- :class:`ExecutionPlan`: one finalized configuration, run by :meth:`ExecutionPlan.run` --
  through its recorded kernels (:mod:`cudalibs.runtime.relaunch`) once a call shape is
  recorded, else ``cudnnBackendExecute`` with a cached variant pack.
"""

from __future__ import annotations

import ctypes
import threading
from typing import NamedTuple

import numpy as np

from ...errors import ClosedError, CudnnError
from ...runtime import relaunch as _relaunch
from .. import _lib
from .._base import last_error_string, raise_for
from ..handle import handle_for
from .descriptors import (BEHAVIOR_NOTES, NUMERICAL_NOTES, BackendDescriptor, attribute_name,
                          make)

__all__ = ["EngineConfig", "engine_configs", "ExecutionPlan", "execution_plan",
           "variant_pack", "candidates", "banned_notes", "why", "NoGraph", "FIND_MAX_PLANS",
           "FIND_MAX_COMPILED", "ALIGNMENT"]


# -- engines ---------------------------------------------------------------------------------
class EngineConfig(NamedTuple):
    """One engine configuration the heuristics proposed.

    Attributes
    ----------
    descriptor : BackendDescriptor
        The ``ENGINECFG`` descriptor (finalized by cuDNN).
    engine : int
        The engine's global index.
    knobs : tuple of (int, int)
        ``(knob type, value)`` choices.
    numerical_notes, behavior_notes : frozenset of str
        Names from :data:`NUMERICAL_NOTES` / :data:`BEHAVIOR_NOTES`.
    heuristic : str
        Which heuristic mode proposed it first (``"a"``, ``"fallback"``...).
    """

    descriptor: BackendDescriptor
    engine: int
    knobs: tuple
    numerical_notes: frozenset
    behavior_notes: frozenset
    heuristic: str

    @property
    def name(self) -> str:
        """``"eng12 k2=1,k3=0"``: engine index and knob choices."""
        k = ",".join(f"k{t}={v}" for t, v in self.knobs)
        return f"eng{self.engine}" + (f" {k}" if k else "")


_HEUR_MODES = {"instant": _lib.CUDNN_HEUR_MODE_INSTANT, "b": _lib.CUDNN_HEUR_MODE_B,
               "fallback": _lib.CUDNN_HEUR_MODE_FALLBACK, "a": _lib.CUDNN_HEUR_MODE_A}


def _describe_config(cfg: BackendDescriptor, mode: str) -> EngineConfig:
    T = _lib
    (engine,) = cfg.get_descriptors(T.CUDNN_ATTR_ENGINECFG_ENGINE,
                                    T.CUDNN_BACKEND_ENGINE_DESCRIPTOR, 1)
    try:
        index = engine.get(T.CUDNN_ATTR_ENGINE_GLOBAL_INDEX, T.CUDNN_TYPE_INT64, 1)[0]
        num = engine.get(T.CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, T.CUDNN_TYPE_NUMERICAL_NOTE,
                         len(NUMERICAL_NOTES) + 4)
        beh = engine.get(T.CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, T.CUDNN_TYPE_BEHAVIOR_NOTE,
                         len(BEHAVIOR_NOTES) + 4)
    finally:
        engine.close()
    knobs = []
    n = cfg.count(T.CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, T.CUDNN_TYPE_BACKEND_DESCRIPTOR)
    if n:
        for kc in cfg.get_descriptors(T.CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                      T.CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, n):
            try:
                knobs.append((kc.get(T.CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, T.CUDNN_TYPE_KNOB_TYPE,
                                     1)[0],
                              kc.get(T.CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, T.CUDNN_TYPE_INT64,
                                     1)[0]))
            finally:
                kc.close()
    return EngineConfig(cfg, int(index), tuple(sorted(knobs)),
                        frozenset(NUMERICAL_NOTES.get(v, f"note{v}") for v in num),
                        frozenset(BEHAVIOR_NOTES.get(v, f"note{v}") for v in beh), mode)


def engine_configs(graph: BackendDescriptor, modes=("a", "fallback"),
                   errors: list | None = None) -> list[EngineConfig]:
    """The engine configurations the heuristics propose for ``graph``, best first.

    Each mode in ``modes`` is asked in turn; a configuration already proposed (same engine
    and knobs) is skipped.  A mode that fails (the fallback list of a graph only fused
    engines can run, for one) contributes nothing; its error is appended to ``errors`` when
    a list is given.
    """
    T = _lib
    seen, out = set(), []
    for mode in modes:
        if mode not in _HEUR_MODES:
            raise ValueError(f"heuristic mode must be one of {sorted(_HEUR_MODES)}, "
                             f"not {mode!r}")
        try:
            heur = make(T.CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
                         (T.CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                          T.CUDNN_TYPE_BACKEND_DESCRIPTOR, graph),
                         (T.CUDNN_ATTR_ENGINEHEUR_MODE, T.CUDNN_TYPE_HEUR_MODE, _HEUR_MODES[mode]))
            n = heur.count(T.CUDNN_ATTR_ENGINEHEUR_RESULTS, T.CUDNN_TYPE_BACKEND_DESCRIPTOR)
            cfgs = heur.get_descriptors(T.CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        T.CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, n) if n else []
        except Exception as exc:
            last_error_string()  # clear it: the next failure should report its own
            if errors is not None:
                errors.append(f"heuristic mode {mode}: {exc}")
            continue
        for cfg in cfgs:
            try:
                ec = _describe_config(cfg, mode)
            except Exception as exc:
                last_error_string()
                if errors is not None:
                    errors.append(f"engine configuration: {exc}")
                cfg.close()
                continue
            key = (ec.engine, ec.knobs)
            if key in seen:
                cfg.close()
                continue
            seen.add(key)
            out.append(ec)
    return out



# -- the engine search every graph-API plan shares ---------------------------------------------
#: The most execution plans a plan finalizes as candidates (in heuristic order), and the most
#: of those that need runtime compilation (each costs a compile at plan time).
FIND_MAX_PLANS = 16
FIND_MAX_COMPILED = 3
#: Byte alignment the convolution graphs declare for every tensor; a call whose pointers are
#: less aligned runs on the plan's legacy twin instead (pool allocations are 256-byte aligned).
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


def candidates(h, graph, uids, banned, limit: int, max_plans: int) -> list:
    """``[(candidate dict, ExecutionPlan), ...]``: up to ``max_plans`` finalized plans of
    ``graph`` in heuristic order that pass the filters.

    Raises
    ------
    NoGraph
        None passes (the message lists why, for the first few).
    """
    errors = []
    configs = engine_configs(graph, ("a", "fallback"), errors)
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
                p = execution_plan(h.raw, cfg, uids)
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


# -- execution -------------------------------------------------------------------------------
_PACK_CACHE_MAX = 8
# Guards every plan's variant-pack dict (inserts and evictions are rare: one per new pointer
# set; lookups take no lock).
_PACKS_LOCK = threading.Lock()
_WS_MASK = _relaunch.WORKSPACE_ALIGN - 1
# The call-shape keys of plans without by-value host scalars, one per alignment (built once).
_PLAIN_KEYS: dict = {}


def _plain_key(align: int) -> tuple:
    return _PLAIN_KEYS.setdefault(align, (align, (), ()))


class ExecutionPlan:
    """A finalized execution plan: one engine configuration of one graph, on one device.

    Parameters
    ----------
    handle
        The cuDNN handle (raw) of the device.
    config : EngineConfig
    uids : sequence of int
        The unique ids of the non-virtual tensors, in the order :meth:`run` takes their
        pointers.

    Attributes
    ----------
    workspace_size : int
        Bytes of workspace it needs.
    config : EngineConfig
    relaunches : RelaunchSlots
        Its recorded kernels (one call shape).

    Notes
    -----
    Finalizing fails (``CudnnError``) for configurations that cannot run on this device or
    problem; callers try the next one.
    """

    __slots__ = ("descriptor", "config", "workspace_size", "uids", "_uid_array", "_packs",
                 "_raw", "_exec", "relaunches", "__weakref__")

    def __init__(self, handle, config: EngineConfig, uids):
        T = _lib
        self.config = config
        self.uids = tuple(int(u) for u in uids)
        self.descriptor = make(
            T.CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR,
            (T.CUDNN_ATTR_EXECUTION_PLAN_HANDLE, T.CUDNN_TYPE_HANDLE, handle),
            (T.CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, T.CUDNN_TYPE_BACKEND_DESCRIPTOR,
             config.descriptor))
        self.workspace_size = int(self.descriptor.get(
            T.CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, T.CUDNN_TYPE_INT64, 1)[0])
        self._uid_array = (ctypes.c_int64 * len(self.uids))(*self.uids)
        self._packs: dict = {}
        self._raw = self.descriptor.raw
        self._exec = _lib.get().cudnnBackendExecute
        # The engine's kernels, recorded once and relaunched with each call's addresses.
        self.relaunches = _relaunch.RelaunchSlots()

    def run(self, device, stream, ptrs: tuple, workspace: int, align: int,
            fixed: tuple = (), relaunch: bool = True, aligned: bool = False) -> None:
        """Run on ``stream`` with one pointer per uid and the workspace.

        Through the recorded kernels when it can (see
        :meth:`cudalibs.runtime.relaunch.RelaunchSlots.launch`): ``relaunch`` true, every
        device pointer aligned to ``align`` (what the graph's tensors declare), and the
        workspace to 256 bytes.  ``fixed`` names the indices of host pointers (by-value
        tensors, in increasing order) whose values the plan keeps for its life; a call shape
        is recorded per set of their addresses.
        Otherwise ``cudnnBackendExecute`` with the pointers' variant pack (a few are kept).
        ``aligned``: the caller has checked the device pointers against ``align``.
        """
        if relaunch and not workspace & _WS_MASK:
            if fixed:
                addrs = tuple(p for i, p in enumerate(ptrs) if i not in fixed)
                key = (align, fixed, tuple(ptrs[i] for i in fixed))
            else:
                addrs, key = ptrs, _PLAIN_KEYS.get(align) or _plain_key(align)
            m = 0
            if not aligned:
                for p in addrs:
                    m |= p
            if not m & (align - 1):
                if self.workspace_size:
                    addrs = (*addrs, workspace)
                device.set_current()        # the legacy stream is the current context's
                if self.relaunches.launch(key, addrs, stream, self, device):
                    return
        h = handle_for(device, stream.raw_handle)
        if self.descriptor.closed:
            raise ClosedError("the execution plan is closed")
        vp = self._packs.get((*ptrs, workspace))
        if vp is None:
            vp = self.pack(ptrs, workspace)
        st = self._exec(h.raw, self._raw, vp._raw)
        if st:
            raise_for(st, "cudnnBackendExecute", f"engine {self.config.name}")

    def recording(self, key):
        """How to record this plan's call for relaunching (the owner side of
        :meth:`cudalibs.runtime.relaunch.RelaunchSlots.launch`)."""
        align, fixed, values = key
        n = len(self.uids)
        probed = [i for i in range(n) if i not in fixed]
        ws = self.workspace_size

        def enqueue(cs, addrs):
            ptrs = [0] * n
            for i, a in zip(fixed, values):
                ptrs[i] = a
            for i, a in zip(probed, addrs):
                ptrs[i] = a
            vp = self.pack_uncached(ptrs, addrs[len(probed)] if ws else 0)
            try:
                st = self._exec(handle_for(cs.device, cs.raw_handle).raw, self._raw, vp._raw)
            finally:
                vp.close()
            if st:
                raise_for(st, "cudnnBackendExecute", f"engine {self.config.name}")

        aligns = (align,) * len(probed) + ((_relaunch.WORKSPACE_ALIGN,) if ws else ())
        return _relaunch.Recording(
            enqueue, aligns, f"cuDNN engine {self.config.name}",
            prepare=lambda cs: handle_for(cs.device, cs.raw_handle))

    def run_pack(self, handle_raw, pack) -> None:
        """Run with a variant pack of the caller's (scratch pointers, for timing) on the
        stream ``handle_raw`` is bound to."""
        st = self._exec(handle_raw, self._raw, pack._raw)
        if st:
            raise_for(st, "cudnnBackendExecute", f"engine {self.config.name}")

    def pack(self, ptrs, workspace: int) -> BackendDescriptor:
        """The finalized variant pack binding ``ptrs`` (one per uid) and ``workspace``; kept
        for the next call with the same pointers (a few sets are kept, the oldest dropped)."""
        key = (*ptrs, workspace)
        vp = self._packs.get(key)
        if vp is None:
            if len(ptrs) != len(self.uids):
                raise ValueError(f"the plan binds {len(self.uids)} tensors, got "
                                 f"{len(ptrs)} pointers")
            vp = variant_pack(self.uids, ptrs, workspace, uid_array=self._uid_array)
            # A finalized pack is immutable, so threads may share one; the dict is changed
            # under the lock only (a reader's lookup never sees it mid-change), and an
            # evicted pack stays valid for a thread still holding it.
            with _PACKS_LOCK:
                have = self._packs.get(key)
                if have is not None:
                    return have
                while len(self._packs) >= _PACK_CACHE_MAX:
                    self._packs.pop(next(iter(self._packs)))
                self._packs[key] = vp
        return vp

    def pack_uncached(self, ptrs, workspace: int) -> BackendDescriptor:
        """A variant pack of ``ptrs`` that is not kept (scratch pointers used for timing)."""
        if len(ptrs) != len(self.uids):
            raise ValueError(f"the plan binds {len(self.uids)} tensors, got {len(ptrs)} "
                             "pointers")
        return variant_pack(self.uids, ptrs, workspace, uid_array=self._uid_array)

    def execute(self, handle_raw, ptrs, workspace: int = 0) -> None:
        """Run on the stream ``handle_raw`` is bound to, with ``cudnnBackendExecute`` (never
        through recorded kernels: :meth:`run` chooses)."""
        if self.descriptor.closed:
            raise ClosedError("the execution plan is closed")
        vp = self._packs.get((*ptrs, workspace))
        if vp is None:
            vp = self.pack(ptrs, workspace)
        st = self._exec(handle_raw, self._raw, vp._raw)
        if st:
            raise_for(st, "cudnnBackendExecute", f"engine {self.config.name}")

    @property
    def name(self) -> str:
        """The engine configuration's name (``"eng12 k2=1"``)."""
        return self.config.name

    def __repr__(self) -> str:
        return (f"<ExecutionPlan {self.config.name}, workspace {self.workspace_size} B, "
                f"notes {sorted(self.config.numerical_notes) or '-'}>")


def execution_plan(handle, config: EngineConfig, uids) -> ExecutionPlan:
    """An :class:`ExecutionPlan` (raises :class:`~cudalibs.errors.CudnnError` when the
    configuration does not finalize)."""
    return ExecutionPlan(handle, config, uids)


def variant_pack(uids, ptrs, workspace: int = 0, *, uid_array=None) -> BackendDescriptor:
    """A finalized variant pack: device pointer ``ptrs[i]`` for tensor ``uids[i]``, plus the
    workspace pointer (0 when none is needed)."""
    uids, ptrs = list(uids), [int(p) for p in ptrs]
    if len(uids) != len(ptrs):
        raise ValueError(f"{len(uids)} unique ids but {len(ptrs)} pointers")
    T = _lib
    d = BackendDescriptor(T.CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
    try:
        L = _lib.get()
        ua = uid_array if uid_array is not None else (ctypes.c_int64 * len(uids))(*uids)
        pa = (ctypes.c_void_p * len(ptrs))(*ptrs)
        wa = ctypes.c_void_p(int(workspace) or None)
        for attr, atype, n, arr in (
                (T.CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, T.CUDNN_TYPE_INT64, len(uids), ua),
                (T.CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, T.CUDNN_TYPE_VOID_PTR, len(ptrs), pa),
                (T.CUDNN_ATTR_VARIANT_PACK_WORKSPACE, T.CUDNN_TYPE_VOID_PTR, 1,
                 ctypes.byref(wa))):
            st = L.cudnnBackendSetAttribute(d.raw, attr, atype, n, arr)
            if st:
                raise_for(st, "cudnnBackendSetAttribute", f"{attribute_name(attr)} of a "
                                                          "variant pack")
        d.finalize()
    except BaseException:
        d.close()
        raise
    return d
