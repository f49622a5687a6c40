"""Kernel parameters: read a PTX ``.entry`` signature, check and pack call arguments.

Pure logic, no driver calls, so all of it is tested without a GPU.

A kernel's parameters are what its PTX declares::

    .visible .entry axpy(
        .param .f32 axpy_param_0,                     // a float
        .param .u64 .ptr .global .align 4 axpy_param_1, // a pointer
        .param .u32 axpy_param_2,                     // an unsigned int
        .param .align 8 .b8 axpy_param_3[16]          // a struct passed by value
    )

:func:`parse_entries` turns each ``.entry`` into a tuple of :class:`Param`.  A
:class:`ParamBlock` then lays the parameters out in one host buffer (each at its own
alignment) with a pre-built ``void *kernelParams[]`` pointing at every slot, which is what
``cuLaunchKernel`` takes.  A call writes every argument with one ``struct.pack_into``; only
pointer, struct and bfloat16 slots need a Python-level conversion first.  When that one pack
fails (a wrong type, a value out of range) the arguments are checked one by one to say which
parameter is wrong: the common case pays nothing for the diagnosis.

Cubin-only kernels carry no PTX, so their signature is given explicitly, in the same spelling:
``"u64, u64, u32"`` or ``("ptr", "ptr", "u32", "b8[16]:8")``.
"""

from __future__ import annotations

import ctypes
import re
import struct
from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["Param", "ParamBlock", "parse_entries", "parse_signature", "ptx_version",
           "ptx_target", "entry_names"]

# PTX scalar type -> (struct format, size, kind). Kinds: "ptr" (a device address, also a plain
# int), "uint", "sint", "bits" (any integer of the width, signed or not), "float", "bf16".
_SCALARS = {
    "u8": ("B", 1, "uint"), "u16": ("H", 2, "uint"), "u32": ("I", 4, "uint"),
    "u64": ("Q", 8, "ptr"),
    "s8": ("b", 1, "sint"), "s16": ("h", 2, "sint"), "s32": ("i", 4, "sint"),
    "s64": ("q", 8, "sint"),
    "b8": ("B", 1, "bits"), "b16": ("H", 2, "bits"), "b32": ("I", 4, "bits"),
    "b64": ("Q", 8, "ptr"),
    "f16": ("e", 2, "float"), "bf16": ("H", 2, "bf16"),
    "f32": ("f", 4, "float"), "f64": ("d", 8, "float"),
    # Packed pairs: raw bits (pass an integer, or bytes of the right size).
    "f16x2": ("I", 4, "bits"), "bf16x2": ("I", 4, "bits"),
}
_ALIASES = {"ptr": "u64", "pointer": "u64", "int": "s32", "uint": "u32", "float": "f32",
            "double": "f64", "half": "f16", "int64": "s64", "uint64": "u64",
            "bfloat16": "bf16"}


class Param(NamedTuple):
    """One kernel parameter.

    Attributes
    ----------
    index : int
        Position in the signature.
    name : str
        The PTX name (``axpy_param_2``), or ``arg<i>`` for an explicit signature.
    type : str
        PTX type without the dot (``"u32"``, ``"b8"``).
    count : int or None
        Element count for an array parameter (``.b8 name[16]``, a struct by value); None for
        a scalar.
    align : int
        Alignment in bytes.
    pointer : bool
        Declared ``.ptr`` (or a 64-bit untyped slot, which is how pointers are declared).
    """

    index: int
    name: str
    type: str
    count: int | None
    align: int
    pointer: bool = False

    @property
    def size(self) -> int:
        """Bytes the parameter occupies."""
        return _SCALARS[self.type][1] * (self.count or 1)

    @property
    def kind(self) -> str:
        """``"ptr"``, ``"uint"``, ``"sint"``, ``"bits"``, ``"float"``, ``"bf16"`` or
        ``"bytes"`` (an array: a struct by value)."""
        if self.count is not None:
            return "bytes"
        return _SCALARS[self.type][2]

    def describe(self) -> str:
        """The parameter as PTX spells it (``.align 8 .b8 p3[16]``)."""
        if self.count is not None:
            return f".align {self.align} .{self.type} {self.name}[{self.count}]"
        return f".{self.type}{' .ptr' if self.pointer else ''} {self.name}"


