"""fp8 scaled dot-product attention on the GPU: :func:`cudalibs.cudnn.attention.sdpa_fp8`,
``sdpa_fp8_backward`` and their plans against the float64 reference of cuDNN's fp8 graph
(:func:`cudalibs.testing.ref.sdpa_fp8_forward`, ``sdpa_fp8_backward``), over shapes, grouped
heads, layouts, both fp8 types and the masks; NaN-poisoned outputs, three calls per shape (the
plan, then its recorded kernels), a torch stream, eight threads sharing plans, a captured
training step with its scales updated in place between replays; bad inputs.  torch has no fp8
attention to compare with.

Bounds, from the arithmetic.  ``u`` is the fp8 type's unit roundoff: ``2**-4`` for
float8_e4m3fn (3 mantissa bits), ``2**-3`` for float8_e5m2 (2 bits); rounding to nearest errs
by at most ``u`` relative in the normal range, and by about ``0.42 u`` RMS for values spread
over their binades (``u / sqrt(3)`` times ``sqrt(E[1 / x**2])`` over a binade).

- ``o``, norm-wise over the rows that exist, against the exact attention of the dequantised
  inputs (the reference with ``P`` unrounded): two independent roundings stand between them,
  ``P`` to fp8 -- which the fused kernel does tile by tile on ``exp(s - running max)`` before it
  normalises, so no reference can mirror which way each rounds -- and ``o`` to fp8; about
  ``0.42 u`` each, ``0.6 u`` together (0.56 u seen on an H100, cuDNN 9.19).  Bound ``1.1 u``:
  7e-2 for e4m3.
- ``dq, dk, dv``, norm-wise against the mirrored reference in real units (``P`` from the
  kernel's own statistics, ``P`` and ``dS`` rounded to fp8 as the graph does): only the
  gradient's own rounding, at most ``u`` and about ``0.42 u``.  Bound ``1.1 u``.
- ``stats``, per row: the kernel normalises by the sum of the probabilities it rounded, so
  ``log(sum)`` errs by a sum of independent roundings weighted by ``P``: RMS
  ``0.42 u sqrt(sum_j P_ij**2)``.  Bound six times that, at most ``u`` (all one way), plus 1e-5.
- ``amax_s = max P``, which is ``1 / sum`` of the row that has it: that row's bound, relative.
- ``amax_o`` within ``u`` of ``max |o|`` read back (``o`` is the same values scaled and
  rounded), and within the worst case of the ``P`` rounding, ``u max_id sum_j P_ij |v_jd -
  o_id|``, of the exact reference.
- the backward's amax values, 1e-2 relative to the mirrored reference: they are taken before
  the outputs' rounding, from the same fp8 intermediates, so what remains is float32 summation
  (1e-6) and the odd intermediate within float32 noise of a rounding boundary that rounds the
  other way -- which moves one of at least 64 terms by ``2 u``: at most ``2 u / sqrt(64)``
  relative for terms of random sign, and rare.
"""

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import testing as T
from cudalibs.cudnn import attention as A
from cudalibs.errors import CudaLibsError
from cudalibs.testing import ref as R

from ._helpers import GPU
from .._oracles import torch_oracle
from .._sizes import examples
from .._threads import match_serial

E4, E5 = A.FP8_DTYPES
F32 = np.dtype(np.float32)
#: Each example plans (and runtime-compiles) its own engines: a few random examples, reported
#: as found rather than shrunk through more compilations.
FEW = settings(GPU, max_examples=examples(6), phases=(Phase.explicit, Phase.reuse,
                                                      Phase.generate))
FWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
BWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do", "descale_s",
              "descale_dp", "scale_s", "scale_dq", "scale_dk", "scale_dv", "scale_dp")


# -- inputs, scales --------------------------------------------------------------------------------
def _recipe(amax, dtype):
    """The scale delayed scaling gives a tensor of this amax: the type's largest power of two
    over amax's next power of two, with two bits of margin (cuDNN's own tests' recipe; a
    power of two, so its inverse, the descale, is exact)."""
    top = 2.0 ** math.floor(math.log2(float(ml_dtypes.finfo(dtype).max)))
    return top / 2.0 ** math.ceil(math.log2(max(float(amax), 2.0 ** -60))) / 4


