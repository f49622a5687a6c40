"""Streams, events, buffers and pools; cuda-bindings as an independent oracle (only the
tests that ask for the ``cuda_bindings`` fixture need it installed)."""

import gc
import pickle

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import testing as T
from cudalibs.driver.memory import CACHE_BLOCK_BYTES


@pytest.fixture(scope="module")
def cuda_bindings():
    """cuda-bindings' driver module: a skip of its own for each test that uses it, not of the
    whole module (most tests here do not)."""
    return pytest.importorskip("cuda.bindings.driver")


def _oracle(result):
    err, *values = result
    assert int(err) == 0, err
    return values[0] if len(values) == 1 else tuple(values)


# -- device -------------------------------------------------------------------------------------
def test_device_against_cuda_bindings(device, cuda_bindings):
    oracle_dev = _oracle(cuda_bindings.cuDeviceGet(0))
    A = cuda_bindings.CUdevice_attribute
    for name in ("MULTIPROCESSOR_COUNT", "COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR",
                 "MAX_THREADS_PER_BLOCK", "L2_CACHE_SIZE", "WARP_SIZE",
                 "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "MEMORY_POOLS_SUPPORTED"):
        expected = _oracle(cuda_bindings.cuDeviceGetAttribute(
            getattr(A, "CU_DEVICE_ATTRIBUTE_" + name), oracle_dev))
        assert device.attribute(name) == expected
        assert device.attribute(name.lower()) == expected
    assert device.total_memory == _oracle(cuda_bindings.cuDeviceTotalMem(oracle_dev))
    name = _oracle(cuda_bindings.cuDeviceGetName(256, oracle_dev))
    assert device.name == name.split(b"\0")[0].decode()
    props = device.properties
    assert props.multiprocessor_count == device.multiprocessor_count
    assert device.arch == f"sm_{props.compute_capability[0]}{props.compute_capability[1]}"
    assert len(device.attributes()) > 100
    assert device.uuid.startswith("GPU-")


def test_device_identity_and_context(device):
    assert cl.Device(0) is device
    assert pickle.loads(pickle.dumps(device)) is device
    assert device.ordinal == 0 and int(device.__index__()) == 0
    free, total = device.mem_info()
    assert 0 < free <= total == device.total_memory
    with device:
        assert cl.current_device() is device
    assert "Device 0" in repr(device)
    with pytest.raises(ValueError, match="does not exist"):
        cl.Device(cl.device_count())
    with pytest.raises(TypeError):
        cl.Device("0")


def test_primary_context_is_the_runtimes(device, cuda_bindings):
    torch = pytest.importorskip("torch")
    torch.cuda.init()
    torch.zeros(1, device="cuda:0")
    ctx = _oracle(cuda_bindings.cuCtxGetCurrent())
    assert int(ctx) == device.context


# -- streams and events -------------------------------------------------------------------------
def test_async_copies_ordered_by_events(device, rng):
    n = 1 << 20
    host = T.random_array((n,), np.float32, rng=rng)
    pinned_in = cl.pinned_empty((n,), np.float32)
    pinned_in[...] = host
    pinned_out = cl.pinned_empty((n,), np.float32)
    pinned_out[...] = np.nan
    s1, s2 = cl.Stream(), cl.Stream()
    d = cl.empty((n,), np.float32, stream=s1)
    d.copy_(pinned_in, stream=s1, blocking=False)  # pinned_in is kept alive until it ran
    del pinned_in
    e = cl.Event(timing=False).record(s1)
    s2.wait(e)
    d.get(out=pinned_out, stream=s2, blocking=False)
    done = s2.record()
    done.sync()
    assert done.query() and s2.query()
    np.testing.assert_array_equal(pinned_out, host)
    s1.close(), s2.close()


def test_stream_context_manager_and_protocol(device):
    s = cl.Stream(priority=cl.Stream.priority_range()[1])
    assert cl.current_stream() is cl.default_stream()
    with s:
        assert cl.current_stream() is s
        a = cl.to_device(np.arange(5.0))
        assert a.__cuda_array_interface__["stream"] == s.handle
    assert cl.current_stream() is cl.default_stream()
    assert cl.to_device(np.arange(2.0)).__cuda_array_interface__["stream"] == 1
    assert s.__cuda_stream__() == (0, s.handle)
    assert s.non_blocking and s.priority == cl.Stream.priority_range()[1]
    borrowed = cl.Stream.from_handle(s.handle)
    assert borrowed.device is device and borrowed == s
    wrapped = cl.Stream.from_handle(s)  # via __cuda_stream__
    assert wrapped.handle == s.handle
    np.testing.assert_array_equal(a.get(stream=borrowed), np.arange(5.0))
    s.close()
    s.close()
    assert s.closed
    with pytest.raises(cl.ClosedError):
        s.sync()
    with pytest.raises(cl.ClosedError):
        a.get(stream=s)
    with pytest.raises(cl.ClosedError):
        cl.empty((3,), stream=s)


def test_event_timing(device):
    s = cl.Stream()
    start, end = cl.Event(), cl.Event()
    a = cl.empty((1 << 24,), np.float32, stream=s)
    start.record(s)
    for _ in range(5):
        a.fill(1.0, stream=s)
    end.record(s)
    end.sync()
    ms = start.elapsed_ms(end)
    assert ms > 0 and ms == pytest.approx(end - start)
    untimed = cl.Event(timing=False).record(s)
    untimed.sync()
    with pytest.raises(cl.CudaError):
        untimed.elapsed_ms(end)
    with pytest.raises(ValueError):
        cl.Event().elapsed_ms(end)
    untimed.close()
    with pytest.raises(cl.ClosedError):
        untimed.record(s)


def test_streams_interoperate_with_torch_and_cupy(device):
    torch = pytest.importorskip("torch")
    ts = torch.cuda.Stream()
    s = cl.Stream.from_handle(ts)
    assert s.handle == ts.cuda_stream and s.device is device
    ours = cl.Stream()
    ext = torch.cuda.ExternalStream(ours.handle)
    assert ext.cuda_stream == ours.handle
    cupy = pytest.importorskip("cupy")
    cs = cupy.cuda.Stream(non_blocking=True)
    assert cl.Stream.from_handle(cs).handle == cs.ptr


def test_array_and_stream_on_different_devices(two_devices):
    d0, d1 = two_devices
    a1 = cl.to_device(np.arange(4.0), device=d1)
    s0 = cl.Stream(d0)
    with pytest.raises(ValueError, match="device"):
        a1.get(stream=s0)
    with pytest.raises(ValueError, match="device"):
        a1.fill(0, stream=s0)
    a0 = cl.to_device(np.arange(4.0) + 1, device=d0)
    a1.copy_(a0)  # peer copy
    np.testing.assert_array_equal(a1.get(), np.arange(4.0) + 1)
    a1[::2].copy_(a0[1::2])  # strided across devices
    np.testing.assert_array_equal(a1.get(), [2.0, 2.0, 4.0, 4.0])


# -- buffers and pools --------------------------------------------------------------------------
def test_pointer_attributes_against_cuda_bindings(device, cuda_bindings):
    buf = cl.alloc(1 << 20)
    P = cuda_bindings.CUpointer_attribute
    ordinal = _oracle(cuda_bindings.cuPointerGetAttribute(
        P.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, buf.ptr))
    size = _oracle(cuda_bindings.cuPointerGetAttribute(P.CU_POINTER_ATTRIBUTE_RANGE_SIZE, buf.ptr))
    assert ordinal == 0 and size >= buf.size
    pooled = cl.alloc_async(4096)
    pool_handle = _oracle(cuda_bindings.cuPointerGetAttribute(
        P.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, pooled.ptr))
    assert int(pool_handle) == device.memory_pool.handle
    buf.close(), pooled.close()


def test_buffer_lifetime(device):
    buf = cl.alloc(4096)
    assert buf.owned and not buf.closed and "4096 bytes" in repr(buf)
    with buf:
        pass
    assert buf.closed
    buf.close()
    with pytest.raises(cl.ClosedError):
        buf.ptr
    borrowed = cl.DeviceBuffer.from_handle(cl.alloc(64).ptr, 64)
    assert not borrowed.owned
    with pytest.raises(TypeError):
        cl.DeviceBuffer()
    with pytest.raises(ValueError):
        cl.alloc(-1)
    gc.collect()
    assert gc.garbage == []


def test_pool_allocation_and_free_order(device):
    pool = cl.MemoryPool(device)
    s = cl.Stream()
    bufs = [pool.allocate(1 << 20, stream=s) for _ in range(8)]
    assert pool.used_bytes >= 8 << 20
    assert all(b.stream is s for b in bufs)
    arrays = [cl.DeviceArray.from_buffer(b, (1 << 18,), np.float32) for b in bufs]
    for i, a in enumerate(arrays):
        a.fill(float(i), stream=s)
    # Free in reverse, out of order; the memory is reused by later allocations on the stream.
    for b in bufs[::-2] + bufs[-2::-2]:
        b.close()
    del arrays
    s.sync()
    # Blocks of up to CACHE_BLOCK_BYTES wait in the pool's cache for reuse on s.
    assert pool.cached_bytes == 8 << 20
    assert pool.used_bytes == pool.cached_bytes
    reserved = pool.reserved_bytes
    assert reserved >= 8 << 20  # kept cached: release threshold is unbounded
    reused = pool.allocate(1 << 20, stream=s)
    assert pool.reserved_bytes == reserved  # served from the cache, not the device
    with pytest.raises(cl.CudaLibsError, match="still has"):
        pool.close()
    reused.close()
    s.sync()
    pool.trim()
    assert pool.reserved_bytes == 0
    pool.close()
    with pytest.raises(cl.ClosedError):
        pool.allocate(16)
    # A buffer whose stream is closed first is freed on the legacy stream instead.
    s2 = cl.Stream()
    b = cl.alloc_async(1 << 16, stream=s2)
    s2.close()
    b.close()
    cl.default_stream().sync()


def test_alloc_free_cycles_return_memory(device):
    gc.collect()
    device.synchronize()
    pool = device.memory_pool
    pool.trim()
    # Other tests' live arrays and caches may hold pool memory: count only this test's.
    start_used = pool.used_bytes
    start_free = device.mem_info()[0]
    s = cl.Stream()
    for _ in range(100_000):
        cl.alloc_async(4096, stream=s).close()
    for _ in range(200):
        cl.alloc(1 << 20).close()
    s.sync()
    pool.trim()
    assert pool.used_bytes <= start_used
    end_free = device.mem_info()[0]
    assert abs(end_free - start_free) <= 4 << 20, (start_free, end_free)


def test_host_buffer(device):
    hb = cl.HostBuffer(1024)
    view = hb.numpy(np.float32, (16, 16))
    view[...] = 2.0
    d = cl.to_device(view)
    np.testing.assert_array_equal(d.get(), view)
    with pytest.raises(BufferError):
        hb.close()
    del view
    gc.collect()
    hb.close()
    hb.close()
    with pytest.raises(cl.ClosedError):
        hb.numpy()
    with pytest.raises(ValueError):
        cl.HostBuffer(16).numpy(np.float64, (4,))
    bf = cl.pinned_empty((4,), cl.dtypes.bfloat16)
    assert bf.dtype == cl.dtypes.bfloat16


def test_buffer_byte_transfers(device, rng):
    data = rng.integers(0, 256, 1000, dtype=np.uint8)
    buf = cl.alloc(1000)
    buf.memset(0xAB)
    assert (buf.copy_to() == 0xAB).all()
    buf.copy_from(data.tobytes())
    out = bytearray(1000)
    buf.copy_to(out)
    assert bytes(out) == data.tobytes()
    other = cl.alloc_async(1000)
    other.copy_from(buf)
    np.testing.assert_array_equal(other.copy_to(), data)
    floats = cl.to_device(np.arange(250, dtype=np.float32))
    other.copy_from(floats)
    np.testing.assert_array_equal(other.as_array((250,), np.float32).get(),
                                  np.arange(250, dtype=np.float32))
    with pytest.raises(ValueError):
        other.copy_from(b"short")
    with pytest.raises(ValueError):
        buf.memset(256)
    with pytest.raises(ValueError):
        buf.as_array((2000,))


def test_pinned_memory_is_recognised(device):
    from cudalibs.driver.memory import is_pinned as _is_pinned

    assert _is_pinned(cl.pinned_empty((4,)).ctypes.data)
    assert not _is_pinned(np.empty(4).ctypes.data)
    torch = pytest.importorskip("torch")
    assert _is_pinned(torch.empty(4, pin_memory=True).data_ptr())


def test_small_blocks_are_recycled_on_their_stream(device):
    pool = cl.MemoryPool(device)
    s, s2 = cl.Stream(), cl.Stream()
    a = pool.allocate(3000, stream=s)
    ptr = a.ptr
    a.close()
    assert pool.cached_bytes == 3072          # its size class
    b = pool.allocate(2600, stream=s)         # same class, same stream: the same block
    assert b.ptr == ptr and b.size == 2600 and pool.cached_bytes == 0
    b.close()
    c = pool.allocate(3000, stream=s2)        # another stream never takes s's block
    assert pool.cached_bytes == 3072 and c.ptr != ptr
    c.close()
    big = pool.allocate(CACHE_BLOCK_BYTES + 1, stream=s)
    big.close()                               # over the limit: back to the driver
    assert pool.cached_bytes == 2 * 3072
    assert "cached for reuse" in repr(pool)
    pool.release_cached(stream=s2)
    assert pool.cached_bytes == 3072
    s.close()                                 # a stream's blocks are freed before it goes
    assert pool.cached_bytes == 0
    s2.sync()
    pool.trim()
    assert pool.used_bytes == 0
    pool.close()


def test_borrowed_and_capturing_streams_bypass_the_cache(device):
    pool = device.memory_pool
    pool.release_cached()
    torch = pytest.importorskip("torch")
    ts = torch.cuda.Stream()
    borrowed = cl.Stream.from_handle(ts)
    pool.allocate(4096, stream=borrowed).close()
    assert pool.cached_bytes == 0             # its lifetime is not ours to know
    s = cl.Stream()
    with cl.graph.capture(s):
        x = cl.empty(1000, np.float32, stream=s)   # an allocation node of the graph
        x.close()                                  # and its free node
        assert pool.cached_bytes == 0
    s.sync()
    ts.synchronize()


def test_recycled_blocks_keep_data_apart(device, rng):
    """Allocate, fill, free and check blocks of mixed sizes on two streams in random order:
    a recycled block handed out twice, or reused across streams unordered, shows up as a
    wrong value."""
    s = [cl.Stream(), cl.Stream()]
    live = []
    for i in range(1500):
        if live and rng.random() < 0.45:
            arr, val, k = live.pop(int(rng.integers(len(live))))
            got = arr.get(stream=s[k])
            assert (got == val).all(), (i, arr.shape, val, got[:4])
            arr.close()
            continue
        k = int(rng.integers(2))
        n = int(rng.choice([1, 7, 100, 1000, 4097, 30000, 70000]))
        val = np.float32(i + 0.5)
        arr = cl.empty(n, np.float32, stream=s[k]).fill(val, stream=s[k])
        live.append((arr, val, k))
    for arr, val, k in live:
        assert (arr.get(stream=s[k]) == val).all()
    for x in s:
        x.sync()


def test_collected_pool_frees_its_cached_blocks(device):
    pool = cl.MemoryPool(device)
    s = cl.Stream()
    pool.allocate(4096, stream=s).close()
    cache = pool._cache
    assert cache.nbytes == 4096
    del pool
    gc.collect()
    # freed on their stream before the pool was destroyed, and no block is cached after it
    assert cache.nbytes == 0 and not cache.open
    s.sync()
