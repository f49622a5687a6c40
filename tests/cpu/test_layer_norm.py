"""Layer norm and RMS norm without a GPU: the float64 references against finite differences
and the definitions, the norm operation graphs finalized host-side by the real cuDNN
(cuDNN 9 needs no device for them), the plans' problem bookkeeping, and every bad-input check
firing before any C call."""

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudalibs import dtypes
from cudalibs.cudnn import _lib
from cudalibs.driver.array import DeviceArray
from cudalibs.testing.ref import _norm as ref

# The modules by their full names (the plans and one-shots; the operation graphs and their
# tensor uids), as the norm package's attributes are its functions and classes.
LN = importlib.import_module("cudalibs.cudnn.norm.layer")
LO = importlib.import_module("cudalibs.cudnn.norm.lower")

T = _lib


# -- references --------------------------------------------------------------------------------
@st.composite
def norm_problems(draw):
    k = draw(st.integers(1, 2))
    lead = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    norm = draw(st.lists(st.integers(1 if k == 2 else 2, 5), min_size=k, max_size=k))
    seed = draw(st.integers(0, 2**32 - 1))
    eps = draw(st.sampled_from([1e-5, 1e-2, 0.5]))
    return tuple(lead) + tuple(norm), k, np.random.default_rng(seed), eps


def _fd(f, x, eps=1e-6):
    """Central differences of the scalar ``f`` at ``x``."""
    g = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        i = it.multi_index
        old = x[i]
        x[i] = old + eps
        hi = f(x)
        x[i] = old - eps
        lo = f(x)
        x[i] = old
        g[i] = (hi - lo) / (2 * eps)
    return g


def _check_gradients(forward, backward, saved, p, bias):
    """``backward``'s gradients against central differences of ``sum(forward(...) * dy)``
    for each argument, and the same gradients from the statistics ``saved`` returns."""
    shape, k, rng, eps = p
    x = rng.uniform(-2, 2, shape)
    w = rng.uniform(0.5, 1.5, shape[len(shape) - k:])
    args = [x, w] + ([rng.uniform(-1, 1, w.shape)] if bias else [])
    dy = rng.uniform(-1, 1, shape)
    grads = backward(dy, x, w, eps=eps, normalized_ndim=k)
    assert len(grads) == len(args)
    for i, (g, a) in enumerate(zip(grads, args)):
        def loss(v, i=i):
            vals = list(args)
            vals[i] = v
            return float((forward(*vals, eps, k)[0] * dy).sum())

        np.testing.assert_allclose(g, _fd(loss, a.copy()), rtol=1e-5, atol=1e-7)
    # the saved statistics give the same gradients as recomputing them
    stats = forward(*args, eps, k)[1:]
    for a, c in zip(saved(dy, x, w, stats, k), grads):
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("mode", ["layer", "rms"])
@settings(max_examples=25, deadline=None)
@given(p=norm_problems())
def test_backwards_are_the_gradients(mode, p):
    fwd, bwd = ((ref.layer_norm, ref.layer_norm_backward) if mode == "layer"
                else (ref.rms_norm, ref.rms_norm_backward))
    _check_gradients(fwd, bwd, lambda dy, x, w, st_, k: bwd(dy, x, w, *st_, normalized_ndim=k),
                     p, bias=mode == "layer")


