"""cuDNN bindings without a GPU: descriptors and output dimensions computed by the real
library (descriptor calls need no device), the layout and cache-key logic, and argument
checks that must fire before any C call."""

import ctypes
import gc
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cudalibs import dtypes
from cudalibs.cudnn import _base, _lib, conv, descriptors as D
from cudalibs.cudnn.conv import legacy as conv_legacy, oneshot as conv_oneshot
from cudalibs.cudnn.conv import plan as conv_plan
from cudalibs.cudnn import conv_output_shape, pooling_output_shape
from cudalibs.driver.array import DeviceArray
from cudalibs.errors import ClosedError, CudaLibsError


@pytest.fixture(autouse=True)
def _forget_fake_devices():
    """Tests here key plans by stand-in devices; never let one leak into a later GPU test."""
    yield
    _base._env_of.clear()


# -- descriptors -------------------------------------------------------------------------------
def test_version_checks_pass():
    from cudalibs import cudnn
    cudnn.check_versions()
    assert cudnn.version() >= (9, 0, 0)


def test_descriptor_lifetime():
    d = D.TensorDescriptor(np.float32, (2, 3, 4, 5), (60, 20, 5, 1))
    assert d.handle and not d.closed and "float32" in repr(d)
    d.close()
    d.close()  # twice is harmless
    assert d.closed and "closed" in repr(d)
    with pytest.raises(ClosedError):
        d.raw
    with D.FilterDescriptor(np.float16, (8, 3, 3, 3), True) as f:
        assert "channels-last" in repr(f)
    assert f.closed
    gc.collect()
    assert gc.garbage == []


def test_descriptor_cache_returns_the_same_object():
    a = D.tensor_descriptor(np.float32, (2, 3, 4, 5), (60, 1, 15, 3))
    assert D.tensor_descriptor(np.float32, (2, 3, 4, 5), (60, 1, 15, 3)) is a
    assert D.tensor_descriptor(np.float16, (2, 3, 4, 5), (60, 1, 15, 3)) is not a
    c = D.convolution_descriptor((1, 1), (1, 1), (1, 1), 1, 0, _lib.CUDNN_FMA_MATH)
    assert D.convolution_descriptor((1, 1), (1, 1), (1, 1), 1, 0, _lib.CUDNN_FMA_MATH) is c
    a.close()  # a closed cached descriptor is replaced, never handed out
    b = D.tensor_descriptor(np.float32, (2, 3, 4, 5), (60, 1, 15, 3))
    assert b is not a and not b.closed
    n = D.descriptor_cache_size()
    assert n >= 2
    D.clear_descriptor_cache()
    assert D.descriptor_cache_size() == 0


def test_descriptor_set_is_usable_while_its_descriptors_are_open():
    x = D.TensorDescriptor(np.float32, (2, 3, 4, 5), (60, 20, 5, 1))
    y = D.TensorDescriptor(np.float32, (2, 3, 2, 2), (12, 4, 2, 1))
    s = D.DescriptorSet((x, y), out_shape=(2, 3, 2, 2))
    assert s.usable() and s.descriptors == (x, y) and s.info == {"out_shape": (2, 3, 2, 2)}
    s.close()                   # the descriptors are shared: closing the set frees nothing
    assert not x.closed and s.usable()
    y.close()                   # one closed behind the set's back: the cache builds anew
    assert not s.usable() and not x.closed
    x.close()


def _read_conv(desc):
    L = _lib.get()
    n, pad, stride, dil = ctypes.c_int(), (ctypes.c_int * 3)(), (ctypes.c_int * 3)(), (ctypes.c_int * 3)()
    mode, comp, math, groups = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    assert L.cudnnGetConvolutionNdDescriptor(desc.raw, 3, ctypes.byref(n), pad, stride, dil,
                                             ctypes.byref(mode), ctypes.byref(comp)) == 0
    assert L.cudnnGetConvolutionMathType(desc.raw, ctypes.byref(math)) == 0
    assert L.cudnnGetConvolutionGroupCount(desc.raw, ctypes.byref(groups)) == 0
    k = n.value
    return (tuple(pad[:k]), tuple(stride[:k]), tuple(dil[:k]), mode.value, comp.value,
            math.value, groups.value)


