"""Real calls through the NVRTC, cuBLAS/cuBLASLt, cuDNN and NCCL prototype tables, with no GPU.

Each of these libraries has host-only entry points (compiling, descriptors, layouts, version and
status queries, unique ids) that work without a driver.  Calling them through our own tables
checks what the header comparison cannot: that the libraries load, export every bound symbol,
and round-trip values through the argument types we declared.  Every status code of
``cudalibs.errors`` is also checked against the library's own string function.
"""

from __future__ import annotations

import ctypes
import os
import pickle
from ctypes import byref, c_int, c_int32, c_size_t, c_uint64

os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")  # before NCCL is first loaded

import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cudalibs import errors  # noqa: E402
from cudalibs.cublas import _base as cublas_base  # noqa: E402
from cudalibs.cublas import _lib as cublas_lib  # noqa: E402
from cudalibs.cudnn import _base as cudnn_base  # noqa: E402
from cudalibs.cudnn import _lib as cudnn_lib  # noqa: E402
from cudalibs.driver import _nvrtc_lib as nvrtc_lib  # noqa: E402
from cudalibs.driver import nvrtc  # noqa: E402
from cudalibs.nccl import _base as nccl_base  # noqa: E402
from cudalibs.nccl import _lib as nccl_lib  # noqa: E402

CUDA_R_32F = 0  # cudaDataType_t (library_types.h)
CUBLAS_COMPUTE_32F = 68  # cublasComputeType_t


def _ints(values):
    return (c_int * len(values))(*values)


@pytest.mark.parametrize("lib", [nvrtc_lib.get, cublas_lib.get, cublas_lib.get_lt,
                                 cudnn_lib.get, nccl_lib.get],
                         ids=["nvrtc", "cublas", "cublasLt", "cudnn", "nccl"])
def test_every_row_is_exported(lib):
    bound = lib()
    assert bound.missing == ()
    assert set(bound.table) == {p.name for p in lib.table}


# ---------------------------------------------------------------------------------------- NVRTC

KERNEL = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


def test_nvrtc_version_and_archs():
    major, minor, patch = nvrtc.version()
    assert major >= 12 and minor >= 0 and patch == 0   # nvrtcVersion has no patch level
    archs = nvrtc.supported_archs()
    assert archs and all(isinstance(a, int) for a in archs)
    assert list(archs) == sorted(archs)
    assert 90 in archs


def test_every_library_version_has_one_form():
    from cudalibs import cublas, cudnn, nccl

    for name, version in (("nvrtc", nvrtc.version), ("cublas", cublas.version),
                          ("cublasLt", cublas.lt_version), ("cudnn", cudnn.version),
                          ("nccl", nccl.version)):
        v = version()
        assert type(v) is tuple and len(v) == 3 and all(type(x) is int for x in v), (name, v)
    # the libraries' own integers, under one name each
    for version, code in ((cublas.version, cublas.version_int),
                          (cublas.lt_version, cublas.lt_version_int),
                          (cudnn.version, cudnn.version_int), (nccl.version, nccl.version_int)):
        major, minor, patch = version()
        assert code() == major * 10000 + minor * 100 + patch
    # the former tuple functions still answer, and say what replaced them
    for mod, name in ((cudnn, "cudnn"), (nccl, "nccl")):
        with pytest.warns(DeprecationWarning, match=rf"{name}\.version\(\)"):
            assert mod.version_tuple() == mod.version()


def test_driver_version_has_the_same_form(monkeypatch):
    import cudalibs
    from cudalibs.driver import _core

    class FakeDriver:
        @staticmethod
        def cuDriverGetVersion(out):
            ctypes.cast(out, ctypes.POINTER(ctypes.c_int))[0] = 12080
            return 0

    monkeypatch.setattr(_core._lib, "get", lambda: FakeDriver)
    assert _core.driver_version() == (12, 8, 0)
    assert _core.driver_version_int() == 12080
    assert cudalibs.driver_version_int is _core.driver_version_int


def test_nvrtc_compiles_ptx():
    ptx, log = nvrtc._compile_raw(KERNEL, "saxpy.cu", ["-arch=compute_90"], "ptx")
    assert isinstance(ptx, bytes) and not ptx.endswith(b"\0")
    text = ptx.decode()
    assert ".entry saxpy(" in text
    assert ".version " in text
    assert ".target sm_90" in text
    assert isinstance(log, str)


