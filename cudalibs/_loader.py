"""Find and load each NVIDIA shared library once, and remember where it came from.

Search order for every library:

1. ``CUDALIBS_<NAME>_PATH`` (``CUDALIBS_CUBLAS_PATH``, ``CUDALIBS_CUBLASLT_PATH``, ...): an
   explicit file, used as given; a bad path is an error, never silently skipped.
2. ``cuda.pathfinder``, which first reuses a copy already loaded in the process (so the cuBLAS
   that PyTorch loaded is the one we call), then looks in NVIDIA pip wheels, conda, the
   system loader path and ``CUDA_HOME``.

The driver (``libcuda``) ships with the NVIDIA kernel driver, never in a wheel, so it is
opened by its soname.  Every result is recorded as a :class:`LibraryInfo` for the
environment report (``python -m cudalibs``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import threading

from . import _env
from .errors import LibraryNotFoundError

__all__ = ["LibraryInfo", "LIBRARIES", "load", "loaded", "env_var"]


@dataclasses.dataclass(frozen=True)
class _Spec:
    pathfinder: str | None  # name cuda.pathfinder knows, or None for the driver
    sonames: tuple[str, ...]
    install: str


LIBRARIES: dict[str, _Spec] = {
    "cuda": _Spec(None, ("libcuda.so.1", "libcuda.so"),
                  "install the NVIDIA driver (libcuda ships with it, not with pip wheels)"),
    "nvrtc": _Spec("nvrtc", ("libnvrtc.so.13", "libnvrtc.so.12"),
                   "pip install 'cudalibs[cu13]' (nvidia-cuda-nvrtc) or 'cudalibs[cu12]'"),
    "cublas": _Spec("cublas", ("libcublas.so.13", "libcublas.so.12"),
                    "pip install 'cudalibs[cu13]' (nvidia-cublas) or 'cudalibs[cu12]'"),
    "cublasLt": _Spec("cublasLt", ("libcublasLt.so.13", "libcublasLt.so.12"),
                      "pip install 'cudalibs[cu13]' (nvidia-cublas) or 'cudalibs[cu12]'"),
    "cudnn": _Spec("cudnn", ("libcudnn.so.9",),
                   "pip install 'cudalibs[cu13]' (nvidia-cudnn-cu13) or 'cudalibs[cu12]'"),
    "nccl": _Spec("nccl", ("libnccl.so.2",),
                  "pip install 'cudalibs[cu13]' (nvidia-nccl-cu13) or 'cudalibs[cu12]'"),
}

# How cuda.pathfinder's ``found_via`` reads in our report.
_ORIGINS = {
    "was-already-loaded-from-elsewhere": "already loaded",
    "site-packages": "pip wheel",
    "conda": "conda",
    "system-search": "system",
    "system": "system",
    "CUDA_HOME": "CUDA_HOME",
    "CUDA_PATH": "CUDA_HOME",
}


@dataclasses.dataclass(frozen=True)
class LibraryInfo:
    """Where one library was loaded from.

    Attributes
    ----------
    name : str
        Short name (``"cublas"``).
    path : str or None
        Absolute path of the file, where the loader could tell.
    origin : str
        ``"env override"``, ``"already loaded"``, ``"pip wheel"``, ``"conda"``, ``"system"``,
        ``"CUDA_HOME"`` or ``"driver"``.
    """

    name: str
    path: str | None
    origin: str


_lock = threading.Lock()
_cache: dict[str, tuple[ctypes.CDLL, LibraryInfo]] = {}


def env_var(name: str) -> str:
    """The override variable for library ``name`` (``CUDALIBS_CUBLASLT_PATH``)."""
    return f"CUDALIBS_{name.upper()}_PATH"


def _path_of(cdll: ctypes.CDLL, soname: str) -> str | None:
    """Absolute path of a loaded library, read from the process's own memory map."""
    base = os.path.basename(cdll._name) if cdll._name else soname
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith(base):
                    return path
    except OSError:
        pass
    return cdll._name if cdll._name and os.path.isabs(cdll._name) else None


def _load_uncached(name: str) -> tuple[ctypes.CDLL, LibraryInfo]:
    spec = LIBRARIES[name]
    tried: list[str] = []
    var = env_var(name)
    override = _env.library_path(var)
    if override:
        try:
            cdll = ctypes.CDLL(override)
        except OSError as exc:
            raise LibraryNotFoundError(
                name, [f"{var}={override}: {exc}"],
                f"fix or unset {var}") from None
        return cdll, LibraryInfo(name, os.path.abspath(override), "env override")
    tried.append(f"{var} (not set)")

    if spec.pathfinder is None:
        hit = _try_sonames(name, spec, tried, "driver")
        if hit is None:
            raise LibraryNotFoundError(name, tried, "no NVIDIA driver found: " + spec.install)
        return hit

    try:
        import cuda.pathfinder as pathfinder
    except ImportError as exc:
        tried.append(f"cuda.pathfinder: {exc}")
        pathfinder = None
    if pathfinder is not None:
        try:
            found = pathfinder.load_nvidia_dynamic_lib(spec.pathfinder)
        except Exception as exc:  # pathfinder raises several classes; all mean "not here"
            tried.append(f"cuda.pathfinder.load_nvidia_dynamic_lib({spec.pathfinder!r}): "
                         f"{type(exc).__name__}: {exc}")
        else:
            path = found.abs_path
            origin = _ORIGINS.get(getattr(found, "found_via", ""), "system")
            if found.was_already_loaded_from_elsewhere:
                origin = "already loaded"
            cdll = ctypes.CDLL(path) if path else ctypes.CDLL(spec.sonames[0])
            return cdll, LibraryInfo(name, path, origin)
    # Without pathfinder, the system loader is the last resort.
    hit = _try_sonames(name, spec, tried, "system")
    if hit is None:
        raise LibraryNotFoundError(name, tried, spec.install)
    return hit


def _try_sonames(name, spec, tried, origin):
    """dlopen each soname in turn; record failures in ``tried``."""
    for soname in spec.sonames:
        try:
            cdll = ctypes.CDLL(soname)
        except OSError as exc:
            tried.append(f"{soname}: {exc}")
            continue
        return cdll, LibraryInfo(name, _path_of(cdll, soname), origin)
    return None


def load(name: str) -> tuple[ctypes.CDLL, LibraryInfo]:
    """Load library ``name`` once per process and return it with its :class:`LibraryInfo`.

    Raises
    ------
    LibraryNotFoundError
        Naming every place tried and what to install.
    KeyError
        ``name`` is not one of :data:`LIBRARIES`.
    """
    hit = _cache.get(name)
    if hit is not None:
        return hit
    if name not in LIBRARIES:
        raise KeyError(f"unknown library {name!r}; known: {', '.join(LIBRARIES)}")
    with _lock:
        hit = _cache.get(name)
        if hit is None:
            hit = _cache[name] = _load_uncached(name)
        return hit


def loaded() -> dict[str, LibraryInfo]:
    """The libraries loaded so far, by name."""
    return {name: info for name, (_, info) in _cache.items()}


def _forget(name: str | None = None) -> None:
    """Drop cached load results (tests use this to exercise the search again)."""
    with _lock:
        if name is None:
            _cache.clear()
        else:
            _cache.pop(name, None)
