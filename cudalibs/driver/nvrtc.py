"""NVRTC: compile CUDA C++ source to PTX or CUBIN at run time.

NVRTC needs neither a GPU nor the driver, so compiling works (and is tested) on a machine
without one: :func:`build` compiles only, and :func:`compile` with an explicit ``arch``
compiles before it touches the driver, which it needs only to load the result as a Module.
Arguments are checked before any library is loaded.  A compile error raises
:class:`~cudalibs.errors.NvrtcError` whose ``detail`` is the full compiler log; a program
handle never outlives the call that made it.
"""

from __future__ import annotations

import ctypes
import os
from typing import Literal, NamedTuple, Sequence

from .. import _env, _ffi
from ..errors import CudaError, LibraryNotFoundError, NvrtcError
from . import _core, _params, compile_cache
from .compile_cache import cache_dir, clear_memory_cache
from . import _nvrtc_lib as _lib
from . import device as _device
from .module import Module, check_ptx_version

__all__ = ["version", "supported_archs", "raise_for", "compile", "build", "Compiled",
           "choose_target", "Target",
           "cuda_include_dirs", "cache_dir", "clear_memory_cache"]


def _error_string(status: int) -> str:
    text = _lib.get().nvrtcGetErrorString(status)
    return text.decode() if text else ""


raise_for = _ffi.make_raiser(NvrtcError, message=_error_string)
raise_for.__doc__ = """Raise :class:`~cudalibs.errors.NvrtcError` for ``status`` from ``function``.

``extra`` (the compiler log, where there is one) becomes the error's ``detail``."""


def version() -> tuple[int, int, int]:
    """The version of the loaded NVRTC library.

    Returns
    -------
    tuple of int
        ``(major, minor, patch)`` like every library's ``version()``, for example
        ``(13, 0, 0)``.  ``nvrtcVersion`` reports no patch level, so it is always 0; NVRTC
        has no single-integer form either, so there is no ``version_int()``.
    """
    major, minor = ctypes.c_int(), ctypes.c_int()
    st = _lib.get().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    if st:
        raise_for(st, "nvrtcVersion")
    return major.value, minor.value, 0


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


# -- compile(): CUDA C++ source -> a loaded Module, with caches --------------------------------

class Target(NamedTuple):
    """What :func:`compile` asks NVRTC for.

    Attributes
    ----------
    kind : {"ptx", "cubin"}
    arch : str
        ``"compute_90"`` for PTX, ``"sm_90"`` for a CUBIN; with the suffix of an ``arch``
        asked for as ``"sm_90a"`` or ``"sm_100f"``, ``"compute_90a"`` / ``"sm_90a"``.
    reason : str
        Why this target, for messages and tests.
    """

    kind: str
    arch: str
    reason: str


def choose_target(nvrtc_version: tuple[int, int], driver_cuda: tuple[int, int],
                  cc: tuple[int, int], supported: Sequence[int] = ()) -> Target:
    """Decide between PTX and CUBIN output for a device of compute capability ``cc``.

    PTX for ``compute_XY`` when the driver can load what this NVRTC emits: the driver JITs it
    once (and keeps it in its own JIT cache), and the PTX stays readable for parameter types.
    A CUBIN for the device's own ``sm_XY`` when NVRTC is newer than the driver: its PTX would
    carry an ISA version the driver rejects (NVRTC 13.5 emits PTX 9.5, a CUDA 13.0 driver
    takes up to 9.0), whereas a CUBIN from a newer toolkit of the same major version runs on
    the older driver.  When NVRTC cannot target ``cc`` itself (a GPU newer than the compiler),
    PTX for the newest architecture it knows below ``cc``, which the driver JITs forward.

    Parameters
    ----------
    nvrtc_version, driver_cuda : tuple of int
        (major, minor), or the (major, minor, patch) of :func:`version`.
    cc : (major, minor)
        The target device's compute capability.
    supported : sequence of int
        ``nvrtc.supported_archs()``; empty means "assume ``cc`` is supported".
    """
    want = cc[0] * 10 + cc[1]
    if supported and want not in supported:
        below = [a for a in supported if a <= want]
        if not below:
            raise ValueError(f"NVRTC {nvrtc_version[0]}.{nvrtc_version[1]} cannot compile for "
                             f"sm_{want} or any older architecture it supports "
                             f"({', '.join(map(str, supported))})")
        return Target("ptx", f"compute_{max(below)}",
                      f"NVRTC does not know sm_{want}; PTX for compute_{max(below)}, JITted "
                      "forward by the driver")
    # (major, minor) of each: NVRTC's version() carries a patch level of 0 the driver's lacks.
    if tuple(nvrtc_version)[:2] > tuple(driver_cuda)[:2]:
        return Target("cubin", f"sm_{want}",
                      f"NVRTC {nvrtc_version[0]}.{nvrtc_version[1]} is newer than the driver "
                      f"(CUDA {driver_cuda[0]}.{driver_cuda[1]}), which would reject its PTX")
    return Target("ptx", f"compute_{want}", "the driver loads this NVRTC's PTX")


