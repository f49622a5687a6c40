"""The unique-id exchange of ``Communicator.from_store`` / ``from_mpi`` without a GPU: a
torch.distributed-like store over a dict (threads as ranks), a recording stand-in for an mpi4py
communicator, and a communicator class that records its constructor's arguments."""

from __future__ import annotations

import os
import threading
import time

import pytest

from cudalibs import nccl
from cudalibs.errors import CudaLibsError
from cudalibs.nccl import _base, comm as C

ID_BYTES = 128


class Recorded(C.Communicator):
    """Records the constructor's arguments instead of creating a communicator."""

    def __init__(self, nranks, rank, uid, device=None, *, blocking=True, timeout=None):
        self.args = (nranks, rank, uid, device, blocking, timeout)

    @property
    def uid(self):
        return self.args[2]


class FakeStore:
    """``torch.distributed.Store``'s methods over a dict, safe across threads: ``get`` waits
    for its key, ``add`` keeps its count as text as torch does."""

    def __init__(self):
        self.data = {}
        self.deleted = []
        self.cond = threading.Condition()

    def set(self, key, value):
        with self.cond:
            self.data[key] = value
            self.cond.notify_all()

    def get(self, key):
        with self.cond:
            if not self.cond.wait_for(lambda: key in self.data, timeout=10):
                raise RuntimeError(f"store timeout waiting for {key}")
            return self.data[key]

    def add(self, key, amount):
        with self.cond:
            value = int(self.data.get(key, b"0")) + amount
            self.data[key] = str(value).encode()
            self.cond.notify_all()
            return value

    def check(self, keys):
        with self.cond:
            return all(k in self.data for k in keys)

    def wait(self, keys, timeout):
        with self.cond:
            if not self.cond.wait_for(lambda: all(k in self.data for k in keys),
                                      timeout=timeout.total_seconds()):
                raise RuntimeError("Wait timeout")

    def delete_key(self, key):
        with self.cond:
            self.deleted.append(key)
            return self.data.pop(key, None) is not None

    def ids(self):
        """The keys that hold an id now (not the counters)."""
        return sorted(k for k in self.data if not k.endswith("/read") and "/seq/" not in k)


class WaitOnlyStore(FakeStore):
    check = None      # a store with wait() but no check()


@pytest.fixture(autouse=True)
def random_ids(monkeypatch):
    """Ids made without NCCL: fresh random bytes each time, as ncclGetUniqueId's are."""
    monkeypatch.setattr(_base, "unique_id_bytes", lambda: os.urandom(ID_BYTES))


def _ranks(store, world, *, rounds=1, key="k", **kw):
    """Run ``rounds`` successive from_store calls on each of ``world`` rank threads; returns
    ``{rank: [communicator, ...]}``."""
    out = {r: [] for r in range(world)}
    errors = []

    def rank(r):
        try:
            for _ in range(rounds):
                out[r].append(Recorded.from_store(store, r, world, device=r, key=key, **kw))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not errors, errors
    return out


def test_successive_communicators_get_fresh_ids():
    store = FakeStore()
    out = _ranks(store, 3, rounds=3)
    for n in range(3):
        uids = {out[r][n].uid for r in range(3)}
        assert len(uids) == 1                                   # every rank agrees
        assert [out[r][n].args[:2] for r in range(3)] == [(3, 0), (3, 1), (3, 2)]
    assert len({out[0][n].uid for n in range(3)}) == 3          # each communicator its own
    assert store.ids() == []                                    # every id deleted once read
    assert {"k/1", "k/2", "k/3", "k/1/read", "k/2/read", "k/3/read"} <= set(store.deleted)


def test_a_rank_early_for_the_next_communicator_waits_for_its_id():
    """Rank 1 asks for the second id before rank 0 has made it: it must wait for that id,
    not read the first one again."""
    store = FakeStore()
    first = _ranks(store, 2)
    got = []
    t = threading.Thread(target=lambda: got.append(
        Recorded.from_store(store, 1, 2, device=1, key="k")))
    t.start()
    time.sleep(0.2)
    assert t.is_alive() and got == []            # still waiting: nothing stale was read
    second0 = Recorded.from_store(store, 0, 2, device=0, key="k")
    t.join(10)
    assert got and got[0].uid == second0.uid != first[0][0].uid
    assert store.ids() == []


