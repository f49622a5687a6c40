"""The plan protocol, the one plan cache, the one autotune timer and the tuning store.

Everything planned in cudalibs -- cuBLASLt matmuls, cuBLAS GEMMs, cuDNN convolutions and the
fused convolution, batch-norm, and the operations that follow them -- is a :class:`Plan`:

1. **construct**: validate the problem and build the descriptors (no GPU work);
2. :meth:`Plan.plan`: pick a candidate by the library's heuristics (idempotent);
3. :meth:`Plan.autotune`: time every candidate with :func:`time_candidates` -- the median of
   loops of back-to-back runs on fresh random inputs, the L2 cache flushed before each loop --
   and keep the fastest; the result is kept on disk by :class:`TuningStore`, so a second run
   of a program selects it without timing anything;
4. ``execute(...)``: write the call's pointers into the prepared arguments and make the call;
   nothing per call is stored on the plan, so several threads may execute one plan at once;
5. :meth:`Plan.close` (or ``with``, or the garbage collector): free the C resources.

The one-shot functions (``cublas.gemm``, ``cublas.matmul``, ``cudnn.conv_forward``, ...) find
their plans in :data:`cache`, one bounded LRU :class:`PlanCache` shared by every library and
keyed by named keys (:class:`KeyKind`): ``cudalibs.plan_cache.entries()`` shows what is held,
``maxsize`` bounds it, ``clear()`` empties it.
"""

from __future__ import annotations

import collections
import hashlib
import json
import math
import os
import threading
import warnings
from typing import Any, Callable, Sequence

import numpy as np

from .._ffi import Resource, refuse_in_capture
from .array import DeviceArray, empty, to_device
from .stream import Event, as_stream

__all__ = ["Plan", "PlanCache", "KeyKind", "CacheEntry", "cache", "time_candidates",
           "TuningStore", "tuning_store", "scratch", "release_all", "RELEASE_HOOKS",
           "RELEASE_LAST"]


# -- named keys -----------------------------------------------------------------------------
class KeyKind:
    """The schema of one family of cache keys: a kind name and its field names.

    Keys are plain tuples ``(kind, value, value, ...)`` so that building and hashing one on
    the hot path costs what a tuple costs; :meth:`named` (and :class:`PlanCache.entries`)
    give them back with their names, so nothing outside the plan that built a key ever
    indexes it by position.
    """

    __slots__ = ("name", "fields")

    def __init__(self, name: str, fields: Sequence[str]):
        self.name = name
        self.fields = tuple(fields)

    def key(self, *values) -> tuple:
        """A key of this kind from its field values, in :attr:`fields` order."""
        if len(values) != len(self.fields):
            raise TypeError(f"{self.name} keys have {len(self.fields)} fields "
                            f"{self.fields}, got {len(values)} values")
        return (self, *values)

    def named(self, key: tuple) -> dict:
        """``{field: value}`` of a key of this kind."""
        if not key or key[0] is not self:
            raise ValueError(f"not a {self.name} key: {key!r}")
        return dict(zip(self.fields, key[1:]))

    def __reduce__(self):
        return (KeyKind, (self.name, self.fields))

    def __repr__(self) -> str:
        return f"KeyKind({self.name!r}, {self.fields!r})"


class CacheEntry:
    """One entry of a :class:`PlanCache`, as :meth:`PlanCache.entries` reports it.

    Attributes
    ----------
    kind : str
        The key's kind (``"gemm"``, ``"conv_forward"``, ...).
    key : dict
        The key's fields by name.
    plan : object
        The cached plan.
    """

    __slots__ = ("kind", "key", "plan", "raw_key")

    def __init__(self, raw_key: tuple, plan):
        kind = raw_key[0]
        self.raw_key = raw_key
        self.kind = kind.name if isinstance(kind, KeyKind) else str(kind)
        self.key = kind.named(raw_key) if isinstance(kind, KeyKind) else {"key": raw_key}
        self.plan = plan

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.key.items())
        return f"<CacheEntry {self.kind}({fields}): {self.plan!r}>"


