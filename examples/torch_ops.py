"""PyTorch autograd Functions that run on cudalibs: a framework adapter to copy from.

Each operation is a :class:`torch.autograd.Function` whose forward and backward are cudalibs
calls, with a thin :class:`torch.nn.Module` around it:

==========================  ===============================================================
:class:`LinearFunction`     ``y = x @ w.T + b``: ``cublas.matmul`` with the ``"bias"``
                            epilogue; ``dx = dy @ w``, ``dw = dy.T @ x`` and ``db`` (a row of
                            ones times ``dy``) as matmuls.  Module :class:`Linear`.
:class:`MLPFunction`        ``gelu(x @ w1.T + b1) @ w2.T + b2``: the first matmul on the
                            ``"gelu_aux_bias"`` epilogue, which also writes the GELU input
                            (the *aux* matrix) for the backward; the backward's ``dh @ w2``
                            runs on the ``"dgelu_bgrad"`` epilogue, which applies GELU's
                            derivative from that aux matrix and writes ``db1`` in the same
                            call.  cuBLASLt's GELU is the tanh form
                            (``torch.nn.GELU(approximate="tanh")``).  Module :class:`MLP`.
:class:`LayerNormFunction`  ``cudnn.layer_norm(training=True)`` returning ``(y, mean,
                            inv_std)``, ``cudnn.layer_norm_backward``.  Module
                            :class:`LayerNorm`.
:class:`AttentionFunction`  ``cudnn.sdpa(q, k, v, causal=..., training=True)`` and
                            ``cudnn.sdpa_backward`` on ``[b, h, s, d]`` float16 or bfloat16
                            (grouped-query attention too).  Module :class:`Attention`.
:class:`Conv2dFunction`     ``cudnn.conv_forward`` (+ bias), ``conv_backward_data``,
                            ``conv_backward_filter``, ``conv_backward_bias``, in NCHW or
                            channels-last.  Module :class:`Conv2d`.
==========================  ===============================================================

Shapes and dtypes are checked by cudalibs itself, before any library call: a wrong shape
raises its ``ValueError``, an unsupported dtype its ``TypeError``, each naming the operation
and the operand.

How the adapter meets PyTorch:

- **Streams.**  Every call runs on torch's current stream (``torch.cuda.current_stream()``,
  passed as ``stream=``; in a backward that is the stream its forward ran on, as autograd
  arranges), and that stream is also made cudalibs' current stream for the call, so that an
  operand which crosses by DLPack (PyTorch exports bfloat16 that way) is ordered against
  torch's stream and not the legacy default one.  No call synchronises.
- **Memory.**  Outputs are allocated by torch and written by cudalibs through ``out=``, so
  torch's caching allocator owns them (and, under ``torch.cuda.graph``, its graph pool).  The
  one exception is the attention statistics, which ``cudnn.sdpa`` allocates itself
  (stream-ordered, on the same stream) and hands over with ``torch.from_dlpack``.
- **Autograd.**  Inputs are detached before they reach cudalibs (PyTorch refuses to export a
  tensor that requires grad), and the backward runs wherever autograd runs it: on its own
  device thread, where cudalibs makes that thread's library handles on first use.
- **CUDA graphs.**  :func:`train_graph` captures a whole training step -- forward, backward,
  optimizer -- with ``torch.cuda.graph`` and replays it.  cudalibs keeps plans, library
  handles (per thread) and scratch workspaces (per stream) that it makes on first use with
  synchronous allocations, which a capture cannot record; so the warm-up steps run on the
  very stream that is then captured (``torch.cuda.graph(g, stream=s)``), and during the
  capture only library calls are made, each recorded into torch's graph (cudalibs' fast
  relaunch path stays off for a stream that is capturing).  If a cudalibs call cannot be
  captured, the capture stops with :class:`CaptureRefused`, naming the operation and the
  library's reason (a capture on a stream no step ran on fails so: see
  :func:`train_graph`).  The attention statistics, allocated inside the capture, go back
  to cudalibs through DLPack, since the driver cannot yet tell the device of memory that a
  capture allocated, which the ``__cuda_array_interface__`` import asks it.

The script builds a small model twice -- once from these modules, once from PyTorch's own,
with the same initial weights -- trains both for a few steps with the same optimizer on the
same random batches, and compares losses and weights:

- ``transformer``: a pre-norm transformer block without embeddings (LayerNorm, a QKV
  projection, causal attention in bfloat16, an output projection, LayerNorm, the GELU MLP,
  two residual adds) in float32 with attention in bfloat16, a mean-squared-error loss;
- ``conv``: two convolutions with ReLU, global average pooling and a linear classifier in
  float32, a cross-entropy loss.

PyTorch's TF32 switches are turned off for the comparison: cudalibs computes float32 matmuls
and convolutions in full float32 unless asked otherwise.  Run::

    PYTHONPATH=. python examples/torch_ops.py [--steps 10] [--graph] [--model both]

It prints a line every few steps and a final comparison per model; the exit status is 1 if
a model misses its tolerance (or a graph capture is refused), 2 without a GPU or PyTorch.
On an H100 a training step of the transformer block takes about 5.8 ms eagerly and 0.65 ms
replayed, of the conv net 2.3 ms and 0.3 ms; the replayed steps equal the eager ones bit for
bit.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
from pathlib import Path

if not __package__:  # run as a script from a checkout: use this checkout's cudalibs
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def arg_parser() -> argparse.ArgumentParser:
    """The command line of :func:`main`."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=10, help="training steps per model")
    p.add_argument("--graph", action="store_true",
                   help="replay the cudalibs model's training step from a CUDA graph "
                   "captured with torch.cuda.graph (after 3 eager warm-up steps)")
    p.add_argument("--model", choices=("transformer", "conv", "both"), default="both",
                   help="which model to train and compare")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (momentum 0.9)")
    p.add_argument("--seed", type=int, default=0, help="initial weights and batches")
    p.add_argument("--every", type=int, default=2, help="steps between progress lines")
    return p