def test_convolution_descriptor_round_trip():
    d = D.ConvolutionDescriptor((1, 2, 0), (2, 1, 3), (1, 2, 1), 4, _lib.CUDNN_DATA_FLOAT,
                                _lib.CUDNN_TENSOR_OP_MATH)
    assert _read_conv(d) == ((1, 2, 0), (2, 1, 3), (1, 2, 1), _lib.CUDNN_CROSS_CORRELATION,
                             _lib.CUDNN_DATA_FLOAT, _lib.CUDNN_TENSOR_OP_MATH, 4)


def test_pooling_and_activation_descriptor_round_trip():
    L = _lib.get()
    p = D.PoolingDescriptor("avg_exclude_padding", (3, 2), (1, 0), (2, 2))
    mode, nan, nb = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    win, pad, stride = (ctypes.c_int * 2)(), (ctypes.c_int * 2)(), (ctypes.c_int * 2)()
    assert L.cudnnGetPoolingNdDescriptor(p.raw, 2, ctypes.byref(mode), ctypes.byref(nan),
                                         ctypes.byref(nb), win, pad, stride) == 0
    assert (mode.value, list(win), list(pad), list(stride)) == (
        _lib.CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, [3, 2], [1, 0], [2, 2])
    a = D.ActivationDescriptor("clipped_relu", 6.0)
    coef = ctypes.c_double()
    assert L.cudnnGetActivationDescriptor(a.raw, ctypes.byref(mode), ctypes.byref(nan),
                                          ctypes.byref(coef)) == 0
    assert (mode.value, coef.value) == (_lib.CUDNN_ACTIVATION_CLIPPED_RELU, 6.0)
    assert "beta=2.0" in repr(D.ActivationDescriptor("swish", swish_beta=2.0))


@pytest.mark.parametrize("bad, match", [
    (lambda: D.PoolingDescriptor("median", (2, 2), (0, 0), (1, 1)), "pooling mode"),
    (lambda: D.PoolingDescriptor("max", (2, 2), (2, 0), (1, 1)), "smaller than the window"),
    (lambda: D.PoolingDescriptor("max", (0, 2), (0, 0), (1, 1)), "window"),
    (lambda: D.ActivationDescriptor("gelu"), "activation mode"),
    (lambda: D.ConvolutionDescriptor((-1, 0), (1, 1), (1, 1), 1, 0, 0), "padding"),
    (lambda: D.ConvolutionDescriptor((0, 0), (0, 1), (1, 1), 1, 0, 0), "stride"),
    (lambda: D.ConvolutionDescriptor((0, 0), (1, 1), (1, 0), 1, 0, 0), "dilation"),
    (lambda: D.TensorDescriptor(np.float32, (2, 3), (3, 1)), "3 to 8"),
    (lambda: D.TensorDescriptor(np.float32, (2, 0, 3, 3), (1, 1, 1, 1)), ">= 1"),
])
def test_descriptor_bad_parameters(bad, match):
    with pytest.raises(ValueError, match=match):
        bad()


def test_descriptor_rejects_integer_data():
    with pytest.raises(TypeError, match="int32"):
        D.TensorDescriptor(np.int32, (1, 1, 1, 1), (1, 1, 1, 1))


# -- layouts -------------------------------------------------------------------------------------
def test_packed_strides_and_layouts():
    shape = (2, 3, 4, 5)
    assert D.packed_strides(shape, False) == (60, 20, 5, 1)
    assert D.packed_strides(shape, True) == (60, 1, 15, 3)
    assert D.packed_strides((2, 3, 4, 5, 6), True) == (360, 1, 90, 18, 3)
    assert D.layouts_of(shape, (240, 80, 20, 4), 4) == (False,)
    assert D.layouts_of(shape, (240, 4, 60, 12), 4) == (True,)
    assert D.layouts_of((2, 3, 1, 1), (12, 4, 4, 4), 4) == (False, True)
    assert D.layouts_of(shape, (480, 80, 20, 4), 4) == ()  # padded batch stride
    # numpy's channels-last array seen as logical NCHW agrees
    a = np.zeros((2, 4, 5, 3), np.float16).transpose(0, 3, 1, 2)
    assert D.layouts_of(a.shape, a.strides, 2) == (True,)
    assert D.layout_name(4, True) == "NHWC" and D.layout_name(5, False) == "NCDHW"


