"""Layer norm and RMS norm of the kernel library (ptx/norm.cu through cudalibs.kernels.norm),
with and without the fused residual add, forward and backward, against the float64
references of cudalibs.testing.ref._norm, with torch as a second oracle.

The sum ``x + residual`` is compared bit for bit (the kernel forms it as torch does: a float32
add rounded once); ``y``, ``dx``, the parameter gradients and the statistics at the
tolerance of their dtype (one float32 computation rounded once).  Inputs are random with a
mean away from zero and no zeros; every output the test can pass is poisoned (NaN) first.
Rows take every launch shape the wrappers choose -- one thread a row, a few threads, a warp,
several warps, a whole block of 1024, several rows a block (whose backward sums meet in shared
memory), rows not a whole number of vectors, rows off a 16-byte boundary, rows too long for
the registers -- with float32, float16 and bfloat16 data and float32 or same-type weights
and biases in every mix.  Then: threads against a serial run bit for bit (the parameter
gradients are reduced deterministically), and a captured forward + backward replayed on new
data against eager calls bit for bit.
"""

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import kernels as K
from cudalibs import ptx as P
from cudalibs import testing as T
from cudalibs.runtime import ptxlib
from cudalibs.testing import ref

from .._oracles import torch_oracle
from .._sizes import bound, fit, gpu_settings
from .._threads import match_serial

GPU = gpu_settings(25)

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
BF16 = np.dtype(cl.dtypes.bfloat16)
DATA = [F32, F16, BF16]
IDS = lambda d: np.dtype(d).name  # noqa: E731
#: Elements of one example: the float64 references stay quick.
BUDGET = bound(1 << 19, 1 << 22)


# -- helpers -----------------------------------------------------------------------------------
def poisoned(shape, dtype):
    return cl.to_device(np.full(shape, T.poison_value(dtype), dtype=dtype))


def rand(shape, dtype, rng, low=-1.0, high=3.0):
    """Random values without zeros; by default of mean about 1 (so that ``x - mean`` is not
    the values themselves)."""
    return T.random_array(shape, dtype, rng=rng, low=low, high=high)


def on_device(a, misalign=False):
    """``a`` on the device; ``misalign``: at 2 or 4 bytes past a 16-byte boundary (the
    any-D kernel's case)."""
    if not misalign:
        return cl.to_device(a)
    flat = np.concatenate([np.zeros(1, a.dtype), a.reshape(-1)])
    return cl.to_device(flat)[1:].reshape(*a.shape)


def wide(a):
    return np.asarray(a.get() if hasattr(a, "get") else a).astype(np.float64)


def bits(a):
    a = np.ascontiguousarray(a.get() if hasattr(a, "get") else a)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def assert_bits(got, want, msg):
    g, w = bits(got).reshape(-1), bits(want).reshape(-1)
    wrong = np.flatnonzero(g != w)
    assert wrong.size == 0, (f"{msg}: {wrong.size} of {w.size} differ, first (index, got, "
                             f"want) {[(int(i), hex(g[i]), hex(w[i])) for i in wrong[:6]]}")


def close(got, want, dtype, msg, scale=None):
    T.assert_close(wide(got), want, dtype, scale=scale, msg=msg)


