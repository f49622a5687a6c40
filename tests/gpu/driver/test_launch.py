"""Launching kernels: every parameter kind read back, structs by value, plain and prepared
launches, argument and geometry checks, streams, clusters and cooperative launches."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import testing as T
from cudalibs.driver.module import Module

from .._sizes import gpu_settings
from ._sources import CLUSTER, HALF, MISC, SAXPY, STORE_ALL_KINDS, STORE_ALL_PTX

GPU = gpu_settings(25)


@pytest.fixture(scope="module")
def store_all(device):
    return Module.from_ptx(STORE_ALL_PTX, device=device)["store_all"]


@pytest.fixture(scope="module")
def misc(device):
    return cl.compile(MISC)


@pytest.fixture(scope="module")
def half_scalars(device):
    return cl.compile(HALF)["half_scalars"]


@pytest.fixture(scope="module")
def saxpy(device):
    return cl.compile(SAXPY)["saxpy"]


def _int_range(kind):
    bits = int(kind[1:])
    if kind[0] == "u":
        return 0, 2**bits - 1
    if kind[0] == "s":
        return -(2**(bits - 1)), 2**(bits - 1) - 1
    return -(2**(bits - 1)), 2**bits - 1  # .bN takes either signedness


def _scalars():
    parts = []
    for kind, _ in STORE_ALL_KINDS:
        if kind == "f32":
            parts.append(st.floats(width=32, allow_nan=False))
        elif kind == "f64":
            parts.append(st.floats(allow_nan=False))
        else:
            lo, hi = _int_range(kind)
            parts.append(st.integers(lo, hi))
    return st.tuples(*parts)


def _expected_words(values, struct_bytes):
    words = []
    for (kind, _), v in zip(STORE_ALL_KINDS, values):
        if kind == "f32":
            words.append(int(np.float32(v).view(np.uint32)))
        elif kind == "f64":
            words.append(int(np.float64(v).view(np.uint64)))
        elif kind[0] == "s":
            words.append(v % 2**64)  # sign-extended by the kernel
        else:
            bits = int(kind[1:])
            words.append(v % 2**bits)  # zero-extended
    words += [int.from_bytes(struct_bytes[:8], "little"), int.from_bytes(struct_bytes[8:], "little")]
    return np.array(words, dtype=np.uint64)


@GPU
@given(values=_scalars(), struct_bytes=st.binary(min_size=16, max_size=16),
       prepared=st.booleans())
def test_every_param_kind_round_trips(store_all, values, struct_bytes, prepared):
    out = cl.empty(16, np.uint64).fill(T.poison_value(np.uint64))
    if prepared:
        store_all.prepare(1, 1)(out, *values, struct_bytes)
    else:
        store_all.launch(1, 1, out, *values, struct_bytes)
    got = out.get()
    np.testing.assert_array_equal(got, _expected_words(values, struct_bytes),
                                  err_msg=f"kinds {[k for k, _ in STORE_ALL_KINDS]}")


@GPU
@given(a=st.floats(-60000, 60000, allow_nan=False), b=st.floats(-1e30, 1e30, allow_nan=False),
       prepared=st.booleans())
def test_half_and_bfloat16_scalar_parameters(half_scalars, a, b, prepared):
    """``__half`` / ``__nv_bfloat16`` parameters are 2-byte structs in NVRTC's PTX: numpy's
    float16 and ml_dtypes' bfloat16 scalars arrive bit for bit."""
    import ml_dtypes

    n = 300
    x = T.random_array(n, np.float32, rng=3)
    xd = cl.to_device(x)
    y = cl.empty(n, np.float32).fill(T.poison_value(np.float32))
    ah, bh = np.float16(a), ml_dtypes.bfloat16(b)
    if prepared:
        half_scalars.prepare(2, 256)(y, xd, ah, bh, n)
    else:
        half_scalars.launch(2, 256, y, xd, ah, bh, n)
    np.testing.assert_array_equal(y.get(), np.float32(ah) * x + np.float32(bh),
                                  err_msg=f"a={a!r} b={b!r}")


