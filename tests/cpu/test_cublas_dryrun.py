"""cuBLAS / cuBLASLt wrappers run end to end against recording fakes of the C calls.

No GPU here, so the device-facing calls (``cublasGemmEx``, ``cublasLtMatmul``, the heuristic,
the driver's context switch) are replaced by Python recorders; the cuBLASLt descriptors are
the real library's (they need no device).  This checks what each wrapper *passes*: operand
order after the row-major swap, transposes, leading dimensions, batch strides, the pointers
written into the matmul descriptor, and that a repeated call reuses its prepared plan.
"""

from __future__ import annotations

import ctypes
import importlib

import numpy as np
import pytest

import cudalibs
from cudalibs import cublas
from cudalibs import dtypes as _dtypes
from cudalibs.cublas import _lib, handle as handle_mod
from cudalibs.driver import _lib as drv_lib
from cudalibs.runtime.handles import Handle
from cudalibs.driver.array import DeviceArray
from cudalibs.driver.device import Device
from cudalibs.runtime.cache import cache as plan_cache

gemm_mod = importlib.import_module("cudalibs.cublas.gemm")
lt_mod = importlib.import_module("cudalibs.cublas.lt")
matmul_mod = importlib.import_module("cudalibs.cublas.matmul")
N_, T_ = _lib.CUBLAS_OP_N, _lib.CUBLAS_OP_T


class _Recorder:
    def __init__(self, status=0):
        self.calls = []
        self.status = status

    def __call__(self, *args):
        self.calls.append(args)
        return self.status


_CArg = type(ctypes.byref(ctypes.c_int()))     # what ctypes.byref returns


class _UncheckedRecorder(_Recorder):
    """Records calls made through ``BoundLibrary.unchecked``, where ctypes converts nothing:
    each argument must already be of its parameter's kind in the prototype (a Python int or
    that exact ctypes integer type for integer parameters, a pointer object for pointers).
    The recorded call holds plain values, as the checked entry point would see them."""

    def __init__(self, name, table=None):
        super().__init__()
        self.proto = {p.name: p for p in (table or _lib.TABLE)}[name]

    def __call__(self, *args):
        types = self.proto.argtypes
        assert len(args) == len(types), (self.proto.name, len(args), len(types))
        plain = []
        for i, (x, t) in enumerate(zip(args, types)):
            where = f"{self.proto.name} argument {i}"
            if issubclass(t, ctypes._SimpleCData) and t._type_ in "iIlLqQhH":
                if type(x) is int:
                    lo, hi = (-(1 << 31), 1 << 31) if ctypes.sizeof(t) == 4 else (-(1 << 63),
                                                                                 1 << 63)
                    assert lo <= x < hi, f"{where}: {x} does not fit {t.__name__}"
                    plain.append(x)
                else:
                    assert type(x) is t, f"{where}: {type(x).__name__} for {t.__name__}"
                    plain.append(x.value)
            else:   # a pointer parameter
                assert isinstance(x, (ctypes.c_void_p, ctypes._Pointer, _CArg)), \
                    f"{where}: {type(x).__name__} for a pointer"
                plain.append(x.value if isinstance(x, ctypes.c_void_p) else x)
        return super().__call__(*plain)


class _FakeBlas:
    def __init__(self):
        self.cublasGemmEx = _UncheckedRecorder("cublasGemmEx")
        self.cublasGemmStridedBatchedEx = _UncheckedRecorder("cublasGemmStridedBatchedEx")
        self.cublasSetStream_v2 = _Recorder()
        self.cublasSetWorkspace_v2 = _Recorder()

    def unchecked(self, name):
        return getattr(self, name)


class _FakeLt:
    """The real cuBLASLt for descriptors; recorders for the calls that need a device."""

    def __init__(self, real):
        self._real = real
        self.cublasLtMatmul = _UncheckedRecorder("cublasLtMatmul", _lib.LT_TABLE)
        self.heuristic_calls = 0

    def cublasLtMatmulAlgoGetHeuristic(self, h, desc, la, lb, lc, ld, pref, k, results, count):
        self.heuristic_calls += 1
        n = min(k, 3)
        for i in range(n):
            results[i].state = 0
            results[i].workspaceSize = 1024 * i
            results[i].wavesCount = 1.0
            results[i].algo.data[0] = 0x100 + i     # distinct algorithms, distinct ids
        count._obj.value = n
        return 0

    def unchecked(self, name):
        assert name == "cublasLtMatmul"
        return self.cublasLtMatmul

    def __getattr__(self, name):
        return getattr(self._real, name)


