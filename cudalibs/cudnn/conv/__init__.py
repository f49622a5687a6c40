"""Convolutions: forward, backward data, backward filter, and the fused convolution.

- :mod:`.oneshot`: the one-shot functions (``conv_forward``, ...), their plans found through
  the one front in the one plan cache;
- :mod:`.plan`: :class:`ConvPlan`, the protocol the convolution plans share; :mod:`.plans`:
  the forward / backward-data / backward-filter plans; :mod:`.fused`: convolution + bias (+
  residual) + activation;
- :mod:`.lower`: their operation graphs on cuDNN's graph API; :mod:`.legacy`: the legacy
  algorithms (float64, named algorithms, other scaling, and what no graph engine takes).
"""

from .fused import FUSED_KEY, ConvBiasActPlan, conv_bias_act
from .legacy import BWD_DATA_ALGOS, BWD_FILTER_ALGOS, FWD_ALGOS, NoAlgorithmError
from .oneshot import (BACKWARD_DATA_KEY, BACKWARD_FILTER_KEY, BIAS_GRAD_KEY, FORWARD_KEY,
                      algo_cache, clear_algo_cache, conv_backward_bias, conv_backward_data,
                      conv_backward_filter, conv_forward)
from .plan import ConvPlan, conv_output_shape
from .plans import ConvBackwardDataPlan, ConvBackwardFilterPlan, ConvForwardPlan

__all__ = ["conv_forward", "conv_backward_data", "conv_backward_filter", "conv_backward_bias",
           "conv_bias_act", "conv_output_shape", "ConvPlan", "ConvForwardPlan",
           "ConvBackwardDataPlan", "ConvBackwardFilterPlan", "ConvBiasActPlan",
           "NoAlgorithmError", "algo_cache", "clear_algo_cache", "FWD_ALGOS",
           "BWD_DATA_ALGOS", "BWD_FILTER_ALGOS", "FORWARD_KEY", "BACKWARD_DATA_KEY",
           "BACKWARD_FILTER_KEY", "BIAS_GRAD_KEY", "FUSED_KEY"]
