"""The one plan cache: a bounded LRU of plans under named keys, and releasing everything.

The one-shot functions of every library (``cublas.gemm``, ``cudnn.conv_forward``,
``cudnn.sdpa``, ...) keep their plans here, under keys whose schema is a :class:`KeyKind`.
They reach it only through :func:`cudalibs.runtime.front.planned`, the one lookup; this module
is the container: thread-safe, bounded by count (``$CUDALIBS_PLAN_CACHE_SIZE``, default
1024), inspectable (:meth:`PlanCache.entries`, :meth:`PlanCache.info`) and clearable.
"""

from __future__ import annotations

import collections
import operator
import threading
from typing import Callable, Sequence

from .. import _env
from . import log as _log
from . import relaunch as _relaunch

__all__ = ["KeyKind", "CacheEntry", "PlanCache", "cache", "release_all", "RELEASE_HOOKS",
           "RELEASE_LAST"]

_logger = _log.get("runtime")


# -- named keys -----------------------------------------------------------------------------
class KeyKind:
    """The schema of one family of cache keys: a kind name and its field names.

    A key is a plain tuple ``(kind, value, value, ...)`` with one value per field, in
    :attr:`fields` order, so that building and hashing one on the hot path costs what a tuple
    costs.  :func:`~cudalibs.runtime.front.planned` checks every key against its schema
    before it enters the cache, and keys are read back only by name (:meth:`named`,
    :meth:`field`, :attr:`CacheEntry.key`), never by position.
    """

    __slots__ = ("name", "fields", "_index")

    def __init__(self, name: str, fields: Sequence[str]):
        self.name = name
        self.fields = tuple(fields)
        if len(set(self.fields)) != len(self.fields):
            raise ValueError(f"KeyKind {name!r} names a field twice: {self.fields}")
        self._index = {f: i + 1 for i, f in enumerate(self.fields)}

    def key(self, *values) -> tuple:
        """A key of this kind from its field values, in :attr:`fields` order."""
        if len(values) != len(self.fields):
            raise TypeError(f"{self.name} keys have {len(self.fields)} fields "
                            f"{self.fields}, got {len(values)} values")
        return (self, *values)

    def check(self, key) -> None:
        """Raise TypeError unless ``key`` is a key of this kind (right kind, one value per
        field, hashable)."""
        if not isinstance(key, tuple) or not key or key[0] is not self:
            raise TypeError(f"not a {self.name} key: {key!r}")
        if len(key) != len(self.fields) + 1:
            raise TypeError(f"a {self.name} key has {len(self.fields)} fields {self.fields}, "
                            f"this one {len(key) - 1} values")
        hash(key)

    def named(self, key: tuple) -> dict:
        """``{field: value}`` of a key of this kind."""
        if not key or key[0] is not self:
            raise ValueError(f"not a {self.name} key: {key!r}")
        return dict(zip(self.fields, key[1:]))

    def field(self, key: tuple, name: str):
        """The value of field ``name`` of ``key``."""
        try:
            return key[self._index[name]]
        except KeyError:
            raise KeyError(f"{self.name} keys have no field {name!r} (fields: "
                           f"{', '.join(self.fields)})") from None

    def __reduce__(self):
        return (KeyKind, (self.name, self.fields))

    def __repr__(self) -> str:
        return f"KeyKind({self.name!r}, {self.fields!r})"


class CacheEntry:
    """One entry of a :class:`PlanCache`, as :meth:`PlanCache.entries` reports it.

    Attributes
    ----------
    kind : str
        The key's kind (``"gemm"``, ``"cudnn_conv_forward"``, ...).
    key : dict
        The key's fields by name.
    plan : object
        The cached plan.
    raw_key : tuple
        The key itself.
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
        self._maxsize = (_env.integer("CUDALIBS_PLAN_CACHE_SIZE", 1024) if maxsize is None
                         else self._check_size(maxsize))
        self.misses = 0
        self.evictions = 0

    def __call__(self) -> "PlanCache":
        """The cache itself, so that ``cudalibs.plan_cache()`` reads like
        ``cudalibs.tuning_store()``, the other process-wide store.

        Returns
        -------
        PlanCache
            ``self``.
        """
        return self

    @staticmethod
    def _check_size(n) -> int:
        if isinstance(n, bool):
            raise TypeError(f"PlanCache.maxsize must be an int, not {n!r}")
        try:
            n = operator.index(n)
        except TypeError:
            raise TypeError(f"PlanCache.maxsize must be an int, not {type(n).__name__} {n!r}"
                            ) from None
        if n < 1:
            raise ValueError(f"PlanCache.maxsize must be >= 1, got {n}")
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

    def _trim(self, size: int | None = None) -> list:
        """Evict least recently used plans down to ``size`` (default the bound)."""
        size = self._maxsize if size is None else size
        dropped = []
        while len(self._d) > size:
            key, plan = self._d.popitem(last=False)
            dropped.append(plan)
            self.evictions += 1
            if _logger.isEnabledFor(10):
                _logger.debug("plan cache full (%d): evicted %s", self._maxsize,
                              CacheEntry(key, plan))
        return dropped   # released by the caller outside the lock

    def lookup(self, key):
        """The usable plan cached under ``key`` (made most recently used), or None: the hit
        path of :mod:`cudalibs.runtime.front`.  A plan that is no longer usable (closed, or
        something it uses closed behind its back) is dropped and counts as a miss."""
        p = self._d.get(key)
        if p is not None:
            if p.usable():
                try:
                    self._d.move_to_end(key)
                except KeyError:   # evicted by another thread just now; still usable by us
                    pass
                return p
            self.discard(key, p)
        self.misses += 1
        return None

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
                # Room first, then the insert: the cache never holds more than its bound, not
                # even for a moment another thread could see.
                dropped = self._trim(max(self._maxsize - 1, 0))
                self._d[key] = plan
            else:
                dropped = []
        del dropped
        if have is not None and have is not plan:
            close = getattr(plan, "close", None)
            if close is not None:
                close()
            return have
        return plan

    def discard(self, key, plan) -> None:
        """Remove ``plan`` from under ``key`` if it is still the one there (a plan found
        unusable; another thread may have replaced it already)."""
        with self._lock:
            if self._d.get(key) is plan:
                del self._d[key]

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
        # Drop the cache's references; plans nobody else holds are freed now.
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

    def info(self) -> dict:
        """What the cache holds and what it cost, as one dict.

        Returns
        -------
        dict
            ``plans``, ``maxsize``, ``misses``, ``evictions``, ``kinds`` (``{kind: count}``)
            and ``relaunch``: over the cached plans, how many call shapes are ``recorded``
            (relaunched), ``refused`` (the library call is kept, with the reasons in
            ``reasons``), ``pending`` (seen once, recorded on their next call) and
            ``failed`` (a relaunch that failed at launch and was turned off), plus the
            process-wide counts of every relaunch ever made (``totals``).
        """
        with self._lock:
            plans = list(self._d.values())
        rel = {"recorded": 0, "refused": 0, "pending": 0, "failed": 0, "threads": 0,
               "reasons": {}}
        for p in plans:
            slots = getattr(p, "relaunch_slots", None)
            if slots is None:
                continue
            for s in slots():
                _relaunch.summarise(s, rel)
        rel["totals"] = _relaunch.totals()
        return {"plans": len(plans), "maxsize": self._maxsize, "misses": self.misses,
                "evictions": self.evictions, "kinds": self.kinds(), "relaunch": rel}

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


#: The one plan cache of the one-shot functions (``cudalibs.plan_cache()``, which is the cache
#: itself, so ``cudalibs.plan_cache.info()`` reads it too).
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
