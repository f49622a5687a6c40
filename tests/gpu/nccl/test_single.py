"""One-rank communicators on one GPU: every collective degenerates to a copy (or nothing), so
each must return its input exactly; lifetime, non-blocking mode, split, interop and the
abort-on-timeout path (a two-rank communicator whose second rank never joins)."""

import gc
import json
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import nccl
from cudalibs import testing as T

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int8", "uint8", "int64"]
OPS = ["sum", "prod", "max", "min", "avg"]
SHAPES = st.sampled_from([(1,), (7,), (3, 5), (64, 33), (2, 3, 4)])
#: The data's seed, drawn by hypothesis, so that a failing example replays.
SEEDS = st.integers(0, 2**32 - 1)


def _poisoned(shape, dtype, device):
    return cl.full(shape, T.poison_value(dtype), dtype, device=device)


def _ops_for(dtype):
    return OPS if np.dtype(dtype).kind == "f" or dtype == "bfloat16" else OPS[:4]


def test_properties(comm1, device):
    assert (comm1.rank, comm1.size, comm1.device) == (0, 1, device)
    assert comm1.cu_device == device.ordinal
    assert comm1.blocking and comm1.timeout is None and not comm1.closed
    assert "rank 0/1" in repr(comm1) and comm1.handle != 0
    assert comm1.async_error() is None


@settings(max_examples=25)
@given(dtype=st.sampled_from(DTYPES), shape=SHAPES, seed=SEEDS, data=st.data())
def test_all_reduce_one_rank(comm1, device, dtype, shape, seed, data):
    op = data.draw(st.sampled_from(_ops_for(dtype)))
    x = T.random_array(shape, dtype, rng=np.random.default_rng(seed))
    dx = cl.to_device(x, device=device)
    out = _poisoned(shape, dtype, device)
    assert comm1.all_reduce(dx, out=out, op=op) is out
    T.assert_close(out, x.astype(np.float64) if x.dtype.kind == "f" else x, dtype,
                   msg=f"all_reduce {op} {dtype} {shape}")
    new = comm1.all_reduce(dx, op=op)  # allocated output
    assert new.shape == shape and new.dtype == dx.dtype
    np.testing.assert_array_equal(new.get().astype(np.float64), x.astype(np.float64))
    comm1.all_reduce(dx, out=dx, op=op)  # in place
    np.testing.assert_array_equal(dx.get().astype(np.float64), x.astype(np.float64))


@settings(max_examples=15)
@given(dtype=st.sampled_from(DTYPES), shape=SHAPES, seed=SEEDS)
def test_other_collectives_one_rank(comm1, device, dtype, shape, seed):
    x = T.random_array(shape, dtype, rng=np.random.default_rng(seed))
    wide = x.astype(np.float64)
    dx = cl.to_device(x, device=device)

    b = comm1.broadcast(dx, out=_poisoned(shape, dtype, device), root=0)
    np.testing.assert_array_equal(b.get().astype(np.float64), wide)

    r = comm1.reduce(dx, out=_poisoned(shape, dtype, device), op="max", root=0)
    np.testing.assert_array_equal(r.get().astype(np.float64), wide)

    g = comm1.all_gather(dx)
    assert g.shape == shape
    np.testing.assert_array_equal(g.get().astype(np.float64), wide)

    rs = comm1.reduce_scatter(dx, op="sum")
    np.testing.assert_array_equal(rs.get().astype(np.float64).reshape(shape), wide)

    a2a = comm1.all_to_all(dx, out=_poisoned(shape, dtype, device))
    np.testing.assert_array_equal(a2a.get().astype(np.float64), wide)

    got = _poisoned(shape, dtype, device)
    with nccl.group():  # a send to oneself must be paired with the receive in one group
        comm1.send(dx, 0)
        comm1.recv(got, 0)
    np.testing.assert_array_equal(got.get().astype(np.float64), wide)


def test_float8_one_rank(comm1, device, rng):
    if nccl.version() < (2, 24, 0) or device.compute_capability < (9, 0):
        with pytest.raises(TypeError):
            comm1.all_reduce(cl.to_device(np.ones(4, cl.dtypes.float8_e4m3fn)))
        return
    for dt in (cl.dtypes.float8_e4m3fn, cl.dtypes.float8_e5m2):
        x = T.random_array((37,), dt, rng=rng)
        out = comm1.all_reduce(cl.to_device(x, device=device), op="sum")
        np.testing.assert_array_equal(out.get().astype(np.float32), x.astype(np.float32))


def test_on_a_stream_and_in_a_group(comm1, device, rng):
    s = cl.Stream(device)
    x = T.random_array((1000,), np.float32, rng=rng)
    dx = cl.to_device(x, device=device)
    outs = []
    with nccl.group():  # several collectives of one communicator, one launch
        for _ in range(3):
            outs.append(comm1.all_reduce(dx, stream=s))
    s.sync()
    for o in outs:
        np.testing.assert_array_equal(o.get(), x)
    comm1.sync(s)
    comm1.barrier()
    s.close()


def test_torch_arrays(comm1, device):
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32, device="cuda:0").reshape(3, 4) + 1
    comm1.all_reduce(t, out=t, op="prod")
    torch.cuda.synchronize()
    assert torch.equal(t.cpu(), torch.arange(12, dtype=torch.float32).reshape(3, 4) + 1)
    bf = torch.ones(5, dtype=torch.bfloat16, device="cuda:0")
    out = comm1.all_reduce(cl.from_dlpack(bf))  # CAI has no bfloat16: DLPack carries it
    assert out.dtype == cl.dtypes.bfloat16


