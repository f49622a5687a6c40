"""Python wrappers of the shipped kernel library (the ``ptx/`` sources), one module per PTX
file: :mod:`~cudalibs.kernels.elementwise`, :mod:`~cudalibs.kernels.matmul`,
:mod:`~cudalibs.kernels.softmax`, :mod:`~cudalibs.kernels.layout`,
:mod:`~cudalibs.kernels.wmma`, :mod:`~cudalibs.kernels.train` (losses, optimizers, embeddings,
pooling for training), :mod:`~cudalibs.kernels.fp8` (amax, fp8 quantization, delayed scaling),
:mod:`~cudalibs.kernels.grouped` (the grouped GEMM of mixture-of-experts layers, its group
sizes read from device memory, a plan; its Hopper kernels in
:mod:`~cudalibs.kernels.grouped90`, which has no function of its own),
:mod:`~cudalibs.kernels.moe` (the routing around it: top-k softmax, a stable sort of the
slots by expert, the permutations and their gradients), :mod:`~cudalibs.kernels.norm` (layer
and RMS norm, a residual add fused in front, forward and backward); every function is
re-exported here.

One function per operation, taking :class:`~cudalibs.DeviceArray` objects (or anything
:func:`cudalibs.asarray` accepts: PyTorch and CuPy arrays, any ``__cuda_array_interface__`` or
DLPack producer), with numpy's row-major semantics::

    >>> import numpy as np, cudalibs as cl
    >>> from cudalibs import kernels as K
    >>> x = cl.to_device(np.random.rand(4, 1000).astype(np.float32))   # doctest: +SKIP
    >>> K.softmax(x).get().sum(axis=-1)                                  # doctest: +SKIP
    array([1., 1., 1., 1.], dtype=float32)

Every wrapper checks its inputs before any driver call, through the driver's one operand path
(host data, closed memory, dtype, shape, C-contiguity, device) and then its own rules (overlap
between inputs and output, 32-bit sizes), and raises ``TypeError``/``ValueError`` (or
:class:`~cudalibs.ClosedError`) as ``"<op>: <argument> ..."``.  ``out`` is optional: when
omitted it is allocated stream-ordered on the work's stream.  ``stream=None`` means the
thread's current stream.  Empty inputs return at once, launching nothing.

Loading and launching belong to :mod:`cudalibs.runtime.ptxlib`: the PTX of a file is loaded
once per device, on the first call that needs it; each (kernel, grid, block, stream) gets a
prepared launcher, kept in a bounded per-thread cache (a launcher of a closed stream is never
reused), so a repeated call with the same shapes only writes its arguments and launches.  The
wrappers keep no state of their own: any number of threads may call them at once, each on its
own stream.

Supported element types, by operation:

=======================================  ===========================================
add, axpy, scale, fill, relu_backward    float32, float64, float16, bfloat16
bias_relu, bias_gelu, channel_bias_act,  float32, float16, bfloat16 (computed in float32)
softmax, log_softmax,                    (batch-norm parameters: float32)
batch_norm_relu_infer
matmul_naive, matmul_tiled, bmm          float32
wmma_gemm                                float16 in; float32 or float16 out
transpose, nchw_to_nhwc, nhwc_to_nchw    any 2-, 4- or 8-byte type
cross_entropy(_backward), accuracy_count float32, float16, bfloat16 logits; int32/int64
                                         labels; float32 loss and count
sgd, adamw                               float32 parameters and state; float32, float16
                                         or bfloat16 gradients (adamw: a float16/bfloat16
                                         copy of the weights on request)
embedding(_backward)                     float32, float16, bfloat16 rows; int32/int64 ids;
                                         float32 gradient (atomic scatter-add)
global_avg_pool(_backward)               float32, float16, bfloat16
step_increment                           int32 device counter
amax, quantize_fp8                       float32, float16, bfloat16 in; fp8 out
                                         (e4m3fn, e5m2); float32 device scale, amax
dequantize_fp8                           fp8 in; float32, float16 or bfloat16 out
delayed_scale_update                     float32 history, amax, scale, scale_inv
grouped_mm, GroupedMM                    bfloat16, float16 in; same or float32 out;
                                         int32/int64 device offsets (sm_80+)
grouped_mm_wgrad, GroupedMMWgrad,        bfloat16, float16 in; float32 (default) or
grouped_mm_backward                      same out; int32/int64 device offsets (sm_80+)
topk_softmax(_backward)                  float32, float16, bfloat16 logits; float32
                                         weights and gradient; int32 (backward: int32
                                         or int64) ids
moe_routing                              int32/int64 ids; int32 offsets, order, slots
moe_permute, moe_unpermute(_backward),   float32, float16, bfloat16 rows (outputs of
moe_permute_backward                     the gathers also float32); float32 weights
layer_norm, rms_norm (+ residual add),   float32, float16, bfloat16 rows; float32 or the
layer_norm_backward, rms_norm_backward   rows' type weight and bias; float32 statistics
=======================================  ===========================================
"""

from ..runtime.ptxlib import clear_cache
from .elementwise import (add, axpy, batch_norm_relu_infer, bias_gelu, bias_relu,
                          channel_bias_act, fill, relu_backward, scale)
from .fp8 import amax, delayed_scale_update, dequantize_fp8, quantize_fp8
from .grouped import GROUPED_MM_KEY, GroupedMM, grouped_mm
from .grouped import (GROUPED_MM_WGRAD_KEY, GroupedMMWgrad, grouped_mm_backward,
                      grouped_mm_wgrad)
from .layout import nchw_to_nhwc, nhwc_to_nchw, transpose
from .matmul import bmm, matmul_naive, matmul_tiled
from .norm import NormResult, layer_norm, layer_norm_backward, rms_norm, rms_norm_backward
from .moe import (MoeRouting, moe_permute, moe_permute_backward, moe_routing, moe_unpermute,
                  moe_unpermute_backward, topk_softmax, topk_softmax_backward)
from .softmax import log_softmax, softmax
from .train import (CrossEntropy, accuracy_count, adamw, cross_entropy, cross_entropy_backward,
                    embedding, embedding_backward, global_avg_pool, global_avg_pool_backward, sgd,
                    step_increment)
from .wmma import wmma_gemm

__all__ = ["add", "axpy", "scale", "fill", "matmul_naive", "matmul_tiled", "bmm", "softmax",
           "log_softmax", "transpose", "nchw_to_nhwc", "nhwc_to_nchw", "bias_relu",
           "bias_gelu", "channel_bias_act", "batch_norm_relu_infer", "relu_backward",
           "wmma_gemm", "clear_cache", "CrossEntropy", "cross_entropy",
           "cross_entropy_backward", "accuracy_count", "sgd", "adamw", "step_increment",
           "embedding", "embedding_backward", "global_avg_pool", "global_avg_pool_backward",
           "amax", "quantize_fp8", "dequantize_fp8", "delayed_scale_update",
           "grouped_mm", "GroupedMM", "GROUPED_MM_KEY",
           "grouped_mm_wgrad", "GroupedMMWgrad", "GROUPED_MM_WGRAD_KEY", "grouped_mm_backward",
           "MoeRouting", "topk_softmax", "topk_softmax_backward", "moe_routing", "moe_permute",
           "moe_permute_backward", "moe_unpermute", "moe_unpermute_backward",
           "NormResult", "layer_norm", "rms_norm", "layer_norm_backward", "rms_norm_backward"]
