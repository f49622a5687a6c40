"""The one mechanism that binds C functions from a declarative table.

Each library package has a ``_lib.py`` holding nothing but ctypes types and a list of
:class:`Proto` rows, one per C function, with the exact C signature written as a comment
above the row.  :func:`bind` turns such a table into a :class:`BoundLibrary` once, when the
library is first used: every row gets ``restype`` and ``argtypes`` set (so ctypes never
truncates a 64-bit pointer to ``int``), and a row whose symbol the loaded library does not
export becomes a stub that raises :class:`~cudalibs.errors.FunctionNotFoundError` when it is
*called*, not at import, so one missing newer function never breaks the rest.

Status codes are checked inline by the callers (``if st: raise ...``) rather than with
ctypes' ``errcheck`` hook, which costs roughly three times more per call.
"""

from __future__ import annotations

import ctypes
import threading
import warnings
import weakref
from typing import Any, NamedTuple, Sequence

from . import _loader
from .errors import CaptureError, ClosedError, FunctionNotFoundError, LibraryNotFoundError

__all__ = ["Proto", "Resource", "OwnedHandle", "defer", "capture_open",
           "begin_capture_block", "end_capture_block", "holds_capture_block",
           "thread_capturing", "refuse_in_capture",
           "register_context_setter", "BoundLibrary", "LazyLibrary", "bind", "make_raiser",
           "opaque_handle", "property_version", "encoded_version", "renamed"]


class Proto(NamedTuple):
    """One C function: its exported name, return type and argument types.

    Parameters
    ----------
    name : str
        The exported symbol, versioned where the vendor versions it (``cuMemAlloc_v2``).
    restype : ctypes type or None
        The C return type.
    argtypes : sequence of ctypes types
        The C parameter types, in order.
    since : str, optional
        The first library version that exports it (``"CUDA 12.8"``), quoted in the error
        raised when the loaded library lacks it.
    """

    name: str
    restype: Any
    argtypes: Sequence[Any]
    since: str | None = None


class _Missing:
    """Stand-in for a function the loaded library does not export."""

    __slots__ = ("name", "library", "since", "path")

    def __init__(self, name: str, library: str, since: str | None, path: str | None):
        self.name = name
        self.library = library
        self.since = since
        self.path = path

    def __call__(self, *args):
        raise FunctionNotFoundError(self.name, self.library, self.since, self.path)

    def __bool__(self) -> bool:  # lets callers write ``if lib.cuStreamGetDevice:``
        return False

    def __repr__(self) -> str:
        return f"<missing {self.library} function {self.name}>"


class BoundLibrary:
    """A loaded shared library with every row of its prototype table bound as an attribute.

    Attributes are plain ctypes function pointers, so ``lib.cuMemAlloc_v2(...)`` costs one
    attribute lookup and the ctypes call itself.
    """

    def __init__(self, name: str, cdll: ctypes.CDLL, path: str | None, table: Sequence[Proto]):
        self._name = name
        self._cdll = cdll
        self._path = path
        self._table = {p.name: p for p in table}
        self._missing: list[str] = []
        self._unchecked: dict = {}
        for proto in table:
            try:
                fn = getattr(cdll, proto.name)
            except AttributeError:
                setattr(self, proto.name, _Missing(proto.name, name, proto.since, path))
                self._missing.append(proto.name)
                continue
            fn.restype = proto.restype
            fn.argtypes = list(proto.argtypes)
            setattr(self, proto.name, fn)

    @property
    def name(self) -> str:
        """Short name of the library (``"cuda"``, ``"cublas"``, ...)."""
        return self._name

    @property
    def path(self) -> str | None:
        """Absolute path of the loaded file, where known."""
        return self._path

    @property
    def table(self) -> dict[str, Proto]:
        """The prototype rows this library was bound from, by name."""
        return dict(self._table)

    @property
    def missing(self) -> tuple[str, ...]:
        """Names in the table that the loaded library does not export."""
        return tuple(self._missing)

    def unchecked(self, name: str):
        """A second function pointer for ``name`` with ``restype`` but no ``argtypes``.

        ctypes then converts nothing: each argument must already be a ctypes object of the
        parameter's exact C type (pointers as ``c_void_p`` or typed pointer instances), or a
        Python ``int`` for an ``int``-sized parameter whose value the caller has checked fits
        it.  That saves a conversion object per argument, about a third of a many-argument
        call, so only the hottest wrappers use it, with their argument kinds checked against
        the prototype by the CPU tests.
        """
        fn = self._unchecked.get(name)
        if fn is None:
            proto = self._table[name]
            fn = self._cdll[name]   # a fresh function object, not the one with argtypes
            fn.restype = proto.restype
            self._unchecked[name] = fn
        return fn

    def has(self, name: str) -> bool:
        """Whether the loaded library exports ``name`` (and the table declares it)."""
        return name in self._table and name not in self._missing

    def __repr__(self) -> str:
        n = len(self._table) - len(self._missing)
        return f"<BoundLibrary {self._name} {self._path!r}: {n}/{len(self._table)} functions bound>"


