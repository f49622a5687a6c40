"""cuDNN: deep-learning primitives (convolution, attention, normalization, RNNs, pooling,
activations), as plans on the one front.

``_lib`` holds the raw prototype table (bound against ``libcudnn.so.9``, which forwards to the
``libcudnn_ops`` / ``libcudnn_cnn`` sub-libraries); :mod:`~cudalibs.cudnn._base` turns a
``cudnnStatus_t`` into :class:`~cudalibs.errors.CudnnError` carrying
``cudnnGetLastErrorString``.  Shared by every op family:

- :mod:`~cudalibs.cudnn.handle`: one cuDNN handle per (device, thread), bound to the call's
  stream when it changes; workspaces per (device, stream) that grow and are reused;
- :mod:`~cudalibs.cudnn.descriptors`: RAII legacy descriptors cached by their parameters; the
  layout convention (logical NCHW arrays, layout read from strides);
- :mod:`~cudalibs.cudnn.backend`: the graph (backend) API -- descriptors, operation graphs,
  the engine search every graph-API plan uses, execution plans (relaunched once recorded).

One package per op family, each with its plans and one-shot functions:

- :mod:`~cudalibs.cudnn.conv`: convolutions (forward, backward data and filter, bias
  gradient) and the fused convolution + bias + activation;
- :mod:`~cudalibs.cudnn.attention`: scaled dot-product attention forward and backward;
- :mod:`~cudalibs.cudnn.norm`: batch norm, layer norm and RMS norm;
- :mod:`~cudalibs.cudnn.rnn`: recurrent layers (LSTM, GRU, tanh/ReLU cells);
- :mod:`~cudalibs.cudnn.pooling`, :mod:`~cudalibs.cudnn.activation`: pooling, activations,
  softmax, add_tensor.

Every function takes DeviceArrays (or any CUDA array), ``stream=None`` meaning the thread's
current stream, and allocates outputs stream-ordered unless ``out=`` is given.  Importing this
package loads nothing.
"""

from . import attention, backend
from ._base import check_versions, last_error_string, version, version_int, version_tuple
from .activation import (activation, activation_backward, activation_forward, add_tensor,
                         softmax, softmax_backward, softmax_forward)
from .attention import (SDPA_BACKWARD_KEY, SDPA_FP8_BACKWARD_KEY, SDPA_FP8_KEY, SDPA_KEY,
                        SdpaBackwardPlan, SdpaFp8BackwardPlan, SdpaFp8Plan, SdpaPlan, sdpa,
                        sdpa_backward, sdpa_fp8, sdpa_fp8_backward)
from .conv import (BWD_DATA_ALGOS, BWD_FILTER_ALGOS, FWD_ALGOS, ConvBackwardDataPlan,
                   ConvBackwardFilterPlan, ConvBiasActPlan, ConvForwardPlan, ConvPlan,
                   NoAlgorithmError, algo_cache, clear_algo_cache, conv_backward_bias,
                   conv_backward_data, conv_backward_filter, conv_bias_act, conv_forward,
                   conv_output_shape)
from .descriptors import (ActivationDescriptor, ConvolutionDescriptor, FilterDescriptor,
                          PoolingDescriptor, TensorDescriptor, activation_descriptor,
                          clear_descriptor_cache, convolution_descriptor,
                          descriptor_cache_size, filter_descriptor, pooling_descriptor,
                          tensor_descriptor)
from .handle import release_workspaces, set_workspace_limit, workspace_bytes, workspace_limit
from .norm import (NORM_BACKWARD_KEY, NORM_FORWARD_KEY, BatchNormPlan, BatchNormState,
                   NoNormEngineError, NormBackwardPlan, NormForwardPlan, batch_norm_backward,
                   batch_norm_infer, batch_norm_paths, batch_norm_train, clear_norm_cache,
                   layer_norm, layer_norm_backward, norm_cache, rms_norm, rms_norm_backward)
from .pooling import pooling_backward, pooling_forward, pooling_output_shape
from .rnn import (RNN, RNN_ALGOS, RNN_DATA_KEY, DropoutDescriptor, RNNDataDescriptor,
                  RNNDescriptor, RNNSpec, RNNState, RNNWeights, rnn_spec)

__all__ = [
    "version", "version_int", "version_tuple", "last_error_string", "check_versions", "backend",
    "conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias",
    "conv_bias_act", "conv_output_shape", "ConvPlan", "ConvForwardPlan",
    "ConvBackwardDataPlan", "ConvBackwardFilterPlan", "ConvBiasActPlan", "NoAlgorithmError",
    "algo_cache",
    "clear_algo_cache", "FWD_ALGOS", "BWD_DATA_ALGOS", "BWD_FILTER_ALGOS",
    "batch_norm_train", "batch_norm_infer", "batch_norm_backward", "BatchNormState",
    "batch_norm_paths", "BatchNormPlan",
    "pooling_forward", "pooling_backward", "pooling_output_shape",
    "activation", "activation_forward", "activation_backward", "softmax", "softmax_forward",
    "softmax_backward", "add_tensor",
    "TensorDescriptor", "FilterDescriptor", "ConvolutionDescriptor", "PoolingDescriptor",
    "ActivationDescriptor", "tensor_descriptor", "filter_descriptor",
    "convolution_descriptor", "pooling_descriptor", "activation_descriptor",
    "descriptor_cache_size", "clear_descriptor_cache",
    "set_workspace_limit", "workspace_limit", "workspace_bytes", "release_workspaces",
    "attention", "sdpa", "sdpa_backward", "SdpaPlan", "SdpaBackwardPlan", "SDPA_KEY",
    "SDPA_BACKWARD_KEY", "sdpa_fp8", "sdpa_fp8_backward", "SdpaFp8Plan", "SdpaFp8BackwardPlan",
    "SDPA_FP8_KEY", "SDPA_FP8_BACKWARD_KEY",
    "layer_norm", "layer_norm_backward", "rms_norm", "rms_norm_backward", "NormForwardPlan",
    "NormBackwardPlan", "NoNormEngineError", "NORM_FORWARD_KEY", "NORM_BACKWARD_KEY",
    "norm_cache", "clear_norm_cache",
    "RNN", "RNNState", "RNNWeights", "RNNSpec", "rnn_spec", "RNNDescriptor", "RNNDataDescriptor",
    "DropoutDescriptor", "RNN_ALGOS", "RNN_DATA_KEY",
]
