"""cuBLAS and cuBLASLt: ctypes types and two prototype tables, nothing else.

``TABLE`` binds ``libcublas`` (declared in ``cublas_api.h``), ``LT_TABLE`` binds
``libcublasLt`` (``cublasLt.h``); the two are separate shared libraries, loaded lazily and
independently through :func:`get` and :func:`get_lt`.  Names are the vendor's.  Where
``cublas_v2.h`` #defines a plain name to a versioned one (``cublasCreate`` ->
``cublasCreate_v2``), the table binds the versioned symbol: the plain one belongs to the legacy
API.  A CPU test checks every row against the headers.

The ``*_ATTRIBUTE_TYPES`` dictionaries give the C type of each descriptor attribute, as the
header documents it, so that get/set wrappers pass buffers of the right size.
"""

from ctypes import (POINTER, Structure, c_char_p, c_float, c_int, c_int8, c_int32, c_int64,
                    c_longlong, c_size_t, c_uint32, c_uint64, c_void_p)

from .._ffi import LazyLibrary, Proto, opaque_handle
from ..driver._lib import CUstream

# Headers (found in the NVIDIA wheels) that declare everything below.
HEADERS = ("cublas_api.h",)
LT_HEADERS = ("cublasLt.h",)

cublasStatus_t = c_int
cublasPointerMode_t = c_int
cublasMath_t = c_int
cublasComputeType_t = c_int
cublasOperation_t = c_int
cublasGemmAlgo_t = c_int
cudaDataType = c_int  # library_types.h: typedef enum cudaDataType_t {...} cudaDataType
cudaDataType_t = cudaDataType
libraryPropertyType = c_int
cublasLtMatrixLayoutAttribute_t = c_int
cublasLtMatmulDescAttributes_t = c_int
cublasLtMatmulPreferenceAttributes_t = c_int

# typedef struct cublasContext *cublasHandle_t
cublasHandle_t = opaque_handle("cublasContext")
# typedef struct cublasLtContext *cublasLtHandle_t
cublasLtHandle_t = opaque_handle("cublasLtContext")
# typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t (and likewise below): the
# structs are "semi-opaque" (uint64_t data[N]); cudalibs only ever holds pointers to them.
cublasLtMatrixLayout_t = opaque_handle("cublasLtMatrixLayoutOpaque_t")
cublasLtMatmulDesc_t = opaque_handle("cublasLtMatmulDescOpaque_t")
cublasLtMatmulPreference_t = opaque_handle("cublasLtMatmulPreferenceOpaque_t")


class cublasLtMatmulAlgo_t(Structure):
    """``typedef struct { uint64_t data[8]; } cublasLtMatmulAlgo_t``: an algorithm, passed by
    pointer to ``cublasLtMatmul`` and returned by value inside heuristic results."""

    _fields_ = [("data", c_uint64 * 8)]


class cublasLtMatmulHeuristicResult_t(Structure):
    """One entry of ``cublasLtMatmulAlgoGetHeuristic``'s result array."""

    _fields_ = [
        ("algo", cublasLtMatmulAlgo_t),
        ("workspaceSize", c_size_t),
        ("state", c_int),             # cublasStatus_t
        ("wavesCount", c_float),
        ("reserved", c_int * 4),
    ]


# Structs whose layout a CPU test compares with cublasLt.h: ctypes class -> C struct tag.
STRUCTS = {
    cublasLtMatmulAlgo_t: "cublasLtMatmulAlgo_t",
    cublasLtMatmulHeuristicResult_t: "cublasLtMatmulHeuristicResult_t",
}

# driver_types.h: typedef struct CUstream_st *cudaStream_t -- the driver's CUstream, the very
# same ctypes type, so a cudalibs stream handle passes straight through.
cudaStream_t = CUstream

# enum libraryPropertyType_t (library_types.h)
MAJOR_VERSION = 0
MINOR_VERSION = 1
PATCH_LEVEL = 2

