"""The spine without a GPU: loader, errors, dtypes, the copy planner, the report."""

import ctypes
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cudalibs
from cudalibs import _ffi, _loader, dtypes, errors
from cudalibs.driver import _copy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

STATUS_CLASSES = [errors.CudaError, errors.NvrtcError, errors.CublasError, errors.CudnnError,
                  errors.NcclError]


# -- import ---------------------------------------------------------------------------------
def test_import_loads_no_library():
    code = ("import cudalibs, cudalibs.testing, cudalibs._loader as l; "
            "assert l.loaded() == {}, l.loaded(); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# -- loader ---------------------------------------------------------------------------------
@pytest.fixture()
def fresh_loader():
    _loader._forget()
    yield
    _loader._forget()


def test_loader_finds_wheels(fresh_loader):
    cdll, info = _loader.load("nvrtc")
    assert info.origin in ("pip wheel", "already loaded", "system", "conda", "CUDA_HOME")
    assert info.path and os.path.isabs(info.path) and os.path.exists(info.path)
    assert _loader.load("nvrtc")[0] is cdll  # loaded once
    assert _loader.loaded()["nvrtc"] == info


def test_loader_env_override(fresh_loader, monkeypatch):
    _, info = _loader.load("nvrtc")
    monkeypatch.setenv("CUDALIBS_NVRTC_PATH", info.path)
    _loader._forget("nvrtc")
    _, again = _loader.load("nvrtc")
    assert again.origin == "env override" and again.path == info.path


def test_loader_bad_override_is_an_error(fresh_loader, monkeypatch):
    monkeypatch.setenv("CUDALIBS_CUBLAS_PATH", "/nonexistent/libcublas.so")
    with pytest.raises(errors.LibraryNotFoundError) as info:
        _loader.load("cublas")
    assert "CUDALIBS_CUBLAS_PATH=/nonexistent/libcublas.so" in str(info.value)
    assert info.value.library == "cublas"
    again = pickle.loads(pickle.dumps(info.value))
    assert str(again) == str(info.value)


def test_loader_missing_library_names_what_was_tried(fresh_loader, monkeypatch):
    # Make pathfinder unusable and the system loader miss, as on a machine without the wheels.
    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)
    monkeypatch.setitem(_loader.LIBRARIES, "nccl",
                        _loader._Spec("nccl", ("libnccl-does-not-exist.so.2",), "pip install x"))
    with pytest.raises(errors.LibraryNotFoundError) as info:
        _loader.load("nccl")
    text = str(info.value)
    assert "cuda.pathfinder" in text and "libnccl-does-not-exist.so.2" in text
    assert "pip install x" in text


def test_loader_driver_missing_or_present(fresh_loader):
    try:
        cdll, info = _loader.load("cuda")
    except errors.LibraryNotFoundError as exc:
        assert "no NVIDIA driver found" in str(exc)
        assert "libcuda.so.1" in str(exc)
    else:
        assert info.origin in ("driver", "env override")


def test_loader_unknown_name():
    with pytest.raises(KeyError):
        _loader.load("cufoo")


# -- ffi ------------------------------------------------------------------------------------
def test_missing_function_raises_when_called_not_at_bind(fresh_loader):
    cdll, info = _loader.load("nvrtc")
    table = [_ffi.Proto("nvrtcVersion", ctypes.c_int, [ctypes.POINTER(ctypes.c_int)] * 2),
             _ffi.Proto("nvrtcNotAFunction", ctypes.c_int, [], "NVRTC 99.0")]
    lib = _ffi.bind("nvrtc", cdll, info.path, table)
    assert lib.missing == ("nvrtcNotAFunction",)
    assert not lib.nvrtcNotAFunction and lib.has("nvrtcVersion")
    with pytest.raises(errors.FunctionNotFoundError) as exc:
        lib.nvrtcNotAFunction()
    assert "nvrtcNotAFunction" in str(exc.value) and "NVRTC 99.0" in str(exc.value)
    assert pickle.loads(pickle.dumps(exc.value)).function == "nvrtcNotAFunction"
    a, b = ctypes.c_int(), ctypes.c_int()
    assert lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b)) == 0 and a.value >= 12
    with pytest.raises(ValueError, match="twice"):
        _ffi.bind("nvrtc", cdll, info.path, table + table[:1])


def test_opaque_handles_do_not_mix():
    A = _ffi.opaque_handle("A_st")
    B = _ffi.opaque_handle("B_st")
    f = ctypes.CFUNCTYPE(None, A)(lambda h: None)
    f(A())
    with pytest.raises(ctypes.ArgumentError):
        f(B())


# -- errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", STATUS_CLASSES, ids=lambda c: c.__name__)
def test_every_status_code_makes_a_complete_error(cls):
    names = cls.status_names()
    assert names and 0 in names
    for code, name in names.items():
        err = cls.from_status(code, "someFunction", "vendor message", "extra detail")
        assert isinstance(err, cls) and isinstance(err, errors.CudaLibsError)
        assert isinstance(err, RuntimeError)
        assert (err.status, err.name, err.function) == (code, name, "someFunction")
        text = str(err)
        assert name in text and "someFunction" in text and "vendor message" in text
        assert "extra detail" in text
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and str(again) == text and again.status == code
    unknown = cls(987654)
    assert "unknown" in unknown.name