def _parse_arch(arch) -> tuple[tuple[int, int], str]:
    """``"sm_90a"`` -> ``((9, 0), "a")``; ``"compute_100f"``, ``"90"``, ``90``, ``(9, 0)`` alike.

    The suffix is ``""``, ``"a"`` (architecture-specific features such as ``wgmma``) or
    ``"f"`` (features of an architecture family); it is kept because it changes what the
    compiler accepts and which devices can load the result.
    """
    if isinstance(arch, tuple) and len(arch) == 2:
        try:
            major, minor = int(arch[0]), int(arch[1])
        except (TypeError, ValueError):
            major = minor = -1
        if major >= 1 and 0 <= minor <= 9:
            return (major, minor), ""
    elif isinstance(arch, (str, int)) and not isinstance(arch, bool):
        text = str(arch).lower()
        for prefix in ("sm_", "compute_"):
            text = text.removeprefix(prefix)
        suffix = text[-1:] if text[-1:] in ("a", "f") else ""
        digits = text[:len(text) - len(suffix)]
        if digits.isdigit() and len(digits) >= 2:
            n = int(digits)
            return (n // 10, n % 10), suffix
    raise ValueError(f"arch must look like 'sm_90', 'sm_90a', 'compute_100f', 90 or (9, 0), "
                     f"not {arch!r}")


def _arch_cc(arch) -> tuple[int, int]:
    """``"sm_90"``, ``"compute_90"``, ``"90"``, ``90`` or ``(9, 0)`` -> ``(9, 0)``."""
    return _parse_arch(arch)[0]


def _unsupported(arch, nv: tuple[int, int], supported: Sequence[int], why: str = "") -> str:
    """The message refusing ``arch``: what this NVRTC compiles for instead."""
    names = ", ".join(f"sm_{a}" for a in supported)
    return (f"NVRTC {nv[0]}.{nv[1]} cannot compile for arch={arch!r}{why}; it supports "
            f"{names} (also spelled compute_XX, and sm_XXa / sm_XXf where that architecture "
            "has such a variant)")


def _check_arch(arch, cc: tuple[int, int], nv: tuple[int, int],
                supported: Sequence[int]) -> None:
    """Refuse an explicit ``arch`` this NVRTC does not know.

    Without this, an unknown architecture would fall back to the newest one NVRTC knows (the
    right thing for a device newer than the compiler, see :func:`choose_target`, but not for a
    target the caller named: ``sm_999`` would quietly give PTX for ``compute_121``).
    """
    if cc[0] * 10 + cc[1] not in supported:
        raise ValueError(_unsupported(arch, nv, supported))


def _check_variant(arch, option: str, nv: tuple[int, int], supported: Sequence[int]) -> None:
    """After a failed compile for a suffixed ``arch``: raise ValueError if NVRTC refuses the
    architecture itself (``sm_80a``: no such variant), so that the error names the argument
    rather than the source.

    NVRTC lists only numeric architectures, so which of them have an ``a`` or ``f`` variant is
    learnt by compiling an empty program for it, and only once a compile has failed: a
    successful one needs no such check.
    """
    try:
        _compile_raw("", "arch.cu", [f"-arch={option}"], "ptx")
    except NvrtcError:
        raise ValueError(_unsupported(arch, nv, supported, f" (it refuses -arch={option})")) \
            from None


def cuda_include_dirs() -> tuple[str, ...]:
    """Directories holding ``cuda_fp16.h``, ``cuda_bf16.h`` and the CCCL headers, found with
    ``cuda.pathfinder`` (the NVIDIA wheels, conda, ``CUDA_HOME``); empty when none is found."""
    global _include_dirs
    if _include_dirs is None:
        dirs: list[str] = []
        try:
            import cuda.pathfinder as pf
        except ImportError:
            pf = None
        if pf is not None:
            for lib in ("cudart", "nvrtc", "cccl"):
                try:
                    d = pf.find_nvidia_header_directory(lib)
                except Exception:  # not installed, or an older pathfinder without it
                    d = None
                if d and d not in dirs:
                    dirs.append(d)
        # crt/ (mma.h's implementation, for WMMA) ships in a wheel of its own that is often
        # missing beside the runtime's: then the toolkit's headers complete the set.
        if not all(any(os.path.exists(os.path.join(d, h)) for d in dirs)
                   for h in ("cuda_fp16.h", os.path.join("crt", "mma.h"))):
            # No (complete) wheel headers: a toolkit install (CUDA_HOME, CUDA_PATH, the usual
            # prefix).
            for root in (*_env.toolkit_roots(), "/usr/local/cuda"):
                d = os.path.join(root, "include") if root else None
                if d and os.path.exists(os.path.join(d, "cuda_fp16.h")) and d not in dirs:
                    dirs.append(d)
                    break
        _include_dirs = tuple(dirs)
    return _include_dirs


_include_dirs: tuple[str, ...] | None = None


def _compile_program(source: str, name: str, options: Sequence[str],
                     name_expressions: Sequence[str], target: Target):
    """Compile with NVRTC; returns ``(image, ptx, lowered, log)``."""
    lib = _lib.get()
    prog = _lib.nvrtcProgram()
    st = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0,
                                None, None)
    if st:
        raise_for(st, "nvrtcCreateProgram")
    try:
        for expr in name_expressions:
            st = lib.nvrtcAddNameExpression(prog, expr.encode())
            if st:
                raise_for(st, "nvrtcAddNameExpression", f"name expression {expr!r}")
        opts = [o.encode() for o in options]
        argv = (ctypes.c_char_p * max(len(opts), 1))(*opts)
        st = lib.nvrtcCompileProgram(prog, len(opts), argv)
        log = _read_log(lib, prog)
        if st:
            raise_for(st, "nvrtcCompileProgram", log or None)
        outputs = {}
        for kind in ({"ptx", target.kind}):
            size_fn, get_fn = _OUTPUTS[kind]
            size = ctypes.c_size_t()
            st = getattr(lib, size_fn)(prog, ctypes.byref(size))
            if st:
                raise_for(st, size_fn, log or None)
            buf = ctypes.create_string_buffer(max(size.value, 1))
            st = getattr(lib, get_fn)(prog, buf)
            if st:
                raise_for(st, get_fn, log or None)
            outputs[kind] = buf.raw[:size.value]
        ptx = outputs["ptx"].rstrip(b"\0")
        image = ptx if target.kind == "ptx" else outputs["cubin"]
        if not image:
            raise NvrtcError(_INTERNAL_ERROR, "nvrtcGetCUBIN", None,
                             f"NVRTC produced an empty {target.kind} for {target.arch}")
        lowered = {}
        for expr in name_expressions:
            out = ctypes.c_char_p()
            st = lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out))
            if st:
                raise_for(st, "nvrtcGetLoweredName", f"name expression {expr!r}")
            lowered[expr] = out.value.decode()
        return image, ptx, lowered, log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