class _FakeDriver:
    """The driver calls the wrappers make on their hot paths.  It is a driver older than
    CUDA 12.4 (no ``cuFuncGetParamInfo``), so a repeated call shape is refused a recorded
    relaunch and every call reaches the recorders below."""

    missing = frozenset({"cuFuncGetParamInfo"})

    def cuCtxSetCurrent(self, ctx):
        return 0

    def cuStreamIsCapturing(self, stream, status):
        status._obj.value = 0           # CU_STREAM_CAPTURE_STATUS_NONE
        return 0


@pytest.fixture()
def fakes(monkeypatch):
    dev = object.__new__(Device)
    dev._ordinal = 0
    dev._ctx = None
    dev._cc = (9, 0)
    blas = _FakeBlas()
    lt = _FakeLt(_lib.get_lt())
    monkeypatch.setattr(_lib, "get", lambda: blas)
    monkeypatch.setattr(_lib, "get_lt", lambda: lt)
    monkeypatch.setattr(drv_lib, "get", lambda: _FakeDriver())
    h = Handle(_lib.cublasHandle_t(), dev, None)
    h.stream = 0
    monkeypatch.setattr(handle_mod._tls, "cublas", {dev: h}, raising=False)
    monkeypatch.setattr(lt_mod, "lt_handle", lambda d, stream=None: _lib.cublasLtHandle_t())
    for mod in (lt_mod, gemm_mod):
        monkeypatch.setattr(mod, "workspace", lambda d, s: 0x5000_0000)
    # These tests check what reaches cublasGemmEx; the cuBLASLt route has its own test.
    old = cublas.set_gemm_backend("cublas")
    # Relaunches on, as by default, whatever the environment of this run says.
    relaunch = cudalibs.set_options(relaunch=True).relaunch
    cublas.clear_algo_cache()
    matmul_mod.clear_matmul_cache()
    yield dev, blas, lt
    cudalibs.set_options(relaunch=relaunch)
    cublas.set_gemm_backend(old)
    cublas.clear_algo_cache()
    matmul_mod.clear_matmul_cache()


_next = [1 << 32]


def _arr(dev, shape, dtype=np.float32, strides=None, ptr=None):
    dt = _dtypes.lookup(dtype)
    if strides is None:
        strides, acc = [], dt.itemsize
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        strides = tuple(reversed(strides))
    if ptr is None:
        ptr = _next[0]
        _next[0] += 1 << 24
    return DeviceArray._view(ptr, tuple(shape), tuple(strides), dt, dev, None, None)


def test_gemm_passes_swapped_operands(fakes):
    dev, blas, _ = fakes
    a, b, out = _arr(dev, (6, 4)), _arr(dev, (4, 5)), _arr(dev, (6, 5))
    assert cublas.gemm(a, b, out) is out
    (call,) = blas.cublasGemmEx.calls
    (_, ta, tb, m, n, k, alpha, A, at, lda, B, bt, ldb, beta, C, ct, ldc, comp, algo) = call
    assert (ta, tb, m, n, k, lda, ldb, ldc) == (N_, N_, 5, 6, 4, 5, 4, 5)
    assert (A, B, C) == (b.ptr, a.ptr, out.ptr)
    assert at == bt == ct == _dtypes.CUDA_R["R_32F"]
    assert comp == _dtypes.COMPUTE["COMPUTE_32F"] and algo == _lib.CUBLAS_GEMM_DEFAULT
    assert ctypes.c_float.from_address(alpha).value == 1.0
    assert ctypes.c_float.from_address(beta).value == 0.0


def test_gemm_transposed_views_and_tf32(fakes):
    dev, blas, _ = fakes
    a = _arr(dev, (4, 6)).T                        # (6, 4), F-ordered
    b = _arr(dev, (5, 4)).T                        # (4, 5), F-ordered
    out = _arr(dev, (6, 8))[:, :5]                 # row stride 8
    cublas.gemm(a, b, out, alpha=0.5, beta=2.0, compute="tf32")
    call = blas.cublasGemmEx.calls[-1]
    assert call[1:6] == (T_, T_, 5, 6, 4)
    assert (call[9], call[12], call[16]) == (4, 6, 8)
    assert call[17] == _dtypes.COMPUTE["COMPUTE_32F_FAST_TF32"]
    assert ctypes.c_float.from_address(call[6]).value == 0.5
    assert ctypes.c_float.from_address(call[13]).value == 2.0


