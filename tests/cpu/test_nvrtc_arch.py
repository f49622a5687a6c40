"""``arch=`` of ``nvrtc.build`` and ``cl.compile`` against the real NVRTC, without a GPU.

An ``a`` or ``f`` suffix reaches NVRTC (``compute_90a``), the result and its PTX name it, and
an architecture NVRTC does not compile for is refused with the list of those it does; only a
device's own architecture (``arch=None``) still falls back to the newest one NVRTC knows.
"""

from __future__ import annotations

import re

import pytest

import cudalibs as cl
from cudalibs.driver import _core, device, nvrtc
from cudalibs.errors import LibraryNotFoundError, NvrtcError

SOURCE = r"""
extern "C" __global__ void scale(float* x, float a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""

# wgmma exists only on sm_90a: ptxas refuses it for plain sm_90.
WGMMA = r"""
extern "C" __global__ void fence(float* x) {
    asm volatile("wgmma.fence.sync.aligned;");
    x[threadIdx.x] = 1.0f;
}
"""


@pytest.fixture(autouse=True)
def fresh_caches(tmp_path, monkeypatch):
    """An empty disk and memory cache, so every build here runs NVRTC."""
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", str(tmp_path / "cache"))
    nvrtc.clear_memory_cache()
    yield
    nvrtc.clear_memory_cache()


@pytest.fixture()
def no_driver(monkeypatch):
    """This process as on a machine without the NVIDIA driver, whatever the real one has."""
    def missing():
        raise LibraryNotFoundError("cuda", ["libcuda.so.1: not found (stand-in)"],
                                   "install the NVIDIA driver")

    monkeypatch.setattr(_core, "driver_version", missing)


def _targets(ptx: bytes) -> list[str]:
    return re.findall(r"^\.target\s+(\S+)", ptx.decode(), re.M)


@pytest.mark.parametrize("arch, ptx_arch, cubin_arch, target", [
    ("sm_90a", "compute_90a", "sm_90a", "sm_90a"),
    ("compute_90a", "compute_90a", "sm_90a", "sm_90a"),
    ("sm_100f", "compute_100f", "sm_100f", "sm_100f"),
    ("sm_90", "compute_90", "sm_90", "sm_90"),
])
def test_the_suffix_reaches_nvrtc_and_the_result(arch, ptx_arch, cubin_arch, target):
    ptx = nvrtc.build(SOURCE, arch=arch, driver_cuda=nvrtc.version(), target="ptx")
    assert (ptx.kind, ptx.target.arch) == ("ptx", ptx_arch)
    assert _targets(ptx.image) == [target]
    cubin = nvrtc.build(SOURCE, arch=arch, target="cubin")
    assert (cubin.kind, cubin.target.arch) == ("cubin", cubin_arch)
    assert cubin.image.startswith(b"\x7fELF") and _targets(cubin.ptx) == [target]


def test_the_suffix_is_part_of_the_cache_key():
    plain = nvrtc.build(SOURCE, arch="sm_90", driver_cuda=nvrtc.version())
    special = nvrtc.build(SOURCE, arch="sm_90a", driver_cuda=nvrtc.version())
    assert plain.key and special.key and plain.key != special.key
    assert special.cached == "" and _targets(special.ptx) == ["sm_90a"]
    again = nvrtc.build(SOURCE, arch="sm_90a", driver_cuda=nvrtc.version())
    assert again.cached == "memory" and _targets(again.ptx) == ["sm_90a"]


def test_compile_keeps_the_suffix_for_architecture_specific_instructions(no_driver):
    mod = cl.compile(WGMMA, arch="sm_90a", target="cubin", cache=False)
    assert mod.kind == "cubin" and mod.kernel_names == ("fence",)
    with pytest.raises(NvrtcError, match="wgmma"):
        cl.compile(WGMMA, arch="sm_90", target="cubin", cache=False)


@pytest.mark.parametrize("arch", ["sm_999", "compute_999", 999, (99, 0), "sm_91"])
def test_an_unknown_architecture_is_refused_with_the_supported_list(arch, no_driver):
    supported = nvrtc.supported_archs()
    for call in (lambda: nvrtc.build(SOURCE, arch=arch),
                 lambda: cl.compile(SOURCE, arch=arch)):
        with pytest.raises(ValueError) as info:
            call()
        text = str(info.value)
        assert repr(arch) in text
        assert all(f"sm_{a}" in text for a in supported), text


@pytest.mark.parametrize("arch", ["sm_80a", "sm_90f"])
def test_a_variant_nvrtc_lacks_is_refused(arch):
    with pytest.raises(ValueError, match=f"cannot compile for arch='{arch}'.*refuses"):
        nvrtc.build(SOURCE, arch=arch)


def test_a_source_error_with_a_suffix_stays_a_compile_error():
    with pytest.raises(NvrtcError) as info:
        nvrtc.build("__global__ void k() { undefined_thing(); }", arch="sm_90a")
    assert "undefined_thing" in info.value.detail


@pytest.mark.parametrize("arch", ["sm_90af", "sm_a", "sm_9", (9, 10), True, 9.0])
def test_malformed_spellings(arch):
    with pytest.raises(ValueError, match="arch must look like"):
        nvrtc.build(SOURCE, arch=arch)


def test_a_device_newer_than_nvrtc_still_falls_back(monkeypatch):
    # arch=None: the device's own architecture, which NVRTC may not know yet; PTX for the
    # newest one it does know, which the driver JITs forward.
    class NewDevice:
        compute_capability = (99, 0)
        ordinal = 0

    built = []
    monkeypatch.setattr(device, "as_device", lambda dev=None: NewDevice())
    monkeypatch.setattr(_core, "driver_version", nvrtc.version)
    monkeypatch.setattr(nvrtc, "_load_built", lambda b, *rest: built.append(b) or "module")
    assert cl.compile(SOURCE, cache=False) == "module"
    newest = max(nvrtc.supported_archs())
    assert built[0].target.arch == f"compute_{newest}"
    assert _targets(built[0].ptx) == [f"sm_{newest}"]