try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as _exc:  # the adapter is for PyTorch: say so in one line as a script
    if __name__ == "__main__":
        # The command line first, so that --help and a wrong option answer without PyTorch.
        arg_parser().parse_args()
        print(f"torch_ops: needs PyTorch ({_exc})")
        sys.exit(2)
    raise

import cudalibs as cl  # noqa: E402
from cudalibs import cublas, cudnn  # noqa: E402

__all__ = ["LinearFunction", "MLPFunction", "LayerNormFunction", "AttentionFunction",
           "Conv2dFunction", "linear", "mlp", "layer_norm", "attention", "conv2d", "Linear",
           "MLP", "LayerNorm", "Attention", "Conv2d", "TorchMLP", "TorchAttention", "Block",
           "ConvNet", "MODELS", "CaptureRefused", "build_pair", "make_batches", "loss_fn",
           "train_eager", "train_graph", "compare", "full_float32", "run_model", "TOLERANCES",
           "arg_parser", "main"]

#: Per model: the largest relative difference from pure PyTorch allowed for a step's loss
#: (``|a - b| / |b|``) and for each parameter's total update over the run
#: (``||dw_a - dw_b|| / ||dw_b||``, norm-wise).  The updates are compared rather than the
#: weights because a few small steps leave the weights within rounding of their start
#: whatever the gradients were.  ``conv`` is float32 throughout: the two differ by rounding
#: in reductions of a few thousand terms (on an H100, over 8 steps: losses 1e-7, updates
#: 1e-6).  ``transformer`` has bfloat16 attention, whose outputs and gradients cuDNN and
#: PyTorch round differently at bfloat16's 2**-8 (losses 6e-7, updates 2e-4, the QKV
#: projection's the largest).  Each bound is ten times or more what was seen.
TOLERANCES = {"conv": {"loss": 1e-5, "update": 1e-4},
              "transformer": {"loss": 1e-5, "update": 2e-3}}


# -- the bridge: torch's stream, detached operands, errors that name the operation ----------
class _Call:
    """The context of one cudalibs call: torch's current stream of ``device``, made
    cudalibs' current stream for the call; an error on the way out is marked with the
    operation (``exc.cudalibs_op``) and, where Python has notes, says so in its text."""

    __slots__ = ("op", "device", "stream")

    def __init__(self, op: str, device: torch.device):
        self.op = op
        self.device = device
        self.stream = None

    def __enter__(self) -> cl.Stream:
        ts = torch.cuda.current_stream(self.device)
        # A borrowed wrapper of torch's stream: cudalibs never destroys it.  Giving the
        # device skips a driver query of the stream's device.
        self.stream = cl.Stream.from_handle(ts.cuda_stream, device=self.device.index)
        # cudalibs' current stream orders DLPack exports and imports that name no stream:
        # make it torch's, so nothing waits on (or, in a capture, touches) the legacy stream.
        return self.stream.__enter__()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stream.__exit__(exc_type, exc, tb)
        if exc is not None and getattr(exc, "cudalibs_op", None) is None:
            try:
                exc.cudalibs_op = self.op
            except AttributeError:    # an exception type without an instance dict
                return
            capturing = torch.cuda.is_current_stream_capturing()
            if hasattr(exc, "add_note"):
                exc.add_note(f"(in {self.op}, run by cudalibs on torch stream "
                             f"0x{self.stream.raw_handle:x}"
                             f"{', which was capturing a CUDA graph' if capturing else ''})")


def _detached(*tensors):
    """The tensors without autograd history (None stays None): PyTorch refuses to export a
    tensor that requires grad through DLPack or ``__cuda_array_interface__`` (a saved output,
    such as attention's ``o``, comes back from ``ctx.saved_tensors`` requiring grad)."""
    return tuple(None if t is None else t.detach() for t in tensors)


def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def _empty_in_layout_of(t: torch.Tensor, shape) -> torch.Tensor:
    """A new dense tensor of ``shape`` (``t``'s dtype and device) whose dimensions lie in
    memory in the order of ``t``'s strides: the layout cudalibs gives attention outputs,
    so that ``q`` read in place from a packed ``[b, s, 3, h, d]`` projection gives an ``o``
    whose ``[b, s, h * d]`` view needs no copy."""
    order = sorted(range(t.dim()), key=lambda i: (-t.stride(i), i))
    base = torch.empty([shape[i] for i in order], dtype=t.dtype, device=t.device)
    return base.permute([order.index(i) for i in range(t.dim())])


