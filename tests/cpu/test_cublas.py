"""cuBLAS / cuBLASLt bindings without a GPU.

* the row-major -> column-major GEMM mapping (:func:`cudalibs.cublas.gemm_args`), checked by
  running the column-major GEMM it describes on the raw host memory of every layout;
* versioned prototype names (the ``_v2`` trap) and the tables' shape;
* cuBLASLt layouts, descriptors and preferences created, set and read back on the real
  library (these calls need no device);
* dtype combinations, scalar conversion, epilogue names;
* argument validation, which happens before any C call: exercised with arrays that point at
  no real memory, on a device object that has no context.
"""

from __future__ import annotations

import ctypes
import importlib
import itertools
import math

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import cudalibs
from cudalibs import cublas
from cudalibs import dtypes as _dtypes
from cudalibs.cublas import _common, _lib, lt, lt_desc, lt_problem
from cudalibs.driver.array import DeviceArray
from cudalibs.driver.device import Device

# The module, not the function the package re-exports under the same name.
gemm_mod = importlib.import_module("cudalibs.cublas.gemm")
batched_mod = importlib.import_module("cudalibs.cublas.batched")

N_, T_ = _lib.CUBLAS_OP_N, _lib.CUBLAS_OP_T


# -- a column-major GEMM on raw memory, as cuBLAS would run it --------------------------------
def _colmajor(flat, rows, cols, ld):
    """The column-major rows×cols matrix at the start of ``flat`` with leading dim ``ld``."""
    it = flat.itemsize
    if rows == 0 or cols == 0:
        return np.zeros((rows, cols), flat.dtype)
    return as_strided(flat, shape=(rows, cols), strides=(it, ld * it))


def _op(x, op):
    return x if op == N_ else x.T


def _run_mapping(a, b, out_strides=None):
    """Compute a @ b through the cuBLAS arguments gemm_args gives, on a's and b's memory."""
    g = cublas.gemm_args(a.shape, a.strides, b.shape, b.strides,
                         None if out_strides is None else out_strides, a.itemsize)
    if g.copy_a:
        a = np.ascontiguousarray(a)
    if g.copy_b:
        b = np.ascontiguousarray(b)
    # cuBLAS's A is b, its B is a; both are read from the operand's first element.
    A = _op(_colmajor(_base_flat(b), g.k if g.transa == T_ else g.m,
                      g.m if g.transa == T_ else g.k, g.lda), g.transa)
    B = _op(_colmajor(_base_flat(a), g.n if g.transb == T_ else g.k,
                      g.k if g.transb == T_ else g.n, g.ldb), g.transb)
    assert A.shape == (g.m, g.k) and B.shape == (g.k, g.n)
    C = A.astype(np.float64) @ B.astype(np.float64)      # column-major m×n = N×M
    # Write C with ldc into a flat buffer and read it back row-major (M, N) with row stride ldc.
    M, N = g.n, g.m
    buf = np.full(max(g.ldc * max(M - 1, 0) + N, 1), np.nan)
    if M and N:
        as_strided(buf, shape=(N, M), strides=(8, g.ldc * 8))[...] = C
        return as_strided(buf, shape=(M, N), strides=(g.ldc * 8, 8)).copy(), g
    return np.zeros((M, N)), g


def _base_flat(x):
    """A 1-D view of the memory starting at x's first element (x has non-negative strides)."""
    if x.size == 0:
        return np.zeros(1, x.dtype)
    span = sum((n - 1) * s for n, s in zip(x.shape, x.strides)) // x.itemsize + 1
    return as_strided(x, shape=(span,), strides=(x.itemsize,))


def _layout(rng, shape, kind):
    """An array of ``shape`` in one of several memory layouts."""
    r, c = shape
    if kind == "C":
        return rng.standard_normal(shape).astype(np.float32)
    if kind == "F":
        return np.asfortranarray(rng.standard_normal(shape).astype(np.float32))
    if kind == "C_padded":     # row stride longer than a row
        return rng.standard_normal((r, c + 3)).astype(np.float32)[:, :c]
    if kind == "F_padded":     # transposed view of a padded array
        return rng.standard_normal((c, r + 5)).astype(np.float32)[:, :r].T
    if kind == "both_strided":  # no unit stride: needs a copy
        return rng.standard_normal((2 * r, 2 * c)).astype(np.float32)[::2, ::2]
    if kind == "negative":
        return rng.standard_normal(shape).astype(np.float32)[::-1]
    raise AssertionError(kind)


KINDS = ("C", "F", "C_padded", "F_padded", "both_strided", "negative")
SIZES = [(1, 1, 1), (1, 5, 3), (4, 1, 6), (3, 4, 1), (7, 5, 3), (2, 9, 8)]