def test_nvrtc_compiles_cubin():
    cubin, _ = nvrtc._compile_raw(KERNEL, "saxpy.cu", ["-arch=sm_90"], "cubin")
    assert cubin[:4] == b"\x7fELF"
    assert b"saxpy" in cubin


def test_nvrtc_cubin_needs_a_real_arch():
    with pytest.raises(ValueError, match="real architecture"):
        nvrtc._compile_raw(KERNEL, "saxpy.cu", ["-arch=compute_90"], "cubin")
    with pytest.raises(ValueError, match="target"):
        nvrtc._compile_raw(KERNEL, "saxpy.cu", [], "sass")


def test_nvrtc_compile_error_carries_log():
    bad = 'extern "C" __global__ void broken(int* p) { p[0] = undefined_name; }'
    with pytest.raises(errors.NvrtcError) as info:
        nvrtc._compile_raw(bad, "broken.cu", ["-arch=compute_90"], "ptx")
    err = info.value
    assert err.status == 6 and err.name == "NVRTC_ERROR_COMPILATION"
    assert err.function == "nvrtcCompileProgram"
    assert err.message == "NVRTC_ERROR_COMPILATION"
    assert "broken.cu" in err.detail and "undefined_name" in err.detail
    assert "undefined_name" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert (again.status, again.detail, str(again)) == (err.status, err.detail, str(err))


def test_nvrtc_bad_option():
    with pytest.raises(errors.NvrtcError) as info:
        nvrtc._compile_raw(KERNEL, "saxpy.cu", ["--no-such-option"], "ptx")
    assert info.value.name == "NVRTC_ERROR_INVALID_OPTION"
    assert "no-such-option" in (info.value.detail or "")


def test_nvrtc_lowered_names():
    """nvrtcAddNameExpression / nvrtcGetLoweredName through the raw table."""
    lib = nvrtc_lib.get()
    src = b"template <typename T> __global__ void fill(T* p, T v) { p[threadIdx.x] = v; }"
    prog = nvrtc_lib.nvrtcProgram()
    assert lib.nvrtcCreateProgram(byref(prog), src, b"fill.cu", 0, None, None) == 0
    try:
        assert lib.nvrtcAddNameExpression(prog, b"fill<float>") == 0
        opts = (ctypes.c_char_p * 1)(b"-arch=compute_90")
        assert lib.nvrtcCompileProgram(prog, 1, opts) == 0
        lowered = ctypes.c_char_p()
        assert lib.nvrtcGetLoweredName(prog, b"fill<float>", byref(lowered)) == 0
        assert lowered.value.startswith(b"_Z") and b"fill" in lowered.value
        size = c_size_t()
        assert lib.nvrtcGetPTXSize(prog, byref(size)) == 0
        ptx = ctypes.create_string_buffer(size.value)
        assert lib.nvrtcGetPTX(prog, ptx) == 0
        assert lowered.value in ptx.value
    finally:
        assert lib.nvrtcDestroyProgram(byref(prog)) == 0
    assert not prog  # nvrtcDestroyProgram nulls the handle


# ------------------------------------------------------------------------------ cuBLAS/cuBLASLt

def test_cublas_versions():
    major, minor, patch = cublas_base.version()
    assert major >= 12
    assert cublas_base.version_int() == major * 10000 + minor * 100 + patch
    assert cublas_base.lt_version() == (major, minor, patch)
    assert cublas_base.lt_version_int() == major * 10000 + minor * 100 + patch
    lt = cublas_lib.get_lt()
    for prop, want in zip((cublas_lib.MAJOR_VERSION, cublas_lib.MINOR_VERSION,
                           cublas_lib.PATCH_LEVEL), (major, minor, patch)):
        value = c_int()
        assert lt.cublasLtGetProperty(prop, byref(value)) == 0
        assert value.value == want
    assert cublas_lib.get().cublasGetCudartVersion() >= 12000
    assert lt.cublasLtGetCudartVersion() >= 12000


def test_cublas_status_strings():
    lib, lt = cublas_lib.get(), cublas_lib.get_lt()
    assert lib.cublasGetStatusString(0) == b"success"
    assert lib.cublasGetStatusString(7).decode().startswith("an unsupported value")
    assert lt.cublasLtGetStatusString(7) == lib.cublasGetStatusString(7)


def _lt_check(st, function):
    if st:
        cublas_base.raise_for(st, function)