# enum cublasOperation_t
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
CUBLAS_OP_C = 2
# enum cublasGemmAlgo_t: DEFAULT, ALGO0..23, DEFAULT_TENSOR_OP, ALGO0..15_TENSOR_OP
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_GEMM_ALGO0 = 0
CUBLAS_GEMM_ALGO23 = 23
CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99
CUBLAS_GEMM_ALGO0_TENSOR_OP = 100
CUBLAS_GEMM_ALGO15_TENSOR_OP = 115
# enum cublasPointerMode_t
CUBLAS_POINTER_MODE_HOST = 0
CUBLAS_POINTER_MODE_DEVICE = 1
# enum cublasMath_t
CUBLAS_DEFAULT_MATH = 0
CUBLAS_TENSOR_OP_MATH = 1
CUBLAS_PEDANTIC_MATH = 2
CUBLAS_TF32_TENSOR_OP_MATH = 3
CUBLAS_FP32_EMULATED_BF16X9_MATH = 4
CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH = 8
CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16

# enum cublasLtPointerMode_t
CUBLASLT_POINTER_MODE_HOST = 0
CUBLASLT_POINTER_MODE_DEVICE = 1
CUBLASLT_POINTER_MODE_DEVICE_VECTOR = 2
CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO = 3
CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST = 4
# enum cublasLtOrder_t
CUBLASLT_ORDER_COL = 0
CUBLASLT_ORDER_ROW = 1
CUBLASLT_ORDER_COL32 = 2
CUBLASLT_ORDER_COL4_4R2_8C = 3
CUBLASLT_ORDER_COL32_2R_4R4 = 4
# enum cublasLtBatchMode_t
CUBLASLT_BATCH_MODE_STRIDED = 0
CUBLASLT_BATCH_MODE_POINTER_ARRAY = 1

# enum cublasLtMatrixLayoutAttribute_t
CUBLASLT_MATRIX_LAYOUT_TYPE = 0
CUBLASLT_MATRIX_LAYOUT_ORDER = 1
CUBLASLT_MATRIX_LAYOUT_ROWS = 2
CUBLASLT_MATRIX_LAYOUT_COLS = 3
CUBLASLT_MATRIX_LAYOUT_LD = 4
CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5
CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6
CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET = 7
CUBLASLT_MATRIX_LAYOUT_BATCH_MODE = 8

LAYOUT_ATTRIBUTE_TYPES = {
    CUBLASLT_MATRIX_LAYOUT_TYPE: c_uint32,
    CUBLASLT_MATRIX_LAYOUT_ORDER: c_int32,
    CUBLASLT_MATRIX_LAYOUT_ROWS: c_uint64,
    CUBLASLT_MATRIX_LAYOUT_COLS: c_uint64,
    CUBLASLT_MATRIX_LAYOUT_LD: c_int64,
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: c_int32,
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: c_int64,
    CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: c_int64,
    CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: c_uint32,
}

# enum cublasLtMatmulDescAttributes_t (the subset cudalibs uses)
CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0
CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1
CUBLASLT_MATMUL_DESC_POINTER_MODE = 2
CUBLASLT_MATMUL_DESC_TRANSA = 3
CUBLASLT_MATMUL_DESC_TRANSB = 4
CUBLASLT_MATMUL_DESC_TRANSC = 5
CUBLASLT_MATMUL_DESC_FILL_MODE = 6
CUBLASLT_MATMUL_DESC_EPILOGUE = 7
CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8
CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10
CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11
CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12
CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13
CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE = 14
CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15
CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17
CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18
CUBLASLT_MATMUL_DESC_C_SCALE_POINTER = 19
CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20
CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21
CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22
CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER = 23
CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER = 24
CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25
CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 31
CUBLASLT_MATMUL_DESC_B_SCALE_MODE = 32
CUBLASLT_MATMUL_DESC_C_SCALE_MODE = 33
CUBLASLT_MATMUL_DESC_D_SCALE_MODE = 34
CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE = 35