class Compiled(NamedTuple):
    """The output of :func:`build`.

    Attributes
    ----------
    kind : {"ptx", "cubin"}
    image : bytes
        What the driver loads (PTX text without its NUL, or a CUBIN).
    ptx : bytes
        The PTX (also for a CUBIN: it gives the kernels' parameter types).
    lowered : dict
        Name expression -> mangled name.
    key : str
        The cache key; ``""`` for a build kept off the caches (``cache=False``, or a build
        whose headers the key cannot cover: see :func:`compile`).
    target : Target
    cached : str
        ``"memory"``, ``"disk"`` or ``""`` (compiled now).
    """

    kind: str
    image: bytes
    ptx: bytes
    lowered: dict
    key: str
    target: Target
    cached: str


def _check_arguments(source, name_expressions, options, include_dirs, name, target) -> None:
    """Raise TypeError / ValueError for arguments no compile can take; loads no library."""
    if not isinstance(source, str):
        raise TypeError(f"compile: source must be a str, not {type(source).__name__}")
    for what, seq in (("options", options), ("name_expressions", name_expressions),
                      ("include_dirs", include_dirs)):
        if isinstance(seq, (str, bytes)):
            raise TypeError(f"{what} must be a sequence of str, not a single "
                            f"{type(seq).__name__}")
        try:
            ok = all(isinstance(x, str) for x in seq)
        except TypeError:
            ok = False
        if not ok:
            raise TypeError(f"{what} must be a sequence of str")
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, not {type(name).__name__}")
    if target not in (None, "ptx", "cubin"):
        raise ValueError(f"target must be 'ptx', 'cubin' or None, not {target!r}")


