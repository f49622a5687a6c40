"""The driver layer's public names on a GPU: DeviceProperties against an independent oracle
(cuda-bindings' cuDeviceGetAttribute, else torch), the driver's version, ``init``,
``is_available``, ``as_device``, ``as_stream``, ``Kernel`` and ``Launcher`` as the objects a
module hands out, and the graph module's ``Graph`` and ``GraphExec`` (every mode of
``CAPTURE_MODES`` is captured in test_graph.py)."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import testing as T

from .._oracles import torch_oracle
from ._sources import MISC, SAXPY

#: DeviceProperties fields read from one device attribute each: field -> attribute name.
ATTRIBUTE_FIELDS = {
    "multiprocessor_count": "MULTIPROCESSOR_COUNT",
    "max_threads_per_block": "MAX_THREADS_PER_BLOCK",
    "max_threads_per_multiprocessor": "MAX_THREADS_PER_MULTIPROCESSOR",
    "warp_size": "WARP_SIZE",
    "l2_cache_size": "L2_CACHE_SIZE",
    "shared_memory_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "shared_memory_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "shared_memory_per_multiprocessor": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "registers_per_block": "MAX_REGISTERS_PER_BLOCK",
    "clock_rate_khz": "CLOCK_RATE",
    "memory_clock_rate_khz": "MEMORY_CLOCK_RATE",
    "memory_bus_width": "GLOBAL_MEMORY_BUS_WIDTH",
    "ecc_enabled": "ECC_ENABLED",
    "integrated": "INTEGRATED",
    "concurrent_kernels": "CONCURRENT_KERNELS",
    "async_engine_count": "ASYNC_ENGINE_COUNT",
    "memory_pools_supported": "MEMORY_POOLS_SUPPORTED",
    "cooperative_launch": "COOPERATIVE_LAUNCH",
    "cluster_launch": "CLUSTER_LAUNCH",
}


def _cuda_bindings():
    """cuda-bindings' driver module (installed with the test extra), or None."""
    try:
        import cuda.bindings.driver as cbd
    except ImportError:
        return None
    return cbd


def _oracle(result):
    err, *values = result
    assert int(err) == 0, err
    return values[0] if len(values) == 1 else tuple(values)


@pytest.fixture(scope="module")
def misc(device):
    return cl.compile(MISC)


# -- devices ------------------------------------------------------------------------------------
def test_device_properties_match_an_independent_oracle(device):
    props = device.properties
    assert isinstance(props, cl.DeviceProperties)
    assert props.ordinal == device.ordinal == 0
    cbd = _cuda_bindings()
    if cbd is not None:
        _oracle(cbd.cuInit(0))
        dev = _oracle(cbd.cuDeviceGet(0))
        A = cbd.CUdevice_attribute

        def attr(name):
            return _oracle(cbd.cuDeviceGetAttribute(getattr(A, "CU_DEVICE_ATTRIBUTE_" + name),
                                                    dev))

        wrong = []
        for field, name in ATTRIBUTE_FIELDS.items():
            got, want = getattr(props, field), attr(name)
            if isinstance(got, bool):
                want = bool(want)
            if got != want or type(got) is not type(want):
                wrong.append(f"{field}: {got!r}, cuDeviceGetAttribute({name}) {want!r}")
        assert not wrong, "\n".join(wrong)
        assert props.compute_capability == (attr("COMPUTE_CAPABILITY_MAJOR"),
                                             attr("COMPUTE_CAPABILITY_MINOR"))
        assert props.total_memory == _oracle(cbd.cuDeviceTotalMem(dev))
        name = _oracle(cbd.cuDeviceGetName(256, dev))
        assert props.name == name.split(b"\0")[0].decode()
        bus = _oracle(cbd.cuDeviceGetPCIBusId(64, dev))
        bus = bus.split(b"\0")[0].decode() if isinstance(bus, bytes) else str(bus)
        assert props.pci_bus_id == bus
        raw = bytes(_oracle(cbd.cuDeviceGetUuid(dev)).bytes)
        hexdigits = props.uuid.removeprefix("GPU-").replace("-", "")
        assert props.uuid.startswith("GPU-") and len(hexdigits) == 32
        # the oracle's char[16] may stop at a zero byte: compare what it gives
        assert hexdigits[:2 * len(raw[:16])] == raw[:16].hex()
    else:
        torch = torch_oracle(cuda=True)
        if torch is None:
            return
        tp = torch.cuda.get_device_properties(0)
        assert props.name == tp.name
        assert props.compute_capability == (tp.major, tp.minor)
        assert props.total_memory == tp.total_memory
        assert props.multiprocessor_count == tp.multi_processor_count
    # the snapshot agrees with the device's own accessors
    assert props.name == device.name and props.multiprocessor_count == \
        device.multiprocessor_count
    assert props.compute_capability == device.compute_capability
    assert props.warp_size == 32 and props.max_threads_per_block >= 1024


