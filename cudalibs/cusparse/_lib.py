"""cuSPARSE: ctypes types and the prototype table of the generic API, nothing else.

``TABLE`` binds ``libcusparse`` (declared in ``cusparse.h``), loaded lazily through
:func:`get`.  Names are the vendor's.  Only the generic API is bound (sparse and dense
matrix and vector descriptors, SpMV, SpMM, SDDMM, SpGEMM, SpSV, SpSM, the dense/sparse
conversions); the legacy ``csr*``/``bsr*`` routines, deprecated through CUDA 12, are not.
The ``const`` descriptor typedefs (``cusparseConstSpMatDescr_t``, ...) point at the same
structs as the mutable ones, so each pair shares one ctypes type.  A CPU test checks every
row against the header.
"""

from ctypes import POINTER, c_char_p, c_float, c_int, c_longlong, c_size_t, c_void_p

from .._ffi import LazyLibrary, Proto, opaque_handle
from ..driver._lib import CUstream

# Headers (found in the NVIDIA wheels) that declare everything below.
HEADERS = ("cusparse.h",)

cusparseStatus_t = c_int
# typedef struct cusparseContext *cusparseHandle_t
cusparseHandle_t = opaque_handle("cusparseContext")
# typedef struct cusparse{Sp,Dn}{Mat,Vec}Descr *cusparse..._t (and the const variants)
cusparseSpMatDescr_t = opaque_handle("cusparseSpMatDescr")
cusparseDnMatDescr_t = opaque_handle("cusparseDnMatDescr")
cusparseSpVecDescr_t = opaque_handle("cusparseSpVecDescr")
cusparseDnVecDescr_t = opaque_handle("cusparseDnVecDescr")
cusparseSpGEMMDescr_t = opaque_handle("cusparseSpGEMMDescr")
cusparseSpSVDescr_t = opaque_handle("cusparseSpSVDescr")
cusparseSpSMDescr_t = opaque_handle("cusparseSpSMDescr")
cusparseConstSpMatDescr_t = cusparseSpMatDescr_t
cusparseConstDnMatDescr_t = cusparseDnMatDescr_t
cusparseConstDnVecDescr_t = cusparseDnVecDescr_t
cusparseIndexType_t = c_int
cusparseIndexBase_t = c_int
cusparseOrder_t = c_int
cusparseOperation_t = c_int
cusparseSpMatAttribute_t = c_int
cusparseSpMVAlg_t = c_int
cusparseSpMMAlg_t = c_int
cusparseSDDMMAlg_t = c_int
cusparseSpGEMMAlg_t = c_int
cusparseSpSVAlg_t = c_int
cusparseSpSMAlg_t = c_int
cusparseSparseToDenseAlg_t = c_int
cusparseDenseToSparseAlg_t = c_int
cudaDataType = c_int
libraryPropertyType = c_int
int64_t = c_longlong
# driver_types.h: typedef struct CUstream_st *cudaStream_t -- the driver's CUstream.
cudaStream_t = CUstream

