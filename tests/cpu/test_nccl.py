"""NCCL wrappers without a GPU: unique ids, argument checks, the C calls each method makes,
lifetime, non-blocking polling with its abort-on-timeout path, and the bootstrap helpers.

Methods that need a communicator run against a recording stand-in for the NCCL library
(``FakeNccl``) and arrays that point at nothing (``fake_array``): every argument check must
raise before a C call, and the calls that do happen are compared argument by argument.
"""

import ctypes
import gc
import os
import pickle
import warnings

os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")  # before NCCL is first loaded

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from cudalibs import dtypes, errors, nccl  # noqa: E402
from cudalibs.driver.array import DeviceArray  # noqa: E402
from cudalibs.nccl import _lib, bootstrap, collectives as CO, comm as C  # noqa: E402

IN_PROGRESS = 7


# ----------------------------------------------------------------------------- stand-ins
class FakeDevice:
    """Enough of a Device for the communicator's checks (context entry does nothing)."""

    def __init__(self, ordinal, cc=(9, 0)):
        self.ordinal = ordinal
        self.compute_capability = cc

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def __repr__(self):
        return f"<FakeDevice {self.ordinal}>"


class FakeNccl:
    """Records every call; ``status[name]`` sets a return value, ``async_states`` feeds
    ncclCommGetAsyncError one state per poll (then ``final_state``)."""

    def __init__(self):
        self.calls = []
        self.status = {}
        self.async_states = []
        self.final_state = 0

    def names(self):
        return [c[0] for c in self.calls]

    def __getattr__(self, name):
        if not name.startswith("nccl"):
            raise AttributeError(name)

        def fn(*args):
            self.calls.append((name, args))
            if name == "ncclCommGetAsyncError":
                args[1]._obj.value = (self.async_states.pop(0) if self.async_states
                                      else self.final_state)
            if name in ("ncclGetLastError", "ncclGetErrorString"):
                return b"fake last error: peer 1 never arrived"
            if name == "ncclGetVersion":
                args[0]._obj.value = 22809
            return self.status.get(name, 0)

        return fn


class NoNccl:
    """Fails the test on any NCCL call: checks must come first."""

    def __getattr__(self, name):
        raise AssertionError(f"{name} was called before the arguments were checked")


@pytest.fixture
def fake(monkeypatch):
    lib = FakeNccl()
    monkeypatch.setattr(_lib, "get", lambda: lib)
    monkeypatch.setattr(CO, "_version_cache", [(2, 28, 9)])
    CO._type_cache.clear()
    yield lib
    CO._type_cache.clear()


DEV0, DEV1 = FakeDevice(0), FakeDevice(1)


def make_comm(rank=0, size=2, device=DEV0, blocking=True, timeout=None):
    raw = ctypes.cast(ctypes.c_void_p(0xC0FFEE0), _lib.ncclComm_t)
    c = C.Communicator._from_raw(raw, blocking, timeout, device)
    c._rank, c._size, c._state = rank, size, "open"
    return c


_next_ptr = [0x7F0000000000]


def fake_array(shape, dtype=np.float32, device=DEV0, strides=None, ptr=None):
    dt = dtypes.lookup(dtype)
    shape = tuple(shape)
    if strides is None:
        strides, acc = [], dt.itemsize
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
        strides = tuple(strides)
    if ptr is None:
        ptr = _next_ptr[0]
        _next_ptr[0] += 1 << 20
    return DeviceArray._view(ptr, shape, strides, dt, device, None, None)


def handle(c):
    return ctypes.cast(c._comm, ctypes.c_void_p).value


def call_args(args):
    """ctypes-free view of recorded arguments: pointers and streams become ints."""
    out = []
    for a in args:
        if isinstance(a, ctypes._Pointer) or isinstance(a, ctypes.c_void_p):
            out.append(ctypes.cast(a, ctypes.c_void_p).value or 0)
        else:
            out.append(a)
    return out


