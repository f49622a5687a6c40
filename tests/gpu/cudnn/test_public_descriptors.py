"""cuDNN's legacy descriptors on a GPU: tensors, filters, convolutions, pooling windows and
activations made by the public factories and classes drive cuDNN's own functions on device
data -- ``cudnnAddTensor``, ``cudnnConvolutionForward``, ``cudnnPoolingForward``,
``cudnnActivationForward`` -- whose results match the float64 references, in both layouts;
and the descriptor cache: one object per set of arguments until ``clear_descriptor_cache``."""

import ctypes

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.cudnn import _lib
from cudalibs.cudnn._base import raise_for
from cudalibs.cudnn.descriptors import MATH_TYPES, packed_strides
from cudalibs.cudnn.handle import handle_for
from cudalibs.testing import ref

from ._helpers import poisoned, rand

F32 = np.float32


def _run(fn, *args):
    """One raw cuDNN call; its failure raised with cuDNN's own message."""
    st = getattr(_lib.get(), fn)(*args)
    if st:
        raise_for(st, fn)


def _scalars(alpha, beta):
    """Host float32 ``alpha`` and ``beta`` (kept alive by the caller) and their addresses."""
    a, b = ctypes.c_float(alpha), ctypes.c_float(beta)
    return (a, b), ctypes.addressof(a), ctypes.addressof(b)


def _tensor(arr, channels_last):
    return cudnn.tensor_descriptor(np.float32, arr.shape, packed_strides(arr.shape,
                                                                         channels_last))


@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "NHWC"])
def test_tensor_descriptors_describe_device_memory(device, rng, channels_last):
    shape = (3, 5, 7, 9)
    yh, y = rand(shape, "float32", rng, channels_last)
    bh, b = rand((1, shape[1], 1, 1), "float32", rng)
    ydesc = _tensor(y, channels_last)
    bdesc = cudnn.tensor_descriptor("float32", (1, shape[1], 1, 1), (shape[1], 1, 1, 1))
    assert isinstance(ydesc, cudnn.TensorDescriptor) and isinstance(bdesc, cudnn.TensorDescriptor)
    keep, alpha, beta = _scalars(2.0, 0.5)
    h = handle_for(device, cl.current_stream().raw_handle)
    _run("cudnnAddTensor", h.raw, alpha, bdesc.raw, b.address, beta, ydesc.raw, y.address)
    T.assert_close(y, 0.5 * yh.astype(np.float64) + 2.0 * bh, F32)