def bind(name: str, cdll: ctypes.CDLL, path: str | None, table: Sequence[Proto]) -> BoundLibrary:
    """Bind a prototype table against a loaded library (see :class:`BoundLibrary`)."""
    seen: set[str] = set()
    for proto in table:
        if proto.name in seen:
            raise ValueError(f"{name} prototype table declares {proto.name} twice")
        seen.add(proto.name)
    return BoundLibrary(name, cdll, path, table)


def opaque_handle(c_name: str) -> Any:
    """A distinct ``POINTER(struct)`` type for one kind of opaque C handle.

    Passing a cuBLAS handle where a cuDNN one belongs then fails inside ctypes with an
    ``ArgumentError`` instead of reaching the library.
    """
    struct = type(c_name, (ctypes.Structure,), {"_fields_": []})
    return ctypes.POINTER(struct)


class LazyLibrary:
    """Loads (through :mod:`cudalibs._loader`) and binds one library on first call.

    Each ``_lib.py`` ends with ``get = LazyLibrary("cublas", TABLE)``; wrappers call
    ``_lib.get()`` and receive the same :class:`BoundLibrary` every time.  Importing cudalibs
    therefore never loads a library, and a machine without one imports fine.
    """

    __slots__ = ("name", "table", "_bound", "_lock")

    def __init__(self, name: str, table: Sequence[Proto]):
        self.name = name
        self.table = tuple(table)
        self._bound: BoundLibrary | None = None
        self._lock = threading.Lock()

    def __call__(self) -> BoundLibrary:
        bound = self._bound
        if bound is not None:
            return bound
        with self._lock:
            if self._bound is None:
                cdll, info = _loader.load(self.name)
                self._bound = bind(self.name, cdll, info.path, self.table)
            return self._bound

    def available(self) -> bool:
        """Whether the library can be loaded (loads it if so)."""
        try:
            self()
        except LibraryNotFoundError:
            return False
        return True

    def _reset(self) -> None:
        """Forget the bound library (tests exercise the loader again with this)."""
        with self._lock:
            self._bound = None

    def __repr__(self) -> str:
        state = "bound" if self._bound is not None else "not loaded"
        return f"<LazyLibrary {self.name} ({len(self.table)} prototypes, {state})>"


def make_raiser(error_cls, message=None, detail=None):
    """Build the ``raise_for(status, function)`` helper of one library.

    Parameters
    ----------
    error_cls : type
        A :class:`~cudalibs.errors.StatusError` subclass.
    message : callable, optional
        ``message(status) -> str``: the vendor's description of a status (``cuGetErrorString``).
    detail : callable, optional
        ``detail() -> str``: further state from the library (``cudnnGetLastErrorString``).

    Either callable failing (library gone, function missing) never hides the original error.
    Callers check inline, ``if st: raise_for(st, "cuMemAlloc_v2")``, so a successful call pays
    nothing for this.
    """

    def raise_for(status: int, function: str, extra: str | None = None):
        msg = det = None
        if message is not None:
            try:
                msg = message(status)
            except Exception:
                msg = None
        if detail is not None:
            try:
                det = detail() or None
            except Exception:
                det = None
        if extra:
            det = f"{det}\n{extra}" if det else extra
        raise error_cls.from_status(status, function, msg, det)

    return raise_for


