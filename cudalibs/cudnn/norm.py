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

Training forward and backward go through ``cudnnBatchNormalizationForwardTrainingEx`` /
``cudnnBatchNormalizationBackwardEx`` with a workspace from the per-(device, stream) pool: only
these reach cuDNN's semi-persistent channels-last kernels (for float16/bfloat16 NHWC data tens
of times faster than the plain entry points, even in persistent mode).  The forward also fills
a *reserve space* that the backward must read, so ``batch_norm_train`` returns a
:class:`BatchNormState` -- it unpacks as ``(y, save_mean, save_inv_std)`` like before, and
carries the reserve; pass the state itself (or ``reserve=state.reserve``) to
``batch_norm_backward`` for the fast backward.  Without the reserve the backward stays correct:
it takes the Ex path when cuDNN needs no reserve for the problem and the plain entry point
otherwise.  Where cuDNN refuses the Ex path for a problem (data type, mode), the first call
finds out and the plan remembers to use the plain entry points (:func:`batch_norm_paths`).
Ex also fuses ``relu(bn(x))`` and ``relu(bn(x) + z)`` (``activation="relu"``, ``z=``) for
channels-last float16/bfloat16 data in spatial mode.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..driver.array import empty
from ..driver.operand import operand
from ..driver.plan import KeyKind, cache as _cache
from ..driver.stream import as_stream
from ..errors import CudnnError
from . import _lib
from ._base import raise_for
from ._common import (check_float, is_double, layout_padded, output, padded, resolve, scalar)
from .descriptors import activation_descriptor, packed_strides, tensor_descriptor
from .handle import handle_for, workspace

__all__ = ["batch_norm_train", "batch_norm_infer", "batch_norm_backward", "BatchNormState",
           "batch_norm_paths", "BN_MODES", "BATCH_NORM_KEY"]

#: mode= names -> cudnnBatchNormMode_t.
BN_MODES = {"spatial": _lib.CUDNN_BATCHNORM_SPATIAL,
            "per_activation": _lib.CUDNN_BATCHNORM_PER_ACTIVATION}

#: The cache key of the batch-norm plans in the one plan cache.
BATCH_NORM_KEY = KeyKind("cudnn_batch_norm", ("dtype", "x_shape", "x_strides", "mode"))


class _BNPlan:
    """The descriptors and entry-point decisions of one batch-norm problem.

    ex: (device ordinal, "forward"/"backward", bnOps) -> (workspace bytes, reserve bytes), or
    a str saying why the Ex entry point is not used for it (decided once); ex_ok: the keys
    whose Ex call has succeeded once (a later failure is an error, not a fallback).  Threads
    sharing a plan only ever add the same answers to these (single dict/set stores).
    """

    __slots__ = ("x_desc", "p_desc", "p_shape", "p_dtype", "cl", "mode", "train_mode", "double",
                 "shape", "ex", "ex_ok", "paths", "name")

    def __repr__(self) -> str:
        paths = ", ".join(f"{k}: {v}" for k, v in self.paths.items()) or "not run"
        return f"<batch-norm plan {self.name} {tuple(self.shape)} ({paths})>"


def _plan(x, mode):
    key = (BATCH_NORM_KEY, x._dtype, x._shape, x._strides, mode)
    plan = _cache.get(key)
    if plan is not None and not plan.x_desc.closed and not plan.p_desc.closed:
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
    plan.ex, plan.ex_ok, plan.paths = {}, set(), {}
    plan.name = mode
    _cache.pop(key)
    return _cache.put(key, plan)


def _param(arr, name, plan, dev, required=True):
    if arr is None:
        if required:
            raise ValueError(f"{name} is required")
        return None
    arr = operand(arr, name, "batch_norm", device=dev)
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


# -- the Ex entry points ---------------------------------------------------------------------------
_OPS_BN = _lib.CUDNN_BATCHNORM_OPS_BN
_OPS_ACT = _lib.CUDNN_BATCHNORM_OPS_BN_ACTIVATION
_OPS_ADD_ACT = _lib.CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
_OPS_SUFFIX = {_OPS_BN: "", _OPS_ACT: "+relu", _OPS_ADD_ACT: "+add+relu"}


