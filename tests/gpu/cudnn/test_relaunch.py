"""cuDNN graph-API convolutions through recorded kernels: bitwise cudnnBackendExecute."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cudnn
from cudalibs.cudnn import backend
from cudalibs.runtime import relaunch
from cudalibs.runtime.cache import cache as plan_cache

from ._helpers import FLOATS, GPU, poisoned, rand
from .test_conv import _params, conv_problems


def _calls(kind, p, dtype, cl_, seed, s):
    """Five calls of one held plan with operands and outputs changing between them; the
    results on the host, and the plan."""
    rng = np.random.default_rng(seed)
    xs = [rand(p["x"], dtype, rng, cl_)[1] for _ in range(2)]
    ws = [rand(p["w"], dtype, rng, cl_)[1] for _ in range(2)]
    bias = rand((p["w"][0],), dtype, rng)[1]
    if kind == "forward":
        plan = cudnn.ConvForwardPlan(xs[0], ws[0], **_params(p))
    else:
        plan = cudnn.ConvBiasActPlan(xs[0], ws[0], activation="relu", **_params(p))
    got = []
    for ix, iw in ((0, 0), (0, 0), (1, 0), (1, 1), (0, 1)):
        out = poisoned(plan.out_shape, xs[0].dtype, cl_)
        if kind == "forward":
            plan.execute(xs[ix], ws[iw], out=out, stream=s)
        else:
            plan.execute(xs[ix], ws[iw], bias=bias, out=out, stream=s)
        got.append(out.get(stream=s))
    return plan, got


@pytest.mark.parametrize("kind", ["forward", "fused"])
@GPU
@given(p=conv_problems(), dtype=st.sampled_from(FLOATS), cl_=st.booleans(),
       seed=st.integers(0, 2**31))
def test_recorded_convolution_is_the_library_call(device, kind, p, dtype, cl_, seed):
    s = cl.Stream()
    with cl.option_context(relaunch=False):
        _, want = _calls(kind, p, dtype, cl_, seed, s)
    plan, got = _calls(kind, p, dtype, cl_, seed, s)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.tobytes() == w.tobytes(), f"call {i} differs from cudnnBackendExecute ({plan})"
    s.close()


def test_a_common_convolution_is_recorded(device):
    rng = np.random.default_rng(0)
    s = cl.Stream()
    _, x = rand((8, 32, 16, 16), "float16", rng, True)
    _, w = rand((32, 32, 3, 3), "float16", rng, True)
    plan_cache.clear()
    for _ in range(3):
        cudnn.conv_forward(x, w, padding=1, stream=s)
    plans = [e.plan for e in plan_cache.entries() if e.kind == "cudnn_conv_forward"]
    assert plans, plan_cache.entries()
    exe = plans[0]._exe
    gplan = getattr(exe, "gplan", None)
    assert gplan is not None, f"expected the graph API on this GPU: {plans[0]}"
    # The call shape of a plain convolution: every pointer at the graph's alignment, no
    # by-value tensors.
    state = gplan.relaunches.state((backend.ALIGNMENT, (), ()))
    assert isinstance(state, (relaunch.KernelRelaunch, str)) and state, plans[0].relaunch_info()
    s.close()
