"""The CPU side of modules and kernels: NVRTC compiles, its caches, the PTX-vs-CUBIN choice,
PTX version checks, and the launch path against a stand-in for ``cuLaunchKernel``."""

from __future__ import annotations

import ctypes
import os
import stat
import struct
import threading
import warnings

import numpy as np
import pytest

import cudalibs
from cudalibs.driver import _params, compile_cache as CC, diskstate, launch as LA, module as M
from cudalibs.driver import nvrtc
from cudalibs.errors import ClosedError, CudaError, NvrtcError

SAXPY = r"""
extern "C" __global__ void saxpy(float a, const float* x, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

TEMPLATE = r"""
template <typename T>
__global__ void fill(T* out, T value, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}
"""

HALF = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void halves(__half* h, __nv_bfloat16* b, __half hv, __nv_bfloat16 bv) {
    h[threadIdx.x] = __hadd(h[threadIdx.x], hv);
    b[threadIdx.x] = __hadd(b[threadIdx.x], bv);
}
"""


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    """A fresh disk cache and an empty memory cache for every test."""
    d = tmp_path / "cache"
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", str(d))
    nvrtc.clear_memory_cache()
    yield d
    nvrtc.clear_memory_cache()


def _entries(d):
    return sorted(p for p in d.rglob("*.bin"))


# build() decides between PTX and a CUBIN by the driver that will load the result (see
# nvrtc.choose_target), so a test that expects one kind names a driver relative to the NVRTC
# in use, never a fixed version: a fixed CUDA 13.0 driver gets a CUBIN from NVRTC 13.5, whose
# PTX (ISA 9.5) that driver would reject.
def _loads_ptx():
    """A driver as new as the loaded NVRTC: it loads NVRTC's PTX, so build() emits PTX."""
    return nvrtc.version()


def _rejects_ptx():
    """A driver older than the loaded NVRTC, which would reject its PTX: build() emits a CUBIN."""
    major, minor, _ = nvrtc.version()
    return (major, minor - 1) if minor else (major - 1, 9)


# -- target choice -------------------------------------------------------------------------------
@pytest.mark.parametrize("nv, drv, cc, kind, arch", [
    ((13, 0), (13, 0), (9, 0), "ptx", "compute_90"),
    ((12, 8), (13, 0), (9, 0), "ptx", "compute_90"),
    ((13, 5), (13, 0), (9, 0), "cubin", "sm_90"),
    ((13, 1), (13, 0), (8, 6), "cubin", "sm_86"),
    ((13, 0), (12, 9), (12, 0), "cubin", "sm_120"),
])
def test_choose_target(nv, drv, cc, kind, arch):
    t = nvrtc.choose_target(nv, drv, cc)
    assert (t.kind, t.arch) == (kind, arch), t.reason


def test_choose_target_for_a_gpu_newer_than_nvrtc():
    t = nvrtc.choose_target((12, 0), (13, 0), (10, 0), supported=(75, 80, 86, 89, 90))
    assert (t.kind, t.arch) == ("ptx", "compute_90")
    with pytest.raises(ValueError, match="cannot compile for sm_50"):
        nvrtc.choose_target((13, 0), (13, 0), (5, 0), supported=(75, 80))


@pytest.mark.parametrize("arch, cc", [("sm_90", (9, 0)), ("compute_86", (8, 6)), (90, (9, 0)),
                                      ("120", (12, 0)), ((8, 9), (8, 9)), ("sm_90a", (9, 0))])
def test_arch_spellings(arch, cc):
    assert nvrtc._arch_cc(arch) == cc


def test_bad_arch():
    with pytest.raises(ValueError, match="arch must look like"):
        nvrtc._arch_cc("hopper")


# -- PTX ISA versions ----------------------------------------------------------------------------
@pytest.mark.parametrize("isa, cuda", [((8, 0), (12, 0)), ((8, 5), (12, 5)), ((8, 7), (12, 8)),
                                       ((8, 8), (12, 9)), ((9, 0), (13, 0)), ((9, 1), (13, 1)),
                                       ((9, 5), (13, 5)), ((7, 8), (11, 8))])
