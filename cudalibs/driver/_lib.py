"""CUDA driver API: ctypes types and the prototype table (``cuda.h``), nothing else.

Names are the vendor's.  Where ``cuda.h`` #defines a plain name to a versioned one
(``cuMemAlloc`` -> ``cuMemAlloc_v2``), the table binds the versioned symbol: the plain one is
also exported, with the old ABI.  A CPU test checks every row against the header.
"""

from ctypes import (CFUNCTYPE, POINTER, Structure, Union, c_char, c_char_p, c_float, c_int,
                    c_size_t, c_ubyte, c_uint, c_uint32, c_uint64, c_ushort, c_void_p)

from .._ffi import LazyLibrary, Proto, opaque_handle

# Headers (found in the NVIDIA wheels) that declare everything below.
HEADERS = ("cuda.h",)

CUresult = c_int
CUdevice = c_int
CUdeviceptr = c_uint64
CUdevice_attribute = c_int
CUpointer_attribute = c_int
CUmemPool_attribute = c_int
CUmemorytype = c_int
CUcontext = opaque_handle("CUctx_st")
CUstream = opaque_handle("CUstream_st")
CUevent = opaque_handle("CUevent_st")
CUmemoryPool = opaque_handle("CUmemPoolHandle_st")
CUarray = opaque_handle("CUarray_st")
CUmodule = opaque_handle("CUmod_st")
CUfunction = opaque_handle("CUfunc_st")
CUgraph = opaque_handle("CUgraph_st")
CUgraphNode = opaque_handle("CUgraphNode_st")
CUgraphExec = opaque_handle("CUgraphExec_st")
CUgraphDeviceNode = opaque_handle("CUgraphDeviceUpdatableNode_st")
CUkernel = opaque_handle("CUkern_st")
CUjit_option = c_int
CUfunction_attribute = c_int
CUstreamCaptureMode = c_int
CUstreamCaptureStatus = c_int
CUlaunchAttributeID = c_int
CUtensorMapDataType = c_int
CUtensorMapInterleave = c_int
CUtensorMapSwizzle = c_int
CUtensorMapL2promotion = c_int
CUtensorMapFloatOOBfill = c_int
# typedef size_t (CUDA_CB *CUoccupancyB2DSize)(int blockSize)
CUoccupancyB2DSize = CFUNCTYPE(c_size_t, c_int)


class CUuuid(Structure):
    _fields_ = [("bytes", c_char * 16)]


class CUmemLocation(Structure):
    _fields_ = [("type", c_int), ("id", c_int)]


class CUmemPoolProps(Structure):
    _fields_ = [
        ("allocType", c_int),
        ("handleTypes", c_int),
        ("location", CUmemLocation),
        ("win32SecurityAttributes", c_void_p),
        ("maxSize", c_size_t),
        ("usage", c_ushort),
        ("reserved", c_ubyte * 54),
    ]


class CUDA_MEMCPY2D(Structure):
    _fields_ = [
        ("srcXInBytes", c_size_t),
        ("srcY", c_size_t),
        ("srcMemoryType", CUmemorytype),
        ("srcHost", c_void_p),
        ("srcDevice", CUdeviceptr),
        ("srcArray", CUarray),
        ("srcPitch", c_size_t),
        ("dstXInBytes", c_size_t),
        ("dstY", c_size_t),
        ("dstMemoryType", CUmemorytype),
        ("dstHost", c_void_p),
        ("dstDevice", CUdeviceptr),
        ("dstArray", CUarray),
        ("dstPitch", c_size_t),
        ("WidthInBytes", c_size_t),
        ("Height", c_size_t),
    ]


class CUaccessPolicyWindow(Structure):
    _fields_ = [
        ("base_ptr", c_void_p),
        ("num_bytes", c_size_t),
        ("hitRatio", c_float),
        ("hitProp", c_int),
        ("missProp", c_int),
    ]


class CUlaunchMemSyncDomainMap(Structure):
    _fields_ = [("default_", c_ubyte), ("remote", c_ubyte)]


class _Dim3(Structure):
    _fields_ = [("x", c_uint), ("y", c_uint), ("z", c_uint)]


class _ProgrammaticEvent(Structure):
    _fields_ = [("event", CUevent), ("flags", c_int), ("triggerAtBlockStart", c_int)]


class _LaunchCompletionEvent(Structure):
    _fields_ = [("event", CUevent), ("flags", c_int)]


class _DeviceUpdatableKernelNode(Structure):
    _fields_ = [("deviceUpdatable", c_int), ("devNode", CUgraphDeviceNode)]