# enum cusparseStatus_t
CUSPARSE_STATUS_SUCCESS = 0
CUSPARSE_STATUS_NOT_SUPPORTED = 10
# enum cusparseIndexType_t
CUSPARSE_INDEX_32I = 2
CUSPARSE_INDEX_64I = 3
# enum cusparseIndexBase_t
CUSPARSE_INDEX_BASE_ZERO = 0
# enum cusparseOrder_t
CUSPARSE_ORDER_COL = 1
CUSPARSE_ORDER_ROW = 2
# enum cusparseOperation_t
CUSPARSE_OPERATION_NON_TRANSPOSE = 0
CUSPARSE_OPERATION_TRANSPOSE = 1
CUSPARSE_OPERATION_CONJUGATE_TRANSPOSE = 2
# enum cusparseFormat_t
CUSPARSE_FORMAT_CSR = 1
CUSPARSE_FORMAT_CSC = 2
CUSPARSE_FORMAT_COO = 3
CUSPARSE_FORMAT_BLOCKED_ELL = 5
CUSPARSE_FORMAT_BSR = 6
# enum cusparseSpMatAttribute_t
CUSPARSE_SPMAT_FILL_MODE = 0
CUSPARSE_SPMAT_DIAG_TYPE = 1
# enum cusparseFillMode_t / cusparseDiagType_t
CUSPARSE_FILL_MODE_LOWER = 0
CUSPARSE_FILL_MODE_UPPER = 1
CUSPARSE_DIAG_TYPE_NON_UNIT = 0
CUSPARSE_DIAG_TYPE_UNIT = 1
# enum cusparseSpMVAlg_t (CUSPARSE_SPMV_BSR_ALG1 is cuSPARSE 12.6's, CUDA 13: an older
# library refuses it, like BSR SpMV altogether)
CUSPARSE_SPMV_ALG_DEFAULT = 0
CUSPARSE_SPMV_COO_ALG1 = 1
CUSPARSE_SPMV_CSR_ALG1 = 2
CUSPARSE_SPMV_CSR_ALG2 = 3
CUSPARSE_SPMV_COO_ALG2 = 4
CUSPARSE_SPMV_BSR_ALG1 = 6
# enum cusparseSpMMAlg_t
CUSPARSE_SPMM_ALG_DEFAULT = 0
CUSPARSE_SPMM_COO_ALG1 = 1
CUSPARSE_SPMM_COO_ALG2 = 2
CUSPARSE_SPMM_COO_ALG3 = 3
CUSPARSE_SPMM_CSR_ALG1 = 4
CUSPARSE_SPMM_COO_ALG4 = 5
CUSPARSE_SPMM_CSR_ALG2 = 6
CUSPARSE_SPMM_CSR_ALG3 = 12
CUSPARSE_SPMM_BLOCKED_ELL_ALG1 = 13
CUSPARSE_SPMM_BSR_ALG1 = 14
# enum cusparseSDDMMAlg_t, cusparseSpSVAlg_t, cusparseSpSMAlg_t, the conversions
CUSPARSE_SDDMM_ALG_DEFAULT = 0
CUSPARSE_SPSV_ALG_DEFAULT = 0
CUSPARSE_SPSM_ALG_DEFAULT = 0
CUSPARSE_SPARSETODENSE_ALG_DEFAULT = 0
CUSPARSE_DENSETOSPARSE_ALG_DEFAULT = 0
# enum cusparseSpGEMMAlg_t
CUSPARSE_SPGEMM_DEFAULT = 0

_h, _sp, _dm, _dv = cusparseHandle_t, cusparseSpMatDescr_t, cusparseDnMatDescr_t, \
    cusparseDnVecDescr_t
_op, _i64, _vp, _pi64 = cusparseOperation_t, int64_t, c_void_p, POINTER(int64_t)
_ps = POINTER(c_size_t)

