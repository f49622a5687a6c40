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

The headers compared with are those of the loaded libraries: CUDA 12's for the ``cu12``
wheels (``test_headers_are_those_of_the_loaded_libraries``; a check whose headers are of
another major version than its library is skipped with that reason, and fails under CI).
Against a header older than the release .ci/constraints.txt pins, what the bindings carry
beyond it (a device attribute, a math mode, a union member CUDA 13 added) is reported as a
warning instead of a failure; a value that collides with the header's still fails.

A prototype table module that cannot be imported fails here (it is never skipped): a missing
table would otherwise pass silently.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import sys
import warnings
from ctypes import (CFUNCTYPE, POINTER, Structure, c_byte, c_char, c_char_p, c_double, c_float,
                    c_int, c_int32, c_int64, c_longlong, c_size_t, c_ssize_t, c_ubyte, c_uint,
                    c_uint32, c_uint64, c_ushort, c_void_p)
from typing import NamedTuple

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
    ("cudalibs.cufft._lib", "TABLE", "HEADERS"),
    ("cudalibs.cusparse._lib", "TABLE", "HEADERS"),
]
MODULES = list(dict.fromkeys(mod for mod, _, _ in TABLES))
HEADER_ATTRS = ("HEADERS", "LT_HEADERS")

# Module-level integers named with these prefixes are vendor constants and must match the header.
VENDOR_PREFIXES = ("CU_", "CUDA_", "NVRTC_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "nccl", "NCCL_",
                   "CUFFT_", "CUSPARSE_")

# Headers whose versioning macros live in an umbrella header the module may not name:
# cublas_api.h declares cublasCreate_v2, but "#define cublasCreate cublasCreate_v2" is in
# cublas_v2.h.  Parsing the umbrella as well lets the unversioned-name check see the macro.
UMBRELLA = {"cublas_api.h": "cublas_v2.h"}


# --------------------------------------------------------------------------------------------
# Which release a header is of, which release the bindings follow, which library is loaded
# --------------------------------------------------------------------------------------------

class Release(NamedTuple):
    """Where a header's release is read, and how the pinned wheel's version encodes as it."""

    header: str         # the header defining the macro
    macro: str          # the release as one integer (CUDA_VERSION: 13000 for 13.0)
    dist: str           # the wheel .ci/constraints.txt pins for it
    scale: tuple        # weights of (major, minor, patch) in the macro's integer
    library: str        # the library the header belongs to, as the loader names it


_CUDA = Release("cuda.h", "CUDA_VERSION", "nvidia-cuda-runtime", (1000, 10, 0), "cuda")
RELEASES = {
    "cuda.h": _CUDA,
    "library_types.h": _CUDA,
    "nvrtc.h": _CUDA._replace(library="nvrtc"),
    "cublas_api.h": Release("cublas_api.h", "CUBLAS_VERSION", "nvidia-cublas",
                            (10000, 100, 1), "cublas"),
    "cudnn.h": Release("cudnn.h", "CUDNN_VERSION", "nvidia-cudnn-cu13", (10000, 100, 1),
                       "cudnn"),
    "nccl.h": Release("nccl.h", "NCCL_VERSION_CODE", "nvidia-nccl-cu13", (10000, 100, 1),
                      "nccl"),
    # cuFFT's own release (12.0 in CUDA 13.0), encoded major * 1000 + minor * 100 + patch.
    "cufft.h": Release("cufft.h", "CUFFT_VERSION", "nvidia-cufft", (1000, 100, 1), "cufft"),
}
RELEASES["cufftXt.h"] = RELEASES["cufft.h"]
# cuSPARSE's own release (12.6 in CUDA 13.0), encoded major * 1000 + minor * 100 + patch.
RELEASES["cusparse.h"] = Release("cusparse.h", "CUSPARSE_VERSION", "nvidia-cusparse",
                                 (1000, 100, 1), "cusparse")
for _umbrella in ("cublas_v2.h", "cublasLt.h"):
    RELEASES[_umbrella] = RELEASES["cublas_api.h"]
for _part in ("cudnn_adv.h", "cudnn_graph.h", "cudnn_ops.h", "cudnn_cnn.h"):
    RELEASES[_part] = RELEASES["cudnn.h"]

CONSTRAINTS = os.path.join(_HERE, os.pardir, os.pardir, ".ci", "constraints.txt")


def _pins() -> dict[str, str]:
    """``{distribution: version}`` of .ci/constraints.txt (empty where the file is absent)."""
    pins = {}
    try:
        with open(CONSTRAINTS, encoding="utf-8") as f:
            for line in f:
                name, sep, version = line.split("#", 1)[0].strip().partition("==")
                if sep:
                    pins[name.strip().lower()] = version.strip()
    except OSError:
        pass
    return pins


