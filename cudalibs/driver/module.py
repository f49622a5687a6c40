"""Modules: load PTX, CUBIN or fatbin images into a device's context.

A :class:`Module` is one image loaded into one device's primary context
(``cuModuleLoadDataEx``).  ``module["name"]`` gives a :class:`~cudalibs.driver.launch.Kernel`,
which keeps its module alive and launches it (see :mod:`cudalibs.driver.launch`, where the
launch path lives).  PTX version checks against the driver are made here, before the driver
sees an image it would refuse.
"""

from __future__ import annotations

import ctypes
import os
import weakref

from .._ffi import Resource
from ..errors import ClosedError, CudaError, CudaLibsError
from . import _lib, _params
from ._core import driver_version, raise_for
from .device import Device, as_device
# Kernel and Launcher live in the launch module; importable from here too, where a kernel
# comes from.
from .launch import Kernel, KernelAttributes, Launcher  # noqa: F401

__all__ = ["Module", "PTX_ISA_TO_CUDA", "required_cuda_for_ptx", "check_ptx_version"]

# PTX ISA version -> the first CUDA release (and so the oldest driver) that accepts it; from
# the release history of the PTX ISA document.  CUDA 12.6 kept ISA 8.5; the document gives
# ISA 8.6 as CUDA 12.7, a number no toolkit release used, so in practice it needs 12.8.
PTX_ISA_TO_CUDA: dict[tuple[int, int], tuple[int, int]] = {
    (6, 0): (9, 0), (6, 1): (9, 1), (6, 2): (9, 2), (6, 3): (10, 0), (6, 4): (10, 1),
    (6, 5): (10, 2),
    (7, 0): (11, 0), (7, 1): (11, 1), (7, 2): (11, 2), (7, 3): (11, 3), (7, 4): (11, 4),
    (7, 5): (11, 5), (7, 6): (11, 6), (7, 7): (11, 7), (7, 8): (11, 8),
    (8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2), (8, 3): (12, 3), (8, 4): (12, 4),
    (8, 5): (12, 5), (8, 6): (12, 7), (8, 7): (12, 8), (8, 8): (12, 9),
    (9, 0): (13, 0), (9, 1): (13, 1),
}


def required_cuda_for_ptx(isa: tuple[int, int]) -> tuple[int, int]:
    """The oldest CUDA (driver) version that loads PTX of ISA version ``isa``.

    Versions beyond the table follow the rule of the 9.x series (ISA 9.N ships with CUDA 13.N),
    so a PTX from a newer compiler than this table knows is still judged.
    """
    hit = PTX_ISA_TO_CUDA.get(tuple(isa))
    if hit is not None:
        return hit
    major, minor = isa
    if (major, minor) > max(PTX_ISA_TO_CUDA):
        return (major + 4, minor)
    return (0, 0)  # older than anything a supported driver refuses


def check_ptx_version(isa, driver) -> str | None:
    """Why a driver of CUDA ``driver`` cannot load PTX ISA ``isa`` (None when it can)."""
    if isa is None:
        return None
    need = required_cuda_for_ptx(isa)
    if tuple(driver)[:2] >= need:
        return None
    return (f"PTX ISA {isa[0]}.{isa[1]} needs a driver for CUDA \u2265 {need[0]}.{need[1]}; "
            f"this driver is CUDA {driver[0]}.{driver[1]}; compile to cubin "
            f"(cudalibs.compile(...) does this automatically) or use an older compiler")


def _unload(unload, handle, alive):
    """The release of a :class:`Module` (run by the lifetime base with its context current,
    deferred while a capture is open)."""
    alive[0] = False
    unload(handle)


# JIT option names accepted in ``jit_options`` -> CUjit_option.
_JIT_NAMES = {
    "optimization_level": _lib.CU_JIT_OPTIMIZATION_LEVEL,
    "generate_debug_info": _lib.CU_JIT_GENERATE_DEBUG_INFO,
    "generate_line_info": _lib.CU_JIT_GENERATE_LINE_INFO,
    "log_verbose": _lib.CU_JIT_LOG_VERBOSE,
}
_LOG_BYTES = 1 << 16


