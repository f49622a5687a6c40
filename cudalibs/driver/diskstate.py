"""Files cudalibs keeps on disk (the NVRTC compile cache, the tuning store), read and written so
that what another user, or a stray file, left there can neither run as this user's code nor
break the library.

The rules, for every directory and file that cudalibs reads back:

- a directory is used only when it belongs to this process's user and neither its group nor
  others may write to it (:func:`check_directory`, :func:`check_private_dirs`); the
  directories cudalibs makes are mode ``0o700`` whatever the umask (:func:`make_private_dirs`);
- a file is opened without following a symbolic link and without blocking, and read only when
  it is a regular file of this user that others cannot write, no larger than a cap
  (:func:`read_file`): a FIFO at its path neither hangs the reader nor a device feeds it
  without end;
- a file is replaced whole or not at all: written to a fresh temporary of
  :func:`tempfile.mkstemp` beside it, renamed over it with :func:`os.replace`, the temporary
  removed on any failure (:func:`write_file`);
- writers that merge with what is on disk hold the file's lock, ``flock`` on ``<file>.lock``
  (:func:`locked`).

A refusal raises :class:`UnsafePathError`, an :class:`OSError` whose message is the reason, so
that callers log it and keep their state in memory.  Linux (POSIX) only, as cudalibs is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import stat
import tempfile
import time
from typing import Iterator, Sequence

__all__ = ["UnsafePathError", "TEMP_SUFFIX", "current_uid", "check_directory",
           "check_private_dirs", "make_private_dirs", "read_file", "write_file", "locked",
           "prune", "read_tree"]

#: The suffix of :func:`write_file`'s temporaries (left behind only by a killed process).
TEMP_SUFFIX = ".tmp"
_CHUNK = 1 << 20


class UnsafePathError(OSError):
    """A file or directory cudalibs refuses to use; the message says why."""


def current_uid() -> int:
    """The user every directory and file cudalibs reads back must belong to.

    Returns
    -------
    int
        The effective uid of this process.
    """
    return os.geteuid()


def _check_owner(st: os.stat_result, path: str) -> None:
    uid = current_uid()
    if st.st_uid != uid:
        raise UnsafePathError(f"{path} belongs to uid {st.st_uid}, not to this user "
                              f"(uid {uid})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(f"{path} is writable by its group or by others "
                              f"(mode {stat.S_IMODE(st.st_mode):#o})")


def check_directory(path: str) -> None:
    """Raise unless ``path`` is a directory of this user that no one else may write to.

    A symbolic link is followed (a ``~/.cache`` moved elsewhere is common): what it points to
    is what must pass.

    Parameters
    ----------
    path : str

    Raises
    ------
    FileNotFoundError
        ``path`` does not exist.
    UnsafePathError
        It is not a directory, belongs to another user, or its group or others may write to it.
    """
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path} is not a directory")
    _check_owner(st, path)


def _chain(path: str, root: str) -> list[str]:
    """The directories below ``root`` down to ``path``, ``root`` excluded."""
    rel = os.path.relpath(path, root)
    if rel == os.curdir:
        return []
    parts = rel.split(os.sep)
    if os.path.isabs(rel) or os.pardir in parts:
        raise UnsafePathError(f"{path} is not below {root}")
    return [os.path.join(root, *parts[:i + 1]) for i in range(len(parts))]


def check_private_dirs(path: str, root: str) -> None:
    """Check ``root`` (:func:`check_directory`) and every directory from it down to ``path``,
    which must be real directories, not links (no one else can have made those links in a
    ``root`` that passed).

    Parameters
    ----------
    path : str
        A directory at or below ``root``.
    root : str
        An absolute directory.

    Raises
    ------
    FileNotFoundError
        One of them does not exist.
    UnsafePathError
        ``root`` is relative, or one of them fails the rule.
    """
    if not os.path.isabs(root):
        raise UnsafePathError(f"{root} is a relative path")
    check_directory(root)
    for d in _chain(path, root):
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePathError(f"{d} is not a directory")
        _check_owner(st, d)


def make_private_dirs(path: str, root: str) -> None:
    """Make ``path`` and the missing directories above it with mode ``0o700``, then
    :func:`check_private_dirs` from ``root`` down.

    The mode is set explicitly after each ``mkdir``, so that neither a permissive umask
    (``000`` would give ``0o777``) nor a strict one (``077`` with ``0o700`` requested, or
    ``777``) decides it.

    Parameters
    ----------
    path : str
        An absolute directory at or below ``root``.
    root : str
        The top of the directories that hold cudalibs' state.

    Raises
    ------
    UnsafePathError
        A relative path, or a directory that fails the rule.
    OSError
        A directory cannot be made (a read-only file system, no permission).
    """
    if not (os.path.isabs(path) and os.path.isabs(root)):
        raise UnsafePathError(f"{path if not os.path.isabs(path) else root} is a relative path")
    missing = []
    d = os.path.normpath(path)
    while not os.path.lexists(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue        # made meanwhile, by another thread or process: checked below
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    check_private_dirs(path, root)


def _open_regular(path: str, flags: int) -> tuple[int, os.stat_result]:
    """Open ``path`` (``O_NONBLOCK``: a FIFO opens at once instead of waiting for a writer) and
    ``fstat`` the open file, so that the path cannot be swapped between check and use.

    Returns ``(fd, stat)`` of a regular file; raises :class:`UnsafePathError` for a link
    (with ``O_NOFOLLOW``) or anything else, and :class:`OSError` when it cannot be opened."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP and flags & os.O_NOFOLLOW:
            raise UnsafePathError(f"{path} is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{path} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_file(path: str, limit: int, *, follow_symlinks: bool = False,
              owned: bool = True) -> bytes | None:
    """The contents of the regular file ``path``, read with every check of the module.

    The file is opened with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a
    writer) and, unless ``follow_symlinks``, ``O_NOFOLLOW``; then ``fstat`` of the open file
    decides, so that the path cannot be swapped between check and read.  A file is
    "regular" by that ``fstat``: a FIFO, a device or a socket is refused before any read.

    Parameters
    ----------
    path : str
    limit : int
        The most bytes read; a larger file (or one that grows past it while read) is refused.
    follow_symlinks : bool, default False
        Read through a symbolic link (for files cudalibs only reads, such as headers).
    owned : bool, default True
        Also require that the file belongs to this user and others cannot write to it.

    Returns
    -------
    bytes or None
        None when there is no file at ``path``.

    Raises
    ------
    UnsafePathError
        A symbolic link (unless followed), not a regular file, another user's or writable by
        others (when ``owned``), or larger than ``limit``.
    OSError
        The file cannot be opened or read.
    """
    try:
        fd, st = _open_regular(path, os.O_RDONLY | (0 if follow_symlinks else os.O_NOFOLLOW))
    except FileNotFoundError:
        return None
    try:
        if owned:
            _check_owner(st, path)
        if st.st_size > limit:
            raise UnsafePathError(f"{path} holds {st.st_size} bytes, over the cap of {limit}")
        chunks, n = [], 0
        while True:
            b = os.read(fd, min(_CHUNK, limit + 1 - n))
            if not b:
                break
            n += len(b)
            if n > limit:
                raise UnsafePathError(f"{path} grew over the cap of {limit} bytes")
            chunks.append(b)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_file(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` at once: readers see the old file or the whole new one.

    The data goes to a new temporary file (``tempfile.mkstemp``: a random name, created
    exclusively, mode ``0o600``) in the same directory, which is then renamed over ``path``;
    on any failure the temporary is removed and the error raised.

    Parameters
    ----------
    path : str
    data : bytes
    """
    directory, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=directory or None, prefix=f".{name}.", suffix=TEMP_SUFFIX)
    try:
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(path: str, timeout: float = 30.0) -> Iterator[None]:
    """Hold the inter-process lock of ``path``: ``flock`` on ``<path>.lock``.

    The lock file is created mode ``0o600`` (opened without following a link, and checked as
    :func:`read_file` checks) and never removed: removing it would let two writers hold locks
    on two different files.

    Parameters
    ----------
    path : str
        The file the lock guards.
    timeout : float, default 30
        Seconds to wait for another holder.

    Raises
    ------
    TimeoutError
        Another process held the lock for ``timeout`` seconds.
    UnsafePathError
        The lock file is a link, not a regular file, or another user's.
    """
    lock = f"{path}.lock"
    fd, st = _open_regular(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW)
    try:
        if st.st_uid != current_uid():
            raise UnsafePathError(f"{lock} belongs to uid {st.st_uid}, not to this user")
        if stat.S_IMODE(st.st_mode) != 0o600:
            os.fchmod(fd, 0o600)       # whatever the umask was when it was made
        deadline = time.monotonic() + timeout
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(errno.ETIMEDOUT, f"{lock} was held by another process "
                                       f"for {timeout} s") from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        yield
    finally:
        os.close(fd)        # which releases the lock


def prune(root: str, subdirs: str, entries: str, max_bytes: int, max_age: float) -> int:
    """Remove old entries from the subdirectories of ``root``, oldest (by mtime) first.

    Only names cudalibs gives are touched (``root`` may be a directory the user also keeps
    other files in): regular files whose names match ``entries``, in subdirectories whose
    names match ``subdirs`` (both regular expressions, matched whole).  Those go when older
    than ``max_age`` seconds, then the oldest until the rest hold at most ``max_bytes``;
    temporaries :func:`write_file` made for such an entry and a killed process left go after
    an hour.

    Parameters
    ----------
    root : str
    subdirs, entries : str
        Patterns of the subdirectory and entry names (``"[0-9a-f]{2}"``,
        ``"[0-9a-f]{64}[.]bin"``).
    max_bytes : int
    max_age : float

    Returns
    -------
    int
        How many files were removed.
    """
    sub_re, entry_re = re.compile(subdirs), re.compile(entries)
    temp_re = re.compile(rf"[.](?:{entries})[.].*{re.escape(TEMP_SUFFIX)}")
    now = time.time()
    files, total, removed = [], 0, 0
    with os.scandir(root) as top:
        dirs = [d.path for d in top if sub_re.fullmatch(d.name) and
                d.is_dir(follow_symlinks=False)]
    for sub in dirs:
        try:
            with os.scandir(sub) as it:
                found = [(f.name, f.path, f.stat(follow_symlinks=False)) for f in it
                         if f.is_file(follow_symlinks=False)]
        except OSError:
            continue
        for name, path, st in found:
            if entry_re.fullmatch(name):
                files.append((st.st_mtime, st.st_size, path))
                total += st.st_size
            elif temp_re.fullmatch(name) and now - st.st_mtime > 3600:
                with contextlib.suppress(OSError):
                    os.unlink(path)
                    removed += 1
    files.sort()
    for mtime, size, path in files:
        if now - mtime <= max_age and total <= max_bytes:
            break
        try:
            os.unlink(path)
            removed += 1
        except FileNotFoundError:
            pass                # another process pruned it
        except OSError:
            continue
        total -= size
    return removed


def read_tree(directories: Sequence[str], max_files: int,
              max_bytes: int) -> list[tuple[int, str, bytes]]:
    """Every file under ``directories``: ``(which directory, relative path, contents)``.

    Links are followed, as a compiler searching the directories would; a directory reached
    twice is read once (so a link cycle ends).  Files need not belong to this user (a system
    include directory does not).  A missing directory contributes nothing.

    Parameters
    ----------
    directories : sequence of str
    max_files : int
        The most files and directories visited, all directories together.
    max_bytes : int
        The most bytes read, all files together.

    Returns
    -------
    list of (int, str, bytes)
        Sorted by directory index, then relative path.

    Raises
    ------
    UnsafePathError
        Over a cap, or a file that is not a regular file (a FIFO, a device).
    """
    out, seen, budget, count = [], set(), max_bytes, 0
    for i, top in enumerate(directories):
        for here, dirnames, filenames in os.walk(top, followlinks=True):
            st = os.stat(here)
            if (st.st_dev, st.st_ino) in seen:
                dirnames[:] = []
                continue
            seen.add((st.st_dev, st.st_ino))
            dirnames.sort()
            count += 1 + len(filenames)
            if count > max_files:
                raise UnsafePathError(f"{top} holds over {max_files} files and directories")
            for name in sorted(filenames):
                path = os.path.join(here, name)
                data = read_file(path, budget, follow_symlinks=True, owned=False)
                if data is None:
                    continue        # a dangling link: nothing a compiler could read either
                budget -= len(data)
                out.append((i, os.path.relpath(path, top), data))
    return out