def _sdpa_layout(t: torch.Tensor) -> torch.Tensor:
    """``t`` if cuDNN's attention reads it in place (a contiguous head dimension, other
    strides positive multiples of 16 bytes), else a contiguous copy (a broadcast gradient,
    say, has stride 0)."""
    item = t.element_size()
    ok = t.dim() == 4 and (t.shape[3] == 1 or t.stride(3) == 1) and all(
        n == 1 or (st > 0 and st * item % 16 == 0) for n, st in zip(t.shape[:3], t.stride()[:3]))
    return t if ok else t.contiguous()


def _bias_grad(dy2: torch.Tensor, out: torch.Tensor, s: cl.Stream) -> torch.Tensor:
    """``out = dy2.sum(0)`` as a product with a row of ones (float32 accumulation)."""
    ones = dy2.new_ones((1, dy2.shape[0]))
    cublas.matmul(ones, dy2, out=out.view(1, -1), stream=s)
    return out


# -- the Functions -------------------------------------------------------------------------
class LinearFunction(torch.autograd.Function):
    """``y = x @ weight.T + bias`` through cuBLASLt (the ``"bias"`` epilogue).

    Forward arguments: ``x`` (``[..., in]``), ``weight`` (``[out, in]``), ``bias``
    (``[out]`` or None), all float32, float16 or bfloat16 of one dtype.  The backward gives
    ``dx = dy @ weight``, ``dweight = dy.T @ x`` and ``dbias`` (the sum of ``dy``'s rows),
    each only when autograd asks for it.
    """

    @staticmethod
    def forward(ctx, x, weight, bias):
        x, weight, bias = _detached(x, weight, bias)
        x2 = x.reshape(-1, x.shape[-1])     # a view when it can be; cudalibs checks the rest
        y = x2.new_empty((x2.shape[0], weight.shape[0]))
        with _Call("Linear forward", x.device) as s:
            cublas.matmul(x2, weight.T, bias=bias, out=y, stream=s)
        ctx.save_for_backward(x2, weight)
        ctx.has_bias = bias is not None
        ctx.lead = x.shape[:-1]
        return y.view(*ctx.lead, y.shape[1])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x2, weight = _detached(*ctx.saved_tensors)
        need_x, need_w, need_b = ctx.needs_input_grad
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
        # Outputs are torch's tensors, written through out= (cudalibs returns its own views
        # of them, which autograd would not take).
        dx = torch.empty_like(x2) if need_x else None
        dw = torch.empty_like(weight) if need_w else None
        db = dy2.new_empty(dy2.shape[1]) if need_b and ctx.has_bias else None
        with _Call("Linear backward", dy.device) as s:
            if dx is not None:
                cublas.matmul(dy2, weight, out=dx, stream=s)
            if dw is not None:
                # dy2.T is a transposed view: cuBLASLt reads it in place.
                cublas.matmul(dy2.T, x2, out=dw, stream=s)
            if db is not None:
                _bias_grad(dy2, db, s)
        if dx is not None:
            dx = dx.view(*ctx.lead, x2.shape[1])
        return dx, dw, db


class MLPFunction(torch.autograd.Function):
    """``gelu(x @ w1.T + b1) @ w2.T + b2`` with cuBLASLt's fused GELU epilogues.

    Forward arguments: ``x`` (``[..., d]``), ``w1`` (``[hidden, d]``), ``b1`` (``[hidden]``
    or None), ``w2`` (``[d_out, hidden]``), ``b2`` (``[d_out]`` or None), one dtype.  The
    first matmul runs on ``"gelu_aux_bias"`` (``"gelu_aux"`` without ``b1``), writing the
    GELU input into an aux matrix of ``[rows, hidden rounded up to 8]`` (the leading
    dimension cuBLASLt requires) that the backward reads: its ``dh @ w2`` runs on
    ``"dgelu_bgrad"`` (``"dgelu"``), which multiplies by GELU's derivative and writes
    ``db1`` in the same call.  GELU is the tanh form.
    """

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2):
        x, w1, b1, w2, b2 = _detached(x, w1, b1, w2, b2)
        x2 = x.reshape(-1, x.shape[-1])
        rows, hidden = x2.shape[0], w1.shape[0]
        h = x2.new_empty((rows, hidden))
        pre = x2.new_empty((rows, _round_up(hidden, 8)))    # the aux matrix
        y = x2.new_empty((rows, w2.shape[0]))
        with _Call("MLP forward", x.device) as s:
            cublas.matmul(x2, w1.T, bias=b1, aux=pre, out=h, stream=s,
                          epilogue="gelu_aux_bias" if b1 is not None else "gelu_aux")
            cublas.matmul(h, w2.T, bias=b2, out=y, stream=s)
        ctx.save_for_backward(x2, w1, w2, h, pre)
        ctx.biases = (b1 is not None, b2 is not None)
        ctx.lead = x.shape[:-1]
        return y.view(*ctx.lead, y.shape[1])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x2, w1, w2, h, pre = _detached(*ctx.saved_tensors)
        need_x, need_w1, need_b1, need_w2, need_b2 = ctx.needs_input_grad
        has_b1, has_b2 = ctx.biases
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
        dx = torch.empty_like(x2) if need_x else None
        dw1 = torch.empty_like(w1) if need_w1 else None
        dw2 = torch.empty_like(w2) if need_w2 else None
        db2 = dy2.new_empty(dy2.shape[1]) if need_b2 and has_b2 else None
        # dgelu_bgrad writes b1's gradient whenever there is a b1, asked for or not.
        db1 = dy2.new_empty(w1.shape[0]) if has_b1 else None
        dpre = torch.empty_like(h)
        with _Call("MLP backward", dy.device) as s:
            if dw2 is not None:
                cublas.matmul(dy2.T, h, out=dw2, stream=s)
            if db2 is not None:
                _bias_grad(dy2, db2, s)
            # The gradient of GELU's input, and with it b1's, in one matmul.
            cublas.matmul(dy2, w2, aux=pre, bias=db1, out=dpre, stream=s,
                          epilogue="dgelu_bgrad" if has_b1 else "dgelu")
            if dx is not None:
                cublas.matmul(dpre, w1, out=dx, stream=s)
            if dw1 is not None:
                cublas.matmul(dpre.T, x2, out=dw1, stream=s)
        if dx is not None:
            dx = dx.view(*ctx.lead, x2.shape[1])
        return dx, dw1, db1 if need_b1 else None, dw2, db2