MATMUL_DESC_ATTRIBUTE_TYPES = {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: c_int32,
    CUBLASLT_MATMUL_DESC_SCALE_TYPE: c_int32,
    CUBLASLT_MATMUL_DESC_POINTER_MODE: c_int32,
    CUBLASLT_MATMUL_DESC_TRANSA: c_int32,
    CUBLASLT_MATMUL_DESC_TRANSB: c_int32,
    CUBLASLT_MATMUL_DESC_TRANSC: c_int32,
    CUBLASLT_MATMUL_DESC_FILL_MODE: c_int32,
    CUBLASLT_MATMUL_DESC_EPILOGUE: c_uint32,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER: c_void_p,
    CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: c_int64,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: c_void_p,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: c_int64,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: c_int64,
    CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE: c_int64,
    CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: c_int32,
    CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: c_void_p,
    CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: c_void_p,
    CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: c_void_p,
    CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: c_void_p,
    CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: c_void_p,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: c_int32,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER: c_void_p,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER: c_void_p,
    CUBLASLT_MATMUL_DESC_FAST_ACCUM: c_int8,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: c_int32,
    CUBLASLT_MATMUL_DESC_A_SCALE_MODE: c_int32,
    CUBLASLT_MATMUL_DESC_B_SCALE_MODE: c_int32,
    CUBLASLT_MATMUL_DESC_C_SCALE_MODE: c_int32,
    CUBLASLT_MATMUL_DESC_D_SCALE_MODE: c_int32,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE: c_int32,
}

# enum cublasLtMatmulMatrixScale_t (cuBLASLt 12.8+; OUTER_VEC, VEC128 and BLK128x128 12.9+):
# how a *_SCALE_POINTER is read -- one float32, one per outer index, one per 128 elements of
# the inner dimension, one per 128x128 block (the VEC16/VEC32 block formats are Blackwell's).
CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F = 0
CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 = 1
CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 = 2
CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F = 3
CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F = 4
CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F = 5

# enum cublasLtEpilogue_t
CUBLASLT_EPILOGUE_DEFAULT = 1
CUBLASLT_EPILOGUE_RELU = 2
CUBLASLT_EPILOGUE_RELU_AUX = 130
CUBLASLT_EPILOGUE_BIAS = 4
CUBLASLT_EPILOGUE_RELU_BIAS = 6
CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 134
CUBLASLT_EPILOGUE_DRELU = 136
CUBLASLT_EPILOGUE_DRELU_BGRAD = 152
CUBLASLT_EPILOGUE_GELU = 32
CUBLASLT_EPILOGUE_GELU_AUX = 160
CUBLASLT_EPILOGUE_GELU_BIAS = 36
CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164
CUBLASLT_EPILOGUE_DGELU = 192
CUBLASLT_EPILOGUE_DGELU_BGRAD = 208
CUBLASLT_EPILOGUE_BGRADA = 256
CUBLASLT_EPILOGUE_BGRADB = 512

# enum cublasLtMatmulAlgoConfigAttributes_t (the algorithm's id, for display and cache keys)
CUBLASLT_ALGO_CONFIG_ID = 0
CUBLASLT_ALGO_CONFIG_TILE_ID = 1
CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 2
CUBLASLT_ALGO_CONFIG_STAGES_ID = 6

# enum cublasLtMatmulPreferenceAttributes_t
CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0
CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1
CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3
CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5
CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6
CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7
CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT = 9
CUBLASLT_MATMUL_PREF_IMPL_MASK = 12

PREFERENCE_ATTRIBUTE_TYPES = {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE: c_uint32,
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: c_uint64,
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: c_uint32,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: c_uint32,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: c_uint32,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: c_uint32,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: c_uint32,
    CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: c_float,
    CUBLASLT_MATMUL_PREF_IMPL_MASK: c_uint64,
}