def test_gemm_reuses_plan(fakes):
    dev, blas, _ = fakes
    a, b, out = _arr(dev, (8, 8)), _arr(dev, (8, 8)), _arr(dev, (8, 8))
    for _ in range(3):
        cublas.gemm(a, b, out)
    assert len(blas.cublasGemmEx.calls) == 3
    entries = [e for e in plan_cache.entries("gemm") if e.key["a_shape"] == (8, 8)]
    assert len(entries) == 1 and entries[0].key["out_strides"] == out.strides
    # The second call tried to record the call shape for relaunching; this driver cannot,
    # so the shape is refused, with the reason, and every call stays a library call.
    info = entries[0].plan.relaunch_info()
    assert (info["recorded"], info["refused"], info["pending"]) == (0, 1, 0)
    assert [r for r in info["reasons"] if "cuFuncGetParamInfo" in r]
    plan = entries[0].plan.plan()        # the one-shot path runs the default unplanned
    assert "relaunch: 1 refused" in repr(plan)


def test_gemm_int8_and_complex(fakes):
    dev, blas, _ = fakes
    # int8 runs only in cuBLAS's TN form: a row-major, b column-major (a transposed view).
    a, b = _arr(dev, (4, 8), np.int8), _arr(dev, (12, 8), np.int8).T
    out = _arr(dev, (4, 12), np.int32)
    cublas.gemm(a, b, out, alpha=2)
    call = blas.cublasGemmEx.calls[-1]
    assert call[1:3] == (T_, N_)
    assert (call[9], call[12]) == (8, 8)
    assert (call[8], call[15], call[17]) == (_dtypes.CUDA_R["R_8I"], _dtypes.CUDA_R["R_32I"],
                                             _dtypes.COMPUTE["COMPUTE_32I"])
    assert ctypes.c_int32.from_address(call[6]).value == 2
    z = _arr(dev, (3, 3), np.complex64)
    cublas.gemm(z, z, _arr(dev, (3, 3), np.complex64), alpha=1 - 2j)
    call = blas.cublasGemmEx.calls[-1]
    assert (ctypes.c_float * 2).from_address(call[6])[:] == [1.0, -2.0]


def test_strided_batched_broadcast(fakes):
    dev, blas, _ = fakes
    a = _arr(dev, (7, 6, 4))
    w = _arr(dev, (4, 5))
    out = _arr(dev, (7, 6, 5))
    cublas.gemm_strided_batched(a, w, out)
    (call,) = blas.cublasGemmStridedBatchedEx.calls
    # (h, ta, tb, m, n, k, alpha, A, at, lda, sA, B, bt, ldb, sB, beta, C, ct, ldc, sC, batch..)
    assert call[1:6] == (N_, N_, 5, 6, 4)
    assert (call[7], call[10]) == (w.ptr, 0)           # b broadcast: stride 0
    assert (call[11], call[14]) == (a.ptr, 24)         # a: 6*4 elements apart
    assert (call[16], call[19], call[20]) == (out.ptr, 30, 7)


def test_stream_change_rebinds_handle_and_workspace(fakes, monkeypatch):
    dev, blas, _ = fakes
    h = handle_mod._tls.cublas[dev]
    h._set_stream = lambda raw, s: blas.cublasSetStream_v2(raw, s)
    monkeypatch.setattr(handle_mod, "workspace", lambda d, s: 0x6000_0000 + s)
    from cudalibs.driver.stream import Stream

    other = Stream._wrap(0x1234, dev, None)
    a, out = _arr(dev, (4, 4)), _arr(dev, (4, 4))
    cublas.gemm(a, a.T, out)
    assert blas.cublasSetStream_v2.calls == []         # already on the legacy stream
    cublas.gemm(a, a.T, out, stream=other)
    cublas.gemm(a, a.T, out, stream=other)
    assert [c[1] for c in blas.cublasSetStream_v2.calls] == [0x1234]
    ((_, ws, size),) = blas.cublasSetWorkspace_v2.calls
    assert ws == 0x6000_0000 + 0x1234 and size == handle_mod.WORKSPACE_BYTES


