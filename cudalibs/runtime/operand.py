"""The one operand path: anything array-like in, a checked :class:`DeviceArray` out.

Every library function of cudalibs (cuBLAS, cuDNN, NCCL, the kernels) turns its array
arguments into DeviceArrays here, for a named parameter, with the checks the call needs:

- the conversion itself (:func:`~cudalibs.driver.interop.coerce`): a DeviceArray as is, a
  ``__cuda_array_interface__`` or DLPack array borrowed without a copy, host data refused
  with one message whatever protocol it speaks;
- the buffer still open (:class:`~cudalibs.errors.ClosedError` otherwise);
- dtype among those allowed, number of dimensions, C-contiguity;
- the device: all operands of one call on one device;
- for an operand the call writes (``written=True``, or by default a parameter named ``out``
  or ``out[i]``): not read-only, no two elements at one address
  (:func:`~cudalibs.driver.array.check_writable`).

Messages have one shape, ``"<op>: <name> ..."``, so a user sees the same words from every
library.  The common case -- a DeviceArray with nothing to check but liveness -- is a type
test and two attribute reads; a written one two more slot reads (a target that is read-only
or not C-contiguous goes through :func:`~cudalibs.driver.array.check_writable`).
"""

from __future__ import annotations

from ..errors import ClosedError
from ..driver.array import DeviceArray, check_writable
from ..driver.interop import coerce

__all__ = ["operand", "operands", "check_device"]


def _what(op, name) -> str:
    return f"{op}: {name}" if op else name


def _names(dtypes) -> str:
    return ", ".join(sorted(str(d) for d in dtypes))


def operand(x, name: str, op: str | None = None, *, device=None, dtypes=None, ndim=None,
            contiguous: bool = False, stream=None, written: bool | None = None
            ) -> DeviceArray:
    """``x`` as a live DeviceArray, checked for the parameter ``name`` of operation ``op``.

    Parameters
    ----------
    x : DeviceArray or array-like
        A DeviceArray, or anything with ``__cuda_array_interface__`` or ``__dlpack__`` on a
        CUDA device (PyTorch, CuPy, Numba, JAX arrays), borrowed without a copy.
    name : str
        The parameter's name, for messages.
    op : str, optional
        The operation's name, for messages (``"gemm"``).
    device : Device, optional
        The device the operand must be on.
    dtypes : container of numpy.dtype, optional
        The dtypes allowed.
    ndim : int or tuple of int, optional
        The number(s) of dimensions allowed.
    contiguous : bool, default False
        Require a C-contiguous array.
    stream : Stream, optional
        The stream the caller will use it on: a producer's stream named by the array's
        protocol is ordered before it.
    written : bool, optional
        The call writes ``x``: a read-only array (its producer exported it read-only) or one
        with two elements at one address is refused.  By default an operand named ``out``
        (or ``out[i]``) is taken as written, any other as read only.

    Raises
    ------
    TypeError
        ``x`` is None, host data, not an array, or of a dtype not in ``dtypes``.
    ValueError
        Wrong number of dimensions, wrong device, or not C-contiguous when required; a
        written operand read-only or with overlapping elements; a foreign array's description
        invalid (see :func:`cudalibs.asarray`).
    ClosedError
        The memory under ``x`` was freed.
    """
    arr = x if type(x) is DeviceArray else coerce(x, _what(op, name), stream)
    buf = arr._buf
    if buf is not None and buf._ptr is None:
        raise ClosedError(f"{_what(op, name)} is closed (its buffer was freed)")
    # Written as the caller says, else when named out or out[i].  A writable C-contiguous
    # target (the common out=) costs two slot reads and no call.
    if (arr._readonly or arr._contig is not True) and \
            (written if written is not None else name == "out" or "out[" in name):
        check_writable(arr, name, op)
    if dtypes is not None and arr.dtype not in dtypes:
        raise TypeError(f"{_what(op, name)} has dtype {arr.dtype}; supported: "
                        f"{_names(dtypes)}")
    if ndim is not None:
        n = len(arr.shape)
        if not (n in ndim if isinstance(ndim, tuple) else n == ndim):
            want = " or ".join(map(str, ndim)) if isinstance(ndim, tuple) else ndim
            raise ValueError(f"{_what(op, name)} must have {want} dimensions, got shape "
                             f"{arr.shape}")
    if device is not None and arr.device is not device:
        check_device(arr, device, name, op)
    if contiguous and not arr.is_c_contiguous:
        raise ValueError(f"{_what(op, name)} must be C-contiguous (shape {arr.shape}, strides "
                         f"{arr.strides}); make a contiguous copy with .copy()")
    return arr


def operands(op: str | None, *named, stream=None, written=(), required: int = 0):
    """:func:`operand` of each ``(x, name)`` pair, all on the first one's device.

    The first ``required`` pairs are the call's required operands: None there raises
    ``TypeError("<op>: <name> is required (got None)")``, the message :func:`operand` gives.
    A later pair whose ``x`` is None gives None (an optional operand left out).  The operands
    the call writes -- those named ``out`` or ``out[i]``, and those named in ``written`` --
    are checked as :func:`operand` checks a written one.

    Parameters
    ----------
    op : str or None
        The operation's name, for messages.
    *named : (array-like or None, str)
        Each operand and its parameter's name.
    stream : Stream, optional
        As for :func:`operand`.
    written : container of str, default ()
        Names of further operands the call writes.
    required : int, default 0
        How many of the first pairs the call requires.

    Returns
    -------
    tuple
        ``(array_or_None, ..., device)``.

    Raises
    ------
    TypeError, ValueError, ClosedError
        As :func:`operand`, for the first operand that fails.
    """
    out = []
    dev = None
    for x, name in named:
        if x is None:
            # Only a None pays for this test: the common path is untouched.
            if len(out) < required:
                raise TypeError(f"{_what(op, name)} is required (got None)")
            out.append(None)
            continue
        a = x if type(x) is DeviceArray else coerce(x, _what(op, name), stream)
        buf = a._buf
        if buf is not None and buf._ptr is None:
            raise ClosedError(f"{_what(op, name)} is closed (its buffer was freed)")
        if (a._readonly or a._contig is not True) and \
                (name == "out" or "out[" in name or name in written):
            check_writable(a, name, op)
        if dev is None:
            dev = a.device
        elif a.device is not dev:
            check_device(a, dev, name, op)
        out.append(a)
    out.append(dev)
    return tuple(out)


def check_device(arr: DeviceArray, device, name: str, op: str | None = None) -> None:
    """Raise the one message for an operand on the wrong device."""
    if arr.device is not device:
        raise ValueError(f"{_what(op, name)} is on device {arr.device.ordinal}, the other "
                         f"operands on device {device.ordinal}; copy it there first")
