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
# filled with typed attribute arrays, then finalized.  Used by cudalibs.cudnn.graph.
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

get = LazyLibrary("cudnn", TABLE)