class LayerNormFunction(torch.autograd.Function):
    """Layer norm over the trailing ``weight.dim()`` dimensions through cuDNN.

    Forward arguments: ``x`` (float32, float16 or bfloat16), ``weight`` and ``bias`` (the
    trailing shape of ``x``, float32 or ``x``'s dtype; ``bias`` may be None), ``eps``.  The
    training forward keeps the float32 mean and inverse deviation per row for
    ``cudnn.layer_norm_backward``.  ``x`` is made C-contiguous first (cuDNN's norms need it).
    """

    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        x, weight, bias = _detached(x, weight, bias)
        x = x.contiguous()
        k = weight.dim()
        stats = x.new_empty(tuple(x.shape[:max(x.dim() - k, 0)]) + (1,) * k,
                            dtype=torch.float32)
        y, inv_std = torch.empty_like(x), torch.empty_like(stats)
        with _Call("LayerNorm forward", x.device) as s:
            cudnn.layer_norm(x, weight, bias, eps=eps, training=True, normalized_ndim=k,
                             out=(y, stats, inv_std), stream=s)
        ctx.save_for_backward(x, weight, stats, inv_std)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, weight, mean, inv_std = _detached(*ctx.saved_tensors)
        dx, dw, db = torch.empty_like(x), torch.empty_like(weight), torch.empty_like(weight)
        with _Call("LayerNorm backward", dy.device) as s:
            cudnn.layer_norm_backward(dy.contiguous(), x, weight, mean, inv_std,
                                      normalized_ndim=weight.dim(), out=(dx, dw, db),
                                      stream=s)
        need_x, need_w, need_b, _ = ctx.needs_input_grad
        return (dx if need_x else None, dw if need_w else None,
                db if need_b and ctx.has_bias else None, None)


class AttentionFunction(torch.autograd.Function):
    """Scaled dot-product attention through cuDNN's fused engines.

    Forward arguments: ``q`` ``[b, h_q, s_q, d]``, ``k`` ``[b, h_kv, s_kv, d]``, ``v``
    ``[b, h_kv, s_kv, d_v]`` (float16 or bfloat16; ``h_kv`` dividing ``h_q``; any layout with a
    contiguous head dimension, such as views into a packed QKV projection), ``causal``
    (top-left mask), ``scale`` (None: ``1 / sqrt(d)``).  Returns ``o`` ``[b, h_q, s_q, d_v]``
    laid out like ``q``.  The forward keeps cuDNN's softmax statistics for the backward.
    """

    @staticmethod
    def forward(ctx, q, k, v, causal, scale):
        q, k, v = _detached(q, k, v)
        o = None
        if q.dim() == 4 and v.dim() == 4:     # otherwise cudalibs says what is wrong
            o = _empty_in_layout_of(q, (*q.shape[:3], v.shape[3]))
        with _Call("Attention forward", q.device) as s:
            _, stats = cudnn.sdpa(q, k, v, scale=scale, causal=causal, training=True, out=o,
                                  stream=s)
            # The statistics are the one output cudalibs allocates (stream-ordered, on s):
            # torch takes them over without a copy, and frees them with the other saved
            # tensors once the backward is done.
            stats = torch.from_dlpack(stats)
        ctx.save_for_backward(q, k, v, o, stats)
        ctx.causal, ctx.scale = causal, scale
        return o

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, do):
        q, k, v, o, stats = _detached(*ctx.saved_tensors)
        grads = tuple(_empty_in_layout_of(t, t.shape) for t in (q, k, v))
        with _Call("Attention backward", do.device) as s:
            # Back through DLPack, which names the device: memory allocated inside a graph
            # capture is not known to the driver until the graph runs, so the pointer query
            # __cuda_array_interface__ needs would fail there.
            stats = cl.from_dlpack(stats, stream=s)
            cudnn.sdpa_backward(q, k, v, o, _sdpa_layout(do), stats, scale=ctx.scale,
                                causal=ctx.causal, out=grads, stream=s)
        return (*(g if need else None for g, need in zip(grads, ctx.needs_input_grad)),
                None, None)