# -- the one cache ----------------------------------------------------------------------------
def _default_size() -> int:
    try:
        return max(1, int(os.environ.get("CUDALIBS_PLAN_CACHE_SIZE", "1024")))
    except ValueError:
        return 1024


class PlanCache:
    """A bounded, thread-safe LRU cache of plans, keyed by :class:`KeyKind` keys.

    A hit takes no lock (a dict lookup and an LRU move, each atomic under the GIL); an insert
    takes one.  When two threads build the plan for one key at once, the first insert wins
    and both get that plan.  An evicted plan is dropped by the cache and so closed (its C
    resources freed by its finalizer) as soon as no caller still holds it -- a thread that is
    executing it finishes first.

    Parameters
    ----------
    maxsize : int
        The most plans kept (``$CUDALIBS_PLAN_CACHE_SIZE``, default 1024).
    """

    def __init__(self, maxsize: int | None = None):
        self._d: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()
        self._maxsize = _default_size() if maxsize is None else self._check_size(maxsize)
        self.misses = 0
        self.evictions = 0

    @staticmethod
    def _check_size(n) -> int:
        n = int(n)
        if n < 1:
            raise ValueError(f"maxsize must be >= 1, got {n}")
        return n

    @property
    def maxsize(self) -> int:
        """The most plans kept; setting it lower evicts the least recently used at once."""
        return self._maxsize

    @maxsize.setter
    def maxsize(self, n) -> None:
        n = self._check_size(n)
        with self._lock:
            self._maxsize = n
            dropped = self._trim()
        del dropped

    def _trim(self) -> list:
        dropped = []
        while len(self._d) > self._maxsize:
            dropped.append(self._d.popitem(last=False)[1])
            self.evictions += 1
        return dropped   # released by the caller outside the lock

    def get(self, key):
        """The plan cached under ``key`` (made most recently used), or None."""
        p = self._d.get(key)
        if p is not None:
            try:
                self._d.move_to_end(key)
            except KeyError:   # evicted by another thread just now; still usable by us
                pass
        else:
            self.misses += 1     # counted on misses only: a hit pays for nothing it needn't
        return p

    def put(self, key, plan):
        """Insert ``plan`` under ``key``; returns the plan now cached there (an earlier one
        that another thread inserted first wins, and ``plan`` is closed)."""
        with self._lock:
            have = self._d.get(key)
            if have is None:
                self._d[key] = plan
                dropped = self._trim()
            else:
                dropped = []
        del dropped
        if have is not None and have is not plan:
            close = getattr(plan, "close", None)
            if close is not None:
                close()
            return have
        return plan

    def get_or_build(self, key, build: Callable[[], Any]):
        """The plan under ``key``, built with ``build()`` and inserted on a miss."""
        p = self.get(key)
        if p is None:
            p = self.put(key, build())
        return p

    def pop(self, key, default=None):
        """Remove and return the plan under ``key``."""
        with self._lock:
            return self._d.pop(key, default)

    def clear(self, kind: str | None = None) -> int:
        """Drop every plan (of one kind, by name, if given); returns how many."""
        with self._lock:
            if kind is None:
                dropped = list(self._d.values())
                self._d.clear()
            else:
                keys = [k for k in self._d if _kind_name(k) == kind]
                dropped = [self._d.pop(k) for k in keys]
        n = len(dropped)
        for p in dropped:
            # Drop the cache's reference; plans nobody else holds are freed now.
            del p
        dropped.clear()
        return n

    def entries(self, kind: str | None = None) -> list[CacheEntry]:
        """What the cache holds, least recently used first, with named keys."""
        with self._lock:
            items = list(self._d.items())
        return [CacheEntry(k, p) for k, p in items if kind is None or _kind_name(k) == kind]

    def kinds(self) -> dict[str, int]:
        """``{kind: number of plans}``."""
        out: dict[str, int] = {}
        for k in list(self._d):
            name = _kind_name(k)
            out[name] = out.get(name, 0) + 1
        return out

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key) -> bool:
        return key in self._d

    def __repr__(self) -> str:
        kinds = ", ".join(f"{k}: {n}" for k, n in sorted(self.kinds().items())) or "empty"
        return (f"<PlanCache {len(self._d)}/{self._maxsize} plans ({kinds}); "
                f"{self.misses} misses, {self.evictions} evicted>")


