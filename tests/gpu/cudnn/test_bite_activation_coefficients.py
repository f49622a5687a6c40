"""The activations whose coefficient shapes the result, each run with coefficients other than
the defaults: the clipped ReLU's ceiling, the ELU's alpha and the swish beta, forward and
backward, against the float64 reference.

test_ops.py draws the mode among seven per example, so a coefficient lost on its way to
cuDNN shows there only in the examples that happen to draw its mode.
"""

import numpy as np
import pytest

from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.testing import ref

from ._helpers import poisoned, rand

#: (mode, coef, swish_beta): two values of each mode's own coefficient.
CASES = [("clipped_relu", 0.5, 1.0), ("clipped_relu", 1.5, 1.0), ("elu", 0.7, 1.0),
         ("elu", 1.9, 1.0), ("swish", None, 1.5), ("swish", None, 0.5)]


@pytest.mark.parametrize("mode, coef, beta", CASES,
                         ids=[f"{m}-{c if c is not None else b}" for m, c, b in CASES])
@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "NHWC"])
def test_each_coefficient_reaches_cudnn(device, rng, mode, coef, beta, channels_last):
    shape = (2, 3, 4, 5)
    xh, x = rand(shape, "float32", rng, channels_last, low=-2.0, high=2.0)
    y = cudnn.activation_forward(x, mode, coef=coef, swish_beta=beta,
                                 out=poisoned(shape, np.float32, channels_last))
    T.assert_close(y, ref.activation(xh, mode, coef or 0.0, beta), np.float32,
                   msg=f"{mode} coef={coef} swish_beta={beta}")
    dyh, dy = rand(shape, "float32", rng, channels_last)
    dx = cudnn.activation_backward(y, dy, x, mode, coef=coef, swish_beta=beta,
                                   out=poisoned(shape, np.float32, channels_last))
    T.assert_close(dx, ref.activation_backward(xh, dyh, mode, coef or 0.0, beta), np.float32,
                   msg=f"gradient of {mode} coef={coef} swish_beta={beta}")
