"""The switches of cudalibs, as one validated options object.

::

    cl.options()                                 # the options in force here (an Options)
    cl.set_options(gemm_backend="cublas")        # process-wide; returns the previous Options
    with cl.option_context(relaunch=False):      # this thread / async task only, for a block
        y = cublas.gemm(a, b)
    y = cublas.gemm(a, b, options={"gemm_backend": "lt"})   # one call (where offered)

Every field is documented on :class:`Options`.  Defaults come from the environment (read once,
when cudalibs is imported, through :mod:`cudalibs._env`): ``CUDALIBS_RELAUNCH``,
``CUDALIBS_GEMM_BACKEND``.
:func:`option_context` is a :mod:`contextvars` scope, so two threads (or asyncio tasks) may
hold different options at once; :func:`set_options` changes what every context without a
scope of its own sees.  Options take part in the plan cache's keys where they change the plan
that is built (the convolution backend, attention lowerings), so plans made under different
options never stand in for each other.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import threading
from typing import Any, Mapping

from .. import _env

__all__ = ["Options", "options", "set_options", "option_context", "resolve", "CURRENT",
           "PROCESS",
           "GEMM_BACKENDS", "SDPA_LOWERINGS", "SDPA_BACKWARD_LOWERINGS"]

#: The libraries that can run :func:`cudalibs.cublas.gemm`.
GEMM_BACKENDS = ("auto", "lt", "cublas")
#: The lowerings of attention a forward / backward plan may draw candidates from.
SDPA_LOWERINGS = ("composite", "unified")
SDPA_BACKWARD_LOWERINGS = ("composite", "composite_dp", "unified")


def _lowerings(value, known, field) -> tuple:
    if isinstance(value, str):
        value = (value,)
    try:
        value = tuple(value)
    except TypeError:
        raise TypeError(f"Options.{field} must be a sequence of names from {known}, not "
                        f"{value!r}") from None
    bad = [v for v in value if v not in known]
    if bad or not value:
        raise ValueError(f"Options.{field} must name one or more of {known}, not {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Options:
    """The switches of cudalibs (all validated; build one with keywords or from a dict).

    Attributes
    ----------
    relaunch : bool, default True
        Record a library call's kernels on the second call of a call shape and launch them
        again with the next calls' addresses instead of repeating the library's host work
        (docs/design.md, "Recorded relaunches").  Off, every call goes to the library.
        Environment: ``CUDALIBS_RELAUNCH=0``.
    gemm_backend : {"auto", "lt", "cublas"}, default "auto"
        The library behind :func:`cudalibs.cublas.gemm` with the default algorithm:
        ``"auto"``/``"lt"`` a cuBLASLt plan chosen once per problem where cuBLASLt has one,
        ``"cublas"`` always ``cublasGemmEx``.  Environment: ``CUDALIBS_GEMM_BACKEND``.
    conv_graph_api : bool, default True
        Build convolution plans on cuDNN's graph (backend) API where it applies; False uses
        the legacy API only.
    sdpa_autotune : bool, default False
        Whether :func:`cudalibs.cudnn.sdpa` and ``sdpa_backward`` time every engine of a new
        problem (else cuDNN's first choice runs untimed).
    sdpa_lowerings : tuple of str, default ("composite", "unified")
        The lowerings of attention a forward plan draws candidates from.
    sdpa_backward_lowerings : tuple of str, default ("composite", "composite_dp", "unified")
        The same for the backward.
    """

    relaunch: bool = True
    gemm_backend: str = "auto"
    conv_graph_api: bool = True
    sdpa_autotune: bool = False
    sdpa_lowerings: tuple = SDPA_LOWERINGS
    sdpa_backward_lowerings: tuple = SDPA_BACKWARD_LOWERINGS

    def __post_init__(self):
        for f in ("relaunch", "conv_graph_api", "sdpa_autotune"):
            v = getattr(self, f)
            if not isinstance(v, bool):
                raise TypeError(f"Options.{f} must be True or False, not {v!r}")
        if self.gemm_backend not in GEMM_BACKENDS:
            raise ValueError(f"Options.gemm_backend must be one of {GEMM_BACKENDS}, not "
                             f"{self.gemm_backend!r}")
        object.__setattr__(self, "sdpa_lowerings",
                           _lowerings(self.sdpa_lowerings, SDPA_LOWERINGS, "sdpa_lowerings"))
        object.__setattr__(self, "sdpa_backward_lowerings",
                           _lowerings(self.sdpa_backward_lowerings, SDPA_BACKWARD_LOWERINGS,
                                      "sdpa_backward_lowerings"))

    def replace(self, **changes) -> "Options":
        """A copy with ``changes`` (validated; an unknown name is a TypeError naming it)."""
        names = {f.name for f in dataclasses.fields(self)}
        bad = sorted(set(changes) - names)
        if bad:
            raise TypeError(f"unknown option(s) {', '.join(bad)}; options are: "
                            f"{', '.join(sorted(names))}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_environment(cls) -> "Options":
        """The defaults, as the environment sets them."""
        return cls(relaunch=_env.flag("CUDALIBS_RELAUNCH", True),
                   gemm_backend=_env.text("CUDALIBS_GEMM_BACKEND", "auto", GEMM_BACKENDS))


def _as_changes(options) -> dict:
    """``options`` (an Options, a mapping, or None) as a dict of field values."""
    if options is None:
        return {}
    if isinstance(options, Options):
        return {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    if isinstance(options, Mapping):
        return dict(options)
    raise TypeError(f"options must be an Options, a dict or None, not {type(options).__name__}")


#: The process-wide options (one list cell; read by the hot paths as ``CURRENT.get() or
#: PROCESS[0]``, with no call).  Read from the environment when this module is imported, as
#: the switches it replaces were.
PROCESS: list = [Options.from_environment()]
#: The options of an :func:`option_context` scope, per thread / asyncio task (None outside).
CURRENT: contextvars.ContextVar = contextvars.ContextVar("cudalibs_options", default=None)
_process_lock = threading.Lock()


def options() -> Options:
    """The options in force in this context (an :func:`option_context` scope, else the
    process-wide ones)."""
    return CURRENT.get() or PROCESS[0]


def resolve(per_call=None) -> Options:
    """The options of one call: those in force, with ``per_call`` (an Options or a dict of
    changes) applied."""
    o = CURRENT.get() or PROCESS[0]
    if per_call is None:
        return o
    if isinstance(per_call, Options):
        return per_call
    return o.replace(**_as_changes(per_call))


def set_options(options=None, **changes) -> Options:
    """Set the process-wide options (an :class:`Options`, a dict, and/or keywords); returns
    the previous ones.  Contexts inside an :func:`option_context` keep their scope's."""
    with _process_lock:
        old = PROCESS[0]
        if options is not None or changes:
            PROCESS[0] = old.replace(**{**_as_changes(options), **changes})
    return old


@contextlib.contextmanager
def option_context(options=None, **changes):
    """A block in which ``changes`` apply to this thread (or asyncio task) only.

    Yields
    ------
    Options
        The options in force inside the block.
    """
    new = options_now = resolve(None)
    merged: dict[str, Any] = {**_as_changes(options), **changes}
    if merged:
        new = options_now.replace(**merged)
    token = CURRENT.set(new)
    try:
        yield new
    finally:
        CURRENT.reset(token)
