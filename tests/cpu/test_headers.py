"""Every ctypes prototype, struct, constant and enum table against the vendor headers.

The bindings are hand-written ctypes; a wrong row (``c_int`` for ``size_t``, a pointer bound as
an integer, the unversioned ``cuMemAlloc``) does not fail at import or bind time, it corrupts
arguments on the GPU.  This file parses the headers shipped in the NVIDIA wheels with libclang
(see ``headers.py``; each header once per session) and compares:

* each ``Proto`` row of every prototype table: declared, same argument count, same return and
  argument kinds, and not a name the header ``#define``\\s to a versioned one;
* each module's ``STRUCTS``: every member's offset and kind, and the size -- compatibly, so
  that the newest wheels' headers pass where they only add members the ABI allows (see
  ``headers.check_struct``) and fail where our layout and theirs disagree;
* each module's vendor-named integer constants: equal to the header's enum constant or macro;
* the status tables in ``cudalibs.errors``, ``DEVICE_ATTRIBUTES`` and the ``cudalibs.dtypes``
  enum tables: every entry we carry equal to the header's where the header has it (statuses
  and attributes a newer header adds are reported as warnings, not failures);
* and the checker itself: deliberately wrong rows are reported, and a newer header's
  compatible additions are not.

A prototype table module that cannot be imported fails here (it is never skipped): a missing
table would otherwise pass silently.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
import warnings
from ctypes import (CFUNCTYPE, POINTER, Structure, c_byte, c_char, c_char_p, c_double, c_float,
                    c_int, c_int32, c_int64, c_longlong, c_size_t, c_ssize_t, c_ubyte, c_uint,
                    c_uint32, c_uint64, c_ushort, c_void_p)

import pytest

# headers.py sits next to this file; make it importable under any pytest import mode.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

# libclang comes with the `test` extra, so CI always has it and a missing one fails there; a
# GPU machine that runs the whole suite from a checkout may lack it, and then these skip.
if not os.environ.get("CI"):
    pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang)")

import headers as H  # noqa: E402

from cudalibs._ffi import Proto  # noqa: E402

# (module, table attribute, headers attribute) for every prototype table.
TABLES = [
    ("cudalibs.driver._lib", "TABLE", "HEADERS"),
    ("cudalibs.driver._nvrtc_lib", "TABLE", "HEADERS"),
    ("cudalibs.cublas._lib", "TABLE", "HEADERS"),
    ("cudalibs.cublas._lib", "LT_TABLE", "LT_HEADERS"),
    ("cudalibs.cudnn._lib", "TABLE", "HEADERS"),
    ("cudalibs.nccl._lib", "TABLE", "HEADERS"),
]
MODULES = list(dict.fromkeys(mod for mod, _, _ in TABLES))
HEADER_ATTRS = ("HEADERS", "LT_HEADERS")

# Module-level integers named with these prefixes are vendor constants and must match the header.
VENDOR_PREFIXES = ("CU_", "CUDA_", "NVRTC_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "nccl", "NCCL_")

# Headers whose versioning macros live in an umbrella header the module may not name:
# cublas_api.h declares cublasCreate_v2, but "#define cublasCreate cublasCreate_v2" is in
# cublas_v2.h.  Parsing the umbrella as well lets the unversioned-name check see the macro.
UMBRELLA = {"cublas_api.h": "cublas_v2.h"}


def _with_umbrellas(names) -> tuple[str, ...]:
    names = tuple(names)
    return names + tuple(dict.fromkeys(UMBRELLA[n] for n in names
                                       if n in UMBRELLA and UMBRELLA[n] not in names))


def _import(mod: str):
    """Import a table module; any failure becomes a loud test failure, never a skip."""
    try:
        return importlib.import_module(mod)
    except Exception as exc:  # noqa: BLE001 - reported verbatim
        pytest.fail(f"cannot import {mod}: {type(exc).__name__}: {exc} "
                    f"(every prototype table module must exist and import)", pytrace=False)


def _attr(module, name: str):
    try:
        return getattr(module, name)
    except AttributeError:
        pytest.fail(f"{module.__name__} has no {name}", pytrace=False)


def _module_headers(module) -> tuple[str, ...]:
    names: list[str] = []
    for attr in HEADER_ATTRS:
        for h in getattr(module, attr, ()) or ():
            if h not in names:
                names.append(h)
    if not names:
        pytest.fail(f"{module.__name__} names no HEADERS", pytrace=False)
    return _with_umbrellas(names)


def _proto_params():
    """One param per Proto row; one failing param for a module or table that is missing."""
    for mod, table, hdrs in TABLES:
        where = f"{mod}.{table}"
        try:
            module = importlib.import_module(mod)
            rows = getattr(module, table)
            getattr(module, hdrs)
        except Exception as exc:  # noqa: BLE001 - turned into a failing test below
            yield pytest.param(mod, table, hdrs, None, f"{type(exc).__name__}: {exc}",
                               id=f"{where}:UNAVAILABLE")
            continue
        if not rows:
            yield pytest.param(mod, table, hdrs, None, "the table is empty", id=f"{where}:EMPTY")
        for row in rows:
            yield pytest.param(mod, table, hdrs, row, None, id=f"{where}:{row.name}")


def _fail(problems: list[str], what: str) -> None:
    if problems:
        pytest.fail(f"{what}:\n  " + "\n  ".join(problems), pytrace=False)


# --------------------------------------------------------------------------------------------
# Prototype tables
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mod, table, hdrs, row, error", list(_proto_params()))
def test_prototype_matches_header(mod, table, hdrs, row, error):
    if error is not None:
        pytest.fail(f"cannot check {mod}.{table} against {hdrs}: {error} "
                    f"(every prototype table module must exist and import)", pytrace=False)
    module = importlib.import_module(mod)
    hs = H.load(_with_umbrellas(getattr(module, hdrs)))
    _fail(H.check_proto(row, hs), f"{mod}.{table}: {row.name} does not match {', '.join(hs.names)}")


@pytest.mark.parametrize("mod, table, hdrs", TABLES, ids=[f"{m}.{t}" for m, t, _ in TABLES])
def test_table_well_formed(mod, table, hdrs):
    module = _import(mod)
    rows = _attr(module, table)
    headers = _attr(module, hdrs)
    assert isinstance(headers, tuple) and headers, f"{mod}.{hdrs} must be a non-empty tuple"
    assert rows, f"{mod}.{table} is empty"
    assert all(isinstance(r, Proto) for r in rows), f"{mod}.{table} holds non-Proto rows"
    names = [r.name for r in rows]
    dupes = sorted({n for n in names if names.count(n) > 1})
    assert not dupes, f"{mod}.{table} declares {dupes} more than once"


# --------------------------------------------------------------------------------------------
# Structs and constants of each module
# --------------------------------------------------------------------------------------------

# Structs that the library reads through a pointer and sizes by their own ``size`` / ``version``
# members, which the vendor documents as versioned and append-only: a newer header may append
# members after ours.  NCCL puts the version in the tag (``struct ncclConfig_v22800`` is NCCL
# 2.28's layout), so a header that no longer defines the tag we mirror is compared through the
# typedef that names its current version.  Every other struct must keep the header's exact
# size: it is embedded in another (CUmemLocation), sits in an array (CUlaunchAttribute), is
# written by the library (CUuuid), or is read through a pointer with no size of its own
# (CUlaunchConfig, CUmemPoolProps, CUDA_MEMCPY2D), where the library reads as many bytes as
# its header declares.
APPEND_ONLY = {"ncclConfig_v22800": "ncclConfig_t"}


def _struct_problems(cls, tag: str, hs) -> list[str]:
    if tag in APPEND_ONLY:
        try:
            hs.struct(tag)
        except KeyError:
            # A later version of the struct: ours must be a prefix of it.
            return H.check_struct(cls, APPEND_ONLY[tag], hs, grows=True)
    return H.check_struct(cls, tag, hs)


@pytest.mark.parametrize("mod", MODULES)
def test_structs_match_header(mod):
    module = _import(mod)
    structs = getattr(module, "STRUCTS", None)
    if not structs:
        return  # a module without by-value structs has nothing to compare
    hs = H.load(_module_headers(module))
    problems: list[str] = []
    for cls, tag in structs.items():
        problems += _struct_problems(cls, tag, hs)
    _fail(problems, f"{mod}.STRUCTS differ from {', '.join(hs.names)}")


def _vendor_constants(module) -> dict[str, int]:
    return {name: value for name, value in vars(module).items()
            if name.startswith(VENDOR_PREFIXES) and isinstance(value, int)
            and not isinstance(value, bool)}


@pytest.mark.parametrize("mod", MODULES)
def test_constants_match_header(mod):
    module = _import(mod)
    hs = H.load(_module_headers(module))
    problems = []
    for name, value in sorted(_vendor_constants(module).items()):
        theirs = hs.integer(name)
        if theirs is None:
            problems.append(f"{name} = {value}: no enum constant or integer macro of that name")
        elif theirs != value:
            problems.append(f"{name} = {value}: the header says {theirs}")
    _fail(problems, f"{mod} constants differ from {', '.join(hs.names)}")


# --------------------------------------------------------------------------------------------
# Enum tables
# --------------------------------------------------------------------------------------------

# error class -> (header, C enum type): every status we carry under the header's name for it.
STATUS_ENUMS = [
    ("CudaError", "cuda.h", "CUresult"),
    ("NvrtcError", "nvrtc.h", "nvrtcResult"),
    ("CublasError", "cublas_v2.h", "cublasStatus_t"),
    ("CudnnError", "cudnn.h", "cudnnStatus_t"),
    ("NcclError", "nccl.h", "ncclResult_t"),
]


# Constants of a status enum that are no status.
STATUS_SENTINELS = frozenset({"ncclNumResults"})


def _news(what: str, items) -> None:
    """A newer header's additions: shown in the run's warnings summary, never a failure."""
    if items:
        warnings.warn(f"{what}: {', '.join(items)}", UserWarning, stacklevel=2)


@pytest.mark.parametrize("cls, header, enum", STATUS_ENUMS, ids=[c for c, _, _ in STATUS_ENUMS])
def test_status_table_matches_header(cls, header, enum):
    from cudalibs import errors

    ours = getattr(errors, cls).status_names()
    assert len(set(ours.values())) == len(ours), f"{cls} maps two codes to one name"
    h = H.parse(header)
    theirs = h.enum(enum)
    _fail(H.check_status(ours, theirs, h.enum_deprecated(enum), STATUS_SENTINELS),
          f"errors.{cls} differs from {enum} in {header}")
    _news(f"{enum} in {header} has statuses errors.{cls} does not name yet",
          H.missing_statuses(ours, theirs, STATUS_SENTINELS))


def test_curesult_is_cudaError_enum():
    # cuda.h: typedef enum cudaError_enum { ... } CUresult;
    h = H.parse("cuda.h")
    assert h.enum("CUresult") == h.enum("cudaError_enum")


def test_device_attributes_match_header():
    from cudalibs.driver import _lib

    prefix = "CU_DEVICE_ATTRIBUTE_"
    ours = {prefix + k: v for k, v in _lib.DEVICE_ATTRIBUTES.items()}
    theirs = H.parse("cuda.h").enum("CUdevice_attribute")
    # Every attribute we name must have its value; attributes a newer header adds are news.
    _fail(H.check_enum(ours, theirs, exact=False),
          "driver._lib.DEVICE_ATTRIBUTES differs from CUdevice_attribute in cuda.h")
    _news("CUdevice_attribute in cuda.h has attributes DEVICE_ATTRIBUTES does not name yet",
          [f"{k} = {v}" for k, v in sorted(theirs.items(), key=lambda kv: kv[1])
           if k not in ours and k != prefix + "MAX"])


# dtypes table -> (header, C enum type, prefix); every entry we have must match.
DTYPE_ENUMS = [
    ("CUDA_R", "library_types.h", "cudaDataType_t", "CUDA_"),
    ("COMPUTE", "cublas_v2.h", "cublasComputeType_t", "CUBLAS_"),
    ("CUDNN", "cudnn.h", "cudnnDataType_t", "CUDNN_DATA_"),
    ("NCCL", "nccl.h", "ncclDataType_t", "nccl"),
]


@pytest.mark.parametrize("table, header, enum, prefix", DTYPE_ENUMS,
                         ids=[t for t, *_ in DTYPE_ENUMS])
def test_dtype_enum_matches_header(table, header, enum, prefix):
    from cudalibs import dtypes

    ours = {prefix + k: v for k, v in getattr(dtypes, table).items()}
    theirs = H.parse(header).enum(enum)
    _fail(H.check_enum(ours, theirs, exact=False), f"dtypes.{table} differs from {enum} in {header}")


# --------------------------------------------------------------------------------------------
# The checker checks: deliberately wrong bindings are reported
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cuda_h():
    return H.load(("cuda.h",))


CUdeviceptr = c_uint64
CUstream = POINTER(type("CUstream_st", (Structure,), {"_fields_": []}))


def test_headers_found():
    dirs = H.include_dirs()
    assert any(os.path.isfile(os.path.join(d, "cuda.h")) for d in dirs), dirs
    assert os.path.isfile(os.path.join(H.builtin_include_dir(), "stddef.h"))


def test_parse_errors_raise():
    with pytest.raises(H.HeaderParseError, match="no_such_header_cudalibs"):
        H.parse("no_such_header_cudalibs.h")


def test_header_views():
    h = H.parse("cuda.h")
    # the declared name is the one after macro expansion; the macro is visible too
    assert "cuMemAlloc_v2" in h.functions and "cuMemAlloc" not in h.functions
    assert h.macros["cuMemAlloc"] == "cuMemAlloc_v2"
    assert h.enum_constants["CUDA_ERROR_OUT_OF_MEMORY"] == 2
    assert h.macro_values["CU_MEMHOSTALLOC_DEVICEMAP"] == 2
    size, fields = h.struct("CUmemLocation_st")
    assert size == 8 and [(f.name, f.offset) for f in fields][:2] == [("type", 0), ("id", 4)]
    # CUDA 13.5 made id one alternative of a union; every other member shares its bytes
    assert all(f.offset == 4 for f in fields[2:])
    # a typedef name finds the record it names
    assert h.struct("CUmemLocation") == h.struct("CUmemLocation_st")
    assert H.parse("cublas_v2.h").macros["cublasCreate"] == "cublasCreate_v2"


def test_unversioned_cublas_name_is_reported():
    hs = H.load(_with_umbrellas(("cublas_api.h",)))
    _one(H.check_proto(Proto("cublasCreate", c_int, [c_void_p]), hs),
         "#define cublasCreate cublasCreate_v2")
    assert H.check_proto(Proto("cublasCreate_v2", c_int, [POINTER(c_void_p)]), hs) == []


def test_correct_row_passes(cuda_h):
    assert H.check_proto(Proto("cuMemAlloc_v2", c_int, [POINTER(CUdeviceptr), c_size_t]), cuda_h) == []
    # an enum parameter may be c_int or c_uint
    for enum_as in (c_int, c_uint):
        row = Proto("cuDeviceGetAttribute", c_int, [POINTER(c_int), enum_as, c_int])
        assert H.check_proto(row, cuda_h) == []


def _one(problems, *needles):
    text = "\n".join(problems)
    assert problems, "the checker accepted a wrong row"
    for n in needles:
        assert n in text, f"{n!r} not in report:\n{text}"


def test_c_int_for_size_t_is_reported(cuda_h):
    _one(H.check_proto(Proto("cuMemAlloc_v2", c_int, [POINTER(CUdeviceptr), c_int]), cuda_h),
         "argument 1 (bytesize)", "size_t", "c_int", "C signature: CUresult cuMemAlloc_v2(")


def test_signedness_is_reported(cuda_h):
    # size_t bound as ssize_t: same size, wrong sign
    _one(H.check_proto(Proto("cuMemAlloc_v2", c_int, [POINTER(CUdeviceptr), c_ssize_t]), cuda_h),
         "argument 1", "uint64", "int64")
    # unsigned char bound as signed (c_byte) or as plain char (c_char)
    for wrong in (c_byte, c_char):
        row = Proto("cuMemsetD8Async", c_int, [CUdeviceptr, wrong, c_size_t, CUstream])
        _one(H.check_proto(row, cuda_h), "argument 1 (uc)", "unsigned char")


def test_missing_argument_is_reported(cuda_h):
    _one(H.check_proto(Proto("cuMemAlloc_v2", c_int, [POINTER(CUdeviceptr)]), cuda_h),
         "argument count: C has 2, the row has 1")


def test_unversioned_name_is_reported(cuda_h):
    _one(H.check_proto(Proto("cuMemAlloc", c_int, [POINTER(CUdeviceptr), c_size_t]), cuda_h),
         "#define cuMemAlloc cuMemAlloc_v2")


def test_pointer_integer_confusion_is_reported(cuda_h):
    # CUdeviceptr is an integer, not a pointer ...
    _one(H.check_proto(Proto("cuMemFree_v2", c_int, [c_void_p]), cuda_h), "argument 0 (dptr)")
    # ... and void * is a pointer, not an integer
    _one(H.check_proto(Proto("cuMemFreeHost", c_int, [c_uint64]), cuda_h), "argument 0 (p)")
    # an enum is a 4-byte integer, not an 8-byte one
    row = Proto("cuDeviceGetAttribute", c_int, [POINTER(c_int), c_int64, c_int])
    _one(H.check_proto(row, cuda_h), "argument 1 (attrib)", "enum(4)")


def test_wrong_return_and_unknown_name_are_reported(cuda_h):
    _one(H.check_proto(Proto("cuInit", None, [c_uint]), cuda_h), "return:")
    _one(H.check_proto(Proto("cuNoSuchFunction", c_int, []), cuda_h), "not declared")


def test_wrong_struct_is_reported(cuda_h):
    class Good(Structure):
        _fields_ = [("type", c_int), ("id", c_int)]

    class WrongType(Structure):
        _fields_ = [("type", c_int), ("id", c_int64)]

    class Missing(Structure):
        _fields_ = [("type", c_int)]

    class Nested(Structure):  # a member struct is compared recursively
        _fields_ = [("allocType", c_int), ("handleTypes", c_int), ("location", WrongType),
                    ("win32SecurityAttributes", c_void_p), ("maxSize", c_size_t),
                    ("usage", c_ushort), ("reserved", c_ubyte * 54)]

    assert H.check_struct(Good, "CUmemLocation_st", cuda_h) == []
    _one(H.check_struct(WrongType, "CUmemLocation_st", cuda_h), "sizeof is 16 in ctypes, 8 in C",
         "WrongType (struct CUmemLocation_st).id")
    _one(H.check_struct(Missing, "CUmemLocation_st", cuda_h), "C member id is missing")
    _one(H.check_struct(Nested, "CUmemPoolProps_st", cuda_h), "CUmemLocation_st).id")


def test_status_table_mismatches_are_reported():
    theirs = {"OK": 0, "BAD": 1, "NEW_NAME": 2, "OLD_NAME": 2, "COUNT": 3}
    assert H.check_status({0: "OK", 1: "BAD", 2: "NEW_NAME"}, theirs, {"OLD_NAME"}, {"COUNT"}) == []
    _one(H.check_status({0: "OK", 2: "OLD_NAME"}, theirs, {"OLD_NAME"}),
         "2 OLD_NAME: deprecated alias")
    _one(H.check_status({0: "OK", 1: "WRONG", 2: "NEW_NAME"}, theirs), "the header calls 1 BAD")
    # a name the header gives another value is wrong, whatever else the header has
    _one(H.check_status({0: "OK", 7: "BAD"}, theirs), "7 BAD: the header says BAD = 1")
    # the enum's count is not a status to carry
    _one(H.check_status({3: "COUNT"}, theirs, sentinels={"COUNT"}), "not a status")


def test_newer_and_older_status_headers():
    ours = {0: "OK", 1: "BAD", 2: "NEWER"}
    older = {"OK": 0, "BAD": 1, "COUNT": 2}  # predates NEWER, whose value was its count
    newer = {"OK": 0, "BAD": 1, "NEWER": 2, "NEWEST": 3, "COUNT": 4}
    # a status newer than the header is fine, and so is one the header adds ...
    assert H.check_status(ours, older, sentinels={"COUNT"}) == []
    assert H.check_status(ours, newer, sentinels={"COUNT"}) == []
    # ... which is news, not a failure
    assert H.missing_statuses(ours, newer, {"COUNT"}) == ["3 NEWEST"]
    assert H.missing_statuses(ours, older, {"COUNT"}) == []
    # but a status we carry whose value the newer header changed is reported
    _one(H.check_status(ours, {"OK": 0, "BAD": 5, "NEWER": 2}), "1 BAD: the header says BAD = 5")


# An "older" header the bindings below target, and the "newer" one a later release ships: each
# change is one the vendors make (a union alternative, reserved bytes given a meaning, a member
# appended to a versioned struct), and the checker must pass them where the ABI allows.
_OLDER_H = """
typedef struct loc_st { int type; int id; } loc;
typedef struct props_st { int kind; loc where; unsigned short usage;
                          unsigned char reserved[6]; } props;
