"""The NVRTC compile cache's state on disk and in memory: whose directories and files it uses,
how it reads and writes them, what its key covers (headers), and its bounds.

NVRTC works without a GPU, so every test here compiles for real (to PTX) and looks at what
the caches did: ``Compiled.cached`` says where a build came from, the files say what was
written, and the ``cudalibs.driver`` logger says why a directory or entry was refused.
"""

from __future__ import annotations

import logging
import os
import pwd
import stat
import threading
import time
from pathlib import Path

import pytest

from cudalibs import _env
from cudalibs.driver import compile_cache as CC, diskstate, nvrtc

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

OTHER = r"""
extern "C" __global__ void planted(int* out) { *out = 666; }
"""

USES_HEADER = r"""
#include <consts.h>
extern "C" __global__ void store_value(int* out) { *out = VALUE; }
"""


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A fresh cache directory (not yet made), empty memory caches and a fresh log-once set."""
    d = tmp_path / "cache"
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", str(d))
    monkeypatch.setattr(CC, "_said", set())
    monkeypatch.setattr(CC, "_warned_dirs", set())
    nvrtc.clear_memory_cache()
    yield d
    nvrtc.clear_memory_cache()


def _build(source=SAXPY, **kw):
    return nvrtc.build(source, arch="sm_90", driver_cuda=nvrtc.version(), **kw)


def _entry(cache: Path, key: str) -> Path:
    return cache / key[:2] / f"{key}.bin"


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.bin"))


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


def _refusals(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "cudalibs.driver" and r.levelno == logging.WARNING]


# -- directories: made 0o700, used only when this user's and closed to others ------------------
@pytest.mark.parametrize("umask", [0o000, 0o077, 0o277])
def test_directories_are_made_0700_whatever_the_umask(tmp_path, monkeypatch, umask):
    root = tmp_path / "a" / "b" / "cache"
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", str(root))
    old = os.umask(umask)
    try:
        out = _build()
    finally:
        os.umask(old)
    entry = _entry(root, out.key)
    assert entry.is_file()
    for d in (tmp_path / "a", tmp_path / "a" / "b", root, entry.parent):
        assert _mode(d) == 0o700, d
    assert _mode(entry) & 0o077 == 0           # mkstemp's 0o600, never open to others


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_directory_others_may_write_is_not_used(cache, caplog, mode):
    cache.mkdir()
    cache.chmod(mode)
    out = _build()
    assert _entries(cache) == []               # nothing written there
    assert any(str(cache) in m and "writable" in m for m in _refusals(caplog))
    # nor read: an entry planted in it is ignored
    cache.chmod(0o700)
    nvrtc.clear_memory_cache()
    assert _build().cached == ""               # written now that the directory is private
    cache.chmod(mode)
    nvrtc.clear_memory_cache()
    again = _build()
    assert again.cached == "" and again.image == out.image


def test_a_subdirectory_others_may_write_is_not_used(cache):
    first = _build()
    _entry(cache, first.key).parent.chmod(0o777)
    nvrtc.clear_memory_cache()
    assert _build().cached == ""


def test_a_directory_of_another_user_is_not_used(cache, monkeypatch, caplog):
    cache.mkdir(mode=0o700)
    me = os.geteuid()
    monkeypatch.setattr(diskstate, "current_uid", lambda: me + 1)
    _build()
    assert _entries(cache) == []
    assert any("not to this user" in m for m in _refusals(caplog))


def test_a_relative_cache_dir_is_refused(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", "relcache")
    assert nvrtc.cache_dir() is None
    out = _build()
    assert out.cached == "" and out.key                  # the memory cache still works
    assert _build().cached == "memory"
    assert not (tmp_path / "relcache").exists() and list(tmp_path.iterdir()) == []
    assert any("relative" in m for m in _refusals(caplog))


def test_no_home_and_no_passwd_entry_keeps_memory_only(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    for var in ("CUDALIBS_CACHE_DIR", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(var, raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    assert os.path.expanduser("~") == "~"                # what Python does then
    assert _env.home_cache() is None and nvrtc.cache_dir() is None
    _build()
    assert list(tmp_path.iterdir()) == []                # no ./~/.cache/...
    assert any("no home directory" in m for m in _refusals(caplog))


def test_xdg_cache_home_is_honoured_when_absolute(tmp_path, monkeypatch):
    monkeypatch.delenv("CUDALIBS_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert nvrtc.cache_dir() == str(tmp_path / "xdg" / "cudalibs" / "nvrtc")
    out = _build()
    assert _entry(tmp_path / "xdg" / "cudalibs" / "nvrtc", out.key).is_file()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", "xdg-relative")  # ignored, as the XDG rule says
    assert nvrtc.cache_dir() == str(tmp_path / "home" / ".cache" / "cudalibs" / "nvrtc")


# -- entries: regular files of this user, read without following links, bounded ----------------
def test_a_symlinked_entry_is_not_loaded(cache, tmp_path, caplog):
    mine = _build()
    planted = _build(OTHER)                    # a valid entry, checksum and all
    target = _entry(cache, mine.key)
    elsewhere = tmp_path / "planted.bin"
    elsewhere.write_bytes(_entry(cache, planted.key).read_bytes())
    target.unlink()
    target.symlink_to(elsewhere)
    nvrtc.clear_memory_cache()
    again = _build()
    assert again.cached == "" and b"planted" not in again.image and b"saxpy" in again.image
    assert any("symbolic link" in m for m in _refusals(caplog))
    # the rewrite replaced the link itself, not the file it pointed to
    assert target.is_file() and not target.is_symlink()
    assert CC.decode_entry(elsewhere.read_bytes())[1] == planted.image


def test_an_entry_others_may_write_is_not_loaded(cache):
    first = _build()
    _entry(cache, first.key).chmod(0o666)
    nvrtc.clear_memory_cache()
    assert _build().cached == ""


def _finishes(fn, timeout=30.0):
    """Run ``fn`` in a thread; its result, or a failure if it is still running at ``timeout``."""
    box = {}

    def run():
        try:
            box["out"] = fn()
        except BaseException as exc:  # noqa: BLE001 - reported in the test's thread
            box["exc"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} still running after {timeout} s"
    if "exc" in box:
        raise box["exc"]
    return box["out"]


def test_a_fifo_at_the_entry_path_neither_hangs_nor_is_read(cache):
    first = _build()
    path = _entry(cache, first.key)
    path.unlink()
    os.mkfifo(path)
    nvrtc.clear_memory_cache()
    out = _finishes(_build)
    assert out.cached == "" and out.image == first.image


def test_a_device_is_not_read_as_a_file():
    with pytest.raises(diskstate.UnsafePathError, match="not a regular file"):
        _finishes(lambda: diskstate.read_file("/dev/zero", 1 << 20, follow_symlinks=True,
                                              owned=False))


def test_an_oversize_entry_is_not_read(cache, monkeypatch):
    first = _build()
    size = _entry(cache, first.key).stat().st_size
    monkeypatch.setattr(CC, "_MAX_ENTRY_BYTES", size - 1)
    nvrtc.clear_memory_cache()
    assert _build().cached == ""
    with pytest.raises(diskstate.UnsafePathError, match="over the cap"):
        diskstate.read_file(str(_entry(cache, first.key)), size - 1)
    assert diskstate.read_file(str(_entry(cache, first.key)), size) is not None


def test_a_failed_write_leaves_no_temporary(cache, monkeypatch):
    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.warns(RuntimeWarning, match="cannot write the NVRTC cache"):
        _build()
    monkeypatch.undo()
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_an_entry_file_of_another_user_is_refused(tmp_path, monkeypatch):
    f = tmp_path / "entry.bin"
    f.write_bytes(b"x")
    me = os.geteuid()
    monkeypatch.setattr(diskstate, "current_uid", lambda: me + 1)
    with pytest.raises(diskstate.UnsafePathError, match="not to this user"):
        diskstate.read_file(str(f), 10)


# -- the key covers the headers ---------------------------------------------------------------
def _header(d: Path, value: int) -> None:
    (d / "consts.h").write_text(f"#define VALUE {value}\n")


@pytest.mark.parametrize("how", ["include_dirs", "-I", "--include-path"])
def test_editing_a_header_compiles_anew(cache, tmp_path, how):
    inc = tmp_path / "inc"
    inc.mkdir()
    kw = ({"include_dirs": [str(inc)]} if how == "include_dirs" else
          {"options": [f"{how}={inc}" if how.startswith("--") else f"-I{inc}"]})
    _header(inc, 1234567)
    first = _build(USES_HEADER, **kw)
    assert b"1234567" in first.ptx and first.key
    assert _build(USES_HEADER, **kw).cached == "memory"
    _header(inc, 7654321)                      # same size, same name: only the contents differ
    second = _build(USES_HEADER, **kw)
    assert second.cached == "" and b"7654321" in second.ptx and b"1234567" not in second.ptx
    nvrtc.clear_memory_cache()
    from_disk = _build(USES_HEADER, **kw)
    assert from_disk.cached == "disk" and b"7654321" in from_disk.ptx
    # a header added beside it changes the key too (it could shadow one the source includes)
    (inc / "extra.h").write_text("// nothing\n")
    assert _build(USES_HEADER, **kw).key != second.key


@pytest.mark.parametrize("source, why", [
    ('#define H <consts.h>\n#include H\n' + USES_HEADER.split("\n", 2)[2], "computed"),
    (USES_HEADER.replace("<consts.h>", "<../inc/consts.h>"), "outside"),
])
def test_an_include_the_key_cannot_cover_keeps_the_build_off_the_caches(tmp_path, caplog,
                                                                        source, why):
    inc = tmp_path / "inc"
    inc.mkdir()
    _header(inc, 42)
    out = _build(source, include_dirs=[str(inc)])
    assert out.key == "" and b"42" in out.ptx
    again = _build(source, include_dirs=[str(inc)])
    assert again.cached == ""
    assert any(why in m for m in _refusals(caplog))


def test_a_quoted_include_beside_the_source_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _header(tmp_path, 11)
    source = USES_HEADER.replace("<consts.h>", '"consts.h"')
    assert _build(source).key == ""            # found in the current directory: not covered
    assert _build(source, include_dirs=[str(tmp_path)]).key != ""   # covered once named


def test_a_header_tree_over_the_cap_is_not_cached(tmp_path, monkeypatch):
    inc = tmp_path / "inc"
    inc.mkdir()
    _header(inc, 5)
    (inc / "more.h").write_text("\n")
    monkeypatch.setattr(CC, "_MAX_HEADER_FILES", 2)   # the directory itself and one file
    assert _build(USES_HEADER, include_dirs=[str(inc)]).key == ""
    monkeypatch.setattr(CC, "_MAX_HEADER_FILES", 3)
    assert _build(USES_HEADER, include_dirs=[str(inc)]).key != ""


def test_a_link_cycle_in_an_include_dir_ends(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    _header(inc, 9)
    (inc / "loop").symlink_to(inc)
    out = _finishes(lambda: _build(USES_HEADER, include_dirs=[str(inc)]))
    assert out.key and b"9" in out.ptx


# -- bounds ----------------------------------------------------------------------------------
def test_the_image_cache_is_an_lru_bounded_by_count(cache, monkeypatch):
    monkeypatch.setattr(CC, "_images", CC._Lru(2, 1 << 30))
    a, b = _build(), _build(OTHER)
    assert _build().cached == "memory"                   # a is now the most recently used
    c = _build(SAXPY + "\n// c")
    assert len(CC._images) == 2
    assert c.key in CC._images and a.key in CC._images and b.key not in CC._images
    assert _build(OTHER).cached == "disk"                # evicted from memory, not from disk


def test_the_image_cache_is_bounded_by_bytes(cache, monkeypatch):
    one = _build()
    size = len(one.image)
    monkeypatch.setattr(CC, "_images", CC._Lru(100, size + size // 2))
    nvrtc.clear_memory_cache()
    _build()
    _build(SAXPY + "\n// other")
    assert len(CC._images) == 1 and CC._images.nbytes <= size + size // 2


class _FakeModule:
    def __init__(self):
        self.closed = False
        self.close_calls = 0

    def close(self):
        self.close_calls += 1
        self.closed = True


def test_the_module_cache_is_an_lru_that_never_unloads(monkeypatch):
    monkeypatch.setattr(CC, "_modules", CC._Lru(2, 1000))
    mods = [_FakeModule() for _ in range(4)]
    for i, m in enumerate(mods[:3]):
        CC.keep_module(f"k{i}", 0, m, 10)
    assert CC.loaded_module("k0", 0) is None             # evicted, least recently used
    assert CC.loaded_module("k2", 0) is mods[2]
    assert all(m.close_calls == 0 for m in mods)         # a holder may still launch it
    CC.keep_module("big", 0, mods[3], 1001)              # over the byte bound: not kept
    assert CC.loaded_module("big", 0) is None and len(CC._modules) == 2
    mods[2].closed = True                                # closed by its holder
    assert CC.loaded_module("k2", 0) is None


def test_the_default_bounds_are_finite():
    assert 0 < CC._images.max_items < 10_000 and 0 < CC._images.max_bytes <= 1 << 30
    assert 0 < CC._modules.max_items < 10_000 and 0 < CC._modules.max_bytes <= 1 << 30


# -- pruning the disk cache -------------------------------------------------------------------
def _aged(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_prune_removes_old_entries_then_the_least_recently_used(tmp_path):
    root = tmp_path / "root"
    for sub in ("ab", "cd", "work"):
        (root / sub).mkdir(parents=True)
    files = {}
    for n, (name, sub, age) in enumerate((("old", "ab", 100 * 86400), ("mid", "cd", 300),
                                          ("new", "ab", 10), ("newest", "cd", 1))):
        files[name] = root / sub / f"{sub[0] * 63}{n}.bin"
        files[name].write_bytes(b"x" * 1000)
        _aged(files[name], age)
    stale = root / "ab" / f".{'a' * 64}.bin.x1y2.tmp"
    stale.write_bytes(b"half")
    _aged(stale, 7200)
    fresh = root / "cd" / f".{'c' * 64}.bin.z3w4.tmp"
    fresh.write_bytes(b"being written")
    # the user's own files in a CUDALIBS_CACHE_DIR they share: never touched, however old
    theirs = [root / "ab" / "firmware.bin", root / "work" / f"{'a' * 64}.bin", root / "x.bin",
              root / "ab" / ".notes.tmp"]
    for f in theirs:
        f.write_bytes(b"y" * 5000)
        _aged(f, 1000 * 86400)
    removed = diskstate.prune(str(root), "[0-9a-f]{2}", "[0-9a-f]{64}[.]bin", max_bytes=2000,
                              max_age=30 * 86400)
    assert removed == 3                                   # old (age), mid (size), the stale tmp
    assert not files["old"].exists() and not files["mid"].exists() and not stale.exists()
    assert files["new"].exists() and files["newest"].exists() and fresh.exists()
    assert all(f.exists() for f in theirs)


def test_writes_prune_the_disk_cache(cache, monkeypatch):
    first = _build()
    size = _entry(cache, first.key).stat().st_size
    _aged(_entry(cache, first.key), 3600)
    monkeypatch.setattr(CC, "_PRUNE_EVERY", 1)
    monkeypatch.setattr(CC, "_DISK_MAX_BYTES", size + size // 2)
    second = _build(SAXPY + "\n// second")
    assert _entries(cache) == [_entry(cache, second.key)]   # the older one made room


def test_a_disk_hit_counts_as_a_use(cache):
    first = _build()
    path = _entry(cache, first.key)
    _aged(path, 10 * 86400)
    nvrtc.clear_memory_cache()
    assert _build().cached == "disk"
    assert time.time() - path.stat().st_mtime < 3600


# -- the helpers' own rules ------------------------------------------------------------------
def test_write_file_replaces_a_link_without_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    link = tmp_path / "state"
    link.symlink_to(victim)
    diskstate.write_file(str(link), b"new")
    assert victim.read_bytes() == b"keep"
    assert not link.is_symlink() and link.read_bytes() == b"new" and _mode(link) == 0o600


def test_check_private_dirs_refuses_links_below_the_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (root / "ab").symlink_to(elsewhere)
    with pytest.raises(diskstate.UnsafePathError, match="not a directory"):
        diskstate.check_private_dirs(str(root / "ab"), str(root))
    with pytest.raises(diskstate.UnsafePathError, match="relative"):
        diskstate.check_private_dirs("ab", "root")
    with pytest.raises(diskstate.UnsafePathError, match="not below"):
        diskstate.check_private_dirs(str(tmp_path), str(root))
