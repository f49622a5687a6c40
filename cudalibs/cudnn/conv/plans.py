"""The three convolution plans: forward, backward data and backward filter.

Each is a :class:`~cudalibs.cudnn.conv.plan.ConvPlan` (the shared protocol: candidates on the
graph API first, the legacy API as fallback and twin, the one timer, the relaunch of graph
engines) that says which operands it takes and how its output's shape follows from them.
"""

from __future__ import annotations

from ...driver.args import int_tuple
from ...errors import CudaLibsError
from ...runtime.operand import operand
from .. import _lib
from .._base import raise_for
from .._common import scalar
from ..descriptors import convolution_descriptor, packed_strides, tensor_descriptor
from ..handle import handle_for
from .plan import ConvPlan, conv_output_shape, describe, library_output_dims

__all__ = ["ConvForwardPlan", "ConvBackwardDataPlan", "ConvBackwardFilterPlan", "check_bias"]


# -- the three convolutions ------------------------------------------------------------------------
def _options(stride, padding, dilation, groups, algo, math, deterministic, workspace_limit,
             alpha, beta, out, graph_api, max_candidates) -> dict:
    return dict(stride=stride, padding=padding, dilation=dilation, groups=groups, algo=algo,
                math=math, deterministic=deterministic, workspace_limit=workspace_limit,
                alpha=alpha, beta=beta, out=out, graph_api=graph_api,
                max_candidates=max_candidates)


class ConvForwardPlan(ConvPlan):
    """A planned convolution ``y = alpha * conv(x, w) + beta * y``.

    Parameters
    ----------
    x, w : DeviceArray or CUDA array
        Example input ``(N, C, H, W)`` / ``(N, C, D, H, W)`` and filter
        ``(K, C/groups, ...)``: only their shapes, dtype, layout and device are used.
    stride, padding, dilation, groups
        As for :func:`~cudalibs.cudnn.conv_forward`.
    algo : {"heuristic", "find"} or int or str
        ``"find"`` and ``"heuristic"`` offer every candidate (call :meth:`autotune` to time
        them); an int or a name is that legacy algorithm alone.
    math, deterministic, workspace_limit, alpha, beta
        As for :func:`~cudalibs.cudnn.conv_forward` (``alpha``/``beta`` are fixed per plan).
    out : DeviceArray, optional
        An example output; its layout decides when the inputs fit both.
    graph_api : bool, optional
        Use the graph API where it applies (default: :attr:`cudalibs.Options.conv_graph_api`).
    max_candidates : int, optional
        The most graph engines finalized as candidates (default 16).

    Examples
    --------
    >>> plan = cudnn.ConvForwardPlan(x, w, padding=1)   # doctest: +SKIP
    >>> plan.autotune(); y = plan.execute(x, w)          # doctest: +SKIP
    """

    op = legacy_op = "forward"
    kind = "cudnn_conv_forward"
    names = ("x", "w")

    def __init__(self, x, w, *, stride=1, padding=0, dilation=1, groups=1, algo="heuristic",
                 math=None, deterministic=False, workspace_limit=None, alpha=1.0, beta=0.0,
                 out=None, graph_api=None, max_candidates=None):
        self._setup(x, w, None, **_options(stride, padding, dilation, groups, algo, math,
                                           deterministic, workspace_limit, alpha, beta, out,
                                           graph_api, max_candidates))
        self._bias_desc = None

    def _shapes(self, x_shape, w_shape, extra):
        pad, st_, dil, groups = self._conv
        y = conv_output_shape(x_shape, w_shape, stride=st_, padding=pad, dilation=dil,
                              groups=groups)
        return y, (x_shape, w_shape, y), describe(self._dtype, x_shape, w_shape, self._cl,
                                                  pad, st_, dil, groups)

    def _filter_slot(self) -> int:
        return 1

    def _build_descs(self):
        descs = super()._build_descs()
        compute, req_math, _ = self._mathinfo
        lib_dims = library_output_dims(convolution_descriptor(*self._conv, compute, req_math),
                                       descs[0], descs[1], len(self._out_shape))
        if lib_dims != self._out_shape:   # the formula and cuDNN must agree
            raise CudaLibsError(f"cuDNN computes output {lib_dims}, the formula "
                                f"{self._out_shape}, for {self._text}")
        return descs

    def execute(self, x, w, *, out=None, bias=None, stream=None):
        """``y = alpha * conv(x, w) + beta * out (+ bias)`` on ``stream``.

        Parameters
        ----------
        x, w : DeviceArray
            Of the plan's shapes, dtype and layout.
        out : DeviceArray, optional
            Allocated stream-ordered if None; must not overlap ``x`` or ``w``.
        bias : DeviceArray, optional
            ``(K,)``, added after the convolution.
        stream : Stream, optional

        Returns
        -------
        DeviceArray
        """
        x, w, y, dev, s = self._check_operands(x, w, out, stream, "ConvForwardPlan.execute")
        return self._forward(x, w, y, bias, dev, s, "ConvForwardPlan.execute")

    def _forward(self, x, w, y, bias, dev, s, op):
        """The convolution and the bias pass on checked operands."""
        if bias is not None:
            bias = check_bias(bias, self._out_shape, self._dtype, dev, op)
        self._call(self._exe, dev, s, (x.address, w.address, y.address))
        if bias is not None:
            self.add_bias(dev, s, bias, y)
        return y

    def add_bias(self, dev, s, bias, y) -> None:
        """``y += bias`` (per output channel) with ``cudnnAddTensor``."""
        bd = self._bias_desc
        if bd is None:
            shape = (1, self._out_shape[1]) + (1,) * (len(self._out_shape) - 2)
            bd = self._bias_desc = tensor_descriptor(self._dtype, shape,
                                                     packed_strides(shape, False))
        h = handle_for(dev, s.raw_handle)
        d = self._double
        st = _lib.get().cudnnAddTensor(h.raw, scalar(1.0, d), bd.raw, bias.address, scalar(1.0, d),
                                       self._legacy_descs[2].raw, y.address)
        if st:
            raise_for(st, "cudnnAddTensor", f"bias {bias.shape} onto {y.shape}")


