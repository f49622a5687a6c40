"""The validation of a cuBLASLt matmul problem: everything :class:`~cudalibs.cublas.Matmul`
derives from its arguments before any descriptor exists (types, shapes, batching, layouts,
alignment, the epilogue's auxiliary matrix, fp8 scale modes and the shapes of their scales).

The fp8 rules here are what cuBLASLt documents, and what cuBLASLt 13.1 was seen to take on an
H100 (sm_90): they turn a combination the library would refuse with a bare status into a
``ValueError`` that names the argument.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as _dtypes
from ..runtime.operand import check_device, operand
from ._base import lt_version_int
from ._common import OP_N, OP_T, combo, elem_strides, op_ld, scalar, split_batch
from .handle import WORKSPACE_BYTES
from .lt_desc import SCALE_MODES, epilogue, round_up

__all__ = ["Problem", "validate", "FP8", "ScaleSpec", "scale_modes", "MODE_PAIRS",
           "HOPPER_MODES", "HOPPER_MODES_VERSION", "SCALE_ALIGN", "scale_pointer",
           "OutputScales", "call_pointer_names", "pointer_aligns", "placeholders"]

FP8 = tuple(t for t in (_dtypes.float8_e4m3fn, _dtypes.float8_e5m2) if t is not None)
_E5M2 = _dtypes.float8_e5m2
_BF16, _F16, _F32 = _dtypes.bfloat16, np.dtype(np.float16), np.dtype(np.float32)

#: The scale modes cuBLASLt implements for Hopper only (compute capability 9.0; its Blackwell
#: kernels take the VEC32/VEC16 block formats instead), from cuBLASLt 12.9 on.
HOPPER_MODES = frozenset({"row", "block128", "block128x128"})
HOPPER_MODES_VERSION = 120900
#: ``(a's mode, b's mode)`` pairs cuBLASLt takes: both per tensor, both per row, or 1x128
#: blocks on one operand with 1x128 or 128x128 blocks on the other (not 128x128 on both).
MODE_PAIRS = frozenset({("tensor", "tensor"), ("row", "row"), ("block128", "block128"),
                        ("block128", "block128x128"), ("block128x128", "block128")})
#: The alignment (bytes) of a_scale and b_scale, scalars included: cuBLASLt 13.1's call
#: answers CUBLAS_STATUS_NOT_SUPPORTED for one at a 4- or 8-byte offset (seen on sm_90).
#: d_scale and amax need only a float32's 4 (an amax may be a slot of a history buffer).
SCALE_ALIGN = 16
#: The epilogues of an fp8 matmul that writes fp8, or scales row-wise or in blocks: those
#: without an aux matrix, whose fp8 forms cuBLASLt 13.1 lacks on sm_90 (the heuristic answers
#: CUBLAS_STATUS_INVALID_VALUE for GELU_AUX beside an fp8 or float32 output).
_PLAIN_EPILOGUES = frozenset({"default", "bias", "gelu", "gelu_bias"})


def scale_modes(scale_mode):
    """``(a's mode, b's mode)`` of a ``scale_mode`` argument, or None when it is None.

    Parameters
    ----------
    scale_mode : None, str or pair of str
        One of :data:`~cudalibs.cublas.lt_desc.SCALE_MODES` for both operands, or one each.

    Raises
    ------
    TypeError, ValueError
        Anything else, naming ``scale_mode``.
    """
    if scale_mode is None:
        return None
    if isinstance(scale_mode, str):
        pair = (scale_mode, scale_mode)
    elif isinstance(scale_mode, (tuple, list)) and len(scale_mode) == 2 and \
            all(isinstance(m, str) for m in scale_mode):
        pair = tuple(scale_mode)
    else:
        raise TypeError(f"scale_mode must be a mode name or an (a mode, b mode) pair of "
                        f"them, not {scale_mode!r}")
    pair = tuple(m.lower() for m in pair)
    for m in pair:
        if m not in SCALE_MODES:
            raise ValueError(f"scale_mode {m!r} is not one of {', '.join(SCALE_MODES)}")
    return pair


class ScaleSpec:
    """What an fp8 matmul's ``a_scale`` or ``b_scale`` must be for its scale mode: a float32
    device array of one of :attr:`shapes`, with the byte :attr:`strides` given for each (an
    axis of length 1 may have any stride).

    Attributes
    ----------
    what : str
        ``"a_scale"`` or ``"b_scale"``.
    mode : str
        The scale mode (``"tensor"``, ``"row"``, ``"block128"``, ``"block128x128"``).
    shapes, strides : tuple of tuple of int, or None
        The shapes taken and their strides; None for ``"tensor"`` (one element).
    layout : str
        The layout in words, for messages.
    align : int
        The pointer alignment a call must have (bytes).
    required : bool
        False for ``"tensor"``, whose scale defaults to 1.
    """

    __slots__ = ("what", "mode", "shapes", "strides", "layout", "align", "required")

    def __init__(self, what, mode, shapes, strides, layout, align, required):
        self.what, self.mode, self.shapes, self.strides = what, mode, shapes, strides
        self.layout, self.align, self.required = layout, align, required

    def matches(self, shape, strides, dtype) -> bool:
        """Whether an array of this shape, byte strides and dtype is such a scale."""
        if dtype != _F32:
            return False
        if self.shapes is None:
            return int(np.prod(shape, dtype=np.int64)) == 1
        for want, want_strides in zip(self.shapes, self.strides):
            if shape == want and all(n <= 1 or s == t
                                     for n, s, t in zip(shape, strides, want_strides)):
                return True
        return False

    def __repr__(self) -> str:
        return f"<ScaleSpec {self.what} {self.mode!r}: {self.layout}>"


def _scale_spec(which: str, mode: str, M: int, N: int, K: int) -> ScaleSpec:
    """The :class:`ScaleSpec` of operand ``which`` (``"a"`` is (M, K), ``"b"`` is (K, N)) in
    ``mode``, in row-major terms.  cuBLASLt describes them in its column-major view, where
    our ``a`` is its B and our ``b`` its A: each K-long column it scales is a row of ``a`` or a
    column of ``b`` (a row of the weight ``w`` of ``b = w.T``)."""
    what = f"{which}_scale"
    if mode == "tensor":
        return ScaleSpec(what, mode, None, None, "one float32 (shape () or (1,))",
                         SCALE_ALIGN, False)
    a = which == "a"
    outer = M if a else N
    kb = K // 128
    if mode == "row":
        if a:
            shapes, strides = ((M,), (M, 1)), ((4,), (4, 4))
            layout = f"({M},) or ({M}, 1): one float32 per row of a"
        else:
            shapes, strides = ((N,), (1, N)), ((4,), (4 * N, 4))
            layout = f"({N},) or (1, {N}): one float32 per column of b"
    elif mode == "block128":
        # cuBLASLt's VEC128: ceil(K/128) scales per column of its operand, the columns'
        # scales of one K block contiguous (outer index fastest).
        if a:
            shapes, strides = ((M, kb),), ((4, 4 * M),)
            layout = (f"({M}, {kb}) with byte strides (4, {4 * M}): one float32 per row of a "
                      f"and 128 elements of K, column-major (x.T of a C-contiguous "
                      f"({kb}, {M}) array)")
        else:
            shapes, strides = ((kb, N),), ((4 * N, 4),)
            layout = (f"({kb}, {N}) C-contiguous: one float32 per column of b and 128 "
                      f"elements of K")
    else:
        # BLK128x128: ceil(K/128) block scales per 128 columns, those of one block column
        # contiguous and padded to a multiple of 4 (16 bytes).
        kb4 = round_up(kb, 4)
        ob = outer // 128
        if a:
            shapes, strides = ((ob, kb), (ob, kb4)), ((4 * kb4, 4), (4 * kb4, 4))
            layout = (f"({ob}, {kb}) with rows {kb4} float32 apart (a C-contiguous "
                      f"({ob}, {kb4}) array or its [:, :{kb}]): one float32 per 128x128 "
                      f"block of a")
        else:
            shapes, strides = ((kb, ob), (kb4, ob)), ((4, 4 * kb4), (4, 4 * kb4))
            layout = (f"({kb}, {ob}) with columns {kb4} float32 apart (w_scale.T of the "
                      f"C-contiguous ({ob}, {kb4}) block scales of w = b.T, or of their "
                      f"[:, :{kb}]): one float32 per 128x128 block of b")
    return ScaleSpec(what, mode, shapes, strides, layout, SCALE_ALIGN, True)


class Problem:
    """The validated problem of a :class:`Matmul`: everything derived from the arguments
    before any descriptor exists."""

    __slots__ = ("specs", "out_shape", "od", "compute_type", "scale_np", "epi", "fp8", "batch",
                 "mnk", "opa", "opb", "ldo", "bso", "bsa", "bsb", "align", "aux_shape",
                 "aux_dtype", "ld_aux", "alpha", "beta", "fast_accum", "max_candidates",
                 "workspace", "compute", "modes", "d_fp8", "amax", "c_np", "bias_np",
                 "scale_specs")


def _types(p, ab, bb, so, dev, out_dtype, compute) -> None:
    """Output, compute and scale types (fp8 or one floating input type); for fp8, the types
    of C and of the bias that cuBLASLt's fp8 table pairs with the output."""
    p.d_fp8 = False
    p.c_np = p.bias_np = None
    if p.fp8:
        if ab not in FP8 or bb not in FP8:
            raise ValueError(f"fp8 matmul needs both inputs in fp8, got {ab} and {bb}")
        if ab == bb == _E5M2:
            raise ValueError("cuBLASLt has no e5m2 x e5m2 matmul; use e4m3 for one input")
        cc = dev.compute_capability
        if cc < (8, 9):
            raise ValueError(f"fp8 matmul needs compute capability >= 8.9 (Ada/Hopper); "
                             f"device {dev.ordinal} is {cc[0]}.{cc[1]}")
        od = np.dtype(_BF16) if out_dtype is None else _dtypes.lookup(out_dtype).numpy
        if so is not None:
            od = so[2]
        if od not in (_BF16, _F16, _F32, *FP8):
            raise ValueError(f"fp8 matmul writes bfloat16, float16, float32 or fp8 "
                             f"(float8_e4m3fn, float8_e5m2), not {od}")
        if od == _E5M2 and _E5M2 not in (ab, bb):
            raise ValueError("cuBLASLt writes float8_e5m2 only from an e4m3 x e5m2 product; "
                             "an e4m3 x e4m3 product writes float8_e4m3fn (out_dtype)")
        if compute not in (None, "f32"):
            raise ValueError("fp8 matmul computes in fp32 (compute=None)")
        p.d_fp8 = od in FP8
        # cuBLASLt's fp8 table: the bias is float16 beside a float16 output and bfloat16
        # otherwise (float32 and fp8 outputs included); an fp8 output's C is the bias type.
        p.bias_np = _F16 if od == _F16 else np.dtype(_BF16)
        p.c_np = p.bias_np if p.d_fp8 else od
        p.od, p.compute_type, p.scale_np = od, _dtypes.COMPUTE["COMPUTE_32F"], _F32
        return
    if ab != bb:
        raise ValueError(f"Matmul: a is {ab} but b is {bb}; cuBLASLt needs one input type "
                         "(or two fp8 types)")
    if ab.kind not in "f" and ab != _dtypes.bfloat16:
        raise ValueError(f"cudalibs' cuBLASLt plans take float64, float32, float16, "
                         f"bfloat16 or fp8 inputs, not {ab}; use cublas.gemm")
    want = so[2] if so is not None else (None if out_dtype is None
                                         else _dtypes.lookup(out_dtype).numpy)
    row = combo(ab, want, compute)
    p.od, p.compute_type, p.scale_np = row.c, row.compute, row.scale
    p.c_np = p.bias_np = row.c