# -- output dimensions computed by cuDNN vs the formula ---------------------------------------------
@st.composite
def conv_cases(draw):
    nsp = draw(st.sampled_from([2, 3]))
    groups = draw(st.integers(1, 3))
    c, k = groups * draw(st.integers(1, 4)), groups * draw(st.integers(1, 4))
    w, pad, stride, dil = [k, c // groups], [], [], []
    x = [draw(st.integers(1, 4)), c]
    for _ in range(nsp):
        r, d, p, s = (draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(0, 3)),
                      draw(st.integers(1, 3)))
        ext = d * (r - 1) + 1
        x.append(draw(st.integers(max(1, ext - 2 * p), 40)))
        w.append(r)
        pad.append(p)
        stride.append(s)
        dil.append(d)
    return (tuple(x), tuple(w), tuple(pad), tuple(stride), tuple(dil), groups,
            draw(st.booleans()), draw(st.sampled_from(["float32", "float16", "bfloat16"])))


@settings(max_examples=120, deadline=None)
@given(conv_cases())
def test_conv_output_dims_by_library_match_formula(case):
    xs, ws, pad, stride, dil, groups, cl, dt = case
    dt = np.dtype(dtypes.lookup(dt).numpy)
    xd = D.tensor_descriptor(dt, xs, D.packed_strides(xs, cl))
    wd = D.filter_descriptor(dt, ws, cl)
    cd = D.convolution_descriptor(pad, stride, dil, groups, _lib.CUDNN_DATA_FLOAT,
                                  _lib.CUDNN_DEFAULT_MATH)
    got = conv_plan.library_output_dims(cd, xd, wd, len(xs))
    assert got == conv_output_shape(xs, ws, stride=stride, padding=pad, dilation=dil,
                                    groups=groups)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([2, 3]), st.data())
def test_pooling_output_dims_by_library_match_formula(nsp, data):
    win = [data.draw(st.integers(1, 4)) for _ in range(nsp)]
    pad = [data.draw(st.integers(0, w - 1)) for w in win]
    stride = [data.draw(st.integers(1, 3)) for _ in range(nsp)]
    xs = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5))) + tuple(
        data.draw(st.integers(max(1, w - 2 * p), 30)) for w, p in zip(win, pad))
    mode = data.draw(st.sampled_from(sorted(D.POOLING_MODES)))
    pd = D.pooling_descriptor(mode, win, pad, stride)
    xd = D.tensor_descriptor(np.float32, xs, D.packed_strides(xs, False))
    dims = (ctypes.c_int * len(xs))()
    assert _lib.get().cudnnGetPoolingNdForwardOutputDim(pd.raw, xd.raw, len(xs), dims) == 0
    assert tuple(dims) == pooling_output_shape(xs, win, stride=stride, padding=pad)


def test_conv_output_shape_errors():
    with pytest.raises(ValueError, match="channel mismatch"):
        conv_output_shape((1, 4, 8, 8), (2, 3, 3, 3))
    with pytest.raises(ValueError, match="does not divide the 4 input"):
        conv_output_shape((1, 4, 8, 8), (3, 1, 3, 3), groups=3)
    with pytest.raises(ValueError, match="does not divide the 3 output"):
        conv_output_shape((1, 4, 8, 8), (3, 2, 3, 3), groups=2)
    with pytest.raises(ValueError, match="output too small"):
        conv_output_shape((1, 1, 2, 8), (1, 1, 5, 1))
    with pytest.raises(ValueError, match="padding"):
        conv_output_shape((1, 1, 8, 8), (1, 1, 3, 3), padding=-1)
    with pytest.raises(ValueError, match="stride"):
        conv_output_shape((1, 1, 8, 8), (1, 1, 3, 3), stride=0)
    with pytest.raises(ValueError, match="2 values"):
        conv_output_shape((1, 1, 8, 8), (1, 1, 3, 3), stride=(1, 1, 1))
    assert conv_output_shape((2, 6, 9, 7), (4, 3, 3, 2), stride=(2, 1), padding=(1, 0),
                             dilation=(1, 2), groups=2) == (2, 4, 5, 5)