class Problem:
    """One problem's host data and its device copies."""

    def __init__(self, rng, rows, d, dtype, wdt, bdt, residual, misalign=False, rms=False):
        self.rows, self.d, self.dtype, self.rms = rows, d, np.dtype(dtype), rms
        self.x = rand((rows, d), dtype, rng)
        self.r = rand((rows, d), dtype, rng, -1.0, 1.0) if residual else None
        self.w = rand((d,), wdt, rng, 0.5, 1.5)
        self.b = None if (rms or bdt is None) else rand((d,), bdt, rng, -1.0, 1.0)
        self.dy = rand((rows, d), dtype, rng, -1.0, 1.0)
        self.dres = rand((rows, d), dtype, rng, -1.0, 1.0) if residual else None
        self.s = self.x if self.r is None else ref.residual_sum(self.x, self.r)
        self.dx_ = on_device(self.x, misalign)
        self.dr_ = None if self.r is None else cl.to_device(self.r)
        self.dw_ = cl.to_device(self.w)
        self.db_ = None if self.b is None else cl.to_device(self.b)

    def forward(self, eps, **kw):
        f = K.rms_norm if self.rms else K.layer_norm
        extra = {} if self.rms else {"bias": self.db_}
        out = poisoned(self.x.shape, self.dtype)
        ro = None if self.r is None else poisoned(self.x.shape, self.dtype)
        res = f(self.dx_, self.dw_, eps=eps, residual=self.dr_, out=out, residual_out=ro,
                **extra, **kw)
        assert isinstance(res, K.NormResult) and res.y is out and res.residual_out is ro
        assert tuple(res) == (res.y, res.residual_out, res.mean, res.rstd)
        return res

    def check_forward(self, res, eps, what=""):
        if self.r is not None:
            assert_bits(res.residual_out, self.s, f"{what}x + residual")
        if self.rms:
            y, inv = ref.rms_norm(self.s, self.w, eps)
            assert res.mean is None
        else:
            y, m, inv = ref.layer_norm(self.s, self.w, self.b, eps)
            # the mean's error is relative to the size of the values summed
            close(res.mean, m, F32, f"{what}mean",
                  scale=np.abs(self.s.astype(np.float64)).mean(axis=1, keepdims=True))
        assert res.rstd.shape == inv.shape and res.rstd.dtype == F32
        close(res.rstd, inv, F32, f"{what}rstd")
        close(res.y, y, self.dtype, f"{what}y")

    def backward(self, res, with_dres=True, bias_dtype=None):
        x = self.dx_ if self.r is None else res.residual_out
        dres = cl.to_device(self.dres) if (with_dres and self.dres is not None) else None
        dx = poisoned(self.x.shape, self.dtype)
        dw = poisoned((self.d,), self.w.dtype)
        if self.rms:
            got = K.rms_norm_backward(cl.to_device(self.dy), x, self.dw_, res.rstd,
                                      dresidual=dres, out=(dx, dw))
            return got, dres
        bdt = self.b.dtype if self.b is not None else (bias_dtype or self.w.dtype)
        db = poisoned((self.d,), bdt)
        got = K.layer_norm_backward(cl.to_device(self.dy), x, self.dw_, res.mean, res.rstd,
                                    dresidual=dres, out=(dx, dw, db))
        return got, dres

    def check_backward(self, got, res, dres, what=""):
        d = None if dres is None else self.dres
        if self.rms:
            want = ref.rms_norm_backward(self.dy, self.s, self.w, res.rstd.get(), dresidual=d)
        else:
            want = ref.layer_norm_backward(self.dy, self.s, self.w, res.mean.get(),
                                           res.rstd.get(), dresidual=d)
        # dx is rstd (w dy - mean(w dy) - xhat mean(w dy xhat)): its terms cancel (exactly, for
        # D = 1, and nearly, for D = 2), so its error is relative to the size of the terms, not
        # of the difference.
        inv = res.rstd.get().astype(np.float64)
        sd = self.s.astype(np.float64)
        xhat = (sd if self.rms else sd - res.mean.get().astype(np.float64)) * inv
        wdy = np.abs(self.w.astype(np.float64) * self.dy.astype(np.float64))
        scale = inv * (wdy + wdy.mean(axis=1, keepdims=True) * (1.0 + np.abs(xhat)))
        if d is not None:
            scale = scale + np.abs(d.astype(np.float64))
        close(got[0], want[0], self.dtype, f"{what}dx", scale=scale)
        for g, e, name in zip(got[1:], want[1:], ("dweight", "dbias")):
            assert g.shape == (self.d,)
            close(g, e, g.dtype, f"{what}{name} ({g.dtype})")


# -- loading -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", P.ENTRIES["norm"])
def test_entry_loads_and_takes_its_block(device, name):
    # the forward launches up to 1024 threads a block, the backward 512, the rest 256
    need = 256
    if name.endswith(("_v2", "_v4")):
        need = 1024 if "_fwd_" in name else 512
    k = ptxlib.kernel(device, name)
    print(name, k.attributes())
    assert k.max_threads_per_block >= need


# -- every launch shape, explicitly --------------------------------------------------------------
@pytest.fixture()
def launched(monkeypatch):
    """The names of the kernels launched (the launches go on)."""
    names = []
    real = ptxlib.launch

    def spy(device, name, *args, **kwargs):
        names.append(name)
        return real(device, name, *args, **kwargs)

    monkeypatch.setattr(ptxlib, "launch", spy)
    return names