def test_lt_plan_and_execute(fakes):
    dev, _, lt = fakes
    a, b = _arr(dev, (6, 4)), _arr(dev, (5, 4)).T      # b = w.T, column-major
    bias = _arr(dev, (5,))
    plan = cublas.Matmul(a, b, epilogue="bias_gelu")
    assert lt.heuristic_calls == 0 and plan.choice == -1     # construct does not plan
    assert "not planned" in repr(plan)
    assert plan.plan() is plan and plan.plan() is plan       # idempotent
    assert lt.heuristic_calls == 1 and len(plan.candidates) == 3
    ids = [c["id"] for c in plan.candidates]
    assert len(set(ids)) == 3 and all(isinstance(i, str) for i in ids)
    assert "gelu_bias" in repr(plan) and "[1/3]" in repr(plan)
    desc = plan._desc
    assert desc.get("transa") == T_ and desc.get("transb") == N_
    assert desc.get("epilogue") == _lib.CUBLASLT_EPILOGUE_GELU_BIAS
    assert desc.get("bias_data_type") == _dtypes.CUDA_R["R_32F"]
    la, lb, lc = plan._layouts
    assert (la.rows, la.cols, la.ld) == (4, 5, 4)        # w stored K x N column-major
    assert (lb.rows, lb.cols, lb.ld) == (4, 6, 4)        # a: K x M column-major
    assert (lc.rows, lc.cols, lc.ld) == (5, 6, 5)        # D: N x M
    out = _arr(dev, (6, 5))
    assert plan.execute(a, b, out=out, bias=bias) is out
    (call,) = lt.cublasLtMatmul.calls
    assert (call[3], call[5], call[8], call[10]) == (b.ptr, a.ptr, out.ptr, out.ptr)
    assert call[13] == 0x5000_0000 and call[14] == handle_mod.WORKSPACE_BYTES
    assert desc.get("bias_pointer") == bias.ptr
    plan.select(2)
    plan.execute(a, b, out=out, bias=bias)
    assert len(lt.cublasLtMatmul.calls) == 2
    plan.free()
    assert plan.closed and "closed" in repr(plan)
    with pytest.raises(cudalibs.ClosedError, match="Matmul is closed"):
        plan.execute(a, b, out=out, bias=bias)


def test_lt_aux_and_batch_attributes(fakes):
    dev, _, lt = fakes
    plan = cublas.Matmul(((3, 10, 16), np.float16), ((16, 20), np.float16),
                         epilogue="gelu_aux_bias", device=dev)
    assert plan.aux_shape == (3, 10, 24)
    assert plan._desc.get("epilogue_aux_ld") == 24
    assert plan._desc.get("epilogue_aux_batch_stride") == 240
    la, lb, lc = plan._layouts
    assert (la.batch, la.batch_stride, lb.batch_stride, lc.batch_stride) == (3, 0, 160, 200)
    relu = cublas.Matmul(((10, 16), np.float16), ((16, 20), np.float16),
                         epilogue="relu_aux", device=dev)
    assert relu.aux_shape == (10, 16) and relu._desc.get("epilogue_aux_ld") == 128
    for p in (plan, relu):
        p.free()


def test_lt_fp8_scales_swap(fakes):
    dev, _, lt = fakes
    e4 = _dtypes.float8_e4m3fn
    a = _arr(dev, (32, 64), e4)
    w = _arr(dev, (48, 64), e4)
    sa, sb = _arr(dev, (1,)), _arr(dev, (1,))
    out = cublas.matmul(a, w.T, a_scale=sa, b_scale=sb, out=_arr(dev, (32, 48),
                                                                  _dtypes.bfloat16))
    assert out.dtype == _dtypes.bfloat16
    (plan,) = cublas.matmul_cache().values()
    # cuBLASLt's A is our b: its A scale is b's.
    assert plan._desc.get("a_scale_pointer") == sb.ptr
    assert plan._desc.get("b_scale_pointer") == sa.ptr
    assert plan._desc.get("transa") == T_ and plan._desc.get("transb") == N_


def test_matmul_caches_plans(fakes):
    dev, _, lt = fakes
    a, b = _arr(dev, (8, 16)), _arr(dev, (16, 8))
    for _ in range(4):
        cublas.matmul(a, b, out=_arr(dev, (8, 8)), epilogue="relu")
    assert lt.heuristic_calls == 1 and len(lt.cublasLtMatmul.calls) == 4


