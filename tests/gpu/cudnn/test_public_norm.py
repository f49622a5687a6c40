"""The layer / RMS norm one-shots keep their plans under ``NORM_FORWARD_KEY`` and
``NORM_BACKWARD_KEY``, readable by field name, one per problem, and compute the reference's
values through them."""

import numpy as np
import pytest

from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.testing.ref import _norm as ref

from .._plans import cached
from ._helpers import rand


@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_norm_plans_live_under_their_keys(device, rng, mode):
    cudnn.clear_norm_cache()
    shape = (6, 40, 512)
    xh, x = rand(shape, "float32", rng)
    wh, w = rand(shape[-1:], "float32", rng, low=0.5, high=1.5)
    dyh, dy = rand(shape, "float32", rng)
    if mode == "layer":
        bh, b = rand(shape[-1:], "float32", rng)
        y, mean, inv = cudnn.layer_norm(x, w, b, training=True)
        y_ref = ref.layer_norm(xh, wh, bh)[0]
        grads = cudnn.layer_norm_backward(dy, x, w, mean, inv)
        grads_ref = ref.layer_norm_backward(dyh, xh, wh, mean.get(), inv.get())
        infer = (x, w, b)
    else:
        y, inv = cudnn.rms_norm(x, w, training=True)
        y_ref = ref.rms_norm(xh, wh)[0]
        grads = cudnn.rms_norm_backward(dy, x, w, inv)
        grads_ref = ref.rms_norm_backward(dyh, xh, wh, inv.get())
        infer = (x, w)
    T.assert_close(y, y_ref, np.float32, msg=f"{mode} norm")
    for i, (got, want) in enumerate(zip(grads, grads_ref)):
        T.assert_close(got, want, np.float32, msg=f"{mode} norm gradient {i}")
    (fwd,) = cached(cudnn.NORM_FORWARD_KEY, mode=mode, x_shape=shape, training=True)
    (bwd,) = cached(cudnn.NORM_BACKWARD_KEY, mode=mode, x_shape=shape)
    assert isinstance(fwd.plan, cudnn.NormForwardPlan) and fwd.plan.training
    assert isinstance(bwd.plan, cudnn.NormBackwardPlan)
    assert {e.kind for e in cudnn.norm_cache()} == {cudnn.NORM_FORWARD_KEY.name,
                                                    cudnn.NORM_BACKWARD_KEY.name}
    # inference is another problem: another forward plan, the training one untouched
    (cudnn.layer_norm if mode == "layer" else cudnn.rms_norm)(*infer)
    assert len(cached(cudnn.NORM_FORWARD_KEY, mode=mode, x_shape=shape)) == 2
    cudnn.clear_norm_cache()
    assert cudnn.norm_cache() == []
