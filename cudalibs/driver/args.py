"""The conversions of the arguments every layer takes: integer sequences (shapes, strides,
windows, axes) and fill values.

A public call checks such an argument before any C call and names it, with its operation,
in the one message shape of cudalibs (``"<op>: <name> ..."``), whatever the caller passed
(None, a string, a float, an object).
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["int_arg", "int_tuple", "shape_tuple", "sequence", "fill_value"]


def int_arg(value, what: str) -> int:
    """``value`` as a Python int: an int or a numpy integer, not a bool (nor a float, which
    ``int()`` would truncate); ``what`` names it in messages (``"<op>: <name>"``).

    Raises
    ------
    TypeError
        ``value`` is not an integer.
    """
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what} must be an int, not {type(value).__name__} {value!r}")
    return operator.index(value)


def sequence(value, what: str, of: str = "values") -> list:
    """``value`` -- a list, tuple or other iterable, not a string -- as a list; ``what`` names
    it in messages, ``of`` what it holds (``"arrays"``).

    Raises
    ------
    TypeError
        ``value`` is None, a string, or not iterable.
    """
    # A str iterates its characters: never what a sequence argument means.
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{what} must be a sequence of {of}, not {type(value).__name__}")
    return list(value)


def int_tuple(value, what: str, n: int | None = None, *, scalar: bool = True
              ) -> tuple[int, ...]:
    """``value`` as a tuple of Python ints.

    Parameters
    ----------
    value : int or sequence of int
        A sequence of integers (numpy integers included), or with ``scalar`` one integer,
        repeated ``n`` times (once when ``n`` is None).
    what : str
        The argument in messages: ``"<op>: <name>"``.
    n : int, optional
        The length the tuple must have.
    scalar : bool, default True
        Whether one integer stands for the whole tuple.

    Raises
    ------
    TypeError
        ``value`` is neither (None, a string, a float, a bool, an object).
    ValueError
        ``n`` is given and the sequence has another length.
    """
    if scalar and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return (int(value),) * (1 if n is None else n)
    try:
        if isinstance(value, (str, bytes)):
            raise TypeError(value)
        out = tuple(operator.index(v) for v in value)
    except TypeError:
        count = "" if n is None else f"{n} "
        kind = f"an int or a sequence of {count}ints" if scalar else f"a sequence of {count}ints"
        raise TypeError(f"{what} must be {kind}, not {value!r}") from None
    if n is not None and len(out) != n:
        raise ValueError(f"{what} needs {n} values, got {out}")
    return out


def shape_tuple(shape, what: str = "shape") -> tuple[int, ...]:
    """A shape -- an int or a sequence of ints, none negative -- as a tuple of ints.

    Raises
    ------
    TypeError
        Not an int or a sequence of ints.
    ValueError
        A negative dimension.
    """
    dims = int_tuple(shape, what)
    for s in dims:
        if s < 0:
            raise ValueError(f"{what}: negative dimension {s} in {dims}")
    return dims


def fill_value(value, dtype, what: str) -> np.ndarray:
    """``value`` as the 0-d numpy array of ``dtype`` that :meth:`DeviceArray.fill` writes,
    checked before any C call; ``what`` names it in messages (``"full: value"``).

    Raises
    ------
    TypeError
        ``value`` is None (numpy would make it NaN).
    ValueError
        ``value`` is not a scalar, or does not fit ``dtype``.
    """
    if value is None:
        raise TypeError(f"{what} is required (got None)")
    try:
        pattern = np.array(value, dtype=dtype)
    except (OverflowError, ValueError, TypeError) as exc:
        into = "an array" if dtype is None else f"a {np.dtype(dtype)} array"
        raise ValueError(f"{what} {value!r} does not fit {into}: {exc}") from None
    if pattern.ndim:
        raise ValueError(f"{what} must be a scalar; use copy_ for arrays")
    return pattern