def _kind_name(key) -> str:
    k = key[0] if isinstance(key, tuple) and key else key
    return k.name if isinstance(k, KeyKind) else str(k)


#: The one plan cache of the one-shot functions (also ``cudalibs.plan_cache``).
cache = PlanCache()


# -- releasing everything ----------------------------------------------------------------------
#: Callables run by :func:`release_all`, each freeing what one part of cudalibs holds
#: (workspaces, descriptor caches, pooled blocks).  Libraries append to it when imported.
RELEASE_HOOKS: list[Callable[[], None]] = []
#: Run after every :data:`RELEASE_HOOKS` entry: trimming the memory pools, so that what the
#: other hooks free is given back to the driver too.
RELEASE_LAST: list[Callable[[], None]] = []


def release_all() -> None:
    """Free everything cudalibs holds that it can make again: every cached plan, every
    library's workspaces and descriptor caches, and the memory pools' cached blocks.

    Handles (one per device and thread) stay: they are freed at exit.  Work already queued
    is waited for where something it may use is freed.
    """
    cache.clear()
    for hook in list(RELEASE_HOOKS) + list(RELEASE_LAST):
        hook()


# -- the plan base -----------------------------------------------------------------------------
class Plan(Resource):
    """Base of every planned operation: construct -> :meth:`plan` / :meth:`autotune` ->
    ``execute()`` -> :meth:`close`.

    A subclass builds its descriptors in ``__init__`` and calls :meth:`_own` (from
    :class:`~cudalibs._ffi.Resource`) for what it must free; then it provides:

    - ``_heuristics()``: the list of candidates (dicts with at least ``"name"``), best guess
      first;
    - ``_select(i)``: make candidate ``i`` the one ``execute`` runs (build its plan);
    - ``_runner(stream)``: a context that yields ``run(i)``, which runs candidate ``i`` once
      on scratch inputs on ``stream`` (used only for timing), and frees them at exit;
    - ``_problem()``: a short text of the problem for ``repr``;
    - ``_tuning_key()``: a JSON-able description of the problem (shapes, dtypes, options; no
      addresses) under which :class:`TuningStore` keeps the autotuned choice;
    - ``execute(...)``: the call itself, reading only prepared state.

    Attributes
    ----------
    candidates : list of dict
        What the heuristics offered; after :meth:`autotune` each has ``"ms"``.
    choice : int
        The index of the candidate ``execute`` runs.
    tuned : bool
        Whether the choice came from timing (now or from the tuning store).
    """

    __slots__ = ("_device", "_candidates", "_choice", "_tuned", "_planned", "_plan_lock",
                 "__dict__")

    kind = "plan"          # the tuning store's and the cache's name for this kind of plan
    library = "cudalibs"   # whose version goes into the tuning key

    def _init_plan(self, device) -> None:
        self._device = device
        self._candidates: list[dict] = []
        self._choice = -1
        self._tuned = False
        self._planned = False
        self._plan_lock = threading.RLock()

    # -- subclass hooks ------------------------------------------------------------------------
    def _heuristics(self) -> list[dict]:
        raise NotImplementedError

    def _select(self, i: int) -> None:
        raise NotImplementedError

    def _runner(self, stream):
        raise NotImplementedError(f"{type(self).__name__} cannot be autotuned")

    def _problem(self) -> str:
        return ""

    def _tuning_key(self):
        return None

    def _library_version(self) -> str:
        return ""

    def _workspace_bytes(self) -> int:
        c = self._candidates[self._choice] if 0 <= self._choice < len(self._candidates) else {}
        return int(c.get("workspace", 0))

    # -- the protocol --------------------------------------------------------------------------
    @property
    def device(self):
        """The device the plan runs on."""
        return self._device

    @property
    def candidates(self) -> list[dict]:
        """The candidates the heuristics offered (copies), with ``ms`` once timed."""
        return [dict(c) for c in self._candidates]

    @property
    def choice(self) -> int:
        """Index of the candidate that :meth:`execute` runs (-1 before :meth:`plan`)."""
        return self._choice

    @property
    def tuned(self) -> bool:
        """Whether the choice was made by timing."""
        return self._tuned

    @property
    def time_ms(self) -> float | None:
        """The chosen candidate's measured time, if it was timed."""
        if 0 <= self._choice < len(self._candidates):
            return self._candidates[self._choice].get("ms")
        return None

    @property
    def workspace_bytes(self) -> int:
        """Scratch bytes the chosen candidate needs."""
        return self._workspace_bytes()

    def plan(self):
        """Pick the heuristics' first workable candidate (does nothing if already planned).

        Returns
        -------
        Plan
            ``self``, so ``Plan(...).plan()`` chains.
        """
        self._live()
        if self._planned:
            return self
        with self._plan_lock:
            if not self._planned:
                cands = self._heuristics()
                if not cands:
                    raise ValueError(f"{type(self).__name__}: no candidate for {self._problem()}")
                self._candidates = cands
                self._select(0)
                self._choice = 0
                self._planned = True
        return self

    def select(self, i: int) -> None:
        """Run candidate ``i`` from now on (an index into :attr:`candidates`)."""
        self.plan()
        i = int(i)
        if not 0 <= i < len(self._candidates):
            raise IndexError(f"candidate {i} out of range: {len(self._candidates)} candidates")
        with self._plan_lock:
            self._select(i)
            self._choice = i

    def autotune(self, *, stream=None, rounds: int = 5, store: bool = True,
                 force: bool = False) -> list[dict]:
        """Time every candidate and run the fastest from now on.

        The timer is :func:`time_candidates`: per candidate, the median of ``rounds`` loops of
        back-to-back runs of about half a millisecond, on fresh random inputs, with the L2
        cache flushed before each loop; the candidates' loops are interleaved so that clock
        and host drift fall on all alike.  The result is kept in :func:`tuning_store` under
        the problem, the device architecture and the library version, and a later autotune of
        the same problem (in this process or another) selects it without timing, unless
        ``force``.

        Returns
        -------
        list of dict
            :attr:`candidates`, with ``ms`` for each timed one (``inf`` for one that failed).
        """
        refuse_in_capture(f"{type(self).__name__}.autotune()",
                          "timing candidates waits on events from the host")
        self.plan()
        key = self._store_key() if store else None
        st = tuning_store() if key is not None else None
        if st is not None and not force:
            rec = st.get(key)
            if rec is not None and self._apply_record(rec):
                return self.candidates
        s = as_stream(stream, self._device)
        with self._plan_lock:
            keep = self._choice
            with self._runner(s) as run:
                def make(i):
                    def go():
                        run(i)
                    return go
                times = time_candidates([make(i) for i in range(len(self._candidates))], s,
                                        rounds=rounds, device=self._device)
            for c, t in zip(self._candidates, times):
                c["ms"] = t
            ok = [i for i, t in enumerate(times) if math.isfinite(t)]
            if not ok:
                self._select(keep)
                raise RuntimeError(f"{type(self).__name__}: no candidate ran for "
                                   f"{self._problem()}")
            best = min(ok, key=lambda i: times[i])
            self._select(best)
            self._choice = best
            self._tuned = True
        if st is not None:
            st.put(key, {"candidate": self._candidates[best].get("id", best),
                         "index": best, "ms": times[best],
                         "names": [c.get("name") for c in self._candidates]})
        return self.candidates

    def _store_key(self):
        tk = self._tuning_key()
        if tk is None:
            return None
        dev = self._device
        arch = dev.arch if dev is not None else "?"
        return json.dumps([self.kind, arch, self._library_version(), tk], sort_keys=True,
                          default=str)

    def _apply_record(self, rec) -> bool:
        """Select the stored choice if it still names one of this plan's candidates."""
        try:
            want = rec["candidate"]
            idx = int(rec["index"])
        except (KeyError, TypeError, ValueError):
            return False
        ids = [c.get("id", i) for i, c in enumerate(self._candidates)]
        if 0 <= idx < len(ids) and ids[idx] == want:
            i = idx
        elif want in ids:
            i = ids.index(want)
        else:
            return False            # the library offers other candidates now: re-measure
        try:
            with self._plan_lock:
                self._select(i)
                self._choice = i
        except Exception:   # noqa: BLE001 - a stored choice that no longer builds: re-measure
            return False
        ms = rec.get("ms")
        if isinstance(ms, (int, float)):
            self._candidates[i]["ms"] = float(ms)
        self._tuned = True
        return True

    def __repr__(self) -> str:
        name = type(self).__name__
        if self.closed:
            return f"<{name} {self._problem()} (closed)>"
        if self._choice < 0:
            return f"<{name} {self._problem()}: not planned>"
        c = self._candidates[self._choice]
        t = c.get("ms")
        timing = f"{t * 1e3:.1f} us (autotuned)" if isinstance(t, float) and self._tuned \
            else "heuristic choice, untimed"
        return (f"<{name} {self._problem()}: {c.get('name', self._choice)} "
                f"[{self._choice + 1}/{len(self._candidates)}], workspace "
                f"{self._workspace_bytes()} B, {timing}>")