# (rows, D, misaligned, the forward's and the backward's kernel for bfloat16)
SHAPES = [
    (37, 8, False, "v4", "v2"),          # one thread a row, 128 rows a block (a partial block)
    (300, 256, False, "v4", "v2"),       # 8 threads a row, 16 rows a block (backward too)
    (45, 768, False, "v4", "v2"),        # a warp a row, 3 vectors a thread (of 4); bwd 4 rows
    (21, 3072, False, "v4", "v2"),       # 3 warps a row
    (600, 4096, False, "v4", "v2"),      # the backward's blocks loop over rows
    (5, 16384, False, "v4", "v4"),       # 512 threads a row
    (3, 32768, False, "v4", "any"),      # 1024 threads a row forward; too long for backward
    (19, 4095, False, "any", "any"),     # not a whole number of vectors
    (19, 4096, True, "any", "v2"),       # x off a 16-byte boundary (the backward's x is the
                                         # aligned residual_out)
    (2, 40000, False, "any", "any"),     # too long for the registers
]


@pytest.mark.parametrize("rows,d,misalign,fwd_kind,bwd_kind", SHAPES,
                         ids=[f"{r}x{d}{'-misaligned' if m else ''}" for r, d, m, *_ in SHAPES])
@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
def test_every_launch_shape(device, launched, rows, d, misalign, fwd_kind, bwd_kind, rms):
    rng = np.random.default_rng(rows * 7919 + d)
    p = Problem(rng, rows, d, BF16, F32, BF16, True, misalign, rms)
    res = p.forward(1e-5)
    p.check_forward(res, 1e-5)
    got, dres = p.backward(res)
    p.check_backward(got, res, dres)
    op = "rms_norm" if rms else "layer_norm"
    assert launched[0] == f"{op}_fwd_bf16_{fwd_kind}"
    assert launched[1] == f"{op}_bwd_bf16_{bwd_kind}"
    assert launched[2:] == ["norm_param_grad_f32"] + ([] if rms else ["norm_param_grad_bf16"])


# -- random problems -----------------------------------------------------------------------------
d_st = st.one_of(st.sampled_from([1, 2, 7, 8, 64, 100, 256, 768, 1000, 1024, 2048, 4095, 4096,
                                  8192, 16384]),
                 st.integers(1, bound(3000, 20000)))
rows_st = st.one_of(st.sampled_from([1, 2, 3, 16, 17, 129]), st.integers(1, bound(80, 400)))


@pytest.mark.parametrize("dtype", DATA, ids=IDS)
@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
@GPU
@given(rows=rows_st, d=d_st, wf32=st.booleans(), bias=st.sampled_from([None, "x", "f32"]),
       residual=st.booleans(), misalign=st.booleans(),
       eps=st.sampled_from([1e-5, 1e-6, 0.1]), seed=st.integers(0, 2**31))
def test_against_the_reference(device, dtype, rms, rows, d, wf32, bias, residual, misalign, eps,
                               seed):
    rows, d = fit((rows, d), BUDGET, keep=(1,))
    rng = np.random.default_rng(seed)
    wdt = F32 if wf32 else dtype
    bdt = {None: None, "x": dtype, "f32": F32}[bias]
    note(f"{rows}x{d} {dtype.name} weight {wdt.name} bias {bdt} residual {residual} "
         f"misaligned {misalign}")
    p = Problem(rng, rows, d, dtype, wdt, bdt, residual, misalign, rms)
    for call in range(2):                 # twice: the second call reuses the cached launch
        res = p.forward(eps)
        p.check_forward(res, eps, f"call {call}: ")
        got, dres = p.backward(res, with_dres=bool(call))
        p.check_backward(got, res, dres, f"call {call}: ")
    # without statistics, and with every output allocated
    f = K.rms_norm if rms else K.layer_norm
    extra = {} if rms else {"bias": p.db_}
    lean = f(p.dx_, p.dw_, eps=eps, residual=p.dr_, save_stats=False, **extra)
    assert lean.mean is None and lean.rstd is None and lean.y.dtype == dtype
    assert_bits(lean.y, res.y.get(), "y without statistics")
    if residual:
        assert_bits(lean.residual_out, p.s, "allocated residual_out")


