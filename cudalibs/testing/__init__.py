"""Tools for testing GPU code against numpy: tolerances, random inputs, strategies, references.

cudalibs tests itself with these, and they are public so that you can test your own kernels the
same way::

    from hypothesis import given
    import cudalibs
    from cudalibs import testing as t

    @given(t.dtypes(kinds=("float",)), t.matrix_sizes(64), t.matrix_sizes(64))
    def test_my_kernel(dtype, m, n):
        a = t.random_array((m, n), dtype)
        t.assert_close(my_kernel(cudalibs.to_device(a)), t.ref.my_op(a), dtype)

What is here:

- ``TOLERANCES`` and :func:`assert_close`: one relative error for the whole array,
  ``‖actual − expected‖ / ‖expected‖`` in float64, against a tolerance chosen by element type
  (or by compute mode, ``compute="tf32"``), and an element-wise bound of 10 times that
  tolerance relative to ``|expected_i|`` plus a floor (the RMS of ``expected``, or a
  ``scale=`` such as ``|A| @ |B|``). A norm-wise error is what the error analysis of GEMM,
  convolution and reductions bounds, and a plain element-wise ``rtol`` would fail on the
  cancellations that any reordering of a sum produces; the floored element-wise bound still
  catches the one element that is zeroed, garbage or never written.
- :func:`assert_within` and :func:`unit_roundoff`: an element-wise bound of your own, from the
  error analysis of the arithmetic an operation does.
- :func:`random_array`: inputs with no exact zeros, so a kernel that skips an element or reads
  the wrong one cannot pass by multiplying by zero; :func:`poison_value` fills outputs before a
  kernel writes them, so an element it forgets to write is caught.
- Hypothesis strategies: :func:`dtypes`, :func:`shapes`, :func:`slices_for`, :func:`layouts`
  (with :func:`with_layout`), :func:`matrix_sizes`. hypothesis is imported only when a strategy
  is built, so ``assert_close`` and the references work without it.
- ``ref``: numpy reference implementations of the library operations, computed in float64
  (complex128 for complex types).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from .. import dtypes as _dtypes

__all__ = [
    "TOLERANCES", "assert_close", "assert_within", "unit_roundoff", "random_array",
    "poison_value", "with_layout", "dtypes", "shapes", "slices_for", "layouts", "matrix_sizes",
    "LAYOUTS", "ref",
]

# ---------------------------------------------------------------------------------------------
# Element-type classes
# ---------------------------------------------------------------------------------------------

#: Floating types numpy does not know natively (they come from ml_dtypes).
_ML_FLOATS = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
_KIND_NAMES = {
    "float": ("float16", "float32", "float64"),
    "int": ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
    "complex": ("complex64", "complex128"),
    "bool": ("bool",),
    "ml": _ML_FLOATS,
}


def _dtype(dtype) -> np.dtype:
    # Through the table, so an unsupported type fails with the table's own message.
    return _dtypes.lookup(dtype).numpy


def _is_exact(dt: np.dtype) -> bool:
    return dt.kind in "biu"


def _finfo(dt: np.dtype):
    if dt.name in _ML_FLOATS:
        import ml_dtypes

        return ml_dtypes.finfo(dt)
    return np.finfo(dt)


# ---------------------------------------------------------------------------------------------
# Tolerances and assert_close
# ---------------------------------------------------------------------------------------------

#: Relative (norm-wise) tolerance of :func:`assert_close`, by element type name or compute mode.
#: Integer and bool types are compared exactly (tolerance 0).
TOLERANCES: dict[str, float] = {
    "float64": 1e-12,
    "float32": 1e-5,
    "tf32": 1e-3,
    "float16": 1e-2,
    "bfloat16": 1e-2,
    "float8_e4m3fn": 1e-1,
    "float8_e5m2": 2e-1,
    "complex64": 1e-5,
    "complex128": 1e-12,
    **{name: 0.0 for name in _KIND_NAMES["int"] + _KIND_NAMES["bool"]},
}


def _to_numpy(x) -> np.ndarray:
    """A host numpy array from a numpy array, a DeviceArray (``.get()``) or an array-like."""
    if isinstance(x, np.ndarray):
        return x
    get = getattr(x, "get", None)
    if callable(get) and not isinstance(x, Mapping):
        x = get()
    return np.asarray(x)


def _tolerance_name(dtype) -> str:
    """The TOLERANCES key for a dtype-like or a compute-mode name such as ``"tf32"``."""
    if isinstance(dtype, str) and dtype in TOLERANCES:
        return dtype
    name = np.dtype(dtype).name
    if name not in TOLERANCES:
        raise ValueError(f"no tolerance for {name!r} (known: {', '.join(TOLERANCES)}); "
                         f"pass rtol=")
    return name


def _describe(actual, expected, header, detail, flat_index, which="first such element") -> str:
    idx = tuple(int(i) for i in np.unravel_index(int(flat_index), actual.shape))
    return (f"{header}\n  {detail}\n  {which} at index {idx}: "
            f"actual {actual[idx]}, expected {expected[idx]}")


#: The element-wise bound of :func:`assert_close` in multiples of its norm-wise tolerance.
#: The element errors of a result that meets the norm-wise bound have an RMS of at most ``tol``
#: times that of ``expected``; rounding errors spread like a Gaussian, whose largest of 10 M
#: draws is 5.3 RMS, so 10 leaves room, while one element that is zeroed or garbage, an error
#: of the order of the RMS of ``expected`` itself, exceeds it.
_ELEMENTWISE = 10.0


def _finite_pair(a, e, header):
    """``(a, e, finite)``: both at least 1-d in float64 (complex128 if either is complex) and
    the mask of the reference's finite elements, after checking that ``a`` is NaN or infinite
    exactly where ``e`` is, with the same special values."""
    wide = np.complex128 if (a.dtype.kind == "c" or e.dtype.kind == "c") else np.float64
    # At least 1-d: the masks below are assigned into, which a 0-d result would not allow.
    a64 = np.atleast_1d(a.astype(wide))
    e64 = np.atleast_1d(e.astype(wide))
    finite = np.isfinite(e64)
    bad = finite & ~np.isfinite(a64)
    if not finite.all():
        # Where the reference is NaN or infinite, the result must be the same special value.
        ea, aa = e64[~finite], a64[~finite]
        same = (np.isnan(ea) & np.isnan(aa)) | (ea == aa)
        bad[~finite] = ~same
    if bad.any():
        raise AssertionError(_describe(a, e, header, f"{int(bad.sum())} of {a.size} elements are "
                                       f"NaN/inf where the reference differs", np.argmax(bad)))
    return a64, e64, finite


def _numbers(x, op, what) -> np.ndarray:
    """``x`` on the host (:func:`_to_numpy`), refused unless it holds numbers."""
    arr = _to_numpy(x)
    if arr.dtype.kind not in "biufc" and arr.dtype.name not in _ML_FLOATS:
        raise TypeError(f"{op}: {what} must be an array of numbers (or a DeviceArray), not "
                        f"{type(x).__name__} ({arr.dtype})")
    return arr


def _magnitudes(values, shape, op, what) -> np.ndarray:
    """``values`` as a float64 array of ``shape`` (broadcast), checked finite and >= 0."""
    m = _numbers(values, op, what)
    if m.dtype.kind == "c":
        raise TypeError(f"{op}: {what} must be real, not {m.dtype}")
    try:
        m = np.broadcast_to(m.astype(np.float64), shape)
    except ValueError:
        raise ValueError(f"{op}: {what} of shape {m.shape} does not broadcast to the "
                         f"shape {shape} of expected") from None
    if not (np.isfinite(m).all() and (m >= 0).all()):
        raise ValueError(f"{op}: {what} must be finite and >= 0")
    return np.atleast_1d(m)


def assert_close(actual, expected, dtype=None, *, rtol=None, compute=None, scale=None, msg=""):
    """Assert that ``actual`` equals ``expected`` within the tolerance of the element type.

    Two bounds apply, both computed in float64 (complex128 for complex types), with ``tol``
    the tolerance (:data:`TOLERANCES` of the element type, or ``rtol``):

    - norm-wise, ``‖actual − expected‖₂ ≤ tol · ‖expected‖₂``: the bound that the error
      analysis of GEMM, convolution and reductions gives. With ``scale``, ``‖expected‖₂`` is
      replaced by ``max(‖expected‖₂, ‖scale‖₂)``.
    - element-wise, ``|actual_i − expected_i| ≤ 10 · tol · (|expected_i| + s_i)``, where ``s``
      is ``scale`` when given and otherwise one floor for the whole array, the RMS of
      ``expected``. The floor keeps an element whose sum cancelled to near zero from failing
      on rounding errors that are relative to the summands, while one wrong element (zeroed,
      garbage, left unwritten in a large array) still fails, which the norm-wise bound alone
      lets through once the array is large enough.

    When ``expected`` is all zeros (and ``scale`` is not given or all zeros) both bounds are
    absolute: ``‖actual‖₂ ≤ tol`` and ``|actual_i| ≤ 10 · tol``.

    Parameters
    ----------
    actual : numpy.ndarray, DeviceArray or array-like
        The result under test. Anything with a ``.get()`` method (a :class:`DeviceArray`) is
        copied to the host first; anything else goes through ``numpy.asarray``.
    expected : array-like
        The reference, typically from :data:`ref` in float64. Converted like ``actual``.
    dtype : dtype-like, optional
        The element type whose tolerance applies; default ``actual``'s dtype. Pass the input
        type when the output is wider (a float16 GEMM that writes float32).
    rtol : float, optional
        An explicit tolerance, overriding ``dtype`` and ``compute``.
    compute : str or dtype-like, optional
        The compute mode, such as ``"tf32"``: the looser of its tolerance and the dtype's
        applies.
    scale : array-like, optional
        The magnitude each element's error is relative to, real, ``>= 0`` and broadcastable
        to ``expected``'s shape: for a product whose sums may cancel, ``|A| @ |B|`` (in
        float64), so that an element that cancelled is judged against the size of its terms.
        It replaces the RMS floor of the element-wise bound, and enters the norm-wise one as
        above.
    msg : str, optional
        Prefixed to the failure message.

    Raises
    ------
    AssertionError
        The shapes differ; an integer or bool result is not exactly equal; ``actual`` holds
        NaN or infinity where ``expected`` is finite (or not the same NaN/infinity where
        ``expected`` is not), whatever the tolerance; or the norm-wise or the element-wise
        bound is exceeded. The message gives the shape, dtype, the error against the bound
        and the worst element.
    TypeError
        ``actual``, ``expected`` or ``scale`` holds no numbers (``scale`` complex).
    ValueError
        ``scale`` is negative, not finite or not broadcastable to ``expected``'s shape.

    See Also
    --------
    TOLERANCES : the tolerance of each element type.
    assert_within : an element-wise bound of your own, from an error analysis.
    """
    a = _numbers(actual, "assert_close", "actual")
    e = _numbers(expected, "assert_close", "expected")
    prefix = f"{msg}: " if msg else ""
    if a.shape != e.shape:
        raise AssertionError(f"{prefix}shape mismatch: actual {a.shape}, expected {e.shape}")
    name = _tolerance_name(a.dtype if dtype is None else dtype)
    if rtol is not None:
        tol = float(rtol)
    else:
        tol = TOLERANCES[name]
        if compute is not None:
            # The looser of the two: a bfloat16 output rounds more than tf32 arithmetic does.
            tol = max(tol, TOLERANCES[_tolerance_name(compute)])
    s = None if scale is None else _magnitudes(scale, e.shape, "assert_close", "scale")
    header = f"{prefix}arrays not close: shape {a.shape}, dtype {a.dtype}"
    if a.size == 0:
        return

    if tol == 0 and name in _KIND_NAMES["int"] + _KIND_NAMES["bool"]:
        if e.dtype.kind in "fc" or e.dtype.name in _ML_FLOATS:
            diff = a.astype(np.complex128) != e.astype(np.complex128)
        else:
            diff = a != e
        if diff.any():
            raise AssertionError(_describe(a, e, header, f"{int(diff.sum())} of {a.size} elements "
                                           f"differ ({name} compares exactly)", np.argmax(diff)))
        return

    a64, e64, finite = _finite_pair(a, e, header)
    d = np.zeros(a64.shape)
    d[finite] = np.abs(a64[finite] - e64[finite])
    num = float(np.linalg.norm(d.ravel()))
    e_norm = float(np.linalg.norm(e64[finite]))
    den = e_norm if s is None else max(e_norm, float(np.linalg.norm(s[finite])))
    err = num / den if den > 0 else num
    if not err <= tol:
        kind = "relative" if den > 0 else "absolute (the reference is all zeros)"
        raise AssertionError(_describe(a, e, header, f"{kind} error {err:.3e} > tolerance "
                                       f"{tol:.1e}", np.argmax(d), "worst element"))

    # Element-wise: each error against 10 tol (|expected_i| + floor).
    if den == 0:
        floor, what = 1.0, "1 (the reference is all zeros)"
    elif s is None:
        floor = e_norm / math.sqrt(int(finite.sum()))
        what = f"the RMS of expected, {floor:.3g}"
    else:
        floor, what = s, "scale"
    limit = _ELEMENTWISE * tol * (np.abs(e64) + floor)
    over = finite & (d > limit)
    if over.any():
        ratio = np.zeros(d.shape)
        np.divide(d, limit, out=ratio, where=over & (limit > 0))
        ratio[over & (limit == 0)] = np.inf
        worst = int(np.argmax(ratio))
        raise AssertionError(_describe(
            a, e, header, f"{int(over.sum())} of {a.size} elements differ by more than "
            f"{_ELEMENTWISE:g} x tolerance {tol:.1e} x (|expected| + {what}); the worst by "
            f"{ratio.flat[worst]:.3g} times that", worst, "worst element"))


def assert_within(actual, expected, bound, *, msg=""):
    """Assert ``|actual − expected| ≤ bound`` element by element, for a bound of your own.

    Where the arithmetic of an operation is known well enough to bound each element's error
    -- a dot product of float16 vectors accumulated in float32 errs by at most
    ``γ_n Σ|x_i y_i|`` before its result is rounded (:func:`unit_roundoff` gives the ``u`` of
    ``γ_n = n u / (1 − n u)``) -- that bound is tighter and better founded than the generic
    tolerance of :func:`assert_close`. Computed in float64 (complex128 for complex types).

    Parameters
    ----------
    actual : numpy.ndarray, DeviceArray or array-like
        Converted as by :func:`assert_close`.
    expected : array-like
        The reference, computed so that its own error is negligible against ``bound`` (or
        included in it).
    bound : float or array-like
        The largest admissible absolute error of each element: finite, ``>= 0``, broadcastable
        to ``expected``'s shape.
    msg : str, optional
        Prefixed to the failure message.

    Raises
    ------
    AssertionError
        The shapes differ; ``actual`` holds NaN or infinity where ``expected`` is finite (or
        not the same NaN/infinity where ``expected`` is not); or an element's error exceeds
        its bound. The message gives how many, the worst element's error against its bound,
        its index and values.
    TypeError
        An argument holds no numbers (``bound`` complex).
    ValueError
        ``bound`` is negative, not finite or not broadcastable to ``expected``'s shape.
    """
    a = _numbers(actual, "assert_within", "actual")
    e = _numbers(expected, "assert_within", "expected")
    limit = _magnitudes(bound, e.shape, "assert_within", "bound")
    prefix = f"{msg}: " if msg else ""
    if a.shape != e.shape:
        raise AssertionError(f"{prefix}shape mismatch: actual {a.shape}, expected {e.shape}")
    if a.size == 0:
        return
    header = f"{prefix}arrays not within the bound: shape {a.shape}, dtype {a.dtype}"
    a64, e64, finite = _finite_pair(a, e, header)
    d = np.zeros(a64.shape)
    d[finite] = np.abs(a64[finite] - e64[finite])
    over = finite & (d > limit)
    if over.any():
        excess = np.where(over, d - limit, 0.0)
        worst = int(np.argmax(excess))
        raise AssertionError(_describe(
            a, e, header, f"{int(over.sum())} of {a.size} elements exceed their bound; the "
            f"worst is off by {d.flat[worst]:.3e} against a bound of {limit.flat[worst]:.3e}",
            worst, "worst element"))


def unit_roundoff(dtype) -> float:
    """The unit roundoff ``u`` of a floating type or of the ``"tf32"`` compute mode.

    Half the gap between 1 and the next representable number, ``2**-p`` for ``p`` significand
    bits: rounding to nearest errs by at most ``u`` relative to the value, in the normal
    range. float16 ``2**-11``, bfloat16 ``2**-8``, tf32 ``2**-11``, float32 ``2**-24``,
    float64 ``2**-53``; a complex type has that of its parts.

    Parameters
    ----------
    dtype : dtype-like or "tf32"

    Returns
    -------
    float

    Raises
    ------
    TypeError
        ``dtype`` is not an element type.
    ValueError
        Not a floating or complex type.
    """
    if isinstance(dtype, str) and dtype == "tf32":
        return 2.0 ** -11
    try:
        dt = _dtype(dtype)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"unit_roundoff: dtype {dtype!r} is not an element type: {exc}") \
            from None
    if dt.kind not in "fc" and dt.name not in _ML_FLOATS:
        raise ValueError(f"unit_roundoff: dtype {dt} is not a floating type: it has no unit "
                         "roundoff")
    return float(_finfo(dt).eps) / 2


# ---------------------------------------------------------------------------------------------
# Random inputs and poison
# ---------------------------------------------------------------------------------------------

def _rng(rng) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def _nonzero_uniform(gen: np.random.Generator, shape, low: float, high: float) -> np.ndarray:
    """Uniform on ``[low, high]`` with the band ``|x| < 0.1 * max(|low|, |high|)`` cut out."""
    if not (math.isfinite(low) and math.isfinite(high)) or low > high:
        raise ValueError(f"need finite low <= high, got low={low}, high={high}")
    floor = 0.1 * max(abs(low), abs(high))
    neg = (low, min(high, -floor))           # the part of [low, high] at or below -floor
    pos = (max(low, floor), high)            # ... and at or above +floor
    len_neg = max(neg[1] - neg[0], 0.0) if low <= -floor else 0.0
    len_pos = max(pos[1] - pos[0], 0.0) if high >= floor else 0.0
    total = len_neg + len_pos
    if total == 0.0:
        if low == high != 0:
            return np.full(shape, low, dtype=np.float64)
        raise ValueError(f"[{low}, {high}] holds no values away from zero")
    u = gen.uniform(0.0, total, size=shape)
    return np.where(u < len_neg, neg[0] + u, pos[0] + (u - len_neg))


def random_array(shape, dtype, *, rng=None, low=-1.0, high=1.0) -> np.ndarray:
    """A fresh random host array with no exact zeros (bool: not all False).

    Float values are uniform on ``[low, high]`` without the band ``|x| < 0.1 * max(|low|,
    |high|)``, so the default draws from ±[0.1, 1]: no element can hide a missed read by being
    zero, and sums of products stay well scaled. bfloat16 and float8 are drawn in float32 and
    rounded; complex types have both parts drawn that way. Integer types draw nonzero integers
    from ``[4*low, 4*high]`` (so ±[1, 4] by default; positive only for unsigned types), small
    enough that an int8 GEMM accumulating in int32 cannot overflow. bool is random with at least
    one True.

    Parameters
    ----------
    shape : int or tuple of int
    dtype : dtype-like
        Any type in :data:`cudalibs.dtypes.TABLE`.
    rng : numpy.random.Generator or int, optional
        The generator, or a seed for a new one; default a fresh unseeded generator.
    low, high : float, optional
        The value range (see above).

    Returns
    -------
    numpy.ndarray
        C-contiguous, of ``shape`` and ``dtype``.

    Raises
    ------
    ValueError
        The range holds no value the type can represent away from zero.
    """
    dt = _dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)
    gen = _rng(rng)
    if dt.kind == "b":
        out = gen.integers(0, 2, size=shape).astype(bool)
        if out.size and not out.any():
            out.flat[gen.integers(out.size)] = True
        return out
    if _is_exact(dt):
        info = np.iinfo(dt)
        lo = max(math.ceil(4 * low), int(info.min), 1 if dt.kind == "u" else int(info.min))
        hi = min(math.floor(4 * high), int(info.max))
        pos = (max(lo, 1), hi)
        neg = (lo, min(hi, -1))
        n_pos = max(pos[1] - pos[0] + 1, 0)
        n_neg = max(neg[1] - neg[0] + 1, 0)
        if n_pos + n_neg == 0:
            raise ValueError(f"no nonzero {dt} in [{4 * low}, {4 * high}]")
        k = gen.integers(0, n_pos + n_neg, size=shape)
        return np.where(k < n_neg, neg[0] + k, pos[0] + (k - n_neg)).astype(dt)

    def part():
        x = _nonzero_uniform(gen, shape, float(low), float(high))
        if dt.kind == "c":
            return x
        big = float(_finfo(dt).max)
        x = np.clip(x, -big, big)
        if dt.name in _ML_FLOATS:
            x = x.astype(np.float32)
        return x

    if dt.kind == "c":
        out = (part() + 1j * part()).astype(dt)
        zero = (out.real == 0) | (out.imag == 0)
    else:
        out = part().astype(dt)
        zero = out.astype(np.float64) == 0
    if zero.any():
        raise ValueError(f"[{low}, {high}] rounds to zero in {dt}; use a wider range")
    return out


def poison_value(dtype):
    """A value that a correct kernel never leaves behind, to fill outputs before it runs.

    Parameters
    ----------
    dtype : dtype-like
        Any type in :data:`cudalibs.dtypes.TABLE`.

    Returns
    -------
    numpy scalar of ``dtype``
        NaN for floating types (bfloat16 and float8 included; NaN + NaN·j for complex), the
        type's minimum for signed integers, its maximum for unsigned ones (whose minimum, 0, is
        what an unwritten zero-filled output already holds), True for bool.
    """
    dt = _dtype(dtype)
    if dt.kind == "b":
        return np.bool_(True)
    if dt.kind == "i":
        return dt.type(np.iinfo(dt).min)
    if dt.kind == "u":
        return dt.type(np.iinfo(dt).max)
    if dt.kind == "c":
        return np.array(complex(math.nan, math.nan), dtype=dt)[()]
    return np.array(math.nan, dtype=np.float32).astype(dt)[()]


#: The memory layouts :func:`layouts` draws and :func:`with_layout` builds.
LAYOUTS = ("C", "F", "T", "strided")


def with_layout(array, layout: str) -> np.ndarray:
    """The values of ``array`` in the memory layout ``layout``, as a numpy array or view.

    Parameters
    ----------
    array : array-like
    layout : {"C", "F", "T", "strided"}
        ``"C"`` row-major; ``"F"`` column-major; ``"T"`` the transpose (``.T``) of a row-major
        array of the reversed shape, i.e. axes in reversed memory order as a transposed view
        produces them; ``"strided"`` a view taking every other element, in every axis, of a
        larger row-major buffer (gaps between elements and rows).

    Returns
    -------
    numpy.ndarray
        Equal to ``array`` element by element.
    """
    a = np.asarray(array)
    if layout == "C":
        return np.ascontiguousarray(a)
    if layout == "F":
        return np.asfortranarray(a)
    if layout == "T":
        return np.ascontiguousarray(a.T).T
    if layout == "strided":
        if a.ndim == 0:
            return a.copy()
        buf = np.empty(tuple(2 * n for n in a.shape), dtype=a.dtype)
        view = buf[tuple(slice(None, None, 2) for _ in a.shape)]
        view[...] = a
        return view
    raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")


# ---------------------------------------------------------------------------------------------
# Hypothesis strategies (hypothesis is imported when one is built)
# ---------------------------------------------------------------------------------------------

def _strategies():
    """``hypothesis.strategies``, or an ImportError that says how to install it.

    hypothesis comes with the ``test`` extra only, so a plain install reaches this without it;
    a bare ``No module named 'hypothesis'`` would not say which install brings it.  The hint
    names the package itself too: the extras are this project's, not the package index's.
    """
    try:
        from hypothesis import strategies
    except ImportError as exc:
        raise ImportError("the cudalibs.testing strategies need hypothesis, which the test "
                          "extra installs: pip install hypothesis, or in a checkout of "
                          'cudalibs pip install -e ".[test]"') from exc
    return strategies


def dtypes(kinds=("float", "int", "complex", "bool", "ml")):
    """Strategy: element type names from :data:`cudalibs.dtypes.TABLE`.

    Parameters
    ----------
    kinds : iterable of str
        Which classes to draw from: ``"float"`` (float16/32/64), ``"int"`` (signed and
        unsigned), ``"complex"``, ``"bool"``, ``"ml"`` (bfloat16 and float8 from ml_dtypes).

    Returns
    -------
    hypothesis.strategies.SearchStrategy of str
        Names such as ``"float32"``; ``numpy.dtype(name)`` accepts each (``cudalibs.dtypes``
        registers the ml_dtypes ones).
    """
    st = _strategies()

    if isinstance(kinds, str):
        kinds = (kinds,)
    unknown = [k for k in kinds if k not in _KIND_NAMES]
    if unknown:
        raise ValueError(f"unknown dtype kinds {unknown}; choose from {sorted(_KIND_NAMES)}")
    known = {row.name for row in _dtypes.TABLE.values()}
    names = [n for k in kinds for n in _KIND_NAMES[k] if n in known]
    if not names:
        raise ValueError(f"no dtypes of kinds {tuple(kinds)} are available")
    return st.sampled_from(names)


def shapes(min_dims=0, max_dims=4, min_side=0, max_side=8):
    """Strategy: array shapes, tuples of ``min_dims`` to ``max_dims`` sides.

    Parameters
    ----------
    min_dims, max_dims : int
        Number of dimensions; 0 gives the scalar shape ``()``.
    min_side, max_side : int
        Size of each dimension; 0 gives empty arrays.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of tuple of int
    """
    st = _strategies()

    if not 0 <= min_dims <= max_dims or not 0 <= min_side <= max_side:
        raise ValueError("need 0 <= min_dims <= max_dims and 0 <= min_side <= max_side")
    return st.lists(st.integers(min_side, max_side), min_size=min_dims,
                    max_size=max_dims).map(tuple)


def slices_for(shape):
    """Strategy: a basic index (a tuple) that is valid for an array of ``shape``.

    Each indexed axis gets an integer (negative ones too) or a slice whose start and stop may
    be omitted, negative or past the end and whose step may be omitted or negative. The index
    may cover every axis, only the leading ones, or replace a run of axes with ``Ellipsis``.

    Parameters
    ----------
    shape : tuple of int

    Returns
    -------
    hypothesis.strategies.SearchStrategy of tuple
        ``numpy.empty(shape)[index]`` never raises for a drawn ``index``.
    """
    st = _strategies()

    shape = tuple(int(n) for n in shape)

    def axis(n):
        bound = st.none() | st.integers(-n - 2, n + 2)
        step = st.none() | st.integers(-3, 3).filter(bool)
        sl = st.builds(slice, bound, bound, step)
        return (st.integers(-n, n - 1) | sl) if n > 0 else sl

    @st.composite
    def index(draw):
        parts = [draw(axis(n)) for n in shape]
        mode = draw(st.sampled_from(("all", "leading", "ellipsis")))
        if mode == "leading":
            parts = parts[:draw(st.integers(0, len(parts)))]
        elif mode == "ellipsis":
            i = draw(st.integers(0, len(parts)))
            j = draw(st.integers(i, len(parts)))
            parts[i:j] = [Ellipsis]
        return tuple(parts)

    return index()


def layouts():
    """Strategy: a memory layout name, one of ``"C"``, ``"F"``, ``"T"``, ``"strided"``.

    Build an array in the drawn layout with :func:`with_layout`.

    Returns
    -------
    hypothesis.strategies.SearchStrategy of str
    """
    st = _strategies()

    return st.sampled_from(LAYOUTS)


def _primes(limit: int) -> list[int]:
    sieve = bytearray([1]) * (limit + 1)
    sieve[0] = 0
    if limit >= 1:
        sieve[1] = 0
    for p in range(2, int(limit ** 0.5) + 1):
        if sieve[p]:
            sieve[p * p::p] = bytearray(len(sieve[p * p::p]))
    return [i for i in range(limit + 1) if sieve[i]]


def matrix_sizes(max_side=1024):
    """Strategy: a matrix dimension in ``[1, max_side]``, biased toward awkward sizes.

    Tiled kernels are most often wrong at the edges of their tiles, so the draws favour 1,
    primes, odd numbers and powers of two ± 1 over round numbers.

    Parameters
    ----------
    max_side : int

    Returns
    -------
    hypothesis.strategies.SearchStrategy of int
    """
    st = _strategies()

    max_side = int(max_side)
    if max_side < 1:
        raise ValueError(f"max_side must be >= 1, got {max_side}")
    special = {1}
    p = 2
    while p <= 2 * max_side:
        special.update(x for x in (p - 1, p, p + 1) if x <= max_side)
        p *= 2
    primes = _primes(max_side)
    odd = st.integers(0, (max_side - 1) // 2).map(lambda k: 2 * k + 1)
    # One_of shrinks toward its first branch, so failures shrink toward 1.
    choices = [st.sampled_from(sorted(special))]
    if primes:
        choices.append(st.sampled_from(primes))
    return st.one_of(*choices, odd, st.integers(1, max_side))


from . import ref  # noqa: E402  (the references import the helpers above)


def __dir__() -> list[str]:
    """The public names (:data:`__all__`) and the module's dunders: tab completion offers
    what this module is for, not the modules it imports (``np``, ``math``, ``Mapping``)."""
    return sorted(set(__all__) | {n for n in globals() if n.startswith("__") and n.endswith("__")})