def test_lt_execute_validates(fakes):
    dev, _, _ = fakes
    a, b = _arr(dev, (8, 16)), _arr(dev, (16, 8))
    plan = cublas.Matmul(a, b, epilogue="bias")
    with pytest.raises(ValueError, match="needs bias"):
        plan.execute(a, b, out=_arr(dev, (8, 8)))
    with pytest.raises(ValueError, match="plan was made"):
        plan.execute(b, b, out=_arr(dev, (8, 8)))
    with pytest.raises(ValueError, match="strides"):
        plan.execute(a, b, out=_arr(dev, (8, 16))[:, :8], bias=_arr(dev, (8,)))
    with pytest.raises(ValueError, match="aligned"):
        plan.execute(a, b, out=_arr(dev, (8, 8), ptr=(1 << 40) + 4), bias=_arr(dev, (8,)))
    with pytest.raises(ValueError, match="same memory"):
        plan.execute(a, b, out=_arr(dev, (8, 8), ptr=a.ptr), bias=_arr(dev, (8,)))
    plan.free()


class _Staged:
    """What ``empty`` returns for a staged bias: an aligned address, and its copies kept."""

    def __init__(self, events, shape, dtype):
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.address = (1 << 44) + 0x100
        self.events = events

    def copy_(self, src, stream=None):
        self.events.append(("into staged", src))
        return self


@pytest.mark.parametrize("epilogue", ["bias", "drelu_bgrad"])
def test_lt_misaligned_bias_is_staged_through_an_aligned_copy(fakes, monkeypatch, epilogue):
    """cuBLASLt refuses some epilogue vectors below BIAS_ALIGN, so such a bias is read from
    (or, for a bias gradient, written to and then copied from) an aligned copy."""
    dev, _, lt = fakes
    assert lt_mod.BIAS_ALIGN == 16
    events = []
    monkeypatch.setattr(lt_mod, "empty",
                        lambda shape, dtype, **kw: _Staged(events, shape, dtype))
    monkeypatch.setattr(DeviceArray, "copy_",
                        lambda self, src, stream=None: events.append(("back", self, src)))
    real = lt.cublasLtMatmul

    def matmul_call(*args):
        events.append(("matmul", plan._desc.get("bias_pointer")))
        return real(*args)

    lt.cublasLtMatmul = matmul_call      # before the plan is made: it keeps the entry point
    a, b = _arr(dev, (8, 16)), _arr(dev, (16, 8))
    plan = cublas.Matmul(a, b, epilogue=epilogue).plan()
    aux = None if plan.aux_shape is None else _arr(dev, plan.aux_shape, plan._aux_dtype)
    out = _arr(dev, (8, 8))
    aligned = _arr(dev, (8,))
    plan.execute(a, b, out=out, bias=aligned, aux=aux)
    assert events == [("matmul", aligned.ptr)]          # aligned: used as it is
    events.clear()
    bias = _arr(dev, (8,), ptr=(1 << 40) + 4)
    plan.execute(a, b, out=out, bias=bias, aux=aux)
    staged_at = (1 << 44) + 0x100
    if epilogue == "bias":
        assert events == [("into staged", bias), ("matmul", staged_at)]
    else:       # the gradient is written to the aligned copy, then copied into the caller's
        ((what, dst, src),) = [e for e in events if e[0] == "back"]
        assert events[0] == ("matmul", staged_at) and events[1][0] == "back"
        assert dst is bias and isinstance(src, _Staged) and len(events) == 2
    plan.close()


def test_matmul_keys_bias_alignment_up_to_bias_align(fakes, monkeypatch):
    """Bias alignments at or above BIAS_ALIGN share one plan; a less aligned bias gets its
    own entry (it is staged), and neither lowers the plan's operand alignment."""
    dev, _, lt = fakes
    monkeypatch.setattr(lt_mod, "empty", lambda shape, dtype, **kw: _Staged([], shape, dtype))
    a, b, out = _arr(dev, (8, 16)), _arr(dev, (16, 8)), _arr(dev, (8, 8))
    for ptr in ((1 << 40) + 256, (1 << 40) + 16, (1 << 40) + 4, (1 << 40) + 8):
        cublas.matmul(a, b, out=out, bias=_arr(dev, (8,), ptr=ptr))
    entries = plan_cache.entries("cublaslt_matmul")
    assert sorted(e.key["bias_align"] for e in entries) == [4, 8, lt_mod.BIAS_ALIGN]
    assert all(e.plan._align == 256 for e in entries)
    assert lt.heuristic_calls == 3


