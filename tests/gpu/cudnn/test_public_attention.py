"""Attention's public bounds and keys on a GPU: the largest head dims (``MAX_HEAD_DIM`` forward,
``MAX_HEAD_DIM_BACKWARD`` backward) run and match the float64 reference, one step more is
refused before cuDNN; the one-shots' plans live under ``SDPA_KEY`` / ``SDPA_BACKWARD_KEY``;
and the causal mask equals the reference's ``sdpa_mask`` given as an additive bias."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.cudnn import attention as A
from cudalibs.testing.ref import _attention as R

from .._plans import cached

F16 = np.dtype(np.float16)


def _qkv(rng, b, h, s_q, s_kv, d):
    q = T.random_array((b, h, s_q, d), F16, rng=rng)
    k = T.random_array((b, h, s_kv, d), F16, rng=rng)
    v = T.random_array((b, h, s_kv, d), F16, rng=rng)
    return (q, k, v), tuple(cl.to_device(x) for x in (q, k, v))


def test_the_largest_forward_head_dim(device, rng):
    d = A.MAX_HEAD_DIM
    (q, k, v), dev = _qkv(rng, 1, 2, 64, 80, d)
    T.assert_close(A.sdpa(*dev), R.sdpa_forward(q, k, v)[0], F16, msg=f"d = {d}")
    (_, _, _), over = _qkv(rng, 1, 2, 64, 80, d + 8)
    with pytest.raises(ValueError, match=f"head dim of q and k is {d + 8}"):
        A.sdpa(*over)


def test_the_largest_backward_head_dim(device, rng):
    d = A.MAX_HEAD_DIM_BACKWARD
    (q, k, v), dev = _qkv(rng, 2, 2, 64, 96, d)
    o, stats = A.sdpa(*dev, training=True)
    doh = T.random_array(o.shape, F16, rng=rng)
    grads = A.sdpa_backward(*dev, o, cl.to_device(doh), stats)
    for name, got, want in zip(("dq", "dk", "dv"), grads, R.sdpa_backward(q, k, v, doh)):
        T.assert_close(got, want, F16, msg=f"{name}, d = {d}")
    # one step more: the forward takes it (up to MAX_HEAD_DIM), the backward refuses it
    assert d + 8 <= A.MAX_HEAD_DIM
    (_, _, _), over = _qkv(rng, 1, 2, 64, 64, d + 8)
    o, stats = A.sdpa(*over, training=True)
    with pytest.raises(ValueError, match=f"head dim of q and k is {d + 8}"):
        A.sdpa_backward(*over, o, o, stats)


def test_the_one_shots_plans_live_under_their_keys(device, rng):
    (_, _, _), dev = _qkv(rng, 1, 4, 96, 96, 64)
    o, stats = A.sdpa(*dev, causal=True, training=True)
    A.sdpa_backward(*dev, o, o, stats, causal=True)
    (fwd,) = cached(cudnn.SDPA_KEY, q_shape=dev[0].shape, causal=True, training=True)
    assert isinstance(fwd.plan, cudnn.SdpaPlan)
    (bwd,) = cached(A.SDPA_BACKWARD_KEY, q_shape=dev[0].shape, causal=True)
    assert isinstance(bwd.plan, cudnn.SdpaBackwardPlan)
    assert cudnn.SDPA_KEY is A.SDPA_KEY and cudnn.SDPA_BACKWARD_KEY is A.SDPA_BACKWARD_KEY
    # a second call of each finds its plan
    A.sdpa(*dev, causal=True, training=True)
    assert len(cached(cudnn.SDPA_KEY, q_shape=dev[0].shape, causal=True, training=True)) == 1


def test_the_causal_mask_is_the_references_mask(device, rng):
    b, h, s = 2, 2, 128
    (q, k, v), dev = _qkv(rng, b, h, s, s, 64)
    visible = R.sdpa_mask((b, s, s), causal=True)
    assert visible.shape == (b, 1, s, s) and visible.any(axis=3).all()
    # -30000 in float16: exp of it is 0 in any precision, as for a masked score
    bias = np.where(visible, 0.0, -30000.0).astype(F16)
    causal = A.sdpa(*dev, causal=True)
    masked = A.sdpa(*dev, bias=cl.to_device(bias))
    want = R.sdpa_forward(q, k, v, causal=True)[0]
    T.assert_close(causal, want, F16, msg="causal=True")
    T.assert_close(masked, want, F16, msg="the reference's mask as a bias")