# -- cache keys -------------------------------------------------------------------------------------
class _FakeDevice:
    ordinal = 0
    compute_capability = (9, 0)


class _Arr:
    def __init__(self, shape, strides, dtype=np.float32):
        self._shape, self._strides, self._dtype = shape, strides, np.dtype(dtype)
        self.shape, self.strides, self.dtype = shape, strides, np.dtype(dtype)


def test_cache_key_distinguishes_everything_that_matters():
    dev = _FakeDevice()
    x, w = _Arr((2, 3, 8, 8), (768, 256, 32, 4)), _Arr((4, 3, 3, 3), (108, 36, 12, 4))
    base = dict(stride=1, padding=1, dilation=1, groups=1, algo="find", math=None,
                deterministic=False, limit=1 << 20)

    kinds = {"forward": conv.FORWARD_KEY, "backward_data": conv.BACKWARD_DATA_KEY}

    def key(op="forward", x=x, w=w, **kw):
        args = {**base, **kw}
        return conv_oneshot.problem_key(kinds[op], dev, x, w, None, args["stride"], args["padding"],
                                args["dilation"], args["groups"], args["algo"], args["math"],
                                args["deterministic"], args["limit"], None, 1.0, 0.0, True)

    k0 = key()
    assert key() == k0 and hash(key()) == hash(k0)
    xcl = _Arr((2, 3, 8, 8), (768, 4, 96, 12))
    variants = [key(op="backward_data"), key(x=xcl), key(x=_Arr(x.shape, x.strides, np.float16)),
                key(stride=2), key(padding=(1, 0)), key(dilation=2), key(groups=3),
                key(algo="heuristic"), key(algo=1), key(math="tf32"), key(deterministic=True),
                key(limit=0)]
    assert len({k0, *variants}) == len(variants) + 1
    # sequence arguments are hashable keys too
    assert key(padding=[1, 1]) == key(padding=(1, 1))
    # the fields are read by name, never by position
    named = conv.FORWARD_KEY.named(k0)
    assert named["x_shape"] == (2, 3, 8, 8) and named["out_strides"] is None
    assert named["workspace_limit"] == 1 << 20 and named["algo"] == "find"


def test_algo_cache_lists_named_entries_and_is_clearable():
    from cudalibs.runtime.cache import cache

    k = conv.FORWARD_KEY.key(*range(len(conv.FORWARD_KEY.fields)))
    cache.put(k, object())
    try:
        entries = conv.algo_cache()
        assert [e.key["x_shape"] for e in entries if e.raw_key == k] == [2]
        conv.clear_algo_cache()
        assert len(conv.algo_cache()) == 0 and k not in cache
    finally:
        cache.pop(k)


def test_no_algorithm_error_is_a_value_error_and_pickles():
    e = conv.NoAlgorithmError("no forward algorithm fits")
    assert isinstance(e, CudaLibsError) and isinstance(e, ValueError)
    assert str(pickle.loads(pickle.dumps(e))) == str(e)


def test_algorithm_names():
    assert conv.FWD_ALGOS["implicit_precomp_gemm"] == _lib.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
    assert conv.BWD_FILTER_ALGOS["algo_3"] == _lib.CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3
    assert len(conv.BWD_DATA_ALGOS) == _lib.CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
    with pytest.raises(ValueError, match="winograd"):
        conv_legacy.resolve_algo(conv_legacy.OPS["forward"], "fastest")
    with pytest.raises(ValueError):
        conv_legacy.resolve_algo(conv_legacy.OPS["backward_data"], 9)


# -- argument checks fire before any C call (no GPU: a C call here would fail differently) ------------
def _fake(shape, dtype=np.float32, channels_last=False, strides=None, dev=None):
    dt = dtypes.lookup(dtype)
    if strides is None:
        strides = tuple(s * dt.itemsize for s in D.packed_strides(shape, channels_last))
    return DeviceArray._view(0x10000, tuple(shape), tuple(strides), dt, dev or _DEV, None, None)