def test_half_struct_parameter_needs_a_two_byte_scalar(half_scalars):
    y = cl.empty(4, np.float32)
    with pytest.raises(TypeError, match="np.float16"):
        half_scalars.launch(1, 4, y, y, 0.5, np.float16(1.0), 4)
    with pytest.raises(ValueError, match="takes 2 bytes, got 4"):
        half_scalars.launch(1, 4, y, y, np.float32(0.5), np.float16(1.0), 4)


def test_numpy_scalars_and_structured_struct(store_all):
    dt = np.dtype([("a", np.int64), ("b", np.float64)])
    rec = np.array((-5, 2.5), dtype=dt)[()]
    values = (np.uint8(7), np.uint16(8), np.uint32(9), np.uint64(10), np.int8(-1),
              np.int16(-2), np.int32(-3), np.int64(-4), np.uint8(1), np.int16(-1), 3, 4,
              np.float32(0.5), np.float64(-0.25))
    out = cl.empty(16, np.uint64).fill(T.poison_value(np.uint64))
    store_all.launch(1, 1, out, *values, rec)
    got = out.get()
    assert got[4].view(np.int64) == -1 and got[7].view(np.int64) == -4
    assert got[9] == 0xFFFF  # .b16 given -1
    assert np.uint64(got[14]).view(np.int64) == -5 and np.uint64(got[15]).view(np.float64) == 2.5


