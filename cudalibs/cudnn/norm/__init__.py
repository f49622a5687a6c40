"""Normalization: batch norm (legacy API, Ex entry points) and layer / RMS norm (graph API).

- :mod:`.batch`: :class:`BatchNormPlan`; :mod:`.batch_ops`: the batch-norm one-shots;
- :mod:`.layer`: :class:`NormForwardPlan`, :class:`NormBackwardPlan` and the layer / RMS norm
  one-shots; :mod:`.lower` their operation graphs, :mod:`.checks` the problem checks both use.
"""

from .batch import BATCH_NORM_KEY, BatchNormPlan, BatchNormState
from .batch_ops import (batch_norm_backward, batch_norm_infer, batch_norm_paths,
                        batch_norm_train)
from .layer import (NORM_BACKWARD_KEY, NORM_FORWARD_KEY, NoNormEngineError, NormBackwardPlan,
                    NormForwardPlan, NormPlan, clear_norm_cache, layer_norm,
                    layer_norm_backward, norm_cache, rms_norm, rms_norm_backward)

__all__ = ["BatchNormPlan", "BatchNormState", "batch_norm_train", "batch_norm_infer",
           "batch_norm_backward", "batch_norm_paths", "BATCH_NORM_KEY", "layer_norm",
           "layer_norm_backward", "rms_norm", "rms_norm_backward", "NormForwardPlan",
           "NormBackwardPlan", "NormPlan", "NoNormEngineError", "NORM_FORWARD_KEY",
           "NORM_BACKWARD_KEY", "norm_cache", "clear_norm_cache"]
