"""The Hopper grouped GEMM and its weight gradient (``ptx/grouped90.cu``) without a GPU: the
tensor-map encoding (``cuTensorMapEncodeTiled``'s rules, checked before the call, and the call
itself through a ctypes stand-in of the prototype), GroupedMM's and GroupedMMWgrad's
candidates on compute capability 9.0 and where there are none (with the reasons), each Hopper
tile's launch (kernel, grid, shared memory, the 13 arguments of the sm_80 kernel and the two
maps, packed into the PTX signature), the per-plan map cache, and the fallback to the sm_80
kernel when the driver refuses a map.

Device arrays are stand-ins over fake addresses on fake devices (test_grouped.py's): launches
and the encoder are recorded, not made.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import types

import numpy as np
import pytest

from cudalibs import kernels
from cudalibs import ptx as P
from cudalibs.driver import _lib, tensormap
from cudalibs.errors import CudaError
from cudalibs.kernels import grouped90
from cudalibs.runtime.cache import cache as plan_cache

import test_grouped
from test_grouped import (AMPERE, BF16, DEV, F16, F32, I32, I64, _Device, _packs, fake,
                          fake_map, nk)

SM80_IDS = {"m128", "m64"}
#: test_grouped.py's fixtures, fixtures of this module too: the launches recorded (their
#: dynamic shared memory in ``.shared``) and the tensor maps encoded by a stand-in.
launches = test_grouped.launches
maps = test_grouped.maps


def _ids(p):
    return [c["id"] for c in p.plan().candidates]


def _operands(device=DEV, rows=1000, k=64, n=264, groups=5, dtype=BF16, layout="kn",
              out_dtype=None, pad=8, offs_dtype=I32, cumulative=False):
    x = fake((rows, k + pad), dtype, device)[:, :k]
    w = (fake((groups, k, n), dtype, device) if layout == "kn"
         else nk(groups, k, n, dtype, device))
    out = fake((rows, n), out_dtype or dtype, device)
    offs = fake((groups + 1 if cumulative else groups,), offs_dtype, device)
    return x, w, offs, out


@pytest.fixture(autouse=True)
def _clean_cache():
    yield
    plan_cache.clear(kernels.GROUPED_MM_KEY.name)
    plan_cache.clear(kernels.GROUPED_MM_WGRAD_KEY.name)


# -- the rules of cuTensorMapEncodeTiled --------------------------------------------------------
def test_check_tiled_returns_the_enums_of_a_valid_map():
    got = tensormap.check_tiled(BF16, 1 << 20, (64, 1000), (144,), (64, 128))
    assert got == (_lib.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 1 << 20, (64, 1000), (144,),
                   (64, 128), _lib.CU_TENSOR_MAP_SWIZZLE_128B,
                   _lib.CU_TENSOR_MAP_L2_PROMOTION_L2_256B)
    got = tensormap.check_tiled(F16, 256, [8, 3, 2**32], [16, 2**40 - 16], [8, 1, 1],
                                 swizzle=0, l2_promotion=0)
    assert got[0] == _lib.CU_TENSOR_MAP_DATA_TYPE_FLOAT16 and got[5:] == (0, 0)
    assert got[2] == (8, 3, 2**32) and got[3] == (16, 2**40 - 16)


@pytest.mark.parametrize("args, kwargs, exc, match", [
    ((F32, 256, (64,), (), (64,)), {}, TypeError, "element type float32 is not supported"),
    (("nope", 256, (64,), (), (64,)), {}, TypeError, "is not a dtype"),
    ((BF16, 256.0, (64,), (), (64,)), {}, TypeError, "address must be an int"),
    ((BF16, 256, (64.0,), (), (64,)), {}, TypeError, "dims must hold ints"),
    ((BF16, 256, 64, (), (64,)), {}, TypeError, "dims must be a sequence of ints"),
    ((BF16, 256, (), (), ()), {}, ValueError, "rank 0"),
    ((BF16, 256, (8,) * 6, (16,) * 5, (8,) * 6), {}, ValueError, "rank 6"),
    ((BF16, 256, (64, 2), (), (64, 1)), {}, ValueError, "strides has 0 entries; a map of "
                                                        "rank 2 needs 1"),
    ((BF16, 256, (64, 2), (128,), (64,)), {}, ValueError, "box has 1 entries"),
    ((BF16, 0, (64,), (), (64,)), {}, ValueError, "address 0x0 must be a non-null multiple"),
    ((BF16, 264, (64,), (), (64,)), {}, ValueError, "multiple of 16 bytes"),
    ((BF16, 256, (0, 4), (128,), (64, 1)), {}, ValueError, r"dims\[0\] = 0 must be in"),
    ((BF16, 256, (64, 2**32 + 1), (128,), (64, 1)), {}, ValueError, r"dims\[1\]"),
    ((BF16, 256, (64, 4), (136,), (64, 1)), {}, ValueError, r"strides\[0\] = 136 bytes"),
    ((BF16, 256, (64, 4), (0,), (64, 1)), {}, ValueError, r"strides\[0\] = 0 bytes"),
    ((BF16, 256, (64, 4), (2**40,), (64, 1)), {}, ValueError, "below 2\\*\\*40"),
    ((BF16, 256, (64, 4), (128,), (64, 257)), {}, ValueError, r"box\[1\] = 257"),
    ((BF16, 256, (64, 4), (128,), (0, 1)), {}, ValueError, r"box\[0\] = 0"),
    ((BF16, 256, (64, 4), (128,), (12, 1)), {}, ValueError, "inner extent, 12 x 2 = 24 "
                                                            "bytes, must be a multiple of 16"),
    ((BF16, 256, (64, 4), (128,), (128, 1)), {}, ValueError, "256 bytes, exceeds the 128-byte "
                                                             "swizzle span"),
    ((BF16, 256, (64, 4), (128,), (64, 1)), {"swizzle": 64}, ValueError, "exceeds the 64-byte"),
    ((BF16, 256, (64, 4), (128,), (64, 1)), {"swizzle": 16}, ValueError, "swizzle 16 must be"),
    ((BF16, 256, (64, 4), (128,), (64, 1)), {"l2_promotion": 32}, ValueError,
     "l2_promotion 32 must be"),
])
def test_check_tiled_refuses_what_the_driver_would(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        tensormap.check_tiled(*args, **kwargs)


@pytest.fixture()
def driver(monkeypatch):
    """cuTensorMapEncodeTiled as a ctypes function of the binding's own prototype (so every
    argument goes through its argtypes), backed by Python: records what it receives, writes
    a pattern into the map, returns ``status[0]``."""
    row = next(r for r in _lib.TABLE if r.name == "cuTensorMapEncodeTiled")
    seen, status, contexts = [], [0], []

    def impl(tm, dt, rank, address, dims, strides, box, estrides, interleave, swizzle, l2,
             oob):
        seen.append(dict(
            aligned=ctypes.addressof(tm.contents) % 64 == 0, dtype=dt, rank=rank,
            address=address, dims=tuple(dims[i] for i in range(rank)),
            strides=tuple(strides[i] for i in range(rank - 1)),
            box=tuple(box[i] for i in range(rank)),
            estrides=tuple(estrides[i] for i in range(rank)),
            rest=(interleave, swizzle, l2, oob)))
        for i in range(16):
            tm.contents.opaque[i] = 0x0101010101010101 * (i + 1)
        return status[0]

    fn = ctypes.CFUNCTYPE(row.restype, *row.argtypes)(impl)
    lib = types.SimpleNamespace(cuTensorMapEncodeTiled=fn, cuCtxSetCurrent=contexts.append,
                                cuGetErrorString=lambda st, out: 1)
    monkeypatch.setattr(_lib, "get", lambda: lib)
    return types.SimpleNamespace(seen=seen, status=status, contexts=contexts, fn=fn)


def test_encode_tiled_calls_the_driver_with_an_aligned_map(driver):
    dev = types.SimpleNamespace(raw_context="ctx")
    got = tensormap.encode_tiled(BF16, 1 << 20, (264, 64, 5), (528, 33792), (64, 64, 1),
                                  device=dev)
    assert got == b"".join((0x0101010101010101 * (i + 1)).to_bytes(8, "little")
                           for i in range(16))
    (call,) = driver.seen
    assert call == dict(aligned=True, dtype=_lib.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rank=3,
                        address=1 << 20, dims=(264, 64, 5), strides=(528, 33792),
                        box=(64, 64, 1), estrides=(1, 1, 1),
                        rest=(_lib.CU_TENSOR_MAP_INTERLEAVE_NONE,
                              _lib.CU_TENSOR_MAP_SWIZZLE_128B,
                              _lib.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              _lib.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE))
    assert driver.contexts == ["ctx"]
    # 2-D, float16, no device: no context set
    tensormap.encode_tiled(F16, 4096, (64, 7), (128,), (64, 128))
    assert driver.seen[1]["rank"] == 2 and driver.seen[1]["strides"] == (128,)
    assert driver.contexts == ["ctx"]


def test_encode_tiled_says_what_the_driver_refused(driver):
    driver.status[0] = 1          # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(CudaError, match=r"cuTensorMapEncodeTiled(.|\n)*dims \(64, 7\), strides "
                                        r"\(128,\) bytes, box \(64, 128\), address 0x1000"):
        tensormap.encode_tiled(BF16, 4096, (64, 7), (128,), (64, 128))
    # a rule broken is refused before the driver is asked
    with pytest.raises(ValueError, match="multiple of 16"):
        tensormap.encode_tiled(BF16, 4104, (64, 7), (128,), (64, 128))
    assert len(driver.seen) == 1


def test_the_map_is_a_128_byte_struct_parameter_of_the_kernels():
    from cudalibs.driver import _params

    assert ctypes.sizeof(_lib.CUtensorMap) == 128
    sigs = _params.parse_entries(P.read_ptx("grouped90"))
    # the product's 48 kernels and the weight gradient's 24, with the same parameters
    assert len(sigs) == len(P.ENTRIES["grouped90"]) == 72
    assert sum(name.startswith("grouped90_wgrad_") for name in sigs) == 24
    for name, params in sigs.items():
        assert len(params) == 15, name
        assert [p.type for p in params[:13]] == ["u64"] * 4 + ["u32"] * 5 + ["u64"] * 4
        for p in params[13:]:
            assert (p.kind, p.count, p.align) == ("bytes", 128, 64), (name, p)


# -- GroupedMM's candidates ----------------------------------------------------------------------
def test_hopper_tiles_come_first_on_compute_capability_9_0(launches, maps):
    x, w, offs, out = _operands(rows=16384, k=512, n=1024, groups=8)
    p = kernels.GroupedMM(x, w, offs, out)
    ids = _ids(p)
    assert ids == ["m128n256s", "m128n256", "m128n128s", "m64n256s", "m128", "m64"]
    assert ids[:4] == list(grouped90.ORDER)
    names = [c["name"] for c in p.candidates]
    assert names[0] == "128x256 wgmma tiles, staged epilogue (sm_90a)"
    assert names[1] == "128x256 wgmma tiles (sm_90a)" and names[4] == "128x128 tiles"
    assert "128x256 wgmma tiles, staged epilogue (sm_90a) [1/6]" in repr(p)
    assert p._hopper_why is None
    # small groups: the sm_80 tiles keep their own order behind the Hopper ones
    x, w, offs, out = _operands(rows=4096, k=128, n=256, groups=64)
    assert _ids(kernels.GroupedMM(x, w, offs, out))[4:] == ["m64", "m128"]
    assert maps == [] and launches == []          # planning encodes and launches nothing


#: The GPUs the Hopper kernels do not run on: an "a" target runs on its own compute capability
#: only, older and newer GPUs alike.
OTHER_GPUS = {"sm80": AMPERE, "sm89": _Device(3, cc=(8, 9)), "sm100": _Device(3, cc=(10, 0)),
              "sm120": _Device(3, cc=(12, 0))}


def _refused_case(case) -> dict:
    """The operands' keywords of a case the Hopper kernels refuse for its GPU or an empty
    dimension (the others change the operands themselves)."""
    if case in OTHER_GPUS:
        return {"device": OTHER_GPUS[case]}
    return {"device": DEV, **{"K = 0": {"k": 0, "pad": 0}, "no rows": {"rows": 0}}.get(case, {})}


def _stride_too_large():
    # x rows 2**39 elements apart: 2**40 bytes, beyond what a map's stride may be
    return fake((4, 64), BF16, DEV, strides=(2**40, 2))


@pytest.mark.parametrize("case, why", [
    ("sm80", "compute capability 8.0; the kernels run on 9.0 only"),
    ("sm89", "compute capability 8.9"),
    ("sm100", "compute capability 10.0"),
    ("sm120", "compute capability 12.0"),
    ("K = 0", "an empty dimension (rows 1000, K 0, N 264)"),
    ("no rows", "an empty dimension (rows 0, K 64, N 264)"),
    ("overlapping groups", "the groups of w overlap (a group stride of 8 elements, below the "
                           "16896 of one group)"),
    ("stride", r"strides[0] = 1099511627776 bytes"),
])
def test_no_hopper_tiles_where_they_cannot_run(launches, maps, case, why):
    x, w, offs, out = _operands(**_refused_case(case))
    if case == "overlapping groups":
        w = fake((5, 64, 264), BF16, DEV, strides=(16, 528, 2))
    elif case == "stride":
        x, out = _stride_too_large(), fake((4, 264), BF16, DEV)
    p = kernels.GroupedMM(x, w, offs, out)
    assert set(_ids(p)) == SM80_IDS and p._hopper is None
    assert why in p._hopper_why
    # and the one-shot runs the sm_80 kernel (nothing encoded)
    kernels.grouped_mm(x, w, offs, out)
    assert all(name.startswith("grouped_mm_") for name, *_ in launches)
    assert maps == []


# -- the launches --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("out_f32", [False, True])
@pytest.mark.parametrize("offs_dtype, cumulative", [(I32, False), (I64, True)])
def test_hopper_launch_arguments(launches, maps, dtype, layout, out_f32, offs_dtype,
                                 cumulative):
    groups, rows, k, n = 5, 1000, 64, 264
    odt = F32 if out_f32 else dtype
    x, w, offs, out = _operands(rows=rows, k=k, n=n, groups=groups, dtype=dtype, layout=layout,
                                out_dtype=odt, offs_dtype=offs_dtype, cumulative=cumulative)
    assert kernels.grouped_mm(x, w, offs, out) is out
    (name, grid, block, args), = launches
    suffix = "bf16" if dtype == BF16 else "f16"
    assert name == f"grouped90_{suffix}_{layout}_m128n256s_{'f32' if out_f32 else suffix}"
    # 132 SMs; (1000 + 5 * 127) // 128 = 12 row tiles by 2 column tiles of 256: 24 blocks
    assert grid == (24, 1, 1) and block == (384, 1, 1)
    assert launches.shared == [grouped90.smem_bytes("m128n256s", np.dtype(odt).itemsize)]
    assert launches.shared[0] == (216192 if not out_f32 else 148608)
    flags = (offs_dtype == I64) | (2 if cumulative else 0)
    ldw = n if layout == "kn" else k
    assert args[:13] == (x.address, w.address, out.address, offs.address, flags, groups, rows,
                         n, k, k + 8, ldw, k * n, n)
    # x: {K, rows} by boxes of 64 x 128; w: {N, K, G} by 64 x 64 (kn), {K, N, G} by 64 x 256
    wdims, wbox = (((n, k, groups), (64, 64, 1)) if layout == "kn"
                   else ((k, n, groups), (64, 256, 1)))
    assert maps == [(dtype, x.address, (k, rows), (2 * (k + 8),), (64, 128), 128, DEV),
                    (dtype, w.address, wdims, (2 * ldw, 2 * k * n), wbox, 128, DEV)]
    assert args[13:] == (fake_map(x.address, 1), fake_map(w.address, 2))
    _packs(name, args)
    # a second call of the shape: the same plan, the same launch, the maps from the cache
    kernels.grouped_mm(x, w, offs, out)
    assert launches[1] == launches[0] and len(maps) == 2
    # another x: its map only is encoded
    x2 = _operands(rows=rows, k=k, n=n, groups=groups, dtype=dtype)[0]
    kernels.grouped_mm(x2, w, offs, out)
    assert len(maps) == 3 and maps[2][1] == x2.address
    assert launches[2][3][:2] == (x2.address, w.address)
    assert launches[2][3][13:] == (fake_map(x2.address, 3), fake_map(w.address, 2))


@pytest.mark.parametrize("layout", ["kn", "nk"])
def test_every_hopper_tile_launches_with_its_geometry(launches, maps, layout):
    groups, rows, k, n = 8, 16384, 512, 1024
    x, w, offs, out = _operands(rows=rows, k=k, n=n, groups=groups, layout=layout)
    p = kernels.GroupedMM(x, w, offs, out)
    for i, tile in enumerate(grouped90.ORDER):
        p.select(i)
        del maps[:]
        p._hopper._maps.clear()
        assert p.execute(x, w, offs, out) is out
        name, grid, block, args = launches[-1]
        bm, bn = grouped90.TILES[tile][:2]
        assert name == f"grouped90_bf16_{layout}_{tile}_bf16"
        assert grid == (132, 1, 1) and block == (384, 1, 1)
        assert launches.shared[-1] == grouped90.smem_bytes(tile, 2) <= 232448
        assert maps[0][4] == (64, bm)
        assert maps[1][4] == ((64, 64, 1) if layout == "kn" else (64, bn, 1))
        _packs(name, args)
    # the sm_80 tiles after them, as before
    p.select(4)
    p.execute(x, w, offs, out)
    assert launches[-1][0] == f"grouped_mm_bf16_{layout}_m128_bf16"
    assert len(launches[-1][3]) == 13 and launches.shared[-1] == 0


@pytest.mark.parametrize("smem, tiles, want", [
    (grouped90.smem_bytes, grouped90.TILES,
     {("m128n256", 2): 197760, ("m128n256", 4): 197760, ("m128n256s", 2): 216192,
      ("m128n256s", 4): 148608, ("m128n128", 2): 197888, ("m128n128", 4): 197888,
      ("m128n128s", 2): 199936, ("m128n128s", 4): 165120, ("m64n256", 2): 206080,
      ("m64n256", 4): 206080, ("m64n256s", 2): 199808, ("m64n256s", 4): 164992}),
    # the weight gradient's: the same stages but 16 B of barriers each, and the group table
    (grouped90.wgrad_smem_bytes, grouped90.WGRAD_TILES,
     {("m128n256", 2): 203904, ("m128n256", 4): 203904, ("m128n256s", 2): 222336,
      ("m128n256s", 4): 154752, ("m128n128", 2): 203904, ("m128n128", 4): 203904,
      ("m128n128s", 2): 205952, ("m128n128s", 4): 171136, ("m64n256", 2): 212096,
      ("m64n256", 4): 212096, ("m64n256s", 2): 205952, ("m64n256s", 4): 171136}),
], ids=["product", "wgrad"])
def test_shared_memory_of_every_tile(smem, tiles, want):
    """grouped90.cu's G9Smem<...>::TOTAL and G9WSmem<...>::TOTAL (the values a host program
    built from the .cu prints), all within the 227 KiB a Hopper block may have."""
    assert set(want) == {(t, i) for t in tiles for i in (2, 4)}
    for (tile, item), v in want.items():
        assert smem(tile, item) == v <= 232448, (tile, item)


def test_one_w_for_every_group_is_a_map_of_one_group(launches, maps):
    """A zero group stride (w broadcast over the groups): a map of one group."""
    groups, rows, k, n = 4, 300, 64, 128
    x, _, offs, out = _operands(rows=rows, k=k, n=n, groups=groups)
    w = fake((groups, k, n), BF16, DEV, strides=(0, 2 * n, 2))
    kernels.grouped_mm(x, w, offs, out)
    (name, _, _, args), = launches
    assert name.startswith("grouped90_") and args[11] == 0
    assert maps[1][2:4] == ((n, k, 1), (2 * n, 2 * k * n))


def test_small_problems_launch_one_block_per_tile(launches, maps):
    x, w, offs, out = _operands(rows=40, k=32, n=40, groups=3, pad=0)
    kernels.grouped_mm(x, w, offs, out)
    # (40 + 3 * 127) // 128 = 3 row tiles by 1 column tile
    assert launches[0][1] == (3, 1, 1)


@pytest.fixture()
def refused_maps(monkeypatch):
    """The driver refuses every tensor map (never expected: the rules are checked when a plan
    is made)."""
    def refuse(*args, **kwargs):
        raise CudaError.from_status(1, "cuTensorMapEncodeTiled", None, "dims ...")

    monkeypatch.setattr(grouped90, "encode_tiled", refuse)


def test_a_refused_map_runs_the_sm80_kernel(launches, refused_maps, caplog):
    x, w, offs, out = _operands(rows=16384, k=512, n=1024, groups=8)
    with caplog.at_level(logging.WARNING, logger="cudalibs.kernels"):
        assert kernels.grouped_mm(x, w, offs, out) is out
    (name, grid, _, args), = launches
    # the sm_80 kernel the heuristics rank first
    assert name == "grouped_mm_bf16_kn_m128_bf16" and len(args) == 13
    assert "tensor maps of grouped90_bf16_kn_m128n256s_bf16 were refused" in caplog.text


def test_the_map_cache_is_bounded_and_shared_by_threads(maps):
    x, w, offs, out = _operands()
    h = kernels.GroupedMM(x, w, offs, out)._hopper
    assert repr(h) == ("<Hopper grouped GEMM grouped90_bf16_kn_*_bf16: tiles m128n256s, "
                       "m128n256, m128n128s, m64n256s; 0 tensor maps cached>")
    first = h.maps("m128n256s", 1 << 20, 1 << 22)
    assert h.maps("m128n256s", 1 << 20, 1 << 22) == first and len(maps) == 2
    # the x map is shared by the tiles of one height; w's (kn) by every tile
    h.maps("m128n128s", 1 << 20, 1 << 22)
    assert len(maps) == 2
    h.maps("m64n256s", 1 << 20, 1 << 22)
    assert len(maps) == 3
    for i in range(3 * grouped90.MAPS_MAX):
        h.maps("m128n256s", (1 << 30) + 256 * i, 1 << 22)
    assert len(h._maps) == grouped90.MAPS_MAX
    got, errors = [], []

    def work(t):
        try:
            for i in range(200):
                addr = (1 << 31) + 256 * ((i * 7 + t) % 100)
                tx, tw = h.maps("m128n256s", addr, 1 << 23)
                got.append(tx[:8] == addr.to_bytes(8, "little") and tw[:8] ==
                           (1 << 23).to_bytes(8, "little"))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(got) == 1600 and all(got)
    assert len(h._maps) <= grouped90.MAPS_MAX


# -- the weight gradient -------------------------------------------------------------------------
def _wgrad_operands(device=DEV, rows=1000, k=264, n=136, groups=5, dtype=BF16, layout="kn",
                    out_dtype=F32, pad=8, offs_dtype=I32, cumulative=False):
    """x and dy with padded rows (by ``pad`` and ``2 pad`` elements), the offsets, and dw:
    (G, K, N) with N contiguous, or the transposed view of a (G, N, K) array."""
    x = fake((rows, k + pad), dtype, device)[:, :k]
    dy = fake((rows, n + 2 * pad), dtype, device)[:, :n]
    offs = fake((groups + 1 if cumulative else groups,), offs_dtype, device)
    out = (fake((groups, k, n), out_dtype, device) if layout == "kn"
           else nk(groups, k, n, out_dtype, device))
    return x, dy, offs, out


def test_the_wgrad_kernels_read_both_operands_transposed():
    """Every weight-gradient product has both transpose bits set (a and b MN-major), and the
    rows past a group's end are zeroed behind a proxy fence and a barrier of the consumers."""
    text = P.read_ptx("grouped90").decode()
    bodies = text.split(".visible .entry ")[1:]
    wgrad = [b for b in bodies if b.startswith("grouped90_wgrad_")]
    assert len(wgrad) == 24
    for body in wgrad:
        products = [line for line in body.splitlines() if "wgmma.mma_async" in line]
        assert products and all(line.rstrip().endswith("p, 1, 1, 1, 1;") for line in products)
        assert "bar.sync 1, 256;" in body and "fence.proxy.async.shared::cta;" in body
    # the product's kernels are as they were: A K-major
    forward = [b for b in bodies if not b.startswith("grouped90_wgrad_")]
    assert len(forward) == 48
    assert all("p, 1, 1, 1, 1;" not in b for b in forward)