def build(source: str, name_expressions: Sequence[str] = (), options: Sequence[str] = (),
          arch=(9, 0), include_dirs: Sequence[str] = (), name: str = "kernel.cu",
          cache: bool = True, *, driver_cuda: tuple[int, int] = (99, 0),
          target: str | None = None) -> Compiled:
    """Compile (or fetch from the caches) without loading: the part of :func:`compile` that
    needs no GPU.

    ``driver_cuda`` is the CUDA version of the driver that will load the result (it decides
    between PTX and CUBIN, see :func:`choose_target`); the other parameters are those of
    :func:`compile`.
    """
    _check_arguments(source, name_expressions, options, include_dirs, name, target)
    return _build(source, name_expressions, options, arch, include_dirs, name, cache,
                  tuple(driver_cuda), target, named=True)


def _build(source, name_expressions, options, arch, include_dirs, name, cache, driver_cuda,
           target, named: bool) -> Compiled:
    """:func:`build` on checked arguments.

    ``named`` says the caller chose ``arch``: then an architecture NVRTC does not know is
    refused, where a device's own (``named=False``) falls back as :func:`choose_target` says.
    """
    cc, suffix = _parse_arch(arch)
    nv = version()[:2]      # (major, minor): what the targets and the cache keys depend on
    supported = supported_archs()
    if named:
        _check_arch(arch, cc, nv, supported)
    tgt = choose_target(nv, driver_cuda, cc, supported)
    if target is not None and target != tgt.kind:
        want = cc[0] * 10 + cc[1]
        tgt = Target(target, f"{'sm' if target == 'cubin' else 'compute'}_{want}", "requested")
    if suffix:
        # choose_target picks between PTX and a CUBIN by the base capability; the suffix then
        # names the variant of that architecture (compute_90a / sm_90a) NVRTC is to target.
        tgt = tgt._replace(arch=tgt.arch + suffix)
    opts = [f"-arch={tgt.arch}"]
    user = list(options)
    if not any(o.startswith(("-std", "--std")) for o in user):
        opts.append("-std=c++17")
    opts += [f"-I{d}" for d in include_dirs]
    opts += [f"-I{d}" for d in cuda_include_dirs()]
    opts += user
    key = ""
    if cache:
        headers, why = compile_cache.header_digest(source, name, include_dirs, user)
        if why is None:
            key = compile_cache.cache_key(source, name, opts, name_expressions, nv, tgt.kind,
                                          tgt.arch, headers)
        else:
            compile_cache.note_uncached(name, why)
    entry, cached = compile_cache.lookup(key) if key else (None, "")
    if entry is None:
        try:
            image, ptx, lowered, _log = _compile_program(source, name, opts, name_expressions,
                                                         tgt)
        except NvrtcError:
            if suffix:
                _check_variant(arch, tgt.arch, nv, supported)
            raise
        entry = (tgt.kind, image, ptx, lowered)
        if key:
            compile_cache.store(key, entry)
    kind, image, ptx, lowered = entry
    return Compiled(kind, image, ptx, dict(lowered), key, tgt, cached)


_INTERNAL_ERROR = 11  # NVRTC_ERROR_INTERNAL_ERROR


