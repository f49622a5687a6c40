"""What every library of cudalibs shares and no single one owns.

The layers: the libraries (:mod:`cudalibs.cublas`, :mod:`cudalibs.cudnn`,
:mod:`cudalibs.nccl`, :mod:`cudalibs.kernels`) stand on this package, which stands on
:mod:`cudalibs.driver` (the CUDA objects themselves):

- :mod:`~cudalibs.runtime.operand`: the one operand path (anything array-like in, a checked
  :class:`~cudalibs.DeviceArray` out);
- :mod:`~cudalibs.runtime.plan`: the :class:`Plan` protocol and the one autotune timer;
  :mod:`~cudalibs.runtime.cache`: the one plan cache; :mod:`~cudalibs.runtime.tuning`: the
  tuning store on disk;
- :mod:`~cudalibs.runtime.front`: the one front every one-shot function goes through (the
  cache lookup with named keys) and :mod:`~cudalibs.runtime.relaunch`, the one relaunch path
  with its fallback to the library call;
- :mod:`~cudalibs.runtime.handles`: library handles per (device, thread), workspaces per
  (device, stream);
- :mod:`~cudalibs.runtime.step`: a whole step captured once and replayed;
- :mod:`~cudalibs.runtime.ptxlib`: the shipped kernels loaded per device;
- :mod:`~cudalibs.runtime.options` and :mod:`~cudalibs.runtime.log`: the switches and the
  loggers.

Importing it loads no shared library.
"""

from .cache import CacheEntry, KeyKind, PlanCache, release_all
from .operand import check_device, operand, operands
from .options import Options, option_context, set_options
from .plan import Plan, scratch, time_candidates
from .step import StepGraph, capture_step
from .tuning import TuningStore, tuning_store
from . import handles as _handles  # noqa: F401 - registers the per-stream releases

__all__ = ["Plan", "PlanCache", "KeyKind", "CacheEntry", "release_all", "operand",
           "operands", "check_device", "Options", "set_options", "option_context",
           "scratch", "time_candidates", "StepGraph", "capture_step", "TuningStore",
           "tuning_store"]