# ----------------------------------------------------------------------------- UniqueId
def test_unique_id_roundtrip():
    a, b = nccl.UniqueId(), nccl.UniqueId()
    assert len(a.bytes) == 128 and a != b
    assert nccl.UniqueId.from_bytes(a.bytes) == a and hash(nccl.UniqueId(a.bytes)) == hash(a)
    assert pickle.loads(pickle.dumps(a)) == a
    assert bytes(a._struct()) == a.bytes
    assert "UniqueId" in repr(a)


def test_unique_id_is_bytes_like():
    a = nccl.UniqueId()
    raw = bytes(a)
    assert raw == a.bytes and len(raw) == 128 and type(raw) is bytes
    assert nccl.UniqueId.from_bytes(bytes(a)) == a
    assert nccl.UniqueId(bytearray(raw)) == a and nccl.UniqueId(memoryview(raw)) == a
    assert nccl.UniqueId(a) == a
    b = pickle.loads(pickle.dumps(a))
    assert b == a and bytes(b) == raw and type(b) is nccl.UniqueId
    # The repr names the id by a short digest: equal ids read the same, others differ, and
    # the 128 raw bytes never flood a log line.
    assert repr(nccl.UniqueId(raw)) == repr(a) != repr(nccl.UniqueId())
    assert repr(a).startswith("<nccl.UniqueId") and len(repr(a)) < 60
    assert a != raw and a != None  # noqa: E711 - an id equals only an id


@pytest.mark.parametrize("bad, exc", [(b"x" * 127, ValueError), (b"x" * 129, ValueError),
                                      (b"", ValueError), ("x" * 128, TypeError),
                                      (128, TypeError)])
def test_unique_id_rejects(bad, exc):
    with pytest.raises(exc, match="128 bytes"):
        nccl.UniqueId(bad)


# ----------------------------------------------------------------------------- errors
def test_timeout_error_is_nccl_and_timeout_and_pickles():
    e = nccl.NcclTimeoutError(IN_PROGRESS, "ncclCommInitRankConfig", "not finished after 1 s",
                              "peer 1 never arrived")
    assert isinstance(e, errors.NcclError) and isinstance(e, TimeoutError)
    assert isinstance(e, errors.CudaLibsError)
    e2 = pickle.loads(pickle.dumps(e))
    assert type(e2) is nccl.NcclTimeoutError and str(e2) == str(e)
    assert "ncclInProgress" in str(e) and "never arrived" in str(e)


def test_status_maps_to_nccl_error():
    from cudalibs.nccl._base import raise_for

    with pytest.raises(errors.NcclError) as info:
        raise_for(4, "ncclAllReduce")
    assert info.value.name == "ncclInvalidArgument" and info.value.function == "ncclAllReduce"
    assert info.value.message  # ncclGetErrorString of the real library


# ----------------------------------------------------------------------------- constructor
@pytest.mark.parametrize("args, kwargs, exc, match", [
    ((2, 2, b"x" * 128), {}, ValueError, "rank 2 is out of range"),
    ((2, -1, b"x" * 128), {}, ValueError, "out of range"),
    ((0, 0, b"x" * 128), {}, ValueError, "at least 1"),
    ((2.0, 0, b"x" * 128), {}, TypeError, "nranks must be an int"),
    ((2, True, b"x" * 128), {}, TypeError, "rank must be an int"),
    ((2, 0, b"x" * 100), {}, ValueError, "128 bytes"),
    ((2, 0, b"x" * 128), {"timeout": 1.0}, ValueError, "blocking=False"),
    ((2, 0, b"x" * 128), {"blocking": False, "timeout": 0}, ValueError, "positive"),
])
def test_constructor_checks_before_any_call(monkeypatch, args, kwargs, exc, match):
    monkeypatch.setattr(_lib, "get", lambda: NoNccl())
    with pytest.raises(exc, match=match):
        nccl.Communicator(*args, **kwargs)


def test_init_all_checks(monkeypatch):
    monkeypatch.setattr(_lib, "get", lambda: NoNccl())
    monkeypatch.setattr(C, "as_device", lambda d: {0: DEV0, 1: DEV1}[int(d)])
    with pytest.raises(ValueError, match="twice"):
        nccl.Communicator.init_all([0, 1, 0])
    with pytest.raises(ValueError, match="at least one"):
        nccl.Communicator.init_all([])


