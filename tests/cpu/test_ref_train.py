"""The training references of cudalibs.testing.ref (cross-entropy, SGD, AdamW, embedding,
global average pooling) against first principles: finite differences for the backward
functions (float64), steps of the optimizers worked out by hand, the embedding gradient as a
scatter-add, pooling as a mean.  The GPU tier checks the kernels against these references, so
a wrong reference would pass a wrong kernel."""

import math

import numpy as np
import pytest

from cudalibs.testing import ref


def _central_differences(f, x, eps=1e-6):
    """The gradient of the scalar function ``f`` at the float64 array ``x``, element by
    element: ``(f(x + eps e_i) - f(x - eps e_i)) / 2 eps``."""
    grad = np.empty(x.size)
    for i in range(x.size):
        step = np.zeros(x.size)
        step[i] = eps
        up, down = (x.reshape(-1) + step).reshape(x.shape), (x.reshape(-1) - step).reshape(x.shape)
        grad[i] = (f(up) - f(down)) / (2 * eps)
    return grad.reshape(x.shape)


# -- cross-entropy ------------------------------------------------------------------------------
def test_cross_entropy_known_values():
    # Two equal logits: -log(1/2).  Logits (0, log 3): softmax (1/4, 3/4).
    loss, rows, count = ref.cross_entropy([[0.0, 0.0], [0.0, math.log(3.0)]], [0, 1])
    np.testing.assert_allclose(rows, [math.log(2.0), -math.log(0.75)], rtol=1e-15)
    assert count == 2 and loss == pytest.approx((math.log(2.0) - math.log(0.75)) / 2, rel=1e-15)
    total, _, _ = ref.cross_entropy([[0.0, 0.0], [0.0, math.log(3.0)]], [0, 1], reduction="sum")
    assert total == pytest.approx(math.log(2.0) - math.log(0.75), rel=1e-15)


def test_cross_entropy_is_minus_log_softmax_and_shift_invariant():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 3, 5)) * 4
    labels = rng.integers(0, 5, (2, 3))
    loss, rows, count = ref.cross_entropy(x, labels)
    p = np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)
    want = -np.log(np.take_along_axis(p, labels[..., None], axis=-1))[..., 0]
    np.testing.assert_allclose(rows, want, rtol=1e-12)
    assert count == 6 and loss == pytest.approx(want.mean(), rel=1e-12)
    # A constant added to a row changes no probability; large logits do not overflow.
    shifted, _, _ = ref.cross_entropy(x + 1000.0, labels)
    assert shifted == pytest.approx(loss, rel=1e-9)


