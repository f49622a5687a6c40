"""The grouped GEMMs without a GPU: the device-offsets kernels' builds (sm_80, and sm_90a for
the Hopper kernels), the loader's refusal of GPUs they cannot run on, the launch arguments of
``kernels.grouped_mm``'s sm_80 kernel and of its weight gradient ``kernels.grouped_mm_wgrad``'s
(their Hopper kernels: test_grouped90.py), and of ``grouped_mm_backward``'s two launches
against the PTX signatures, the host arrays and pointer order of ``cublas.gemm_grouped``, and
every refusal of bad input before any C call.

Device arrays are stand-ins over fake addresses on fake devices (nothing is dereferenced):
launches and the cuBLAS call are recorded, not made.
"""

from __future__ import annotations

import importlib
import importlib.util
import types

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas, dtypes, kernels
from cudalibs import ptx as P
from cudalibs.cublas import _lib
from cudalibs.driver import _params, tensormap
from cudalibs.driver.array import DeviceArray, c_strides
from cudalibs.kernels import grouped90
from cudalibs.runtime import ptxlib
from cudalibs.runtime.cache import cache as plan_cache

grouped_blas = importlib.import_module("cudalibs.cublas.grouped")
BF16, F16, F32 = np.dtype(dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
I32, I64 = np.dtype(np.int32), np.dtype(np.int64)


def _build_script():
    spec = importlib.util.spec_from_file_location("ptx_build", P.DIRECTORY / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Device:
    """What the grouped wrappers read of a device."""

    def __init__(self, ordinal, cc=(9, 0), sms=132):
        self.ordinal = ordinal
        self.compute_capability = cc
        self.multiprocessor_count = sms
        self.arch = f"sm_{cc[0]}{cc[1]}"


class _Buffer:
    __slots__ = ("_ptr",)

    def __init__(self, ptr):
        self._ptr = ptr


DEV, DEV1, OLD = _Device(0), _Device(1), _Device(5, cc=(7, 5))
#: An sm_80 GPU: the Hopper kernels are not offered there, only the sm_80 kernel's tiles.
AMPERE = _Device(2, cc=(8, 0), sms=108)
_next = [1 << 36]


def fake(shape, dtype, device=DEV, strides=None, offset=0):
    """A DeviceArray over a fake 256-byte-aligned address (plus ``offset`` bytes)."""
    dt = dtypes.lookup(dtype)
    shape = tuple(shape)
    strides = c_strides(shape, dt.itemsize) if strides is None else tuple(strides)
    span = sum((n - 1) * abs(s) for n, s in zip(shape, strides) if n) + dt.itemsize
    ptr = _next[0]
    _next[0] += (span + offset + 511) // 256 * 256
    return DeviceArray._view(ptr + offset, shape, strides, dt, device, _Buffer(ptr), None)


def nk(groups, k, n, dtype=BF16, device=DEV):
    """The transposed view of a (G, N, K) array: w of shape (G, K, N) with K contiguous."""
    item = np.dtype(dtype).itemsize
    return fake((groups, k, n), dtype, device, strides=(n * k * item, item, k * item))


class _Launches(list):
    """The launches a test made, ``(name, grid, block, args)`` each; their dynamic shared
    memory in :attr:`shared`, in the same order."""

    def __init__(self):
        super().__init__()
        self.shared = []


def _no_maps(*args, **kwargs):
    raise AssertionError("a Hopper kernel's tensor maps were encoded in a test that expects "
                         "none (ask for the `maps` fixture)")


@pytest.fixture()
def launches(monkeypatch):
    calls = _Launches()

    def record(device, name, grid, block, args, stream, shared_mem=0):
        calls.append((name, grid, block, args))
        calls.shared.append(shared_mem)

    monkeypatch.setattr(ptxlib, "launch", record)
    # A Hopper launch where a test expects the sm_80 kernel fails loudly (not through the
    # fallback a refused map takes).
    monkeypatch.setattr(grouped90, "encode_tiled", _no_maps)
    yield calls
    plan_cache.clear(kernels.GROUPED_MM_KEY.name)
    plan_cache.clear(kernels.GROUPED_MM_WGRAD_KEY.name)
    plan_cache.clear(cublas.GROUPED_KEY.name)


_SIGS = {}


@pytest.fixture()
def maps(monkeypatch):
    """cuTensorMapEncodeTiled stood in for (its rules checked for real by check_tiled): the
    arguments of each map encoded, ``(dtype, address, dims, strides, box, swizzle, device)``;
    a map's bytes are its address (8 bytes) then its number among the maps encoded."""
    calls = []

    def encode(dtype, address, dims, strides, box, *, swizzle=128, l2_promotion=256,
               device=None):
        tensormap.check_tiled(dtype, address, dims, strides, box, swizzle=swizzle,
                               l2_promotion=l2_promotion)
        calls.append((np.dtype(dtype), address, tuple(dims), tuple(strides), tuple(box),
                      swizzle, device))
        return fake_map(address, len(calls))

    monkeypatch.setattr(grouped90, "encode_tiled", encode)
    return calls


def fake_map(address, number):
    """The bytes of the `maps` fixture's map number ``number`` (from 1), of ``address``."""
    return address.to_bytes(8, "little") + bytes([number % 256]) * 120


def _packs(name, args):
    """The arguments fit the kernel's PTX parameters."""
    if not _SIGS:
        _SIGS.update(_params.parse_entries(P.read_ptx("grouped")))
        _SIGS.update(_params.parse_entries(P.read_ptx("grouped90")))

    def no_objects(a, p):
        raise AssertionError(f"{name} argument {p.index} is {type(a).__name__}")

    _params.ParamBlock(_SIGS[name], name, no_objects).write(tuple(args))


# -- the build and the loader -------------------------------------------------------------------
def test_the_grouped_files_are_built_for_sm80_and_sm90a_and_the_others_for_sm75():
    build = _build_script()
    assert P.target("grouped") == "sm_80" and P.compute_capability("grouped") == (8, 0)
    assert not P.arch_specific("grouped")
    assert build.nvcc_flags("grouped")[0] == "-arch=compute_80"
    # the Hopper kernels: an architecture-specific target, for compute capability 9.0 only
    assert P.target("grouped90") == "sm_90a" and P.compute_capability("grouped90") == (9, 0)
    assert P.arch_specific("grouped90")
    assert build.nvcc_flags("grouped90") == ("-arch=compute_90a",) + build.NVCC_FLAGS[1:]
    others = [s for s in P.ENTRIES if s not in ("grouped", "grouped90")]
    assert others and all(P.target(s) == "sm_75" for s in others)
    assert not any(P.arch_specific(s) for s in others)
    assert all(build.nvcc_flags(s) == build.NVCC_FLAGS for s in others)
    text = P.read_ptx("grouped").decode()
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in text
    assert "cp.async.cg.shared.global" in text and "ldmatrix.sync.aligned" in text
    text = P.read_ptx("grouped90").decode()
    assert "\n.target sm_90a\n" in text and "\n.version 8.0\n" in text
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in text
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16" in text
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes" in text
    assert "cp.async.bulk.global.shared::cta.bulk_group" in text
    # the validation assembles it for its own target, read from the text
    assert build._TARGET_RE.search(text).group(1) == "sm_90a"


def _fake_loads(monkeypatch) -> list:
    """Module loads recorded (the devices), not made: a "module" maps every kernel name of
    the library to itself.  The caller clears ptxlib's cache when done."""
    loaded = []

    def from_ptx(src, device=None):
        loaded.append(device)
        return {name: name for names in P.ENTRIES.values() for name in names}

    monkeypatch.setattr(ptxlib.Module, "from_ptx", staticmethod(from_ptx))
    ptxlib.clear_cache()
    return loaded


def test_the_loader_refuses_grouped_kernels_on_gpus_before_sm80(monkeypatch):
    loaded = _fake_loads(monkeypatch)
    try:
        for name in ("grouped_mm_bf16_kn_m128_bf16", "grouped_ptrs"):
            with pytest.raises(cl.CudaLibsError, match=r"grouped\.ptx is built for sm_80 and "
                                                       r"needs compute capability 8\.0 or "
                                                       r"newer; device 5 has 7\.5"):
                ptxlib.kernel(OLD, name)
        assert loaded == []
        # an sm_75 file loads on the same GPU
        assert ptxlib.kernel(OLD, "transpose_b16") == "transpose_b16"
        assert loaded == [OLD]
    finally:
        ptxlib.clear_cache()


@pytest.mark.parametrize("cc", [(7, 5), (8, 0), (8, 9), (10, 0), (12, 0)])
def test_the_loader_runs_sm90a_kernels_on_compute_capability_9_0_only(monkeypatch, cc):
    """An "a" target's code is not forward compatible: refused on newer GPUs as on older."""
    loaded = _fake_loads(monkeypatch)
    name = "grouped90_bf16_kn_m128n256s_bf16"
    try:
        other = _Device(7, cc=cc)
        with pytest.raises(cl.CudaLibsError, match=rf"grouped90\.ptx is built for sm_90a, whose "
                                                   rf"code runs on compute capability 9\.0 only "
                                                   rf".*device 7 has {cc[0]}\.{cc[1]}"):
            ptxlib.kernel(other, name)
        assert loaded == []
        hopper = _Device(8, cc=(9, 0))
        assert ptxlib.kernel(hopper, name) == name and loaded == [hopper]
    finally:
        ptxlib.clear_cache()


# -- kernels.grouped_mm: launch arguments -------------------------------------------------------
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("out_f32", [False, True])
@pytest.mark.parametrize("offs_dtype, cumulative", [(I32, False), (I64, True), (I32, True)])
def test_grouped_mm_launch_arguments(launches, dtype, layout, out_f32, offs_dtype, cumulative):
    # The sm_80 kernel, on an sm_80 GPU (on 9.0 the Hopper kernels come first:
    # test_grouped90.py checks their launches).
    groups, rows, k, n = 5, 1000, 64, 264
    x = fake((rows, k + 8), dtype, AMPERE)[:, :k]         # rows padded by 8 elements
    w = (fake((groups, k, n), dtype, AMPERE) if layout == "kn"
         else nk(groups, k, n, dtype, AMPERE))
    odt = F32 if out_f32 else dtype
    out = fake((rows, n), odt, AMPERE)
    offs = fake((groups + 1 if cumulative else groups,), offs_dtype, AMPERE)
    assert kernels.grouped_mm(x, w, offs, out) is out
    (name, grid, block, args), = launches
    suffix = "bf16" if dtype == BF16 else "f16"
    tile = name.split("_")[4]
    assert name == f"grouped_mm_{suffix}_{layout}_{tile}_{'f32' if out_f32 else suffix}"
    bm = {"m128": 128, "m64": 64}[tile]
    assert grid == ((rows + groups * (bm - 1)) // bm * 3, 1, 1) and block == (256, 1, 1)
    flags = (offs_dtype == I64) | (2 if cumulative else 0)
    ldw = n if layout == "kn" else k
    assert args == (x.address, w.address, out.address, offs.address, flags, groups, rows, n,
                    k, k + 8, ldw, k * n, n)
    _packs(name, args)
    # a second call of the shape: the same plan, the same launch
    kernels.grouped_mm(x, w, offs, out)
    assert launches[1] == launches[0]
    assert len(plan_cache.entries(kernels.GROUPED_MM_KEY.name)) == 1


def test_grouped_mm_plan_heuristic_and_execute(launches):
    # The sm_80 tiles' order, on an sm_80 GPU (on 9.0 they follow the Hopper tiles, in this
    # order: test_grouped90.py).  64 experts sharing 4096 rows: 64 rows a group, the 64-row
    # tiles first.
    A = AMPERE
    small = kernels.GroupedMM(fake((4096, 128), BF16, A), fake((64, 128, 256), BF16, A),
                              fake((65,), I32, A), fake((4096, 256), BF16, A)).plan()
    assert [c["id"] for c in small.candidates] == ["m64", "m128"]
    x, w, offs, out = (fake((16384, 512), BF16, A), fake((8, 512, 1024), BF16, A),
                       fake((8,), I64, A), fake((16384, 1024), BF16, A))
    big = kernels.GroupedMM(x, w, offs, out).plan()
    assert [c["id"] for c in big.candidates] == ["m128", "m64"]
    assert "8 groups, capacity 16384 rows" in repr(big) and "128x128 tiles" in repr(big)
    big.select(1)
    assert big.execute(x, w, offs, out) is out
    assert launches[-1][0] == "grouped_mm_bf16_kn_m64_bf16"
    with pytest.raises(ValueError, match="not the plan's"):
        big.execute(x, nk(8, 512, 1024, device=A), offs, out)
    with pytest.raises(TypeError, match="out has dtype float32"):
        big.execute(x, w, offs, fake((16384, 1024), F32, A))
    big.close()
    with pytest.raises(cl.ClosedError):
        big.execute(x, w, offs, out)


def _refused(launches, exc, match, *args, **kwargs):
    with pytest.raises(exc, match=match):
        kernels.grouped_mm(*args, **kwargs)
    assert launches == []


def test_grouped_mm_refuses_bad_input_before_any_launch(launches):
    g, rows, k, n = 4, 300, 32, 64
    x, w, out = fake((rows, k), BF16), fake((g, k, n), BF16), fake((rows, n), BF16)
    offs = fake((g + 1,), I32)
    # groups and offsets
    _refused(launches, ValueError, "offsets has 6 entries; w has 4 groups", x, w,
             fake((g + 2,), I32), out)
    _refused(launches, TypeError, "offsets has dtype float32", x, w, fake((g + 1,), F32), out)
    _refused(launches, ValueError, "offsets must have 1 dimensions", x, w,
             fake((g + 1, 1), I32), out)
    _refused(launches, ValueError, "no groups", x, fake((0, k, n), BF16), offs, out)
    # host offsets: checked, never copied when wrong
    _refused(launches, ValueError, "beyond the capacity of x \\(300 rows\\)", x, w,
             [0, 100, 200, 300, 301], out)
    _refused(launches, ValueError, "decrease", x, w, [0, 100, 50, 200, 300], out)
    _refused(launches, ValueError, "below row 0", x, w, [-1, 100, 150, 200, 300], out)
    _refused(launches, ValueError, "5 \\(cumulative offsets\\) or 4", x, w, [0, 300], out)
    _refused(launches, TypeError, "sequence of ints", x, w, [0.0, 1.5, 2, 3, 4], out)
    # shapes, dtypes, layouts
    _refused(launches, ValueError, "inner dimensions differ", x, fake((g, k + 8, n), BF16),
             offs, out)
    _refused(launches, TypeError, "x is bfloat16 but w is float16", x,
             fake((g, k, n), F16), offs, out)
    _refused(launches, TypeError, "supported: bfloat16, float16", fake((rows, k), F32),
             fake((g, k, n), F32), offs)
    _refused(launches, ValueError, "multiples of 8", fake((rows, 12), BF16),
             fake((g, 12, n), BF16), offs, out)
    _refused(launches, ValueError, "unit stride in its last dimension",
             fake((rows, 2 * k), BF16)[:, ::2], w, offs, out)
    _refused(launches, ValueError, "row stride", fake((rows, k + 4), BF16)[:, :k], w, offs,
             out)
    _refused(launches, ValueError, "unit stride in one of its last two", x,
             fake((g, 2 * k, 2 * n), BF16)[:, ::2, ::2], offs, out)
    _refused(launches, ValueError, "16-byte aligned", fake((rows, k), BF16, offset=2), w,
             offs, out)
    _refused(launches, ValueError, r"out has shape \(300, 72\)", x, w, offs,
             fake((rows, n + 8), BF16))
    _refused(launches, TypeError, "must be bfloat16 or float32", x, w, offs,
             fake((rows, n), F16))
    _refused(launches, TypeError, "out has dtype bfloat16 but out_dtype is float32", x, w,
             offs, out, out_dtype=np.float32)
    _refused(launches, ValueError, "out overlaps x", x, w, offs,
             DeviceArray._view(x.address, (rows, n), (2 * n, 2), dtypes.lookup(BF16), DEV,
                               _Buffer(x.address), None))
    # devices
    _refused(launches, ValueError, "device 1", x, fake((g, k, n), BF16, DEV1), offs, out)
    _refused(launches, ValueError, "device 1", x, w, fake((g + 1,), I32, DEV1), out)
    with pytest.raises(cl.CudaLibsError, match="compute capability 8.0"):
        kernels.GroupedMM(fake((rows, k), BF16, OLD), fake((g, k, n), BF16, OLD),
                          fake((g + 1,), I32, OLD), fake((rows, n), BF16, OLD))
    with pytest.raises(TypeError, match="host numpy array"):
        kernels.grouped_mm(np.zeros((rows, k), np.float16), w, offs, out)
    assert launches == []


# -- kernels.grouped_mm_wgrad: launch arguments, groups, refusals -------------------------------
def _wgrad_out(groups, k, n, dtype, layout, device=DEV):
    """dw's stand-in: (G, K, N) with N contiguous, or the transposed view of a (G, N, K)."""
    return (fake((groups, k, n), dtype, device) if layout == "kn"
            else nk(groups, k, n, dtype, device))


@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("out_f32", [False, True])
@pytest.mark.parametrize("offs_dtype, cumulative", [(I32, False), (I64, True), (I32, True)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_grouped_mm_wgrad_launch_arguments(launches, dtype, layout, out_f32, offs_dtype,
                                           cumulative, accumulate):
    # The sm_80 kernel, on an sm_80 GPU (on 9.0 the Hopper kernels come first:
    # test_grouped90.py checks their launches).
    A = AMPERE
    groups, rows, k, n = 5, 1000, 264, 136
    x = fake((rows, k + 8), dtype, A)[:, :k]              # rows padded
    dy = fake((rows, n + 16), dtype, A)[:, :n]
    odt = F32 if out_f32 else dtype
    out = _wgrad_out(groups, k, n, odt, layout, A)
    offs = fake((groups + 1 if cumulative else groups,), offs_dtype, A)
    assert kernels.grouped_mm_wgrad(x, dy, offs, out, accumulate=accumulate) is out
    (name, grid, block, args), = launches
    suffix = "bf16" if dtype == BF16 else "f16"
    tile = name.split("_")[3]
    assert name == f"grouped_wgrad_{suffix}_{tile}_{'f32' if out_f32 else suffix}"
    bm = {"m128": 128, "m64": 64}[tile]
    # the transposed view is written as dw[g]^T = dy_g^T @ x_g: the operands swap
    m, cols, a, b, lda, ldb, ldo = ((k, n, x.address, dy.address, k + 8, n + 16, n)
                                    if layout == "kn" else
                                    (n, k, dy.address, x.address, n + 16, k + 8, k))
    assert grid == (groups * -(-m // bm) * -(-cols // 128), 1, 1) and block == (256, 1, 1)
    flags = (offs_dtype == I64) | (2 if cumulative else 0) | (4 if accumulate else 0)
    assert args == (a, b, out.address, offs.address, flags, groups, rows, m, cols, lda, ldb,
                    k * n, ldo)
    _packs(name, args)
    # a second call of the shape: the same plan, the same launch
    kernels.grouped_mm_wgrad(x, dy, offs, out, accumulate=accumulate)
    assert launches[1] == launches[0]
    assert len(plan_cache.entries(kernels.GROUPED_MM_WGRAD_KEY.name)) == 1


def test_grouped_mm_wgrad_groups_dtypes_and_heuristic(launches):
    # The sm_80 tiles' order, on an sm_80 GPU (on 9.0 they follow the Hopper tiles, in this
    # order: test_grouped90.py).
    A = AMPERE
    rows, k, n = 4096, 256, 256
    x, dy = fake((rows, k), BF16, A), fake((rows, n), BF16, A)
    # G: len(offsets) (torch's G ends), else groups=, else out's first dimension
    p = kernels.GroupedMMWgrad(x, dy, fake((4,), I32, A))
    assert (p.groups, p.flags, p.out_dtype) == (4, 0, F32)    # float32 by default
    p = kernels.GroupedMMWgrad(x, dy, fake((4,), I64, A), groups=3, out_dtype=BF16)
    assert (p.groups, p.flags, p.out_dtype) == (3, 3, BF16)
    p = kernels.GroupedMMWgrad(x, dy, fake((4,), I32, A), fake((3, k, n), F32, A))
    assert (p.groups, p.flags) == (3, 2)
    # 3 x 2 x 2 tiles of 128: under two waves of 108 SMs, so the 64-row tiles first
    assert [c["id"] for c in p.plan().candidates] == ["m64", "m128"]
    big_x, big_dy = fake((16384, 4096), BF16, A), fake((16384, 1408), BF16, A)
    big_out = fake((8, 4096, 1408), F32, A)
    offs = fake((8,), I32, A)
    big = kernels.GroupedMMWgrad(big_x, big_dy, offs, big_out).plan()
    assert [c["id"] for c in big.candidates] == ["m128", "m64"]
    assert "8 groups, capacity 16384 rows, K=4096 N=1408 bfloat16->float32 out kn" in repr(big)
    assert "128x128 tiles" in repr(big)
    big.select(1)
    assert big.execute(big_x, big_dy, offs, big_out, accumulate=True) is big_out
    name, grid, _, args = launches[-1]
    assert name == "grouped_wgrad_bf16_m64_f32" and grid == (8 * 64 * 11, 1, 1)
    assert args[4] == 4
    with pytest.raises(ValueError, match="not the plan's"):
        big.execute(big_x, big_dy, offs, nk(8, 4096, 1408, F32, A))
    with pytest.raises(ValueError, match="out must be given"):
        big.execute(big_x, big_dy, offs, accumulate=True)
    with pytest.raises(TypeError, match="accumulate must be a bool"):
        big.execute(big_x, big_dy, offs, big_out, accumulate=1)
    big.close()
    with pytest.raises(cl.ClosedError):
        big.execute(big_x, big_dy, offs, big_out)
    # no rows: zeros written, nothing to add; no K or N: nothing to write
    launches.clear()
    ex, edy, eo = fake((0, k), BF16, A), fake((0, n), BF16, A), fake((2, k, n), F32, A)
    kernels.grouped_mm_wgrad(ex, edy, fake((2,), I32, A), eo)
    assert len(launches) == 1
    kernels.grouped_mm_wgrad(ex, edy, fake((2,), I32, A), eo, accumulate=True)
    kernels.grouped_mm_wgrad(fake((64, 0), BF16, A), fake((64, n), BF16, A),
                             fake((2,), I32, A), fake((2, 0, n), F32, A))
    assert len(launches) == 1


@pytest.mark.parametrize("device", [AMPERE, DEV], ids=["sm80", "sm90"])
def test_grouped_mm_backward_is_two_launches(monkeypatch, launches, maps, device):
    """dx = dy @ w[g]^T (grouped_mm on w's transposed view, into a zeroed dx), then dw; on
    compute capability 9.0 both are Hopper kernels', with the maps of dy and of w^T, then of
    x and dy."""
    g, rows, k, n = 3, 500, 64, 136
    x, dy = fake((rows, k), BF16, device), fake((rows, n), BF16, device)
    w = fake((g, k, n), BF16, device)
    offs = fake((g + 1,), I64, device)
    made = []

    def new(shape, dtype, device=None, stream=None):
        made.append(fake(shape, dtype, device))
        return made[-1]

    monkeypatch.setattr(importlib.import_module("cudalibs.kernels.grouped"), "zeros", new)
    monkeypatch.setattr(importlib.import_module("cudalibs.kernels._grouped"), "empty", new)
    dx, dw = kernels.grouped_mm_backward(x, w, dy, offs)
    assert [a.shape for a in made] == [(rows, k), (g, k, n)] and [dx, dw] == made
    assert dx.dtype == BF16 and dw.dtype == F32
    (mm, _, _, mm_args), (wg, _, _, wg_args) = launches
    prefix = "grouped90_bf16_nk_m128n256s" if device is DEV else "grouped_mm_bf16_nk_"
    assert mm.startswith(prefix) and mm.endswith("_bf16")
    assert mm_args[:13] == (dy.address, w.address, dx.address, offs.address, 3, g, rows, k, n,
                            n, n, k * n, k)
    if device is DEV:
        # the product's K is n, its N is k; w^T is (G, n, k) with n contiguous: "nk", dims
        # {n, k, G} innermost first; then dw = x^T dy: x {k, rows} and dy {n, rows} by 64 x 64
        assert [m[1:5] for m in maps] == [
            (dy.address, (n, rows), (2 * n,), (64, 128)),
            (w.address, (n, k, g), (2 * n, 2 * k * n), (64, 256, 1)),
            (x.address, (k, rows), (2 * k,), (64, 64)),
            (dy.address, (n, rows), (2 * n,), (64, 64))]
        assert mm_args[13:] == (fake_map(dy.address, 1), fake_map(w.address, 2))
        assert wg == "grouped90_wgrad_bf16_m128n256_f32"
        assert wg_args[13:] == (fake_map(x.address, 3), fake_map(dy.address, 4))
    else:
        assert len(mm_args) == 13 and maps == []
        assert wg.startswith("grouped_wgrad_bf16_") and wg.endswith("_f32")
        assert len(wg_args) == 13
    _packs(mm, mm_args)
    _packs(wg, wg_args)
    assert wg_args[:13] == (x.address, dy.address, dw.address, offs.address, 3, g, rows, k, n,
                            k, n, k * n, n)
    plan_cache.clear(kernels.GROUPED_MM_KEY.name)


def _wrefused(launches, exc, match, *args, fn=None, **kwargs):
    with pytest.raises(exc, match=match):
        (fn or kernels.grouped_mm_wgrad)(*args, **kwargs)
    assert launches == []


def test_grouped_mm_wgrad_refuses_bad_input_before_any_launch(launches):
    g, rows, k, n = 4, 300, 32, 64
    x, dy, out = fake((rows, k), BF16), fake((rows, n), BF16), fake((g, k, n), F32)
    offs = fake((g + 1,), I32)
    # operands
    _wrefused(launches, TypeError, "x is bfloat16 but dy is float16", x, fake((rows, n), F16),
              offs, out)
    _wrefused(launches, ValueError, "x has 300 rows but dy has 299", x,
              fake((rows - 1, n), BF16), offs, out)
    _wrefused(launches, ValueError, "multiples of 8", x, fake((rows, 12), BF16), offs,
              fake((g, k, 12), F32))
    _wrefused(launches, TypeError, "supported: bfloat16, float16", fake((rows, k), F32),
              fake((rows, n), F32), offs)
    _wrefused(launches, ValueError, "dy must have unit stride in its last dimension", x,
              fake((rows, 2 * n), BF16)[:, ::2], offs, out)
    _wrefused(launches, ValueError, "dy has a row stride", x, fake((rows, n + 4), BF16)[:, :n],
              offs, out)
    _wrefused(launches, ValueError, "x starts at an address that is not 16-byte aligned",
              fake((rows, k), BF16, offset=2), dy, offs, out)
    _wrefused(launches, ValueError, "device 1", x, fake((rows, n), BF16, DEV1), offs, out)
    # the output
    _wrefused(launches, ValueError, r"out has shape \(4, 32, 72\); the gradient is "
              r"\(4, 32, 64\)", x, dy, offs, fake((g, k, n + 8), F32))
    _wrefused(launches, ValueError, "out must have unit stride in one of its last two", x, dy,
              offs, fake((g, 2 * k, 2 * n), F32)[:, ::2, ::2])
    _wrefused(launches, ValueError, "out's group stride", x, dy, offs,
              fake((g, k, n), F32, strides=(k * n * 4 + 4, n * 4, 4)))
    _wrefused(launches, ValueError, "out starts at an address", x, dy, offs,
              fake((g, k, n), F32, offset=8))
    _wrefused(launches, TypeError, "must be float32 or bfloat16, not float16", x, dy, offs,
              fake((g, k, n), F16))
    _wrefused(launches, TypeError, "must be float32 or bfloat16, not float64", x, dy, offs,
              out_dtype=np.float64)
    _wrefused(launches, TypeError, "out has dtype float32 but out_dtype is bfloat16", x, dy,
              offs, out, out_dtype=BF16)
    _wrefused(launches, ValueError, "out overlaps x", x, dy, offs,
              DeviceArray._view(x.address, (g, k, n), (k * n * 4, n * 4, 4),
                                dtypes.lookup(F32), DEV, _Buffer(x.address), None))
    _wrefused(launches, ValueError, "overlapping elements|share memory|overlap", x, dy, offs,
              fake((g, k, n), F32, strides=(0, n * 4, 4)))
    _wrefused(launches, ValueError, "out must be given", x, dy, offs, accumulate=True)
    _wrefused(launches, TypeError, "accumulate must be a bool", x, dy, offs, out,
              accumulate="yes")
    # groups and offsets
    _wrefused(launches, ValueError, "out has 4 groups .* but groups is 3", x, dy, offs, out,
              groups=3)
    _wrefused(launches, ValueError, "groups must be at least 1", x, dy, offs, groups=0)
    _wrefused(launches, TypeError, "groups must be an int, not float", x, dy, offs,
              groups=2.0)
    _wrefused(launches, TypeError, "groups must be an int, not bool", x, dy, offs, groups=True)
    _wrefused(launches, ValueError, "offsets has 6 entries; out has 4 groups", x, dy,
              fake((g + 2,), I32), out)
    _wrefused(launches, ValueError, "offsets has 6 entries; there are 4 groups", x, dy,
              fake((g + 2,), I32), groups=g)
    _wrefused(launches, ValueError, "no groups: offsets is empty", x, dy, fake((0,), I32))
    _wrefused(launches, TypeError, "offsets has dtype float32", x, dy, fake((g,), F32))
    _wrefused(launches, ValueError, "device 1", x, dy, fake((g,), I32, DEV1))
    _wrefused(launches, ValueError, "decrease", x, dy, [0, 100, 50, 200, 300], out)
    _wrefused(launches, ValueError, "beyond the capacity of x", x, dy, [100, 200, 301],
              groups=3)
    _wrefused(launches, TypeError, "sequence of ints", x, dy, [0.0, 1.5], groups=1)
    # the plan and the backward refuse the same way, and an old GPU
    _wrefused(launches, ValueError, "x has 300 rows but dy has 299", x,
              fake((rows - 1, n), BF16), offs, fn=kernels.GroupedMMWgrad)
    with pytest.raises(cl.CudaLibsError, match="compute capability 8.0"):
        kernels.GroupedMMWgrad(fake((rows, k), BF16, OLD), fake((rows, n), BF16, OLD),
                               fake((g,), I32, OLD))
    w = fake((g, k, n), BF16)
    back = kernels.grouped_mm_backward
    _wrefused(launches, ValueError, r"w has shape \(4, 40, 64\)", x, fake((g, k + 8, n), BF16),
              dy, offs, fn=back)
    _wrefused(launches, ValueError, r"w has shape \(4, 32, 72\)", x, fake((g, k, n + 8), BF16),
              dy, offs, fn=back)
    _wrefused(launches, ValueError, "w has no groups", x, fake((0, k, n), BF16), dy, offs,
              fn=back)
    _wrefused(launches, TypeError, "x is bfloat16 but w is float16", x, fake((g, k, n), F16),
              dy, offs, fn=back)
    _wrefused(launches, ValueError, "offsets has 6 entries", x, w, dy, fake((g + 2,), I32),
              fn=back)
    _wrefused(launches, ValueError, "w must have unit stride in one of its last two", x,
              fake((g, 2 * k, 2 * n), BF16)[:, ::2, ::2], dy, offs, fn=back)
    _wrefused(launches, TypeError, "must be float32 or bfloat16, not float16", x, w, dy, offs,
              dw_dtype=F16, fn=back)


# -- cublas.gemm_grouped: host arrays and pointers ----------------------------------------------
def _groups(shapes, layouts, dtype=BF16, device=DEV):
    """``a``, ``b`` lists of stand-ins: ``(m, n, k)`` per group, each operand "C" or "T"."""
    a, b = [], []
    for (m, n, k), (la, lb) in zip(shapes, layouts):
        a.append(fake((m, k), dtype, device) if la == "C" else fake((k, m), dtype, device).T)
        b.append(fake((k, n), dtype, device) if lb == "C" else fake((n, k), dtype, device).T)
    return a, b


def test_gemm_grouped_prepares_its_host_arrays():
    shapes = [(30, 20, 16), (30, 20, 16), (0, 8, 8), (7, 5, 3), (30, 20, 16), (4, 0, 2)]
    layouts = [("C", "C"), ("C", "C"), ("C", "C"), ("T", "T"), ("C", "C"), ("C", "C")]
    a, b = _groups(shapes, layouts)
    p = cublas.GroupedGemm(a, b)
    N_, T_ = _lib.CUBLAS_OP_N, _lib.CUBLAS_OP_T
    assert p.active == (0, 1, 3, 4) and p.group_count == 3
    got = [list(arr[:3]) for arr in (p.transa, p.transb, p.m, p.n, p.k, p.lda, p.ldb, p.ldc,
                                     p.group_size)]
    # cuBLAS's A is b (m and n swap); a transposed view is a T flag with its column stride
    assert got == [[N_, T_, N_], [N_, T_, N_], [20, 5, 20], [30, 7, 30], [16, 3, 16],
                   [20, 3, 20], [16, 7, 16], [20, 5, 20], [2, 1, 1]]
    assert list(p.one[:3]) == [1.0] * 3 and list(p.zero[:3]) == [0.0] * 3
    assert "6 groups (4 products in 3 cuBLAS groups) bfloat16->bfloat16" in repr(p)
    assert p.candidates == [] and p.plan().candidates[0]["name"] == "cublasGemmGroupedBatchedEx"


def test_gemm_grouped_builds_its_pointer_arrays_on_the_device(monkeypatch, launches):
    """A call queues grouped_ptrs with the addresses by value (b's, a's, out's, in group
    order, empty groups left out), then one cublasGemmGroupedBatchedEx reading them."""
    shapes = [(3, 4, 5), (0, 4, 5)] + [(2, 8, 8)] * 299
    a, b = _groups(shapes, [("C", "C")] * len(shapes))
    outs = [fake((m, n), BF16) for m, n, _ in shapes]
    table = types.SimpleNamespace(address=1 << 44, close=lambda: None)
    monkeypatch.setattr(grouped_blas, "empty", lambda shape, dtype, device, stream: table)
    monkeypatch.setattr(grouped_blas, "cublas_handle", lambda device, stream: "handle")
    monkeypatch.setattr(grouped_blas._drv, "get", lambda: types.SimpleNamespace(
        cuCtxSetCurrent=lambda ctx: 0))
    monkeypatch.setattr(DEV, "raw_context", None, raising=False)
    calls = []
    p = cublas.GroupedGemm(a, b, outs)
    p.fn = lambda *args: calls.append(args) or 0
    assert grouped_blas._execute(p, a, b, outs, 1, 0, None) is outs
    act = [i for i, (m, n, _) in enumerate(shapes) if m and n]
    want = [b[i].address for i in act] + [a[i].address for i in act] + \
        [outs[i].address for i in act]
    got = []
    for name, grid, block, (dst, count, raw) in launches:
        assert name == "grouped_ptrs" and grid == (1, 1, 1) and block == (256, 1, 1)
        _packs(name, (dst, count, raw))
        assert dst == table.address + 8 * len(got)
        got += list(np.frombuffer(raw, np.uint64)[:count])
    assert got == want and len(launches) == 4       # 900 addresses, 256 a launch
    (h, ta, tb, m, n, k, alpha, pa, at, lda, pb, bt, ldb, beta, pc, ct, ldc, gc, gs,
     comp), = calls
    n_act = len(act)
    assert (h, pa.value, pb.value, pc.value) == ("handle", table.address,
                                                 table.address + 8 * n_act,
                                                 table.address + 16 * n_act)
    assert gc == 2 and list(gs[:2]) == [1, 299]
    assert at == bt == ct == dtypes.lookup(BF16).cuda


def test_gemm_grouped_refuses_bad_input(launches):
    a, b = _groups([(4, 8, 16), (5, 8, 16)], [("C", "C")] * 2)
    cases = [
        (TypeError, "does not take inputs of bfloat16 with an output of float32",
         (a, b, [fake((4, 8), F32), fake((5, 8), F32)]), {}),
        (TypeError, "a\\[1\\] is float16 but a\\[0\\] is bfloat16",
         ([a[0], fake((5, 16), F16)], b, None), {}),
        (TypeError, "fp8 is not among them",
         ([fake((4, 16), "float8_e4m3fn")], [fake((16, 8), "float8_e4m3fn")], None), {}),
        (ValueError, "a_list has 2 matrices but b_list has 1", (a, b[:1], None), {}),
        (ValueError, "a_list is empty", ([], [], None), {}),
        (ValueError, "out_list has 1 matrices", (a, b, [fake((4, 8), BF16)]), {}),
        (ValueError, "group 1: inner dimensions differ", (a, [b[0], fake((8, 8), BF16)], None),
         {}),
        (ValueError, r"out\[0\] has shape \(4, 9\)",
         (a, b, [fake((4, 9), BF16), fake((5, 8), BF16)]), {}),
        (ValueError, r"a\[0\] has no unit stride",
         ([fake((8, 32), BF16)[::2, ::2], a[1]], b, None), {}),
        (ValueError, "must be a matrix", ([fake((2, 4, 16), BF16), a[1]], b, None), {}),
        (ValueError, "b\\[1\\] is on device 1", (a, [b[0], fake((16, 8), BF16, DEV1)], None),
         {}),
        (TypeError, "compute must be a string", (a, b, None), {"compute": 32}),
        (TypeError, "compute='tf32'", (a, b, None), {"compute": "tf32"}),
        (TypeError, "host numpy array", ([np.ones((4, 16), np.float32)], [b[0]], None), {}),
    ]
    for exc, match, (al, bl, ol), kw in cases:
        with pytest.raises(exc, match=match):
            cublas.gemm_grouped(al, bl, ol, **kw)
    with pytest.raises(cl.CudaLibsError, match="compute capability 8.0"):
        cublas.GroupedGemm(*_groups([(4, 8, 16)], [("C", "C")], device=OLD))
    # overlapping outputs are refused when the call checks its operands (before any launch)
    p = cublas.GroupedGemm(a, b, [fake((4, 8), BF16), fake((5, 8), BF16)])
    shared = fake((5, 8), BF16)
    with pytest.raises(ValueError, match=r"out\[1\] overlaps out\[0\]"):
        grouped_blas._execute(p, a, b, [shared[:4], shared], 1, 0, None)
    with pytest.raises(ValueError, match=r"a\[0\] overlaps out\[0\]|out\[0\] overlaps a\[0\]"):
        grouped_blas._execute(p, a, b, [a[0][:, :8], fake((5, 8), BF16)], 1, 0, None)
    with pytest.raises(ValueError, match="beta != 0"):
        grouped_blas._execute(p, a, b, None, 1, 0.5, None)
    assert launches == []


def test_overlap_check_is_exact():
    """Inputs may share memory; an output may share it with nothing."""
    base = fake((64, 64), BF16)

    def view(row, rows):
        return base[row:row + rows]

    check = grouped_blas._check_overlaps
    check("t", [view(0, 8), view(8, 8)], ([view(16, 8), view(16, 8)], [view(20, 30)]))
    for outs, ins in (([view(0, 8), view(7, 2)], ([], [])),
                      ([view(40, 1)], ([view(0, 64)], [])),
                      ([view(0, 64)], ([], [view(63, 1)])),
                      ([view(10, 1), view(0, 8)], ([view(30, 30)], [view(5, 1)]))):
        with pytest.raises(ValueError, match="overlaps"):
            check("t", outs, ins)


# -- cublas.GroupedGemm: its two candidates -----------------------------------------------------
def _ids(p):
    return [c["id"] for c in p.plan().candidates]


def test_gemm_grouped_heuristic_orders_its_candidates_by_the_mean_product():
    """Per-group GEMMs first when the mean m*n*k of the products made (empty groups left
    out) reaches PER_GROUP_MNK, the one grouped call first below it."""
    limit = grouped_blas.PER_GROUP_MNK
    assert limit == 1 << 32
    small = cublas.GroupedGemm(*_groups([(256, 1408, 2048)] * 64, [("C", "C")] * 64))
    assert small.mean_mnk < limit and _ids(small) == ["grouped", "per_group"]
    assert small.choice == 0 and not small.per_group
    big = [(1024, 14336, 4096)] * 7 + [(0, 14336, 4096)]
    p = cublas.GroupedGemm(*_groups(big, [("C", "T")] * 8))
    assert p.mean_mnk == 1024 * 14336 * 4096 and _ids(p) == ["per_group", "grouped"]
    assert p.per_group and p.candidates[0]["name"] == "per-group GEMMs"
    # at the threshold, just below it, and a mean over unequal groups
    at = cublas.GroupedGemm(*_groups([(256, 4096, 4096)], [("C", "C")]))
    below = cublas.GroupedGemm(*_groups([(255, 4096, 4096)], [("C", "C")]))
    mixed = cublas.GroupedGemm(*_groups([(512, 4096, 4096), (8, 4096, 4096)], [("C", "C")] * 2))
    assert _ids(at)[0] == "per_group" and _ids(below)[0] == "grouped"
    assert mixed.mean_mnk == 260 * 4096 * 4096 and _ids(mixed)[0] == "per_group"
    # select() switches; a choice is by index into candidates
    p.select(1)
    assert not p.per_group and p.choice == 1
    p.select(0)
    assert p.per_group
    # no product at all: the grouped call first (it returns at once)
    empty = cublas.GroupedGemm(*_groups([(0, 8, 8)], [("C", "C")]))
    assert _ids(empty)[0] == "grouped"


def test_gemm_grouped_per_group_queues_one_prepared_gemm_per_product(monkeypatch, launches):
    """The per-group candidate makes one GemmPlan per distinct layout on its first run, then
    queues one GEMM per product with nothing else: no pointer arrays, no new plans."""
    made, calls, routes = [], [], []

    class FakeGemmPlan:
        def __init__(self, a, b, out, *, compute=None):
            made.append((a.shape, a.strides, b.shape, b.strides, out.shape, compute))
            self.closed = False

        def close(self):
            self.closed = True

        def relaunch_slots(self):
            return []

    monkeypatch.setattr(grouped_blas, "GemmPlan", FakeGemmPlan)
    monkeypatch.setattr(grouped_blas, "prepare_route", routes.append)
    monkeypatch.setattr(grouped_blas, "run_matched",
                        lambda gp, a, b, o, alpha, beta, s: calls.append((gp, a, b, o, alpha,
                                                                          beta)))
    shapes = [(30, 20, 16), (0, 20, 16), (30, 20, 16), (7, 5, 3), (30, 20, 16)]
    layouts = [("C", "C"), ("C", "C"), ("C", "C"), ("T", "T"), ("C", "T")]
    a, b = _groups(shapes, layouts)
    outs = [fake((m, n), BF16) for m, n, _ in shapes]
    p = cublas.GroupedGemm(a, b, outs)
    p.select(_ids(p).index("per_group"))
    for _ in range(2):
        assert grouped_blas._execute(p, a, b, outs, 0.5, 0, None) is outs
    # three layouts among the four products: three plans, made once, routes prepared
    assert len(made) == 3 and len(routes) == 3
    assert [m[0] for m in made] == [(30, 16), (7, 3), (30, 16)]
    act = [0, 2, 3, 4]
    assert [(c[1], c[2], c[3]) for c in calls] == [(a[i], b[i], outs[i]) for i in act] * 2
    assert calls[0][0] is calls[1][0] and calls[0][0] is not calls[3][0]
    assert all(c[4:] == (0.5, 0) for c in calls)
    assert launches == []           # no grouped_ptrs: pointer arrays are the grouped call's
    # explicit per_group=False runs the grouped call whatever the choice (the timing path)
    p.fn = lambda *args: 0
    monkeypatch.setattr(grouped_blas, "empty", lambda shape, dtype, device, stream:
                        types.SimpleNamespace(address=1 << 44, close=lambda: None))
    monkeypatch.setattr(grouped_blas, "cublas_handle", lambda device, stream: "handle")
    monkeypatch.setattr(grouped_blas._drv, "get", lambda: types.SimpleNamespace(
        cuCtxSetCurrent=lambda ctx: 0))
    monkeypatch.setattr(DEV, "raw_context", None, raising=False)
    n = len(calls)
    grouped_blas._execute(p, a, b, outs, 1, 0, None, False)
    assert len(calls) == n and [x[0] for x in launches] == ["grouped_ptrs"]
    plans = list(p._children)
    p.close()
    assert all(gp.closed for gp in plans)


@pytest.mark.parametrize("rows, groups", [(16384, 64), (8192, 8), (5, 8), (0, 3), (100, 1)])
def test_autotune_times_equal_and_skewed_groups(rows, groups):
    from cudalibs.kernels._grouped import timing_ends
    even, skewed = timing_ends(rows, groups)
    for ends in (even, skewed):
        assert ends.shape == (groups + 1,) and ends[0] == 0 and ends[-1] == rows
        assert (np.diff(ends) >= 0).all()
    sizes = np.diff(skewed)
    if rows >= 16 * groups:
        # the first group is the largest, the shares fall as 1/rank
        assert sizes[0] == sizes.max() and sizes[0] > 2 * sizes[-1] or groups == 1
