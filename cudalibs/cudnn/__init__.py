"""cuDNN: deep-learning primitives (convolution, pooling, activation, normalization).

``_lib`` holds the raw prototype table of ``libcudnn.so.9``; the wrapper modules build on
:mod:`cudalibs.cudnn._base`, which turns a ``cudnnStatus_t`` into
:class:`~cudalibs.errors.CudnnError` carrying ``cudnnGetLastErrorString``.  Importing this
package loads nothing.
"""

from ._base import last_error_string, version, version_tuple

__all__ = ["version", "version_tuple", "last_error_string"]
