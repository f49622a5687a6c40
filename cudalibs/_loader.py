"""Find and load each NVIDIA shared library once, and remember where it came from.

Search order for every library:

1. ``CUDALIBS_<NAME>_PATH`` (``CUDALIBS_CUBLAS_PATH``, ``CUDALIBS_CUBLASLT_PATH``, ...): an
   explicit file, which must be named by an absolute path; a relative path or a bare name
   (which ``dlopen`` would resolve against the current directory or the system search path,
   not where the variable seems to point) and a file that does not load are errors, never
   silently skipped.
2. ``cuda.pathfinder``, which first reuses a copy already loaded in the process (so the cuBLAS
   that PyTorch loaded is the one we call), then looks in NVIDIA pip wheels, conda, the
   system loader path and ``CUDA_HOME``.

The driver (``libcuda``) ships with the NVIDIA kernel driver, never in a wheel, so it is
opened by its soname.  Every result is recorded as a :class:`LibraryInfo` for the
environment report (``python -m cudalibs``), with the path of the file the dynamic loader
actually mapped (read back from the loaded handle), whatever name it was opened by.

A library that resolves into the current directory, or into a directory that an empty or
relative ``LD_LIBRARY_PATH`` entry names (an empty entry, as ``LD_LIBRARY_PATH=:/opt/lib``
has, means the current directory), draws a :class:`RuntimeWarning`: whoever can write
there decides what code the process runs.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.metadata
import json
import os
import pathlib
import threading
import warnings

from . import _env
from .errors import LibraryNotFoundError

__all__ = ["LibraryInfo", "LIBRARIES", "WHEELS", "load", "loaded", "env_var", "mapped_path",
           "install_hint", "checkout_root"]


@dataclasses.dataclass(frozen=True)
class _Spec:
    pathfinder: str | None  # name cuda.pathfinder knows, or None for the driver
    sonames: tuple[str, ...]
    install: str | None = None  # what to install; None: the wheel, as install_hint() says


LIBRARIES: dict[str, _Spec] = {
    "cuda": _Spec(None, ("libcuda.so.1", "libcuda.so"),
                  "install the NVIDIA driver (libcuda ships with it, not with pip wheels)"),
    "nvrtc": _Spec("nvrtc", ("libnvrtc.so.13", "libnvrtc.so.12")),
    "cublas": _Spec("cublas", ("libcublas.so.13", "libcublas.so.12")),
    "cublasLt": _Spec("cublasLt", ("libcublasLt.so.13", "libcublasLt.so.12")),
    "cudnn": _Spec("cudnn", ("libcudnn.so.9",)),
    "nccl": _Spec("nccl", ("libnccl.so.2",)),
    # cuFFT's major version runs one below CUDA's: 12 in the CUDA 13 wheel, 11 in CUDA 12's.
    "cufft": _Spec("cufft", ("libcufft.so.12", "libcufft.so.11")),
    # cuSPARSE is 12.x in both the CUDA 13 and the CUDA 12 wheels: one soname.
    "cusparse": _Spec("cusparse", ("libcusparse.so.12",)),
}

#: Library -> the NVIDIA wheel that ships it, for CUDA 13 and for CUDA 12 (the ``cu13`` and
#: ``cu12`` extras of pyproject.toml install exactly these).
WHEELS = {
    "nvrtc": ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"),
    "cublas": ("nvidia-cublas", "nvidia-cublas-cu12"),
    "cublasLt": ("nvidia-cublas", "nvidia-cublas-cu12"),
    "cudnn": ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12"),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12"),
    "cufft": ("nvidia-cufft", "nvidia-cufft-cu12"),
    "cusparse": ("nvidia-cusparse", "nvidia-cusparse-cu12"),
}


def checkout_root() -> str | None:
    """The source checkout cudalibs runs from (a pyproject.toml naming it beside the package),
    or None for an installed copy."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    return root if 'name = "cudalibs"' in text else None