@pytest.mark.parametrize("out_dtype", [BF16, F32], ids=["bf16", "f32"])
def test_wgrad_hopper_tiles_come_first_on_compute_capability_9_0(launches, maps, out_dtype):
    x, dy, offs, out = _wgrad_operands(rows=16384, k=4096, n=1408, groups=8,
                                       out_dtype=out_dtype)
    p = kernels.GroupedMMWgrad(x, dy, offs, out)
    ids = _ids(p)
    # a 16-bit output: the six tiles, each staged one before its plain one; float32: the
    # plain tiles (a staged tile writes float32 from registers, with a stage fewer)
    hopper = (["m128n256s", "m128n256", "m128n128s", "m128n128", "m64n256s", "m64n256"]
              if out_dtype == BF16 else ["m128n256", "m128n128", "m64n256"])
    assert ids == hopper + ["m128", "m64"]
    assert ids[:-2] == list(grouped90.WGRAD_ORDER if out_dtype == BF16
                            else grouped90.WGRAD_ORDER_F32)
    names = [c["name"] for c in p.candidates]
    assert names[0] == ("128x256 wgmma tiles, staged epilogue (sm_90a)" if out_dtype == BF16
                        else "128x256 wgmma tiles (sm_90a)")
    assert names[-2:] == ["128x128 tiles", "64x128 tiles"]
    assert f"{names[0]} [1/{len(ids)}]" in repr(p)
    assert p._hopper_why is None
    # a tuning choice stored on disk names the tiles it was made among (the sm_80 GPU's none)
    assert p._library_version() == "sm_90a " + ",".join(hopper)
    a = _wgrad_operands(device=AMPERE, out_dtype=out_dtype)
    assert kernels.GroupedMMWgrad(*a)._library_version() == ""
    suffix = "bf16" if out_dtype == BF16 else "f32"
    assert repr(p._hopper) == (f"<Hopper grouped GEMM weight gradient "
                               f"grouped90_wgrad_bf16_*_{suffix}: tiles {', '.join(hopper)}; "
                               "0 tensor maps cached>")
    # small groups: the sm_80 tiles keep their own order behind the Hopper ones
    x, dy, offs, out = _wgrad_operands(rows=256, k=128, n=128, groups=3, out_dtype=out_dtype)
    assert _ids(kernels.GroupedMMWgrad(x, dy, offs, out))[-2:] == ["m64", "m128"]
    assert maps == [] and launches == []          # planning encodes and launches nothing


