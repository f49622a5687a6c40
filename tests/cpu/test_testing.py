"""cudalibs.testing: tolerances, random inputs, strategies and references, all on the host."""

import math
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, find, given, settings
from hypothesis import strategies as st

from cudalibs import dtypes as cd
from cudalibs import testing as t

ALL_NAMES = sorted(row.name for row in cd.TABLE.values())
FLOAT_NAMES = [n for n in ("float16", "float32", "float64", "bfloat16", "float8_e4m3fn",
                           "float8_e5m2") if n in ALL_NAMES]
INT_NAMES = [n for n in ALL_NAMES if np.dtype(n).kind in "iu"]
seeds = st.integers(0, 2**32 - 1)
small_shapes = t.shapes(min_dims=1, max_dims=3, min_side=1, max_side=6)


class _Device:
    """Stands in for a DeviceArray: only ``.get()``."""

    def __init__(self, array):
        self._array = array

    def get(self):
        return self._array


# --- assert_close ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
@settings(max_examples=50, deadline=None)
@given(shape=small_shapes, seed=seeds)
def test_assert_close_threshold(name, shape, seed):
    expected = t.random_array(shape, "float64", rng=seed)
    tol = t.TOLERANCES[name]
    # Scaling every element by (1 + d) makes the relative error exactly d.
    t.assert_close(expected * (1 + 0.99 * tol), expected, name)
    with pytest.raises(AssertionError, match="relative error"):
        t.assert_close(expected * (1 + 1.01 * tol), expected, name)


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
@settings(max_examples=50, deadline=None)
@given(shape=small_shapes, seed=seeds)
def test_assert_close_in_the_dtype(name, shape, seed):
    # Results stored in the type itself: its rounding (half an ulp) stays well inside the
    # tolerance, so 0.3 x tol passes and 3 x tol fails.
    expected = t.random_array(shape, name, rng=seed).astype(np.float64)
    tol = t.TOLERANCES[name]
    t.assert_close((expected * (1 + 0.3 * tol)).astype(name), expected)
    with pytest.raises(AssertionError):
        t.assert_close((expected * (1 + 3 * tol)).astype(name), expected)


