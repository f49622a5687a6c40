"""cuDNN batch-norm, pooling, activations, softmax and add_tensor against numpy float64."""

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.cudnn import BatchNormState, batch_norm_paths
from cudalibs.testing import ref

from .._sizes import bound, fit
from ._helpers import FLOATS, GPU, device_array, is_channels_last, poisoned, rand


#: The most elements of one wide example's arrays (its references stay quick on the host).
ELEMENTS = 1 << 20


@st.composite
def nd_shapes(draw, min_dims=4, max_dims=5, max_side=6):
    """Shapes of ``min_dims`` to ``max_dims`` sides up to ``max_side``; under
    HYPOTHESIS_PROFILE=wide the channels (the second side) up to 1100 -- a softmax or
    normalisation across more than one CUDA block -- the others up to 64, cut to
    :data:`ELEMENTS` on the other sides first."""
    nd = draw(st.integers(min_dims, max_dims))
    sides = [draw(st.integers(1, bound(max_side, 1100 if i == 1 else 64))) for i in range(nd)]
    return fit(sides, ELEMENTS, keep=(1,))


# -- batch normalization --------------------------------------------------------------------------
def _pdtype(dtype):
    return np.float64 if dtype == "float64" else np.float32


def _batch_norm_dx_scale(xh, dyh, gh, eps, mode):
    """The magnitude of the terms of batch norm's input gradient, element by element:
    ``dx = g inv (dy - mean(dy) - x̂ mean(dy x̂))`` with ``x̂ = (x - mean) inv`` evaluated on
    absolute values, ``|x̂|`` taken as ``(|x| + |mean|) inv``.  Rounding errs relative to
    these, not to ``dx``: where an activation's few values lie close together (per-activation
    mode over a batch of 4), ``x - mean`` cancels and ``x̂`` carries ``u (|x| + |mean|) inv``.
    """
    x, dy = xh.astype(np.float64), dyh.astype(np.float64)
    axes = (0,) if mode == "per_activation" else (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    g = np.abs(gh.astype(np.float64)).reshape(mean.shape)
    xhat = (np.abs(x) + np.abs(mean)) * inv
    terms = (np.abs(dy) + np.abs(dy).mean(axis=axes, keepdims=True)
             + xhat * (np.abs(dy) * xhat).mean(axis=axes, keepdims=True))
    return g * inv * terms


def _assert_batch_norm_dx(dx, wdx, dtype, scale):
    """``dx`` within the type's tolerance norm-wise, and each element within 10 tolerances of
    ``|expected| + max(RMS of expected, its terms' magnitude)`` (the usual floor, raised where
    the activation is ill-conditioned; the terms' norm would loosen the norm-wise bound for
    all elements because of a few)."""
    got = np.asarray(dx.get(), np.float64)
    tol = T.TOLERANCES[dtype]
    err = np.linalg.norm(got - wdx) / np.linalg.norm(wdx)
    assert err <= tol, f"dx: relative error {err:.3e} > tolerance {tol:.1e}"
    rms = np.sqrt(np.mean(wdx ** 2))
    T.assert_within(got, wdx, 10 * tol * (np.abs(wdx) + np.maximum(rms, scale)), msg="dx")


@GPU
@given(shape=nd_shapes(), dtype=st.sampled_from(FLOATS + ("float64",)), cl_=st.booleans(),
       mode=st.sampled_from(["spatial", "per_activation"]), seed=st.integers(0, 2**31))
def test_batch_norm_train_and_backward(device, shape, dtype, cl_, mode, seed):
    # a few values per channel: with two, batch-norm's input gradient is all cancellation
    shape = (max(shape[0], 4),) + shape[1:]
    rng = np.random.default_rng(seed)
    pshape = (shape[1],) if mode == "spatial" else shape[1:]
    pd = _pdtype(dtype)
    xh, x = rand(shape, dtype, rng, cl_)
    gh, g = rand(pshape, pd, rng)
    bh, b = rand(pshape, pd, rng)
    rmh, rm = rand(pshape, pd, rng)
    rvh, rv = rand(pshape, pd, rng, low=0.5, high=1.5)
    note(f"{shape} {dtype} channels_last={cl_} {mode}")
    state = cudnn.batch_norm_train(x, g, b, rm, rv, momentum=0.2, eps=1e-4, mode=mode,
                                   out=poisoned(shape, xh.dtype, cl_))
    y, mean, inv = state
    note(f"{state!r}; paths {batch_norm_paths(x, mode)}")
    wy, wmean, winv, wrm, wrv = ref.batch_norm_train(xh, gh, bh, rmh, rvh, 0.2, 1e-4, mode)
    T.assert_close(y, wy, dtype)
    # statistics are float32 (float64) sums of the inputs, which the reference sees exactly
    for got, want in ((mean, wmean), (inv, winv), (rm, wrm), (rv, wrv)):
        T.assert_close(got, want, pd)
    dyh, dy = rand(shape, dtype, rng, cl_)
    dx, dg, db = cudnn.batch_norm_backward(x, dy, g, mean, inv, eps=1e-4, mode=mode,
                                           out=poisoned(shape, xh.dtype, cl_))
    wdx, wdg, wdb = ref.batch_norm_backward(xh, dyh, gh, 1e-4, mode)
    dx_scale = _batch_norm_dx_scale(xh, dyh, gh, 1e-4, mode)
    _assert_batch_norm_dx(dx, wdx, dtype, dx_scale)
    T.assert_close(dg, wdg, dtype)
    T.assert_close(db, wdb, dtype)
    # the same through the state (statistics, reserve space, eps and mode travel with it)
    dx, dg, db = cudnn.batch_norm_backward(x, dy, g, state, out=poisoned(shape, xh.dtype, cl_))
    note(f"paths after the backward with the state: {batch_norm_paths(x, mode)}")
    _assert_batch_norm_dx(dx, wdx, dtype, dx_scale)
    T.assert_close(dg, wdg, dtype)
    T.assert_close(db, wdb, dtype)


@GPU
@given(shape=nd_shapes(), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       seed=st.integers(0, 2**31))
def test_batch_norm_infer(device, shape, dtype, cl_, seed):
    rng = np.random.default_rng(seed)
    xh, x = rand(shape, dtype, rng, cl_)
    p = [rand((shape[1],), np.float32, rng) for _ in range(3)]
    vh, v = rand((shape[1],), np.float32, rng, low=0.5, high=1.5)
    y = cudnn.batch_norm_infer(x, p[0][1], p[1][1], p[2][1], v, eps=1e-3,
                               out=poisoned(shape, xh.dtype, cl_))
    want = ref.batch_norm_infer(xh, p[0][0], p[1][0], p[2][0], vh, eps=1e-3)
    T.assert_close(y, want, dtype)


def test_batch_norm_2d_input(device, rng):
    xh, x = rand((16, 5), "float32", rng)
    gh, g = rand((5,), "float32", rng)
    bh, b = rand((5,), "float32", rng)
    y, _, _ = cudnn.batch_norm_train(x, g, b)
    T.assert_close(y, ref.batch_norm_train(xh, gh, bh)[0], np.float32)


def _nhwc_bn_problem(rng, shape, dtype, c_mult=1):
    n, c, h, w = shape
    shape = (max(n, 2), c * c_mult, h, w)
    xh, x = rand(shape, dtype, rng, True)
    gh, g = rand((shape[1],), np.float32, rng)
    bh, b = rand((shape[1],), np.float32, rng)
    return shape, xh, x, gh, g, bh, b


@GPU
@given(shape=nd_shapes(4, 4, max_side=8), dtype=st.sampled_from(["float16", "bfloat16"]),
       seed=st.integers(0, 2**31))
def test_batch_norm_nhwc_half_takes_the_ex_path(device, shape, dtype, seed):
    rng = np.random.default_rng(seed)
    shape, xh, x, gh, g, bh, b = _nhwc_bn_problem(rng, shape, dtype)
    rmh, rm = rand((shape[1],), np.float32, rng)
    rvh, rv = rand((shape[1],), np.float32, rng, low=0.5, high=1.5)
    state = cudnn.batch_norm_train(x, g, b, rm, rv, momentum=0.3, eps=1e-3,
                                   out=poisoned(shape, xh.dtype, True))
    assert isinstance(state, BatchNormState)
    paths = batch_norm_paths(x)
    note(f"{shape} {dtype}: {state!r}; paths {paths}")
    if dtype == "float16":
        # the point of the Ex entry points: channels-last half data reaches the fast kernel
        assert state.path == "ex" and paths["forward"] == "ex", paths
    assert is_channels_last(state.y)
    wy, wmean, winv, wrm, wrv = ref.batch_norm_train(xh, gh, bh, rmh, rvh, 0.3, 1e-3)
    T.assert_close(state.y, wy, dtype)
    for got, want in ((state.save_mean, wmean), (state.save_inv_std, winv), (rm, wrm),
                      (rv, wrv)):
        T.assert_close(got, want, np.float32)
    dyh, dy = rand(shape, dtype, rng, True)
    wdx, wdg, wdb = ref.batch_norm_backward(xh, dyh, gh, 1e-3)
    # with the reserve, three ways: the state, reserve= beside the statistics, and none
    for how in ("state", "reserve=", "no reserve"):
        if how == "state":
            got = cudnn.batch_norm_backward(x, dy, g, state, out=poisoned(shape, xh.dtype, True))
        elif how == "reserve=":
            got = cudnn.batch_norm_backward(x, dy, g, state.save_mean, state.save_inv_std,
                                            reserve=state.reserve, eps=1e-3,
                                            out=poisoned(shape, xh.dtype, True))
        else:
            got = cudnn.batch_norm_backward(x, dy, g, state.save_mean, state.save_inv_std,
                                            eps=1e-3, out=poisoned(shape, xh.dtype, True))
        note(f"backward ({how}): paths {batch_norm_paths(x)}")
        assert is_channels_last(got[0])
        for a, want in zip(got, (wdx, wdg, wdb)):
            T.assert_close(a, want, dtype)
        if how == "state" and dtype == "float16":
            assert batch_norm_paths(x)["backward"] == "ex", batch_norm_paths(x)


def _cached_bn_plan(x):
    from cudalibs.runtime.cache import cache

    found = [e.plan for e in cache.entries("cudnn_batch_norm") if e.key["x_shape"] == x.shape
             and e.key["x_strides"] == x.strides and e.key["dtype"] == x.dtype]
    assert len(found) == 1, found
    return found[0]


def test_batch_norm_ex_decision_is_cached(device, rng):
    xh, x = rand((4, 8, 5, 5), "float16", rng, True)
    g = cl.to_device(T.random_array((8,), np.float32, rng=rng))
    b = cl.to_device(T.random_array((8,), np.float32, rng=rng))

    first = cudnn.batch_norm_train(x, g, b)
    plan = _cached_bn_plan(x)
    assert isinstance(plan, cudnn.BatchNormPlan) and plan.training
    decided, text = plan.entry_points, repr(plan)
    second = cudnn.batch_norm_train(x, g, b)
    assert _cached_bn_plan(x) is plan
    assert plan.entry_points == decided and repr(plan) == text, (decided, text)
    assert first.path == second.path
    T.assert_close(second.y, first.y.get(), "float16")


def test_batch_norm_float32_nchw_and_float64_paths(device, rng):
    # float64 always takes the plain entry points; whatever cuDNN says for float32 NCHW,
    # the result is right and the path recorded.
    for dtype in ("float32", "float64"):
        xh, x = rand((4, 3, 5, 5), dtype, rng)
        pd = _pdtype(dtype)
        gh, g = rand((3,), pd, rng)
        bh, b = rand((3,), pd, rng)
        state = cudnn.batch_norm_train(x, g, b)
        paths = batch_norm_paths(x)
        print(dtype, paths)
        assert paths["forward"].split(":")[0] == state.path
        if dtype == "float64":
            assert state.path == "legacy" and state.reserve is None
        T.assert_close(state.y, ref.batch_norm_train(xh, gh, bh)[0], dtype)


@GPU
@given(shape=nd_shapes(4, 4, max_side=6), add=st.booleans(), seed=st.integers(0, 2**31))
def test_batch_norm_fused_relu(device, shape, add, seed):
    # cuDNN fuses relu(bn(x) [+ z]) for channels-last half data; channels a multiple of 4
    # (the documented alignment of the persistent kernels)
    rng = np.random.default_rng(seed)
    shape, xh, x, gh, g, bh, b = _nhwc_bn_problem(rng, shape, "float16", c_mult=4)
    zh, z = rand(shape, "float16", rng, True) if add else (None, None)
    state = cudnn.batch_norm_train(x, g, b, eps=1e-3, activation="relu", z=z,
                                   out=poisoned(shape, xh.dtype, True))
    note(f"{shape} add={add}: {state!r}; paths {batch_norm_paths(x)}")
    assert state.path == "ex" and state.activation == "relu" and state.fused_add == add
    pre, *_ = ref.batch_norm_train(xh, gh, bh, eps=1e-3)
    if add:
        pre = pre + zh.astype(np.float64)
    T.assert_close(state.y, ref.relu(pre), "float16")
    dyh, dy = rand(shape, "float16", rng, True)
    got = cudnn.batch_norm_backward(x, dy, g, state, out=poisoned(shape, xh.dtype, True))
    assert len(got) == (4 if add else 3)
    # the gradient through the relu, masked where cuDNN's own output is positive (values
    # within rounding of zero would otherwise make the mask ambiguous)
    gpre = ref.relu_backward(dyh, state.y.get())
    wdx, wdg, wdb = ref.batch_norm_backward(xh, gpre, gh, 1e-3)
    # The backward may recompute its mask from its own float32 pre-activation, which can take
    # the other side of zero than the rounded output did: an element whose pre-activation lies
    # within a few roundings of zero (of its summands) may have either gradient, and only the
    # others are compared element by element (a flip moves the channel's sums by 1/count).
    bb = bh.astype(np.float64).reshape((1, -1) + (1,) * (pre.ndim - 2))
    summands = np.abs(pre - bb) + np.abs(bb)
    if add:
        summands = summands + np.abs(zh.astype(np.float64))
    sure = np.abs(pre) > 16 * T.unit_roundoff(np.float16) * summands
    T.assert_close(np.asarray(got[0].get(), np.float64)[sure], wdx[sure], "float16")
    T.assert_close(got[1], wdg, "float16")
    T.assert_close(got[2], wdb, "float16")
    if add:
        T.assert_close(np.asarray(got[3].get(), np.float64)[sure], gpre[sure], "float16")


# -- pooling ---------------------------------------------------------------------------------------
@st.composite
def pool_problems(draw):
    nsp = draw(st.sampled_from([2, 3]))
    win = tuple(draw(st.integers(1, 3)) for _ in range(nsp))
    pad = tuple(draw(st.integers(0, w - 1)) for w in win)
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nsp))
    x = (draw(st.integers(1, 2)), draw(st.integers(1, bound(4, 256)))) + tuple(
        draw(st.integers(max(1, w - 2 * p), bound(8, 64))) for w, p in zip(win, pad))
    # cut the channels, then the batch, so every spatial side keeps its window
    return fit(x, ELEMENTS, keep=tuple(range(2, len(x)))), win, pad, stride