class BatchNormState:
    """What :func:`batch_norm_train` returns: ``y`` and what the backward needs.

    It unpacks (and indexes) as the 3-tuple ``(y, save_mean, save_inv_std)``; pass the state
    itself as ``save_mean`` of :func:`batch_norm_backward` to hand over everything at once.

    Attributes
    ----------
    y, save_mean, save_inv_std : DeviceArray
        The output, the batch mean and ``1 / sqrt(var + eps)``.
    reserve : DeviceArray or None
        Bytes (uint8) cuDNN's Ex forward left for the backward; None when it needs none or
        the plain entry point ran.  Its content must survive until the backward.
    path : str
        ``"ex"`` or ``"legacy"``: the cuDNN entry point that ran.
    mode : str
    eps : float
    activation : str or None
        ``"relu"`` when the activation was fused.
    fused_add : bool
        Whether ``z`` was added before the activation.
    bias : DeviceArray
        beta, which the fused backward reads again (as it reads ``y``: keep both unchanged
        until then when an activation was fused).
    """

    __slots__ = ("y", "save_mean", "save_inv_std", "reserve", "path", "mode", "eps",
                 "activation", "fused_add", "bias", "__weakref__")

    def __iter__(self):
        return iter((self.y, self.save_mean, self.save_inv_std))

    def __len__(self):
        return 3

    def __getitem__(self, index):
        return (self.y, self.save_mean, self.save_inv_std)[index]

    def __repr__(self):
        fused = ""
        if self.activation:
            fused = f", fused={'add+' if self.fused_add else ''}{self.activation}"
        reserve = f"{self.reserve.nbytes} B" if self.reserve is not None else None
        return (f"<BatchNormState y={self.y.dtype}{self.y.shape} mode={self.mode!r} "
                f"eps={self.eps} path={self.path!r} reserve={reserve}{fused}>")


def _is_not_supported(status):
    # cuDNN 9 groups its "not supported" statuses as 3000-3999.
    return 3000 <= status < 4000


def _failure(status, fn, context=""):
    """The text of the CudnnError ``status`` makes (which also reads cuDNN's last error)."""
    try:
        raise_for(status, fn, context)
    except CudnnError as exc:
        return str(exc)
    return ""


def _ex_info(plan, h, dev, which, ops, act):
    """``(workspace bytes, reserve bytes)`` of the Ex entry point for ``which`` ("forward"
    or "backward"), or a str saying why it is not used; asked of cuDNN once per plan."""
    key = (dev.ordinal, which, ops)
    info = plan.ex.get(key)
    if info is not None:
        return info
    if plan.double:
        info = "float64 data: cuDNN's Ex batch-norm serves float32/float16/bfloat16"
    else:
        L = _lib.get()
        xd, pd = plan.x_desc.raw, plan.p_desc.raw
        zd = xd if ops == _OPS_ADD_ACT else None
        n, r = ctypes.c_size_t(0), ctypes.c_size_t(0)
        if which == "forward":
            fn = "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize"
            st = L.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                h.raw, plan.train_mode, ops, xd, zd, xd, pd, act, ctypes.byref(n))
        else:
            fn = "cudnnGetBatchNormalizationBackwardExWorkspaceSize"
            yd = None if ops == _OPS_BN else xd
            st = L.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                h.raw, plan.train_mode, ops, xd, yd, xd, zd, xd, pd, act, ctypes.byref(n))
        if not st:
            fn = "cudnnGetBatchNormalizationTrainingExReserveSpaceSize"
            st = L.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                h.raw, plan.train_mode, ops, act, xd, ctypes.byref(r))
        info = _failure(st, fn) if st else (int(n.value), int(r.value))
    plan.ex[key] = info
    return info


def _ex_outcome(plan, dev, which, ops, st, fresh, name, fn, x, mode):
    """After an Ex call: None when it ran (recorded as the plan's path), else the reason the
    plain entry point takes over -- only when this was the plan's first Ex call without a fused
    operation; any other failure raises."""
    if not st:
        plan.paths[name] = "ex"
        plan.ex_ok.add((dev.ordinal, which, ops))
        return None
    if not (fresh and ops == _OPS_BN):
        raise_for(st, fn, f"x {x.dtype} {x.shape} strides {x.strides}, mode {mode}, {name}")
    return _refused(plan, dev, which, ops, st, fn)


def _refused(plan, dev, which, ops, st, fn):
    """Record that cuDNN refused the Ex call of a fresh plan; the plain entry point takes over."""
    reason = _failure(st, fn)
    plan.ex[(dev.ordinal, which, ops)] = reason
    return reason


def _fusion(plan, x, activation, z):
    """The cudnnBatchNormOps_t for ``activation``/``z``, checked before any C call."""
    if activation is None:
        if z is not None:
            raise ValueError("z= is added before the activation: give activation='relu' too")
        return _OPS_BN
    if activation != "relu":
        raise ValueError(f"activation must be None or 'relu' (the one cuDNN fuses into "
                         f"batch-norm), not {activation!r}")
    if not (plan.cl and plan.mode == _lib.CUDNN_BATCHNORM_SPATIAL and x.itemsize == 2
            and x.ndim >= 4):
        raise ValueError(
            "cuDNN fuses the activation into batch-norm only for channels-last (NHWC/NDHWC) "
            f"float16/bfloat16 data in spatial mode; x is {x.dtype} {x.shape} strides "
            f"{x.strides}, mode {plan.name!r}: apply the activation separately")
    return _OPS_ADD_ACT if z is not None else _OPS_ACT


