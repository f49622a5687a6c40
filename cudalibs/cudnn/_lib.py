"""cuDNN: ctypes types and the prototype table (``cudnn.h``), nothing else.

``cudnn.h`` only includes ``cudnn_graph.h``, ``cudnn_ops.h``, ``cudnn_cnn.h`` and
``cudnn_adv.h``.  cuDNN 9 implements the legacy API in sub-libraries (``libcudnn_ops.so.9``:
tensors, pooling, activation, softmax, batch-norm; ``libcudnn_cnn.so.9``: convolution), but
``libcudnn.so.9`` exports a forwarding stub for every one of them (checked with ``nm -D`` on
the 9.x wheels) and dlopens the sub-library on first use, so one table bound against
``libcudnn.so.9`` reaches all of them; the ``cudnn*VersionCheck`` rows tell whether the
sub-libraries it found match it.  Names are the vendor's.
cuDNN 9 marks the legacy descriptor API (filter, convolution, pooling, activation)
``CUDNN_DEPRECATED``, but still exports it; the graph API is bound separately when a wrapper
needs it.  A CPU test checks every row against the headers.
"""

from ctypes import POINTER, Structure, c_char_p, c_double, c_float, c_int, c_size_t, c_void_p

from .._ffi import LazyLibrary, Proto, opaque_handle
from ..driver._lib import CUstream

# Headers (found in the NVIDIA wheels) that declare everything below.
HEADERS = ("cudnn.h",)

cudnnStatus_t = c_int
cudnnDataType_t = c_int
cudnnTensorFormat_t = c_int
cudnnConvolutionMode_t = c_int
cudnnMathType_t = c_int
cudnnPoolingMode_t = c_int
cudnnActivationMode_t = c_int
cudnnNanPropagation_t = c_int
libraryPropertyType = c_int
cudnnSoftmaxAlgorithm_t = c_int
cudnnSoftmaxMode_t = c_int
cudnnBatchNormMode_t = c_int
cudnnDeterminism_t = c_int
cudnnConvolutionFwdAlgo_t = c_int
cudnnConvolutionBwdDataAlgo_t = c_int
cudnnConvolutionBwdFilterAlgo_t = c_int

# typedef struct cudnnContext *cudnnHandle_t
cudnnHandle_t = opaque_handle("cudnnContext")
# typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t (and likewise below)
cudnnTensorDescriptor_t = opaque_handle("cudnnTensorStruct")
cudnnFilterDescriptor_t = opaque_handle("cudnnFilterStruct")
cudnnConvolutionDescriptor_t = opaque_handle("cudnnConvolutionStruct")
cudnnPoolingDescriptor_t = opaque_handle("cudnnPoolingStruct")
cudnnActivationDescriptor_t = opaque_handle("cudnnActivationStruct")
# driver_types.h: typedef struct CUstream_st *cudaStream_t -- the driver's CUstream, the very
# same ctypes type, so a cudalibs stream handle passes straight through.
cudaStream_t = CUstream

# enum libraryPropertyType_t (library_types.h)
MAJOR_VERSION = 0
MINOR_VERSION = 1
PATCH_LEVEL = 2

# #define CUDNN_DIM_MAX 8 (cudnn_graph.h): the most dimensions a tensor descriptor holds
CUDNN_DIM_MAX = 8