# -- the one timer ---------------------------------------------------------------------------
#: Target length of one timed loop (ms) and the loop's bounds in runs.
LOOP_MS = 0.5
MAX_REPS = 200


def time_candidates(runs: Sequence[Callable[[], None]], stream, *, rounds: int = 5,
                    device=None, flush: bool = True) -> list[float]:
    """Milliseconds per run of each callable: the median over ``rounds`` loops.

    Each callable queues one run on ``stream``.  Per candidate: one warm-up run (lazy module
    loads, first-use caches), one run that sizes its loop to about :data:`LOOP_MS`; then, in
    each round and for each candidate in turn, the L2 cache is flushed (a memset of twice its
    size) and a loop of back-to-back runs is timed with CUDA events.  Interleaving the
    candidates spreads clock and host drift over all of them; loops rather than single runs
    keep short kernels from being ranked by launch noise.  A candidate that raises gets
    ``inf``.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    refuse_in_capture("timing candidates (an autotune)",
                      "timing waits on events from the host")
    dev = device if device is not None else stream.device
    start, end = Event(dev), Event(dev)
    flush_buf = None
    if flush:
        l2 = dev.properties.l2_cache_size or (50 << 20)
        flush_buf = empty(2 * l2, np.uint8, device=dev, stream=stream)
    reps: list[int] = []
    try:
        for run in runs:
            try:
                run()
                start.record(stream)
                run()
                end.record(stream)
                end.sync()
                one = max(start.elapsed_ms(end), 1e-4)
                reps.append(max(1, min(MAX_REPS, int(LOOP_MS / one))))
            except Exception:   # noqa: BLE001 - a candidate that cannot run is not a choice
                reps.append(0)
        samples: list[list[float]] = [[] for _ in runs]
        for r in range(rounds):
            for i, run in enumerate(runs):
                n = reps[i]
                if not n:
                    continue
                if flush_buf is not None:
                    flush_buf.fill(r & 0xFF, stream)
                try:
                    start.record(stream)
                    for _ in range(n):
                        run()
                    end.record(stream)
                    end.sync()
                except Exception:   # noqa: BLE001
                    reps[i] = 0
                    samples[i] = []
                    continue
                samples[i].append(start.elapsed_ms(end) / n)
        return [sorted(s)[len(s) // 2] if s else float("inf") for s in samples]
    finally:
        if flush_buf is not None:
            flush_buf.close()
        start.close()
        end.close()


def scratch(shape, dtype, device, stream, strides=None, rng=None):
    """A device array of ``shape`` (and byte ``strides``) holding random, non-zero values,
    for timing: zeros can run faster than real data and would flatter a candidate."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng() if rng is None else rng
    item = dt.itemsize
    if strides is None:
        count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        lo = 0
    else:
        lo, hi = 0, item
        for n, st in zip(shape, strides):
            if n > 1:
                if st < 0:
                    lo += (n - 1) * st
                else:
                    hi += (n - 1) * st
        count = (hi - lo + item - 1) // item
    count = max(count, 1)
    if dt.kind in "iu":
        host = rng.integers(1, 4, size=count).astype(dt)
    elif dt.kind == "b":
        host = np.ones(count, dt)
    else:
        vals = rng.uniform(0.5, 1.5, size=count) * rng.choice((-1.0, 1.0), size=count)
        host = vals.astype(dt)
    flat = to_device(host, device=device, stream=stream)
    if strides is None:
        return flat.reshape(shape) if len(shape) else flat.reshape(())
    return DeviceArray.from_buffer(flat.base, shape, dt, strides, offset=-lo)


# -- the tuning store ------------------------------------------------------------------------
def _default_store_path() -> str | None:
    env = os.environ.get("CUDALIBS_TUNING_CACHE")
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "none") else env
    base = os.environ.get("CUDALIBS_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "cudalibs")
    return os.path.join(base, "tuning.json")


class TuningStore:
    """Autotune results kept on disk across processes, one JSON file.

    Keys are the plan kind, the device architecture, the library version and the problem
    (see :meth:`Plan.autotune`); values name the chosen candidate.  A file that does not parse
    and an entry that does not name a current candidate are ignored, so the plan measures
    again and overwrites them.  Writes go to a temporary file renamed over the old one, after
    merging what other processes wrote meanwhile.

    Parameters
    ----------
    path : str
        The JSON file (``$CUDALIBS_TUNING_CACHE``, default ``~/.cache/cudalibs/tuning.json``;
        ``CUDALIBS_TUNING_CACHE=off`` keeps results in memory only).
    """

    VERSION = 1

    def __init__(self, path: str | None):
        self.path = path
        self._lock = threading.Lock()
        self._mem: dict[str, dict] = {}
        self._loaded = False
        self._warned = False

    def _read(self) -> dict:
        if not self.path:
            return {}
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, UnicodeDecodeError):
            return {}      # corrupt: ignored, rewritten by the next put
        if not isinstance(data, dict) or data.get("version") != self.VERSION:
            return {}
        entries = data.get("entries")
        return entries if isinstance(entries, dict) else {}

    @staticmethod
    def _digest(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()[:32]

    def get(self, key: str):
        """The stored record for ``key`` (a dict), or None."""
        with self._lock:
            if not self._loaded:
                self._mem.update(self._read())
                self._loaded = True
            rec = self._mem.get(self._digest(key))
        if not isinstance(rec, dict) or rec.get("key") != key:
            return None
        return rec.get("value")

    def put(self, key: str, value: dict) -> None:
        """Store ``value`` for ``key`` (in memory, and on disk when a path is set)."""
        rec = {"key": key, "value": value}
        with self._lock:
            self._mem[self._digest(key)] = rec
            if not self.path:
                return
            try:
                merged = self._read()
                merged[self._digest(key)] = rec
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
                tmp = f"{self.path}.{os.getpid()}.{threading.get_ident()}.tmp"
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump({"version": self.VERSION, "entries": merged}, f)
                os.replace(tmp, self.path)
            except OSError as exc:
                if not self._warned:
                    self._warned = True
                    warnings.warn(f"cudalibs: cannot write the tuning store {self.path}: {exc}; "
                                  "tuning results are kept in memory only", RuntimeWarning,
                                  stacklevel=3)

    def clear(self) -> None:
        """Forget every result, in memory and on disk."""
        with self._lock:
            self._mem.clear()
            self._loaded = True
            if self.path:
                try:
                    os.remove(self.path)
                except FileNotFoundError:
                    pass

    def __len__(self) -> int:
        with self._lock:
            if not self._loaded:
                self._mem.update(self._read())
                self._loaded = True
            return len(self._mem)

    def __repr__(self) -> str:
        return f"<TuningStore {self.path or '(memory only)'}: {len(self)} result(s)>"


_store: list = [None]
_store_lock = threading.Lock()


def tuning_store() -> TuningStore:
    """The process's :class:`TuningStore` (its path read from the environment on first use;
    a changed ``$CUDALIBS_TUNING_CACHE`` is followed)."""
    path = _default_store_path()
    st = _store[0]
    if st is None or st.path != path:
        with _store_lock:
            st = _store[0]
            if st is None or st.path != path:
                st = _store[0] = TuningStore(path)
    return st

