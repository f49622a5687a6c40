"""The lowering of layer / RMS norm to cuDNN's graph API: one backend norm operation, built
host-side (the lowering cudnn-frontend uses; see :mod:`cudalibs.cudnn.norm.layer`)."""

from __future__ import annotations

import numpy as np

from .. import _lib
from .. import backend as _graph
from .checks import F32, MAX_ALIGNMENT, NORM_MODES, check_mode

__all__ = ["forward_graph", "backward_graph", "X", "SCALE", "BIAS", "EPS", "Y", "MEAN", "INV",
           "DY", "DX", "DSCALE", "DBIAS"]

# -- graphs (host-side) ----------------------------------------------------------------------
# Unique ids of the tensors; a plan's pointers follow its uid list.
X, SCALE, BIAS, EPS, Y, MEAN, INV = 1, 2, 3, 4, 5, 6, 7
DY, DX, DSCALE, DBIAS = 8, 9, 10, 11


def tensors(dtype, wdtype, rows, feats, alignment):
    """Factories of the three tensor shapes of a norm graph.  Each declares ``alignment`` or
    its element size, whichever is larger (cuDNN refuses less than an element)."""
    xd, xs = (rows, feats, 1, 1), (feats, 1, feats, feats)
    wd, ws = (1, feats, 1, 1), (feats, 1, feats, feats)
    sd, ss = (rows, 1, 1, 1), (1, 1, 1, 1)

    def make(uid, dt, dims, strides):
        return _graph.tensor(uid, dt, dims, strides,
                             alignment=max(alignment, np.dtype(dt).itemsize))

    def data(uid):
        return make(uid, dtype, xd, xs)

    def param(uid):
        return make(uid, wdtype, wd, ws)

    def stat(uid):
        return make(uid, F32, sd, ss)

    return data, param, stat


def forward_graph(mode: str, training: bool, dtype, weight_dtype, rows: int, features: int, *,
                  bias: bool = True, alignment: int = MAX_ALIGNMENT, handle=None):
    """The finalized operation graph of one norm forward, and its tensors' unique ids in the
    order :meth:`NormForwardPlan.execute` binds pointers.

    Without ``handle`` the graph is built host-side (no GPU needed), which checks it; the
    heuristics need one built with the device's handle (raw): without it they see no device
    and offer nothing for half precision.

    Tensors: x, scale, [bias], epsilon (by value), y, [mean], [inv_variance].
    """
    T = _lib
    D = T.CUDNN_TYPE_BACKEND_DESCRIPTOR
    data, param, stat = tensors(dtype, weight_dtype, rows, features, alignment)
    layer = check_mode(mode) == "layer"
    attrs = [(T.CUDNN_ATTR_OPERATION_NORM_FWD_MODE, T.CUDNN_TYPE_NORM_MODE, NORM_MODES[mode]),
             (T.CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, T.CUDNN_TYPE_NORM_FWD_PHASE,
              T.CUDNN_NORM_FWD_TRAINING if training else T.CUDNN_NORM_FWD_INFERENCE),
             (T.CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, D, data(X)),
             (T.CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, D, param(SCALE)),
             (T.CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, D,
              _graph.tensor(EPS, F32, (1, 1, 1, 1), (1, 1, 1, 1), by_value=True)),
             (T.CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, D, data(Y))]
    uids = [X, SCALE]
    if bias:
        attrs.append((T.CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, D, param(BIAS)))
        uids.append(BIAS)
    uids += [EPS, Y]
    if training:
        if layer:
            attrs.append((T.CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, D, stat(MEAN)))
            uids.append(MEAN)
        attrs.append((T.CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, D, stat(INV)))
        uids.append(INV)
    op = _graph.make(T.CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, *attrs)
    return _graph.operation_graph([op], handle), tuple(uids)


def backward_graph(mode: str, dtype, weight_dtype, rows: int, features: int, *,
                   alignment: int = MAX_ALIGNMENT, handle=None):
    """The finalized operation graph of one norm backward and its unique ids in pointer order.

    Tensors: dy, x, scale, [mean], inv_variance, dx, dscale, [dbias] (layer norm has the
    bracketed ones; cuDNN 9 takes no epsilon here: the saved inverse deviation carries it).
    """
    T = _lib
    D = T.CUDNN_TYPE_BACKEND_DESCRIPTOR
    data, param, stat = tensors(dtype, weight_dtype, rows, features, alignment)
    layer = check_mode(mode) == "layer"
    attrs = [(T.CUDNN_ATTR_OPERATION_NORM_BWD_MODE, T.CUDNN_TYPE_NORM_MODE, NORM_MODES[mode]),
             (T.CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, D, data(DY)),
             (T.CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, D, data(X)),
             (T.CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, D, param(SCALE)),
             (T.CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, D, stat(INV)),
             (T.CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, D, data(DX)),
             (T.CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, D, param(DSCALE))]
    uids = [DY, X, SCALE]
    if layer:
        attrs.append((T.CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, D, stat(MEAN)))
        attrs.append((T.CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, D, param(DBIAS)))
        uids.append(MEAN)
    uids += [INV, DX, DSCALE]
    if layer:
        uids.append(DBIAS)
    op = _graph.make(T.CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR, *attrs)
    return _graph.operation_graph([op], handle), tuple(uids)