def test_out_of_memory_is_specific():
    err = errors.CudaError.from_status(2, "cuMemAlloc_v2")
    assert type(err) is errors.CudaOutOfMemoryError
    assert isinstance(err, errors.CudaError) and isinstance(err, MemoryError)
    assert err.name == "CUDA_ERROR_OUT_OF_MEMORY"


def test_make_raiser_survives_broken_message_functions():
    def broken(_):
        raise OSError("library gone")

    raise_for = _ffi.make_raiser(errors.CublasError, message=broken, detail=lambda: "state")
    with pytest.raises(errors.CublasError) as info:
        raise_for(3, "cublasCreate_v2", "hint")
    assert info.value.message is None and info.value.detail == "state\nhint"
    assert info.value.name == "CUBLAS_STATUS_ALLOC_FAILED"


# -- dtypes ---------------------------------------------------------------------------------
def test_dtype_table():
    names = {r.name for r in dtypes.TABLE.values()}
    for required in ("float64", "float32", "float16", "bfloat16", "float8_e4m3fn",
                     "float8_e5m2", "int8", "int32", "int64", "uint8", "complex64",
                     "complex128"):
        assert required in names
    f32 = dtypes.lookup("float32")
    assert (f32.cuda, f32.compute, f32.cudnn, f32.nccl) == (0, 68, 0, 7)
    bf = dtypes.lookup(dtypes.bfloat16)
    assert (bf.cuda, bf.cudnn, bf.nccl, bf.dlpack) == (14, 9, 9, (4, 16))
    assert dtypes.lookup(np.int8).compute == dtypes.COMPUTE["COMPUTE_32I"]
    for row in dtypes.TABLE.values():
        assert isinstance(row, dtypes.DType)
        assert dtypes.lookup(row.numpy) is row
        assert dtypes.from_dlpack_code(*row.dlpack) is row
        assert row.itemsize == row.numpy.itemsize
        # each library's enum of the row is one its own table names
        for value, table in ((row.cudnn, dtypes.CUDNN), (row.nccl, dtypes.NCCL),
                             (row.dlpack[0], dtypes.DLPACK)):
            assert value is None or value in table.values(), (row.name, value)
    with pytest.raises(TypeError, match="not supported"):
        dtypes.lookup(object)
    with pytest.raises(TypeError, match="byte order"):
        dtypes.lookup(">f4")
    with pytest.raises(TypeError):
        dtypes.lookup("not a dtype")
    with pytest.raises(TypeError):
        dtypes.from_dlpack_code(2, 32, lanes=4)
    with pytest.raises(TypeError, match="bfloat16"):
        dtypes.from_typestr("<V2")
    assert dtypes.from_typestr("<f2").name == "float16"


# -- copy planner ---------------------------------------------------------------------------
def _emulate(plan, dst: bytearray, dst_off, src: bytes, src_off):
    width, height, dpitch, spitch, outer = plan
    import itertools

    for idx in itertools.product(*[range(n) for n, _, _ in outer]):
        d0 = dst_off + sum(i * d for i, (_, d, _) in zip(idx, outer))
        s0 = src_off + sum(i * s for i, (_, _, s) in zip(idx, outer))
        for r in range(height):
            dst[d0 + r * dpitch: d0 + r * dpitch + width] = src[s0 + r * spitch:
                                                                  s0 + r * spitch + width]


@st.composite
def _positive_view(draw, shape):
    base_shape = tuple(n * draw(st.integers(1, 3)) + draw(st.integers(0, 2)) for n in shape)
    steps = [max(1, (b - 0) // max(n, 1)) if n else 1 for b, n in zip(base_shape, shape)]
    steps = [draw(st.integers(1, s)) for s in steps]
    starts = [draw(st.integers(0, max(0, b - (n - 1) * s - 1))) for b, n, s in
              zip(base_shape, shape, steps)]
    order = draw(st.permutations(range(len(shape))))
    return base_shape, starts, steps, order


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_copy_plan_matches_numpy(data):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=0, max_size=4).map(tuple))
    itemsize = data.draw(st.sampled_from([1, 2, 4, 8]))
    dt = np.dtype(f"u{itemsize}")
    views = []
    for _ in range(2):
        base_shape, starts, steps, order = data.draw(_positive_view(shape))
        # A transposed base makes non-C layouts; the view is taken in the permuted order.
        perm_shape = tuple(base_shape[i] for i in order)
        base = np.arange(int(np.prod(perm_shape)), dtype=dt).reshape(perm_shape)
        base = base.transpose(np.argsort(order))
        key = tuple(slice(a, a + (n - 1) * s + 1, s) for a, n, s in zip(starts, shape, steps))
        views.append(base[key] if shape else base)
    dst_view, src_view = views
    src_view = np.bitwise_not(src_view)  # values that differ from dst's
    src_base = np.ascontiguousarray(src_view)
    # Host layouts: src C-contiguous copy (like a staged host array), dst the strided view.
    dst_base = dst_view.base if dst_view.base is not None else dst_view
    expected = dst_view.copy()
    expected[...] = src_base
    p = _copy.plan(shape, dst_view.strides, src_base.strides, itemsize)
    assert p is not None
    width, height, dpitch, spitch, outer = p
    assert width >= itemsize and dpitch >= width or height == 1
    # Emulate on raw memory of the real arrays through ctypes.
    dst_mem = (ctypes.c_char * dst_base.nbytes).from_address(dst_base.ctypes.data)
    src_mem = bytes((ctypes.c_char * src_base.nbytes).from_address(src_base.ctypes.data))
    raw = bytearray(dst_mem)
    offset = dst_view.ctypes.data - dst_base.ctypes.data
    _emulate(p, raw, offset, src_mem, 0)
    ctypes.memmove(dst_base.ctypes.data, bytes(raw), len(raw))
    np.testing.assert_array_equal(dst_view, expected)


def test_copy_plan_merges_contiguous_data():
    # Fully contiguous: one run of bytes.
    assert _copy.plan((4, 5), (20, 4), (20, 4), 4) == (80, 1, 80, 80, [])
    # Row slice of a wider array: rows of 12 bytes, 4 of them, pitches differ.
    assert _copy.plan((4, 3), (12, 4), (40, 4), 4) == (12, 4, 12, 40, [])
    # Transposed source: one element wide.
    w, h, dp, sp, outer = _copy.plan((3, 2), (8, 4), (4, 12), 4)
    assert (w, h, dp, sp) == (4, 2, 4, 12) and outer == [(3, 8, 4)]
    assert _copy.plan((0, 3), (12, 4), (12, 4), 4) is None


# -- without a GPU --------------------------------------------------------------------------
def test_gpu_calls_fail_cleanly_without_a_gpu():
    if cudalibs.is_available():
        pytest.skip("a GPU is present")
    assert cudalibs.device_count() == 0
    with pytest.raises((errors.LibraryNotFoundError, errors.CudaError, ValueError)):
        cudalibs.empty((3,))
    with pytest.raises((errors.LibraryNotFoundError, errors.CudaError, ValueError)):
        cudalibs.Device(0)


def test_report_runs_and_exits_zero():
    out = subprocess.run([sys.executable, "-m", "cudalibs"], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert text.startswith("cudalibs ")
    assert "Python " in text and "numpy" in text
    assert "driver:" in text and "devices:" in text
    for name in ("nvrtc", "cublas", "cublasLt", "cudnn", "nccl"):
        assert f"  {name} " in text
    assert "pip wheel" in text or "already loaded" in text or "system" in text
    if not cudalibs.is_available():
        assert "no NVIDIA driver found" in text or "devices: 0" in text
        assert "self-check: skipped (no GPU)" in text
    assert "Traceback" not in out.stderr


def test_finalizer_calls_wait_for_the_end_of_a_capture():
    from cudalibs.driver import _capture

    ran = []
    assert not _capture.defer(ran.append, (0,))      # no capture open: the caller runs it
    _capture.begin()
    _capture.begin()
    assert _capture.defer(ran.append, (1,))
    _capture.end()
    assert ran == []                                  # one block is still open
    _capture.end()
    assert ran == [1]
    assert not _capture.defer(ran.append, (2,))


def test_byte_extent_and_overlap():
    from cudalibs.driver.array import byte_extent, spans_overlap

    assert byte_extent((3, 4), (16, 4), 4) == (0, 48)
    assert byte_extent((3, 4), (-16, 4), 4) == (-32, 16)       # a reversed axis
    assert byte_extent((0, 4), (16, 4), 4) == (0, 0)           # empty touches nothing
    assert spans_overlap(100, (0, 48), 140, (0, 8))
    assert not spans_overlap(100, (0, 48), 148, (0, 8))        # adjacent, not overlapping
    assert not spans_overlap(100, (0, 48), 120, (0, 0))        # empty never overlaps
    assert spans_overlap(200, (-32, 16), 170, (0, 4))


def test_device_uuid_keeps_zero_bytes(monkeypatch):
    # A UUID may hold a zero byte; read as a C string it would end there.
    import ctypes

    from cudalibs.driver import _lib as driver_lib
    from cudalibs.driver import device as device_mod

    raw = bytes([0x76, 0x0A, 0x81, 0xDB, 0xB1, 0x1D, 0xBB, 0xB6,
                 0x76, 0x35, 0x3E, 0x00, 0x12, 0x00, 0x9F, 0x01])

    class FakeDriver:
        @staticmethod
        def cuDeviceGetUuid_v2(out, handle):
            ctypes.memmove(out, raw, 16)
            return 0

    monkeypatch.setattr(driver_lib, "get", lambda: FakeDriver)
    dev = object.__new__(device_mod.Device)     # no driver here: only the handle is needed
    device_mod.Device._handle.__set__(dev, 0)
    assert dev.uuid == "GPU-760a81db-b11d-bbb6-7635-3e0012009f01"
