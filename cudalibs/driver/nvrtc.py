"""NVRTC: compile CUDA C++ source to PTX or CUBIN at run time.

NVRTC needs neither a GPU nor the driver, so everything here works (and is tested) on a
machine without one.  A compile error raises :class:`~cudalibs.errors.NvrtcError` whose
``detail`` is the full compiler log; a program handle never outlives the call that made it.
"""

from __future__ import annotations

import ctypes
from typing import Literal, Sequence

from .. import _ffi
from ..errors import NvrtcError
from . import _nvrtc_lib as _lib

__all__ = ["version", "supported_archs", "raise_for"]


def _error_string(status: int) -> str:
    text = _lib.get().nvrtcGetErrorString(status)
    return text.decode() if text else ""


raise_for = _ffi.make_raiser(NvrtcError, message=_error_string)
raise_for.__doc__ = """Raise :class:`~cudalibs.errors.NvrtcError` for ``status`` from ``function``.

``extra`` (the compiler log, where there is one) becomes the error's ``detail``."""


def version() -> tuple[int, int]:
    """The version of the loaded NVRTC library.

    Returns
    -------
    tuple of int
        ``(major, minor)``, for example ``(13, 0)``.
    """
    major, minor = ctypes.c_int(), ctypes.c_int()
    st = _lib.get().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    if st:
        raise_for(st, "nvrtcVersion")
    return major.value, minor.value


def supported_archs() -> tuple[int, ...]:
    """The GPU architectures the loaded NVRTC can compile for.

    Returns
    -------
    tuple of int
        Compute capabilities as ``10 * major + minor`` (``90`` is ``sm_90``), ascending.
    """
    lib = _lib.get()
    n = ctypes.c_int()
    st = lib.nvrtcGetNumSupportedArchs(ctypes.byref(n))
    if st:
        raise_for(st, "nvrtcGetNumSupportedArchs")
    archs = (ctypes.c_int * n.value)()
    st = lib.nvrtcGetSupportedArchs(archs)
    if st:
        raise_for(st, "nvrtcGetSupportedArchs")
    return tuple(archs)


def _read_log(lib, prog) -> str:
    """The program's compiler log ('' when empty or unreadable)."""
    size = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) or size.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    if lib.nvrtcGetProgramLog(prog, buf):
        return ""
    return buf.value.decode(errors="replace")


# target -> (size function, output function)
_OUTPUTS = {
    "ptx": ("nvrtcGetPTXSize", "nvrtcGetPTX"),
    "cubin": ("nvrtcGetCUBINSize", "nvrtcGetCUBIN"),
}


def _compile_raw(source: str, name: str, options: Sequence[str],
                 target: Literal["ptx", "cubin"] = "ptx") -> tuple[bytes, str]:
    """Compile ``source`` once and return the output image with the compiler log.

    Parameters
    ----------
    source : str
        CUDA C++ source.
    name : str
        The program's file name, used in the log (``"kernel.cu"``).
    options : sequence of str
        NVRTC options (``["-arch=sm_90", "-std=c++17"]``).  A CUBIN needs a real
        architecture (``sm_XX``), a PTX may use a virtual one (``compute_XX``).
    target : {"ptx", "cubin"}
        Which image to return.

    Returns
    -------
    image : bytes
        The PTX text (without its trailing NUL) or the CUBIN ELF image.
    log : str
        The compiler log, warnings included ('' when empty).

    Raises
    ------
    NvrtcError
        ``NVRTC_ERROR_COMPILATION`` with the full log as ``detail`` when the source does not
        compile; other statuses for bad options or an output the target cannot give.
    ValueError
        ``target`` is neither ``"ptx"`` nor ``"cubin"``, or a CUBIN was asked for without a
        real architecture among ``options``.
    """
    try:
        size_fn, get_fn = _OUTPUTS[target]
    except KeyError:
        raise ValueError(f"target must be 'ptx' or 'cubin', not {target!r}") from None
    lib = _lib.get()
    prog = _lib.nvrtcProgram()
    st = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0,
                                None, None)
    if st:
        raise_for(st, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        argv = (ctypes.c_char_p * max(len(opts), 1))(*opts)
        st = lib.nvrtcCompileProgram(prog, len(opts), argv)
        log = _read_log(lib, prog)
        if st:
            raise_for(st, "nvrtcCompileProgram", log or None)
        size = ctypes.c_size_t()
        st = getattr(lib, size_fn)(prog, ctypes.byref(size))
        if st:
            raise_for(st, size_fn, log or None)
        if size.value == 0:
            # NVRTC compiles for a virtual architecture (compute_XX) unless told a real one,
            # and then succeeds with an empty CUBIN.
            raise ValueError("NVRTC produced no CUBIN: pass a real architecture "
                             "('-arch=sm_90'), not a virtual one ('compute_90') or none")
        buf = ctypes.create_string_buffer(size.value)
        st = getattr(lib, get_fn)(prog, buf)
        if st:
            raise_for(st, get_fn, log or None)
        image = buf.raw
        if target == "ptx":
            image = image.rstrip(b"\0")
        return image, log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
