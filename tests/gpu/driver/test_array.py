"""DeviceArray against numpy: round trips, strided views, copies, fill, bad input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import testing as T

from .._sizes import gpu_settings

ALL_DTYPES = sorted(r.name for r in cl.dtypes.TABLE.values())
GPU = gpu_settings(40)


def _bits(a):
    """Raw bytes, so NaN payloads and -0.0 compare exactly."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _np_dtype(name):
    return cl.dtypes.lookup(name).numpy


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@GPU
@given(shape=T.shapes(min_dims=0, max_dims=4, min_side=0, max_side=9), seed=st.integers(0, 2**31))
def test_round_trip_every_dtype(device, dtype, shape, seed):
    host = T.random_array(shape, _np_dtype(dtype), rng=np.random.default_rng(seed))
    d = cl.to_device(host)
    assert d.shape == host.shape and d.dtype == host.dtype and d.device is device
    assert d.is_c_contiguous
    out = np.full(shape, T.poison_value(host.dtype), dtype=host.dtype)
    d.get(out=out)
    np.testing.assert_array_equal(_bits(out), _bits(host))
    np.testing.assert_array_equal(_bits(np.asarray(d)), _bits(host))


@GPU
@given(data=st.data(), dtype=st.sampled_from(["float32", "float16", "int8", "complex128",
                                                "bfloat16", "float64"]))
def test_strided_views_match_numpy(device, data, dtype):
    shape = data.draw(T.shapes(min_dims=1, max_dims=4, min_side=1, max_side=7))
    host = T.random_array(shape, _np_dtype(dtype), rng=np.random.default_rng(data.draw(st.integers(0, 99))))
    d = cl.to_device(host)
    key = data.draw(T.slices_for(shape))
    hv, dv = host[key], d[key]
    assert dv.shape == hv.shape
    if hv.size:  # numpy normalises the strides of empty and length-1 axes
        assert [st for n, st in zip(dv.shape, dv.strides) if n > 1] == \
            [st for n, st in zip(hv.shape, hv.strides) if n > 1]
    np.testing.assert_array_equal(_bits(dv.get()), _bits(hv))
    # The transposed view too, and a D2D copy of it into contiguous memory.
    np.testing.assert_array_equal(_bits(dv.T.get()), _bits(hv.T))
    np.testing.assert_array_equal(_bits(dv.T.copy().get()), _bits(hv.T))


@GPU
@given(data=st.data())
def test_copy_into_strided_views(device, data):
    shape = data.draw(T.shapes(min_dims=1, max_dims=4, min_side=1, max_side=7))
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    base = T.random_array(shape, np.float32, rng=rng)
    d = cl.to_device(base)
    key = data.draw(T.slices_for(shape))
    expected = base.copy()
    target_shape = np.shape(expected[key])
    new = T.random_array(target_shape, np.float32, rng=rng)
    expected[key] = new
    d[key].copy_(new)  # host -> strided device view
    np.testing.assert_array_equal(d.get(), expected)
    # device -> strided device view (positive and reversed strides on either side)
    new2 = T.random_array(target_shape, np.float32, rng=rng)
    src = cl.to_device(new2)
    expected[key] = new2
    d[key].copy_(src)
    np.testing.assert_array_equal(d.get(), expected)
    # strided device view -> strided device view of another array
    other = cl.to_device(T.random_array(shape, np.float32, rng=rng))
    other_host = other.get()
    other[key].copy_(d[key])
    other_host[key] = expected[key]
    np.testing.assert_array_equal(other.get(), other_host)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_fill_every_dtype(device, dtype, rng):
    dt = _np_dtype(dtype)
    value = T.random_array((), dt, rng=rng)[()]
    for shape in [(0,), (1,), (7, 5), (70001,)]:
        d = cl.empty(shape, dt)
        d.fill(value)
        np.testing.assert_array_equal(_bits(d.get()), _bits(np.full(shape, value, dtype=dt)))
    # a strided view: only the viewed elements change
    host = T.random_array((6, 8), dt, rng=rng)
    d = cl.to_device(host)
    d[1::2, ::-3] = value
    host[1::2, ::-3] = value
    np.testing.assert_array_equal(_bits(d.get()), _bits(host))


def test_constructors(device):
    z = cl.zeros((3, 4), np.int32)
    np.testing.assert_array_equal(z.get(), np.zeros((3, 4), np.int32))
    f = cl.full((2, 2), 1.5)
    assert f.dtype == np.float64
    np.testing.assert_array_equal(f.get(), np.full((2, 2), 1.5))
    e = cl.empty_like(f)
    assert e.shape == f.shape and e.dtype == f.dtype
    assert cl.zeros_like(np.ones((2, 5), np.float16)).get().sum() == 0
    np.testing.assert_array_equal(cl.full_like(z, 7).get(), np.full((3, 4), 7, np.int32))
    empty = cl.empty((0, 5))
    assert empty.size == 0 and empty.get().shape == (0, 5)