@GPU
@given(prob=pool_problems(), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       mode=st.sampled_from(["max", "avg", "avg_exclude_padding"]), seed=st.integers(0, 2**31))
def test_pooling(device, prob, dtype, cl_, mode, seed):
    xs, win, pad, stride = prob
    rng = np.random.default_rng(seed)
    xh, x = rand(xs, dtype, rng, cl_)
    note(f"x {xs} window {win} padding {pad} stride {stride} {dtype} cl={cl_} {mode}")
    ys = cudnn.pooling_output_shape(xs, win, stride=stride, padding=pad)
    y = cudnn.pooling_forward(x, win, stride=stride, padding=pad, mode=mode,
                              out=poisoned(ys, xh.dtype, cl_))
    want = ref.pooling_forward(xh, win, stride, pad, mode)
    T.assert_close(y, want, dtype)
    if mode == "max" and dtype != "float32":
        return  # ties after rounding to 16 bits make the max gradient ambiguous
    dyh, dy = rand(ys, dtype, rng, cl_)
    dx = cudnn.pooling_backward(y, dy, x, win, stride=stride, padding=pad, mode=mode,
                                out=poisoned(xs, xh.dtype, cl_))
    T.assert_close(dx, ref.pooling_backward(xh, dyh, win, stride, pad, mode), dtype)


