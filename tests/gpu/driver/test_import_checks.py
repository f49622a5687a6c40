"""Foreign arrays over real device memory: a read-only, malformed or overlapping producer
array is refused before anything is written, and the memory is unchanged afterwards (the GPU
side of tests/cpu/test_import_checks.py); PyTorch and CuPy arrays still come in and go back."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas, cudnn
from cudalibs.driver import _dlpack as D


class Producer:
    """A torch/CuPy-like producer describing memory it keeps alive (a cudalibs array here)
    through ``__cuda_array_interface__``."""

    def __init__(self, base, *, shape=None, strides=None, readonly=False, offset=0):
        self.base = base
        self.__cuda_array_interface__ = {
            "shape": base.shape if shape is None else shape,
            "typestr": base.dtype.str,
            "data": (base.ptr + offset, readonly),
            "strides": strides,
            "version": 3,
            "stream": None,         # no producer stream to wait for: one stream here
        }


def _on_device(host):
    return cl.to_device(np.ascontiguousarray(host))


def _unchanged(base, host):
    # get() runs on the stream every write above was queued on: it sees them all.
    np.testing.assert_array_equal(base.get(), host)


def _refused(writes, words):
    for write in writes:
        with pytest.raises(ValueError, match=words):
            write()


def _factors(rng, m, k, n):
    """Two float32 matrices whose product is ``(m, n)``."""
    return (_on_device(rng.standard_normal((m, k)).astype(np.float32)),
            _on_device(rng.standard_normal((k, n)).astype(np.float32)))


# -- read-only producers -----------------------------------------------------------------------
def test_a_read_only_producer_is_read_but_never_written(device):
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    base = _on_device(host)
    ro = cl.asarray(Producer(base, readonly=True))
    assert ro.readonly and ro.address == base.ptr
    np.testing.assert_array_equal(ro.get(), host)
    zeros = cl.zeros((4, 6), np.float32)
    _refused((lambda: ro.fill(0), lambda: ro[1:].fill(0), lambda: ro.T.fill(0),
              lambda: ro.copy_(np.zeros((4, 6), np.float32)), lambda: ro.copy_(zeros),
              lambda: ro.copy_(Producer(zeros)), lambda: ro.__setitem__(0, 1.0),
              lambda: ro.__setitem__((slice(None), 2), np.ones(4, np.float32))), "read-only")
    _unchanged(base, host)
    # A copy is the caller's own memory: writable.
    c = ro.copy()
    assert not c.readonly
    c.fill(5.0)
    np.testing.assert_array_equal(c.get(), np.full((4, 6), 5.0, np.float32))
    _unchanged(base, host)
    # Exported on, it says read-only again.
    assert ro.__cuda_array_interface__["data"][1] is True
    assert ro[1:].__cuda_array_interface__["data"][1] is True


def test_library_calls_refuse_a_read_only_out_before_writing(device, rng):
    a, b = _factors(rng, 4, 5, 6)
    host = np.full((4, 6), 7.0, np.float32)
    base = _on_device(host)
    ro = cl.asarray(Producer(base, readonly=True))
    for out in (ro, Producer(base, readonly=True)):     # imported already, or at the call
        with pytest.raises(ValueError, match="gemm: out is read-only"):
            cublas.gemm(a, b, out=out)
        with pytest.raises(ValueError, match="matmul: out is read-only"):
            cublas.matmul(a, b, out=out)
    _unchanged(base, host)
    # The same call with a writable out of that memory writes it.
    cublas.gemm(a, b, out=cl.asarray(Producer(base)))
    np.testing.assert_allclose(base.get(), a.get() @ b.get(), rtol=1e-2, atol=1e-2)


def test_cudnn_refuses_a_read_only_out_before_writing(device, rng):
    x = _on_device(rng.standard_normal((1, 2, 5, 5)).astype(np.float32))
    w = _on_device(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    host = np.full((1, 3, 3, 3), 7.0, np.float32)
    base = _on_device(host)
    with pytest.raises(ValueError, match="conv_forward: out is read-only"):
        cudnn.conv_forward(x, w, out=Producer(base, readonly=True))
    x3 = _on_device(rng.standard_normal((1, 3, 3, 3)).astype(np.float32))
    with pytest.raises(ValueError, match="out is read-only"):
        cudnn.activation_forward(x3, "relu", out=cl.asarray(Producer(base, readonly=True)))
    _unchanged(base, host)
    # A read-only input is fine: it is only read.
    y = cudnn.conv_forward(cl.asarray(Producer(x, readonly=True)), w)
    np.testing.assert_allclose(y.get(), cudnn.conv_forward(x, w).get(), rtol=1e-4, atol=1e-5)


def test_a_read_only_dlpack_tensor_is_never_written(device, rng):
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    base = _on_device(host)
    capsule = D.export(base.ptr, (3, 4), (4, 1), (2, 32), D.kDLCUDA, device.ordinal, base,
                       True, True)
    ro = cl.from_dlpack(capsule)
    assert ro.readonly
    np.testing.assert_array_equal(ro.get(), host)
    a, b = _factors(rng, 3, 5, 4)
    _refused((lambda: ro.fill(1), lambda: ro.copy_(np.ones((3, 4), np.float32)),
              lambda: cublas.gemm(a, b, out=ro)), "read-only")
    _unchanged(base, host)


# -- malformed producers -----------------------------------------------------------------------
def test_a_negative_shape_is_refused_before_anything_runs(device):
    host = np.arange(4, dtype=np.float32)
    base = _on_device(host)
    with pytest.raises(ValueError, match=r"\['shape'\]\[0\] is -4"):
        cl.asarray(Producer(base, shape=(-4,)))
    with pytest.raises(ValueError, match=r"gemm: out: .*\['shape'\]\[1\] is -4"):
        cublas.gemm(base.reshape(2, 2), base.reshape(2, 2), out=Producer(base, shape=(2, -4)))
    with pytest.raises(ValueError, match=r"DLTensor.shape\[0\] is -4"):
        cl.from_dlpack(D.export(base.ptr, (-4,), (1,), (2, 32), D.kDLCUDA, device.ordinal,
                                base, True))
    with pytest.raises(ValueError, match="null pointer"):
        cl.asarray(Producer(base, offset=-base.ptr))
    _unchanged(base, host)


def test_a_zero_stride_producer_is_read_but_never_written(device, rng):
    host = np.arange(4, dtype=np.float32)
    base = _on_device(host)
    wide = cl.asarray(Producer(base, shape=(3, 4), strides=(0, 4)))
    np.testing.assert_array_equal(wide.get(), np.broadcast_to(host, (3, 4)))
    a, b = _factors(rng, 3, 5, 4)
    _refused((lambda: wide.fill(1), lambda: wide.copy_(np.ones((3, 4), np.float32)),
              lambda: wide[1:].fill(1), lambda: cublas.gemm(a, b, out=wide)),
             "overlapping elements")
    _unchanged(base, host)


def test_a_reversed_producer_is_read_and_written_in_place(device):
    host = np.arange(8, dtype=np.float32)
    base = _on_device(host)
    rev = cl.asarray(Producer(base, strides=(-4,), offset=28))
    assert rev.address == base.ptr + 28 and rev.strides == (-4,)
    np.testing.assert_array_equal(rev.get(), host[::-1])
    rev.copy_(np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(base.get(), host[::-1])
    rev[:2] = np.float32(-1)
    np.testing.assert_array_equal(base.get()[-2:], [-1, -1])


# -- real producers ----------------------------------------------------------------------------
def test_torch_tensors_still_import_and_round_trip(device, torch):
    t = torch.arange(24, dtype=torch.float32, device="cuda").reshape(4, 6)
    for a in (cl.asarray(t), cl.from_dlpack(t)):
        assert a.address == t.data_ptr() and a.shape == (4, 6) and not a.readonly
    a = cl.asarray(t)
    a[1].fill(-1.0)
    torch.cuda.synchronize()
    assert t[1].tolist() == [-1.0] * 6
    np.testing.assert_array_equal(cl.asarray(t.T).get(), t.T.cpu().numpy())
    back = torch.from_dlpack(a)
    assert back.data_ptr() == t.data_ptr()
    empty = cl.asarray(torch.empty(0, 3, device="cuda"))
    assert empty.size == 0 and empty.shape == (0, 3)
    # An expanded tensor (stride 0) comes in for reading; writing it is refused.
    e = torch.arange(4, dtype=torch.float32, device="cuda").expand(3, 4)
    ea = cl.asarray(e)
    assert ea.strides == (0, 4)
    np.testing.assert_array_equal(ea.get(), e.cpu().numpy())
    with pytest.raises(ValueError, match="overlapping elements"):
        ea.fill(0)
    assert e[0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_cupy_arrays_still_import_and_round_trip(device, cupy):
    x = cupy.arange(10, dtype=cupy.float64)
    a = cl.asarray(x)
    assert a.address == x.data.ptr and not a.readonly
    r = cl.asarray(x[::-1])               # a negative stride, from the last element down
    assert r.strides == (-8,)
    np.testing.assert_array_equal(r.get(), np.arange(10.0)[::-1])
    r[:3].fill(-2.0)
    cupy.cuda.runtime.deviceSynchronize()
    assert x[-3:].tolist() == [-2.0] * 3
    y = cupy.from_dlpack(a)
    assert y.data.ptr == x.data.ptr
    b = cl.asarray(cupy.broadcast_to(cupy.arange(3.0), (2, 3)))
    np.testing.assert_array_equal(b.get(), np.broadcast_to(np.arange(3.0), (2, 3)))
    with pytest.raises(ValueError, match="overlapping elements"):
        b.copy_(np.zeros((2, 3)))
