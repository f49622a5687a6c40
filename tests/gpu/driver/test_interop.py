"""Zero-copy exchange with PyTorch and CuPy (CAI and DLPack), and lifetime at exit."""

import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cudalibs as cl


def test_torch_to_us_via_cai_and_dlpack(device, torch):
    t = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)
    a = cl.asarray(t)  # __cuda_array_interface__
    assert a.ptr == t.data_ptr() and a.shape == (3, 4)
    a[1].fill(-1.0)  # write on our side...
    torch.cuda.synchronize()
    assert t[1].tolist() == [-1.0] * 4  # ...read on theirs
    b = cl.from_dlpack(t.T)  # strided, via DLPack
    assert b.ptr == t.data_ptr() and b.strides == (4, 16)
    t[0, 0] = 42.0
    assert b.get()[0, 0] == 42.0
    bf = torch.ones(5, dtype=torch.bfloat16, device="cuda")
    c = cl.from_dlpack(bf)
    assert c.dtype == cl.dtypes.bfloat16
    np.testing.assert_array_equal(c.get().astype(np.float32), np.ones(5, np.float32))


def test_us_to_torch(device, torch):
    a = cl.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.ptr and t.shape == (2, 3)
    t.mul_(2)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.get(), np.arange(6, dtype=np.float32).reshape(2, 3) * 2)
    tt = torch.from_dlpack(a.T)
    assert tuple(tt.stride()) == (1, 3)
    t2 = torch.as_tensor(a, device="cuda")  # __cuda_array_interface__
    assert t2.data_ptr() == a.ptr
    # The export keeps our memory alive after our last reference goes.
    b = cl.to_device(np.full(4, 7, np.int64))
    tb = torch.from_dlpack(b)
    del b
    gc.collect()
    assert tb.tolist() == [7, 7, 7, 7]
    bf = cl.to_device(np.ones(3, cl.dtypes.bfloat16))
    assert torch.from_dlpack(bf).dtype == torch.bfloat16


def test_cupy_both_ways(device, cupy):
    x = cupy.arange(10, dtype=cupy.float64)
    a = cl.asarray(x)
    assert a.ptr == x.data.ptr
    a[::2].fill(0.5)
    cupy.cuda.runtime.deviceSynchronize()
    assert float(x[0]) == 0.5 and float(x[1]) == 1.0
    ours = cl.to_device(np.arange(8, dtype=np.int32))
    y = cupy.asarray(ours)  # via __cuda_array_interface__
    assert y.data.ptr == ours.ptr
    y += 1
    np.testing.assert_array_equal(ours.get(), np.arange(8) + 1)
    z = cupy.from_dlpack(ours[2:])
    assert int(z[0]) == 3


def test_dlpack_capsule_consumed_twice(device, torch):
    t = torch.zeros(3, device="cuda")
    cap = t.__dlpack__()
    cl.from_dlpack(cap)
    with pytest.raises(ValueError, match="already consumed"):
        cl.from_dlpack(cap)
    ours = cl.to_device(np.zeros(2, np.float32)).__dlpack__()
    torch.from_dlpack(ours)
    with pytest.raises(Exception):
        torch.from_dlpack(ours)


def test_host_dlpack_refused(device):
    with pytest.raises(TypeError, match="CUDA"):
        cl.from_dlpack(np.zeros(3))


def test_exit_with_live_objects_is_clean(device):
    code = textwrap.dedent("""
        import numpy as np, cudalibs as cl
        s = cl.Stream()
        a = cl.to_device(np.arange(1000.0), stream=s)
        b = cl.alloc(1 << 20)
        pool = cl.MemoryPool()
        c = pool.allocate(4096, stream=s)
        h = cl.HostBuffer(1 << 16)
        view = h.numpy(np.float32)
        e = cl.Event().record(s)
        cap = a.__dlpack__()
        try:
            import torch
            t = torch.from_dlpack(cl.to_device(np.ones(4)))
            u = cl.asarray(torch.ones(3, device="cuda"))
        except ImportError:
            pass
        print("alive", a.get()[-1])
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "alive 999.0" in proc.stdout
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
