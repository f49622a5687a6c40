"""The tuning store's file: what it accepts back, how it is written (locked, batched, whole),
and that :meth:`Plan.autotune` keeps working whatever is found at its path.

The plans here are test_plan's toy plans (fake candidates and a fake timer, no GPU).
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import pwd
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_plan import _fake_timer, _Freed, _Toy

from cudalibs.driver import diskstate
from cudalibs.runtime import plan as P, tuning as T

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_log_once(monkeypatch):
    """Every test sees its reasons logged, whatever earlier tests logged once."""
    monkeypatch.setattr(T._log, "_said", set())


@pytest.fixture
def path(tmp_path, monkeypatch):
    """The store's file in a private directory, and the process's store forgotten."""
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    p = d / "tuning.json"
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", str(p))
    T._store[0] = None
    yield p
    T._store[0] = None


@pytest.fixture
def timer(monkeypatch):
    """A fake timer (candidate 1 is the fastest); the list counts timings."""
    calls = []
    monkeypatch.setattr(P, "time_candidates", _fake_timer([3.0, 1.0, 2.0], calls))
    monkeypatch.setattr(P, "as_stream", lambda s, d=None: None)
    return calls


def _autotune_twice(calls) -> None:
    """The store works: a plan is timed, and a second one (as in a new process) is not."""
    T._store[0] = None
    p = _Toy(_Freed())
    p.autotune()
    assert p.choice == 1 and calls == [3]
    T.tuning_store().flush()
    T._store[0] = None
    q = _Toy(_Freed())
    q.autotune()
    assert q.choice == 1 and calls == [3]


def _record(key: str, value) -> tuple[str, dict]:
    return T.TuningStore._digest(key), {"key": key, "value": value}


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "cudalibs.runtime" and r.levelno == logging.WARNING]


GOOD = {"candidate": "a1", "index": 1, "ms": 0.5, "names": ["algo0", "algo1"]}
BAD_VALUES = {
    "infinite index": '{"candidate": "a1", "index": Infinity, "ms": 1.0}',
    "nan ms": '{"candidate": "a1", "index": 1, "ms": NaN}',
    "huge ms": '{"candidate": "a1", "index": 1, "ms": 1e400}',
    "huge int ms": '{"candidate": "a1", "index": 1, "ms": ' + "9" * 400 + "}",
    "huge index": '{"candidate": "a1", "index": 123456789012345678901234567890}',
    "negative index": '{"candidate": "a1", "index": -1}',
    "string index": '{"candidate": "a1", "index": "1"}',
    "bool index": '{"candidate": "a1", "index": true}',
    "not a dict": '[1, 2, 3]',
    "deep": '{"candidate": ' + "[" * 100 + "]" * 100 + "}",
    "infinite candidate": '{"candidate": -Infinity, "index": 1}',
    "infinite name": '{"candidate": "a1", "names": ["algo0", NaN]}',
    "huge int candidate": '{"candidate": ' + "1" * 40 + ', "index": 1}',
}


@pytest.mark.parametrize("what", list(BAD_VALUES))
def test_a_bad_record_is_skipped_and_the_rest_kept(path, caplog, what):
    good_digest, good = _record("good", GOOD)
    bad_digest = T.TuningStore._digest("bad")
    path.write_text('{"version": 1, "entries": {"%s": %s, "%s": {"key": "bad", "value": %s}}}'
                    % (good_digest, json.dumps(good), bad_digest, BAD_VALUES[what]))
    st = T.TuningStore(str(path))
    assert st.get("bad") is None
    assert st.get("good") == GOOD
    assert any("skipped 1 invalid record" in m for m in _warnings(caplog))


def test_a_key_with_a_lone_surrogate_is_only_a_key(path, timer):
    digest = T.TuningStore._digest("\ud800")
    path.write_text('{"version": 1, "entries": {"%s": {"key": "\\ud800", "value": {}}, '
                    '"x": {"key": "\\udfff", "value": {}}}}' % digest)
    st = T.TuningStore(str(path))
    assert st.get("\ud800") == {} and len(st) == 1
    _autotune_twice(timer)


def test_a_record_under_the_wrong_digest_or_with_extra_fields_is_skipped(path):
    digest, rec = _record("one", GOOD)
    entries = {digest: dict(rec, extra=1), T.TuningStore._digest("other"): rec}
    path.write_text(json.dumps({"version": 1, "entries": entries}))
    st = T.TuningStore(str(path))
    assert st.get("one") is None and st.get("other") is None and len(st) == 0


@pytest.mark.parametrize("content", [
    b"{not json",
    b"\xff\xfe garbage that is not utf-8",
    b"[" * 100_000 + b"]" * 100_000,                       # RecursionError in the parser
    b'{"version": 1, "entries": ' + b"9" * 5000 + b"}",    # an int over Python's digit limit
    b'{"version": 2, "entries": {}}',
    b'{"version": 1, "entries": []}',
    b"",
])
def test_a_file_that_does_not_parse_is_treated_as_empty_and_autotune_works(path, timer, caplog,
                                                                           content):
    path.write_bytes(content)
    assert T.TuningStore(str(path)).get("anything") is None
    assert _warnings(caplog)                                 # a reason was logged
    _autotune_twice(timer)
    assert json.loads(path.read_text())["version"] == 1     # rewritten, valid


@pytest.mark.parametrize("what", ["infinite index", "huge ms", "deep", "infinite candidate"])
def test_autotune_re_measures_a_bad_stored_record(path, timer, what):
    p = _Toy(_Freed())
    key = p._store_key()
    path.write_text('{"version": 1, "entries": {"%s": {"key": %s, "value": %s}}}'
                    % (T.TuningStore._digest(key), json.dumps(key), BAD_VALUES[what]))
    _autotune_twice(timer)                                   # no OverflowError, re-measured
    assert T.TuningStore(str(path)).get(key)["index"] == 1


def _finishes(fn, timeout=30.0):
    box = {}

    def run():
        box["out"] = fn()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still running after {timeout} s"
    return box.get("out")


def test_a_fifo_at_the_path_neither_hangs_nor_is_read(path, timer):
    os.mkfifo(path)
    assert _finishes(lambda: T.TuningStore(str(path)).get("k")) is None
    _finishes(lambda: _autotune_twice(timer))
    assert path.is_file()                                    # replaced by a real file


def test_a_link_to_a_device_is_not_followed(path, caplog):
    path.symlink_to("/dev/zero")
    assert _finishes(lambda: T.TuningStore(str(path)).get("k")) is None
    assert any("symbolic link" in m for m in _warnings(caplog))


def test_an_oversize_file_is_not_read(path, monkeypatch, caplog):
    st = T.TuningStore(str(path))
    st.put("k", GOOD)
    monkeypatch.setattr(T, "MAX_FILE_BYTES", path.stat().st_size - 1)
    assert T.TuningStore(str(path)).get("k") is None
    assert any("over the cap" in m for m in _warnings(caplog))


def test_a_write_keeps_the_file_under_the_cap_dropping_the_oldest(path, monkeypatch):
    monkeypatch.setattr(T, "MAX_FILE_BYTES", 2000)
    st = T.TuningStore(str(path))
    for i in range(60):
        st.put(f"k{i}", GOOD)
    st.flush()
    assert path.stat().st_size <= 2000
    fresh = T.TuningStore(str(path))
    assert fresh.get("k59") == GOOD and fresh.get("k0") is None


# -- the directory -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", [0o777, 0o770])
def test_a_directory_others_may_write_keeps_memory_only(path, caplog, mode):
    path.parent.chmod(mode)
    st = T.TuningStore(str(path))
    st.put("k", GOOD)
    assert st.get("k") == GOOD
    assert list(path.parent.iterdir()) == []                 # no file, no lock, no temporary
    assert any("writable" in m for m in _warnings(caplog))
    path.parent.chmod(0o700)
    st.put("k2", GOOD)                                       # a private directory again
    st.flush()
    assert T.TuningStore(str(path)).get("k2") == GOOD
    path.parent.chmod(mode)                                  # planted results are not read
    assert T.TuningStore(str(path)).get("k2") is None


def test_a_directory_of_another_user_keeps_memory_only(path, monkeypatch, caplog):
    me = os.geteuid()
    monkeypatch.setattr(diskstate, "current_uid", lambda: me + 1)
    T.TuningStore(str(path)).put("k", GOOD)
    assert not path.exists()
    assert any("not to this user" in m for m in _warnings(caplog))


def test_the_directory_and_lock_are_made_private_whatever_the_umask(tmp_path, monkeypatch):
    p = tmp_path / "new" / "dir" / "tuning.json"
    old = os.umask(0)
    try:
        T.TuningStore(str(p)).put("k", GOOD)
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(p.parent.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(Path(f"{p}.lock").stat().st_mode) == 0o600
    assert stat.S_IMODE(p.stat().st_mode) == 0o600


def test_a_relative_path_keeps_memory_only(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", "tuning.json")
    T._store[0] = None
    st = T.tuning_store()
    assert st.path is None
    st.put("k", GOOD)
    assert list(tmp_path.iterdir()) == []
    assert any("relative" in m for m in _warnings(caplog))
    T._store[0] = None


def test_no_home_and_no_passwd_entry_keeps_the_store_in_memory(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    for var in ("CUDALIBS_TUNING_CACHE", "CUDALIBS_CACHE_DIR", "XDG_CACHE_HOME", "HOME"):
        monkeypatch.delenv(var, raising=False)

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    T._store[0] = None
    st = T.tuning_store()
    assert st.path is None
    st.put("k", GOOD)
    assert st.get("k") == GOOD and list(tmp_path.iterdir()) == []     # no ./~/.cache/...
    assert any("no home directory" in m for m in _warnings(caplog))
    T._store[0] = None


def test_a_relative_cache_dir_keeps_the_store_in_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDALIBS_TUNING_CACHE", raising=False)
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", "cachedir")
    assert T._default_store_path() is None
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", str(tmp_path / "abs"))
    assert T._default_store_path() == str(tmp_path / "abs" / "tuning.json")


# -- writing: whole, locked, batched --------------------------------------------------------
def test_a_failed_write_leaves_no_temporary_and_the_old_file(path, monkeypatch):
    T.TuningStore(str(path)).put("old", GOOD)
    before = path.read_bytes()

    def fail(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.warns(RuntimeWarning, match="cannot write the tuning store"):
        T.TuningStore(str(path)).put("new", GOOD)
    monkeypatch.undo()
    assert sorted(p.name for p in path.parent.iterdir()) == ["tuning.json", "tuning.json.lock"]
    assert path.read_bytes() == before


def test_a_link_at_the_path_is_replaced_not_followed(path, tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("precious")
    path.symlink_to(victim)
    T.TuningStore(str(path)).put("k", GOOD)
    assert victim.read_text() == "precious" and not path.is_symlink()
    assert T.TuningStore(str(path)).get("k") == GOOD


def test_writes_are_batched(path, monkeypatch):
    writes = []
    real = diskstate.write_file

    def counting(p, data):
        writes.append(p)
        real(p, data)

    monkeypatch.setattr(T.diskstate, "write_file", counting)
    st = T.TuningStore(str(path))
    for i in range(100):
        st.put(f"k{i}", GOOD)
    # the first write at once, then one per FLUSH_RECORDS records, not one per record
    assert 1 <= len(writes) <= 1 + 100 // T.FLUSH_RECORDS
    assert T.TuningStore(str(path)).get("k0") == GOOD
    st.flush()
    fresh = T.TuningStore(str(path))
    assert len(fresh) == 100 and fresh.get("k99") == GOOD


def test_a_waiting_record_is_written_within_flush_seconds(path, monkeypatch):
    monkeypatch.setattr(T, "FLUSH_SECONDS", 0.2)
    st = T.TuningStore(str(path))
    st.put("first", GOOD)                          # written at once
    st.put("second", GOOD)                         # waits for the batch
    assert T.TuningStore(str(path)).get("second") is None
    deadline = time.monotonic() + 10
    while T.TuningStore(str(path)).get("second") is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert T.TuningStore(str(path)).get("second") == GOOD


def test_waiting_records_are_written_at_exit(tmp_path):
    p = tmp_path / "t.json"
    code = ("from cudalibs.runtime import tuning as T\n"
            "st = T.TuningStore(%r)\n"
            "for i in range(5):\n"
            "    st.put('k%%d' %% i, {'index': i})\n" % str(p))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=ROOT,
                   env=dict(os.environ, PYTHONPATH=str(ROOT)))
    st = T.TuningStore(str(p))
    assert [st.get(f"k{i}") for i in range(5)] == [{"index": i} for i in range(5)]


def _writer(path: str, n: int, i: int) -> None:
    T.FLUSH_RECORDS = 1            # every put rewrites the file: the most contention there is
    st = T.TuningStore(path)
    for j in range(n):
        st.put(f"p{i}-{j}", {"candidate": i, "index": j, "ms": 1.0})
    st.flush()


def test_concurrent_processes_keep_every_record(path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), 25, i)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 8
    st = T.TuningStore(str(path))
    assert len(st) == 200
    assert all(st.get(f"p{i}-{j}") == {"candidate": i, "index": j, "ms": 1.0}
               for i in range(8) for j in range(25))


def test_clear_removes_waiting_records_too(path):
    st = T.TuningStore(str(path))
    st.put("a", GOOD)
    st.put("b", GOOD)                              # waiting
    st.clear()
    st.flush()
    assert not path.exists() and len(T.TuningStore(str(path))) == 0


def test_a_value_that_is_not_plain_json_stays_in_memory(path):
    st = T.TuningStore(str(path))
    st.put("inf", {"index": 1, "ms": float("inf")})
    assert st.get("inf") == {"index": 1, "ms": float("inf")}
    st.flush()
    assert T.TuningStore(str(path)).get("inf") is None


def test_a_store_merges_what_another_wrote_after_its_own_write(path):
    a, b = T.TuningStore(str(path)), T.TuningStore(str(path))
    a.put("one", GOOD)                             # written at once
    b.put("two", GOOD)                             # another writer replaces the file
    a.put("three", GOOD)                           # waits for a's batch
    a.flush()
    fresh = T.TuningStore(str(path))
    assert [fresh.get(k) for k in ("one", "two", "three")] == [GOOD] * 3


def test_a_link_at_the_lock_path_is_refused(path, tmp_path, caplog):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    Path(f"{path}.lock").symlink_to(victim)
    T.TuningStore(str(path)).put("k", GOOD)
    assert victim.read_text() == "precious" and not path.exists()
    assert any("symbolic link" in m for m in _warnings(caplog))
