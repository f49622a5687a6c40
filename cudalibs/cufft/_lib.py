"""cuFFT: ctypes types and the prototype table, nothing else.

``TABLE`` binds ``libcufft`` (declared in ``cufft.h`` and ``cufftXt.h``), loaded lazily through
:func:`get`.  Names are the vendor's.  Plans are made with ``cufftXtMakePlanMany``, the one
entry point that takes 64-bit sizes and strides and every precision (``cudaDataType``); the
classic typed ``cufftExec*`` calls stay bound beside ``cufftXtExec`` for callers of the raw
layer.  A CPU test checks every row against the headers.
"""

from ctypes import POINTER, c_int, c_longlong, c_size_t, c_void_p

from .._ffi import LazyLibrary, Proto
from ..driver._lib import CUstream

# Headers (found in the NVIDIA wheels) that declare everything below.
HEADERS = ("cufft.h", "cufftXt.h")

cufftResult = c_int
# typedef int cufftHandle: a plan is an int, not a pointer, so it cannot get a distinct
# opaque ctypes type as the other libraries' handles do.
cufftHandle = c_int
cufftType = c_int
cudaDataType = c_int       # library_types.h: typedef enum cudaDataType_t {...} cudaDataType
libraryPropertyType = c_int
# driver_types.h: typedef struct CUstream_st *cudaStream_t -- the driver's CUstream.
cudaStream_t = CUstream

# cufft.h: the transform directions
CUFFT_FORWARD = -1
CUFFT_INVERSE = 1
# enum cufftType_t
CUFFT_R2C = 0x2A
CUFFT_C2R = 0x2C
CUFFT_C2C = 0x29
CUFFT_D2Z = 0x6A
CUFFT_Z2D = 0x6C
CUFFT_Z2Z = 0x69

TABLE = [
    # cufftResult cufftCreate(cufftHandle *handle)
    Proto("cufftCreate", cufftResult, [POINTER(cufftHandle)]),
    # cufftResult cufftDestroy(cufftHandle plan)
    Proto("cufftDestroy", cufftResult, [cufftHandle]),
    # cufftResult cufftSetAutoAllocation(cufftHandle plan, int autoAllocate)
    Proto("cufftSetAutoAllocation", cufftResult, [cufftHandle, c_int]),
    # cufftResult cufftXtMakePlanMany(cufftHandle plan, int rank, long long int *n,
    #     long long int *inembed, long long int istride, long long int idist,
    #     cudaDataType inputtype, long long int *onembed, long long int ostride,
    #     long long int odist, cudaDataType outputtype, long long int batch,
    #     size_t *workSize, cudaDataType executiontype)
    Proto("cufftXtMakePlanMany", cufftResult,
          [cufftHandle, c_int, POINTER(c_longlong), POINTER(c_longlong), c_longlong,
           c_longlong, cudaDataType, POINTER(c_longlong), c_longlong, c_longlong,
           cudaDataType, c_longlong, POINTER(c_size_t), cudaDataType]),
    # cufftResult cufftXtGetSizeMany(cufftHandle plan, int rank, long long int *n,
    #     long long int *inembed, long long int istride, long long int idist,
    #     cudaDataType inputtype, long long int *onembed, long long int ostride,
    #     long long int odist, cudaDataType outputtype, long long int batch,
    #     size_t *workSize, cudaDataType executiontype)
    Proto("cufftXtGetSizeMany", cufftResult,
          [cufftHandle, c_int, POINTER(c_longlong), POINTER(c_longlong), c_longlong,
           c_longlong, cudaDataType, POINTER(c_longlong), c_longlong, c_longlong,
           cudaDataType, c_longlong, POINTER(c_size_t), cudaDataType]),
    # cufftResult cufftGetSize(cufftHandle handle, size_t *workSize)
    Proto("cufftGetSize", cufftResult, [cufftHandle, POINTER(c_size_t)]),
    # cufftResult cufftSetWorkArea(cufftHandle plan, void *workArea)
    Proto("cufftSetWorkArea", cufftResult, [cufftHandle, c_void_p]),
    # cufftResult cufftSetStream(cufftHandle plan, cudaStream_t stream)
    Proto("cufftSetStream", cufftResult, [cufftHandle, cudaStream_t]),
    # cufftResult cufftXtExec(cufftHandle plan, void *input, void *output, int direction)
    Proto("cufftXtExec", cufftResult, [cufftHandle, c_void_p, c_void_p, c_int]),
    # cufftResult cufftExecC2C(cufftHandle plan, cufftComplex *idata, cufftComplex *odata,
    #     int direction)
    Proto("cufftExecC2C", cufftResult, [cufftHandle, c_void_p, c_void_p, c_int]),
    # cufftResult cufftExecR2C(cufftHandle plan, cufftReal *idata, cufftComplex *odata)
    Proto("cufftExecR2C", cufftResult, [cufftHandle, c_void_p, c_void_p]),
    # cufftResult cufftExecC2R(cufftHandle plan, cufftComplex *idata, cufftReal *odata)
    Proto("cufftExecC2R", cufftResult, [cufftHandle, c_void_p, c_void_p]),
    # cufftResult cufftExecZ2Z(cufftHandle plan, cufftDoubleComplex *idata,
    #     cufftDoubleComplex *odata, int direction)
    Proto("cufftExecZ2Z", cufftResult, [cufftHandle, c_void_p, c_void_p, c_int]),
    # cufftResult cufftExecD2Z(cufftHandle plan, cufftDoubleReal *idata,
    #     cufftDoubleComplex *odata)
    Proto("cufftExecD2Z", cufftResult, [cufftHandle, c_void_p, c_void_p]),
    # cufftResult cufftExecZ2D(cufftHandle plan, cufftDoubleComplex *idata,
    #     cufftDoubleReal *odata)
    Proto("cufftExecZ2D", cufftResult, [cufftHandle, c_void_p, c_void_p]),
    # cufftResult cufftGetVersion(int *version)
    Proto("cufftGetVersion", cufftResult, [POINTER(c_int)]),
    # cufftResult cufftGetProperty(libraryPropertyType type, int *value)
    Proto("cufftGetProperty", cufftResult, [libraryPropertyType, POINTER(c_int)]),
]

get = LazyLibrary("cufft", TABLE)
