"""fp8 GEMM through cuBLASLt against float64 numpy.

The reference is the product of the dequantised inputs -- every fp8 value times its scale,
exact in float64 -- so the only errors are cuBLASLt's: the accumulation (Hopper's fp8 tensor
cores sum with about 14 significant bits and cuBLASLt promotes their partial sums into float32
every 128 elements of K, unless ``fast_accum``), the epilogue (bias, GELU) and the rounding to
the output type.  Checked: every scale mode (per tensor, per row, 1x128 and 128x128 blocks),
bfloat16 / float16 / float32 and fp8 outputs with ``d_scale``, ``amax`` against ``max|D|`` of
the reference before ``d_scale`` (cuBLASLt's definition), bias and GELU epilogues; three calls
per problem on a torch stream, so that the recorded relaunch is in use by the third; one plan
shared by eight threads, bitwise against the serial calls; graph capture; and
``torch._scaled_mm`` as a second oracle for the modes it offers (per tensor, per row).
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import cublas
from cudalibs import testing as T

from .._sizes import gpu_settings
from .._threads import match_serial
from ._util import gelu, poisoned

GPU = gpu_settings(6)

E4, E5, BF16 = cl.dtypes.float8_e4m3fn, cl.dtypes.float8_e5m2, cl.dtypes.bfloat16
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
OUT = {"bfloat16": BF16, "float16": F16, "float32": F32, "float8_e4m3fn": E4,
       "float8_e5m2": E5}
TENSOR = ("tensor", "tensor")
BLOCKS = [("block128", "block128"), ("block128", "block128x128"),
          ("block128x128", "block128")]

#: (scale modes, output type, epilogue) of the main test.
CASES = ([(TENSOR, out, epi) for out in ("bfloat16", "float8_e4m3fn")
          for epi in (None, "bias", "gelu", "gelu_bias")]
         + [(TENSOR, out, epi) for out in ("float16", "float32")
            for epi in (None, "bias", "gelu_bias")]
         + [(TENSOR, "float8_e5m2", epi) for epi in (None, "bias")]
         + [(modes, "bfloat16", epi) for modes in [("row", "row")] + BLOCKS
            for epi in (None, "bias", "gelu_bias")]
         + [(modes, out, epi) for modes in [("row", "row")] + BLOCKS
            for out in ("float16", "float32") for epi in (None, "bias")])

#: The accumulation error, relative to sum |a_i b_i| (both dequantised): the tensor cores
#: keep about 14 bits within each 128-element stretch of K that cuBLASLt promotes to float32,
#: so 2**-11 of the stretch's sum, with a factor 4 of margin.  With fast accumulation the
#: reduced precision runs over the whole of K: 2**-12 per 32 elements.
ACC = 2.0 ** -9
#: The largest slope of the tanh-form GELU, and how far cuBLASLt's GELU was seen to stray
#: from the exact one relative to |pre| (its bfloat16 epilogue on an H100, test_lt.py).
GELU_SLOPE, GELU_APPROX = 1.13, 2.0 ** -5
#: Norm-wise ||out - ref|| / ||ref|| allowed per output type (fp8: a rounding of at most
#: half an ulp, 2**-4 of e4m3's value, 2**-3 of e5m2's).
NORM = {"bfloat16": 1e-2, "float16": 5e-3, "float32": 5e-3, "float8_e4m3fn": 2.0 ** -4,
        "float8_e5m2": 2.0 ** -3}


def _need(device, modes=TENSOR):
    cc = device.compute_capability
    if cc < (8, 9):
        pytest.skip(f"fp8 needs compute capability >= 8.9 (this device: {cc[0]}.{cc[1]})")
    if modes != TENSOR and cc != (9, 0):
        pytest.skip(f"scale modes {modes} need compute capability 9.0 (Hopper); this device "
                    f"is {cc[0]}.{cc[1]}")


def _stream():
    """A torch stream when torch is there (what a framework gives), else one of ours."""
    try:
        import torch
    except ImportError:
        return cl.Stream()
    return torch.cuda.Stream()


# -- inputs and their scales ------------------------------------------------------------------
def _scale_values(rng, shape):
    """Scales spread over 2**-4 .. 2**4 (float32), so a scale applied to the wrong row or block
    shows as an error of the order of the value itself."""
    return np.exp2(rng.uniform(-4, 4, size=shape)).astype(np.float32)


def _scales(rng, which, mode, M, N, K, s, padded=True):
    """``(device scale, expansion to the operand's shape in float64)`` of operand ``which``
    (``"a"``: (M, K); ``"b"``: (K, N) = w.T) in ``mode``, laid out as Matmul documents."""
    kb = K // 128
    kb4 = -(-kb // 4) * 4
    if mode == "tensor":
        v = _scale_values(rng, (1,))
        return cl.to_device(v, stream=s), np.float64(v[0])
    if mode == "row":
        n = M if which == "a" else N
        v = _scale_values(rng, (n,))
        full = v[:, None] if which == "a" else v[None, :]
        return cl.to_device(v, stream=s), full.astype(np.float64)
    if mode == "block128":
        if which == "a":                            # (M, kb), column-major
            v = _scale_values(rng, (M, kb))
            dev = cl.to_device(np.ascontiguousarray(v.T), stream=s).T
            return dev, np.repeat(v, 128, axis=1).astype(np.float64)
        v = _scale_values(rng, (kb, N))             # (kb, N), C-contiguous
        return cl.to_device(v, stream=s), np.repeat(v, 128, axis=0).astype(np.float64)
    # 128x128 blocks: rows of kb block scales padded to kb4 (the padding poisoned: a kernel
    # that read it into a result would show NaN).
    outer = (M if which == "a" else N) // 128
    v = _scale_values(rng, (outer, kb))
    host = np.full((outer, kb4), np.nan, np.float32)
    host[:, :kb] = v
    dev = cl.to_device(host, stream=s)
    if not padded:
        dev = dev[:, :kb]
    full = np.repeat(np.repeat(v, 128, axis=0), 128, axis=1).astype(np.float64)
    if which == "a":
        return dev, full                            # (M/128, kb), rows kb4 apart
    return dev.T, full.T                            # (kb, N/128): w's block scales .T


def _dims(data, modes, out):
    block = modes[0].startswith("block")
    K = data.draw(st.sampled_from([128, 256, 384, 512] if block else [16, 96, 128, 272, 512]),
                  label="K")

    def side(blocked, label, narrow):
        if blocked:
            choices = [128, 256, 384]
        elif narrow:                                # an fp8 output: 16-byte rows
            choices = [16, 48, 144, 256]
        elif modes == TENSOR:
            choices = [16, 33, 40, 136, 256] if label == "M" else [8, 40, 136, 256]
        else:
            choices = [8, 40, 136, 264]
        return data.draw(st.sampled_from(choices), label=label)

    M = side(modes[0] == "block128x128", "M", False)
    N = side(modes[1] == "block128x128", "N", OUT[out].itemsize == 1)
    return M, N, K


class Problem:
    """One drawn fp8 problem: host inputs, device inputs and scales, and the float64 reference
    with the error bounds of each element."""

    def __init__(self, rng, modes, out, epilogue, M, N, K, types, fast, s, padded=True):
        ta, tb = types
        self.M, self.N, self.K, self.out, self.fast = M, N, K, OUT[out], fast
        self.modes, self.epilogue = modes, epilogue
        a = T.random_array((M, K), ta, rng=rng, low=-2, high=2)
        w = T.random_array((N, K), tb, rng=rng, low=-2, high=2)        # b = w.T
        self.a, self.w = cl.to_device(a, stream=s), cl.to_device(w, stream=s)
        self.a_scale, fa = _scales(rng, "a", modes[0], M, N, K, s, padded)
        self.b_scale, fb = _scales(rng, "b", modes[1], M, N, K, s, padded)
        ad, bd = a.astype(np.float64) * fa, w.T.astype(np.float64) * fb
        self.prod = prod = ad @ bd
        self.sums = np.abs(ad) @ np.abs(bd)
        self.bias = None
        pre = prod
        if epilogue and "bias" in epilogue:
            r = float(np.sqrt(np.mean(prod ** 2)))
            bias_t = F16 if self.out == F16 else BF16
            bias = T.random_array((N,), bias_t, rng=rng, low=-r, high=r)
            self.bias = cl.to_device(bias, stream=s)
            pre = prod + bias.astype(np.float64)
        self.pre = pre
        self.ref = gelu(pre) if epilogue and "gelu" in epilogue else pre
        self.amax_ref = float(np.max(np.abs(self.ref)))
        # An fp8 output's scale: the largest |D| * d_scale near 200, inside both formats.
        self.d_scale_host = np.float32(200.0 / self.amax_ref)

    @property
    def e_pre(self):
        """The bound of each element's error before the activation."""
        acc = (max(ACC, self.K * 2.0 ** -17) if self.fast else ACC) * self.sums
        if self.bias is None:
            return acc
        # cuBLASLt may round the product to 16 bits before adding the bias.
        return acc + 2 * 2.0 ** -8 * (np.abs(self.prod) + np.abs(self.pre))

    @property
    def err(self):
        """The bound of each element's error before the rounding to the output type."""
        if self.epilogue and "gelu" in self.epilogue:
            return GELU_SLOPE * self.e_pre + GELU_APPROX * np.abs(self.pre)
        return self.e_pre

    def plan(self, **kw):
        fp8 = self.out.itemsize == 1
        return cublas.Matmul(self.a, self.w.T, out_dtype=self.out, epilogue=self.epilogue,
                             scale_mode=self.modes, fast_accum=self.fast, amax=fp8, **kw)

    def call_args(self, s):
        """The call's arguments beside a and b; an fp8 output's d_scale and amax fresh, the
        amax in a slot of a history buffer, as delayed scaling keeps them (4-byte aligned)."""
        kw = dict(a_scale=self.a_scale, b_scale=self.b_scale, bias=self.bias, stream=s)
        if self.out.itemsize == 1:
            kw["d_scale"] = cl.to_device(np.array([self.d_scale_host]), stream=s)
            kw["amax"] = poisoned((4,), F32, stream=s)[1:2]
        return kw

    def check(self, out, amax=None, what=""):
        """``out`` (host) against the reference: element-wise within the bound of each
        element, and norm-wise; ``amax`` against ``max|D|`` before ``d_scale``."""
        name = self.out.name
        got = np.asarray(out).astype(np.float64)
        err = self.err
        if self.out.itemsize == 1:
            want = self.ref * float(self.d_scale_host)
            e = err * float(self.d_scale_host)
            bound = fp8_ulp(np.abs(want) + e, self.out) + e
        else:
            want = self.ref
            u = T.unit_roundoff(self.out)
            tiny = float(ml_dtypes.finfo(self.out).smallest_subnormal)
            bound = err + u * (np.abs(want) + err) + tiny
        T.assert_within(got, want, bound, msg=f"{what} element-wise")
        rel = np.linalg.norm(got - want) / np.linalg.norm(want)
        tol = NORM[name] * (2 if self.fast and self.out.itemsize > 1 else 1)
        assert rel <= tol, f"{what}: ||out - ref|| / ||ref|| = {rel:.2e} > {tol:.1e}"
        if amax is not None:
            # Its error is at most the largest element's.
            got_amax = float(np.asarray(amax).reshape(-1)[0])
            slack = float(np.max(err)) + 1e-6 * self.amax_ref
            assert abs(got_amax - self.amax_ref) <= slack, \
                f"{what}: amax {got_amax} vs max|D| {self.amax_ref} (+-{slack:.3g})"


def fp8_ulp(x, dtype):
    """The spacing of ``dtype``'s values at magnitude ``x`` (its subnormal spacing below the
    smallest normal)."""
    fi = ml_dtypes.finfo(dtype)
    e = np.floor(np.log2(np.maximum(np.abs(x), float(fi.smallest_normal))))
    return np.exp2(e - fi.nmant)


def _three_calls(problem, plan, s):
    """Three calls of ``plan``, each into fresh poisoned outputs, checked; the relaunch
    records on the second and runs the third.  Returns the outputs (host)."""
    got = []
    for i in range(3):
        kw = problem.call_args(s)
        out = poisoned((problem.M, problem.N), problem.out, stream=s)
        res = plan.execute(problem.a, problem.w.T, out=out, **kw)
        assert res is out
        host = out.get(stream=s)
        amax = kw["amax"].get(stream=s) if "amax" in kw else None
        problem.check(host, amax, what=f"call {i} of {plan!r}")
        got.append((host, amax))
    for i in (1, 2):
        assert got[i][0].tobytes() == got[0][0].tobytes(), f"call {i} differs from call 0"
        if got[0][1] is not None:
            assert got[i][1].tobytes() == got[0][1].tobytes(), f"call {i}: amax differs"
    # The second call recorded the call shape (or said why it cannot be relaunched); a
    # recording that raised would leave it pending.
    info = plan.relaunch_info()
    assert info["pending"] == 0 and info["failed"] == 0 and \
        info["recorded"] + info["refused"] >= 1, info
    return got


# -- every mode, output type and epilogue -------------------------------------------------------
@pytest.mark.parametrize("modes, out, epilogue", CASES,
                         ids=[f"{m[0]}-{m[1]}-{o}-{e}" for m, o, e in CASES])
@GPU
@given(data=st.data())
def test_fp8_matmul(device, modes, out, epilogue, data):
    _need(device, modes)
    M, N, K = _dims(data, modes, out)
    if modes == TENSOR:
        types = data.draw(st.sampled_from([(E4, E5), (E5, E4)] if out == "float8_e5m2" else
                                          [(E4, E4), (E4, E5), (E5, E4)]), label="types")
    else:
        types = (E4, E4)
    fast = modes[0] in ("tensor", "row") and data.draw(st.booleans(), label="fast_accum")
    padded = data.draw(st.booleans(), label="padded block scales")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    s = _stream()
    pb = Problem(rng, modes, out, epilogue, M, N, K, types, fast, s, padded)
    with pb.plan() as plan:
        _three_calls(pb, plan, s)
        print(repr(plan), plan.relaunch_info())


def test_fp8_fast_accum_is_close_to_the_split_sum(device, rng):
    _need(device)
    s = _stream()
    pb = Problem(rng, TENSOR, "bfloat16", None, 256, 256, 2048, (E4, E4), False, s)
    with pb.plan() as exact, cublas.Matmul(pb.a, pb.w.T, fast_accum=True) as fast:
        kw = pb.call_args(s)
        one = exact.execute(pb.a, pb.w.T, **kw).get(stream=s)
        two = fast.execute(pb.a, pb.w.T, **kw).get(stream=s)
    pb.check(one, what="split accumulation")
    pb.fast = True
    pb.check(two, what="fast accumulation")
    diff = np.linalg.norm(one.astype(np.float64) - two.astype(np.float64))
    print(f"fast vs split accumulation, K=2048: ||diff|| / ||ref|| = "
          f"{diff / np.linalg.norm(pb.ref):.2e}")


@pytest.mark.parametrize("modes", [TENSOR, ("block128", "block128x128")],
                         ids=["tensor", "block128-block128x128"])
def test_fp8_autotune(device, rng, modes):
    """autotune() times every candidate with scales of the plan's layouts; the choice is
    right."""
    _need(device, modes)
    s = cl.Stream()
    pb = Problem(rng, modes, "bfloat16", "bias", 256, 256, 512, (E4, E4), False, s)
    with pb.plan() as plan:
        cands = plan.autotune(rounds=2, stream=s, store=False, force=True)
        assert cands and all(c["ms"] is not None for c in cands), cands
        pb.check(plan.execute(pb.a, pb.w.T, **pb.call_args(s)).get(stream=s),
                 what=repr(plan))


# -- the GELU input of an fp8 product -------------------------------------------------------
@pytest.mark.parametrize("out", ["bfloat16", "float16"])
def test_fp8_gelu_aux(device, rng, out):
    """``gelu_aux_bias`` writes the GELU input for the backward pass in the output type; an
    fp8 (or float32) output has no such kernel in cuBLASLt and is refused by name."""
    _need(device)
    s = _stream()
    M, N, K = 128, 144, 256
    pb = Problem(rng, TENSOR, out, "gelu_aux_bias", M, N, K, (E4, E4), False, s)
    with pb.plan() as plan:
        assert plan.aux_shape == (M, N) and plan._aux_dtype == pb.out
        for i in range(3):
            aux = poisoned(plan.aux_shape, pb.out, stream=s)
            res, aux_res = plan.execute(pb.a, pb.w.T, aux=aux, **pb.call_args(s))
            assert aux_res is aux
            pb.check(res.get(stream=s), what=f"call {i} out")
            u = T.unit_roundoff(pb.out)
            T.assert_within(aux.get(stream=s), pb.pre, pb.e_pre + u * (np.abs(pb.pre) +
                                                                        pb.e_pre) + 1e-7,
                            msg=f"call {i} aux ({pb.out})")
    for od in (E4, F32):
        with pytest.raises(ValueError, match="gelu_aux_bias"):
            cublas.Matmul(pb.a, pb.w.T, out_dtype=od, epilogue="gelu_aux_bias")


# -- one plan, eight threads ----------------------------------------------------------------------
@pytest.mark.parametrize("modes, out, epilogue", [(TENSOR, "float8_e4m3fn", "bias"),
                                                  (("block128", "block128x128"), "bfloat16",
                                                   "gelu_bias"),
                                                  (("row", "row"), "float16", None)])
def test_fp8_plan_shared_by_threads(device, rng, modes, out, epilogue):
    """Eight threads share one plan, each on its own stream with its own problems' scales and
    its own amax: every result equals the serial one bit for bit."""
    _need(device, modes)
    s0 = cl.Stream()
    problems = [Problem(rng, modes, out, epilogue, 256, 256, 256, (E4, E4), False, s0)
                for _ in range(4)]
    fp8 = OUT[out].itemsize == 1
    d_scales = [cl.to_device(np.array([pb.d_scale_host]), stream=s0) for pb in problems]
    plan = problems[0].plan()

    def call(i):
        pb = problems[i]

        def run(s):
            kw = dict(a_scale=pb.a_scale, b_scale=pb.b_scale, bias=pb.bias, stream=s)
            if fp8:
                kw.update(d_scale=d_scales[i], amax=cl.empty((1,), F32, stream=s))
            res = plan.execute(pb.a, pb.w.T, **kw)
            return (res, kw["amax"]) if fp8 else res
        return run

    calls = [call(i) for i in range(len(problems))]
    # The call shape is recorded (or refused) before the threads start, as a framework's
    # first steps would do it.
    for _ in range(3):
        for run in calls:
            run(s0)
    s0.sync()
    print(plan.relaunch_info())
    serial = match_serial(device, calls, repeats=6, copy_each=True,
                          pick=lambda t, r: ((t + r) % len(problems),))
    for pb, got in zip(problems, serial):
        pb.check(got[0][1], got[1][1] if fp8 else None, what="serial")
    plan.close()


# -- graph capture ------------------------------------------------------------------------------
@pytest.mark.parametrize("modes, out, epilogue", [(TENSOR, "float8_e4m3fn", "gelu_bias"),
                                                  (("block128x128", "block128"), "bfloat16",
                                                   "bias")])
def test_fp8_graph_capture(device, rng, modes, out, epilogue):
    _need(device, modes)
    s = cl.Stream()
    cublas.prepare(s)
    pb = Problem(rng, modes, out, epilogue, 256, 128, 384, (E4, E4), False, s)
    kw = pb.call_args(s)
    o = poisoned((pb.M, pb.N), pb.out, stream=s)
    plan = pb.plan().plan()
    plan.execute(pb.a, pb.w.T, out=o, **kw)           # the first call, outside the capture
    s.sync()
    with cl.graph.capture(s) as g:
        plan.execute(pb.a, pb.w.T, out=o, **kw)
    exe = g.instantiate()
    for i in range(2):
        o.fill(T.poison_value(pb.out), s)
        if "amax" in kw:
            kw["amax"].fill(np.float32(np.nan), s)
        exe.replay(s)
        pb.check(o.get(stream=s), kw["amax"].get(stream=s) if "amax" in kw else None,
                 what=f"replay {i}")
    exe.close()
    g.close()
    plan.close()


# -- torch._scaled_mm as a second oracle --------------------------------------------------------
@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize("fast", [False, True])
def test_fp8_beside_torch_scaled_mm(device, rng, mode, fast):
    """The one-shot ``cublas.matmul`` and ``torch._scaled_mm`` on the same memory, bfloat16
    out: both within the reference's bounds, and within bfloat16 rounding of each other."""
    torch = pytest.importorskip("torch")
    modes = (mode, mode)
    _need(device, modes)
    ts = torch.cuda.Stream()
    M, N, K = 256, 384, 512
    pb = Problem(rng, modes, "bfloat16", None, M, N, K, (E4, E4), fast, ts)
    with torch.cuda.stream(ts):
        ta = torch.from_dlpack(pb.a.view(np.uint8)).view(torch.float8_e4m3fn)
        tw = torch.from_dlpack(pb.w.view(np.uint8)).view(torch.float8_e4m3fn)
        sa, sb = torch.from_dlpack(pb.a_scale), torch.from_dlpack(pb.b_scale)
        if mode == "row":
            sa, sb = sa.reshape(M, 1), sb.reshape(1, N)
        else:
            sa, sb = sa.reshape(()), sb.reshape(())
        theirs = torch._scaled_mm(ta, tw.t(), scale_a=sa, scale_b=sb,
                                  out_dtype=torch.bfloat16, use_fast_accum=fast)
        theirs_h = theirs.float().cpu().numpy()
    cublas.clear_matmul_cache()
    ours = []
    for _ in range(3):                                 # the third call is a relaunch
        r = cublas.matmul(pb.a, pb.w.T, a_scale=pb.a_scale, b_scale=pb.b_scale,
                          scale_mode=mode, fast_accum=fast, stream=ts)
        ours.append(r.get(stream=ts))
    assert len(cublas.matmul_cache()) == 1
    for i, o in enumerate(ours):
        pb.check(o, what=f"cublas.matmul call {i}")
    pb.check(theirs_h, what="torch._scaled_mm")
    diff = np.linalg.norm(ours[0].astype(np.float64) - theirs_h) / np.linalg.norm(theirs_h)
    assert diff <= (2e-2 if fast else 1e-2), f"ours vs torch: {diff:.2e}"
    print(f"{mode} fast_accum={fast}: ours vs torch._scaled_mm {diff:.2e}")