# -- activations, softmax, add_tensor ---------------------------------------------------------------
ACTS = [("relu", None), ("sigmoid", None), ("tanh", None), ("clipped_relu", 0.5),
        ("elu", 0.7), ("swish", None), ("identity", None)]


@GPU
@given(shape=nd_shapes(2, 5), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       act=st.sampled_from(ACTS), seed=st.integers(0, 2**31))
def test_activation(device, shape, dtype, cl_, act, seed):
    mode, coef = act
    rng = np.random.default_rng(seed)
    xh, x = rand(shape, dtype, rng, cl_, low=-2, high=2)
    if mode == "clipped_relu" and np.any(xh == coef):
        # At the ceiling itself the derivative is a convention (cuDNN passes the gradient,
        # the reference does not); bfloat16 lands there often.  Move those inputs above it.
        xh = np.where(xh == coef, np.asarray(2 * coef, xh.dtype), xh)
        x = device_array(xh, cl_)
    y = cudnn.activation_forward(x, mode, coef=coef, swish_beta=1.5,
                                 out=poisoned(shape, xh.dtype, cl_))
    # cuDNN evaluates the transcendental activations of bfloat16 data with approximate
    # 16-bit arithmetic: tanh of one element near -0.0726 came out 2.7 bfloat16 ulps off
    # (relative error 1.8e-2); the bound here is twice the 16-bit tolerance, for those only.
    loose = dtype == "bfloat16" and mode in ("tanh", "sigmoid", "elu", "swish")
    T.assert_close(y, ref.activation(xh, mode, coef or 0.0, 1.5), dtype,
                   rtol=2e-2 if loose else None)
    dyh, dy = rand(shape, dtype, rng, cl_)
    dx = cudnn.activation_backward(y, dy, x, mode, coef=coef, swish_beta=1.5,
                                   out=poisoned(shape, xh.dtype, cl_))
    T.assert_close(dx, ref.activation_backward(xh, dyh, mode, coef or 0.0, 1.5), dtype)