def test_struct_by_value_from_cuda_c(misc):
    k = misc["affine"]
    n = 333
    x = T.random_array(n, np.float64, rng=3)
    dx = cl.to_device(x)
    pair = np.array((1.5, -3), dtype=[("scale", np.float64), ("offset", np.int64)])[()]
    k.launch((n + 127) // 128, 128, pair, dx, n)
    T.assert_close(dx.get(), 1.5 * x - 3, np.float64)


@GPU
@given(n=st.integers(1, 3000), a=st.floats(-4, 4, width=32).filter(lambda v: abs(v) > 1e-3),
       block=st.sampled_from([32, 96, 128, 256, 1024]), how=st.sampled_from(["plain", "prepared"]),
       seed=st.integers(0, 2**32 - 1))
def test_saxpy_against_numpy(saxpy, n, a, block, how, seed):
    # The data's seed is drawn by hypothesis, so a failing example replays (and shrinks).
    rng = np.random.default_rng(seed)
    x = T.random_array(n, np.float32, rng=rng)
    y = T.random_array(n, np.float32, rng=rng)
    dx, dy = cl.to_device(x), cl.to_device(y)
    grid = (n + block - 1) // block
    if how == "plain":
        saxpy.launch(grid, block, a, dx, dy, n)
    else:
        saxpy.prepare((grid,), (block, 1, 1))(a, dx, dy, n)
    T.assert_close(dy.get(), np.float64(a) * x + y, np.float32)


def test_plain_and_prepared_agree(saxpy):
    n = 1537
    x = T.random_array(n, np.float32, rng=5)
    y = T.random_array(n, np.float32, rng=6)
    dx = cl.to_device(x)
    dy1, dy2 = cl.to_device(y), cl.to_device(y)
    saxpy.launch(13, 128, 0.75, dx, dy1, n)
    saxpy.prepare(13, 128)(0.75, dx, dy2, n)
    np.testing.assert_array_equal(dy1.get(), dy2.get())


def test_signed_ints_into_unsigned_ptx_slots(misc):
    # NVRTC declares int as .u32: np.int32 carries the sign, a plain negative int is refused.
    k = misc["signed_offset"]
    out = cl.to_device(np.arange(32, dtype=np.int32))
    k.launch(1, 32, out, np.int32(-5))
    np.testing.assert_array_equal(out.get(), np.arange(32) - 5)
    with pytest.raises(ValueError, match=r"np.int32\(-5\)"):
        k.launch(1, 32, out, -5)
    signed = misc.get_kernel("signed_offset", signature="ptr, s32")
    signed.launch(1, 32, out, -5)
    np.testing.assert_array_equal(out.get(), np.arange(32) - 10)


# -- arguments from other libraries ------------------------------------------------------------
def test_buffers_raw_pointers_and_cai(saxpy):
    n = 64
    x = T.random_array(n, np.float32, rng=7)
    y = T.random_array(n, np.float32, rng=8)
    dx, dy = cl.to_device(x), cl.to_device(y)
    saxpy.launch(1, 64, 2.0, dx.base, dy.ptr, n)  # a DeviceBuffer and a raw address
    T.assert_close(dy.get(), 2.0 * x.astype(np.float64) + y, np.float32)


def test_torch_tensors_as_arguments(saxpy, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    x, y = (torch.from_numpy(T.random_array(100, np.float32, rng=rng)).cuda() for _ in range(2))
    expected = (3.0 * x + y).cpu().numpy()
    saxpy.launch(1, 128, 3.0, x, y, 100)
    torch.cuda.synchronize()
    T.assert_close(y.cpu().numpy(), expected, np.float32)


# -- bad input -----------------------------------------------------------------------------------
def test_bad_arguments(saxpy, rng):
    dx = cl.to_device(T.random_array(8, np.float32, rng=rng))
    with pytest.raises(TypeError, match="kernel saxpy takes 4 arguments"):
        saxpy.launch(1, 8, 1.0, dx, dx)
    with pytest.raises(TypeError, match=r"saxpy argument 0 .*takes a float, not str"):
        saxpy.launch(1, 8, "1", dx, dx, 8)
    with pytest.raises(TypeError, match=r"saxpy argument 1 .*device array or a pointer"):
        saxpy.launch(1, 8, 1.0, np.zeros(8, np.float32), dx, 8)
    with pytest.raises(ValueError, match=r"saxpy argument 3 .*out of range"):
        saxpy.launch(1, 8, 1.0, dx, dx, 2**32)
    with pytest.raises(ValueError, match=r"saxpy argument 3 .*out of range"):
        saxpy.launch(1, 8, 1.0, dx, dx, -1)
    with pytest.raises(TypeError, match=r"saxpy argument 3 .*integer, not float"):
        saxpy.launch(1, 8, 1.0, dx, dx, 8.0)
    launcher = saxpy.prepare(1, 8)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        launcher(1.0)


def test_closed_array(saxpy, rng):
    dx = cl.to_device(T.random_array(8, np.float32, rng=rng))
    dy = cl.to_device(T.random_array(8, np.float32, rng=rng))
    dy.close()
    with pytest.raises(cl.ClosedError, match="argument 2"):
        saxpy.launch(1, 8, 1.0, dx, dy, 8)
    with pytest.raises(cl.ClosedError, match="argument 2"):
        saxpy.prepare(1, 8)(1.0, dx, dy, 8)


def test_array_on_another_device(two_devices):
    d0, d1 = two_devices
    k = cl.compile(SAXPY, device=d0)["saxpy"]
    a0 = cl.to_device(np.ones(8, np.float32), device=d0)
    a1 = cl.to_device(np.ones(8, np.float32), device=d1)
    with pytest.raises(ValueError, match="argument 2 .*on device 1, but the kernel's module is on "
                                         "device 0"):
        k.launch(1, 8, 1.0, a0, a1, 8)
    s1 = cl.Stream(d1)
    with pytest.raises(ValueError, match="stream is on device 1"):
        k.launch(1, 8, 1.0, a0, a0, 8, stream=s1)


def test_geometry_limits(saxpy, device, rng):
    dx = cl.to_device(T.random_array(8, np.float32, rng=rng))
    args = (1.0, dx, dx, 8)
    with pytest.raises(ValueError, match="block of 2048 threads"):
        saxpy.launch(1, (64, 32), *args)
    with pytest.raises(ValueError, match="exceeds the device's limit"):
        saxpy.launch(1, (1, 1, device.attribute("MAX_BLOCK_DIM_Z") + 1), *args)
    with pytest.raises(ValueError, match="exceeds the device's limit"):
        saxpy.launch((1, device.attribute("MAX_GRID_DIM_Y") + 1), 1, *args)
    with pytest.raises(ValueError, match="dimension below 1"):
        saxpy.launch(0, 32, *args)
    with pytest.raises(ValueError, match="dynamic shared memory"):
        saxpy.launch(1, 32, *args, shared_mem=device.attribute(
            "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN") + 1)
    with pytest.raises(ValueError):
        saxpy.prepare(1, 4096)
    saxpy.launch(1, 8, *args)  # and the kernel still works
    cl.Device(0).synchronize()


# -- streams ---------------------------------------------------------------------------------------
def test_streams(saxpy):
    n = 500
    x = T.random_array(n, np.float32, rng=11)
    y = T.random_array(n, np.float32, rng=12)
    s = cl.Stream()
    dx, dy = cl.to_device(x, stream=s), cl.to_device(y, stream=s)
    saxpy.launch(4, 128, 2.0, dx, dy, n, stream=s)
    with s:
        saxpy.launch(4, 128, 2.0, dx, dy, n)  # the current stream
        launcher = saxpy.prepare(4, 128)
        launcher(2.0, dx, dy, n)
    fixed = saxpy.prepare(4, 128, stream=s)
    fixed(2.0, dx, dy, n)
    s.sync()
    expected = y.astype(np.float64)
    for _ in range(4):
        expected = 2.0 * x + expected
    T.assert_close(dy.get(stream=s), expected, np.float32)
    s.close()
    with pytest.raises(cl.ClosedError):
        fixed(2.0, dx, dy, n)
    with pytest.raises(cl.ClosedError):
        saxpy.launch(4, 128, 2.0, dx, dy, n, stream=s)


def test_empty_kernel_many_launches(misc):
    k = misc["empty_kernel"]
    launcher = k.prepare(1, 32)
    for _ in range(1000):
        launcher()
        k.launch(1, 32)
    cl.Device(0).synchronize()


# -- clusters and cooperative launches -----------------------------------------------------------
def test_cluster_launch(device):
    if device.compute_capability < (9, 0):
        k = cl.compile(SAXPY)["saxpy"]
        dx = cl.to_device(np.ones(8, np.float32))
        with pytest.raises(ValueError, match="compute capability 9.0"):
            k.launch(2, 32, 1.0, dx, dx, 8, cluster=2)
        return
    k = cl.compile(CLUSTER)["cluster_size"]
    out = cl.empty(8, np.uint32).fill(T.poison_value(np.uint32))
    k.launch(8, 32, out, cluster=(2, 1, 1))
    np.testing.assert_array_equal(out.get(), [200, 201] * 4)
    out.fill(T.poison_value(np.uint32))
    k.prepare(8, 32, cluster=4)(out)
    np.testing.assert_array_equal(out.get(), [400, 401, 402, 403] * 2)
    k.launch(8, 32, out)
    np.testing.assert_array_equal(out.get(), [100] * 8)
    with pytest.raises(ValueError, match="not a multiple of cluster"):
        k.launch(6, 32, out, cluster=4)


def test_cooperative_launch(device, misc):
    if not device.attribute("COOPERATIVE_LAUNCH"):
        pytest.skip("the device has no cooperative launch")
    k = misc["add_scalar"]
    n = 4096
    x = T.random_array(n, np.float32, rng=13)
    dx = cl.to_device(x)
    k.launch(n // 256, 256, dx, 1.0, n, cooperative=True)
    T.assert_close(dx.get(), x + 1.0, np.float32)
    k.prepare(n // 256, 256, cooperative=True)(dx, 1.0, n)
    T.assert_close(dx.get(), x + 2.0, np.float32)
    too_many = k.max_active_blocks_per_sm(1024) * device.multiprocessor_count + 1
    with pytest.raises(ValueError, match="cooperative launch of"):
        k.launch(too_many, 1024, dx, 1.0, n, cooperative=True)
