"""Batch normalization: training forward, inference forward and backward.

``x`` is logical ``(N, C, ...)`` (2-D to 5-D, channels-first or channels-last).  The
parameters -- ``scale`` (gamma), ``bias`` (beta), running and saved statistics -- are float32
for float32/float16/bfloat16 data and float64 for float64 data, as cuDNN requires, of shape
``(C,)`` in ``"spatial"`` mode (statistics over N and every spatial position) and
``(C, *spatial)`` in ``"per_activation"`` mode (statistics over N only).

Running statistics follow PyTorch: ``running = (1 - momentum) * running + momentum * batch``
(cuDNN's ``exponentialAverageFactor`` is our ``momentum``), where the batch variance folded into
``running_var`` is the *unbiased* one (divided by ``n - 1``), while the normalization itself
uses the biased variance.  ``batch_norm_train`` also returns the saved mean and inverse standard
deviation ``1 / sqrt(var + eps)`` that ``batch_norm_backward`` reuses.
"""

from __future__ import annotations

import numpy as np

from . import _lib
from ._base import raise_for
from ._common import (as_array, check_float, is_double, layout_padded, output, padded,
                      same_device, scalar, stream_of)
from .descriptors import packed_strides, tensor_descriptor
from .handle import handle_for

__all__ = ["batch_norm_train", "batch_norm_infer", "batch_norm_backward", "BN_MODES"]

#: mode= names -> cudnnBatchNormMode_t.
BN_MODES = {"spatial": _lib.CUDNN_BATCHNORM_SPATIAL,
            "per_activation": _lib.CUDNN_BATCHNORM_PER_ACTIVATION}

_plans: dict = {}


class _BNPlan:
    __slots__ = ("x_desc", "p_desc", "p_shape", "p_dtype", "cl", "mode", "train_mode", "double",
                 "shape")


def _plan(x, mode):
    key = (x.dtype, x.shape, x.strides, mode)
    plan = _plans.get(key)
    if plan is not None and plan.x_desc._finalizer.alive and plan.p_desc._finalizer.alive:
        return plan
    if mode not in BN_MODES:
        raise ValueError(f"mode must be 'spatial' or 'per_activation', not {mode!r}")
    check_float(x, "x")
    shape, strides = padded(x, "x")
    fits = layout_padded(shape, strides, x.itemsize, "x")
    cl = fits[0]
    plan = _BNPlan()
    plan.double = is_double(x.dtype)
    plan.p_dtype = np.dtype(np.float64 if plan.double else np.float32)
    plan.cl, plan.mode, plan.shape = cl, BN_MODES[mode], shape
    # Channels-last half-precision data has a fast kernel only in the persistent spatial mode
    # (the plain one is tens of times slower there); training and backward accept it,
    # inference does not need it.  It accumulates in float32 like the plain mode.
    plan.train_mode = plan.mode
    if mode == "spatial" and cl and x.dtype.itemsize == 2:
        plan.train_mode = _lib.CUDNN_BATCHNORM_SPATIAL_PERSISTENT
    plan.x_desc = tensor_descriptor(x.dtype, shape, packed_strides(shape, cl))
    pshape = (1, shape[1], 1, 1) + (1,) * (len(shape) - 4) if mode == "spatial" else \
        (1,) + shape[1:]
    plan.p_desc = tensor_descriptor(plan.p_dtype, pshape, packed_strides(pshape, False))
    plan.p_shape = (x.shape[1],) if mode == "spatial" else x.shape[1:]
    _plans[key] = plan
    return plan


def _param(arr, name, plan, dev, required=True):
    if arr is None:
        if required:
            raise ValueError(f"{name} is required")
        return None
    arr = as_array(arr, name)
    if arr._device is not dev:
        same_device(dev, **{name: arr})
    if arr.dtype != plan.p_dtype:
        raise TypeError(f"{name} must be {plan.p_dtype} (cuDNN keeps batch-norm parameters in "
                        f"{plan.p_dtype} for this data), not {arr.dtype}")
    full = (1,) + tuple(plan.p_shape) + (1,) * (len(plan.shape) - 1 - len(plan.p_shape))
    if arr.shape != tuple(plan.p_shape) and arr.shape != full[:arr.ndim]:
        raise ValueError(f"{name} must have shape {tuple(plan.p_shape)}, got {arr.shape}")
    if not arr.is_c_contiguous:
        raise ValueError(f"{name} must be C-contiguous")
    return arr


def _new_param(plan, dev, s):
    return output(None, plan.p_shape, plan.p_dtype, False, dev, s)


def _check_eps(eps):
    eps = float(eps)
    if not eps > 0:
        # CUDNN_BN_MIN_EPSILON is 0 in cuDNN 9, but eps = 0 divides by zero on a constant
        # channel; PyTorch and cuDNN samples use 1e-5.
        raise ValueError(f"eps must be > 0, got {eps}")
    return eps


