"""The tuning store: autotune results kept on disk across processes, one JSON file.

:meth:`cudalibs.runtime.plan.Plan.autotune` keeps its choice here, keyed by the plan kind, the
device architecture, the library version and the problem; a later autotune of the same
problem, in this process or the next, selects the stored candidate without timing.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import warnings

from .. import _env
from . import log as _log

__all__ = ["TuningStore", "tuning_store"]

_logger = _log.get("runtime")


def _default_store_path() -> str | None:
    env = _env.tuning_cache()
    if env is not None:
        return None if env.lower() in ("", "0", "off", "none") else env
    base = _env.cache_dir() or _env.home_cache()
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

