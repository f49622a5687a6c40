"""BatchNormPlan without a GPU: construction and validation (descriptor calls need no device),
the plan protocol's shape, repr, close and use after close, the one-shot functions' cache
entries under the named key -- everything that fires before the first call that needs a
device."""

import numpy as np
import pytest
from test_cudnn import _Other, _fake   # the stand-in device arrays of the cuDNN CPU tests

from cudalibs.cudnn import norm
from cudalibs.runtime.plan import Plan
from cudalibs.runtime.cache import cache
from cudalibs.errors import ClosedError


@pytest.fixture(autouse=True)
def _forget_stand_in_plans():
    """Plans keyed by stand-in devices never outlive a test."""
    yield
    cache.clear(norm.BATCH_NORM_KEY.name)


def test_plan_is_a_plan_with_owned_descriptors():
    assert issubclass(norm.BatchNormPlan, Plan)
    assert norm.BatchNormPlan.kind == "cudnn_batch_norm" and norm.BatchNormPlan.library == "cuDNN"
    plan = norm.BatchNormPlan(_fake((4, 8, 5, 5), np.float16, True))
    assert plan.training and plan.mode == "spatial" and plan.persistent
    assert plan.layout == "NHWC" and plan.channels_last and plan.shape == (4, 8, 5, 5)
    assert plan.param_shape == (8,) and plan.param_dtype == np.float32
    assert plan.dtype == np.float16 and plan.choice == -1
    r = repr(plan)
    assert "BatchNormPlan" in r and "(4, 8, 5, 5)" in r and "NHWC" in r and "not planned" in r
    assert "persistent" in r and "training" in r
    # data, parameters and the fused relu: owned by the plan, closed with it
    assert len(plan._descs) == 3 and not any(d.closed for d in plan._descs)
    plan.close()
    plan.close()                        # idempotent
    assert plan.closed and all(d.closed for d in plan._descs) and "(closed)" in repr(plan)


@pytest.mark.parametrize("shape, dtype, cl, mode, want", [
    ((4, 3, 5, 5), np.float32, False, "spatial", ((3,), np.float32, "NCHW", False, 2)),
    ((4, 3, 5, 5, 2), np.float64, True, "per_activation",
     ((3, 5, 5, 2), np.float64, "NDHWC", False, 2)),
    ((16, 5), np.float32, False, "spatial", ((5,), np.float32, "NC", False, 2)),
    ((2, 8, 3, 3), "bfloat16", False, "spatial", ((8,), np.float32, "NCHW", False, 2)),
])
def test_plan_properties(shape, dtype, cl, mode, want):
    pshape, pdtype, layout, persistent, ndescs = want
    with norm.BatchNormPlan(_fake(shape, dtype, cl), mode=mode, training=False) as plan:
        assert (plan.param_shape, plan.param_dtype, plan.layout, plan.persistent) == \
            (pshape, np.dtype(pdtype), layout, persistent)
        assert len(plan._descs) == ndescs and not plan.training
        assert "inference" in repr(plan)
    assert plan.closed