# ----------------------------------------------------------------------------- collectives
def test_all_reduce_call(fake):
    c = make_comm()
    a, b = fake_array((4, 5)), fake_array((20,))
    assert c.all_reduce(a, out=b, op="max") is b
    (name, args), = fake.calls
    assert name == "ncclAllReduce"
    assert call_args(args) == [a.ptr, b.ptr, 20, _lib.ncclFloat32, _lib.ncclMax, handle(c), 0]
    fake.calls.clear()
    c.all_reduce(a, out=a, op="avg")
    assert call_args(fake.calls[0][1])[:5] == [a.ptr, a.ptr, 20, _lib.ncclFloat32, _lib.ncclAvg]


@pytest.mark.parametrize("dtype, code", [(np.float64, 8), (np.float16, 6), (np.int8, 0),
                                         (np.uint8, 1), (np.int32, 2), (np.uint32, 3),
                                         (np.int64, 4), (np.uint64, 5),
                                         (dtypes.bfloat16, 9), (dtypes.float8_e4m3fn, 10),
                                         (dtypes.float8_e5m2, 11)])
def test_dtype_codes(fake, dtype, code):
    c = make_comm()
    a = fake_array((3,), dtype)
    c.all_reduce(a, out=a)
    assert fake.calls[0][1][3] == code


def test_unsupported_types_and_versions(fake, monkeypatch):
    c = make_comm()
    with pytest.raises(TypeError, match="NCCL has no int16"):
        c.all_reduce(fake_array((3,), np.int16), out=None)
    old = make_comm(device=FakeDevice(0, cc=(8, 0)))
    a8 = fake_array((3,), dtypes.float8_e4m3fn, device=old._device)
    with pytest.raises(TypeError, match="sm_90"):
        old.all_reduce(a8, out=a8)
    monkeypatch.setattr(CO, "_version_cache", [(2, 19, 3)])
    CO._type_cache.clear()
    f8 = fake_array((3,), dtypes.float8_e5m2)
    with pytest.raises(TypeError, match="2.24"):
        c.all_reduce(f8, out=f8)
    monkeypatch.setattr(CO, "_version_cache", [(2, 9, 9)])
    CO._type_cache.clear()
    bf = fake_array((3,), dtypes.bfloat16)
    with pytest.raises(TypeError, match="2.10"):
        c.all_reduce(bf, out=bf)
    f = fake_array((3,))
    with pytest.raises(errors.CudaLibsError, match="avg"):
        c.all_reduce(f, out=f, op="avg")
    assert fake.calls == []


def test_bad_buffers_raise_before_calls(fake):
    c = make_comm()
    a = fake_array((4, 4))
    with pytest.raises(ValueError, match="device 1"):
        c.all_reduce(fake_array((16,), device=DEV1), out=a)
    with pytest.raises(ValueError, match="C-contiguous"):
        c.all_reduce(fake_array((4, 2), strides=(32, 4)), out=fake_array((8,)))
    with pytest.raises(TypeError, match="dtype"):
        c.all_reduce(a, out=fake_array((16,), np.float64))
    with pytest.raises(ValueError, match="15 elements"):
        c.all_reduce(a, out=fake_array((15,)))
    with pytest.raises(ValueError, match="unknown reduction"):
        c.all_reduce(a, out=a, op="mean")
    with pytest.raises(ValueError, match="unknown reduction"):
        c.all_reduce(a, out=a, op=9)
    with pytest.raises(ValueError, match="overlap"):
        c.all_reduce(a, out=fake_array((16,), ptr=a.ptr + 4))
    with pytest.raises(TypeError, match="to_device"):
        c.all_reduce(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="out of range"):
        c.broadcast(a, out=a, root=2)
    with pytest.raises(ValueError, match="out of range"):
        c.reduce(a, out=a, root=-1)
    with pytest.raises(ValueError, match="peer 5"):
        c.send(a, 5)
    with pytest.raises(ValueError, match="out of range"):
        c.recv(a, 2)
    assert fake.calls == []