def header_release(header: str) -> int:
    """The release of the installed ``header`` as its version macro says (12090: CUDA 12.9)."""
    rel = RELEASES[header]
    value = H.parse(rel.header).integer(rel.macro)
    assert value is not None, f"{rel.header} defines no integer {rel.macro}"
    return value


def header_major(header: str) -> int:
    """The major version of the installed ``header``'s release."""
    return header_release(header) // RELEASES[header].scale[0]


def followed_release(header: str) -> int | None:
    """The release the bindings of ``header`` follow, in its macro's encoding: the version
    .ci/constraints.txt pins (the GPU test machine's), which the strict checks hold them to."""
    rel = RELEASES[header]
    version = _pins().get(rel.dist)
    if version is None:
        return None
    parts = [int(p) for p in version.split(".")[:3] if p.isdigit()]
    return sum(p * w for p, w in zip(parts, rel.scale))


def is_older(header: str) -> bool:
    """Whether the installed ``header`` is of a release before the one the bindings follow: a
    name the bindings carry and it lacks is then a later addition, not a wrong binding."""
    followed = followed_release(header)
    return followed is not None and header_release(header) < followed


def loaded_major(library: str) -> int | None:
    """The major version of the loaded ``library`` (``"cuda"``: the toolkit of the loaded
    cuBLAS or NVRTC, as the driver itself may be absent), or ``None`` where it does not load."""
    if library == "cuda":
        return H.loaded_cuda_major()
    try:
        if library == "nvrtc":
            from cudalibs.driver import nvrtc
            return nvrtc.version()[0]
        mod = importlib.import_module(f"cudalibs.{library}")
        return mod.version()[0]
    except Exception:  # noqa: BLE001 - not installed: nothing to match the headers with
        return None


@functools.lru_cache(maxsize=None)
def header_mismatch(header: str) -> str | None:
    """Why the installed ``header`` does not describe the loaded library (another major
    version), or ``None`` when it does or no such library loads."""
    rel = RELEASES[header]
    theirs = loaded_major(rel.library)
    mine = header_major(header)
    if theirs is None or theirs == mine:
        return None
    return (f"the {header} found is of major version {mine} ({rel.macro} "
            f"{header_release(header)}), the loaded {rel.library} of {theirs}: no headers of "
            f"the installed libraries were found in {', '.join(H.include_dirs())}")


def require_matching(headers) -> None:
    """Skip (fail under CI) a check whose headers are not those of the loaded libraries:
    comparing the bindings with another major version's declarations would report
    differences that are no error of theirs."""
    for header in headers:
        why = header_mismatch(header)
        if why is not None:
            if os.environ.get("CI"):
                pytest.fail(why, pytrace=False)
            pytest.skip(why)


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
    require_matching(getattr(module, hdrs))
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


def _struct_problems(cls, tag: str, hs, older: bool = False) -> list[str]:
    if tag in APPEND_ONLY:
        try:
            hs.struct(tag)
        except KeyError:
            # A later version of the struct: ours must be a prefix of it.
            return H.check_struct(cls, APPEND_ONLY[tag], hs, grows=True, older=older)
    return H.check_struct(cls, tag, hs, older=older)


def _older(module) -> bool:
    """Whether the module's headers are of a release before the one its bindings follow."""
    return is_older(module.HEADERS[0])


@pytest.mark.parametrize("mod", MODULES)
def test_structs_match_header(mod):
    module = _import(mod)
    structs = getattr(module, "STRUCTS", None)
    if not structs:
        return  # a module without by-value structs has nothing to compare
    require_matching(module.HEADERS)
    hs = H.load(_module_headers(module))
    problems: list[str] = []
    for cls, tag in structs.items():
        problems += _struct_problems(cls, tag, hs, _older(module))
    _fail(problems, f"{mod}.STRUCTS differ from {', '.join(hs.names)}")


def _vendor_constants(module) -> dict[str, int]:
    return {name: value for name, value in vars(module).items()
            if name.startswith(VENDOR_PREFIXES) and isinstance(value, int)
            and not isinstance(value, bool)}