TABLE = [
    # -- management -------------------------------------------------------------------------
    # cusparseStatus_t cusparseCreate(cusparseHandle_t *handle)
    Proto("cusparseCreate", cusparseStatus_t, [POINTER(_h)]),
    # cusparseStatus_t cusparseDestroy(cusparseHandle_t handle)
    Proto("cusparseDestroy", cusparseStatus_t, [_h]),
    # cusparseStatus_t cusparseGetVersion(cusparseHandle_t handle, int *version)
    Proto("cusparseGetVersion", cusparseStatus_t, [_h, POINTER(c_int)]),
    # cusparseStatus_t cusparseGetProperty(libraryPropertyType type, int *value)
    Proto("cusparseGetProperty", cusparseStatus_t, [libraryPropertyType, POINTER(c_int)]),
    # const char *cusparseGetErrorName(cusparseStatus_t status)
    Proto("cusparseGetErrorName", c_char_p, [cusparseStatus_t]),
    # const char *cusparseGetErrorString(cusparseStatus_t status)
    Proto("cusparseGetErrorString", c_char_p, [cusparseStatus_t]),
    # cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t streamId)
    Proto("cusparseSetStream", cusparseStatus_t, [_h, cudaStream_t]),
    # cusparseStatus_t cusparseGetStream(cusparseHandle_t handle, cudaStream_t *streamId)
    Proto("cusparseGetStream", cusparseStatus_t, [_h, POINTER(cudaStream_t)]),
    # -- sparse matrix descriptors -------------------------------------------------------------
    # cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t *spMatDescr, int64_t rows,
    #     int64_t cols, int64_t nnz, void *csrRowOffsets, void *csrColInd, void *csrValues,
    #     cusparseIndexType_t csrRowOffsetsType, cusparseIndexType_t csrColIndType,
    #     cusparseIndexBase_t idxBase, cudaDataType valueType)
    Proto("cusparseCreateCsr", cusparseStatus_t,
          [POINTER(_sp), _i64, _i64, _i64, _vp, _vp, _vp, cusparseIndexType_t,
           cusparseIndexType_t, cusparseIndexBase_t, cudaDataType]),
    # cusparseStatus_t cusparseCreateCsc(cusparseSpMatDescr_t *spMatDescr, int64_t rows,
    #     int64_t cols, int64_t nnz, void *cscColOffsets, void *cscRowInd, void *cscValues,
    #     cusparseIndexType_t cscColOffsetsType, cusparseIndexType_t cscRowIndType,
    #     cusparseIndexBase_t idxBase, cudaDataType valueType)
    Proto("cusparseCreateCsc", cusparseStatus_t,
          [POINTER(_sp), _i64, _i64, _i64, _vp, _vp, _vp, cusparseIndexType_t,
           cusparseIndexType_t, cusparseIndexBase_t, cudaDataType]),
    # cusparseStatus_t cusparseCreateCoo(cusparseSpMatDescr_t *spMatDescr, int64_t rows,
    #     int64_t cols, int64_t nnz, void *cooRowInd, void *cooColInd, void *cooValues,
    #     cusparseIndexType_t cooIdxType, cusparseIndexBase_t idxBase, cudaDataType valueType)
    Proto("cusparseCreateCoo", cusparseStatus_t,
          [POINTER(_sp), _i64, _i64, _i64, _vp, _vp, _vp, cusparseIndexType_t,
           cusparseIndexBase_t, cudaDataType]),
    # cusparseStatus_t cusparseCreateBsr(cusparseSpMatDescr_t *spMatDescr, int64_t brows,
    #     int64_t bcols, int64_t bnnz, int64_t rowBlockSize, int64_t colBlockSize,
    #     void *bsrRowOffsets, void *bsrColInd, void *bsrValues,
    #     cusparseIndexType_t bsrRowOffsetsType, cusparseIndexType_t bsrColIndType,
    #     cusparseIndexBase_t idxBase, cudaDataType valueType, cusparseOrder_t order)
    Proto("cusparseCreateBsr", cusparseStatus_t,
          [POINTER(_sp), _i64, _i64, _i64, _i64, _i64, _vp, _vp, _vp, cusparseIndexType_t,
           cusparseIndexType_t, cusparseIndexBase_t, cudaDataType, cusparseOrder_t]),
    # cusparseStatus_t cusparseCreateBlockedEll(cusparseSpMatDescr_t *spMatDescr,
    #     int64_t rows, int64_t cols, int64_t ellBlockSize, int64_t ellCols, void *ellColInd,
    #     void *ellValue, cusparseIndexType_t ellIdxType, cusparseIndexBase_t idxBase,
    #     cudaDataType valueType)
    Proto("cusparseCreateBlockedEll", cusparseStatus_t,
          [POINTER(_sp), _i64, _i64, _i64, _i64, _vp, _vp, cusparseIndexType_t,
           cusparseIndexBase_t, cudaDataType]),
    # cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t spMatDescr)
    Proto("cusparseDestroySpMat", cusparseStatus_t, [cusparseConstSpMatDescr_t]),
    # cusparseStatus_t cusparseSpMatGetSize(cusparseConstSpMatDescr_t spMatDescr,
    #     int64_t *rows, int64_t *cols, int64_t *nnz)
    Proto("cusparseSpMatGetSize", cusparseStatus_t,
          [cusparseConstSpMatDescr_t, _pi64, _pi64, _pi64]),
    # cusparseStatus_t cusparseSpMatSetAttribute(cusparseSpMatDescr_t spMatDescr,
    #     cusparseSpMatAttribute_t attribute, void *data, size_t dataSize)
    Proto("cusparseSpMatSetAttribute", cusparseStatus_t,
          [_sp, cusparseSpMatAttribute_t, _vp, c_size_t]),
    # cusparseStatus_t cusparseCsrSetPointers(cusparseSpMatDescr_t spMatDescr,
    #     void *csrRowOffsets, void *csrColInd, void *csrValues)
    Proto("cusparseCsrSetPointers", cusparseStatus_t, [_sp, _vp, _vp, _vp]),
    # cusparseStatus_t cusparseCscSetPointers(cusparseSpMatDescr_t spMatDescr,
    #     void *cscColOffsets, void *cscRowInd, void *cscValues)
    Proto("cusparseCscSetPointers", cusparseStatus_t, [_sp, _vp, _vp, _vp]),
    # cusparseStatus_t cusparseCooSetPointers(cusparseSpMatDescr_t spMatDescr,
    #     void *cooRows, void *cooColumns, void *cooValues)
    Proto("cusparseCooSetPointers", cusparseStatus_t, [_sp, _vp, _vp, _vp]),
    # cusparseStatus_t cusparseSpMatSetValues(cusparseSpMatDescr_t spMatDescr, void *values)
    Proto("cusparseSpMatSetValues", cusparseStatus_t, [_sp, _vp]),
    # -- dense descriptors ---------------------------------------------------------------------
    # cusparseStatus_t cusparseCreateDnVec(cusparseDnVecDescr_t *dnVecDescr, int64_t size,
    #     void *values, cudaDataType valueType)
    Proto("cusparseCreateDnVec", cusparseStatus_t, [POINTER(_dv), _i64, _vp, cudaDataType]),
    # cusparseStatus_t cusparseDestroyDnVec(cusparseConstDnVecDescr_t dnVecDescr)
    Proto("cusparseDestroyDnVec", cusparseStatus_t, [cusparseConstDnVecDescr_t]),
    # cusparseStatus_t cusparseDnVecSetValues(cusparseDnVecDescr_t dnVecDescr, void *values)
    Proto("cusparseDnVecSetValues", cusparseStatus_t, [_dv, _vp]),
    # cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t *dnMatDescr, int64_t rows,
    #     int64_t cols, int64_t ld, void *values, cudaDataType valueType,
    #     cusparseOrder_t order)
    Proto("cusparseCreateDnMat", cusparseStatus_t,
          [POINTER(_dm), _i64, _i64, _i64, _vp, cudaDataType, cusparseOrder_t]),
    # cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t dnMatDescr)
    Proto("cusparseDestroyDnMat", cusparseStatus_t, [cusparseConstDnMatDescr_t]),
    # cusparseStatus_t cusparseDnMatSetValues(cusparseDnMatDescr_t dnMatDescr, void *values)
    Proto("cusparseDnMatSetValues", cusparseStatus_t, [_dm, _vp]),
    # -- conversions ---------------------------------------------------------------------------
    # cusparseStatus_t cusparseSparseToDense_bufferSize(cusparseHandle_t handle,
    #     cusparseConstSpMatDescr_t matA, cusparseDnMatDescr_t matB,
    #     cusparseSparseToDenseAlg_t alg, size_t *bufferSize)
    Proto("cusparseSparseToDense_bufferSize", cusparseStatus_t,
          [_h, _sp, _dm, cusparseSparseToDenseAlg_t, _ps]),
    # cusparseStatus_t cusparseSparseToDense(cusparseHandle_t handle,
    #     cusparseConstSpMatDescr_t matA, cusparseDnMatDescr_t matB,
    #     cusparseSparseToDenseAlg_t alg, void *externalBuffer)
    Proto("cusparseSparseToDense", cusparseStatus_t,
          [_h, _sp, _dm, cusparseSparseToDenseAlg_t, _vp]),
    # cusparseStatus_t cusparseDenseToSparse_bufferSize(cusparseHandle_t handle,
    #     cusparseConstDnMatDescr_t matA, cusparseSpMatDescr_t matB,
    #     cusparseDenseToSparseAlg_t alg, size_t *bufferSize)
    Proto("cusparseDenseToSparse_bufferSize", cusparseStatus_t,
          [_h, _dm, _sp, cusparseDenseToSparseAlg_t, _ps]),
    # cusparseStatus_t cusparseDenseToSparse_analysis(cusparseHandle_t handle,
    #     cusparseConstDnMatDescr_t matA, cusparseSpMatDescr_t matB,
    #     cusparseDenseToSparseAlg_t alg, void *externalBuffer)
    Proto("cusparseDenseToSparse_analysis", cusparseStatus_t,
          [_h, _dm, _sp, cusparseDenseToSparseAlg_t, _vp]),
    # cusparseStatus_t cusparseDenseToSparse_convert(cusparseHandle_t handle,
    #     cusparseConstDnMatDescr_t matA, cusparseSpMatDescr_t matB,
    #     cusparseDenseToSparseAlg_t alg, void *externalBuffer)
    Proto("cusparseDenseToSparse_convert", cusparseStatus_t,
          [_h, _dm, _sp, cusparseDenseToSparseAlg_t, _vp]),
    # -- SpMV ----------------------------------------------------------------------------------
    # cusparseStatus_t cusparseSpMV_bufferSize(cusparseHandle_t handle,
    #     cusparseOperation_t opA, const void *alpha, cusparseConstSpMatDescr_t matA,
    #     cusparseConstDnVecDescr_t vecX, const void *beta, cusparseDnVecDescr_t vecY,
    #     cudaDataType computeType, cusparseSpMVAlg_t alg, size_t *bufferSize)
    Proto("cusparseSpMV_bufferSize", cusparseStatus_t,
          [_h, _op, _vp, _sp, _dv, _vp, _dv, cudaDataType, cusparseSpMVAlg_t, _ps]),
    # cusparseStatus_t cusparseSpMV_preprocess(... same as cusparseSpMV ...,
    #     void *externalBuffer)
    Proto("cusparseSpMV_preprocess", cusparseStatus_t,
          [_h, _op, _vp, _sp, _dv, _vp, _dv, cudaDataType, cusparseSpMVAlg_t, _vp]),
    # cusparseStatus_t cusparseSpMV(cusparseHandle_t handle, cusparseOperation_t opA,
    #     const void *alpha, cusparseConstSpMatDescr_t matA, cusparseConstDnVecDescr_t vecX,
    #     const void *beta, cusparseDnVecDescr_t vecY, cudaDataType computeType,
    #     cusparseSpMVAlg_t alg, void *externalBuffer)
    Proto("cusparseSpMV", cusparseStatus_t,
          [_h, _op, _vp, _sp, _dv, _vp, _dv, cudaDataType, cusparseSpMVAlg_t, _vp]),
    # -- SpMM ----------------------------------------------------------------------------------
    # cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t handle,
    #     cusparseOperation_t opA, cusparseOperation_t opB, const void *alpha,
    #     cusparseConstSpMatDescr_t matA, cusparseConstDnMatDescr_t matB, const void *beta,
    #     cusparseDnMatDescr_t matC, cudaDataType computeType, cusparseSpMMAlg_t alg,
    #     size_t *bufferSize)
    Proto("cusparseSpMM_bufferSize", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _dm, _vp, _dm, cudaDataType, cusparseSpMMAlg_t, _ps]),
    # cusparseStatus_t cusparseSpMM_preprocess(... as cusparseSpMM ...)
    Proto("cusparseSpMM_preprocess", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _dm, _vp, _dm, cudaDataType, cusparseSpMMAlg_t, _vp]),
    # cusparseStatus_t cusparseSpMM(cusparseHandle_t handle, cusparseOperation_t opA,
    #     cusparseOperation_t opB, const void *alpha, cusparseConstSpMatDescr_t matA,
    #     cusparseConstDnMatDescr_t matB, const void *beta, cusparseDnMatDescr_t matC,
    #     cudaDataType computeType, cusparseSpMMAlg_t alg, void *externalBuffer)
    Proto("cusparseSpMM", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _dm, _vp, _dm, cudaDataType, cusparseSpMMAlg_t, _vp]),
    # -- SDDMM ---------------------------------------------------------------------------------
    # cusparseStatus_t cusparseSDDMM_bufferSize(cusparseHandle_t handle,
    #     cusparseOperation_t opA, cusparseOperation_t opB, const void *alpha,
    #     cusparseConstDnMatDescr_t matA, cusparseConstDnMatDescr_t matB, const void *beta,
    #     cusparseSpMatDescr_t matC, cudaDataType computeType, cusparseSDDMMAlg_t alg,
    #     size_t *bufferSize)
    Proto("cusparseSDDMM_bufferSize", cusparseStatus_t,
          [_h, _op, _op, _vp, _dm, _dm, _vp, _sp, cudaDataType, cusparseSDDMMAlg_t, _ps]),
    # cusparseStatus_t cusparseSDDMM_preprocess(... as cusparseSDDMM ...)
    Proto("cusparseSDDMM_preprocess", cusparseStatus_t,
          [_h, _op, _op, _vp, _dm, _dm, _vp, _sp, cudaDataType, cusparseSDDMMAlg_t, _vp]),
    # cusparseStatus_t cusparseSDDMM(cusparseHandle_t handle, cusparseOperation_t opA,
    #     cusparseOperation_t opB, const void *alpha, cusparseConstDnMatDescr_t matA,
    #     cusparseConstDnMatDescr_t matB, const void *beta, cusparseSpMatDescr_t matC,
    #     cudaDataType computeType, cusparseSDDMMAlg_t alg, void *externalBuffer)
    Proto("cusparseSDDMM", cusparseStatus_t,
          [_h, _op, _op, _vp, _dm, _dm, _vp, _sp, cudaDataType, cusparseSDDMMAlg_t, _vp]),
    # -- SpGEMM --------------------------------------------------------------------------------
    # cusparseStatus_t cusparseSpGEMM_createDescr(cusparseSpGEMMDescr_t *descr)
    Proto("cusparseSpGEMM_createDescr", cusparseStatus_t, [POINTER(cusparseSpGEMMDescr_t)]),
    # cusparseStatus_t cusparseSpGEMM_destroyDescr(cusparseSpGEMMDescr_t descr)
    Proto("cusparseSpGEMM_destroyDescr", cusparseStatus_t, [cusparseSpGEMMDescr_t]),
    # cusparseStatus_t cusparseSpGEMM_workEstimation(cusparseHandle_t handle,
    #     cusparseOperation_t opA, cusparseOperation_t opB, const void *alpha,
    #     cusparseConstSpMatDescr_t matA, cusparseConstSpMatDescr_t matB, const void *beta,
    #     cusparseSpMatDescr_t matC, cudaDataType computeType, cusparseSpGEMMAlg_t alg,
    #     cusparseSpGEMMDescr_t spgemmDescr, size_t *bufferSize1, void *externalBuffer1)
    Proto("cusparseSpGEMM_workEstimation", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _sp, _vp, _sp, cudaDataType, cusparseSpGEMMAlg_t,
           cusparseSpGEMMDescr_t, _ps, _vp]),
    # cusparseStatus_t cusparseSpGEMM_estimateMemory(cusparseHandle_t handle,
    #     cusparseOperation_t opA, cusparseOperation_t opB, const void *alpha,
    #     cusparseConstSpMatDescr_t matA, cusparseConstSpMatDescr_t matB, const void *beta,
    #     cusparseSpMatDescr_t matC, cudaDataType computeType, cusparseSpGEMMAlg_t alg,
    #     cusparseSpGEMMDescr_t spgemmDescr, float chunk_fraction, size_t *bufferSize3,
    #     void *externalBuffer3, size_t *bufferSize2)
    Proto("cusparseSpGEMM_estimateMemory", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _sp, _vp, _sp, cudaDataType, cusparseSpGEMMAlg_t,
           cusparseSpGEMMDescr_t, c_float, _ps, _vp, _ps]),
    # cusparseStatus_t cusparseSpGEMM_compute(... as workEstimation ...,
    #     size_t *bufferSize2, void *externalBuffer2)
    Proto("cusparseSpGEMM_compute", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _sp, _vp, _sp, cudaDataType, cusparseSpGEMMAlg_t,
           cusparseSpGEMMDescr_t, _ps, _vp]),
    # cusparseStatus_t cusparseSpGEMM_copy(cusparseHandle_t handle, cusparseOperation_t opA,
    #     cusparseOperation_t opB, const void *alpha, cusparseConstSpMatDescr_t matA,
    #     cusparseConstSpMatDescr_t matB, const void *beta, cusparseSpMatDescr_t matC,
    #     cudaDataType computeType, cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t spgemmDescr)
    Proto("cusparseSpGEMM_copy", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _sp, _vp, _sp, cudaDataType, cusparseSpGEMMAlg_t,
           cusparseSpGEMMDescr_t]),
    # -- SpSV ----------------------------------------------------------------------------------
    # cusparseStatus_t cusparseSpSV_createDescr(cusparseSpSVDescr_t *descr)
    Proto("cusparseSpSV_createDescr", cusparseStatus_t, [POINTER(cusparseSpSVDescr_t)]),
    # cusparseStatus_t cusparseSpSV_destroyDescr(cusparseSpSVDescr_t descr)
    Proto("cusparseSpSV_destroyDescr", cusparseStatus_t, [cusparseSpSVDescr_t]),
    # cusparseStatus_t cusparseSpSV_bufferSize(cusparseHandle_t handle,
    #     cusparseOperation_t opA, const void *alpha, cusparseConstSpMatDescr_t matA,
    #     cusparseConstDnVecDescr_t vecX, cusparseDnVecDescr_t vecY, cudaDataType computeType,
    #     cusparseSpSVAlg_t alg, cusparseSpSVDescr_t spsvDescr, size_t *bufferSize)
    Proto("cusparseSpSV_bufferSize", cusparseStatus_t,
          [_h, _op, _vp, _sp, _dv, _dv, cudaDataType, cusparseSpSVAlg_t,
           cusparseSpSVDescr_t, _ps]),
    # cusparseStatus_t cusparseSpSV_analysis(... as bufferSize ..., void *externalBuffer)
    Proto("cusparseSpSV_analysis", cusparseStatus_t,
          [_h, _op, _vp, _sp, _dv, _dv, cudaDataType, cusparseSpSVAlg_t,
           cusparseSpSVDescr_t, _vp]),
    # cusparseStatus_t cusparseSpSV_solve(cusparseHandle_t handle, cusparseOperation_t opA,
    #     const void *alpha, cusparseConstSpMatDescr_t matA, cusparseConstDnVecDescr_t vecX,
    #     cusparseDnVecDescr_t vecY, cudaDataType computeType, cusparseSpSVAlg_t alg,
    #     cusparseSpSVDescr_t spsvDescr)
    Proto("cusparseSpSV_solve", cusparseStatus_t,
          [_h, _op, _vp, _sp, _dv, _dv, cudaDataType, cusparseSpSVAlg_t,
           cusparseSpSVDescr_t]),
    # -- SpSM ----------------------------------------------------------------------------------
    # cusparseStatus_t cusparseSpSM_createDescr(cusparseSpSMDescr_t *descr)
    Proto("cusparseSpSM_createDescr", cusparseStatus_t, [POINTER(cusparseSpSMDescr_t)]),
    # cusparseStatus_t cusparseSpSM_destroyDescr(cusparseSpSMDescr_t descr)
    Proto("cusparseSpSM_destroyDescr", cusparseStatus_t, [cusparseSpSMDescr_t]),
    # cusparseStatus_t cusparseSpSM_bufferSize(cusparseHandle_t handle,
    #     cusparseOperation_t opA, cusparseOperation_t opB, const void *alpha,
    #     cusparseConstSpMatDescr_t matA, cusparseConstDnMatDescr_t matB,
    #     cusparseDnMatDescr_t matC, cudaDataType computeType, cusparseSpSMAlg_t alg,
    #     cusparseSpSMDescr_t spsmDescr, size_t *bufferSize)
    Proto("cusparseSpSM_bufferSize", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _dm, _dm, cudaDataType, cusparseSpSMAlg_t,
           cusparseSpSMDescr_t, _ps]),
    # cusparseStatus_t cusparseSpSM_analysis(... as bufferSize ..., void *externalBuffer)
    Proto("cusparseSpSM_analysis", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _dm, _dm, cudaDataType, cusparseSpSMAlg_t,
           cusparseSpSMDescr_t, _vp]),
    # cusparseStatus_t cusparseSpSM_solve(cusparseHandle_t handle, cusparseOperation_t opA,
    #     cusparseOperation_t opB, const void *alpha, cusparseConstSpMatDescr_t matA,
    #     cusparseConstDnMatDescr_t matB, cusparseDnMatDescr_t matC, cudaDataType computeType,
    #     cusparseSpSMAlg_t alg, cusparseSpSMDescr_t spsmDescr)
    Proto("cusparseSpSM_solve", cusparseStatus_t,
          [_h, _op, _op, _vp, _sp, _dm, _dm, cudaDataType, cusparseSpSMAlg_t,
           cusparseSpSMDescr_t]),
]

get = LazyLibrary("cusparse", TABLE)