def property_version(get_property, raise_for, function: str) -> tuple[int, int, int]:
    """``(major, minor, patch)`` through a ``xxxGetProperty(libraryPropertyType, int*)``
    function (cuBLAS, cuDNN, ...), which needs no handle and no GPU."""
    parts = []
    for prop in (0, 1, 2):  # libraryPropertyType: MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        value = ctypes.c_int()
        st = get_property(prop, ctypes.byref(value))
        if st:
            raise_for(st, function)
        parts.append(value.value)
    return tuple(parts)


def encoded_version(code: int, scale: int = 10000) -> tuple[int, int, int]:
    """``(major, minor, patch)`` of a version the library encodes as one integer,
    ``major * scale + minor * 100 + patch`` (``scale`` 10000 for cuBLASLt, cuDNN 9, NCCL 2.9
    on; ``130100`` is 13.1.0)."""
    code = int(code)
    return code // scale, code % scale // 100, code % 100


def renamed(func, old: str, new: str):
    """``func`` under the name it had before, ``old``: the same call, which warns
    (``DeprecationWarning``) that ``new`` is its name now.

    Parameters
    ----------
    func : callable
        What the old name calls.
    old, new : str
        The old and the new spelling, as a user would write them (``"cudnn.version_tuple()"``).

    Returns
    -------
    callable
        The deprecated alias, with a docstring that says what replaces it.
    """
    def alias(*args, **kwargs):
        warnings.warn(f"{old} is deprecated: use {new}, which is the same", DeprecationWarning,
                      stacklevel=2)
        return func(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = old.split("(")[0].rsplit(".", 1)[-1]
    alias.__module__ = func.__module__
    alias.__doc__ = (f"Deprecated: the same as ``{new}``, which replaces it.\n\n"
                     f"Calling it warns (``DeprecationWarning``); see ``{new}`` for the "
                     "parameters and the result.\n")
    return alias


# -- lifetime ----------------------------------------------------------------------------------
# Frees and destroys held back while a graph capture block is open.  A stream capture is
# invalidated by calls the driver deems unsafe during it (a synchronous free, a free of pinned
# memory, work on the legacy stream, ...).  Such calls come from finalizers, which the garbage
# collector runs at any allocation, so the user cannot keep them out of a capture block; while
# one is open they wait here and run when the last block ends.  The state lives at this level,
# under every library, so that every owner of a C handle shares the one gate.
#: How many capture blocks are open in the process: one list cell, read without a call or a
#: lock on the hot paths (an allocation, a relaunch); changed only by begin/end_capture_block,
#: under ``_capture_lock``.
CAPTURE_OPEN = [0]
_deferred: list = []
# Changes of CAPTURE_OPEN, of a thread's depth and of _blocks happen under this lock, so that
# two threads opening or closing blocks at once never lose a count.  Re-entrant: a finalizer
# that the garbage collector runs inside the locked region may itself look at the gate.
_capture_lock = threading.RLock()
# The blocks open by name (``begin_capture_block(block)``): what lets the owner of a block ask,
# after an interruption at any point, whether its block still holds the gate.
_blocks: dict = {}
# ``cuCtxSetCurrent``, registered by the driver layer once libcuda is bound, so that a release
# that needs its context current can make it so without this module importing the driver.
_set_context: list = [None]


def register_context_setter(fn) -> None:
    """Give the lifetime base the driver's ``cuCtxSetCurrent`` (called once by the driver)."""
    _set_context[0] = fn


def capture_open() -> bool:
    """Whether a capture block is open in this process (finalizer calls are being held)."""
    return bool(CAPTURE_OPEN[0])


# How many capture blocks the calling thread has open.  Captures are made in the
# "thread_local" mode by default, where only the capturing thread's unsafe calls break them:
# an operation that cannot be captured is refused in that thread, while other threads go on.
_thread_state = threading.local()


def thread_capturing() -> bool:
    """Whether the calling thread has a capture block open."""
    return CAPTURE_OPEN[0] > 0 and getattr(_thread_state, "depth", 0) > 0


def refuse_in_capture(what: str, hint: str = "") -> None:
    """Raise :class:`~cudalibs.errors.CaptureError` naming ``what`` when the calling thread
    is capturing a graph; the check costs one list index when no capture is open."""
    if CAPTURE_OPEN[0] and getattr(_thread_state, "depth", 0) > 0:
        raise CaptureError(
            f"{what} cannot be recorded into a CUDA graph, and this thread is capturing one"
            + (f": {hint}" if hint else "") + "; run the work once before capturing it "
            "(that chooses its plans and sizes its workspaces), then capture")


def begin_capture_block(block=None) -> None:
    """A capture block opened (in the calling thread): releases made from now on wait for its
    end.

    Parameters
    ----------
    block : hashable object, optional
        The block's owner.  Named, the block is counted at most once however often this is
        called, :func:`end_capture_block` with the same object takes it back at most once,
        and :func:`holds_capture_block` tells whether it is open: an owner interrupted
        half-way through its own bookkeeping can then always put the gate back as it was.
    """
    with _capture_lock:
        depth = getattr(_thread_state, "depth", 0)
        if block is not None:
            if block in _blocks:
                return
            _blocks[block] = True
        # No call between these updates: Python delivers an interrupt (KeyboardInterrupt)
        # only as a call returns or a loop jumps back, so it cannot split them.
        CAPTURE_OPEN[0] += 1
        _thread_state.depth = depth + 1


def holds_capture_block(block) -> bool:
    """Whether the block named ``block`` holds the gate (see :func:`begin_capture_block`)."""
    return block in _blocks


def end_capture_block(block=None) -> None:
    """A capture block closed; once none is open, run every release that waited.

    Parameters
    ----------
    block : hashable object, optional
        The owner given to :func:`begin_capture_block`; a block not open (never opened, or
        closed already) changes nothing.  Unnamed, one open block is closed, if any.

    Raises
    ------
    BaseException
        The first ``KeyboardInterrupt`` (or other non-``Exception``) raised by a release that
        waited, after every other one has run; ordinary errors of releases are dropped, as a
        finalizer's error has no caller to go to.
    """
    with _capture_lock:
        depth = getattr(_thread_state, "depth", 0)
        lower = depth - 1 if depth > 0 else 0
        if block is not None:
            if block not in _blocks:
                return
            del _blocks[block]
        if CAPTURE_OPEN[0] <= 0:
            return          # nothing open: the count never goes below zero
        # No call between these updates (see begin_capture_block).
        CAPTURE_OPEN[0] -= 1
        _thread_state.depth = lower
        last = CAPTURE_OPEN[0] == 0
    if last:
        _run_deferred()


def _run_deferred() -> None:
    """Run the releases that waited for the gate, until none is left or a block opens again
    (the releases then wait for that block's end)."""
    interrupted = None
    while _deferred and not CAPTURE_OPEN[0]:
        item = None
        try:
            item = _deferred.pop()
            item[0](*item[1])
        except IndexError:
            if item is None:
                break    # another thread took the last one
        except Exception:   # noqa: BLE001 - a finalizer's error has no caller to go to
            pass
        except BaseException as exc:   # noqa: BLE001 - raised once the rest have run
            # An interrupt must not strand the releases still queued: they would wait for
            # a capture that may never come, and the memory they hold would never return.
            if interrupted is None:
                interrupted = exc
    if interrupted is not None:
        raise interrupted


def defer(fn, args) -> bool:
    """Queue ``fn(*args)`` if a capture block is open; returns whether it was queued."""
    if CAPTURE_OPEN[0]:
        _deferred.append((fn, args))
        return True
    return False


def _release(free, ctx, args) -> None:
    """The finalizer body of every :class:`Resource`: wait for open captures, make the
    owning context current, then free."""
    if CAPTURE_OPEN[0]:
        _deferred.append((_release, (free, ctx, args)))
        return
    if ctx is not None and _set_context[0] is not None:
        _set_context[0](ctx)
    free(*args)


class _Borrowed:
    """Stands in for the finalizer of an object that wraps a handle it does not own: closing
    it only stops this object from using the handle."""

    __slots__ = ("alive",)

    def __init__(self):
        self.alive = True

    def __call__(self):
        self.alive = False

    def detach(self):
        self.alive = False


_UNOWNED = None  # the state of a Resource before _own/_borrow: reads as closed


class Resource:
    """The one lifetime base of everything that owns a C handle: descriptors, streams, events,
    graphs, executable graphs, modules, pools, plans.

    A subclass calls :meth:`_own` right after its create call succeeds (or :meth:`_borrow`
    for a handle it wraps without owning).  What the base gives every subclass:

    - a ``weakref.finalize`` that holds the free function and its arguments, never the
      object, so an unreachable object is freed by the garbage collector without ``__del__``;
    - the owning context made current for the free (``ctx=``);
    - the free held back while a graph capture block is open (see :func:`defer`);
    - nothing called at interpreter exit, when the library it would call may be gone (the
      driver reclaims everything then);
    - ``close()`` (idempotent), ``with``, ``closed``, and :meth:`_live`, which raises
      :class:`~cudalibs.errors.ClosedError` naming the class once it is closed.

    Objects whose release must not block or call from the garbage collector (NCCL
    communicators) keep a finalizer of their own that only warns.
    """

    __slots__ = ("_finalizer", "__weakref__")

    def _own(self, free, *args, ctx=None) -> None:
        """Own a handle: ``free(*args)`` runs once, at :meth:`close` or collection."""
        f = weakref.finalize(self, _release, free, ctx, args)
        f.atexit = False
        self._finalizer = f

    def _borrow(self) -> None:
        """Wrap a handle owned elsewhere: :meth:`close` frees nothing."""
        self._finalizer = _Borrowed()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called (or the object was never fully built)."""
        f = getattr(self, "_finalizer", _UNOWNED)
        return f is _UNOWNED or not f.alive

    def usable(self) -> bool:
        """Whether the object can still be used (not closed); what the plan cache asks of
        everything it holds."""
        f = getattr(self, "_finalizer", _UNOWNED)
        return f is not _UNOWNED and f.alive

    def _live(self) -> None:
        """Raise :class:`~cudalibs.errors.ClosedError` if the object is closed."""
        f = getattr(self, "_finalizer", _UNOWNED)
        if f is _UNOWNED or not f.alive:
            raise ClosedError(f"{type(self).__name__} is closed")

    def close(self) -> None:
        """Free the handle now; calling it again does nothing."""
        f = getattr(self, "_finalizer", _UNOWNED)
        if f is not _UNOWNED:
            f()

    def _detach(self) -> None:
        """Forget the handle without freeing it (ownership moved elsewhere)."""
        f = getattr(self, "_finalizer", _UNOWNED)
        if f is not _UNOWNED:
            f.detach()

    def __enter__(self):
        self._live()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class OwnedHandle(Resource):
    """A :class:`Resource` whose handle is one ctypes value freed by one call (cuDNN and
    cuBLASLt descriptors): ``raw`` / ``handle`` read it, checked open."""

    __slots__ = ("_raw",)

    def _own(self, raw, free, *, ctx=None) -> None:   # noqa: D401 - same contract, raw first
        self._raw = raw
        Resource._own(self, free, raw, ctx=ctx)

    @property
    def raw(self):
        """The ctypes handle, for the raw layer (raises :class:`ClosedError` once closed)."""
        if not self._finalizer.alive:
            raise ClosedError(f"{type(self).__name__} is closed")
        return self._raw

    @property
    def handle(self) -> int:
        """The handle as an int."""
        return ctypes.cast(self.raw, ctypes.c_void_p).value or 0
