"""Exceptions raised by cudalibs.

Everything derives from :class:`CudaLibsError` (a ``RuntimeError``).  A failed C call raises a
subclass of :class:`StatusError` carrying the library, the function called, the status code,
the vendor's name for it and the vendor's own message (``cuGetErrorString``,
``cudnnGetLastErrorString``, ``ncclGetLastError``, the NVRTC or JIT log).  All of them pickle,
so they cross process boundaries (multiprocessing, pytest-xdist) intact.

The status-name tables below are the vendor enums, verbatim, including statuses that only newer
libraries return (a newer driver or library may hand them to an older binding); a CPU test
compares each with the header shipped in the NVIDIA wheels, where that header has the status.
"""

from __future__ import annotations

__all__ = [
    "CudaLibsError",
    "LibraryNotFoundError",
    "FunctionNotFoundError",
    "ClosedError",
    "CaptureError",
    "StatusError",
    "CudaError",
    "CudaOutOfMemoryError",
    "NvrtcError",
    "CublasError",
    "CudnnError",
    "NcclError",
    "CufftError",
    "CusparseError",
]


def _status_table(text: str) -> dict[int, str]:
    table = {}
    for line in text.strip().splitlines():
        code, name = line.split()
        table[int(code)] = name
    return table


class CudaLibsError(RuntimeError):
    """Root of every exception cudalibs raises on its own account."""


class LibraryNotFoundError(CudaLibsError):
    """A shared library could not be found or loaded.

    Attributes
    ----------
    library : str
        Short name (``"cublas"``).
    tried : tuple of str
        Each place looked, with the reason it failed.
    hint : str
        What to install or set to fix it.
    """

    def __init__(self, library: str, tried=(), hint: str = ""):
        self.library = library
        self.tried = tuple(tried)
        self.hint = hint
        lines = [f"cannot load the {library} library"]
        for t in self.tried:
            # A reason may end in a newline or span lines (cuda.pathfinder's do): its first
            # line follows "tried", the others are indented under it, blank ones dropped.
            first, *more = [line.strip() for line in str(t).splitlines() if line.strip()] or [""]
            lines.append(f"  tried {first}")
            lines += [f"    {line}" for line in more]
        if hint and hint.strip():
            lines.append(f"  {hint.strip()}")
        super().__init__("\n".join(lines))

    def __reduce__(self):
        return (type(self), (self.library, self.tried, self.hint))


class FunctionNotFoundError(CudaLibsError):
    """The loaded library does not export a function cudalibs binds.

    Raised when the function is called, never at import, so a library older than the newest
    binding still serves everything it has.
    """

    def __init__(self, function: str, library: str, needs: str | None = None, path: str | None = None):
        self.function = function
        self.library = library
        self.needs = needs
        self.path = path
        msg = f"{function} is not exported by the loaded {library} library"
        if path:
            msg += f" ({path})"
        if needs:
            msg += f"; it needs {needs}"
        super().__init__(msg)

    def __reduce__(self):
        return (type(self), (self.function, self.library, self.needs, self.path))


class ClosedError(CudaLibsError, ValueError):
    """An object was used after ``close()`` (or after its parent was closed)."""


class CaptureError(CudaLibsError):
    """An operation that cannot be recorded into a CUDA graph was called while its thread was
    capturing one (a synchronisation, a read of device values on the host, a synchronous
    allocation, the timing of an autotune, the growth of a workspace).

    The message names the operation.  The usual remedy: run the captured work once before
    capturing it, so that plans are chosen and workspaces sized outside the capture.
    """


