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
cudnnBatchNormOps_t = c_int
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
cudaStream_t = opaque_handle("CUstream_st")

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
# enum cudnnBatchNormOps_t (the *Ex batch-norm entry points)
CUDNN_BATCHNORM_OPS_BN = 0
CUDNN_BATCHNORM_OPS_BN_ACTIVATION = 1
CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION = 2
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
    # cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
    #     cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    #     const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t zDesc,
    #     const cudnnTensorDescriptor_t yDesc,
    #     const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc,
    #     const cudnnActivationDescriptor_t activationDesc, size_t *sizeInBytes)
    Proto("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", cudnnStatus_t,
          [cudnnHandle_t, cudnnBatchNormMode_t, cudnnBatchNormOps_t, cudnnTensorDescriptor_t,
           cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
           cudnnActivationDescriptor_t, POINTER(c_size_t)]),
    # cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
    #     cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    #     const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t yDesc,
    #     const cudnnTensorDescriptor_t dyDesc, const cudnnTensorDescriptor_t dzDesc,
    #     const cudnnTensorDescriptor_t dxDesc,
    #     const cudnnTensorDescriptor_t dBnScaleBiasDesc,
    #     const cudnnActivationDescriptor_t activationDesc, size_t *sizeInBytes)
    Proto("cudnnGetBatchNormalizationBackwardExWorkspaceSize", cudnnStatus_t,
          [cudnnHandle_t, cudnnBatchNormMode_t, cudnnBatchNormOps_t, cudnnTensorDescriptor_t,
           cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnTensorDescriptor_t,
           cudnnTensorDescriptor_t, cudnnTensorDescriptor_t, cudnnActivationDescriptor_t,
           POINTER(c_size_t)]),
    # cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
    #     cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    #     const cudnnActivationDescriptor_t activationDesc,
    #     const cudnnTensorDescriptor_t xDesc, size_t *sizeInBytes)
    Proto("cudnnGetBatchNormalizationTrainingExReserveSpaceSize", cudnnStatus_t,
          [cudnnHandle_t, cudnnBatchNormMode_t, cudnnBatchNormOps_t,
           cudnnActivationDescriptor_t, cudnnTensorDescriptor_t, POINTER(c_size_t)]),
    # cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
    #     cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    #     const void *alpha, const void *beta, const cudnnTensorDescriptor_t xDesc,
    #     const void *xData, const cudnnTensorDescriptor_t zDesc, const void *zData,
    #     const cudnnTensorDescriptor_t yDesc, void *yData,
    #     const cudnnTensorDescriptor_t bnScaleBiasMeanVarDesc, const void *bnScale,
    #     const void *bnBias, double exponentialAverageFactor, void *resultRunningMean,
    #     void *resultRunningVariance, double epsilon, void *resultSaveMean,
    #     void *resultSaveInvVariance, cudnnActivationDescriptor_t activationDesc,
    #     void *workspace, size_t workSpaceSizeInBytes, void *reserveSpace,
    #     size_t reserveSpaceSizeInBytes)
    Proto("cudnnBatchNormalizationForwardTrainingEx", cudnnStatus_t,
          [cudnnHandle_t, cudnnBatchNormMode_t, cudnnBatchNormOps_t, c_void_p, c_void_p,
           cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, c_void_p,
           c_double, c_void_p, c_void_p, c_double, c_void_p, c_void_p,
           cudnnActivationDescriptor_t, c_void_p, c_size_t, c_void_p, c_size_t]),
    # cudnnStatus_t cudnnBatchNormalizationBackwardEx(
    #     cudnnHandle_t handle, cudnnBatchNormMode_t mode, cudnnBatchNormOps_t bnOps,
    #     const void *alphaDataDiff, const void *betaDataDiff, const void *alphaParamDiff,
    #     const void *betaParamDiff, const cudnnTensorDescriptor_t xDesc, const void *xData,
    #     const cudnnTensorDescriptor_t yDesc, const void *yData,
    #     const cudnnTensorDescriptor_t dyDesc, const void *dyData,
    #     const cudnnTensorDescriptor_t dzDesc, void *dzData,
    #     const cudnnTensorDescriptor_t dxDesc, void *dxData,
    #     const cudnnTensorDescriptor_t dBnScaleBiasDesc, const void *bnScaleData,
    #     const void *bnBiasData, void *dBnScaleData, void *dBnBiasData, double epsilon,
    #     const void *savedMean, const void *savedInvVariance,
    #     cudnnActivationDescriptor_t activationDesc, void *workSpace,
    #     size_t workSpaceSizeInBytes, void *reserveSpace, size_t reserveSpaceSizeInBytes)
    Proto("cudnnBatchNormalizationBackwardEx", cudnnStatus_t,
          [cudnnHandle_t, cudnnBatchNormMode_t, cudnnBatchNormOps_t, c_void_p, c_void_p,
           c_void_p, c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t,
           c_void_p, cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           cudnnTensorDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p, c_void_p,
           c_void_p, c_void_p, c_double, c_void_p, c_void_p, cudnnActivationDescriptor_t,
           c_void_p, c_size_t, c_void_p, c_size_t]),
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

# == graph (backend) API: cudnn_graph.h ===========================================================
# Descriptors of every kind are one opaque type, created with a cudnnBackendDescriptorType_t,
# filled with typed attribute arrays, then finalized.  Used by cudalibs.cudnn.backend.
from ctypes import c_int64  # noqa: E402

# typedef void *cudnnBackendDescriptor_t
cudnnBackendDescriptor_t = opaque_handle("cudnnBackendDescriptorOpaque")
cudnnBackendDescriptorType_t = c_int
cudnnBackendAttributeName_t = c_int
cudnnBackendAttributeType_t = c_int