_DEV = _FakeDevice()


class _Other:
    ordinal = 1
    compute_capability = (9, 0)


def _bn_state(shape=(2, 3, 4, 4), c=3):
    from cudalibs.cudnn import BatchNormState

    st = BatchNormState()
    st.y, st.save_mean, st.save_inv_std = _fake(shape), _fake((c,)), _fake((c,))
    st.reserve, st.path, st.mode, st.eps = _fake((128,), np.uint8), "ex", "spatial", 1e-5
    st.activation, st.fused_add, st.bias = None, False, _fake((c,))
    return st


def test_batch_norm_state_unpacks_like_the_old_tuple():
    st = _bn_state()
    y, mean, inv = st
    assert (y, mean, inv) == (st.y, st.save_mean, st.save_inv_std)
    assert len(st) == 3 and st[1] is st.save_mean and st[-1] is st.save_inv_std
    assert st[:2] == (st.y, st.save_mean)
    r = repr(st)
    assert "path='ex'" in r and "128 B" in r and "spatial" in r
    st.activation, st.fused_add = "relu", True
    assert "add+relu" in repr(st)
    with pytest.raises(AttributeError):
        st.other = 1  # __slots__


def test_batch_norm_ops_constants():
    assert (_lib.CUDNN_BATCHNORM_OPS_BN, _lib.CUDNN_BATCHNORM_OPS_BN_ACTIVATION,
            _lib.CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION) == (0, 1, 2)
    from cudalibs.cudnn import norm
    from cudalibs.cudnn.norm import batch

    assert batch._is_not_supported(3000) and batch._is_not_supported(3004)
    assert not batch._is_not_supported(2000) and not batch._is_not_supported(0)
    assert norm.batch_norm_paths(_fake((2, 5, 3, 3), np.float16)) == {}