def _editable_install_of(root: str) -> bool:
    """Whether the installed cudalibs distribution is ``pip install -e`` of checkout ``root``."""
    try:
        info = json.loads(importlib.metadata.distribution("cudalibs").read_text(
            "direct_url.json") or "{}")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return (bool(info.get("dir_info", {}).get("editable"))
            and info.get("url", "").rstrip("/") == pathlib.Path(root).as_uri())


def install_hint(library: str) -> str | None:
    """The command that installs ``library`` (``"cublas"``) for this copy of cudalibs, or None
    for a library no pip wheel provides: the hint of the error raised when it cannot be
    loaded, which ``python -m cudalibs`` shows too.

    From a checkout: its own extras, ``pip install ".[cu13]"`` (``-e`` when the checkout is
    installed editable), run in the checkout.  Otherwise the NVIDIA wheel itself: the extras
    belong to the cudalibs project, which the package index does not have.
    """
    if library not in WHEELS:
        return None
    cu13, cu12 = WHEELS[library]
    root = checkout_root()
    if root is not None:
        flag = "-e " if _editable_install_of(root) else ""
        return (f'pip install {flag}".[cu13]" in {root} (".[cu12]" for a CUDA 12 driver), '
                f"which installs {cu13}")
    return f"pip install {cu13} (or {cu12} for a CUDA 12 driver)"

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
        Absolute path of the file the dynamic loader mapped (see :func:`mapped_path`), where
        it could be told.
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


class _LinkMap(ctypes.Structure):
    # The leading, public members of glibc's ``struct link_map`` (<link.h>).
    _fields_ = [("l_addr", ctypes.c_size_t), ("l_name", ctypes.c_char_p),
                ("l_ld", ctypes.c_void_p), ("l_next", ctypes.c_void_p),
                ("l_prev", ctypes.c_void_p)]


_RTLD_DI_LINKMAP = 2
_dlinfo_fn: list = []   # [dlinfo or None], looked up on first use


def _dlinfo():
    """``dlinfo`` from libc (glibc 2.34 and newer) or libdl, or None where neither has it."""
    if not _dlinfo_fn:
        fn = None
        for where in (None, "libdl.so.2"):
            try:
                fn = ctypes.CDLL(where).dlinfo
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
            break
        _dlinfo_fn.append(fn)
    return _dlinfo_fn[0]