def test_forward_references_follow_the_definitions():
    rng = np.random.default_rng(3)
    x = rng.uniform(-3, 5, (4, 3, 10)).astype(np.float32)
    w, b = np.ones((3, 10)), np.zeros((3, 10))
    y, m, r = ref.layer_norm(x, w, b, 0.0, normalized_ndim=2)
    assert y.dtype == np.float64 and m.shape == r.shape == (4, 1, 1)
    rows = y.reshape(4, 30)
    np.testing.assert_allclose(rows.mean(axis=1), 0, atol=1e-12)
    np.testing.assert_allclose(rows.var(axis=1), 1, rtol=1e-12)
    xr = x.reshape(4, 30).astype(np.float64)
    np.testing.assert_allclose(m.ravel(), xr.mean(axis=1), rtol=1e-12)
    np.testing.assert_allclose(r.ravel(), 1 / xr.std(axis=1), rtol=1e-12)
    y1, r1 = ref.rms_norm(x, np.full(10, 2.0), 0.25)
    assert r1.shape == (4, 3, 1)
    np.testing.assert_allclose(r1[..., 0], 1 / np.sqrt((x.astype(np.float64) ** 2).mean(-1)
                                                       + 0.25), rtol=1e-12)
    np.testing.assert_allclose(y1, 2 * x * r1, rtol=1e-12)
    # a 1-D input is one row, its statistics of shape (1,)
    assert ref.layer_norm(np.arange(1.0, 5.0), np.ones(4))[1].shape == (1,)


def test_references_refuse_mismatched_shapes():
    with pytest.raises(ValueError, match="weight has shape"):
        ref.layer_norm(np.ones((2, 4)), np.ones(3))
    with pytest.raises(ValueError, match="normalized_ndim"):
        ref.rms_norm(np.ones((2, 4)), np.ones(4), normalized_ndim=3)
    with pytest.raises(ValueError, match="one per row"):
        ref.rms_norm_backward(np.ones((2, 4)), np.ones((2, 4)), np.ones(4), np.ones(3))


# -- graphs, finalized by the library without a GPU --------------------------------------------
BF16 = dtypes.lookup("bfloat16").numpy


def _tensors_of(graph):
    (op,) = graph._refs
    return op, {t.get(T.CUDNN_ATTR_TENSOR_UNIQUE_ID, T.CUDNN_TYPE_INT64, 1)[0]: t
                for t in op._refs}


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("mode", ["layer", "rms"])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("dtype, wdtype", [(BF16, np.float32), (np.float16, np.float16),
                                           (np.float32, np.float32)])
def test_forward_graphs_finalize_host_side(mode, training, dtype, wdtype):
    graph, uids = LO.forward_graph(mode, training, dtype, wdtype, 48, 320,
                                   bias=mode == "layer")
    assert graph.finalized
    op, tensors = _tensors_of(graph)
    assert op.kind == T.CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR
    want = [LO.X, LO.SCALE] + ([LO.BIAS] if mode == "layer" else []) + [LO.EPS, LO.Y]
    if training:
        want += ([LO.MEAN] if mode == "layer" else []) + [LO.INV]
    assert list(uids) == want and sorted(tensors) == sorted(want)
    get = lambda t, a, ty=T.CUDNN_TYPE_INT64: t.get(a, ty)  # noqa: E731
    # x as (rows, features, 1, 1), channels-last strides; parameters (1, features, 1, 1)
    assert get(tensors[LO.X], T.CUDNN_ATTR_TENSOR_DIMENSIONS) == [48, 320, 1, 1]
    assert get(tensors[LO.X], T.CUDNN_ATTR_TENSOR_STRIDES) == [320, 1, 320, 320]
    assert get(tensors[LO.SCALE], T.CUDNN_ATTR_TENSOR_DIMENSIONS) == [1, 320, 1, 1]
    assert get(tensors[LO.X], T.CUDNN_ATTR_TENSOR_DATA_TYPE, T.CUDNN_TYPE_DATA_TYPE) == \
        [dtypes.lookup(dtype).cudnn]
    assert get(tensors[LO.SCALE], T.CUDNN_ATTR_TENSOR_DATA_TYPE, T.CUDNN_TYPE_DATA_TYPE) == \
        [dtypes.lookup(wdtype).cudnn]
    assert get(tensors[LO.EPS], T.CUDNN_ATTR_TENSOR_IS_BY_VALUE, T.CUDNN_TYPE_BOOLEAN) == [True]
    assert get(tensors[LO.EPS], T.CUDNN_ATTR_TENSOR_DATA_TYPE, T.CUDNN_TYPE_DATA_TYPE) == \
        [T.CUDNN_DATA_FLOAT]
    if training:
        assert get(tensors[LO.INV], T.CUDNN_ATTR_TENSOR_DIMENSIONS) == [48, 1, 1, 1]
        assert get(tensors[LO.INV], T.CUDNN_ATTR_TENSOR_DATA_TYPE, T.CUDNN_TYPE_DATA_TYPE) == \
            [T.CUDNN_DATA_FLOAT]


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("mode", ["layer", "rms"])
def test_backward_graphs_finalize_host_side(mode):
    graph, uids = LO.backward_graph(mode, BF16, np.float32, 7, 96, alignment=4)
    op, tensors = _tensors_of(graph)
    assert op.kind == T.CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR
    if mode == "layer":
        assert uids == (LO.DY, LO.X, LO.SCALE, LO.MEAN, LO.INV, LO.DX, LO.DSCALE, LO.DBIAS)
    else:
        assert uids == (LO.DY, LO.X, LO.SCALE, LO.INV, LO.DX, LO.DSCALE)
    assert sorted(tensors) == sorted(uids)
    assert tensors[LO.MEAN if mode == "layer" else LO.INV].get(
        T.CUDNN_ATTR_TENSOR_DIMENSIONS, T.CUDNN_TYPE_INT64) == [7, 1, 1, 1]


