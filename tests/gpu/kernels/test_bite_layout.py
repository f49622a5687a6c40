"""nchw_to_nhwc and nhwc_to_nchw, each direction on its own, against numpy's transpose, for
batches of several images: every image must be written, bit for bit.

test_kernels.py checks the round trip over batches of 0 to 3 images drawn at random; here
each direction starts from its own random input, with a batch of more than one image always,
and with more images than the grid's z extent holds (65535), which the kernel reaches by
looping.
"""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import kernels as K
from cudalibs import testing as T

#: One kernel per element size: 2, 4 and 8 bytes.
DTYPES = [np.float16, np.float32, np.float64]
#: Logical NCHW shapes: a small batch, channels across a 32-wide tile edge, and a batch past
#: the grid's z limit.
SHAPES = [(3, 5, 7, 9), (2, 33, 4, 9), (65537, 2, 1, 3)]


def _bits(x: np.ndarray) -> np.ndarray:
    """The elements as unsigned integers of their size: NaN compares as its bits."""
    return np.ascontiguousarray(x).view(f"u{x.dtype.itemsize}")


def _poisoned(shape, dtype):
    return cl.full(shape, T.poison_value(dtype), dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_nchw_to_nhwc_writes_every_image(device, rng, dtype, shape):
    n, c, h, w = shape
    x = T.random_array(shape, dtype, rng=rng)
    out = _poisoned((n, h, w, c), dtype)
    assert K.nchw_to_nhwc(cl.to_device(x), out=out) is out
    got, want = out.get(), np.transpose(x, (0, 2, 3, 1))
    np.testing.assert_array_equal(_bits(got[-1]), _bits(want[-1]), err_msg="the last image")
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_nhwc_to_nchw_writes_every_image(device, rng, dtype, shape):
    n, c, h, w = shape
    y = T.random_array((n, h, w, c), dtype, rng=rng)
    out = _poisoned(shape, dtype)
    assert K.nhwc_to_nchw(cl.to_device(y), out=out) is out
    got, want = out.get(), np.transpose(y, (0, 3, 1, 2))
    np.testing.assert_array_equal(_bits(got[-1]), _bits(want[-1]), err_msg="the last image")
    np.testing.assert_array_equal(_bits(got), _bits(want))