def test_gemm_lt_route_uses_the_prepared_algorithm(fakes):
    dev, blas, lt = fakes
    cublas.set_gemm_backend("auto")
    a, b, out = _arr(dev, (6, 4)), _arr(dev, (4, 5)), _arr(dev, (6, 5))
    for _ in range(3):
        assert cublas.gemm(a, b, out) is out
    assert lt.heuristic_calls == 1 and blas.cublasGemmEx.calls == []
    assert len(lt.cublasLtMatmul.calls) == 3
    # The cuBLASLt route is a Matmul plan owned by the GEMM plan; its call shape (the
    # choice, c is out) is refused a relaunch by this driver and stays a library call.
    (e,) = plan_cache.entries("gemm")
    route = e.plan.lt
    assert isinstance(route, cublas.Matmul) and route.relaunches in e.plan.relaunch_slots()
    assert "cuFuncGetParamInfo" in route.relaunches.state((route.choice, True))
    call = lt.cublasLtMatmul.calls[-1]
    assert (call[3], call[5], call[8], call[10]) == (b.ptr, a.ptr, out.ptr, out.ptr)
    # a 4-byte aligned view goes through cublasGemmEx; so does an explicit algorithm
    cublas.gemm(_arr(dev, (6, 4), ptr=(1 << 41) + 4), b, out)
    cublas.gemm(a, b, out, algo=0)
    assert len(blas.cublasGemmEx.calls) == 2
    cublas.set_gemm_backend("cublas")
    cublas.gemm(a, b, out)
    assert len(blas.cublasGemmEx.calls) == 3 and len(lt.cublasLtMatmul.calls) == 3


def test_gemm_keys_are_named(fakes):
    dev, _, _ = fakes
    a, b, out = _arr(dev, (6, 4)), _arr(dev, (4, 5)), _arr(dev, (6, 5))
    cublas.gemm(a, b, out, compute="tf32")
    (e,) = plan_cache.entries("gemm")
    assert e.key["a_shape"] == (6, 4) and e.key["out_strides"] == out.strides
    assert e.key["compute"] == "tf32" and e.key["device"] is dev and e.key["align"] is None
    assert isinstance(e.plan, cublas.GemmPlan) and "m=5 n=6 k=4" in repr(e.plan)
    cublas.matmul(a, b, out=out, epilogue="relu")
    (m,) = plan_cache.entries("cublaslt_matmul")
    assert m.key["epilogue"] == "relu" and m.key["a_align"] == 256