# enum cudnnBackendDescriptorType_t (the kinds used here)
CUDNN_BACKEND_POINTWISE_DESCRIPTOR = 0
CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR = 1
CUDNN_BACKEND_ENGINE_DESCRIPTOR = 2
CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3
CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4
CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5
CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR = 7
CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR = 10
CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR = 11
CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR = 12
CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR = 13
CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15
CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16
CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17
# enum cudnnBackendAttributeType_t
CUDNN_TYPE_HANDLE = 0
CUDNN_TYPE_DATA_TYPE = 1
CUDNN_TYPE_BOOLEAN = 2
CUDNN_TYPE_INT64 = 3
CUDNN_TYPE_FLOAT = 4
CUDNN_TYPE_DOUBLE = 5
CUDNN_TYPE_VOID_PTR = 6
CUDNN_TYPE_CONVOLUTION_MODE = 7
CUDNN_TYPE_HEUR_MODE = 8
CUDNN_TYPE_KNOB_TYPE = 9
CUDNN_TYPE_NUMERICAL_NOTE = 11
CUDNN_TYPE_POINTWISE_MODE = 14
CUDNN_TYPE_BACKEND_DESCRIPTOR = 15
CUDNN_TYPE_BEHAVIOR_NOTE = 19
# enum cudnnBackendAttributeName_t (the attributes used here)
CUDNN_ATTR_POINTWISE_MODE = 0
CUDNN_ATTR_POINTWISE_MATH_PREC = 1
CUDNN_ATTR_CONVOLUTION_COMP_TYPE = 100
CUDNN_ATTR_CONVOLUTION_CONV_MODE = 101
CUDNN_ATTR_CONVOLUTION_DILATIONS = 102
CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES = 103
CUDNN_ATTR_CONVOLUTION_POST_PADDINGS = 104
CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS = 105
CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS = 106
CUDNN_ATTR_ENGINEHEUR_MODE = 200
CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201
CUDNN_ATTR_ENGINEHEUR_RESULTS = 202
CUDNN_ATTR_ENGINECFG_ENGINE = 300
CUDNN_ATTR_ENGINECFG_KNOB_CHOICES = 302
CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400
CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401
CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402
CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE = 600
CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE = 601
CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA = 700
CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA = 701
CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC = 702
CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W = 703
CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X = 704
CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y = 705
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA = 706
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA = 707
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC = 708
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W = 709
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX = 710
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY = 711
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA = 712
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA = 713
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC = 714
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW = 715
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X = 716
CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY = 717
CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750
CUDNN_ATTR_OPERATION_POINTWISE_XDESC = 751
CUDNN_ATTR_OPERATION_POINTWISE_BDESC = 752
CUDNN_ATTR_OPERATION_POINTWISE_YDESC = 753
CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1 = 754
CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2 = 755
CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800
CUDNN_ATTR_OPERATIONGRAPH_OPS = 801
CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900
CUDNN_ATTR_TENSOR_DATA_TYPE = 901
CUDNN_ATTR_TENSOR_DIMENSIONS = 902
CUDNN_ATTR_TENSOR_STRIDES = 903
CUDNN_ATTR_TENSOR_UNIQUE_ID = 906
CUDNN_ATTR_TENSOR_IS_VIRTUAL = 907
CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000
CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001
CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003
CUDNN_ATTR_ENGINE_GLOBAL_INDEX = 1301
CUDNN_ATTR_ENGINE_NUMERICAL_NOTE = 1303
CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE = 1305
# enum cudnnPointwiseMode_t (the modes used here)
CUDNN_POINTWISE_ADD = 0
CUDNN_POINTWISE_IDENTITY = 21
CUDNN_POINTWISE_RELU_FWD = 100
# enum cudnnBackendHeurMode_t
CUDNN_HEUR_MODE_INSTANT = 0
CUDNN_HEUR_MODE_B = 1
CUDNN_HEUR_MODE_FALLBACK = 2
CUDNN_HEUR_MODE_A = 3
# enum cudnnBackendNumericalNote_t
CUDNN_NUMERICAL_NOTE_TENSOR_CORE = 0
CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS = 1
CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION = 2
CUDNN_NUMERICAL_NOTE_FFT = 3
CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC = 4
CUDNN_NUMERICAL_NOTE_WINOGRAD = 5
CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 = 6
CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 = 7
CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13 = 8
CUDNN_NUMERICAL_NOTE_STRICT_NAN_PROP = 9
# enum cudnnBackendBehaviorNote_t
CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION = 0
CUDNN_BEHAVIOR_NOTE_REQUIRES_FILTER_INT8x32_REORDER = 1
CUDNN_BEHAVIOR_NOTE_REQUIRES_BIAS_INT8x32_REORDER = 2
CUDNN_BEHAVIOR_NOTE_SUPPORTS_CUDA_GRAPH_NATIVE_API = 3
CUDNN_BEHAVIOR_NOTE_CUBLASLT_DEPENDENCY = 4
# The rest of the backend enumerations (attention, norms, matmul, reduction, random numbers,
# resampling...), every constant the 9.x header declares that is not named above.
# enum cudnnBackendDescriptorType_t
CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR = 6
CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR = 8
CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR = 9
CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR = 14
CUDNN_BACKEND_MATMUL_DESCRIPTOR = 18
CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR = 19
CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR = 20
CUDNN_BACKEND_REDUCTION_DESCRIPTOR = 21
CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR = 22
CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR = 23
CUDNN_BACKEND_RESAMPLE_DESCRIPTOR = 24
CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR = 25
CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR = 26
CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR = 27
CUDNN_BACKEND_OPERATION_SIGNAL_DESCRIPTOR = 28
CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR = 29
CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR = 30
CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR = 31
CUDNN_BACKEND_RNG_DESCRIPTOR = 32
CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR = 33
CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR = 34
CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR = 35
CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR = 36
CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR = 37
CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR = 38
CUDNN_BACKEND_OPERATION_EXPAND_BAND_MATRIX_DESCRIPTOR = 39
CUDNN_BACKEND_OPERATION_CONTRACT_BAND_MATRIX_DESCRIPTOR = 40
CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR = 41
CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR = 42
CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR = 43
# enum cudnnBackendAttributeType_t
CUDNN_TYPE_NAN_PROPOGATION = 10
CUDNN_TYPE_LAYOUT_TYPE = 12
CUDNN_TYPE_ATTRIB_NAME = 13
CUDNN_TYPE_GENSTATS_MODE = 16
CUDNN_TYPE_BN_FINALIZE_STATS_MODE = 17
CUDNN_TYPE_REDUCTION_OPERATOR_TYPE = 18
CUDNN_TYPE_TENSOR_REORDERING_MODE = 20
CUDNN_TYPE_RESAMPLE_MODE = 21
CUDNN_TYPE_PADDING_MODE = 22
CUDNN_TYPE_INT32 = 23
CUDNN_TYPE_CHAR = 24
CUDNN_TYPE_SIGNAL_MODE = 25
CUDNN_TYPE_FRACTION = 26
CUDNN_TYPE_NORM_MODE = 27
CUDNN_TYPE_NORM_FWD_PHASE = 28
CUDNN_TYPE_RNG_DISTRIBUTION = 29
CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE = 30
# enum cudnnBackendAttributeName_t
CUDNN_ATTR_POINTWISE_NAN_PROPAGATION = 2
CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP = 3
CUDNN_ATTR_POINTWISE_RELU_UPPER_CLIP = 4
CUDNN_ATTR_POINTWISE_RELU_LOWER_CLIP_SLOPE = 5
CUDNN_ATTR_POINTWISE_ELU_ALPHA = 6
CUDNN_ATTR_POINTWISE_SOFTPLUS_BETA = 7
CUDNN_ATTR_POINTWISE_SWISH_BETA = 8
CUDNN_ATTR_POINTWISE_AXIS = 9
CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET = 203
CUDNN_ATTR_ENGINEHEUR_DEVICEPROP = 204
CUDNN_ATTR_ENGINECFG_INTERMEDIATE_INFO = 301
CUDNN_ATTR_ENGINECFG_WORKSPACE_SIZE = 303
CUDNN_ATTR_ENGINECFG_SHARED_MEMORY_USED = 304
CUDNN_ATTR_EXECUTION_PLAN_COMPUTED_INTERMEDIATE_UIDS = 403
CUDNN_ATTR_EXECUTION_PLAN_RUN_ONLY_INTERMEDIATE_UIDS = 404
CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION = 405
CUDNN_ATTR_EXECUTION_PLAN_KERNEL_CACHE = 406
CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP = 407
CUDNN_ATTR_INTERMEDIATE_INFO_UNIQUE_ID = 500
CUDNN_ATTR_INTERMEDIATE_INFO_SIZE = 501
CUDNN_ATTR_INTERMEDIATE_INFO_DEPENDENT_DATA_UIDS = 502
CUDNN_ATTR_INTERMEDIATE_INFO_DEPENDENT_ATTRIBUTES = 503
CUDNN_ATTR_OPERATION_POINTWISE_DXDESC = 756
CUDNN_ATTR_OPERATION_POINTWISE_DYDESC = 757
CUDNN_ATTR_OPERATION_POINTWISE_TDESC = 758
CUDNN_ATTR_OPERATION_GENSTATS_MODE = 770
CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC = 771
CUDNN_ATTR_OPERATION_GENSTATS_XDESC = 772
CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC = 773
CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC = 774
CUDNN_ATTR_OPERATION_BN_FINALIZE_STATS_MODE = 780
CUDNN_ATTR_OPERATION_BN_FINALIZE_MATH_PREC = 781
CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SUM_DESC = 782
CUDNN_ATTR_OPERATION_BN_FINALIZE_Y_SQ_SUM_DESC = 783
CUDNN_ATTR_OPERATION_BN_FINALIZE_SCALE_DESC = 784
CUDNN_ATTR_OPERATION_BN_FINALIZE_BIAS_DESC = 785
CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_MEAN_DESC = 786
CUDNN_ATTR_OPERATION_BN_FINALIZE_PREV_RUNNING_VAR_DESC = 787
CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_MEAN_DESC = 788
CUDNN_ATTR_OPERATION_BN_FINALIZE_UPDATED_RUNNING_VAR_DESC = 789
CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_MEAN_DESC = 790
CUDNN_ATTR_OPERATION_BN_FINALIZE_SAVED_INV_STD_DESC = 791
CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_SCALE_DESC = 792
CUDNN_ATTR_OPERATION_BN_FINALIZE_EQ_BIAS_DESC = 793
CUDNN_ATTR_OPERATION_BN_FINALIZE_ACCUM_COUNT_DESC = 794
CUDNN_ATTR_OPERATION_BN_FINALIZE_EPSILON_DESC = 795
CUDNN_ATTR_OPERATION_BN_FINALIZE_EXP_AVERATE_FACTOR_DESC = 796
CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT = 802
CUDNN_ATTR_OPERATIONGRAPH_IS_DYNAMIC_SHAPE_ENABLED = 803
CUDNN_ATTR_OPERATIONGRAPH_IS_SAME_TOPOLOGY = 804
CUDNN_ATTR_TENSOR_VECTOR_COUNT = 904
CUDNN_ATTR_TENSOR_VECTORIZED_DIMENSION = 905
CUDNN_ATTR_TENSOR_IS_BY_VALUE = 908
CUDNN_ATTR_TENSOR_REORDERING_MODE = 909
CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC = 913
CUDNN_ATTR_VARIANT_PACK_INTERMEDIATES = 1002
CUDNN_ATTR_VARIANT_PACK_OVERRIDE_UNIQUE_IDS = 1010
CUDNN_ATTR_VARIANT_PACK_OVERRIDE_SHAPES = 1011
CUDNN_ATTR_VARIANT_PACK_OVERRIDE_STRIDES = 1012
CUDNN_ATTR_LAYOUT_INFO_TENSOR_UID = 1100
CUDNN_ATTR_LAYOUT_INFO_TYPES = 1101
CUDNN_ATTR_KNOB_INFO_TYPE = 1200
CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE = 1201
CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE = 1202
CUDNN_ATTR_KNOB_INFO_STRIDE = 1203
CUDNN_ATTR_ENGINE_OPERATION_GRAPH = 1300
CUDNN_ATTR_ENGINE_KNOB_INFO = 1302
CUDNN_ATTR_ENGINE_LAYOUT_INFO = 1304
CUDNN_ATTR_ENGINE_SM_COUNT_TARGET = 1306
CUDNN_ATTR_ENGINE_DEVICEPROP = 1307
CUDNN_ATTR_ENGINE_DISABLE_CLUSTER_COOPERATIVE = 1308
CUDNN_ATTR_MATMUL_COMP_TYPE = 1500
CUDNN_ATTR_MATMUL_PADDING_VALUE = 1503
CUDNN_ATTR_OPERATION_MATMUL_ADESC = 1520
CUDNN_ATTR_OPERATION_MATMUL_BDESC = 1521
CUDNN_ATTR_OPERATION_MATMUL_CDESC = 1522
CUDNN_ATTR_OPERATION_MATMUL_DESC = 1523
CUDNN_ATTR_OPERATION_MATMUL_IRREGULARLY_STRIDED_BATCH_COUNT = 1524
CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC = 1525
CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC = 1526
CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC = 1527
CUDNN_ATTR_REDUCTION_OPERATOR = 1600
CUDNN_ATTR_REDUCTION_COMP_TYPE = 1601
CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC = 1602
CUDNN_ATTR_OPERATION_REDUCTION_XDESC = 1610
CUDNN_ATTR_OPERATION_REDUCTION_YDESC = 1611
CUDNN_ATTR_OPERATION_REDUCTION_DESC = 1612
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC = 1620
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC = 1621
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC = 1622
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC = 1623
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC = 1624
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC = 1625
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC = 1626
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC = 1627
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC = 1628
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC = 1629
CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS = 1630
CUDNN_ATTR_RESAMPLE_MODE = 1700
CUDNN_ATTR_RESAMPLE_COMP_TYPE = 1701
CUDNN_ATTR_RESAMPLE_SPATIAL_DIMS = 1702
CUDNN_ATTR_RESAMPLE_POST_PADDINGS = 1703
CUDNN_ATTR_RESAMPLE_PRE_PADDINGS = 1704
CUDNN_ATTR_RESAMPLE_STRIDES = 1705
CUDNN_ATTR_RESAMPLE_WINDOW_DIMS = 1706
CUDNN_ATTR_RESAMPLE_NAN_PROPAGATION = 1707
CUDNN_ATTR_RESAMPLE_PADDING_MODE = 1708
CUDNN_ATTR_OPERATION_RESAMPLE_FWD_XDESC = 1710
CUDNN_ATTR_OPERATION_RESAMPLE_FWD_YDESC = 1711
CUDNN_ATTR_OPERATION_RESAMPLE_FWD_IDXDESC = 1712
CUDNN_ATTR_OPERATION_RESAMPLE_FWD_ALPHA = 1713
CUDNN_ATTR_OPERATION_RESAMPLE_FWD_BETA = 1714
CUDNN_ATTR_OPERATION_RESAMPLE_FWD_DESC = 1716
CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DXDESC = 1720
CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DYDESC = 1721
CUDNN_ATTR_OPERATION_RESAMPLE_BWD_IDXDESC = 1722
CUDNN_ATTR_OPERATION_RESAMPLE_BWD_ALPHA = 1723
CUDNN_ATTR_OPERATION_RESAMPLE_BWD_BETA = 1724
CUDNN_ATTR_OPERATION_RESAMPLE_BWD_DESC = 1725
CUDNN_ATTR_OPERATION_RESAMPLE_BWD_XDESC = 1726
CUDNN_ATTR_OPERATION_RESAMPLE_BWD_YDESC = 1727
CUDNN_ATTR_OPERATION_CONCAT_AXIS = 1800
CUDNN_ATTR_OPERATION_CONCAT_INPUT_DESCS = 1801
CUDNN_ATTR_OPERATION_CONCAT_INPLACE_INDEX = 1802
CUDNN_ATTR_OPERATION_CONCAT_OUTPUT_DESC = 1803
CUDNN_ATTR_OPERATION_SIGNAL_MODE = 1900
CUDNN_ATTR_OPERATION_SIGNAL_FLAGDESC = 1901
CUDNN_ATTR_OPERATION_SIGNAL_VALUE = 1902
CUDNN_ATTR_OPERATION_SIGNAL_XDESC = 1903
CUDNN_ATTR_OPERATION_SIGNAL_YDESC = 1904
CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC = 1950
CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC = 1951
CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC = 1952
CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC = 1953
CUDNN_ATTR_OPERATION_NORM_FWD_MODE = 2000
CUDNN_ATTR_OPERATION_NORM_FWD_PHASE = 2001
CUDNN_ATTR_OPERATION_NORM_FWD_XDESC = 2002
CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC = 2003
CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC = 2004
CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC = 2005
CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC = 2006
CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC = 2007
CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC = 2008
CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_MEAN_DESC = 2009
CUDNN_ATTR_OPERATION_NORM_FWD_INPUT_RUNNING_VAR_DESC = 2010
CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_MEAN_DESC = 2011
CUDNN_ATTR_OPERATION_NORM_FWD_OUTPUT_RUNNING_VAR_DESC = 2012
CUDNN_ATTR_OPERATION_NORM_FWD_YDESC = 2013
CUDNN_ATTR_OPERATION_NORM_FWD_PEER_STAT_DESCS = 2014
CUDNN_ATTR_OPERATION_NORM_BWD_MODE = 2100
CUDNN_ATTR_OPERATION_NORM_BWD_XDESC = 2101
CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC = 2102
CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC = 2103
CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC = 2104
CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC = 2105
CUDNN_ATTR_OPERATION_NORM_BWD_EPSILON_DESC = 2106
CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC = 2107
CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC = 2108
CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC = 2109
CUDNN_ATTR_OPERATION_NORM_BWD_PEER_STAT_DESCS = 2110
CUDNN_ATTR_OPERATION_RESHAPE_XDESC = 2200
CUDNN_ATTR_OPERATION_RESHAPE_YDESC = 2201
CUDNN_ATTR_OPERATION_EXPAND_BAND_MATRIX_XDESC = 2250
CUDNN_ATTR_OPERATION_EXPAND_BAND_MATRIX_YDESC = 2251
CUDNN_ATTR_OPERATION_EXPAND_BAND_MATRIX_LOWER_BANDWIDTH = 2252
CUDNN_ATTR_OPERATION_EXPAND_BAND_MATRIX_UPPER_BANDWIDTH = 2253
CUDNN_ATTR_OPERATION_EXPAND_BAND_MATRIX_AXIS = 2254
CUDNN_ATTR_OPERATION_EXPAND_BAND_MATRIX_PAD_VALUE = 2255
CUDNN_ATTR_OPERATION_EXPAND_BAND_MATRIX_KV_TOKEN_OFFSET_DESC = 2256
CUDNN_ATTR_OPERATION_EXPAND_BAND_MATRIX_SPECULATIVE_MASK_DESC = 2257
CUDNN_ATTR_OPERATION_CONTRACT_BAND_MATRIX_XDESC = 2270
CUDNN_ATTR_OPERATION_CONTRACT_BAND_MATRIX_YDESC = 2271
CUDNN_ATTR_OPERATION_CONTRACT_BAND_MATRIX_LOWER_BANDWIDTH = 2272
CUDNN_ATTR_OPERATION_CONTRACT_BAND_MATRIX_UPPER_BANDWIDTH = 2273
CUDNN_ATTR_OPERATION_CONTRACT_BAND_MATRIX_AXIS = 2274
CUDNN_ATTR_OPERATION_CONTRACT_BAND_MATRIX_PAD_VALUE = 2275
CUDNN_ATTR_OPERATION_CONTRACT_BAND_MAX_TOKEN_VALUE = 2276
CUDNN_ATTR_RNG_DISTRIBUTION = 2300
CUDNN_ATTR_RNG_NORMAL_DIST_MEAN = 2301
CUDNN_ATTR_RNG_NORMAL_DIST_STANDARD_DEVIATION = 2302
CUDNN_ATTR_RNG_UNIFORM_DIST_MAXIMUM = 2303
CUDNN_ATTR_RNG_UNIFORM_DIST_MINIMUM = 2304
CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY = 2305
CUDNN_ATTR_OPERATION_RNG_YDESC = 2310
CUDNN_ATTR_OPERATION_RNG_SEED = 2311
CUDNN_ATTR_OPERATION_RNG_DESC = 2312
CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC = 2313
CUDNN_ATTR_KERNEL_CACHE_OPERATION_GRAPH = 2400
CUDNN_ATTR_KERNEL_CACHE_IS_ENGINECFG_KERNEL_CACHED = 2401
CUDNN_ATTR_KERNEL_CACHE_JSON_REPRESENTATION = 2402
CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_XDESC = 2500
CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_YDESC = 2501
CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_SCALE_DESC = 2502
CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_MATH_PREC = 2503
CUDNN_ATTR_OPERATION_BLOCK_SCALE_QUANTIZE_BLOCK_SIZE = 2504
CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_XDESC = 2600
CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_SCALE_DESC = 2601
CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_YDESC = 2602
CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_MATH_PREC = 2603
CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_BLOCK_SIZE = 2604
CUDNN_ATTR_OPERATION_BLOCK_SCALE_DEQUANTIZE_NEG_SCALE = 2605
CUDNN_ATTR_DEVICEPROP_DEVICE_ID = 2700
CUDNN_ATTR_DEVICEPROP_HANDLE = 2701
CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION = 2702
CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC = 2800
CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC = 2801
CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC = 2802
CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC = 2803
CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC = 2804
CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC = 2805
CUDNN_ATTR_OPERATION_SDPA_FWD_BLOCK_MASK_DESC = 2806
CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC = 2807
CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC = 2808
CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC = 2809
CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC = 2810
CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC = 2851
CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC = 2852
CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC = 2853
CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC = 2854
CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC = 2855
CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC = 2856
CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC = 2857
CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC = 2858
CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC = 2859
CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC = 2860
CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC = 2861
CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC = 2862
CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_MODE = 2900
CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_MATH_PREC = 2901
CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOKEN_DESC = 2902
CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_WEIGHT_DESC = 2903
CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_FIRST_TOKEN_OFFSET_DESC = 2904
CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_OUTPUT_DESC = 2905
CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOKEN_INDEX_DESC = 2906
CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOKEN_KS_DESC = 2907
CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOP_K = 2908
# enum cudnnPointwiseMode_t
CUDNN_POINTWISE_MUL = 1
CUDNN_POINTWISE_MIN = 2
CUDNN_POINTWISE_MAX = 3
CUDNN_POINTWISE_SQRT = 4
CUDNN_POINTWISE_ADD_SQUARE = 5
CUDNN_POINTWISE_DIV = 6
CUDNN_POINTWISE_MOD = 7
CUDNN_POINTWISE_POW = 8
CUDNN_POINTWISE_SUB = 9
CUDNN_POINTWISE_ABS = 10
CUDNN_POINTWISE_CEIL = 11
CUDNN_POINTWISE_COS = 12
CUDNN_POINTWISE_EXP = 13
CUDNN_POINTWISE_FLOOR = 14
CUDNN_POINTWISE_LOG = 15
CUDNN_POINTWISE_NEG = 16
CUDNN_POINTWISE_RSQRT = 17
CUDNN_POINTWISE_SIN = 18
CUDNN_POINTWISE_TAN = 19
CUDNN_POINTWISE_ERF = 20
CUDNN_POINTWISE_RECIPROCAL = 22
CUDNN_POINTWISE_ATAN2 = 23
CUDNN_POINTWISE_TANH_FWD = 101
CUDNN_POINTWISE_SIGMOID_FWD = 102
CUDNN_POINTWISE_ELU_FWD = 103
CUDNN_POINTWISE_GELU_FWD = 104
CUDNN_POINTWISE_SOFTPLUS_FWD = 105
CUDNN_POINTWISE_SWISH_FWD = 106
CUDNN_POINTWISE_GELU_APPROX_TANH_FWD = 107
CUDNN_POINTWISE_RELU_BWD = 200
CUDNN_POINTWISE_TANH_BWD = 201
CUDNN_POINTWISE_SIGMOID_BWD = 202
CUDNN_POINTWISE_ELU_BWD = 203
CUDNN_POINTWISE_GELU_BWD = 204
CUDNN_POINTWISE_SOFTPLUS_BWD = 205
CUDNN_POINTWISE_SWISH_BWD = 206
CUDNN_POINTWISE_GELU_APPROX_TANH_BWD = 207
CUDNN_POINTWISE_CMP_EQ = 300
CUDNN_POINTWISE_CMP_NEQ = 301
CUDNN_POINTWISE_CMP_GT = 302
CUDNN_POINTWISE_CMP_GE = 303
CUDNN_POINTWISE_CMP_LT = 304
CUDNN_POINTWISE_CMP_LE = 305
CUDNN_POINTWISE_LOGICAL_AND = 400
CUDNN_POINTWISE_LOGICAL_OR = 401
CUDNN_POINTWISE_LOGICAL_NOT = 402
CUDNN_POINTWISE_GEN_INDEX = 501
CUDNN_POINTWISE_BINARY_SELECT = 601
# enum cudnnReduceTensorOp_t
CUDNN_REDUCE_TENSOR_ADD = 0
CUDNN_REDUCE_TENSOR_MUL = 1
CUDNN_REDUCE_TENSOR_MIN = 2
CUDNN_REDUCE_TENSOR_MAX = 3
CUDNN_REDUCE_TENSOR_AMAX = 4
CUDNN_REDUCE_TENSOR_AVG = 5
CUDNN_REDUCE_TENSOR_NORM1 = 6
CUDNN_REDUCE_TENSOR_NORM2 = 7
CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS = 8
# enum cudnnBackendNormMode_t
CUDNN_LAYER_NORM = 0
CUDNN_INSTANCE_NORM = 1
CUDNN_BATCH_NORM = 2
CUDNN_GROUP_NORM = 3
CUDNN_RMS_NORM = 4
CUDNN_ADA_LAYER_NORM = 5
# enum cudnnBackendNormFwdPhase_t
CUDNN_NORM_FWD_INFERENCE = 0
CUDNN_NORM_FWD_TRAINING = 1
# enum cudnnRngDistribution_t
CUDNN_RNG_DISTRIBUTION_BERNOULLI = 0
CUDNN_RNG_DISTRIBUTION_UNIFORM = 1
CUDNN_RNG_DISTRIBUTION_NORMAL = 2
# enum cudnnBackendHeurMode_t
# enum cudnnBackendKnobType_t
CUDNN_KNOB_TYPE_SPLIT_K = 0
CUDNN_KNOB_TYPE_SWIZZLE = 1
CUDNN_KNOB_TYPE_TILE_SIZE = 2
CUDNN_KNOB_TYPE_USE_TEX = 3
CUDNN_KNOB_TYPE_EDGE = 4
CUDNN_KNOB_TYPE_KBLOCK = 5
CUDNN_KNOB_TYPE_LDGA = 6
CUDNN_KNOB_TYPE_LDGB = 7
CUDNN_KNOB_TYPE_CHUNK_K = 8
CUDNN_KNOB_TYPE_SPLIT_H = 9
CUDNN_KNOB_TYPE_WINO_TILE = 10
CUDNN_KNOB_TYPE_MULTIPLY = 11
CUDNN_KNOB_TYPE_SPLIT_K_BUF = 12
CUDNN_KNOB_TYPE_TILEK = 13
CUDNN_KNOB_TYPE_STAGES = 14
CUDNN_KNOB_TYPE_REDUCTION_MODE = 15
CUDNN_KNOB_TYPE_CTA_SPLIT_K_MODE = 16
CUDNN_KNOB_TYPE_SPLIT_K_SLC = 17
CUDNN_KNOB_TYPE_IDX_MODE = 18
CUDNN_KNOB_TYPE_SLICED = 19
CUDNN_KNOB_TYPE_SPLIT_RS = 20
CUDNN_KNOB_TYPE_SINGLEBUFFER = 21
CUDNN_KNOB_TYPE_LDGC = 22
CUDNN_KNOB_TYPE_SPECFILT = 23
CUDNN_KNOB_TYPE_KERNEL_CFG = 24
CUDNN_KNOB_TYPE_WORKSPACE = 25
CUDNN_KNOB_TYPE_TILE_CGA = 26
CUDNN_KNOB_TYPE_TILE_CGA_M = 27
CUDNN_KNOB_TYPE_TILE_CGA_N = 28
CUDNN_KNOB_TYPE_BLOCK_SIZE = 29
CUDNN_KNOB_TYPE_OCCUPANCY = 30
CUDNN_KNOB_TYPE_ARRAY_SIZE_PER_THREAD = 31
CUDNN_KNOB_TYPE_NUM_C_PER_BLOCK = 32
CUDNN_KNOB_TYPE_SPLIT_COLS = 33
CUDNN_KNOB_TYPE_TILE_ROWS = 34
CUDNN_KNOB_TYPE_TILE_COLS = 35
CUDNN_KNOB_TYPE_LOAD_SIZE = 36
CUDNN_KNOB_TYPE_CTA_COUNT = 37
CUDNN_KNOB_TYPE_STREAM_K = 38
CUDNN_KNOB_TYPE_SPLIT_P_SLC = 39
CUDNN_KNOB_TYPE_TILE_M = 40
CUDNN_KNOB_TYPE_TILE_N = 41
CUDNN_KNOB_TYPE_WARP_SPEC_CFG = 42
CUDNN_KNOB_TYPE_SWAP_AB = 43
# enum cudnnBackendLayoutType_t
CUDNN_LAYOUT_TYPE_PREFERRED_NCHW = 0
CUDNN_LAYOUT_TYPE_PREFERRED_NHWC = 1
CUDNN_LAYOUT_TYPE_PREFERRED_PAD4CK = 2
CUDNN_LAYOUT_TYPE_PREFERRED_PAD8CK = 3
# enum cudnnBackendTensorReordering_t
CUDNN_TENSOR_REORDERING_NONE = 0
CUDNN_TENSOR_REORDERING_INT8x32 = 1
CUDNN_TENSOR_REORDERING_F16x16 = 2
CUDNN_TENSOR_REORDERING_F8_128x4 = 3
# enum cudnnPaddingMode_t
CUDNN_ZERO_PAD = 0
CUDNN_NEG_INF_PAD = 1
CUDNN_EDGE_VAL_PAD = 2
# enum cudnnResampleMode_t
CUDNN_RESAMPLE_NEAREST = 0
CUDNN_RESAMPLE_BILINEAR = 1
CUDNN_RESAMPLE_AVGPOOL = 2
CUDNN_RESAMPLE_AVGPOOL_INCLUDE_PADDING = 2
CUDNN_RESAMPLE_MAXPOOL = 3
CUDNN_RESAMPLE_AVGPOOL_EXCLUDE_PADDING = 4
# enum cudnnGenStatsMode_t
CUDNN_GENSTATS_SUM_SQSUM = 0
# enum cudnnBnFinalizeStatsMode_t
CUDNN_BN_FINALIZE_STATISTICS_TRAINING = 0
CUDNN_BN_FINALIZE_STATISTICS_INFERENCE = 1
# enum cudnnBackendNumericalNote_t
# enum cudnnBackendBehaviorNote_t
# enum cudnnSignalMode_t
CUDNN_SIGNAL_SET = 0
CUDNN_SIGNAL_WAIT = 1
# cudnnStatus_t values the graph backend tells apart
CUDNN_STATUS_NOT_SUPPORTED = 3000

