"""Every environment variable cudalibs reads, read here and nowhere else.

Each variable has one reader below, and :data:`VARIABLES` lists them all with what they do
(``python -m cudalibs --help`` prints it).  The readers are plain functions of the current
environment, called when their value is needed (the options object reads its defaults once,
when cudalibs is imported), so a launcher that sets a variable before that point is obeyed.
A malformed value never raises: it falls back to the default, as a missing one does.
"""

from __future__ import annotations

import os

__all__ = ["VARIABLES", "flag", "text", "integer", "library_path", "cache_dir",
           "tuning_cache", "log_level", "toolkit_roots", "first_set", "local_rank",
           "home_cache", "xdg_cache_home", "library_search_path", "LOCAL_RANK_VARIABLES"]

#: ``{variable: what it does}`` for every variable read by cudalibs.
VARIABLES = {
    "CUDALIBS_<NAME>_PATH": "load library NAME (CUDA, NVRTC, CUBLAS, CUBLASLT, CUDNN, NCCL, "
                            "CUFFT, CUSPARSE) from this file (an absolute path) instead of "
                            "searching for it",
    "CUDALIBS_RELAUNCH": "0 turns recorded relaunches off (default on)",
    "CUDALIBS_GEMM_BACKEND": "auto | lt | cublas: the library behind gemm() (default auto)",
    "CUDALIBS_PLAN_CACHE_SIZE": "the most plans the one plan cache keeps (default 1024)",
    "CUDALIBS_TUNING_CACHE": "the tuning store's file (an absolute path), or off for memory "
                             "only (default <cache>/tuning.json)",
    "CUDALIBS_CACHE_DIR": "where compiled kernels and the tuning store are kept, an absolute "
                          "path of this user's that others cannot write (default <cache>: "
                          "$XDG_CACHE_HOME/cudalibs, else ~/.cache/cudalibs)",
    "XDG_CACHE_HOME": "the base of the default cache directory, when an absolute path",
    "CUDALIBS_LOG": "debug | info | warning: log cudalibs' planning to standard error",
    "CUDA_HOME / CUDA_PATH": "a CUDA toolkit whose headers NVRTC may include",
    "LOCAL_RANK (and the MPI launchers' local-rank variables)": "this process's GPU among "
                                                                "the ranks of its node (NCCL)",
    "LD_LIBRARY_PATH": "only read: an empty or relative entry (the current directory) that "
                       "a library is found through draws a warning",
}

#: The launchers' names for a process's index among the ranks of its node, in the order read.
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                        "MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID")

_FALSE = ("0", "false", "no", "off")
_TRUE = ("1", "true", "yes", "on")


def first_set(*names: str) -> str | None:
    """The value of the first of ``names`` that is set to something other than blanks."""
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip():
            return value.strip()
    return None


def flag(name: str, default: bool) -> bool:
    """A boolean variable: ``0/false/no/off`` and ``1/true/yes/on`` (any case); else
    ``default``."""
    value = (os.environ.get(name) or "").strip().lower()
    if value in _FALSE:
        return False
    if value in _TRUE:
        return True
    return default


def text(name: str, default: str, choices=None) -> str:
    """A word from ``choices`` (lower-cased), else ``default``."""
    value = (os.environ.get(name) or "").strip().lower()
    if not value or (choices is not None and value not in choices):
        return default
    return value


def integer(name: str, default: int, minimum: int = 1) -> int:
    """The variable as an integer, raised to ``minimum`` if below it; ``default`` when unset
    or not a number."""
    try:
        return max(minimum, int(os.environ.get(name, "")))
    except ValueError:
        return default


def library_path(var: str) -> str | None:
    """The file a ``CUDALIBS_<NAME>_PATH`` override names, or None."""
    value = os.environ.get(var)
    return value if value else None


def library_search_path() -> tuple[str, ...]:
    """The entries of ``$LD_LIBRARY_PATH`` in order, empty ones kept (the dynamic loader
    reads an empty entry as the current directory)."""
    value = os.environ.get("LD_LIBRARY_PATH")
    return tuple(value.split(":")) if value else ()


def cache_dir() -> str | None:
    """``$CUDALIBS_CACHE_DIR`` when set."""
    return first_set("CUDALIBS_CACHE_DIR")


def tuning_cache() -> str | None:
    """``$CUDALIBS_TUNING_CACHE`` as given (``""`` when set to blanks), or None when unset."""
    value = os.environ.get("CUDALIBS_TUNING_CACHE")
    return None if value is None else value.strip()


def log_level() -> str | None:
    """``$CUDALIBS_LOG`` lower-cased, or None."""
    value = first_set("CUDALIBS_LOG")
    return value.lower() if value else None


def toolkit_roots() -> tuple[str, ...]:
    """``$CUDA_HOME`` and ``$CUDA_PATH``, those set."""
    return tuple(v for v in (first_set("CUDA_HOME"), first_set("CUDA_PATH")) if v)


def local_rank() -> int | None:
    """The first launcher variable of :data:`LOCAL_RANK_VARIABLES` that holds a number."""
    for var in LOCAL_RANK_VARIABLES:
        value = os.environ.get(var)
        if value is not None and value.strip().isdigit():
            return int(value)
    return None


def xdg_cache_home() -> str | None:
    """``$XDG_CACHE_HOME`` when it is an absolute path (the XDG rule: a relative one is
    ignored), else None."""
    value = first_set("XDG_CACHE_HOME")
    return value if value and os.path.isabs(value) else None


def home_cache() -> str | None:
    """The default cache directory: ``$XDG_CACHE_HOME/cudalibs``, else ``~/.cache/cudalibs``;
    None when neither is an absolute path (no ``HOME`` and no passwd entry leave ``~`` as it
    is, which would put the cache below the current directory)."""
    base = xdg_cache_home()
    if base is None:
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return os.path.join(base, "cudalibs")