def test_closed_buffer(fake):
    class DeadBuffer:
        _ptr = None

    c = make_comm()
    dt = dtypes.lookup(np.float32)
    a = DeviceArray._view(0x1000, (4,), (4,), dt, DEV0, DeadBuffer(), None)
    with pytest.raises(errors.ClosedError):
        c.all_reduce(a, out=fake_array((4,)))
    assert fake.calls == []


def test_broadcast_and_reduce_calls(fake):
    c = make_comm(rank=1, size=2)
    x, y = fake_array((6,)), fake_array((6,))
    assert c.broadcast(None, out=y, root=0) is y
    assert call_args(fake.calls[-1][1]) == [y.ptr, y.ptr, 6, 7, 0, handle(c), 0]
    c.broadcast(x, out=y, root=1)
    assert call_args(fake.calls[-1][1]) == [x.ptr, y.ptr, 6, 7, 1, handle(c), 0]
    with pytest.raises(ValueError, match="root rank must pass send"):
        c.broadcast(None, out=y, root=1)
    # Not the root: nothing is allocated or returned, and NCCL gets a valid pointer anyway.
    assert c.reduce(x, op="prod", root=0) is None
    assert call_args(fake.calls[-1][1]) == [x.ptr, x.ptr, 6, 7, _lib.ncclProd, 0, handle(c), 0]
    assert c.reduce(x, out=y, root=1) is y
    assert call_args(fake.calls[-1][1])[:2] == [x.ptr, y.ptr]


def test_all_gather_and_reduce_scatter_calls(fake):
    c = make_comm(rank=1, size=2)
    x, out = fake_array((3, 2)), fake_array((6, 2))
    assert c.all_gather(x, out=out) is out
    assert call_args(fake.calls[-1][1]) == [x.ptr, out.ptr, 6, 7, handle(c), 0]
    with pytest.raises(ValueError, match="expected 12"):
        c.all_gather(x, out=fake_array((6,)))
    # In place: this rank's slice of out.
    inplace = fake_array((3, 2), ptr=out.ptr + 1 * x.nbytes)
    c.all_gather(inplace, out=out)
    with pytest.raises(ValueError, match="slice"):
        c.all_gather(fake_array((3, 2), ptr=out.ptr + 4), out=out)
    r = fake_array((3, 2))
    assert c.reduce_scatter(out, out=r, op="min") is r
    assert call_args(fake.calls[-1][1]) == [out.ptr, r.ptr, 6, 7, _lib.ncclMin, handle(c), 0]
    with pytest.raises(ValueError, match="not a multiple"):
        c.reduce_scatter(fake_array((5,)), out=fake_array((2,)))
    with pytest.raises(ValueError, match="expected 6"):
        c.reduce_scatter(out, out=fake_array((5,)))
    c.reduce_scatter(out, out=fake_array((3, 2), ptr=out.ptr + r.nbytes))  # in place


def test_send_recv_and_all_to_all_calls(fake):
    c = make_comm(rank=0, size=2)
    x, y = fake_array((8,), np.int32), fake_array((8,), np.int32)
    c.send(x, 1)
    assert call_args(fake.calls[-1][1]) == [x.ptr, 8, _lib.ncclInt32, 1, handle(c), 0]
    assert c.recv(y, 1) is y
    fake.calls.clear()
    assert c.all_to_all(x, out=y) is y
    assert fake.names() == ["ncclGroupStart", "ncclSend", "ncclRecv", "ncclSend", "ncclRecv",
                            "ncclGroupEnd"]
    sends = [call_args(a) for n, a in fake.calls if n == "ncclSend"]
    recvs = [call_args(a) for n, a in fake.calls if n == "ncclRecv"]
    assert [s[:4] for s in sends] == [[x.ptr, 4, 2, 0], [x.ptr + 16, 4, 2, 1]]
    assert [r[:4] for r in recvs] == [[y.ptr, 4, 2, 0], [y.ptr + 16, 4, 2, 1]]
    with pytest.raises(ValueError, match="in place"):
        c.all_to_all(x, out=x)
    with pytest.raises(ValueError, match="multiple"):
        c.all_to_all(fake_array((3,)), out=fake_array((3,)))