def test_ptx_isa_table(isa, cuda):
    assert M.required_cuda_for_ptx(isa) == cuda


def test_ptx_version_message():
    assert M.check_ptx_version((9, 0), (13, 0)) is None
    assert M.check_ptx_version(None, (12, 0)) is None
    msg = M.check_ptx_version((9, 5), (13, 0))
    assert msg == ("PTX ISA 9.5 needs a driver for CUDA \u2265 13.5; this driver is CUDA 13.0; "
                   "compile to cubin (cudalibs.compile(...) does this automatically) or use an "
                   "older compiler")


def test_from_ptx_too_new_fails_before_the_driver(monkeypatch):
    monkeypatch.setattr(M, "driver_version", lambda: (13, 0))

    def no_driver(*a, **k):
        raise AssertionError("the driver must not be called")

    monkeypatch.setattr(M.Module, "_load", classmethod(no_driver))
    ptx = ".version 99.0\n.target sm_90\n.address_size 64\n.entry k() { ret; }\n"
    with pytest.raises(CudaError) as info:
        M.Module.from_ptx(ptx)
    assert info.value.name == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"
    assert "PTX ISA 99.0 needs a driver for CUDA \u2265 103.0; this driver is CUDA 13.0" in str(
        info.value)


def test_from_ptx_reads_paths(monkeypatch, tmp_path):
    seen = {}

    def fake_load(cls, image, kind, device, jit, entries, label, isa, lowered=None):
        seen.update(image=image, kind=kind, entries=entries, label=label, isa=isa)
        return "module"

    monkeypatch.setattr(M, "driver_version", lambda: (13, 0))
    monkeypatch.setattr(M.Module, "_load", classmethod(fake_load))
    ptx = ".version 8.0\n.target sm_80\n.address_size 64\n.entry k(.param .u32 n) { ret; }\n"
    path = tmp_path / "k.ptx"
    path.write_text(ptx)
    for src in (path, str(path), ptx, ptx.encode()):
        assert M.Module.from_ptx(src) == "module"
        assert seen["image"] == ptx.encode() + b"\0"
        assert list(seen["entries"]) == ["k"] and seen["isa"] == (8, 0)
    with pytest.raises(ValueError, match="not PTX"):
        M.Module.from_ptx("hello")
    with pytest.raises(ValueError, match="cannot read PTX file"):
        M.Module.from_ptx(tmp_path / "missing.ptx")
    with pytest.raises(TypeError, match="a CUBIN is binary"):
        M.Module.from_cubin("not a path")
    with pytest.raises(ValueError, match="not a CUBIN"):
        M.Module.from_cubin(b"garbage")


def test_jit_options_are_validated():
    opts, vals, info, err = M._jit_arrays({"optimization_level": 3, "generate_line_info": 1})
    assert list(opts)[-2:] == [7, 13] and list(vals)[-2:] == [3, 1]
    assert vals[0] == ctypes.addressof(info) and vals[2] == ctypes.addressof(err)
    with pytest.raises(ValueError, match="unknown JIT option"):
        M._jit_arrays({"speed": 11})
    with pytest.raises(ValueError, match="0..4"):
        M._jit_arrays({"optimization_level": 9})


# -- NVRTC ---------------------------------------------------------------------------------------
def test_build_ptx_and_signature():
    out = nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx())
    assert out.kind == "ptx" and out.image == out.ptx
    assert _params.ptx_target(out.ptx) == ("sm_90",)
    sig = _params.parse_entries(out.ptx)["saxpy"]
    assert [p.type for p in sig] == ["f32", "u64", "u64", "u32"]
    isa = _params.ptx_version(out.ptx)
    assert M.check_ptx_version(isa, nvrtc.version()) is None