def test_cupy_arrays(comm1, device):
    # A skip of its own when CuPy is absent (a failure under CUDALIBS_REQUIRE_GPU=1), not a
    # silent end of the torch test.
    cupy = pytest.importorskip("cupy")
    c = cupy.arange(10, dtype=cupy.int32) + 1
    comm1.all_reduce(c, out=c)
    assert (cupy.asnumpy(c) == np.arange(10) + 1).all()


def test_bad_input(comm1, device, rng):
    x = cl.to_device(T.random_array((8, 4), np.float32, rng=rng), device=device)
    with pytest.raises(ValueError, match="C-contiguous"):
        comm1.all_reduce(x[:, ::2])
    with pytest.raises(TypeError, match="dtype"):
        comm1.all_reduce(x, out=cl.empty((8, 4), np.float64, device=device))
    with pytest.raises(ValueError, match="elements"):
        comm1.all_gather(x, out=cl.empty((31,), np.float32, device=device))
    with pytest.raises(ValueError, match="out of range"):
        comm1.broadcast(x, root=1)
    with pytest.raises(TypeError, match="NCCL has no int16"):
        comm1.all_reduce(cl.to_device(np.ones(3, np.int16), device=device))
    with pytest.raises(TypeError):
        comm1.all_reduce(np.ones(3, np.float32))
    closed = cl.to_device(np.ones(3, np.float32), device=device)
    closed.close()
    with pytest.raises(cl.ClosedError):
        comm1.all_reduce(closed)
    if cl.device_count() > 1:
        with pytest.raises(ValueError, match="device 1"):
            comm1.all_reduce(cl.to_device(np.ones(3, np.float32), device=1))


def test_lifetime(device):
    c = nccl.Communicator(1, 0, nccl.UniqueId(), device)
    x = cl.to_device(np.ones(4, np.float32), device=device)
    c.all_reduce(x, out=x)
    c.close()
    c.close()
    c.abort()
    assert c.closed
    with pytest.raises(cl.ClosedError):
        c.all_reduce(x)
    with pytest.raises(cl.ClosedError):
        c.rank

    a = nccl.Communicator(1, 0, nccl.UniqueId(), device)
    a.abort()
    a.abort()
    with pytest.raises(cl.ClosedError, match="aborted"):
        a.all_reduce(x)

    with nccl.Communicator(1, 0, nccl.UniqueId().bytes, device) as w:
        w.all_reduce(x, out=x)
    assert w.closed


def test_unclosed_communicator_only_warns(device):
    c = nccl.Communicator(1, 0, nccl.UniqueId(), device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del c
        gc.collect()
    assert any(issubclass(w.category, ResourceWarning) for w in caught)
    assert gc.garbage == []


def test_nonblocking_one_rank(device, rng):
    c = nccl.Communicator(1, 0, nccl.UniqueId(), device, blocking=False, timeout=60)
    assert not c.blocking and c.size == 1
    x = T.random_array((513,), np.float32, rng=rng)
    out = c.all_reduce(cl.to_device(x, device=device), op="max")
    c.sync()
    np.testing.assert_array_equal(out.get(), x)
    sub = c.split(0)
    assert sub.size == 1 and not sub.blocking
    sub.close()
    c.close()


def test_split_one_rank(comm1):
    assert comm1.split(None) is None
    sub = comm1.split(3, key=0)
    try:
        assert (sub.rank, sub.size, sub.device) == (0, 1, comm1.device)
        x = cl.to_device(np.arange(6, dtype=np.int32) + 1, device=comm1.device)
        np.testing.assert_array_equal(sub.all_reduce(x).get(), np.arange(6) + 1)
    finally:
        sub.close()


_TIMEOUT_SCRIPT = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    import cudalibs as cl
    from cudalibs import nccl

    dev = cl.Device(0)
    t0 = time.monotonic()
    result = {}
    try:
        nccl.Communicator(2, 0, nccl.UniqueId(), dev, blocking=False, timeout=3.0)
    except nccl.NcclTimeoutError as exc:
        result = {"error": type(exc).__name__, "message": str(exc),
                  "is_timeout": isinstance(exc, TimeoutError)}
    except Exception as exc:
        result = {"error": type(exc).__name__, "message": str(exc), "is_timeout": False}
    result["elapsed"] = time.monotonic() - t0
    # The process must still work after the abort.
    with nccl.Communicator(1, 0, nccl.UniqueId(), dev) as c:
        x = cl.to_device(np.arange(4, dtype=np.float32) + 1, device=dev)
        result["after"] = c.all_reduce(x).get().tolist()
    print("RESULT " + json.dumps(result))
    sys.stdout.flush()
""")


def test_peer_that_never_arrives_times_out(device):
    """rank 1 of 2 never joins: a timeout error after ~3 s, the process alive afterwards."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run([sys.executable, "-c", _TIMEOUT_SCRIPT], env=env, cwd=root,
                              capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the timeout path hung for 120 s:\n{exc.stdout}\n{exc.stderr}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["error"] == "NcclTimeoutError" and result["is_timeout"], result
    assert "aborted" in result["message"], result
    assert 2.5 < result["elapsed"] < 60, result
    assert result["after"] == [1.0, 2.0, 3.0, 4.0]
