"""cuDNN: ctypes types and the prototype table (``cudnn.h``), nothing else.

``cudnn.h`` only includes ``cudnn_graph.h``, ``cudnn_ops.h``, ``cudnn_cnn.h`` and
``cudnn_adv.h``; ``libcudnn.so.9`` exports every function below and loads the sub-library that
implements it (``libcudnn_ops``, ``libcudnn_cnn``, ...) on first use.  Names are the vendor's.
cuDNN 9 marks the legacy descriptor API (filter, convolution, pooling, activation)
``CUDNN_DEPRECATED``, but still exports it; the graph API is bound separately when a wrapper
needs it.  A CPU test checks every row against the headers.
"""

from ctypes import POINTER, c_char_p, c_double, c_int, c_size_t

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
]

get = LazyLibrary("cudnn", TABLE)
