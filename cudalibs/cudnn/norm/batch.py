"""Batch normalization: training forward, inference forward and backward, as a plan.

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
otherwise.  Where cuDNN refuses the Ex path for a problem (data type, mode), the plan finds out
once -- from the size queries, or from the first Ex call -- and uses the plain entry points from
then on (:func:`batch_norm_paths`, ``repr(plan)``).  Ex also fuses ``relu(bn(x))`` and
``relu(bn(x) + z)`` (``activation="relu"``, ``z=``) for channels-last float16/bfloat16 data in
spatial mode.

:class:`BatchNormPlan` holds one problem (data dtype, shape, layout, mode) on the plan protocol
(:class:`~cudalibs.runtime.plan.Plan`): construct (validated, descriptors built and owned),
``plan()`` (which entry point each direction takes, with its workspace and reserve sizes),
``execute(...)`` / ``backward(...)`` (pointers only; nothing per call is kept on the plan, so
threads may share one), ``close()``.  The one-shot functions :func:`batch_norm_train`,
:func:`batch_norm_infer` and :func:`batch_norm_backward` find these plans in the one plan cache
under :data:`BATCH_NORM_KEY`.
"""

from __future__ import annotations

import contextlib
import ctypes
import math

import numpy as np

from ...driver.array import empty
from ...driver.stream import as_stream
from ...errors import CudnnError
from ...runtime.cache import KeyKind
from ...runtime.operand import operand
from ...runtime.plan import Plan, scratch as _scratch
from .. import _lib
from .._base import raise_for, version_int
from .._common import check_float, is_double, layout_padded, output, padded
from ..descriptors import (ActivationDescriptor, TensorDescriptor, layout_name, layouts_of,
                          packed_strides)
from ..handle import handle_for, workspace

__all__ = ["BatchNormPlan", "BatchNormState", "BN_MODES", "BATCH_NORM_KEY", "unpack_state"]

#: mode= names -> cudnnBatchNormMode_t.
BN_MODES = {"spatial": _lib.CUDNN_BATCHNORM_SPATIAL,
            "per_activation": _lib.CUDNN_BATCHNORM_PER_ACTIVATION}

#: The cache key of the batch-norm plans in the one plan cache.
BATCH_NORM_KEY = KeyKind("cudnn_batch_norm", ("dtype", "x_shape", "x_strides", "mode"))

_OPS_BN = _lib.CUDNN_BATCHNORM_OPS_BN
_OPS_ACT = _lib.CUDNN_BATCHNORM_OPS_BN_ACTIVATION
_OPS_ADD_ACT = _lib.CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
_OPS_SUFFIX = {_OPS_BN: "", _OPS_ACT: "+relu", _OPS_ADD_ACT: "+add+relu"}
_NO_RESERVE = "no reserve space given (pass the forward's BatchNormState)"
_FLOAT64 = "float64 data: cuDNN's Ex batch-norm serves float32/float16/bfloat16"


def _check_eps(eps):
    eps = float(eps)
    if not eps > 0:
        # CUDNN_BN_MIN_EPSILON is 0 in cuDNN 9, but eps = 0 divides by zero on a constant
        # channel; PyTorch and cuDNN samples use 1e-5.
        raise ValueError(f"eps must be > 0, got {eps}")
    return eps


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


def _close_all(descs) -> None:
    """The plan's release: its own descriptors, each freed by its own lifetime base."""
    for d in descs:
        d.close()


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


def unpack_state(save_mean, save_inv_std, reserve, eps, mode):
    """The backward's statistics, reserve, eps, mode and fusion, from a
    :class:`BatchNormState` passed as ``save_mean`` or from the separate arguments:
    ``(save_mean, save_inv_std, reserve, eps, mode, ops, bias, y)``."""
    ops, bias, y_fwd = _OPS_BN, None, None
    if isinstance(save_mean, BatchNormState):
        state = save_mean
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
    return (save_mean, save_inv_std, reserve, 1e-5 if eps is None else eps,
            "spatial" if mode is None else mode, ops, bias, y_fwd)


