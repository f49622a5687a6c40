"""cuBLAS and cuBLASLt from frameworks' streams, threads and memory: ``gemm``,
``gemm_strided_batched``, ``matmul`` with every epilogue (the backward ones fed by their
forward), and held :class:`~cudalibs.cublas.Matmul` plans (fp8 with per-tensor scales too).

Every one of them relaunches its recorded kernels from the second call of a call shape on;
each combination must give, call for call, the bits of the library call itself."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T

from ._harness import each_combo, run

pytest.importorskip("torch")
pytest.importorskip("cupy")

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
BF16, E4M3 = cl.dtypes.bfloat16, cl.dtypes.float8_e4m3fn


@each_combo
def test_gemm(device, rng, combo):
    m, k, n = 64, 80, 48

    def inputs(r):
        return {"a": T.random_array((m, k), F32, rng=r), "b": T.random_array((k, n), F32, rng=r)}

    def gemm(d, s):
        return (cublas.gemm(d["a"], d["b"], d.get("out"), stream=s),)

    run(combo, rng, inputs=inputs, call=gemm, dtype="float32", outs={"out": ((m, n), F32)},
        kind="gemm", match=lambda key: not key["batched"] and key["a_shape"] == (m, k))


@each_combo
def test_gemm_strided_batched(device, rng, combo):
    batch, m, k, n = 3, 32, 40, 24

    def inputs(r):
        return {"a": T.random_array((batch, m, k), F16, rng=r),
                "b": T.random_array((batch, k, n), F16, rng=r)}

    def gemm_strided_batched(d, s):
        return (cublas.gemm_strided_batched(d["a"], d["b"], d.get("out"), stream=s),)

    run(combo, rng, inputs=inputs, call=gemm_strided_batched, dtype="float16",
        outs={"out": ((batch, m, n), F16)}, kind="gemm",
        match=lambda key: key["batched"] and key["a_shape"] == (batch, m, k))


# -- cublas.matmul and its epilogues ------------------------------------------------------------
# N is a multiple of 128: the ReLU mask then holds no padding bits (which cuBLASLt need not
# write) and the GELU input no padding columns, so every byte of aux is compared.
M, K, N = 64, 96, 128
FORWARD = ("bias", "relu", "gelu", "relu_bias", "gelu_bias")
AUX = ("relu_aux", "gelu_aux", "relu_aux_bias", "gelu_aux_bias")
BACKWARD = ("drelu", "dgelu", "drelu_bgrad", "dgelu_bgrad")


def _aux_spec(epilogue):
    """(shape, dtype) of the auxiliary matrix: the GELU input, or the ReLU bit mask."""
    if "gelu" in epilogue:
        return (M, N), F16
    return (M, N // 8), np.dtype(np.uint8)


def _forward_aux(epilogue, r):
    """The aux matrix a forward ``*_aux`` epilogue writes, as the backward reads it."""
    x = cl.to_device(T.random_array((M, K), F16, rng=r))
    w = cl.to_device(T.random_array((K, N), F16, rng=r))
    _, aux = cublas.matmul(x, w, epilogue="gelu_aux" if "gelu" in epilogue else "relu_aux")
    return aux.get()


@pytest.mark.parametrize("epilogue", FORWARD + AUX + BACKWARD)
@each_combo
def test_matmul_epilogue(device, rng, combo, epilogue):
    has_bias = "bias" in epilogue and epilogue not in BACKWARD
    bgrad = epilogue.endswith("_bgrad")

    def inputs(r):
        h = {"a": T.random_array((M, K), F16, rng=r), "b": T.random_array((K, N), F16, rng=r)}
        if has_bias:
            h["bias"] = T.random_array((N,), F16, rng=r)
        if epilogue in BACKWARD:
            h["aux"] = _forward_aux(epilogue, r)
        return h

    def outs(h):
        o = {"out": ((M, N), F16)}
        if epilogue in AUX:
            o["aux"] = _aux_spec(epilogue)
        if bgrad:
            o["dbias"] = ((N,), F16)
        return o

    def matmul(d, s):
        bias = d.get("bias")
        if bgrad:
            # The bias gradient is written into a given vector (a new one for cudalibs memory).
            bias = d.get("dbias")
            if bias is None:
                bias = cl.full((N,), T.poison_value(F16), F16, stream=s)
        res = cublas.matmul(d["a"], d["b"], bias=bias, epilogue=epilogue, out=d.get("out"),
                            aux=d.get("aux"), stream=s)
        res = res if isinstance(res, tuple) else (res,)
        return res + ((bias,) if bgrad else ())

    run(combo, rng, inputs=inputs, call=matmul, dtype="float16", outs=outs,
        kind="cublaslt_matmul", match=lambda key: key["epilogue"] == epilogue,
        name=f"matmul[{epilogue}]")


# -- held Matmul plans --------------------------------------------------------------------------
@each_combo
def test_matmul_plan(device, rng, combo):
    m, k, n = 64, 48, 80

    def inputs(r):
        return {"a": T.random_array((m, k), BF16, rng=r), "b": T.random_array((k, n), BF16, rng=r),
                "bias": T.random_array((n,), BF16, rng=r)}

    def make(d):
        return cublas.Matmul(d["a"], d["b"], out=d.get("out"), epilogue="gelu_bias")

    def execute(d, s):
        return (d["plan"].execute(d["a"], d["b"], out=d.get("out"), bias=d["bias"], stream=s),)

    run(combo, rng, inputs=inputs, call=execute, dtype="bfloat16",
        outs={"out": ((m, n), BF16)}, plan=make, name="Matmul.execute")


@each_combo
def test_matmul_plan_fp8(device, rng, combo):
    if device.compute_capability < (8, 9):
        pytest.skip("fp8 matmul needs compute capability 8.9 or newer")
    m, k, n = 64, 64, 32     # k and the leading dimensions: multiples of 16 (fp8 kernels)

    def inputs(r):
        # b = w.T of a row-major (n, k) weight: the column-major operand fp8 kernels take.
        return {"a": T.random_array((m, k), E4M3, rng=r, low=-2, high=2),
                "w": T.random_array((n, k), E4M3, rng=r, low=-2, high=2),
                "a_scale": np.array([r.uniform(0.25, 2.0)], np.float32),
                "b_scale": np.array([r.uniform(0.25, 2.0)], np.float32)}

    def make(d):
        return cublas.Matmul(d["a"], d["w"].T, out=d.get("out"), out_dtype=BF16)

    def execute(d, s):
        return (d["plan"].execute(d["a"], d["w"].T, out=d.get("out"), a_scale=d["a_scale"],
                                  b_scale=d["b_scale"], stream=s),)

    got = run(combo, rng, inputs=inputs, call=execute, dtype="bfloat16",
              outs={"out": ((m, n), BF16)}, plan=make, name="Matmul.execute[fp8]")
    assert got[0][0].dtype == BF16


def test_tensor_that_requires_grad_is_refused_before_any_gpu_work(device):
    # A framework's parameter (requires_grad) has no exportable view: the call must say which
    # operand and why, before a plan is made or anything is queued.
    import torch

    a = torch.ones((8, 8), device="cuda", requires_grad=True)
    b = torch.ones((8, 8), device="cuda")
    shapes = [e.key["a_shape"] for e in cl.plan_cache.entries("gemm")]
    with pytest.raises(TypeError, match=r"gemm: a\b.*(?i:grad)"):
        cublas.gemm(a, b)
    assert [e.key["a_shape"] for e in cl.plan_cache.entries("gemm")] == shapes
    # Detached, the same memory goes in without a copy.
    out = cublas.gemm(a.detach(), b)
    np.testing.assert_array_equal(out.get(), np.full((8, 8), 8, np.float32))