@pytest.mark.parametrize("ka, kb", list(itertools.product(KINDS, KINDS)))
def test_mapping_every_layout(ka, kb):
    rng = np.random.default_rng(0)
    for M, K, N in SIZES:
        a = _layout(rng, (M, K), ka)
        b = _layout(rng, (K, N), kb)
        got, g = _run_mapping(a, b)
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-6, atol=1e-6,
                                   err_msg=f"{ka} x {kb} M={M} K={K} N={N}: {g}")
        # A copy is made exactly when no unit stride exists (or strides are negative).
        needs = {"both_strided", "negative"}
        if M > 1 and K > 1:
            assert g.copy_a == (ka in needs), (ka, g)
        if K > 1 and N > 1:
            assert g.copy_b == (kb in needs), (kb, g)


def test_mapping_transpose_flags():
    a = np.zeros((6, 4), np.float32)
    b = np.zeros((4, 5), np.float32)
    g = cublas.gemm_args(a.shape, a.strides, b.shape, b.strides, None, 4)
    assert isinstance(g, cublas.GemmArgs) and g == cublas.GemmArgs(*g)
    assert (g.transa, g.transb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc) == (N_, N_, 5, 6, 4, 5, 4, 5)
    at = np.zeros((4, 6), np.float32).T       # a given as a transposed view
    bt = np.zeros((5, 4), np.float32).T
    g = cublas.gemm_args(at.shape, at.strides, bt.shape, bt.strides, None, 4)
    assert (g.transa, g.transb, g.lda, g.ldb) == (T_, T_, 4, 6)
    assert not (g.copy_a or g.copy_b)


@pytest.mark.parametrize("a_f, b_f", [(False, False), (False, True), (True, False),
                                      (True, True)])
def test_mapping_tn_only_for_int8(a_f, b_f):
    """int8 runs in cuBLAS's TN form only: a row-major, b column-major, else a copy."""
    M, K, N = 6, 8, 12
    a = np.zeros((K, M), np.int8).T if a_f else np.zeros((M, K), np.int8)
    b = np.zeros((N, K), np.int8).T if b_f else np.zeros((K, N), np.int8)
    g = cublas.gemm_args(a.shape, a.strides, b.shape, b.strides, None, 1, 4, tn_only=True)
    assert (g.transa, g.transb, g.m, g.n, g.k, g.lda, g.ldb) == (T_, N_, N, M, K, K, K)
    assert g.copy_a is a_f
    assert g.copy_b == (False if b_f else "F")
    # The same operands without the restriction never copy.
    g = cublas.gemm_args(a.shape, a.strides, b.shape, b.strides, None, 1, 4)
    assert not (g.copy_a or g.copy_b)


def test_mapping_out_with_row_stride():
    a = np.ones((3, 2), np.float32)
    b = np.ones((2, 4), np.float32)
    padded = np.zeros((3, 7), np.float32)[:, :4]
    got, g = _run_mapping(a, b, padded.strides)
    assert g.ldc == 7
    np.testing.assert_allclose(got, a @ b)


@pytest.mark.parametrize("strides", [(4, 12), (8, 8), (4, -4)])
def test_mapping_rejects_bad_out(strides):
    with pytest.raises(ValueError, match="out"):
        cublas.gemm_args((3, 2), (8, 4), (2, 3), (12, 4), strides, 4)


def test_mapping_inner_dimension():
    with pytest.raises(ValueError, match="inner dimensions"):
        cublas.gemm_args((3, 2), (8, 4), (3, 3), (12, 4), None, 4)


def test_mapping_zero_stride_is_copied():
    b = np.broadcast_to(np.ones((1, 5), np.float32), (4, 5))
    g = cublas.gemm_args((3, 4), (16, 4), b.shape, b.strides, None, 4)
    assert g.copy_b


# -- prototypes --------------------------------------------------------------------------------
def test_versioned_names_are_bound():
    names = {p.name for p in _lib.TABLE}
    for n in ("cublasCreate_v2", "cublasSetStream_v2", "cublasSetWorkspace_v2",
              "cublasSetPointerMode_v2", "cublasSgemv_v2", "cublasDgemv_v2"):
        assert n in names
    for n in ("cublasCreate", "cublasSetStream", "cublasSgemv", "cublasSetWorkspace"):
        assert n not in names
    assert {"cublasGemmEx", "cublasGemmStridedBatchedEx", "cublasGemmBatchedEx"} <= names
    lt_names = {p.name for p in _lib.LT_TABLE}
    assert {"cublasLtMatmul", "cublasLtMatmulAlgoGetHeuristic"} <= lt_names


def test_long_long_strides_and_int_sizes():
    row = {p.name: p for p in _lib.TABLE}["cublasGemmStridedBatchedEx"]
    assert row.argtypes[10] is ctypes.c_longlong and row.argtypes[3] is ctypes.c_int
    lt_row = {p.name: p for p in _lib.LT_TABLE}["cublasLtMatmul"]
    assert lt_row.argtypes[14] is ctypes.c_size_t


def test_heuristic_result_struct():
    assert ctypes.sizeof(_lib.cublasLtMatmulAlgo_t) == 64
    assert ctypes.sizeof(_lib.cublasLtMatmulHeuristicResult_t) == 96


def test_gemm_rows_bind():
    L = _lib.get()
    for name in ("cublasGemmEx", "cublasGemmStridedBatchedEx", "cublasAxpyEx", "cublasNrm2Ex"):
        assert L.has(name), name
    assert _lib.get_lt().has("cublasLtMatmul")