TABLE = [
    # cublasStatus_t cublasCreate_v2(cublasHandle_t* handle)
    Proto("cublasCreate_v2", cublasStatus_t, [POINTER(cublasHandle_t)]),
    # cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
    Proto("cublasDestroy_v2", cublasStatus_t, [cublasHandle_t]),
    # cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int* version)
    Proto("cublasGetVersion_v2", cublasStatus_t, [cublasHandle_t, POINTER(c_int)]),
    # cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value)
    Proto("cublasGetProperty", cublasStatus_t, [libraryPropertyType, POINTER(c_int)]),
    # size_t cublasGetCudartVersion(void)
    Proto("cublasGetCudartVersion", c_size_t, []),
    # const char* cublasGetStatusName(cublasStatus_t status)
    Proto("cublasGetStatusName", c_char_p, [cublasStatus_t]),
    # const char* cublasGetStatusString(cublasStatus_t status)
    Proto("cublasGetStatusString", c_char_p, [cublasStatus_t]),
    # cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
    Proto("cublasSetStream_v2", cublasStatus_t, [cublasHandle_t, cudaStream_t]),
    # cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId)
    Proto("cublasGetStream_v2", cublasStatus_t, [cublasHandle_t, POINTER(cudaStream_t)]),
    # cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace,
    #                                      size_t workspaceSizeInBytes)
    Proto("cublasSetWorkspace_v2", cublasStatus_t, [cublasHandle_t, c_void_p, c_size_t]),
    # cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
    Proto("cublasSetMathMode", cublasStatus_t, [cublasHandle_t, cublasMath_t]),
    # cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode)
    Proto("cublasGetMathMode", cublasStatus_t, [cublasHandle_t, POINTER(cublasMath_t)]),
    # cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
    Proto("cublasSetPointerMode_v2", cublasStatus_t, [cublasHandle_t, cublasPointerMode_t]),
    # cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode)
    Proto("cublasGetPointerMode_v2", cublasStatus_t,
          [cublasHandle_t, POINTER(cublasPointerMode_t)]),
    # cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
    #                             cublasOperation_t transb, int m, int n, int k,
    #                             const void* alpha, const void* A, cudaDataType Atype, int lda,
    #                             const void* B, cudaDataType Btype, int ldb, const void* beta,
    #                             void* C, cudaDataType Ctype, int ldc,
    #                             cublasComputeType_t computeType, cublasGemmAlgo_t algo)
    Proto("cublasGemmEx", cublasStatus_t,
          [cublasHandle_t, cublasOperation_t, cublasOperation_t, c_int, c_int, c_int,
           c_void_p, c_void_p, cudaDataType, c_int, c_void_p, cudaDataType, c_int, c_void_p,
           c_void_p, cudaDataType, c_int, cublasComputeType_t, cublasGemmAlgo_t]),
    # cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
    #     cublasOperation_t transb, int m, int n, int k, const void* alpha, const void* A,
    #     cudaDataType Atype, int lda, long long int strideA, const void* B, cudaDataType Btype,
    #     int ldb, long long int strideB, const void* beta, void* C, cudaDataType Ctype, int ldc,
    #     long long int strideC, int batchCount, cublasComputeType_t computeType,
    #     cublasGemmAlgo_t algo)
    Proto("cublasGemmStridedBatchedEx", cublasStatus_t,
          [cublasHandle_t, cublasOperation_t, cublasOperation_t, c_int, c_int, c_int,
           c_void_p, c_void_p, cudaDataType, c_int, c_longlong, c_void_p, cudaDataType, c_int,
           c_longlong, c_void_p, c_void_p, cudaDataType, c_int, c_longlong, c_int,
           cublasComputeType_t, cublasGemmAlgo_t]),
    # cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
    #     cublasOperation_t transb, int m, int n, int k, const void* alpha,
    #     const void* const Aarray[], cudaDataType Atype, int lda, const void* const Barray[],
    #     cudaDataType Btype, int ldb, const void* beta, void* const Carray[],
    #     cudaDataType Ctype, int ldc, int batchCount, cublasComputeType_t computeType,
    #     cublasGemmAlgo_t algo)
    Proto("cublasGemmBatchedEx", cublasStatus_t,
          [cublasHandle_t, cublasOperation_t, cublasOperation_t, c_int, c_int, c_int,
           c_void_p, c_void_p, cudaDataType, c_int, c_void_p, cudaDataType, c_int, c_void_p,
           c_void_p, cudaDataType, c_int, c_int, cublasComputeType_t, cublasGemmAlgo_t]),
    # cublasStatus_t cublasAxpyEx(cublasHandle_t handle, int n, const void* alpha,
    #                             cudaDataType alphaType, const void* x, cudaDataType xType,
    #                             int incx, void* y, cudaDataType yType, int incy,
    #                             cudaDataType executiontype)
    Proto("cublasAxpyEx", cublasStatus_t,
          [cublasHandle_t, c_int, c_void_p, cudaDataType, c_void_p, cudaDataType, c_int,
           c_void_p, cudaDataType, c_int, cudaDataType]),
    # cublasStatus_t cublasDotEx(cublasHandle_t handle, int n, const void* x,
    #                            cudaDataType xType, int incx, const void* y,
    #                            cudaDataType yType, int incy, void* result,
    #                            cudaDataType resultType, cudaDataType executionType)
    Proto("cublasDotEx", cublasStatus_t,
          [cublasHandle_t, c_int, c_void_p, cudaDataType, c_int, c_void_p, cudaDataType, c_int,
           c_void_p, cudaDataType, cudaDataType]),
    # cublasStatus_t cublasDotcEx(cublasHandle_t handle, int n, const void* x,
    #                             cudaDataType xType, int incx, const void* y,
    #                             cudaDataType yType, int incy, void* result,
    #                             cudaDataType resultType, cudaDataType executionType)
    Proto("cublasDotcEx", cublasStatus_t,
          [cublasHandle_t, c_int, c_void_p, cudaDataType, c_int, c_void_p, cudaDataType, c_int,
           c_void_p, cudaDataType, cudaDataType]),
    # cublasStatus_t cublasNrm2Ex(cublasHandle_t handle, int n, const void* x,
    #                             cudaDataType xType, int incx, void* result,
    #                             cudaDataType resultType, cudaDataType executionType)
    Proto("cublasNrm2Ex", cublasStatus_t,
          [cublasHandle_t, c_int, c_void_p, cudaDataType, c_int, c_void_p, cudaDataType,
           cudaDataType]),
    # cublasStatus_t cublasScalEx(cublasHandle_t handle, int n, const void* alpha,
    #                             cudaDataType alphaType, void* x, cudaDataType xType,
    #                             int incx, cudaDataType executionType)
    Proto("cublasScalEx", cublasStatus_t,
          [cublasHandle_t, c_int, c_void_p, cudaDataType, c_void_p, cudaDataType, c_int,
           cudaDataType]),
    # cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m,
    #                               int n, const float* alpha, const float* A, int lda,
    #                               const float* x, int incx, const float* beta, float* y,
    #                               int incy)
    Proto("cublasSgemv_v2", cublasStatus_t,
          [cublasHandle_t, cublasOperation_t, c_int, c_int, c_void_p, c_void_p, c_int,
           c_void_p, c_int, c_void_p, c_void_p, c_int]),
    # cublasStatus_t cublasDgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m,
    #                               int n, const double* alpha, const double* A, int lda,
    #                               const double* x, int incx, const double* beta, double* y,
    #                               int incy)
    Proto("cublasDgemv_v2", cublasStatus_t,
          [cublasHandle_t, cublasOperation_t, c_int, c_int, c_void_p, c_void_p, c_int,
           c_void_p, c_int, c_void_p, c_void_p, c_int]),
    # cublasStatus_t cublasCgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m,
    #                               int n, const cuComplex* alpha, const cuComplex* A, int lda,
    #                               const cuComplex* x, int incx, const cuComplex* beta,
    #                               cuComplex* y, int incy)
    Proto("cublasCgemv_v2", cublasStatus_t,
          [cublasHandle_t, cublasOperation_t, c_int, c_int, c_void_p, c_void_p, c_int,
           c_void_p, c_int, c_void_p, c_void_p, c_int]),
    # cublasStatus_t cublasZgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m,
    #                               int n, const cuDoubleComplex* alpha,
    #                               const cuDoubleComplex* A, int lda, const cuDoubleComplex* x,
    #                               int incx, const cuDoubleComplex* beta, cuDoubleComplex* y,
    #                               int incy)
    Proto("cublasZgemv_v2", cublasStatus_t,
          [cublasHandle_t, cublasOperation_t, c_int, c_int, c_void_p, c_void_p, c_int,
           c_void_p, c_int, c_void_p, c_void_p, c_int]),
]