def _read_path(src, what: str) -> bytes:
    try:
        with open(src, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ValueError(f"cannot read {what} file {os.fspath(src)!r}: {exc}") from None


def _is_path_str(s: str, suffixes) -> bool:
    return "\n" not in s and len(s) < 4096 and s.lower().endswith(suffixes)


class Module(Resource):
    """A code image (PTX, CUBIN or fatbin) loaded into one device's primary context.

    Build with :meth:`from_ptx`, :meth:`from_cubin`, :meth:`from_fatbin` or
    :func:`cudalibs.compile`.  ``module["name"]`` returns a :class:`Kernel`.  The image is
    unloaded by :meth:`close`, a ``with`` block or garbage collection; kernels keep their
    module alive, and launching one after :meth:`close` raises
    :class:`~cudalibs.errors.ClosedError`.

    Attributes
    ----------
    device : Device
    kind : str
        ``"ptx"``, ``"cubin"`` or ``"fatbin"``.
    kernel_names : tuple of str
        The ``.entry`` names of the PTX (for images without PTX, the driver's list where it can
        give one).
    jit_log : str
        The JIT's info log ('' when empty or not PTX).
    """

    __slots__ = ("_h", "_handle", "_device", "_alive", "_kind", "_entries", "_lowered",
                 "_kernels", "_label", "_jit_log", "_ptx_version", "_pins", "_pending")

    def __init__(self):
        raise TypeError("use Module.from_ptx(), from_cubin(), from_fatbin() or "
                        "cudalibs.compile()")

    # -- construction -----------------------------------------------------------------------
    @classmethod
    def from_ptx(cls, src, *, device=None, jit_options=None) -> "Module":
        """Load PTX, JIT-compiled by the driver for ``device``.

        Parameters
        ----------
        src : str, bytes or os.PathLike
            PTX text, or a path (an ``os.PathLike``, or a one-line ``str`` ending in ``.ptx``).
        device : Device or int, optional
            The current device by default.
        jit_options : dict, optional
            ``{"optimization_level": 0..4, "generate_debug_info": bool,
            "generate_line_info": bool, "log_verbose": bool}``, or ``CU_JIT_*`` integers as
            keys.

        Raises
        ------
        CudaError
            ``CUDA_ERROR_UNSUPPORTED_PTX_VERSION`` (before any driver call) when the PTX's
            ``.version`` is newer than the driver takes; a JIT failure (the JIT's error log in
            ``detail``).
        ValueError
            A path that cannot be read, or text that is not PTX.
        """
        label = "<ptx>"
        if isinstance(src, os.PathLike) or (isinstance(src, str) and _is_path_str(src, (".ptx",))):
            label = os.fspath(src)
            src = _read_path(src, "PTX")
        if isinstance(src, str):
            text = src
        elif isinstance(src, (bytes, bytearray, memoryview)):
            text = bytes(src).split(b"\0", 1)[0].decode("utf-8", errors="replace")
        else:
            raise TypeError(f"from_ptx: src must be PTX text (str or bytes) or a path, not "
                            f"{type(src).__name__}")
        if ".entry" not in text and ".version" not in text:
            raise ValueError("this is not PTX (no .version directive and no .entry)")
        isa = _params.ptx_version(text)
        problem = check_ptx_version(isa, driver_version())
        if problem is not None:
            raise CudaError(222, "cuModuleLoadDataEx", None, problem)
        entries = _params.parse_entries(text)
        return cls._load(text.encode() + b"\0", "ptx", device, jit_options, entries, label, isa)

    @classmethod
    def from_cubin(cls, src, *, device=None, jit_options=None) -> "Module":
        """Load a CUBIN (an ELF image for one architecture).

        A CUBIN carries no parameter types: kernels from it need ``signature=`` in
        :meth:`get_kernel` (or load through :func:`cudalibs.compile`, which keeps the PTX).

        Parameters
        ----------
        src : bytes or os.PathLike
            The image, or a path to it (also a ``str`` ending in ``.cubin``).
        """
        image, label = cls._binary(src, (".cubin",), b"\x7fELF", "CUBIN", "from_cubin")
        return cls._load(image, "cubin", device, jit_options, {}, label, None)

    @classmethod
    def from_fatbin(cls, src, *, device=None, jit_options=None) -> "Module":
        """Load a fatbin (CUBINs and/or PTX for several architectures; the driver picks).

        Parameters
        ----------
        src : bytes or os.PathLike
            The image, or a path to it (also a ``str`` ending in ``.fatbin``).
        """
        image, label = cls._binary(src, (".fatbin", ".fatbinary"), None, "fatbin",
                                   "from_fatbin")
        return cls._load(image, "fatbin", device, jit_options, {}, label, None)

    @staticmethod
    def _binary(src, suffixes, magic, what, op):
        label = f"<{what}>"
        if isinstance(src, os.PathLike) or (isinstance(src, str) and _is_path_str(src, suffixes)):
            label = os.fspath(src)
            src = _read_path(src, what)
        if isinstance(src, str):
            raise TypeError(f"{op}: src is a str, but a {what} is binary: pass bytes or a path "
                            f"ending in {' or '.join(suffixes)}")
        if not isinstance(src, (bytes, bytearray, memoryview)):
            raise TypeError(f"{op}: src must be {what} bytes or a path, not "
                            f"{type(src).__name__}")
        image = bytes(src)
        if not image:
            raise ValueError(f"empty {what} image")
        if magic is not None and not image.startswith(magic):
            raise ValueError(f"this is not a {what} (it does not start with {magic!r})")
        return image, label

    @classmethod
    def _load(cls, image: bytes, kind, device, jit_options, entries, label, isa,
              lowered=None) -> "Module":
        dev = as_device(device)
        opts, vals, info, err = _jit_arrays(jit_options)
        L = _lib.get()
        L.cuCtxSetCurrent(dev._ctx)
        h = _lib.CUmodule()
        buf = ctypes.create_string_buffer(image, len(image))
        st = L.cuModuleLoadDataEx(ctypes.byref(h), buf, len(opts), opts, vals)
        if st:
            log = err.value.decode(errors="replace").strip()
            extra = log or None
            if st == 222:  # CUDA_ERROR_UNSUPPORTED_PTX_VERSION, where the table said yes
                extra = (f"{log}\n" if log else "") + (check_ptx_version(isa, (0, 0)) or "")
            raise_for(st, "cuModuleLoadDataEx", extra or None)
        self = object.__new__(cls)
        self._h = h
        self._handle = ctypes.cast(h, ctypes.c_void_p).value or 0
        self._device = dev
        # The liveness cell kernels and launchers read on every launch (one list index).
        self._alive = [True]
        self._own(_unload, L.cuModuleUnload, h, self._alive, ctx=dev._ctx)
        self._kind = kind
        self._entries = entries
        self._lowered = dict(lowered or {})
        # Strong, so that ``module["k"].launch(...)`` in a loop reuses one Kernel (its parsed
        # signature, parameter blocks and validated geometry).  Kernel -> Module -> Kernel is a
        # cycle; the cyclic collector (or close()) ends it, and the finalizer unloads then.
        self._kernels = {}
        self._label = label
        self._jit_log = info.value.decode(errors="replace").strip()
        self._ptx_version = isa
        self._pins = weakref.WeakSet()
        self._pending = None
        return self

    @classmethod
    def _deferred(cls, load, kind, entries, label, isa, lowered=None) -> "Module":
        """A module compiled but not yet loaded: ``load()`` returns the loaded Module on first
        use (a kernel lookup, the handle), so that compiling needs no driver -- as cuda.core's
        ObjectCode loads on first use too.  What the image itself tells (kind, kernel names,
        PTX version, lowered names) is known at once."""
        self = object.__new__(cls)
        self._h = None
        self._handle = 0
        self._device = None
        self._alive = [True]
        self._borrow()
        self._kind = kind
        self._entries = entries
        self._lowered = dict(lowered or {})
        self._kernels = {}
        self._label = label
        self._jit_log = ""
        self._ptx_version = isa
        self._pins = weakref.WeakSet()
        self._pending = load
        return self

    def _materialize(self):
        """Load a deferred module now; it takes over the loaded image's handle and finalizer."""
        m = self._pending()
        self._h, self._handle, self._device = m._h, m._handle, m._device
        self._jit_log = m._jit_log
        m._detach()
        self._own(_unload, _lib.get().cuModuleUnload, self._h, self._alive,
                  ctx=self._device._ctx)
        self._pending = None
        return self._h

    # -- state ------------------------------------------------------------------------------
    @property
    def device(self) -> Device:
        """The device the module is loaded on (a compiled, not yet loaded module loads now)."""
        if self._pending is not None and self._alive[0]:
            self._materialize()
        return self._device

    @property
    def handle(self) -> int:
        """The raw ``CUmodule``."""
        self._check()
        return self._handle

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def closed(self) -> bool:
        """Whether the module was unloaded (its kernels can no longer be launched)."""
        return not self._alive[0]

    @property
    def jit_log(self) -> str:
        return self._jit_log

    @property
    def ptx_version(self) -> tuple[int, int] | None:
        """The PTX ISA ``.version`` of the source, for PTX modules."""
        return self._ptx_version

    @property
    def kernel_names(self) -> tuple[str, ...]:
        """Names of the kernels (``.entry`` functions) in this module."""
        if self._entries:
            return tuple(self._entries)
        return self._driver_kernel_names()

    def _driver_kernel_names(self) -> tuple[str, ...]:
        L = _lib.get()
        if not (L.cuModuleGetFunctionCount and L.cuModuleEnumerateFunctions and L.cuFuncGetName):
            return ()
        h = self._check()
        n = ctypes.c_uint()
        if L.cuModuleGetFunctionCount(ctypes.byref(n), h) or not n.value:
            return ()
        funcs = (_lib.CUfunction * n.value)()
        if L.cuModuleEnumerateFunctions(funcs, n.value, h):
            return ()
        names = []
        for f in funcs:
            p = ctypes.c_char_p()
            if L.cuFuncGetName(ctypes.byref(p), f) == 0 and p.value:
                names.append(p.value.decode())
        return tuple(names)

    def _check(self):
        if not self._alive[0]:
            raise ClosedError(f"Module {self._label} is closed")
        if self._pending is not None:
            return self._materialize()
        return self._h

    def close(self) -> None:
        """Unload the module; its kernels can no longer be launched. Idempotent.

        Raises
        ------
        CudaLibsError
            An executable graph that launches this module's kernels is still alive (its
            replays would run unloaded code): close the graph first.
        """
        if self._alive[0] and len(self._pins):
            raise CudaLibsError(f"module {self._label} is used by {len(self._pins)} live "
                                "executable graph(s); close them first")
        # Unusable at once, also inside a capture block, where the unload itself waits.
        self._alive[0] = False
        Resource.close(self)
        self._kernels.clear()

    # -- kernels ----------------------------------------------------------------------------
    def __getitem__(self, name: str) -> "Kernel":
        return self.get_kernel(name)

    def __contains__(self, name) -> bool:
        return isinstance(name, str) and (name in self._entries or name in self._lowered
                                          or self._match(name) is not None)

    def _match(self, name: str) -> str | None:
        """The mangled entry for a plain C++ name (``add`` -> ``_Z3addPfS_i``) if unique."""
        prefix = f"_Z{len(name)}{name}"
        hits = [e for e in self._entries if e.startswith(prefix)]
        return hits[0] if len(hits) == 1 else None

    def lowered_name(self, expr: str) -> str:
        """The mangled name NVRTC gave a name expression passed to :func:`cudalibs.compile`.

        Raises
        ------
        KeyError
            ``expr`` was not among the ``name_expressions``.
        """
        try:
            return self._lowered[expr]
        except KeyError:
            known = ", ".join(map(repr, self._lowered)) or "none"
            raise KeyError(f"{expr!r} was not a name expression of this compile (known: "
                           f"{known})") from None

    def get_kernel(self, name: str, signature=None) -> "Kernel":
        """The kernel called ``name``.

        Parameters
        ----------
        name : str
            The ``.entry`` name, a name expression given to :func:`cudalibs.compile`, or the
            plain name of a C++ kernel whose mangled name is unique in the module.
        signature : str or sequence, optional
            Parameter types, for images without PTX (``"u64, u64, u32"``, see
            :func:`cudalibs.driver._params.parse_signature`); overrides the PTX's.

        Raises
        ------
        KeyError
            No such kernel.
        ClosedError
            The module is closed.
        """
        if not isinstance(name, str):
            raise TypeError(f"kernel name must be a str, not {type(name).__name__}")
        if signature is None:
            hit = self._kernels.get(name)
            if hit is not None:
                return hit
        h = self._check()
        entry = self._lowered.get(name, name)
        if entry not in self._entries and self._entries:
            entry = self._match(name) or entry
        if self._entries and entry not in self._entries:
            raise KeyError(f"no kernel {name!r} in module {self._label}; it has "
                           f"{', '.join(self._entries) or 'none'}")
        f = _lib.CUfunction()
        st = _lib.get().cuModuleGetFunction(ctypes.byref(f), h, entry.encode())
        if st:
            if st == 500:  # CUDA_ERROR_NOT_FOUND
                names = self.kernel_names
                raise KeyError(f"no kernel {name!r} in module {self._label}"
                               + (f"; it has {', '.join(names)}" if names else ""))
            raise_for(st, "cuModuleGetFunction", f"kernel {name!r}")
        if signature is not None:
            params = _params.parse_signature(signature)
        else:
            params = self._entries.get(entry)
        kernel = Kernel._make(self, entry, f, params)
        if signature is None:
            self._kernels[name] = kernel
        return kernel

    def get_global(self, name: str) -> tuple[int, int]:
        """``(address, size)`` of a ``__device__`` / ``.global`` variable of the module."""
        h = self._check()
        ptr, size = _lib.CUdeviceptr(), ctypes.c_size_t()
        st = _lib.get().cuModuleGetGlobal_v2(ctypes.byref(ptr), ctypes.byref(size), h,
                                            name.encode())
        if st:
            raise_for(st, "cuModuleGetGlobal_v2", f"global {name!r}")
        return ptr.value, size.value

    def __repr__(self) -> str:
        state = " (closed)" if self.closed else ""
        names = ", ".join(self.kernel_names[:6]) if not self.closed else ""
        more = "" if len(self._entries) <= 6 else ", ..."
        where = ("not loaded yet" if self._device is None
                 else f"on device {self._device.ordinal}")
        return (f"<Module {self._kind} {self._label} {where}"
                f"{': ' + names + more if names else ''}{state}>")


def _jit_arrays(jit_options):
    """The option/value arrays of ``cuModuleLoadDataEx``, with info and error log buffers."""
    info = ctypes.create_string_buffer(_LOG_BYTES)
    err = ctypes.create_string_buffer(_LOG_BYTES)
    pairs = [
        (_lib.CU_JIT_INFO_LOG_BUFFER, ctypes.addressof(info)),
        (_lib.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, _LOG_BYTES),
        (_lib.CU_JIT_ERROR_LOG_BUFFER, ctypes.addressof(err)),
        (_lib.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, _LOG_BYTES),
    ]
    for key, value in (jit_options or {}).items():
        code = _JIT_NAMES.get(key, key)
        if not isinstance(code, int) or isinstance(code, bool):
            raise ValueError(f"unknown JIT option {key!r} (known: {', '.join(_JIT_NAMES)}, or "
                             "CU_JIT_* integers)")
        if code == _lib.CU_JIT_OPTIMIZATION_LEVEL and not 0 <= int(value) <= 4:
            raise ValueError(f"optimization_level must be 0..4, not {value!r}")
        pairs.append((code, int(value)))
    n = len(pairs)
    opts = (_lib.CUjit_option * n)(*[k for k, _ in pairs])
    # Option values are passed in the pointer-sized slots themselves (the JIT's convention).
    vals = (ctypes.c_void_p * n)(*[v for _, v in pairs])
    return opts, vals, info, err