def _out_ld(p, spec, what):
    """(leading dimension, batch stride) in elements of ``out``/``c``, checked."""
    M, N, _ = p.mnk
    bo, bso, oshape, ostr = split_batch(spec[0], spec[1], what)
    if spec[0] != p.out_shape:
        raise ValueError(f"{what} has shape {spec[0]}; the product is {p.out_shape}")
    if spec[2] != p.od:
        raise ValueError(f"{what} is {spec[2]}; this matmul writes {p.od}")
    io = p.od.itemsize
    eo = elem_strides(ostr, io)
    if eo is None or not (N == 1 or eo[1] == 1):
        raise ValueError(f"{what} must have unit stride in its last dimension")
    ld = eo[0] if M > 1 else N
    if ld < N:
        raise ValueError(f"{what}'s row stride is shorter than a row")
    if p.batch > 1 and (bso <= 0 or bso % io):
        raise ValueError(f"{what} needs a positive batch stride")
    return ld, (bso // io if p.batch > 1 else 0)

def validate(specs, dev, out_dtype, compute, epilogue_name, alpha, beta, aux_ld,
             fast_accum, min_alignment, max_candidates, workspace_bytes, scale_mode=None,
             amax=False) -> Problem:
    """The :class:`Problem` of a :class:`~cudalibs.cublas.Matmul`'s arguments (see there),
    or a ``ValueError`` / ``TypeError`` naming the argument at fault."""
    sa, sb, sc, so = specs
    p = Problem()
    p.specs = ((sa[0], sa[1], sa[2]), (sb[0], sb[1], sb[2]))
    ab, bb = sa[2], sb[2]
    p.fp8 = ab in FP8 or bb in FP8
    p.epi = epilogue(epilogue_name)
    p.compute = compute
    p.modes = scale_modes(scale_mode)
    if not p.fp8 and (p.modes is not None or amax):
        raise ValueError(f"{'scale_mode' if p.modes is not None else 'amax'} applies to fp8 "
                         f"inputs (float8_e4m3fn, float8_e5m2); a is {ab}, b is {bb}")
    _types(p, ab, bb, so, dev, out_dtype, compute)
    # Shapes and batching.
    ba, p.bsa, ashape, astr = split_batch(sa[0], sa[1], "a")
    bbt, p.bsb, bshape, bstr = split_batch(sb[0], sb[1], "b")
    if ba != bbt and 1 not in (ba, bbt):
        raise ValueError(f"batch sizes {ba} and {bbt} do not broadcast")
    p.batch = max(ba, bbt)
    (M, K), (K2, N) = ashape, bshape
    if K != K2:
        raise ValueError(f"Matmul: inner dimensions differ: a is {sa[0]}, b is {sb[0]}")
    if min(M, N, K) < 1:
        raise ValueError(f"cuBLASLt needs non-empty matrices, got M={M}, N={N}, K={K}")
    p.mnk = (M, N, K)
    p.out_shape = (M, N) if len(sa[0]) == 2 and len(sb[0]) == 2 else (p.batch, M, N)
    ea = elem_strides(astr, ab.itemsize)
    eb = elem_strides(bstr, bb.itemsize)
    # cuBLASLt's A is our b (N×K after op), its B is our a (K×M after op).
    p.opa = None if ea is None else op_ld(M, K, ea[0], ea[1], prefer_t=False)
    p.opb = None if eb is None else op_ld(K, N, eb[0], eb[1], prefer_t=p.fp8)
    if p.opa is None or p.opb is None:
        raise ValueError("each matrix needs a unit stride in one dimension and a leading "
                         "dimension at least as long as that dimension; call .copy() "
                         f"first (a strides {sa[1]}, b strides {sb[1]})")
    if p.fp8:
        if p.opb[0] != OP_T or p.opa[0] != OP_N:
            raise ValueError("fp8 matmul needs a row-major a (unit stride in its last "
                             "dimension) and a column-major b (b = w.T of a row-major "
                             "(N, K) w): cuBLASLt's fp8 kernels take only the 'TN' layout")
        if K % 16 or p.opa[1] % 16 or p.opb[1] % 16:
            raise ValueError(f"fp8 matmul needs K and the leading dimensions to be "
                             f"multiples of 16 (K={K}, lda={p.opb[1]}, ldb={p.opa[1]})")
    # C and D share one layout: the output's (cudalibs does not convert between them).
    if so is not None:
        p.ldo, p.bso = _out_ld(p, so, "out")
        if sc is not None and _out_ld(p, sc, "c") != (p.ldo, p.bso):
            raise ValueError("c must have the strides of out")
    else:
        p.ldo, p.bso = N, (M * N if p.batch > 1 else 0)
        if sc is not None and _out_ld(p, sc, "c") != (p.ldo, p.bso):
            raise ValueError("c must be C-contiguous when out is not described (or "
                             "describe out with c's strides)")
    for name, s, item in (("a", p.bsa, ab.itemsize), ("b", p.bsb, bb.itemsize)):
        if s % item or s < 0:
            raise ValueError(f"{name}'s batch stride must be a non-negative multiple of "
                             "its item size")
    p.alpha = scalar(alpha, p.scale_np, "alpha")
    p.beta = scalar(beta, p.scale_np, "beta")
    if beta != 0 and sc is None and so is None:
        raise ValueError("beta != 0 needs c (or out) to describe the addend")
    p.align = int(min_alignment)
    if p.align < 1 or p.align & (p.align - 1):
        raise ValueError(f"min_alignment must be a power of two, not {p.align}")
    p.fast_accum = bool(fast_accum)
    p.amax = bool(amax)
    p.scale_specs = None
    if p.fp8:
        _fp8_rules(p, dev, sc, beta)
    _validate_aux(p, aux_ld)
    p.max_candidates = int(max_candidates)
    if p.max_candidates < 1:
        raise ValueError(f"max_candidates must be >= 1, got {max_candidates}")
    p.workspace = min(int(workspace_bytes), WORKSPACE_BYTES)
    return p

def _validate_aux(p, aux_ld) -> None:
    M, N, _ = p.mnk
    epi = p.epi
    p.aux_shape = p.aux_dtype = p.ld_aux = None
    if not epi.aux:
        if aux_ld is not None:
            raise ValueError(f"aux_ld given, but epilogue {epi.name!r} has no aux matrix")
        return
    if epi.aux_kind == "gelu":
        ld_aux = round_up(N, 8) if aux_ld is None else int(aux_ld)
        if ld_aux < N or ld_aux % 8:
            raise ValueError(f"aux_ld={ld_aux} must be >= N={N} and a multiple of 8")
        p.aux_dtype, cols = p.od, ld_aux
    else:
        ld_aux = round_up(N, 128) if aux_ld is None else int(aux_ld)
        if ld_aux < N or ld_aux % 128:
            raise ValueError(f"aux_ld={ld_aux} (bits) must be >= N={N} and a "
                             "multiple of 128")
        p.aux_dtype, cols = np.dtype(np.uint8), ld_aux // 8
    p.ld_aux = ld_aux
    p.aux_shape = (M, cols) if len(p.out_shape) == 2 else (p.batch, M, cols)


def _fp8_rules(p, dev, sc, beta) -> None:
    """The fp8 rules beyond the types: fp8 outputs, amax, epilogues with an aux matrix, scale
    modes and the shapes of their scales (:class:`ScaleSpec`)."""
    M, N, K = p.mnk
    epi = p.epi
    modes = p.modes or ("tensor", "tensor")
    if p.d_fp8:
        if sc is not None or beta != 0:
            raise ValueError(f"an fp8 output ({p.od}) takes no addend: cuBLASLt reads C in "
                             f"{p.c_np} beside it, so pass no c and beta=0")
        if epi.name not in _PLAIN_EPILOGUES:
            raise ValueError(f"epilogue {epi.name!r} has no fp8-output form in cuBLASLt; an "
                             f"fp8 output takes {', '.join(sorted(_PLAIN_EPILOGUES))}")
    elif p.amax:
        raise ValueError(f"amax is computed for fp8 outputs only (cuBLASLt refuses AMAX_D "
                         f"beside a {p.od} output of fp8 inputs); out_dtype is {p.od}")
    elif epi.aux and p.od not in (_BF16, _F16):
        raise ValueError(f"epilogue {epi.name!r}: cuBLASLt writes the aux matrix of an fp8 "
                         f"matmul beside bfloat16 or float16 outputs, not {p.od}")
    if modes not in MODE_PAIRS:
        raise ValueError(f"scale_mode {modes}: cuBLASLt takes the pairs "
                         f"{', '.join(map(str, sorted(MODE_PAIRS)))}")
    if modes[0] in HOPPER_MODES:
        _hopper_rules(p, dev, modes)
    p.scale_specs = (_scale_spec("a", modes[0], M, N, K), _scale_spec("b", modes[1], M, N, K))


def _hopper_rules(p, dev, modes) -> None:
    """The row-wise and block modes: Hopper and cuBLASLt 12.9, their outputs, epilogues and
    dimensions."""
    M, N, K = p.mnk
    what = f"scale_mode={modes[0]!r}" if modes[0] == modes[1] else f"scale_mode={modes}"
    cc = dev.compute_capability
    if cc != (9, 0):
        raise ValueError(f"{what}: cuBLASLt implements row-wise and block scaling of fp8 for "
                         f"Hopper only (compute capability 9.0); device {dev.ordinal} is "
                         f"{cc[0]}.{cc[1]} (use scale_mode='tensor')")
    if p.od not in (_BF16, _F16, _F32):
        raise ValueError(f"{what} writes bfloat16, float16 or float32 (out_dtype), not "
                         f"{p.od}: cuBLASLt has no fp8 output in these modes")
    if p.batch > 1:
        raise ValueError(f"{what} takes 2-D operands; a batch of {p.batch} needs one call "
                         "per matrix")
    if p.fast_accum and "row" not in modes:
        raise ValueError(f"{what}: cuBLASLt has no fast accumulation with block scales "
                         "(fast_accum=False)")
    if p.epi.name not in _PLAIN_EPILOGUES:
        raise ValueError(f"{what} takes the epilogues {', '.join(sorted(_PLAIN_EPILOGUES))}, "
                         f"not {p.epi.name!r}")
    if M % 8 or N % 8:
        raise ValueError(f"{what} needs M and N to be multiples of 8 (16-byte rows of the "
                         f"output and of the scale vectors); M={M}, N={N}")
    if modes[0] != "row":
        if K % 128:
            raise ValueError(f"{what} needs K to be a multiple of 128 (whole blocks); K={K}")
        for name, mode, outer in (("a", modes[0], M), ("b", modes[1], N)):
            if mode == "block128x128" and outer % 128:
                raise ValueError(f"{what}: {name} in 128x128 blocks needs "
                                 f"{'M' if name == 'a' else 'N'} to be a multiple of 128 "
                                 f"(whole blocks); it is {outer}")
    # Last: the one check that asks the library (its version).
    version = lt_version_int()
    if version < HOPPER_MODES_VERSION:
        raise ValueError(f"{what} needs cuBLASLt 12.9 or newer; the loaded one is "
                         f"{version // 10000}.{version // 100 % 100}")


# -- what a call passes: the per-call pointers of a plan ------------------------------------
def call_pointer_names(p) -> tuple:
    """The descriptor's per-call pointer attributes of problem ``p``, in the order a call
    passes them (a recorded relaunch writes NULL into those a call leaves out)."""
    return tuple(n for n, on in (
        ("bias_pointer", bool(p.epi.bias)), ("epilogue_aux_pointer", bool(p.epi.aux)),
        ("a_scale_pointer", p.fp8), ("b_scale_pointer", p.fp8),
        ("d_scale_pointer", p.d_fp8), ("amax_d_pointer", p.amax)) if on)


def pointer_aligns(p) -> dict:
    """``{attribute: alignment}`` each per-call pointer is checked to have (what a recorded
    relaunch may assume): the epilogue's vector and matrix the plan's, d_scale and amax a
    float32's, a_scale and b_scale :data:`SCALE_ALIGN` (the default)."""
    return {"bias_pointer": p.align, "epilogue_aux_pointer": p.align, "d_scale_pointer": 4,
            "amax_d_pointer": 4}


def placeholders(p) -> tuple:
    """The pointer attributes the heuristic should see set: those that enter its alignment
    checks (bias, aux, scale vectors) or its choice of kernels (an amax to reduce)."""
    vectors = p.modes is not None and p.modes != ("tensor", "tensor")
    return tuple(n for n, on in (
        ("bias_pointer", bool(p.epi.bias)), ("epilogue_aux_pointer", bool(p.epi.aux)),
        ("amax_d_pointer", p.amax), ("a_scale_pointer", vectors),
        ("b_scale_pointer", vectors)) if on)


def scale_pointer(x, spec: ScaleSpec, device, stream, written: bool = False) -> int:
    """The address of scale ``x`` (any CUDA array) checked against ``spec`` on ``device``; 0
    for an optional one not given."""
    what = spec.what
    if x is None:
        if spec.required:
            raise ValueError(f"scale_mode {spec.mode!r} needs {what}: a float32 device array "
                             f"of shape {spec.layout}")
        return 0
    x = operand(x, what, "Matmul", stream=stream, written=written)
    if not spec.matches(x.shape, x.strides, x.dtype):
        if spec.shapes is None:
            raise ValueError(f"{what} must be a single float32 on the device, not {x.shape} "
                             f"{x.dtype}")
        raise ValueError(f"{what} for scale_mode {spec.mode!r} must be float32 of shape "
                         f"{spec.layout}; got {x.shape} {x.dtype} with byte strides "
                         f"{x.strides}")
    check_device(x, device, what, "Matmul")
    ptr = x.address
    if ptr & (spec.align - 1):
        raise ValueError(f"{what} at 0x{ptr:x} is not aligned to {spec.align} bytes, which "
                         "cuBLASLt reads it at")
    return ptr


#: The float32 device scalars of an fp8 call beside its a_scale and b_scale.
_SCALARS = {name: ScaleSpec(name, "tensor", None, None, "one float32 (shape () or (1,))", 4,
                            False) for name in ("d_scale", "amax")}


class OutputScales:
    """The output side of an fp8 plan's calls: whether it takes ``d_scale`` and ``amax``, and
    their checks."""

    __slots__ = ("rows", "od")

    def __init__(self, p: Problem):
        # (argument, descriptor attribute, taken, required)
        self.rows = (("d_scale", "d_scale_pointer", p.d_fp8, False),
                     ("amax", "amax_d_pointer", p.amax, True))
        self.od = p.od

    def pointers(self, d_scale, amax, device, stream) -> list:
        """``[(attribute, address), ...]`` of a call's output-side fp8 pointers."""
        out = []
        for x, (name, attr, taken, required) in zip((d_scale, amax), self.rows):
            if taken:
                if x is None and required:
                    raise ValueError(f"this plan computes amax (amax=True): pass {name}=, a "
                                     "float32 device scalar the call writes")
                out.append((attr, scale_pointer(x, _SCALARS[name], device, stream,
                                                written=name == "amax")))
            elif x is not None:
                raise ValueError(f"d_scale applies to fp8 outputs; this plan writes {self.od}"
                                 if name == "d_scale" else
                                 "amax= given, but the plan was made without amax=True "
                                 "(which needs an fp8 output)")
        return out