@pytest.mark.parametrize("case, why", [
    ("sm80", "compute capability 8.0; the kernels run on 9.0 only"),
    ("sm89", "compute capability 8.9"),
    ("sm100", "compute capability 10.0"),
    ("sm120", "compute capability 12.0"),
    ("K = 0", "an empty dimension (rows 1000, a product of 0 x 136 per group)"),
    ("no rows", "an empty dimension (rows 0, a product of 264 x 136 per group)"),
    ("257 groups", "257 groups; the kernels rank at most 256 in shared memory"),
    ("stride", r"strides[0] = 1099511627776 bytes"),
])
def test_no_wgrad_hopper_tiles_where_they_cannot_run(launches, maps, case, why):
    x, dy, offs, out = _wgrad_operands(**_refused_case(case),
                                       groups=257 if case == "257 groups" else 5)
    if case == "stride":
        # x's rows 2**39 elements apart: 2**40 bytes, beyond what a map's stride may be
        x, dy = fake((4, 264), BF16, DEV, strides=(2**40, 2)), fake((4, 136), BF16, DEV)
    p = kernels.GroupedMMWgrad(x, dy, offs, out)
    assert set(_ids(p)) == SM80_IDS and p._hopper is None
    assert why in p._hopper_why
    # and the one-shot runs the sm_80 kernel (nothing encoded), or nothing at all for K = 0
    kernels.grouped_mm_wgrad(x, dy, offs, out)
    assert all(name.startswith("grouped_wgrad_") for name, *_ in launches)
    assert len(launches) == (0 if case == "K = 0" else 1)
    assert maps == []