class CUlaunchAttributeValue(Union):
    _fields_ = [
        ("pad", c_char * 64),
        ("accessPolicyWindow", CUaccessPolicyWindow),
        ("cooperative", c_int),
        ("syncPolicy", c_int),
        ("clusterDim", _Dim3),
        ("clusterSchedulingPolicyPreference", c_int),
        ("programmaticStreamSerializationAllowed", c_int),
        ("programmaticEvent", _ProgrammaticEvent),
        ("launchCompletionEvent", _LaunchCompletionEvent),
        ("priority", c_int),
        ("memSyncDomainMap", CUlaunchMemSyncDomainMap),
        ("memSyncDomain", c_int),
        ("preferredClusterDim", _Dim3),
        ("deviceUpdatableKernelNode", _DeviceUpdatableKernelNode),
        ("sharedMemCarveout", c_uint),
        ("nvlinkUtilCentricScheduling", c_uint),
    ]


class CUlaunchAttribute(Structure):
    _fields_ = [
        ("id", CUlaunchAttributeID),
        ("pad", c_char * 4),  # char pad[8 - sizeof(CUlaunchAttributeID)]
        ("value", CUlaunchAttributeValue),
    ]


class CUlaunchConfig(Structure):
    _fields_ = [
        ("gridDimX", c_uint),
        ("gridDimY", c_uint),
        ("gridDimZ", c_uint),
        ("blockDimX", c_uint),
        ("blockDimY", c_uint),
        ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint),
        ("hStream", CUstream),
        ("attrs", POINTER(CUlaunchAttribute)),
        ("numAttrs", c_uint),
    ]


class CUDA_KERNEL_NODE_PARAMS_v2(Structure):
    _fields_ = [
        ("func", CUfunction),
        ("gridDimX", c_uint),
        ("gridDimY", c_uint),
        ("gridDimZ", c_uint),
        ("blockDimX", c_uint),
        ("blockDimY", c_uint),
        ("blockDimZ", c_uint),
        ("sharedMemBytes", c_uint),
        ("kernelParams", POINTER(c_void_p)),
        ("extra", POINTER(c_void_p)),
        ("kern", CUkernel),
        ("ctx", CUcontext),
    ]


class CUDA_MEMSET_NODE_PARAMS(Structure):
    _fields_ = [
        ("dst", CUdeviceptr),
        ("pitch", c_size_t),
        ("value", c_uint),
        ("elementSize", c_uint),
        ("width", c_size_t),
        ("height", c_size_t),
    ]


# #define CU_TENSOR_MAP_NUM_QWORDS 16
CU_TENSOR_MAP_NUM_QWORDS = 16


class CUtensorMap(Structure):
    """A TMA descriptor: 128 opaque bytes.  C aligns it to 64 bytes (128 in CUDA 13's
    header) and cuTensorMapEncodeTiled requires that alignment of the map it writes, which
    ctypes cannot declare before Python 3.13: place one with ``from_buffer`` at an aligned
    offset (as cudalibs.driver.tensormap does)."""

    _fields_ = [("opaque", c_uint64 * CU_TENSOR_MAP_NUM_QWORDS)]


class CUgraphExecUpdateResultInfo(Structure):
    _fields_ = [
        ("result", c_int),
        ("errorNode", CUgraphNode),
        ("errorFromNode", CUgraphNode),
    ]


# Structs whose layout a CPU test compares with cuda.h: ctypes class -> C struct tag.
STRUCTS = {
    CUaccessPolicyWindow: "CUaccessPolicyWindow_st",
    CUlaunchMemSyncDomainMap: "CUlaunchMemSyncDomainMap_st",
    CUlaunchAttributeValue: "CUlaunchAttributeValue_union",
    CUlaunchAttribute: "CUlaunchAttribute_st",
    CUlaunchConfig: "CUlaunchConfig_st",
    CUgraphExecUpdateResultInfo: "CUgraphExecUpdateResultInfo_st",
    CUDA_KERNEL_NODE_PARAMS_v2: "CUDA_KERNEL_NODE_PARAMS_v2_st",
    CUDA_MEMSET_NODE_PARAMS: "CUDA_MEMSET_NODE_PARAMS_st",
    CUuuid: "CUuuid_st",
    CUmemLocation: "CUmemLocation_st",
    CUmemPoolProps: "CUmemPoolProps_st",
    CUDA_MEMCPY2D: "CUDA_MEMCPY2D_st",
    CUtensorMap: "CUtensorMap_st",
}

# enum CUmemorytype_enum
CU_MEMORYTYPE_HOST = 1
CU_MEMORYTYPE_DEVICE = 2
CU_MEMORYTYPE_UNIFIED = 4
# enum CUstream_flags_enum
CU_STREAM_DEFAULT = 0
CU_STREAM_NON_BLOCKING = 1

