"""Modules on the GPU: PTX (text, bytes, path), CUBIN, fatbin, NVRTC compiles and their caches,
JIT errors, PTX versions, kernel attributes and occupancy (against cuda-bindings)."""

import gc
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import testing as T
from cudalibs.driver import _params, nvrtc
from cudalibs.driver.module import Module

from ._sources import HALF, MISC, SAXPY, STORE_ALL_PTX, TEMPLATE


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", str(tmp_path / "nvrtc"))
    nvrtc.clear_memory_cache()
    yield
    nvrtc.clear_memory_cache()


def _run_saxpy(kernel, n=1000, a=2.5, rng=0):
    x = T.random_array(n, np.float32, rng=rng)
    y = T.random_array(n, np.float32, rng=rng + 1)
    dx, dy = cl.to_device(x), cl.to_device(y)
    kernel.launch((n + 127) // 128, 128, a, dx, dy, n)
    T.assert_close(dy.get(), a * x.astype(np.float64) + y, np.float32)


# -- loading -----------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["text", "bytes", "path", "str_path"])
def test_from_ptx(device, tmp_path, how):
    path = tmp_path / "store_all.ptx"
    path.write_text(STORE_ALL_PTX)
    src = {"text": STORE_ALL_PTX, "bytes": STORE_ALL_PTX.encode(), "path": path,
           "str_path": str(path)}[how]
    m = Module.from_ptx(src, device=device, jit_options={"optimization_level": 3})
    assert m.kind == "ptx" and m.device is device
    assert m.kernel_names == ("store_all",)
    assert m.ptx_version == (8, 0)
    k = m["store_all"]
    assert k is m.get_kernel("store_all") and k.module is m
    assert "store_all" in repr(m) and "store_all" in repr(k)
    m.close()


def test_from_cubin_needs_a_signature(device):
    built = nvrtc.build(SAXPY, arch=device.arch, target="cubin", cache=False)
    m = Module.from_cubin(built.image, device=device)
    assert m.kind == "cubin"
    names = m.kernel_names  # from the driver, where it can list them (CUDA 12.4+)
    assert names == () or "saxpy" in names
    bare = m["saxpy"]
    with pytest.raises(TypeError, match="signature="):
        bare.launch(1, 32, 1.0, 0, 0, 0)
    _run_saxpy(m.get_kernel("saxpy", signature="f32, ptr, ptr, u32"))


def test_from_cubin_path(device, tmp_path):
    built = nvrtc.build(SAXPY, arch=device.arch, target="cubin", cache=False)
    path = tmp_path / "saxpy.cubin"
    path.write_bytes(built.image)
    m = Module.from_cubin(str(path), device=device)
    _run_saxpy(m.get_kernel("saxpy", signature=("f32", "u64", "u64", "u32")))


def test_from_fatbin(device, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH (needed to build a fatbin)")
    src = tmp_path / "saxpy.cu"
    src.write_text(SAXPY)
    out = tmp_path / "saxpy.fatbin"
    cc = device.arch.removeprefix("sm_")
    proc = subprocess.run([nvcc, "-fatbin", f"-gencode=arch=compute_{cc},code=[sm_{cc},"
                           f"compute_{cc}]", str(src), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for src_ in (out, out.read_bytes()):
        m = Module.from_fatbin(src_, device=device)
        assert m.kind == "fatbin"
        _run_saxpy(m.get_kernel("saxpy", signature="f32, ptr, ptr, u32"))


def test_jit_error_carries_the_log(device):
    bad = STORE_ALL_PTX.replace("cvta.to.global.u64", "cvta.to.nowhere.u64")
    with pytest.raises(cl.CudaError) as info:
        Module.from_ptx(bad, device=device)
    e = info.value
    print("JIT failure:", e.name, "\n", e.detail)  # shown when the assertion below fails
    assert e.function == "cuModuleLoadDataEx"
    assert e.detail and ("error" in e.detail.lower() or "line" in e.detail.lower())
    # the process is fine afterwards
    Module.from_ptx(STORE_ALL_PTX, device=device).close()


def test_ptx_version_too_new(device):
    ptx = STORE_ALL_PTX.replace(".version 8.0", ".version 99.0")
    with pytest.raises(cl.CudaError) as info:
        Module.from_ptx(ptx, device=device)
    assert info.value.name == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
    drv = cl.driver_version()
    assert (f"PTX ISA 99.0 needs a driver for CUDA \u2265 103.0; this driver is CUDA "
            f"{drv[0]}.{drv[1]}; compile to cubin") in str(info.value)


def test_not_found_and_closed(device):
    m = Module.from_ptx(STORE_ALL_PTX, device=device)
    with pytest.raises(KeyError, match="no kernel 'nope'.*store_all"):
        m["nope"]
    k = m["store_all"]
    m.close()
    m.close()  # twice is harmless
    assert m.closed and "closed" in repr(m) and "closed" in repr(k)
    with pytest.raises(cl.ClosedError):
        m["store_all"]
    with pytest.raises(cl.ClosedError):
        k.launch(1, 1, *([0] * 16))
    with pytest.raises(cl.ClosedError):
        k.num_regs


def test_kernel_keeps_module_alive(device):
    k = Module.from_ptx(STORE_ALL_PTX, device=device)["store_all"]
    gc.collect()
    assert not k.module.closed
    assert k.num_regs > 0
    del k
    gc.collect()
    assert gc.garbage == []


# -- NVRTC ---------------------------------------------------------------------------------------
def test_compile_and_run(device):
    m = cl.compile(SAXPY)
    assert m.device is device
    _run_saxpy(m["saxpy"])
    assert cl.compile(SAXPY) is m  # memory cache: the same loaded module


def test_compile_disk_cache_survives_memory_clear(device, tmp_path):
    first = cl.compile(SAXPY)
    nvrtc.clear_memory_cache()
    again = cl.compile(SAXPY)
    assert again is not first
    assert list((tmp_path / "nvrtc").rglob("*.bin"))
    _run_saxpy(again["saxpy"])


def test_compile_forced_cubin(device):
    m = cl.compile(SAXPY, target="cubin")
    assert m.kind == "cubin"
    _run_saxpy(m["saxpy"])  # the signature comes from the PTX NVRTC also produced


def test_compile_picks_cubin_when_nvrtc_is_newer_than_the_driver(device, monkeypatch):
    drv = cl.driver_version()
    monkeypatch.setattr(nvrtc, "version", lambda: (drv[0], drv[1] + 5))
    m = cl.compile(SAXPY, cache=False)
    assert m.kind == "cubin"
    _run_saxpy(m["saxpy"])


def test_compile_templates_and_lowered_names(device):
    m = cl.compile(TEMPLATE, name_expressions=["fill<float>", "fill<int>"])
    assert m.lowered_name("fill<float>").startswith("_Z4fill")
    with pytest.raises(KeyError, match="fill<double>"):
        m.lowered_name("fill<double>")
    out_f = cl.empty(300, np.float32).fill(T.poison_value(np.float32))
    out_i = cl.empty(300, np.int32).fill(T.poison_value(np.int32))
    m["fill<float>"].launch(3, 128, out_f, 1.5, 300)
    m["fill<int>"].launch(3, 128, out_i, np.int32(-7), 300)  # int is .u32 in the PTX
    np.testing.assert_array_equal(out_f.get(), np.full(300, 1.5, np.float32))
    np.testing.assert_array_equal(out_i.get(), np.full(300, -7, np.int32))


def test_compile_half_headers(device):
    m = cl.compile(HALF)
    n = 257
    x = T.random_array(n, np.float16, rng=1)
    y = T.random_array(n, np.float16, rng=2)
    dx, dy = cl.to_device(x), cl.to_device(y)
    m["half_axpy"].launch((n + 127) // 128, 128, dx, dy, 0.5, n)  # note: y, x order
    expected = 0.5 * y.astype(np.float64) + x.astype(np.float64)
    T.assert_close(dx.get(), expected, np.float16)


def test_compile_error(device):
    with pytest.raises(cl.NvrtcError) as info:
        cl.compile("extern \"C\" __global__ void k() { nope(); }", name="bad.cu")
    assert "bad.cu" in info.value.detail and "nope" in info.value.detail


# -- attributes and occupancy ------------------------------------------------------------------
def test_attributes(device):
    m = cl.compile(MISC)
    k = m["tiled"]
    a = k.attributes()
    assert a.num_regs > 0
    assert a.shared_size_bytes == 256 * 4
    assert 0 < a.max_threads_per_block <= 1024
    cc = device.compute_capability
    assert a.binary_version == cc[0] * 10 + cc[1]
    assert a.ptx_version == cc[0] * 10 + cc[1]
    assert a.local_size_bytes >= 0 and a.const_size_bytes >= 0
    # 48 KiB by default (some drivers report it less the static shared memory)
    assert a.max_dynamic_shared_size_bytes in (48 * 1024, 48 * 1024 - a.shared_size_bytes)
    ptx_k = Module.from_ptx(STORE_ALL_PTX)["store_all"]
    assert ptx_k.ptx_version == 80  # .target sm_80


def test_max_dynamic_shared_memory(device):
    k = cl.compile(MISC)["dynamic_smem"]
    optin = device.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
    n = 64 * 1024 // 4  # 64 KiB: above the default 48 KiB
    out = cl.empty(n, np.float32).fill(np.nan)
    with pytest.raises(ValueError, match="exceed its limit of 49152"):
        k.launch(1, 256, out, n, shared_mem=n * 4)
    k.max_dynamic_shared_size_bytes = n * 4
    assert k.max_dynamic_shared_size_bytes == n * 4
    k.launch(1, 256, out, n, shared_mem=n * 4)
    np.testing.assert_array_equal(out.get(), np.arange(n, dtype=np.float32)[::-1])
    with pytest.raises(ValueError, match="outside"):
        k.max_dynamic_shared_size_bytes = optin + 1


def test_occupancy_matches_cuda_bindings(device):
    cbd = pytest.importorskip("cuda.bindings.driver")
    k = cl.compile(MISC)["dynamic_smem"]
    f = cbd.CUfunction(k.handle)
    for block, smem in [(32, 0), (128, 0), (256, 4096), (1024, 0), (512, 16384)]:
        err, n = cbd.cuOccupancyMaxActiveBlocksPerMultiprocessor(f, block, smem)
        assert int(err) == 0
        assert k.max_active_blocks_per_sm(block, smem) == n, (block, smem)
    for smem in (0, 8192):
        err, min_grid, block = cbd.cuOccupancyMaxPotentialBlockSize(f, 0, smem, 0)
        assert int(err) == 0
        assert k.max_potential_block_size(smem) == (min_grid, block)
        assert k.suggested_block_size(smem) == block


def test_get_global(device):
    m = cl.compile("__device__ float table[7];\n" + SAXPY)
    addr, size = m.get_global("table")
    assert addr and size == 7 * 4


def test_parsed_signature_matches_ptx(device):
    m = cl.compile(MISC)
    sig = [p.type for p in m["affine"].params]
    assert sig == ["b8", "u64", "u32"] and m["affine"].params[0].count == 16
    assert _params.parse_entries(STORE_ALL_PTX)["store_all"] == Module.from_ptx(
        STORE_ALL_PTX)["store_all"].params


def test_gc_of_closed_and_open_modules_is_quiet(device):
    code = ("import cudalibs as cl\n"
            f"m = cl.driver.module.Module.from_ptx({STORE_ALL_PTX!r})\n"
            "k = m['store_all']\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                              os.path.dirname(os.path.abspath(__file__))))))
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr
