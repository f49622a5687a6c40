"""The numpy references of the cuDNN operations (cudalibs.testing.ref._conv), checked
against a naive loop, adjoint identities and finite differences: they are the GPU tier's
oracle, so they must be right without a GPU."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudalibs.testing import ref


def _naive_conv(x, w, s, p, d, g):
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])])
    OH = (H + 2 * p[0] - d[0] * (R - 1) - 1) // s[0] + 1
    OW = (W + 2 * p[1] - d[1] * (S - 1) - 1) // s[1] + 1
    y = np.zeros((N, K, OH, OW))
    kg = K // g
    for n, k, i, j in itertools.product(range(N), range(K), range(OH), range(OW)):
        grp = k // kg
        acc = 0.0
        for c, r, t in itertools.product(range(Cg), range(R), range(S)):
            acc += xp[n, grp * Cg + c, i * s[0] + r * d[0], j * s[1] + t * d[1]] * w[k, c, r, t]
        y[n, k, i, j] = acc
    return y


@st.composite
def problems(draw):
    g = draw(st.integers(1, 2))
    c, k = g * draw(st.integers(1, 2)), g * draw(st.integers(1, 2))
    n = draw(st.integers(1, 2))
    sp = []
    for _ in range(2):
        r, d, p, s = (draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(0, 2)),
                      draw(st.integers(1, 2)))
        ext = d * (r - 1) + 1
        size = draw(st.integers(max(1, ext - 2 * p), ext + 4))
        sp.append((size, r, p, s, d))
    return n, c, k, g, sp


@settings(max_examples=25, deadline=None)
@given(problems())
def test_conv_reference_matches_loops_and_adjoints(problem):
    n, c, k, g, ((h, r, ph, sh, dh), (w_, s_, pw, sw, dw)) = problem
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w_))
    w = rng.standard_normal((k, c // g, r, s_))
    st_, pad, dil = (sh, sw), (ph, pw), (dh, dw)
    y = ref.conv_forward(x, w, st_, pad, dil, g)
    np.testing.assert_allclose(y, _naive_conv(x, w, st_, pad, dil, g), rtol=1e-12, atol=1e-12)
    assert y.shape == ref.conv_output_shape(x.shape, w.shape, st_, pad, dil)
    dy = rng.standard_normal(y.shape)
    # <conv(x, w), dy> = <x, conv_bwd_data(dy, w)> = <w, conv_bwd_filter(x, dy)>
    lhs = float((y * dy).sum())
    dx = ref.conv_backward_data(dy, w, x.shape, st_, pad, dil, g)
    dwt = ref.conv_backward_filter(x, dy, w.shape, st_, pad, dil, g)
    assert dx.shape == x.shape and dwt.shape == w.shape
    assert np.isclose(lhs, float((x * dx).sum()), rtol=1e-10, atol=1e-10)
    assert np.isclose(lhs, float((w * dwt).sum()), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(ref.conv_backward_bias(dy), dy.sum(axis=(0, 2, 3)))


def test_conv3d_reference_is_sum_of_2d():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 3, 5, 4))
    w = rng.standard_normal((3, 2, 2, 3, 2))
    y = ref.conv_forward(x, w, 1, (0, 1, 1), 1)
    # depth taps are a sum of 2-D convolutions of depth slices
    for od in range(y.shape[2]):
        want = sum(ref.conv_forward(x[:, :, od + t], w[:, :, t], 1, (1, 1), 1) for t in range(2))
        np.testing.assert_allclose(y[:, :, od], want, rtol=1e-12, atol=1e-12)


def _fd_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[i] += eps
        xm[i] -= eps
        g[i] = (f(xp) - f(xm)) / (2 * eps)
    return g


@pytest.mark.parametrize("mode", ["max", "avg", "avg_exclude_padding"])
@pytest.mark.parametrize("nd", [2, 3])
def test_pooling_reference_gradient(mode, nd):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2) + (5,) * nd)
    win, stride, pad = (3,) * nd, (2,) * nd, (1,) * nd
    y = ref.pooling_forward(x, win, stride, pad, mode)
    assert y.shape == (1, 2) + (3,) * nd
    dy = rng.standard_normal(y.shape)
    got = ref.pooling_backward(x, dy, win, stride, pad, mode)
    want = _fd_grad(lambda v: float((ref.pooling_forward(v, win, stride, pad, mode) * dy).sum()), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_pooling_reference_values():
    x = np.arange(16.0).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(ref.pooling_forward(x, 2, mode="max")[0, 0], [[5, 7], [13, 15]])
    np.testing.assert_array_equal(ref.pooling_forward(x, 2, mode="avg")[0, 0],
                                  [[2.5, 4.5], [10.5, 12.5]])
    # corner window of a 2x2 window with padding 1 holds one real element
    inc = ref.pooling_forward(x, 2, 2, 1, "avg")[0, 0, 0, 0]
    exc = ref.pooling_forward(x, 2, 2, 1, "avg_exclude_padding")[0, 0, 0, 0]
    assert (inc, exc) == (0.0 / 4, 0.0) and ref.pooling_forward(x + 1, 2, 2, 1, "avg")[0, 0, 0, 0] == 0.25


@pytest.mark.parametrize("mode", ["spatial", "per_activation"])
def test_batch_norm_reference(mode):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 2, 2))
    pshape = (3,) if mode == "spatial" else (3, 2, 2)
    g, b = rng.standard_normal(pshape), rng.standard_normal(pshape)
    rm, rv = rng.standard_normal(pshape), rng.random(pshape) + 0.5
    y, mean, inv, nrm, nrv = ref.batch_norm_train(x, g, b, rm, rv, 0.25, 1e-5, mode)
    axes = (0, 2, 3) if mode == "spatial" else (0,)
    n = x.size // int(np.prod(pshape))
    np.testing.assert_allclose(mean, x.mean(axis=axes).reshape(pshape))
    np.testing.assert_allclose(inv, 1 / np.sqrt(x.var(axis=axes).reshape(pshape) + 1e-5))
    np.testing.assert_allclose(nrm, 0.75 * rm + 0.25 * mean)
    np.testing.assert_allclose(nrv, 0.75 * rv + 0.25 * x.var(axis=axes, ddof=1).reshape(pshape))
    assert abs(y.mean(axis=axes).reshape(pshape) - b).max() < 1e-12
    dy = rng.standard_normal(x.shape)
    dx, dg, db = ref.batch_norm_backward(x, dy, g, 1e-5, mode)
    f = lambda v: float((ref.batch_norm_train(v, g, b, None, None, 0.1, 1e-5, mode)[0] * dy).sum())  # noqa: E731
    np.testing.assert_allclose(dx, _fd_grad(f, x), rtol=1e-5, atol=1e-6)
    fg = lambda v: float((ref.batch_norm_train(x, v, b, None, None, 0.1, 1e-5, mode)[0] * dy).sum())  # noqa: E731
    np.testing.assert_allclose(dg, _fd_grad(fg, g), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, dy.sum(axis=axes).reshape(pshape))
    assert n > 1


@pytest.mark.parametrize("mode", ["relu", "sigmoid", "tanh", "clipped_relu", "elu", "swish",
                                  "identity"])
def test_activation_reference_gradient(mode):
    rng = np.random.default_rng(4)
    x = rng.uniform(-2, 2, (2, 3, 2, 2))
    dy = rng.standard_normal(x.shape)
    got = ref.activation_backward(x, dy, mode, 0.7, 1.3)
    want = _fd_grad(lambda v: float((ref.activation(v, mode, 0.7, 1.3) * dy).sum()), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("log", [False, True])
def test_softmax_backward_reference(log):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 3))
    dy = rng.standard_normal(x.shape)
    fwd = ref.log_softmax if log else ref.softmax
    y = fwd(x, axis=1)
    got = ref.softmax_backward(y, dy, axis=1, log=log)
    want = _fd_grad(lambda v: float((fwd(v, axis=1) * dy).sum()), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