def test_build_cubin_when_nvrtc_is_newer_than_the_driver():
    out = nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_rejects_ptx())
    assert out.kind == "cubin" and out.image.startswith(b"\x7fELF")
    assert out.target.arch == "sm_90"
    # the PTX still comes along, for the kernels' parameter types
    assert "saxpy" in _params.parse_entries(out.ptx)


def test_forced_target():
    assert nvrtc.build(SAXPY, arch=(8, 0), driver_cuda=_loads_ptx(), target="cubin").kind == "cubin"
    with pytest.raises(ValueError, match="target must be"):
        nvrtc.build(SAXPY, arch=(8, 0), target="sass")


def test_name_expressions():
    out = nvrtc.build(TEMPLATE, name_expressions=["fill<float>", "fill<int>"], arch="sm_90",
                      driver_cuda=_loads_ptx())
    assert set(out.lowered) == {"fill<float>", "fill<int>"}
    entries = _params.parse_entries(out.ptx)
    for expr, mangled in out.lowered.items():
        assert mangled in entries
    # NVRTC declares every integer parameter unsigned: int is .u32
    assert [p.type for p in entries[out.lowered["fill<float>"]]] == ["u64", "f32", "u32"]
    assert [p.type for p in entries[out.lowered["fill<int>"]]] == ["u64", "u32", "u32"]


def test_fp16_bf16_headers_are_found():
    assert nvrtc.cuda_include_dirs(), "cuda.pathfinder found no CUDA headers"
    out = nvrtc.build(HALF, arch="sm_90", driver_cuda=_loads_ptx())
    assert [p.type for p in _params.parse_entries(out.ptx)["halves"]][:2] == ["u64", "u64"]


def test_compile_error_carries_the_log():
    with pytest.raises(NvrtcError) as info:
        nvrtc.build("__global__ void k() { undefined_thing(); }", name="broken.cu",
                    arch="sm_90", cache=False)
    e = info.value
    assert e.name == "NVRTC_ERROR_COMPILATION"
    assert "broken.cu" in e.detail and "undefined_thing" in e.detail


def test_bad_arguments():
    with pytest.raises(TypeError, match="source must be a str"):
        nvrtc.build(b"bytes")
    with pytest.raises(TypeError, match="options must be a sequence of str"):
        nvrtc.build(SAXPY, options="-O3")


# -- caches --------------------------------------------------------------------------------------
def test_memory_and_disk_cache(cache_dir):
    first = nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx())
    assert first.cached == ""
    assert len(_entries(cache_dir)) == 1
    assert nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx()).cached == "memory"
    nvrtc.clear_memory_cache()
    again = nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx())
    assert again.cached == "disk" and again.image == first.image and again.key == first.key


def test_cache_key_covers_inputs():
    base = nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx())
    keys = {base.key,
            nvrtc.build(SAXPY + " ", arch="sm_90", driver_cuda=_loads_ptx()).key,
            nvrtc.build(SAXPY, options=["-DX=1"], arch="sm_90", driver_cuda=_loads_ptx()).key,
            nvrtc.build(SAXPY, arch="sm_80", driver_cuda=_loads_ptx()).key,
            nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_rejects_ptx()).key,  # cubin
            nvrtc.build(SAXPY, name="other.cu", arch="sm_90", driver_cuda=_loads_ptx()).key}
    assert len(keys) == 6


def test_cache_disabled(cache_dir):
    out = nvrtc.build(SAXPY, arch="sm_90", cache=False)
    assert out.cached == "" and not cache_dir.exists()
    assert nvrtc.build(SAXPY, arch="sm_90", cache=False).cached == ""


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty", "bad_meta"])
def test_corrupted_entry_is_recompiled(cache_dir, damage):
    first = nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx())
    (path,) = _entries(cache_dir)
    data = path.read_bytes()
    if damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data = data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]
    elif damage == "garbage":
        data = os.urandom(len(data))
    elif damage == "empty":
        data = b""
    else:  # a valid checksum over nonsense metadata
        import hashlib
        body = (5).to_bytes(4, "little") + b"{bad}"
        data = CC.MAGIC + hashlib.sha256(body).digest() + body
    path.write_bytes(data)
    nvrtc.clear_memory_cache()
    again = nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx())
    assert again.cached == "" and again.image == first.image
    # and the entry was rewritten whole
    assert CC.decode_entry(path.read_bytes()) is not None


