"""Checks of the layer / RMS norm problems, shared by their plans and one-shot functions
(no library call)."""

from __future__ import annotations

import math
import operator

import numpy as np

from ... import dtypes as _dtypes
from ...driver.array import DeviceArray
from ...errors import CudaLibsError
from ...runtime.operand import operand as _operand
from .. import _lib

__all__ = ["NoNormEngineError", "NORM_MODES", "DATA_DTYPES", "F32", "MAX_ALIGNMENT", "NAMES", "check_mode",
           "check_ndim", "check_eps", "check_data", "check_weight", "check_stat",
           "alignment_of", "require_aligned", "split_rows", "outs_of", "check_forward",
           "check_backward", "check_stats", "given_outs", "check_algo"]

#: mode= names -> cudnnBackendNormMode_t.
NORM_MODES = {"layer": _lib.CUDNN_LAYER_NORM, "rms": _lib.CUDNN_RMS_NORM}
DATA_DTYPES = tuple(_dtypes.lookup(n).numpy for n in ("float32", "float16", "bfloat16"))
F32 = np.dtype(np.float32)
#: The largest byte alignment a plan declares (pool allocations are 256-byte aligned).
MAX_ALIGNMENT = 16
NAMES = {"layer": "layer norm", "rms": "RMS norm"}



class NoNormEngineError(CudaLibsError, ValueError):
    """cuDNN's heuristics offer no engine that runs a norm problem on this device."""


# -- problem checks (no library call) --------------------------------------------------------
def check_mode(mode) -> str:
    if mode not in NORM_MODES:
        raise ValueError(f"mode must be one of {sorted(NORM_MODES)}, not {mode!r}")
    return mode


def check_ndim(normalized_ndim, x, op) -> int:
    try:
        k = operator.index(normalized_ndim)
    except TypeError:
        raise TypeError(f"{op}: normalized_ndim must be an int, not "
                        f"{type(normalized_ndim).__name__}") from None
    if not 1 <= k <= len(x.shape):
        raise ValueError(f"{op}: normalized_ndim must be in [1, {len(x.shape)}] for x of shape "
                         f"{x.shape}, got {k}")
    return k


def check_eps(eps, op) -> float:
    try:
        e = float(eps)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: eps must be a number, not {eps!r}") from None
    if not (math.isfinite(e) and e >= 0.0):
        raise ValueError(f"{op}: eps must be finite and >= 0, got {eps!r}")
    if e > 0.0 and float(np.float32(e)) == 0.0:
        raise ValueError(f"{op}: eps {e!r} is below float32's smallest value (cuDNN reads it "
                         "as a float32)")
    return e


def check_data(arr, name, op, shape=None, dtype=None):
    """A data operand: float32/16/bf16 (or exactly ``dtype``), C-contiguous, not empty, of
    ``shape`` when given."""
    if dtype is None and arr.dtype not in DATA_DTYPES:
        raise TypeError(f"{op}: {name} has dtype {arr.dtype}; supported: float32, float16, "
                        "bfloat16")
    if dtype is not None and arr.dtype != dtype:
        raise TypeError(f"{op}: {name} has dtype {arr.dtype}, expected {dtype} (like x)")
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{op}: {name} has shape {arr.shape}, expected {shape} (like x)")
    if arr.size == 0:
        raise ValueError(f"{op}: {name} is empty (shape {arr.shape})")
    if not arr.is_c_contiguous:
        raise ValueError(f"{op}: {name} must be C-contiguous (shape {arr.shape}, strides "
                         f"{arr.strides}); make a contiguous copy with .copy()")
    return arr


def check_weight(w, name, x, k, op, wdtype=None):
    """The weight (or bias) of a problem: ``x.shape[-k:]``, float32 or x's dtype (or exactly
    ``wdtype``), C-contiguous."""
    want = x.shape[len(x.shape) - k:]
    if w.shape != want:
        raise ValueError(f"{op}: {name} has shape {w.shape}; normalising over the last {k} "
                         f"dimension(s) of x {x.shape} needs {want}")
    if wdtype is not None:
        if w.dtype != wdtype:
            raise TypeError(f"{op}: {name} has dtype {w.dtype}, expected {wdtype} (like "
                            "weight)")
    elif w.dtype != F32 and w.dtype != x.dtype:
        raise TypeError(f"{op}: {name} has dtype {w.dtype}; with x {x.dtype} it must be "
                        f"float32 or {x.dtype}")
    if not w.is_c_contiguous:
        raise ValueError(f"{op}: {name} must be C-contiguous (strides {w.strides})")
    return w