def check_bias(bias, out_shape, dtype, dev, op="conv_forward"):
    """``bias`` through the operand path, checked to be ``(K,)`` of ``dtype``."""
    bias = operand(bias, "bias", op, device=dev)
    k = out_shape[1]
    if bias.shape != (k,) and bias.shape != (1, k) + (1,) * (len(out_shape) - 2):
        raise ValueError(f"{op}: bias must have shape ({k},), got {bias.shape}")
    if bias.dtype != dtype:
        raise TypeError(f"{op}: bias has dtype {bias.dtype}, expected {dtype}")
    if bias.strides[-1] != bias.itemsize and bias.size > 1:
        raise ValueError(f"{op}: bias must be contiguous")
    return bias


class ConvBackwardDataPlan(ConvPlan):
    """A planned ``dx = alpha * conv^T(dy, w) + beta * dx``.

    Parameters
    ----------
    dy, w : DeviceArray or CUDA array
        Example output gradient ``(N, K, ...)`` and filter (shapes, dtype, layout, device).
    x_shape : tuple of int, optional
        The input's shape (default: the smallest that gives ``dy``'s shape).
    stride, padding, dilation, groups, algo, math, deterministic, workspace_limit, alpha,
    beta, out, graph_api, max_candidates
        As for :class:`ConvForwardPlan`.
    """

    op = legacy_op = "backward_data"
    kind = "cudnn_conv_backward_data"
    names = ("dy", "w")
    order = (1, 0)          # cudnnConvolutionBackwardData takes w, then dy

    def __init__(self, dy, w, x_shape=None, *, stride=1, padding=0, dilation=1, groups=1,
                 algo="heuristic", math=None, deterministic=False, workspace_limit=None,
                 alpha=1.0, beta=0.0, out=None, graph_api=None, max_candidates=None):
        self._setup(dy, w, x_shape, **_options(stride, padding, dilation, groups, algo, math,
                                               deterministic, workspace_limit, alpha, beta,
                                               out, graph_api, max_candidates))

    def _shapes(self, dy_shape, w_shape, xs):
        pad, st_, dil, groups = self._conv
        nsp = len(dy_shape) - 2
        if xs is None:
            c = w_shape[1] * groups
            xs = (dy_shape[0], c) + tuple(
                (dy_shape[2 + i] - 1) * st_[i] - 2 * pad[i] + dil[i] * (w_shape[2 + i] - 1) + 1
                for i in range(nsp))
            if any(v < 1 for v in xs):
                raise ValueError(f"no input shape gives dy {dy_shape} with these parameters")
        xs = int_tuple(xs, f"{type(self).__name__}: x_shape", scalar=False)
        if len(xs) != len(dy_shape):
            raise ValueError(f"x_shape {xs} must have {len(dy_shape)} dimensions")
        expect = conv_output_shape(xs, w_shape, stride=st_, padding=pad, dilation=dil,
                                   groups=groups)
        if expect != tuple(dy_shape):
            raise ValueError(f"an input of shape {xs} convolves to {expect}, but dy is "
                             f"{tuple(dy_shape)}")
        return xs, (w_shape, dy_shape, xs), describe(self._dtype, xs, w_shape, self._cl, pad,
                                                     st_, dil, groups)

    def _filter_slot(self) -> int:
        return 0


class ConvBackwardFilterPlan(ConvPlan):
    """A planned ``dw = alpha * (x ⋆ dy) + beta * dw``.

    Parameters
    ----------
    x, dy : DeviceArray or CUDA array
        Example forward input and output gradient (shapes, dtype, layout, device).
    filter_shape : tuple of int
        ``(K, C/groups, ...)``.
    stride, padding, dilation, groups, algo, math, deterministic, workspace_limit, alpha,
    beta, out, graph_api, max_candidates
        As for :class:`ConvForwardPlan`.
    """

    op = legacy_op = "backward_filter"
    kind = "cudnn_conv_backward_filter"
    names = ("x", "dy")

    def __init__(self, x, dy, filter_shape, *, stride=1, padding=0, dilation=1, groups=1,
                 algo="heuristic", math=None, deterministic=False, workspace_limit=None,
                 alpha=1.0, beta=0.0, out=None, graph_api=None, max_candidates=None):
        self._setup(x, dy, filter_shape, **_options(stride, padding, dilation, groups, algo,
                                                    math, deterministic, workspace_limit,
                                                    alpha, beta, out, graph_api,
                                                    max_candidates))

    def _shapes(self, x_shape, dy_shape, ws_):
        pad, st_, dil, groups = self._conv
        ws_ = int_tuple(ws_, f"{type(self).__name__}: filter_shape", scalar=False)
        if len(ws_) != len(x_shape) or any(v < 1 for v in ws_):
            raise ValueError(f"filter_shape {ws_} must have {len(x_shape)} positive dimensions")
        expect = conv_output_shape(x_shape, ws_, stride=st_, padding=pad, dilation=dil,
                                   groups=groups)
        if expect != tuple(dy_shape):
            raise ValueError(f"x {tuple(x_shape)} with a filter {ws_} convolves to {expect}, "
                             f"but dy is {tuple(dy_shape)}")
        return ws_, (x_shape, dy_shape, ws_), describe(self._dtype, x_shape, ws_, self._cl,
                                                       pad, st_, dil, groups)

    def _filter_slot(self) -> int:
        return 2
