"""cuBLAS's public names on a GPU: ``gemm_backend`` and the route each backend takes, every
combination ``SUPPORTED`` lists run against float64 numpy, the cuBLASLt descriptors
(``MatrixLayout``, ``MatmulDesc``, ``MatmulPreference``) driving a raw ``cublasLtMatmul``,
every ``Epilogue`` of ``EPILOGUES`` against its definition, the one-shots' plans under
``GEMM_KEY`` / ``MATMUL_KEY``, and ``release_workspaces``."""

import ctypes
import re
import threading

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T
from cudalibs.cublas import _lib as blas_lib
from cudalibs.cublas.handle import lt_handle, workspace_buffer

from .._plans import cached
from ._util import dgelu, gelu, poisoned

#: The relative tolerance of float32 GELU epilogues (cuBLASLt's fast tanh; see test_lt.py).
GELU_FP32_RTOL = 1e-4


def _np(name):
    return cl.dtypes.lookup(name).numpy


def _gemm_plan(a, b):
    """The one cached GEMM plan of ``a @ b`` (no out)."""
    (entry,) = cached(cublas.GEMM_KEY, a_shape=a.shape, a_strides=a.strides, b_shape=b.shape,
                      b_strides=b.strides, a_dtype=a.dtype, out_shape=None, algo=None)
    return entry.plan


# -- which library runs gemm -------------------------------------------------------------------
def test_gemm_backend_chooses_the_route(device, rng, process_options):
    assert cublas.gemm_backend() == cl.options().gemm_backend
    ah = T.random_array((72, 40), np.float32, rng=rng)
    bh = T.random_array((40, 56), np.float32, rng=rng)
    expected = T.ref.gemm(ah, bh)
    for backend in ("cublas", "lt", "auto"):
        cl.plan_cache.clear("gemm")
        before = cublas.set_gemm_backend(backend)
        assert cublas.gemm_backend() == backend and cl.options().gemm_backend == backend
        a, b = cl.to_device(ah), cl.to_device(bh)
        for i in range(3):
            T.assert_close(cublas.gemm(a, b), expected, np.float32,
                           msg=f"backend {backend}, call {i}")
        plan = _gemm_plan(a, b)
        if backend == "cublas":
            assert plan.lt is None, plan        # the cuBLASLt route was never built
        else:
            assert plan.lt, plan                # float32, 16-byte aligned: cuBLASLt
        cublas.set_gemm_backend(before)
    with pytest.raises(ValueError):
        cublas.set_gemm_backend("blas")


def test_gemm_backend_of_an_option_context_is_the_threads_own(device, process_options):
    process_options(gemm_backend="lt")
    seen = []
    with cl.option_context(gemm_backend="cublas"):
        assert cublas.gemm_backend() == "cublas"
        t = threading.Thread(target=lambda: seen.append(cublas.gemm_backend()))
        t.start()
        t.join()
    assert seen == ["lt"] and cublas.gemm_backend() == "lt"


# -- every combination --------------------------------------------------------------------------
_COMBO = re.compile(r"^(\w+) -> (\w+) \(compute=(\w+)\)$")


@pytest.mark.parametrize("combo", cublas.SUPPORTED)
def test_every_supported_combination_runs(device, rng, combo):
    ab, c, compute = _COMBO.match(combo).groups()
    compute = None if compute == "default" else compute
    m, n, k = 37, 24, 44               # n and k multiples of 4, as int8 needs
    a = T.random_array((m, k), _np(ab), rng=rng)
    b = T.random_array((k, n), _np(ab), rng=rng)
    out = poisoned((m, n), _np(c))
    res = cublas.gemm(cl.to_device(a), cl.to_device(b), out, compute=compute)
    assert res is out and res.dtype == _np(c)
    T.assert_close(res, T.ref.gemm(a, b), ab, compute="tf32" if compute == "tf32" else None,
                   msg=combo)


def test_a_combination_not_listed_is_refused_with_the_list(device, rng):
    a = cl.to_device(T.random_array((8, 8), np.float32, rng=rng))
    with pytest.raises(ValueError, match="supported: " + re.escape("; ".join(cublas.SUPPORTED))):
        cublas.gemm(a, a, poisoned((8, 8), np.float16))


# -- the cuBLASLt descriptors -------------------------------------------------------------------
def _lt_matmul(device, stream, desc, layouts, first, second, out, pref):
    """One raw ``cublasLtMatmul``, ``out = first @ second`` in cuBLASLt's column-major terms,
    with the heuristic's first algorithm for these descriptors."""
    L = blas_lib.get_lt()
    h = lt_handle(device)
    la, lb, lc = layouts
    results = (blas_lib.cublasLtMatmulHeuristicResult_t * 8)()
    count = ctypes.c_int()
    st = L.cublasLtMatmulAlgoGetHeuristic(h, desc.raw, la.raw, lb.raw, lc.raw, lc.raw,
                                          pref.raw, 8, results, ctypes.byref(count))
    assert st == 0, st
    algos = [r for r in results[:count.value] if r.state == 0]
    assert algos, "cuBLASLt offers no algorithm for these descriptors"
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    st = L.cublasLtMatmul(h, desc.raw, ctypes.addressof(alpha), first.address, la.raw,
                          second.address, lb.raw, ctypes.addressof(beta), out.address, lc.raw,
                          out.address, lc.raw, ctypes.byref(algos[0].algo), None, 0, stream.raw)
    assert st == 0, st