@pytest.mark.parametrize("call, exc, match", [
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8)), _fake((2, 3, 3, 3))), ValueError,
     "channel mismatch"),
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8)), _fake((3, 1, 3, 3)), groups=3), ValueError,
     "does not divide"),
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8)), _fake((2, 4, 3, 3)), padding=-1), ValueError,
     "padding"),
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8)), _fake((2, 4, 3, 3)), stride=0), ValueError,
     "stride"),
    (lambda c: c.conv_forward(_fake((1, 4, 2, 8)), _fake((2, 4, 3, 3))), ValueError,
     "output too small"),
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8)), _fake((2, 4, 3, 3), np.float16)), TypeError,
     "dtype"),
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8), np.int32), _fake((2, 4, 3, 3), np.int32)),
     TypeError, "int32"),
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8)), _fake((2, 4, 3, 3), channels_last=True)),
     ValueError, "different memory layouts"),
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8), strides=(2048, 512, 32, 4)),
                              _fake((2, 4, 3, 3))), ValueError, "neither packed"),
    (lambda c: c.conv_forward(_fake((4, 8, 8)), _fake((2, 4, 3))), ValueError, "4 or 5"),
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8)), _fake((2, 4, 3, 3)), algo="fastest"),
     ValueError, "algorithm"),
    (lambda c: c.conv_forward(_fake((1, 4, 8, 8)), _fake((2, 4, 3, 3)), math="tf64"),
     ValueError, "math"),
    (lambda c: c.conv_backward_filter(_fake((1, 4, 8, 8)), _fake((1, 2, 6, 6))), ValueError,
     "filter_shape or out"),
    (lambda c: c.conv_backward_filter(_fake((1, 4, 8, 8)), _fake((1, 2, 6, 6)), (2, 4, 2, 2)),
     ValueError, "convolves to"),
    (lambda c: c.conv_backward_data(_fake((1, 2, 6, 6)), _fake((2, 4, 3, 3)), (1, 4, 9, 9)),
     ValueError, "convolves to"),
    (lambda c: c.conv_bias_act(_fake((1, 4, 8, 8)), _fake((2, 4, 3, 3)), _fake((2,)),
                               activation="gelu"), ValueError, "relu"),
    (lambda c: c.pooling_forward(_fake((1, 4, 8, 8)), 3, padding=3), ValueError, "smaller"),
    (lambda c: c.pooling_forward(_fake((1, 4, 2, 2)), 3), ValueError, "output too small"),
    (lambda c: c.softmax_forward(_fake((2, 5)), algorithm="slow"), ValueError, "algorithm"),
    (lambda c: c.activation_forward(_fake((2, 5)), "elu"), ValueError, "coef"),
    (lambda c: c.activation_forward(_fake((2, 5)), "gelu"), ValueError, "activation mode"),
    (lambda c: c.batch_norm_train(_fake((2, 3, 4, 4)), _fake((3,), np.float16), _fake((3,))),
     TypeError, "float32"),
    (lambda c: c.batch_norm_train(_fake((2, 3, 4, 4)), _fake((4,)), _fake((4,))), ValueError,
     r"shape \(3,\)"),
    (lambda c: c.batch_norm_train(_fake((2, 3, 4, 4)), _fake((3,)), _fake((3,)), _fake((3,))),
     ValueError, "both running"),
    (lambda c: c.batch_norm_train(_fake((2, 3, 4, 4)), _fake((3,)), _fake((3,)), momentum=2),
     ValueError, "momentum"),
    (lambda c: c.batch_norm_train(_fake((2, 3, 4, 4)), _fake((3,)), _fake((3,)), eps=0),
     ValueError, "eps"),
    (lambda c: c.batch_norm_train(_fake((2, 3, 4, 4)), _fake((3,)), _fake((3,)), mode="x"),
     ValueError, "spatial"),
    (lambda c: c.batch_norm_train(_fake((2, 4, 4, 4), np.float16, True), _fake((4,)),
                                  _fake((4,)), activation="gelu"), ValueError, "'relu'"),
    (lambda c: c.batch_norm_train(_fake((2, 4, 4, 4)), _fake((4,)), _fake((4,)),
                                  activation="relu"), ValueError, "channels-last"),
    (lambda c: c.batch_norm_train(_fake((2, 4, 4, 4), np.float16, True), _fake((4,)),
                                  _fake((4,)), activation="relu", mode="per_activation"),
     ValueError, "spatial mode"),
    (lambda c: c.batch_norm_train(_fake((2, 4, 4, 4)), _fake((4,)), _fake((4,)),
                                  z=_fake((2, 4, 4, 4))), ValueError, "activation='relu'"),
    (lambda c: c.batch_norm_train(_fake((2, 4, 4, 4), np.float16, True), _fake((4,)),
                                  _fake((4,)), activation="relu",
                                  z=_fake((2, 4, 4, 2), np.float16, True)), ValueError,
     "must match x"),
    (lambda c: c.batch_norm_train(_fake((2, 4, 4, 4), np.float16, True), _fake((4,)),
                                  _fake((4,)), activation="relu",
                                  z=_fake((2, 4, 4, 4), np.float16)), ValueError,
     "memory layout"),
    (lambda c: c.batch_norm_backward(_fake((2, 3, 4, 4)), _fake((2, 3, 4, 4)), _fake((3,)),
                                     _bn_state(), _fake((3,))), ValueError, "either"),
    (lambda c: c.batch_norm_backward(_fake((2, 3, 4, 4)), _fake((2, 3, 4, 4)), _fake((3,)),
                                     _bn_state(), eps=1e-3), ValueError, "eps"),
    (lambda c: c.batch_norm_backward(_fake((2, 3, 4, 4)), _fake((2, 3, 4, 4)), _fake((3,)),
                                     _bn_state(), mode="per_activation"), ValueError, "mode"),
    (lambda c: c.batch_norm_backward(_fake((2, 3, 4, 4)), _fake((2, 3, 4, 4)), _fake((3,)),
                                     _fake((3,)), _fake((3,)), reserve=_fake((64,), np.uint8,
                                                                             dev=_Other())),
     ValueError, "device 1"),
    (lambda c: c.batch_norm_backward(_fake((2, 3, 4, 4)), _fake((2, 3, 4, 4)), _fake((3,)),
                                     _fake((3,)), _fake((3,)),
                                     reserve=_fake((8, 8), np.uint8, strides=(16, 1))),
     ValueError, "contiguous"),
    (lambda c: c.batch_norm_backward(_fake((2, 3, 4, 4)), _fake((2, 3, 4, 4), np.float16),
                                     _fake((3,))), ValueError, "must match x"),
    (lambda c: c.add_tensor(_fake((1, 3, 2, 1)), _fake((2, 3, 4, 4))), ValueError,
     "broadcast"),
])
def test_bad_input_raises_before_any_c_call(call, exc, match):
    from cudalibs import cudnn

    with pytest.raises(exc, match=match):
        call(cudnn)


