"""The capture gate, as the driver layer names it: frees and destroys held back while a
:func:`cudalibs.graph.capture` block is open.  The state itself lives in
:mod:`cudalibs._ffi`, under every library, so that every :class:`~cudalibs._ffi.Resource`
shares it."""

from .._ffi import CAPTURE_OPEN as OPEN
from .._ffi import begin_capture_block as begin
from .._ffi import capture_open as is_open
from .._ffi import defer
from .._ffi import end_capture_block as end

__all__ = ["begin", "end", "defer", "is_open", "OPEN"]
# OPEN is the counter cell itself, for the allocator's hot path (one list index, no call).