def test_empty_arrays_make_no_call(fake):
    c = make_comm()
    e = fake_array((0, 3))
    assert c.all_reduce(e, out=e) is e
    assert fake.calls == []


def test_failed_status_raises_with_last_error(fake):
    c = make_comm()
    fake.status["ncclAllReduce"] = 4
    a = fake_array((2,))
    with pytest.raises(errors.NcclError, match="ncclInvalidArgument") as info:
        c.all_reduce(a, out=a)
    assert "never arrived" in info.value.detail
    assert not c.closed  # a synchronous error leaves the communicator usable


# ----------------------------------------------------------------------------- lifetime
def test_close_twice_and_use_after_close(fake):
    c = make_comm()
    c.close()
    c.close()
    c.abort()
    assert fake.names() == ["ncclCommFinalize", "ncclCommDestroy"]
    assert c.closed and "closed" in repr(c)
    a = fake_array((2,))
    with pytest.raises(errors.ClosedError, match="closed"):
        c.all_reduce(a, out=a)
    with pytest.raises(errors.ClosedError):
        c.rank


def test_abort(fake):
    c = make_comm()
    c.abort()
    c.abort()
    c.close()
    assert fake.names() == ["ncclCommAbort"]
    with pytest.raises(errors.ClosedError, match="aborted"):
        c.split(0)


def test_context_manager_closes_or_aborts(fake):
    with make_comm():
        pass
    assert fake.names() == ["ncclCommFinalize", "ncclCommDestroy"]
    fake.calls.clear()
    with pytest.raises(KeyError):
        with make_comm():
            raise KeyError("boom")
    assert fake.names() == ["ncclCommAbort"]


@pytest.mark.parametrize("call, op, name", [
    (lambda c, h, d: c.all_reduce(h), "all_reduce", "send"),
    (lambda c, h, d: c.all_reduce(d, out=h), "all_reduce", "out"),
    (lambda c, h, d: c.broadcast(None, out=h, root=1), "broadcast", "out"),
    (lambda c, h, d: c.reduce_scatter(h), "reduce_scatter", "send"),
    (lambda c, h, d: c.send(h, 1), "send", "x"),
    (lambda c, h, d: c.recv(h, 1), "recv", "out"),
    (lambda c, h, d: c.all_to_all(d, out=h), "all_to_all", "out"),
])
def test_host_buffers_get_the_operand_message(fake, call, op, name):
    """Buffers go through the driver's one operand path: the same words as every library,
    and no NCCL call."""
    c = make_comm()
    with pytest.raises(TypeError) as info:
        call(c, np.ones(4, np.float32), fake_array((4,)))
    assert str(info.value) == (f"{op}: {name} is a host numpy array; copy it to the GPU first "
                               "with cudalibs.to_device()")
    assert fake.calls == []
    c.abort()


def test_communicator_uses_the_one_lifetime_base(fake):
    from cudalibs._ffi import Resource

    c = make_comm()
    assert isinstance(c, Resource) and not c.closed
    assert "_finalizer" not in C.Communicator.__slots__   # the base's slot, not a second one
    c.close()
    assert c.closed
    c.close()   # idempotent
    assert fake.names() == ["ncclCommFinalize", "ncclCommDestroy"]


def test_finalizer_only_warns(fake):
    c = make_comm()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del c
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) and "never closed" in str(w.message)
               for w in caught)
    assert fake.calls == []  # no destroy from the garbage collector
    c = make_comm()
    c.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del c
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    assert gc.garbage == []


def test_repr(fake):
    c = make_comm(rank=1, size=4, blocking=False, timeout=2.5)
    text = repr(c)
    assert "rank 1/4" in text and "device 0" in text and "non-blocking, timeout 2.5 s" in text
    c.abort()


