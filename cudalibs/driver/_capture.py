"""Frees and destroys held back while a :func:`cudalibs.graph.capture` block is open.

A stream capture in the default (global) mode is invalidated by any call the driver deems
unsafe during it: a synchronous free, a free of pinned host memory, work on the legacy
stream, and more.  Such calls come from finalizers, which the garbage collector runs at any
allocation, so they cannot be kept out of a capture block by the user.  While one is open, the
finalizers of cudalibs objects hand their call to :func:`defer` instead; the calls run when the
last capture block ends.
"""

from __future__ import annotations

_open = [0]
_deferred: list = []


def begin() -> None:
    """A capture block opened."""
    _open[0] += 1


def end() -> None:
    """A capture block closed; run what waited once none is open."""
    _open[0] -= 1
    if _open[0] == 0:
        while _deferred:
            fn, args = _deferred.pop()
            try:
                fn(*args)
            except Exception:   # noqa: BLE001 - a finalizer's error has no caller to go to
                pass


def defer(fn, args) -> bool:
    """Queue ``fn(*args)`` if a capture block is open; returns whether it was queued."""
    if _open[0]:
        _deferred.append((fn, args))
        return True
    return False
