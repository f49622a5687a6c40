"""The batch-norm one-shot functions: their :class:`~cudalibs.cudnn.BatchNormPlan` found
through the one front in the one plan cache (see :mod:`cudalibs.cudnn.norm.batch`)."""

from __future__ import annotations

from ...driver.array import DeviceArray
from ...driver.stream import as_stream
from ...runtime import front as _front
from ...runtime.operand import operand
from ...runtime.operand import operands as _operands
from .._common import resolve
from .batch import BATCH_NORM_KEY, BatchNormPlan, unpack_state

__all__ = ["batch_norm_train", "batch_norm_infer", "batch_norm_backward", "batch_norm_paths"]


# -- the one-shot functions -----------------------------------------------------------------
def _cached(x, mode) -> BatchNormPlan:
    """The one plan cache's plan for ``x``'s problem (built on a miss, or when the held one
    was closed)."""
    return _front.planned((BATCH_NORM_KEY, x.dtype, x.shape, x.strides, mode),
                          lambda: BatchNormPlan(x, mode=mode, training=None), prepare=None)


def batch_norm_paths(x, mode="spatial") -> dict:
    """Which cuDNN entry point batch-norm took for problems shaped like ``x``.

    Parameters
    ----------
    x : DeviceArray
        An array of the problem's shape, dtype and layout.
    mode : {"spatial", "per_activation"}

    Returns
    -------
    dict
        ``{"forward": "ex", "backward": "legacy: <why>", "forward+relu": ...}`` for the
        kinds of call run so far through the one-shot functions ("ex": the Ex entry point
        with workspace and reserve; "legacy": the plain one, with the reason); a backward
        that took the plain entry point only for want of the reserve space is listed as
        ``"backward without reserve"``.  Empty when none ran.
    """
    x = operand(x, "x", "batch_norm_paths")
    plan = _front.lookup((BATCH_NORM_KEY, x.dtype, x.shape, x.strides, mode))
    return plan.paths if plan is not None else {}


def batch_norm_train(x, scale, bias, running_mean=None, running_var=None, *, momentum=0.1,
                     eps=1e-5, mode="spatial", activation=None, z=None, out=None, stream=None):
    """Batch-normalize ``x`` with the statistics of this batch, updating the running ones.

    Parameters
    ----------
    x : DeviceArray
        ``(N, C, ...)``, float32/float16/bfloat16/float64.
    scale, bias : DeviceArray
        gamma and beta (see the module docstring for dtype and shape).
    running_mean, running_var : DeviceArray, optional
        Updated in place; give both or neither.
    momentum : float
        In ``[0, 1]``; 1 replaces the running statistics by this batch's.
    eps : float
        Added to the variance, > 0.
    mode : {"spatial", "per_activation"}
    activation : {None, "relu"}
        Fuse ``y = relu(bn(x) [+ z])`` (channels-last float16/bfloat16, spatial mode only).
    z : DeviceArray, optional
        Added to ``bn(x)`` before the activation; shaped and laid out like ``x``.
    out : DeviceArray, optional
        ``y``, shaped and laid out like ``x``.
    stream : Stream, optional

    Returns
    -------
    BatchNormState
        Unpacks as ``y, save_mean, save_inv_std``; also carries the reserve space for
        :func:`batch_norm_backward` (pass the state to it).

    Raises
    ------
    ValueError, TypeError
        Wrong shapes, dtypes, devices or layouts; one running statistic without the other;
        momentum outside [0, 1]; eps <= 0; a spatial batch of one element per channel; an
        activation cuDNN cannot fuse for this layout, dtype or mode.
    CudnnError
        cuDNN refused the call.
    """
    op = "batch_norm_train"
    x = operand(x, "x", op, stream=stream)
    dev = x.device
    if type(scale) is not DeviceArray or type(bias) is not DeviceArray:
        # The plan checks DeviceArray parameters against the problem; anything else (None, a
        # foreign array) goes through the operand path here, before any C call.
        scale, bias, _ = _operands(op, (scale, "scale"), (bias, "bias"), stream=stream,
                                   required=2)
    return _cached(x, mode)._train(x, dev, as_stream(stream, dev), scale, bias, running_mean,
                                   running_var, momentum, eps, activation, z, out)


def batch_norm_infer(x, scale, bias, mean, var, *, eps=1e-5, mode="spatial", out=None,
                     stream=None):
    """``y = scale * (x - mean) / sqrt(var + eps) + bias`` with given statistics.

    Parameters
    ----------
    x : DeviceArray
    scale, bias, mean, var : DeviceArray
        See the module docstring for dtype and shape.
    eps : float
    mode : {"spatial", "per_activation"}
    out : DeviceArray, optional
    stream : Stream, optional

    Returns
    -------
    DeviceArray
        ``y``.
    """
    op = "batch_norm_infer"
    x = operand(x, "x", op, stream=stream)
    dev = x.device
    if type(scale) is not DeviceArray or type(bias) is not DeviceArray or \
            type(mean) is not DeviceArray or type(var) is not DeviceArray:
        # As in batch_norm_train: anything but a DeviceArray through the operand path now.
        scale, bias, mean, var, _ = _operands(op, (scale, "scale"), (bias, "bias"),
                                              (mean, "mean"), (var, "var"), stream=stream,
                                              required=4)
    return _cached(x, mode)._infer(x, dev, as_stream(stream, dev), scale, bias, mean, var, eps,
                                   out)


def batch_norm_backward(x, dy, scale, save_mean=None, save_inv_std=None, *, reserve=None,
                        eps=None, mode=None, out=None, stream=None):
    """Gradients of batch normalization (training mode).

    Parameters
    ----------
    x, dy : DeviceArray
        The forward input and the gradient of its output (same shape, dtype and layout).
    scale : DeviceArray
        gamma.
    save_mean : DeviceArray or BatchNormState, optional
        What :func:`batch_norm_train` returned: the state itself (which brings the saved
        statistics, the reserve space, eps, mode and any fused activation), or its
        ``save_mean``.  cuDNN recomputes the statistics when both are None.
    save_inv_std : DeviceArray, optional
        With an array ``save_mean``: the forward's ``save_inv_std``.
    reserve : DeviceArray, optional
        The forward's ``state.reserve`` (with separate statistics).  Without it the
        backward is still correct, possibly slower: see the module docstring.
    eps : float, optional
        The forward's (default: the state's, else 1e-5).
    mode : {"spatial", "per_activation"}, optional
        The forward's (default: the state's, else "spatial").
    out : DeviceArray, optional
        ``dx``.
    stream : Stream, optional

    Returns
    -------
    dx, dscale, dbias : DeviceArray
        Followed by ``dz`` (the gradient of ``z``) when the forward fused an add.
        With a fused activation these are the gradients through it.
    """
    sm, siv, reserve, eps, mode, ops, bias, y_fwd = unpack_state(save_mean, save_inv_std, reserve,
                                                            eps, mode)
    x, dy, dev, s = resolve("batch_norm_backward", (x, "x"), (dy, "dy"), stream=stream,
                            required=2)
    if type(scale) is not DeviceArray:
        # As in batch_norm_train: anything but a DeviceArray through the operand path now.
        scale = _operands("batch_norm_backward", (scale, "scale"), stream=stream, required=1)[0]
    return _cached(x, mode)._backward(x, dy, dev, s, scale, sm, siv, reserve, eps, ops, bias,
                                      y_fwd, out)
