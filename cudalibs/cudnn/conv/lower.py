"""The lowering of the convolutions to cuDNN's graph API: their operation graphs.

A convolution becomes a graph of one convolution operation; the fused convolution + bias
[+ residual] [+ ReLU] a convolution into a virtual float32 tensor followed by pointwise
operations, the pattern cuDNN's runtime-fusion engines generate one kernel for.  The engine
search over these graphs is the one every graph-API plan shares
(:func:`cudalibs.cudnn.backend.candidates`).
"""

from __future__ import annotations

import numpy as np

from .. import backend as _graph
from ..backend import ALIGNMENT
from ..descriptors import packed_strides

__all__ = ["tensor", "conv_graph", "fused_graph"]


def tensor(uid, dtype, shape, cl, virtual=False):
    """A packed graph tensor of layout ``cl`` (channels-last when True)."""
    return _graph.tensor(uid, dtype, shape, packed_strides(shape, cl), alignment=ALIGNMENT,
                         virtual=virtual)


def conv_graph(h, op_name: str, dtype, cl, shapes, pad, stride, dil):
    """The operation graph of one convolution: tensors 1, 2 (inputs) and 3 (output) of
    ``shapes``, in the order the operation takes them."""
    a, b, c = (tensor(uid, dtype, shape, cl) for uid, shape in zip((1, 2, 3), shapes))
    conv = _graph.convolution(pad, stride, dil, compute=np.float32)
    op = _graph.conv_operation(op_name, a, b, c, conv)
    return _graph.operation_graph([op], h.raw)


def fused_graph(h, dtype, cl, x_shape, w_shape, y_shape, pad, stride, dil, alpha, alpha2,
                with_z: bool, activation: str):
    """``act(alpha * conv(x, w) + bias [+ alpha2 * z])``: the convolution into a virtual
    float32 tensor, then pointwise ADD bias, [ADD alpha2 * z], [RELU] into y -- the pattern
    cuDNN's runtime-fusion engines generate one kernel for.  Tensors: x 1, w 2, y 3, bias 4,
    z 5."""
    nd = len(y_shape)
    bshape = (1, y_shape[1]) + (1,) * (nd - 2)
    xt = tensor(1, dtype, x_shape, cl)
    wt = tensor(2, dtype, w_shape, cl)
    yt = tensor(3, dtype, y_shape, cl)
    bt = tensor(4, dtype, bshape, cl)
    acc = np.float32
    cur = tensor(101, acc, y_shape, cl, virtual=True)
    ops = [_graph.conv_operation("forward", xt, wt, cur,
                                 _graph.convolution(pad, stride, dil, compute=acc), alpha=alpha)]
    steps = [("add", bt, 1.0)]
    if with_z:
        steps.append(("add", tensor(5, dtype, y_shape, cl), alpha2))
    if activation == "relu":
        steps.append(("relu", None, 1.0))
    for i, (mode, operand, a2) in enumerate(steps):
        nxt = yt if i == len(steps) - 1 else tensor(102 + i, acc, y_shape, cl, virtual=True)
        ops.append(_graph.pointwise_operation(_graph.pointwise(mode, compute=acc), cur, nxt,
                                              operand, alpha2=a2))
        cur = nxt
    return _graph.operation_graph(ops, h.raw)
