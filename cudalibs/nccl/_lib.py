"""NCCL: ctypes types and the prototype table (``nccl.h``), nothing else.

Names are the vendor's.  ``ncclUniqueId`` is a 128-byte struct passed *by value* to
``ncclCommInitRank``; ctypes copies a :class:`~ctypes.Structure` argument by value, so the
table declares it as the struct itself, not a pointer.  ``ncclConfig_t`` mirrors
``struct ncclConfig_v22800`` of NCCL 2.28: NCCL reads its ``size`` and ``version`` fields to
know which later fields exist, so an older library accepts it.  A CPU test checks every row
and struct against the header.
"""

from ctypes import POINTER, Structure, c_char, c_char_p, c_int, c_size_t, c_uint, c_void_p

from .._ffi import LazyLibrary, Proto, opaque_handle
from ..driver._lib import CUstream

# Headers (found in the NVIDIA wheels) that declare everything below.
HEADERS = ("nccl.h",)

ncclResult_t = c_int
ncclDataType_t = c_int
ncclRedOp_t = c_int
# typedef struct ncclComm *ncclComm_t
ncclComm_t = opaque_handle("ncclComm")
# driver_types.h: typedef struct CUstream_st *cudaStream_t -- the driver's CUstream, the very
# same ctypes type, so a cudalibs stream handle passes straight through.
cudaStream_t = CUstream

# #define NCCL_UNIQUE_ID_BYTES 128
NCCL_UNIQUE_ID_BYTES = 128
# #define NCCL_SPLIT_NOCOLOR -1: the color of a rank that joins no communicator in ncclCommSplit
NCCL_SPLIT_NOCOLOR = -1
# What NCCL_CONFIG_INITIALIZER writes.  Not named like the vendor's macros, because they are
# not plain integer macros in nccl.h: NCCL_CONFIG_UNDEF_INT is INT_MIN ("let NCCL choose", in
# every int field), the magic is a literal inside the initializer, and the version is
# NCCL_VERSION(2, 28, 9) of the header whose layout ncclConfig_t mirrors.
CONFIG_UNDEF_INT = -(2 ** 31)
CONFIG_MAGIC = 0xCAFEBEEF
CONFIG_VERSION = 22809


class ncclUniqueId(Structure):
    # typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
    _fields_ = [("internal", c_char * NCCL_UNIQUE_ID_BYTES)]


class ncclConfig_t(Structure):
    # typedef struct ncclConfig_v22800 {...} ncclConfig_t;
    _fields_ = [
        ("size", c_size_t),
        ("magic", c_uint),
        ("version", c_uint),
        ("blocking", c_int),
        ("cgaClusterSize", c_int),
        ("minCTAs", c_int),
        ("maxCTAs", c_int),
        ("netName", c_char_p),
        ("splitShare", c_int),
        ("trafficClass", c_int),
        ("commName", c_char_p),
        ("collnetEnable", c_int),
        ("CTAPolicy", c_int),
        ("shrinkShare", c_int),
        ("nvlsCTAs", c_int),
        ("nChannelsPerNetPeer", c_int),
        ("nvlinkCentricSched", c_int),
    ]


# Structs whose layout a CPU test compares with nccl.h: ctypes class -> C struct tag.
# (ncclUniqueId is an anonymous struct behind a typedef, so it has no tag; its one field is
# checked by size: ctypes.sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES.)
STRUCTS = {
    ncclConfig_t: "ncclConfig_v22800",
}

# enum ncclRedOp_t (the built-in operators)
ncclSum = 0
ncclProd = 1
ncclMax = 2
ncclMin = 3
ncclAvg = 4
ncclNumOps = 5

# enum ncclDataType_t (cudalibs.dtypes maps them to numpy)
ncclInt8 = 0
ncclChar = 0
ncclUint8 = 1
ncclInt32 = 2
ncclInt = 2
ncclUint32 = 3
ncclInt64 = 4
ncclUint64 = 5
ncclFloat16 = 6
ncclHalf = 6
ncclFloat32 = 7
ncclFloat = 7
ncclFloat64 = 8
ncclDouble = 8
ncclBfloat16 = 9
ncclFloat8e4m3 = 10
ncclFloat8e5m2 = 11