def compile(source: str, name_expressions: Sequence[str] = (), options: Sequence[str] = (),
            arch=None, include_dirs: Sequence[str] = (), name: str = "kernel.cu",
            cache: bool = True, *, device=None, target: str | None = None):
    """Compile CUDA C++ with NVRTC and load the result as a :class:`~cudalibs.Module`.

    Parameters
    ----------
    source : str
        CUDA C++ source.  Kernels declared ``extern "C"`` keep their names; for C++ (templates,
        overloads) list the instantiations in ``name_expressions`` and look them up by those
        expressions (``module["axpy<float>"]``, :meth:`Module.lowered_name`).
    name_expressions : sequence of str
        Such as ``"axpy<float>"``; each is instantiated and its mangled name recorded.
    options : sequence of str
        Extra NVRTC options (``"-use_fast_math"``, ``"-DN=4"``).  ``-std=c++17`` is added unless
        a ``-std`` is given (the CCCL headers need C++17).
    arch : str, int or tuple, optional
        Target architecture (``"sm_90"``, ``90``, ``(9, 0)``); the module's device's by
        default.  An ``a`` or ``f`` suffix (``"sm_90a"``, ``"sm_100f"``) is kept: NVRTC then
        targets ``compute_90a`` (or ``sm_90a`` for a CUBIN), which allows that architecture's
        own instructions (``wgmma``), and the PTX says ``.target sm_90a``.  An architecture
        this NVRTC does not compile for (:func:`supported_archs`) is refused.
    include_dirs : sequence of str
        Searched before the CUDA headers, which are found with ``cuda.pathfinder`` so that
        ``#include <cuda_fp16.h>`` and ``<cuda_bf16.h>`` work.
    name : str, default "kernel.cu"
        The file name the compiler log uses.
    cache : bool, default True
        Reuse earlier results: in memory, and on disk under :func:`cache_dir`, keyed by the
        source, options, name expressions, NVRTC version, target architecture, output kind
        and the headers the source may include: the relative paths and contents of every
        file under ``include_dirs`` (and the directories and pre-included files of
        ``options``), read again at each call, so that editing a header compiles anew.  A
        build whose headers cannot all be known that way stays off both caches, its reason
        logged once: more than 4096 files or 16 MiB under its include directories, a computed
        ``#include``, one by an absolute path or through ``..``, or a quoted one found beside
        ``name`` outside ``include_dirs``.  The CUDA headers count as part of the toolkit.

        The memory caches keep the 256 most recently used images (128 MiB at most) and 64
        modules (256 MiB of images); a module they drop stays loaded while its holders keep
        it.  The disk cache is used only while its directories belong to this user and others
        cannot write to them (else memory only, the reason logged once on the
        ``cudalibs.driver`` logger); entries are read only as regular files of this user of at
        most 64 MiB, and written whole.  It is pruned on a process's first write and every
        64th after: entries unused for 30 days go, then the least recently used until 1 GiB
        remains.  A damaged entry is recompiled; an unwritable directory only warns once.
    device : Device or int, optional
        Where to load the module; the current device by default.
    target : {"ptx", "cubin"}, optional
        Force the output kind; by default :func:`choose_target` decides: PTX when the driver
        can load this NVRTC's PTX, else a CUBIN for the device's own architecture.

    Returns
    -------
    Module

    Raises
    ------
    TypeError, ValueError
        Arguments no compile can take (``source`` not a str, a malformed ``arch``), raised
        before any library is loaded; ValueError also for an ``arch`` NVRTC does not compile
        for (``"sm_999"``, ``"sm_80a"``), its message listing the architectures it does.
    NvrtcError
        The source does not compile; ``detail`` holds the full compiler log.
    LibraryNotFoundError
        ``arch`` is None and there is no NVIDIA driver to ask for the device's architecture.

    Notes
    -----
    Only ``arch=None`` asks the driver, for the device's architecture.  With an explicit
    ``arch`` and no driver, the source compiles with NVRTC alone and the Module loads on first
    use (a kernel lookup or its handle): its ``kind``, ``kernel_names``, ``ptx_version`` and
    lowered names are there at once, and compile errors show on a machine without a GPU.
    """
    _check_arguments(source, name_expressions, options, include_dirs, name, target)
    if arch is None:
        dev = _device.as_device(device)
        arch = dev.compute_capability
        driver = _core.driver_version()
    else:
        _parse_arch(arch)       # a malformed arch fails before any library is loaded
        dev = None
        try:
            driver = _core.driver_version()
        except LibraryNotFoundError:
            driver = None
    built = _build(source, name_expressions, options, arch, include_dirs, name, cache,
                   # without a driver, the output a driver as new as this NVRTC would load
                   driver if driver is not None else version(), target,
                   named=dev is None)
    text = built.ptx.decode("utf-8", errors="replace")
    entries = _params.parse_entries(text)
    isa = _params.ptx_version(text) if built.kind == "ptx" else None
    if driver is None:
        # Compiled with NVRTC alone; the module loads on first use, once a driver is there.
        def load():
            drv = _core.driver_version()     # raises while there is still no driver
            return _load_built(built, _device.as_device(device), drv, entries, isa, name)

        return Module._deferred(load, built.kind, entries, f"<{name}>", isa, built.lowered)
    if dev is None:
        dev = _device.as_device(device)
    if built.key:
        mod = compile_cache.loaded_module(built.key, dev.ordinal)
        if mod is not None:
            return mod
    mod = _load_built(built, dev, driver, entries, isa, name)
    if built.key:
        compile_cache.keep_module(built.key, dev.ordinal, mod, len(built.image))
    return mod


def _load_built(built, dev, driver, entries, isa, name):
    """Load a compile's image on ``dev`` (a PTX newer than the driver is refused first)."""
    if built.kind == "ptx":
        problem = check_ptx_version(isa, driver)
        if problem is not None:
            raise CudaError(222, "cuModuleLoadDataEx", None, problem)
        return Module._load(built.image + b"\0", "ptx", dev, None, entries, f"<{name}>", isa,
                            built.lowered)
    return Module._load(built.image, "cubin", dev, None, entries, f"<{name}>", None,
                        built.lowered)