def test_cross_entropy_ignored_and_out_of_range_rows():
    x = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0], [0.5, 0.5, 0.5]])
    loss, rows, count = ref.cross_entropy(x, [2, -100, 1], ignore_index=-100)
    assert count == 2 and rows[1] == 0.0
    assert loss == pytest.approx((rows[0] + rows[2]) / 2, rel=1e-15)
    # A counted label outside [0, C): NaN, as the kernels write.
    loss, rows, _ = ref.cross_entropy(x, [2, 3, 1])
    assert math.isnan(loss) and math.isnan(rows[1]) and np.isfinite(rows[[0, 2]]).all()
    # A mean over no counted row is NaN; a sum over none is 0.
    assert math.isnan(ref.cross_entropy(x, [-1, -1, -1], ignore_index=-1)[0])
    assert ref.cross_entropy(x, [-1, -1, -1], ignore_index=-1, reduction="sum")[0] == 0.0
    with pytest.raises(ValueError, match="reduction"):
        ref.cross_entropy(x, [0, 1, 2], reduction="max")
    with pytest.raises(ValueError, match="labels"):
        ref.cross_entropy(x, [0, 1])


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("ignore_index", [None, 1])
def test_cross_entropy_backward_matches_finite_differences(reduction, ignore_index):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 3, 4)) * 2
    labels = np.array([[0, 1, 3], [1, 2, 2]])
    scale = 0.75
    got = ref.cross_entropy_backward(x, labels, ignore_index, reduction, grad_scale=scale)
    assert got.shape == x.shape and got.dtype == np.float64
    want = _central_differences(
        lambda v: scale * ref.cross_entropy(v, labels, ignore_index, reduction)[0], x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
    if ignore_index is not None:
        assert not got[labels == ignore_index].any()      # ignored rows: zero gradient


def test_cross_entropy_backward_is_softmax_minus_onehot():
    x = np.array([[0.0, math.log(3.0)]])
    np.testing.assert_allclose(ref.cross_entropy_backward(x, [1]), [[0.25, -0.25]], rtol=1e-15)
    # An out-of-range label: a NaN row; no counted row: zeros, whatever the scale.
    assert np.isnan(ref.cross_entropy_backward(x, [2])).all()
    assert not ref.cross_entropy_backward(x, [0], ignore_index=0, grad_scale=5.0).any()


def test_accuracy_count():
    x = np.array([[0.1, 0.9, 0.0], [2.0, 2.0, 1.0], [0.0, np.nan, 5.0], [1.0, 0.0, 0.0]])
    # Row 1 ties: the first maximum counts.  Row 2: NaN counts as the maximum.
    assert ref.accuracy_count(x, [1, 0, 1, 0]) == 4
    assert ref.accuracy_count(x, [1, 1, 2, 0]) == 2
    assert ref.accuracy_count(x, [1, 0, 1, 0], ignore_index=0) == 2


# -- optimizers ---------------------------------------------------------------------------------
def test_sgd_two_steps_with_momentum_and_weight_decay():
    p, buf = np.array([1.0, -2.0]), np.zeros(2)
    hyper = dict(lr=0.1, momentum=0.9, weight_decay=0.01)
    # Step 1: d = g + 0.01 p = (0.51, 0.23); buf = 0.9 * 0 + d; p -= 0.1 * buf.
    p, buf = ref.sgd(p, [0.5, 0.25], buf, **hyper)
    np.testing.assert_allclose(buf, [0.51, 0.23], rtol=1e-15)
    np.testing.assert_allclose(p, [0.949, -2.023], rtol=1e-15)
    # Step 2: d = (-1 + 0.00949, 1 - 0.02023); buf = 0.9 * (0.51, 0.23) + d.
    p, buf = ref.sgd(p, [-1.0, 1.0], buf, **hyper)
    np.testing.assert_allclose(buf, [-0.53151, 1.18677], rtol=1e-14)
    np.testing.assert_allclose(p, [1.002151, -2.141677], rtol=1e-14)


def test_sgd_without_momentum_is_plain_gradient_descent():
    p, buf = ref.sgd([2.0, 4.0], [1.0, -1.0], [7.0, 8.0], lr=0.5, weight_decay=0.1)
    np.testing.assert_allclose(p, [2.0 - 0.5 * 1.2, 4.0 - 0.5 * (-0.6)], rtol=1e-15)
    np.testing.assert_array_equal(buf, [7.0, 8.0])        # no momentum: the buffer stays
    p, buf = ref.sgd([2.0], [1.0], None, lr=0.5)
    assert buf is None and p[0] == 1.5


def test_adamw_two_steps_by_hand():
    hyper = dict(lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    p, m, v = ref.adamw([1.0], [0.5], [0.0], [0.0], step=1, **hyper)
    # Step 1: m = 0.1 * 0.5, v = 0.001 * 0.25; bias-corrected they are g and g^2, so the step
    # is lr * g / (|g| + eps), after the decoupled decay p * (1 - lr * wd).
    np.testing.assert_allclose(m, [0.05], rtol=1e-15)
    np.testing.assert_allclose(v, [0.00025], rtol=1e-15)
    p1 = 1.0 * (1 - 0.1 * 0.01) - 0.1 * 0.5 / (0.5 + 1e-8)
    np.testing.assert_allclose(p, [p1], rtol=1e-15)
    p, m, v = ref.adamw(p, [-0.25], m, v, step=2, **hyper)
    # Step 2: m = 0.9 * 0.05 + 0.1 * -0.25; v = 0.999 * 0.00025 + 0.001 * 0.0625; the bias
    # corrections are 1 - 0.9**2 = 0.19 and 1 - 0.999**2 = 0.001999.
    np.testing.assert_allclose(m, [0.02], rtol=1e-14)
    np.testing.assert_allclose(v, [0.00031225], rtol=1e-14)
    p2 = p1 * (1 - 0.1 * 0.01) - 0.1 * (0.02 / 0.19) / (math.sqrt(0.00031225 / 0.001999) + 1e-8)
    np.testing.assert_allclose(p, [p2], rtol=1e-13)


def test_adamw_weight_decay_is_decoupled():
    # A zero gradient moves no moment: only the decay p * (1 - lr * wd) is left (Adam with an
    # L2 term would fold the decay into the gradient and take a full-size step).
    p, m, v = ref.adamw([3.0, -1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], step=1, lr=0.01,
                        weight_decay=0.5)
    np.testing.assert_allclose(p, [3.0 * 0.995, -1.0 * 0.995], rtol=1e-15)
    assert not m.any() and not v.any()


# -- embedding ----------------------------------------------------------------------------------
def test_embedding_gathers_rows_and_marks_bad_ids():
    w = np.arange(12.0).reshape(4, 3)
    out = ref.embedding(w, [[3, 0], [1, 1]])
    assert out.shape == (2, 2, 3)
    np.testing.assert_array_equal(out[0, 0], w[3])
    np.testing.assert_array_equal(out[1], [w[1], w[1]])
    bad = ref.embedding(w, [2, 4, -1])
    np.testing.assert_array_equal(bad[0], w[2])
    assert np.isnan(bad[1:]).all()


def test_embedding_backward_is_a_scatter_add():
    rng = np.random.default_rng(13)
    ids = np.array([[2, 0, 2], [5, 2, -1]])             # repeats add up; 5 and -1 are out
    dy = rng.standard_normal((2, 3, 4))
    got = ref.embedding_backward(dy, ids, 5)
    want = np.zeros((5, 4))
    for r, i in enumerate(ids.reshape(-1)):
        if 0 <= i < 5:
            want[i] += dy.reshape(6, 4)[r]
    np.testing.assert_allclose(got, want, rtol=1e-15)
    assert not got[[1, 3, 4]].any()
    # The gradient of sum(embedding(w, ids) * dy) in w, for ids in range.
    ok = np.array([[2, 0, 2], [4, 2, 1]])
    w = rng.standard_normal((5, 4))
    num = _central_differences(lambda v: float((ref.embedding(v, ok) * dy).sum()), w)
    np.testing.assert_allclose(ref.embedding_backward(dy, ok, 5), num, rtol=1e-6, atol=1e-9)


# -- global average pooling ---------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 3, 2, 2), (2, 2, 7)])
def test_global_avg_pool_is_the_spatial_mean(shape):
    x = np.random.default_rng(14).standard_normal(shape)
    y = ref.global_avg_pool(x)
    np.testing.assert_allclose(y, x.mean(axis=tuple(range(2, x.ndim))), rtol=1e-14)
    assert y.shape == shape[:2]


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 3, 2, 2)])
def test_global_avg_pool_backward_matches_finite_differences(shape):
    rng = np.random.default_rng(15)
    x = rng.standard_normal(shape)
    dy = rng.standard_normal(shape[:2])
    got = ref.global_avg_pool_backward(dy, shape)
    assert got.shape == shape and got.flags.writeable
    num = _central_differences(lambda v: float((ref.global_avg_pool(v) * dy).sum()), x)
    np.testing.assert_allclose(got, num, rtol=1e-6, atol=1e-9)