def test_different_devices_are_rejected():
    from cudalibs import cudnn

    class Other:
        ordinal = 1
        compute_capability = (9, 0)

    with pytest.raises(ValueError, match="device 1"):
        cudnn.conv_forward(_fake((1, 4, 8, 8)), _fake((2, 4, 3, 3), dev=Other()))


def test_closed_input_is_rejected():
    from cudalibs import cudnn

    class _Buf:
        _ptr = None

    x = DeviceArray._view(0x10000, (1, 1, 4, 4), (64, 64, 16, 4), dtypes.lookup(np.float32),
                          _DEV, _Buf(), None)
    with pytest.raises(ClosedError):
        cudnn.activation_forward(x)


def test_pooling_output_shape_validates_the_shape():
    assert pooling_output_shape((2, 3, 8, 8), 2) == (2, 3, 4, 4)
    assert pooling_output_shape((2, 3, 8, 8, 8), 2, stride=1) == (2, 3, 7, 7, 7)
    for bad in ((3,), (2, 3), (1, 2, 3, 4, 5, 6), (2, 3, 0, 4)):
        with pytest.raises(ValueError, match="x_shape"):
            pooling_output_shape(bad, 2)
    with pytest.raises(TypeError, match="x_shape"):
        pooling_output_shape((2, 3, 8.5, 8), 2)


def test_cudnn_caches_live_in_the_one_plan_cache():
    import importlib

    names = ("activation", "pooling", "norm", "norm.batch", "norm.batch_ops", "norm.layer",
             "conv", "conv.oneshot", "conv.fused", "conv.plans", "attention.sdpa", "rnn.plan")
    mods = {m: importlib.import_module(f"cudalibs.cudnn.{m}") for m in names}
    activation, norm, pooling = mods["activation"], mods["norm"], mods["pooling"]

    # no module-level plan or descriptor dicts of their own: everything goes through the one
    # bounded cache, under named keys
    for mod in mods.values():
        assert not [n for n, v in vars(mod).items() if isinstance(v, dict) and n in
                    ("_plans", "_descs", "_bias_descs")], mod.__name__
    assert norm.BATCH_NORM_KEY.fields == ("dtype", "x_shape", "x_strides", "mode")
    assert "window" in pooling.POOLING_KEY.fields
    assert activation.TENSOR_KEY.name == "cudnn_elementwise_tensor"


def test_plan_classes_follow_the_plan_protocol():
    from cudalibs import cudnn
    from cudalibs.runtime.plan import Plan

    for cls in (cudnn.ConvForwardPlan, cudnn.ConvBackwardDataPlan,
                cudnn.ConvBackwardFilterPlan, cudnn.ConvBiasActPlan):
        assert issubclass(cls, cudnn.ConvPlan) and issubclass(cls, Plan)
        assert cls.library == "cuDNN" and cls.kind.startswith("cudnn_conv")
    assert issubclass(cudnn.BatchNormPlan, Plan) and cudnn.BatchNormPlan.library == "cuDNN"
    # the fused path's epilogue goes through the driver's kernel loader, not a sibling library
    import ast
    import inspect

    from cudalibs.cudnn.conv import fused, lower, plans

    for mod in (conv, conv_oneshot, conv_plan, plans, lower, fused):
        tree = ast.parse(inspect.getsource(mod))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert "kernels" not in (node.module or ""), mod.__name__
