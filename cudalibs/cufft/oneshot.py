"""The one-shot FFTs with numpy.fft's semantics, their plans found in the one plan cache.

``fft``, ``ifft``, ``rfft``, ``irfft``, ``fft2``, ``ifft2``, ``rfft2``, ``irfft2``, ``fftn``,
``ifftn``, ``rfftn``, ``irfftn`` take numpy's arguments (``n``/``s``, ``axis``/``axes``,
``norm``, ``out``) and a ``stream``.  A call describes its problem -- the operation, the
input's shape, strides and dtype, the arguments, ``out``'s layout and the device -- as a key
of :data:`FFT_KEY` and finds an :class:`FFTCall` through the one front: on a hit it only
allocates its result and queues the transforms.  On a miss, :func:`~.recipe.recipe` decides
the problem (every argument checked, before any library call) and the call's
:class:`~cudalibs.cufft.FFTPlan` s are planned.

The scaling of ``norm`` runs on the device, in the kernel library's ``scale`` kernel over the
result (a complex result as its real and imaginary parts); zero-padding and truncation for
``n``/``s`` happen on the device too (a zeroed stage and a copy; a view).
"""

from __future__ import annotations

from .._ffi import Resource
from ..driver.array import DeviceArray, byte_extent, c_strides, empty, spans_overlap
from ..driver.stream import Stream, as_stream
from ..runtime import front as _front
from ..runtime import ptxlib
from ..runtime.cache import KeyKind
from ..runtime.handles import refuse_if_capturing
from ..runtime.operand import operand
from . import _lib
from .plan import FFTPlan
from .recipe import Recipe, recipe

__all__ = ["FFT_KEY", "FFTCall", "fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2",
           "irfft2", "fftn", "ifftn", "rfftn", "irfftn"]

#: The keys of the one-shots' plans in the one plan cache: ``n`` is the call's ``n`` or ``s``,
#: ``axes`` its ``axis`` or ``axes``, ``out`` ``(shape, strides, dtype)`` of a given ``out``.
FFT_KEY = KeyKind("cufft", ("op", "shape", "strides", "dtype", "n", "axes", "norm", "out",
                            "device"))


def _close_all(plans) -> None:
    for p in plans:
        p.close()
    plans.clear()


