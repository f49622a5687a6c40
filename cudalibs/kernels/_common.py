"""What every kernel wrapper shares: dtype groups, the operand check, output allocation, the
overlap check and the scalar checks.

Array arguments go through the one operand path of the driver layer
(:func:`cudalibs.runtime.operand.operand`), so a kernel refuses host data, freed memory, a
wrong dtype or a wrong device with the same words as every other library; what is left here
is what only the kernels need (their outputs, overlap rules and 32-bit launch limits).

Launches go through :func:`cudalibs.runtime.ptxlib.launch`, looked up on the module at each
call (one attribute read) so that a test can intercept every launch in one place.
"""

from __future__ import annotations

import numpy as np

from ..runtime import ptxlib
from ..driver.array import DeviceArray, arrays_overlap, empty
from ..runtime.operand import operand

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
F16 = np.dtype(np.float16)

#: Every floating type the elementwise kernels have (float32, float64, float16, bfloat16).
ALL_FLOATS = tuple(ptxlib.SUFFIX)
#: The types computed in float32: float32, float16, bfloat16.
HALF_FLOAT = tuple(d for d in ALL_FLOATS if d != F64)

U32_MAX = 2**32 - 1
GRID_YZ_MAX = 65535
GRID_X_MAX = 2**31 - 1


def array(x, op: str, name: str, dts=None, *, ndim=None, device=None, stream=None,
          contiguous: bool = True, written=None) -> DeviceArray:
    """``x`` through the one operand path; the kernels want C-contiguous data by default.
    ``written``: the kernel writes ``x`` (by default only an operand named ``out``)."""
    return operand(x, name, op, device=device, dtypes=dts, ndim=ndim, contiguous=contiguous,
                   stream=stream, written=written)


def check_no_overlap(op: str, out: DeviceArray, inputs, *, same_ok: bool) -> None:
    """Refuse an output that overlaps an input, except (when ``same_ok``) the very same
    elements, which elementwise kernels read before writing."""
    for name, a in inputs:
        if arrays_overlap(out, a):
            if (same_ok and out.address == a.address and out.shape == a.shape
                    and out.dtype == a.dtype):
                continue
            raise ValueError(f"{op}: out overlaps {name}" +
                             ("" if same_ok else "; this kernel cannot work in place"))


def output(out, op: str, shape, dtype, device, stream, inputs=(), *, same_ok: bool):
    """Check ``out`` (or allocate it, stream-ordered on ``stream``, when None)."""
    dtype = np.dtype(dtype)
    if out is None:
        return empty(shape, dtype, device=device, stream=stream)
    arr = array(out, op, "out", device=device, stream=stream)
    if arr.shape != tuple(shape):
        raise ValueError(f"{op}: out has shape {arr.shape}, expected {tuple(shape)}")
    if arr.dtype != dtype:
        raise TypeError(f"{op}: out has dtype {arr.dtype}, expected {dtype}")
    check_no_overlap(op, arr, inputs, same_ok=same_ok)
    return arr


def same(op: str, x: DeviceArray, y: DeviceArray, xname: str, yname: str) -> None:
    """Refuse two operands of different shapes or dtypes (the kernels do not broadcast)."""
    if x.shape != y.shape:
        raise ValueError(f"{op}: {xname} has shape {x.shape} but {yname} has {y.shape} "
                         "(no broadcasting)")
    if x.dtype != y.dtype:
        raise TypeError(f"{op}: {xname} is {x.dtype} but {yname} is {y.dtype}")


def real(op: str, name: str, value) -> float:
    """``value`` as a float, refusing bools and anything that is not a real number."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                     np.floating)):
        raise TypeError(f"{op}: {name} must be a real number, not {type(value).__name__}")
    return float(value)


def flag(op: str, name: str, value) -> bool:
    """``value`` as a bool, refusing anything that is not one (a 1 or a string is a mistake)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be a bool, not {type(value).__name__}")
    return bool(value)


def dim(op: str, what: str, n: int) -> int:
    """``n``, checked to fit the kernels' 32-bit size arguments."""
    if n > U32_MAX:
        raise ValueError(f"{op}: {what} = {n} exceeds the kernel's 32-bit limit {U32_MAX}")
    return n


def suffix(dt) -> str:
    """The kernel-name suffix of an element type (``"f32"``, ``"bf16"``, ...)."""
    return ptxlib.SUFFIX[dt]


def launch_elementwise(device, name: str, n: int, args: tuple, stream) -> None:
    """Launch a grid-stride kernel over ``n`` elements (nothing when ``n`` is 0)."""
    if n:
        grid, block = ptxlib.elementwise_grid(device, n)
        ptxlib.launch(device, name, grid, block, args, stream)


def matmul_operands(op: str, a, b, dts, stream):
    """The two matrices of a 2-D product: same dtype, one device, inner dimensions equal,
    sizes within the kernels' 32-bit limits.  Returns ``(a, b, device, m, n, k)``."""
    a = array(a, op, "a", dts, ndim=2, stream=stream)
    dev = a.device
    b = array(b, op, "b", dts, ndim=2, device=dev, stream=stream)
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: a is {a.dtype} but b is {b.dtype}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"{op}: inner dimensions differ: a {a.shape} @ b {b.shape}")
    for what, v in (("M", m), ("N", n), ("K", k)):
        dim(op, what, v)
    return a, b, dev, m, n, k