# enum cudaError_enum: the values the wrappers act on (beyond raising)
CUDA_ERROR_OUT_OF_MEMORY = 2
# enum CUevent_flags_enum
CU_EVENT_DEFAULT = 0
CU_EVENT_BLOCKING_SYNC = 1
CU_EVENT_DISABLE_TIMING = 2
# cuMemHostAlloc flags
CU_MEMHOSTALLOC_PORTABLE = 1
CU_MEMHOSTALLOC_DEVICEMAP = 2
CU_MEMHOSTALLOC_WRITECOMBINED = 4
# enum CUpointer_attribute_enum
CU_POINTER_ATTRIBUTE_CONTEXT = 1
CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17
# enum CUmemPool_attribute_enum
CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4
CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5
CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6
CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7
CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8
# enum CUmemAllocationType_enum / CUmemLocationType_enum
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
# enum CUevent_wait_flags_enum
CU_EVENT_WAIT_DEFAULT = 0
# enum CUjit_option_enum (the ones module loading passes)
CU_JIT_INFO_LOG_BUFFER = 3
CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
CU_JIT_OPTIMIZATION_LEVEL = 7
CU_JIT_GENERATE_DEBUG_INFO = 11
CU_JIT_LOG_VERBOSE = 12
CU_JIT_GENERATE_LINE_INFO = 13
# enum CUfunction_attribute_enum
CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0
CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2
CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3
CU_FUNC_ATTRIBUTE_NUM_REGS = 4
CU_FUNC_ATTRIBUTE_PTX_VERSION = 5
CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
# enum CUlaunchAttributeID_enum
CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4
# enum CUstreamCaptureMode_enum
CU_STREAM_CAPTURE_MODE_GLOBAL = 0
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
CU_STREAM_CAPTURE_MODE_RELAXED = 2
# enum CUstreamCaptureStatus_enum
CU_STREAM_CAPTURE_STATUS_NONE = 0
CU_STREAM_CAPTURE_STATUS_ACTIVE = 1
CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
# enum CUgraphExecUpdateResult_enum
CU_GRAPH_EXEC_UPDATE_SUCCESS = 0
CU_GRAPH_EXEC_UPDATE_ERROR = 1
CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED = 2
CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED = 3
CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED = 4
CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED = 5
CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED = 6
CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE = 7
CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED = 8
# enum CUgraphInstantiate_flags_enum
CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH = 1
CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD = 2
# enum CUoccupancy_flags_enum
CU_OCCUPANCY_DEFAULT = 0
CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE = 1
# enum CUtensorMapDataType_enum (the 16-bit floating-point types)
CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6
CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9
# enum CUtensorMapInterleave_enum
CU_TENSOR_MAP_INTERLEAVE_NONE = 0
# enum CUtensorMapSwizzle_enum
CU_TENSOR_MAP_SWIZZLE_NONE = 0
CU_TENSOR_MAP_SWIZZLE_32B = 1
CU_TENSOR_MAP_SWIZZLE_64B = 2
CU_TENSOR_MAP_SWIZZLE_128B = 3
# enum CUtensorMapL2promotion_enum
CU_TENSOR_MAP_L2_PROMOTION_NONE = 0
CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1
CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2
CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3
# enum CUtensorMapFloatOOBfill_enum
CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0


def _enum_table(text):
    return {name: int(value) for name, value in (line.split() for line in text.strip().splitlines())}