def check_stat(s, name, rows, op):
    """Saved statistics: float32, C-contiguous, one element per row."""
    if s is None:
        raise TypeError(f"{op}: {name} is required (the statistics the training forward "
                        "returned)")
    if s.dtype != F32:
        raise TypeError(f"{op}: {name} has dtype {s.dtype}; statistics are float32")
    if s.size != rows:
        raise ValueError(f"{op}: {name} has {s.size} elements (shape {s.shape}) but the problem "
                         f"has {rows} rows: statistics from another problem?")
    if not s.is_c_contiguous:
        raise ValueError(f"{op}: {name} must be C-contiguous (strides {s.strides})")
    return s


def alignment_of(*arrays) -> int:
    """The byte alignment every pointer of ``arrays`` has (None entries skipped), capped at
    :data:`MAX_ALIGNMENT`."""
    bits = MAX_ALIGNMENT
    for a in arrays:
        if a is not None:
            bits |= a.address
    return bits & -bits


def require_aligned(op, alignment) -> None:
    """Refuse pointers below 16-byte alignment before any C call: cuDNN 9.19's norm engines
    finalize for a smaller declared alignment, then fail at execution with
    CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER (seen for a 2-byte aligned float16 x)."""
    if alignment < MAX_ALIGNMENT:
        raise NoNormEngineError(
            f"{op}: every array must be {MAX_ALIGNMENT}-byte aligned, but one is only "
            f"{alignment}-byte aligned (a view starting inside a buffer); cuDNN's norm engines "
            "fail on such pointers: pass a copy (x.copy())")


def split_rows(shape, k):
    lead = shape[:len(shape) - k]
    rows = int(np.prod(lead, dtype=np.int64)) if lead else 1
    feats = int(np.prod(shape[len(shape) - k:], dtype=np.int64))
    return rows, feats, lead + (1,) * k


def outs_of(out, n, op):
    """``out=`` as a list of ``n`` entries (one array: the first output)."""
    if out is None:
        return [None] * n
    if isinstance(out, (tuple, list)):
        if len(out) != n:
            raise ValueError(f"{op}: out has {len(out)} entries, this call has {n} outputs")
        return list(out)
    return [out] + [None] * (n - 1)


# -- argument checks shared by the plans and the one-shots ---------------------------------------
def check_forward(op, mode, x, w, b, normalized_ndim) -> int:
    check_data(x, "x", op)
    k = check_ndim(normalized_ndim, x, op)
    check_weight(w, "weight", x, k, op)
    if b is not None:
        if mode == "rms":
            raise ValueError(f"{op}: RMS norm takes no bias here (mode='rms')")
        check_weight(b, "bias", x, k, op, wdtype=w.dtype)
    return k


def check_backward(op, x, dy, w, normalized_ndim) -> int:
    check_data(x, "x", op)
    check_data(dy, "dy", op, shape=x.shape, dtype=x.dtype)
    k = check_ndim(normalized_ndim, x, op)
    check_weight(w, "weight", x, k, op)
    return k


def check_stats(op, mode, m, r, rows):
    if mode == "layer":
        return check_stat(m, "mean", rows, op), check_stat(r, "inv_std", rows, op)
    if m is not None:
        raise ValueError(f"{op}: RMS norm has no mean statistic; pass None")
    return None, check_stat(r, "inv_rms", rows, op)


def given_outs(outs, op, dev) -> list:
    """The ``out=`` entries through the operand path (None stays None)."""
    return [o if o is None or type(o) is DeviceArray and o.device is dev
            else _operand(o, f"out[{i}]", op, device=dev) for i, o in enumerate(outs)]


def check_algo(algo, op) -> str:
    if algo not in ("heuristic", "find"):
        raise ValueError(f"{op}: algo must be 'heuristic' or 'find', not {algo!r}")
    return algo


