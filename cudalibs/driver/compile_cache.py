"""The NVRTC compile cache: compiled images and loaded modules in memory, images on disk.

:func:`cudalibs.driver.nvrtc.build` and :func:`~cudalibs.driver.nvrtc.compile` go through
here.  A build's key covers everything its output depends on, the headers it may include
among them (:func:`header_digest`); what cannot be covered keeps the build off the caches.

- In memory: the images and the modules loaded from them, two LRUs bounded by count and bytes
  (a module counts its image's size; its device memory is what the bound protects).  A module
  the LRU drops is not unloaded here: it is only no longer handed out again, and unloads when
  the last caller holding it lets it go (or closes it).
- On disk, under :func:`cache_dir`: one file an image, ``<key[:2]>/<key>.bin``, read and
  written under the rules of :mod:`cudalibs.driver.diskstate` (directories of this user that
  no one else can write, regular files of this user, bounded reads, whole writes), and pruned
  by age and total size.  Every refusal leaves the compile to memory, its reason logged once
  on the ``cudalibs.driver`` logger.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import os
import re
import threading
import warnings
from typing import Sequence

from .. import _env
from . import diskstate

__all__ = ["MAGIC", "cache_dir", "clear_memory_cache", "cache_key", "header_digest",
           "note_uncached", "encode_entry", "decode_entry", "lookup", "store", "loaded_module",
           "keep_module"]

#: The first bytes of a disk entry.
MAGIC = b"CLNVRTC1"


class _Lru:
    """A mapping bounded by its number of items and their bytes; the least recently used
    go first.  Not thread-safe: callers hold ``_cache_lock``."""

    __slots__ = ("max_items", "max_bytes", "nbytes", "_d")

    def __init__(self, max_items: int, max_bytes: int):
        self.max_items, self.max_bytes, self.nbytes = max_items, max_bytes, 0
        self._d: collections.OrderedDict = collections.OrderedDict()

    def get(self, key):
        item = self._d.get(key)
        if item is None:
            return None
        self._d.move_to_end(key)
        return item[0]

    def put(self, key, value, size: int) -> None:
        old = self._d.pop(key, None)
        if old is not None:
            self.nbytes -= old[1]
        if size > self.max_bytes:
            return          # would evict everything else and still not fit
        self._d[key] = (value, size)
        self.nbytes += size
        while len(self._d) > self.max_items or self.nbytes > self.max_bytes:
            _, (_, gone) = self._d.popitem(last=False)
            self.nbytes -= gone

    def clear(self) -> None:
        self._d.clear()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key) -> bool:
        return key in self._d


# key -> (kind, image, ptx text, lowered names); (key, device ordinal) -> Module.
_images = _Lru(256, 128 << 20)
_modules = _Lru(64, 256 << 20)
_cache_lock = threading.Lock()
_warned_dirs: set[str] = set()
_said: set = set()
_logger = logging.getLogger("cudalibs.driver")
#: The disk cache: the largest entry read or written, the total kept and the age after which an
#: entry goes (by last use), pruned on the first write of a process and every 64th after.
_MAX_ENTRY_BYTES = 64 << 20
_DISK_MAX_BYTES = 1 << 30
_DISK_MAX_AGE = 30 * 86400.0
_PRUNE_EVERY = 64
_writes_since_prune = [_PRUNE_EVERY]
#: What a build's user include directories may hold and still be hashed into its key.
_MAX_HEADER_FILES = 4096
_MAX_HEADER_BYTES = 16 << 20


def _cache_root() -> tuple[str | None, str]:
    """``(directory, "")``, or ``(None, why there is none)``."""
    env = _env.cache_dir()
    if env is not None:
        if not os.path.isabs(env):
            return None, f"CUDALIBS_CACHE_DIR={env!r} is a relative path"
        return env, ""
    home = _env.home_cache()
    if home is None:
        return None, "there is no home directory (HOME is unset and the user has no passwd " \
                     "entry) and no absolute XDG_CACHE_HOME"
    return os.path.join(home, "nvrtc"), ""


def cache_dir() -> str | None:
    """The on-disk cache directory: ``$CUDALIBS_CACHE_DIR``, else ``nvrtc`` in the default
    cache directory (``$XDG_CACHE_HOME/cudalibs``, else ``~/.cache/cudalibs``).

    Returns
    -------
    str or None
        An absolute path; None when there is none (a relative ``$CUDALIBS_CACHE_DIR``, or no
        home directory), and compiled kernels are then kept in memory only.  The directory is
        used only while it belongs to this user and its group and others cannot write to it.
    """
    return _cache_root()[0]


def clear_memory_cache() -> None:
    """Forget compiled images and loaded modules held in memory (the disk cache stays).

    A forgotten module stays loaded while a caller holds it."""
    with _cache_lock:
        _images.clear()
        _modules.clear()


def _say_once(key, message: str, *args) -> None:
    """Log a warning on ``cudalibs.driver`` the first time ``key`` is seen (bounded)."""
    if key in _said:
        return
    if len(_said) < 4096:
        _said.add(key)
    _logger.warning(message, *args)


def cache_key(source: str, name: str, options: Sequence[str], name_expressions: Sequence[str],
              version: tuple[int, int], kind: str, arch: str, headers: str) -> str:
    """The key of a build: a SHA-256 over everything its output depends on.

    Parameters
    ----------
    source, name : str
    options, name_expressions : sequence of str
        All the options given to NVRTC, include directories among them.
    version : (major, minor)
        NVRTC's.
    kind, arch : str
        The target (``"ptx"``, ``"compute_90"``).
    headers : str
        :func:`header_digest`'s digest.

    Returns
    -------
    str
        64 hexadecimal digits.
    """
    h = hashlib.sha256()
    for part in (source, name, "\0".join(options), "\0".join(name_expressions),
                 f"{version[0]}.{version[1]}", kind, arch, headers):
        data = part.encode("utf-8", errors="surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


# An include directive or __has_include test, and what it names: <a>, "a", or a macro.
_DIRECTIVE = re.compile(rb'(?:(?:#|%:)[ \t]*(?:include(?:_next)?|import)\b'
                        rb'|__has_include(?:_next)?[ \t]*\()[ \t]*(<[^>\n]*>|"[^"\n]*"|\S*)')


def _include_options(options: Sequence[str]) -> tuple[list[str], list[str]]:
    """The include directories and pre-included files named in NVRTC ``options`` (``-I d``,
    ``-Id``, ``-I=d``, ``--include-path[=] d``; ``-include[=] f``, ``--pre-include[=] f``)."""
    dirs: list[str] = []
    files: list[str] = []
    it = iter(options)
    for o in it:
        for flag, into in (("--include-path", dirs), ("--pre-include", files),
                           ("-include", files), ("-I", dirs)):
            if o == flag:
                value = next(it, "")
            elif o.startswith(flag + "="):
                value = o[len(flag) + 1:]
            elif flag == "-I" and o.startswith(flag):
                value = o[2:]
            else:
                continue
            if value:
                into.append(value)
            break
    return dirs, files


def _outside(text: bytes, base: str | None, dirs: Sequence[str]) -> str | None:
    """Why ``text`` may include a file the key does not hash, or None.

    A header inside an include directory reaches, by a plain name, only files of the hashed
    directories or the toolkit's.  A computed name, an absolute one or one with ``..`` may
    reach anything; and a quoted name in the source (or a pre-included file, ``base`` its
    directory) is looked up first beside it, outside the hashed directories."""
    text = text.replace(b"\\\r\n", b"").replace(b"\\\n", b"")   # joined lines
    for m in _DIRECTIVE.finditer(text):
        target = m.group(1).decode("utf-8", "replace")
        if len(target) < 2 or target[0] + target[-1] not in ('""', "<>"):
            return f"a computed include ({m.group(0).decode('utf-8', 'replace')!r})"
        inner = target[1:-1]
        if os.path.isabs(inner) or os.pardir in re.split(r"[\\/]", inner):
            return f"an include by a path outside the include directories ({target})"
        if base is not None and target[0] == '"':
            beside = os.path.join(base, inner)
            if os.path.exists(beside) and not any(
                    os.path.commonpath([beside, d]) == d for d in dirs):
                return (f"{target} is found beside the source in {base}, which is not among "
                        "include_dirs")
    return None


def header_digest(source: str, name: str, include_dirs: Sequence[str],
                  options: Sequence[str]) -> tuple[str, str | None]:
    """A digest of every file a compile may include from outside the toolkit.

    The rule: the relative paths and contents of all files under each include directory the
    compile is given (``include_dirs``, and ``-I``/``--include-path`` in ``options``), and the
    files it pre-includes, read anew at every call.  It covers what the compile can read
    unless the source or one of those files names something else: a computed ``#include``,
    one by an absolute path or through ``..``, or a quoted name found beside the source
    (NVRTC looks there first: in the directory of ``name``, the current one for a bare name)
    but outside the include directories.  Those, and trees of over 4096 files or 16 MiB,
    cannot be covered.

    Parameters
    ----------
    source, name : str
    include_dirs, options : sequence of str

    Returns
    -------
    (str, None) or ("", str)
        The digest, or ``""`` and why the build must stay off the caches.
    """
    opt_dirs, pre = _include_options(options)
    dirs = [os.path.abspath(d) for d in (*include_dirs, *opt_dirs)]
    h = hashlib.sha256()
    loose = [(os.path.dirname(os.path.abspath(name)), source.encode("utf-8", "surrogatepass"))]
    try:
        tree = diskstate.read_tree(dirs, _MAX_HEADER_FILES, _MAX_HEADER_BYTES) if dirs else []
        for f in pre:
            path = os.path.abspath(f)
            data = diskstate.read_file(path, _MAX_HEADER_BYTES, follow_symlinks=True,
                                       owned=False)
            h.update(f"pre\0{path}\0{-1 if data is None else len(data)}\0".encode())
            if data is not None:
                h.update(data)
                loose.append((os.path.dirname(path), data))
    except OSError as exc:
        return "", f"the files it may include cannot be hashed ({exc})"
    for i, rel, data in tree:
        h.update(f"{i}\0{rel}\0{len(data)}\0".encode("utf-8", "surrogateescape"))
        h.update(data)
        why = _outside(data, None, dirs)
        if why is not None:
            return "", f"{os.path.join(dirs[i], rel)} has {why}"
    for base, text in loose:
        why = _outside(text, base, dirs)
        if why is not None:
            return "", f"the source has {why}"
    return h.hexdigest(), None


def note_uncached(name: str, why: str) -> None:
    """Log, once per reason, that the build of ``name`` stays off the caches."""
    _say_once(("uncached", why), "cudalibs: compiling %s without the caches: %s", name, why)


def encode_entry(kind: str, image: bytes, ptx: bytes, lowered: dict) -> bytes:
    """A disk entry: :data:`MAGIC`, a SHA-256 of the body (against damage, not writers), then
    the body: metadata, image and PTX."""
    meta = json.dumps({"kind": kind, "image": len(image), "ptx": len(ptx),
                       "lowered": lowered}).encode()
    body = len(meta).to_bytes(4, "little") + meta + image + ptx
    return MAGIC + hashlib.sha256(body).digest() + body


def decode_entry(data: bytes):
    """``(kind, image, ptx, lowered)`` of a disk entry, or None when it is damaged in any
    way."""
    try:
        if len(data) < 44 or not data.startswith(MAGIC):
            return None
        digest, body = data[8:40], data[40:]
        if hashlib.sha256(body).digest() != digest:
            return None
        n = int.from_bytes(body[:4], "little")
        meta = json.loads(body[4:4 + n])
        rest = body[4 + n:]
        if len(rest) != meta["image"] + meta["ptx"] or meta["kind"] not in ("ptx", "cubin"):
            return None
        image, ptx = rest[:meta["image"]], rest[meta["image"]:]
        return meta["kind"], image, ptx, dict(meta["lowered"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def _warn_once(directory: str, exc: OSError) -> None:
    if directory in _warned_dirs:
        return
    _warned_dirs.add(directory)
    warnings.warn(f"cudalibs: cannot write the NVRTC cache in {directory} ({exc}); compiled "
                  "kernels are kept in memory only (set CUDALIBS_CACHE_DIR to a writable "
                  "directory, or pass cache=False)", RuntimeWarning, stacklevel=5)


def _entry_path(key: str, create: bool) -> tuple[str, str] | None:
    """``(cache root, entry path)`` once the directories pass diskstate's rule (made when
    ``create``); None for memory only, the reason logged once."""
    root, why = _cache_root()
    if root is None:
        _say_once(("no-dir", why), "cudalibs: %s; compiled kernels are kept in memory only",
                  why)
        return None
    sub = os.path.join(root, key[:2])
    try:
        if create:
            diskstate.make_private_dirs(sub, root)
        else:
            diskstate.check_private_dirs(sub, root)
    except FileNotFoundError:
        return None                     # nothing cached there yet
    except diskstate.UnsafePathError as exc:
        _say_once(("unsafe", root), "cudalibs: not using the NVRTC cache in %s: %s; compiled "
                  "kernels are kept in memory only (a directory of this user's alone, mode "
                  "700, or another CUDALIBS_CACHE_DIR brings the cache back)", root, exc)
        return None
    except OSError as exc:
        _warn_once(root, exc)
        return None
    return root, os.path.join(sub, key + ".bin")


def _disk_read(key: str):
    where = _entry_path(key, create=False)
    if where is None:
        return None
    root, path = where
    try:
        data = diskstate.read_file(path, _MAX_ENTRY_BYTES)
    except diskstate.UnsafePathError as exc:
        _say_once(("entry", root), "cudalibs: ignoring an NVRTC cache entry: %s", exc)
        return None
    except OSError:
        return None
    entry = None if data is None else decode_entry(data)
    if entry is not None:
        # Pruning goes by last use.
        with contextlib.suppress(OSError):
            os.utime(path, follow_symlinks=False)
    return entry


def _disk_write(key: str, entry: bytes) -> None:
    if len(entry) > _MAX_ENTRY_BYTES:
        return
    where = _entry_path(key, create=True)
    if where is None:
        return
    root, path = where
    try:
        diskstate.write_file(path, entry)
    except OSError as exc:
        _warn_once(root, exc)
        return
    _writes_since_prune[0] += 1
    if _writes_since_prune[0] >= _PRUNE_EVERY:
        _writes_since_prune[0] = 0
        with contextlib.suppress(OSError):
            diskstate.prune(root, "[0-9a-f]{2}", "[0-9a-f]{64}[.]bin", _DISK_MAX_BYTES,
                            _DISK_MAX_AGE)


def lookup(key: str) -> tuple[tuple | None, str]:
    """``(entry, "memory")``, ``(entry, "disk")`` or ``(None, "")`` for ``key``; an entry is
    ``(kind, image, ptx, lowered)``."""
    with _cache_lock:
        entry = _images.get(key)
    if entry is not None:
        return entry, "memory"
    entry = _disk_read(key)
    if entry is None:
        return None, ""
    _remember(key, entry)
    return entry, "disk"


def store(key: str, entry: tuple) -> None:
    """Keep a compile's ``(kind, image, ptx, lowered)`` under ``key``, in memory and on disk."""
    _remember(key, entry)
    _disk_write(key, encode_entry(*entry))


def _remember(key: str, entry: tuple) -> None:
    kind, image, ptx, _ = entry
    with _cache_lock:
        _images.put(key, entry, len(image) + (len(ptx) if kind != "ptx" else 0))


def loaded_module(key: str, ordinal: int):
    """The open module loaded from ``key``'s image on device ``ordinal``, or None."""
    with _cache_lock:
        mod = _modules.get((key, ordinal))
    return None if mod is None or mod.closed else mod


def keep_module(key: str, ordinal: int, module, size: int) -> None:
    """Hand ``module`` (loaded from ``key``'s image of ``size`` bytes) out again to later
    compiles of ``key`` on device ``ordinal``, while the LRU keeps it."""
    with _cache_lock:
        _modules.put((key, ordinal), module, size)