def _fp8(shape, dtype, rng):
    """``(stored fp8 values, descale)``: nonzero uniform values times a magnitude of
    ``2**U(-2, 2)`` for the whole tensor (activations come in all sizes), rounded with the
    recipe's scale."""
    x = T.random_array(shape, F32, rng=rng, low=-2.0, high=2.0) * 2.0 ** rng.uniform(-2, 2)
    sc = _recipe(np.abs(x).max(), dtype)
    return R.quantize_fp8(x, sc, dtype), 1.0 / sc


def _scalar(x):
    return cl.to_device(np.array([x], F32))


def _nan(shape, dtype):
    return cl.empty(shape, dtype).fill(T.poison_value(dtype))


def _dev(host, layout):
    """``host`` [b, h, s, d] on the device as [b, h, s, d] or as a [b, s, h, d] buffer."""
    if layout == "bshd":
        return cl.to_device(np.ascontiguousarray(host.transpose(0, 2, 1, 3))).transpose(0, 2, 1, 3)
    return cl.to_device(np.ascontiguousarray(host))


def _poisoned_like(arr, dtype=None):
    """A NaN-filled array of ``arr``'s shape and layout (and ``dtype``, default its own)."""
    dtype = arr.dtype if dtype is None else np.dtype(dtype)
    order = sorted(range(4), key=lambda i: -arr.strides[i])
    phys = _nan(tuple(arr.shape[i] for i in order), dtype)
    return phys.transpose(tuple(order.index(i) for i in range(4)))


def _f64(x):
    return np.asarray(x.get() if hasattr(x, "get") else x, np.float64)


def _u(dtype):
    return T.unit_roundoff(dtype)


# -- the bounds of the module docstring ------------------------------------------------------------
def _norm_err(actual, expected, rows=None):
    a, e = _f64(actual), _f64(expected)
    if rows is not None:
        r = np.broadcast_to(rows, e.shape)
        a, e = a[r], e[r]
    assert np.isfinite(a).all(), "non-finite values where the reference has numbers"
    return float(np.linalg.norm(a - e) / max(np.linalg.norm(e), 1e-30))