# enum CUdevice_attribute_enum, without the CU_DEVICE_ATTRIBUTE_ prefix.
DEVICE_ATTRIBUTES = _enum_table(
    """
    MAX_THREADS_PER_BLOCK 1
    MAX_BLOCK_DIM_X 2
    MAX_BLOCK_DIM_Y 3
    MAX_BLOCK_DIM_Z 4
    MAX_GRID_DIM_X 5
    MAX_GRID_DIM_Y 6
    MAX_GRID_DIM_Z 7
    MAX_SHARED_MEMORY_PER_BLOCK 8
    SHARED_MEMORY_PER_BLOCK 8
    TOTAL_CONSTANT_MEMORY 9
    WARP_SIZE 10
    MAX_PITCH 11
    MAX_REGISTERS_PER_BLOCK 12
    REGISTERS_PER_BLOCK 12
    CLOCK_RATE 13
    TEXTURE_ALIGNMENT 14
    GPU_OVERLAP 15
    MULTIPROCESSOR_COUNT 16
    KERNEL_EXEC_TIMEOUT 17
    INTEGRATED 18
    CAN_MAP_HOST_MEMORY 19
    COMPUTE_MODE 20
    MAXIMUM_TEXTURE1D_WIDTH 21
    MAXIMUM_TEXTURE2D_WIDTH 22
    MAXIMUM_TEXTURE2D_HEIGHT 23
    MAXIMUM_TEXTURE3D_WIDTH 24
    MAXIMUM_TEXTURE3D_HEIGHT 25
    MAXIMUM_TEXTURE3D_DEPTH 26
    MAXIMUM_TEXTURE2D_LAYERED_WIDTH 27
    MAXIMUM_TEXTURE2D_LAYERED_HEIGHT 28
    MAXIMUM_TEXTURE2D_LAYERED_LAYERS 29
    MAXIMUM_TEXTURE2D_ARRAY_WIDTH 27
    MAXIMUM_TEXTURE2D_ARRAY_HEIGHT 28
    MAXIMUM_TEXTURE2D_ARRAY_NUMSLICES 29
    SURFACE_ALIGNMENT 30
    CONCURRENT_KERNELS 31
    ECC_ENABLED 32
    PCI_BUS_ID 33
    PCI_DEVICE_ID 34
    TCC_DRIVER 35
    MEMORY_CLOCK_RATE 36
    GLOBAL_MEMORY_BUS_WIDTH 37
    L2_CACHE_SIZE 38
    MAX_THREADS_PER_MULTIPROCESSOR 39
    ASYNC_ENGINE_COUNT 40
    UNIFIED_ADDRESSING 41
    MAXIMUM_TEXTURE1D_LAYERED_WIDTH 42
    MAXIMUM_TEXTURE1D_LAYERED_LAYERS 43
    CAN_TEX2D_GATHER 44
    MAXIMUM_TEXTURE2D_GATHER_WIDTH 45
    MAXIMUM_TEXTURE2D_GATHER_HEIGHT 46
    MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE 47
    MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE 48
    MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE 49
    PCI_DOMAIN_ID 50
    TEXTURE_PITCH_ALIGNMENT 51
    MAXIMUM_TEXTURECUBEMAP_WIDTH 52
    MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH 53
    MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS 54
    MAXIMUM_SURFACE1D_WIDTH 55
    MAXIMUM_SURFACE2D_WIDTH 56
    MAXIMUM_SURFACE2D_HEIGHT 57
    MAXIMUM_SURFACE3D_WIDTH 58
    MAXIMUM_SURFACE3D_HEIGHT 59
    MAXIMUM_SURFACE3D_DEPTH 60
    MAXIMUM_SURFACE1D_LAYERED_WIDTH 61
    MAXIMUM_SURFACE1D_LAYERED_LAYERS 62
    MAXIMUM_SURFACE2D_LAYERED_WIDTH 63
    MAXIMUM_SURFACE2D_LAYERED_HEIGHT 64
    MAXIMUM_SURFACE2D_LAYERED_LAYERS 65
    MAXIMUM_SURFACECUBEMAP_WIDTH 66
    MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH 67
    MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS 68
    MAXIMUM_TEXTURE1D_LINEAR_WIDTH 69
    MAXIMUM_TEXTURE2D_LINEAR_WIDTH 70
    MAXIMUM_TEXTURE2D_LINEAR_HEIGHT 71
    MAXIMUM_TEXTURE2D_LINEAR_PITCH 72
    MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH 73
    MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT 74
    COMPUTE_CAPABILITY_MAJOR 75
    COMPUTE_CAPABILITY_MINOR 76
    MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH 77
    STREAM_PRIORITIES_SUPPORTED 78
    GLOBAL_L1_CACHE_SUPPORTED 79
    LOCAL_L1_CACHE_SUPPORTED 80
    MAX_SHARED_MEMORY_PER_MULTIPROCESSOR 81
    MAX_REGISTERS_PER_MULTIPROCESSOR 82
    MANAGED_MEMORY 83
    MULTI_GPU_BOARD 84
    MULTI_GPU_BOARD_GROUP_ID 85
    HOST_NATIVE_ATOMIC_SUPPORTED 86
    SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO 87
    PAGEABLE_MEMORY_ACCESS 88
    CONCURRENT_MANAGED_ACCESS 89
    COMPUTE_PREEMPTION_SUPPORTED 90
    CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM 91
    CAN_USE_STREAM_MEM_OPS_V1 92
    CAN_USE_64_BIT_STREAM_MEM_OPS_V1 93
    CAN_USE_STREAM_WAIT_VALUE_NOR_V1 94
    COOPERATIVE_LAUNCH 95
    COOPERATIVE_MULTI_DEVICE_LAUNCH 96
    MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
    CAN_FLUSH_REMOTE_WRITES 98
    HOST_REGISTER_SUPPORTED 99
    PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES 100
    DIRECT_MANAGED_MEM_ACCESS_FROM_HOST 101
    VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED 102
    VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
    HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED 103
    HANDLE_TYPE_WIN32_HANDLE_SUPPORTED 104
    HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED 105
    MAX_BLOCKS_PER_MULTIPROCESSOR 106
    GENERIC_COMPRESSION_SUPPORTED 107
    MAX_PERSISTING_L2_CACHE_SIZE 108
    MAX_ACCESS_POLICY_WINDOW_SIZE 109
    GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED 110
    RESERVED_SHARED_MEMORY_PER_BLOCK 111
    SPARSE_CUDA_ARRAY_SUPPORTED 112
    READ_ONLY_HOST_REGISTER_SUPPORTED 113
    TIMELINE_SEMAPHORE_INTEROP_SUPPORTED 114
    MEMORY_POOLS_SUPPORTED 115
    GPU_DIRECT_RDMA_SUPPORTED 116
    GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS 117
    GPU_DIRECT_RDMA_WRITES_ORDERING 118
    MEMPOOL_SUPPORTED_HANDLE_TYPES 119
    CLUSTER_LAUNCH 120
    DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED 121
    CAN_USE_64_BIT_STREAM_MEM_OPS 122
    CAN_USE_STREAM_WAIT_VALUE_NOR 123
    DMA_BUF_SUPPORTED 124
    IPC_EVENT_SUPPORTED 125
    MEM_SYNC_DOMAIN_COUNT 126
    TENSOR_MAP_ACCESS_SUPPORTED 127
    HANDLE_TYPE_FABRIC_SUPPORTED 128
    UNIFIED_FUNCTION_POINTERS 129
    NUMA_CONFIG 130
    NUMA_ID 131
    MULTICAST_SUPPORTED 132
    MPS_ENABLED 133
    HOST_NUMA_ID 134
    D3D12_CIG_SUPPORTED 135
    MEM_DECOMPRESS_ALGORITHM_MASK 136
    MEM_DECOMPRESS_MAXIMUM_LENGTH 137
    VULKAN_CIG_SUPPORTED 138
    GPU_PCI_DEVICE_ID 139
    GPU_PCI_SUBSYSTEM_ID 140
    HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 141
    HOST_NUMA_MEMORY_POOLS_SUPPORTED 142
    HOST_NUMA_MULTINODE_IPC_SUPPORTED 143
    HOST_MEMORY_POOLS_SUPPORTED 144
    HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 145
    HOST_ALLOC_DMA_BUF_SUPPORTED 146
    ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED 147
    """
)