TABLE += [
    # cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
    #                                            cudnnBackendDescriptor_t *descriptor)
    Proto("cudnnBackendCreateDescriptor", cudnnStatus_t,
          [cudnnBackendDescriptorType_t, POINTER(cudnnBackendDescriptor_t)]),
    # cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor)
    Proto("cudnnBackendDestroyDescriptor", cudnnStatus_t, [cudnnBackendDescriptor_t]),
    # cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t descriptor)
    # (deprecated in cuDNN 9; bound for completeness, the wrappers create fresh descriptors)
    Proto("cudnnBackendInitialize", cudnnStatus_t, [cudnnBackendDescriptor_t]),
    # cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor)
    Proto("cudnnBackendFinalize", cudnnStatus_t, [cudnnBackendDescriptor_t]),
    # cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor,
    #                                        cudnnBackendAttributeName_t attributeName,
    #                                        cudnnBackendAttributeType_t attributeType,
    #                                        int64_t elementCount, const void *arrayOfElements)
    Proto("cudnnBackendSetAttribute", cudnnStatus_t,
          [cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
           c_int64, c_void_p]),
    # cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor,
    #                                        cudnnBackendAttributeName_t attributeName,
    #                                        cudnnBackendAttributeType_t attributeType,
    #                                        int64_t requestedElementCount,
    #                                        int64_t *elementCount, void *arrayOfElements)
    Proto("cudnnBackendGetAttribute", cudnnStatus_t,
          [cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
           c_int64, POINTER(c_int64), c_void_p]),
    # cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle,
    #                                   cudnnBackendDescriptor_t executionPlan,
    #                                   cudnnBackendDescriptor_t variantPack)
    Proto("cudnnBackendExecute", cudnnStatus_t,
          [cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t]),
]
# == end of the graph (backend) API ===============================================================

