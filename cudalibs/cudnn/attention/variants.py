"""What the attention plans add for the variants of :mod:`cudalibs.cudnn.attention.masks`:
the ALiBi slopes a call binds and the bias gradient a backward writes.

:class:`VariantPlan` sits between :class:`~cudalibs.cudnn.attention.plan.SdpaPlanBase` and
the half-precision plans (:class:`~cudalibs.cudnn.attention.SdpaPlan`,
:class:`~cudalibs.cudnn.attention.SdpaBackwardPlan`).  A plan with ALiBi binds, at each call,
the caller's slopes (``alibi_slopes=``, float32, ``h_q`` contiguous values, 16-byte aligned,
read when the kernel runs, so a captured graph reads the values of each replay) or else its
own copy of the paper's slopes, made on the device once when the plan is planned (outside any
capture, like every plan's first call).
"""

from __future__ import annotations

from ...driver.array import spans_overlap, to_device
from ...driver.stream import as_stream
from ...errors import CudaLibsError
from ...runtime.operand import operand as _operand
from . import masks as _mk
from .plan import ALIGN, F32, SdpaPlanBase, elem_strides, like

__all__ = ["VariantPlan", "dbias_strides"]


def dbias_strides(op: str, spec, want_dbias, dbias, dev):
    """Element strides of the bias gradient a backward writes: ``dbias``'s (an example output
    of the bias's shape and dtype), the bias's layout when only ``want_dbias``, None when
    neither."""
    if dbias is None and not want_dbias:
        return None
    if spec.bias is None:
        raise ValueError(f"{op}: the bias gradient (want_dbias / dbias) needs the bias")
    shape, bst = spec.bias
    if dbias is None:
        return like(bst, shape)
    dbias = _operand(dbias, "dbias", op, device=dev, written=True)
    if tuple(dbias.shape) != shape or dbias.dtype != spec.dtype:
        raise ValueError(f"{op}: dbias must be {spec.dtype} {shape} (the bias's shape), got "
                         f"{dbias.dtype} {dbias.shape}")
    return elem_strides(dbias, "dbias", op)


class VariantPlan(SdpaPlanBase):
    """The ALiBi slopes and the bias gradient of a plan's calls (see the module docstring)."""

    #: The paper's slopes on the device, made when a plan with ALiBi is planned.
    _slopes = None

    def _heuristics(self) -> list[dict]:
        sp = self._spec
        try:
            cands = super()._heuristics()
        except CudaLibsError as exc:
            if not sp.softcap or type(exc) is not CudaLibsError:
                raise
            # the one variant whose support only the engines can tell: say so
            raise CudaLibsError(
                f"{exc} -- softcapping is a pointwise subgraph (div, tanh, mul; tanh_bwd in "
                "the backward) between the scale and the softmax, and no fused engine of "
                "this cuDNN takes it for this problem") from exc
        if sp.alibi and self._slopes is None:
            dev = self._device
            s = as_stream(None, dev)
            slopes = to_device(_mk.alibi_slopes(sp.h_q), device=dev, stream=s)
            s.sync()        # complete before a call on any stream reads it
            self._slopes = slopes
        return cands

    def _alibi_in(self, op, vals, slopes, dev) -> None:
        """The slopes a call binds into ``vals``: ``slopes`` checked, or the plan's own."""
        sp = self._spec
        if not sp.alibi:
            if slopes is not None:
                raise ValueError(f"{op}: the plan was made without alibi; alibi_slopes needs "
                                 "a plan made with alibi=True")
            return
        if slopes is None:
            own = self._slopes
            if own is None:
                raise ValueError(f"{op}: the plan has no slopes of its own before plan()")
            vals["alibi_slopes"] = own.address
            return
        a = _operand(slopes, "alibi_slopes", op, device=dev)
        if a.dtype != F32 or a.size != sp.h_q or not a.is_c_contiguous:
            raise ValueError(f"{op}: alibi_slopes must be {sp.h_q} contiguous float32 values "
                             f"(one per query head), got {a.dtype} {a.shape}")
        if a.address % ALIGN:
            raise ValueError(f"{op}: alibi_slopes must be {ALIGN}-byte aligned (address "
                             f"{a.address:#x})")
        vals["alibi_slopes"] = a.address

    def _dbias_out(self, op, vals, dbias, bias, ins, dev, s):
        """The bias gradient a call writes (``dbias`` checked, or a new array), bound into
        ``vals``; None for a plan that writes none."""
        sp = self._spec
        if sp.dbias is None:
            if dbias is not None:
                raise ValueError(f"{op}: the plan was made without want_dbias; it writes no "
                                 "dbias")
            return None
        out = self._output(op, dbias, "dbias", "dbias", sp.dtype, dev, s, ins)
        b = _operand(bias, "bias", op, device=dev)
        if spans_overlap(out.address, self._ext["dbias"], b.address, self._ext["bias"]):
            raise ValueError(f"{op}: dbias overlaps bias (the backward reads the bias); give "
                             "a separate array")
        vals["dbias"] = out.address
        return out

    def close(self) -> None:
        SdpaPlanBase.close(self)
        self._slopes = None