class Conv2dFunction(torch.autograd.Function):
    """A convolution through cuDNN, ``y = conv(x, weight) + bias``.

    Forward arguments: ``x`` ``(N, C, H, W)``, ``weight`` ``(K, C / groups, R, S)``,
    ``bias`` ``(K,)`` or None, then ``stride``, ``padding``, ``dilation``, ``groups`` and
    cudalibs' ``algo`` (``"heuristic"``, ``"find"``, a legacy algorithm).  ``x`` decides the
    memory layout: channels-last when it is packed that way, NCHW otherwise; the weight and
    every output follow it.  The bias gradient is ``cudnn.conv_backward_bias``, except in
    bfloat16, which that call does not take: there it is a float32 sum in PyTorch.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, stride, padding, dilation, groups, algo):
        x, weight, bias = _detached(x, weight, bias)
        fmt = torch.contiguous_format
        if x.dim() == 4 and not x.is_contiguous() and \
                x.is_contiguous(memory_format=torch.channels_last):
            fmt = torch.channels_last
        x = x.contiguous(memory_format=fmt)
        weight = weight.contiguous(memory_format=fmt)
        conv = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        shape = cudnn.conv_output_shape(x.shape, weight.shape, **conv)   # checks them too
        y = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=fmt)
        with _Call("Conv2d forward", x.device) as s:
            cudnn.conv_forward(x, weight, bias=bias, algo=algo, out=y, stream=s, **conv)
        ctx.save_for_backward(x, weight)
        ctx.conv, ctx.algo, ctx.fmt, ctx.has_bias = conv, algo, fmt, bias is not None
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dy):
        x, weight = _detached(*ctx.saved_tensors)
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        dy = dy.contiguous(memory_format=ctx.fmt)
        dx = torch.empty_like(x) if need_x else None          # x's layout
        dw = torch.empty_like(weight) if need_w else None
        db = None
        with _Call("Conv2d backward", dy.device) as s:
            if dx is not None:
                cudnn.conv_backward_data(dy, weight, tuple(x.shape), algo=ctx.algo, out=dx,
                                         stream=s, **ctx.conv)
            if dw is not None:
                cudnn.conv_backward_filter(x, dy, tuple(weight.shape), algo=ctx.algo, out=dw,
                                           stream=s, **ctx.conv)
            if need_b and ctx.has_bias and dy.dtype != torch.bfloat16:
                db = dy.new_empty(dy.shape[1])
                cudnn.conv_backward_bias(dy, out=db, stream=s)
        if need_b and ctx.has_bias and db is None:
            # cudnnConvolutionBackwardBias takes no bfloat16: reduce in float32 instead.
            db = dy.sum((0, 2, 3), dtype=torch.float32).to(dy.dtype)
        return dx, dw, db, None, None, None, None, None


# -- functional forms ----------------------------------------------------------------------
def linear(x, weight, bias=None):
    """``x @ weight.T + bias`` (:class:`LinearFunction`)."""
    return LinearFunction.apply(x, weight, bias)


def mlp(x, w1, b1, w2, b2):
    """``gelu_tanh(x @ w1.T + b1) @ w2.T + b2`` (:class:`MLPFunction`)."""
    return MLPFunction.apply(x, w1, b1, w2, b2)


def layer_norm(x, weight, bias=None, eps=1e-5):
    """Layer norm over ``weight``'s trailing shape (:class:`LayerNormFunction`)."""
    return LayerNormFunction.apply(x, weight, bias, eps)


def attention(q, k, v, causal=False, scale=None):
    """``softmax(q k^T * scale, masked) v`` on ``[b, h, s, d]`` (:class:`AttentionFunction`)."""
    return AttentionFunction.apply(q, k, v, causal, scale)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
           algo="heuristic"):
    """A 2-D convolution (:class:`Conv2dFunction`)."""
    return Conv2dFunction.apply(x, weight, bias, stride, padding, dilation, groups, algo)