# == RNNs: cudnn_adv.h ============================================================================
# The v8 RNN API (cudnn_adv.h, forwarded by libcudnn.so.9 to libcudnn_adv.so.9) and the dropout
# descriptor it takes (cudnn_ops.h).  Used by cudalibs.cudnn.rnn.  cudnn.h includes
# cudnn_adv.h; naming it as well keeps these rows checked should the umbrella ever stop.
HEADERS += ("cudnn_adv.h",)
from ctypes import c_int32, c_uint32, c_ulonglong  # noqa: E402

cudnnRNNAlgo_t = c_int
cudnnForwardMode_t = c_int
cudnnRNNMode_t = c_int
cudnnRNNBiasMode_t = c_int
cudnnDirectionMode_t = c_int
cudnnRNNInputMode_t = c_int
cudnnRNNClipMode_t = c_int
cudnnRNNDataLayout_t = c_int
cudnnWgradMode_t = c_int

# typedef struct cudnnRNNStruct *cudnnRNNDescriptor_t (and likewise below)
cudnnRNNDescriptor_t = opaque_handle("cudnnRNNStruct")
cudnnRNNDataDescriptor_t = opaque_handle("cudnnRNNDataStruct")
# typedef struct cudnnDropoutStruct *cudnnDropoutDescriptor_t (cudnn_ops.h)
cudnnDropoutDescriptor_t = opaque_handle("cudnnDropoutStruct")