@pytest.mark.parametrize("make, exc, match", [
    (lambda: norm.BatchNormPlan(_fake((2, 3, 4, 4)), mode="x"), ValueError, "spatial"),
    (lambda: norm.BatchNormPlan(_fake((2, 3, 4, 4), np.int32)), TypeError, "int32"),
    (lambda: norm.BatchNormPlan(_fake((3,))), ValueError, "2 to 5"),
    (lambda: norm.BatchNormPlan(_fake((1, 3, 1, 1))), ValueError, "more than one value"),
    (lambda: norm.BatchNormPlan(_fake((1, 3, 2, 2)), mode="per_activation"), ValueError,
     "more than one value"),
    (lambda: norm.BatchNormPlan(np.ones((2, 3, 4, 4), np.float32)), TypeError, "host numpy"),
])
def test_construction_validates(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_one_value_per_channel_is_fine_for_inference():
    plan = norm.BatchNormPlan(_fake((1, 3, 1, 1)), training=False)
    assert not plan.training
    plan.close()


def test_training_none_trains_where_the_data_allows_it():
    # The one-shots' plans: one plan serves training, inference and backward of a problem,
    # and a problem of one value per channel can only be inferred.
    with norm.BatchNormPlan(_fake((4, 3, 5, 5)), training=None) as plan:
        assert plan.training and "training" in repr(plan)
    with norm.BatchNormPlan(_fake((1, 3, 1, 1)), training=None) as plan:
        assert not plan.training and "inference" in repr(plan)
    with pytest.raises(ValueError, match="more than one value"):
        norm.BatchNormPlan(_fake((1, 3, 1, 1)), training=True)


def test_execute_checks_before_any_c_call():
    x = _fake((4, 3, 5, 5))
    g = _fake((3,))
    plan = norm.BatchNormPlan(x)
    with pytest.raises(ValueError, match="the plan was made for"):
        plan.execute(_fake((4, 3, 5, 6)), g, g)
    with pytest.raises(ValueError, match="the plan was made for"):
        plan.execute(_fake((4, 3, 5, 5), np.float16), g, g)
    with pytest.raises(ValueError, match="the plan was made for"):
        plan.execute(_fake((4, 3, 5, 5), channels_last=True), g, g)
    with pytest.raises(ValueError, match="device 1"):
        plan.execute(_fake((4, 3, 5, 5), dev=_Other()), g, g)
    with pytest.raises(ValueError, match="momentum"):
        plan.execute(x, g, g, momentum=1.5)
    with pytest.raises(ValueError, match="channels-last"):
        plan.execute(x, g, g, activation="relu")
    # a parameter of one element where the problem has three channels is refused
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        plan.execute(x, _fake((1,)), g)
    with pytest.raises(ValueError, match="both running"):
        plan.execute(x, g, g, g)
    with pytest.raises(ValueError, match="eps"):      # (1, C, 1, 1) parameters pass
        plan.execute(x, _fake((1, 3, 1, 1)), _fake((1, 3)), eps=0)
    with pytest.raises(ValueError, match="both save_mean"):
        plan.backward(x, x, g, g)
    plan.close()
    for call in (lambda: plan.execute(x, g, g), lambda: plan.backward(x, x, g),
                 lambda: plan.plan()):
        with pytest.raises(ClosedError, match="BatchNormPlan is closed"):
            call()


def test_inference_plan_refuses_training_arguments():
    x, g = _fake((4, 3, 5, 5)), _fake((3,))
    with norm.BatchNormPlan(x, training=False) as plan:
        for kw in ({"momentum": 0.2}, {"activation": "relu"}):
            with pytest.raises(ValueError, match="training=False"):
                plan.execute(x, g, g, g, g, **kw)
        with pytest.raises(ValueError, match="inference"):
            plan.backward(x, x, g)
        with pytest.raises(ValueError, match="var is required"):
            plan.execute(x, g, g, g)


def test_one_shots_share_one_cached_plan_under_the_named_key():
    x, g = _fake((4, 3, 5, 5)), _fake((3,))
    for call in (lambda: norm.batch_norm_train(x, g, g, eps=0),
                 lambda: norm.batch_norm_infer(x, g, g, g, g, eps=0),
                 lambda: norm.batch_norm_backward(x, x, g, g, g, eps=0)):
        with pytest.raises(ValueError, match="eps"):
            call()
    entries = cache.entries(norm.BATCH_NORM_KEY.name)
    assert len(entries) == 1
    e = entries[0]
    assert e.key["x_shape"] == (4, 3, 5, 5) and e.key["mode"] == "spatial"
    assert e.key["dtype"] == np.float32 and e.key["x_strides"] == x.strides
    plan = e.plan
    assert isinstance(plan, norm.BatchNormPlan) and plan.training
    assert norm.batch_norm_paths(x) == {} and plan.paths == {}
    # a closed cached plan is replaced by the next call, never used
    plan.close()
    with pytest.raises(ValueError, match="eps"):
        norm.batch_norm_train(x, g, g, eps=0)
    (e2,) = cache.entries(norm.BATCH_NORM_KEY.name)
    assert e2.plan is not plan and not e2.plan.closed


def test_one_shot_inference_of_one_value_per_channel_shares_the_entry():
    x, g = _fake((1, 3, 1, 1)), _fake((3,))
    with pytest.raises(ValueError, match="eps"):
        norm.batch_norm_infer(x, g, g, g, g, eps=0)
    (e,) = cache.entries(norm.BATCH_NORM_KEY.name)
    assert not e.plan.training
    with pytest.raises(ValueError, match="more than one value"):
        norm.batch_norm_train(x, g, g)


def test_backward_state_mode_must_match_the_plan():
    from cudalibs.cudnn import BatchNormState

    x, g = _fake((4, 3, 5, 5)), _fake((3,))
    st = BatchNormState()
    st.y, st.save_mean, st.save_inv_std, st.reserve = x, g, g, None
    st.path, st.mode, st.eps, st.activation, st.fused_add, st.bias = ("ex", "per_activation",
                                                                      1e-5, None, False, g)
    with norm.BatchNormPlan(x) as plan:
        with pytest.raises(ValueError, match="differs from the forward's 'per_activation'"):
            plan.backward(x, x, g, st)