class StatusError(CudaLibsError):
    """A C function returned a failing status.

    Attributes
    ----------
    library : str
        ``"cuda"``, ``"nvrtc"``, ``"cublas"``, ``"cudnn"``, ``"nccl"``, ``"cufft"`` or
        ``"cusparse"``.
    status : int
        The raw status code.
    name : str
        The vendor's name for the status (``"CUDA_ERROR_OUT_OF_MEMORY"``).
    function : str or None
        The C function that returned it.
    message : str or None
        The vendor's description of the status.
    detail : str or None
        Further text from the library: last-error string, compiler or JIT log.
    """

    library = "?"
    _names: dict[int, str] = {}
    _subclasses: dict[int, type] = {}

    def __init__(self, status: int, function: str | None = None, message: str | None = None,
                 detail: str | None = None):
        self.status = int(status)
        self.name = self._names.get(self.status, f"unknown {self.library} status {self.status}")
        self.function = function
        self.message = message
        self.detail = detail
        super().__init__(self._format())

    def _format(self) -> str:
        where = f"{self.function}: " if self.function else ""
        text = f"{where}{self.name} ({self.status})"
        if self.message and self.message != self.name:
            text += f": {self.message}"
        if self.detail:
            text += f"\n{self.detail.rstrip()}"
        return text

    def __reduce__(self):
        return (type(self), (self.status, self.function, self.message, self.detail))

    @classmethod
    def from_status(cls, status: int, function: str | None = None, message: str | None = None,
                    detail: str | None = None) -> "StatusError":
        """The most specific class for ``status`` (for example :class:`CudaOutOfMemoryError`)."""
        return cls._subclasses.get(int(status), cls)(status, function, message, detail)

    @classmethod
    def status_names(cls) -> dict[int, str]:
        """Every status code of this library, with its vendor name."""
        return dict(cls._names)