# enum cudnnDataType_t (the element types; cudalibs.dtypes maps them to numpy)
CUDNN_DATA_FLOAT = 0
CUDNN_DATA_DOUBLE = 1
CUDNN_DATA_HALF = 2
CUDNN_DATA_INT8 = 3
CUDNN_DATA_INT32 = 4
CUDNN_DATA_UINT8 = 6
CUDNN_DATA_BFLOAT16 = 9
CUDNN_DATA_INT64 = 10
CUDNN_DATA_BOOLEAN = 11
CUDNN_DATA_FP8_E4M3 = 12
CUDNN_DATA_FP8_E5M2 = 13
# enum cudnnTensorFormat_t
CUDNN_TENSOR_NCHW = 0
CUDNN_TENSOR_NHWC = 1
CUDNN_TENSOR_NCHW_VECT_C = 2
# enum cudnnConvolutionMode_t
CUDNN_CONVOLUTION = 0
CUDNN_CROSS_CORRELATION = 1
# enum cudnnMathType_t
CUDNN_DEFAULT_MATH = 0
CUDNN_TENSOR_OP_MATH = 1
CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2
CUDNN_FMA_MATH = 3
# enum cudnnNanPropagation_t
CUDNN_NOT_PROPAGATE_NAN = 0
CUDNN_PROPAGATE_NAN = 1
# enum cudnnPoolingMode_t
CUDNN_POOLING_MAX = 0
CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING = 1
CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING = 2
CUDNN_POOLING_MAX_DETERMINISTIC = 3
# enum cudnnActivationMode_t
CUDNN_ACTIVATION_SIGMOID = 0
CUDNN_ACTIVATION_RELU = 1
CUDNN_ACTIVATION_TANH = 2
CUDNN_ACTIVATION_CLIPPED_RELU = 3
CUDNN_ACTIVATION_ELU = 4
CUDNN_ACTIVATION_IDENTITY = 5
CUDNN_ACTIVATION_SWISH = 6
# enum cudnnSoftmaxAlgorithm_t
CUDNN_SOFTMAX_FAST = 0
CUDNN_SOFTMAX_ACCURATE = 1
CUDNN_SOFTMAX_LOG = 2
# enum cudnnSoftmaxMode_t
CUDNN_SOFTMAX_MODE_INSTANCE = 0
CUDNN_SOFTMAX_MODE_CHANNEL = 1
# enum cudnnBatchNormMode_t
CUDNN_BATCHNORM_PER_ACTIVATION = 0
CUDNN_BATCHNORM_SPATIAL = 1
CUDNN_BATCHNORM_SPATIAL_PERSISTENT = 2
# enum cudnnDeterminism_t
CUDNN_NON_DETERMINISTIC = 0
CUDNN_DETERMINISTIC = 1
# enum cudnnConvolutionFwdAlgo_t
CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0
CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM = 1
CUDNN_CONVOLUTION_FWD_ALGO_GEMM = 2
CUDNN_CONVOLUTION_FWD_ALGO_DIRECT = 3
CUDNN_CONVOLUTION_FWD_ALGO_FFT = 4
CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING = 5
CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD = 6
CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED = 7
CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8
# enum cudnnConvolutionBwdDataAlgo_t
CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 = 0
CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 = 1
CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT = 2
CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING = 3
CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD = 4
CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED = 5
CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT = 6
# enum cudnnConvolutionBwdFilterAlgo_t
CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 = 0
CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 = 1
CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT = 2
CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 = 3
CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD = 4
CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED = 5
CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING = 6
CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT = 7


def _perf_struct(tag):
    # typedef struct cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerfStruct {
    #     cudnnConvolution...Algo_t algo; cudnnStatus_t status; float time; size_t memory;
    #     cudnnDeterminism_t determinism; cudnnMathType_t mathType; int reserved[3];
    # } -- the three are identical but distinct C types.
    return type(tag, (Structure,), {"_fields_": [
        ("algo", c_int), ("status", cudnnStatus_t), ("time", c_float), ("memory", c_size_t),
        ("determinism", cudnnDeterminism_t), ("mathType", cudnnMathType_t),
        ("reserved", c_int * 3)]})


cudnnConvolutionFwdAlgoPerf_t = _perf_struct("cudnnConvolutionFwdAlgoPerfStruct")
cudnnConvolutionBwdDataAlgoPerf_t = _perf_struct("cudnnConvolutionBwdDataAlgoPerfStruct")
cudnnConvolutionBwdFilterAlgoPerf_t = _perf_struct("cudnnConvolutionBwdFilterAlgoPerfStruct")

# ctypes struct -> C struct tag, for the CPU header test.
STRUCTS = {
    cudnnConvolutionFwdAlgoPerf_t: "cudnnConvolutionFwdAlgoPerfStruct",
    cudnnConvolutionBwdDataAlgoPerf_t: "cudnnConvolutionBwdDataAlgoPerfStruct",
    cudnnConvolutionBwdFilterAlgoPerf_t: "cudnnConvolutionBwdFilterAlgoPerfStruct",
}