def test_driver_version_and_init(device):
    assert cl.is_available() and cl.driver.is_available()
    assert cl.unavailable_reason() is None
    lib = cl.driver.init()
    assert lib is cl.driver.init()              # once per process, the same bound library
    v = cl.driver_version_int()
    assert cl.driver.driver_version_int() == v
    assert tuple(cl.driver_version())[:2] == (v // 1000, (v % 1000) // 10)
    assert v >= 12000
    cbd = _cuda_bindings()
    if cbd is not None:
        assert v == _oracle(cbd.cuDriverGetVersion())


def test_as_device(device):
    assert cl.as_device(0) is device and cl.driver.as_device(device) is device
    with device:
        assert cl.as_device(None) is device is cl.current_device()
    with pytest.raises(ValueError, match="does not exist"):
        cl.as_device(cl.device_count())
    torch = torch_oracle(cuda=True)
    if torch is not None:
        assert cl.as_device(torch.device("cuda", 0)) is device


# -- streams ------------------------------------------------------------------------------------
def test_as_stream(device):
    s = cl.Stream()
    assert cl.as_stream(s) is s and cl.driver.as_stream(s, device) is s
    assert cl.as_stream(None) is cl.current_stream()
    with s:
        assert cl.as_stream(None) is s
    assert cl.as_stream(None) is not s
    # a raw handle is wrapped (borrowed), on the device the driver says it belongs to
    raw = cl.as_stream(s.raw_handle)
    assert raw.raw_handle == s.raw_handle and raw.device is device and not raw.owned
    assert cl.as_stream(0).is_default and cl.as_stream(0).raw_handle == 0
    del raw
    s.close()
    with pytest.raises(cl.ClosedError):
        cl.as_stream(s)


# -- kernels ------------------------------------------------------------------------------------
def test_kernel_and_launcher(device, rng):
    mod = cl.compile(SAXPY)
    k = mod["saxpy"]
    assert isinstance(k, cl.Kernel) and isinstance(k, cl.driver.Kernel)
    n = 3001
    x = T.random_array(n, np.float32, rng=rng)
    y = T.random_array(n, np.float32, rng=rng)
    dx, dy = cl.to_device(x), cl.to_device(y)
    launch = k.prepare(((n + 255) // 256,), (256, 1, 1))
    assert isinstance(launch, cl.Launcher) and isinstance(launch, cl.driver.Launcher)
    assert launch.kernel is k
    launch(2.5, dx, dy, n)
    launch(-0.5, dx, dy, n)
    T.assert_close(dy.get(), y.astype(np.float64) + 2.0 * x, np.float32)


# -- graphs -------------------------------------------------------------------------------------
def test_a_capture_is_a_graph_and_its_instance_replays(misc, rng):
    s = cl.Stream()
    n = 1000
    x = T.random_array(n, np.float32, rng=rng)
    d = cl.to_device(x, stream=s)
    out = cl.full((n,), T.poison_value(np.float32), np.float32, stream=s)
    s.sync()
    with cl.graph.capture(s) as g:
        misc["add_scalar"].launch((n + 127) // 128, 128, d, 1.5, n, stream=s)
        misc["copy_f32"].launch((n + 127) // 128, 128, out, d, n, stream=s)
    assert isinstance(g, cl.graph.Graph) and g.num_nodes == 2
    exe = g.instantiate()
    assert isinstance(exe, cl.graph.GraphExec)
    # recorded, not run: nothing changed until a replay
    np.testing.assert_array_equal(d.get(stream=s), x)
    for _ in range(3):
        exe.replay(s)
    want = x.astype(np.float64) + 4.5
    T.assert_close(d.get(stream=s), want, np.float32)
    T.assert_close(out.get(stream=s), want, np.float32)
    exe.close()
    g.close()