def _layout_get(lt, layout, attr):
    ctype = cublas_lib.LAYOUT_ATTRIBUTE_TYPES[attr]
    value, written = ctype(), c_size_t()
    _lt_check(lt.cublasLtMatrixLayoutGetAttribute(layout, attr, byref(value),
                                                  ctypes.sizeof(value), byref(written)),
              "cublasLtMatrixLayoutGetAttribute")
    assert written.value == ctypes.sizeof(ctype)
    return value.value


def _layout_set(lt, layout, attr, value):
    buf = cublas_lib.LAYOUT_ATTRIBUTE_TYPES[attr](value)
    _lt_check(lt.cublasLtMatrixLayoutSetAttribute(layout, attr, byref(buf), ctypes.sizeof(buf)),
              "cublasLtMatrixLayoutSetAttribute")


@settings(max_examples=40)
@given(rows=st.integers(1, 2 ** 20), cols=st.integers(1, 2 ** 20), pad=st.integers(0, 64),
       row_major=st.booleans(), batch=st.integers(1, 1024))
def test_cublaslt_matrix_layout_roundtrip(rows, cols, pad, row_major, batch):
    L = cublas_lib
    lt = L.get_lt()
    ld = (cols if row_major else rows) + pad
    layout = L.cublasLtMatrixLayout_t()
    _lt_check(lt.cublasLtMatrixLayoutCreate(byref(layout), CUDA_R_32F, rows, cols, ld),
              "cublasLtMatrixLayoutCreate")
    try:
        order = L.CUBLASLT_ORDER_ROW if row_major else L.CUBLASLT_ORDER_COL
        stride = rows * cols + 2 ** 33  # beyond 32 bits: the int64_t attribute must hold it
        _layout_set(lt, layout, L.CUBLASLT_MATRIX_LAYOUT_ORDER, order)
        _layout_set(lt, layout, L.CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch)
        _layout_set(lt, layout, L.CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride)
        got = {a: _layout_get(lt, layout, a) for a in L.LAYOUT_ATTRIBUTE_TYPES}
        assert got[L.CUBLASLT_MATRIX_LAYOUT_TYPE] == CUDA_R_32F
        assert got[L.CUBLASLT_MATRIX_LAYOUT_ROWS] == rows
        assert got[L.CUBLASLT_MATRIX_LAYOUT_COLS] == cols
        assert got[L.CUBLASLT_MATRIX_LAYOUT_LD] == ld
        assert got[L.CUBLASLT_MATRIX_LAYOUT_ORDER] == order
        assert got[L.CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT] == batch
        assert got[L.CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET] == stride
        assert got[L.CUBLASLT_MATRIX_LAYOUT_BATCH_MODE] == L.CUBLASLT_BATCH_MODE_STRIDED
    finally:
        assert lt.cublasLtMatrixLayoutDestroy(layout) == 0


def test_cublaslt_layout_too_small_buffer_is_an_error():
    L = cublas_lib
    lt = L.get_lt()
    layout = L.cublasLtMatrixLayout_t()
    _lt_check(lt.cublasLtMatrixLayoutCreate(byref(layout), CUDA_R_32F, 4, 4, 4),
              "cublasLtMatrixLayoutCreate")
    try:
        small, written = c_int32(), c_size_t()
        st_ = lt.cublasLtMatrixLayoutGetAttribute(layout, L.CUBLASLT_MATRIX_LAYOUT_ROWS,
                                                  byref(small), 4, byref(written))
        with pytest.raises(errors.CublasError) as info:
            _lt_check(st_, "cublasLtMatrixLayoutGetAttribute")
        assert info.value.name == "CUBLAS_STATUS_INVALID_VALUE"
        assert info.value.function == "cublasLtMatrixLayoutGetAttribute"
    finally:
        assert lt.cublasLtMatrixLayoutDestroy(layout) == 0


