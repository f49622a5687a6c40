"""Read the vendor C headers shipped in the NVIDIA wheels, for the CPU-tier binding checks.

The prototype tables (``cudalibs/*/_lib.py``) are written by hand; this module is what proves
them right.  It parses a header with libclang as C (``#include <header>`` in an unsaved file,
detailed processing record on, so macros are visible), once per header per process, and offers:

* :attr:`Header.functions`   -- function declarations by name, *after* macro expansion (cuda.h
  ``#define cuMemAlloc cuMemAlloc_v2`` makes the declared name ``cuMemAlloc_v2``);
* :attr:`Header.enum_constants` -- every enum constant, name -> value;
* :meth:`Header.enum` -- the constants of one enum, by typedef name or tag;
* :attr:`Header.macros`      -- object-like macros, name -> token text;
  :attr:`Header.macro_values` name -> integer value where the text evaluates to one;
* :attr:`Header.structs`     -- struct/union definitions, tag -> (size, [(field, offset, type)]),
  anonymous members flattened into their parent with absolute byte offsets; a typedef name
  (``ncclConfig_t``) finds the record it names.

Any diagnostic of severity error or fatal raises :class:`HeaderParseError`: a header that did
not parse cleanly would make every comparison below meaningless.

The second half is the comparison itself.  :func:`c_kind` and :func:`ctypes_kind` map a clang
canonical type and a ctypes type to the same small vocabulary (pointer, integer of a size and
signedness, enum, float, record of a size, array, void), which is what the C ABI cares about;
:func:`check_proto`, :func:`check_struct` and :func:`check_enum` return lists of human-readable
problems (empty when all is well), so the tests stay declarative and the self-tests can show that
a wrong row *is* reported.

The bindings target one ABI, and the wheels a user installs may carry newer headers.  The checks
therefore tell a newer header from a wrong binding: a struct member a later header carved out of
reserved bytes, or added as another alternative of a union, leaves every byte we write where the
library reads it, and passes; a member appended after our struct passes only for a struct the
library sizes by its own ``size``/``version`` members (``grows=True``), because everywhere else
(embedded, in an array, passed by value, written by the library) a larger header struct means
the library and we disagree on where things are.  A status or enum constant the header adds is
not an error (:func:`missing_statuses` lists them); a name we carry whose value differs is.
An older header (CUDA 12's beside bindings written for CUDA 13) is the mirror image: a name
or a member the bindings carry and it lacks is a later release's addition, which passes
(``older=True``) unless it collides with something the header has.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import glob
import os
import re
import shutil
import subprocess
from typing import NamedTuple

import clang.cindex as ci

__all__ = [
    "HeaderParseError", "Header", "HeaderSet", "Field", "StructDef",
    "include_dirs", "loaded_cuda_major", "dist_cuda_major", "builtin_include_dir", "parse",
    "load",
    "c_kind", "ctypes_kind", "kinds_match", "describe", "c_signature",
    "check_proto", "check_struct", "check_enum", "check_status", "missing_statuses",
    "later_additions",
    "parse_source",
]

# Libraries cuda.pathfinder knows, in the order their include folders go on the search path.
# cuda.h and library_types.h live with the runtime ("cudart") headers in the cu13 wheel.
PATHFINDER_LIBS = ("cudart", "nvrtc", "cublas", "cudnn", "nccl", "cufft", "cusparse")


class HeaderParseError(RuntimeError):
    """A header could not be found, or libclang reported errors while parsing it."""


# --------------------------------------------------------------------------------------------
# Finding the headers and the compiler's builtin headers
# --------------------------------------------------------------------------------------------

def loaded_cuda_major() -> int | None:
    """The CUDA major version of the libraries this process loads: cuBLAS's (whose major is
    its toolkit's), else NVRTC's; ``None`` when neither can be loaded."""
    try:
        from cudalibs import cublas
        return cublas.version()[0]
    except Exception:  # noqa: BLE001 - not installed or not loadable: try the next one
        pass
    try:
        from cudalibs.driver import nvrtc
        return nvrtc.version()[0]
    except Exception:  # noqa: BLE001
        return None


def dist_cuda_major(name: str, version: str) -> int | None:
    """The CUDA major version an ``nvidia-*`` distribution belongs to, where it says.

    ``nvidia-cudnn-cu12`` and ``nvidia-cuda-runtime-cu12`` by their suffix; the unsuffixed
    CUDA 13 wheels of the toolkit (``nvidia-cuda-runtime``, ``nvidia-cuda-crt``,
    ``nvidia-cublas``) by their version, which is the toolkit's.
    """
    m = re.search(r"-cu(\d+)$", name)
    if m:
        return int(m.group(1))
    major = version.split(".", 1)[0]
    if name.startswith(("nvidia-cuda-", "nvidia-cublas")) and major.isdigit():
        return int(major)
    return None


@functools.lru_cache(maxsize=None)
def include_dirs() -> tuple[str, ...]:
    """Include folders of the installed NVIDIA wheels, deduplicated, in search order.

    cuda.pathfinder first (it knows cudart, nvrtc, cublas, cudnn, nccl, cufft, cusparse and prefers
    site-packages); then every ``nvidia/<pkg>/include`` folder of the ``nvidia`` namespace
    package and of the installed ``nvidia-*`` distributions, which covers anything pathfinder
    does not know.

    Folders of a CUDA major version other than the loaded libraries' (:func:`loaded_cuda_major`)
    go last, so that every header of a CUDA 12 set is CUDA 12's wherever the wheels of both are
    installed; such a folder supplies only what the matching ones lack (the compiler's
    ``crt/`` headers, which CUDA 12's runtime wheel does not ship and the ``test`` extra
    installs for CUDA 13, define nothing the bindings are compared with).
    """
    found: list[str] = []
    majors: dict[str, int] = {}

    def add(path):
        if path and os.path.isdir(path):
            path = os.path.realpath(path)
            if path not in found:
                found.append(path)

    try:
        import cuda.pathfinder as pathfinder
    except ImportError:  # pragma: no cover - cuda-pathfinder is a test dependency
        pathfinder = None
    if pathfinder is not None:
        locate = getattr(pathfinder, "locate_nvidia_header_directory", None)
        for lib in PATHFINDER_LIBS:
            try:
                if locate is not None:
                    located = locate(lib)
                    add(getattr(located, "abs_path", None))
                else:
                    add(pathfinder.find_nvidia_header_directory(lib))
            except Exception:  # unknown to this pathfinder version, or not installed
                continue

    try:
        import nvidia  # namespace package the NVIDIA wheels install into
        for root in getattr(nvidia, "__path__", ()):
            for inc in sorted(glob.glob(os.path.join(root, "*", "include"))):
                add(inc)
    except ImportError:
        pass

    from importlib import metadata
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").lower()
        if not name.startswith("nvidia-"):
            continue
        for f in dist.files or ():
            parts = f.parts
            if len(parts) >= 4 and parts[0] == "nvidia" and parts[2] == "include":
                folder = str(dist.locate_file(os.path.join(*parts[:3])))
                add(folder)
                major = dist_cuda_major(name, dist.version or "")
                if major is not None and os.path.isdir(folder):
                    majors.setdefault(os.path.realpath(folder), major)
    if not found:
        raise HeaderParseError(
            "no NVIDIA include folders found: install the nvidia-* wheels "
            "(nvidia-cuda-runtime, nvidia-cuda-nvrtc, nvidia-cublas, nvidia-cudnn-cu13, "
            "nvidia-nccl-cu13, nvidia-cufft, nvidia-cusparse) and cuda-pathfinder")
    want = loaded_cuda_major()
    if want is not None:
        found.sort(key=lambda d: majors.get(d, want) != want)  # stable: keeps the order within
    return tuple(found)


def _run(cmd) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=None)
def builtin_include_dir() -> str:
    """Folder holding the compiler builtin headers (stddef.h, stdint.h's helpers, ...).

    The libclang wheel ships no resource directory, so without this every header that
    includes <stddef.h> fails.  clang's own resource dir is preferred where a clang is
    installed; else gcc's (``gcc -print-file-name=include``), which libclang reads fine.
    """
    candidates = []
    for clang in ("clang", "clang-18"):
        if shutil.which(clang):
            res = _run([clang, "-print-resource-dir"])
            if res:
                candidates.append(os.path.join(res, "include"))
    for cc in ("gcc", "cc"):
        if shutil.which(cc):
            res = _run([cc, "-print-file-name=include"])
            if res:
                candidates.append(res)
    for cand in candidates:
        if os.path.isabs(cand) and os.path.isfile(os.path.join(cand, "stddef.h")):
            return cand
    raise HeaderParseError(
        "cannot find the C compiler builtin headers (stddef.h): the libclang wheel does not ship "
        "them. Install clang or gcc; tried "
        + (", ".join(candidates) if candidates else "no clang or gcc on PATH"))


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

class Field(NamedTuple):
    """One member of a C struct: its name, byte offset and clang canonical type."""

    name: str
    offset: int
    type: ci.Type


class StructDef(NamedTuple):
    """A C struct or union definition: ``sizeof`` and the flattened member list."""

    size: int
    fields: list


_K = ci.CursorKind
_INT_KEYWORDS = {"int", "unsigned", "signed", "long", "short", "char"}
_ALLOWED_OPS = {"+", "-", "*", "/", "%", "<<", ">>", "|", "&", "^", "~", "(", ")"}


def _int_literal(text: str) -> int | None:
    t = text.rstrip("uUlL")
    try:
        if t.lower().startswith(("0x", "0b")):
            return int(t, 0)
        if len(t) > 1 and t.startswith("0") and t.isdigit():
            return int(t, 8)
        return int(t, 10)
    except ValueError:
        return None


class Header:
    """One parsed header (and everything it includes)."""

    def __init__(self, name: str, tu: ci.TranslationUnit, args: list[str]):
        self.name = name
        self.tu = tu
        self.args = args
        self.functions: dict[str, ci.Cursor] = {}
        self.enum_constants: dict[str, int] = {}
        self._enum_decls: dict[str, ci.Cursor] = {}
        self.macros: dict[str, str] = {}
        self.function_macros: set[str] = set()
        self.structs: dict[str, StructDef] = {}
        self.bitfields: dict[str, dict[str, tuple[int, int]]] = {}
        self._record_cursors: dict[str, ci.Cursor] = {}
        self._typedef_records: dict[str, str] = {}
        self._scan()

    # -- collection ---------------------------------------------------------------------------
    def _scan(self) -> None:
        for cur in self.tu.cursor.get_children():
            kind = cur.kind
            if kind == _K.FUNCTION_DECL:
                self.functions.setdefault(cur.spelling, cur)
            elif kind == _K.ENUM_DECL:
                self._add_enum(cur)
            elif kind in (_K.STRUCT_DECL, _K.UNION_DECL):
                self._add_record(cur)
            elif kind == _K.TYPEDEF_DECL:
                under = cur.underlying_typedef_type.get_canonical()
                decl = under.get_declaration()
                if under.kind == ci.TypeKind.ENUM:
                    self._add_enum(decl)
                    self._enum_decls.setdefault(cur.spelling, decl)
                elif under.kind == ci.TypeKind.RECORD:
                    self._add_record(decl)
                    if decl.spelling.isidentifier():
                        self._typedef_records.setdefault(cur.spelling, decl.spelling)
            elif kind == _K.MACRO_DEFINITION:
                self._add_macro(cur)

    def _add_enum(self, cur: ci.Cursor) -> None:
        if not cur.is_definition():
            return
        if cur.spelling:
            self._enum_decls.setdefault(cur.spelling, cur)
        for c in cur.get_children():
            if c.kind == _K.ENUM_CONSTANT_DECL:
                self.enum_constants.setdefault(c.spelling, c.enum_value)

    def _add_record(self, cur: ci.Cursor) -> None:
        if not cur.is_definition() or not cur.spelling.isidentifier():
            return
        self._record_cursors.setdefault(cur.spelling, cur)

    def _add_macro(self, cur: ci.Cursor) -> None:
        toks = list(cur.get_tokens())
        if not toks:
            return
        name = toks[0]
        if (len(toks) > 1 and toks[1].spelling == "("
                and toks[1].extent.start.line == name.extent.end.line
                and toks[1].extent.start.column == name.extent.end.column):
            self.function_macros.add(cur.spelling)
            return
        self.macros[cur.spelling] = " ".join(t.spelling for t in toks[1:])

    # -- structs -------------------------------------------------------------------------------
    def struct(self, tag: str) -> StructDef:
        """Layout of ``struct tag`` (or union), anonymous members flattened.

        ``tag`` may also be a typedef name: NCCL versions its tags (``struct ncclConfig_v22800``
        became ``ncclConfig_v23100``) while ``ncclConfig_t`` always names the current one.
        """
        tag = self.resolve(tag)
        if tag not in self.structs:
            cur = self._record_cursors.get(tag)
            if cur is None:
                raise KeyError(f"no struct/union {tag!r} defined in {self.name}")
            fields: list[Field] = []
            bits: dict[str, tuple[int, int]] = {}
            self._flatten(cur.type, 0, fields, bits)
            self.structs[tag] = StructDef(cur.type.get_size(), fields)
            self.bitfields[tag] = bits
        return self.structs[tag]

    @staticmethod
    def _flatten(rtype: ci.Type, base_bits: int, out: list, bits: dict) -> None:
        for f in rtype.get_fields():
            off = base_bits + f.get_field_offsetof()
            ftype = f.type.get_canonical()
            if not f.spelling.isidentifier():  # anonymous struct/union member
                Header._flatten(ftype, off, out, bits)
                continue
            if f.is_bitfield():
                bits[f.spelling] = (off, f.get_bitfield_width())
            out.append(Field(f.spelling, off // 8, ftype))

    def resolve(self, tag: str) -> str:
        """The record tag ``tag`` names: itself, or the tag of the record a typedef names."""
        if tag not in self._record_cursors:
            return self._typedef_records.get(tag, tag)
        return tag

    def field_extent(self, tag: str, field: Field) -> tuple[int, int]:
        """``(first byte, end byte)`` of a member of ``struct tag`` (bitfields rounded out)."""
        bits = self.bitfields.get(self.resolve(tag), {}).get(field.name)
        if bits is not None:
            return bits[0] // 8, (bits[0] + bits[1] + 7) // 8
        return field.offset, field.offset + max(field.type.get_size(), 1)

    def record_tag(self, ctype: ci.Type) -> str | None:
        """The tag of a record type, when it is one this header defines by name."""
        decl = ctype.get_canonical().get_declaration()
        return decl.spelling if decl.spelling in self._record_cursors else None

    # -- enums and macros ---------------------------------------------------------------------
    def enum(self, name: str) -> dict[str, int]:
        """Constants of one enum, by typedef name (``CUresult``) or tag (``cudaError_enum``)."""
        decl = self._enum_decls.get(name)
        if decl is None:
            raise KeyError(f"no enum {name!r} in {self.name}")
        return {c.spelling: c.enum_value for c in decl.get_children()
                if c.kind == _K.ENUM_CONSTANT_DECL}

    def enum_deprecated(self, name: str) -> set[str]:
        """Constants of one enum that the header marks deprecated (``__attribute__((deprecated))``)."""
        decl = self._enum_decls.get(name)
        if decl is None:
            raise KeyError(f"no enum {name!r} in {self.name}")
        return {c.spelling for c in decl.get_children()
                if c.kind == _K.ENUM_CONSTANT_DECL
                and c.availability == ci.AvailabilityKind.DEPRECATED}

    @functools.cached_property
    def macro_values(self) -> dict[str, int]:
        """Object-like macros whose text is an integer constant expression, evaluated."""
        out: dict[str, int] = {}
        for name in self.macros:
            v = self.macro_value(name)
            if v is not None:
                out[name] = v
        return out

    def macro_value(self, name: str, _depth: int = 0) -> int | None:
        text = self.macros.get(name)
        if text is None or _depth > 16:
            return None
        toks = text.split()
        if not toks:
            return None
        # Drop casts to plain integer types: "( unsigned int ) 0x1" -> "0x1".
        cleaned: list[str] = []
        i = 0
        while i < len(toks):
            if toks[i] == "(":
                j = i + 1
                while j < len(toks) and toks[j] in _INT_KEYWORDS:
                    j += 1
                if j > i + 1 and j < len(toks) and toks[j] == ")":
                    i = j + 1
                    continue
            cleaned.append(toks[i])
            i += 1
        expr: list[str] = []
        for t in cleaned:
            if t in _ALLOWED_OPS:
                expr.append("//" if t == "/" else t)
            elif t[0].isdigit():
                v = _int_literal(t)
                if v is None:
                    return None
                expr.append(str(v))
            elif t.isidentifier():
                v = self.enum_constants.get(t)
                if v is None:
                    v = self.macro_value(t, _depth + 1)
                if v is None:
                    return None
                expr.append(f"({v})")
            else:
                return None
        try:
            tree = ast.parse(" ".join(expr), mode="eval")
        except SyntaxError:
            return None
        ok = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop)
        if not all(isinstance(n, ok) for n in ast.walk(tree)):
            return None
        try:
            value = eval(compile(tree, "<macro>", "eval"), {"__builtins__": {}})  # noqa: S307
        except Exception:
            return None
        return value if isinstance(value, int) else None

    def integer(self, name: str) -> int | None:
        """An enum constant or integer macro of this name, or ``None``."""
        if name in self.enum_constants:
            return self.enum_constants[name]
        return self.macro_value(name)

    def alias_of(self, name: str) -> str | None:
        """If ``#define name OTHER`` (or a function-like wrapper of it) exists, its text."""
        return self.macros.get(name)

    def __repr__(self) -> str:
        return (f"<Header {self.name}: {len(self.functions)} functions, "
                f"{len(self.enum_constants)} enum constants, {len(self.macros)} macros>")


def _args() -> list[str]:
    # CUDNN_WARN_DEPRECATED turns cuDNN's CUDNN_DEPRECATED(_ENUM) markers into attributes, so
    # deprecated enum aliases are visible (Cursor.availability).  CUBLASAPI is what cublas_v2.h
    # defines (to nothing, in C) before it includes cublas_api.h: CUDA 12's cublas_api.h
    # refuses to be parsed on its own without it (#error), CUDA 13's defines it itself.
    args = ["-x", "c", "-std=c11", "-DCUDNN_WARN_DEPRECATED", "-DCUBLASAPI="]
    for d in include_dirs():
        args.append(f"-I{d}")
    args += ["-isystem", builtin_include_dir()]
    return args


@functools.lru_cache(maxsize=None)
def _index() -> ci.Index:
    return ci.Index.create()


@functools.lru_cache(maxsize=None)
def parse(header: str) -> Header:
    """Parse ``#include <header>`` as C; cached, so each header is parsed once per process.

    Raises :class:`HeaderParseError` listing every error/fatal diagnostic.
    """
    args = _args()
    src = f"cudalibs_probe_{header.replace('/', '_').replace('.', '_')}.c"
    try:
        tu = _index().parse(
            src, args, unsaved_files=[(src, f"#include <{header}>\n")],
            options=(ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD
                     | ci.TranslationUnit.PARSE_SKIP_FUNCTION_BODIES))
    except ci.TranslationUnitLoadError as exc:
        raise HeaderParseError(f"libclang could not parse {header}: {exc}\n  args: {args}") from exc
    bad = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if bad:
        lines = "\n".join(f"  {d}" for d in bad[:50])
        raise HeaderParseError(
            f"{len(bad)} error(s) parsing <{header}> as C:\n{lines}\n  args: {' '.join(args)}")
    return Header(header, tu, args)


@functools.lru_cache(maxsize=None)
def parse_source(name: str, text: str) -> Header:
    """Parse C source ``text`` (declarations, no vendor headers needed) as a :class:`Header`.

    For the checker's own tests: a small, hand-written "older" and "newer" header shows what
    each comparison accepts and refuses, independent of what the installed wheels declare.
    """
    args = ["-x", "c", "-std=c11", "-isystem", builtin_include_dir()]
    src = f"cudalibs_probe_{name.replace('.', '_')}.c"
    tu = _index().parse(src, args, unsaved_files=[(src, text)],
                        options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    bad = [d for d in tu.diagnostics if d.severity >= ci.Diagnostic.Error]
    if bad:
        raise HeaderParseError(f"{len(bad)} error(s) parsing {name}:\n"
                               + "\n".join(f"  {d}" for d in bad[:20]))
    return Header(name, tu, args)


class HeaderSet:
    """Several parsed headers seen as one (the first header that declares a name wins).

    Each item of ``headers`` is a header name (parsed with :func:`parse`) or a parsed
    :class:`Header`.
    """

    def __init__(self, headers):
        self.headers = tuple(h if isinstance(h, Header) else parse(h) for h in headers)
        self.names = tuple(h.name for h in self.headers)

    def _first(self, attr, name):
        for h in self.headers:
            d = getattr(h, attr)
            if name in d:
                return d[name]
        return None

    def function(self, name: str) -> ci.Cursor | None:
        return self._first("functions", name)

    def alias_of(self, name: str) -> str | None:
        return self._first("macros", name)

    def integer(self, name: str) -> int | None:
        for h in self.headers:
            v = h.integer(name)
            if v is not None:
                return v
        return None

    def struct(self, tag: str) -> tuple[Header, StructDef]:
        for h in self.headers:
            try:
                return h, h.struct(tag)
            except KeyError:
                continue
        raise KeyError(f"no struct/union {tag!r} defined in {', '.join(self.names)}")

    def enum(self, name: str) -> dict[str, int]:
        for h in self.headers:
            try:
                return h.enum(name)
            except KeyError:
                continue
        raise KeyError(f"no enum {name!r} in {', '.join(self.names)}")


@functools.lru_cache(maxsize=None)
def load(headers: tuple[str, ...]) -> HeaderSet:
    """A cached :class:`HeaderSet` for a module's ``HEADERS`` tuple."""
    return HeaderSet(tuple(headers))


# --------------------------------------------------------------------------------------------
# The type classifier: C canonical types and ctypes types mapped to one vocabulary
# --------------------------------------------------------------------------------------------
#
# Kinds are tuples:  ("void",)  ("pointer",)  ("int", size, signed)  ("char", 1)  ("bool", 1)
#                    ("enum", size)  ("float", size)  ("record", size)  ("array", kind, count)
#                    ("unknown", text)
# An enum matches any integer of its size (c_int or c_uint for the usual 4-byte enum); every
# other kind must be equal.  Plain ``char`` is its own kind on both sides (ctypes c_char), so
# ``unsigned char`` must be c_ubyte and ``signed char`` c_byte.

_T = ci.TypeKind


def _type_kinds(*names):
    # TypeKind members differ between libclang versions; take those this one has.
    return {getattr(_T, n) for n in names if hasattr(_T, n)}


_SIGNED = _type_kinds("SCHAR", "SHORT", "INT", "LONG", "LONGLONG", "INT128")
_UNSIGNED = _type_kinds("UCHAR", "USHORT", "UINT", "ULONG", "ULONGLONG", "UINT128",
                        "CHAR16", "CHAR32")
_FLOATS = _type_kinds("FLOAT", "DOUBLE", "LONGDOUBLE", "HALF", "FLOAT16", "FLOAT128",
                      "BFLOAT16", "IBM128")
_POINTERS = _type_kinds("POINTER", "BLOCKPOINTER", "NULLPTR")
_ARRAYS = _type_kinds("CONSTANTARRAY", "INCOMPLETEARRAY", "VARIABLEARRAY", "DEPENDENTSIZEDARRAY")


def c_kind(t: ci.Type, param: bool = False) -> tuple:
    """Kind of a clang type.  ``param=True`` applies parameter decay (arrays, functions)."""
    t = t.get_canonical()
    k = t.kind
    if k == _T.VOID:
        return ("void",)
    if k in _POINTERS:
        return ("pointer",)
    if param and (k in _ARRAYS or k in (_T.FUNCTIONPROTO, _T.FUNCTIONNOPROTO)):
        return ("pointer",)
    if k in (_T.CHAR_S, _T.CHAR_U):
        return ("char", 1)
    if k == _T.BOOL:
        return ("bool", t.get_size())
    if k in _SIGNED:
        return ("int", t.get_size(), True)
    if k in _UNSIGNED:
        return ("int", t.get_size(), False)
    if k == _T.WCHAR:
        return ("int", t.get_size(), True)
    if k == _T.ENUM:
        return ("enum", t.get_size())
    if k in _FLOATS:
        return ("float", t.get_size())
    if k == _T.RECORD:
        return ("record", t.get_size())
    if k == _T.CONSTANTARRAY:
        return ("array", c_kind(t.element_type), t.element_count)
    return ("unknown", t.spelling)


# ctypes "_type_" codes of the simple types.
_CODES = {
    "b": ("int", 1, True), "B": ("int", 1, False),
    "h": ("int", 2, True), "H": ("int", 2, False),
    "i": ("int", 4, True), "I": ("int", 4, False),
    "l": ("int", ctypes.sizeof(ctypes.c_long), True),
    "L": ("int", ctypes.sizeof(ctypes.c_ulong), False),
    "q": ("int", 8, True), "Q": ("int", 8, False),
    "c": ("char", 1), "?": ("bool", 1),
    "f": ("float", 4), "d": ("float", 8), "g": ("float", ctypes.sizeof(ctypes.c_longdouble)),
    "u": ("int", ctypes.sizeof(ctypes.c_wchar), True),
    "P": ("pointer",), "z": ("pointer",), "Z": ("pointer",), "O": ("unknown", "py_object"),
}


def ctypes_kind(t) -> tuple:
    """Kind of a ctypes type (``None`` is void, as ctypes' ``restype`` means it)."""
    if t is None:
        return ("void",)
    if not isinstance(t, type):
        return ("unknown", repr(t))
    if issubclass(t, (ctypes._Pointer, ctypes._CFuncPtr)):
        return ("pointer",)
    if issubclass(t, ctypes.Array):
        return ("array", ctypes_kind(t._type_), t._length_)
    if issubclass(t, (ctypes.Structure, ctypes.Union)):
        return ("record", ctypes.sizeof(t))
    if issubclass(t, ctypes._SimpleCData):
        kind = _CODES.get(t._type_)
        if kind is not None:
            if kind[0] == "int" and ctypes.sizeof(t) != kind[1]:  # defensive: platform sizes
                return ("int", ctypes.sizeof(t), kind[2])
            return kind
    return ("unknown", getattr(t, "__name__", repr(t)))


def kinds_match(c: tuple, py: tuple) -> bool:
    """Whether a C kind and a ctypes kind are the same thing at the ABI."""
    if c[0] == "enum":
        return py[0] == "int" and py[1] == c[1]
    if c[0] == "array" and py[0] == "array":
        return c[2] == py[2] and kinds_match(c[1], py[1])
    if c[0] == "unknown" or py[0] == "unknown":
        return False
    return c == py


def describe(kind: tuple) -> str:
    """Short text for a kind: ``int64``, ``uint8``, ``pointer``, ``enum(4)``."""
    k = kind[0]
    if k == "int":
        return f"{'' if kind[2] else 'u'}int{8 * kind[1]}"
    if k == "array":
        return f"{describe(kind[1])}[{kind[2]}]"
    if k in ("enum", "record", "float", "char", "bool"):
        return f"{k}({kind[1]})"
    if k == "unknown":
        return f"unknown({kind[1]})"
    return k


def _ctypes_name(t) -> str:
    if t is None:
        return "None"
    return getattr(t, "__name__", repr(t))


def c_signature(cur: ci.Cursor) -> str:
    """``CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)``, from the header."""
    args = ", ".join(f"{a.type.spelling} {a.spelling}".strip() for a in cur.get_arguments())
    if cur.type.kind == _T.FUNCTIONPROTO and cur.type.is_function_variadic():
        args += ", ..."
    loc = cur.location
    where = f"  [{os.path.basename(loc.file.name)}:{loc.line}]" if loc.file else ""
    return f"{cur.result_type.spelling} {cur.spelling}({args or 'void'}){where}"


# --------------------------------------------------------------------------------------------
# Checks: each returns a list of problems, empty when the binding matches the header
# --------------------------------------------------------------------------------------------

def check_proto(proto, hs: HeaderSet) -> list[str]:
    """Compare one ``Proto(name, restype, argtypes)`` row with its C declaration."""
    problems: list[str] = []
    alias = hs.alias_of(proto.name)
    if alias == proto.name:
        # "#define cuDeviceGetUuid_v2 cuDeviceGetUuid_v2" (CUDA 12's cuda.h) names itself.
        alias = None
    if alias is not None:
        problems.append(
            f"{proto.name} is a macro in the header (#define {proto.name} {alias}): bind the "
            f"symbol it expands to, not the unversioned name")
    cur = hs.function(proto.name)
    if cur is None:
        ids = [t for t in (alias or "").split() if t.isidentifier() and not t.startswith("__")]
        target = hs.function(ids[-1]) if ids else None
        if target is not None:
            problems.append(f"C signature: {c_signature(target)}")
        elif alias is None:
            problems.append(f"{proto.name} is not declared in {', '.join(hs.names)}")
        return problems
    sig = c_signature(cur)
    c_args = list(cur.get_arguments())
    if cur.type.kind == _T.FUNCTIONPROTO and cur.type.is_function_variadic():
        problems.append(f"{proto.name} is variadic in C; ctypes argtypes cannot express it")
    rk, pk = c_kind(cur.result_type), ctypes_kind(proto.restype)
    if not kinds_match(rk, pk):
        problems.append(f"return: C {cur.result_type.spelling} ({describe(rk)}) "
                        f"!= ctypes {_ctypes_name(proto.restype)} ({describe(pk)})")
    argtypes = list(proto.argtypes)
    if len(argtypes) != len(c_args):
        problems.append(f"argument count: C has {len(c_args)}, the row has {len(argtypes)}")
    for i, (ca, pa) in enumerate(zip(c_args, argtypes)):
        ck, pk = c_kind(ca.type, param=True), ctypes_kind(pa)
        if not kinds_match(ck, pk):
            problems.append(f"argument {i} ({ca.spelling}): C {ca.type.spelling} ({describe(ck)}) "
                            f"!= ctypes {_ctypes_name(pa)} ({describe(pk)})")
    if problems:
        problems.append(f"C signature: {sig}")
    return problems


def _ctypes_fields(cls, base: int = 0, out=None):
    """Flattened ``name -> (offset, type, bit info)`` of a ctypes Structure/Union."""
    if out is None:
        out = {}
    anonymous = set(getattr(cls, "_anonymous_", ()))
    for spec in cls._fields_:
        name, typ = spec[0], spec[1]
        desc = getattr(cls, name)
        off = base + desc.offset
        if name in anonymous:
            _ctypes_fields(typ, off, out)
            continue
        bits = None
        if len(spec) > 2:  # bitfield: CField.size packs (width << 16) | bit offset
            size = desc.size
            bits = (off * 8 + (size & 0xFFFF), size >> 16)
        out[name] = (off, typ, bits)
    return out


# Byte arrays with these names are reserved space: ctypes zero-fills a new Structure, we never
# write them, and a later header may carve new members (which then read 0, their default) out
# of them.
_PADDING_PREFIXES = ("reserved", "pad")


def _is_padding(name: str, typ) -> bool:
    return (name.lower().startswith(_PADDING_PREFIXES) and isinstance(typ, type)
            and issubclass(typ, ctypes.Array) and ctypes.sizeof(typ._type_) == 1)


def _extent(off: int, typ, bits) -> tuple[int, int]:
    if bits is not None:
        return bits[0] // 8, (bits[0] + bits[1] + 7) // 8
    return off, off + ctypes.sizeof(typ)


def _covered(start: int, end: int, ranges) -> bool:
    """Whether every byte of ``[start, end)`` lies in one of ``ranges``."""
    pos = start
    for a, b in sorted(ranges):
        if a <= pos < b:
            pos = b
        if pos >= end:
            return True
    return pos >= end


def check_struct(cls, tag: str, hs: HeaderSet, *, grows: bool = False, older: bool = False,
                 _seen=None) -> list[str]:
    """Compare a ctypes Structure with ``struct tag``: every member we declare, and the size.

    Each member of ``cls`` must be in the header under its name, at the same offset, of the
    same kind; nested records are compared recursively (they are embedded, so exactly).
    Reserved/pad byte arrays are ours to zero, not names to match.  A header member ``cls``
    does not declare passes only where the layout stays compatible:

    * inside bytes ``cls`` already accounts for: carved out of reserved bytes, or another
      alternative of a union beside a member we declare (``CUmemLocation.localized`` beside
      ``id``, CUDA 13.5);
    * after the end of ``cls``, and only with ``grows=True``: a versioned, append-only struct
      that the library reads through a pointer and sizes by its own ``size``/``version``
      members (``ncclConfig_t``), where an older layout is a prefix of the newer one.

    Without ``grows`` the sizes must be equal: a struct that is embedded, sits in an array,
    crosses by value or is written by the library must be exactly the header's.

    ``older``: the header is of a release older than the one ``cls`` follows (CUDA 12's
    headers beside bindings of CUDA 13).  Then a member of ``cls`` that the header lacks passes
    where its bytes lie in the header's reserved bytes (or its union's ``pad``): the later
    release carved it out of them, and the older library ignores them.
    """
    _seen = set() if _seen is None else _seen
    if (cls, tag) in _seen:
        return []
    _seen.add((cls, tag))
    try:
        header, cdef = hs.struct(tag)
    except KeyError as exc:
        return [str(exc.args[0])]
    problems: list[str] = []
    name = f"{cls.__name__} (struct {tag})"
    size = ctypes.sizeof(cls)
    if size > cdef.size or (size < cdef.size and not grows):
        problems.append(f"{name}: sizeof is {size} in ctypes, {cdef.size} in C")
    mine = _ctypes_fields(cls)
    theirs = {f.name: f for f in cdef.fields}
    cbits = header.bitfields.get(header.resolve(tag), {})
    padding = [_extent(off, typ, bits) for f, (off, typ, bits) in mine.items()
               if _is_padding(f, typ)]
    # Our members where the header has them too: bytes a union alternative may share.
    declared = [_extent(off, typ, bits) for f, (off, typ, bits) in mine.items()
                if not _is_padding(f, typ) and f in theirs and theirs[f].offset == off]
    # The header's reserved bytes, where a later release's members may lie.
    reserved = [header.field_extent(tag, cf) for cf in cdef.fields
                if cf.name.lower().startswith(_PADDING_PREFIXES)]
    for cf in cdef.fields:
        if cf.name in mine and not _is_padding(cf.name, mine[cf.name][1]):
            continue
        start, end = header.field_extent(tag, cf)
        if _covered(start, end, padding + declared):
            continue  # carved from our reserved bytes, or a union alternative: compatible
        if grows and start >= size:
            continue  # appended by a later version of a struct that carries its size
        problems.append(f"{name}: C member {cf.name} is missing from _fields_")
    for fname, (off, typ, bits) in mine.items():
        if _is_padding(fname, typ):
            continue
        cf = theirs.get(fname)
        if cf is None:
            if older and _covered(*_extent(off, typ, bits), reserved):
                continue  # a later release's member, in bytes this header reserves
            problems.append(f"{name}: _fields_ has {fname}, which struct {tag} does not")
            continue
        if fname in cbits or bits is not None:
            if cbits.get(fname) != bits:
                problems.append(f"{name}.{fname}: bitfield (bit offset, width) C {cbits.get(fname)} "
                                f"!= ctypes {bits}")
            continue
        if off != cf.offset:
            problems.append(f"{name}.{fname}: offset {off} in ctypes, {cf.offset} in C")
        ck, pk = c_kind(cf.type), ctypes_kind(typ)
        if not kinds_match(ck, pk):
            problems.append(f"{name}.{fname}: C {cf.type.spelling} ({describe(ck)}) "
                            f"!= ctypes {_ctypes_name(typ)} ({describe(pk)})")
        if ck[0] == "record" and pk[0] == "record":
            # a by-value member struct: compare its members too, so the report says which
            sub = header.record_tag(cf.type)
            if sub is not None:
                problems += check_struct(typ, sub, hs, older=older, _seen=_seen)
    return problems


def _status_names_by_value(theirs: dict[str, int], sentinels) -> dict[int, list[str]]:
    by_value: dict[int, list[str]] = {}
    for name, value in theirs.items():
        if name not in sentinels:
            by_value.setdefault(value, []).append(name)
    return by_value


def check_status(ours: dict[int, str], theirs: dict[str, int], deprecated=frozenset(),
                 sentinels=frozenset()) -> list[str]:
    """Compare a status table ``value -> name`` with the header's status enum.

    Each status we carry that the header has must be under the header's name for it.  Where the
    header has several names for one value (cuDNN 9 keeps deprecated aliases such as
    ``CUDNN_STATUS_ALLOC_FAILED = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED``), the table
    must use the current, non-deprecated one -- the name a user will find in the docs.  A status
    we carry that the header lacks altogether is one a newer library returns (an older header
    is fine); but a name the header gives another value is wrong.  ``sentinels`` are constants
    of the enum that are no status (``ncclNumResults``, the count).  Statuses the header has and
    we lack are no error here: see :func:`missing_statuses`.
    """
    by_value = _status_names_by_value(theirs, sentinels)
    problems = []
    for value, name in sorted(ours.items()):
        if name in sentinels:
            problems.append(f"{value} {name}: not a status, the enum's count")
            continue
        names = by_value.get(value)
        if names is None:
            if name in theirs:
                problems.append(f"{value} {name}: the header says {name} = {theirs[name]}")
            continue
        current = [n for n in names if n not in deprecated] or names
        if name not in names:
            problems.append(f"{value} {name}: the header calls {value} {' / '.join(current)}")
        elif name not in current:
            problems.append(f"{value} {name}: deprecated alias in the header; its current name "
                            f"is {' / '.join(current)}")
    return problems


def missing_statuses(ours: dict[int, str], theirs: dict[str, int],
                     sentinels=frozenset()) -> list[str]:
    """Statuses of the header that the table ``value -> name`` lacks, as ``"value NAME"``.

    A library newer than the binding adds statuses; an error carrying one still works (its
    name reads "unknown ... status"), so this is news for the table, not a failure.
    """
    by_value = _status_names_by_value(theirs, sentinels)
    return [f"{value} {' / '.join(by_value[value])}" for value in sorted(set(by_value) - set(ours))]


def check_enum(ours: dict[str, int], theirs: dict[str, int], *, exact: bool,
               ignore=(), older: bool = False) -> list[str]:
    """Compare ``name -> value`` tables.

    ``exact``: the same set of (value, name) pairs both ways; else every entry of ``ours`` must
    be in ``theirs`` with the same value.  Names in ``ignore`` are skipped on the header side.
    ``older``: ``theirs`` is of a release older than the one ``ours`` follows, so a name it
    lacks is a later addition (:func:`later_additions` lists them), unless the header gives
    that value to another name.
    """
    problems = []
    for name, value in sorted(ours.items(), key=lambda kv: (kv[1], kv[0])):
        if name not in theirs and older:
            taken = sorted(k for k, v in theirs.items()
                           if v == value and k not in ours and k not in ignore)
            if taken:
                problems.append(f"{name} = {value}: not in the header, which gives {value} to "
                                f"{' / '.join(taken)}")
        elif name not in theirs:
            problems.append(f"{name} = {value}: not in the header")
        elif theirs[name] != value:
            problems.append(f"{name} = {value}: the header says {theirs[name]}")
    if exact:
        for name, value in sorted(theirs.items(), key=lambda kv: (kv[1], kv[0])):
            if name not in ours and name not in ignore:
                problems.append(f"{name} = {value}: in the header, missing here")
    return problems


def later_additions(ours: dict[str, int], theirs: dict[str, int]) -> list[str]:
    """Entries of ``ours`` (``name -> value``) that an older header ``theirs`` lacks, as
    ``"NAME = value"``: what a later release added, which the older library refuses with its
    own status when asked for it."""
    return [f"{k} = {v}" for k, v in sorted(ours.items(), key=lambda kv: (kv[1], kv[0]))
            if k not in theirs]