def test_versions():
    major, minor, _ = cublas.version()
    assert major >= 12
    assert cublas.lt_version()[0] == major


# -- cuBLASLt descriptors on the real library, no GPU --------------------------------------------
def test_layout_round_trip():
    with cublas.MatrixLayout(np.float32, 10, 20, 16, batch=3, batch_stride=400) as L:
        assert (L.get("rows"), L.get("cols"), L.get("ld")) == (10, 20, 16)
        assert L.get("batch_count") == 3 and L.get("strided_batch_offset") == 400
        assert L.get("type") == _dtypes.CUDA_R["R_32F"]
        assert L.get("order") == _lib.CUBLASLT_ORDER_COL
        L.set("ld", 32)
        assert L.get(_lib.CUBLASLT_MATRIX_LAYOUT_LD) == 32
        assert "float32 10x20" in repr(L)
    assert L.closed
    L.close()                              # twice is harmless
    with pytest.raises(cudalibs.ClosedError):
        L.get("rows")


def test_layout_row_order_and_types():
    R = cublas.MatrixLayout(_dtypes.bfloat16, 4, 6, order="row")
    assert R.get("order") == _lib.CUBLASLT_ORDER_ROW and R.get("ld") == 6
    assert R.get("type") == _dtypes.CUDA_R["R_16BF"]
    F8 = cublas.MatrixLayout(_dtypes.float8_e4m3fn, 16, 16)
    assert F8.get("type") == _dtypes.CUDA_R["R_8F_E4M3"]
    for x in (R, F8):
        x.close()


@pytest.mark.parametrize("kwargs", [dict(order="diag"), dict(ld=3), dict(batch=0)])
def test_layout_bad_arguments(kwargs):
    args = dict(dtype=np.float32, rows=4, cols=6)
    args.update(kwargs)
    with pytest.raises(ValueError):
        cublas.MatrixLayout(**args)


def test_layout_unknown_attribute():
    with cublas.MatrixLayout(np.float32, 2, 2) as L:
        with pytest.raises(ValueError, match="unknown"):
            L.get("colour")