def test_cublaslt_matmul_desc_and_preference():
    L = cublas_lib
    lt = L.get_lt()
    desc = L.cublasLtMatmulDesc_t()
    _lt_check(lt.cublasLtMatmulDescCreate(byref(desc), CUBLAS_COMPUTE_32F, CUDA_R_32F),
              "cublasLtMatmulDescCreate")
    try:
        def get(attr):
            value, written = L.MATMUL_DESC_ATTRIBUTE_TYPES[attr](), c_size_t()
            _lt_check(lt.cublasLtMatmulDescGetAttribute(desc, attr, byref(value),
                                                        ctypes.sizeof(value), byref(written)),
                      "cublasLtMatmulDescGetAttribute")
            assert written.value == ctypes.sizeof(value)
            return value.value

        def set_(attr, v):
            buf = L.MATMUL_DESC_ATTRIBUTE_TYPES[attr](v)
            _lt_check(lt.cublasLtMatmulDescSetAttribute(desc, attr, byref(buf),
                                                        ctypes.sizeof(buf)),
                      "cublasLtMatmulDescSetAttribute")

        assert get(L.CUBLASLT_MATMUL_DESC_COMPUTE_TYPE) == CUBLAS_COMPUTE_32F
        assert get(L.CUBLASLT_MATMUL_DESC_SCALE_TYPE) == CUDA_R_32F
        assert get(L.CUBLASLT_MATMUL_DESC_TRANSA) == L.CUBLAS_OP_N
        set_(L.CUBLASLT_MATMUL_DESC_TRANSA, L.CUBLAS_OP_T)
        assert get(L.CUBLASLT_MATMUL_DESC_TRANSA) == L.CUBLAS_OP_T
        assert get(L.CUBLASLT_MATMUL_DESC_TRANSB) == L.CUBLAS_OP_N
        set_(L.CUBLASLT_MATMUL_DESC_EPILOGUE, L.CUBLASLT_EPILOGUE_RELU_BIAS)
        assert get(L.CUBLASLT_MATMUL_DESC_EPILOGUE) == L.CUBLASLT_EPILOGUE_RELU_BIAS
        set_(L.CUBLASLT_MATMUL_DESC_BIAS_POINTER, 0x7F0000001000)
        assert get(L.CUBLASLT_MATMUL_DESC_BIAS_POINTER) == 0x7F0000001000
        assert get(L.CUBLASLT_MATMUL_DESC_POINTER_MODE) == L.CUBLASLT_POINTER_MODE_HOST
    finally:
        assert lt.cublasLtMatmulDescDestroy(desc) == 0

    pref = L.cublasLtMatmulPreference_t()
    _lt_check(lt.cublasLtMatmulPreferenceCreate(byref(pref)), "cublasLtMatmulPreferenceCreate")
    try:
        ws = c_uint64(64 << 20)
        _lt_check(lt.cublasLtMatmulPreferenceSetAttribute(
            pref, L.CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, byref(ws), ctypes.sizeof(ws)),
            "cublasLtMatmulPreferenceSetAttribute")
    finally:
        assert lt.cublasLtMatmulPreferenceDestroy(pref) == 0


# ---------------------------------------------------------------------------------------- cuDNN

def _dnn(st_, function):
    if st_:
        cudnn_base.raise_for(st_, function)


def _create(kind):
    """Create one cuDNN descriptor of ``kind`` ("Tensor", "Filter", ...); returns (desc, free)."""
    lib = cudnn_lib.get()
    desc = getattr(cudnn_lib, f"cudnn{kind}Descriptor_t")()
    _dnn(getattr(lib, f"cudnnCreate{kind}Descriptor")(byref(desc)), f"cudnnCreate{kind}Descriptor")
    destroy = getattr(lib, f"cudnnDestroy{kind}Descriptor")
    return desc, lambda: destroy(desc)


def test_cudnn_version():
    v = cudnn_base.version_int()
    major, minor, patch = cudnn_base.version()
    assert major >= 9 and v == major * 10000 + minor * 100 + patch
    lib = cudnn_lib.get()
    assert lib.cudnnGetCudartVersion() >= 12000
    assert lib.cudnnGetMaxDeviceVersion() >= 900


