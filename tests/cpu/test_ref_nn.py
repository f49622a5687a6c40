"""The neural-network references of cudalibs.testing.ref against first principles."""

import math

import numpy as np
import pytest

from cudalibs.testing import random_array, ref


def test_softmax_is_a_distribution_and_shift_invariant():
    x = random_array((3, 4, 7), np.float32, rng=0) * 50
    for axis in (-1, 0, 1):
        p = ref.softmax(x, axis=axis)
        assert p.dtype == np.float64
        np.testing.assert_allclose(p.sum(axis=axis), 1.0, rtol=1e-12)
        np.testing.assert_allclose(ref.softmax(x.astype(np.float64) + 1e3, axis=axis), p,
                                   rtol=1e-9)
        np.testing.assert_allclose(ref.log_softmax(x, axis=axis), np.log(p), rtol=1e-9,
                                   atol=1e-12)


def test_softmax_survives_large_values():
    x = np.array([[1000.0, 1000.0], [-1000.0, 0.0]])
    np.testing.assert_allclose(ref.softmax(x), [[0.5, 0.5], [0.0, 1.0]])
    assert np.isfinite(ref.log_softmax(x)).all()


def test_gelu_known_values():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 2.0])
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(ref.gelu(x), exact, rtol=1e-15)
    # The tanh approximation stays within 1e-3 of the exact function.
    np.testing.assert_allclose(ref.gelu(x, "tanh"), exact, atol=1e-3)
    assert ref.gelu(np.array([1.0]), "tanh")[0] == pytest.approx(0.8411919906082768)
    with pytest.raises(ValueError, match="approximate"):
        ref.gelu(x, "fast")


def test_relu_and_its_gradient():
    x = np.array([-2.0, -0.0, 0.0, 3.0])
    np.testing.assert_array_equal(ref.relu(x), [0, 0, 0, 3])
    np.testing.assert_array_equal(ref.relu_backward([1, 2, 3, 4], x), [0, 0, 0, 4])


def test_bias_act_axis():
    x = random_array((2, 3, 4), np.float32, rng=1)
    b = random_array((3,), np.float32, rng=2)
    got = ref.bias_act(x, b, "relu", axis=1)
    np.testing.assert_allclose(got, np.maximum(x.astype(np.float64) + b[None, :, None], 0))
    b4 = random_array((4,), np.float32, rng=3)
    np.testing.assert_allclose(ref.bias_act(x, b4, None), x.astype(np.float64) + b4)
    np.testing.assert_allclose(ref.bias_act(x, b4, "gelu_tanh"), ref.gelu(x + b4.astype(np.float64), "tanh"))
    with pytest.raises(ValueError, match="does not match"):
        ref.bias_act(x, b, "relu")
    with pytest.raises(ValueError, match="act must be"):
        ref.bias_act(x, b4, "swish")


def test_batch_norm_layouts_agree():
    rng = np.random.default_rng(4)
    x = random_array((2, 3, 4, 5), np.float32, rng=rng)
    p = [random_array((3,), np.float32, rng=rng) for _ in range(3)]
    var = np.abs(random_array((3,), np.float32, rng=rng))
    nchw = ref.batch_norm_infer(x, p[0], p[1], p[2], var, 1e-5, act="relu")
    nhwc = ref.batch_norm_infer(ref.nchw_to_nhwc(x), p[0], p[1], p[2], var, 1e-5, "NHWC", "relu")
    np.testing.assert_allclose(ref.nhwc_to_nchw(nhwc), nchw, rtol=1e-14)
    c = 1
    manual = (x[:, c].astype(np.float64) - p[2][c]) / np.sqrt(np.float64(var[c]) + 1e-5) * p[0][c] + p[1][c]
    np.testing.assert_allclose(nchw[:, c], np.maximum(manual, 0), rtol=1e-14)
    with pytest.raises(ValueError, match="channels"):
        ref.batch_norm_infer(x, p[0][:2], p[1], p[2], var)
    with pytest.raises(ValueError, match="layout"):
        ref.channel_axis(4, "CHWN")


def test_layouts_keep_dtype_and_round_trip():
    x = random_array((2, 3, 4, 5), np.float16, rng=5)
    y = ref.nchw_to_nhwc(x)
    assert y.shape == (2, 4, 5, 3) and y.dtype == np.float16 and y.flags.c_contiguous
    np.testing.assert_array_equal(y[1, 2, 3], x[1, :, 2, 3])
    np.testing.assert_array_equal(ref.nhwc_to_nchw(y), x)
    np.testing.assert_array_equal(ref.transpose(x[0, 0]), x[0, 0].T)
    with pytest.raises(ValueError):
        ref.nchw_to_nhwc(x[0, 0])