def batch_norm_paths(x, mode="spatial") -> dict:
    """Which cuDNN entry point batch-norm training took for problems shaped like ``x``.

    Parameters
    ----------
    x : DeviceArray
        An array of the problem's shape, dtype and layout.
    mode : {"spatial", "per_activation"}

    Returns
    -------
    dict
        ``{"forward": "ex", "backward": "legacy: <why>", "forward+relu": ...}`` for the
        directions run so far ("ex": the Ex entry point with workspace and reserve;
        "legacy": the plain one, with the reason); empty when none ran.
    """
    x = operand(x, "x", "batch_norm_paths")
    plan = _cache.get((BATCH_NORM_KEY, x._dtype, x._shape, x._strides, mode))
    return dict(plan.paths) if plan is not None else {}


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
    x = operand(x, "x", "batch_norm_train", stream=stream)
    dev = x._device
    s = as_stream(stream, dev)
    plan = _plan(x, mode)
    ops = _fusion(plan, x, activation, z)
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
    if z is not None:
        z = _like_x(z, "z", x, plan, dev, s)
    y = output(out, x.shape, x.dtype, plan.cl, dev, s)
    sm = _new_param(plan, dev, s)
    siv = _new_param(plan, dev, s)
    h = handle_for(dev, s._handle)
    d = plan.double
    one, zero = scalar(1.0, d), scalar(0.0, d)
    L = _lib.get()
    xd, pd = plan.x_desc.raw, plan.p_desc.raw
    rm_ptr = None if rm is None else rm.ptr
    rv_ptr = None if rv is None else rv.ptr
    act = activation_descriptor("relu").raw if ops != _OPS_BN else None
    name = "forward" + _OPS_SUFFIX[ops]
    fresh = (dev.ordinal, "forward", ops) not in plan.ex_ok
    reserve = None
    info = _ex_info(plan, h, dev, "forward", ops, act)
    if type(info) is tuple:
        ws_need, rs = info
        # Never a NULL workspace: cuDNN treats (NULL, 0) as "behave like the plain call".
        ws_ptr, ws_size = workspace(dev, s._handle, max(ws_need, 1))
        if rs:
            reserve = empty((rs,), np.uint8, device=dev, stream=s)
        st = L.cudnnBatchNormalizationForwardTrainingEx(
            h.raw, plan.train_mode, ops, one, zero, xd, x.ptr, xd if z is not None else None,
            None if z is None else z.ptr, xd, y.ptr, pd, scale.ptr, bias.ptr, momentum,
            rm_ptr, rv_ptr, eps, sm.ptr, siv.ptr, act, ws_ptr, ws_size,
            None if reserve is None else reserve.ptr, rs)
        if st and reserve is not None:
            reserve.close()
            reserve = None
        refused = _ex_outcome(plan, dev, "forward", ops, st, fresh, name,
                              "cudnnBatchNormalizationForwardTrainingEx", x, mode)
        if refused is not None:
            info = refused
    if type(info) is str:
        if ops != _OPS_BN:
            raise ValueError(f"cuDNN does not fuse {name[8:]} into batch-norm for x "
                             f"{x.dtype} {x.shape} strides {x.strides}: {info}")
        st = L.cudnnBatchNormalizationForwardTraining(
            h.raw, plan.train_mode, one, zero, xd, x.ptr, xd, y.ptr, pd, scale.ptr, bias.ptr,
            momentum, rm_ptr, rv_ptr, eps, sm.ptr, siv.ptr)
        if st:
            raise_for(st, "cudnnBatchNormalizationForwardTraining",
                      f"x {x.dtype} {x.shape} strides {x.strides}, mode {mode}")
        plan.paths[name] = f"legacy: {info}"
    state = BatchNormState()
    state.y, state.save_mean, state.save_inv_std, state.reserve = y, sm, siv, reserve
    state.path = "ex" if type(info) is tuple else "legacy"
    state.mode, state.eps, state.bias = mode, eps, bias
    state.activation = activation
    state.fused_add = z is not None
    return state