TABLE = [
    # size_t cudnnGetVersion(void)
    Proto("cudnnGetVersion", c_size_t, []),
    # size_t cudnnGetMaxDeviceVersion(void)
    Proto("cudnnGetMaxDeviceVersion", c_size_t, []),
    # size_t cudnnGetCudartVersion(void)
    Proto("cudnnGetCudartVersion", c_size_t, []),
    # cudnnStatus_t cudnnGetProperty(libraryPropertyType type, int *value)
    Proto("cudnnGetProperty", cudnnStatus_t, [libraryPropertyType, POINTER(c_int)]),
    # const char *cudnnGetErrorString(cudnnStatus_t status)
    Proto("cudnnGetErrorString", c_char_p, [cudnnStatus_t]),
    # void cudnnGetLastErrorString(char *message, size_t max_size)
    Proto("cudnnGetLastErrorString", None, [c_char_p, c_size_t]),
    # cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
    Proto("cudnnCreate", cudnnStatus_t, [POINTER(cudnnHandle_t)]),
    # cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
    Proto("cudnnDestroy", cudnnStatus_t, [cudnnHandle_t]),
    # cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId)
    Proto("cudnnSetStream", cudnnStatus_t, [cudnnHandle_t, cudaStream_t]),
    # cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId)
    Proto("cudnnGetStream", cudnnStatus_t, [cudnnHandle_t, POINTER(cudaStream_t)]),
    # cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc)
    Proto("cudnnCreateTensorDescriptor", cudnnStatus_t, [POINTER(cudnnTensorDescriptor_t)]),
    # cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc)
    Proto("cudnnDestroyTensorDescriptor", cudnnStatus_t, [cudnnTensorDescriptor_t]),
    # cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t tensorDesc,
    #                                          cudnnDataType_t dataType, int nbDims,
    #                                          const int dimA[], const int strideA[])
    Proto("cudnnSetTensorNdDescriptor", cudnnStatus_t,
          [cudnnTensorDescriptor_t, cudnnDataType_t, c_int, POINTER(c_int), POINTER(c_int)]),
    # cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t tensorDesc,
    #                                          int nbDimsRequested, cudnnDataType_t *dataType,
    #                                          int *nbDims, int dimA[], int strideA[])
    Proto("cudnnGetTensorNdDescriptor", cudnnStatus_t,
          [cudnnTensorDescriptor_t, c_int, POINTER(cudnnDataType_t), POINTER(c_int),
           POINTER(c_int), POINTER(c_int)]),
    # cudnnStatus_t cudnnSetTensorNdDescriptorEx(cudnnTensorDescriptor_t tensorDesc,
    #                                            cudnnTensorFormat_t format,
    #                                            cudnnDataType_t dataType, int nbDims,
    #                                            const int dimA[])
    Proto("cudnnSetTensorNdDescriptorEx", cudnnStatus_t,
          [cudnnTensorDescriptor_t, cudnnTensorFormat_t, cudnnDataType_t, c_int,
           POINTER(c_int)]),
    # cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc)
    Proto("cudnnCreateFilterDescriptor", cudnnStatus_t, [POINTER(cudnnFilterDescriptor_t)]),
    # cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc)
    Proto("cudnnDestroyFilterDescriptor", cudnnStatus_t, [cudnnFilterDescriptor_t]),
    # cudnnStatus_t cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t filterDesc,
    #                                          cudnnDataType_t dataType,
    #                                          cudnnTensorFormat_t format, int nbDims,
    #                                          const int filterDimA[])
    Proto("cudnnSetFilterNdDescriptor", cudnnStatus_t,
          [cudnnFilterDescriptor_t, cudnnDataType_t, cudnnTensorFormat_t, c_int,
           POINTER(c_int)]),
    # cudnnStatus_t cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t filterDesc,
    #                                          int nbDimsRequested, cudnnDataType_t *dataType,
    #                                          cudnnTensorFormat_t *format, int *nbDims,
    #                                          int filterDimA[])
    Proto("cudnnGetFilterNdDescriptor", cudnnStatus_t,
          [cudnnFilterDescriptor_t, c_int, POINTER(cudnnDataType_t),
           POINTER(cudnnTensorFormat_t), POINTER(c_int), POINTER(c_int)]),
    # cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc)
    Proto("cudnnCreateConvolutionDescriptor", cudnnStatus_t,
          [POINTER(cudnnConvolutionDescriptor_t)]),
    # cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc)
    Proto("cudnnDestroyConvolutionDescriptor", cudnnStatus_t, [cudnnConvolutionDescriptor_t]),
    # cudnnStatus_t cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t convDesc,
    #                                               int arrayLength, const int padA[],
    #                                               const int filterStrideA[],
    #                                               const int dilationA[],
    #                                               cudnnConvolutionMode_t mode,
    #                                               cudnnDataType_t computeType)
    Proto("cudnnSetConvolutionNdDescriptor", cudnnStatus_t,
          [cudnnConvolutionDescriptor_t, c_int, POINTER(c_int), POINTER(c_int),
           POINTER(c_int), cudnnConvolutionMode_t, cudnnDataType_t]),
    # cudnnStatus_t cudnnGetConvolutionNdDescriptor(const cudnnConvolutionDescriptor_t convDesc,
    #                                               int arrayLengthRequested, int *arrayLength,
    #                                               int padA[], int strideA[], int dilationA[],
    #                                               cudnnConvolutionMode_t *mode,
    #                                               cudnnDataType_t *computeType)
    Proto("cudnnGetConvolutionNdDescriptor", cudnnStatus_t,
          [cudnnConvolutionDescriptor_t, c_int, POINTER(c_int), POINTER(c_int),
           POINTER(c_int), POINTER(c_int), POINTER(cudnnConvolutionMode_t),
           POINTER(cudnnDataType_t)]),
    # cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
    #                                             int groupCount)
    Proto("cudnnSetConvolutionGroupCount", cudnnStatus_t, [cudnnConvolutionDescriptor_t, c_int]),
    # cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
    #                                           cudnnMathType_t mathType)
    Proto("cudnnSetConvolutionMathType", cudnnStatus_t,
          [cudnnConvolutionDescriptor_t, cudnnMathType_t]),
    # cudnnStatus_t cudnnGetConvolutionNdForwardOutputDim(
    #     const cudnnConvolutionDescriptor_t convDesc,
    #     const cudnnTensorDescriptor_t inputTensorDesc,
    #     const cudnnFilterDescriptor_t filterDesc, int nbDims, int tensorOuputDimA[])
    Proto("cudnnGetConvolutionNdForwardOutputDim", cudnnStatus_t,
          [cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
           c_int, POINTER(c_int)]),
    # cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t *poolingDesc)
    Proto("cudnnCreatePoolingDescriptor", cudnnStatus_t, [POINTER(cudnnPoolingDescriptor_t)]),
    # cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t poolingDesc)
    Proto("cudnnDestroyPoolingDescriptor", cudnnStatus_t, [cudnnPoolingDescriptor_t]),
    # cudnnStatus_t cudnnSetPoolingNdDescriptor(cudnnPoolingDescriptor_t poolingDesc,
    #                                           const cudnnPoolingMode_t mode,
    #                                           const cudnnNanPropagation_t maxpoolingNanOpt,
    #                                           int nbDims, const int windowDimA[],
    #                                           const int paddingA[], const int strideA[])
    Proto("cudnnSetPoolingNdDescriptor", cudnnStatus_t,
          [cudnnPoolingDescriptor_t, cudnnPoolingMode_t, cudnnNanPropagation_t, c_int,
           POINTER(c_int), POINTER(c_int), POINTER(c_int)]),
    # cudnnStatus_t cudnnGetPoolingNdForwardOutputDim(const cudnnPoolingDescriptor_t poolingDesc,
    #                                                 const cudnnTensorDescriptor_t inputTensorDesc,
    #                                                 int nbDims, int outputTensorDimA[])
    Proto("cudnnGetPoolingNdForwardOutputDim", cudnnStatus_t,
          [cudnnPoolingDescriptor_t, cudnnTensorDescriptor_t, c_int, POINTER(c_int)]),
    # cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t *activationDesc)
    Proto("cudnnCreateActivationDescriptor", cudnnStatus_t,
          [POINTER(cudnnActivationDescriptor_t)]),
    # cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t activationDesc)
    Proto("cudnnDestroyActivationDescriptor", cudnnStatus_t, [cudnnActivationDescriptor_t]),
    # cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t activationDesc,
    #                                            cudnnActivationMode_t mode,
    #                                            cudnnNanPropagation_t reluNanOpt, double coef)
    Proto("cudnnSetActivationDescriptor", cudnnStatus_t,
          [cudnnActivationDescriptor_t, cudnnActivationMode_t, cudnnNanPropagation_t, c_double]),
    # cudnnStatus_t cudnnGraphVersionCheck(void)
    Proto("cudnnGraphVersionCheck", cudnnStatus_t, []),
    # cudnnStatus_t cudnnOpsVersionCheck(void)
    Proto("cudnnOpsVersionCheck", cudnnStatus_t, []),
    # cudnnStatus_t cudnnCnnVersionCheck(void)
    Proto("cudnnCnnVersionCheck", cudnnStatus_t, []),
    # cudnnStatus_t cudnnGetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
    #                                           cudnnMathType_t *mathType)
    Proto("cudnnGetConvolutionMathType", cudnnStatus_t,
          [cudnnConvolutionDescriptor_t, POINTER(cudnnMathType_t)]),
    # cudnnStatus_t cudnnGetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc,
    #                                             int *groupCount)
    Proto("cudnnGetConvolutionGroupCount", cudnnStatus_t,
          [cudnnConvolutionDescriptor_t, POINTER(c_int)]),
    # cudnnStatus_t cudnnGetPoolingNdDescriptor(const cudnnPoolingDescriptor_t poolingDesc,
    #                                           int nbDimsRequested, cudnnPoolingMode_t *mode,
    #                                           cudnnNanPropagation_t *maxpoolingNanOpt,
    #                                           int *nbDims, int windowDimA[],
    #                                           int paddingA[], int strideA[])
    Proto("cudnnGetPoolingNdDescriptor", cudnnStatus_t,
          [cudnnPoolingDescriptor_t, c_int, POINTER(cudnnPoolingMode_t),
           POINTER(cudnnNanPropagation_t), POINTER(c_int), POINTER(c_int), POINTER(c_int),
           POINTER(c_int)]),
    # cudnnStatus_t cudnnGetActivationDescriptor(const cudnnActivationDescriptor_t activationDesc,
    #                                            cudnnActivationMode_t *mode,
    #                                            cudnnNanPropagation_t *reluNanOpt,
    #                                            double *coef)
    Proto("cudnnGetActivationDescriptor", cudnnStatus_t,
          [cudnnActivationDescriptor_t, POINTER(cudnnActivationMode_t),
           POINTER(cudnnNanPropagation_t), POINTER(c_double)]),
    # cudnnStatus_t cudnnSetActivationDescriptorSwishBeta(cudnnActivationDescriptor_t
    #                                                     activationDesc, double swish_beta)
    Proto("cudnnSetActivationDescriptorSwishBeta", cudnnStatus_t,
          [cudnnActivationDescriptor_t, c_double]),
    # cudnnStatus_t cudnnDeriveBNTensorDescriptor(cudnnTensorDescriptor_t derivedBnDesc,
    #                                             const cudnnTensorDescriptor_t xDesc,
    #                                             cudnnBatchNormMode_t mode)
    Proto("cudnnDeriveBNTensorDescriptor", cudnnStatus_t,
          [cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnBatchNormMode_t]),
    # -- ops: element-wise, pooling, softmax, batch-norm ------------------------------------
    # cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void *alpha,
    #                              const cudnnTensorDescriptor_t aDesc, const void *A,
    #                              const void *beta, const cudnnTensorDescriptor_t cDesc,
    #                              void *C)
    Proto("cudnnAddTensor", cudnnStatus_t,
          [cudnnHandle_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, c_void_p,
           cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnActivationForward(cudnnHandle_t handle,
    #                                      cudnnActivationDescriptor_t activationDesc,
    #                                      const void *alpha,
    #                                      const cudnnTensorDescriptor_t xDesc, const void *x,
    #                                      const void *beta,
    #                                      const cudnnTensorDescriptor_t yDesc, void *y)
    Proto("cudnnActivationForward", cudnnStatus_t,
          [cudnnHandle_t, cudnnActivationDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, c_void_p, cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnActivationBackward(cudnnHandle_t handle,
    #                                       cudnnActivationDescriptor_t activationDesc,
    #                                       const void *alpha,
    #                                       const cudnnTensorDescriptor_t yDesc, const void *y,
    #                                       const cudnnTensorDescriptor_t dyDesc, const void *dy,
    #                                       const cudnnTensorDescriptor_t xDesc, const void *x,
    #                                       const void *beta,
    #                                       const cudnnTensorDescriptor_t dxDesc, void *dx)
    Proto("cudnnActivationBackward", cudnnStatus_t,
          [cudnnHandle_t, cudnnActivationDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           c_void_p, cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
    #                                   cudnnSoftmaxMode_t mode, const void *alpha,
    #                                   const cudnnTensorDescriptor_t xDesc, const void *x,
    #                                   const void *beta,
    #                                   const cudnnTensorDescriptor_t yDesc, void *y)
    Proto("cudnnSoftmaxForward", cudnnStatus_t,
          [cudnnHandle_t, cudnnSoftmaxAlgorithm_t, cudnnSoftmaxMode_t, c_void_p,
           cudnnTensorDescriptor_t, c_void_p, c_void_p, cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnSoftmaxBackward(cudnnHandle_t handle, cudnnSoftmaxAlgorithm_t algo,
    #                                    cudnnSoftmaxMode_t mode, const void *alpha,
    #                                    const cudnnTensorDescriptor_t yDesc, const void *y,
    #                                    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    #                                    const void *beta,
    #                                    const cudnnTensorDescriptor_t dxDesc, void *dx)
    Proto("cudnnSoftmaxBackward", cudnnStatus_t,
          [cudnnHandle_t, cudnnSoftmaxAlgorithm_t, cudnnSoftmaxMode_t, c_void_p,
           cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, c_void_p,
           cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle,
    #                                   const cudnnPoolingDescriptor_t poolingDesc,
    #                                   const void *alpha,
    #                                   const cudnnTensorDescriptor_t xDesc, const void *x,
    #                                   const void *beta,
    #                                   const cudnnTensorDescriptor_t yDesc, void *y)
    Proto("cudnnPoolingForward", cudnnStatus_t,
          [cudnnHandle_t, cudnnPoolingDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, c_void_p, cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t handle,
    #                                    const cudnnPoolingDescriptor_t poolingDesc,
    #                                    const void *alpha,
    #                                    const cudnnTensorDescriptor_t yDesc, const void *y,
    #                                    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    #                                    const cudnnTensorDescriptor_t xDesc, const void *x,
    #                                    const void *beta,
    #                                    const cudnnTensorDescriptor_t dxDesc, void *dx)
    Proto("cudnnPoolingBackward", cudnnStatus_t,
          [cudnnHandle_t, cudnnPoolingDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           c_void_p, cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnBatchNormalizationForwardTraining(
    #     cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
    #     const cudnnTensorDescriptor_t xDesc, const void *x,
    #     const cudnnTensorDescriptor_t yDesc, void *y,
    #     const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
    #     const void *bnBias, double exponentialAverageFactor, void *resultRunningMean,
    #     void *resultRunningVariance, double epsilon, void *resultSaveMean,
    #     void *resultSaveInvVariance)
    Proto("cudnnBatchNormalizationForwardTraining", cudnnStatus_t,
          [cudnnHandle_t, cudnnBatchNormMode_t, c_void_p, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           c_void_p, c_double, c_void_p, c_void_p, c_double, c_void_p, c_void_p]),
    # cudnnStatus_t cudnnBatchNormalizationForwardInference(
    #     cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alpha, const void *beta,
    #     const cudnnTensorDescriptor_t xDesc, const void *x,
    #     const cudnnTensorDescriptor_t yDesc, void *y,
    #     const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
    #     const void *bnBias, const void *estimatedMean, const void *estimatedVariance,
    #     double epsilon)
    Proto("cudnnBatchNormalizationForwardInference", cudnnStatus_t,
          [cudnnHandle_t, cudnnBatchNormMode_t, c_void_p, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           c_void_p, c_void_p, c_void_p, c_double]),
    # cudnnStatus_t cudnnBatchNormalizationBackward(
    #     cudnnHandle_t handle, cudnnBatchNormMode_t mode, const void *alphaDataDiff,
    #     const void *betaDataDiff, const void *alphaParamDiff, const void *betaParamDiff,
    #     const cudnnTensorDescriptor_t xDesc, const void *x,
    #     const cudnnTensorDescriptor_t dyDesc, const void *dy,
    #     const cudnnTensorDescriptor_t dxDesc, void *dx,
    #     const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScale,
    #     void *dBnScaleResult, void *dBnBiasResult, double epsilon, const void *savedMean,
    #     const void *savedInvVariance)
    Proto("cudnnBatchNormalizationBackward", cudnnStatus_t,
          [cudnnHandle_t, cudnnBatchNormMode_t, c_void_p, c_void_p, c_void_p, c_void_p,
           cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, c_void_p,
           c_void_p, c_double, c_void_p, c_void_p]),
    # -- cnn: convolution -------------------------------------------------------------------
    # cudnnStatus_t cudnnGetConvolutionForwardAlgorithmMaxCount(cudnnHandle_t handle,
    #                                                          int *count)
    Proto("cudnnGetConvolutionForwardAlgorithmMaxCount", cudnnStatus_t,
          [cudnnHandle_t, POINTER(c_int)]),
    # cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    #     cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    #     const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    #     const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount,
    #     int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults)
    Proto("cudnnGetConvolutionForwardAlgorithm_v7", cudnnStatus_t,
          [cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
           cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, c_int, POINTER(c_int),
           POINTER(cudnnConvolutionFwdAlgoPerf_t)]),
    # cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    #     cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    #     const cudnnFilterDescriptor_t wDesc, const void *w,
    #     const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
    #     void *y, const int requestedAlgoCount, int *returnedAlgoCount,
    #     cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace,
    #     size_t workSpaceSizeInBytes)
    Proto("cudnnFindConvolutionForwardAlgorithmEx", cudnnStatus_t,
          [cudnnHandle_t, cudnnTensorDescriptor_t, c_void_p, cudnnFilterDescriptor_t,
           c_void_p, cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, c_void_p, c_int,
           POINTER(c_int), POINTER(cudnnConvolutionFwdAlgoPerf_t), c_void_p, c_size_t]),
    # cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    #     cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
    #     const cudnnFilterDescriptor_t wDesc, const cudnnConvolutionDescriptor_t convDesc,
    #     const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo,
    #     size_t *sizeInBytes)
    Proto("cudnnGetConvolutionForwardWorkspaceSize", cudnnStatus_t,
          [cudnnHandle_t, cudnnTensorDescriptor_t, cudnnFilterDescriptor_t,
           cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, cudnnConvolutionFwdAlgo_t,
           POINTER(c_size_t)]),
    # cudnnStatus_t cudnnConvolutionForward(
    #     cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
    #     const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
    #     const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
    #     void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    #     const cudnnTensorDescriptor_t yDesc, void *y)
    Proto("cudnnConvolutionForward", cudnnStatus_t,
          [cudnnHandle_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnFilterDescriptor_t,
           c_void_p, cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t, c_void_p,
           c_size_t, c_void_p, cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnConvolutionBiasActivationForward(
    #     cudnnHandle_t handle, const void *alpha1, const cudnnTensorDescriptor_t xDesc,
    #     const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
    #     const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
    #     void *workSpace, size_t workSpaceSizeInBytes, const void *alpha2,
    #     const cudnnTensorDescriptor_t zDesc, const void *z,
    #     const cudnnTensorDescriptor_t biasDesc, const void *bias,
    #     const cudnnActivationDescriptor_t activationDesc,
    #     const cudnnTensorDescriptor_t yDesc, void *y)
    Proto("cudnnConvolutionBiasActivationForward", cudnnStatus_t,
          [cudnnHandle_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnFilterDescriptor_t,
           c_void_p, cudnnConvolutionDescriptor_t, cudnnConvolutionFwdAlgo_t, c_void_p,
           c_size_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnActivationDescriptor_t, cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t handle, const void *alpha,
    #                                            const cudnnTensorDescriptor_t dyDesc,
    #                                            const void *dy, const void *beta,
    #                                            const cudnnTensorDescriptor_t dbDesc,
    #                                            void *db)
    Proto("cudnnConvolutionBackwardBias", cudnnStatus_t,
          [cudnnHandle_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, c_void_p,
           cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnnHandle_t handle,
    #                                                               int *count)
    Proto("cudnnGetConvolutionBackwardDataAlgorithmMaxCount", cudnnStatus_t,
          [cudnnHandle_t, POINTER(c_int)]),
    # cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    #     cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    #     const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    #     const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount,
    #     int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults)
    Proto("cudnnGetConvolutionBackwardDataAlgorithm_v7", cudnnStatus_t,
          [cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t,
           cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, c_int, POINTER(c_int),
           POINTER(cudnnConvolutionBwdDataAlgoPerf_t)]),
    # cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    #     cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w,
    #     const cudnnTensorDescriptor_t dyDesc, const void *dy,
    #     const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    #     void *dx, const int requestedAlgoCount, int *returnedAlgoCount,
    #     cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace,
    #     size_t workSpaceSizeInBytes)
    Proto("cudnnFindConvolutionBackwardDataAlgorithmEx", cudnnStatus_t,
          [cudnnHandle_t, cudnnFilterDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t, c_void_p, c_int,
           POINTER(c_int), POINTER(cudnnConvolutionBwdDataAlgoPerf_t), c_void_p, c_size_t]),
    # cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    #     cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
    #     const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc,
    #     const cudnnTensorDescriptor_t dxDesc, cudnnConvolutionBwdDataAlgo_t algo,
    #     size_t *sizeInBytes)
    Proto("cudnnGetConvolutionBackwardDataWorkspaceSize", cudnnStatus_t,
          [cudnnHandle_t, cudnnFilterDescriptor_t, cudnnTensorDescriptor_t,
           cudnnConvolutionDescriptor_t, cudnnTensorDescriptor_t,
           cudnnConvolutionBwdDataAlgo_t, POINTER(c_size_t)]),
    # cudnnStatus_t cudnnConvolutionBackwardData(
    #     cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc,
    #     const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy,
    #     const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
    #     void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    #     const cudnnTensorDescriptor_t dxDesc, void *dx)
    Proto("cudnnConvolutionBackwardData", cudnnStatus_t,
          [cudnnHandle_t, c_void_p, cudnnFilterDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnConvolutionDescriptor_t, cudnnConvolutionBwdDataAlgo_t, c_void_p,
           c_size_t, c_void_p, cudnnTensorDescriptor_t, c_void_p]),
    # cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnnHandle_t handle,
    #                                                                 int *count)
    Proto("cudnnGetConvolutionBackwardFilterAlgorithmMaxCount", cudnnStatus_t,
          [cudnnHandle_t, POINTER(c_int)]),
    # cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    #     cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    #     const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    #     const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount,
    #     int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)
    Proto("cudnnGetConvolutionBackwardFilterAlgorithm_v7", cudnnStatus_t,
          [cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
           cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t, c_int, POINTER(c_int),
           POINTER(cudnnConvolutionBwdFilterAlgoPerf_t)]),
    # cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    #     cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    #     const cudnnTensorDescriptor_t dyDesc, const void *y,
    #     const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc,
    #     void *dw, const int requestedAlgoCount, int *returnedAlgoCount,
    #     cudnnConvolutionBwdFilterAlgoPerf_t *perfResults, void *workSpace,
    #     size_t workSpaceSizeInBytes)
    Proto("cudnnFindConvolutionBackwardFilterAlgorithmEx", cudnnStatus_t,
          [cudnnHandle_t, cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t, c_void_p, c_int,
           POINTER(c_int), POINTER(cudnnConvolutionBwdFilterAlgoPerf_t), c_void_p, c_size_t]),
    # cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
    #     cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
    #     const cudnnTensorDescriptor_t dyDesc, const cudnnConvolutionDescriptor_t convDesc,
    #     const cudnnFilterDescriptor_t gradDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    #     size_t *sizeInBytes)
    Proto("cudnnGetConvolutionBackwardFilterWorkspaceSize", cudnnStatus_t,
          [cudnnHandle_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
           cudnnConvolutionDescriptor_t, cudnnFilterDescriptor_t,
           cudnnConvolutionBwdFilterAlgo_t, POINTER(c_size_t)]),
    # cudnnStatus_t cudnnConvolutionBackwardFilter(
    #     cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
    #     const void *x, const cudnnTensorDescriptor_t dyDesc, const void *dy,
    #     const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    #     void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    #     const cudnnFilterDescriptor_t dwDesc, void *dw)
    Proto("cudnnConvolutionBackwardFilter", cudnnStatus_t,
          [cudnnHandle_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnConvolutionDescriptor_t, cudnnConvolutionBwdFilterAlgo_t, c_void_p,
           c_size_t, c_void_p, cudnnFilterDescriptor_t, c_void_p]),
]

get = LazyLibrary("cudnn", TABLE)
