"""cuDNN's graph (backend) API and the engine search every graph-API plan shares.

Its shape:

1. *descriptors* of every kind (:class:`BackendDescriptor`) are created empty, filled with
   typed attribute arrays (``cudnnBackendSetAttribute``) and finalized;
2. tensors (:func:`tensor`, each with a unique id) and operations (:func:`conv_operation`,
   :func:`pointwise_operation` for every pointwise mode, :func:`matmul_operation`,
   :func:`reduction_operation`, :func:`rng_operation`, :func:`reshape_operation`) make an
   *operation graph* (:func:`operation_graph`) -- :mod:`.descriptors`;
3. *engine heuristics* (:func:`engine_configs`) rank the engine configurations that can run
   the graph; each carries numerical notes (tensor cores, down-conversion, non-determinism)
   and behaviour notes; :func:`candidates` filters and finalizes them for a problem --
   :mod:`.engines`;
4. an *execution plan* (:class:`ExecutionPlan`) is one finalized configuration bound to a
   handle, with its workspace size;
5. a *variant pack* (unique ids -> device pointers, plus the workspace) runs it:
   ``cudnnBackendExecute(handle, plan, pack)``, or the plan's recorded kernels once they are.

Everything up to the plan is built once per problem.  Descriptors, heuristics and even engine
configurations need no GPU (cuDNN 9 finalizes them host-side); execution plans need a handle,
and so a device.
"""

from .descriptors import *  # noqa: F401,F403
from .descriptors import __all__ as _descriptors
from .engines import *  # noqa: F401,F403
from .engines import __all__ as _engines

__all__ = list(_descriptors) + list(_engines)