def _mapping_of(address: int) -> str | None:
    """The file mapped at ``address`` in this process, from ``/proc/self/maps``."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) < 6:
                    continue
                low, _, high = fields[0].partition("-")
                if int(low, 16) <= address < int(high, 16):
                    path = fields[5].rstrip("\n")
                    return path if path.startswith("/") else None
    except (OSError, ValueError):
        pass
    return None


def mapped_path(cdll: ctypes.CDLL) -> str | None:
    """The absolute path of the file the dynamic loader mapped for ``cdll``.

    The name a library was opened by says little: a soname goes through the loader's search,
    a relative path through the current directory.  This asks the loaded handle instead
    (``dlinfo(RTLD_DI_LINKMAP)``) and looks its dynamic section's address up in
    ``/proc/self/maps``, which holds the real path of every mapped file (symbolic links
    resolved).

    Parameters
    ----------
    cdll : ctypes.CDLL
        A loaded library.

    Returns
    -------
    str or None
        The path; where ``/proc`` cannot be read, the link map's name made absolute; where
        ``dlinfo`` is missing too, the name the library was opened by if it is absolute, else
        None.
    """
    dlinfo = _dlinfo()
    handle = getattr(cdll, "_handle", None)
    if dlinfo is not None and handle:
        lm = ctypes.POINTER(_LinkMap)()
        if dlinfo(handle, _RTLD_DI_LINKMAP, ctypes.byref(lm)) == 0 and lm:
            path = _mapping_of(lm.contents.l_ld or 0)
            if path:
                return path
            name = os.fsdecode(lm.contents.l_name or b"")
            if name:
                return os.path.realpath(name)
    name = cdll._name
    return os.path.realpath(name) if name and os.path.isabs(name) else None


def _relative_dirs(with_cwd: bool) -> list[tuple[str, str]]:
    """``(what, real directory)`` of each place that depends on the current directory: the
    empty and relative ``LD_LIBRARY_PATH`` entries, and (``with_cwd``) the directory itself."""
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:         # the current directory was removed: nothing can be found there
        return []
    out = [("the current directory", cwd)] if with_cwd else []
    for entry in _env.library_search_path():
        if not os.path.isabs(entry):
            label = ("an empty LD_LIBRARY_PATH entry (the current directory)" if not entry
                     else f"the relative LD_LIBRARY_PATH entry {entry!r}")
            out.append((label, os.path.realpath(entry or ".")))
    return out


def _warn_planted(name: str, soname: str) -> bool:
    """Before ``dlopen(soname)``: warn if a relative ``LD_LIBRARY_PATH`` entry's directory
    holds a file of that name, which the loader may open and run; returns whether it warned."""
    for what, where in _relative_dirs(with_cwd=False):
        candidate = os.path.join(where, soname)
        if os.path.exists(candidate):
            warnings.warn(f"cudalibs: {candidate} may be loaded as the {name} library (and its "
                          f"code run): the loader searches {what}; remove that entry from "
                          "LD_LIBRARY_PATH or give the library's absolute path in "
                          f"{env_var(name)}", RuntimeWarning, stacklevel=4)
            return True
    return False


def _warn_relative(name: str, path: str | None) -> None:
    """After a search: warn if the file mapped lies in the current directory or under a
    relative ``LD_LIBRARY_PATH`` entry."""
    if not path:
        return
    folder = os.path.dirname(path)
    for what, where in _relative_dirs(with_cwd=True):
        if folder == where:
            warnings.warn(f"cudalibs: the {name} library was loaded from {path}, in {what}: "
                          "whoever can write there chooses the code this process runs; give "
                          f"the library's absolute path in {env_var(name)}, or remove relative "
                          "entries from LD_LIBRARY_PATH", RuntimeWarning, stacklevel=4)
            return


def _load_uncached(name: str) -> tuple[ctypes.CDLL, LibraryInfo]:
    spec = LIBRARIES[name]
    tried: list[str] = []
    var = env_var(name)
    override = _env.library_path(var)
    if override:
        if not os.path.isabs(override):
            # dlopen would look a bare name up on the system search path and a relative one
            # from the current directory: neither is the file the variable seems to name.
            raise LibraryNotFoundError(
                name, [f"{var}={override}: not an absolute path"],
                f"set {var} to the absolute path of the library file, or unset it")
        try:
            cdll = ctypes.CDLL(override)
        except OSError as exc:
            raise LibraryNotFoundError(
                name, [f"{var}={override}: {exc}"],
                f"fix or unset {var}") from None
        return cdll, LibraryInfo(name, mapped_path(cdll) or override, "env override")
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
            mapped = mapped_path(cdll) or path
            _warn_relative(name, mapped)
            return cdll, LibraryInfo(name, mapped, origin)
    # Without pathfinder, the system loader is the last resort.
    hit = _try_sonames(name, spec, tried, "system")
    if hit is None:
        raise LibraryNotFoundError(name, tried, spec.install or install_hint(name) or "")
    return hit


def _try_sonames(name, spec, tried, origin):
    """dlopen each soname in turn; record failures in ``tried``."""
    for soname in spec.sonames:
        warned = _warn_planted(name, soname)
        try:
            cdll = ctypes.CDLL(soname)
        except OSError as exc:
            tried.append(f"{soname}: {exc}")
            continue
        path = mapped_path(cdll)
        if not warned:
            _warn_relative(name, path)
        return cdll, LibraryInfo(name, path, origin)
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
