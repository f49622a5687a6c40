"""The softmax kernels on rows whose values reach past float32's exp range (|x| > 88.7).

Only the subtraction of the row's maximum keeps ``exp`` finite there; test_kernels.py draws
values up to 80, where float32 still holds ``exp(x)`` (and its sums, for rows of a few
thousand), so a kernel without the subtraction would pass it.
"""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import kernels as K
from cudalibs import testing as T
from cudalibs.testing import ref


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(4, 1), (3, 257), (2, 3, 3000)], ids=str)
def test_rows_beyond_the_exp_range(device, rng, log, dtype, shape):
    dt = cl.dtypes.lookup(dtype).numpy
    x = T.random_array(shape, dt, rng=rng, low=-120.0, high=120.0)
    # every row reaches past exp's range, at a random place
    rows = x.reshape(-1, shape[-1])
    rows[np.arange(len(rows)), rng.integers(0, shape[-1], len(rows))] = dt.type(110.0)
    out = cl.full(shape, T.poison_value(dt), dt)
    assert (K.log_softmax if log else K.softmax)(cl.to_device(x), out=out) is out
    expected = (ref.log_softmax if log else ref.softmax)(x)
    T.assert_close(out, expected, dtype, msg=f"{'log_' if log else ''}softmax {shape}")