# ----------------------------------------------------------------------------- non-blocking
def test_nonblocking_call_is_polled(fake):
    c = make_comm(blocking=False, timeout=5.0)
    fake.status["ncclAllReduce"] = IN_PROGRESS
    fake.async_states = [IN_PROGRESS, IN_PROGRESS, 0]
    a = fake_array((2,))
    c.all_reduce(a, out=a)
    assert fake.names().count("ncclCommGetAsyncError") == 3
    assert not c.closed
    c.abort()


def test_nonblocking_timeout_aborts(fake):
    import time

    timeout = 0.05
    c = make_comm(blocking=False, timeout=timeout)
    fake.status["ncclAllReduce"] = IN_PROGRESS
    fake.final_state = IN_PROGRESS  # the peer never shows up
    a = fake_array((2,))
    t0 = time.monotonic()
    with pytest.raises(nccl.NcclTimeoutError, match="never arrived") as info:
        c.all_reduce(a, out=a)
    # Not before the timeout; and bounded, with room for a loaded machine's scheduling (a
    # wait without the timeout would not end at all).
    assert timeout <= time.monotonic() - t0 < timeout + 10
    assert info.value.function == "ncclAllReduce" and isinstance(info.value, TimeoutError)
    assert "ncclCommAbort" in fake.names() and c.closed
    with pytest.raises(errors.ClosedError, match="aborted"):
        c.all_reduce(a, out=a)
    c.close()  # harmless after the abort


def test_nonblocking_async_error_aborts(fake):
    c = make_comm(blocking=False, timeout=5.0)
    fake.status["ncclAllReduce"] = IN_PROGRESS
    fake.async_states = [IN_PROGRESS, 6]  # ncclRemoteError
    a = fake_array((2,))
    with pytest.raises(errors.NcclError, match="ncclRemoteError"):
        c.all_reduce(a, out=a)
    assert "ncclCommAbort" in fake.names() and c.closed


def test_sync_timeout(fake, monkeypatch):
    c = make_comm(blocking=False, timeout=0.05)

    class Busy:
        device = None
        raw = None

        def query(self):
            return False

    monkeypatch.setattr(C, "as_stream", lambda s, d=None: Busy())
    fake.final_state = 0
    with pytest.raises(nccl.NcclTimeoutError, match="stream work"):
        c.sync()
    assert c.closed and fake.names()[-1] == "ncclCommAbort"


# ----------------------------------------------------------------------------- groups
def test_group_nests_and_polls_nonblocking(fake):
    a, b = make_comm(rank=0), make_comm(rank=1, blocking=False, timeout=5.0)
    x = fake_array((2,))
    fake.status["ncclGroupEnd"] = IN_PROGRESS
    fake.async_states = [IN_PROGRESS, 0]
    with nccl.group():
        with nccl.group():
            a.all_reduce(x, out=x)
        b.all_reduce(x, out=x)
    names = fake.names()
    assert names[:2] == ["ncclGroupStart", "ncclGroupStart"]
    assert names.count("ncclGroupEnd") == 2
    # only the non-blocking communicator is polled, after the outermost end
    assert names[-2:] == ["ncclCommGetAsyncError", "ncclCommGetAsyncError"]
    a.abort()
    b.abort()


def test_close_inside_group_defers_destroy(fake):
    comms = [make_comm(rank=0), make_comm(rank=1, device=DEV1)]
    nccl.close_all(comms)
    assert fake.names() == ["ncclGroupStart", "ncclCommFinalize", "ncclCommFinalize",
                            "ncclGroupEnd", "ncclCommDestroy", "ncclCommDestroy"]
    assert all(c.closed for c in comms)
    nccl.close_all(comms)  # nothing left to do
    assert len(fake.calls) == 6


def test_group_end_runs_even_when_block_raises(fake):
    with pytest.raises(RuntimeError):
        with nccl.group():
            raise RuntimeError("inside")
    assert fake.names() == ["ncclGroupStart", "ncclGroupEnd"]
    assert not C._in_group()


