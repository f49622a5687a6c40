"""Scaled dot-product attention on cuDNN's graph API.

- :mod:`.sdpa`: :func:`sdpa`, :func:`sdpa_backward` and their plans (:class:`SdpaPlan`,
  :class:`SdpaBackwardPlan`);
- :mod:`.plan`: what the two plans share (checks, candidates from every lowering, the call);
- :mod:`.fp8`: :func:`sdpa_fp8`, :func:`sdpa_fp8_backward` and their plans
  (:class:`SdpaFp8Plan`, :class:`SdpaFp8BackwardPlan`): fp8 operands with per-tensor scales;
- :mod:`.lower`: the lowerings to operation graphs (the composite graph of matmuls,
  pointwise operations and reductions; cuDNN's single SDPA operation; the fp8 graphs);
- :mod:`.masks`: the variants -- bottom-right causal diagonal, sliding window, ALiBi
  (:func:`alibi_slopes`), softcapping, the bias gradient -- their checks and graph pieces;
  :mod:`.variants`: what the plans add for them;
- :mod:`.serving`: paged key/value caches, packed (ragged) batches (:class:`Ragged`,
  :func:`ragged_batch`), decode -- their checks and graph pieces.
"""

from .fp8 import (FP8_DTYPES, FP8_SEQ_MULTIPLE, SDPA_FP8_BACKWARD_KEY, SDPA_FP8_KEY,
                  SdpaFp8BackwardPlan, SdpaFp8Gradients, SdpaFp8Output, SdpaFp8Plan, sdpa_fp8,
                  sdpa_fp8_backward)
from .masks import alibi_slopes
from .plan import MAX_HEAD_DIM, MAX_HEAD_DIM_BACKWARD
from .serving import Ragged, ragged_batch
from .sdpa import (SDPA_BACKWARD_KEY, SDPA_KEY, SdpaBackwardPlan, SdpaPlan, sdpa,
                   sdpa_backward)

__all__ = ["sdpa", "sdpa_backward", "SdpaPlan", "SdpaBackwardPlan", "SDPA_KEY",
           "SDPA_BACKWARD_KEY", "MAX_HEAD_DIM", "MAX_HEAD_DIM_BACKWARD", "sdpa_fp8",
           "sdpa_fp8_backward", "SdpaFp8Plan", "SdpaFp8BackwardPlan", "SdpaFp8Output",
           "SdpaFp8Gradients", "SDPA_FP8_KEY", "SDPA_FP8_BACKWARD_KEY", "FP8_DTYPES",
           "FP8_SEQ_MULTIPLE", "alibi_slopes", "Ragged", "ragged_batch"]