@pytest.mark.cudnn_finalize
def test_layer_norm_graph_without_bias():
    _, uids = LO.forward_graph("layer", True, BF16, np.float32, 4, 64, bias=False)
    assert LO.BIAS not in uids


def test_norm_graph_refuses_a_bad_mode():
    with pytest.raises(ValueError, match="mode must be"):
        LO.forward_graph("batch", True, BF16, np.float32, 4, 64)


# -- plans on stand-in arrays (construction finalizes the graph; nothing runs) ------------------
class _FakeDevice:
    ordinal = 0
    compute_capability = (9, 0)
    arch = "sm_90"


class _Other(_FakeDevice):
    ordinal = 1


_DEV = _FakeDevice()


def _fake(shape, dtype=np.float32, ptr=0x10000, strides=None, dev=None):
    dt = dtypes.lookup(dtype)
    if strides is None:
        acc, st_ = dt.itemsize, []
        for n in reversed(shape):
            st_.append(acc)
            acc *= n
        strides = tuple(reversed(st_))
    return DeviceArray._view(ptr, tuple(shape), tuple(strides), dt, dev or _DEV, None, None)


@pytest.mark.cudnn_finalize
def test_forward_plan_bookkeeping():
    x, w, b = _fake((4, 6, 64), BF16), _fake((64,)), _fake((64,))
    p = LN.NormForwardPlan(x, w, b, training=True, eps=1e-3)
    assert (p.mode, p.rows, p.features, p.stats_shape) == ("layer", 24, 64, (4, 6, 1))
    assert p.training and p.has_bias and p.eps == 1e-3 and p.alignment == 16
    assert p._uids == (LO.X, LO.SCALE, LO.BIAS, LO.EPS, LO.Y, LO.MEAN, LO.INV)
    r = repr(p)
    assert "layer norm forward bfloat16" in r and "weight float32" in r and "not planned" in r
    assert "training" in r and "eps 0.001" in r
    key = p._tuning_key()
    assert key["rows"] == 24 and key["features"] == 64 and key["training"] is True
    specs = {u: (shape, dt) for u, shape, dt in p._specs()}
    assert specs[LO.EPS][0] is None and specs[LO.MEAN] == ((4, 6, 1), np.float32)
    p.close()
    assert p.closed and "closed" in repr(p)