LT_TABLE = [
    # cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle)
    Proto("cublasLtCreate", cublasStatus_t, [POINTER(cublasLtHandle_t)]),
    # cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
    Proto("cublasLtDestroy", cublasStatus_t, [cublasLtHandle_t]),
    # size_t cublasLtGetVersion(void)
    Proto("cublasLtGetVersion", c_size_t, []),
    # size_t cublasLtGetCudartVersion(void)
    Proto("cublasLtGetCudartVersion", c_size_t, []),
    # cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value)
    Proto("cublasLtGetProperty", cublasStatus_t, [libraryPropertyType, POINTER(c_int)]),
    # const char* cublasLtGetStatusName(cublasStatus_t status)
    Proto("cublasLtGetStatusName", c_char_p, [cublasStatus_t]),
    # const char* cublasLtGetStatusString(cublasStatus_t status)
    Proto("cublasLtGetStatusString", c_char_p, [cublasStatus_t]),
    # cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout,
    #                                           cudaDataType type, uint64_t rows, uint64_t cols,
    #                                           int64_t ld)
    Proto("cublasLtMatrixLayoutCreate", cublasStatus_t,
          [POINTER(cublasLtMatrixLayout_t), cudaDataType, c_uint64, c_uint64, c_int64]),
    # cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
    Proto("cublasLtMatrixLayoutDestroy", cublasStatus_t, [cublasLtMatrixLayout_t]),
    # cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
    #                                                 cublasLtMatrixLayoutAttribute_t attr,
    #                                                 const void* buf, size_t sizeInBytes)
    Proto("cublasLtMatrixLayoutSetAttribute", cublasStatus_t,
          [cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, c_void_p, c_size_t]),
    # cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
    #                                                 cublasLtMatrixLayoutAttribute_t attr,
    #                                                 void* buf, size_t sizeInBytes,
    #                                                 size_t* sizeWritten)
    Proto("cublasLtMatrixLayoutGetAttribute", cublasStatus_t,
          [cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, c_void_p, c_size_t,
           POINTER(c_size_t)]),
    # cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
    #                                         cublasComputeType_t computeType,
    #                                         cudaDataType_t scaleType)
    Proto("cublasLtMatmulDescCreate", cublasStatus_t,
          [POINTER(cublasLtMatmulDesc_t), cublasComputeType_t, cudaDataType_t]),
    # cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
    Proto("cublasLtMatmulDescDestroy", cublasStatus_t, [cublasLtMatmulDesc_t]),
    # cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
    #                                               cublasLtMatmulDescAttributes_t attr,
    #                                               const void* buf, size_t sizeInBytes)
    Proto("cublasLtMatmulDescSetAttribute", cublasStatus_t,
          [cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, c_void_p, c_size_t]),
    # cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
    #                                               cublasLtMatmulDescAttributes_t attr,
    #                                               void* buf, size_t sizeInBytes,
    #                                               size_t* sizeWritten)
    Proto("cublasLtMatmulDescGetAttribute", cublasStatus_t,
          [cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, c_void_p, c_size_t,
           POINTER(c_size_t)]),
    # cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref)
    Proto("cublasLtMatmulPreferenceCreate", cublasStatus_t,
          [POINTER(cublasLtMatmulPreference_t)]),
    # cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
    Proto("cublasLtMatmulPreferenceDestroy", cublasStatus_t, [cublasLtMatmulPreference_t]),
    # cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
    #                                                     cublasLtMatmulPreferenceAttributes_t attr,
    #                                                     const void* buf, size_t sizeInBytes)
    Proto("cublasLtMatmulPreferenceSetAttribute", cublasStatus_t,
          [cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, c_void_p,
           c_size_t]),
    # cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
    #                                                     cublasLtMatmulPreferenceAttributes_t attr,
    #                                                     void* buf, size_t sizeInBytes,
    #                                                     size_t* sizeWritten)
    Proto("cublasLtMatmulPreferenceGetAttribute", cublasStatus_t,
          [cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, c_void_p,
           c_size_t, POINTER(c_size_t)]),
    # cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
    #     cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    #     cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
    #     cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference,
    #     int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    #     int* returnAlgoCount)
    Proto("cublasLtMatmulAlgoGetHeuristic", cublasStatus_t,
          [cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
           cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
           cublasLtMatmulPreference_t, c_int, POINTER(cublasLtMatmulHeuristicResult_t),
           POINTER(c_int)]),
    # cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle,
    #     cublasLtMatmulDesc_t computeDesc, const void* alpha, const void* A,
    #     cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
    #     const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
    #     cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
    #     size_t workspaceSizeInBytes, cudaStream_t stream)
    Proto("cublasLtMatmul", cublasStatus_t,
          [cublasLtHandle_t, cublasLtMatmulDesc_t, c_void_p, c_void_p, cublasLtMatrixLayout_t,
           c_void_p, cublasLtMatrixLayout_t, c_void_p, c_void_p, cublasLtMatrixLayout_t,
           c_void_p, cublasLtMatrixLayout_t, POINTER(cublasLtMatmulAlgo_t), c_void_p,
           c_size_t, cudaStream_t]),
    # cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t* algo,
    #     cublasLtMatmulAlgoConfigAttributes_t attr, void* buf, size_t sizeInBytes,
    #     size_t* sizeWritten)
    Proto("cublasLtMatmulAlgoConfigGetAttribute", cublasStatus_t,
          [POINTER(cublasLtMatmulAlgo_t), c_int, c_void_p, c_size_t, POINTER(c_size_t)]),
]

