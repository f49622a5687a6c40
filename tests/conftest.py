"""Settings shared by both test tiers; GPU fixtures live in tests/gpu/conftest.py.

Besides the hypothesis profiles, one rule for the whole suite: a test that fails only because
cuDNN could not load a sublibrary of its own that links ``libcuda.so.1`` is skipped, with that
reason, on a machine without the NVIDIA driver (cuDNN 9.28's runtime-compiled engines link the
driver, so finalizing a descriptor there fails before any GPU work).  The skip needs all three:
cuDNN's status ``CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED``, ``libcuda.so.1`` failing to load
here, and a sublibrary beside the loaded libcudnn that names ``libcuda.so.1`` among its ELF
dependencies.  Where libcuda loads, the same tests run and their failures are failures.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import struct

import pytest
from hypothesis import Phase, settings

# NCCL picks a network interface at communicator creation; the loopback one always exists.
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")

# No deadline: the first call of a test pays for library loading, compilation and autotuning.
settings.register_profile("ci", deadline=None, max_examples=60)
# Few examples, for runs under compute-sanitizer, which slows every CUDA call down.
settings.register_profile("sanitizer", deadline=None, max_examples=4)
# Quick triage of a broken build: fewer examples and no shrinking of a failing one.
settings.register_profile("triage", deadline=None, max_examples=15,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

LIBCUDA = "libcuda.so.1"
# cudnnStatus_t CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED (cudnn_graph.h)
_SUBLIBRARY_LOADING_FAILED = 1008


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


def _loaded_cudnn_path(loader) -> str | None:
    """Where the libcudnn in this process was loaded from: the loader's record, or -- when a
    test reset the records after cuDNN was loaded -- the process's own memory map."""
    info = loader.loaded().get("cudnn")
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


def _cudnn_needs_missing_libcuda(exc: BaseException) -> str | None:
    """The skip reason when ``exc`` is cuDNN failing to load a sublibrary for want of libcuda."""
    try:
        from cudalibs import _loader
        from cudalibs.errors import CudnnError
    except ImportError:
        return None
    if not isinstance(exc, CudnnError) or exc.status != _SUBLIBRARY_LOADING_FAILED:
        return None
    missing = libcuda_missing()
    if missing is None:
        return None
    path = _loaded_cudnn_path(_loader)
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


def _skip_if_cudnn_needs_libcuda():
    try:
        return (yield)
    except Exception as exc:  # noqa: BLE001 - re-raised unless it is exactly that failure
        reason = _cudnn_needs_missing_libcuda(exc)
        if reason is None:
            raise
        pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _skip_if_cudnn_needs_libcuda())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _skip_if_cudnn_needs_libcuda())