TABLE = [
    # ncclResult_t ncclGetVersion(int *version)
    Proto("ncclGetVersion", ncclResult_t, [POINTER(c_int)]),
    # ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId)
    Proto("ncclGetUniqueId", ncclResult_t, [POINTER(ncclUniqueId)]),
    # const char* ncclGetErrorString(ncclResult_t result)
    Proto("ncclGetErrorString", c_char_p, [ncclResult_t]),
    # const char* ncclGetLastError(ncclComm_t comm)
    Proto("ncclGetLastError", c_char_p, [ncclComm_t]),
    # ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank)
    Proto("ncclCommInitRank", ncclResult_t, [POINTER(ncclComm_t), c_int, ncclUniqueId, c_int]),
    # ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
    #                                     int rank, ncclConfig_t* config)
    Proto("ncclCommInitRankConfig", ncclResult_t,
          [POINTER(ncclComm_t), c_int, ncclUniqueId, c_int, POINTER(ncclConfig_t)], "NCCL 2.14"),
    # ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist)
    Proto("ncclCommInitAll", ncclResult_t, [POINTER(ncclComm_t), c_int, POINTER(c_int)]),
    # ncclResult_t ncclCommDestroy(ncclComm_t comm)
    Proto("ncclCommDestroy", ncclResult_t, [ncclComm_t]),
    # ncclResult_t ncclCommAbort(ncclComm_t comm)
    Proto("ncclCommAbort", ncclResult_t, [ncclComm_t]),
    # ncclResult_t ncclCommFinalize(ncclComm_t comm)
    Proto("ncclCommFinalize", ncclResult_t, [ncclComm_t], "NCCL 2.14"),
    # ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
    #                            ncclConfig_t* config)
    Proto("ncclCommSplit", ncclResult_t,
          [ncclComm_t, c_int, c_int, POINTER(ncclComm_t), POINTER(ncclConfig_t)], "NCCL 2.18"),
    # ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
    Proto("ncclCommGetAsyncError", ncclResult_t, [ncclComm_t, POINTER(ncclResult_t)]),
    # ncclResult_t ncclCommCount(const ncclComm_t comm, int* count)
    Proto("ncclCommCount", ncclResult_t, [ncclComm_t, POINTER(c_int)]),
    # ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device)
    Proto("ncclCommCuDevice", ncclResult_t, [ncclComm_t, POINTER(c_int)]),
    # ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank)
    Proto("ncclCommUserRank", ncclResult_t, [ncclComm_t, POINTER(c_int)]),
    # ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
    #                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
    #                            cudaStream_t stream)
    Proto("ncclAllReduce", ncclResult_t,
          [c_void_p, c_void_p, c_size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
           cudaStream_t]),
    # ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
    #                            ncclDataType_t datatype, int root, ncclComm_t comm,
    #                            cudaStream_t stream)
    Proto("ncclBroadcast", ncclResult_t,
          [c_void_p, c_void_p, c_size_t, ncclDataType_t, c_int, ncclComm_t, cudaStream_t]),
    # ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
    #                         ncclDataType_t datatype, ncclRedOp_t op, int root,
    #                         ncclComm_t comm, cudaStream_t stream)
    Proto("ncclReduce", ncclResult_t,
          [c_void_p, c_void_p, c_size_t, ncclDataType_t, ncclRedOp_t, c_int, ncclComm_t,
           cudaStream_t]),
    # ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
    #                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
    Proto("ncclAllGather", ncclResult_t,
          [c_void_p, c_void_p, c_size_t, ncclDataType_t, ncclComm_t, cudaStream_t]),
    # ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
    #                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
    #                                cudaStream_t stream)
    Proto("ncclReduceScatter", ncclResult_t,
          [c_void_p, c_void_p, c_size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
           cudaStream_t]),
    # ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype,
    #                       int peer, ncclComm_t comm, cudaStream_t stream)
    Proto("ncclSend", ncclResult_t,
          [c_void_p, c_size_t, ncclDataType_t, c_int, ncclComm_t, cudaStream_t]),
    # ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
    #                       ncclComm_t comm, cudaStream_t stream)
    Proto("ncclRecv", ncclResult_t,
          [c_void_p, c_size_t, ncclDataType_t, c_int, ncclComm_t, cudaStream_t]),
    # ncclResult_t ncclGroupStart()
    Proto("ncclGroupStart", ncclResult_t, []),
    # ncclResult_t ncclGroupEnd()
    Proto("ncclGroupEnd", ncclResult_t, []),
]

get = LazyLibrary("nccl", TABLE)