def test_plans_refuse_operands_below_16_byte_alignment():
    x = _fake((8, 64), np.float16, ptr=0x10002)
    w = _fake((64,), np.float16)
    # cuDNN 9.19's norm engines fail at execution on pointers below 16-byte alignment, so
    # such operands are refused before any C call.
    with pytest.raises(LN.NoNormEngineError, match="only 2-byte aligned"):
        LN.NormForwardPlan(x, w, mode="rms")
    with pytest.raises(LN.NoNormEngineError, match="only 8-byte aligned"):
        LN.NormForwardPlan(x, w, mode="rms", alignment=8)
    with pytest.raises(ValueError, match="power of two"):
        LN.NormForwardPlan(x, w, mode="rms", alignment=12)


@pytest.mark.cudnn_finalize
def test_plans_declare_their_operands_alignment():
    w = _fake((64,), np.float16)
    p = LN.NormForwardPlan(_fake((8, 64), np.float16), w, mode="rms")
    assert p.alignment == 16 and not p.has_bias
    b = LN.NormBackwardPlan(_fake((8, 64), np.float16), _fake((8, 64), np.float16), w,
                            mode="rms")
    assert b.alignment == 16 and b._uids == (LO.DY, LO.X, LO.SCALE, LO.INV, LO.DX, LO.DSCALE)
    assert "RMS norm backward float16" in repr(b)


def test_key_kinds_name_their_fields():
    assert LN.NORM_FORWARD_KEY.fields[:8] == ("device", "mode", "dtype", "weight_dtype",
                                              "x_shape", "normalized_ndim", "alignment",
                                              "algo")
    assert {"training", "bias", "eps"} <= set(LN.NORM_FORWARD_KEY.fields)
    k = LN.NORM_BACKWARD_KEY.key(*range(len(LN.NORM_BACKWARD_KEY.fields)))
    assert LN.NORM_BACKWARD_KEY.named(k)["x_shape"] == 4
    assert issubclass(LN.NoNormEngineError, ValueError)


