"""The fp8 training helpers (ptx/fp8.cu through cudalibs.kernels.fp8) against the references of
cudalibs.testing.ref._fp8, with PyTorch as a second oracle when importable.

Quantization is exact given the float32 product, so it is compared bit for bit: on every
float16 and bfloat16 value, on random float32 bit patterns (NaN, infinities and subnormals
included), and on random tensors of every shape class.  amax is exact, dequantization is one
float32 product rounded once, and the delayed-scaling update is the float32 rule of the
reference: all bitwise too.  Random inputs have no zeros; outputs are poisoned before the
kernels write them (with NaN, and where NaN is a valid result also with another byte, so that
an element left unwritten cannot match).  Each shape is called three times.  Then the same
work on a PyTorch stream, from eight threads bitwise against a serial run, and captured into
a CUDA graph whose replays pick up the scale and history the previous replay (or the host)
wrote.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import kernels as K
from cudalibs import ptx as P
from cudalibs import testing as T
from cudalibs.runtime import ptxlib

from .._sizes import bound, gpu_settings
from .._threads import match_serial
from .test_train import torch_or_none

GPU = gpu_settings(20)

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
BF16 = cl.dtypes.bfloat16
E4M3, E5M2 = cl.dtypes.float8_e4m3fn, cl.dtypes.float8_e5m2
WIDE = [F32, F16, BF16]
FP8 = [E4M3, E5M2]
IDS = lambda d: np.dtype(d).name  # noqa: E731
F32_MAX = float(np.finfo(np.float32).max)

# Sizes around a warp, a block of 256 threads and the grid-stride loop, and larger draws.
n_st = st.one_of(st.sampled_from([1, 2, 31, 32, 33, 255, 256, 257, 4097, 70001]),
                 st.integers(1, bound(5000, 1 << 22)))


# -- helpers -----------------------------------------------------------------------------------
def bits(a) -> np.ndarray:
    a = np.ascontiguousarray(a.get() if hasattr(a, "get") else a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def assert_bits(got, want, msg=""):
    """Bit for bit, naming the first elements that differ."""
    g, w = bits(got).reshape(-1), bits(want).reshape(-1)
    wrong = np.flatnonzero(g != w)
    assert wrong.size == 0, (f"{msg}: {wrong.size} of {w.size} elements differ, first (index, "
                             f"got, want) {[(int(i), hex(g[i]), hex(w[i])) for i in wrong[:6]]}")


def assert_values(got, want, msg=""):
    """NaN where ``want`` is NaN (any payload), the same bits everywhere else."""
    g = np.ascontiguousarray(got.get() if hasattr(got, "get") else got)
    w = np.ascontiguousarray(want)
    nan = np.isnan(w.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(g.astype(np.float32)), nan, err_msg=f"{msg}: NaNs")
    assert_bits(g[~nan], w[~nan], msg)


def scalar(value) -> cl.DeviceArray:
    return cl.to_device(np.float32([value]))


def poisoned(shape, dtype, byte=None):
    """An output filled with NaN, or with ``byte`` in every byte."""
    if byte is None:
        return cl.to_device(np.full(shape, T.poison_value(dtype), dtype=dtype))
    return cl.to_device(np.full(np.dtype(dtype).itemsize * int(np.prod(shape)), byte,
                                np.uint8).view(dtype).reshape(shape))


def spread(shape, dtype, rng, octaves):
    """Random nonzero values over ``2**±octaves`` times ±[0.1, 1], rounded to ``dtype``."""
    x = T.random_array(shape, F32, rng=rng)
    x = x * np.exp2(rng.integers(-octaves, octaves + 1, size=x.shape)).astype(np.float32)
    return x.astype(dtype)


def dequantized(q, scale_inv, dtype) -> np.ndarray:
    """What the kernel writes: the exact product rounded to float32, then to ``dtype``."""
    with np.errstate(over="ignore", invalid="ignore"):
        return T.ref.dequantize_fp8(q, scale_inv).astype(np.float32).astype(dtype)


# -- loading -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", P.ENTRIES["fp8"])
def test_entry_loads_and_takes_its_block(device, name):
    # the wrappers launch 256 threads a block, the delayed-scaling update 32 x 16
    need = 512 if name.startswith("delayed_scale_update") else 256
    assert ptxlib.kernel(device, name).max_threads_per_block >= need


# -- quantize: every 16-bit value, random float32 bits -----------------------------------------
@pytest.mark.parametrize("fp8", FP8, ids=IDS)
@pytest.mark.parametrize("dtype", [F16, BF16], ids=IDS)
def test_quantize_every_16_bit_value(device, dtype, fp8):
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype)
    dx = cl.to_device(x)
    for s in (1.0, 2.0 ** -7, 3.3):      # exact, a power of two, and a rounding product
        scale = scalar(s)
        want = T.ref.quantize_fp8_f32(x, s, fp8)
        # x holds every NaN, so NaN poison alone could hide an unwritten NaN: two poisons
        for byte in (None, 0x5A):
            out, am = poisoned(x.shape, fp8, byte), poisoned((), F32)
            assert K.quantize_fp8(dx, scale, out, amax=am) is out
            assert_bits(out, want, f"{dtype.name} -> {fp8.name}, scale {s}")
            assert np.isnan(am.get())            # x holds NaN: the amax propagates it
    finite = x[np.isfinite(x.astype(np.float32))]
    am = poisoned((), F32)
    K.amax(cl.to_device(finite), am)
    assert float(am.get()) == T.ref.amax(finite)


@pytest.mark.parametrize("fp8", FP8, ids=IDS)
@GPU
@given(n=n_st, scale_exp=st.integers(-20, 20), seed=st.integers(0, 2**31))
def test_quantize_random_float32_bits(device, fp8, n, scale_exp, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    s = np.float32(rng.uniform(1, 2) * 2.0 ** scale_exp)
    dx, scale = cl.to_device(x), scalar(s)
    want = T.ref.quantize_fp8_f32(x, s, fp8)
    for byte in (None, 0xA5, None):
        out = poisoned(n, fp8, byte)
        K.quantize_fp8(dx, scale, out, dtype=fp8)
        assert_bits(out, want, f"float32 -> {fp8.name}, scale {s}")


# -- quantize, amax and dequantize on random tensors -------------------------------------------
@pytest.mark.parametrize("fp8", FP8, ids=IDS)
@pytest.mark.parametrize("dtype", WIDE, ids=IDS)
@GPU
@given(shape=st.one_of(st.sampled_from([(1,), (7, 33), (2, 3, 257)]),
                       n_st.map(lambda n: (n,))),
       scale_exp=st.integers(-8, 8), seed=st.integers(0, 2**31))
def test_quantize_dequantize_amax(device, dtype, fp8, shape, scale_exp, seed):
    rng = np.random.default_rng(seed)
    x = spread(shape, dtype, rng, 14 if dtype == F16 else 30)
    dx = cl.to_device(x)
    base = rng.uniform(1, 2) * 2.0 ** scale_exp
    for s in (base, base * 1.7, base / 3):                      # three calls of the shape
        s = np.float32(s)
        inv = np.float32(1) / s
        scale, scale_inv = scalar(s), scalar(inv)
        out, am = poisoned(shape, fp8), poisoned((), F32)
        assert K.quantize_fp8(dx, scale, out, amax=am) is out
        q = T.ref.quantize_fp8_f32(x, s, fp8)
        assert_bits(out, q, f"quantize, scale {s}")
        assert float(am.get()) == T.ref.amax(x)
        # the recorded amax and the one-pass amax agree; accumulate folds in a maximum
        one = poisoned((), F32)
        assert K.amax(dx, one) is one
        assert_bits(one, am.get(), "amax")
        big = scalar(T.ref.amax(x) * 2)
        K.quantize_fp8(dx, scale, out, amax=big, accumulate_amax=True)
        assert float(big.get()[0]) == float(np.float32(T.ref.amax(x) * 2))
        for odt in WIDE:
            back = poisoned(shape, odt)
            assert K.dequantize_fp8(out, scale_inv, odt, back) is back
            assert_values(back, dequantized(q, inv, odt), f"dequantize to {odt.name}")
        # the allocated forms: fp8 of out's type by default float8_e4m3fn, float32 back
        assert K.quantize_fp8(dx, scale).dtype == E4M3
        assert_values(K.dequantize_fp8(out, scale_inv), dequantized(q, inv, F32), "float32")


# -- amax --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", WIDE, ids=IDS)
@GPU
@given(n=st.one_of(st.just(0), n_st), special=st.sampled_from([None, "nan", "inf", "-inf"]),
       accumulate=st.booleans(), seed=st.integers(0, 2**31))
def test_amax(device, dtype, n, special, accumulate, seed):
    rng = np.random.default_rng(seed)
    x = spread(n, dtype, rng, 10)
    if special and n:
        x[rng.integers(n)] = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}[special]
    dx = cl.to_device(x)
    start = float(np.float32(rng.uniform(0, 2)))
    for _ in range(3):
        out = scalar(start) if accumulate else poisoned((), F32)
        assert K.amax(dx, out, accumulate=accumulate) is out
        want = T.ref.amax(x)
        if accumulate:
            want = max(want, start) if want == want else want
        got = float(out.get().reshape(-1)[0])
        assert got == want or (got != got and want != want), (got, want)


# -- delayed scaling ---------------------------------------------------------------------------
SPECIAL_AMAX = [0.0, -1.0, np.inf, np.nan, 1e-40, 3e38]


@pytest.mark.parametrize("algo", ["max", "most_recent"])
@GPU
@given(length=st.one_of(st.sampled_from([1, 2, 127, 128, 129, 1024]),
                        st.integers(1, bound(300, 4096))),
       tensors=st.one_of(st.none(), st.sampled_from([1, 31, 32, 33, 100]),
                         st.integers(1, bound(70, 2000))),
       margin=st.sampled_from([0, 1, 3, -1, 0.5]), fp8=st.sampled_from(FP8),
       specials=st.booleans(), seed=st.integers(0, 2**31))
def test_delayed_scale_update(device, algo, length, tensors, margin, fp8, specials, seed):
    rng = np.random.default_rng(seed)
    shape = (length,) if tensors is None else (length, tensors)
    n = 1 if tensors is None else tensors
    per = () if tensors is None and rng.random() < 0.5 else (n,)
    hist = (rng.random(shape) * 10.0 ** rng.integers(-3, 4, shape)).astype(np.float32)
    scale = (rng.random(n) + 0.5).astype(np.float32).reshape(per)
    inv = poisoned(per, F32)
    dh, ds = cl.to_device(hist), cl.to_device(scale)
    top = T.ref.FP8_MAX[fp8]
    for step in range(3):                                       # three updates in a row
        amax = (rng.random(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
        if specials:
            pick = rng.random(n) < 0.4
            amax[pick] = rng.choice(SPECIAL_AMAX, size=n)[pick]
        amax = amax.reshape(per)
        res = K.delayed_scale_update(dh, cl.to_device(amax), ds, inv, margin=margin,
                                     fp8_max=top, algo=algo)
        assert res[0] is ds and res[1] is inv
        hist, e_scale, e_inv = T.ref.delayed_scale_update(hist, amax, scale, margin=margin,
                                                          fp8_max=top, algo=algo)
        hist, scale = hist.astype(np.float32), e_scale.astype(np.float32)
        assert_values(dh, hist, f"history, step {step}")
        assert_bits(ds, scale, f"scale, step {step}")
        assert_bits(inv, e_inv.astype(np.float32), f"scale_inv, step {step}")


def test_delayed_scale_update_edge_values(device):
    """Every case of the rule in one history of 6 tensors."""
    hist = np.float32([[1.0, 2.0, np.nan, 0.0, 1.0, 5.0],
                       [4.0, 2.0, 1.0, 0.0, 1.0, np.inf]])
    amax = np.float32([2.0, 0.0, 3.0, 0.0, 1e-40, 1.0])
    scale = np.float32([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    dh, ds, inv = cl.to_device(hist), cl.to_device(scale), poisoned(6, F32)
    K.delayed_scale_update(dh, cl.to_device(amax), ds, inv)
    np.testing.assert_array_equal(dh.get(), np.float32([[2.0, 0.0, 3.0, 0.0, 1e-40, 1.0],
                                                        [1.0, 2.0, np.nan, 0.0, 1.0, 5.0]]))
    # max of the window 2 -> 224; 2 -> 224 (this step's 0 does not matter); NaN -> kept;
    # all zeros -> kept; 1 -> 448 (the tiny amax is not the maximum); 5 -> 89.6
    want = np.float32([224.0, 224.0, 3.0, 4.0, 448.0, 448 / 5])
    assert_bits(ds, want, "scale")
    assert_bits(inv, np.float32(1) / want, "scale_inv")
    # most_recent: the tiny amax overflows the quotient: FLT_MAX
    K.delayed_scale_update(dh, cl.to_device(amax), ds, inv, algo="most_recent")
    assert ds.get()[4] == F32_MAX and inv.get()[4] == np.float32(1) / np.float32(F32_MAX)


# -- bad input ---------------------------------------------------------------------------------
def test_bad_arguments_raise_before_any_launch(device, monkeypatch):
    launched = []
    monkeypatch.setattr(ptxlib, "launch", lambda *a, **k: launched.append(a))
    x = cl.to_device(T.random_array((4, 8), F32, rng=0))
    s = scalar(1.0)
    with pytest.raises(TypeError, match="quantize_fp8: scale must be a float32 device array"):
        K.quantize_fp8(x, 2.0)
    with pytest.raises(TypeError, match="quantize_fp8: x is a host numpy array"):
        K.quantize_fp8(np.ones(4, np.float32), s)
    with pytest.raises(TypeError, match="dtype must be one of"):
        K.quantize_fp8(x, s, dtype=np.float16)
    with pytest.raises(TypeError, match="dequantize_fp8: q has dtype float32"):
        K.dequantize_fp8(x, s)
    with pytest.raises(ValueError, match=r"amax must have shape \(3,\)"):
        K.delayed_scale_update(cl.zeros((8, 3)), cl.zeros(2), cl.zeros(3), cl.zeros(3))
    with pytest.raises(ValueError, match="amax_history overlaps amax"):
        h = cl.zeros((8, 3))
        K.delayed_scale_update(h, h[0], cl.zeros(3), cl.zeros(3))
    closed = scalar(1.0)
    closed.close()
    with pytest.raises(cl.ClosedError, match="scale is closed"):
        K.quantize_fp8(x, closed)
    with pytest.raises(cl.ClosedError, match="scale_inv is closed"):
        K.dequantize_fp8(cl.to_device(np.zeros(4, E4M3)), closed)
    assert launched == []


# -- a PyTorch stream, and PyTorch's own results -----------------------------------------------
@pytest.mark.parametrize("fp8", FP8, ids=IDS)
def test_on_a_torch_stream_against_torch(device, rng, fp8):
    torch = torch_or_none()
    if torch is None:
        pytest.skip("torch with CUDA is not importable")
    tfp8 = {E4M3: torch.float8_e4m3fn, E5M2: torch.float8_e5m2}[fp8]
    top = T.ref.FP8_MAX[fp8]
    side = torch.cuda.Stream()
    hist = torch.zeros(16, device="cuda")
    scale, scale_inv = torch.ones(1, device="cuda"), torch.ones(1, device="cuda")
    e_hist, e_scale = np.zeros(16, np.float32), np.ones(1, np.float32)
    for call in range(3):
        x = spread((33, 257), F32, rng, 12)
        tx = torch.from_numpy(x).cuda()
        tq = torch.empty(x.shape, dtype=torch.uint8, device="cuda")
        amax = torch.full((1,), float("nan"), device="cuda")
        back = torch.full(x.shape, float("nan"), device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        q = cl.asarray(tq).view(fp8)
        K.quantize_fp8(tx, scale, q, amax=amax, stream=side)
        K.dequantize_fp8(q, scale_inv, out=back, stream=side)
        K.delayed_scale_update(hist, amax, scale, scale_inv, fp8_max=top, stream=side)
        side.synchronize()
        # torch's own: the product in float32 on the GPU, clamped, then its fp8 conversion
        old_scale = torch.from_numpy(e_scale).cuda()
        want = torch.clamp(tx * old_scale, -top, top).to(tfp8).view(torch.uint8)
        assert torch.equal(tq, want), f"call {call}"
        assert_bits(tq.cpu().numpy(), T.ref.quantize_fp8_f32(x, e_scale[0], fp8),
                    f"call {call}")
        assert amax.item() == torch.amax(tx.abs()).item() == T.ref.amax(x)
        # back is q * scale_inv as it was when the call ran (the update came after)
        assert_values(back.cpu().numpy(), dequantized(tq.cpu().numpy().view(fp8),
                                                      np.float32(1) / e_scale[0], F32),
                      f"dequantize, call {call}")
        e_hist, s64, _ = T.ref.delayed_scale_update(e_hist, [T.ref.amax(x)], e_scale,
                                                    fp8_max=top)
        e_hist, e_scale = e_hist.astype(np.float32), s64.astype(np.float32)
        assert_bits(hist.cpu().numpy(), e_hist, f"history, call {call}")
        assert_bits(scale.cpu().numpy(), e_scale, f"scale, call {call}")


# -- threads -----------------------------------------------------------------------------------
def _work(seed, stream):
    """Quantize (recording the amax), dequantize and update the scale of one tensor, then one
    update of a 2-D history, all on ``stream``."""
    rng = np.random.default_rng(seed)
    dtype = WIDE[seed % 3]
    fp8 = FP8[seed % 2]
    x = cl.to_device(spread((64, 300 + seed), dtype, rng, 10), stream=stream)
    scale = cl.to_device(np.float32([rng.uniform(0.5, 4)]), stream=stream)
    inv = cl.to_device(np.float32([1.0]), stream=stream)
    hist = cl.to_device(rng.random((32, 1 + seed)).astype(np.float32), stream=stream)
    amax = cl.zeros((1 + seed,), np.float32, stream=stream)
    scales = cl.to_device(np.ones(1 + seed, np.float32), stream=stream)
    invs = cl.empty((1 + seed,), np.float32, stream=stream)
    q = K.quantize_fp8(x, scale, dtype=fp8, amax=amax[:1], stream=stream)
    back = K.dequantize_fp8(q, inv, dtype, stream=stream)
    K.amax(x, amax[1:2] if seed else amax[:1], accumulate=bool(seed), stream=stream)
    K.delayed_scale_update(hist, amax, scales, invs, margin=1, stream=stream)
    return [q, back, amax, hist, scales, invs]


def test_threads_match_serial_bitwise(device):
    # 16 cases, two per thread, alternating, interleaved with the other threads'
    serial = match_serial(device, [lambda s, seed=seed: _work(seed, s) for seed in range(16)],
                          repeats=4, pick=lambda t, r: ((t, t + 8)[r % 2],))
    # and the serial results are right
    for seed in (0, 5):
        rng = np.random.default_rng(seed)
        x = spread((64, 300 + seed), WIDE[seed % 3], rng, 10)
        s = np.float32(rng.uniform(0.5, 4))
        assert_bits(serial[seed][0][1], T.ref.quantize_fp8_f32(x, s, FP8[seed % 2]), "quantize")


# -- a captured step ---------------------------------------------------------------------------
def test_captured_step_picks_up_new_scales_and_history(device, rng):
    """Quantize with the amax recorded, dequantize, update the delayed scale: captured once,
    each replay uses the scale the previous replay wrote (and the scale or history the host
    wrote in between), matching eager calls bit for bit."""
    s = cl.Stream()
    shape = (64, 500)
    batches = [spread(shape, BF16, rng, 6) * BF16.type(4.0 ** k) for k in range(5)]

    def state():
        return {"x": cl.to_device(batches[0], stream=s),
                "scale": cl.to_device(np.float32([1.0]), stream=s),
                "inv": cl.to_device(np.float32([1.0]), stream=s),
                "hist": cl.zeros((8,), stream=s), "amax": cl.zeros((), stream=s),
                "q": cl.empty(shape, E4M3, stream=s), "back": cl.empty(shape, F32, stream=s)}

    def step(a):
        K.quantize_fp8(a["x"], a["scale"], a["q"], amax=a["amax"], stream=s)
        K.dequantize_fp8(a["q"], a["inv"], out=a["back"], stream=s)
        K.delayed_scale_update(a["hist"], a["amax"], a["scale"], a["inv"], margin=1, stream=s)

    def host_writes(a, k):
        # between steps 2 and 3 the host overrides the scale, between 3 and 4 the history
        if k == 3:
            a["scale"].copy_(np.float32([0.125]), stream=s)
            a["inv"].copy_(np.float32([8.0]), stream=s)
        if k == 4:
            a["hist"].copy_(np.zeros(8, np.float32), stream=s)

    def snapshot(a):
        return {k: a[k].get(stream=s) for k in ("q", "back", "hist", "scale", "inv", "amax")}

    eager = state()
    expected = []
    for k, b in enumerate(batches):
        eager["x"].copy_(b, stream=s)
        host_writes(eager, k)
        step(eager)
        expected.append(snapshot(eager))
    # the scale moved from step to step (so a replay with a frozen scale would fail)
    assert len({float(e["scale"][0]) for e in expected}) == len(batches)

    graphed = state()
    with cl.graph.capture(s) as g:
        step(graphed)
    exe = g.instantiate()
    for k, b in enumerate(batches):
        graphed["x"].copy_(b, stream=s)
        host_writes(graphed, k)
        exe.replay(s)
        got = snapshot(graphed)
        for name, want in expected[k].items():
            assert_bits(got[name], want, f"replay {k}: {name}")
    # and the replayed step is the reference's
    scale = np.float32([1.0])
    hist = np.zeros(8, np.float32)
    for k, b in enumerate(batches):
        if k == 3:
            scale = np.float32([0.125])
        if k == 4:
            hist = np.zeros(8, np.float32)
        assert_bits(expected[k]["q"], T.ref.quantize_fp8_f32(b, scale[0], E4M3), f"step {k}")
        hist, e_scale, _ = T.ref.delayed_scale_update(hist, [T.ref.amax(b)], scale, margin=1)
        hist, scale = hist.astype(np.float32), e_scale.astype(np.float32)
        assert_bits(expected[k]["scale"], scale, f"scale after step {k}")
    exe.close()
    g.close()
    s.close()