# -- modules -------------------------------------------------------------------------------
class Linear(nn.Module):
    """``torch.nn.Linear`` on cudalibs: the same parameters (``weight`` ``[out, in]``,
    ``bias``), initialisation and state-dict keys.

    Parameters
    ----------
    in_features, out_features : int
    bias : bool, default True
    device, dtype : optional
        As for ``torch.nn.Linear``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        self.in_features, self.out_features = in_features, out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features, **kw))
        self.bias = nn.Parameter(torch.empty(out_features, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``torch.nn.Linear``'s initialisation."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features else 0.0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class MLP(nn.Module):
    """``fc2(gelu_tanh(fc1(x)))`` as one :class:`MLPFunction` (two fused matmuls forward,
    the GELU derivative and ``fc1``'s bias gradient fused into the backward).

    Parameters
    ----------
    d_model, hidden : int
        ``fc1`` is ``d_model -> hidden``, ``fc2`` ``hidden -> d_model``; their parameters are
        :class:`Linear`'s (state-dict keys ``fc1.weight``, ... as :class:`TorchMLP`'s).
    device, dtype : optional
    """

    def __init__(self, d_model: int, hidden: int, *, device=None, dtype=None):
        super().__init__()
        self.fc1 = Linear(d_model, hidden, device=device, dtype=dtype)
        self.fc2 = Linear(hidden, d_model, device=device, dtype=dtype)

    def forward(self, x):
        return mlp(x, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)


class LayerNorm(nn.Module):
    """``torch.nn.LayerNorm`` (with its affine parameters) on cuDNN.

    Parameters
    ----------
    normalized_shape : int or tuple of int
        The trailing shape normalised over.
    eps : float, default 1e-5
    bias : bool, default True
    device, dtype : optional
        The parameters' (float32, or the data's dtype).
    """

    def __init__(self, normalized_shape, eps: float = 1e-5, bias: bool = True, *,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        kw = dict(device=device, dtype=dtype)
        self.weight = nn.Parameter(torch.ones(self.normalized_shape, **kw))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape, **kw)) if bias else None

    def forward(self, x):
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}"


class Attention(nn.Module):
    """Scaled dot-product attention on ``[b, h, s, d]`` float16/bfloat16 through cuDNN
    (no parameters: the projections are the caller's).

    Parameters
    ----------
    causal : bool, default False
        Query ``i`` sees keys ``j <= i``.
    scale : float, optional
        Default ``1 / sqrt(d)``.
    """

    def __init__(self, causal: bool = False, scale: float | None = None):
        super().__init__()
        self.causal, self.scale = causal, scale

    def forward(self, q, k, v):
        return attention(q, k, v, self.causal, self.scale)

    def extra_repr(self) -> str:
        return f"causal={self.causal}, scale={self.scale}"


class Conv2d(nn.Module):
    """``torch.nn.Conv2d`` on cuDNN: the same parameters, initialisation and state-dict
    keys (zero padding only).

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size, stride, padding, dilation : int or pair of int
    groups : int, default 1
    bias : bool, default True
    algo : str or int, default "heuristic"
        cudalibs' algorithm choice: ``"heuristic"`` (cuDNN's first choice), ``"find"``
        (every candidate timed once, the choice kept on disk), or a legacy algorithm.
    device, dtype : optional
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, *, algo="heuristic",
                 device=None, dtype=None):
        super().__init__()
        pair = nn.modules.utils._pair
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = pair(kernel_size), pair(stride)
        self.padding, self.dilation = pair(padding), pair(dilation)
        self.groups, self.algo = groups, algo
        kw = dict(device=device, dtype=dtype)
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels // groups,
                                               *self.kernel_size, **kw))
        self.bias = nn.Parameter(torch.empty(out_channels, **kw)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``torch.nn.Conv2d``'s initialisation."""
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight[0].numel()
            bound = 1 / math.sqrt(fan_in) if fan_in else 0.0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                      self.groups, self.algo)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, algo={self.algo!r}")


# -- the pure-PyTorch twins ------------------------------------------------------------------
class TorchMLP(nn.Module):
    """:class:`MLP` in PyTorch's own modules (the same state-dict keys)."""

    def __init__(self, d_model: int, hidden: int, *, device=None, dtype=None):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden, device=device, dtype=dtype)
        self.fc2 = nn.Linear(hidden, d_model, device=device, dtype=dtype)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class TorchAttention(nn.Module):
    """:class:`Attention` through ``torch.nn.functional.scaled_dot_product_attention``."""

    def __init__(self, causal: bool = False, scale: float | None = None):
        super().__init__()
        self.causal, self.scale = causal, scale

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=self.scale,
                                              enable_gqa=k.shape[1] != q.shape[1])