def test_read_only_cache_dir_warns_once(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # root writes through directory permissions; make the write fail as it would for a user
        def denied(*a, **k):
            raise PermissionError(13, "Permission denied", str(ro))

        monkeypatch.setattr(diskstate.tempfile, "mkstemp", denied)
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", str(ro))
    CC._warned_dirs.discard(str(ro))
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            out = nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx())
            nvrtc.clear_memory_cache()
            nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx())
        assert out.kind == "ptx"
        msgs = [str(x.message) for x in w if "NVRTC cache" in str(x.message)]
        assert len(msgs) == 1 and str(ro) in msgs[0]
    finally:
        ro.chmod(stat.S_IRWXU)


def test_cache_dir_default(monkeypatch):
    monkeypatch.delenv("CUDALIBS_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert nvrtc.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "cudalibs",
                                             "nvrtc")


def test_concurrent_builds_agree():
    results, errors = [], []

    def work():
        try:
            results.append(nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx()).image)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1


# -- the launch path, against a stand-in for cuLaunchKernel --------------------------------------
class _FakeDevice:
    ordinal = 0
    _ctx = None
    LIMITS = {"MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024, "MAX_BLOCK_DIM_Z": 64,
              "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535, "MAX_GRID_DIM_Z": 65535,
              "MAX_THREADS_PER_BLOCK": 1024, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448}

    def attribute(self, name):
        return self.LIMITS[name]


def _fake_kernel(monkeypatch, ptx_entry="saxpy"):
    out = nvrtc.build(SAXPY, arch="sm_90", driver_cuda=_loads_ptx())
    mod = object.__new__(M.Module)
    mod._alive = [True]
    mod._device = _FakeDevice()
    mod._label = "<fake>"
    params = _params.parse_entries(out.ptx)[ptx_entry]
    k = LA.Kernel._make(mod, ptx_entry, LA._lib.CUfunction(), params)
    k._fh = 0xF00D
    attrs = {LA._lib.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024,
             LA._lib.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: 48 * 1024,
             LA._lib.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: 0}
    monkeypatch.setattr(LA.Kernel, "_attr", lambda self, code: attrs[code])
    calls = []

    def fake_launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        assert f is k._f and not stream  # the legacy default stream is NULL
        addr = params.value
        calls.append(((0xF00D, gx, gy, gz, bx, by, bz, smem, 0, extra), addr,
                      [ctypes.string_at(ctypes.c_void_p.from_address(addr + 8 * i).value,
                                        p.size) for i, p in enumerate(k.params)]))
        return 0

    monkeypatch.setattr(LA, "_launch_fn", fake_launch)
    return k, mod, calls


def test_launch_writes_arguments(monkeypatch):
    k, mod, calls = _fake_kernel(monkeypatch)
    k.launch(4, (128,), 2.0, 0x1000, 0x2000, 512)
    (args, addr, values), = calls
    assert args == (0xF00D, 4, 1, 1, 128, 1, 1, 0, 0, None)
    assert values == [struct.pack("<f", 2.0), struct.pack("<Q", 0x1000),
                      struct.pack("<Q", 0x2000), struct.pack("<I", 512)]
    launcher = k.prepare((2, 3), (32, 4), shared_mem=256)
    launcher(1.0, 1, 2, 3)
    assert calls[-1][0][:8] == (0xF00D, 2, 3, 1, 32, 4, 1, 256)
    assert launcher.grid == (2, 3, 1) and launcher.block == (32, 4, 1)