@pytest.mark.parametrize("name", FLOAT_NAMES + ["complex64", "complex128"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@settings(max_examples=50, deadline=None)
@given(shape=small_shapes, seed=seeds, data=st.data())
def test_assert_close_fails_on_nonfinite(name, bad, shape, seed, data):
    expected = t.random_array(shape, name, rng=seed)
    actual = expected.copy()
    index = tuple(data.draw(st.integers(0, n - 1)) for n in shape)
    actual[index] = bad
    if np.isfinite(actual[index].astype(np.complex128)):  # float8_e4m3fn has no infinity
        actual[index] = math.nan
    with pytest.raises(AssertionError, match=r"NaN/inf(.|\n)*index " + re.escape(str(index))):
        t.assert_close(actual, expected, rtol=1e9)


def test_assert_close_matching_nonfinite_passes():
    expected = np.array([1.0, np.nan, np.inf, -np.inf])
    t.assert_close(expected.astype(np.float32), expected)
    with pytest.raises(AssertionError):
        t.assert_close(np.float32([1.0, np.nan, -np.inf, -np.inf]), expected)


@pytest.mark.parametrize("name", INT_NAMES + ["bool"])
@settings(max_examples=50, deadline=None)
@given(shape=small_shapes, seed=seeds, data=st.data())
def test_assert_close_exact_for_integers(name, shape, seed, data):
    expected = t.random_array(shape, name, rng=seed)
    t.assert_close(expected.copy(), expected)
    t.assert_close(expected.copy(), expected.astype(np.float64))
    actual = expected.copy()
    index = tuple(data.draw(st.integers(0, n - 1)) for n in shape)
    actual[index] = ~actual[index] if name == "bool" else actual[index] - 1
    assert actual[index] != expected[index]
    with pytest.raises(AssertionError, match="compares exactly"):
        t.assert_close(actual, expected)


@pytest.mark.parametrize("shapes", [((2, 3), (3, 2)), ((6,), (1, 6)), ((), (1,)), ((0,), (0, 1))])
def test_assert_close_shape_mismatch(shapes):
    a, b = (np.ones(s, np.float32) for s in shapes)
    with pytest.raises(AssertionError, match="shape mismatch"):
        t.assert_close(a, b)


def test_assert_close_inputs_and_options():
    expected = np.array([[1.0, 2.0], [3.0, 4.0]])
    actual = (expected * (1 + 1e-4)).astype(np.float32)
    with pytest.raises(AssertionError, match="tolerance 1.0e-05"):
        t.assert_close(_Device(actual), expected)
    t.assert_close(_Device(actual), expected, compute="tf32")
    t.assert_close(actual, expected, rtol=2e-4)
    t.assert_close(actual.tolist(), _Device(expected), "float16")
    with pytest.raises(AssertionError, match="^mine: "):
        t.assert_close(actual, expected, msg="mine")
    # The reference is all zeros: the absolute error counts.
    t.assert_close(np.zeros(3, np.float32), np.zeros(3))
    t.assert_close(np.full(3, 1e-7, np.float32), np.zeros(3))
    with pytest.raises(AssertionError, match="absolute"):
        t.assert_close(np.full(3, 1e-3, np.float32), np.zeros(3))
    t.assert_close(np.empty((0, 3), np.float16), np.empty((0, 3)))


def test_assert_close_message_names_the_worst_element():
    expected = np.arange(1.0, 13.0).reshape(3, 4)
    actual = expected.astype(np.float32)
    actual[2, 1] += 5
    actual[0, 0] += 1
    with pytest.raises(AssertionError) as info:
        t.assert_close(actual, expected)
    text = str(info.value)
    assert "shape (3, 4)" in text and "float32" in text and "tolerance 1.0e-05" in text
    assert "worst element at index (2, 1): actual 15.0, expected 10.0" in text


# --- assert_close: the element-wise bound ----------------------------------------------------

def _tf32(x):
    """float32 values rounded to tf32 (10 significand bits, to nearest even)."""
    b = np.asarray(x, np.float32).view(np.uint32)
    b = (b + np.uint32(0x0FFF) + ((b >> np.uint32(13)) & np.uint32(1))) & np.uint32(0xFFFFE000)
    return b.view(np.float32)


def _product(a, b, arithmetic):
    """``a @ b`` as a GPU computes it: float32 accumulation of half-precision inputs (output
    float32, or rounded to float16 / bfloat16), float32, or tf32 (inputs rounded first)."""
    if arithmetic == "tf32":
        return _tf32(a) @ _tf32(b)
    out = a.astype(np.float32) @ b.astype(np.float32)
    return out.astype(a.dtype) if arithmetic == "rounded" else out


PRODUCTS = [("float16", "float32 out", "float16"), ("float16", "rounded", "float16"),
            ("bfloat16", "rounded", "bfloat16"), ("float32", "float32", "float32"),
            ("float32", "tf32", "tf32")]


@pytest.mark.parametrize("inputs, arithmetic, tolerance", PRODUCTS)
@settings(max_examples=30, deadline=None)
@given(m=t.matrix_sizes(256), n=t.matrix_sizes(256), k=t.matrix_sizes(1024), seed=seeds)
def test_assert_close_passes_correct_products(inputs, arithmetic, tolerance, m, n, k, seed):
    rng = np.random.default_rng(seed)
    a = t.random_array((m, k), inputs, rng=rng)
    b = t.random_array((k, n), inputs, rng=rng)
    got = _product(a, b, arithmetic)
    expected = t.ref.gemm(a, b)
    # With the magnitudes of the terms as scale, whatever cancels: the rounding errors of a
    # sum are relative to its terms.
    t.assert_close(got, expected, rtol=t.TOLERANCES[tolerance],
                   scale=np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    # By default once there are enough elements that the norm of expected cannot cancel
    # (one element of a product can: a sum of two products may be near zero).
    if m * n >= 64:
        if tolerance == "tf32":
            t.assert_close(got, expected, np.float32, compute="tf32")
        else:
            t.assert_close(got, expected, tolerance)


@pytest.mark.parametrize("out", ["float32 out", "rounded"])
@settings(max_examples=50, deadline=None)
@given(seed=seeds, data=st.data())
def test_assert_close_one_zeroed_element_of_a_product_fails(out, seed, data):
    # A 200 x 200 float16 product: zeroing an element of up to 1.9 times the RMS moves the
    # norm-wise error by at most 1.9 / 200 of the norm, inside float16's 1e-2; the
    # element-wise bound catches it unless the element was within 11 % of the RMS of zero
    # already (where zero is nearly right).
    rng = np.random.default_rng(seed)
    a = t.random_array((200, 200), "float16", rng=rng)
    b = t.random_array((200, 200), "float16", rng=rng)
    expected = t.ref.gemm(a, b)
    rms = np.sqrt(np.mean(expected ** 2))
    i, j = (data.draw(st.integers(0, 199)) for _ in "ij")
    assume(0.12 * rms <= abs(expected[i, j]) <= 1.9 * rms)
    got = _product(a, b, out)
    got[i, j] = 0
    assert np.linalg.norm(got - expected) < 1e-2 * np.linalg.norm(expected)
    with pytest.raises(AssertionError, match=rf"elements differ(.|\n)*index \({i}, {j}\)"):
        t.assert_close(got, expected, "float16")


@pytest.mark.parametrize("seed", [0, 1])
def test_assert_close_catches_a_grid_remainder_of_garbage(seed):
    # wmma_gemm's rows past 65535 tiles of 64: 5 rows of 2 columns, 10 of 8.4 M elements.
    rng = np.random.default_rng(seed)
    m = 65535 * 64 + 5
    a = t.random_array((m, 3), "float16", rng=rng)
    b = t.random_array((3, 2), "float16", rng=rng)
    expected = t.ref.gemm(a, b)
    got = _product(a, b, "float32 out")
    t.assert_close(got, expected, "float16")
    for wrong in (5 * expected[-5:], np.zeros((5, 2))):
        bad = got.copy()
        bad[-5:] = wrong
        assert np.linalg.norm(bad - expected) < 1e-2 * np.linalg.norm(expected)
        with pytest.raises(AssertionError, match="elements differ by more than"):
            t.assert_close(bad, expected, "float16")


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
@settings(max_examples=30, deadline=None)
@given(n=st.integers(1000, 5000), seed=seeds, data=st.data())
def test_assert_close_elementwise_threshold(name, n, seed, data):
    # One element off by just under / over 10 x tol x (|expected| + RMS of expected): the
    # norm-wise error stays far inside the tolerance, the element-wise bound decides.
    expected = t.random_array(n, "float64", rng=seed)
    tol = t.TOLERANCES[name]
    rms = np.sqrt(np.mean(expected ** 2))
    i = data.draw(st.integers(0, n - 1))
    limit = 10 * tol * (abs(expected[i]) + rms)
    actual = expected.copy()
    actual[i] += 0.99 * limit
    t.assert_close(actual, expected, name)
    actual[i] = expected[i] - 1.01 * limit
    assert np.linalg.norm(actual - expected) <= tol * np.linalg.norm(expected)
    with pytest.raises(AssertionError, match=rf"1 of {n} elements differ by more than 10 x "
                                             rf"tolerance(.|\n)*index \({i},\)"):
        t.assert_close(actual, expected, name)


def test_assert_close_scale():
    expected = np.tile([1.0, -1.0, 1e-3, 2.0], 500)
    scale = np.tile([1.0, 1.0, 2.0, 0.5], 500)
    # the element-wise bound is 10 tol (|expected| + scale), element by element
    limit = 10 * 1e-3 * (np.abs(expected) + scale)
    one = np.zeros(expected.shape)
    one[6] = 1
    t.assert_close(expected + 0.99 * limit * one, expected, rtol=1e-3, scale=scale)
    with pytest.raises(AssertionError, match=r"differ by more than 10 x tolerance 1.0e-03 x "
                                             r"\(\|expected\| \+ scale\)(.|\n)*index \(6,\)"):
        t.assert_close(expected + 1.01 * limit * one, expected, rtol=1e-3, scale=scale)
    # it is broadcast, and the norm-wise bound takes max(‖expected‖, ‖scale‖)
    small = np.full((3, 4), 1e-3)
    t.assert_close(small + 5e-4, small, rtol=1e-3, scale=1.0)
    with pytest.raises(AssertionError, match="relative error"):
        t.assert_close(small + 5e-4, small, rtol=1e-3)
    t.assert_close(small.astype(np.float32), small, scale=np.ones(4))
    # NaN stays wrong whatever the scale
    with pytest.raises(AssertionError, match="NaN/inf"):
        t.assert_close(np.array([np.nan, 1.0]), np.ones(2), rtol=1e9, scale=1e9)
    # a scale must be real, finite, >= 0 and broadcast to expected
    for bad, err in ((-1.0, ValueError), (np.nan, ValueError), (np.ones(3), ValueError),
                     (np.ones(4) * 1j, TypeError), ("big", TypeError)):
        with pytest.raises(err, match="assert_close: scale"):
            t.assert_close(small, small, scale=bad)


def test_assert_close_refuses_what_holds_no_numbers():
    for bad in (None, object(), "bogus"):
        with pytest.raises(TypeError, match="assert_close: actual"):
            t.assert_close(bad, np.zeros(2))
        with pytest.raises(TypeError, match="assert_close: expected"):
            t.assert_close(np.zeros(2), bad)


# --- assert_within and unit_roundoff -----------------------------------------------------------

def test_assert_within():
    expected = np.array([[1.0, 2.0], [3.0, -4.0]])
    bound = np.array([0.125, 2.0 ** -7])              # per column (exact binary fractions)
    t.assert_within(expected + [0.125, -2.0 ** -7], expected, bound)
    t.assert_within(_Device((expected + 0.01).astype(np.float32)), expected, 0.01 + 1e-6)
    with pytest.raises(AssertionError, match=r"^mine: (.|\n)*1 of 4 elements exceed their "
                                             r"bound(.|\n)*index \(1, 1\)"):
        t.assert_within(expected + [[0, 0], [0.0625, 2.0 ** -6]], expected, bound, msg="mine")
    t.assert_within(np.array([np.nan, np.inf]), np.array([np.nan, np.inf]), 0.0)
    with pytest.raises(AssertionError, match="NaN/inf"):
        t.assert_within(np.array([np.nan, 1.0]), np.ones(2), 1e300)
    with pytest.raises(AssertionError, match="shape mismatch"):
        t.assert_within(np.ones(3), np.ones(4), 1.0)
    t.assert_within(np.empty((0, 2)), np.empty((0, 2)), 0.0)
    for bad, err in ((-1.0, ValueError), (np.inf, ValueError), (np.ones(3), ValueError),
                     (None, TypeError), (1j, TypeError)):
        with pytest.raises(err, match="assert_within: bound"):
            t.assert_within(expected, expected, bad)


def test_unit_roundoff():
    assert t.unit_roundoff("float16") == 2.0 ** -11
    assert t.unit_roundoff("bfloat16") == 2.0 ** -8
    assert t.unit_roundoff("tf32") == 2.0 ** -11
    assert t.unit_roundoff(np.float32) == 2.0 ** -24
    assert t.unit_roundoff("float64") == 2.0 ** -53
    assert t.unit_roundoff("complex64") == 2.0 ** -24
    assert t.unit_roundoff("float8_e4m3fn") == 2.0 ** -4
    # rounding to nearest errs by at most u relative
    x = t.random_array(10_000, "float64", rng=0, low=-1e4, high=1e4)
    for name in ("float16", "bfloat16", "float32"):
        rounded = x.astype(name).astype(np.float64)
        assert np.all(np.abs(rounded - x) <= t.unit_roundoff(name) * np.abs(x))
    with pytest.raises(ValueError, match="unit_roundoff: dtype int32"):
        t.unit_roundoff("int32")
    with pytest.raises(TypeError, match="unit_roundoff: dtype"):
        t.unit_roundoff("bogus")


def test_tolerances_cover_every_dtype():
    for name in ALL_NAMES:
        assert name in t.TOLERANCES
        assert (t.TOLERANCES[name] == 0) == (np.dtype(name).kind in "biu")
    assert t.TOLERANCES["tf32"] == 1e-3


def test_import_without_hypothesis():
    code = ("import sys; sys.modules['hypothesis'] = None\n"
            "import numpy as np; from cudalibs import testing as t\n"
            "t.assert_close(t.random_array(4, 'float32', rng=0), t.random_array(4, 'float32', rng=0))\n"
            "t.ref.gemm(np.eye(2), np.eye(2))\n"
            "try:\n    t.shapes()\nexcept ImportError:\n    print('lazy')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "lazy"


# --- random_array and poison_value -----------------------------------------------------------

@pytest.mark.parametrize("name", ALL_NAMES)
@settings(max_examples=50, deadline=None)
@given(shape=t.shapes(max_dims=3, max_side=6), seed=seeds)
def test_random_array(name, shape, seed):
    a = t.random_array(shape, name, rng=seed)
    assert a.shape == shape and a.dtype == np.dtype(name) and a.flags.c_contiguous
    if name == "bool":
        assert a.size == 0 or a.any()
    else:
        wide = a.astype(np.complex128)
        assert np.all(wide != 0)
        if np.dtype(name).kind in "fcV":
            for part in (wide.real, wide.imag) if np.dtype(name).kind == "c" else (wide.real,):
                assert np.all((np.abs(part) >= 0.09) & (np.abs(part) <= 1.0))
        else:
            assert np.all(np.abs(wide) <= 4)
    np.testing.assert_array_equal(a, t.random_array(shape, name, rng=seed))


def test_random_array_ranges():
    rng = np.random.default_rng(1)
    a = t.random_array(1000, "float32", rng=rng, low=2.0, high=3.0)
    assert a.min() >= 2.0 and a.max() <= 3.0
    a = t.random_array(1000, "float64", rng=rng, low=-10.0, high=0.5)
    assert np.all(np.abs(a) >= 1.0) and a.min() >= -10 and a.max() <= 0.5
    assert t.random_array(1000, "uint8", rng=rng).min() >= 1
    assert t.random_array(1000, "float8_e4m3fn", rng=rng, low=-1e4, high=1e4).astype(
        np.float32).max() <= 448
    assert t.random_array(7, "float32", rng=rng).shape == (7,)
    with pytest.raises(ValueError):
        t.random_array(3, "float32", low=1.0, high=-1.0)
    with pytest.raises(ValueError):
        t.random_array(3, "float16", low=-1e-9, high=1e-9)
    with pytest.raises(TypeError):
        t.random_array(3, "U4")


@pytest.mark.parametrize("name", ALL_NAMES)
def test_poison_value(name):
    p = t.poison_value(name)
    dt = np.dtype(name)
    assert np.asarray(p).dtype == dt
    if dt.kind == "b":
        assert p
    elif dt.kind in "iu":
        assert p == (np.iinfo(dt).min if dt.kind == "i" else np.iinfo(dt).max)
    else:
        wide = np.complex128(np.asarray(p).astype(np.complex128))
        assert math.isnan(wide.real) and (dt.kind != "c" or math.isnan(wide.imag))
        poisoned = np.full(3, p, dtype=dt)
        with pytest.raises(AssertionError, match="NaN"):
            t.assert_close(poisoned, np.ones(3))


# --- strategies ------------------------------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(t.dtypes())
def test_dtypes_all(name):
    assert name in ALL_NAMES
    assert cd.lookup(name).name == name


@pytest.mark.parametrize("kinds,allowed", [
    (("float",), "f"), (("int",), "iu"), (("complex",), "c"), (("bool",), "b"), ("ml", "Vf"),
])
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_dtypes_kinds(kinds, allowed, data):
    name = data.draw(t.dtypes(kinds))
    assert np.dtype(name).kind in allowed
    assert (name in ("bfloat16", "float8_e4m3fn", "float8_e5m2")) == (kinds == "ml")


def test_dtypes_rejects_unknown_kind():
    with pytest.raises(ValueError):
        t.dtypes(("floats",))


@settings(max_examples=50, deadline=None)
@given(data=st.data(), lo_dims=st.integers(0, 3), lo_side=st.integers(0, 4))
def test_shapes_in_bounds(data, lo_dims, lo_side):
    shape = data.draw(t.shapes(lo_dims, lo_dims + 2, lo_side, lo_side + 3))
    assert isinstance(shape, tuple)
    assert lo_dims <= len(shape) <= lo_dims + 2
    assert all(lo_side <= n <= lo_side + 3 for n in shape)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), shape=t.shapes(max_dims=4, max_side=5))
def test_slices_for_is_valid(data, shape):
    index = data.draw(t.slices_for(shape))
    assert isinstance(index, tuple)
    assert index.count(Ellipsis) <= 1
    assert all(isinstance(i, (int, slice)) or i is Ellipsis for i in index)
    a = np.arange(math.prod(shape)).reshape(shape)
    view = a[index]  # never raises
    assert np.shares_memory(view, a) or view.size == 0 or view.ndim == 0


def test_slices_for_reaches_the_edge_cases():
    shape = (4, 5)
    find(t.slices_for(shape), lambda ix: any(isinstance(i, slice) and (i.step or 1) < 0 for i in ix))
    find(t.slices_for(shape), lambda ix: Ellipsis in ix)
    find(t.slices_for(shape), lambda ix: any(isinstance(i, int) and i < 0 for i in ix))
    find(t.slices_for(shape), lambda ix: len(ix) < 2 and Ellipsis not in ix)


@settings(max_examples=50, deadline=None)
@given(layout=t.layouts(), shape=t.shapes(min_dims=0, max_dims=3, max_side=5), seed=seeds)
def test_layouts(layout, shape, seed):
    assert layout in t.LAYOUTS
    a = t.random_array(shape, "float32", rng=seed)
    b = t.with_layout(a, layout)
    np.testing.assert_array_equal(a, b)
    if layout == "F":
        assert b.flags.f_contiguous
    if layout == "T" and a.ndim >= 2 and min(a.shape) > 1:
        assert b.flags.f_contiguous and not b.flags.c_contiguous
    if layout == "strided" and a.size > 1:
        assert not b.flags.c_contiguous and not b.flags.f_contiguous


def test_with_layout_rejects_unknown():
    with pytest.raises(ValueError):
        t.with_layout(np.ones(3), "K")


@settings(max_examples=50, deadline=None)
@given(data=st.data(), max_side=st.integers(1, 2048))
def test_matrix_sizes_in_range(data, max_side):
    n = data.draw(t.matrix_sizes(max_side))
    assert isinstance(n, int) and 1 <= n <= max_side


def test_matrix_sizes_reach_awkward_sizes():
    assert find(t.matrix_sizes(), lambda n: True) == 1
    find(t.matrix_sizes(), lambda n: n in (127, 129, 255, 257, 1023))
    find(t.matrix_sizes(), lambda n: n > 500 and n % 2 == 1)
    with pytest.raises(ValueError):
        t.matrix_sizes(0)


# --- numpy references --------------------------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(m=t.matrix_sizes(9), n=t.matrix_sizes(9), k=t.matrix_sizes(9),
       trans_a=st.sampled_from([False, True, "N", "T", "C"]),
       trans_b=st.sampled_from([False, True, "N", "T", "C"]),
       name=st.sampled_from(["float32", "float16", "complex64", "int8"]), seed=seeds)
def test_ref_gemm(m, n, k, trans_a, trans_b, name, seed):
    rng = np.random.default_rng(seed)
    op_a = t.random_array((m, k), name, rng=rng)
    op_b = t.random_array((k, n), name, rng=rng)
    c = t.random_array((m, n), name, rng=rng)
    stored_a = op_a if trans_a in (False, "N") else (op_a.T if trans_a in (True, "T") else op_a.T.conj())
    stored_b = op_b if trans_b in (False, "N") else (op_b.T if trans_b in (True, "T") else op_b.T.conj())
    out = t.ref.gemm(stored_a, stored_b, c, alpha=2, beta=-0.5, trans_a=trans_a, trans_b=trans_b)
    wide = np.complex128 if name == "complex64" else np.float64
    assert out.dtype == wide and out.shape == (m, n)
    expected = 2 * (op_a.astype(wide) @ op_b.astype(wide)) - 0.5 * c.astype(wide)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_ref_gemm_batched_and_errors():
    a = np.ones((3, 2, 4))
    b = np.ones((4, 5))
    assert t.ref.gemm(a, b).shape == (3, 2, 5)
    assert t.ref.gemm(a, b, c=np.ones(5), beta=1)[0, 0, 0] == 5
    assert t.ref.gemm(np.ones((2, 2)), np.ones((2, 2)), alpha=1j).dtype == np.complex128
    with pytest.raises(ValueError, match="inner dimensions"):
        t.ref.gemm(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="does not fit"):
        t.ref.gemm(np.ones((2, 3)), np.ones((3, 4)), c=np.ones((3, 4)))
    with pytest.raises(ValueError, match="trans"):
        t.ref.gemm(np.ones((2, 2)), np.ones((2, 2)), trans_a="X")


@pytest.mark.parametrize("name", ["cudalibs.testing", "cudalibs.dtypes"])
def test_dir_offers_the_public_names_only(name):
    import importlib

    module = importlib.import_module(name)
    dunders = {n for n in dir(module) if n.startswith("__") and n.endswith("__")}
    # no np, math, annotations, Mapping, dataclasses or private helper in tab completion ...
    assert set(dir(module)) - dunders <= set(module.__all__)
    # ... and every public name in it, each one there
    assert set(module.__all__) <= set(dir(module))
    for public in module.__all__:
        getattr(module, public)