get = LazyLibrary("cublas", TABLE)
get_lt = LazyLibrary("cublasLt", LT_TABLE)

# -- grouped GEMM ------------------------------------------------------------------------------
# cublasGemmGroupedBatchedEx (cuBLAS 12.5+): group_count groups of problems, the problems of one
# group sharing transposes, sizes, leading dimensions and scalars.  Every per-group array
# (transa/transb, m/n/k, lda/ldb/ldc, alpha/beta, group_size) is a HOST array; Aarray, Barray
# and Carray are DEVICE arrays of device pointers, one per problem, in group order.
GROUPED_TABLE = [
    # cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t handle,
    #     const cublasOperation_t transa_array[], const cublasOperation_t transb_array[],
    #     const int m_array[], const int n_array[], const int k_array[],
    #     const void* alpha_array, const void* const Aarray[], cudaDataType_t Atype,
    #     const int lda_array[], const void* const Barray[], cudaDataType_t Btype,
    #     const int ldb_array[], const void* beta_array, void* const Carray[],
    #     cudaDataType_t Ctype, const int ldc_array[], int group_count,
    #     const int group_size[], cublasComputeType_t computeType)
    Proto("cublasGemmGroupedBatchedEx", cublasStatus_t,
          [cublasHandle_t, POINTER(cublasOperation_t), POINTER(cublasOperation_t),
           POINTER(c_int), POINTER(c_int), POINTER(c_int), c_void_p, c_void_p, cudaDataType_t,
           POINTER(c_int), c_void_p, cudaDataType_t, POINTER(c_int), c_void_p, c_void_p,
           cudaDataType_t, POINTER(c_int), c_int, POINTER(c_int), cublasComputeType_t]),
]
TABLE += GROUPED_TABLE
# LazyLibrary keeps a copy of its table: bind cuBLAS over the table with the rows above.
get = LazyLibrary("cublas", TABLE)