def test_cudnn_tensor_descriptor_roundtrip():
    lib = cudnn_lib.get()
    desc, free = _create("Tensor")
    try:
        dims, strides = [2, 3, 5, 7], [120, 35, 7, 1]  # padded: N stride > C*H*W
        _dnn(lib.cudnnSetTensorNdDescriptor(desc, cudnn_lib.CUDNN_DATA_FLOAT, 4, _ints(dims),
                                            _ints(strides)), "cudnnSetTensorNdDescriptor")
        dtype, nb = c_int(), c_int()
        got_dims, got_strides = (c_int * 8)(), (c_int * 8)()
        _dnn(lib.cudnnGetTensorNdDescriptor(desc, 8, byref(dtype), byref(nb), got_dims,
                                            got_strides), "cudnnGetTensorNdDescriptor")
        assert dtype.value == cudnn_lib.CUDNN_DATA_FLOAT and nb.value == 4
        assert list(got_dims[:4]) == dims and list(got_strides[:4]) == strides

        # NHWC through the Ex form: cuDNN computes the strides.
        n, c, h, w = 2, 3, 5, 7
        _dnn(lib.cudnnSetTensorNdDescriptorEx(desc, cudnn_lib.CUDNN_TENSOR_NHWC,
                                              cudnn_lib.CUDNN_DATA_HALF, 4, _ints([n, c, h, w])),
             "cudnnSetTensorNdDescriptorEx")
        _dnn(lib.cudnnGetTensorNdDescriptor(desc, 8, byref(dtype), byref(nb), got_dims,
                                            got_strides), "cudnnGetTensorNdDescriptor")
        assert dtype.value == cudnn_lib.CUDNN_DATA_HALF
        assert list(got_dims[:4]) == [n, c, h, w]
        assert list(got_strides[:4]) == [h * w * c, 1, w * c, c]
    finally:
        assert free() == 0


def test_cudnn_filter_and_conv_descriptor_roundtrip():
    lib = cudnn_lib.get()
    filt, free_filt = _create("Filter")
    conv, free_conv = _create("Convolution")
    try:
        fdims = [8, 4, 3, 5]
        _dnn(lib.cudnnSetFilterNdDescriptor(filt, cudnn_lib.CUDNN_DATA_FLOAT,
                                            cudnn_lib.CUDNN_TENSOR_NHWC, 4, _ints(fdims)),
             "cudnnSetFilterNdDescriptor")
        dtype, fmt, nb, got = c_int(), c_int(), c_int(), (c_int * 8)()
        _dnn(lib.cudnnGetFilterNdDescriptor(filt, 8, byref(dtype), byref(fmt), byref(nb), got),
             "cudnnGetFilterNdDescriptor")
        assert (dtype.value, fmt.value, nb.value) == (cudnn_lib.CUDNN_DATA_FLOAT,
                                                      cudnn_lib.CUDNN_TENSOR_NHWC, 4)
        assert list(got[:4]) == fdims

        pad, stride, dil = [1, 2], [2, 1], [1, 3]
        _dnn(lib.cudnnSetConvolutionNdDescriptor(conv, 2, _ints(pad), _ints(stride), _ints(dil),
                                                 cudnn_lib.CUDNN_CROSS_CORRELATION,
                                                 cudnn_lib.CUDNN_DATA_FLOAT),
             "cudnnSetConvolutionNdDescriptor")
        _dnn(lib.cudnnSetConvolutionGroupCount(conv, 2), "cudnnSetConvolutionGroupCount")
        _dnn(lib.cudnnSetConvolutionMathType(conv, cudnn_lib.CUDNN_TENSOR_OP_MATH),
             "cudnnSetConvolutionMathType")
        n = c_int()
        gp, gs, gd = (c_int * 6)(), (c_int * 6)(), (c_int * 6)()
        mode, ctype = c_int(), c_int()
        _dnn(lib.cudnnGetConvolutionNdDescriptor(conv, 6, byref(n), gp, gs, gd, byref(mode),
                                                 byref(ctype)),
             "cudnnGetConvolutionNdDescriptor")
        assert n.value == 2
        assert (list(gp[:2]), list(gs[:2]), list(gd[:2])) == (pad, stride, dil)
        assert mode.value == cudnn_lib.CUDNN_CROSS_CORRELATION
        assert ctype.value == cudnn_lib.CUDNN_DATA_FLOAT
    finally:
        assert free_conv() == 0
        assert free_filt() == 0


@st.composite
def conv_problems(draw):
    groups = draw(st.integers(1, 4))
    n = draw(st.integers(1, 16))
    c = groups * draw(st.integers(1, 8))
    k = groups * draw(st.integers(1, 8))
    spatial = []
    for _ in range(2):
        r = draw(st.integers(1, 7))
        d = draw(st.integers(1, 3))
        p = draw(st.integers(0, 4))
        s = draw(st.integers(1, 4))
        extent = d * (r - 1) + 1  # the dilated filter must fit the padded input
        size = draw(st.integers(max(1, extent - 2 * p), 96))
        spatial.append((size, r, p, s, d))
    return n, c, k, groups, spatial