class BatchNormPlan(Plan):
    """A planned batch normalization of one problem: data dtype, shape, layout and mode.

    cuDNN has a single entry point per direction -- the Ex one (with workspace and reserve
    space, the fast channels-last kernels and the fused activation) where cuDNN takes the
    problem, the plain one otherwise -- so there are no candidates to rank: :meth:`plan`
    finds out which entry point each direction takes and the sizes it needs, the heuristics
    offer that one candidate, and :meth:`autotune` only times it.

    Parameters
    ----------
    x : DeviceArray or CUDA array
        Example input ``(N, C, ...)``, 2-D to 5-D, packed channels-first or channels-last:
        only its shape, dtype, layout and device are used.
    mode : {"spatial", "per_activation"}
    training : bool or None
        True: :meth:`execute` is the training forward (batch statistics, running statistics
        updated, a :class:`BatchNormState` returned) and :meth:`backward` is available;
        :meth:`plan` decides the Ex or plain entry point of both (fused variants on first
        use).  False: :meth:`execute` is the inference forward with given statistics.
        None (the one-shot functions' plans): training where the data allows it, so one
        plan serves the training, inference and backward one-shots of a problem.

    Raises
    ------
    ValueError, TypeError
        An unknown mode, a non-float dtype, a layout cuDNN cannot take, and for training a
        batch with one value per channel.

    Notes
    -----
    Descriptors (data, parameters, the fused activation) belong to the plan and are freed
    with it.  The Ex decisions are kept per device, so the one-shot functions, whose cache
    key names no device, share a plan across devices; a held plan runs on its own device
    only.

    Examples
    --------
    >>> plan = cudnn.BatchNormPlan(x, training=True)          # doctest: +SKIP
    >>> state = plan.execute(x, gamma, beta, running_mean, running_var)  # doctest: +SKIP
    >>> dx, dgamma, dbeta = plan.backward(x, dy, gamma, state)  # doctest: +SKIP
    >>> plan.close()                                           # doctest: +SKIP
    """

    kind = "cudnn_batch_norm"
    library = "cuDNN"

    def __init__(self, x, *, mode="spatial", training=True):
        self._setup(operand(x, "x", type(self).__name__), mode,
                    None if training is None else bool(training))

    def _setup(self, x, mode, training) -> None:
        """Check the problem and build the plan; ``training=None`` (the one-shots' plans):
        training where the data allows it, so that inference of one value per channel
        shares the cache entry."""
        if mode not in BN_MODES:
            raise ValueError(f"mode must be 'spatial' or 'per_activation', not {mode!r}")
        check_float(x, f"{type(self).__name__}: x")
        shape, strides = padded(x, "x")
        cl = layout_padded(shape, strides, x.itemsize, "x")[0]
        self._name = mode
        self._bn = BN_MODES[mode]
        self._dtype, self._shape, self._strides, self._cl = x.dtype, x.shape, x.strides, cl
        self._double = is_double(x.dtype)
        self._pdtype = np.dtype(np.float64 if self._double else np.float32)
        self._pshape = (x.shape[1],) if mode == "spatial" else x.shape[1:]
        self._psize = math.prod(self._pshape)
        # the parameters may also come as (1, C, 1, 1)-style arrays: x's rank, size-1 padded
        self._pfull = (1,) + self._pshape + (1,) * (len(shape) - 1 - len(self._pshape))
        self._per_channel = x.size // self._psize
        if training and self._per_channel < 2:
            raise ValueError(self._one_value())
        self._training = self._per_channel >= 2 if training is None else training
        # Channels-last half-precision data has a fast kernel only in the persistent spatial
        # mode (the plain one is tens of times slower there); training and backward accept
        # it, inference does not need it.  It accumulates in float32 like the plain mode, and
        # it is the only case cuDNN fuses an activation into.
        self._persistent = mode == "spatial" and cl and x.itemsize == 2
        self._train_mode = (_lib.CUDNN_BATCHNORM_SPATIAL_PERSISTENT if self._persistent
                            else self._bn)
        self._fusable = self._persistent and x.ndim >= 4
        pshape = (1, shape[1]) + (1,) * (len(shape) - 2) if mode == "spatial" else \
            (1,) + shape[1:]
        descs = [TensorDescriptor(x.dtype, shape, packed_strides(shape, cl)),
                 TensorDescriptor(self._pdtype, pshape, packed_strides(pshape, False))]
        if self._fusable:
            descs.append(ActivationDescriptor("relu"))
        # The raw handles, read on every call: valid until close(), which execute checks.
        self._xd, self._pd = descs[0].raw, descs[1].raw
        self._ad = descs[2].raw if self._fusable else None
        self._descs = tuple(descs)
        box = ctypes.c_double if self._double else ctypes.c_float
        self._boxes = (box(1.0), box(0.0))     # alpha / beta, read through host pointers
        self._one, self._zero = (ctypes.addressof(b) for b in self._boxes)
        # Decisions, made once each and only ever set to the same answer by racing threads:
        # (device ordinal, "forward"/"backward", bnOps) -> (workspace, reserve) bytes, or the
        # reason the Ex entry point is not used; the keys whose Ex call succeeded once (a later
        # failure is an error, not a fallback); and what each kind of call took.
        self._ex: dict = {}
        self._ex_ok: set = set()
        self._paths: dict = {}
        self._init_plan(x.device)
        self._own(_close_all, self._descs)

    def _one_value(self) -> str:
        return (f"batch-norm training needs more than one value per channel (x has shape "
                f"{self._shape}, mode {self._name!r})")

    # -- Plan hooks ------------------------------------------------------------------------
    def _problem(self) -> str:
        kernels = " (persistent kernels)" if self._persistent and self._training else ""
        return (f"{self._dtype} {self.layout} {self._shape} {self._name}{kernels}, "
                f"{'training' if self._training else 'inference'}")

    def _library_version(self) -> str:
        return str(version_int())

    def _heuristics(self) -> list[dict]:
        if not self._training:
            return [{"name": "cudnnBatchNormalizationForwardInference", "id": "inference",
                     "workspace": 0}]
        dev = self._device
        h = handle_for(dev, as_stream(None, dev).raw_handle)
        f = self._ex_info(h, (dev.ordinal, "forward", _OPS_BN))
        b = self._ex_info(h, (dev.ordinal, "backward", _OPS_BN))
        ex = type(f) is tuple
        return [{"name": "Ex" if ex else "legacy", "id": "ex" if ex else "legacy",
                 "workspace": max(f[0] if ex else 0, b[0] if type(b) is tuple else 0),
                 "reserve": f[1] if ex else 0}]

    def _select(self, i: int) -> None:
        pass        # one candidate: nothing to switch

    @contextlib.contextmanager
    def _runner(self, stream):
        dev = self._device
        x = _scratch(self._shape, self._dtype, dev, stream, strides=self._strides)
        y = _scratch(self._shape, self._dtype, dev, stream, strides=self._strides)
        p = [_scratch(self._pshape, self._pdtype, dev, stream) for _ in range(4)]
        if self._training:
            def run(i):
                self._train(x, dev, stream, p[0], p[1], None, None, 0.1, 1e-5, None, None, y)
        else:
            # scratch variances of either sign: negative ones give NaN, at the same speed
            def run(i):
                self._infer(x, dev, stream, p[0], p[1], p[2], p[3], 1e-5, y)
        try:
            yield run
        finally:
            del x, y, p

    def _workspace_bytes(self) -> int:
        o = self._device.ordinal
        return max((v[0] for k, v in self._ex.copy().items() if k[0] == o and type(v) is tuple),
                   default=0)

    # -- decisions -------------------------------------------------------------------------
    def _ex_info(self, h, key):
        """``(workspace bytes, reserve bytes)`` of the Ex entry point for ``key`` = (device
        ordinal, "forward"/"backward", bnOps), or a str saying why it is not used; asked of
        cuDNN once per key."""
        info = self._ex.get(key)
        if info is not None:
            return info
        ops = key[2]
        if self._double:
            info = _FLOAT64
        else:
            L = _lib.get()
            xd, pd = self._xd, self._pd
            act = self._ad if ops != _OPS_BN else None
            zd = xd if ops == _OPS_ADD_ACT else None
            n, r = ctypes.c_size_t(0), ctypes.c_size_t(0)
            if key[1] == "forward":
                fn = "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize"
                st = L.cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
                    h.raw, self._train_mode, ops, xd, zd, xd, pd, act, ctypes.byref(n))
            else:
                fn = "cudnnGetBatchNormalizationBackwardExWorkspaceSize"
                yd = None if ops == _OPS_BN else xd
                st = L.cudnnGetBatchNormalizationBackwardExWorkspaceSize(
                    h.raw, self._train_mode, ops, xd, yd, xd, zd, xd, pd, act, ctypes.byref(n))
            if not st:
                fn = "cudnnGetBatchNormalizationTrainingExReserveSpaceSize"
                st = L.cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                    h.raw, self._train_mode, ops, act, xd, ctypes.byref(r))
            info = _failure(st, fn) if st else (int(n.value), int(r.value))
        self._ex[key] = info
        return info

    def _ex_outcome(self, key, st, fresh, name, fn, x):
        """After an Ex call: None when it ran (recorded the first time), else the reason the
        plain entry point takes over -- only when this was the first Ex call for ``key``
        without a fused operation; any other failure raises."""
        if not st:
            if fresh:
                self._ex_ok.add(key)
                self._paths[name] = "ex"
            return None
        if not (fresh and key[2] == _OPS_BN):
            raise_for(st, fn, f"x {x.dtype} {x.shape} strides {x.strides}, mode {self._name}, "
                              f"{name}")
        reason = _failure(st, fn)
        self._ex[key] = reason
        return reason

    def _legacy_ran(self, name, why) -> None:
        if name not in self._paths:
            self._paths[name] = f"legacy: {why}"

    # -- argument checks -------------------------------------------------------------------
    def _ops(self, x, activation, z):
        """The cudnnBatchNormOps_t for ``activation``/``z``, checked before any C call."""
        if activation is None:
            if z is not None:
                raise ValueError("z= is added before the activation: give activation='relu' "
                                 "too")
            return _OPS_BN
        if activation != "relu":
            raise ValueError(f"activation must be None or 'relu' (the one cuDNN fuses into "
                             f"batch-norm), not {activation!r}")
        if not self._fusable:
            raise ValueError(
                "cuDNN fuses the activation into batch-norm only for channels-last "
                "(NHWC/NDHWC) float16/bfloat16 data in spatial mode; x is "
                f"{x.dtype} {x.shape} strides {x.strides}, mode {self._name!r}: apply the "
                "activation separately")
        return _OPS_ADD_ACT if z is not None else _OPS_ACT

    def _param(self, arr, name, dev, required=True, written=False):
        if arr is None:
            if required:
                raise ValueError(f"{name} is required")
            return None
        arr = operand(arr, name, "batch_norm", device=dev, written=written)
        if arr.dtype != self._pdtype:
            raise TypeError(f"{name} must be {self._pdtype} (cuDNN keeps batch-norm parameters "
                            f"in {self._pdtype} for this data), not {arr.dtype}")
        shape = arr.shape
        if shape != self._pshape and not (shape == self._pfull[:len(shape)]
                                          and arr.size == self._psize):
            raise ValueError(f"{name} must have shape {self._pshape}, got {shape}")
        if not arr.is_c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        return arr

    def _like_x(self, arr, name, x, dev):
        """``arr`` checked to have ``x``'s shape, dtype, layout and device."""
        arr = operand(arr, name, "batch_norm", device=dev)
        if arr.shape != x.shape or arr.dtype != x.dtype:
            raise ValueError(f"{name} {arr.dtype} {arr.shape} must match x {x.dtype} {x.shape}")
        if arr.strides != x.strides and \
                self._cl not in layout_padded(*padded(arr, name), arr.itemsize, name):
            raise ValueError(f"{name} must have x's memory layout")
        return arr

    def _stats(self, dev, s):
        return output(None, self._pshape, self._pdtype, False, dev, s)

    # -- the calls (on operands already checked against the plan) --------------------------
    def _train(self, x, dev, s, scale, bias, rm, rv, momentum, eps, activation, z, out):
        ops = self._ops(x, activation, z)
        scale = self._param(scale, "scale", dev)
        bias = self._param(bias, "bias", dev)
        # training updates the running statistics in place
        rm = self._param(rm, "running_mean", dev, False, written=True)
        rv = self._param(rv, "running_var", dev, False, written=True)
        if (rm is None) != (rv is None):
            raise ValueError("give both running_mean and running_var, or neither")
        momentum = float(momentum)
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum must be in [0, 1], got {momentum}")
        eps = _check_eps(eps)
        if self._per_channel < 2:
            raise ValueError(self._one_value())
        if z is not None:
            z = self._like_x(z, "z", x, dev)
        y = output(out, x.shape, x.dtype, self._cl, dev, s, strides=x.strides)
        sm = self._stats(dev, s)
        siv = self._stats(dev, s)
        if not self._planned:
            self.plan()
        h = handle_for(dev, s.raw_handle)
        L = _lib.get()
        xd, pd = self._xd, self._pd
        rm_ptr = None if rm is None else rm.address
        rv_ptr = None if rv is None else rv.address
        act = self._ad if ops != _OPS_BN else None
        name = "forward" + _OPS_SUFFIX[ops]
        key = (dev.ordinal, "forward", ops)
        info = self._ex.get(key)
        if info is None:
            info = self._ex_info(h, key)
        reserve = None
        if type(info) is tuple:
            fresh = key not in self._ex_ok
            ws_need, rs = info
            # Never a NULL workspace: cuDNN treats (NULL, 0) as "behave like the plain call".
            ws_ptr, ws_size = workspace(dev, s.raw_handle, max(ws_need, 1))
            if rs:
                reserve = empty((rs,), np.uint8, device=dev, stream=s)
            st = L.cudnnBatchNormalizationForwardTrainingEx(
                h.raw, self._train_mode, ops, self._one, self._zero, xd, x.address,
                xd if z is not None else None, None if z is None else z.address, xd, y.address, pd,
                scale.address, bias.address, momentum, rm_ptr, rv_ptr, eps, sm.address, siv.address, act,
                ws_ptr, ws_size, None if reserve is None else reserve.address, rs)
            if st:
                if reserve is not None:
                    reserve.close()
                    reserve = None
                refused = self._ex_outcome(key, st, fresh, name,
                                           "cudnnBatchNormalizationForwardTrainingEx", x)
                if refused is not None:
                    info = refused
            elif fresh:
                self._ex_outcome(key, st, fresh, name, "", x)
        if type(info) is str:
            if ops != _OPS_BN:
                raise ValueError(f"cuDNN does not fuse {name[8:]} into batch-norm for x "
                                 f"{x.dtype} {x.shape} strides {x.strides}: {info}")
            st = L.cudnnBatchNormalizationForwardTraining(
                h.raw, self._train_mode, self._one, self._zero, xd, x.address, xd, y.address, pd,
                scale.address, bias.address, momentum, rm_ptr, rv_ptr, eps, sm.address, siv.address)
            if st:
                raise_for(st, "cudnnBatchNormalizationForwardTraining",
                          f"x {x.dtype} {x.shape} strides {x.strides}, mode {self._name}")
            self._legacy_ran(name, info)
        state = BatchNormState()
        state.y, state.save_mean, state.save_inv_std, state.reserve = y, sm, siv, reserve
        state.path = "ex" if type(info) is tuple else "legacy"
        state.mode, state.eps, state.bias = self._name, eps, bias
        state.activation = activation
        state.fused_add = z is not None
        return state

    def _infer(self, x, dev, s, scale, bias, mean, var, eps, out):
        scale = self._param(scale, "scale", dev)
        bias = self._param(bias, "bias", dev)
        mean = self._param(mean, "mean", dev)
        var = self._param(var, "var", dev)
        eps = _check_eps(eps)
        y = output(out, x.shape, x.dtype, self._cl, dev, s, strides=x.strides)
        if not self._planned:
            self.plan()
        h = handle_for(dev, s.raw_handle)
        xd = self._xd
        st = _lib.get().cudnnBatchNormalizationForwardInference(
            h.raw, self._bn, self._one, self._zero, xd, x.address, xd, y.address, self._pd,
            scale.address, bias.address, mean.address, var.address, eps)
        if st:
            raise_for(st, "cudnnBatchNormalizationForwardInference",
                      f"x {x.dtype} {x.shape}, mode {self._name}")
        return y

    def _backward(self, x, dy, dev, s, scale, sm, siv, reserve, eps, ops, bias, y_fwd, out):
        dy = self._like_x(dy, "dy", x, dev)
        scale = self._param(scale, "scale", dev)
        sm = self._param(sm, "save_mean", dev, False)
        siv = self._param(siv, "save_inv_std", dev, False)
        if (sm is None) != (siv is None):
            raise ValueError("give both save_mean and save_inv_std, or neither")
        if reserve is not None:
            reserve = operand(reserve, "reserve", "batch_norm_backward", device=dev)
            if not reserve.is_c_contiguous:
                raise ValueError("reserve must be contiguous (pass the forward's "
                                 "state.reserve)")
        if ops != _OPS_BN:
            y_fwd = self._like_x(y_fwd, "the state's y", x, dev)
        eps = _check_eps(eps)
        cl = self._cl
        dx = output(out, x.shape, x.dtype, cl, dev, s, strides=x.strides)
        dscale = self._stats(dev, s)
        dbias = self._stats(dev, s)
        dz = output(None, x.shape, x.dtype, cl, dev, s) if ops == _OPS_ADD_ACT else None
        if not self._planned:
            self.plan()
        h = handle_for(dev, s.raw_handle)
        one, zero = self._one, self._zero
        xd, pd = self._xd, self._pd
        L = _lib.get()
        sm_ptr = None if sm is None else sm.address
        siv_ptr = None if siv is None else siv.address
        name = "backward" + _OPS_SUFFIX[ops]
        key = (dev.ordinal, "backward", ops)
        info = self._ex.get(key)
        if info is None:
            info = self._ex_info(h, key)
        why_not = info if type(info) is str else None
        if type(info) is tuple:
            ws_need, rs = info
            if rs and reserve is None:
                why_not = _NO_RESERVE
            elif rs and reserve.nbytes < rs:
                raise ValueError(f"reserve has {reserve.nbytes} bytes, this problem needs {rs}: "
                                 "pass the reserve of the forward of this x")
            else:
                fresh = key not in self._ex_ok
                ws_ptr, ws_size = workspace(dev, s.raw_handle, max(ws_need, 1))
                st = L.cudnnBatchNormalizationBackwardEx(
                    h.raw, self._train_mode, ops, one, zero, one, zero, xd, x.address,
                    None if y_fwd is None else xd, None if y_fwd is None else y_fwd.address,
                    xd, dy.address, None if dz is None else xd, None if dz is None else dz.address,
                    xd, dx.address, pd, scale.address, None if bias is None else bias.address,
                    dscale.address, dbias.address, eps, sm_ptr, siv_ptr,
                    self._ad if ops != _OPS_BN else None, ws_ptr, ws_size,
                    None if not rs else reserve.address, rs if rs else 0)
                if st or fresh:
                    why_not = self._ex_outcome(key, st, fresh, name,
                                               "cudnnBatchNormalizationBackwardEx", x)
        if why_not is not None:
            if ops != _OPS_BN:
                raise ValueError(f"the fused batch-norm backward ({name}) cannot run for x "
                                 f"{x.dtype} {x.shape}: {why_not}")
            st = L.cudnnBatchNormalizationBackward(
                h.raw, self._train_mode, one, zero, one, zero, xd, x.address, xd, dy.address, xd,
                dx.address, pd, scale.address, dscale.address, dbias.address, eps, sm_ptr, siv_ptr)
            if st:
                raise_for(st, "cudnnBatchNormalizationBackward",
                          f"x {x.dtype} {x.shape}, mode {self._name}")
            self._legacy_ran(name + " without reserve" if why_not is _NO_RESERVE else name,
                             why_not)
        if dz is not None:
            return dx, dscale, dbias, dz
        return dx, dscale, dbias

    # -- the plan's own calls --------------------------------------------------------------
    def _front(self, x, op, stream):
        """The execute front: ``x`` through the operand path, checked against the plan."""
        self._live()
        x = operand(x, "x", op, stream=stream)
        dev = x.device
        if dev is not self._device:
            raise ValueError(f"{op}: x is on device {dev.ordinal}, the plan on device "
                             f"{self._device.ordinal}")
        if x.dtype != self._dtype or x.shape != self._shape or (
                x.strides != self._strides
                and self._cl not in layouts_of(*padded(x, "x"), x.itemsize)):
            raise ValueError(f"{op}: x is {x.dtype} {x.shape} strides {x.strides}; the plan "
                             f"was made for {self._dtype} {self._shape} {self.layout}")
        return x, dev, as_stream(stream, dev)

    def execute(self, x, scale, bias, mean=None, var=None, *, momentum=None, eps=1e-5,
                activation=None, z=None, out=None, stream=None):
        """The forward on ``stream``: training or inference, as the plan was made.

        Parameters
        ----------
        x : DeviceArray
            Of the plan's shape, dtype and layout.
        scale, bias : DeviceArray
            gamma and beta (see the module docstring for dtype and shape).
        mean, var : DeviceArray, optional
            Training: the running statistics, updated in place (both or neither).
            Inference: the statistics to normalize with (required).
        momentum : float, optional
            Training only, in ``[0, 1]`` (default 0.1).
        eps : float
            Added to the variance, > 0.
        activation : {None, "relu"}
            Training only: fuse ``relu(bn(x) [+ z])`` (channels-last float16/bfloat16 data,
            spatial mode).
        z : DeviceArray, optional
            Training only: added before the activation; shaped and laid out like ``x``.
        out : DeviceArray, optional
            ``y``, shaped and laid out like ``x``.
        stream : Stream, optional

        Returns
        -------
        BatchNormState or DeviceArray
            Training: the state (unpacks as ``y, save_mean, save_inv_std``; carries the
            reserve for :meth:`backward`).  Inference: ``y``.

        Raises
        ------
        ClosedError
            The plan is closed.
        ValueError, TypeError
            Operands that do not fit the plan, or a training-only argument for an inference
            plan; the checks of :func:`batch_norm_train` / :func:`batch_norm_infer`.
        """
        op = f"{type(self).__name__}.execute"
        x, dev, s = self._front(x, op, stream)
        if self._training:
            return self._train(x, dev, s, scale, bias, mean, var,
                               0.1 if momentum is None else momentum, eps, activation, z, out)
        if momentum is not None or activation is not None or z is not None:
            raise ValueError(f"{op}: momentum, activation and z are training arguments; the "
                             "plan was made with training=False")
        return self._infer(x, dev, s, scale, bias, mean, var, eps, out)

    def backward(self, x, dy, scale, save_mean=None, save_inv_std=None, *, reserve=None,
                 eps=None, out=None, stream=None):
        """Gradients of the training forward on ``stream``: ``dx, dscale, dbias`` (and
        ``dz`` when the forward fused an add).

        Parameters
        ----------
        x, dy, scale, save_mean, save_inv_std, reserve, eps, out, stream
            As for :func:`batch_norm_backward` (the mode is the plan's).

        Raises
        ------
        ValueError
            The plan was made with ``training=False``, or the state's mode is not the plan's.
        """
        op = f"{type(self).__name__}.backward"
        if not self._training:
            raise ValueError(f"{op}: the plan was made for inference (training=False); build "
                             "one with training=True for the backward")
        x, dev, s = self._front(x, op, stream)
        sm, siv, reserve, eps, _, ops, bias, y_fwd = unpack_state(save_mean, save_inv_std, reserve,
                                                             eps, self._name)
        return self._backward(x, dy, dev, s, scale, sm, siv, reserve, eps, ops, bias, y_fwd,
                              out)

    # -- inspection ------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        """``"spatial"`` or ``"per_activation"``."""
        return self._name

    @property
    def training(self) -> bool:
        """Whether :meth:`execute` is the training forward."""
        return self._training

    @property
    def shape(self) -> tuple:
        """The data's logical shape."""
        return self._shape

    @property
    def dtype(self):
        """The data's dtype."""
        return self._dtype

    @property
    def channels_last(self) -> bool:
        """Whether the data is channels-last."""
        return self._cl

    @property
    def layout(self) -> str:
        """``"NC"`` (2-D data), ``"NCHW"``, ``"NHWC"``, ``"NCDHW"``, ``"NDHWC"``, ..."""
        return "NC" if len(self._shape) < 3 else layout_name(len(self._shape), self._cl)

    @property
    def param_shape(self) -> tuple:
        """The shape of scale, bias and the statistics."""
        return self._pshape

    @property
    def param_dtype(self):
        """The dtype of scale, bias and the statistics."""
        return self._pdtype

    @property
    def persistent(self) -> bool:
        """Whether training runs cuDNN's persistent spatial kernels (channels-last 16-bit)."""
        return self._persistent

    @property
    def entry_points(self) -> dict:
        """``{"forward": "ex" | "legacy: <why>", "backward": ...}`` on the plan's device, as
        decided so far (:meth:`plan` decides forward and backward of a training plan; fused
        variants are decided on first use)."""
        self.plan()
        o = self._device.ordinal
        return {which + _OPS_SUFFIX[ops]: "ex" if type(v) is tuple else f"legacy: {v}"
                for (dev_o, which, ops), v in self._ex.copy().items() if dev_o == o}

    @property
    def reserve_bytes(self) -> int:
        """Bytes of reserve space the training forward leaves for the backward (0 on the
        plain entry point)."""
        self.plan()
        info = self._ex.get((self._device.ordinal, "forward", _OPS_BN))
        return info[1] if type(info) is tuple else 0

    @property
    def paths(self) -> dict:
        """What the calls took so far (see :func:`batch_norm_paths`)."""
        return self._paths.copy()

    def __repr__(self) -> str:
        name = type(self).__name__
        if self.closed:
            return f"<{name} {self._problem()} (closed)>"
        if not self._planned:
            return f"<{name} {self._problem()}: not planned>"
        o = self._device.ordinal
        parts = [] if self._training else ["cudnnBatchNormalizationForwardInference, no "
                                           "workspace"]
        for (dev_o, which, ops), v in sorted(self._ex.copy().items(), key=str):
            if dev_o != o:
                continue
            label = which + _OPS_SUFFIX[ops]
            parts.append(f"{label}: Ex, workspace {v[0]} B, reserve {v[1]} B"
                         if type(v) is tuple else f"{label}: legacy ({v})")
        parts += [f"{k}: {v}" for k, v in self._paths.copy().items()
                  if k.endswith("without reserve")]
        t = self.time_ms
        timing = (f"{t * 1e3:.1f} us per call (timed)" if self._tuned and t is not None
                  and math.isfinite(t) else "untimed")
        return f"<{name} {self._problem()}: {'; '.join(parts)}; {timing}>"
