"""NVRTC (runtime compilation of CUDA C++): ctypes types and the prototype table (``nvrtc.h``).

Nothing else lives here; :mod:`cudalibs.driver.nvrtc` holds the wrapper.  Names are the
vendor's.  Every NVRTC call works without a GPU or a driver, so the CPU tests compile real
kernels through this table.  A CPU test checks every row against the header.
"""

from ctypes import POINTER, c_char_p, c_int, c_size_t

from .._ffi import LazyLibrary, Proto, opaque_handle

# Headers (found in the NVIDIA wheels) that declare everything below.
HEADERS = ("nvrtc.h",)

nvrtcResult = c_int
# typedef struct _nvrtcProgram *nvrtcProgram;
nvrtcProgram = opaque_handle("_nvrtcProgram")

# enum nvrtcResult (the names are in cudalibs.errors.NvrtcError.status_names())
NVRTC_SUCCESS = 0
NVRTC_ERROR_COMPILATION = 6

TABLE = [
    # nvrtcResult nvrtcVersion(int *major, int *minor)
    Proto("nvrtcVersion", nvrtcResult, [POINTER(c_int), POINTER(c_int)]),
    # const char *nvrtcGetErrorString(nvrtcResult result)
    Proto("nvrtcGetErrorString", c_char_p, [nvrtcResult]),
    # nvrtcResult nvrtcGetNumSupportedArchs(int *numArchs)
    Proto("nvrtcGetNumSupportedArchs", nvrtcResult, [POINTER(c_int)]),
    # nvrtcResult nvrtcGetSupportedArchs(int *supportedArchs)
    Proto("nvrtcGetSupportedArchs", nvrtcResult, [POINTER(c_int)]),
    # nvrtcResult nvrtcCreateProgram(nvrtcProgram *prog, const char *src, const char *name,
    #                                int numHeaders, const char * const *headers,
    #                                const char * const *includeNames)
    Proto("nvrtcCreateProgram", nvrtcResult,
          [POINTER(nvrtcProgram), c_char_p, c_char_p, c_int, POINTER(c_char_p),
           POINTER(c_char_p)]),
    # nvrtcResult nvrtcDestroyProgram(nvrtcProgram *prog)
    Proto("nvrtcDestroyProgram", nvrtcResult, [POINTER(nvrtcProgram)]),
    # nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int numOptions,
    #                                 const char * const *options)
    Proto("nvrtcCompileProgram", nvrtcResult, [nvrtcProgram, c_int, POINTER(c_char_p)]),
    # nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t *ptxSizeRet)
    Proto("nvrtcGetPTXSize", nvrtcResult, [nvrtcProgram, POINTER(c_size_t)]),
    # nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char *ptx)
    Proto("nvrtcGetPTX", nvrtcResult, [nvrtcProgram, c_char_p]),
    # nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t *cubinSizeRet)
    Proto("nvrtcGetCUBINSize", nvrtcResult, [nvrtcProgram, POINTER(c_size_t)]),
    # nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char *cubin)
    Proto("nvrtcGetCUBIN", nvrtcResult, [nvrtcProgram, c_char_p]),
    # nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t *logSizeRet)
    Proto("nvrtcGetProgramLogSize", nvrtcResult, [nvrtcProgram, POINTER(c_size_t)]),
    # nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char *log)
    Proto("nvrtcGetProgramLog", nvrtcResult, [nvrtcProgram, c_char_p]),
    # nvrtcResult nvrtcAddNameExpression(nvrtcProgram prog, const char * const name_expression)
    Proto("nvrtcAddNameExpression", nvrtcResult, [nvrtcProgram, c_char_p]),
    # nvrtcResult nvrtcGetLoweredName(nvrtcProgram prog, const char *const name_expression,
    #                                 const char** lowered_name)
    Proto("nvrtcGetLoweredName", nvrtcResult, [nvrtcProgram, c_char_p, POINTER(c_char_p)]),
]

get = LazyLibrary("nvrtc", TABLE)