# -- PTX text ---------------------------------------------------------------------------------
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%.]*)\s*(\((.*?)\))?", re.S)
_PARAM = re.compile(
    r"\.param\s+(?P<attrs>(?:\.\w+\s+(?:\d+\s+)?)*?)"
    r"\.(?P<type>[usbf]\d+(?:x2)?|bf16(?:x2)?)\s+"
    r"(?P<more>(?:\.\w+\s+(?:\d+\s+)?)*)"
    r"(?P<name>[A-Za-z_$%][\w$%.]*)\s*(?:\[\s*(?P<count>\d+)\s*\])?\s*$", re.S)
_VERSION = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)", re.M)
_TARGET = re.compile(r"^\s*\.target\s+([\w, ]+)", re.M)


def _text(ptx) -> str:
    if isinstance(ptx, (bytes, bytearray, memoryview)):
        return bytes(ptx).split(b"\0", 1)[0].decode("utf-8", errors="replace")
    return ptx


def ptx_version(ptx) -> tuple[int, int] | None:
    """The ``.version`` directive of a PTX text as ``(major, minor)``; None if absent."""
    m = _VERSION.search(_COMMENTS.sub("", _text(ptx)))
    return (int(m.group(1)), int(m.group(2))) if m else None


def ptx_target(ptx) -> tuple[str, ...]:
    """The ``.target`` directive's items (``("sm_90",)``); empty if absent."""
    m = _TARGET.search(_COMMENTS.sub("", _text(ptx)))
    if not m:
        return ()
    return tuple(t.strip() for t in m.group(1).split(",") if t.strip())


def _parse_param(index: int, text: str, entry: str) -> Param:
    m = _PARAM.match(text.strip())
    if m is None:
        raise ValueError(f"cannot read parameter {index} of .entry {entry}: {text.strip()!r}")
    attrs = (m.group("attrs") + " " + m.group("more")).split()
    typ = m.group("type")
    if typ not in _SCALARS:
        raise ValueError(f"parameter {index} of .entry {entry} has type .{typ}, which kernel "
                         "arguments cannot take")
    align = None
    pointer = False
    for i, a in enumerate(attrs):
        if a == ".align" and i + 1 < len(attrs):
            align = int(attrs[i + 1])
        elif a == ".ptr":
            pointer = True
    count = int(m.group("count")) if m.group("count") is not None else None
    size = _SCALARS[typ][1]
    if align is None or count is None:
        # ".align" after ".ptr" is the alignment of the pointee, not of the parameter.
        align = size if count is None else (align or size)
    return Param(index, m.group("name"), typ, count, align, pointer)


def parse_entries(ptx) -> dict[str, tuple[Param, ...]]:
    """Every ``.entry`` of a PTX text with its parameters, in declaration order.

    Parameters
    ----------
    ptx : str or bytes

    Returns
    -------
    dict
        ``{mangled name: (Param, ...)}``.

    Raises
    ------
    ValueError
        A parameter cannot be read.
    """
    text = _COMMENTS.sub("", _text(ptx))
    out: dict[str, tuple[Param, ...]] = {}
    for m in _ENTRY.finditer(text):
        name, body = m.group(1), m.group(3)
        params = []
        if body and body.strip():
            for i, part in enumerate(body.split(",")):
                params.append(_parse_param(i, part, name))
        out[name] = tuple(params)
    return out


def entry_names(ptx) -> tuple[str, ...]:
    """Names of the ``.entry`` functions (kernels) of a PTX text, in order."""
    return tuple(parse_entries(ptx))


_SIG_ITEM = re.compile(r"^\.?(?P<type>\w+)\s*(?:\[\s*(?P<count>\d+)\s*\])?\s*"
                       r"(?::\s*(?P<align>\d+))?$")