# enum cudnnRNNAlgo_t
CUDNN_RNN_ALGO_STANDARD = 0
CUDNN_RNN_ALGO_PERSIST_STATIC = 1
CUDNN_RNN_ALGO_PERSIST_DYNAMIC = 2
CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H = 3
CUDNN_RNN_ALGO_COUNT = 4
# enum cudnnForwardMode_t
CUDNN_FWD_MODE_INFERENCE = 0
CUDNN_FWD_MODE_TRAINING = 1
# enum cudnnRNNMode_t
CUDNN_RNN_RELU = 0
CUDNN_RNN_TANH = 1
CUDNN_LSTM = 2
CUDNN_GRU = 3
# enum cudnnRNNBiasMode_t
CUDNN_RNN_NO_BIAS = 0
CUDNN_RNN_SINGLE_INP_BIAS = 1
CUDNN_RNN_DOUBLE_BIAS = 2
CUDNN_RNN_SINGLE_REC_BIAS = 3
# enum cudnnDirectionMode_t
CUDNN_UNIDIRECTIONAL = 0
CUDNN_BIDIRECTIONAL = 1
# enum cudnnRNNInputMode_t
CUDNN_LINEAR_INPUT = 0
CUDNN_SKIP_INPUT = 1
# enum cudnnRNNClipMode_t
CUDNN_RNN_CLIP_NONE = 0
CUDNN_RNN_CLIP_MINMAX = 1
# enum cudnnRNNDataLayout_t
CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED = 0
CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED = 1
CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED = 2
# #define CUDNN_RNN_PADDED_IO_DISABLED 0 / CUDNN_RNN_PADDED_IO_ENABLED (1U << 0): auxFlags bits
CUDNN_RNN_PADDED_IO_DISABLED = 0
CUDNN_RNN_PADDED_IO_ENABLED = 1
# enum cudnnWgradMode_t
CUDNN_WGRAD_MODE_ADD = 0
CUDNN_WGRAD_MODE_SET = 1

