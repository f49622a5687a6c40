"""The fp8 training helpers (ptx/fp8.cu, cudalibs.kernels.fp8) and their references, without a
GPU.

- The fp8 conversions of fp8.cu, compiled for the host with nvcc (they are ``__host__
  __device__``), against ml_dtypes: every float16 and bfloat16 value and a million random
  float32 bit patterns to both formats, and all 256 codes of both back to float32.  The GPU
  tier runs the same code on the device against the same reference.
- The references of cudalibs.testing.ref: values worked out by hand, the float32 product,
  saturation and NaN signs; the delayed-scaling rule against a transcription of Transformer
  Engine's, step after step.
- The wrappers: launch arguments pack into the PTX signatures, the amax is zeroed unless
  accumulated, empty inputs launch nothing, and bad input is refused before any launch.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from cudalibs import dtypes, kernels
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import ClosedError
from cudalibs.runtime import ptxlib
from cudalibs.testing import ref

from host_cuda import compile_harness, run_harness
from test_ptx import DEV0, DEV1, _FakeBuffer, _check_launch, fake

E4M3, E5M2 = dtypes.float8_e4m3fn, dtypes.float8_e5m2
FP8 = [E4M3, E5M2]
F32, F16, BF16 = np.dtype(np.float32), np.dtype(np.float16), dtypes.bfloat16
IDS = lambda d: np.dtype(d).name  # noqa: E731
F32_MAX = float(np.finfo(np.float32).max)


def bits(a) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def every_16_bit(dtype) -> np.ndarray:
    """All 2**16 values of a 16-bit type, as float32 (exact)."""
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype).astype(np.float32)


# -- the conversions of fp8.cu, compiled for the host -------------------------------------------
_HARNESS = r"""
#include <cstdio>
#include <vector>
#include "fp8.cu"