# CUresult (cuda.h; 47, 227 and 917-919 from CUDA 13.5 on)
_CUDA_STATUS = _status_table(
    """
    0 CUDA_SUCCESS
    1 CUDA_ERROR_INVALID_VALUE
    2 CUDA_ERROR_OUT_OF_MEMORY
    3 CUDA_ERROR_NOT_INITIALIZED
    4 CUDA_ERROR_DEINITIALIZED
    5 CUDA_ERROR_PROFILER_DISABLED
    6 CUDA_ERROR_PROFILER_NOT_INITIALIZED
    7 CUDA_ERROR_PROFILER_ALREADY_STARTED
    8 CUDA_ERROR_PROFILER_ALREADY_STOPPED
    34 CUDA_ERROR_STUB_LIBRARY
    36 CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER
    46 CUDA_ERROR_DEVICE_UNAVAILABLE
    47 CUDA_ERROR_MULTICAST_RESOURCE_FULL
    100 CUDA_ERROR_NO_DEVICE
    101 CUDA_ERROR_INVALID_DEVICE
    102 CUDA_ERROR_DEVICE_NOT_LICENSED
    200 CUDA_ERROR_INVALID_IMAGE
    201 CUDA_ERROR_INVALID_CONTEXT
    202 CUDA_ERROR_CONTEXT_ALREADY_CURRENT
    205 CUDA_ERROR_MAP_FAILED
    206 CUDA_ERROR_UNMAP_FAILED
    207 CUDA_ERROR_ARRAY_IS_MAPPED
    208 CUDA_ERROR_ALREADY_MAPPED
    209 CUDA_ERROR_NO_BINARY_FOR_GPU
    210 CUDA_ERROR_ALREADY_ACQUIRED
    211 CUDA_ERROR_NOT_MAPPED
    212 CUDA_ERROR_NOT_MAPPED_AS_ARRAY
    213 CUDA_ERROR_NOT_MAPPED_AS_POINTER
    214 CUDA_ERROR_ECC_UNCORRECTABLE
    215 CUDA_ERROR_UNSUPPORTED_LIMIT
    216 CUDA_ERROR_CONTEXT_ALREADY_IN_USE
    217 CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
    218 CUDA_ERROR_INVALID_PTX
    219 CUDA_ERROR_INVALID_GRAPHICS_CONTEXT
    220 CUDA_ERROR_NVLINK_UNCORRECTABLE
    221 CUDA_ERROR_JIT_COMPILER_NOT_FOUND
    222 CUDA_ERROR_UNSUPPORTED_PTX_VERSION
    223 CUDA_ERROR_JIT_COMPILATION_DISABLED
    224 CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY
    225 CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC
    226 CUDA_ERROR_CONTAINED
    227 CUDA_ERROR_INSUFFICIENT_LOADER_VERSION
    300 CUDA_ERROR_INVALID_SOURCE
    301 CUDA_ERROR_FILE_NOT_FOUND
    302 CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND
    303 CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
    304 CUDA_ERROR_OPERATING_SYSTEM
    400 CUDA_ERROR_INVALID_HANDLE
    401 CUDA_ERROR_ILLEGAL_STATE
    402 CUDA_ERROR_LOSSY_QUERY
    500 CUDA_ERROR_NOT_FOUND
    600 CUDA_ERROR_NOT_READY
    700 CUDA_ERROR_ILLEGAL_ADDRESS
    701 CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    702 CUDA_ERROR_LAUNCH_TIMEOUT
    703 CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING
    704 CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
    705 CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
    708 CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE
    709 CUDA_ERROR_CONTEXT_IS_DESTROYED
    710 CUDA_ERROR_ASSERT
    711 CUDA_ERROR_TOO_MANY_PEERS
    712 CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    713 CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
    714 CUDA_ERROR_HARDWARE_STACK_ERROR
    715 CUDA_ERROR_ILLEGAL_INSTRUCTION
    716 CUDA_ERROR_MISALIGNED_ADDRESS
    717 CUDA_ERROR_INVALID_ADDRESS_SPACE
    718 CUDA_ERROR_INVALID_PC
    719 CUDA_ERROR_LAUNCH_FAILED
    720 CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
    721 CUDA_ERROR_TENSOR_MEMORY_LEAK
    800 CUDA_ERROR_NOT_PERMITTED
    801 CUDA_ERROR_NOT_SUPPORTED
    802 CUDA_ERROR_SYSTEM_NOT_READY
    803 CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
    804 CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
    805 CUDA_ERROR_MPS_CONNECTION_FAILED
    806 CUDA_ERROR_MPS_RPC_FAILURE
    807 CUDA_ERROR_MPS_SERVER_NOT_READY
    808 CUDA_ERROR_MPS_MAX_CLIENTS_REACHED
    809 CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED
    810 CUDA_ERROR_MPS_CLIENT_TERMINATED
    811 CUDA_ERROR_CDP_NOT_SUPPORTED
    812 CUDA_ERROR_CDP_VERSION_MISMATCH
    900 CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    901 CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    902 CUDA_ERROR_STREAM_CAPTURE_MERGE
    903 CUDA_ERROR_STREAM_CAPTURE_UNMATCHED
    904 CUDA_ERROR_STREAM_CAPTURE_UNJOINED
    905 CUDA_ERROR_STREAM_CAPTURE_ISOLATION
    906 CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    907 CUDA_ERROR_CAPTURED_EVENT
    908 CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD
    909 CUDA_ERROR_TIMEOUT
    910 CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
    911 CUDA_ERROR_EXTERNAL_DEVICE
    912 CUDA_ERROR_INVALID_CLUSTER_SIZE
    913 CUDA_ERROR_FUNCTION_NOT_LOADED
    914 CUDA_ERROR_INVALID_RESOURCE_TYPE
    915 CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION
    916 CUDA_ERROR_KEY_ROTATION
    917 CUDA_ERROR_STREAM_DETACHED
    918 CUDA_ERROR_GRAPH_RECAPTURE_FAILURE
    919 CUDA_ERROR_FABRIC_NOT_READY
    999 CUDA_ERROR_UNKNOWN
    """
)


# nvrtcResult (nvrtc.h; 18 from CUDA 13.5 on)
_NVRTC_STATUS = _status_table(
    """
    0 NVRTC_SUCCESS
    1 NVRTC_ERROR_OUT_OF_MEMORY
    2 NVRTC_ERROR_PROGRAM_CREATION_FAILURE
    3 NVRTC_ERROR_INVALID_INPUT
    4 NVRTC_ERROR_INVALID_PROGRAM
    5 NVRTC_ERROR_INVALID_OPTION
    6 NVRTC_ERROR_COMPILATION
    7 NVRTC_ERROR_BUILTIN_OPERATION_FAILURE
    8 NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION
    9 NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION
    10 NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID
    11 NVRTC_ERROR_INTERNAL_ERROR
    12 NVRTC_ERROR_TIME_FILE_WRITE_FAILED
    13 NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED
    14 NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED
    15 NVRTC_ERROR_PCH_CREATE
    16 NVRTC_ERROR_CANCELLED
    17 NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED
    18 NVRTC_ERROR_BUSY
    """
)