def parse_signature(signature) -> tuple[Param, ...]:
    """An explicit signature: ``"u64, u64, u32"``, a sequence of such items, or Params.

    Items are PTX types with or without the dot (``u32``, ``.f32``), the aliases ``ptr``,
    ``int``, ``uint``, ``float``, ``double``, ``half``, ``bfloat16``, or an array ``b8[16]``
    with an optional alignment ``b8[16]:8`` (a struct by value).  numpy dtypes are accepted
    too (a structured dtype becomes ``b8[itemsize]`` at its alignment).

    Raises
    ------
    ValueError
        An item is not a type kernel parameters can have.
    """
    if isinstance(signature, str):
        items = [s for s in (p.strip() for p in signature.split(",")) if s]
    else:
        items = list(signature)
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Param):
            out.append(item._replace(index=i))
            continue
        if isinstance(item, np.dtype) or (isinstance(item, type) and issubclass(item, np.generic)):
            dt = np.dtype(item)
            if dt.fields is not None or dt.kind == "V":
                out.append(Param(i, f"arg{i}", "b8", dt.itemsize, max(dt.alignment, 1)))
                continue
            item = {"f": "f", "i": "s", "u": "u", "b": "u"}[dt.kind] + str(8 * dt.itemsize)
            if dt.name == "bfloat16":
                item = "bf16"
        m = _SIG_ITEM.match(str(item).strip())
        if m is None:
            raise ValueError(f"signature item {i} ({item!r}) is not a parameter type")
        typ = _ALIASES.get(m.group("type"), m.group("type"))
        if typ not in _SCALARS:
            raise ValueError(f"signature item {i} ({item!r}): unknown type .{typ} (known: "
                             f"{', '.join(sorted(_SCALARS))}, ptr, int, float, ...)")
        count = int(m.group("count")) if m.group("count") is not None else None
        size = _SCALARS[typ][1]
        align = int(m.group("align")) if m.group("align") else size
        out.append(Param(i, f"arg{i}", typ, count, align, m.group("type") in ("ptr", "pointer")))
    return tuple(out)


# -- packing ----------------------------------------------------------------------------------
_RANGES = {1: 8, 2: 16, 4: 32, 8: 64}


def _bf16_bits(value: float) -> int:
    import ml_dtypes

    return int(np.asarray(value, dtype=ml_dtypes.bfloat16).view(np.uint16))


