"""The capture gate, as the driver layer names it: frees and destroys held back while a
:func:`cudalibs.graph.capture` block is open.  The state itself lives in
:mod:`cudalibs._ffi`, under every library, so that every :class:`~cudalibs._ffi.Resource`
shares it."""

from .._ffi import (begin_capture_block as begin, capture_open as is_open, defer,
                    end_capture_block as end)

__all__ = ["begin", "end", "defer", "is_open"]

# The counter cell itself, for the allocator's hot path (one list index, no call).
from .._ffi import _capture_open as _open  # noqa: E402