# cublasStatus_t (cublas_api.h)
_CUBLAS_STATUS = _status_table(
    """
    0 CUBLAS_STATUS_SUCCESS
    1 CUBLAS_STATUS_NOT_INITIALIZED
    3 CUBLAS_STATUS_ALLOC_FAILED
    7 CUBLAS_STATUS_INVALID_VALUE
    8 CUBLAS_STATUS_ARCH_MISMATCH
    11 CUBLAS_STATUS_MAPPING_ERROR
    13 CUBLAS_STATUS_EXECUTION_FAILED
    14 CUBLAS_STATUS_INTERNAL_ERROR
    15 CUBLAS_STATUS_NOT_SUPPORTED
    16 CUBLAS_STATUS_LICENSE_ERROR
    """
)


# cudnnStatus_t (cudnn_graph.h)
_CUDNN_STATUS = _status_table(
    """
    0 CUDNN_STATUS_SUCCESS
    1001 CUDNN_STATUS_NOT_INITIALIZED
    1002 CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH
    1003 CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH
    1004 CUDNN_STATUS_DEPRECATED
    1005 CUDNN_STATUS_LICENSE_ERROR
    1006 CUDNN_STATUS_RUNTIME_IN_PROGRESS
    1007 CUDNN_STATUS_RUNTIME_FP_OVERFLOW
    1008 CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED
    2000 CUDNN_STATUS_BAD_PARAM
    2001 CUDNN_STATUS_INVALID_VALUE
    2002 CUDNN_STATUS_BAD_PARAM_NULL_POINTER
    2003 CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER
    2004 CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED
    2005 CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND
    2006 CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT
    2007 CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH
    2008 CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH
    2009 CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES
    2010 CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE
    2011 CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH
    2012 CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE
    3000 CUDNN_STATUS_NOT_SUPPORTED
    3001 CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN
    3002 CUDNN_STATUS_NOT_SUPPORTED_SHAPE
    3003 CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE
    3004 CUDNN_STATUS_NOT_SUPPORTED_LAYOUT
    3005 CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER
    3006 CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART
    3007 CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH
    3008 CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING
    3009 CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE
    3010 CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT
    3011 CUDNN_STATUS_NOT_SUPPORTED_PADDING
    3012 CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM
    3013 CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API
    3014 CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE
    4000 CUDNN_STATUS_INTERNAL_ERROR
    4001 CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED
    4002 CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE
    4003 CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED
    4004 CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
    4005 CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM
    4006 CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED
    5000 CUDNN_STATUS_EXECUTION_FAILED
    5001 CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER
    5002 CUDNN_STATUS_EXECUTION_FAILED_CUBLAS
    5003 CUDNN_STATUS_EXECUTION_FAILED_CUDART
    5004 CUDNN_STATUS_EXECUTION_FAILED_CURAND
    """
)


# ncclResult_t (nccl.h; ncclTimeout from NCCL 2.32 on).  ncclNumResults, the enum's last
# constant, counts the results and is none itself, so it has no row.
_NCCL_STATUS = _status_table(
    """
    0 ncclSuccess
    1 ncclUnhandledCudaError
    2 ncclSystemError
    3 ncclInternalError
    4 ncclInvalidArgument
    5 ncclInvalidUsage
    6 ncclRemoteError
    7 ncclInProgress
    8 ncclTimeout
    """
)