def test_desc_round_trip():
    C = _dtypes.COMPUTE
    with cublas.MatmulDesc(C["COMPUTE_32F_FAST_TF32"], _dtypes.CUDA_R["R_32F"]) as D:
        assert D.get("compute_type") == C["COMPUTE_32F_FAST_TF32"]
        assert D.get("scale_type") == _dtypes.CUDA_R["R_32F"]
        D.set("transa", T_)
        D.set("epilogue", _lib.CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        D.set("bias_pointer", 0x7F0000001000)
        D.set("bias_data_type", _dtypes.CUDA_R["R_16BF"])
        D.set("epilogue_aux_ld", 64)
        D.set("a_scale_pointer", 0x7F0000002000)
        D.set("fast_accum", 1)
        assert D.get("transa") == T_ and D.get("transb") == N_
        assert D.get("epilogue") == _lib.CUBLASLT_EPILOGUE_GELU_AUX_BIAS
        assert D.get("bias_pointer") == 0x7F0000001000
        assert D.get("bias_data_type") == _dtypes.CUDA_R["R_16BF"]
        assert D.get("epilogue_aux_ld") == 64
        assert D.get("a_scale_pointer") == 0x7F0000002000
        assert D.get("fast_accum") == 1
        D.set("bias_pointer", 0)
        assert D.get("bias_pointer") == 0


def test_preference_round_trip():
    with cublas.MatmulPreference(1 << 20) as P:
        assert P.get("max_workspace_bytes") == 1 << 20
        P.set("min_alignment_b_bytes", 16)
        assert P.get("min_alignment_b_bytes") == 16
        assert "max_workspace=1048576" in repr(P)


# -- dtypes, scalars, epilogues -------------------------------------------------------------------
def test_combos():
    f32 = np.dtype(np.float32)
    assert _common.combo(f32, None, "tf32").compute == _dtypes.COMPUTE["COMPUTE_32F_FAST_TF32"]
    c = _common.combo(np.dtype(np.float16), None, "f16")
    assert c.compute == _dtypes.COMPUTE["COMPUTE_16F"] and c.scale == np.float16
    c = _common.combo(np.dtype(np.int8), None, None)
    assert c.c == np.int32 and c.compute == _dtypes.COMPUTE["COMPUTE_32I"]
    assert _common.combo(_dtypes.bfloat16, None, None).scale == np.float32
    with pytest.raises(ValueError, match="supported:.*int8 -> int32"):
        _common.combo(np.dtype(np.int32), None, None)
    with pytest.raises(ValueError, match="compute='tf32'"):
        _common.combo(np.dtype(np.float64), None, "tf32")


def test_scalars():
    assert _common.scalar(2.5, np.dtype(np.float32), "alpha").value == 2.5
    h = _common.scalar(1.5, np.dtype(np.float16), "alpha")
    assert np.array(h.value, np.uint16).view(np.float16) == 1.5
    z = _common.scalar(1 + 2j, np.dtype(np.complex64), "alpha")
    assert (z[0], z[1]) == (1.0, 2.0)
    assert _common.scalar(3, np.dtype(np.int32), "alpha").value == 3
    for bad in (math.inf, math.nan, -math.inf):
        with pytest.raises(ValueError, match="finite"):
            _common.scalar(bad, np.dtype(np.float32), "alpha")
    with pytest.raises(ValueError, match="finite"):
        _common.scalar(complex(1, math.nan), np.dtype(np.complex128), "beta")
    with pytest.raises(TypeError):
        _common.scalar(1j, np.dtype(np.float32), "alpha")
    with pytest.raises(ValueError, match="int32"):
        _common.scalar(0.5, np.dtype(np.int32), "alpha")
    with pytest.raises(ValueError, match="overflows"):
        _common.scalar(1e6, np.dtype(np.float16), "alpha")
    with pytest.raises(TypeError):
        _common.scalar("1", np.dtype(np.float32), "alpha")


@pytest.mark.parametrize("name, value", [
    ("bias", _lib.CUBLASLT_EPILOGUE_BIAS), ("bias+relu", _lib.CUBLASLT_EPILOGUE_RELU_BIAS),
    ("relu_bias", _lib.CUBLASLT_EPILOGUE_RELU_BIAS), ("gelu", _lib.CUBLASLT_EPILOGUE_GELU),
    ("bias_gelu", _lib.CUBLASLT_EPILOGUE_GELU_BIAS),
    ("gelu_aux_bias", _lib.CUBLASLT_EPILOGUE_GELU_AUX_BIAS),
    ("dgelu_bgrad", _lib.CUBLASLT_EPILOGUE_DGELU_BGRAD), (None, _lib.CUBLASLT_EPILOGUE_DEFAULT),
])
def test_epilogue_names(name, value):
    assert lt_desc.epilogue(name).value == value


def test_epilogue_unknown():
    with pytest.raises(ValueError, match="known"):
        lt_desc.epilogue("swish")


def test_gemm_algos():
    assert cublas.GEMM_ALGOS[0] == -1 and len(cublas.GEMM_ALGOS) == 1 + 24 + 1 + 16


# -- validation before any C call ---------------------------------------------------------------
def _fake_device(ordinal=0):
    dev = object.__new__(Device)
    dev._ordinal = ordinal
    dev._ctx = None
    return dev


DEV0, DEV1 = _fake_device(0), _fake_device(1)


def _arr(shape, dtype=np.float32, dev=DEV0, ptr=1 << 20, strides=None):
    dt = _dtypes.lookup(dtype)
    if strides is None:
        strides, acc = [], dt.itemsize
        for n in reversed(shape):
            strides.append(acc)
            acc *= n
        strides = tuple(reversed(strides))
    return DeviceArray._view(ptr, tuple(shape), tuple(strides), dt, dev, None, None)


@pytest.fixture(autouse=True)
def _no_library_calls(monkeypatch):
    """Any C call reached by these tests is a bug: validation must come first."""
    def boom(*a, **k):
        raise AssertionError("a library call was reached before validation failed")

    monkeypatch.setattr(gemm_mod, "thread_handle", boom)
    monkeypatch.setattr(gemm_mod, "empty", boom)
    monkeypatch.setattr(batched_mod, "cublas_handle", boom)
    monkeypatch.setattr(batched_mod, "empty", boom)
    yield
    batched_mod.clear_algo_cache()


@pytest.mark.parametrize("a, b, kwargs, match", [
    (_arr((3, 4)), _arr((5, 2)), {}, "inner dimensions"),
    (_arr((3, 4)), _arr((4, 2), np.float64), {}, "a is float32 but b is float64"),
    (_arr((3, 4), np.int8), _arr((4, 2), np.int8), {}, "multiple of 4"),
    (_arr((4, 4), np.int8), _arr((4, 3), np.int8), {}, "multiple of 4"),
    (_arr((3, 4), np.int32), _arr((4, 2), np.int32), {}, "supported"),
    (_arr((3, 4), np.uint8), _arr((4, 2), np.uint8), {}, "supported"),
    (_arr((3, 4)), _arr((4, 2), dev=DEV1), {}, "device"),
    (_arr((3, 4)), _arr((4, 2)), dict(out=_arr((3, 3))), "shape"),
    (_arr((3, 4)), _arr((4, 2)), dict(out=_arr((3, 2), np.float64)), "float64"),
    (_arr((3, 4)), _arr((4, 2)), dict(out=_arr((3, 2), strides=(4, 12))), "unit stride"),
    (_arr((3, 4)), _arr((4, 2)), dict(alpha=math.nan), "finite"),
    (_arr((3, 4)), _arr((4, 2)), dict(beta=math.inf, out=_arr((3, 2), ptr=1 << 30)), "finite"),
    (_arr((3, 4)), _arr((4, 2)), dict(beta=1.0), "out must be given"),
    (_arr((3, 4)), _arr((4, 2)), dict(compute="tf64"), "supported"),
    (_arr((3, 4)), _arr((4, 2)), dict(algo=7.5), "algo"),
    (_arr((4,)), _arr((4, 2)), {}, "gemv"),
    (_arr((2, 2, 3, 4)), _arr((4, 2)), {}, "2-D"),
])
def test_gemm_rejects(a, b, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        cublas.gemm(a, b, **kwargs)


def test_gemm_rejects_aliasing_out():
    a = _arr((4, 4), ptr=1 << 20)
    b = _arr((4, 4), ptr=1 << 24)
    with pytest.raises(ValueError, match="overlaps"):
        cublas.gemm(a, b, out=a)
    inside = _arr((2, 2), ptr=(1 << 24) + 16, strides=(16, 4))
    with pytest.raises(ValueError, match="overlaps"):
        cublas.gemm(_arr((2, 4)), _arr((4, 2), ptr=1 << 24), out=inside)


def test_gemm_rejects_host_arrays():
    with pytest.raises(TypeError, match="to_device"):
        cublas.gemm(np.ones((2, 2), np.float32), _arr((2, 2)))


def test_gemm_rejects_3d_in_plain_gemm():
    with pytest.raises(ValueError, match="gemm_strided_batched"):
        cublas.gemm(_arr((2, 3, 4)), _arr((4, 2)))


def test_strided_batched_rejects():
    with pytest.raises(ValueError, match="broadcast"):
        cublas.gemm_strided_batched(_arr((2, 3, 4)), _arr((3, 4, 2)))
    out = _arr((2, 3, 2), ptr=1 << 30, strides=(0, 8, 4))
    # A zero batch stride puts every batch's result at one address: the one operand path
    # refuses such an out before gemm's own batch-stride check sees it.
    with pytest.raises(ValueError, match="batch stride|overlapping elements"):
        cublas.gemm_strided_batched(_arr((2, 3, 4)), _arr((2, 4, 2), ptr=1 << 24), out=out)


def test_gemm_batched_rejects():
    with pytest.raises(ValueError, match="equally long"):
        cublas.gemm_batched([_arr((2, 2))], [])
    with pytest.raises(ValueError, match="shape, strides and dtype"):
        cublas.gemm_batched([_arr((2, 2)), _arr((3, 2))], [_arr((2, 2)), _arr((2, 2))])


def test_level1_rejects():
    with pytest.raises(ValueError, match="1-D"):
        cublas.axpy(1.0, _arr((2, 2)), _arr((2, 2)))
    with pytest.raises(ValueError, match="shape"):
        cublas.axpy(1.0, _arr((3,)), _arr((4,)))
    with pytest.raises(ValueError, match="level 1"):
        cublas.scal(2, _arr((3,), np.int32))
    with pytest.raises(ValueError, match="gemv takes"):
        cublas.gemv(_arr((3, 3), np.float16), _arr((3,), np.float16))
    with pytest.raises(ValueError, match=r"\(4,\)"):
        cublas.gemv(_arr((3, 4)), _arr((3,)))


def test_lt_rejects_before_planning():
    with pytest.raises(ValueError, match="inner dimensions"):
        cublas.Matmul(((3, 4), np.float32), ((5, 2), np.float32), device=DEV0)
    with pytest.raises(ValueError, match="unknown epilogue"):
        cublas.Matmul(((3, 4), np.float32), ((4, 2), np.float32), epilogue="tanh",
                      device=DEV0)
    with pytest.raises(ValueError, match="one input type"):
        cublas.Matmul(((3, 4), np.float32), ((4, 2), np.float16), device=DEV0)
    with pytest.raises(ValueError, match="cublas.gemm"):
        cublas.Matmul(((3, 4), np.int8), ((4, 2), np.int8), device=DEV0)
    with pytest.raises(ValueError, match="unit stride"):
        cublas.Matmul(((3, 4), np.float32, (32, 8)), ((4, 2), np.float32), device=DEV0)
    with pytest.raises(ValueError, match="aux_ld"):
        cublas.Matmul(((3, 4), np.float32), ((4, 2), np.float32), aux_ld=64, device=DEV0)


def test_lt_fp8_needs_new_devices():
    old = _fake_device(0)
    old._cc = (8, 0)
    with pytest.raises(ValueError, match="8.9"):
        cublas.Matmul(((16, 32), _dtypes.float8_e4m3fn), ((32, 16), _dtypes.float8_e4m3fn,
                      (1, 32)), device=old)
    new = _fake_device(0)
    new._cc = (9, 0)
    with pytest.raises(ValueError, match="TN"):
        cublas.Matmul(((16, 32), _dtypes.float8_e4m3fn), ((32, 16), _dtypes.float8_e4m3fn),
                      device=new)
    with pytest.raises(ValueError, match="e5m2 x e5m2"):
        cublas.Matmul(((16, 32), _dtypes.float8_e5m2), ((32, 16), _dtypes.float8_e5m2,
                      (1, 32)), device=new)
    with pytest.raises(ValueError, match="multiples of 16"):
        cublas.Matmul(((16, 24), _dtypes.float8_e4m3fn), ((24, 16), _dtypes.float8_e4m3fn,
                      (1, 24)), device=new)


def test_host_numpy_gets_the_operand_path_message():
    host = np.ones((4, 4), np.float32)
    for call in (lambda: cublas.gemm(host, _arr((4, 4))),
                 lambda: cublas.matmul(_arr((4, 4)), host),
                 lambda: cublas.Matmul(host, ((4, 4), np.float32), device=DEV0)):
        with pytest.raises(TypeError, match=r"host numpy array; copy it to the GPU first "
                                            r"with cudalibs.to_device\(\)"):
            call()


def test_epilogue_repr_is_informative():
    r = repr(cublas.EPILOGUES["gelu_bias"])
    assert "gelu_bias" in r and "bias" in r and "object at" not in r
    assert "writes the ReLU mask" in repr(cublas.EPILOGUES["relu_aux"])
    assert "reads the GELU input" in repr(cublas.EPILOGUES["dgelu"])


def test_cublas_modules_import_no_private_helpers_of_each_other():
    import ast
    import pathlib

    allowed = {"_common", "_lib", "_base", "handle"}
    root = pathlib.Path(cudalibs.__file__).parent / "cublas"
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                if node.module in allowed:
                    continue
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from .{node.module}"
            if isinstance(node, ast.ImportFrom) and node.module and "testing" in node.module:
                raise AssertionError(f"{path.name} imports {node.module}")


# -- fp8: scale modes, fp8 outputs, amax -- descriptors and validation, no device ----------------
E4, E5 = _dtypes.float8_e4m3fn, _dtypes.float8_e5m2


def _gpu(cc=(9, 0)):
    dev = _fake_device(0)
    dev._cc = cc
    return dev


def _fp8(M=256, N=384, K=640, ta=E4, tb=E4):
    """Descriptions of an fp8 a (M, K), row-major, and b = w.T (K, N), column-major."""
    return ((M, K), ta), ((K, N), tb, (1, K))


@pytest.fixture()
def no_descriptors(monkeypatch):
    """The refusals below come before any descriptor (any C call) is made."""
    def boom(*a, **k):
        raise AssertionError("a cuBLASLt descriptor was made before validation failed")

    for name in ("MatrixLayout", "MatmulDesc", "MatmulPreference"):
        monkeypatch.setattr(lt, name, boom)


def test_scale_mode_constants_are_the_headers():
    # The enum values themselves are compared with cublasLt.h by test_headers.py.
    assert lt_desc.SCALE_MODES == {
        "tensor": _lib.CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
        "row": _lib.CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
        "block128": _lib.CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
        "block128x128": _lib.CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F}
    assert (_lib.CUBLASLT_MATMUL_DESC_A_SCALE_MODE, _lib.CUBLASLT_MATMUL_DESC_B_SCALE_MODE) == \
        (31, 32)
    assert lt.SCALE_MODES is lt_desc.SCALE_MODES


@pytest.mark.parametrize("given, want", [
    (None, None), ("row", ("row", "row")), ("Block128", ("block128", "block128")),
    (("block128", "block128x128"), ("block128", "block128x128")),
    (["tensor", "tensor"], ("tensor", "tensor"))])
def test_scale_modes_normalised(given, want):
    assert lt_problem.scale_modes(given) == want


@pytest.mark.parametrize("mode, pair", [
    ("tensor", ("tensor", "tensor")), ("row", ("row", "row")),
    ("block128", ("block128", "block128")),
    (("block128", "block128x128"), ("block128", "block128x128")),
    (("block128x128", "block128"), ("block128x128", "block128"))])
def test_fp8_scale_modes_set_on_the_swapped_operands(mode, pair):
    a, b = _fp8()
    with cublas.Matmul(a, b, scale_mode=mode, epilogue="bias", device=_gpu()) as p:
        assert p.scale_modes == pair
        assert f"scale={pair[0]}" in repr(p)
        # cuBLASLt's A is our b: its A scale mode is b's, its B scale mode a's.
        assert p._desc.get("a_scale_mode") == lt_desc.SCALE_MODES[pair[1]]
        assert p._desc.get("b_scale_mode") == lt_desc.SCALE_MODES[pair[0]]
        assert p._desc.get("bias_data_type") == _dtypes.CUDA_R["R_16BF"]
        vectors = pair != ("tensor", "tensor")
        # Scale vectors are seen by the heuristic (placeholders), per-tensor scales are not.
        assert (p._desc.get("a_scale_pointer") != 0) == vectors
        assert p._desc.get("fast_accum") == 0


def test_fp8_scale_specs_in_row_major_terms():
    M, N, K = 256, 384, 640                      # K / 128 = 5 blocks, padded to 8
    f32 = np.float32
    layouts = {
        "row": ([np.zeros(M, f32), np.zeros((M, 1), f32)],
                [np.zeros(N, f32), np.zeros((1, N), f32)],
                [np.zeros((1, M), f32), np.zeros(N, np.float64)]),
        "block128": ([np.zeros((5, M), f32).T],            # column-major (M, 5)
                     [np.zeros((5, N), f32)],              # C-contiguous (5, N)
                     [np.zeros((M, 5), f32), np.zeros((N, 5), f32).T]),
        "block128x128": ([np.zeros((2, 8), f32), np.zeros((2, 8), f32)[:, :5]],
                         [np.zeros((3, 8), f32).T, np.zeros((3, 8), f32)[:, :5].T],
                         [np.zeros((2, 5), f32), np.zeros((8, 3), f32)]),
    }
    for mode, (goods_a, goods_b, bads) in layouts.items():
        pair = (mode, "block128") if mode == "block128x128" else mode
        a, b = _fp8(M, N, K)
        with cublas.Matmul(a, b, scale_mode=pair, device=_gpu()) as p:
            spec_a, spec_b = p.scale_specs
            assert (spec_a.what, spec_b.what) == ("a_scale", "b_scale")
            assert spec_a.required and spec_a.align == 16
            for x in goods_a:
                assert spec_a.matches(x.shape, x.strides, x.dtype), (mode, x.shape, x.strides)
            for x in bads:
                assert not spec_a.matches(x.shape, x.strides, x.dtype), (mode, x.shape)
        if mode == "block128x128":                   # b in 128x128 blocks, a in 1x128
            with cublas.Matmul(a, b, scale_mode=("block128", mode), device=_gpu()) as p:
                spec_b = p.scale_specs[1]
        for x in goods_b:
            assert spec_b.matches(x.shape, x.strides, x.dtype), (mode, x.shape, x.strides)
    with cublas.Matmul(*_fp8(M, N, K), device=_gpu()) as p:      # per tensor
        spec = p.scale_specs[0]
        assert not spec.required and spec.matches((), (), np.dtype(f32))
        assert spec.matches((1,), (4,), np.dtype(f32)) and not spec.matches((2,), (4,),
                                                                           np.dtype(f32))


def test_fp8_output_descriptors():
    a, b = _fp8()
    with cublas.Matmul(a, b, out_dtype=E4, epilogue="gelu_bias", amax=True,
                       device=_gpu()) as p:
        la, lb, ld = p._layouts
        assert ld.get("type") == _dtypes.CUDA_R["R_8F_E4M3"]
        # C has the bias' type beside an fp8 D (cuBLASLt's fp8 table), and no pointer.
        assert p._lc_c.get("type") == _dtypes.CUDA_R["R_16BF"] and p._c_null
        assert p._desc.get("bias_data_type") == _dtypes.CUDA_R["R_16BF"]
        assert p._desc.get("epilogue") == _lib.CUBLASLT_EPILOGUE_GELU_BIAS
        assert p._desc.get("amax_d_pointer") == 256            # the heuristic sees an amax
        assert p._ptr_names == ("bias_pointer", "a_scale_pointer", "b_scale_pointer",
                                "d_scale_pointer", "amax_d_pointer")
        # a_scale and b_scale are checked for, and recorded at, 16-byte alignment; d_scale
        # and amax at a float32's.
        assert all(spec.align == 16 for spec in p.scale_specs)
        assert p._ptr_align["d_scale_pointer"] == p._ptr_align["amax_d_pointer"] == 4
        assert "a_scale_pointer" not in p._ptr_align
        assert "amax" in repr(p)
    # float32 and float16 outputs: bfloat16 and float16 biases; C is D.
    for od, bias in ((np.float32, "R_16BF"), (np.float16, "R_16F")):
        with cublas.Matmul(a, b, out_dtype=od, epilogue="bias", device=_gpu()) as p:
            assert p._desc.get("bias_data_type") == _dtypes.CUDA_R[bias]
            assert p._lc_c is p._layouts[2] and not p._c_null
    # The GELU input of fp8 inputs beside a bfloat16 output, in bfloat16.
    with cublas.Matmul(a, b, epilogue="gelu_aux_bias", device=_gpu()) as p:
        assert p.aux_shape == (256, 384) and p._aux_dtype == _dtypes.bfloat16
    # e4m3 x e5m2 may write e5m2, with fast accumulation.
    with cublas.Matmul(*_fp8(tb=E5), out_dtype=E5, fast_accum=True, device=_gpu()) as p:
        assert p._layouts[2].get("type") == _dtypes.CUDA_R["R_8F_E5M2"]
        assert p._desc.get("fast_accum") == 1 and "fast_accum" in repr(p)
    # The Hopper modes write float16 too, and take GELU.
    with cublas.Matmul(a, b, scale_mode=("block128", "block128x128"), out_dtype=np.float16,
                       epilogue="gelu_bias", device=_gpu()) as p:
        assert p._desc.get("bias_data_type") == _dtypes.CUDA_R["R_16F"]
        assert [spec.align for spec in p.scale_specs] == [16, 16]


FP8_REFUSALS = [
    # (a, b, kwargs, device cc, exception, match)
    (((64, 64), np.float16), ((64, 64), np.float16), dict(scale_mode="row"), (9, 0),
     ValueError, "scale_mode applies to fp8"),
    (((64, 64), np.float16), ((64, 64), np.float16), dict(amax=True), (9, 0),
     ValueError, "amax applies to fp8"),
    (*_fp8(), dict(scale_mode="rows"), (9, 0), ValueError, "not one of"),
    (*_fp8(), dict(scale_mode=("row", "row", "row")), (9, 0), TypeError, "scale_mode"),
    (*_fp8(), dict(scale_mode=("block128x128", "block128x128")), (9, 0), ValueError,
     "pairs"),
    (*_fp8(), dict(scale_mode=("row", "tensor")), (9, 0), ValueError, "pairs"),
    (*_fp8(), dict(scale_mode="row"), (8, 9), ValueError, r"compute capability 9\.0"),
    (*_fp8(), dict(scale_mode="block128"), (10, 0), ValueError, "Hopper only"),
    (*_fp8(), dict(scale_mode="row", out_dtype=E4), (9, 0), ValueError,
     "bfloat16, float16 or float32"),
    (*_fp8(tb=E5), dict(scale_mode="block128", out_dtype=E5), (9, 0), ValueError,
     "no fp8 output"),
    (*_fp8(K=272), dict(scale_mode="block128"), (9, 0), ValueError,
     "K to be a multiple of 128"),
    (*_fp8(N=200), dict(scale_mode=("block128", "block128x128")), (9, 0), ValueError,
     "N to be a multiple of 128"),
    (*_fp8(M=264), dict(scale_mode=("block128x128", "block128")), (9, 0), ValueError,
     "M to be a multiple of 128"),
    (*_fp8(M=12), dict(scale_mode="row"), (9, 0), ValueError, "multiples of 8"),
    (*_fp8(), dict(scale_mode="block128", fast_accum=True), (9, 0), ValueError,
     "fast accumulation"),
    (*_fp8(), dict(scale_mode="row", epilogue="relu"), (9, 0), ValueError, "epilogues"),
    (*_fp8(), dict(scale_mode="block128", epilogue="gelu_aux_bias"), (9, 0), ValueError,
     "epilogues"),
    (((2, 256, 640), E4), ((640, 384), E4, (1, 640)), dict(scale_mode="row"), (9, 0),
     ValueError, "2-D"),
    (*_fp8(), dict(out_dtype=E5), (9, 0), ValueError, "e4m3 x e5m2"),
    (*_fp8(ta=E5, tb=E5), {}, (9, 0), ValueError, "e5m2 x e5m2"),
    (*_fp8(), dict(amax=True), (9, 0), ValueError, "fp8 outputs only"),
    (*_fp8(), dict(out_dtype=E4, epilogue="relu"), (9, 0), ValueError,
     "no fp8-output form"),
    (*_fp8(), dict(out_dtype=E4, epilogue="gelu_aux_bias"), (9, 0), ValueError,
     "no fp8-output form"),
    (*_fp8(), dict(out_dtype=np.float32, epilogue="gelu_aux_bias"), (9, 0), ValueError,
     "beside bfloat16 or float16 outputs"),
    (*_fp8(), dict(out_dtype=E4, beta=1.0, out=((256, 384), E4)), (9, 0), ValueError,
     "no addend"),
    (*_fp8(), dict(out_dtype=np.int8), (9, 0), ValueError, "writes bfloat16, float16"),
]


@pytest.mark.parametrize("a, b, kwargs, cc, exc, match", FP8_REFUSALS,
                         ids=[f"{i}" for i in range(len(FP8_REFUSALS))])
def test_fp8_refusals_name_the_argument(no_descriptors, a, b, kwargs, cc, exc, match):
    with pytest.raises(exc, match=match):
        cublas.Matmul(a, b, device=_gpu(cc), **kwargs)


def test_fp8_hopper_modes_need_cublaslt_12_9(no_descriptors, monkeypatch):
    monkeypatch.setattr(lt_problem, "lt_version_int", lambda: 120804)
    with pytest.raises(ValueError, match=r"cuBLASLt 12\.9 or newer; the loaded one is 12\.8"):
        cublas.Matmul(*_fp8(), scale_mode="block128", device=_gpu())
    # Per-tensor scaling asks nothing of the version: validation passes without it, and the
    # first descriptor is made.
    def boom():
        raise AssertionError("the version was read")

    monkeypatch.setattr(lt_problem, "lt_version_int", boom)
    with pytest.raises(AssertionError, match="descriptor was made"):
        cublas.Matmul(*_fp8(), device=_gpu())


def test_fp8_row_mode_takes_fast_accum():
    with cublas.Matmul(*_fp8(), scale_mode="row", fast_accum=True, device=_gpu()) as p:
        assert p._desc.get("fast_accum") == 1


def test_fp8_tuning_key_names_the_fp8_options():
    with cublas.Matmul(*_fp8(), scale_mode=("block128", "block128x128"), device=_gpu()) as p:
        key = p._tuning_key()
        assert key["scale_mode"] == ["block128", "block128x128"] and key["amax"] is False
    with cublas.Matmul(((8, 8), np.float32), ((8, 8), np.float32), device=DEV0) as p:
        assert "scale_mode" not in p._tuning_key()      # other plans keep their stored keys