def _like_x(arr, name, x, plan, dev, s):
    """``arr`` checked to have ``x``'s shape, dtype, layout and device."""
    arr = operand(arr, name, "batch_norm", device=dev)
    if arr.shape != x.shape or arr.dtype != x.dtype:
        raise ValueError(f"{name} {arr.dtype} {arr.shape} must match x {x.dtype} {x.shape}")
    if plan.cl not in layout_padded(*padded(arr, name), arr.itemsize, name):
        raise ValueError(f"{name} must have x's memory layout")
    return arr


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
    x = operand(x, "x", "batch_norm_infer", stream=stream)
    dev = x._device
    s = as_stream(stream, dev)
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
    state = save_mean if isinstance(save_mean, BatchNormState) else None
    ops, bias, y_fwd = _OPS_BN, None, None
    if state is not None:
        if save_inv_std is not None:
            raise ValueError("give either a BatchNormState or save_mean and save_inv_std")
        save_mean, save_inv_std = state.save_mean, state.save_inv_std
        if reserve is None:
            reserve = state.reserve
        for arg, have, nm in ((mode, state.mode, "mode"), (eps, state.eps, "eps")):
            if arg is not None and arg != have:
                raise ValueError(f"{nm}={arg!r} differs from the forward's {have!r}")
        mode, eps = state.mode, state.eps
        if state.activation is not None:
            ops = _OPS_ADD_ACT if state.fused_add else _OPS_ACT
            bias, y_fwd = state.bias, state.y
    mode = "spatial" if mode is None else mode
    eps = 1e-5 if eps is None else eps
    x, dy, dev, s = resolve("batch_norm_backward", (x, "x"), (dy, "dy"), stream=stream)
    plan = _plan(x, mode)
    dy = _like_x(dy, "dy", x, plan, dev, s)
    scale = _param(scale, "scale", plan, dev)
    sm = _param(save_mean, "save_mean", plan, dev, False)
    siv = _param(save_inv_std, "save_inv_std", plan, dev, False)
    if (sm is None) != (siv is None):
        raise ValueError("give both save_mean and save_inv_std, or neither")
    if reserve is not None:
        reserve = operand(reserve, "reserve", "batch_norm_backward", device=dev)
        if not reserve.is_c_contiguous:
            raise ValueError("reserve must be contiguous (pass the forward's state.reserve)")
    if ops != _OPS_BN:
        y_fwd = _like_x(y_fwd, "the state's y", x, plan, dev, s)
    eps = _check_eps(eps)
    dx = output(out, x.shape, x.dtype, plan.cl, dev, s)
    dscale = _new_param(plan, dev, s)
    dbias = _new_param(plan, dev, s)
    dz = output(None, x.shape, x.dtype, plan.cl, dev, s) if ops == _OPS_ADD_ACT else None
    h = handle_for(dev, s._handle)
    d = plan.double
    one, zero = scalar(1.0, d), scalar(0.0, d)
    xd, pd = plan.x_desc.raw, plan.p_desc.raw
    L = _lib.get()
    sm_ptr = None if sm is None else sm.ptr
    siv_ptr = None if siv is None else siv.ptr
    act = activation_descriptor("relu").raw if ops != _OPS_BN else None
    name = "backward" + _OPS_SUFFIX[ops]
    fresh = (dev.ordinal, "backward", ops) not in plan.ex_ok
    info = _ex_info(plan, h, dev, "backward", ops, act)
    why_not = info if type(info) is str else None
    if type(info) is tuple:
        ws_need, rs = info
        if rs and reserve is None:
            why_not = "no reserve space given (pass the forward's BatchNormState)"
        elif rs and reserve.nbytes < rs:
            raise ValueError(f"reserve has {reserve.nbytes} bytes, this problem needs {rs}: "
                             "pass the reserve of the forward of this x")
        else:
            ws_ptr, ws_size = workspace(dev, s._handle, max(ws_need, 1))
            st = L.cudnnBatchNormalizationBackwardEx(
                h.raw, plan.train_mode, ops, one, zero, one, zero, xd, x.ptr,
                None if y_fwd is None else xd, None if y_fwd is None else y_fwd.ptr,
                xd, dy.ptr, None if dz is None else xd, None if dz is None else dz.ptr,
                xd, dx.ptr, pd, scale.ptr, None if bias is None else bias.ptr, dscale.ptr,
                dbias.ptr, eps, sm_ptr, siv_ptr, act, ws_ptr, ws_size,
                None if not rs else reserve.ptr, rs if rs else 0)
            why_not = _ex_outcome(plan, dev, "backward", ops, st, fresh, name,
                                  "cudnnBatchNormalizationBackwardEx", x, mode)
    if why_not is not None:
        if ops != _OPS_BN:
            raise ValueError(f"the fused batch-norm backward ({name}) cannot run for x "
                             f"{x.dtype} {x.shape}: {why_not}")
        st = L.cudnnBatchNormalizationBackward(
            h.raw, plan.train_mode, one, zero, one, zero, xd, x.ptr, xd, dy.ptr, xd, dx.ptr,
            pd, scale.ptr, dscale.ptr, dbias.ptr, eps, sm_ptr, siv_ptr)
        if st:
            raise_for(st, "cudnnBatchNormalizationBackward",
                      f"x {x.dtype} {x.shape}, mode {mode}")
        plan.paths[name] = f"legacy: {why_not}"
    if dz is not None:
        return dx, dscale, dbias, dz
    return dx, dscale, dbias