@pytest.mark.parametrize("dtype", [F16, BF16], ids=IDS)
def test_bias_gradient_in_its_own_dtype(device, rng, dtype):
    p = Problem(rng, 33, 1024, dtype, dtype, None, False)
    res = p.forward(1e-5)
    dx, dw, db = K.layer_norm_backward(cl.to_device(p.dy), p.dx_, p.dw_, res.mean, res.rstd,
                                       bias_dtype=np.float32)
    assert dw.dtype == dtype and db.dtype == F32
    want = ref.layer_norm_backward(p.dy, p.x, p.w, res.mean.get(), res.rstd.get())
    close(db, want[2], F32, "dbias in float32")
    close(dw, want[1], dtype, "dweight")


def test_in_place_residual_stream(device, rng):
    """``residual_out`` the residual itself and ``out`` x itself: the pre-norm block's
    in-place update; ``dx`` the residual stream's gradient itself."""
    x, r = rand((64, 2048), BF16, rng), rand((64, 2048), BF16, rng)
    w, b = rand((2048,), F32, rng, 0.5, 1.5), rand((2048,), F32, rng)
    dx_, dr_ = cl.to_device(x), cl.to_device(r)
    res = K.layer_norm(dx_, cl.to_device(w), cl.to_device(b), residual=dr_, out=dx_,
                       residual_out=dr_)
    assert res.y is dx_ and res.residual_out is dr_
    s = ref.residual_sum(x, r)
    assert_bits(dr_, s, "residual updated in place")
    close(dx_, ref.layer_norm(s, w, b)[0], BF16, "y over x")
    dy, dres = rand((64, 2048), BF16, rng), rand((64, 2048), BF16, rng)
    g = cl.to_device(dres)
    dx, dw, db = K.layer_norm_backward(cl.to_device(dy), dr_, cl.to_device(w), res.mean,
                                       res.rstd, dresidual=g, out=(g, None, None))
    assert dx is g
    want = ref.layer_norm_backward(dy, s, w, res.mean.get(), res.rstd.get(), dresidual=dres)
    close(dx, want[0], BF16, "dx over dresidual")
    close(dw, want[1], F32, "dweight")


def test_add_and_norm_references_drive_the_fused_forward(device, rng):
    x, r = rand((40, 1536), F16, rng), rand((40, 1536), F16, rng)
    w, b = rand((1536,), F16, rng, 0.5, 1.5), rand((1536,), F32, rng)
    res = K.layer_norm(cl.to_device(x), cl.to_device(w), cl.to_device(b), eps=1e-4,
                       residual=cl.to_device(r))
    y, s, m, inv = ref.add_layer_norm(x, r, w, b, 1e-4)
    assert_bits(res.residual_out, s, "residual_out")
    close(res.y, y, F16, "layer y")
    close(res.rstd, inv, F32, "layer rstd")
    res = K.rms_norm(cl.to_device(x), cl.to_device(w), eps=1e-4, residual=cl.to_device(r))
    y, s, inv = ref.add_rms_norm(x, r, w, 1e-4)
    assert_bits(res.residual_out, s, "rms residual_out")
    close(res.y, y, F16, "rms y")
    close(res.rstd, inv, F32, "rms rstd")
    assert m.shape == res.rstd.shape