class ParamBlock:
    """The packed parameters of one kernel: a host buffer and the ``void*[]`` into it.

    Parameters
    ----------
    params : sequence of Param
    kernel : str
        Name used in error messages.
    pointer_check : callable
        ``pointer_check(arg, param) -> int``: the device address for an argument that is not
        a plain int (DeviceArray, CAI/DLPack object, DeviceBuffer), with its checks; raises.
    array_types : dict
        ``{type: check}`` for the hot path: ``check(arg, param) -> int`` for the argument
        classes met most often (DeviceArray), looked up by ``type(arg)``.
    inline_array : tuple, optional
        ``(cls, device)``: arguments of exactly type ``cls`` whose ``_device is device`` and
        whose ``_buf`` is None or open pass their ``_ptr`` without a function call (the
        DeviceArray check written out in the generated writer); any other outcome calls the
        ``array_types`` check, which raises the precise error.

    Attributes
    ----------
    buffer : ctypes array
        The parameter bytes (each parameter at its own aligned offset).
    pointers : ctypes array of c_void_p
        ``kernelParams`` for ``cuLaunchKernel``.
    address : int
        Address of ``pointers`` (0 when the kernel has no parameters).
    offsets : tuple of int
    """

    __slots__ = ("params", "kernel", "buffer", "pointers", "address", "offsets", "_pack",
                 "_special", "_pointer_check", "_fast", "_n", "_inline", "write",
                 "__weakref__")

    def __init__(self, params: Sequence[Param], kernel: str, pointer_check, array_types=None,
                 inline_array=None):
        self.params = tuple(params)
        self._inline = inline_array
        self.kernel = kernel
        self._n = len(self.params)
        self._pointer_check = pointer_check
        self._fast = dict(array_types or {})
        fmt = ["<"]
        offsets = []
        pos = 0
        special = []
        for p in self.params:
            align = max(p.align, 1)
            pad = (-pos) % align
            if pad:
                fmt.append(f"{pad}x")
                pos += pad
            offsets.append(pos)
            if p.count is not None:
                fmt.append(f"{p.size}s")
                special.append((p.index, False))
            else:
                fmt.append(_SCALARS[p.type][0])
                if p.kind in ("ptr", "bf16"):
                    special.append((p.index, p.kind == "ptr"))
            pos += p.size
        self._pack = struct.Struct("".join(fmt)).pack_into
        self.offsets = tuple(offsets)
        self._special = tuple(special)
        # 16-byte aligned storage: the largest alignment PTX parameters use in practice.
        storage = (ctypes.c_ubyte * (max(pos, 1) + 16))()
        base = ctypes.addressof(storage)
        shift = (-base) % 16
        # The parameters are packed into a view that starts at the aligned address; the view
        # keeps ``storage`` alive.
        self.buffer = (ctypes.c_ubyte * max(pos, 1)).from_buffer(storage, shift)
        self.pointers = (ctypes.c_void_p * max(self._n, 1))(
            *[base + shift + off for off in offsets])
        self.address = ctypes.addressof(self.pointers) if self._n else 0
        lines, ns = self.writer_code("args")
        src = "def write(args):\n" + "".join(f"    {line}\n" for line in lines)
        exec(src, ns)  # noqa: S102 - generated from the parameter kinds above, no user text
        #: ``write(args)``: check ``args`` and pack them into :attr:`buffer` (generated for
        #: this signature: see :meth:`writer_code`).
        self.write = ns["write"]

    @property
    def size(self) -> int:
        """Bytes of packed parameters (padding between them included)."""
        return ctypes.sizeof(self.buffer) if self._n else 0

    def writer_code(self, args: str) -> tuple[list[str], dict]:
        """Python source lines that check the tuple named ``args`` and pack it.

        Generated once per signature, so a call runs straight-line code: a length check, one
        type test per pointer/struct slot, one ``struct.pack_into``.  When the pack fails
        (wrong type, out of range) :meth:`normalize` checks each argument and raises naming
        the parameter.  Returns ``(lines, namespace)``; names in the lines are prefixed
        ``_pb_`` so the code can be embedded in a larger generated function.
        """
        ns = {"_pb_n": self._n, "_pb_count": self._wrong_count, "_pb_pack": self._pack,
              "_pb_buf": self.buffer, "_pb_norm": self.normalize, "_pb_conv": self._convert,
              "_pb_params": self.params, "_pb_int": int}
        lines = [f"if len({args}) != _pb_n: _pb_count({args})"]
        names = [f"_pb_a{i}" for i in range(self._n)]
        if self._n:
            lines.append(f"{', '.join(names)}, = {args}")
        checks = list(self._fast.items())
        for j, (cls, check) in enumerate(checks):
            ns[f"_pb_T{j}"] = cls
            ns[f"_pb_C{j}"] = check
        if self._inline is not None:
            ns["_pb_IT"], ns["_pb_dev"] = self._inline
        for i, is_ptr in self._special:
            a = names[i]
            if not is_ptr:
                lines.append(f"{a} = _pb_conv({a}, _pb_params[{i}])")
                continue
            lines.append(f"_pb_t = type({a})")
            branch = "if"
            if self._inline is not None:
                lines.append(f"if _pb_t is _pb_IT and {a}._device is _pb_dev and "
                             f"((_pb_b := {a}._buf) is None or _pb_b._ptr is not None): "
                             f"{a} = {a}._ptr")
                branch = "elif"
            lines.append(f"{branch} _pb_t is _pb_int: pass")
            for j in range(len(checks)):
                lines.append(f"elif _pb_t is _pb_T{j}: {a} = _pb_C{j}({a}, _pb_params[{i}])")
            lines.append(f"else: {a} = _pb_conv({a}, _pb_params[{i}])")
        packed = ", ".join(names)
        lines += ["try:",
                  f"    _pb_pack(_pb_buf, 0{', ' if names else ''}{packed})",
                  "except (_pb_struct_error, OverflowError, TypeError, ValueError):",
                  f"    _pb_pack(_pb_buf, 0, *_pb_norm({args}))"]
        ns["_pb_struct_error"] = struct.error
        return lines, ns

    def _wrong_count(self, args):
        sig = ", ".join(p.describe() for p in self.params)
        raise TypeError(f"kernel {self.kernel} takes {self._n} argument"
                        f"{'' if self._n == 1 else 's'} ({sig}), {len(args)} given")

    def _where(self, p: Param) -> str:
        return f"kernel {self.kernel} argument {p.index} ({p.describe()})"

    def _convert(self, a, p: Param):
        """The packable value for a pointer, struct or bfloat16 slot."""
        kind = p.kind
        if kind == "ptr":
            if isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_)):
                return int(a)
            if isinstance(a, (float, bool, np.floating, np.bool_, str, bytes)):
                raise TypeError(f"{self._where(p)} takes a device array or a pointer (int), "
                                f"not {type(a).__name__}")
            return self._pointer_check(a, p)
        if kind == "bytes":
            return self._bytes(a, p)
        if kind == "bf16":
            if not isinstance(a, (int, float, np.integer, np.floating)) or isinstance(a, bool):
                raise TypeError(f"{self._where(p)} takes a float, not {type(a).__name__}")
            return _bf16_bits(float(a))
        return a

    def _bytes(self, a, p: Param) -> bytes:
        if isinstance(a, (np.void, np.generic)) or (isinstance(a, np.ndarray) and a.ndim == 0):
            # A numpy scalar goes by its bytes: np.float16(x) or ml_dtypes.bfloat16(x) for a
            # __half / __nv_bfloat16 parameter, which CUDA C passes as a 2-byte struct.
            data = a.tobytes()
        elif isinstance(a, (bytes, bytearray, memoryview)):
            data = bytes(a)
        elif isinstance(a, ctypes.Structure) or isinstance(a, ctypes.Array):
            data = bytes(a)
        elif isinstance(a, np.ndarray):
            data = np.ascontiguousarray(a).tobytes()
        else:
            hint = ""
            if p.size == 2 and isinstance(a, (int, float)):
                hint = ("; for a __half or __nv_bfloat16 parameter (a 2-byte struct in the PTX) "
                        "give np.float16(x) or ml_dtypes.bfloat16(x)")
            raise TypeError(f"{self._where(p)} is a struct passed by value: give bytes, a numpy "
                            f"scalar or structured scalar, or a ctypes Structure of {p.size} "
                            f"bytes, not {type(a).__name__}{hint}")
        if len(data) != p.size:
            raise ValueError(f"{self._where(p)} takes {p.size} bytes, got {len(data)}")
        return data

    def normalize(self, args) -> list:
        """Check every argument on its own and return the values to pack (slow path: names
        the first wrong parameter)."""
        if len(args) != self._n:
            self._wrong_count(args)
        out = []
        for a, p in zip(args, self.params):
            kind = p.kind
            if kind == "ptr" and isinstance(a, (int, np.integer)) and not isinstance(
                    a, (bool, np.bool_)):
                out.append(self._int(a, p))
                continue
            if kind in ("ptr", "bytes", "bf16"):
                out.append(self._convert(a, p))
                continue
            if kind == "float":
                if isinstance(a, (bool, np.bool_)) or not isinstance(
                        a, (int, float, np.integer, np.floating)):
                    raise TypeError(f"{self._where(p)} takes a float, not {type(a).__name__}")
                v = float(a)
                if p.type == "f16" and abs(v) > 65504.0 and v == v and abs(v) != float("inf"):
                    raise ValueError(f"{self._where(p)}: {a!r} does not fit in float16")
                if p.type == "f32" and abs(v) > 3.4028234663852886e38 and abs(v) != float("inf"):
                    raise ValueError(f"{self._where(p)}: {a!r} does not fit in float32")
                out.append(v)
                continue
            out.append(self._int(a, p))
        return out

    def _int(self, a, p: Param) -> int:
        if isinstance(a, (float, np.floating, str, bytes, complex)) or not isinstance(
                a, (int, np.integer, np.bool_)):
            raise TypeError(f"{self._where(p)} takes an integer, not {type(a).__name__}")
        v = int(a)
        bits = _RANGES[_SCALARS[p.type][1]]
        kind = p.kind
        if kind in ("uint", "ptr") and p.type != "b64":
            lo, hi = 0, 2**bits - 1
        elif kind == "sint":
            lo, hi = -(2**(bits - 1)), 2**(bits - 1) - 1
        else:  # raw bits: either signedness
            lo, hi = -(2**(bits - 1)), 2**bits - 1
        if kind in ("uint", "ptr") and v < 0 and isinstance(a, np.signedinteger) and \
                a.dtype.itemsize == _SCALARS[p.type][1]:
            # A numpy signed integer of the slot's width says what the C parameter is: NVCC
            # and NVRTC declare every integer parameter unsigned in PTX (``int n`` is .u32).
            return v + 2**bits
        if not lo <= v <= hi:
            hint = ""
            if kind in ("uint", "ptr") and v < 0:
                hint = (f"; NVCC and NVRTC declare signed integer parameters .u{bits} too: pass "
                        f"np.int{bits}({v}), or give the kernel signature='s{bits}' there")
            raise ValueError(f"{self._where(p)}: {v} is out of range [{lo}, {hi}]{hint}")
        if kind in ("bits", "ptr", "bf16") and v < 0:
            v += 2**bits
        return v

    def tobytes(self) -> bytes:
        """The packed parameter bytes (what the driver copies for each launch)."""
        return bytes(self.buffer)

    def __repr__(self) -> str:
        return f"<ParamBlock {self.kernel}: {self._n} params, {self.size} bytes>"