# -- bad input: raised before any C call --------------------------------------------------------
X = (8, 64)
# The plan is built (its graph finalized) before execute() refuses the operands.
_BUILT = pytest.mark.cudnn_finalize
BAD = [
    (lambda: LN.layer_norm(_fake(X), _fake((32,))), ValueError, "weight has shape"),
    (lambda: LN.layer_norm(_fake(X), _fake((8, 64)), normalized_ndim=1), ValueError,
     "weight has shape"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), _fake((64,), np.float16)), TypeError,
     "bias has dtype"),
    (lambda: LN.layer_norm(_fake(X, np.float16), _fake((64,), BF16)), TypeError,
     "float32 or float16"),
    (lambda: LN.layer_norm(_fake(X, np.float64), _fake((64,))), TypeError, "supported"),
    (lambda: LN.layer_norm(_fake(X, np.int32), _fake((64,))), TypeError, "supported"),
    (lambda: LN.layer_norm(_fake((8, 64), strides=(512, 8)), _fake((64,))), ValueError,
     "C-contiguous"),
    (lambda: LN.layer_norm(_fake((0, 64)), _fake((64,))), ValueError, "empty"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,), strides=(8,))), ValueError,
     "weight must be C-contiguous"),
    (lambda: LN.layer_norm(_fake(X), None), TypeError, "weight is required"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), eps=-1e-5), ValueError, "eps"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), eps=float("nan")), ValueError, "eps"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), eps="small"), TypeError, "eps"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), eps=1e-50), ValueError, "float32"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), normalized_ndim=0), ValueError,
     "normalized_ndim"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), normalized_ndim=1.5), TypeError,
     "normalized_ndim"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), algo="fastest"), ValueError, "algo"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), _fake((64,), dev=_Other())), ValueError,
     "device 1"),
    (lambda: LN.layer_norm(_fake(X), _fake((64,)), training=True, out=(None, None)),
     ValueError, "out has 2 entries"),
    (lambda: LN.layer_norm(np.ones(X, np.float32), _fake((64,))), TypeError,
     "host numpy array"),
    (lambda: LN.rms_norm(_fake(X), _fake((64,)), eps=-1), ValueError, "eps"),
    (lambda: LN.rms_norm(_fake((2, 4, 16)), _fake((16,)), normalized_ndim=4), ValueError,
     r"\[1, 3\]"),
    (lambda: LN.NormForwardPlan(_fake(X), _fake((64,)), _fake((64,)), mode="rms"),
     ValueError, "RMS norm takes no bias"),
    (lambda: LN.NormForwardPlan(_fake(X), _fake((64,)), mode="group"), ValueError,
     "mode must be"),
    (lambda: LN.layer_norm_backward(_fake(X), _fake(X), _fake((64,)), _fake((8, 1)),
                                    _fake((4, 1))), ValueError, "another problem"),
    (lambda: LN.layer_norm_backward(_fake(X), _fake(X), _fake((64,)), _fake((8, 1), np.float16),
                                    _fake((8, 1))), TypeError, "statistics are float32"),
    (lambda: LN.layer_norm_backward(_fake(X), _fake(X), _fake((64,)), None, _fake((8, 1))),
     TypeError, "mean is required"),
    (lambda: LN.layer_norm_backward(_fake(X), _fake(X), _fake((64,)), _fake((8, 2),
                                                                            strides=(4, 64)),
                                    _fake((8, 1))), ValueError, "another problem"),
    (lambda: LN.layer_norm_backward(_fake((4, 64)), _fake(X), _fake((64,)), _fake((8, 1)),
                                    _fake((8, 1))), ValueError, "dy has shape"),
    (lambda: LN.layer_norm_backward(_fake(X, np.float16), _fake(X), _fake((64,)),
                                    _fake((8, 1)), _fake((8, 1))), TypeError, "like x"),
    (lambda: LN.layer_norm_backward(_fake(X), _fake(X), _fake((64,)), _fake((8, 1)),
                                    _fake((8, 1)), out=(None, None)), ValueError,
     "out has 2 entries"),
    (lambda: LN.rms_norm_backward(_fake(X), _fake(X), _fake((64,)), None), TypeError,
     "inv_rms is required"),
    (lambda: LN.rms_norm_backward(_fake(X), _fake(X), _fake((64,)), _fake((16,))), ValueError,
     "16 elements"),
    pytest.param(lambda: LN.NormBackwardPlan(_fake(X), _fake(X), _fake((64,)), mode="rms")
                 .execute(_fake(X), _fake(X), _fake((64,)), _fake((8, 1)), _fake((8, 1))),
                 ValueError, "no mean statistic", marks=_BUILT),
    pytest.param(lambda: LN.NormForwardPlan(_fake(X), _fake((64,)))
                 .execute(_fake((4, 64)), _fake((64,))), ValueError, "plan was made",
                 marks=_BUILT),
    pytest.param(lambda: LN.NormForwardPlan(_fake(X), _fake((64,)))
                 .execute(_fake(X), _fake((64,), np.float16)), ValueError, "plan was made",
                 marks=_BUILT),
    pytest.param(lambda: LN.NormForwardPlan(_fake(X), _fake((64,)))
                 .execute(_fake(X), _fake((64,)), _fake((64,))), ValueError, "without a bias",
                 marks=_BUILT),
    pytest.param(lambda: LN.NormForwardPlan(_fake(X), _fake((64,)))
                 .execute(_fake(X, dev=_Other()), _fake((64,), dev=_Other())), ValueError,
                 "device 1", marks=_BUILT),
]


@pytest.mark.parametrize("call, exc, match", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_raises_before_any_c_call(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.cudnn_finalize
def test_closed_plan_refuses_to_execute():
    from cudalibs.errors import ClosedError

    p = LN.NormForwardPlan(_fake(X), _fake((64,)))
    p.close()
    with pytest.raises(ClosedError, match="NormForwardPlan is closed"):
        p.execute(_fake(X), _fake((64,)))