# -- the models -----------------------------------------------------------------------------
class Block(nn.Module):
    """A pre-norm transformer block without embeddings, on ``[batch, seq, d_model]``::

        h = ln1(x);  q, k, v = split(qkv(h))          (attention in ``attn_dtype``)
        x = x + proj(causal_attention(q, k, v))
        x = x + mlp(ln2(x))                           (fc1 -> GELU (tanh) -> fc2)

    Parameters
    ----------
    d_model, heads, hidden : int
        Width, attention heads (``d_model / heads`` a multiple of 8), MLP width.
    torch_ops : bool, default False
        Build it from PyTorch's modules instead of this file's (the same parameter names).
    attn_dtype : torch.dtype, default torch.bfloat16
        Attention runs in it (cuDNN's fused attention takes float16 or bfloat16).
    device, dtype : optional
        The parameters' (and so the block's) dtype, float32 by default.
    """

    def __init__(self, d_model: int = 64, heads: int = 4, hidden: int = 256, *,
                 torch_ops: bool = False, attn_dtype=torch.bfloat16, device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        norm = nn.LayerNorm if torch_ops else LayerNorm
        lin = nn.Linear if torch_ops else Linear
        self.heads, self.attn_dtype = heads, attn_dtype
        self.ln1 = norm(d_model, **kw)
        self.qkv = lin(d_model, 3 * d_model, **kw)
        self.attn = (TorchAttention if torch_ops else Attention)(causal=True)
        self.proj = lin(d_model, d_model, **kw)
        self.ln2 = norm(d_model, **kw)
        self.mlp = (TorchMLP if torch_ops else MLP)(d_model, hidden, **kw)

    def forward(self, x):
        b, s, c = x.shape
        h = self.heads
        qkv = self.qkv(self.ln1(x)).to(self.attn_dtype).view(b, s, 3, h, c // h)
        # Views into the packed projection: cuDNN reads them in place.
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(2))
        o = self.attn(q, k, v).transpose(1, 2).reshape(b, s, c).to(x.dtype)
        x = x + self.proj(o)
        return x + self.mlp(self.ln2(x))


class ConvNet(nn.Module):
    """``conv3x3(3 -> c) - ReLU - conv3x3 stride 2 (c -> 2c) - ReLU - global average pool -
    linear(2c -> classes)``, on ``[batch, 3, H, W]``.

    Parameters
    ----------
    channels, classes : int
    torch_ops : bool, default False
        Build it from PyTorch's modules instead of this file's.
    device, dtype : optional
    """

    def __init__(self, channels: int = 8, classes: int = 10, *, torch_ops: bool = False,
                 device=None, dtype=None):
        super().__init__()
        kw = dict(device=device, dtype=dtype)
        conv = nn.Conv2d if torch_ops else Conv2d
        lin = nn.Linear if torch_ops else Linear
        self.conv1 = conv(3, channels, 3, padding=1, **kw)
        self.conv2 = conv(channels, 2 * channels, 3, stride=2, padding=1, **kw)
        self.fc = lin(2 * channels, classes, **kw)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(x.mean((2, 3)))


MODELS = {"transformer": Block, "conv": ConvNet}


def build_pair(kind: str, seed: int = 0, device="cuda"):
    """``(ours, reference)``: the model ``kind`` (``"transformer"`` or ``"conv"``) from this
    file's modules and from PyTorch's, with the same initial weights (the reference's,
    drawn after ``torch.manual_seed(seed)``)."""
    torch.manual_seed(seed)
    ref = MODELS[kind](torch_ops=True, device=device)
    ours = MODELS[kind](device=device)
    ours.load_state_dict(ref.state_dict())
    return ours, ref


def make_batches(kind: str, steps: int, seed: int = 0, batch: int = 8, device="cuda"):
    """``steps`` random ``(input, target)`` pairs for model ``kind``: ``[batch, 32, 64]``
    inputs and targets for the transformer block, ``[batch, 3, 16, 16]`` images and labels
    of 10 classes for the conv net."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        if kind == "transformer":
            x, t = torch.randn(batch, 32, 64, generator=g), torch.randn(batch, 32, 64, generator=g)
        else:
            x = torch.randn(batch, 3, 16, 16, generator=g)
            t = torch.randint(0, 10, (batch,), generator=g)
        out.append((x.to(device), t.to(device)))
    return out


def loss_fn(kind: str):
    """The loss of model ``kind``: mean squared error (transformer) or cross-entropy."""
    return F.mse_loss if kind == "transformer" else F.cross_entropy


def _optimizer(model, lr):
    # SGD with momentum: its state is made on the first step, so it needs no special
    # setting to be captured afterwards.
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def train_eager(model, batches, loss, lr: float = 0.05) -> list[float]:
    """Train ``model`` one SGD-momentum step per batch; the losses."""
    opt = _optimizer(model, lr)
    losses = []
    for x, t in batches:
        opt.zero_grad(set_to_none=True)
        value = loss(model(x), t)
        value.backward()
        opt.step()
        losses.append(value.detach())
    return [float(v) for v in losses]


class CaptureRefused(RuntimeError):
    """A training step could not be captured into a CUDA graph.

    Attributes
    ----------
    op : str or None
        The operation of this file that refused (``"Linear backward"``), when known.
    reason : BaseException
        The error that stopped the capture (cudalibs' own, when ``op`` is known).
    """

    def __init__(self, op, reason):
        self.op, self.reason = op, reason
        where = f"{op} refused" if op else "the capture failed"
        super().__init__(f"{where}: {type(reason).__name__}: {reason}")


def _refusal(exc: BaseException):
    """``(op, error)`` of the first error in ``exc``'s chain marked by :class:`_Call`:
    a failed capture ends in ``torch.cuda.graph``'s own error, the cause in its context."""
    seen = set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        op = getattr(e, "cudalibs_op", None)
        if op is not None:
            return op, e
        e = e.__cause__ or e.__context__
    return None, exc


def train_graph(model, batches, loss, lr: float = 0.05, warmup: int = 3,
                capture_stream=None) -> list[float]:
    """Train like :func:`train_eager`, the steps after the first ``warmup`` replayed from one
    CUDA graph.

    The warm-up steps run eagerly on a side stream (as ``torch.cuda.graph``'s documentation
    asks), each on its own batch, so they count as training steps; then one whole step --
    forward, backward, optimizer -- is captured on that same stream and replayed for every
    later batch, copied first into the static input tensors the graph reads.

    Parameters
    ----------
    model, batches, loss, lr
        As for :func:`train_eager`.
    warmup : int, default 3
        Eager steps before the capture (at least 1).
    capture_stream : torch.cuda.Stream, optional
        Capture on this stream instead of the warm-up stream.  cudalibs then meets a stream
        it has no workspace for and allocates one synchronously, which the capture cannot
        record: the first operation that needs one fails with cudalibs' ``CudaError``
        (``CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED``) and PyTorch's capture is invalidated.
        This parameter exists to show that refusal.  After a failed capture PyTorch may
        refuse random-number calls on the GPU for the rest of the process, so show it in a
        process of its own.

    Returns
    -------
    list of float
        The loss of every step.

    Raises
    ------
    CaptureRefused
        A call could not be captured (``.op`` names it, ``.reason`` is the error).
    """
    if not 1 <= warmup < len(batches):
        raise ValueError(f"warmup must be in [1, {len(batches) - 1}], got {warmup}")
    opt = _optimizer(model, lr)
    sx, st = (b.clone() for b in batches[0])
    losses = []
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x, t in batches[:warmup]:
            sx.copy_(x)
            st.copy_(t)
            opt.zero_grad(set_to_none=True)
            value = loss(model(sx), st)
            value.backward()
            opt.step()
            losses.append(value.detach())
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # Gradients made inside the capture come from the graph's private pool.
    opt.zero_grad(set_to_none=True)
    try:
        with torch.cuda.graph(graph, stream=side if capture_stream is None else capture_stream):
            static_loss = loss(model(sx), st)
            static_loss.backward()
            opt.step()
    except Exception as exc:    # noqa: BLE001 - reported with the operation that refused
        op, why = _refusal(exc)
        raise CaptureRefused(op, why) from exc
    for x, t in batches[warmup:]:
        sx.copy_(x)
        st.copy_(t)
        graph.replay()
        losses.append(static_loss.detach().clone())
    return [float(v) for v in losses]


def _rel(a, b) -> float:
    a, b = a.double(), b.double()
    d = torch.linalg.vector_norm(a - b)
    n = torch.linalg.vector_norm(b)
    return float(d / n) if n > 0 else float(d)


def compare(ours, ref, start: dict, losses, ref_losses) -> dict:
    """How far a run is from the reference run.

    Parameters
    ----------
    ours, ref : torch.nn.Module
        The two trained models (the same parameter names).
    start : dict
        The common initial state dict.
    losses, ref_losses : sequence of float

    Returns
    -------
    dict
        ``loss``: the largest ``|a - b| / |b|`` over the steps; ``weight``: the largest
        norm-wise relative difference of a parameter; ``update``: the largest norm-wise
        relative difference of a parameter's change over the run; ``worst``: the parameter
        that gives ``update``.
    """
    loss = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, ref_losses))
    theirs = dict(ref.named_parameters())
    weight = update = 0.0
    worst = None
    for name, p in ours.named_parameters():
        q, p0 = theirs[name].detach(), start[name]
        weight = max(weight, _rel(p.detach(), q))
        u = _rel(p.detach() - p0, q - p0)
        if u >= update:
            update, worst = u, name
    return {"loss": loss, "weight": weight, "update": update, "worst": worst}


