"""The one front: how every one-shot function of every library finds its plan.

A one-shot call (``cublas.gemm``, ``cublas.matmul``, ``cudnn.conv_forward``, ``cudnn.sdpa``,
``cudnn.layer_norm``, batch norm, pooling, softmax, ...) describes its problem as a key of
its :class:`~cudalibs.runtime.cache.KeyKind` and asks here::

    plan = front.lookup(key)                    # the hit path: a dict lookup
    if plan is None:
        plan = front.insert(key, SomePlan(...), front.PLAN)

:func:`lookup` returns a usable cached plan (a plan closed behind the cache's back is
replaced); :func:`insert` checks the key against its schema, prepares the new plan
(:data:`PLAN`: heuristics; :func:`tuned`: the one timer; None: the plan plans on first use),
frees it if that fails, logs it, and caches it (when two threads build one key at once, the
first insert wins).  Executing the plan is then the plan's own business, and every plan that
relaunches recorded kernels does so through :meth:`cudalibs.runtime.relaunch.RelaunchSlots.launch`,
the one relaunch path with its fallback to the library call.
"""

from __future__ import annotations

from typing import Callable

from . import log as _log
from .cache import KeyKind, cache

__all__ = ["lookup", "insert", "planned", "drop", "PLAN", "tuned"]

_logger = _log.get("runtime")

#: The hit path: the usable plan under a key, or None.
lookup = cache.lookup


def PLAN(plan) -> None:
    """Prepare a new plan with its heuristics' first choice."""
    plan.plan()


def tuned(stream) -> Callable:
    """Prepare a new plan by autotuning it on ``stream`` (or taking the tuning store's
    choice)."""
    def prepare(plan) -> None:
        plan.autotune(stream=stream)
    return prepare


def insert(key, plan, prepare: Callable | None = PLAN):
    """Prepare ``plan`` (``prepare(plan)``, unless None) and cache it under ``key``; returns
    the plan now cached there.

    Raises
    ------
    TypeError
        ``key`` does not fit its :class:`KeyKind`.
    Exception
        Whatever preparing raised (the plan is closed first).
    """
    kind = key[0] if isinstance(key, tuple) and key else None
    if not isinstance(kind, KeyKind):
        raise TypeError(f"a plan cache key starts with its KeyKind, not {key!r}")
    kind.check(key)
    if prepare is not None:
        try:
            prepare(plan)
        except BaseException:
            close = getattr(plan, "close", None)
            if close is not None:
                close()
            raise
    if _logger.isEnabledFor(10):
        _logger.debug("cached %s plan %r", kind.name, plan)
    return cache.put(key, plan)


def planned(key, build: Callable, *, tune: bool = False, stream=None,
            prepare: Callable | None = PLAN):
    """:func:`lookup`, and on a miss :func:`insert` of ``build()`` prepared with ``prepare``
    (default: planned), or autotuned on ``stream`` when ``tune``.  For one-shots whose plans
    are built from a closure (one per call, cheap beside their library call)."""
    p = lookup(key)
    if p is None:
        p = insert(key, build(), tuned(stream) if tune else prepare)
    return p


def drop(keys) -> int:
    """Remove the plans cached under ``keys`` and close them (a key not cached is skipped);
    for an object whose plans must not outlive it, such as a sparse matrix whose arrays the
    plans read.  Returns how many were removed."""
    n = 0
    for key in keys:
        plan = cache.pop(key)
        if plan is not None:
            n += 1
            close = getattr(plan, "close", None)
            if close is not None:
                close()
    return n
