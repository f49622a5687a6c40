"""Every reduction NCCL's table ``OPS`` names is accepted by the collectives and reduces as
its name says: on one rank (the identity, exactly) and across two GPUs (against numpy)."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import nccl
from cudalibs import testing as T

#: What each reduction computes of the two ranks' values.
REDUCE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum,
          "avg": lambda a, b: (a + b) / 2}


def test_the_table_is_what_the_test_knows():
    assert set(nccl.OPS) == set(REDUCE), "a reduction of OPS has no reference here"


@pytest.mark.parametrize("op", sorted(nccl.OPS))
def test_each_reduction_on_one_rank_is_the_identity(comm1, device, rng, op):
    x = T.random_array((33, 5), np.float32, rng=rng)
    out = cl.full(x.shape, T.poison_value(np.float32), np.float32, device=device)
    assert comm1.all_reduce(cl.to_device(x, device=device), out=out, op=op) is out
    np.testing.assert_array_equal(out.get(), x)


@pytest.mark.parametrize("op", sorted(nccl.OPS))
def test_each_reduction_across_two_gpus(comms2, rng, op):
    xs = [T.random_array((7, 129), np.float32, rng=rng) for _ in comms2]
    ins = [cl.to_device(x, device=c.device) for c, x in zip(comms2, xs)]
    outs = [cl.full(x.shape, T.poison_value(np.float32), np.float32, device=c.device)
            for c, x in zip(comms2, xs)]
    with nccl.group():
        for c, x, o in zip(comms2, ins, outs):
            c.all_reduce(x, out=o, op=op)
    want = REDUCE[op](xs[0].astype(np.float64), xs[1].astype(np.float64))
    for rank, o in enumerate(outs):
        T.assert_close(o.get(), want, np.float32, msg=f"{op}, rank {rank}")