def batch_norm_train(x, scale, bias, running_mean=None, running_var=None, *, momentum=0.1,
                     eps=1e-5, mode="spatial", out=None, stream=None):
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
    out : DeviceArray, optional
        ``y``, shaped and laid out like ``x``.
    stream : Stream, optional

    Returns
    -------
    y, save_mean, save_inv_std : DeviceArray
        The output and the batch statistics for :func:`batch_norm_backward`.

    Raises
    ------
    ValueError, TypeError
        Wrong shapes, dtypes, devices or layouts; one running statistic without the other;
        momentum outside [0, 1]; eps <= 0; a spatial batch of one element per channel.
    """
    x = as_array(x, "x")
    dev = x._device
    s = stream_of(stream, dev)
    plan = _plan(x, mode)
    scale = _param(scale, "scale", plan, dev)
    bias = _param(bias, "bias", plan, dev)
    rm = _param(running_mean, "running_mean", plan, dev, False)
    rv = _param(running_var, "running_var", plan, dev, False)
    if (rm is None) != (rv is None):
        raise ValueError("give both running_mean and running_var, or neither")
    momentum = float(momentum)
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    eps = _check_eps(eps)
    per_channel = x.size // (plan.p_shape[0] if mode == "spatial" else
                             int(np.prod(plan.p_shape)))
    if per_channel < 2:
        raise ValueError(f"batch-norm training needs more than one value per channel "
                         f"(x has shape {x.shape}, mode {mode!r})")
    y = output(out, x.shape, x.dtype, plan.cl, dev, s)
    sm = _new_param(plan, dev, s)
    siv = _new_param(plan, dev, s)
    h = handle_for(dev, s._handle)
    d = plan.double
    st = _lib.get().cudnnBatchNormalizationForwardTraining(
        h.raw, plan.train_mode, scalar(1.0, d), scalar(0.0, d), plan.x_desc.raw, x.ptr,
        plan.x_desc.raw, y.ptr, plan.p_desc.raw, scale.ptr, bias.ptr, momentum,
        None if rm is None else rm.ptr, None if rv is None else rv.ptr, eps, sm.ptr, siv.ptr)
    if st:
        raise_for(st, "cudnnBatchNormalizationForwardTraining",
                  f"x {x.dtype} {x.shape} strides {x.strides}, mode {mode}")
    return y, sm, siv


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
    x = as_array(x, "x")
    dev = x._device
    s = stream_of(stream, dev)
    plan = _plan(x, mode)
    p = [_param(a, n, plan, dev) for a, n in
         ((scale, "scale"), (bias, "bias"), (mean, "mean"), (var, "var"))]
    eps = _check_eps(eps)
    y = output(out, x.shape, x.dtype, plan.cl, dev, s)
    h = handle_for(dev, s._handle)
    d = plan.double
    st = _lib.get().cudnnBatchNormalizationForwardInference(
        h.raw, plan.mode, scalar(1.0, d), scalar(0.0, d), plan.x_desc.raw, x.ptr,
        plan.x_desc.raw, y.ptr, plan.p_desc.raw, p[0].ptr, p[1].ptr, p[2].ptr, p[3].ptr, eps)
    if st:
        raise_for(st, "cudnnBatchNormalizationForwardInference",
                  f"x {x.dtype} {x.shape}, mode {mode}")
    return y


def batch_norm_backward(x, dy, scale, save_mean=None, save_inv_std=None, *, eps=1e-5,
                        mode="spatial", out=None, stream=None):
    """Gradients of batch normalization (training mode).

    Parameters
    ----------
    x, dy : DeviceArray
        The forward input and the gradient of its output (same shape, dtype and layout).
    scale : DeviceArray
        gamma.
    save_mean, save_inv_std : DeviceArray, optional
        What :func:`batch_norm_train` returned; cuDNN recomputes them when both are None.
    eps : float
        The forward's.
    mode : {"spatial", "per_activation"}
    out : DeviceArray, optional
        ``dx``.
    stream : Stream, optional

    Returns
    -------
    dx, dscale, dbias : DeviceArray
    """
    x = as_array(x, "x")
    dy = as_array(dy, "dy")
    dev = x._device
    if dy._device is not dev:
        same_device(dev, dy=dy)
    s = stream_of(stream, dev)
    plan = _plan(x, mode)
    if dy.shape != x.shape or dy.dtype != x.dtype:
        raise ValueError(f"dy {dy.dtype} {dy.shape} must match x {x.dtype} {x.shape}")
    if plan.cl not in layout_padded(*padded(dy, "dy"), dy.itemsize, "dy"):
        raise ValueError("dy must have x's memory layout")
    scale = _param(scale, "scale", plan, dev)
    sm = _param(save_mean, "save_mean", plan, dev, False)
    siv = _param(save_inv_std, "save_inv_std", plan, dev, False)
    if (sm is None) != (siv is None):
        raise ValueError("give both save_mean and save_inv_std, or neither")
    eps = _check_eps(eps)
    dx = output(out, x.shape, x.dtype, plan.cl, dev, s)
    dscale = _new_param(plan, dev, s)
    dbias = _new_param(plan, dev, s)
    h = handle_for(dev, s._handle)
    d = plan.double
    one, zero = scalar(1.0, d), scalar(0.0, d)
    xd = plan.x_desc.raw
    st = _lib.get().cudnnBatchNormalizationBackward(
        h.raw, plan.train_mode, one, zero, one, zero, xd, x.ptr, xd, dy.ptr, xd, dx.ptr,
        plan.p_desc.raw, scale.ptr, dscale.ptr, dbias.ptr, eps,
        None if sm is None else sm.ptr, None if siv is None else siv.ptr)
    if st:
        raise_for(st, "cudnnBatchNormalizationBackward", f"x {x.dtype} {x.shape}, mode {mode}")
    return dx, dscale, dbias