# -- torch, a second oracle ----------------------------------------------------------------------
@pytest.mark.parametrize("wdt", [F32, BF16], ids=IDS)
@pytest.mark.parametrize("dtype", [F16, BF16], ids=IDS)
@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
def test_against_torch(device, rng, rms, dtype, wdt):
    torch = torch_oracle(cuda=True)
    if torch is None:
        return
    F = torch.nn.functional
    rows, d, eps = 257, 4096, 1e-5
    wdt = dtype if wdt == BF16 else wdt          # "x's dtype" for the float16 case
    tdt = {F16: torch.float16, BF16: torch.bfloat16}[dtype]
    x, r = rand((rows, d), dtype, rng), rand((rows, d), dtype, rng)
    w, b = rand((d,), wdt, rng, 0.5, 1.5), rand((d,), wdt, rng)
    dy, dres = rand((rows, d), dtype, rng, -1, 1), rand((rows, d), dtype, rng, -1, 1)

    def t(a):
        # through the bits: torch.from_numpy knows no bfloat16
        a = np.ascontiguousarray(a)
        raw = torch.from_numpy(a.view({2: np.int16, 4: np.int32}[a.dtype.itemsize])).cuda()
        return raw.view({F16: torch.float16, BF16: torch.bfloat16, F32: torch.float32}[a.dtype])

    tx, tr, tw, tb, tdy, tdres = (t(a) for a in (x, r, w, b, dy, dres))
    stream = torch.cuda.current_stream()
    if rms:
        res = K.rms_norm(tx, tw, eps=eps, residual=tr, stream=stream)
        got = K.rms_norm_backward(tdy, res.residual_out, tw, res.rstd, dresidual=tdres,
                                  stream=stream)
    else:
        res = K.layer_norm(tx, tw, tb, eps=eps, residual=tr, stream=stream)
        got = K.layer_norm_backward(tdy, res.residual_out, tw, res.mean, res.rstd,
                                    dresidual=tdres, stream=stream)
    # torch: its own x + r in the dtype, then the norm in float32 on that sum
    ts = tx + tr
    s32 = ts.float().requires_grad_(True)
    w32 = tw.float().requires_grad_(True)
    b32 = tb.float().requires_grad_(True)
    if rms:
        fn = getattr(F, "rms_norm", None)
        ty = (fn(s32, (d,), w32, eps) if fn is not None
              else s32 * torch.rsqrt(s32.pow(2).mean(-1, keepdim=True) + eps) * w32)
        params = (s32, w32)
    else:
        ty = F.layer_norm(s32, (d,), w32, b32, eps)
        params = (s32, w32, b32)
    grads = torch.autograd.grad(ty, params, tdy.float())
    torch.cuda.synchronize()
    assert torch.equal(torch.from_dlpack(res.residual_out), ts), "x + residual, bit for bit"
    close(res.y, ty.detach().to(tdt).float().cpu().numpy(), dtype, "y against torch")
    close(got[0], (grads[0] + tdres.float()).to(tdt).float().cpu().numpy(), dtype,
          "dx against torch")
    for g, e, name in zip(got[1:], grads[1:], ("dweight", "dbias")):
        close(g, e.cpu().numpy(), g.dtype, f"{name} against torch")


# -- threads, capture ----------------------------------------------------------------------------
def _work(seed, stream):
    """A fused forward and backward of one of several shapes (each launch shape), on
    ``stream``."""
    rng = np.random.default_rng(seed)
    rows, d = [(300, 256), (600, 4096), (19, 4095), (45, 1024), (5, 16384)][seed % 5]
    dtype = DATA[seed % 3]
    rms = bool(seed % 2)
    s = stream
    x = cl.to_device(rand((rows, d), dtype, rng), stream=s)
    r = cl.to_device(rand((rows, d), dtype, rng), stream=s)
    w = cl.to_device(rand((d,), F32, rng, 0.5, 1.5), stream=s)
    dy = cl.to_device(rand((rows, d), dtype, rng, -1, 1), stream=s)
    if rms:
        res = K.rms_norm(x, w, residual=r, stream=s)
        grads = K.rms_norm_backward(dy, res.residual_out, w, res.rstd, dresidual=dy, stream=s)
    else:
        b = cl.to_device(rand((d,), dtype, rng), stream=s)
        res = K.layer_norm(x, w, b, residual=r, stream=s)
        grads = K.layer_norm_backward(dy, res.residual_out, w, res.mean, res.rstd,
                                      dresidual=dy, stream=s)
    return [res.y, res.residual_out, res.rstd, *grads]


def test_threads_match_serial_bitwise(device):
    serial = match_serial(device, [lambda s, seed=seed: _work(seed, s) for seed in range(10)],
                          repeats=3, pick=lambda t, r: ((t + r) % 10, (t + r + 5) % 10))
    # and a serial result is right
    rng = np.random.default_rng(1)
    x, r = rand((600, 4096), F16, rng), rand((600, 4096), F16, rng)
    w = rand((4096,), F32, rng, 0.5, 1.5)
    y, s, inv = ref.add_rms_norm(x, r, w)
    assert_bits(serial[1][1][1], s, "serial residual_out")
    close(serial[1][0][1], y, F16, "serial y")


def test_repeated_backward_is_bitwise_the_same(device, rng):
    p = Problem(rng, 2000, 4096, BF16, F32, F32, True)
    res = p.forward(1e-5)
    first, _ = p.backward(res)
    for _ in range(3):
        again, _ = p.backward(res)
        for a, b, name in zip(again, first, ("dx", "dweight", "dbias")):
            assert_bits(a, b.get(), f"repeated {name}")


