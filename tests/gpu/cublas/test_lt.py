"""cuBLASLt plans against float64 numpy: epilogues, batching, autotune, fp8, lifetime, graphs."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T

from .._sizes import gemm_sizes, gpu_settings
from ._util import dgelu, gelu, on_device, poisoned

GPU = gpu_settings(20)

FORWARD = [None, "bias", "relu", "gelu", "bias_relu", "bias_gelu"]
# cuBLASLt evaluates GELU with a fast tanh: fp32 results carry its approximation error
# (about 1e-5 relative per element) on top of the GEMM's, so fp32 GELU cases get 1e-4.
GELU_FP32_RTOL = 1e-4


def _np(name):
    return cl.dtypes.lookup(name).numpy


def _reference(a, b, bias, epilogue):
    pre = T.ref.gemm(a, b)
    if bias is not None:
        pre = pre + bias.astype(np.float64)
    if epilogue and "relu" in epilogue:
        return np.maximum(pre, 0), pre
    if epilogue and "gelu" in epilogue:
        return gelu(pre), pre
    return pre, pre


def _tol(dtype, epilogue, compute=None):
    if dtype == "float32" and epilogue and "gelu" in epilogue and compute != "tf32":
        return dict(rtol=GELU_FP32_RTOL)
    return dict(dtype=dtype, compute=compute)


#: The largest slope of the tanh-form GELU (1.129, at x = 1.5): it multiplies an error in its
#: input by at most this.
GELU_SLOPE = 1.13
#: The relative error of a fast float32 tanh (PTX's ``tanh.approx.f32`` promises 2**-11), which
#: GELU, ``0.5 x (1 + tanh(...))``, carries times ``0.5 |x|``.
FAST_TANH = 2.0 ** -11


def _pre_bound(a, b, bias, dtype):
    """The largest error of each element of a float16 / bfloat16 bias epilogue's
    pre-activation ``a @ b + bias``, as cuBLASLt computes it.

    It accumulates ``a @ b`` in float32 -- the products of half-precision inputs are exact
    there (2 x 11 significand bits < 24), the sums err by at most ``γ_k (|a| @ |b|)`` -- then
    rounds the product to the output type, adds the bias and rounds the sum (fusing the two
    only saves a rounding).  Each rounding errs by the output's unit roundoff ``u`` times the
    value rounded: the error is relative to ``|a @ b|`` and ``|a @ b + bias|`` element by
    element.  Twice each term, for margin, plus the output's subnormal spacing.
    """
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    prod = a64 @ b64
    pre = prod + bias.astype(np.float64)
    k = a.shape[-1]
    u32 = T.unit_roundoff(np.float32)
    sums = k * u32 / (1 - k * u32) * (np.abs(a64) @ np.abs(b64))
    u = T.unit_roundoff(dtype)
    tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
    return 2 * sums + 2 * u * (np.abs(prod) + np.abs(pre)) + tiny


def _half_bias_bound(a, b, bias, epilogue, dtype):
    """The largest error of each element of a float16 / bfloat16 bias epilogue's output
    (:func:`_pre_bound` carried through the activation: ReLU does not grow an error, GELU by
    at most :data:`GELU_SLOPE`, plus its fast tanh and the rounding of its own output)."""
    bound = _pre_bound(a, b, bias, dtype)
    if epilogue and "gelu" in epilogue:
        pre = T.ref.gemm(a, b) + bias.astype(np.float64)
        # cuBLASLt's bfloat16 GELU approximates more coarsely than its float16 one: seen on an
        # H100 (cuBLASLt 13.1) 2.6% of |pre| off the exact GELU, so it is allowed 2**-5 of it.
        approx = 2.0 ** -5 if np.dtype(dtype).name == "bfloat16" else FAST_TANH * 0.5
        bound = (GELU_SLOPE * bound + approx * np.abs(pre)
                 + 2 * T.unit_roundoff(dtype) * np.abs(gelu(pre)))
    return bound


@pytest.mark.parametrize("epilogue", FORWARD, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@GPU
@given(data=st.data())
def test_matmul_epilogues(device, dtype, epilogue, data):
    m, n, k = data.draw(gemm_sizes(200), label="m, n, k")
    la, lb = (data.draw(st.sampled_from(["C", "T", "padded"]), label=f"layout {x}")
              for x in "ab")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    a = T.random_array((m, k), _np(dtype), rng=rng)
    b = T.random_array((k, n), _np(dtype), rng=rng)
    # The bias as large as the product's entries (RMS sqrt(k) / 3) rather than as the inputs':
    # the error bound below grows with |A||B| (about k / 4), and a bias of magnitude 1 would
    # drown in it -- leaving it out, or adding it to half the columns, would pass.
    spread = max(1.0, np.sqrt(k))
    bias = T.random_array((n,), _np(dtype), rng=rng, low=-spread, high=spread) \
        if epilogue and "bias" in epilogue else None
    out = poisoned((m, n), _np(dtype))
    res = cublas.matmul(on_device(a, la), on_device(b, lb),
                        bias=None if bias is None else cl.to_device(bias), epilogue=epilogue,
                        out=out)
    assert res is out
    expected, _ = _reference(a, b, bias, epilogue)
    what = f"{dtype} {epilogue} m={m} n={n} k={k} layouts={la},{lb}"
    # The error scales with the summands (|A||B| + |bias|), not with the result: a GELU that
    # saturates near 0, a sum that cancels, or a half-precision product rounded before the
    # bias is added leaves an error relative to those summands.
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    if bias is not None:
        scale = scale + np.abs(bias.astype(np.float64))
    T.assert_close(res, expected, **_tol(dtype, epilogue), scale=scale, msg=what)


@GPU
@given(data=st.data())
def test_plan_tf32_and_accumulate(device, data):
    m, n, k = data.draw(gemm_sizes(160), label="m, n, k")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    a = T.random_array((m, k), np.float32, rng=rng)
    b = T.random_array((k, n), np.float32, rng=rng)
    c = T.random_array((m, n), np.float32, rng=rng)
    da, db, dc = cl.to_device(a), cl.to_device(b), cl.to_device(c)
    with cublas.Matmul(da, db, dc, compute="tf32", alpha=0.5, beta=-1.0) as plan:
        out = poisoned((m, n), np.float32)
        plan.execute(da, db, dc, out=out)
        T.assert_close(out, T.ref.gemm(a, b, c, alpha=0.5, beta=-1.0), np.float32,
                       compute="tf32")
        plan.execute(da, db, out=dc)                  # C = D, in place
        T.assert_close(dc, T.ref.gemm(a, b, c, alpha=0.5, beta=-1.0), np.float32,
                       compute="tf32")


@pytest.mark.parametrize("epilogue", ["bias", "bias_gelu", None])
def test_batched_plan(device, rng, epilogue):
    batch, m, n, k = 5, 37, 24, 19
    a = T.random_array((batch, m, k), np.float32, rng=rng)
    w = T.random_array((k, n), np.float32, rng=rng)       # broadcast over the batch
    bias = T.random_array((n,), np.float32, rng=rng)
    res = cublas.matmul(cl.to_device(a), cl.to_device(w),
                        bias=cl.to_device(bias) if epilogue else None, epilogue=epilogue)
    assert res.shape == (batch, m, n)
    expected, _ = _reference(a, w, bias if epilogue else None, epilogue)
    T.assert_close(res, expected, **_tol("float32", epilogue))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_gelu_aux_and_backward(device, rng, dtype):
    m, n, k = 48, 40, 32                  # n a multiple of 8: the aux matrix is packed
    a = T.random_array((m, k), _np(dtype), rng=rng)
    b = T.random_array((k, n), _np(dtype), rng=rng)
    bias = T.random_array((n,), _np(dtype), rng=rng)
    da, db = cl.to_device(a), cl.to_device(b)
    out, aux = cublas.matmul(da, db, bias=cl.to_device(bias), epilogue="gelu_aux_bias")
    assert aux.shape == (m, n)
    expected, pre = _reference(a, b, bias, "gelu")
    T.assert_close(out, expected, **_tol(dtype, "gelu"))
    T.assert_close(aux, pre, dtype)                 # the GELU input, for the backward pass
    # Backward: dx = (g @ w) * gelu'(pre), and the bias gradient sums dx over rows.
    g = T.random_array((m, k), _np(dtype), rng=rng)
    wt = T.random_array((k, n), _np(dtype), rng=rng)
    with cublas.Matmul(cl.to_device(g), cl.to_device(wt), epilogue="dgelu_bgrad",
                       aux_ld=n) as plan:
        dbias = poisoned((n,), _np(dtype))
        dx = plan.execute(cl.to_device(g), cl.to_device(wt), bias=dbias, aux=aux)
    expected_dx = T.ref.gemm(g, wt) * dgelu(aux.get().astype(np.float64))
    T.assert_close(dx, expected_dx, rtol=1e-3 if dtype == "float32" else 2e-2)
    T.assert_close(dbias, expected_dx.sum(axis=0), rtol=1e-3 if dtype == "float32" else 2e-2)


def test_relu_aux_mask(device, rng):
    m, n, k = 33, 130, 20
    a = T.random_array((m, k), np.float16, rng=rng)
    b = T.random_array((k, n), np.float16, rng=rng)
    bias = T.random_array((n,), np.float16, rng=rng)
    out, mask = cublas.matmul(cl.to_device(a), cl.to_device(b), bias=cl.to_device(bias),
                              epilogue="relu_aux_bias")
    expected, pre = _reference(a, b, bias, "relu")
    T.assert_within(out, expected, _half_bias_bound(a, b, bias, "relu", np.float16))
    assert mask.dtype == np.uint8 and mask.shape == (m, 256 // 8)
    # One bit per element of cuBLASLt's column-major D: bit j of our row i, little-endian.
    bits = np.unpackbits(mask.get(), axis=1, bitorder="little")[:, :n].astype(bool)
    # The bit is the sign of cuBLASLt's rounded pre-activation: it must be that of the exact
    # one wherever the two cannot differ in sign, i.e. outside the band |pre| <= its error
    # bound.  Inside the band (ties), either; the band is a few elements in expectation (the
    # bound is about 1e-3 |bias| there), so it may hold no more than 1 % of them.
    tie = np.abs(pre) <= _pre_bound(a, b, bias, np.float16)
    wrong = (bits != (pre > 0)) & ~tie
    print(f"relu mask: {int(tie.sum())} ties of {tie.size}, {int(wrong.sum())} wrong bits")
    assert tie.sum() <= 0.01 * tie.size, f"{int(tie.sum())} pre-activations within rounding of 0"
    assert not wrong.any(), (f"{int(wrong.sum())} mask bits differ from the sign of the "
                             f"pre-activation, first at (row, column) {np.argwhere(wrong)[0]}")


def test_autotuned_plan_equals_heuristic(device, rng):
    m, n, k = 256, 192, 320
    a = T.random_array((m, k), np.float16, rng=rng)
    b = T.random_array((k, n), np.float16, rng=rng)
    bias = cl.to_device(T.random_array((n,), np.float16, rng=rng))
    da, db = cl.to_device(a), cl.to_device(b)
    with cublas.Matmul(da, db, epilogue="bias_relu") as plan:
        first = plan.execute(da, db, bias=bias).get()
        cands = plan.autotune(iterations=3, force=True)
        print("candidates:", cands, "chosen:", plan.algorithm, repr(plan))
        assert all(c["ms"] is not None for c in cands)
        chosen = plan.algorithm
        assert chosen["ms"] == min(c["ms"] for c in cands)
        tuned = plan.execute(da, db, bias=bias).get()
    expected, _ = _reference(a, b, bias.get(), "relu")
    bound = _half_bias_bound(a, b, bias.get(), "bias_relu", np.float16)
    T.assert_within(first, expected, bound, msg="heuristic")
    T.assert_within(tuned, expected, bound, msg="autotuned")
    T.assert_within(tuned, first.astype(np.float64), 2 * bound, msg="autotuned vs heuristic")


def test_every_candidate_is_correct(device, rng):
    a = T.random_array((100, 64), np.float32, rng=rng)
    b = T.random_array((64, 80), np.float32, rng=rng)
    da, db = cl.to_device(a), cl.to_device(b)
    plan = cublas.Matmul(da, db, max_candidates=6)
    for i in range(len(plan.candidates)):
        plan.select(i)
        T.assert_close(plan.execute(da, db), T.ref.gemm(a, b), np.float32, msg=f"candidate {i}")
    plan.free()


def test_plan_lifetime(device, rng):
    a = cl.to_device(T.random_array((16, 16), np.float32, rng=rng))
    plan = cublas.Matmul(a, a)
    assert "Matmul" in repr(plan) and "not planned" in repr(plan)
    plan.plan()
    assert "[1/" in repr(plan)
    plan.free()
    plan.free()                                      # twice is harmless
    assert plan.closed and "closed" in repr(plan)
    with pytest.raises(cl.ClosedError):
        plan.execute(a, a)
    with pytest.raises(cl.ClosedError):
        plan.autotune()


def test_plan_from_descriptions(device, rng):
    plan = cublas.Matmul(((64, 32), np.float32), ((32, 48), np.float32), epilogue="gelu")
    a = T.random_array((64, 32), np.float32, rng=rng)
    b = T.random_array((32, 48), np.float32, rng=rng)
    res = plan.execute(cl.to_device(a), cl.to_device(b))
    T.assert_close(res, gelu(T.ref.gemm(a, b)), rtol=GELU_FP32_RTOL)
    plan.free()


def test_plan_rejects_mismatches(device, rng):
    a = cl.to_device(T.random_array((16, 8), np.float32, rng=rng))
    b = cl.to_device(T.random_array((8, 12), np.float32, rng=rng))
    plan = cublas.Matmul(a, b, epilogue="bias")
    with pytest.raises(ValueError, match="plan was made"):
        plan.execute(b, b)
    with pytest.raises(ValueError, match="needs bias"):
        plan.execute(a, b)
    with pytest.raises(ValueError, match="bias must be"):
        plan.execute(a, b, bias=cl.to_device(np.ones(16, np.float32)))
    # A bias below 16-byte alignment is read through an aligned copy (cuBLASLt refuses some
    # such vectors): the result of the same values aligned, bit for bit.
    values = cl.to_device(np.arange(13, dtype=np.float32))
    got = plan.execute(a, b, bias=values[1:]).get()
    want = plan.execute(a, b, bias=cl.to_device(np.arange(1, 13, dtype=np.float32))).get()
    assert got.tobytes() == want.tobytes()
    # the operands' alignment is what the plan was made for
    with pytest.raises(ValueError, match="not aligned"):
        plan.execute(a, b, bias=cl.to_device(np.ones(12, np.float32)),
                     out=cl.empty((16 * 12 + 1,), np.float32)[1:].reshape(16, 12))
    with pytest.raises(ValueError, match="out"):
        plan.execute(a, b, bias=cl.to_device(np.ones(12, np.float32)),
                     out=cl.empty((16, 12), np.float64))
    plan.free()


def test_matmul_reuses_plans(device, rng):
    cublas.clear_matmul_cache()
    a = cl.to_device(T.random_array((32, 24), np.float16, rng=rng))
    b = cl.to_device(T.random_array((24, 16), np.float16, rng=rng))
    cublas.matmul(a, b, epilogue="relu")
    plans = cublas.matmul_cache()
    assert len(plans) == 1
    for _ in range(3):
        cublas.matmul(a, b, epilogue="relu")
    assert cublas.matmul_cache() == plans


def _fp8_ok(device):
    return device.compute_capability >= (8, 9)


@pytest.mark.parametrize("types", [("float8_e4m3fn", "float8_e4m3fn"),
                                   ("float8_e4m3fn", "float8_e5m2"),
                                   ("float8_e5m2", "float8_e4m3fn")])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16"])
def test_fp8(device, rng, types, out_dtype):
    if not _fp8_ok(device):
        pytest.skip("fp8 needs compute capability >= 8.9")
    m, n, k = 64, 48, 96
    ta, tb = (_np(t) for t in types)
    a = T.random_array((m, k), ta, rng=rng, low=-2, high=2)
    w = T.random_array((n, k), tb, rng=rng, low=-2, high=2)    # b = w.T, column-major
    bias = T.random_array((n,), _np(out_dtype), rng=rng)
    sa, sb = np.float32(0.5), np.float32(1.25)
    da, dw = cl.to_device(a), cl.to_device(w)
    out = poisoned((m, n), _np(out_dtype))
    res = cublas.matmul(da, dw.T, bias=cl.to_device(bias), epilogue="bias", out=out,
                        a_scale=cl.to_device(np.array([sa])),
                        b_scale=cl.to_device(np.array([sb])))
    expected = float(sa) * float(sb) * T.ref.gemm(a, w.T) + bias.astype(np.float64)
    T.assert_close(res, expected, out_dtype, msg=f"fp8 {types} -> {out_dtype}")


def test_fp8_layout_error(device, rng):
    if not _fp8_ok(device):
        with pytest.raises(ValueError, match="8.9"):
            cublas.Matmul(((16, 32), cl.dtypes.float8_e4m3fn),
                          ((32, 16), cl.dtypes.float8_e4m3fn, (1, 32)))
        return
    a = cl.to_device(T.random_array((16, 32), cl.dtypes.float8_e4m3fn, rng=rng))
    b = cl.to_device(T.random_array((32, 16), cl.dtypes.float8_e4m3fn, rng=rng))
    with pytest.raises(ValueError, match="TN"):
        cublas.matmul(a, b)


def test_lt_graph_capture(device, rng):
    graph = getattr(cl, "graph", None) or pytest.importorskip("cudalibs.graph")
    a = T.random_array((64, 40), cl.dtypes.bfloat16, rng=rng)
    b = T.random_array((40, 56), cl.dtypes.bfloat16, rng=rng)
    bias = T.random_array((56,), cl.dtypes.bfloat16, rng=rng)
    s = cl.Stream()
    cublas.prepare(s)
    da, db, dbias = (cl.to_device(x, stream=s) for x in (a, b, bias))
    out = poisoned((64, 56), cl.dtypes.bfloat16, stream=s)
    plan = cublas.Matmul(da, db, out=out, epilogue="bias_gelu")
    s.sync()
    with graph.capture(s) as g:
        plan.execute(da, db, out=out, bias=dbias, stream=s)
    exe = g.instantiate()
    exe.replay(s)
    expected, _ = _reference(a, b, bias, "gelu")
    T.assert_within(out.get(stream=s), expected,
                    _half_bias_bound(a, b, bias, "bias_gelu", cl.dtypes.bfloat16))
    exe.close()
    g.close()
    plan.free()