def test_activation_in_place(device, rng):
    xh, x = rand((3, 4, 5, 6), "float32", rng)
    assert cudnn.activation(x, "relu", out=x) is x
    T.assert_close(x, ref.relu(xh), np.float32)


def test_shifted_overlap_is_refused(device, rng):
    """In place means the very same array; an output shifted against its input is refused
    before cuDNN runs (it would read elements it already overwrote)."""
    _, big = rand((240,), "float32", rng)
    before = big.get()
    x, shifted = big[0:120].reshape(1, 4, 5, 6), big[60:180].reshape(1, 4, 5, 6)
    with pytest.raises(ValueError, match="overlaps x without being x itself"):
        cudnn.activation_forward(x, "relu", out=shifted)
    with pytest.raises(ValueError, match="overlaps a without being a itself"):
        cudnn.add_tensor(x, shifted)
    np.testing.assert_array_equal(big.get(), before)


@GPU
@given(shape=nd_shapes(2, 4), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       algorithm=st.sampled_from(["accurate", "log", "fast"]),
       mode=st.sampled_from(["channel", "instance"]), seed=st.integers(0, 2**31))
def test_softmax(device, shape, dtype, cl_, algorithm, mode, seed):
    rng = np.random.default_rng(seed)
    xh, x = rand(shape, dtype, rng, cl_, low=-3, high=3)
    axis = 1 if mode == "channel" else tuple(range(1, len(shape)))
    log = algorithm == "log"
    y = cudnn.softmax_forward(x, algorithm=algorithm, mode=mode,
                              out=poisoned(shape, xh.dtype, cl_))
    want = (ref.log_softmax if log else ref.softmax)(xh.astype(np.float64), axis=axis)
    T.assert_close(y, want, dtype)
    dyh, dy = rand(shape, dtype, rng, cl_)
    dx = cudnn.softmax_backward(y, dy, algorithm=algorithm, mode=mode,
                                out=poisoned(shape, xh.dtype, cl_))
    # the gradient is taken at cuDNN's own output, as cuDNN does
    want = ref.softmax_backward(y.get(), dyh, axis=axis, log=log)
    if np.prod([shape[a] for a in np.atleast_1d(axis)]) == 1:
        # Over a single element the gradient is zero: compare with dy's scale, since a
        # relative error of rounding noise around zero means nothing.
        got = np.abs(dx.get().astype(np.float64)).max()
        assert got <= T.TOLERANCES[np.dtype(xh.dtype).name] * np.abs(dyh.astype(
            np.float64)).max(), got
        return
    T.assert_close(dx, want, dtype)