def test_wgrad_refusals_of_the_group_table_and_the_tile_count():
    """At most 256 groups (the kernels' shared-memory table) and fewer than 2**31 output
    tiles of the smallest tile (their 32-bit count); below both, nothing to refuse."""
    assert grouped90.wgrad_refusal(DEV, BF16, 100, 64, 64, 256) is None
    assert "257 groups" in grouped90.wgrad_refusal(DEV, BF16, 100, 64, 64, 257)
    # 2**22 x 2**22 per group: 2**30 tiles of 128 x 128 (and of 64 x 256) a group
    assert grouped90.wgrad_refusal(DEV, BF16, 100, 2**22, 2**22, 1) is None
    assert grouped90.wgrad_refusal(DEV, BF16, 100, 2**22, 2**22, 2) == (
        "2147483648 output tiles, beyond the kernels' 32-bit count")
    assert grouped90.wgrad_tiles("m128n256", 2**22, 2**22, 2) == 2**30
    assert grouped90.wgrad_tiles("m64n256", 200, 300, 3) == 3 * 4 * 2
    assert "float32 inputs" in grouped90.wgrad_refusal(DEV, F32, 100, 64, 64, 2)


@pytest.mark.parametrize("dtype", [BF16, F16])
@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("out_f32", [False, True])
@pytest.mark.parametrize("offs_dtype, cumulative", [(I32, False), (I64, True)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_wgrad_hopper_launch_arguments(launches, maps, dtype, layout, out_f32, offs_dtype,
                                       cumulative, accumulate):
    groups, rows, k, n = 5, 1000, 264, 136
    odt = F32 if out_f32 else dtype
    x, dy, offs, out = _wgrad_operands(rows=rows, k=k, n=n, groups=groups, dtype=dtype,
                                       layout=layout, out_dtype=odt, offs_dtype=offs_dtype,
                                       cumulative=cumulative)
    assert kernels.grouped_mm_wgrad(x, dy, offs, out, accumulate=accumulate) is out
    (name, grid, block, args), = launches
    suffix = "bf16" if dtype == BF16 else "f16"
    tile = "m128n256" if out_f32 else "m128n256s"
    assert name == f"grouped90_wgrad_{suffix}_{tile}_{'f32' if out_f32 else suffix}"
    # the transposed view is written as dw[g]^T = dy_g^T @ x_g: the operands swap
    m, cols, a, b, lda, ldb, ldo = ((k, n, x.address, dy.address, k + 8, n + 16, n)
                                    if layout == "kn" else
                                    (n, k, dy.address, x.address, n + 16, k + 8, k))
    # every 128 x 256 tile of every group: kn 5 x 3 x 1, nk 5 x 2 x 2 (fewer than 132 SMs)
    assert grid == (groups * -(-m // 128) * -(-cols // 256), 1, 1) == (
        (15 if layout == "kn" else 20), 1, 1)
    assert block == (384, 1, 1)
    assert launches.shared == [grouped90.wgrad_smem_bytes(tile, odt.itemsize)]
    assert launches.shared[0] == (203904 if out_f32 else 222336)
    flags = (offs_dtype == I64) | (2 if cumulative else 0) | (4 if accumulate else 0)
    assert args[:13] == (a, b, out.address, offs.address, flags, groups, rows, m, cols, lda,
                         ldb, k * n, ldo)
    # a: {M, rows}, b: {N, rows}, innermost first, boxes of 64 x 64
    assert maps == [(dtype, a, (m, rows), (2 * lda,), (64, 64), 128, DEV),
                    (dtype, b, (cols, rows), (2 * ldb,), (64, 64), 128, DEV)]
    assert args[13:] == (fake_map(a, 1), fake_map(b, 2))
    _packs(name, args)
    # a second call of the shape: the same plan, the same launch, the maps from the cache
    kernels.grouped_mm_wgrad(x, dy, offs, out, accumulate=accumulate)
    assert launches[1] == launches[0] and len(maps) == 2
    assert len(plan_cache.entries(kernels.GROUPED_MM_WGRAD_KEY.name)) == 1
    # another dy: its map only is encoded
    dy2 = _wgrad_operands(rows=rows, k=k, n=n, groups=groups, dtype=dtype)[1]
    kernels.grouped_mm_wgrad(x, dy2, offs, out, accumulate=accumulate)
    assert len(maps) == 3 and maps[2][1] == dy2.address
    assert launches[2][3][:2] == ((x.address, dy2.address) if layout == "kn"
                                  else (dy2.address, x.address))


@pytest.mark.parametrize("layout", ["kn", "nk"])
@pytest.mark.parametrize("out_dtype", [BF16, F32], ids=["bf16", "f32"])
def test_every_wgrad_hopper_tile_launches_with_its_geometry(launches, maps, layout, out_dtype):
    """Each tile a plan offers, by select; then every tile of the file (a float32 plan's
    staged ones too, run as the tests on a GPU run them): kernel, grid, shared memory."""
    groups, rows, k, n = 8, 16384, 512, 1024
    x, dy, offs, out = _wgrad_operands(rows=rows, k=k, n=n, groups=groups, layout=layout,
                                       out_dtype=out_dtype)
    p = kernels.GroupedMMWgrad(x, dy, offs, out)
    order = p._hopper.order
    osuf = "bf16" if out_dtype == BF16 else "f32"
    m, cols = (k, n) if layout == "kn" else (n, k)
    for i, tile in enumerate(order):
        p.select(i)
        assert p.execute(x, dy, offs, out) is out
        name, grid, block, args = launches[-1]
        assert name == f"grouped90_wgrad_bf16_{tile}_{osuf}"
    for tile in grouped90.WGRAD_TILES:
        p._launch(tile, x.address, dy.address, offs.address, out.address, None)
        name, grid, block, args = launches[-1]
        bm, bn = grouped90.WGRAD_TILES[tile][:2]
        assert name == f"grouped90_wgrad_bf16_{tile}_{osuf}"
        assert name in P.ENTRIES["grouped90"]
        # 8 groups of (512 x 1024) or (1024 x 512): 128 x 256 tiles 128 of them, the
        # others 256, capped at the 132 SMs
        tiles = groups * -(-m // bm) * -(-cols // bn)
        assert tiles == (128 if (bm, bn) == (128, 256) else 256)
        assert grid == (min(132, tiles), 1, 1) and block == (384, 1, 1)
        assert launches.shared[-1] == grouped90.wgrad_smem_bytes(tile, out_dtype.itemsize)
        _packs(name, args)
    # one map of each operand served every tile
    assert len(maps) == 2 and [m_[4] for m_ in maps] == [(64, 64), (64, 64)]
    # the sm_80 tiles after them, as before
    # (8 x 4 x 8 blocks of 128 rows do not fill 132 SMs twice: the 64-row tiles first)
    p.select(len(order))
    p.execute(x, dy, offs, out)
    assert launches[-1][0] == f"grouped_wgrad_bf16_m64_{osuf}"
    assert len(launches[-1][3]) == 13 and launches.shared[-1] == 0


def test_small_wgrad_problems_launch_one_block_per_tile(launches, maps):
    x, dy, offs, out = _wgrad_operands(rows=45, k=32, n=40, groups=3, pad=0)
    kernels.grouped_mm_wgrad(x, dy, offs, out)
    # 3 groups of one 128 x 256 tile each
    assert launches[0][0] == "grouped90_wgrad_bf16_m128n256_f32" and launches[0][1] == (3, 1, 1)
    # boxes larger than the tensors: TMA fills zeros
    assert [m[2] for m in maps] == [(32, 45), (40, 45)]


def test_a_refused_wgrad_map_runs_the_sm80_kernel(launches, refused_maps, caplog):
    x, dy, offs, out = _wgrad_operands(rows=16384, k=1024, n=1024, groups=8)
    with caplog.at_level(logging.WARNING, logger="cudalibs.kernels"):
        assert kernels.grouped_mm_wgrad(x, dy, offs, out, accumulate=True) is out
    (name, grid, _, args), = launches
    # the sm_80 kernel the heuristics rank first, with the call's arguments
    assert name == "grouped_wgrad_bf16_m128_f32" and len(args) == 13 and args[4] == 4
    assert grid == (8 * 8 * 8, 1, 1)
    assert "tensor maps of grouped90_wgrad_bf16_m128n256_f32 were refused" in caplog.text


def test_the_wgrad_map_cache_is_per_operand_and_bounded(maps):
    x, dy, offs, out = _wgrad_operands()
    h = kernels.GroupedMMWgrad(x, dy, offs, out)._hopper
    first = h.maps("m128n256", 1 << 20, 1 << 22)
    assert h.maps("m128n256", 1 << 20, 1 << 22) == first and len(maps) == 2
    # every tile shares the maps
    for tile in grouped90.WGRAD_TILES:
        assert h.maps(tile, 1 << 20, 1 << 22) == first
    assert len(maps) == 2
    # a and b at one address are two maps (their layouts differ)
    ta, tb = h.maps("m128n256", 1 << 24, 1 << 24)
    assert len(maps) == 4 and maps[2][2:4] == ((264, 1000), (544,))
    assert maps[3][2:4] == ((136, 1000), (304,)) and ta != tb
    for i in range(3 * grouped90.MAPS_MAX):
        h.maps("m128n256", (1 << 30) + 256 * i, 1 << 22)
    assert len(h._maps) == grouped90.MAPS_MAX
