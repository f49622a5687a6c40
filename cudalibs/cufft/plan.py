"""FFT plans: one cuFFT plan of one problem, executed from any thread on any stream.

An :class:`FFTPlan` is a :class:`~cudalibs.runtime.plan.Plan`: **construct** (validate the
problem and read the advanced data layout from the arrays' strides, no library call),
**plan** (``cufftCreate``, ``cufftSetAutoAllocation(0)``, ``cufftXtMakePlanMany``; done by the
first :meth:`~FFTPlan.execute` if not before), **execute**, **close**.

Layouts.  Arrays whose transforms and batches lie back to back (C-contiguous ones, the
common case) are planned in cuFFT's basic layout, NULL ``inembed`` / ``onembed``; any other
layout is passed as its ``embed``/``stride``/``dist``.  The same numbers passed explicitly
for a basic layout make an advanced-layout plan, which cuFFT may run with other, slower
kernels (see :func:`~.layout.is_basic`).

Work area.  Automatic allocation is off: cuFFT would otherwise keep a work area per plan for
its whole life, allocated synchronously.  Each execution takes the plan's work area from the
device's stream-ordered pool on the call's stream and gives it back right after the
transform is queued, so the memory is reused by the next call on that stream, and a call
inside a CUDA graph capture records an allocation and a free node (the graph owns its work
area; nothing synchronises).

Threads.  A cuFFT plan is not thread-safe: its stream (``cufftSetStream``) and work area
(``cufftSetWorkArea``) are state of the handle.  An execution sets both and queues the
transform under the plan's lock, so threads that share a plan each run with their own
stream and work area; the lock is held for the host calls only, never across the GPU work.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading

from .. import dtypes as _dtypes
from .._ffi import refuse_in_capture
from ..driver import _lib as _drv
from ..driver.args import int_tuple, shape_tuple
from ..driver.array import byte_extent, c_strides, empty, spans_overlap
from ..driver.device import as_device
from ..driver.stream import as_stream
from ..runtime.handles import refuse_if_capturing
from ..runtime.operand import check_device, operand
from ..runtime.plan import Plan, scratch
from . import _lib
from ._base import raise_for, version
from .layout import (KINDS, MAX_RANK, LayoutError, Side, check_axes, is_basic,
                     is_power_of_two, plan_layouts, precision_of, side)

__all__ = ["FFTPlan", "DIRECTIONS"]

_OP = "FFTPlan"
#: ``direction=`` values and the cuFFT constant each means.
DIRECTIONS = {"forward": _lib.CUFFT_FORWARD, "inverse": _lib.CUFFT_INVERSE,
              "backward": _lib.CUFFT_INVERSE, _lib.CUFFT_FORWARD: _lib.CUFFT_FORWARD,
              _lib.CUFFT_INVERSE: _lib.CUFFT_INVERSE}
#: Half-precision transforms may span at most this many elements (cuFFT's limit).
HALF_MAX_ELEMENTS = 2**32 - 1
_PLANNING = "cuFFT allocates the plan's device memory synchronously while planning"


def _spec(v, what: str):
    """``(shape, byte strides, dtype, array or None)`` of an example array (through the one
    operand path) or of a description ``(shape, dtype[, strides])``."""
    if isinstance(v, tuple) and len(v) in (2, 3) and not hasattr(v, "shape"):
        shape = shape_tuple(v[0], f"{_OP}: {what} shape")
        dt = _dtypes.lookup(v[1], f"{_OP}: {what} dtype").numpy
        if len(v) == 3:
            strides = int_tuple(v[2], f"{_OP}: {what} strides", scalar=False)
            if len(strides) != len(shape):
                raise ValueError(f"{_OP}: {what} strides {strides} do not match its shape "
                                 f"{shape}")
        else:
            strides = c_strides(shape, dt.itemsize)
        return shape, strides, dt, None
    arr = operand(v, what, _OP)
    return arr.shape, arr.strides, arr.dtype, arr


def _destroy(handles) -> None:
    """The release of an FFT plan: its cuFFT handle, if one was made."""
    if handles:
        L = _lib.get()
        while handles:
            L.cufftDestroy(handles.pop())


class FFTPlan(Plan):
    """A cuFFT plan: a batch of 1-, 2- or 3-D FFTs over chosen axes of arrays of one layout.

    Parameters
    ----------
    x : DeviceArray, CUDA array-like, or ``(shape, dtype[, strides])``
        An example of the input, or its description (byte strides; default C-contiguous).
    out : same kinds, optional
        An example or description of the output; default a new C-contiguous array.
    axes : int or sequence of int, optional
        The transformed axes (at most 3); default every axis of a 1-, 2- or 3-D array.  For
        ``"r2c"`` and ``"c2r"`` the last one is the halved axis: its complex side holds
        ``n // 2 + 1`` elements.
    transform : {"c2c", "r2c", "c2r"}, optional
        Default ``"r2c"`` for real input, ``"c2r"`` for complex input with a real ``out``,
        else ``"c2c"``.  Required for float16 and bfloat16 arrays (below).
    lengths : sequence of int, optional
        The transform lengths along ``axes`` (the real side's sizes).  Read from the arrays;
        needed only for a ``"c2r"`` plan without ``out`` whose real length along the halved
        axis is odd (default ``2 * (m - 1)`` for ``m`` complex elements).
    device : Device or int, optional
        Default the examples' device, else the current one.

    Notes
    -----
    Precisions: float32 (complex64) and float64 (complex128), and where cuFFT offers them
    (``cufftXtMakePlanMany`` with ``CUDA_C_16F`` / ``CUDA_C_16BF``) float16, on compute
    capability 5.3 and newer, and bfloat16, on 8.0 and newer.  Half precision takes
    power-of-2 lengths only, at most 2**32 - 1 elements in all, and for ``"r2c"`` / ``"c2r"`` a
    real side whose transforms are contiguous (unit stride, no padding between rows).  numpy
    has no complex half type, so a complex float16 or bfloat16 array is a real one whose last
    axis, of length 2 and unit stride, holds (real, imaginary) pairs, as
    ``torch.view_as_real`` gives; ``axes`` and shapes refer to the other axes.

    Layouts are read from the arrays' strides, never copied, and handed to cuFFT as its
    advanced data layout (``inembed``/``istride``/``idist``, ``onembed``/``ostride``/``odist``),
    or, where both arrays hold their transforms and batches back to back, as its basic layout
    (NULL ``inembed``/``onembed``: :attr:`basic_layout`).  A layout cuFFT cannot express --
    negative or zero strides, batch axes that do not merge into one batch dimension,
    transformed axes whose strides are not whole rows of each other, a halved axis that is
    not innermost -- is refused with the reason; the one-shot functions
    (:func:`~cudalibs.cufft.fftn`, ...) copy such inputs instead.

    :meth:`execute` is unnormalised, as cuFFT is: an inverse after a forward transform
    multiplies by the product of the lengths.  A ``"c2r"`` execution overwrites its input
    (cuFFT uses it as scratch).  Several threads may execute one plan at once (see the module
    notes), and an execution may be captured into a CUDA graph once the plan is planned.
    """

    kind = "cufft_fft"
    library = "cuFFT"

    def __init__(self, x, out=None, *, axes=None, transform=None, lengths=None, device=None):
        xs = _spec(x, "x")
        os_ = None if out is None else _spec(out, "out")
        px, cx = precision_of(xs[2], f"{_OP}: x")
        po, co = (None, None) if os_ is None else precision_of(os_[2], f"{_OP}: out")
        transform = self._transform(transform, px, cx, co, os_ is not None)
        in_complex, out_complex = transform != "r2c", transform != "c2r"
        if cx is not None and cx != in_complex:
            raise TypeError(f"{_OP}: x has dtype {xs[2]}, but a {transform} transform reads "
                            f"{'complex' if in_complex else 'real'} input")
        if po is not None and (po is not px or (co is not None and co != out_complex)):
            want = px.complex if out_complex else px.real
            raise TypeError(f"{_OP}: out has dtype {os_[2]}; a {transform} transform of "
                            f"{px.name} x writes {want}")
        sx = side(xs[0], xs[1], px, in_complex, f"{_OP}: x")
        ndim = len(sx.shape)
        if axes is None:
            if not 1 <= ndim <= MAX_RANK:
                raise ValueError(f"{_OP}: axes is required for a {ndim}-d x: a plan transforms "
                                 f"1 to {MAX_RANK} axes")
            axes = tuple(range(ndim))
        axes = check_axes(axes, ndim, f"{_OP}: axes")
        if len(axes) > MAX_RANK:
            raise ValueError(f"{_OP}: axes names {len(axes)} axes; one cuFFT plan transforms "
                             f"at most {MAX_RANK}")
        n = self._lengths(transform, sx, axes, lengths, os_, px, out_complex)
        out_logical = list(sx.shape)
        for a in axes:
            out_logical[a] = n[a]
        if transform == "r2c":
            out_logical[axes[-1]] = n[axes[-1]] // 2 + 1
        out_logical = tuple(out_logical)
        out_shape = out_logical + ((2,) if out_complex and px.pairs else ())
        out_dtype = px.complex if out_complex else px.real
        if os_ is None:
            out_strides = c_strides(out_shape, out_dtype.itemsize)
        else:
            if tuple(os_[0]) != out_shape:
                raise ValueError(f"{_OP}: out has shape {tuple(os_[0])}; this {transform} "
                                 f"transform of x {tuple(xs[0])} over axes {axes} writes "
                                 f"{out_shape}")
            out_strides = tuple(os_[1])
        so = side(out_shape, out_strides, px, out_complex, f"{_OP}: out")
        halved = transform != "c2c"
        try:
            t, b, lin, lout = plan_layouts(sx, so, axes, halved)
        except LayoutError as exc:
            raise ValueError(
                f"{_OP}: cuFFT cannot read x (shape {sx.shape}, strides {sx.strides}) and "
                f"write out (shape {so.shape}, strides {so.strides}) as one batched transform "
                f"over axes {axes}: {exc}; pass contiguous arrays (.copy()), or use the "
                "one-shot functions (cufft.fftn, ...), which copy what they must") from None
        batch = 1
        for a in b:
            batch *= sx.shape[a]
        dims = tuple(n[a] for a in t)
        if px.pairs:
            self._check_half(px, transform, dims, batch, lout if in_complex else lin)
        examples = [v[3] for v in (xs, os_) if v is not None and v[3] is not None]
        dev = examples[0].device if device is None and examples else as_device(device)
        for arr, name in ((xs[3], "x"), (None if os_ is None else os_[3], "out")):
            if arr is not None:
                check_device(arr, dev, name, _OP)
        if px.pairs and tuple(dev.compute_capability) < px.min_cc:
            raise ValueError(f"{_OP}: {px.name} FFTs need compute capability "
                             f"{px.min_cc[0]}.{px.min_cc[1]} or newer; device {dev.ordinal} "
                             f"has {'.'.join(map(str, dev.compute_capability))}")
        self._init_plan(dev)
        self.transform, self.precision, self.axes = transform, px, axes
        self.lengths = tuple(n[a] for a in axes)
        self.dims, self.batch, self.order = dims, batch, (t, b)
        self.in_layout, self.out_layout = lin, lout
        #: Both arrays are in cuFFT's basic layout: planned with NULL inembed / onembed (an
        #: explicit description of the same layout may get slower kernels; layout.is_basic).
        self.basic_layout = is_basic(transform, dims, batch, lin, lout)
        self.x_desc = (tuple(xs[0]), tuple(xs[1]), xs[2])
        self.out_desc = (out_shape, out_strides, out_dtype)
        self.out_default = out_strides == c_strides(out_shape, out_dtype.itemsize)
        self.in_elem, self.out_elem = sx.elem, so.elem
        self._types = (px.cuda_complex if in_complex else px.cuda_real,
                       px.cuda_complex if out_complex else px.cuda_real, px.cuda_complex)
        self._exts = (byte_extent(*self.x_desc[:2], xs[2].itemsize),
                      byte_extent(out_shape, out_strides, out_dtype.itemsize))
        self._ws = 0
        self._exec_lock = threading.Lock()
        self._handles: list = []
        self._own(_destroy, self._handles, ctx=dev.raw_context)

    # -- construction -------------------------------------------------------------------------
    @staticmethod
    def _transform(transform, px, cx, co, have_out) -> str:
        if transform is None:
            if cx is None:
                raise ValueError(f"{_OP}: transform is required for {px.name} arrays: complex "
                                 f"{px.name} values are (..., 2) pairs, so the dtype does not "
                                 "say which side is complex")
            if not cx:
                return "r2c"
            return "c2r" if have_out and co is False else "c2c"
        if not isinstance(transform, str):
            raise TypeError(f"{_OP}: transform must be one of {', '.join(KINDS)}, not "
                            f"{type(transform).__name__}")
        t = transform.lower()
        if t not in KINDS:
            raise ValueError(f"{_OP}: transform must be one of {', '.join(KINDS)}, not "
                             f"{transform!r}")
        return t

    @staticmethod
    def _lengths(transform, sx: Side, axes, lengths, os_, px, out_complex) -> dict:
        """The transform length along each axis, ``{axis: n}``, checked."""
        given = None
        if lengths is not None:
            given = int_tuple(lengths, f"{_OP}: lengths", len(axes))
        n = {a: sx.shape[a] for a in axes}
        if transform == "c2r":
            last, m = axes[-1], sx.shape[axes[-1]]
            if given is not None:
                n[last] = given[-1]
            elif os_ is not None:
                shape = tuple(os_[0])
                if len(shape) != len(sx.shape):
                    raise ValueError(f"{_OP}: out has shape {shape}; a c2r transform of x "
                                     f"{sx.shape} writes a {len(sx.shape)}-d array")
                n[last] = shape[last]
            else:
                n[last] = 2 * (m - 1)
            if n[last] // 2 + 1 != m:
                raise ValueError(f"{_OP}: a c2r transform of real length {n[last]} along axis "
                                 f"{last} reads {n[last] // 2 + 1} complex elements there, "
                                 f"x has {m}")
        if given is not None:
            for a, g in zip(axes, given):
                if g != n[a]:
                    raise ValueError(f"{_OP}: lengths {given} do not match the arrays: axis "
                                     f"{a} has length {n[a]}")
        for a in axes:
            if n[a] < 1:
                raise ValueError(f"{_OP}: the transform length along axis {a} is {n[a]}: FFT "
                                 "lengths must be positive")
        return n

    @staticmethod
    def _check_half(px, transform, dims, batch, real_layout) -> None:
        bad = [d for d in dims if not is_power_of_two(d)]
        if bad:
            raise ValueError(f"{_OP}: {px.name} transforms take power-of-2 lengths only "
                             f"(cuFFT's limit); got lengths {dims}")
        total = batch
        for d in dims:
            total *= d
        if total > HALF_MAX_ELEMENTS:
            raise ValueError(f"{_OP}: a {px.name} transform spans at most 2**32 - 1 elements "
                             f"(cuFFT's limit); this one {total}")
        if transform != "c2c" and (real_layout.stride != 1 or
                                   tuple(real_layout.embed[1:]) != tuple(dims[1:])):
            raise ValueError(f"{_OP}: a {px.name} {transform} transform needs its real side's "
                             f"transforms contiguous (cuFFT supports no strides there); got "
                             f"{real_layout} for lengths {dims}")

    # -- the plan protocol ------------------------------------------------------------------
    def _heuristics(self) -> list[dict]:
        if self.batch == 0:
            return [{"name": "empty batch (nothing to transform)", "workspace": 0}]
        refuse_in_capture("planning an FFT (cufftXtMakePlanMany)", _PLANNING)
        L = _lib.get()
        _drv.get().cuCtxSetCurrent(self._device.raw_context)
        h = _lib.cufftHandle()
        st = L.cufftCreate(ctypes.byref(h))
        if st:
            raise_for(st, "cufftCreate")
        try:
            st = L.cufftSetAutoAllocation(h, 0)
            if st:
                raise_for(st, "cufftSetAutoAllocation")
            r = len(self.dims)
            arr = ctypes.c_longlong * r
            lin, lout = self.in_layout, self.out_layout
            ws = ctypes.c_size_t()
            # NULL embeds for the basic layout: explicit ones, even equal to it, make cuFFT
            # plan an advanced layout (slower batched R2C kernels).  With NULL it ignores the
            # strides and distances, passed as read (1 and the basic layout's distances).
            basic = self.basic_layout
            inembed = None if basic else arr(*lin.embed)
            onembed = None if basic else arr(*lout.embed)
            st = L.cufftXtMakePlanMany(h, r, arr(*self.dims), inembed, lin.stride, lin.dist,
                                       self._types[0], onembed, lout.stride, lout.dist,
                                       self._types[1], self.batch, ctypes.byref(ws),
                                       self._types[2])
            if st:
                raise_for(st, "cufftXtMakePlanMany", repr(self))
        except BaseException:
            L.cufftDestroy(h)       # nothing half-built is left behind
            raise
        self._handles.append(h.value)
        self._h = h.value
        self._ws = ws.value
        return [{"name": "cufftXtMakePlanMany", "workspace": ws.value}]

    def _select(self, i: int) -> None:
        pass            # cuFFT makes one plan per problem: nothing to choose between

    def _problem(self) -> str:
        shape = self.x_desc[0]
        return (f"{self.transform} {self.precision.name} lengths {self.dims} x batch "
                f"{self.batch} (x {shape} over axes {self.axes})")

    def _library_version(self) -> str:
        return ".".join(map(str, version()))

    @contextlib.contextmanager
    def _runner(self, stream):
        dev = self._device
        xs, os_ = self.x_desc, self.out_desc
        x = scratch(xs[0], xs[2], dev, stream, xs[1])
        out = scratch(os_[0], os_[2], dev, stream, os_[1])
        d = _lib.CUFFT_INVERSE if self.transform == "c2r" else _lib.CUFFT_FORWARD
        try:
            yield lambda i: self._launch(x.address, out.address, d, stream)
        finally:
            x.close()
            out.close()

    @property
    def work_area_bytes(self) -> int:
        """Bytes of work area an execution takes from the pool (0 before planning)."""
        return self._ws

    def _workspace_bytes(self) -> int:
        return self._ws

    # -- execution --------------------------------------------------------------------------
    def execute(self, x, out=None, *, direction=None, stream=None):
        """Run the transform: one ``cufftXtExec`` on ``stream``.

        Parameters
        ----------
        x : DeviceArray or CUDA array-like
            Exactly the shape, strides and dtype the plan was made for.  A ``"c2r"`` execution
            overwrites it.
        out : DeviceArray or CUDA array-like, optional
            Default: a new C-contiguous array on ``stream`` (for a plan made with a
            C-contiguous or no ``out``).  ``out`` may be ``x`` itself for a ``"c2c"`` plan whose
            input and output layouts are the same (an in-place transform).
        direction : {"forward", "inverse"} or {-1, 1}, optional
            ``"c2c"`` only (default ``"forward"``); ``"r2c"`` is always forward, ``"c2r"``
            always inverse.  Unnormalised either way.
        stream : Stream, optional
            The current stream by default.

        Returns
        -------
        DeviceArray
            ``out``.

        Raises
        ------
        ClosedError
            The plan was closed, or an array's memory was freed.
        ValueError
            An array does not match the plan, is on another device, is not aligned to its
            element, or ``out`` overlaps ``x`` (other than exactly, in place); a direction the
            transform does not have.
        """
        op = "FFTPlan.execute"
        self._live()
        dev = self._device
        d = self.direction(direction)
        x = operand(x, "x", op, stream=stream, written=self.transform == "c2r")
        self._check(x, self.x_desc, "x", op)
        xp = x.address
        if out is not None:
            out = operand(out, "out", op, stream=stream)
            self._check(out, self.out_desc, "out", op)
            self._check_pointers(xp, out.address, op)
        elif not self.out_default:
            raise ValueError(f"{op}: this plan was made for a strided out; pass out=")
        elif xp % self.in_elem:
            raise ValueError(f"{op}: x is not aligned to its {self.in_elem}-byte elements")
        s = as_stream(stream, dev, what=f"{op}: stream")
        if not self._planned:
            # Before anything is allocated on a stream that may be capturing.
            self._plan_on(s)
        if out is None:
            out = empty(self.out_desc[0], self.out_desc[2], device=dev, stream=s)
        self._launch(xp, out.address, d, s)
        return out

    def _check_pointers(self, xp: int, op_: int, op: str) -> None:
        """Both arrays aligned to their elements; ``out`` apart from ``x``, or exactly ``x``
        for an in-place c2c plan."""
        if xp % self.in_elem or op_ % self.out_elem:
            which, elem = ("x", self.in_elem) if xp % self.in_elem else ("out", self.out_elem)
            raise ValueError(f"{op}: {which} is not aligned to its {elem}-byte elements")
        if spans_overlap(xp, self._exts[0], op_, self._exts[1]) and not (
                xp == op_ and self.transform == "c2c" and self.in_layout == self.out_layout):
            raise ValueError(f"{op}: out overlaps x; only a c2c plan whose layouts are the "
                             "same transforms in place (out=x)")

    __call__ = execute

    def direction(self, direction) -> int:
        """The cuFFT direction (``CUFFT_FORWARD`` -1, ``CUFFT_INVERSE`` 1) of an execution
        asked for ``direction`` (None: the transform's own)."""
        if direction is None:
            return _lib.CUFFT_INVERSE if self.transform == "c2r" else _lib.CUFFT_FORWARD
        try:
            d = DIRECTIONS.get(direction.lower() if isinstance(direction, str) else direction)
        except TypeError:       # unhashable
            d = None
        if d is None or isinstance(direction, bool):
            raise ValueError(f"FFTPlan.execute: direction must be 'forward' or 'inverse' (or "
                             f"-1 / 1), not {direction!r}")
        if (self.transform == "r2c" and d != _lib.CUFFT_FORWARD) or \
                (self.transform == "c2r" and d != _lib.CUFFT_INVERSE):
            raise ValueError(f"FFTPlan.execute: direction {direction!r}: a {self.transform} "
                             f"transform is always {'forward' if self.transform == 'r2c' else 'inverse'}")
        return d

    def _check(self, arr, desc, name, op) -> None:
        if (arr.shape, arr.strides, arr.dtype) != desc:
            raise ValueError(f"{op}: {name} has shape {arr.shape}, strides {arr.strides}, "
                             f"dtype {arr.dtype}; the plan was made for shape {desc[0]}, "
                             f"strides {desc[1]}, dtype {desc[2]}")
        if arr.device is not self._device:
            check_device(arr, self._device, name, op)

    def _plan_on(self, s) -> None:
        """Plan on first use, refused (:class:`~cudalibs.errors.CaptureError`) while ``s`` is
        capturing a graph, whoever began the capture."""
        refuse_if_capturing(s.raw_handle, self._device, "planning an FFT (cufftXtMakePlanMany)",
                            _PLANNING)
        self.plan()

    def _launch(self, in_ptr: int, out_ptr: int, direction: int, s) -> None:
        """Queue the transform on checked pointers and stream ``s`` (a live
        :class:`~cudalibs.Stream` of the plan's device): the hot path of :meth:`execute` and
        of the one-shot functions."""
        if not self._planned:
            self._plan_on(s)
        if self.batch == 0:
            return
        dev = self._device
        ws = self._ws
        # The work area comes from the pool on the call's stream and goes back to it as soon
        # as the transform is queued: reuse on that stream is ordered after this transform.
        buf = dev.memory_pool.allocate(ws, s) if ws else None
        L = _lib.get()
        try:
            with self._exec_lock:
                _drv.get().cuCtxSetCurrent(dev.raw_context)
                h = self._h
                st = L.cufftSetStream(h, s.raw)
                if st:
                    raise_for(st, "cufftSetStream", repr(self))
                if buf is not None:
                    st = L.cufftSetWorkArea(h, buf.ptr)
                    if st:
                        raise_for(st, "cufftSetWorkArea", repr(self))
                st = L.cufftXtExec(h, in_ptr, out_ptr, direction)
        finally:
            if buf is not None:
                buf.close()
        if st:
            raise_for(st, "cufftXtExec", repr(self))

    def __repr__(self) -> str:
        name = type(self).__name__
        if self.closed:
            return f"<{name} {self._problem()} (closed)>"
        x, o = self.x_desc, self.out_desc
        ws = f"work area {self._ws} B" if self._planned else "not planned"
        basic = "basic layout, " if self.basic_layout else ""
        return (f"<{name} {self._problem()}: x {x[0]} {x[2]} [{self.in_layout}] -> out {o[0]} "
                f"{o[2]} [{self.out_layout}], {basic}{ws}>")