def test_shared_plan_bias_pointer_is_per_call(fakes):
    """Threads sharing one bias plan: each enqueue sees its own bias pointer (the write to
    the shared descriptor and the enqueue are one step)."""
    import threading

    dev, _, lt = fakes
    seen = []
    real = lt.cublasLtMatmul

    def record(*args):
        seen.append((args[10].value, plan._desc.get("bias_pointer")))
        return real(*args)

    lt.cublasLtMatmul = record          # before the plan is made: it keeps the entry point
    a, b = _arr(dev, (8, 16)), _arr(dev, (16, 8))
    plan = cublas.Matmul(a, b, epilogue="bias").plan()
    outs = [_arr(dev, (8, 8)) for _ in range(8)]
    biases = {o.ptr: _arr(dev, (8,)) for o in outs}

    def work(o):
        for _ in range(50):
            plan.execute(a, b, out=o, bias=biases[o.ptr])

    threads = [threading.Thread(target=work, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 400
    assert all(bias == biases[d].ptr for d, bias in seen)
    plan.close()


# -- fp8: scale modes, fp8 outputs, amax, through the recording fakes ---------------------------
E4, E5, BF16 = _dtypes.float8_e4m3fn, _dtypes.float8_e5m2, _dtypes.bfloat16
SCALE_ATTRS = ("a_scale_pointer", "b_scale_pointer", "d_scale_pointer", "amax_d_pointer")


def _fp8_ab(dev, M=256, N=384, K=512, tb=E4):
    """An fp8 a (M, K) and b = w.T of a row-major (N, K) w: the layout fp8 kernels take."""
    return _arr(dev, (M, K), E4), _arr(dev, (N, K), tb).T


def _seeing(lt, plan_box, attrs=SCALE_ATTRS):
    """Make the fake cublasLtMatmul record, per call, the descriptor's pointer attributes as
    the call sees them (its arguments are recorded too)."""
    seen = []
    real = lt.cublasLtMatmul

    def call(*args):
        seen.append({n: plan_box[0]._desc.get(n) for n in attrs})
        return real(*args)

    call.calls = real.calls         # the recorder's arguments, as before
    lt.cublasLtMatmul = call        # before the plan is made: it keeps the entry point
    return seen


def test_lt_fp8_block_scales_go_to_the_swapped_slots(fakes):
    dev, _, lt = fakes
    box = [None]
    seen = _seeing(lt, box)
    M, N, K = 256, 384, 512
    a, b = _fp8_ab(dev, M, N, K)
    plan = box[0] = cublas.Matmul(a, b, scale_mode=("block128", "block128x128"),
                                  epilogue="bias").plan()
    sa = _arr(dev, (M, 4), np.float32, strides=(4, 4 * M))      # column-major, per row of a
    sb = _arr(dev, (4, 3), np.float32, strides=(4, 16))         # w's (3, 4) block scales .T
    bias = _arr(dev, (N,), BF16)
    out = _arr(dev, (M, N), BF16)
    assert plan.execute(a, b, out=out, bias=bias, a_scale=sa, b_scale=sb) is out
    # cuBLASLt's A is our b: its A scale is b's.
    assert seen == [{"a_scale_pointer": sb.ptr, "b_scale_pointer": sa.ptr,
                     "d_scale_pointer": 0, "amax_d_pointer": 0}]
    (call,) = lt.cublasLtMatmul.calls
    assert (call[3], call[5], call[8], call[10]) == (b.ptr, a.ptr, out.ptr, out.ptr)
    plan.close()


@pytest.mark.parametrize("kwargs, match", [
    (dict(), "needs a_scale"),
    (dict(a_scale="C-contiguous"), "must be float32 of shape"),
    (dict(a_scale="float64"), "must be float32 of shape"),
    (dict(a_scale="misaligned"), "not aligned to 16"),
    (dict(d_scale="scalar"), "d_scale applies to fp8 outputs"),
    (dict(amax="scalar"), "amax= given"),
])
def test_lt_fp8_scales_are_checked_before_any_call(fakes, kwargs, match):
    dev, _, lt = fakes
    M, N, K = 256, 384, 512
    a, b = _fp8_ab(dev, M, N, K)
    plan = cublas.Matmul(a, b, scale_mode="block128").plan()
    good = {"a_scale": _arr(dev, (M, 4), np.float32, strides=(4, 4 * M)),
            "b_scale": _arr(dev, (4, N), np.float32)}
    made = {"C-contiguous": _arr(dev, (M, 4), np.float32),
            "float64": _arr(dev, (M, 4), np.float64, strides=(8, 8 * M)),
            "misaligned": _arr(dev, (M, 4), np.float32, strides=(4, 4 * M),
                               ptr=(1 << 40) + 4),
            "scalar": _arr(dev, (1,), np.float32)}
    args = {k: made[v] for k, v in kwargs.items()}
    if not kwargs:
        args = {"b_scale": good["b_scale"]}
    else:
        args = {**good, **args}
    with pytest.raises(ValueError, match=match):
        plan.execute(a, b, out=_arr(dev, (M, N), BF16), **args)
    assert lt.cublasLtMatmul.calls == []
    plan.close()


def test_lt_fp8_output_passes_no_c_and_its_scalars(fakes):
    dev, _, lt = fakes
    box = [None]
    seen = _seeing(lt, box)
    M, N, K = 64, 128, 256
    a, b = _fp8_ab(dev, M, N, K)
    plan = box[0] = cublas.Matmul(a, b, out_dtype=E4, amax=True).plan()
    sa, sb, ds, amax = (_arr(dev, (1,), np.float32) for _ in range(4))
    out = _arr(dev, (M, N), E4)
    with pytest.raises(ValueError, match="pass amax="):
        plan.execute(a, b, out=out, a_scale=sa, b_scale=sb, d_scale=ds)
    with pytest.raises(ValueError, match="takes no c"):
        plan.execute(a, b, _arr(dev, (M, N), E4), out=out, amax=amax)
    with pytest.raises(ValueError, match="single float32"):
        plan.execute(a, b, out=out, amax=_arr(dev, (2,), np.float32))
    assert lt.cublasLtMatmul.calls == []
    assert plan.execute(a, b, out=out, a_scale=sa, b_scale=sb, d_scale=ds, amax=amax) is out
    (call,) = lt.cublasLtMatmul.calls
    # C is NULL, described in bfloat16 (cuBLASLt's fp8 table); D is the fp8 out.
    assert call[8] is None and call[10] == out.ptr
    assert seen == [{"a_scale_pointer": sb.ptr, "b_scale_pointer": sa.ptr,
                     "d_scale_pointer": ds.ptr, "amax_d_pointer": amax.ptr}]
    # Optional scales left out are NULL (1) on the next call; amax stays required, and may be
    # a slot of a history buffer (4-byte aligned), while a_scale must be 16-byte aligned.
    slot = _arr(dev, (1,), np.float32, ptr=amax.ptr + 4)
    plan.execute(a, b, out=out, amax=slot)
    assert seen[-1] == {"a_scale_pointer": 0, "b_scale_pointer": 0, "d_scale_pointer": 0,
                        "amax_d_pointer": slot.ptr}
    with pytest.raises(ValueError, match="not aligned to 16"):
        plan.execute(a, b, out=out, amax=amax, a_scale=slot)
    plan.close()


def test_lt_non_fp8_plans_refuse_fp8_call_arguments(fakes):
    dev, _, lt = fakes
    a, b = _arr(dev, (8, 16)), _arr(dev, (16, 8))
    plan = cublas.Matmul(a, b).plan()
    for name in ("a_scale", "b_scale", "d_scale", "amax"):
        with pytest.raises(ValueError, match="fp8 matmuls only"):
            plan.execute(a, b, out=_arr(dev, (8, 8)), **{name: _arr(dev, (1,))})
    assert lt.cublasLtMatmul.calls == []
    plan.close()


def test_matmul_keys_every_fp8_option(fakes):
    """Two one-shot calls differing only in a scale mode, fast accumulation, amax or the
    output type never share a plan."""
    dev, _, lt = fakes
    M, N, K = 256, 384, 512
    a, b = _fp8_ab(dev, M, N, K)
    out, out8 = _arr(dev, (M, N), BF16), _arr(dev, (M, N), E4)
    row_a, row_b = _arr(dev, (M,), np.float32), _arr(dev, (N,), np.float32)
    blk_a = _arr(dev, (M, 4), np.float32, strides=(4, 4 * M))
    blk_b = _arr(dev, (4, N), np.float32)
    amax = _arr(dev, (1,), np.float32)
    calls = [dict(out=out), dict(out=out, fast_accum=True),
             dict(out=out, scale_mode="row", a_scale=row_a, b_scale=row_b),
             dict(out=out, scale_mode="row", fast_accum=True, a_scale=row_a, b_scale=row_b),
             dict(out=out, scale_mode="block128", a_scale=blk_a, b_scale=blk_b),
             dict(out=out8), dict(out=out8, amax=amax)]
    for kw in calls + calls:
        cublas.matmul(a, b, **kw)
    entries = plan_cache.entries("cublaslt_matmul")
    assert len(entries) == len(calls) and lt.heuristic_calls == len(calls)
    keys = {(e.key["scale_mode"], e.key["fast_accum"], e.key["amax"],
             e.key["out_layout"][2].name) for e in entries}
    assert keys == {(None, False, False, "bfloat16"), (None, True, False, "bfloat16"),
                    (("row", "row"), False, False, "bfloat16"),
                    (("row", "row"), True, False, "bfloat16"),
                    (("block128", "block128"), False, False, "bfloat16"),
                    (None, False, False, "float8_e4m3fn"), (None, False, True, "float8_e4m3fn")}
    assert len(lt.cublasLtMatmul.calls) == 2 * len(calls)


def test_shared_fp8_plan_scale_pointers_are_per_call(fakes):
    """Threads sharing one block-scaled plan: each enqueue sees its own scales."""
    import threading

    dev, _, lt = fakes
    seen, by_call = [], []
    real = lt.cublasLtMatmul

    def record(*args):
        seen.append({n: plan._desc.get(n) for n in ("a_scale_pointer", "b_scale_pointer")})
        by_call.append(args[10].value)
        return real(*args)

    lt.cublasLtMatmul = record          # before the plan is made: it keeps the entry point
    M, N, K = 128, 256, 256
    a, b = _fp8_ab(dev, M, N, K)
    plan = cublas.Matmul(a, b, scale_mode=("block128x128", "block128")).plan()
    outs = [_arr(dev, (M, N), BF16) for _ in range(8)]
    scales = {o.ptr: (_arr(dev, (1, 2), np.float32, strides=(16, 4)),
                      _arr(dev, (2, N), np.float32)) for o in outs}

    def work(o):
        sa, sb = scales[o.ptr]
        for _ in range(40):
            plan.execute(a, b, out=o, a_scale=sa, b_scale=sb)

    threads = [threading.Thread(target=work, args=(o,)) for o in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == len(by_call) == 320
    for d, ptrs in zip(by_call, seen):
        sa, sb = scales[d]
        assert ptrs == {"a_scale_pointer": sb.ptr, "b_scale_pointer": sa.ptr}
    plan.close()
