"""What cuDNN can do on this host: whether it can finalize backend descriptors, and why not.

cuDNN 9.28 finalizes every backend descriptor through ``libcudnn_engines_runtime_compiled.so.9``,
which links ``libcuda.so.1``; without the NVIDIA driver each ``cudnnBackendFinalize`` fails with
``CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED``.  :func:`finalize_blocked` tells that case (all three
of cuDNN's status, ``libcuda.so.1`` not loading here, and a library beside the loaded libcudnn
that links it) from any other failure; conftest.py skips the tests marked ``cudnn_finalize``
with its reason.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import struct

__all__ = ["LIBCUDA", "SUBLIBRARY_LOADING_FAILED", "libcuda_missing", "elf_needed",
           "loaded_cudnn_path", "cudnn_needs_missing_libcuda", "finalize_blocked"]

LIBCUDA = "libcuda.so.1"
# cudnnStatus_t CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED (cudnn_graph.h)
SUBLIBRARY_LOADING_FAILED = 1008


@functools.lru_cache(maxsize=None)
def libcuda_missing() -> str | None:
    """Why the dynamic loader cannot open ``libcuda.so.1`` here, or ``None`` when it can.

    The same lookup a library that links the driver makes (by soname, through the loader's
    search path), not cudalibs' own search, which an environment variable can redirect.
    """
    try:
        ctypes.CDLL(LIBCUDA)
    except OSError as exc:
        return str(exc)
    return None


def elf_needed(path: str) -> list[str]:
    """The ``DT_NEEDED`` entries (sonames a shared library links) of a 64-bit ELF file.

    Reads only the program headers and the dynamic section, so it is cheap for libraries of
    hundreds of megabytes.  An unreadable or non-ELF64 file gives an empty list.
    """
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] != 2:
                return []
            end = "<" if ident[5] == 1 else ">"
            phoff, = struct.unpack_from(end + "Q", ident, 32)
            phentsize, phnum = struct.unpack_from(end + "HH", ident, 54)
            f.seek(phoff)
            table = f.read(phentsize * phnum)
            loads, dynamic = [], None
            for i in range(phnum):
                p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(
                    end + "IIQQQQ", table, i * phentsize)
                if p_type == 1:  # PT_LOAD
                    loads.append((p_vaddr, p_offset, p_filesz))
                elif p_type == 2:  # PT_DYNAMIC
                    dynamic = (p_offset, p_filesz)
            if dynamic is None:
                return []
            f.seek(dynamic[0])
            raw = f.read(dynamic[1])
            needed, strtab = [], None
            for i in range(len(raw) // 16):
                tag, val = struct.unpack_from(end + "qQ", raw, i * 16)
                if tag == 0:  # DT_NULL
                    break
                if tag == 1:  # DT_NEEDED: an offset into the string table
                    needed.append(val)
                elif tag == 5:  # DT_STRTAB: its address, mapped to a file offset below
                    strtab = val
            if strtab is None:
                return []
            base = next((strtab - v + o for v, o, n in loads if v <= strtab < v + n), None)
            if base is None:
                return []
            names = []
            for off in needed:
                f.seek(base + off)
                names.append(f.read(256).split(b"\0", 1)[0].decode(errors="replace"))
            return names
    except (OSError, struct.error):
        return []


def loaded_cudnn_path() -> str | None:
    """Where the libcudnn in this process was loaded from: the loader's record, or -- when a
    test reset the records after cuDNN was loaded -- the process's own memory map."""
    from cudalibs import _loader

    info = _loader.loaded().get("cudnn")
    if info is not None and info.path:
        return info.path
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libcudnn.so"):
                    return path
    except OSError:
        pass
    return None


def cudnn_needs_missing_libcuda(exc: BaseException) -> str | None:
    """The skip reason when ``exc`` is cuDNN failing to load a sublibrary for want of libcuda,
    else ``None``."""
    from cudalibs.errors import CudnnError

    if not isinstance(exc, CudnnError) or exc.status != SUBLIBRARY_LOADING_FAILED:
        return None
    missing = libcuda_missing()
    if missing is None:
        return None
    path = loaded_cudnn_path()
    if path is None:
        return None
    linking = sorted(os.path.basename(p)
                     for p in glob.glob(os.path.join(os.path.dirname(path), "libcudnn*.so*"))
                     if LIBCUDA in elf_needed(p))
    if not linking:
        return None
    return (f"{exc.function}: CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED: cuDNN's "
            f"{', '.join(linking)} links {LIBCUDA} (the NVIDIA driver), which cannot be loaded "
            f"on this machine ({missing})")


@functools.lru_cache(maxsize=None)
def finalize_blocked() -> str | None:
    """Why this machine's cuDNN cannot finalize a backend descriptor (the reason the marked
    tests skip with), or ``None`` when it can -- or fails for any other cause, which the
    marked tests then report themselves."""
    import numpy as np

    from cudalibs.cudnn import backend
    from cudalibs.errors import CudaLibsError

    try:
        backend.tensor(1, np.float32, (1, 1, 1, 1), (1, 1, 1, 1), alignment=4).close()
    except CudaLibsError as exc:
        return cudnn_needs_missing_libcuda(exc)
    return None