@pytest.mark.parametrize("how", ["plain", "transposed", "batched"])
def test_lt_descriptors_drive_a_raw_matmul(device, rng, how):
    m, n, k, batch = 45, 38, 29, 3 if how == "batched" else 1
    a = T.random_array((batch, m, k), np.float32, rng=rng)
    b = T.random_array((batch, k, n), np.float32, rng=rng)
    f32 = cl.dtypes.CUDA_R["R_32F"]
    desc = cublas.MatmulDesc(cl.dtypes.COMPUTE["COMPUTE_32F"], f32)
    pref = cublas.MatmulPreference(0)
    assert pref.get("max_workspace_bytes") == 0
    # Row-major out = a @ b is column-major out^T = b^T @ a^T: b's memory is cuBLASLt's
    # first operand (n x k), a's its second (k x m), out's memory is n x m.
    s = cl.Stream()
    if how == "transposed":
        # b stored transposed (its memory column-major k x n): transa turns it back
        first = cl.to_device(np.ascontiguousarray(np.swapaxes(b, 1, 2)), stream=s)
        la = cublas.MatrixLayout(np.float32, k, n, k)
        desc.set("transa", blas_lib.CUBLAS_OP_T)
        assert desc.get("transa") == blas_lib.CUBLAS_OP_T
    else:
        first = cl.to_device(b, stream=s)
        la = cublas.MatrixLayout(np.float32, n, k, n, batch=batch, batch_stride=n * k)
    lb = cublas.MatrixLayout(np.float32, k, m, k, batch=batch, batch_stride=k * m)
    lc = cublas.MatrixLayout(np.float32, n, m, n, batch=batch, batch_stride=n * m)
    assert (lc.rows, lc.cols, lc.ld, lc.batch) == (n, m, n, batch)
    out = poisoned((batch, m, n), np.float32, stream=s)
    _lt_matmul(device, s, desc, (la, lb, lc), first, cl.to_device(a, stream=s), out, pref)
    T.assert_close(out.get(stream=s), T.ref.gemm(a, b), np.float32, msg=how)
    for d in (desc, pref, la, lb, lc):
        d.close()
        assert d.closed
    with pytest.raises(cl.ClosedError):
        desc.raw


# -- every epilogue -----------------------------------------------------------------------------
def _act(ep, pre):
    parts = set(ep.name.split("_"))
    if "relu" in parts:
        return np.maximum(pre, 0)
    if "gelu" in parts:
        return gelu(pre)
    return pre


def _mask_bits(mask, n):
    """cuBLASLt's ReLU mask: bit j of row i, little-endian, one bit per output element."""
    return np.unpackbits(mask.get(), axis=1, bitorder="little")[:, :n].astype(bool)


def _offered(call):
    """``call()``, or None where cuBLASLt offers no algorithm for the problem (its heuristic
    finds none, or the library says the combination is not supported)."""
    try:
        return call()
    except cl.CublasError as exc:
        if exc.name != "CUBLAS_STATUS_NOT_SUPPORTED":
            raise
    except ValueError as exc:
        if "found no algorithm" not in str(exc):
            raise
    return None