@pytest.mark.parametrize("channels_last, params", [
    (False, dict(padding=(1, 1), stride=(2, 1), dilation=(1, 2), groups=2)),
    (True, dict(padding=(1, 1), stride=(1, 1), dilation=(1, 1), groups=1)),
], ids=["NCHW-grouped", "NHWC"])
def test_filter_and_convolution_descriptors_run_a_convolution(device, rng, channels_last,
                                                              params):
    xs, ws = (2, 6, 9, 8), (4, 6 // params["groups"], 3, 2)
    xh, x = rand(xs, "float32", rng, channels_last)
    wh, w = rand(ws, "float32", rng, channels_last)
    ys = ref.conv_output_shape(xs, ws, params["stride"], params["padding"], params["dilation"])
    y = poisoned(ys, F32, channels_last)
    xdesc, ydesc = _tensor(x, channels_last), _tensor(y, channels_last)
    wdesc = cudnn.filter_descriptor(np.float32, ws, channels_last)
    conv = cudnn.convolution_descriptor(params["padding"], params["stride"], params["dilation"],
                                        params["groups"], _lib.CUDNN_DATA_FLOAT,
                                        MATH_TYPES["fma"])
    assert isinstance(wdesc, cudnn.FilterDescriptor)
    assert isinstance(conv, cudnn.ConvolutionDescriptor)
    h = handle_for(device, cl.current_stream().raw_handle)
    algo = _lib.CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
    size = ctypes.c_size_t()
    _run("cudnnGetConvolutionForwardWorkspaceSize", h.raw, xdesc.raw, wdesc.raw, conv.raw,
         ydesc.raw, algo, ctypes.byref(size))
    ws_buf = cl.alloc(max(size.value, 1))
    keep, alpha, beta = _scalars(1.0, 0.0)
    _run("cudnnConvolutionForward", h.raw, alpha, xdesc.raw, x.address, wdesc.raw, w.address,
         conv.raw, algo, ws_buf.ptr, size.value, beta, ydesc.raw, y.address)
    want = ref.conv_forward(xh, wh, params["stride"], params["padding"], params["dilation"],
                            params["groups"])
    T.assert_close(y, want, F32)


@pytest.mark.parametrize("mode", ["max", "avg", "avg_exclude_padding"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "NHWC"])
def test_pooling_descriptors_run_pooling(device, rng, mode, channels_last):
    xs, win, stride, pad = (2, 3, 11, 10), (3, 3), (2, 2), (1, 1)
    xh, x = rand(xs, "float32", rng, channels_last)
    ys = cudnn.pooling_output_shape(xs, win, stride=stride, padding=pad)
    y = poisoned(ys, F32, channels_last)
    pdesc = cudnn.pooling_descriptor(mode, win, pad, stride)
    assert isinstance(pdesc, cudnn.PoolingDescriptor)
    keep, alpha, beta = _scalars(1.0, 0.0)
    h = handle_for(device, cl.current_stream().raw_handle)
    _run("cudnnPoolingForward", h.raw, pdesc.raw, alpha, _tensor(x, channels_last).raw,
         x.address, beta, _tensor(y, channels_last).raw, y.address)
    T.assert_close(y, ref.pooling_forward(xh, win, stride, pad, mode), F32)


# ``identity`` is left out: cuDNN takes it in the fused convolution only.
ACTIVATIONS = [("relu", 0.0), ("sigmoid", 0.0), ("tanh", 0.0), ("clipped_relu", 0.5),
               ("elu", 0.7), ("swish", 0.0)]


@pytest.mark.parametrize("mode, coef", ACTIVATIONS, ids=[m for m, _ in ACTIVATIONS])
def test_activation_descriptors_run_activations(device, rng, mode, coef):
    xh, x = rand((2, 4, 5, 6), "float32", rng, low=-2, high=2)
    y = poisoned(x.shape, F32)
    adesc = cudnn.activation_descriptor(mode, coef, 1.5)
    assert isinstance(adesc, cudnn.ActivationDescriptor)
    keep, alpha, beta = _scalars(1.0, 0.0)
    h = handle_for(device, cl.current_stream().raw_handle)
    _run("cudnnActivationForward", h.raw, adesc.raw, alpha, _tensor(x, False).raw, x.address,
         beta, _tensor(y, False).raw, y.address)
    T.assert_close(y, ref.activation(xh, mode, coef, 1.5), F32)


def test_the_descriptor_cache(device, rng):
    shape, strides = (2, 3, 4, 5), (60, 20, 5, 1)
    first = cudnn.tensor_descriptor(np.float32, shape, strides)
    assert cudnn.tensor_descriptor("float32", list(shape), list(strides)) is first
    assert cudnn.descriptor_cache_size() >= 1
    cudnn.clear_descriptor_cache()
    assert cudnn.descriptor_cache_size() == 0
    # the holder keeps its descriptor, open and usable; the next request makes a new one
    assert not first.closed
    again = cudnn.tensor_descriptor(np.float32, shape, strides)
    assert again is not first and again.key == first.key
    xh, x = rand(shape, "float32", rng)
    yh, y = rand(shape, "float32", rng)
    keep, alpha, beta = _scalars(1.0, 3.0)
    h = handle_for(device, cl.current_stream().raw_handle)
    _run("cudnnAddTensor", h.raw, alpha, first.raw, x.address, beta, again.raw, y.address)
    T.assert_close(y, xh.astype(np.float64) + 3.0 * yh, F32)
    # made directly, a descriptor is the caller's own: closed when the caller says
    own = cudnn.PoolingDescriptor("max", (2, 2), (0, 0), (2, 2))
    assert own is not cudnn.pooling_descriptor("max", (2, 2), (0, 0), (2, 2))
    own.close()
    assert own.closed
    with pytest.raises(cl.ClosedError):
        own.raw
    for cls, args in ((cudnn.TensorDescriptor, (np.float32, shape, strides)),
                      (cudnn.FilterDescriptor, (np.float32, (4, 3, 3, 3))),
                      (cudnn.ConvolutionDescriptor, ((1, 1), (1, 1), (1, 1), 1,
                                                     _lib.CUDNN_DATA_FLOAT, MATH_TYPES["fma"])),
                      (cudnn.ActivationDescriptor, ("relu",))):
        with cls(*args) as d:
            assert d.raw and not d.closed
        assert d.closed