@GPU
@given(shape=nd_shapes(4, 5), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       seed=st.integers(0, 2**31))
def test_add_tensor_bias_broadcast(device, shape, dtype, cl_, seed):
    rng = np.random.default_rng(seed)
    ch, c = rand(shape, dtype, rng, cl_)
    bh, b = rand((shape[1],), dtype, rng)
    assert cudnn.add_tensor(b, c, alpha=2.0, beta=0.5) is c
    want = 0.5 * ch.astype(np.float64) + 2.0 * bh.astype(np.float64).reshape(
        (1, -1) + (1,) * (len(shape) - 2))
    T.assert_close(c, want, dtype)
    # a full-shape operand in the same layout
    ah, a = rand(shape, dtype, rng, cl_)
    cudnn.add_tensor(a, c)
    T.assert_close(c, want + ah.astype(np.float64), dtype)


# -- torch.nn.functional as a second oracle ------------------------------------------------------
def test_against_torch(device, rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    xh, x = rand((2, 6, 9, 8), "float32", rng)
    wh, w = rand((4, 3, 3, 2), "float32", rng)
    bh, b = rand((4,), "float32", rng)
    tx, tw, tb = (torch.from_numpy(a.astype(np.float64)) for a in (xh, wh, bh))
    want = F.conv2d(tx, tw, tb, stride=(2, 1), padding=(1, 1), dilation=(1, 2), groups=2).numpy()
    np.testing.assert_allclose(ref.conv_forward(xh, wh, (2, 1), (1, 1), (1, 2), 2, bh), want,
                               rtol=1e-10, atol=1e-10)
    y = cudnn.conv_forward(x, w, bias=b, stride=(2, 1), padding=(1, 1), dilation=(1, 2), groups=2)
    T.assert_close(y, want, np.float32)
    want = F.max_pool2d(tx, 3, 2, 1).numpy()
    T.assert_close(cudnn.pooling_forward(x, 3, stride=2, padding=1), want, np.float32)
    want = F.avg_pool2d(tx, 3, 2, 1, count_include_pad=False).numpy()
    T.assert_close(cudnn.pooling_forward(x, 3, stride=2, padding=1, mode="avg_exclude_padding"),
                   want, np.float32)
    g = torch.from_numpy(T.random_array((6,), np.float64, rng=rng))
    rm, rv = torch.zeros(6, dtype=torch.float64), torch.ones(6, dtype=torch.float64)
    want = F.batch_norm(tx, rm, rv, g, None, training=True, momentum=0.3, eps=1e-5).numpy()
    crm, crv = cl.zeros((6,), np.float32), cl.full((6,), 1.0, np.float32)
    y, _, _ = cudnn.batch_norm_train(x, cl.to_device(g.numpy().astype(np.float32)),
                                     cl.zeros((6,), np.float32), crm, crv, momentum=0.3)
    T.assert_close(y, want, np.float32)
    T.assert_close(crv, rv.numpy(), np.float32)
    T.assert_close(crm, rm.numpy(), np.float32)
    T.assert_close(cudnn.softmax(x), F.softmax(tx, dim=1).numpy(), np.float32)


def test_torch_channels_last_tensor(device, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    tx, tw = (torch.from_numpy(T.random_array(shape, np.float32, rng=rng)).cuda().contiguous(
        memory_format=torch.channels_last) for shape in ((2, 8, 6, 6), (4, 8, 3, 3)))
    torch.cuda.synchronize()
    y = cudnn.conv_forward(tx, tw, padding=1)
    assert is_channels_last(y)
    want = torch.nn.functional.conv2d(tx.double(), tw.double(), padding=1).cpu().numpy()
    T.assert_close(y, want, np.float32)
