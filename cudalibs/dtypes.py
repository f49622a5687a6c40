"""One table of element types, shared by every library binding.

Each row ties a numpy dtype (bfloat16 and float8 through ``ml_dtypes``) to its enum in every
CUDA library that knows it: ``cudaDataType`` (cuBLAS, cuBLASLt), the default
``cublasComputeType_t`` for a GEMM in it, ``cudnnDataType_t``, ``ncclDataType_t`` and the DLPack
type code.  ``None`` means the library has no such type.  The enum values are the vendor's; a
CPU test checks each against the headers shipped in the NVIDIA wheels.
"""

from __future__ import annotations

import dataclasses

import numpy as np

try:
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - ml_dtypes is a dependency; keep numpy types usable
    _ml = None

__all__ = ["DType", "TABLE", "lookup", "from_dlpack_code", "from_typestr", "bfloat16",
           "float8_e4m3fn", "float8_e5m2", "CUDA_R", "COMPUTE", "CUDNN", "NCCL", "DLPACK"]

# cudaDataType_t (library_types.h)
CUDA_R = dict(R_16F=2, C_16F=6, R_16BF=14, C_16BF=15, R_32F=0, C_32F=4, R_64F=1, C_64F=5,
              R_8I=3, C_8I=7, R_8U=8, C_8U=9, R_32I=10, C_32I=11, R_64I=24, R_8F_E4M3=28,
              R_8F_E5M2=29)
# cublasComputeType_t (cublas_api.h)
COMPUTE = dict(COMPUTE_16F=64, COMPUTE_16F_PEDANTIC=65, COMPUTE_32F=68, COMPUTE_32F_PEDANTIC=69,
               COMPUTE_32F_FAST_16F=74, COMPUTE_32F_FAST_16BF=75, COMPUTE_32F_FAST_TF32=77,
               COMPUTE_64F=70, COMPUTE_64F_PEDANTIC=71, COMPUTE_32I=72, COMPUTE_32I_PEDANTIC=73)
# cudnnDataType_t (cudnn_graph.h)
CUDNN = dict(FLOAT=0, DOUBLE=1, HALF=2, INT8=3, INT32=4, UINT8=6, BFLOAT16=9, INT64=10,
             BOOLEAN=11, FP8_E4M3=12, FP8_E5M2=13)
# ncclDataType_t (nccl.h)
NCCL = dict(Int8=0, Uint8=1, Int32=2, Uint32=3, Int64=4, Uint64=5, Float16=6, Float32=7,
            Float64=8, Bfloat16=9, Float8e4m3=10, Float8e5m2=11)
# DLDataTypeCode (dlpack.h)
DLPACK = dict(Int=0, UInt=1, Float=2, Bfloat=4, Complex=5, Bool=6, Float8_e4m3fn=10,
              Float8_e5m2=12)

bfloat16 = np.dtype(_ml.bfloat16) if _ml else None
float8_e4m3fn = np.dtype(_ml.float8_e4m3fn) if _ml else None
float8_e5m2 = np.dtype(_ml.float8_e5m2) if _ml else None


@dataclasses.dataclass(frozen=True)
class DType:
    """One element type and its enum in each CUDA library.

    Attributes
    ----------
    name : str
        numpy's name (``"float32"``, ``"bfloat16"``).
    numpy : numpy.dtype
    cuda : int or None
        ``cudaDataType_t``.
    compute : int or None
        The ``cublasComputeType_t`` a GEMM in this type uses by default.
    cudnn : int or None
        ``cudnnDataType_t``.
    nccl : int or None
        ``ncclDataType_t``.
    dlpack : tuple of (int, int)
        DLPack ``(code, bits)``.
    """

    name: str
    numpy: np.dtype
    cuda: int | None
    compute: int | None
    cudnn: int | None
    nccl: int | None
    dlpack: tuple[int, int]

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize


def _rows():
    f = DLPACK
    rows = [
        ("float64", np.dtype(np.float64), CUDA_R["R_64F"], COMPUTE["COMPUTE_64F"], CUDNN["DOUBLE"], NCCL["Float64"], (f["Float"], 64)),
        ("float32", np.dtype(np.float32), CUDA_R["R_32F"], COMPUTE["COMPUTE_32F"], CUDNN["FLOAT"], NCCL["Float32"], (f["Float"], 32)),
        ("float16", np.dtype(np.float16), CUDA_R["R_16F"], COMPUTE["COMPUTE_32F"], CUDNN["HALF"], NCCL["Float16"], (f["Float"], 16)),
        ("int8", np.dtype(np.int8), CUDA_R["R_8I"], COMPUTE["COMPUTE_32I"], CUDNN["INT8"], NCCL["Int8"], (f["Int"], 8)),
        ("uint8", np.dtype(np.uint8), CUDA_R["R_8U"], None, CUDNN["UINT8"], NCCL["Uint8"], (f["UInt"], 8)),
        ("int32", np.dtype(np.int32), CUDA_R["R_32I"], COMPUTE["COMPUTE_32I"], CUDNN["INT32"], NCCL["Int32"], (f["Int"], 32)),
        ("uint32", np.dtype(np.uint32), None, None, None, NCCL["Uint32"], (f["UInt"], 32)),
        ("int64", np.dtype(np.int64), CUDA_R["R_64I"], None, CUDNN["INT64"], NCCL["Int64"], (f["Int"], 64)),
        ("uint64", np.dtype(np.uint64), None, None, None, NCCL["Uint64"], (f["UInt"], 64)),
        ("int16", np.dtype(np.int16), None, None, None, None, (f["Int"], 16)),
        ("uint16", np.dtype(np.uint16), None, None, None, None, (f["UInt"], 16)),
        ("bool", np.dtype(np.bool_), None, None, CUDNN["BOOLEAN"], None, (f["Bool"], 8)),
        ("complex64", np.dtype(np.complex64), CUDA_R["C_32F"], COMPUTE["COMPUTE_32F"], None, None, (f["Complex"], 64)),
        ("complex128", np.dtype(np.complex128), CUDA_R["C_64F"], COMPUTE["COMPUTE_64F"], None, None, (f["Complex"], 128)),
    ]
    if _ml is not None:
        rows += [
            ("bfloat16", bfloat16, CUDA_R["R_16BF"], COMPUTE["COMPUTE_32F"], CUDNN["BFLOAT16"], NCCL["Bfloat16"], (f["Bfloat"], 16)),
            ("float8_e4m3fn", float8_e4m3fn, CUDA_R["R_8F_E4M3"], COMPUTE["COMPUTE_32F"], CUDNN["FP8_E4M3"], NCCL["Float8e4m3"], (f["Float8_e4m3fn"], 8)),
            ("float8_e5m2", float8_e5m2, CUDA_R["R_8F_E5M2"], COMPUTE["COMPUTE_32F"], CUDNN["FP8_E5M2"], NCCL["Float8e5m2"], (f["Float8_e5m2"], 8)),
        ]
    return {r[1]: DType(*r) for r in rows}


#: Every supported element type, keyed by numpy dtype.
TABLE: dict[np.dtype, DType] = _rows()
_BY_DLPACK = {row.dlpack: row for row in TABLE.values()}


def lookup(dtype, what: str = "dtype") -> DType:
    """The :class:`DType` row for anything ``numpy.dtype()`` accepts (or a ``DType``).

    ``what`` names the argument in messages, as the caller's own messages do
    (``"view: dtype"``).

    Raises
    ------
    TypeError
        ``dtype`` is None (``numpy.dtype(None)`` means float64, a default no caller should get
        by accident), or the type is not one cudalibs moves to or from a GPU (object, string,
        non-native byte order, structured types).
    """
    if isinstance(dtype, DType):
        return dtype
    if dtype is None:
        raise TypeError(f"{what} is None: pass an element type such as numpy.float32 (None is "
                        "not taken to mean float64 here, as numpy.dtype(None) would)")
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{what} {dtype!r} is not a numpy dtype") from None
    row = TABLE.get(dt)
    if row is None:
        if dt.byteorder not in "=|" and dt.newbyteorder("=") in TABLE:
            raise TypeError(f"{what} {dt!r} has non-native byte order; convert with "
                            f"astype({dt.newbyteorder('=')!r}) first")
        raise TypeError(f"{what} {dt} is not supported; supported: "
                        f"{', '.join(sorted(r.name for r in TABLE.values()))}")
    return row


def from_dlpack_code(code: int, bits: int, lanes: int = 1) -> DType:
    """The row for a DLPack ``(code, bits, lanes)`` triple.

    Parameters
    ----------
    code, bits, lanes : int
        ``DLDataType``'s type code (``kDLFloat`` 2, ``kDLBfloat`` 4, ...), width and lanes.

    Returns
    -------
    DType
        The row of :data:`TABLE` whose ``dlpack`` pair is ``(code, bits)``.

    Raises
    ------
    TypeError
        A vector type (``lanes != 1``) or a type with no row here.
    """
    if lanes != 1:
        raise TypeError(f"DLPack vector types (lanes={lanes}) are not supported")
    row = _BY_DLPACK.get((code, bits))
    if row is None:
        raise TypeError(f"DLPack dtype code={code} bits={bits} has no numpy equivalent here")
    return row


def from_typestr(typestr: str) -> DType:
    """The row for a ``__cuda_array_interface__`` typestr such as ``"<f4"``.

    Parameters
    ----------
    typestr : str
        The interface's ``typestr``.

    Returns
    -------
    DType
        What :func:`lookup` gives for ``numpy.dtype(typestr)``.

    Raises
    ------
    TypeError
        ``"<V2"``, which a producer uses for bfloat16 and float16 alike, or a type with no row.
    """
    if typestr[1:] == "V2" or typestr == "|V2":
        # CAI has no bfloat16 code; producers (torch) export it as 2-byte void.
        raise TypeError("2-byte void typestr is ambiguous (bfloat16 or float16?); "
                        "exchange bfloat16 arrays through DLPack instead")
    return lookup(np.dtype(typestr))


def __dir__() -> list[str]:
    """The public names (:data:`__all__`) and the module's dunders: tab completion offers
    what this module is for, not the modules it imports (``np``, ``dataclasses``)."""
    return sorted(set(__all__) | {n for n in globals() if n.startswith("__") and n.endswith("__")})