class FFTCall(Resource):
    """One one-shot FFT problem, prepared: its :class:`~.recipe.Recipe` and the
    :class:`~cudalibs.cufft.FFTPlan` of each cuFFT pass, closed with it.

    Made and cached by the one-shot functions; its :meth:`run` is their hit path.  Holds no
    per-call state, so threads share it (each plan locks its own handle while it queues).
    """

    __slots__ = ("recipe", "device", "plans", "_steps", "_res_c", "_scale_kernel", "_grid")

    def __init__(self, r: Recipe, device):
        # FFTPlan takes descriptions as (shape, dtype, strides).
        descs = {name: None if d is None else (d[0], d[2], d[1]) for name, d in
                 (("x", r.x), ("stage", r.stage), ("res", r.out if r.out_direct else r.res))}
        plans: list = []
        try:
            for p in r.passes:
                plans.append(FFTPlan(descs[p.src], descs[p.dst], axes=p.axes,
                                     transform=p.transform, device=device))
        except BaseException:
            _close_all(plans)
            raise
        self.recipe, self.device, self.plans = r, device, plans
        self._steps = tuple((plan, p.src, p.dst, _lib.CUFFT_FORWARD if p.forward
                             else _lib.CUFFT_INVERSE) for plan, p in zip(plans, r.passes))
        shape, strides, dt = r.res
        self._res_c = strides == c_strides(shape, dt.itemsize)
        self._scale_kernel = f"scale_{ptxlib.SUFFIX[r.precision.real]}"
        self._grid = None
        self._own(_close_all, plans)

    def plan(self) -> "FFTCall":
        """Plan every pass (``cufftXtMakePlanMany``); what the front does on a miss."""
        for p in self.plans:
            p.plan()
        return self

    def usable(self) -> bool:
        """Open, and none of its plans closed behind its back."""
        return Resource.usable(self) and all(p.usable() for p in self.plans)

    @property
    def work_area_bytes(self) -> int:
        """The largest work area one of its passes takes from the pool."""
        return max((p.work_area_bytes for p in self.plans), default=0)

    def run(self, a: DeviceArray, out, s: Stream):
        """Queue the call on ``s``: stage the input if the recipe says so, run the passes,
        scale, copy into ``out`` where cuFFT could not write it.  ``a`` and ``out`` are checked
        operands of the recipe's layouts."""
        r = self.recipe
        dev = self.device
        if r.empty:
            return out if out is not None else empty(r.res[0], r.res[2], device=dev, stream=s)
        pool = dev.memory_pool
        ptrs = {"x": a.address}
        stage = None
        if r.stage is not None:
            stage = pool.allocate(r.stage_nbytes, s)
            if r.stage_zero:
                stage.memset(0, s)
            src = a if r.trunc is None else a[r.trunc]
            if src.size:
                # The input's elements (a real input into the real parts of complex ones:
                # the same byte strides, a real dtype) at the start of each padded axis.
                DeviceArray.from_buffer(stage, r.x[0], a.dtype, r.stage[1]).copy_(src, s)
            ptrs["stage"] = stage.ptr
        if out is not None and r.out_direct:
            res = out
        elif self._res_c:
            res = empty(r.res[0], r.res[2], device=dev, stream=s)
        else:
            res = DeviceArray.from_buffer(pool.allocate(r.res_nbytes, s), r.res[0], r.res[2],
                                          r.res[1])
        ptrs["res"] = res.address
        for plan, src, dst, direction in self._steps:
            plan._launch(ptrs[src], ptrs[dst], direction, s)
        if stage is not None:
            stage.close()       # stream-ordered: freed after the passes that read it
        if r.scale != 1.0:
            grid = self._grid
            if grid is None:
                grid = self._grid = ptxlib.elementwise_grid(dev, r.scale_count)
            # The result is dense (the recipe sees to it), from its lowest address on.
            ptxlib.launch(dev, self._scale_kernel, grid[0], grid[1],
                          (res.address, r.scale, res.address, r.scale_count), s)
        if out is not None and res is not out:
            out.copy_(res, s)
            res.close()
            return out
        return res

    def __repr__(self) -> str:
        r = self.recipe
        if self.closed:
            return f"<FFTCall {r.op} (closed)>"
        how = ["input staged" if r.stage is not None else "input read in place"]
        if r.trunc is not None:
            how.append("truncated")
        if r.scale != 1.0:
            how.append(f"scaled by {r.scale:.6g}")
        if r.out is not None:
            how.append("into out" if r.out_direct else "copied into out")
        plans = "; ".join(repr(p) for p in self.plans)
        return (f"<FFTCall {r.op} of {r.x[2]} {r.x[0]} over axes {r.axes}, lengths "
                f"{r.lengths}: {', '.join(how)}; {len(self.plans)} pass(es): {plans}>")


_lookup = _front.lookup


def _build(key, op, a, n, axes, norm, out, stream):
    """The miss path: decide the problem (every argument checked), plan it, cache it."""
    o = None if out is None else (out.shape, out.strides, out.dtype)
    r = recipe(op, a.shape, a.strides, a.dtype, n, axes, norm, o)
    dev = a.device
    s = as_stream(stream, dev, what=f"{op}: stream")
    refuse_if_capturing(s.raw_handle, dev, f"planning {op} (cufftXtMakePlanMany)",
                        "cuFFT allocates the plan's device memory synchronously")
    return _front.insert(key, FFTCall(r, dev), _front.PLAN)