@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
def test_captured_forward_and_backward_replay_new_data(device, rng, rms):
    """The fused forward and backward captured once (statistics and the backward's scratch
    allocated and freed inside the graph), replayed on new inputs: bit for bit the eager
    calls."""
    s = cl.Stream()
    rows, d = 96, 2048
    batches = [(rand((rows, d), BF16, rng), rand((rows, d), BF16, rng),
                rand((rows, d), BF16, rng, -1, 1)) for _ in range(3)]
    w = cl.to_device(rand((d,), F32, rng, 0.5, 1.5), stream=s)
    b = None if rms else cl.to_device(rand((d,), F32, rng), stream=s)

    def state():
        return {k: cl.empty((rows, d), BF16, stream=s) for k in ("x", "r", "dy", "y", "ro",
                                                                "dx")} | {
            "dw": cl.empty((d,), F32, stream=s), "db": cl.empty((d,), F32, stream=s)}

    def step(a):
        if rms:
            res = K.rms_norm(a["x"], w, residual=a["r"], out=a["y"], residual_out=a["ro"],
                             stream=s)
            K.rms_norm_backward(a["dy"], a["ro"], w, res.rstd, dresidual=a["dy"],
                                out=(a["dx"], a["dw"]), stream=s)
        else:
            res = K.layer_norm(a["x"], w, b, residual=a["r"], out=a["y"],
                               residual_out=a["ro"], stream=s)
            K.layer_norm_backward(a["dy"], a["ro"], w, res.mean, res.rstd, dresidual=a["dy"],
                                  out=(a["dx"], a["dw"], a["db"]), stream=s)
        del res                            # the statistics are freed inside the graph too

    def load(a, batch):
        for k, v in zip(("x", "r", "dy"), batch):
            a[k].copy_(v, stream=s)

    outputs = ("y", "ro", "dx", "dw") + (() if rms else ("db",))
    eager = state()
    expected = []
    for batch in batches:
        load(eager, batch)
        step(eager)
        expected.append({k: eager[k].get(stream=s) for k in outputs})
    graphed = state()
    load(graphed, batches[0])
    step(graphed)                           # loads the kernels, sizes the grid: then capture
    with cl.graph.capture(s) as g:
        step(graphed)
    exe = g.instantiate()
    for k, batch in enumerate(batches):
        load(graphed, batch)
        exe.replay(s)
        for name in outputs:
            assert_bits(graphed[name].get(stream=s), expected[k][name], f"replay {k}: {name}")
    # and the replay computed the fused op
    x, r, dy = batches[-1]
    y, s_ref, *_ = (ref.add_rms_norm(x, r, w.get()) if rms
                    else ref.add_layer_norm(x, r, w.get(), b.get()))
    assert_bits(expected[-1]["ro"], s_ref, "x + residual")
    close(expected[-1]["y"], y, BF16, "replayed y")
    exe.close()
    g.close()
    s.close()


# -- bad input ---------------------------------------------------------------------------------
def test_bad_arguments_raise_before_any_launch(device, monkeypatch):
    launched = []
    monkeypatch.setattr(ptxlib, "launch", lambda *a, **k: launched.append(a))
    x = cl.to_device(T.random_array((4, 8), BF16, rng=0))
    w = cl.to_device(T.random_array((8,), F32, rng=1))
    with pytest.raises(TypeError, match="layer_norm: weight has dtype float16"):
        K.layer_norm(x, cl.to_device(np.ones(8, np.float16)))
    with pytest.raises(TypeError, match="rms_norm: x is a host numpy array"):
        K.rms_norm(np.ones((4, 8), np.float32), w)
    with pytest.raises(ValueError, match="residual_out receives x \\+ residual"):
        K.layer_norm(x, w, residual_out=cl.empty((4, 8), BF16))
    with pytest.raises(ValueError, match="out overlaps x"):
        K.rms_norm(x[:2], w, out=x[1:3])
    with pytest.raises(ValueError, match=r"rstd must hold one float32 per row of x \(4\)"):
        K.rms_norm_backward(x, x, w, cl.zeros((3,)))
    closed = cl.to_device(np.ones(8, np.float32))
    closed.close()
    with pytest.raises(cl.ClosedError, match="weight is closed"):
        K.layer_norm(x, closed)
    assert launched == []
