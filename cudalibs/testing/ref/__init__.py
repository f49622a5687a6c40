"""numpy reference implementations of the library operations.

Each takes host arrays (anything ``numpy.asarray`` accepts), computes in float64 (complex128
when any input is complex) and returns that wide result; compare with
:func:`cudalibs.testing.assert_close` passing the input dtype.  One private module per area
(``_blas``: GEMM; ``_nn``: activations, softmax, normalisation, layouts; ``_conv``:
convolution, pooling, batch-norm training; ``_attention``: scaled dot-product attention;
``_norm``: layer and RMS norm, with a residual add; ``_rnn``: recurrent layers and backpropagation through time;
``_train``: losses, optimizers, embeddings; ``_fp8``: amax, fp8 quantization, delayed
scaling; ``_moe``: mixture-of-experts routing), all re-exported here:
``cudalibs.testing.ref.gemm(a, b)``.
"""

from ._blas import gemm
from ._conv import (activation, activation_backward, batch_norm_backward, batch_norm_train,
                    conv_backward_bias, conv_backward_data, conv_backward_filter, conv_forward,
                    conv_output_shape, pooling_backward, pooling_forward, softmax_backward)
from ._attention import (Fp8Attention, Fp8Gradients, from_pages, pack_sequences,
                         quantize_fp8, sdpa_backward, sdpa_forward, sdpa_fp8_backward,
                         sdpa_fp8_forward, sdpa_mask, to_pages, unpack_sequences, valid_rows)
from ._fp8 import FP8_MAX, amax, delayed_scale_update, dequantize_fp8, quantize_fp8_f32
from ._moe import (Routing, moe_permute, moe_permute_backward, moe_routing, moe_unpermute,
                   moe_unpermute_backward, topk_softmax, topk_softmax_backward)
from ._nn import (batch_norm_infer, bias_act, channel_axis, gelu, log_softmax, nchw_to_nhwc,
                  nhwc_to_nchw, relu, relu_backward, softmax, transpose)
from ._norm import (add_layer_norm, add_rms_norm, layer_norm, layer_norm_backward,
                    residual_sum, rms_norm, rms_norm_backward)
from ._rnn import RNN_MODES, rnn_backward, rnn_forward, rnn_gates, rnn_param_shapes
from ._train import (accuracy_count, adamw, cross_entropy, cross_entropy_backward, embedding,
                     embedding_backward, global_avg_pool, global_avg_pool_backward, sgd)

__all__ = ["gemm", "relu", "relu_backward", "gelu", "bias_act", "softmax", "log_softmax",
           "batch_norm_infer", "transpose", "nchw_to_nhwc", "nhwc_to_nchw", "channel_axis",
           "conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias",
           "conv_output_shape", "pooling_forward", "pooling_backward", "batch_norm_train",
           "batch_norm_backward", "activation", "activation_backward", "softmax_backward",
           "sdpa_forward", "sdpa_backward", "sdpa_mask", "valid_rows", "sdpa_fp8_forward",
           "sdpa_fp8_backward", "quantize_fp8", "Fp8Attention", "Fp8Gradients", "to_pages",
           "from_pages", "pack_sequences", "unpack_sequences",
           "layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward",
           "residual_sum", "add_layer_norm", "add_rms_norm",
           "RNN_MODES", "rnn_gates", "rnn_param_shapes", "rnn_forward", "rnn_backward",
           "cross_entropy", "cross_entropy_backward", "accuracy_count", "sgd", "adamw",
           "embedding", "embedding_backward", "global_avg_pool", "global_avg_pool_backward",
           "FP8_MAX", "amax", "quantize_fp8_f32", "dequantize_fp8", "delayed_scale_update",
           "Routing", "topk_softmax", "topk_softmax_backward", "moe_routing", "moe_permute",
           "moe_permute_backward", "moe_unpermute", "moe_unpermute_backward"]