def _run(op, a, n, axes, norm, out, stream):
    """The body of every one-shot: the key, the cached call (or a new one), its run."""
    a = operand(a, "a", op, stream=stream)
    dev = a.device
    o = None
    if out is not None:
        out = operand(out, "out", op, device=dev, stream=stream)
        o = (out.shape, out.strides, out.dtype)
        if spans_overlap(a.address, byte_extent(a.shape, a.strides, a.dtype.itemsize),
                         out.address, byte_extent(out.shape, out.strides, out.dtype.itemsize)):
            raise ValueError(f"{op}: out overlaps a; give an out of its own")
    # Lists become tuples (hashable keys); a bool is no length or axis, though it hashes as
    # one (it would find the plan of n=1).
    if type(n) is list:
        n = tuple(n)
    if type(axes) is list:
        axes = tuple(axes)
    if type(n) is bool or type(axes) is bool:
        recipe(op, a.shape, a.strides, a.dtype, n, axes, norm)   # raises the message
    key = (FFT_KEY, op, a.shape, a.strides, a.dtype, n, axes, norm, o, dev)
    try:
        call = _lookup(key)
    except TypeError:       # an unhashable argument: the recipe names it
        recipe(op, a.shape, a.strides, a.dtype, n, axes, norm, o)
        raise
    if call is None:
        call = _build(key, op, a, n, axes, norm, out, stream)
    if type(stream) is Stream and stream.device is dev and not stream.closed:
        s = stream
    else:
        s = as_stream(stream, dev, what=f"{op}: stream")
    return call.run(a, out, s)


_COMMON = """
    Parameters
    ----------
    a : DeviceArray or CUDA array-like
        float32, float64, complex64 or complex128{real}.  Host arrays are refused, as by every
        cudalibs operation: copy them with :func:`cudalibs.to_device`.
    {sizes}
    norm : {{None, "backward", "ortho", "forward"}}, optional
        numpy's normalisation: ``"backward"`` (the default) scales the inverse transforms by
        ``1/N``, ``"forward"`` the forward ones, ``"ortho"`` both by ``1/sqrt(N)``; applied on
        the device.
    out : DeviceArray or CUDA array-like, optional
        The result's array: shape and dtype as numpy's result, on ``a``'s device, not
        overlapping ``a``.  Written in place where cuFFT can write its layout, else computed
        into a temporary and copied into it.
    stream : Stream, optional
        The current stream by default.

    Returns
    -------
    DeviceArray
        ``out``, or a new array ({result}).  Usually C-contiguous; where cuFFT cannot write
        numpy's axis order as one batched transform (a transformed axis between two batch
        axes), a transposed view of C-contiguous storage whose batch axes come first.

    Raises
    ------
    TypeError
        ``a`` or ``out`` is not a device array, or of a dtype the transform does not take.
    ValueError
        A length below 1, an axis out of range or named twice, more than six axes, an
        unknown ``norm``, ``out`` of the wrong shape or overlapping ``a``.

    Notes
    -----
    Repeated calls with the same problem find their plans in the one plan cache (kind
    ``"cufft"``) and only queue work.  The input is read where it is unless it is padded,
    converted (real input to a complex transform), read by a complex-to-real transform (which
    cuFFT overwrites) or laid out so that cuFFT cannot read it as one batched transform;
    then it is first copied on the device.  Lengths of the form ``2^a 3^b 5^c 7^d`` are
    fastest.
"""

_ONE = """n : int, optional
        The transform length; the input is cut or zero-padded to it along ``axis`` ({n}).
    axis : int, default -1
        The transformed axis."""
_MANY = """s : sequence of int, optional
        The transform lengths along ``axes``; the input is cut or zero-padded to them ({n}).
        ``-1`` keeps an axis's own length.
    axes : sequence of int, optional
        The transformed axes, at most six and each once ({axes}).{halved}"""


def _doc(summary, *, one, real_in=False, out_real=False, halved=False, two=False):
    if one:
        n = ("default: ``2 * (m - 1)`` for ``m`` input points, the output length"
             if out_real else "default: the input's length")
        sizes = _ONE.format(n=n)
    else:
        n = ("default: the input's, the last ``2 * (m - 1)``: the output's lengths"
             if out_real else "default: the input's lengths")
        axes = "default ``(-2, -1)``" if two else "default all, or the last ``len(s)``"
        extra = ("\n        The last is the halved one: its complex side has ``n // 2 + 1`` "
                 "elements.") if halved else ""
        sizes = _MANY.format(n=n, axes=axes, halved=extra)
    real = "; real input only" if real_in else (
        " (real input is taken as complex with zero imaginary parts)")
    result = "float32 or float64" if out_real else "complex64 or complex128"
    return summary + "\n" + _COMMON.format(real=real, sizes=sizes, result=result)


