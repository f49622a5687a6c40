"""``nccl.group()``: ``ncclGroupStart`` / ``ncclGroupEnd`` and what must wait for the end.

NCCL's group state is per thread, so is this module's: the nesting depth, the communicators
used inside the block (a non-blocking one is polled at the end), the work that can only run
once the group has ended (finishing a communicator created or split inside it, destroying
one closed inside it) and the communicators created together (one thread drives them all;
see :meth:`Communicator.close`).
"""

from __future__ import annotations

import threading

from ..errors import NcclError
from . import _lib
from ._base import IN_PROGRESS, raise_for

__all__ = ["group"]

_tls = threading.local()


class _GroupState:
    __slots__ = ("depth", "comms", "after", "created")

    def __init__(self):
        self.depth = 0
        self.comms: dict = {}    # id -> Communicator, to poll at the end (non-blocking)
        self.after: list = []    # to run after a successful end
        self.created: list = []  # communicators created in the group


def state() -> _GroupState:
    """This thread's group state."""
    g = getattr(_tls, "group", None)
    if g is None:
        g = _tls.group = _GroupState()
    return g


def in_group() -> bool:
    """Whether this thread is inside a :class:`group` block."""
    g = getattr(_tls, "group", None)
    return g is not None and g.depth > 0


def make_clique(comms) -> None:
    """Mark ``comms`` as ranks of one communicator driven by this thread (see close())."""
    if len(comms) > 1:
        for c in comms:
            c._clique = True


class group:
    """``with nccl.group():`` -- fuse the NCCL calls of the block into one operation.

    Needed whenever one thread issues the same collective on several communicators (one per
    GPU, from :meth:`Communicator.init_all`) -- each call would otherwise wait for the others
    -- and for send/recv pairs that must progress together.  Also aggregates several
    collectives of one communicator into one launch.  Groups nest; the outermost one runs
    ``ncclGroupEnd``.

    If the block raises, the calls already queued are still launched at its end (NCCL
    cannot withdraw them); abort the communicators involved when their peers will not issue
    the matching calls.

    Inside a group NCCL only queues work: results are on the streams after the block, and
    communicators created inside it (:meth:`Communicator.split`, a constructor) are usable
    after it.  In non-blocking mode the end of the block waits (with each communicator's
    timeout) for every communicator used inside it.

    Examples
    --------
    >>> comms = nccl.Communicator.init_all([0, 1])          # doctest: +SKIP
    >>> with nccl.group():                                   # doctest: +SKIP
    ...     for c, x in zip(comms, xs):
    ...         c.all_reduce(x, out=x)
    """

    __slots__ = ()

    # NCCL's group depth and ours (``state().depth``) must move together whatever interrupts
    # them: a start left without its end makes NCCL queue every later call of the thread
    # forever.  ``called`` is set with no call between it and the NCCL call (Python delivers
    # an interrupt only as a call returns or a loop jumps back), so once it is set the NCCL
    # call has happened, even if its status was lost to a KeyboardInterrupt.
    def __enter__(self) -> "group":
        called = False
        try:
            g = state()
            L = _lib.get()
            called = True
            st = L.ncclGroupStart()
            if st:
                called = False      # refused: NCCL opened no group
                raise_for(st, "ncclGroupStart")
            g.depth += 1
        except BaseException:
            if called:
                _end_quietly()
            raise
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # ncclGroupEnd runs even when the block raised: NCCL's group state is per thread and
        # would otherwise swallow every later call of this thread.
        called = False
        try:
            g = state()
            if g.depth <= 0:
                return          # not entered (or left already): NCCL has no group of ours
            L = _lib.get()
            called = True
            st = L.ncclGroupEnd()
        except BaseException:
            g = state()
            if g.depth > 0:
                if not called:
                    _end_quietly()
                g.depth -= 1
                if not g.depth:
                    _forget(g)
            raise
        g.depth -= 1
        if g.depth:
            if st and st != IN_PROGRESS and exc_type is None:
                raise_for(st, "ncclGroupEnd")
            return
        comms, after, created = list(g.comms.values()), g.after, g.created
        g.comms, g.after, g.created = {}, [], []
        make_clique(created)
        if st and st != IN_PROGRESS:
            if exc_type is None:
                raise_for(st, "ncclGroupEnd")
            return
        first = None
        for c in comms:
            if not c._blocking and c._state != "aborted":
                try:
                    c._wait("ncclGroupEnd")
                except NcclError as e:
                    first = first or e
        if first is not None:
            if exc_type is None:
                raise first
            return
        for fn in after:
            fn()

    def __repr__(self) -> str:
        return f"<nccl.group, depth {state().depth}>"


def _end_quietly() -> None:
    """``ncclGroupEnd`` for a start whose block will not run, ignoring its status (the error
    or interruption being raised is the one to report)."""
    try:
        _lib.get().ncclGroupEnd()
    except Exception:   # noqa: BLE001 - see above
        pass


def _forget(g: _GroupState) -> None:
    """Drop what an interrupted outermost group collected, so that the thread's next group
    does not poll its communicators or run its deferred work as its own; the communicators
    it created are still marked as driven together."""
    created = g.created
    g.comms, g.after, g.created = {}, [], []
    make_clique(created)