def test_launch_validation(monkeypatch):
    k, mod, calls = _fake_kernel(monkeypatch)
    with pytest.raises(ValueError, match="block .* exceeds the device's limit 64 in dimension z"):
        k.launch(1, (1, 1, 65), 1.0, 0, 0, 1)
    with pytest.raises(ValueError, match="a block of 2048 threads"):
        k.launch(1, (1024, 2), 1.0, 0, 0, 1)
    with pytest.raises(ValueError, match="grid .* exceeds the device's limit 65535"):
        k.launch((1, 70000), 1, 1.0, 0, 0, 1)
    with pytest.raises(ValueError, match="dimension below 1"):
        k.launch(0, 1, 1.0, 0, 0, 1)
    with pytest.raises(ValueError, match="1 to 3 dimensions"):
        k.launch((1, 1, 1, 1), 1, 1.0, 0, 0, 1)
    with pytest.raises(TypeError, match="grid dimensions must be ints"):
        k.launch((1.5,), 1, 1.0, 0, 0, 1)
    with pytest.raises(ValueError, match="49153 bytes of dynamic shared memory exceed"):
        k.launch(1, 1, 1.0, 0, 0, 1, shared_mem=48 * 1024 + 1)
    with pytest.raises(TypeError, match="kernel saxpy takes 4 arguments"):
        k.launch(1, 1, 1.0, 0, 0)
    with pytest.raises(ValueError, match=r"kernel saxpy argument 3 \(.u32 saxpy_param_3\)"):
        k.launch(1, 1, 1.0, 0, 0, -1)
    assert calls == []
    mod._alive[0] = False
    with pytest.raises(ClosedError, match="module is closed"):
        k.launch(1, 1, 1.0, 0, 0, 1)
    with pytest.raises(ClosedError):
        k.prepare(1, 1)


def test_launcher_checks_closed_module(monkeypatch):
    k, mod, calls = _fake_kernel(monkeypatch)
    launcher = k.prepare(1, 32)
    launcher(1.0, 0, 0, 1)
    mod._alive[0] = False
    with pytest.raises(ClosedError):
        launcher(1.0, 0, 0, 1)
    assert len(calls) == 1


def test_per_thread_parameter_blocks(monkeypatch):
    k, mod, calls = _fake_kernel(monkeypatch)
    k.launch(1, 1, 1.0, 0, 0, 1)
    t = threading.Thread(target=k.launch, args=(1, 1, 2.0, 0, 0, 2))
    t.start()
    t.join()
    assert len(k._blocks) == 2
    assert calls[0][1] != calls[1][1]


def test_public_names():
    for name in ("Module", "Kernel", "Launcher", "compile", "graph"):
        assert hasattr(cudalibs, name), name
    assert cudalibs.graph.capture is not None
    assert np.dtype(np.float32)  # numpy is importable alongside


def test_graph_capture_argument_checks():
    from cudalibs.driver import _lib, graph

    with pytest.raises(ValueError, match="non-default stream"):
        graph.capture(None)
    with pytest.raises(ValueError, match="default stream cannot be captured"):
        graph.capture(cudalibs.default_stream())
    assert graph.CAPTURE_MODES == {"global": _lib.CU_STREAM_CAPTURE_MODE_GLOBAL,
                                   "thread_local": _lib.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                                   "relaxed": _lib.CU_STREAM_CAPTURE_MODE_RELAXED}
    with pytest.raises(TypeError, match="capture"):
        graph.Graph()
    with pytest.raises(TypeError, match="instantiate"):
        graph.GraphExec()


def test_capture_sink_notes_modules(monkeypatch):
    k, mod, calls = _fake_kernel(monkeypatch)
    sink = set()
    LA._capture_sinks.append(sink)
    try:
        k.launch(1, 32, 1.0, 0, 0, 1)
        k.prepare(1, 32)(1.0, 0, 0, 1)
    finally:
        LA._capture_sinks.remove(sink)
    assert sink == {mod} and len(calls) == 2