TABLE += [
    # cudnnStatus_t cudnnAdvVersionCheck(void)
    Proto("cudnnAdvVersionCheck", cudnnStatus_t, []),
    # cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t *dropoutDesc)
    Proto("cudnnCreateDropoutDescriptor", cudnnStatus_t, [POINTER(cudnnDropoutDescriptor_t)]),
    # cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc)
    Proto("cudnnDestroyDropoutDescriptor", cudnnStatus_t, [cudnnDropoutDescriptor_t]),
    # cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t handle, size_t *sizeInBytes)
    Proto("cudnnDropoutGetStatesSize", cudnnStatus_t, [cudnnHandle_t, POINTER(c_size_t)]),
    # cudnnStatus_t cudnnDropoutGetReserveSpaceSize(cudnnTensorDescriptor_t xdesc,
    #                                               size_t *sizeInBytes)
    Proto("cudnnDropoutGetReserveSpaceSize", cudnnStatus_t,
          [cudnnTensorDescriptor_t, POINTER(c_size_t)]),
    # cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc,
    #                                         cudnnHandle_t handle, float dropout, void *states,
    #                                         size_t stateSizeInBytes, unsigned long long seed)
    Proto("cudnnSetDropoutDescriptor", cudnnStatus_t,
          [cudnnDropoutDescriptor_t, cudnnHandle_t, c_float, c_void_p, c_size_t, c_ulonglong]),
    # cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc,
    #                                             cudnnHandle_t handle, float dropout,
    #                                             void *states, size_t stateSizeInBytes,
    #                                             unsigned long long seed)
    Proto("cudnnRestoreDropoutDescriptor", cudnnStatus_t,
          [cudnnDropoutDescriptor_t, cudnnHandle_t, c_float, c_void_p, c_size_t, c_ulonglong]),
    # cudnnStatus_t cudnnGetDropoutDescriptor(cudnnDropoutDescriptor_t dropoutDesc,
    #                                         cudnnHandle_t handle, float *dropout,
    #                                         void **states, unsigned long long *seed)
    Proto("cudnnGetDropoutDescriptor", cudnnStatus_t,
          [cudnnDropoutDescriptor_t, cudnnHandle_t, POINTER(c_float), POINTER(c_void_p),
           POINTER(c_ulonglong)]),
    # cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t *rnnDesc)
    Proto("cudnnCreateRNNDescriptor", cudnnStatus_t, [POINTER(cudnnRNNDescriptor_t)]),
    # cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t rnnDesc)
    Proto("cudnnDestroyRNNDescriptor", cudnnStatus_t, [cudnnRNNDescriptor_t]),
    # cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t rnnDesc, cudnnRNNAlgo_t algo,
    #     cudnnRNNMode_t cellMode, cudnnRNNBiasMode_t biasMode, cudnnDirectionMode_t dirMode,
    #     cudnnRNNInputMode_t inputMode, cudnnDataType_t dataType, cudnnDataType_t mathPrec,
    #     cudnnMathType_t mathType, int32_t inputSize, int32_t hiddenSize, int32_t projSize,
    #     int32_t numLayers, cudnnDropoutDescriptor_t dropoutDesc, uint32_t auxFlags)
    Proto("cudnnSetRNNDescriptor_v8", cudnnStatus_t,
          [cudnnRNNDescriptor_t, cudnnRNNAlgo_t, cudnnRNNMode_t, cudnnRNNBiasMode_t,
           cudnnDirectionMode_t, cudnnRNNInputMode_t, cudnnDataType_t, cudnnDataType_t,
           cudnnMathType_t, c_int32, c_int32, c_int32, c_int32, cudnnDropoutDescriptor_t,
           c_uint32]),
    # cudnnStatus_t cudnnGetRNNDescriptor_v8(cudnnRNNDescriptor_t rnnDesc, cudnnRNNAlgo_t *algo,
    #     cudnnRNNMode_t *cellMode, cudnnRNNBiasMode_t *biasMode, cudnnDirectionMode_t *dirMode,
    #     cudnnRNNInputMode_t *inputMode, cudnnDataType_t *dataType, cudnnDataType_t *mathPrec,
    #     cudnnMathType_t *mathType, int32_t *inputSize, int32_t *hiddenSize,
    #     int32_t *projSize, int32_t *numLayers, cudnnDropoutDescriptor_t *dropoutDesc,
    #     uint32_t *auxFlags)
    Proto("cudnnGetRNNDescriptor_v8", cudnnStatus_t,
          [cudnnRNNDescriptor_t, POINTER(cudnnRNNAlgo_t), POINTER(cudnnRNNMode_t),
           POINTER(cudnnRNNBiasMode_t), POINTER(cudnnDirectionMode_t),
           POINTER(cudnnRNNInputMode_t), POINTER(cudnnDataType_t), POINTER(cudnnDataType_t),
           POINTER(cudnnMathType_t), POINTER(c_int32), POINTER(c_int32), POINTER(c_int32),
           POINTER(c_int32), POINTER(cudnnDropoutDescriptor_t), POINTER(c_uint32)]),
    # cudnnStatus_t cudnnRNNSetClip_v9(cudnnRNNDescriptor_t rnnDesc,
    #                                  cudnnRNNClipMode_t clipMode, double lclip, double rclip)
    Proto("cudnnRNNSetClip_v9", cudnnStatus_t,
          [cudnnRNNDescriptor_t, cudnnRNNClipMode_t, c_double, c_double]),
    # cudnnStatus_t cudnnRNNGetClip_v9(cudnnRNNDescriptor_t rnnDesc,
    #                                  cudnnRNNClipMode_t *clipMode, double *lclip,
    #                                  double *rclip)
    Proto("cudnnRNNGetClip_v9", cudnnStatus_t,
          [cudnnRNNDescriptor_t, POINTER(cudnnRNNClipMode_t), POINTER(c_double),
           POINTER(c_double)]),
    # cudnnStatus_t cudnnBuildRNNDynamic(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
    #                                    int miniBatch)
    Proto("cudnnBuildRNNDynamic", cudnnStatus_t, [cudnnHandle_t, cudnnRNNDescriptor_t, c_int]),
    # cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
    #     cudnnForwardMode_t fwdMode, cudnnRNNDataDescriptor_t xDesc, size_t *workSpaceSize,
    #     size_t *reserveSpaceSize)
    Proto("cudnnGetRNNTempSpaceSizes", cudnnStatus_t,
          [cudnnHandle_t, cudnnRNNDescriptor_t, cudnnForwardMode_t, cudnnRNNDataDescriptor_t,
           POINTER(c_size_t), POINTER(c_size_t)]),
    # cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t handle,
    #                                          cudnnRNNDescriptor_t rnnDesc,
    #                                          size_t *weightSpaceSize)
    Proto("cudnnGetRNNWeightSpaceSize", cudnnStatus_t,
          [cudnnHandle_t, cudnnRNNDescriptor_t, POINTER(c_size_t)]),
    # cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
    #     int32_t pseudoLayer, size_t weightSpaceSize, const void *weightSpace,
    #     int32_t linLayerID, cudnnTensorDescriptor_t mDesc, void **mAddr,
    #     cudnnTensorDescriptor_t bDesc, void **bAddr)
    Proto("cudnnGetRNNWeightParams", cudnnStatus_t,
          [cudnnHandle_t, cudnnRNNDescriptor_t, c_int32, c_size_t, c_void_p, c_int32,
           cudnnTensorDescriptor_t, POINTER(c_void_p), cudnnTensorDescriptor_t,
           POINTER(c_void_p)]),
    # cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t *rnnDataDesc)
    Proto("cudnnCreateRNNDataDescriptor", cudnnStatus_t, [POINTER(cudnnRNNDataDescriptor_t)]),
    # cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t rnnDataDesc)
    Proto("cudnnDestroyRNNDataDescriptor", cudnnStatus_t, [cudnnRNNDataDescriptor_t]),
    # cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t rnnDataDesc,
    #     cudnnDataType_t dataType, cudnnRNNDataLayout_t layout, int maxSeqLength,
    #     int batchSize, int vectorSize, const int seqLengthArray[], void *paddingFill)
    Proto("cudnnSetRNNDataDescriptor", cudnnStatus_t,
          [cudnnRNNDataDescriptor_t, cudnnDataType_t, cudnnRNNDataLayout_t, c_int, c_int, c_int,
           POINTER(c_int), c_void_p]),
    # cudnnStatus_t cudnnGetRNNDataDescriptor(cudnnRNNDataDescriptor_t rnnDataDesc,
    #     cudnnDataType_t *dataType, cudnnRNNDataLayout_t *layout, int *maxSeqLength,
    #     int *batchSize, int *vectorSize, int arrayLengthRequested, int seqLengthArray[],
    #     void *paddingFill)
    Proto("cudnnGetRNNDataDescriptor", cudnnStatus_t,
          [cudnnRNNDataDescriptor_t, POINTER(cudnnDataType_t), POINTER(cudnnRNNDataLayout_t),
           POINTER(c_int), POINTER(c_int), POINTER(c_int), c_int, POINTER(c_int), c_void_p]),
    # cudnnStatus_t cudnnRNNForward(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
    #     cudnnForwardMode_t fwdMode, const int32_t devSeqLengths[],
    #     cudnnRNNDataDescriptor_t xDesc, const void *x, cudnnRNNDataDescriptor_t yDesc,
    #     void *y, cudnnTensorDescriptor_t hDesc, const void *hx, void *hy,
    #     cudnnTensorDescriptor_t cDesc, const void *cx, void *cy, size_t weightSpaceSize,
    #     const void *weightSpace, size_t workSpaceSize, void *workSpace,
    #     size_t reserveSpaceSize, void *reserveSpace)
    Proto("cudnnRNNForward", cudnnStatus_t,
          [cudnnHandle_t, cudnnRNNDescriptor_t, cudnnForwardMode_t, c_void_p,
           cudnnRNNDataDescriptor_t, c_void_p, cudnnRNNDataDescriptor_t, c_void_p,
           cudnnTensorDescriptor_t, c_void_p, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           c_void_p, c_size_t, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p]),
    # cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t rnnDesc,
    #     const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t yDesc, const void *y,
    #     const void *dy, cudnnRNNDataDescriptor_t xDesc, void *dx,
    #     cudnnTensorDescriptor_t hDesc, const void *hx, const void *dhy, void *dhx,
    #     cudnnTensorDescriptor_t cDesc, const void *cx, const void *dcy, void *dcx,
    #     size_t weightSpaceSize, const void *weightSpace, size_t workSpaceSize,
    #     void *workSpace, size_t reserveSpaceSize, void *reserveSpace)
    Proto("cudnnRNNBackwardData_v8", cudnnStatus_t,
          [cudnnHandle_t, cudnnRNNDescriptor_t, c_void_p, cudnnRNNDataDescriptor_t, c_void_p,
           c_void_p, cudnnRNNDataDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           c_void_p, c_void_p, cudnnTensorDescriptor_t, c_void_p, c_void_p, c_void_p,
           c_size_t, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p]),
    # cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t handle,
    #     cudnnRNNDescriptor_t rnnDesc, cudnnWgradMode_t addGrad,
    #     const int32_t devSeqLengths[], cudnnRNNDataDescriptor_t xDesc, const void *x,
    #     cudnnTensorDescriptor_t hDesc, const void *hx, cudnnRNNDataDescriptor_t yDesc,
    #     const void *y, size_t weightSpaceSize, void *dweightSpace, size_t workSpaceSize,
    #     void *workSpace, size_t reserveSpaceSize, void *reserveSpace)
    Proto("cudnnRNNBackwardWeights_v8", cudnnStatus_t,
          [cudnnHandle_t, cudnnRNNDescriptor_t, cudnnWgradMode_t, c_void_p,
           cudnnRNNDataDescriptor_t, c_void_p, cudnnTensorDescriptor_t, c_void_p,
           cudnnRNNDataDescriptor_t, c_void_p, c_size_t, c_void_p, c_size_t, c_void_p,
           c_size_t, c_void_p]),
]
# == end of the RNNs ==============================================================================

get = LazyLibrary("cudnn", TABLE)