def test_views_share_memory(device):
    host = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    d = cl.to_device(host)
    r = d.reshape(6, -1)
    assert r.shape == (6, 4) and r.ptr == d.ptr
    assert d.T.shape == (4, 3, 2)
    assert d.transpose(1, 0, 2).strides == host.transpose(1, 0, 2).strides
    r[0, 0] = -1
    assert d.get()[0, 0, 0] == -1
    np.testing.assert_array_equal(d[None, ..., 1].get(), d.get()[None, ..., 1])
    assert d.ravel().shape == (24,)
    np.testing.assert_array_equal(d.view(np.int32).get(), d.get().view(np.int32))
    for dt in (np.uint8, np.float16, np.complex64):  # other item sizes rescale the last axis
        np.testing.assert_array_equal(d.view(dt).get(), d.get().view(dt))
    with pytest.raises(ValueError, match="contiguous last axis"):
        d.T.view(np.uint8)
    with pytest.raises(ValueError, match="divide"):
        d[..., :3].copy().view(np.complex128)
    with pytest.raises(ValueError, match="C-contiguous"):
        d.T.reshape(24)


def test_repr_shows_values(device):
    d = cl.to_device(np.array([[1, 2], [3, 4]], dtype=np.int16))
    text = repr(d)
    assert "DeviceArray" in text and "int16" in text and "3" in text
    big = cl.empty((2000,))
    assert "shape=(2000,)" in repr(big)
    big.close()
    assert "closed" in repr(big)


class TestBadInput:
    def test_shape_mismatch(self, device):
        a = cl.empty((3, 4))
        with pytest.raises(ValueError, match="shape"):
            a.copy_(cl.empty((4, 3)))
        with pytest.raises(ValueError, match="shape"):
            a.copy_(np.zeros((2, 4), np.float32))
        with pytest.raises(ValueError, match="shape"):
            a.get(out=np.empty((4, 3), np.float32))

    def test_dtype_mismatch(self, device):
        a = cl.empty((3,), np.float32)
        with pytest.raises(TypeError, match="dtype"):
            a.copy_(np.zeros(3, np.float64))
        with pytest.raises(TypeError, match="dtype"):
            a.copy_(cl.empty((3,), np.int32))
        with pytest.raises(TypeError, match="dtype"):
            a.get(out=np.empty(3, np.float64))
        with pytest.raises(TypeError):
            cl.empty((2,), object)
        with pytest.raises(TypeError):
            cl.empty((2,), "U4")

    def test_read_only_out(self, device):
        out = np.empty(3, np.float32)
        out.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            cl.empty((3,)).get(out=out)

    def test_non_contiguous_host_is_handled(self, device):
        host = np.arange(40, dtype=np.float64).reshape(5, 8)[:, ::3]
        np.testing.assert_array_equal(cl.to_device(host).get(), host)
        big_endian = np.arange(5, dtype=">i4")
        np.testing.assert_array_equal(cl.to_device(big_endian).get(), np.arange(5))

    def test_sizes(self, device):
        with pytest.raises(ValueError, match="negative"):
            cl.empty((-1, 3))
        with pytest.raises(ValueError):
            cl.empty((2**40, 2**40))
        with pytest.raises(TypeError):
            cl.empty((2.5,))

    def test_fill_value_out_of_range(self, device):
        with pytest.raises(ValueError):
            cl.empty((2,), np.int8).fill(300)
        with pytest.raises(ValueError):
            cl.empty((2,), np.int32).fill(float("nan"))

    def test_indexing(self, device):
        a = cl.empty((3, 4))
        with pytest.raises(IndexError):
            a[3]
        with pytest.raises(IndexError):
            a[0, 0, 0]
        with pytest.raises(TypeError, match="advanced indexing"):
            a[[0, 1]]
        with pytest.raises(IndexError):
            a[..., ...]

    def test_overlapping_destination(self, device):
        a = cl.to_device(np.zeros(4, np.float32))
        b = a[None, :]
        wide = cl.DeviceArray._view(a.ptr, (3, 4), (0, 4), a._dt, a.device, a._buf, None)
        with pytest.raises(ValueError, match="overlapping"):
            wide.copy_(np.ones((3, 4), np.float32))
        assert b.shape == (1, 4)

    def test_closed_buffer(self, device):
        a = cl.to_device(np.ones(4, np.float32))
        v = a[1:]
        a.close()
        a.close()  # twice is harmless
        for call in (lambda: a.get(), lambda: v.get(), lambda: v.fill(1), lambda: a.ptr,
                     lambda: a.__cuda_array_interface__, lambda: a[0], lambda: a.T,
                     lambda: cl.empty((3,)).copy_(v)):
            with pytest.raises(cl.ClosedError):
                call()

    def test_out_of_memory_then_fine(self, device):
        free, total = device.mem_info()
        with pytest.raises(cl.CudaOutOfMemoryError) as info:
            cl.empty((total * 4,), np.uint8)
        assert info.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
        assert isinstance(info.value, cl.CudaError)
        with pytest.raises(cl.CudaOutOfMemoryError):
            cl.alloc(total * 4)
        ok = cl.to_device(np.arange(10, dtype=np.float32))
        np.testing.assert_array_equal(ok.get(), np.arange(10, dtype=np.float32))

    def test_not_a_device_array(self, device):
        with pytest.raises(TypeError, match="to_device"):
            cl.asarray(np.zeros(3))
        with pytest.raises(TypeError, match="neither"):
            cl.asarray(object())
        with pytest.raises(TypeError):
            cl.empty((3,)).copy_(object())