@contextlib.contextmanager
def full_float32():
    """PyTorch's float32 matmuls and convolutions without TF32 (restored on exit): what
    cudalibs computes by default, so that the two agree to float32 rounding."""
    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags


def run_model(kind: str, steps: int, *, graph: bool = False, seed: int = 0, lr: float = 0.05,
              every: int = 2, out=print) -> dict:
    """Train model ``kind`` from this file's modules (eagerly, or replayed from a CUDA graph
    with ``graph``) and from PyTorch's, and compare them; prints a line every ``every``
    steps.  Returns :func:`compare`'s dict with ``ok`` (within :data:`TOLERANCES`) and the
    two loss lists.

    Raises
    ------
    CaptureRefused
        With ``graph``, when the step could not be captured.
    """
    ours, ref = build_pair(kind, seed)
    start = {n: p.detach().clone() for n, p in ref.named_parameters()}
    batches = make_batches(kind, steps, seed + 1)
    with full_float32():
        ref_losses = train_eager(ref, batches, loss_fn(kind), lr)
        if graph:
            losses = train_graph(ours, batches, loss_fn(kind), lr, warmup=min(3, steps - 1))
        else:
            losses = train_eager(ours, batches, loss_fn(kind), lr)
    for i, (a, b) in enumerate(zip(losses, ref_losses)):
        if (i + 1) % every == 0 or i + 1 == steps:
            out(f"{kind}: step {i + 1}/{steps}  loss cudalibs {a:.6f}  torch {b:.6f}  "
                f"(rel diff {abs(a - b) / max(abs(b), 1e-30):.1e})")
    result = compare(ours, ref, start, losses, ref_losses)
    tol = TOLERANCES[kind]
    result["ok"] = result["loss"] <= tol["loss"] and result["update"] <= tol["update"]
    result["losses"], result["ref_losses"] = losses, ref_losses
    return result


def main(argv=None) -> int:
    """Train and compare (see the module docstring); the exit status: 0 when every model
    matches PyTorch within :data:`TOLERANCES`, 1 otherwise, 2 without a GPU (or PyTorch)."""
    parser = arg_parser()
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be >= 2 (with --graph: warm-up steps, then replays)")
    if not torch.cuda.is_available() or not cl.is_available():
        why = cl.unavailable_reason() or "PyTorch sees no CUDA device"
        print(f"torch_ops: no GPU ({why})")
        return 2
    kinds = ("transformer", "conv") if args.model == "both" else (args.model,)
    print(f"cudalibs ops as torch.autograd.Functions on {torch.cuda.get_device_name()}, "
          f"torch {torch.__version__}; {'CUDA graph replay' if args.graph else 'eager'}")
    ok = True
    for kind in kinds:
        try:
            r = run_model(kind, args.steps, graph=args.graph, seed=args.seed, lr=args.lr,
                          every=args.every)
        except CaptureRefused as exc:
            print(f"{kind}: graph capture refused: {exc}")
            ok = False
            continue
        tol = TOLERANCES[kind]
        print(f"{kind}: against pure torch over {args.steps} steps: loss rel diff "
              f"{r['loss']:.1e} (tol {tol['loss']:.0e}), update rel diff {r['update']:.1e} "
              f"(tol {tol['update']:.0e}, worst {r['worst']}), weights rel diff "
              f"{r['weight']:.1e}: {'match' if r['ok'] else 'MISMATCH'}")
        ok &= r["ok"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
