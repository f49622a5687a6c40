"""cudalibs' loggers: ``logging.getLogger("cudalibs")`` and one child per library.

What is logged (all at planning time, never per call of a prepared plan):

- ``cudalibs.runtime``: plans built (with their engine, workspace and time), tuning-store
  hits, evictions from the one plan cache, recorded relaunches accepted, refused (and why)
  or failing at launch; a tuning store file or directory not used, or records skipped (why);
- ``cudalibs.driver``: the NVRTC compile cache's directory or entries not used, and builds
  kept off its caches (why), each reason once;
- ``cudalibs.cublas``, ``cudalibs.cudnn``, ``cudalibs.nccl``: the libraries' own choices, such
  as a convolution that falls back from cuDNN's graph API to the legacy API.

Silent by default: the root ``cudalibs`` logger has a :class:`logging.NullHandler`, so nothing
is printed unless the application configures logging (``logging.basicConfig(level=...)``) or
``CUDALIBS_LOG=debug`` (or ``info``, ``warning``) is set, which attaches a handler printing to
standard error.
"""

from __future__ import annotations

import logging
import threading

from .. import _env

__all__ = ["logger", "get", "once"]

#: The root of cudalibs' loggers.
logger = logging.getLogger("cudalibs")
logger.addHandler(logging.NullHandler())

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR}


def _configure_from_env() -> None:
    level = _env.log_level()
    if level is None:
        return
    lv = _LEVELS.get(level)
    if lv is None:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(lv)


_configure_from_env()


def get(name: str) -> logging.Logger:
    """The child logger ``cudalibs.<name>``."""
    return logger.getChild(name)


_said: set = set()
_said_lock = threading.Lock()
_SAID_MAX = 4096


def once(log: logging.Logger, level: int, key, message: str, *args) -> None:
    """Log ``message`` the first time ``key`` is seen (bounded: after 4096 keys, every time),
    for events that would otherwise repeat on every call."""
    if not log.isEnabledFor(level):
        return
    with _said_lock:
        if key in _said:
            return
        if len(_said) < _SAID_MAX:
            _said.add(key)
    log.log(level, message, *args)