// argv: floats in, two codes (e4m3, e5m2) out per float, 256 x 2 floats decoded out.
int main(int argc, char** argv) {
    if (argc != 4) return 2;
    FILE* in = fopen(argv[1], "rb");
    FILE* out = fopen(argv[2], "wb");
    FILE* dec = fopen(argv[3], "wb");
    if (!in || !out || !dec) return 3;
    std::vector<float> v(1 << 16);
    std::vector<unsigned char> q(2 << 16);
    size_t got;
    while ((got = fread(v.data(), sizeof(float), v.size(), in)) > 0) {
        for (size_t i = 0; i < got; ++i) {
            q[2 * i] = f32_to_fp8<E4M3>(v[i]);
            q[2 * i + 1] = f32_to_fp8<E5M2>(v[i]);
        }
        fwrite(q.data(), 1, 2 * got, out);
    }
    float d[512];
    for (unsigned c = 0; c < 256; ++c) {
        d[2 * c] = fp8_to_f32<E4M3>(c);
        d[2 * c + 1] = fp8_to_f32<E5M2>(c);
    }
    fwrite(d, sizeof(float), 512, dec);
    fclose(in);
    fclose(out);
    fclose(dec);
    return 0;
}
"""


@pytest.fixture(scope="module")
def host_conversions(tmp_path_factory):
    """``run(float32 array) -> (e4m3 codes, e5m2 codes, decoded [256, 2])`` through fp8.cu's
    own conversion functions, compiled for the host."""
    tmp, exe = compile_harness(tmp_path_factory, "fp8_host", _HARNESS)

    def run(values):
        values.astype(np.float32).tofile(tmp / "in.bin")
        run_harness(exe, tmp / "in.bin", tmp / "out.bin", tmp / "dec.bin")
        codes = np.fromfile(tmp / "out.bin", np.uint8).reshape(-1, 2)
        return codes[:, 0], codes[:, 1], np.fromfile(tmp / "dec.bin", np.float32).reshape(256, 2)

    return run


def _inputs() -> dict:
    rng = np.random.default_rng(20240601)
    return {"float16": every_16_bit(F16), "bfloat16": every_16_bit(BF16),
            "float32": rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(
                np.uint32).view(np.float32)}


@pytest.mark.parametrize("source", ["float16", "bfloat16", "float32"])
def test_host_compiled_conversion_matches_ml_dtypes(host_conversions, source):
    v = _inputs()[source]
    e4m3, e5m2, _ = host_conversions(v)
    for got, dt in ((e4m3, E4M3), (e5m2, E5M2)):
        want = bits(ref.quantize_fp8_f32(v, 1.0, dt))
        wrong = np.flatnonzero(got != want)
        assert wrong.size == 0, (
            f"{dt.name}: {wrong.size} of {v.size} {source} values differ, first "
            f"{[(hex(int(bits(v)[i])), hex(int(got[i])), hex(int(want[i]))) for i in wrong[:4]]}")


def test_host_compiled_decoding_matches_ml_dtypes(host_conversions):
    _, _, decoded = host_conversions(np.zeros(1, np.float32))
    for k, dt in enumerate(FP8):
        want = np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)
        got = decoded[:, k]
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(bits(got)[~nan], bits(want)[~nan])
        # NaN codes decode to NaN of the code's sign
        assert (np.signbit(got[nan]) == (np.flatnonzero(nan) >= 128)).all()


# -- references ---------------------------------------------------------------------------------
def test_amax_reference():
    assert ref.amax(np.array([1.0, -3.5, 2.0], np.float32)) == 3.5
    assert ref.amax(np.array([[0.0, -0.0]])) == 0.0
    assert ref.amax(np.zeros((0, 3), np.float16)) == 0.0
    assert ref.amax(np.array([1.0, -np.inf])) == math.inf
    assert math.isnan(ref.amax(np.array([np.inf, np.nan, 1.0])))
    assert ref.amax(np.array([-2.0, 1.0], BF16)) == 2.0


@pytest.mark.parametrize("dt", FP8, ids=IDS)
def test_quantize_reference_saturates_and_keeps_nan_signs(dt):
    top = ref.FP8_MAX[dt]
    assert top == float(ml_dtypes.finfo(dt).max)
    x = np.array([1.0, -2.5, top, top * 1.01, 1e30, np.inf, -np.inf, 0.0, -0.0], np.float32)
    q = ref.quantize_fp8_f32(x, 1.0, dt)
    assert q.dtype == dt and q.shape == x.shape
    np.testing.assert_array_equal(q.astype(np.float64),
                                  [1.0, -2.5, top, top, top, top, -top, 0.0, 0.0])
    assert list(np.signbit(q.astype(np.float32))[-2:]) == [False, True]
    # NaN keeps the sign of x: ml_dtypes' own NaN codes
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001], np.uint32).view(np.float32)
    nan_code = {E4M3: 0x7F, E5M2: 0x7E}[dt]
    assert list(bits(ref.quantize_fp8_f32(nans, 3.0, dt))) == [nan_code, nan_code | 0x80,
                                                               nan_code]
    # 0 * inf is a NaN of a number: the positive NaN
    assert bits(ref.quantize_fp8_f32(np.float32([0.0, -0.0]), np.inf, dt)).tolist() == [
        nan_code, nan_code]
    # the scale multiplies before the saturation
    np.testing.assert_array_equal(ref.quantize_fp8_f32(np.float32([0.5]), [4 * top], dt)
                                  .astype(np.float64), [top])


def test_quantize_reference_rounds_to_nearest_even():
    # e4m3 between 1 and 2 steps by 1/8: 1.0625 is the tie of 1 and 1.125 (even: 1),
    # 1.1875 the tie of 1.125 and 1.25 (even: 1.25); e4m3's subnormals step by 2**-9.
    x = np.float32([1.0625, 1.1875, 1.0626, 2.0**-10, 2.0**-10 * 1.001, 3 * 2.0**-10])
    np.testing.assert_array_equal(ref.quantize_fp8_f32(x, 1.0).astype(np.float64),
                                  [1.0, 1.25, 1.125, 0.0, 2.0**-9, 2 * 2.0**-9])


def test_quantize_reference_multiplies_in_float32():
    # float32(x * s) is exactly the tie 1.0625, which rounds to the even 1.0; the exact product
    # is above the tie, so rounding it directly would give 1.125.  The kernels multiply in
    # float32: the reference must give 1.0.
    x, s = np.float32(1.062745451927185), np.float32(0.9997690916061401)
    assert x * s == np.float32(1.0625)
    assert float(x) * float(s) > 1.0625
    assert ref.quantize_fp8_f32(np.array([x]), s)[0].astype(np.float64) == 1.0


def test_quantize_reference_refuses_other_types():
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        ref.quantize_fp8_f32(np.ones(2, np.float32), 1.0, np.float16)
    with pytest.raises(ValueError, match="float8"):
        ref.dequantize_fp8(np.ones(2, np.float32), 1.0)


@pytest.mark.parametrize("dt", FP8, ids=IDS)
def test_dequantize_reference_is_exact(dt):
    q = np.arange(256, dtype=np.uint8).view(dt)
    plain = ref.dequantize_fp8(q, 1.0)
    assert plain.dtype == np.float64
    np.testing.assert_array_equal(plain, q.astype(np.float64))    # NaN == NaN here
    # q * scale_inv (scale_inv rounded to float32 first) is exact in float64
    s = float(np.float32(1 / 3))
    scaled = ref.dequantize_fp8(q, 1 / 3)
    finite = np.isfinite(plain)
    np.testing.assert_array_equal(scaled[finite], plain[finite] * s)
    assert np.isnan(scaled[np.isnan(plain)]).all()


def test_delayed_scale_update_by_hand():
    h = np.float32([1.0, 2.0, 3.0, 4.0])
    new, scale, inv = ref.delayed_scale_update(h, [8.0], np.float32([1.0]))
    np.testing.assert_array_equal(new, [8.0, 1.0, 2.0, 3.0])          # 4.0 dropped out
    assert scale.tolist() == [56.0] and inv.tolist() == [1 / 56]      # 448 / 8
    # the window's maximum (3), not this step's amax; a margin of 1 halves the scale
    _, scale, _ = ref.delayed_scale_update(h, [0.5], np.float32([1.0]), margin=1)
    assert scale.tolist() == [float(np.float32(448 / 3 / 2))]
    _, scale, _ = ref.delayed_scale_update(h, [0.5], np.float32([1.0]), algo="most_recent")
    assert scale.tolist() == [896.0]
    _, scale, _ = ref.delayed_scale_update(h, [0.5], np.float32([1.0]), fp8_max=57344.0,
                                           algo="most_recent", margin=-2)
    assert scale.tolist() == [57344.0 * 4 / 0.5]
    # a history of one step is this step's amax alone
    new, scale, _ = ref.delayed_scale_update(np.float32([100.0]), [7.0], np.float32([1.0]))
    assert new.tolist() == [7.0] and scale.tolist() == [64.0]
    with pytest.raises(ValueError, match="algo"):
        ref.delayed_scale_update(h, [1.0], [1.0], algo="mean")
    with pytest.raises(ValueError, match="history_len"):
        ref.delayed_scale_update(np.zeros((0, 2)), [1.0, 1.0], [1.0, 1.0])


def test_delayed_scale_update_keeps_the_scale_without_a_usable_amax():
    h = np.zeros((3, 5), np.float32)
    amax = np.float32([0.0, -1.0, np.inf, np.nan, 2.0])
    old = np.float32([3.0, 5.0, 7.0, 0.25, 9.0])
    for algo in ("max", "most_recent"):
        new, scale, inv = ref.delayed_scale_update(h, amax, old, algo=algo)
        np.testing.assert_array_equal(scale, [3.0, 5.0, 7.0, 0.25, 224.0])
        np.testing.assert_array_equal(inv, 1.0 / scale)
        np.testing.assert_array_equal(new[0], amax)
    # a NaN (or inf) anywhere in the window keeps the scale under "max" until it leaves
    h = np.float32([[1.0], [np.nan], [2.0]])
    _, scale, _ = ref.delayed_scale_update(h, np.float32([4.0]), np.float32([3.0]))
    assert scale.tolist() == [3.0]
    _, scale, _ = ref.delayed_scale_update(h[:2], np.float32([4.0]), np.float32([3.0]))
    assert scale.tolist() == [112.0]                                  # the NaN dropped out
    # an old scale of 0 kept: its inverse is inf
    _, scale, inv = ref.delayed_scale_update(np.float32([0.0]), [0.0], np.float32([0.0]))
    assert scale.tolist() == [0.0] and inv.tolist() == [math.inf]


def test_delayed_scale_update_stores_float32():
    # 448 / 3 is not a float32: the stored scale is its float32 rounding, scale_inv the exact
    # reciprocal of that
    _, scale, inv = ref.delayed_scale_update(np.float32([0.0]), [3.0], np.float32([1.0]))
    assert scale[0] == float(np.float32(448 / 3)) != 448 / 3
    assert inv[0] == 1 / scale[0]
    # an amax so small that the quotient overflows float32: FLT_MAX
    tiny = float(np.float32(1e-40))
    _, scale, inv = ref.delayed_scale_update(np.float32([0.0]), [tiny], np.float32([1.0]))
    assert scale.tolist() == [F32_MAX] and inv.tolist() == [1 / F32_MAX]
    # the scaled maximum is float32(fp8_max * 2**-margin)
    _, scale, _ = ref.delayed_scale_update(np.float32([0.0]), [1.0], np.float32([1.0]),
                                           fp8_max=0.1)
    assert scale.tolist() == [float(np.float32(0.1))]


def test_delayed_scale_update_columns_are_independent():
    rng = np.random.default_rng(5)
    h = rng.random((6, 4)).astype(np.float32)
    amax = rng.random(4).astype(np.float32)
    old = rng.random(4).astype(np.float32) + 1
    new, scale, inv = ref.delayed_scale_update(h, amax, old, margin=1)
    for j in range(4):
        nj, sj, ij = ref.delayed_scale_update(h[:, j], amax[j:j + 1], old[j:j + 1], margin=1)
        np.testing.assert_array_equal(new[:, j], nj)
        assert (sj[0], ij[0]) == (scale[j], inv[j])


def _transformer_engine_steps(amaxes, history_len, fp8_max, margin, algo):
    """Transformer Engine's delayed scaling, transcribed in float32 numpy: each step the GEMM
    writes its amax into slot 0 of the history; the update takes the maximum over the history
    (or slot 0), computes ``(fp8_max / amax) / 2**margin`` where the amax is positive and
    finite (else keeps the scale), then rolls the history by -1 and zeroes slot 0."""
    hist = np.zeros((history_len, amaxes.shape[1]), np.float32)
    scale = np.ones(amaxes.shape[1], np.float32)
    out = []
    for a in amaxes:
        hist[0] = a
        ref_amax = hist.max(axis=0) if algo == "max" else hist[0].copy()
        with np.errstate(divide="ignore", invalid="ignore"):
            sf = (np.float32(fp8_max) / ref_amax) / np.float32(2.0 ** margin)
        sf = np.where((ref_amax > 0) & np.isfinite(ref_amax), sf, scale)
        scale = sf.astype(np.float32)
        out.append(scale.copy())
        hist = np.roll(hist, -1, axis=0)
        hist[0] = 0
    return out


@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_delayed_scale_update_matches_transformer_engine(algo):
    rng = np.random.default_rng(6)
    steps, tensors, history_len = 40, 3, 7
    amaxes = (rng.random((steps, tensors)) * 10.0 ** rng.integers(-3, 4, (steps, tensors)))
    amaxes = amaxes.astype(np.float32)
    amaxes[5, 0] = 0.0
    amaxes[9, 1] = np.inf
    amaxes[20, 2] = np.nan
    want = _transformer_engine_steps(amaxes, history_len, 448.0, 1, algo)
    # our history starts as TE's (zeros), newest first, and the scale at 1
    hist = np.zeros((history_len, tensors), np.float32)
    scale = np.ones(tensors, np.float32)
    for t, a in enumerate(amaxes):
        hist, scale, inv = ref.delayed_scale_update(hist, a, scale, margin=1, algo=algo)
        np.testing.assert_array_equal(scale, want[t], err_msg=f"step {t}")
        # TE's window is the last history_len amaxes; ours holds them in order
        window = amaxes[max(0, t + 1 - history_len):t + 1][::-1]
        np.testing.assert_array_equal(hist[:len(window)], window)
        scale = scale.astype(np.float32)


# -- the wrappers, on stand-in arrays -------------------------------------------------------------
@pytest.fixture()
def calls(monkeypatch):
    """Every launch and every fill, in order: ``("launch", name, grid, block, args)`` and
    ``("fill", address, value)``."""
    seen = []

    def launch(device, name, grid, block, args, stream, shared_mem=0):
        _check_launch((device, name, grid, block, args, stream))
        seen.append(("launch", name, grid, block, args))

    def fill(self, value, stream=None):
        seen.append(("fill", self.address, value))
        return self

    monkeypatch.setattr(ptxlib, "launch", launch)
    monkeypatch.setattr(DeviceArray, "fill", fill)
    return seen


def scalar(shape=()):
    return fake(shape, F32)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=IDS)
def test_amax_launch(calls, dtype):
    x, out = fake((3, 700), dtype), scalar()
    assert kernels.amax(x, out) is out
    assert kernels.amax(x, out, accumulate=True) is out
    suf = ptxlib.SUFFIX[np.dtype(dtype)]
    # zeroed first, then one launch over every element; accumulate: no zeroing
    assert calls == [("fill", out.address, 0),
                     ("launch", f"amax_{suf}", (9, 1, 1), (256, 1, 1),
                      (x.address, out.address, 2100)),
                     ("launch", f"amax_{suf}", (9, 1, 1), (256, 1, 1),
                      (x.address, out.address, 2100))]


@pytest.mark.parametrize("fp8", FP8, ids=IDS)
@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=IDS)
def test_quantize_and_dequantize_launch(calls, dtype, fp8):
    x, scale, am, q = fake((5, 7), dtype), scalar((1,)), scalar((1, 1)), fake((5, 7), fp8)
    assert kernels.quantize_fp8(x, scale, q, amax=am) is q        # dtype from out
    assert kernels.quantize_fp8(x, scale, q, dtype=fp8, accumulate_amax=True, amax=am) is q
    assert kernels.quantize_fp8(x, scale, q) is q
    out = fake((5, 7), dtype)
    assert kernels.dequantize_fp8(q, scale, out=out) is out
    assert kernels.dequantize_fp8(q, scale, dtype, out) is out
    fs, ws = {E4M3: "e4m3", E5M2: "e5m2"}[fp8], ptxlib.SUFFIX[np.dtype(dtype)]
    grid = ((1, 1, 1), (256, 1, 1))
    assert calls == [
        ("fill", am.address, 0),
        ("launch", f"quantize_{fs}_{ws}", *grid, (x.address, scale.address, q.address,
                                                  am.address, 35)),
        ("launch", f"quantize_{fs}_{ws}", *grid, (x.address, scale.address, q.address,
                                                  am.address, 35)),
        ("launch", f"quantize_{fs}_{ws}", *grid, (x.address, scale.address, q.address, 0, 35)),
        ("launch", f"dequantize_{fs}_{ws}", *grid, (q.address, scale.address, out.address, 35)),
        ("launch", f"dequantize_{fs}_{ws}", *grid, (q.address, scale.address, out.address, 35)),
    ]


@pytest.mark.parametrize("shape,tensors,blocks", [((1024,), 1, 1), ((16, 1), 1, 1),
                                                  ((4, 33), 33, 2), ((2, 70000), 70000, 2188)])
def test_delayed_scale_update_launch(calls, shape, tensors, blocks):
    hist = fake(shape, F32)
    per = (tensors,) if len(shape) == 2 else ()
    amax, scale, inv = fake(per, F32), fake(per, F32), fake(per, F32)
    res = kernels.delayed_scale_update(hist, amax, scale, inv)
    assert res[0] is scale and res[1] is inv
    kernels.delayed_scale_update(hist, amax, scale, inv, margin=2, fp8_max=57344.0,
                                 algo="most_recent")
    (_, name, grid, block, args), (*_, args2) = calls
    assert name == "delayed_scale_update_f32" and grid == (blocks, 1, 1) and block == (32, 16, 1)
    assert args == (hist.address, amax.address, scale.address, inv.address, shape[0], tensors,
                    448.0, 0)
    assert args2[6:] == (57344.0 / 4, 1)


def test_scaled_max_is_rounded_to_float32(calls):
    kernels.delayed_scale_update(fake((4,), F32), scalar(), scalar(), scalar(), fp8_max=0.1,
                                 margin=0.5)
    assert calls[0][4][6] == float(np.float32(0.1 * 2 ** -0.5))


def test_empty_inputs_launch_nothing(calls):
    e, out = fake((0, 4), F32), scalar()
    kernels.amax(e, out)
    assert calls == [("fill", out.address, 0)]             # the amax of nothing is 0
    calls.clear()
    kernels.quantize_fp8(e, scalar(), fake((0, 4), E4M3))
    kernels.dequantize_fp8(fake((0, 4), E5M2), scalar(), out=fake((0, 4), F32))
    kernels.delayed_scale_update(fake((3, 0), F32), fake((0,), F32), fake((0,), F32),
                                 fake((0,), F32))
    assert calls == []


def _refused(calls, exc, match, fn, *args, **kwargs):
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)
    assert calls == []


def test_bad_dtypes_and_scalars(calls):
    x, s = fake((8,), F32), scalar()
    _refused(calls, TypeError, "amax: x has dtype float64", kernels.amax, fake((8,), np.float64),
             s)
    _refused(calls, TypeError, "amax: out has dtype float16", kernels.amax, x, fake((), F16))
    _refused(calls, TypeError, "quantize_fp8: x has dtype int32", kernels.quantize_fp8,
             fake((8,), np.int32), s)
    _refused(calls, TypeError, "quantize_fp8: scale must be a float32 device array, not float",
             kernels.quantize_fp8, x, 0.5)
    _refused(calls, TypeError, "quantize_fp8: scale has dtype float64", kernels.quantize_fp8, x,
             fake((1,), np.float64))
    _refused(calls, TypeError, "scale is a host numpy array", kernels.quantize_fp8, x,
             np.ones(1, np.float32))
    _refused(calls, TypeError, "quantize_fp8: dtype must be one of float8_e4m3fn, float8_e5m2,"
             " not float16", kernels.quantize_fp8, x, s, dtype=np.float16)
    _refused(calls, TypeError, "out has dtype float8_e4m3fn, but dtype is float8_e5m2",
             kernels.quantize_fp8, x, s, fake((8,), E4M3), dtype=E5M2)
    _refused(calls, TypeError, "dtype must be one of", kernels.quantize_fp8, x, s,
             fake((8,), F32))
    _refused(calls, TypeError, "quantize_fp8: amax has dtype float16", kernels.quantize_fp8, x,
             s, amax=fake((1,), F16))
    _refused(calls, TypeError, "accumulate_amax must be a bool", kernels.quantize_fp8, x, s,
             amax=scalar(), accumulate_amax=1)
    _refused(calls, TypeError, "dequantize_fp8: q has dtype float32", kernels.dequantize_fp8,
             x, s)
    _refused(calls, TypeError, "dequantize_fp8: scale_inv must be a float32 device array, "
             "not int", kernels.dequantize_fp8, fake((8,), E4M3), 2)
    _refused(calls, TypeError, "out_dtype must be one of bfloat16, float16, float32, not "
             "float64", kernels.dequantize_fp8, fake((8,), E4M3), s, np.float64)
    _refused(calls, TypeError, "out_dtype 'nope' is not a numpy dtype", kernels.dequantize_fp8,
             fake((8,), E4M3), s, "nope")


def test_bad_shapes(calls):
    x, s = fake((4, 8), F32), scalar()
    _refused(calls, ValueError, r"amax: out must have one element, got shape \(2,\)",
             kernels.amax, x, fake((2,), F32))
    _refused(calls, ValueError, "amax: accumulate=True folds into out, so out must be given",
             kernels.amax, x, accumulate=True)
    _refused(calls, ValueError, r"quantize_fp8: scale must have one element, got shape \(0,\)",
             kernels.quantize_fp8, x, fake((0,), F32))
    _refused(calls, ValueError, r"quantize_fp8: out has shape \(8, 4\), expected \(4, 8\)",
             kernels.quantize_fp8, x, s, fake((8, 4), E4M3))
    _refused(calls, ValueError, "accumulate_amax=True folds into amax",
             kernels.quantize_fp8, x, s, accumulate_amax=True)
    _refused(calls, ValueError, r"dequantize_fp8: out has shape \(32,\), expected \(4, 8\)",
             kernels.dequantize_fp8, fake((4, 8), E5M2), s, out=fake((32,), F32))
    _refused(calls, ValueError, "C-contiguous", kernels.quantize_fp8, x.T, s)


def test_bad_histories(calls):
    dsu = kernels.delayed_scale_update
    h, one = fake((16, 3), F32), (fake((3,), F32), fake((3,), F32), fake((3,), F32))
    _refused(calls, ValueError, "amax_history must have 1 or 2 dimensions", dsu,
             fake((2, 2, 2), F32), *one)
    _refused(calls, ValueError, "amax_history must hold at least one step", dsu,
             fake((0, 3), F32), *one)
    _refused(calls, TypeError, "amax_history has dtype float16", dsu, fake((16, 3), F16), *one)
    _refused(calls, ValueError, r"amax must have shape \(3,\), one per tensor of amax_history, "
             r"got shape \(4,\)", dsu, h, fake((4,), F32), one[1], one[2])
    _refused(calls, ValueError, r"scale must have shape \(3,\).*got shape \(3, 1\)", dsu, h,
             one[0], fake((3, 1), F32), one[2])
    _refused(calls, ValueError, r"scale_inv must have one element.*got shape \(3,\)", dsu,
             fake((16,), F32), scalar(), scalar(), one[2])
    _refused(calls, TypeError, "scale_inv must be a float32 device array, not float", dsu,
             fake((16,), F32), scalar(), scalar(), 1.0)
    _refused(calls, ValueError, "algo must be 'max' or 'most_recent', not 'mean'", dsu, h, *one,
             algo="mean")
    _refused(calls, TypeError, "margin must be a real number", dsu, h, *one, margin="1")
    _refused(calls, ValueError, "margin must be finite", dsu, h, *one, margin=math.inf)
    _refused(calls, ValueError, "fp8_max must be a positive finite number", dsu, h, *one,
             fp8_max=-448.0)
    _refused(calls, ValueError, "outside float32's normal range", dsu, h, *one, margin=140)
    _refused(calls, ValueError, "outside float32's normal range", dsu, h, *one, margin=-5000)
    _refused(calls, ValueError, "outside float32's normal range", dsu, h, *one, fp8_max=1e300)


def at(address, shape, dtype, buf=None) -> DeviceArray:
    """A C-contiguous stand-in array at a chosen address (to make two of them overlap)."""
    dt = dtypes.lookup(dtype)
    strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * dt.itemsize
                    for i in range(len(shape)))
    return DeviceArray._view(address, tuple(shape), strides, dt, DEV0, buf, None)


def test_overlaps_devices_and_closed_memory(calls):
    buf = _FakeBuffer(1 << 44)
    big = at(buf._ptr, (16,), F32, buf)
    s = scalar()
    _refused(calls, ValueError, "amax: x overlaps out", kernels.amax, big, big[3:4])
    _refused(calls, ValueError, "quantize_fp8: x overlaps scale", kernels.quantize_fp8, big,
             big[0:1])
    _refused(calls, ValueError, "quantize_fp8: scale overlaps amax", kernels.quantize_fp8,
             fake((4,), F16), s, amax=s)
    _refused(calls, ValueError, "quantize_fp8: x overlaps out", kernels.quantize_fp8, big[:8], s,
             at(buf._ptr + 8, (8,), E4M3, buf))
    q = fake((8,), E4M3)
    _refused(calls, ValueError, "dequantize_fp8: q overlaps out", kernels.dequantize_fp8, q, s,
             out=at(q.address, (8,), F32))
    hist = at(buf._ptr, (4, 4), F32, buf)
    _refused(calls, ValueError, "delayed_scale_update: amax_history overlaps amax",
             kernels.delayed_scale_update, hist, hist[0], fake((4,), F32), fake((4,), F32))
    same = fake((4,), F32)
    _refused(calls, ValueError, "delayed_scale_update: scale overlaps scale_inv",
             kernels.delayed_scale_update, fake((2, 4), F32), fake((4,), F32), same, same)
    _refused(calls, ValueError, "quantize_fp8: scale is on device 1", kernels.quantize_fp8,
             fake((4,), F32), fake((), F32, device=DEV1))
    _refused(calls, ValueError, "delayed_scale_update: amax is on device 1",
             kernels.delayed_scale_update, fake((4,), F32), fake((), F32, device=DEV1), scalar(),
             scalar())
    gone = _FakeBuffer(1 << 45)
    closed = at(gone._ptr, (), F32, gone)
    gone._ptr = None
    _refused(calls, ClosedError, "quantize_fp8: scale is closed", kernels.quantize_fp8,
             fake((4,), F32), closed)
    _refused(calls, ClosedError, "delayed_scale_update: scale_inv is closed",
             kernels.delayed_scale_update, fake((4,), F32), scalar(), scalar(), closed)
