"""The training kernels (ptx/train.cu through cudalibs.kernels.train) against the float64
references of cudalibs.testing.ref._train, with PyTorch as a second oracle when importable.

Inputs are random (never zeros), outputs are poisoned with NaN before the kernel writes them;
in-place updates (the optimizers) start from random state, so an element left unchanged
fails the comparison.  One test captures a whole update into a CUDA graph and replays it,
checking that the step counter and learning rate read on the device advance the replays.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import ptx as P
from cudalibs import testing as T
from cudalibs.runtime import ptxlib
from cudalibs.kernels import train as K
from cudalibs.testing.ref import _train as ref

from .._sizes import bound, gpu_settings
from .._threads import match_serial

GPU = gpu_settings(20)

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
BF16 = cl.dtypes.bfloat16
HALF_FLOAT = [F32, F16, BF16]
INDEX = [np.dtype(np.int32), np.dtype(np.int64)]
IDS = lambda d: np.dtype(d).name  # noqa: E731

# Row lengths around the warp and the largest block (512 threads), and a long row.
cols_st = st.one_of(st.sampled_from([1, 2, 31, 32, 33, 511, 512, 513, 2049]),
                    st.integers(1, bound(300, 5000)))


def poisoned(shape, dtype):
    return cl.to_device(np.full(shape, T.poison_value(dtype), dtype=dtype))


def rand(shape, dtype, rng, **kw):
    return T.random_array(shape, dtype, rng=rng, **kw)


def f32(v):
    return float(np.float32(v))


def labels_for(rng, shape, classes, dtype, ignore_index, ignore_share=0.3):
    lab = rng.integers(0, classes, size=shape).astype(dtype)
    if ignore_index is not None and lab.size:
        lab[rng.random(shape) < ignore_share] = ignore_index
    return lab


def torch_or_none():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


# -- loading -----------------------------------------------------------------------------------
def test_every_entry_loads_and_fits_its_block(device):
    for name in P.ENTRIES["train"]:
        k = ptxlib.kernel(device, name)
        assert k.max_threads_per_block >= 512, (name, k.attributes())


# -- cross-entropy -----------------------------------------------------------------------------
@pytest.mark.parametrize("ldtype", INDEX, ids=IDS)
@pytest.mark.parametrize("dtype", HALF_FLOAT, ids=IDS)
@GPU
@given(lead=st.sampled_from([(0,), (1,), (7,), (64,), (3, 5), (300,)] + bound([], [(1025,)])),
       cols=cols_st,
       ignore_index=st.sampled_from([None, -100, 1]),
       reduction=st.sampled_from(["mean", "sum"]), scale=st.sampled_from([1.0, 0.25, -3.0]),
       seed=st.integers(0, 2**31))
def test_cross_entropy(device, dtype, ldtype, lead, cols, ignore_index, reduction, scale,
                       seed):
    rng = np.random.default_rng(seed)
    x = rand(lead + (cols,), dtype, rng, low=-4, high=4)
    lab = labels_for(rng, lead, cols, ldtype, ignore_index)
    dx, dl = cl.to_device(x), cl.to_device(lab)
    loss, rows, count = poisoned((), F32), poisoned(lead, F32), poisoned((1,), F32)
    res = K.cross_entropy(dx, dl, ignore_index=ignore_index, reduction=reduction, out=loss,
                          row_loss=rows, count=count)
    assert res.loss is loss and res.row_loss is rows and res.count is count
    e_loss, e_rows, e_count = ref.cross_entropy(x, lab, ignore_index, reduction)
    # float32 results whatever the logits' type (the inputs are exact in float64)
    T.assert_close(rows, e_rows, F32, msg="row_loss")
    # one-element arrays: assert_close does not take 0-d arrays holding NaN (an empty mean)
    T.assert_close(loss.get().reshape(1), np.array([e_loss]), F32, msg="loss")
    assert float(count.get()[0]) == e_count

    # the gradient: with the forward's count, and (no ignore_index, mean) without it
    e_grad = ref.cross_entropy_backward(x, lab, ignore_index, reduction, scale)
    out = poisoned(x.shape, dtype)
    cnt = count if reduction == "mean" else None
    assert K.cross_entropy_backward(dx, dl, cnt, ignore_index=ignore_index,
                                    reduction=reduction, grad_scale=scale, out=out) is out
    T.assert_close(out, e_grad, dtype, msg="backward")
    if ignore_index is None and reduction == "mean":
        g = K.cross_entropy_backward(dx, dl, grad_scale=scale)
        T.assert_close(g, e_grad, dtype, msg="backward, count from the host")
    # in place over the logits
    K.cross_entropy_backward(dx, dl, cnt, ignore_index=ignore_index, reduction=reduction,
                             grad_scale=scale, out=dx)
    T.assert_close(dx, e_grad, dtype, msg="backward in place")


def test_cross_entropy_out_of_range_labels_give_nan(device):
    x = T.random_array((4, 5), F32, rng=1)
    lab = np.array([0, 5, -1, 2], np.int64)
    res = K.cross_entropy(cl.to_device(x), cl.to_device(lab))
    rows = res.row_loss.get()
    assert np.isnan(rows[1]) and np.isnan(rows[2]) and np.isfinite(rows[[0, 3]]).all()
    assert np.isnan(res.loss.get())
    g = K.cross_entropy_backward(cl.to_device(x), cl.to_device(lab)).get()
    assert np.isnan(g[1:3]).all() and np.isfinite(g[[0, 3]]).all()
    # ignored out-of-range labels are simply ignored
    res = K.cross_entropy(cl.to_device(x), cl.to_device(lab), ignore_index=-1)
    assert np.isnan(res.row_loss.get()[1]) and res.row_loss.get()[2] == 0
    # a mean over no counted rows is NaN, the count 0
    res = K.cross_entropy(cl.to_device(x), cl.to_device(np.full(4, 7, np.int32)),
                          ignore_index=7)
    assert np.isnan(res.loss.get()) and res.count.get() == 0


@pytest.mark.parametrize("dtype", [F32, BF16], ids=IDS)
def test_cross_entropy_against_torch(device, dtype, rng):
    torch = torch_or_none()
    if torch is None:
        pytest.skip("torch with CUDA is not importable")
    x = rand((37, 1000), dtype, rng, low=-6, high=6)
    lab = labels_for(rng, (37,), 1000, np.int64, -100)
    res = K.cross_entropy(cl.to_device(x), cl.to_device(lab), ignore_index=-100)
    g = K.cross_entropy_backward(cl.to_device(x), cl.to_device(lab), res.count,
                                 ignore_index=-100)
    tx = torch.tensor(x.astype(np.float32), device="cuda", requires_grad=True)
    tl = torch.tensor(lab, device="cuda")
    tloss = torch.nn.functional.cross_entropy(tx, tl, ignore_index=-100)
    tloss.backward()
    T.assert_close(res.loss.get().reshape(1), np.array([tloss.item()]), F32,
                   msg="loss vs torch")
    T.assert_close(g.get().astype(np.float64), tx.grad.cpu().numpy().astype(np.float64),
                   dtype, msg="grad vs torch")


# -- accuracy ----------------------------------------------------------------------------------
@pytest.mark.parametrize("ldtype", INDEX, ids=IDS)
@pytest.mark.parametrize("dtype", HALF_FLOAT, ids=IDS)
@GPU
@given(rows=st.integers(0, bound(200, 1000)), cols=cols_st,
       ignore_index=st.sampled_from([None, 0, -5]),
       nan_rows=st.booleans(), seed=st.integers(0, 2**31))
def test_accuracy_count(device, dtype, ldtype, rows, cols, ignore_index, nan_rows, seed):
    rng = np.random.default_rng(seed)
    x = rand((rows, cols), dtype, rng)
    lab = labels_for(rng, (rows,), cols, ldtype, ignore_index, 0.2)
    # make about half the rows right, so the count is neither 0 nor everything
    hit = rng.random(rows) < 0.5
    lab[hit] = np.argmax(x.astype(np.float64), axis=1)[hit].astype(ldtype)
    if nan_rows and rows:
        x[rng.integers(rows), rng.integers(cols)] = np.nan
    out = cl.to_device(np.array([123456789], np.int64))
    assert K.accuracy_count(cl.to_device(x), cl.to_device(lab), out,
                            ignore_index=ignore_index) is out
    expected = ref.accuracy_count(x, lab, ignore_index)
    assert int(out.get()[0]) == expected
    K.accuracy_count(cl.to_device(x), cl.to_device(lab), out, ignore_index=ignore_index,
                     accumulate=True)
    assert int(out.get()[0]) == 2 * expected


# -- optimizers --------------------------------------------------------------------------------
@pytest.mark.parametrize("gdtype", HALF_FLOAT, ids=IDS)
@GPU
@given(n=st.one_of(st.sampled_from([0, 1, 255, 256, 257, 70001]),
                   st.integers(0, bound(3000, 1 << 21))),
       momentum=st.sampled_from([0.0, 0.9]), weight_decay=st.sampled_from([0.0, 5e-4, 0.1]),
       lr=st.floats(1e-4, 0.5), lr_on_device=st.booleans(), seed=st.integers(0, 2**31))
def test_sgd(device, gdtype, n, momentum, weight_decay, lr, lr_on_device, seed):
    rng = np.random.default_rng(seed)
    p, g, b = rand(n, F32, rng), rand(n, gdtype, rng), rand(n, F32, rng)
    dp, db = cl.to_device(p), cl.to_device(b)
    rate = cl.to_device(np.array([lr], np.float32)) if lr_on_device else lr
    assert K.sgd(dp, cl.to_device(g), db, lr=rate, momentum=momentum,
                 weight_decay=weight_decay) is dp
    e_p, e_b = ref.sgd(p, g, b, lr=f32(lr), momentum=f32(momentum),
                       weight_decay=f32(weight_decay))
    T.assert_close(dp, e_p, F32, msg="param")
    T.assert_close(db, e_b if momentum else b, F32, msg="momentum buffer")


@pytest.mark.parametrize("gdtype", HALF_FLOAT, ids=IDS)
@GPU
@given(n=st.one_of(st.sampled_from([0, 1, 257, 70001]), st.integers(0, bound(3000, 1 << 21))),
       copy=st.sampled_from([None, F16, BF16]), steps=st.integers(1, 4),
       lr=st.floats(1e-4, 0.1), betas=st.sampled_from([(0.9, 0.999), (0.8, 0.95)]),
       eps=st.sampled_from([1e-8, 1e-3]), weight_decay=st.sampled_from([0.0, 0.01, 0.3]),
       device_counter=st.booleans(), seed=st.integers(0, 2**31))
def test_adamw(device, gdtype, n, copy, steps, lr, betas, eps, weight_decay, device_counter,
               seed):
    rng = np.random.default_rng(seed)
    p, m = rand(n, F32, rng), rand(n, F32, rng)
    v = np.abs(rand(n, F32, rng))
    dp, dm, dv = cl.to_device(p), cl.to_device(m), cl.to_device(v)
    dcopy = None if copy is None else poisoned(n, copy)
    counter = cl.to_device(np.zeros(1, np.int32))
    lr_dev = cl.to_device(np.array([lr], np.float32))
    e = (p, m, v)
    hyper = dict(betas=tuple(map(f32, betas)), eps=f32(eps), weight_decay=f32(weight_decay))
    # Each step's rounding errs relative to its terms, |p| (1 + lr wd) and lr |m̂ / (√v̂ + eps)|,
    # not to the new weight, which may cancel to near zero; the errors of the steps add up.
    scale = np.zeros(n)
    for t in range(1, steps + 1):
        g = rand(n, gdtype, rng)
        if device_counter:
            K.step_increment(counter)
            K.adamw(dp, cl.to_device(g), dm, dv, step=counter, lr=lr_dev, param_copy=dcopy,
                    betas=betas, eps=eps, weight_decay=weight_decay)
        else:
            K.adamw(dp, cl.to_device(g), dm, dv, step=t, lr=lr, param_copy=dcopy, betas=betas,
                    eps=eps, weight_decay=weight_decay)
        prev = np.abs(np.asarray(e[0], np.float64))
        e = ref.adamw(e[0], g, e[1], e[2], step=t, lr=f32(lr), **hyper)
        b1, b2 = betas
        update = (e[1] / (1 - b1 ** t)) / (np.sqrt(e[2] / (1 - b2 ** t)) + eps)
        scale = scale + prev * (1 + lr * weight_decay) + lr * np.abs(update)
    if device_counter:
        assert int(counter.get()[0]) == steps
    T.assert_close(dp, e[0], F32, scale=scale, msg="param")
    T.assert_close(dm, e[1], F32, msg="exp_avg")
    T.assert_close(dv, e[2], F32, msg="exp_avg_sq")
    if copy is not None:
        T.assert_close(dcopy, e[0], copy, msg="param_copy")
        # the copy is the updated float32 weights rounded once
        np.testing.assert_array_equal(dcopy.get(), dp.get().astype(copy))


def test_optimizers_against_torch(device, rng):
    torch = torch_or_none()
    if torch is None:
        pytest.skip("torch with CUDA is not importable")
    n = 1000
    p0 = rand(n, F32, rng)
    grads = [rand(n, F32, rng) for _ in range(3)]
    for name in ("sgd", "adamw"):
        tp = torch.nn.Parameter(torch.tensor(p0, device="cuda"))
        if name == "sgd":
            opt = torch.optim.SGD([tp], lr=0.05, momentum=0.9, weight_decay=1e-3)
            dp, buf = cl.to_device(p0), cl.zeros(n, np.float32)
        else:
            opt = torch.optim.AdamW([tp], lr=0.01, betas=(0.9, 0.99), eps=1e-6,
                                    weight_decay=0.05)
            dp, m, v = cl.to_device(p0), cl.zeros(n, np.float32), cl.zeros(n, np.float32)
            step = cl.zeros(1, np.int32)
        for g in grads:
            tp.grad = torch.tensor(g, device="cuda")
            opt.step()
            if name == "sgd":
                K.sgd(dp, cl.to_device(g), buf, lr=0.05, momentum=0.9, weight_decay=1e-3)
            else:
                K.step_increment(step)
                K.adamw(dp, cl.to_device(g), m, v, step=step, lr=0.01, betas=(0.9, 0.99),
                        eps=1e-6, weight_decay=0.05)
        T.assert_close(dp, tp.detach().cpu().numpy().astype(np.float64), F32,
                       msg=f"{name} vs torch")


# -- embedding ---------------------------------------------------------------------------------
@pytest.mark.parametrize("idtype", INDEX, ids=IDS)
@pytest.mark.parametrize("dtype", HALF_FLOAT, ids=IDS)
@GPU
@given(vocab=st.integers(1, bound(300, 50000)), dim=st.sampled_from([1, 3, 32, 33, 64, 257, 768]),
       ids_shape=st.sampled_from([(0,), (1,), (5,), (4, 9), (300,)]),
       bad_ids=st.booleans(), accumulate=st.booleans(), seed=st.integers(0, 2**31))
def test_embedding(device, dtype, idtype, vocab, dim, ids_shape, bad_ids, accumulate, seed):
    rng = np.random.default_rng(seed)
    w = rand((vocab, dim), dtype, rng)
    # a small id range, so that ids repeat and the backward adds rows up
    ids = rng.integers(0, min(vocab, 7), size=ids_shape).astype(idtype)
    if bad_ids and ids.size:
        ids.flat[0] = vocab
        ids.flat[-1] = -1
    out = poisoned(ids_shape + (dim,), dtype)
    assert K.embedding(cl.to_device(w), cl.to_device(ids), out=out) is out
    # a gather is exact; NaN rows for out-of-range ids
    np.testing.assert_array_equal(out.get().astype(np.float64), ref.embedding(w, ids))

    dy = rand(ids_shape + (dim,), dtype, rng)
    start = rand((vocab, dim), F32, rng)
    dw = cl.to_device(start) if accumulate else poisoned((vocab, dim), F32)
    assert K.embedding_backward(cl.to_device(dy), cl.to_device(ids), vocab, out=dw,
                                accumulate=accumulate) is dw
    expected = ref.embedding_backward(dy, ids, vocab) + (start if accumulate else 0.0)
    T.assert_close(dw, expected, F32, msg="embedding_backward")


# -- global average pooling --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", HALF_FLOAT, ids=IDS)
@GPU
@given(n=st.integers(0, 5), c=st.integers(1, bound(40, 512)),
       spatial=st.sampled_from([(1,), (7,), (1, 1), (4, 4), (7, 9), (33, 2), (2, 3, 5)]),
       seed=st.integers(0, 2**31))
def test_global_avg_pool(device, dtype, n, c, spatial, seed):
    rng = np.random.default_rng(seed)
    shape = (n, c) + spatial
    x = rand(shape, dtype, rng)
    out = poisoned((n, c), dtype)
    assert K.global_avg_pool(cl.to_device(x), out=out) is out
    T.assert_close(out, ref.global_avg_pool(x), dtype, msg="forward")
    dy = rand((n, c), dtype, rng)
    dx = poisoned(shape, dtype)
    assert K.global_avg_pool_backward(cl.to_device(dy), out=dx) is dx
    T.assert_close(dx, ref.global_avg_pool_backward(dy, shape), dtype, msg="backward")
    T.assert_close(K.global_avg_pool_backward(cl.to_device(dy), shape),
                   ref.global_avg_pool_backward(dy, shape), dtype, msg="backward, allocated")


# -- arguments ---------------------------------------------------------------------------------
def test_bad_arguments_raise_before_any_launch(device, monkeypatch):
    launched = []
    monkeypatch.setattr(ptxlib, "launch", lambda *a, **k: launched.append(a))
    x = cl.to_device(T.random_array((4, 5), F32, rng=0))
    lab = cl.to_device(np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="cross_entropy: labels has dtype float32"):
        K.cross_entropy(x, cl.to_device(np.zeros(4, np.float32)))
    with pytest.raises(ValueError, match=r"labels of shape \(4,\)"):
        K.cross_entropy(x, cl.to_device(np.zeros(5, np.int32)))
    with pytest.raises(ValueError, match="reduction"):
        K.cross_entropy(x, lab, reduction="none")
    with pytest.raises(ValueError, match="pass count"):
        K.cross_entropy_backward(x, lab, ignore_index=-100)
    with pytest.raises(ValueError, match="row_loss overlaps logits"):
        K.cross_entropy(x, lab, row_loss=x.reshape(-1)[3:7])
    with pytest.raises(TypeError, match="cross_entropy: logits is a host numpy array"):
        K.cross_entropy(np.zeros((4, 5), np.float32), lab)
    p = cl.to_device(T.random_array(8, F32, rng=1))
    with pytest.raises(ValueError, match="needs momentum_buffer"):
        K.sgd(p, p.copy(), lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="param overlaps grad"):
        K.sgd(p, p, lr=0.1)
    with pytest.raises(ValueError, match="lr must be finite"):
        K.sgd(p, p.copy(), lr=float("nan"))
    with pytest.raises(ValueError, match="step must be an int"):
        K.adamw(p, p.copy(), cl.zeros(8), cl.zeros(8), step=0, lr=1e-3)
    with pytest.raises(TypeError, match="step has dtype"):
        K.adamw(p, p.copy(), cl.zeros(8), cl.zeros(8), step=cl.zeros(1), lr=1e-3)
    with pytest.raises(ValueError, match="beta1"):
        K.adamw(p, p.copy(), cl.zeros(8), cl.zeros(8), step=1, lr=1e-3, betas=(1.0, 0.9))
    with pytest.raises(TypeError, match="param_copy has dtype float32"):
        K.adamw(p, p.copy(), cl.zeros(8), cl.zeros(8), step=1, lr=1e-3, param_copy=p.copy())
    with pytest.raises(ValueError, match="needs num_embeddings or out"):
        K.embedding_backward(x, lab)
    with pytest.raises(ValueError, match="at least one spatial"):
        K.global_avg_pool(x)
    assert launched == []


# -- threads -----------------------------------------------------------------------------------
def _work(seed, stream):
    """Cross-entropy forward and backward, then AdamW on the gradient, all on ``stream``."""
    rng = np.random.default_rng(seed)
    x = cl.to_device(T.random_array((96, 700), F32, rng=rng), stream=stream)
    lab = cl.to_device(labels_for(rng, (96,), 700, np.int64, -100), stream=stream)
    res = K.cross_entropy(x, lab, ignore_index=-100, stream=stream)
    g = K.cross_entropy_backward(x, lab, res.count, ignore_index=-100, stream=stream)
    p = cl.to_device(T.random_array((96, 700), F32, rng=rng), stream=stream)
    m, v = cl.zeros((96, 700), stream=stream), cl.zeros((96, 700), stream=stream)
    step = cl.zeros(1, np.int32, stream=stream)
    for _ in range(3):
        K.step_increment(step, stream=stream)
        K.adamw(p, g, m, v, step=step, lr=1e-2, stream=stream)
    return [a.get(stream=stream) for a in (res.loss, res.row_loss, g, p, m, v)]


def test_threads_match_serial_bitwise(device):
    # eight threads, each running one seed's whole update once on its own stream
    seeds = list(range(8))
    match_serial(device, [lambda s, seed=seed: _work(seed, s) for seed in seeds],
                 threads=len(seeds), repeats=1, pick=lambda t, r: (t,))


# -- a captured update -------------------------------------------------------------------------
def test_captured_step_advances_on_replay(device, rng):
    """Loss, gradient and AdamW captured once; each replay applies the next step (the counter
    and the learning rate are read on the device), matching eager calls step by step."""
    s = cl.Stream()
    rows, classes = 64, 50
    x0 = T.random_array((rows, classes), F32, rng=rng)
    batches = [labels_for(rng, (rows,), classes, np.int32, -100) for _ in range(4)]
    lrs = [0.05, 0.05, 0.02, 0.01]

    def state():
        p = cl.to_device(x0, stream=s)
        return (p, cl.zeros((rows, classes), stream=s), cl.zeros((rows, classes), stream=s),
                cl.zeros(1, np.int32, stream=s), cl.to_device(np.float32([lrs[0]]), stream=s),
                cl.to_device(batches[0], stream=s), cl.zeros((), stream=s))

    def step(p, m, v, counter, lr, lab, loss):
        res = K.cross_entropy(p, lab, ignore_index=-100, out=loss, stream=s)
        g = K.cross_entropy_backward(p, lab, res.count, ignore_index=-100, stream=s)
        K.step_increment(counter, stream=s)
        K.adamw(p, g, m, v, step=counter, lr=lr, weight_decay=0.1, stream=s)

    eager = state()
    losses = []
    for lab, lr in zip(batches, lrs):
        eager[5].copy_(lab, stream=s)
        eager[4].copy_(np.float32([lr]), stream=s)
        step(*eager)
        losses.append(float(eager[6].get(stream=s)))

    graphed = state()
    with cl.graph.capture(s) as g:
        step(*graphed)
    exe = g.instantiate()
    replayed = []
    for lab, lr in zip(batches, lrs):
        graphed[5].copy_(lab, stream=s)
        graphed[4].copy_(np.float32([lr]), stream=s)
        exe.replay(s)
        replayed.append(float(graphed[6].get(stream=s)))
    assert int(graphed[3].get(stream=s)[0]) == len(batches)
    assert replayed == losses
    np.testing.assert_array_equal(graphed[0].get(stream=s), eager[0].get(stream=s))