def _probabilities(q8, k8, dq_, dk_, scale, vis):
    """float64 ``P`` of the dequantised inputs (the reference's own, for the bounds)."""
    h_q = q8.shape[1]
    k = np.repeat(_f64(k8), h_q // k8.shape[1], axis=1) * dk_
    s = np.einsum("bhid,bhjd->bhij", _f64(q8) * dq_, k) * scale
    s = np.where(vis, s, -np.inf)
    m = np.max(s, axis=3, keepdims=True)
    e = np.where(vis, np.exp(s - np.where(np.isfinite(m), m, 0.0)), 0.0)
    return e / np.maximum(e.sum(axis=3, keepdims=True), 1e-300)


def _row_bound(p, u):
    """Per row: six standard deviations of ``log(sum)`` from independent roundings of the
    summed probabilities, at most ``u``, plus float32's share."""
    return np.minimum(6 * 0.42 * u * np.sqrt((p * p).sum(axis=3, keepdims=True)), u) + 1e-5


def _check_forward(res, exact, p, v_real, scale_o, p_type, rows, what):
    """The forward's bounds (module docstring); ``p_type``: the type ``P`` is rounded to."""
    u, uo = _u(p_type), _u(res.o.dtype)
    o_real = _f64(res.o) / scale_o
    err = _norm_err(o_real, exact.o_real, rows)
    assert err <= 1.1 * math.sqrt((u * u + uo * uo) / 2), \
        f"{what}: o error {err:.3e} (u = {u:g} for P, {uo:g} for o)"
    if res.stats is not None:
        rb = _row_bound(p, u)
        got = _f64(res.stats)
        r = np.broadcast_to(rows, got.shape)
        with np.errstate(invalid="ignore"):        # rows that see no key: -inf, not compared
            bad = r & ~(np.abs(got - exact.stats) <= rb)
        assert not bad.any(), (f"{what}: stats off at {np.argwhere(bad)[:3].tolist()}: "
                               f"{got[bad][:3]} vs {exact.stats[bad][:3]}")
    a_s, a_o = _f64(res.amax_s)[0], _f64(res.amax_o)[0]
    rb = _row_bound(p, u)
    tol_s = float((p.max(axis=3, keepdims=True) * rb).max())
    assert abs(a_s - exact.amax_s) <= tol_s, f"{what}: amax_s {a_s} vs {exact.amax_s}"
    top = np.abs(o_real[np.broadcast_to(rows, o_real.shape)]).max()
    assert abs(a_o - top) <= uo * a_o + 1e-6, f"{what}: amax_o {a_o}, max |o| {top}"
    # sum_j P_ij |v_jd - o_id| <= (P @ |v|)_id + |o_id|: the worst case, a little wider
    worst = u * float((np.einsum("bhij,bhjd->bhid", p, np.abs(v_real))
                       + np.abs(exact.o_real)).max())
    assert abs(a_o - exact.amax_o) <= worst + 1e-6, \
        f"{what}: amax_o {a_o} vs the reference's {exact.amax_o} (bound {worst:.3g})"


def _check_backward(res, mirror, rows, scales, what):
    for i, n in enumerate(("dq", "dk", "dv")):
        g = getattr(res, n)
        u = _u(g.dtype)
        err = _norm_err(_f64(g) / scales[i], getattr(mirror, n + "_real"),
                        rows if n == "dq" else None)
        assert err <= 1.1 * u, f"{what}: {n} error {err:.3e} (u = {u:g})"
    for n in ("amax_dq", "amax_dk", "amax_dv", "amax_dp"):
        got, want = _f64(getattr(res, n))[0], getattr(mirror, n)
        assert abs(got - want) <= 1e-2 * want, f"{what}: {n} {got} vs {want}"


# -- a problem: inputs, scales, references --------------------------------------------------------
def _problems(s_q):
    return st.tuples(
        st.sampled_from([1, 2]),                           # b
        st.sampled_from([(4, 4), (4, 2), (4, 1)]),         # h_q, h_kv (MHA, GQA, MQA)
        st.sampled_from(s_q),                              # s_q
        st.sampled_from([64, 100, 128, 320]),              # s_kv
        st.sampled_from(["bhsd", "bshd"]),                 # layout
        st.sampled_from(["none", "causal", "padding", "causal+padding"]))


#: The backward's s_q a multiple of FP8_SEQ_MULTIPLE, the forward's any.
PROBLEMS = _problems([64, 80, 128, 256])
FWD_PROBLEMS = _problems([64, 100, 128, 256])


class _Problem:
    """One drawn problem's host data, device arrays, scales and references."""

    def __init__(self, problem, rng, *, dtype=E4, d=128, do_type=None):
        b, (h_q, h_kv), s_q, s_kv, layout, mask = problem
        self.dtype, self.layout = dtype, layout
        self.q8, dq_ = _fp8((b, h_q, s_q, d), dtype, rng)
        self.k8, dk_ = _fp8((b, h_kv, s_kv, d), dtype, rng)
        self.v8, dv_ = _fp8((b, h_kv, s_kv, d), dtype, rng)
        self.q, self.k, self.v = (_dev(x, layout) for x in (self.q8, self.k8, self.v8))
        self.kw = {"causal": "causal" in mask}
        if "padding" in mask:        # the first batch entry full: the amax values see long rows
            lq = [s_q] + [int(x) for x in rng.integers(1, s_q + 1, b - 1)]
            lk = [s_kv] + [int(x) for x in rng.integers(1, s_kv + 1, b - 1)]
            self.kw.update(seq_lens_q=lq, seq_lens_kv=lk)
        self.rows = R.valid_rows((b, s_q, s_kv), causal=self.kw["causal"],
                                 seq_lens_q=self.kw.get("seq_lens_q"),
                                 seq_lens_kv=self.kw.get("seq_lens_kv"))
        vis = R.sdpa_mask((b, s_q, s_kv), causal=self.kw["causal"],
                          seq_lens_q=self.kw.get("seq_lens_q"),
                          seq_lens_kv=self.kw.get("seq_lens_kv"))
        self.scale = 1.0 / math.sqrt(d)
        self.p = _probabilities(self.q8, self.k8, dq_, dk_, self.scale, vis)
        sc_s = _recipe(1.0, dtype)
        self.host = {"descale_q": dq_, "descale_k": dk_, "descale_v": dv_,
                     "descale_s": 1 / sc_s, "scale_s": sc_s}
        self.exact = R.sdpa_fp8_forward(self.q8, self.k8, self.v8, scale_o=1.0,
                                        quantize_p=False, **self._fwd_host(), **self.kw)
        self.host["scale_o"] = _recipe(self.exact.amax_o, dtype)
        self.scales = {n: _scalar(x) for n, x in self.host.items()}
        self.v_real = np.repeat(_f64(self.v8), h_q // h_kv, axis=1) * dv_
        self.do_type = do_type or dtype

    def _fwd_host(self):
        return {n: self.host[n] for n in FWD_SCALES if n != "scale_o"}

    def fwd_scales(self):
        return {n: self.scales[n] for n in FWD_SCALES}

    def check_forward(self, res, what):
        assert isinstance(res, A.SdpaFp8Output) and isinstance(self.exact, R.Fp8Attention)
        _check_forward(res, self.exact, self.p, self.v_real, self.host["scale_o"], self.dtype,
                       self.rows, what)

    def backward_inputs(self, fwd, rng):
        """The gradient ``do``, the backward's scales from the mirrored reference's amax
        values (the previous step's, in delayed scaling) and that reference."""
        o8 = fwd.o.get()
        self.do8, ddo = _fp8(o8.shape, self.do_type, rng)
        self.do = _dev(self.do8, self.layout)
        self.host.update(descale_o=1 / self.host["scale_o"], descale_do=ddo)
        stats = _f64(fwd.stats)
        first = self._mirror(o8, stats, 1.0, (1.0, 1.0, 1.0), F32, quantize=False)
        self.host["scale_dp"] = _recipe(first.amax_dp, self.do_type)
        self.host["descale_dp"] = 1 / self.host["scale_dp"]
        self.grad_scales = tuple(_recipe(a, self.do_type)
                                 for a in (first.amax_dq, first.amax_dk, first.amax_dv))
        self.host.update(scale_dq=self.grad_scales[0], scale_dk=self.grad_scales[1],
                         scale_dv=self.grad_scales[2])
        self.mirror = self._mirror(o8, stats, self.host["scale_dp"], self.grad_scales,
                                   self.do_type)
        assert isinstance(self.mirror, R.Fp8Gradients)
        self.scales = {n: _scalar(x) for n, x in self.host.items()}

    def _mirror(self, o8, stats, scale_dp, grad_scales, grad_type, quantize=True):
        h = self.host
        return R.sdpa_fp8_backward(
            self.q8, self.k8, self.v8, o8, self.do8, descale_q=h["descale_q"],
            descale_k=h["descale_k"], descale_v=h["descale_v"], descale_o=h["descale_o"],
            descale_do=h["descale_do"], descale_s=h["descale_s"], descale_dp=1 / scale_dp,
            scale_s=h["scale_s"], scale_dq=grad_scales[0], scale_dk=grad_scales[1],
            scale_dv=grad_scales[2], scale_dp=scale_dp, stats=stats, grad_dtype=grad_type,
            quantize=quantize, **self.kw)

    def bwd_scales(self):
        return {n: self.scales[n] for n in BWD_SCALES}

    def check_backward(self, res, what):
        assert isinstance(res, A.SdpaFp8Gradients)
        _check_backward(res, self.mirror, self.rows, self.grad_scales, what)


def _same(a, b, what):
    """Every output of two calls (named tuples) the same, bit for bit."""
    for x, y, n in zip(a, b, type(a)._fields):
        if x is None:
            continue
        assert np.array_equal(np.asarray(x.get()).view(np.uint8),
                              np.asarray(y.get()).view(np.uint8)), f"{what}: {n} differs"


# -- forward and backward against the reference -----------------------------------------------------
@FEW
@given(FWD_PROBLEMS, st.sampled_from(A.FP8_DTYPES), st.sampled_from([64, 128]),
       st.integers(0, 2**31))
def test_forward_against_reference(device, problem, dtype, d, seed):
    rng = np.random.default_rng(seed)
    pb = _Problem(problem, rng, dtype=dtype, d=d)
    runs = []
    for call in range(3):      # the plan, the recorded call, the relaunch
        out = _poisoned_like(pb.q)
        stats = _nan((*pb.q.shape[:3], 1), F32)
        amax_s, amax_o = _nan((1,), F32), _nan((1,), F32)
        res = A.sdpa_fp8(pb.q, pb.k, pb.v, training=True, out=out, stats=stats, amax_s=amax_s,
                         amax_o=amax_o, **pb.fwd_scales(), **pb.kw)
        assert [x.address for x in res] == [x.address for x in (out, stats, amax_s, amax_o)]
        pb.check_forward(res, f"call {call}")
        runs.append(res)
    _same(runs[0], runs[2], "third call vs first")


@FEW
@given(PROBLEMS, st.sampled_from([(E4, E4), (E4, E5)]), st.integers(0, 2**31))
def test_backward_against_reference(device, problem, types, seed):
    rng = np.random.default_rng(seed)
    dtype, do_type = types             # (e4m3, e5m2): the hybrid recipe's gradients
    pb = _Problem(problem, rng, dtype=dtype, do_type=do_type)
    fwd = A.sdpa_fp8(pb.q, pb.k, pb.v, training=True, **pb.fwd_scales(), **pb.kw)
    pb.check_forward(fwd, "forward")
    pb.backward_inputs(fwd, rng)
    runs = []
    for call in range(3):
        outs = tuple(_poisoned_like(x, do_type) for x in (pb.q, pb.k, pb.v))
        amax = {n: _nan((1,), F32) for n in ("amax_dq", "amax_dk", "amax_dv", "amax_dp")}
        res = A.sdpa_fp8_backward(pb.q, pb.k, pb.v, fwd.o, pb.do, fwd.stats, out=outs,
                                  **amax, **pb.bwd_scales(), **pb.kw)
        assert res.dq.address == outs[0].address and \
            res.amax_dp.address == amax["amax_dp"].address
        assert res.dq.dtype == do_type
        pb.check_backward(res, f"call {call}")
        runs.append(res)


def test_head_dim_256_forward_and_e5m2_output(device, rng):
    """Hopper's forward takes head dims up to 256, and writes either fp8 type."""
    pb = _Problem((1, (2, 2), 128, 192, "bhsd", "causal"), rng, d=256)
    res = A.sdpa_fp8(pb.q, pb.k, pb.v, training=True, **pb.fwd_scales(), **pb.kw)
    pb.check_forward(res, "d = 256")
    res = A.sdpa_fp8(pb.q, pb.k, pb.v, out_dtype=E5, **pb.fwd_scales(), **pb.kw)
    assert res.o.dtype == E5 and res.stats is None
    pb.check_forward(res, "e5m2 output")


# -- streams, threads, capture ------------------------------------------------------------------------
def test_on_a_torch_stream(device, rng):
    """Both directions on a torch side stream give what they give on cudalibs' own."""
    torch = torch_oracle(cuda=True)
    if torch is None:
        return
    pb = _Problem((2, (4, 2), 128, 128, "bshd", "causal"), rng)
    fwd = A.sdpa_fp8(pb.q, pb.k, pb.v, training=True, **pb.fwd_scales(), **pb.kw)
    pb.backward_inputs(fwd, rng)
    device.synchronize()
    side = torch.cuda.Stream()
    for _ in range(3):
        with torch.cuda.stream(side):
            f2 = A.sdpa_fp8(pb.q, pb.k, pb.v, training=True, **pb.fwd_scales(), **pb.kw,
                            stream=torch.cuda.current_stream())
            g2 = A.sdpa_fp8_backward(pb.q, pb.k, pb.v, f2.o, pb.do, f2.stats,
                                     **pb.bwd_scales(), **pb.kw, stream=side)
        side.synchronize()
        _same(fwd, f2, "forward on torch's stream")
        pb.check_backward(g2, "backward on torch's stream")


def test_threads_share_plans_bitwise(device, rng):
    """Eight threads, each on its own stream, execute one forward and one backward plan on
    alternating inputs: bit for bit what the same calls give serially (``dq`` and its amax
    only where cuDNN reports the engine deterministic)."""
    pbs = [_Problem((2, (4, 4), 128, 128, "bhsd", "causal"), rng) for _ in range(2)]
    fplan = A.SdpaFp8Plan(pbs[0].q, pbs[0].k, pbs[0].v, causal=True, training=True)
    fwd = [fplan.execute(pb.q, pb.k, pb.v, **pb.fwd_scales()) for pb in pbs]
    for pb, f in zip(pbs, fwd):
        pb.backward_inputs(f, rng)
    bplan = A.SdpaFp8BackwardPlan(pbs[0].q, pbs[0].k, pbs[0].v, fwd[0].o, pbs[0].do,
                                  causal=True).plan()
    exact_dq = bplan.candidates[bplan.choice]["deterministic"]
    assert bplan.backend == "fp8" and "fp8" in repr(bplan)

    def backward(i, s):
        pb, f = pbs[i], fwd[i]
        g = bplan.execute(pb.q, pb.k, pb.v, f.o, pb.do, f.stats, **pb.bwd_scales(), stream=s)
        return tuple(g) if exact_dq else (g.dk, g.dv, g.amax_dk, g.amax_dv, g.amax_dp)

    calls = [lambda s, pb=pb: tuple(fplan.execute(pb.q, pb.k, pb.v, **pb.fwd_scales(),
                                                  stream=s)) for pb in pbs]
    calls += [lambda s, i=i: backward(i, s) for i in range(len(pbs))]
    serial = match_serial(device, calls)
    assert np.isfinite(serial[0][0][1].astype(np.float64)).all()


def test_training_step_captured_with_scales_updated_in_place(device, rng):
    """Forward and backward captured in one CUDA graph; between replays new inputs go into the
    captured buffers and new scales into the captured scale arrays (what delayed scaling
    does each step): every replay matches the reference of its own inputs and scales."""
    shape = (1, (2, 2), 128, 128, "bhsd", "causal")
    pb = _Problem(shape, rng)
    fplan = A.SdpaFp8Plan(pb.q, pb.k, pb.v, causal=True, training=True)
    fwd = fplan.execute(pb.q, pb.k, pb.v, **pb.fwd_scales())
    pb.backward_inputs(fwd, rng)
    bplan = A.SdpaFp8BackwardPlan(pb.q, pb.k, pb.v, fwd.o, pb.do, causal=True)
    o, stats = cl.empty(fwd.o.shape, E4), cl.empty(fwd.stats.shape, F32)
    grads = tuple(cl.empty(x.shape, E4) for x in (pb.q, pb.k, pb.v))
    amax = {n: cl.empty((1,), F32) for n in ("amax_s", "amax_o", "amax_dq", "amax_dk",
                                               "amax_dv", "amax_dp")}
    scales = pb.scales
    bufs = {"q": pb.q, "k": pb.k, "v": pb.v, "do": pb.do}

    def step(s):
        fplan.execute(pb.q, pb.k, pb.v, out=o, stats=stats, amax_s=amax["amax_s"],
                      amax_o=amax["amax_o"], **{n: scales[n] for n in FWD_SCALES}, stream=s)
        bplan.execute(pb.q, pb.k, pb.v, o, pb.do, stats, out=grads,
                      **{n: amax[n] for n in ("amax_dq", "amax_dk", "amax_dv", "amax_dp")},
                      **{n: scales[n] for n in BWD_SCALES}, stream=s)

    with cl.Stream(device) as s:
        step(s)                  # warm: workspaces, packs
        s.sync()
        with cl.graph.capture(s) as g:
            step(s)
        ge = g.instantiate()
        for _ in range(2):
            new = _Problem(shape, rng)
            for n in ("q", "k", "v"):
                bufs[n].copy_(getattr(new, n))
            new_fwd = A.sdpa_fp8(new.q, new.k, new.v, training=True, **new.fwd_scales(),
                                 **new.kw)
            new.backward_inputs(new_fwd, rng)
            bufs["do"].copy_(new.do)
            for n, x in new.scales.items():
                scales[n].copy_(x)
            for x in (o, stats, *grads, *amax.values()):
                x.fill(T.poison_value(x.dtype))
            device.synchronize()
            ge.replay(s)
            s.sync()
            new.check_forward(A.SdpaFp8Output(o, stats, amax["amax_s"], amax["amax_o"]),
                              "replayed forward")
            new.mirror = new._mirror(o.get(), _f64(stats), new.host["scale_dp"],
                                     new.grad_scales, E4)
            new.check_backward(A.SdpaFp8Gradients(*grads, *(amax[n] for n in (
                "amax_dq", "amax_dk", "amax_dv", "amax_dp"))), "replayed backward")


# -- plans, cache, bad input ----------------------------------------------------------------------------
def test_one_shot_finds_its_plan_by_named_key(device, rng):
    pb = _Problem((1, (2, 2), 64, 64, "bhsd", "none"), rng)
    before = len(cl.plan_cache.entries(A.SDPA_FP8_KEY.name))
    r1 = A.sdpa_fp8(pb.q, pb.k, pb.v, **pb.fwd_scales())
    r2 = A.sdpa_fp8(pb.q, pb.k, pb.v, **pb.fwd_scales())
    entries = [e for e in cl.plan_cache.entries(A.SDPA_FP8_KEY.name)
               if e.key["q_shape"] == pb.q.shape and not e.key["training"]]
    assert len(entries) == 1 and len(cl.plan_cache.entries(A.SDPA_FP8_KEY.name)) <= before + 1
    assert isinstance(entries[0].plan, A.SdpaFp8Plan) and entries[0].key["out_dtype"] is None
    _same(r1, r2, "second call")
    fwd = A.sdpa_fp8(pb.q, pb.k, pb.v, training=True, **pb.fwd_scales())
    pb.backward_inputs(fwd, rng)
    A.sdpa_fp8_backward(pb.q, pb.k, pb.v, fwd.o, pb.do, fwd.stats, **pb.bwd_scales())
    assert any(isinstance(e.plan, A.SdpaFp8BackwardPlan)
               for e in cl.plan_cache.entries(A.SDPA_FP8_BACKWARD_KEY.name))


def test_bad_inputs_on_the_device(device, rng):
    pb = _Problem((1, (2, 2), 128, 128, "bhsd", "none"), rng)
    sc = pb.fwd_scales()
    with pytest.raises(ValueError, match="one float32 element"):
        A.sdpa_fp8(pb.q, pb.k, pb.v, **dict(sc, scale_o=cl.to_device(np.ones(2, F32))))
    with pytest.raises(ValueError, match="one float32 element"):
        A.sdpa_fp8(pb.q, pb.k, pb.v, **dict(sc, descale_q=cl.to_device(np.ones(1))))
    with pytest.raises(TypeError, match="host numpy"):
        A.sdpa_fp8(pb.q, pb.k, pb.v, **dict(sc, scale_s=np.ones(1, F32)))
    with pytest.raises(ValueError, match="same memory as scale_o"):
        A.sdpa_fp8(pb.q, pb.k, pb.v, amax_o=sc["scale_o"], **sc)
    with pytest.raises(ValueError, match="16-byte aligned"):
        A.sdpa_fp8(pb.q, pb.k, pb.v, **dict(sc, scale_s=cl.to_device(np.ones(8, F32))[1:2]))
    with pytest.raises(CudaLibsError, match="compute capability 10"):
        A.sdpa_fp8(pb.q, pb.k, pb.v, out_dtype=cl.dtypes.bfloat16, **sc)
    with pytest.raises(TypeError, match="fp8 attention takes"):
        A.sdpa_fp8(*(cl.to_device(x.astype(np.float16)) for x in (pb.q8, pb.k8, pb.v8)), **sc)
    fwd = A.sdpa_fp8(pb.q, pb.k, pb.v, training=True, **sc)
    pb.backward_inputs(fwd, rng)
    with pytest.raises(ValueError, match="statistics from another problem"):
        A.sdpa_fp8_backward(pb.q, pb.k, pb.v, fwd.o, pb.do, _nan((1, 2, 64, 1), F32),
                            **pb.bwd_scales())
    with pytest.raises(TypeError, match="scale_dp= is required"):
        A.sdpa_fp8_backward(pb.q, pb.k, pb.v, fwd.o, pb.do, fwd.stats,
                            **dict(pb.bwd_scales(), scale_dp=None))
    s_q = 4 * A.FP8_SEQ_MULTIPLE + 4          # the last rows of its dQ would be wrong
    short = _Problem((1, (2, 2), s_q, 128, "bhsd", "none"), rng)
    with pytest.raises(ValueError, match=f"a multiple of {A.FP8_SEQ_MULTIPLE}"):
        A.sdpa_fp8_backward(short.q, short.k, short.v, short.q, short.q,
                            _nan((1, 2, s_q, 1), F32), **pb.bwd_scales())
    small = _Problem((1, (2, 2), 128, 128, "bhsd", "none"), rng, d=64)
    with pytest.raises(ValueError, match="d = d_v = 128 only"):
        A.SdpaFp8BackwardPlan(small.q, small.k, small.v, small.q, small.q)