def test_split_nocolor_returns_none(fake):
    c = make_comm()
    assert c.split(None) is None
    (name, args), = fake.calls
    assert name == "ncclCommSplit" and args[1] == _lib.NCCL_SPLIT_NOCOLOR and args[2] == 0
    with pytest.raises(ValueError, match="color"):
        c.split(-3)
    c.abort()


# ----------------------------------------------------------------------------- bootstrap
# from_store and from_mpi: tests/cpu/test_bootstrap.py


def test_local_rank_from_env(monkeypatch):
    for var in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID"):
        monkeypatch.delenv(var, raising=False)
    assert bootstrap.local_rank_from_env() is None
    monkeypatch.setenv("SLURM_LOCALID", "3")
    assert bootstrap.local_rank_from_env() == 3
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert bootstrap.local_rank_from_env() == 1


def test_timeout_setter(fake):
    c = make_comm(blocking=False, timeout=60.0)
    c.timeout = 2
    assert c.timeout == 2.0
    with pytest.raises(ValueError, match="positive"):
        c.timeout = -1
    c.timeout = None
    b = make_comm()
    with pytest.raises(ValueError, match="blocking=False"):
        b.timeout = 5
    c.abort()
    b.abort()


def test_clique_members_closed_one_by_one_skip_finalize(fake):
    comms = [make_comm(rank=0), make_comm(rank=1, device=DEV1)]
    C._make_clique(comms)
    for c in comms:
        c.close()
    assert fake.names() == ["ncclCommDestroy", "ncclCommDestroy"]


def test_split_inside_group_completes_at_the_end(fake, monkeypatch):
    parents = [make_comm(rank=0), make_comm(rank=1, device=DEV1)]
    C._make_clique(parents)

    def split(*args):
        fake.calls.append(("ncclCommSplit", args))
        if args[1] != _lib.NCCL_SPLIT_NOCOLOR:
            # what NCCL does at the end of the group: write the new handle
            ctypes.memmove(ctypes.addressof(args[3]._obj),
                           ctypes.byref(ctypes.c_void_p(0x5000 + args[2])), 8)
        return 0

    fake.ncclCommSplit = split  # instance attribute wins over __getattr__
    ready = {}

    def user_rank(raw, out):
        out._obj.value = ready[ctypes.cast(raw, ctypes.c_void_p).value][0]
        return 0

    def count(raw, out):
        out._obj.value = 2
        return 0

    def cu_device(raw, out):
        out._obj.value = ready[ctypes.cast(raw, ctypes.c_void_p).value][1]
        return 0

    fake.ncclCommUserRank, fake.ncclCommCount, fake.ncclCommCuDevice = user_rank, count, cu_device
    ready[0x5000 + 1] = (0, 0)  # the fake hands out handle 0x5000 + key
    ready[0x5000 + 0] = (1, 1)
    monkeypatch.setattr(C, "Device", lambda n: {0: DEV0, 1: DEV1}[n])
    with nccl.group():
        subs = [c.split(0, key=1 - c.rank) for c in parents]
        with pytest.raises(errors.CudaLibsError, match="still being created"):
            subs[0].rank
    assert [s.rank for s in subs] == [0, 1] and [s.size for s in subs] == [2, 2]
    assert all(s._clique for s in subs)
    assert [s.handle for s in subs] == [0x5001, 0x5000]
    names = fake.names()
    assert names[0] == "ncclGroupStart" and names.count("ncclCommSplit") == 2
    assert names[-1] == "ncclCommGetAsyncError" and "ncclGroupEnd" in names
    for c in subs + parents:
        c.abort()


def test_nonblocking_split_without_color_waits_for_the_parent(fake):
    c = make_comm(blocking=False, timeout=5.0)
    fake.status["ncclCommSplit"] = IN_PROGRESS
    fake.async_states = [IN_PROGRESS, IN_PROGRESS, 0]
    assert c.split(None) is None
    assert fake.names().count("ncclCommGetAsyncError") == 3
    c.abort()


def test_split_that_yields_no_communicator_raises(fake):
    c = make_comm()
    with pytest.raises(errors.CudaLibsError, match="without a new communicator"):
        c.split(1)
    c.abort()
