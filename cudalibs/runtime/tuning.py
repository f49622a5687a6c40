"""The tuning store: autotune results kept on disk across processes, one JSON file.

:meth:`cudalibs.runtime.plan.Plan.autotune` keeps its choice here, keyed by the plan kind, the
device architecture, the library version and the problem; a later autotune of the same
problem, in this process or the next, selects the stored candidate without timing.

The file is state another process (or user) could have touched, so it is read and written
under the rules of :mod:`cudalibs.driver.diskstate`: its directory must belong to this user
and be closed to others' writes, the file must be a regular file of this user of at most
:data:`MAX_FILE_BYTES`, writers hold an inter-process lock and replace the file whole.
Whatever is wrong with it, :meth:`Plan.autotune` keeps working: a file that does not parse is
treated as empty and a record that does not check out is skipped, so that the plan measures
again; the reason is logged once on the ``cudalibs.runtime`` logger.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import math
import os
import threading
import time
import warnings
import weakref

from .. import _env
from ..driver import diskstate
from . import log as _log

__all__ = ["TuningStore", "tuning_store", "MAX_FILE_BYTES", "FLUSH_RECORDS", "FLUSH_SECONDS"]

_logger = _log.get("runtime")

#: The largest tuning file read; when a write would exceed it, the oldest records are dropped.
MAX_FILE_BYTES = 16 << 20
#: Writes are batched: the file is rewritten when this many records wait, when the last
#: rewrite is :data:`FLUSH_SECONDS` old (a lone write goes at once, a burst waits at most that
#: long), by :meth:`TuningStore.flush`, and at interpreter exit.
FLUSH_RECORDS = 32
FLUSH_SECONDS = 2.0
#: Seconds a writer waits for another process's lock before it gives up on that write.
LOCK_TIMEOUT = 10.0
_MAX_DEPTH = 16          # of a stored value's nesting
_MAX_INT = 1 << 53       # integers beyond lose precision as floats, and int(1e400) overflows
_MAX_MS = 1e9
_OFF = ("", "0", "off", "none")


def _default_store_path() -> str | None:
    env = _env.tuning_cache()
    if env is not None and env.lower() in _OFF:
        return None
    if env is None:
        base = _env.cache_dir() or _env.home_cache()
        if base is None:
            _log.once(_logger, logging.WARNING, ("tuning-store", "no home"),
                      "cudalibs: there is no home directory (HOME is unset and the user has no "
                      "passwd entry) and no absolute XDG_CACHE_HOME; tuning results are kept "
                      "in memory only")
            return None
        env = os.path.join(base, "tuning.json")
    if not os.path.isabs(env):
        _log.once(_logger, logging.WARNING, ("tuning-store", "relative", env),
                  "cudalibs: the tuning store's path %r is relative; tuning results are kept "
                  "in memory only", env)
        return None
    return env


def _plain(x, depth: int = 0) -> bool:
    """Whether ``x`` is JSON the store keeps: finite numbers of a safe size, bounded nesting."""
    if x is None or isinstance(x, (bool, str)):
        return True
    if isinstance(x, int):
        return -_MAX_INT <= x <= _MAX_INT
    if isinstance(x, float):
        return math.isfinite(x)
    if depth >= _MAX_DEPTH:
        return False
    if isinstance(x, list):
        return all(_plain(v, depth + 1) for v in x)
    if isinstance(x, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in x.items())
    return False


def _valid_value(value) -> bool:
    """A record's value: plain JSON, and the fields :meth:`Plan.autotune` reads of the types
    it reads them as (``index`` a small non-negative int, ``ms`` a finite non-negative
    number)."""
    if not isinstance(value, dict) or not _plain(value, 1):
        return False
    if "index" in value:
        i = value["index"]
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < 1 << 31:
            return False
    if "ms" in value:
        ms = value["ms"]
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms <= _MAX_MS:
            return False
    return True


class TuningStore:
    """Autotune results kept on disk across processes, one JSON file.

    Keys are the plan kind, the device architecture, the library version and the problem
    (see :meth:`Plan.autotune`); values name the chosen candidate.  A file that does not
    parse (or is not a regular file of this user, or is over :data:`MAX_FILE_BYTES`) is
    treated as empty, and a record that does not check out (wrong types or shape, non-finite
    or out-of-range numbers, nesting over 16 levels) is skipped, so the plan measures again
    and overwrites it; the reason is logged once.  A directory of another user's, or one its
    group or others may write to, keeps the results in memory only.

    Writes are batched (:data:`FLUSH_RECORDS`, :data:`FLUSH_SECONDS`, :meth:`flush`, and at
    interpreter exit): a lone :meth:`put` writes at once, a burst of them rewrites the file
    once per batch.  A write holds ``<path>.lock`` (``flock``), merges with what other
    processes wrote meanwhile, and replaces the file through a temporary file of its own.
    A process that ends without running ``atexit`` handlers (``os._exit``, a
    ``multiprocessing`` child) should call :meth:`flush` before it ends.

    Parameters
    ----------
    path : str or None
        The JSON file (``$CUDALIBS_TUNING_CACHE``, default ``tuning.json`` in the cache
        directory: ``$CUDALIBS_CACHE_DIR``, ``$XDG_CACHE_HOME/cudalibs`` or
        ``~/.cache/cudalibs``); None (``CUDALIBS_TUNING_CACHE=off``, or a relative path)
        keeps results in memory only.
    """

    VERSION = 1

    def __init__(self, path: str | None):
        self.path = path
        self._lock = threading.Lock()
        self._mem: dict[str, dict] = {}
        self._pending: dict[str, dict] = {}
        self._loaded = False
        self._warned = False
        self._last_flush = -math.inf
        self._timer: threading.Timer | None = None
        self._written: tuple | None = None      # (stamp, records) of this store's last write
        _stores.add(self)

    # -- reading ---------------------------------------------------------------------------
    def _say(self, what: str, message: str, *args) -> None:
        _log.once(_logger, logging.WARNING, ("tuning-store", self.path, what), message, *args)

    def _read(self) -> dict:
        """The valid records of the file; ``{}`` when there is none or it cannot be used."""
        if not self.path:
            return {}
        directory = os.path.dirname(self.path)
        try:
            diskstate.check_private_dirs(directory, directory)
            data = diskstate.read_file(self.path, MAX_FILE_BYTES)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            self._say("unreadable", "cudalibs: not reading the tuning store: %s; its results "
                      "will be measured again", exc)
            return {}
        if data is None:
            return {}
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, RecursionError, OverflowError) as exc:  # UnicodeDecodeError too
            self._say("corrupt", "cudalibs: the tuning store %s does not parse (%s: %s); its "
                      "results will be measured again", self.path, type(exc).__name__, exc)
            return {}
        entries = doc.get("entries") if isinstance(doc, dict) else None
        if not isinstance(entries, dict) or doc.get("version") != self.VERSION:
            self._say("shape", "cudalibs: the tuning store %s is not a version %d store; its "
                      "results will be measured again", self.path, self.VERSION)
            return {}
        out = {}
        for digest, rec in entries.items():
            if isinstance(rec, dict) and isinstance(rec.get("key"), str) and len(rec) == 2 \
                    and digest == self._digest(rec["key"]) and _valid_value(rec.get("value")):
                out[digest] = rec
        if len(out) != len(entries):
            self._say("skipped", "cudalibs: skipped %d invalid record(s) of the tuning store "
                      "%s; they will be measured again", len(entries) - len(out), self.path)
        return out

    def _load(self) -> None:
        if not self._loaded:
            disk = self._read()
            disk.update(self._mem)          # what this process put meanwhile is newer
            self._mem = disk
            self._loaded = True

    @staticmethod
    def _digest(key: str) -> str:
        # surrogatepass: a key read back from JSON may hold a lone surrogate ("\ud800")
        return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def get(self, key: str):
        """The stored record for ``key`` (a dict), or None."""
        with self._lock:
            self._load()
            rec = self._mem.get(self._digest(key))
        if not isinstance(rec, dict) or rec.get("key") != key:
            return None
        return rec.get("value")

    # -- writing ---------------------------------------------------------------------------
    def put(self, key: str, value: dict) -> None:
        """Store ``value`` for ``key``: in memory at once, on disk with the next batch.

        A value that is not plain JSON of the kind :meth:`get` gives back (finite numbers,
        bounded nesting) is kept in memory only."""
        rec = {"key": key, "value": value}
        digest = self._digest(key)
        with self._lock:
            self._mem[digest] = rec
            if not self.path or not _valid_value(value):
                return
            self._pending.pop(digest, None)
            self._pending[digest] = rec
            wait = FLUSH_SECONDS - (time.monotonic() - self._last_flush)
            if len(self._pending) >= FLUSH_RECORDS or wait <= 0:
                self._flush_locked()
            elif self._timer is None:
                self._timer = threading.Timer(wait, self.flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        """Write the records waiting for the next batch now."""
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending or not self.path:
            return
        self._last_flush = time.monotonic()
        pending, self._pending = self._pending, {}
        directory = os.path.dirname(self.path)
        try:
            diskstate.make_private_dirs(directory, directory)
            with diskstate.locked(self.path, LOCK_TIMEOUT):
                # Unchanged since this store wrote it (every writer replaces the file, so
                # another's write shows as a new inode): no need to read and check it again.
                stamp = self._stamp()
                same = self._written is not None and stamp is not None \
                    and stamp == self._written[0]
                merged = dict(self._written[1]) if same else self._read()
                for digest, rec in pending.items():
                    merged.pop(digest, None)        # to the end: the newest go last
                    merged[digest] = rec
                data, merged = self._encode(merged)
                self._written = None
                diskstate.write_file(self.path, data)
                self._written = (self._stamp(), dict(merged))
        except diskstate.UnsafePathError as exc:
            self._say("unwritable", "cudalibs: not writing the tuning store: %s; tuning "
                      "results are kept in memory only (a directory of this user's alone, "
                      "mode 700, or another CUDALIBS_TUNING_CACHE brings it back)", exc)
            return
        except OSError as exc:
            if not self._warned:
                self._warned = True
                warnings.warn(f"cudalibs: cannot write the tuning store {self.path}: {exc}; "
                              "tuning results are kept in memory only", RuntimeWarning,
                              stacklevel=4)
            return
        merged.update(self._mem)        # learn what other processes wrote; ours stay
        self._mem = merged
        self._loaded = True

    def _encode(self, entries: dict) -> tuple[bytes, dict]:
        """The file's bytes and the records in it: the oldest are dropped until it fits
        :data:`MAX_FILE_BYTES`."""
        while True:
            data = json.dumps({"version": self.VERSION, "entries": entries},
                              allow_nan=False).encode()
            if len(data) <= MAX_FILE_BYTES or not entries:
                return data, entries
            items = list(entries.items())
            entries = dict(items[max(1, len(items) // 4):])

    def _stamp(self):
        """What identifies the file's current version (None when there is none)."""
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns

    def clear(self) -> None:
        """Forget every result, in memory and on disk (records waiting for a batch too)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._pending.clear()
            self._mem.clear()
            self._written = None
            self._loaded = True
            if self.path:
                directory = os.path.dirname(self.path)
                try:
                    diskstate.check_private_dirs(directory, directory)
                    with diskstate.locked(self.path, LOCK_TIMEOUT):
                        os.remove(self.path)
                except FileNotFoundError:
                    pass
                except diskstate.UnsafePathError as exc:
                    self._say("unclearable", "cudalibs: not clearing the tuning store on disk: "
                              "%s", exc)

    def __len__(self) -> int:
        with self._lock:
            self._load()
            return len(self._mem)

    def __repr__(self) -> str:
        return f"<TuningStore {self.path or '(memory only)'}: {len(self)} result(s)>"

    def _after_fork(self) -> None:
        # The parent writes what was waiting; a lock or timer thread does not survive a fork.
        self._lock = threading.Lock()
        self._timer = None
        self._pending = {}


_store: list = [None]
_store_lock = threading.Lock()
_stores: weakref.WeakSet = weakref.WeakSet()


def tuning_store() -> TuningStore:
    """The process's :class:`TuningStore` (its path read from the environment on first use;
    a changed ``$CUDALIBS_TUNING_CACHE`` is followed)."""
    path = _default_store_path()
    st = _store[0]
    if st is None or st.path != path:
        with _store_lock:
            st = _store[0]
            if st is None or st.path != path:
                if st is not None:
                    st.flush()
                st = _store[0] = TuningStore(path)
    return st


def _flush_all() -> None:
    for st in list(_stores):
        try:
            st.flush()
        except Exception:  # noqa: BLE001 - exiting: one store's failure must not stop the rest
            pass


def _after_fork_in_child() -> None:
    for st in list(_stores):
        st._after_fork()


atexit.register(_flush_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