@pytest.mark.parametrize("mod", MODULES)
def test_constants_match_header(mod):
    module = _import(mod)
    require_matching(module.HEADERS)
    hs = H.load(_module_headers(module))
    older = _older(module)
    problems, later = [], []
    for name, value in sorted(_vendor_constants(module).items()):
        theirs = hs.integer(name)
        if theirs is None and older:
            later.append(f"{name} = {value}")
        elif theirs is None:
            problems.append(f"{name} = {value}: no enum constant or integer macro of that name")
        elif theirs != value:
            problems.append(f"{name} = {value}: the header says {theirs}")
    _fail(problems, f"{mod} constants differ from {', '.join(hs.names)}")
    _news(f"{', '.join(hs.names)} predate these constants of {mod}", later)


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
    ("CufftError", "cufft.h", "cufftResult"),
    ("CusparseError", "cusparse.h", "cusparseStatus_t"),
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
    require_matching((header,))
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
    require_matching(("cuda.h",))
    theirs = H.parse("cuda.h").enum("CUdevice_attribute")
    older = is_older("cuda.h")
    # Every attribute we name must have its value; attributes a newer header adds are news,
    # and so are those an older header predates (unless it gives their value to another).
    _fail(H.check_enum(ours, theirs, exact=False, ignore={prefix + "MAX"}, older=older),
          "driver._lib.DEVICE_ATTRIBUTES differs from CUdevice_attribute in cuda.h")
    _news("CUdevice_attribute in cuda.h has attributes DEVICE_ATTRIBUTES does not name yet",
          [f"{k} = {v}" for k, v in sorted(theirs.items(), key=lambda kv: kv[1])
           if k not in ours and k != prefix + "MAX"])
    if older:
        _news("cuda.h predates these DEVICE_ATTRIBUTES", H.later_additions(ours, theirs))


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
    require_matching((header,))
    theirs = H.parse(header).enum(enum)
    older = is_older(header)
    _fail(H.check_enum(ours, theirs, exact=False, older=older),
          f"dtypes.{table} differs from {enum} in {header}")
    if older:
        _news(f"{enum} in {header} predates these entries of dtypes.{table}",
              H.later_additions(ours, theirs))


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


@pytest.mark.parametrize("header", ["cuda.h", "nvrtc.h", "cublas_api.h", "cudnn.h", "nccl.h",
                                    "cufft.h", "cusparse.h"])
def test_headers_are_those_of_the_loaded_libraries(header):
    # What the checks compare with must be the loaded library's own declarations: CUDA 12's
    # headers for the cu12 wheels, though the test extra installs CUDA 13's crt/ beside them.
    assert header_mismatch(header) is None, header_mismatch(header)


def test_every_release_the_bindings_follow_is_pinned():
    # A renamed pin would make every header "not older" and hide nothing, but a pin gone
    # would make the strict checks lenient nowhere and strict nowhere: each must be there.
    for header, rel in RELEASES.items():
        followed = followed_release(header)
        assert followed is not None, f"{CONSTRAINTS} pins no {rel.dist} (for {header})"
        assert followed // rel.scale[0] >= 1


def test_header_majors_of_wheels():
    assert H.dist_cuda_major("nvidia-cudnn-cu12", "9.28.0.42") == 12
    assert H.dist_cuda_major("nvidia-nccl-cu13", "2.28.9") == 13
    assert H.dist_cuda_major("nvidia-cuda-crt", "13.5.37") == 13
    assert H.dist_cuda_major("nvidia-cublas", "13.1.0.3") == 13
    assert H.dist_cuda_major("nvidia-nccl", "2.28.9") is None   # a library's own version


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


def test_older_header_passes_later_additions_only():
    older = H.HeaderSet([H.parse_source("oldest.h", """
typedef union val_u { char pad[16]; int a; } val;
typedef struct rec_st { int a; int b; } rec;
""")])

    class Val(ctypes.Union):   # a later release's alternative, in the bytes of the pad
        _fields_ = [("pad", c_char * 16), ("a", c_int), ("later", c_uint)]

    class Rec(Structure):      # a later member where the older header has one of its own
        _fields_ = [("a", c_int), ("later", c_int)]

    _one(H.check_struct(Val, "val_u", older), "_fields_ has later")
    assert H.check_struct(Val, "val_u", older, older=True) == []
    _one(H.check_struct(Rec, "rec_st", older, older=True), "_fields_ has later",
         "C member b is missing")
    theirs = {"A": 1, "B": 2, "COUNT": 3}
    _one(H.check_enum({"A": 1, "NEW": 4}, theirs, exact=False), "NEW = 4: not in the header")
    assert H.check_enum({"A": 1, "NEW": 4}, theirs, exact=False, older=True) == []
    assert H.later_additions({"A": 1, "NEW": 4}, theirs) == ["NEW = 4"]
    # a value the older header gives another name is no later addition
    _one(H.check_enum({"A": 1, "NEW": 2}, theirs, exact=False, older=True),
         "NEW = 2: not in the header, which gives 2 to B")
    assert H.check_enum({"A": 1, "NEW": 3}, theirs, exact=False, ignore={"COUNT"},
                        older=True) == []


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
