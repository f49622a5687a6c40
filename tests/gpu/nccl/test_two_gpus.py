"""Two GPUs driven by one thread (``Communicator.init_all`` + ``nccl.group``): every collective
and reduction for several dtypes against numpy, groups, split, non-blocking creation."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import nccl
from cudalibs import testing as T

from . import _reference as R

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int8", "uint8", "int64"]
SHAPES = st.sampled_from([(2,), (6,), (4, 3), (64, 10), (2, 3, 4), (1024,)])
#: The data's seed, drawn by hypothesis, so that a failing example replays.
SEEDS = st.integers(0, 2**32 - 1)


def _ops_for(dtype):
    floating = dtype in ("float32", "float64", "float16", "bfloat16")
    return ["sum", "prod", "max", "min"] + (["avg"] if floating else [])


def _inputs(shape, dtype, rng, n=2):
    """One random array a rank, from ``rng`` (a Generator or a seed)."""
    rng = np.random.default_rng(rng)
    return [T.random_array(shape, dtype, rng=rng) for _ in range(n)]


def _upload(xs, comms):
    return [cl.to_device(x, device=c.device) for x, c in zip(xs, comms)]


def _poisoned_like(shape, dtype, comms):
    return [cl.full(shape, T.poison_value(dtype), dtype, device=c.device) for c in comms]


def _check(outs, expected, dtype, what):
    for rank, (o, e) in enumerate(zip(outs, expected)):
        got = o.get()
        T.assert_close(got.reshape(-1), R.cast(e, dtype).reshape(-1), dtype,
                       msg=f"{what}, rank {rank}")


def test_init_all(comms2):
    assert [c.rank for c in comms2] == [0, 1]
    assert [c.size for c in comms2] == [2, 2]
    assert [c.device.ordinal for c in comms2] == [0, 1]
    assert [c.cu_device for c in comms2] == [0, 1]


@settings(max_examples=30)
@given(dtype=st.sampled_from(DTYPES), shape=SHAPES, seed=SEEDS, data=st.data())
def test_all_reduce(comms2, dtype, shape, seed, data):
    op = data.draw(st.sampled_from(_ops_for(dtype)))
    inplace = data.draw(st.booleans())
    xs = _inputs(shape, dtype, seed)
    dxs = _upload(xs, comms2)
    outs = dxs if inplace else _poisoned_like(shape, dtype, comms2)
    with nccl.group():
        for c, x, o in zip(comms2, dxs, outs):
            c.all_reduce(x, out=o, op=op)
    _check(outs, R.all_reduce(xs, op), dtype, f"all_reduce {op} {dtype} {shape} "
                                               f"inplace={inplace}")


@settings(max_examples=20)
@given(dtype=st.sampled_from(DTYPES), shape=SHAPES, seed=SEEDS, data=st.data())
def test_broadcast_and_reduce(comms2, dtype, shape, seed, data):
    root = data.draw(st.integers(0, 1))
    op = data.draw(st.sampled_from(_ops_for(dtype)))
    xs = _inputs(shape, dtype, seed)
    dxs = _upload(xs, comms2)
    outs = _poisoned_like(shape, dtype, comms2)
    with nccl.group():
        for c, x, o in zip(comms2, dxs, outs):
            c.broadcast(x, out=o, root=root)
    _check(outs, R.broadcast(xs, root), dtype, f"broadcast root={root} {dtype} {shape}")

    routs = _poisoned_like(shape, dtype, comms2)
    with nccl.group():
        results = [c.reduce(x, out=o if c.rank == root else None, op=op, root=root)
                   for c, x, o in zip(comms2, dxs, routs)]
    assert results[1 - root] is None
    _check([results[root]], [R.reduce_all(xs, op)], dtype,
           f"reduce {op} root={root} {dtype} {shape}")
    # The non-root output is untouched.
    left = routs[1 - root].get()
    if np.dtype(dtype).kind in "iu":
        assert np.all(left == T.poison_value(dtype)), "reduce wrote a non-root output"
    else:
        assert np.all(np.isnan(left.astype(np.float64))), "reduce wrote a non-root output"


@settings(max_examples=20)
@given(dtype=st.sampled_from(DTYPES), shape=SHAPES, seed=SEEDS, data=st.data())
def test_all_gather(comms2, dtype, shape, seed, data):
    inplace = data.draw(st.booleans())
    xs = _inputs(shape, dtype, seed)
    if inplace:  # each rank's input is its own slice of the output
        n = xs[0].size
        outs = _poisoned_like((2 * n,), dtype, comms2)
        for r, (o, x) in enumerate(zip(outs, xs)):
            o[r * n:(r + 1) * n].copy_(x.reshape(-1))
        sends = [o[r * n:(r + 1) * n] for r, o in enumerate(outs)]
    else:
        sends = _upload(xs, comms2)
        outs = [None, None]
    with nccl.group():
        outs = [c.all_gather(x, out=o) for c, x, o in zip(comms2, sends, outs)]
    if not inplace:
        assert outs[0].shape == (2 * shape[0],) + shape[1:]
    _check(outs, R.all_gather(xs), dtype, f"all_gather {dtype} {shape} inplace={inplace}")


@settings(max_examples=20)
@given(dtype=st.sampled_from(DTYPES), shape=SHAPES, seed=SEEDS, data=st.data())
def test_reduce_scatter(comms2, dtype, shape, seed, data):
    op = data.draw(st.sampled_from(_ops_for(dtype)))
    xs = _inputs(shape, dtype, seed)
    dxs = _upload(xs, comms2)
    k = xs[0].size // 2
    outs = _poisoned_like((k,), dtype, comms2)
    with nccl.group():
        for c, x, o in zip(comms2, dxs, outs):
            c.reduce_scatter(x, out=o, op=op)
    _check(outs, R.reduce_scatter(xs, op), dtype, f"reduce_scatter {op} {dtype} {shape}")
    with nccl.group():
        outs = [c.reduce_scatter(x, op=op) for c, x in zip(comms2, dxs)]
    if shape[0] % 2 == 0:
        assert outs[0].shape == (shape[0] // 2,) + shape[1:]
    _check(outs, R.reduce_scatter(xs, op), dtype, f"reduce_scatter (allocated) {op}")


@settings(max_examples=15)
@given(dtype=st.sampled_from(DTYPES), shape=SHAPES, seed=SEEDS)
def test_send_recv_and_all_to_all(comms2, dtype, shape, seed):
    xs = _inputs(shape, dtype, seed)
    dxs = _upload(xs, comms2)
    got = _poisoned_like(shape, dtype, comms2)
    with nccl.group():  # 0 -> 1 and 1 -> 0 at the same time
        for c, x, g in zip(comms2, dxs, got):
            c.send(x, 1 - c.rank)
            c.recv(g, 1 - c.rank)
    _check(got, [xs[1], xs[0]], dtype, f"send/recv {dtype} {shape}")

    outs = _poisoned_like(shape, dtype, comms2)
    with nccl.group():
        for c, x, o in zip(comms2, dxs, outs):
            c.all_to_all(x, out=o)
    _check(outs, R.all_to_all(xs), dtype, f"all_to_all {dtype} {shape}")


def test_float8(comms2, rng):
    if nccl.version() < (2, 24, 0) or comms2[0].device.compute_capability < (9, 0):
        pytest.skip("float8 reductions need NCCL >= 2.24 on sm_90+")
    for dt in (cl.dtypes.float8_e4m3fn, cl.dtypes.float8_e5m2):
        for op in ("sum",):  # the reduction fp8 training uses; others vary by NCCL version
            xs = _inputs((257,), dt, rng)
            dxs = _upload(xs, comms2)
            with nccl.group():
                outs = [c.all_reduce(x, op=op) for c, x in zip(comms2, dxs)]
            expected = R.reduce_all([x.astype(np.float32) for x in xs], op)
            for o in outs:
                T.assert_close(o.get().astype(np.float64), expected, dt, msg=f"{dt} {op}")


def test_several_collectives_in_one_group(comms2, rng):
    xs, ys = _inputs((100,), "float32", rng), _inputs((50,), "float32", rng)
    dxs, dys = _upload(xs, comms2), _upload(ys, comms2)
    with nccl.group():
        sums = [c.all_reduce(x) for c, x in zip(comms2, dxs)]
        gathers = [c.all_gather(y) for c, y in zip(comms2, dys)]
    _check(sums, R.all_reduce(xs, "sum"), "float32", "grouped all_reduce")
    _check(gathers, R.all_gather(ys), "float32", "grouped all_gather")


def test_streams(comms2, rng):
    streams = [cl.Stream(c.device) for c in comms2]
    xs = _inputs((4096,), "float32", rng)
    dxs = [cl.to_device(x, device=c.device, stream=s) for x, c, s in zip(xs, comms2, streams)]
    with nccl.group():
        outs = [c.all_reduce(x, stream=s) for c, x, s in zip(comms2, dxs, streams)]
    for s in streams:
        s.sync()
    _check(outs, R.all_reduce(xs, "sum"), "float32", "all_reduce on streams")
    with pytest.raises(ValueError, match="device"):
        comms2[0].all_reduce(dxs[0], stream=streams[1])


def test_wrong_device_buffer(comms2):
    x1 = cl.to_device(np.ones(8, np.float32), device=1)
    with pytest.raises(ValueError, match="device 1"):
        comms2[0].all_reduce(x1)
    with pytest.raises(ValueError, match="device 1"):
        comms2[0].all_gather(cl.to_device(np.ones(8, np.float32), device=0), out=x1)


def test_split(comms2):
    # Reverse the rank order: key = 1 - rank.
    with nccl.group():
        subs = [c.split(0, key=1 - c.rank) for c in comms2]
    try:
        assert [s.rank for s in subs] == [1, 0] and [s.size for s in subs] == [2, 2]
        xs = [np.full(3, 10.0 + c.rank, np.float32) for c in comms2]
        with nccl.group():
            outs = [s.all_gather(cl.to_device(x, device=s.device)) for s, x in zip(subs, xs)]
        # new rank 0 is old rank 1
        np.testing.assert_array_equal(outs[0].get(), np.r_[xs[1], xs[0]])
    finally:
        nccl.close_all(subs)
    # Old rank 1 joins nothing; old rank 0 gets a one-rank communicator.
    with nccl.group():
        subs = [c.split(0 if c.rank == 0 else None) for c in comms2]
    assert subs[1] is None and subs[0].size == 1
    subs[0].close()


def test_nonblocking_init_all(rng):
    if cl.device_count() < 2:
        pytest.skip("needs two GPUs")
    comms = nccl.Communicator.init_all([0, 1], blocking=False, timeout=120)
    try:
        assert [c.rank for c in comms] == [0, 1] and not comms[0].blocking
        xs = _inputs((3000,), "float32", rng)
        dxs = _upload(xs, comms)
        with nccl.group():
            outs = [c.all_reduce(x, op="avg") for c, x in zip(comms, dxs)]
        for c in comms:
            c.sync()
        _check(outs, R.all_reduce(xs, "avg"), "float32", "non-blocking all_reduce avg")
    finally:
        nccl.close_all(comms)
    assert all(c.closed for c in comms)