def test_id_key_is_deleted_after_the_last_rank_reads_it():
    store = FakeStore()
    r0 = Recorded.from_store(store, 0, 2, device=0, key="p")
    assert store.ids() == ["p/1"] and nccl.UniqueId(store.data["p/1"]) == r0.uid
    r1 = Recorded.from_store(store, 1, 2, device=1, key="p")
    assert r1.uid == r0.uid and store.ids() == [] and "p/1" in store.deleted


@pytest.mark.parametrize("store_cls", [FakeStore, WaitOnlyStore], ids=["check", "wait"])
def test_missing_rank0_id_times_out(store_cls):
    store, timeout = store_cls(), 0.3
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="did not arrive under the store key 'k/1' within"):
        Recorded.from_store(store, 1, 2, device=1, key="k", blocking=False, timeout=timeout)
    # At the timeout (a store's own wait may end up to 0.05 s early), and bounded with room
    # for a loaded machine's scheduling: a wait without the timeout would not end at all.
    assert timeout - 0.05 <= time.monotonic() - t0 < timeout + 10


def test_timeout_needs_a_store_that_can_wait():
    class NoWait(FakeStore):
        check = None
        wait = None

    with pytest.raises(TypeError, match="check\\(\\) or wait\\(\\)"):
        Recorded.from_store(NoWait(), 1, 2, device=1, blocking=False, timeout=1)


@pytest.mark.parametrize("value,error,text", [
    (b"short", ValueError, "is 5 bytes; an NCCL unique id is 128 bytes"),
    (b"x" * 129, ValueError, "is 129 bytes"),
    (128, TypeError, "of type int, not the 128 bytes"),    # bytes(128) would be 128 zeros
    ("x" * 128, TypeError, "of type str"),
])
def test_malformed_id_is_refused(value, error, text):
    store = FakeStore()
    store.set("k/1", value)
    with pytest.raises(error, match=text):
        Recorded.from_store(store, 1, 2, device=1, key="k")


def test_store_needs_set_get_add():
    class SetGet:
        def set(self, key, value):
            pass

        def get(self, key):
            return b""

    with pytest.raises(TypeError, match="lacks add\\(\\)"):
        Recorded.from_store(SetGet(), 0, 2, device=0)
    with pytest.raises(TypeError, match="lacks set\\(\\), get\\(\\), add\\(\\)"):
        Recorded.from_store(object(), 0, 2, device=0)
    with pytest.raises(ValueError, match="out of range"):
        Recorded.from_store(FakeStore(), 2, 2, device=0)


# -- MPI --------------------------------------------------------------------------------------
class FakeMpi:
    """One rank of a two-rank mpi4py communicator: ``Bcast`` fills the buffer with what rank
    0 broadcast (rank 0 must call first); the pickling ``bcast`` must not be used."""

    def __init__(self, rank, shared):
        self.rank, self.shared, self.calls = rank, shared, []

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return 2

    def Bcast(self, buf, root=0):
        self.calls.append(("Bcast", type(buf).__name__, len(buf), root))
        if self.rank == root:
            self.shared.append(bytes(buf))
        else:
            buf[:] = self.shared[0]

    def bcast(self, obj, root=0):
        raise AssertionError("from_mpi must broadcast a byte buffer, not a pickle")


def test_from_mpi_broadcasts_a_byte_buffer():
    shared = []
    m0, m1 = FakeMpi(0, shared), FakeMpi(1, shared)
    r0 = Recorded.from_mpi(m0, device=0)
    r1 = Recorded.from_mpi(m1, device=1)
    assert r0.uid == r1.uid and bytes(r0.uid) == shared[0]
    assert r0.args[:2] == (2, 0) and r1.args[:2] == (2, 1)
    assert m0.calls == m1.calls == [("Bcast", "bytearray", ID_BYTES, 0)]


def test_from_mpi_rank0_failure_reaches_the_others(monkeypatch):
    def fail():
        raise RuntimeError("no network interface")

    monkeypatch.setattr(_base, "unique_id_bytes", fail)
    shared = []
    with pytest.raises(RuntimeError, match="no network interface"):
        Recorded.from_mpi(FakeMpi(0, shared), device=0)
    assert shared == [bytes(ID_BYTES)]              # the others were not left waiting
    with pytest.raises(CudaLibsError, match="rank 0 could not make the NCCL unique id"):
        Recorded.from_mpi(FakeMpi(1, shared), device=1)


def test_from_mpi_needs_Bcast():
    class Pickling:
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 1

        def bcast(self, obj, root=0):
            return obj

    with pytest.raises(TypeError, match="Bcast"):
        Recorded.from_mpi(Pickling(), device=0)