@settings(max_examples=150)
@given(conv_problems(), st.sampled_from(["CUDNN_CONVOLUTION", "CUDNN_CROSS_CORRELATION"]))
def test_cudnn_conv_output_dim(problem, mode):
    n, c, k, groups, spatial = problem
    (h, r, ph, sh, dh), (w, s, pw, sw, dw) = spatial
    lib = cudnn_lib.get()
    x, free_x = _create("Tensor")
    f, free_f = _create("Filter")
    conv, free_conv = _create("Convolution")
    try:
        _dnn(lib.cudnnSetTensorNdDescriptorEx(x, cudnn_lib.CUDNN_TENSOR_NCHW,
                                              cudnn_lib.CUDNN_DATA_FLOAT, 4, _ints([n, c, h, w])),
             "cudnnSetTensorNdDescriptorEx")
        _dnn(lib.cudnnSetFilterNdDescriptor(f, cudnn_lib.CUDNN_DATA_FLOAT,
                                            cudnn_lib.CUDNN_TENSOR_NCHW, 4,
                                            _ints([k, c // groups, r, s])),
             "cudnnSetFilterNdDescriptor")
        _dnn(lib.cudnnSetConvolutionNdDescriptor(conv, 2, _ints([ph, pw]), _ints([sh, sw]),
                                                 _ints([dh, dw]), getattr(cudnn_lib, mode),
                                                 cudnn_lib.CUDNN_DATA_FLOAT),
             "cudnnSetConvolutionNdDescriptor")
        _dnn(lib.cudnnSetConvolutionGroupCount(conv, groups), "cudnnSetConvolutionGroupCount")
        out = (c_int * 4)()
        _dnn(lib.cudnnGetConvolutionNdForwardOutputDim(conv, x, f, 4, out),
             "cudnnGetConvolutionNdForwardOutputDim")
        expect_h = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        expect_w = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
        assert list(out) == [n, k, expect_h, expect_w]
    finally:
        assert free_conv() == 0
        assert free_f() == 0
        assert free_x() == 0


def test_cudnn_bad_descriptor_raises_with_last_error():
    lib = cudnn_lib.get()
    desc, free = _create("Tensor")
    try:
        st_ = lib.cudnnSetTensorNdDescriptor(desc, cudnn_lib.CUDNN_DATA_FLOAT, 4,
                                             _ints([2, 3, -4, 5]), _ints([60, 20, 5, 1]))
        with pytest.raises(errors.CudnnError) as info:
            _dnn(st_, "cudnnSetTensorNdDescriptor")
    finally:
        assert free() == 0
    err = info.value
    assert err.status == 2000 and err.name == "CUDNN_STATUS_BAD_PARAM"
    assert err.function == "cudnnSetTensorNdDescriptor"
    assert err.message == "CUDNN_STATUS_BAD_PARAM"
    assert err.detail and "dimA" in err.detail  # cudnnGetLastErrorString: what was wrong
    assert err.detail in str(err)
    assert cudnn_base.last_error_string() == ""  # reading it cleared it
    again = pickle.loads(pickle.dumps(err))
    assert (again.status, again.detail, str(again)) == (err.status, err.detail, str(err))


def test_cudnn_mismatched_channels_raise():
    lib = cudnn_lib.get()
    x, free_x = _create("Tensor")
    f, free_f = _create("Filter")
    conv, free_conv = _create("Convolution")
    try:
        _dnn(lib.cudnnSetTensorNdDescriptorEx(x, cudnn_lib.CUDNN_TENSOR_NCHW,
                                              cudnn_lib.CUDNN_DATA_FLOAT, 4, _ints([1, 3, 8, 8])),
             "cudnnSetTensorNdDescriptorEx")
        _dnn(lib.cudnnSetFilterNdDescriptor(f, cudnn_lib.CUDNN_DATA_FLOAT,
                                            cudnn_lib.CUDNN_TENSOR_NCHW, 4, _ints([4, 5, 3, 3])),
             "cudnnSetFilterNdDescriptor")
        _dnn(lib.cudnnSetConvolutionNdDescriptor(conv, 2, _ints([0, 0]), _ints([1, 1]),
                                                 _ints([1, 1]), cudnn_lib.CUDNN_CONVOLUTION,
                                                 cudnn_lib.CUDNN_DATA_FLOAT),
             "cudnnSetConvolutionNdDescriptor")
        out = (c_int * 4)()
        st_ = lib.cudnnGetConvolutionNdForwardOutputDim(conv, x, f, 4, out)
        with pytest.raises(errors.CudnnError) as info:
            _dnn(st_, "cudnnGetConvolutionNdForwardOutputDim")
        assert info.value.name.startswith("CUDNN_STATUS_BAD_PARAM")
    finally:
        assert free_conv() == 0
        assert free_f() == 0
        assert free_x() == 0


def test_cudnn_handle_kinds_are_distinct():
    lib = cudnn_lib.get()
    f, free_f = _create("Filter")
    try:
        with pytest.raises(ctypes.ArgumentError):
            lib.cudnnDestroyTensorDescriptor(f)  # refused by ctypes, never reaches cuDNN
    finally:
        assert free_f() == 0


@settings(max_examples=60)
@given(n=st.integers(1, 8), c=st.integers(1, 16), size=st.integers(1, 64),
       window=st.integers(1, 5), stride=st.integers(1, 4), pad=st.integers(0, 4),
       mode=st.sampled_from(["CUDNN_POOLING_MAX",
                             "CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING",
                             "CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING"]))
def test_cudnn_pooling_output_dim(n, c, size, window, stride, pad, mode):
    h, w = size + window, size + 2 * window  # the window must fit the padded input
    lib = cudnn_lib.get()
    x, free_x = _create("Tensor")
    pool, free_pool = _create("Pooling")
    try:
        _dnn(lib.cudnnSetTensorNdDescriptorEx(x, cudnn_lib.CUDNN_TENSOR_NCHW,
                                              cudnn_lib.CUDNN_DATA_FLOAT, 4, _ints([n, c, h, w])),
             "cudnnSetTensorNdDescriptorEx")
        _dnn(lib.cudnnSetPoolingNdDescriptor(pool, getattr(cudnn_lib, mode),
                                             cudnn_lib.CUDNN_NOT_PROPAGATE_NAN, 2,
                                             _ints([window, window]), _ints([pad, pad]),
                                             _ints([stride, stride])),
             "cudnnSetPoolingNdDescriptor")
        out = (c_int * 4)()
        _dnn(lib.cudnnGetPoolingNdForwardOutputDim(pool, x, 4, out),
             "cudnnGetPoolingNdForwardOutputDim")
        expect = [1 + (d + 2 * pad - window) // stride for d in (h, w)]
        assert list(out) == [n, c, *expect]
    finally:
        assert free_pool() == 0
        assert free_x() == 0


def test_cudnn_activation_descriptor():
    lib = cudnn_lib.get()
    act, free = _create("Activation")
    try:
        _dnn(lib.cudnnSetActivationDescriptor(act, cudnn_lib.CUDNN_ACTIVATION_CLIPPED_RELU,
                                              cudnn_lib.CUDNN_PROPAGATE_NAN, 6.0),
             "cudnnSetActivationDescriptor")
    finally:
        assert free() == 0


# ----------------------------------------------------------------------------------------- NCCL

def test_nccl_version():
    code = nccl_base.version_int()
    major, minor, patch = nccl_base.version()
    assert (major, minor) >= (2, 18)
    assert code == major * 10000 + minor * 100 + patch


def test_nccl_unique_ids():
    a, b = nccl_base.unique_id_bytes(), nccl_base.unique_id_bytes()
    assert isinstance(a, bytes) and len(a) == nccl_lib.NCCL_UNIQUE_ID_BYTES == 128
    assert len(b) == 128 and a != b
    uid = nccl_lib.ncclUniqueId.from_buffer_copy(a)
    assert bytes(uid) == a and ctypes.sizeof(uid) == 128


def test_nccl_config_initializer():
    cfg = nccl_base.new_config(blocking=0, commName=b"tp")
    assert cfg.size == ctypes.sizeof(nccl_lib.ncclConfig_t)
    assert (cfg.magic, cfg.version) == (nccl_lib.CONFIG_MAGIC, nccl_lib.CONFIG_VERSION)
    assert cfg.blocking == 0 and cfg.commName == b"tp"
    assert cfg.minCTAs == nccl_lib.CONFIG_UNDEF_INT and cfg.netName is None
    with pytest.raises(TypeError):
        nccl_base.new_config(magic=1)


# ------------------------------------------------------------------- every status, every library

def _nvrtc_string(code):
    return nvrtc_lib.get().nvrtcGetErrorString(code).decode()


def _cublas_name(code):
    return cublas_lib.get().cublasGetStatusName(code).decode()


def _cudnn_string(code):
    return cudnn_lib.get().cudnnGetErrorString(code).decode()


def _nccl_string(code):
    return nccl_lib.get().ncclGetErrorString(code).decode()


# cudnnStatus_t codes whose deprecated alias names (still in cudnn_graph.h) are what cuDNN 9
# renamed; cudnnGetErrorString returns the new name.  errors.py may use either.
_CUDNN_RENAMED = {
    "CUDNN_STATUS_VERSION_MISMATCH": "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
    "CUDNN_STATUS_ARCH_MISMATCH": "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
    "CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING":
        "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING",
    "CUDNN_STATUS_ALLOC_FAILED": "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
    "CUDNN_STATUS_MAPPING_ERROR": "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED",
}


def _newer_than_the_library(table, text_of, unknown) -> set[int]:
    """Codes of ``table`` that the loaded library does not know, checked to be newer than it.

    The status tables also name statuses of newer releases (a newer library or driver may
    return them to this binding); the loaded library calls those unknown.  Each must come
    after every code the library does know: statuses are appended, so an unknown code among
    known ones is a wrong row, not a newer status.
    """
    unknown_codes = {code for code in table if text_of(code) == unknown}
    known = set(table) - unknown_codes
    assert all(code > max(known) for code in unknown_codes), (
        f"the library does not know {sorted(unknown_codes)}, which are not newer than its "
        f"statuses (up to {max(known)})")
    return unknown_codes


def test_nvrtc_status_strings_match_table():
    table = errors.NvrtcError.status_names()
    newer = _newer_than_the_library(table, _nvrtc_string, _nvrtc_string(10 ** 6))
    for code, name in table.items():
        if code not in newer:
            assert _nvrtc_string(code) == name


def test_cublas_status_names_match_table():
    lt = cublas_lib.get_lt()
    for code, name in errors.CublasError.status_names().items():
        assert _cublas_name(code) == name
        assert lt.cublasLtGetStatusName(code).decode() == name
        assert cublas_lib.get().cublasGetStatusString(code)


def test_cudnn_status_strings_match_table():
    for code, name in errors.CudnnError.status_names().items():
        text = _cudnn_string(code)
        assert text != "CUDNN_UNKNOWN_STATUS", f"cuDNN does not know {code} ({name})"
        assert text in (name, _CUDNN_RENAMED.get(name)), (code, name, text)


def test_nccl_status_strings_are_known():
    table = errors.NcclError.status_names()
    _newer_than_the_library(table, _nccl_string, _nccl_string(10 ** 6))
    assert "ncclNumResults" not in table.values()  # the enum's count, no status
    for code in table:
        assert _nccl_string(code)


RAISERS = [
    (errors.NvrtcError, nvrtc.raise_for, _nvrtc_string, "nvrtcCompileProgram"),
    (errors.CublasError, cublas_base.raise_for,
     lambda c: cublas_lib.get().cublasGetStatusString(c).decode(), "cublasLtMatmul"),
    (errors.CudnnError, cudnn_base.raise_for, _cudnn_string, "cudnnConvolutionForward"),
    (errors.NcclError, nccl_base.raise_for, _nccl_string, "ncclAllReduce"),
]


@pytest.mark.parametrize("cls, raise_for, message, function", RAISERS,
                         ids=[r[0].__name__ for r in RAISERS])
def test_raise_for_every_status(cls, raise_for, message, function):
    for code, name in cls.status_names().items():
        if code == 0:
            continue
        with pytest.raises(cls) as info:
            raise_for(code, function)
        err = info.value
        assert type(err) is type(cls.from_status(code))
        assert isinstance(err, errors.StatusError) and isinstance(err, RuntimeError)
        assert (err.status, err.name, err.function) == (code, name, function)
        assert err.message == message(code)
        assert err.library == cls.library
        assert function in str(err) and name in str(err)
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err)
        assert (again.status, again.name, again.function, again.message, again.detail) == \
            (err.status, err.name, err.function, err.message, err.detail)
        assert str(again) == str(err)


def test_raise_for_extra_becomes_detail():
    with pytest.raises(errors.NvrtcError) as info:
        nvrtc.raise_for(6, "nvrtcCompileProgram", "k.cu(1): error: oops")
    assert info.value.detail == "k.cu(1): error: oops"