def _epilogue_case(ep, dtype, rng):
    """Run epilogue ``ep`` on ``dtype`` data and check it; False when cuBLASLt offers no
    algorithm for it in this dtype."""
    m, n, k = 40, 64, 24
    half = dtype != "float32"
    gelu_rtol = 2e-2 if half else GELU_FP32_RTOL
    a = T.random_array((m, k), _np(dtype), rng=rng)
    b = T.random_array((k, n), _np(dtype), rng=rng)
    pre = T.ref.gemm(a, b)
    if ep.aux != "in":
        bias = T.random_array((n,), _np(dtype), rng=rng) if ep.bias == "in" else None
        if bias is not None:
            pre = pre + bias.astype(np.float64)
        res = _offered(lambda: cublas.matmul(cl.to_device(a), cl.to_device(b),
                                             epilogue=ep.name,
                                             bias=None if bias is None else cl.to_device(bias)))
        if res is None:
            return False
        out, aux = res if ep.aux == "out" else (res, None)
        gelu_like = "gelu" in ep.name.split("_")
        T.assert_close(out, _act(ep, pre), dtype, rtol=gelu_rtol if gelu_like else
                       (2e-2 if half else None), msg=f"{ep.name} {dtype}")
        if ep.aux_kind == "gelu":
            T.assert_close(aux, pre, dtype, rtol=2e-2 if half else None,
                           msg=f"{ep.name} {dtype}: aux holds the GELU input")
        elif ep.aux_kind == "relu":
            bits = _mask_bits(aux, n)
            # away from the pre-activations within rounding of 0
            clear = np.abs(pre) > (1e-2 if half else 1e-4) * np.abs(pre).max()
            assert (bits == (pre > 0))[clear].all(), f"{ep.name}: mask bits differ from the sign"
        return True
    # A backward epilogue: the aux matrix of the matching forward, then dx = (g @ w) * f'(pre)
    # and, for *_bgrad, the bias gradient: dx summed over the rows.
    forward = _offered(lambda: cublas.matmul(cl.to_device(a), cl.to_device(b),
                                             epilogue=f"{ep.aux_kind}_aux"))
    if forward is None:
        return False
    aux = forward[1]
    if ep.aux_kind == "relu":
        slope = _mask_bits(aux, n).astype(np.float64)
    else:
        slope = dgelu(aux.get().astype(np.float64))
    g = T.random_array((m, k), _np(dtype), rng=rng)
    w = T.random_array((k, n), _np(dtype), rng=rng)
    expected = T.ref.gemm(g, w) * slope
    dbias = poisoned((n,), _np(dtype)) if ep.bias == "out" else None
    dx = _offered(lambda: cublas.matmul(cl.to_device(g), cl.to_device(w), epilogue=ep.name,
                                        aux=aux, bias=dbias))
    if dx is None:
        return False
    rtol = 2e-2 if half else (1e-3 if ep.aux_kind == "gelu" else None)
    T.assert_close(dx, expected, dtype, rtol=rtol, msg=f"{ep.name} {dtype}")
    if dbias is not None:
        T.assert_close(dbias, expected.sum(axis=0), dtype, rtol=rtol,
                       msg=f"{ep.name} {dtype}: bias gradient")
    return True


@pytest.mark.parametrize("name", list(cublas.EPILOGUES))
def test_every_epilogue_computes_its_definition(device, rng, name):
    """Each entry of the table runs on this GPU in at least one of float32, bfloat16 and
    float16 (each that cuBLASLt has an algorithm for is checked), and computes what its
    fields say: the bias added or its gradient written, the activation or its derivative,
    the aux matrix written or read."""
    ep = cublas.EPILOGUES[name]
    assert isinstance(ep, cublas.Epilogue) and ep.name == name
    ran = [dt for dt in ("float32", "bfloat16", "float16") if _epilogue_case(ep, dt, rng)]
    assert ran, f"cuBLASLt runs epilogue {name!r} in none of float32, bfloat16, float16"


# -- the one-shots' plans in the one cache ------------------------------------------------------
def test_one_shot_plans_live_under_their_keys(device, rng):
    a = cl.to_device(T.random_array((33, 20), np.float32, rng=rng))
    b = cl.to_device(T.random_array((20, 17), np.float32, rng=rng))
    cl.plan_cache.clear("gemm")
    cublas.gemm(a, b)
    cublas.gemm(a, b)
    plan = _gemm_plan(a, b)
    assert isinstance(plan, cublas.GemmPlan)
    assert len(cached(cublas.GEMM_KEY)) == 1            # the second call found the first's
    cublas.clear_matmul_cache()
    cublas.matmul(a, b, epilogue="relu")
    (entry,) = cached(cublas.MATMUL_KEY, a_shape=a.shape, b_shape=b.shape, epilogue="relu")
    assert isinstance(entry.plan, cublas.Matmul)
    assert cublas.matmul_cache() == {entry.raw_key: entry.plan}


# -- workspaces ---------------------------------------------------------------------------------
def test_release_workspaces_frees_them_and_the_next_call_makes_new_ones(device, rng):
    s = cl.Stream()
    ah = T.random_array((128, 96), np.float32, rng=rng)
    bh = T.random_array((96, 64), np.float32, rng=rng)
    a, b = cl.to_device(ah, stream=s), cl.to_device(bh, stream=s)
    expected = T.ref.gemm(ah, bh)
    T.assert_close(cublas.gemm(a, b, stream=s).get(stream=s), expected, np.float32)
    first = workspace_buffer(device, s.raw_handle)
    assert first.size >= cublas.WORKSPACE_BYTES and not first.closed
    cublas.release_workspaces(device)
    assert first.closed
    for i in range(3):          # the relaunched calls too use the new workspace
        T.assert_close(cublas.gemm(a, b, stream=s).get(stream=s), expected, np.float32,
                       msg=f"call {i} after the release")
    second = workspace_buffer(device, s.raw_handle)
    assert second is not first and not second.closed
    cublas.release_workspaces()
    assert second.closed
