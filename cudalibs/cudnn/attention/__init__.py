"""Scaled dot-product attention on cuDNN's graph API.

- :mod:`.sdpa`: :func:`sdpa`, :func:`sdpa_backward` and their plans (:class:`SdpaPlan`,
  :class:`SdpaBackwardPlan`);
- :mod:`.plan`: what the two plans share (checks, candidates from every lowering, the call);
- :mod:`.lower`: the lowerings to operation graphs (the composite graph of matmuls,
  pointwise operations and reductions; cuDNN's single SDPA operation).
"""

from .plan import MAX_HEAD_DIM, MAX_HEAD_DIM_BACKWARD
from .sdpa import (SDPA_BACKWARD_KEY, SDPA_KEY, SdpaBackwardPlan, SdpaPlan, sdpa,
                   sdpa_backward)

__all__ = ["sdpa", "sdpa_backward", "SdpaPlan", "SdpaBackwardPlan", "SDPA_KEY",
           "SDPA_BACKWARD_KEY", "MAX_HEAD_DIM", "MAX_HEAD_DIM_BACKWARD"]