def fft(a, n=None, axis=-1, norm=None, out=None, *, stream=None):
    return _run("fft", a, n, axis, norm, out, stream)


def ifft(a, n=None, axis=-1, norm=None, out=None, *, stream=None):
    return _run("ifft", a, n, axis, norm, out, stream)


def rfft(a, n=None, axis=-1, norm=None, out=None, *, stream=None):
    return _run("rfft", a, n, axis, norm, out, stream)


def irfft(a, n=None, axis=-1, norm=None, out=None, *, stream=None):
    return _run("irfft", a, n, axis, norm, out, stream)


def fft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, stream=None):
    return _run("fft2", a, s, axes, norm, out, stream)


def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, stream=None):
    return _run("ifft2", a, s, axes, norm, out, stream)


def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, stream=None):
    return _run("rfft2", a, s, axes, norm, out, stream)


def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None, *, stream=None):
    return _run("irfft2", a, s, axes, norm, out, stream)


def fftn(a, s=None, axes=None, norm=None, out=None, *, stream=None):
    return _run("fftn", a, s, axes, norm, out, stream)


def ifftn(a, s=None, axes=None, norm=None, out=None, *, stream=None):
    return _run("ifftn", a, s, axes, norm, out, stream)


def rfftn(a, s=None, axes=None, norm=None, out=None, *, stream=None):
    return _run("rfftn", a, s, axes, norm, out, stream)


def irfftn(a, s=None, axes=None, norm=None, out=None, *, stream=None):
    return _run("irfftn", a, s, axes, norm, out, stream)


fft.__doc__ = _doc("The one-dimensional discrete Fourier transform, as ``numpy.fft.fft``.",
                   one=True)
ifft.__doc__ = _doc("The one-dimensional inverse discrete Fourier transform, as "
                    "``numpy.fft.ifft``.", one=True)
rfft.__doc__ = _doc("The one-dimensional discrete Fourier transform of real input, as "
                    "``numpy.fft.rfft``: the ``n // 2 + 1`` non-negative frequencies.",
                    one=True, real_in=True)
irfft.__doc__ = _doc("The inverse of :func:`rfft`, as ``numpy.fft.irfft``: real output of "
                     "length ``n``.", one=True, out_real=True)
fft2.__doc__ = _doc("The two-dimensional discrete Fourier transform, as ``numpy.fft.fft2``.",
                    one=False, two=True)
ifft2.__doc__ = _doc("The two-dimensional inverse discrete Fourier transform, as "
                     "``numpy.fft.ifft2``.", one=False, two=True)
rfft2.__doc__ = _doc("The two-dimensional discrete Fourier transform of real input, as "
                     "``numpy.fft.rfft2``.", one=False, two=True, real_in=True, halved=True)
irfft2.__doc__ = _doc("The inverse of :func:`rfft2`, as ``numpy.fft.irfft2``.", one=False,
                      two=True, out_real=True, halved=True)
fftn.__doc__ = _doc("The n-dimensional discrete Fourier transform, as ``numpy.fft.fftn``.",
                    one=False)
ifftn.__doc__ = _doc("The n-dimensional inverse discrete Fourier transform, as "
                     "``numpy.fft.ifftn``.", one=False)
rfftn.__doc__ = _doc("The n-dimensional discrete Fourier transform of real input, as "
                     "``numpy.fft.rfftn``.", one=False, real_in=True, halved=True)
irfftn.__doc__ = _doc("The inverse of :func:`rfftn`, as ``numpy.fft.irfftn``.", one=False,
                      out_real=True, halved=True)