# cufftResult (cufft.h).  cuFFT 11 (CUDA 12) has 10, 12 and 15, which cuFFT 12 (CUDA 13)
# dropped; 17-20 are cuFFT 12's.
_CUFFT_STATUS = _status_table(
    """
    0 CUFFT_SUCCESS
    1 CUFFT_INVALID_PLAN
    2 CUFFT_ALLOC_FAILED
    3 CUFFT_INVALID_TYPE
    4 CUFFT_INVALID_VALUE
    5 CUFFT_INTERNAL_ERROR
    6 CUFFT_EXEC_FAILED
    7 CUFFT_SETUP_FAILED
    8 CUFFT_INVALID_SIZE
    9 CUFFT_UNALIGNED_DATA
    10 CUFFT_INCOMPLETE_PARAMETER_LIST
    11 CUFFT_INVALID_DEVICE
    12 CUFFT_PARSE_ERROR
    13 CUFFT_NO_WORKSPACE
    14 CUFFT_NOT_IMPLEMENTED
    15 CUFFT_LICENSE_ERROR
    16 CUFFT_NOT_SUPPORTED
    17 CUFFT_MISSING_DEPENDENCY
    18 CUFFT_NVRTC_FAILURE
    19 CUFFT_NVJITLINK_FAILURE
    20 CUFFT_NVSHMEM_FAILURE
    """
)


# cusparseStatus_t (cusparse.h)
_CUSPARSE_STATUS = _status_table(
    """
    0 CUSPARSE_STATUS_SUCCESS
    1 CUSPARSE_STATUS_NOT_INITIALIZED
    2 CUSPARSE_STATUS_ALLOC_FAILED
    3 CUSPARSE_STATUS_INVALID_VALUE
    4 CUSPARSE_STATUS_ARCH_MISMATCH
    5 CUSPARSE_STATUS_MAPPING_ERROR
    6 CUSPARSE_STATUS_EXECUTION_FAILED
    7 CUSPARSE_STATUS_INTERNAL_ERROR
    8 CUSPARSE_STATUS_MATRIX_TYPE_NOT_SUPPORTED
    9 CUSPARSE_STATUS_ZERO_PIVOT
    10 CUSPARSE_STATUS_NOT_SUPPORTED
    11 CUSPARSE_STATUS_INSUFFICIENT_RESOURCES
    """
)


class CudaError(StatusError):
    """A CUDA driver call failed (``CUresult``)."""

    library = "cuda"
    _names = _CUDA_STATUS
    _subclasses = {}


class CudaOutOfMemoryError(CudaError, MemoryError):
    """``CUDA_ERROR_OUT_OF_MEMORY``: the device could not satisfy an allocation."""


CudaError._subclasses[2] = CudaOutOfMemoryError


class NvrtcError(StatusError):
    """An NVRTC call failed (``nvrtcResult``); ``detail`` holds the compiler log."""

    library = "nvrtc"
    _names = _NVRTC_STATUS
    _subclasses = {}


class CublasError(StatusError):
    """A cuBLAS or cuBLASLt call failed (``cublasStatus_t``)."""

    library = "cublas"
    _names = _CUBLAS_STATUS
    _subclasses = {}


class CudnnError(StatusError):
    """A cuDNN call failed (``cudnnStatus_t``); ``detail`` holds cudnnGetLastErrorString."""

    library = "cudnn"
    _names = _CUDNN_STATUS
    _subclasses = {}


class NcclError(StatusError):
    """An NCCL call failed (``ncclResult_t``); ``detail`` holds ncclGetLastError."""

    library = "nccl"
    _names = _NCCL_STATUS
    _subclasses = {}


class CufftError(StatusError):
    """A cuFFT call failed (``cufftResult``); ``detail`` names the plan it ran."""

    library = "cufft"
    _names = _CUFFT_STATUS
    _subclasses = {}


class CusparseError(StatusError):
    """A cuSPARSE call failed (``cusparseStatus_t``); the message is cuSPARSE's own
    (``cusparseGetErrorString``) and ``detail`` names the plan or matrix it ran."""

    library = "cusparse"
    _names = _CUSPARSE_STATUS
    _subclasses = {}
