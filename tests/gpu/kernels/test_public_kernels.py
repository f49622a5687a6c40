"""The kernel library's public names beyond its functions: ``CrossEntropy``, the result of
``cross_entropy`` (its fields by name and position, forward and backward against the float64
reference, reused as outputs), and ``clear_cache`` (the kernels are loaded again, and every
call after it computes as before)."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import kernels as K
from cudalibs import ptx as P
from cudalibs import testing as T
from cudalibs.runtime import ptxlib
from cudalibs.testing import ref

F32 = np.dtype(np.float32)
IGNORE = -100


def _labels(rng, rows, classes):
    lab = rng.integers(0, classes, rows).astype(np.int64)
    lab[::7] = IGNORE
    return lab


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16),
                                   cl.dtypes.bfloat16], ids=lambda d: np.dtype(d).name)
def test_cross_entropy_is_a_cross_entropy(device, rng, dtype):
    rows, classes = 97, 1000                 # rows of more than one block's worth of classes
    x = T.random_array((rows, classes), dtype, rng=rng, low=-4, high=4)
    lab = _labels(rng, rows, classes)
    dx, dl = cl.to_device(x), cl.to_device(lab)
    res = K.cross_entropy(dx, dl, ignore_index=IGNORE)
    assert isinstance(res, K.CrossEntropy)
    assert K.CrossEntropy._fields == ("loss", "row_loss", "count")
    loss, row_loss, count = res
    assert loss is res.loss and row_loss is res.row_loss and count is res.count
    assert loss.dtype == row_loss.dtype == count.dtype == F32
    assert loss.size == count.size == 1 and row_loss.shape == (rows,)
    e_loss, e_rows, e_count = ref.cross_entropy(x, lab, IGNORE, "mean")
    T.assert_close(row_loss, e_rows, F32, msg="row_loss")
    T.assert_close(loss.get().reshape(1), np.array([e_loss]), F32, msg="loss")
    assert float(count.get().reshape(-1)[0]) == e_count == int((lab != IGNORE).sum())
    grad = K.cross_entropy_backward(dx, dl, res.count, ignore_index=IGNORE,
                                    out=cl.full(x.shape, T.poison_value(dtype), dtype))
    T.assert_close(grad, ref.cross_entropy_backward(x, lab, IGNORE, "mean"), dtype,
                   msg="gradient")
    # a result's arrays serve as the next call's outputs: the same arrays, new values
    again = K.cross_entropy(dx, dl, ignore_index=IGNORE, reduction="sum", out=res.loss,
                            row_loss=res.row_loss, count=res.count)
    assert isinstance(again, K.CrossEntropy) and all(a is b for a, b in zip(again, res))
    e_sum = ref.cross_entropy(x, lab, IGNORE, "sum")[0]
    T.assert_close(again.loss.get().reshape(1), np.array([e_sum]), F32, msg="sum")


def test_clear_cache_loads_the_kernels_again(device, rng):
    name = P.ENTRIES["elementwise"][0]
    before = ptxlib.kernel(device, name)
    assert ptxlib.kernel(device, name) is before          # loaded once, then kept
    x = T.random_array((4099,), np.float32, rng=rng)
    y = T.random_array((4099,), np.float32, rng=rng)
    dx, dy = cl.to_device(x), cl.to_device(y)
    first = K.add(dx, dy).get()
    K.clear_cache()
    after = ptxlib.kernel(device, name)
    assert after is not before
    np.testing.assert_array_equal(K.add(dx, dy).get(), first)
    T.assert_close(first, x.astype(np.float64) + y, np.float32)