typedef struct cfg_v1 { unsigned long size; int a; int b; } cfg_t;
"""
_NEWER_H = """
typedef struct loc_st { int type;
                        union { int id; struct { unsigned char dev, dom; } localized; }; } loc;
typedef struct props_st { int kind; loc where; unsigned short usage; unsigned char rdma;
                          unsigned char reserved[5]; } props;
typedef struct cfg_v2 { unsigned long size; int a; int b; int c; int d; } cfg_t;
typedef struct shifted_st { int type; int inserted; int id; } shifted;
typedef struct hole_st { char a; short added; int b; } hole;
"""


class _Loc(Structure):
    _fields_ = [("type", c_int), ("id", c_int)]


class _Props(Structure):
    _fields_ = [("kind", c_int), ("where", _Loc), ("usage", c_ushort),
                ("reserved", c_ubyte * 6)]


class _Cfg(Structure):
    _fields_ = [("size", ctypes.c_ulong), ("a", c_int), ("b", c_int)]


@pytest.fixture(scope="module")
def older_newer():
    return (H.HeaderSet([H.parse_source("older.h", _OLDER_H)]),
            H.HeaderSet([H.parse_source("newer.h", _NEWER_H)]))


def test_compatible_additions_pass(older_newer):
    older, newer = older_newer
    for hs in (older, newer):
        assert H.check_struct(_Loc, "loc_st", hs) == []       # union alternative of id
        assert H.check_struct(_Props, "props_st", hs) == []   # rdma carved from reserved
    # a versioned struct found through its typedef: appended members pass with grows=True ...
    assert H.check_struct(_Cfg, "cfg_t", older) == []
    assert H.check_struct(_Cfg, "cfg_t", newer, grows=True) == []
    # ... and only then: embedded, in an array or written by the library, the sizes must agree
    _one(H.check_struct(_Cfg, "cfg_t", newer), "sizeof is 16 in ctypes, 24 in C",
         "C member c is missing")


def test_incompatible_changes_fail(older_newer):
    _older, newer = older_newer

    class Shifted(Structure):  # the header inserted a member before one of ours
        _fields_ = [("type", c_int), ("id", c_int)]

    _one(H.check_struct(Shifted, "shifted_st", newer), "Shifted (struct shifted_st).id: offset 4",
         "C member inserted is missing")

    class Hole(Structure):  # a member where we have no bytes of our own (alignment padding)
        _fields_ = [("a", c_char), ("b", c_int)]

    _one(H.check_struct(Hole, "hole_st", newer), "C member added is missing")

    class Bigger(Structure):  # ours longer than the header's, even for a growing struct
        _fields_ = [("size", ctypes.c_ulong), ("a", c_int), ("b", c_int), ("c", c_int),
                    ("d", c_int), ("e", c_int), ("f", c_int)]

    _one(H.check_struct(Bigger, "cfg_t", newer, grows=True), "sizeof is 32 in ctypes, 24 in C",
         "_fields_ has e")

    class WrongCfg(Structure):  # a prefix whose member changed type is no prefix
        _fields_ = [("size", ctypes.c_ulong), ("a", c_int64)]

    _one(H.check_struct(WrongCfg, "cfg_t", newer, grows=True), "WrongCfg (struct cfg_t).a")


def test_enum_table_mismatches_are_reported():
    _one(H.check_enum({"A": 1, "B": 3}, {"A": 1, "B": 2, "C": 4}, exact=True),
         "B = 3: the header says 2", "C = 4: in the header, missing here")
    _one(H.check_enum({"Z": 1}, {"A": 1}, exact=False), "Z = 1: not in the header")


@pytest.mark.parametrize("ctype, kind", [
    (None, ("void",)),
    (c_void_p, ("pointer",)), (c_char_p, ("pointer",)), (POINTER(c_int), ("pointer",)),
    (CFUNCTYPE(None, c_int), ("pointer",)), (CUstream, ("pointer",)),
    (c_int, ("int", 4, True)), (c_uint, ("int", 4, False)), (c_int32, ("int", 4, True)),
    (c_uint32, ("int", 4, False)), (c_int64, ("int", 8, True)), (c_uint64, ("int", 8, False)),
    (c_longlong, ("int", 8, True)), (c_size_t, ("int", ctypes.sizeof(c_size_t), False)),
    (c_ubyte, ("int", 1, False)), (c_byte, ("int", 1, True)), (c_ushort, ("int", 2, False)),
    (c_char, ("char", 1)), (c_float, ("float", 4)), (c_double, ("float", 8)),
    (c_char * 16, ("array", ("char", 1), 16)),
])
def test_ctypes_classifier(ctype, kind):
    assert H.ctypes_kind(ctype) == kind


def test_struct_classifier():
    class S(Structure):
        _fields_ = [("a", c_int), ("b", c_void_p)]

    assert H.ctypes_kind(S) == ("record", 16)
    assert H.kinds_match(("enum", 4), ("int", 4, False))
    assert not H.kinds_match(("enum", 4), ("int", 8, True))
    assert not H.kinds_match(("int", 8, False), ("pointer",))