TABLE = [
    # CUresult cuInit(unsigned int Flags)
    Proto("cuInit", CUresult, [c_uint]),
    # CUresult cuDriverGetVersion(int *driverVersion)
    Proto("cuDriverGetVersion", CUresult, [POINTER(c_int)]),
    # CUresult cuGetErrorName(CUresult error, const char **pStr)
    Proto("cuGetErrorName", CUresult, [CUresult, POINTER(c_char_p)]),
    # CUresult cuGetErrorString(CUresult error, const char **pStr)
    Proto("cuGetErrorString", CUresult, [CUresult, POINTER(c_char_p)]),
    # CUresult cuDeviceGetCount(int *count)
    Proto("cuDeviceGetCount", CUresult, [POINTER(c_int)]),
    # CUresult cuDeviceGet(CUdevice *device, int ordinal)
    Proto("cuDeviceGet", CUresult, [POINTER(CUdevice), c_int]),
    # CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
    Proto("cuDeviceGetName", CUresult, [c_char_p, c_int, CUdevice]),
    # CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
    Proto("cuDeviceGetAttribute", CUresult, [POINTER(c_int), CUdevice_attribute, CUdevice]),
    # CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
    Proto("cuDeviceTotalMem_v2", CUresult, [POINTER(c_size_t), CUdevice]),
    # CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
    Proto("cuDeviceGetUuid_v2", CUresult, [POINTER(CUuuid), CUdevice]),
    # CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
    Proto("cuDeviceGetPCIBusId", CUresult, [c_char_p, c_int, CUdevice]),
    # CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
    Proto("cuDeviceCanAccessPeer", CUresult, [POINTER(c_int), CUdevice, CUdevice]),
    # CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
    Proto("cuDevicePrimaryCtxRetain", CUresult, [POINTER(CUcontext), CUdevice]),
    # CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
    Proto("cuDevicePrimaryCtxRelease_v2", CUresult, [CUdevice]),
    # CUresult cuCtxSetCurrent(CUcontext ctx)
    Proto("cuCtxSetCurrent", CUresult, [CUcontext]),
    # CUresult cuCtxGetCurrent(CUcontext *pctx)
    Proto("cuCtxGetCurrent", CUresult, [POINTER(CUcontext)]),
    # CUresult cuCtxGetDevice(CUdevice *device)
    Proto("cuCtxGetDevice", CUresult, [POINTER(CUdevice)]),
    # CUresult cuCtxSynchronize(void)
    Proto("cuCtxSynchronize", CUresult, []),
    # CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
    Proto("cuCtxGetStreamPriorityRange", CUresult, [POINTER(c_int), POINTER(c_int)]),
    # CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
    Proto("cuMemGetInfo_v2", CUresult, [POINTER(c_size_t), POINTER(c_size_t)]),
    # CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
    Proto("cuMemAlloc_v2", CUresult, [POINTER(CUdeviceptr), c_size_t]),
    # CUresult cuMemFree_v2(CUdeviceptr dptr)
    Proto("cuMemFree_v2", CUresult, [CUdeviceptr]),
    # CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
    Proto("cuMemAllocAsync", CUresult, [POINTER(CUdeviceptr), c_size_t, CUstream]),
    # CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
    #                                  CUstream hStream)
    Proto("cuMemAllocFromPoolAsync", CUresult,
          [POINTER(CUdeviceptr), c_size_t, CUmemoryPool, CUstream]),
    # CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
    Proto("cuMemFreeAsync", CUresult, [CUdeviceptr, CUstream]),
    # CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
    Proto("cuDeviceGetDefaultMemPool", CUresult, [POINTER(CUmemoryPool), CUdevice]),
    # CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
    Proto("cuMemPoolCreate", CUresult, [POINTER(CUmemoryPool), POINTER(CUmemPoolProps)]),
    # CUresult cuMemPoolDestroy(CUmemoryPool pool)
    Proto("cuMemPoolDestroy", CUresult, [CUmemoryPool]),
    # CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
    Proto("cuMemPoolSetAttribute", CUresult, [CUmemoryPool, CUmemPool_attribute, c_void_p]),
    # CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
    Proto("cuMemPoolGetAttribute", CUresult, [CUmemoryPool, CUmemPool_attribute, c_void_p]),
    # CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
    Proto("cuMemPoolTrimTo", CUresult, [CUmemoryPool, c_size_t]),
    # CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
    Proto("cuMemHostAlloc", CUresult, [POINTER(c_void_p), c_size_t, c_uint]),
    # CUresult cuMemFreeHost(void *p)
    Proto("cuMemFreeHost", CUresult, [c_void_p]),
    # CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
    Proto("cuMemcpyHtoD_v2", CUresult, [CUdeviceptr, c_void_p, c_size_t]),
    # CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
    Proto("cuMemcpyDtoH_v2", CUresult, [c_void_p, CUdeviceptr, c_size_t]),
    # CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
    Proto("cuMemcpyDtoD_v2", CUresult, [CUdeviceptr, CUdeviceptr, c_size_t]),
    # CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
    #                               CUstream hStream)
    Proto("cuMemcpyHtoDAsync_v2", CUresult, [CUdeviceptr, c_void_p, c_size_t, CUstream]),
    # CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
    #                               CUstream hStream)
    Proto("cuMemcpyDtoHAsync_v2", CUresult, [c_void_p, CUdeviceptr, c_size_t, CUstream]),
    # CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
    #                               size_t ByteCount, CUstream hStream)
    Proto("cuMemcpyDtoDAsync_v2", CUresult, [CUdeviceptr, CUdeviceptr, c_size_t, CUstream]),
    # CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
    #                            CUdeviceptr srcDevice, CUcontext srcContext, size_t ByteCount,
    #                            CUstream hStream)
    Proto("cuMemcpyPeerAsync", CUresult,
          [CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, c_size_t, CUstream]),
    # CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
    Proto("cuMemcpy2DAsync_v2", CUresult, [POINTER(CUDA_MEMCPY2D), CUstream]),
    # CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
    #                          CUstream hStream)
    Proto("cuMemsetD8Async", CUresult, [CUdeviceptr, c_ubyte, c_size_t, CUstream]),
    # CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N,
    #                           CUstream hStream)
    Proto("cuMemsetD16Async", CUresult, [CUdeviceptr, c_ushort, c_size_t, CUstream]),
    # CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
    #                           CUstream hStream)
    Proto("cuMemsetD32Async", CUresult, [CUdeviceptr, c_uint, c_size_t, CUstream]),
    # CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc,
    #                            size_t Width, size_t Height, CUstream hStream)
    Proto("cuMemsetD2D8Async", CUresult,
          [CUdeviceptr, c_size_t, c_ubyte, c_size_t, c_size_t, CUstream]),
    # CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us,
    #                             size_t Width, size_t Height, CUstream hStream)
    Proto("cuMemsetD2D16Async", CUresult,
          [CUdeviceptr, c_size_t, c_ushort, c_size_t, c_size_t, CUstream]),
    # CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui,
    #                             size_t Width, size_t Height, CUstream hStream)
    Proto("cuMemsetD2D32Async", CUresult,
          [CUdeviceptr, c_size_t, c_uint, c_size_t, c_size_t, CUstream]),
    # CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
    Proto("cuPointerGetAttribute", CUresult, [c_void_p, CUpointer_attribute, CUdeviceptr]),
    # CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
    Proto("cuStreamCreateWithPriority", CUresult, [POINTER(CUstream), c_uint, c_int]),
    # CUresult cuStreamDestroy_v2(CUstream hStream)
    Proto("cuStreamDestroy_v2", CUresult, [CUstream]),
    # CUresult cuStreamSynchronize(CUstream hStream)
    Proto("cuStreamSynchronize", CUresult, [CUstream]),
    # CUresult cuStreamQuery(CUstream hStream)
    Proto("cuStreamQuery", CUresult, [CUstream]),
    # CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
    Proto("cuStreamWaitEvent", CUresult, [CUstream, CUevent, c_uint]),
    # CUresult cuStreamGetPriority(CUstream hStream, int *priority)
    Proto("cuStreamGetPriority", CUresult, [CUstream, POINTER(c_int)]),
    # CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
    Proto("cuStreamGetFlags", CUresult, [CUstream, POINTER(c_uint)]),
    # CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
    Proto("cuStreamGetCtx", CUresult, [CUstream, POINTER(CUcontext)]),
    # CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
    Proto("cuStreamGetDevice", CUresult, [CUstream, POINTER(CUdevice)], "CUDA 12.8"),
    # CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
    Proto("cuEventCreate", CUresult, [POINTER(CUevent), c_uint]),
    # CUresult cuEventDestroy_v2(CUevent hEvent)
    Proto("cuEventDestroy_v2", CUresult, [CUevent]),
    # CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
    Proto("cuEventRecord", CUresult, [CUevent, CUstream]),
    # CUresult cuEventSynchronize(CUevent hEvent)
    Proto("cuEventSynchronize", CUresult, [CUevent]),
    # CUresult cuEventQuery(CUevent hEvent)
    Proto("cuEventQuery", CUresult, [CUevent]),
    # CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
    Proto("cuEventElapsedTime_v2", CUresult, [POINTER(c_float), CUevent, CUevent], "CUDA 12.8"),
    # -- modules and kernels --------------------------------------------------------------
    # CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
    #                             CUjit_option *options, void **optionValues)
    Proto("cuModuleLoadDataEx", CUresult,
          [POINTER(CUmodule), c_void_p, c_uint, POINTER(CUjit_option), POINTER(c_void_p)]),
    # CUresult cuModuleUnload(CUmodule hmod)
    Proto("cuModuleUnload", CUresult, [CUmodule]),
    # CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
    Proto("cuModuleGetFunction", CUresult, [POINTER(CUfunction), CUmodule, c_char_p]),
    # CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
    #                               const char *name)
    Proto("cuModuleGetGlobal_v2", CUresult,
          [POINTER(CUdeviceptr), POINTER(c_size_t), CUmodule, c_char_p]),
    # CUresult cuModuleGetFunctionCount(unsigned int *count, CUmodule mod)
    Proto("cuModuleGetFunctionCount", CUresult, [POINTER(c_uint), CUmodule], "CUDA 12.4"),
    # CUresult cuModuleEnumerateFunctions(CUfunction *functions, unsigned int numFunctions,
    #                                     CUmodule mod)
    Proto("cuModuleEnumerateFunctions", CUresult, [POINTER(CUfunction), c_uint, CUmodule],
          "CUDA 12.4"),
    # CUresult cuFuncGetName(const char **name, CUfunction hfunc)
    Proto("cuFuncGetName", CUresult, [POINTER(c_char_p), CUfunction], "CUDA 12.3"),
    # CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
    Proto("cuFuncGetAttribute", CUresult, [POINTER(c_int), CUfunction_attribute, CUfunction]),
    # CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
    Proto("cuFuncSetAttribute", CUresult, [CUfunction, CUfunction_attribute, c_int]),
    # CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
    #                         unsigned int gridDimZ, unsigned int blockDimX,
    #                         unsigned int blockDimY, unsigned int blockDimZ,
    #                         unsigned int sharedMemBytes, CUstream hStream,
    #                         void **kernelParams, void **extra)
    Proto("cuLaunchKernel", CUresult,
          [CUfunction, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, CUstream,
           POINTER(c_void_p), POINTER(c_void_p)]),
    # CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
    #                           void **kernelParams, void **extra)
    Proto("cuLaunchKernelEx", CUresult,
          [POINTER(CUlaunchConfig), CUfunction, POINTER(c_void_p), POINTER(c_void_p)],
          "CUDA 11.8"),
    # CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
    #                                                      int blockSize, size_t dynamicSMemSize)
    Proto("cuOccupancyMaxActiveBlocksPerMultiprocessor", CUresult,
          [POINTER(c_int), CUfunction, c_int, c_size_t]),
    # CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
    #     CUfunction func, int blockSize, size_t dynamicSMemSize, unsigned int flags)
    Proto("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", CUresult,
          [POINTER(c_int), CUfunction, c_int, c_size_t, c_uint]),
    # CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
    #     CUfunction func, CUoccupancyB2DSize blockSizeToDynamicSMemSize,
    #     size_t dynamicSMemSize, int blockSizeLimit)
    Proto("cuOccupancyMaxPotentialBlockSize", CUresult,
          [POINTER(c_int), POINTER(c_int), CUfunction, CUoccupancyB2DSize, c_size_t, c_int]),
    # -- stream capture and graphs ----------------------------------------------------------
    # CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
    Proto("cuStreamBeginCapture_v2", CUresult, [CUstream, CUstreamCaptureMode]),
    # CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
    Proto("cuStreamEndCapture", CUresult, [CUstream, POINTER(CUgraph)]),
    # CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
    Proto("cuStreamIsCapturing", CUresult, [CUstream, POINTER(CUstreamCaptureStatus)]),
    # CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
    #     CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out, CUgraph *graph_out,
    #     const CUgraphNode **dependencies_out, const CUgraphEdgeData **edgeData_out,
    #     size_t *numDependencies_out)
    Proto("cuStreamGetCaptureInfo_v3", CUresult,
          [CUstream, POINTER(CUstreamCaptureStatus), POINTER(c_uint64), POINTER(CUgraph),
           POINTER(POINTER(CUgraphNode)), c_void_p, POINTER(c_size_t)], "CUDA 12.3"),
    # CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
    #                                      unsigned long long flags)
    Proto("cuGraphInstantiateWithFlags", CUresult, [POINTER(CUgraphExec), CUgraph, c_uint64]),
    # CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
    Proto("cuGraphLaunch", CUresult, [CUgraphExec, CUstream]),
    # CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
    Proto("cuGraphUpload", CUresult, [CUgraphExec, CUstream]),
    # CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
    #                               CUgraphExecUpdateResultInfo *resultInfo)
    Proto("cuGraphExecUpdate_v2", CUresult,
          [CUgraphExec, CUgraph, POINTER(CUgraphExecUpdateResultInfo)]),
    # CUresult cuGraphDestroy(CUgraph hGraph)
    Proto("cuGraphDestroy", CUresult, [CUgraph]),
    # CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
    Proto("cuGraphExecDestroy", CUresult, [CUgraphExec]),
    # CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
    Proto("cuGraphGetNodes", CUresult, [CUgraph, POINTER(CUgraphNode), POINTER(c_size_t)]),
    # CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
    Proto("cuGraphDebugDotPrint", CUresult, [CUgraph, c_char_p, c_uint]),
    # CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
    Proto("cuGraphNodeGetType", CUresult, [CUgraphNode, POINTER(c_int)]),
    # CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode,
    #                                        CUDA_KERNEL_NODE_PARAMS *nodeParams)
    Proto("cuGraphKernelNodeGetParams_v2", CUresult,
          [CUgraphNode, POINTER(CUDA_KERNEL_NODE_PARAMS_v2)]),
    # CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
    #                                            const CUDA_KERNEL_NODE_PARAMS *nodeParams)
    Proto("cuGraphExecKernelNodeSetParams_v2", CUresult,
          [CUgraphExec, CUgraphNode, POINTER(CUDA_KERNEL_NODE_PARAMS_v2)]),
    # CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode,
    #                                        const CUDA_KERNEL_NODE_PARAMS *nodeParams)
    Proto("cuGraphKernelNodeSetParams_v2", CUresult,
          [CUgraphNode, POINTER(CUDA_KERNEL_NODE_PARAMS_v2)]),
    # CUresult cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr,
    #                                        CUkernelNodeAttrValue *value_out)
    Proto("cuGraphKernelNodeGetAttribute", CUresult,
          [CUgraphNode, c_int, POINTER(CUlaunchAttributeValue)]),
    # CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams)
    Proto("cuGraphMemsetNodeGetParams", CUresult,
          [CUgraphNode, POINTER(CUDA_MEMSET_NODE_PARAMS)]),
    # CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode,
    #                                     const CUDA_MEMSET_NODE_PARAMS *nodeParams)
    Proto("cuGraphMemsetNodeSetParams", CUresult,
          [CUgraphNode, POINTER(CUDA_MEMSET_NODE_PARAMS)]),
    # CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
    #     const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
    Proto("cuGraphExecMemsetNodeSetParams", CUresult,
          [CUgraphExec, CUgraphNode, POINTER(CUDA_MEMSET_NODE_PARAMS), CUcontext]),
    # CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset,
    #                             size_t *paramSize)
    Proto("cuFuncGetParamInfo", CUresult,
          [CUfunction, c_size_t, POINTER(c_size_t), POINTER(c_size_t)], "CUDA 12.4"),
    # -- tensor maps (TMA descriptors) ------------------------------------------------------
    # CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap,
    #     CUtensorMapDataType tensorDataType, cuuint32_t tensorRank, void *globalAddress,
    #     const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
    #     const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
    #     CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
    #     CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
    Proto("cuTensorMapEncodeTiled", CUresult,
          [POINTER(CUtensorMap), CUtensorMapDataType, c_uint32, c_void_p, POINTER(c_uint64),
           POINTER(c_uint64), POINTER(c_uint32), POINTER(c_uint32), CUtensorMapInterleave,
           CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill], "CUDA 12.0"),
]

get = LazyLibrary("cuda", TABLE)
