"""The shipped kernel library (ptx/) and its wrappers, without a GPU.

- Every committed .ptx matches its sources (sha256 in its header), declares PTX ISA <= 8.0 for
  sm_75 (or the target cudalibs.ptx.TARGETS names: sm_80, sm_90a) with 64-bit addresses, and
  defines the entries cudalibs.kernels launches.
- The wheel ships every source and PTX as cudalibs/_ptx, where cudalibs.ptx finds them once
  installed; from a checkout it finds ptx/ itself.
- ptxas assembles each file (proving the lowered .version is legal); with the same nvcc
  release as the header, a rebuild reproduces each file byte for byte.
- NVRTC compiles every .cu source.
- Each wrapper's launch arguments pack into the kernel's PTX signature (through the same
  ParamBlock the driver layer uses), with a grid inside the device limits; bad input raises
  before any launch.  Device arrays here are stand-ins over fake addresses: nothing runs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import dtypes, kernels
from cudalibs import ptx as P
from cudalibs.runtime import ptxlib
from cudalibs.driver.array import DeviceArray, c_strides
from cudalibs.errors import ClosedError

ROOT = Path(__file__).resolve().parents[2]
STEMS = sorted(P.ENTRIES)


def _load_build():
    # ptx/build.py is a script beside the files it builds, not a cudalibs module.
    spec = importlib.util.spec_from_file_location("ptx_build", P.DIRECTORY / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load_build()


def _text(stem):
    return P.read_ptx(stem).decode()


# -- the committed files ------------------------------------------------------------------------
@pytest.mark.parametrize("stem", STEMS)
def test_ptx_matches_its_sources(stem):
    rec = build.parse_header(_text(stem))
    assert rec["sources"] == build.source_hashes(stem), (
        f"{stem}.ptx is stale: run `{build.COMMAND}` after editing its sources")
    # the first line names the command that makes the file, as the script writes it
    assert _text(stem).splitlines()[0] == build.tag_line(f"{stem}.cu")
    assert f"{stem}.cu" in rec["sources"] and "common.cuh" in rec["sources"]
    assert rec["command"] == f"nvcc -ptx {' '.join(build.nvcc_flags(stem))} {stem}.cu"
    assert rec["nvcc"].startswith("Cuda compilation tools, release ")


@pytest.mark.parametrize("stem", STEMS)
def test_ptx_directives_load_on_cuda_12_0_drivers(stem):
    text = _text(stem)
    versions = re.findall(r"^\.version\s+(\d+)\.(\d+)\s*$", text, re.M)
    assert len(versions) == 1
    assert tuple(map(int, versions[0])) <= (8, 0)
    # sm_75, but for the files built for a newer architecture (cudalibs.ptx.TARGETS)
    assert re.findall(r"^\.target\s+(\S+)\s*$", text, re.M) == [P.target(stem)]
    assert re.findall(r"^\.address_size\s+(\d+)\s*$", text, re.M) == ["64"]


@pytest.mark.parametrize("stem", STEMS)
def test_ptx_defines_every_expected_entry(stem):
    text = _text(stem)
    found = set(re.findall(r"^\.visible \.entry (\w+)\(", text, re.M))
    assert found == set(P.ENTRIES[stem])
    # The driver layer's own parser sees the same entries.
    from cudalibs.driver import _params

    assert set(_params.parse_entries(text)) == set(P.ENTRIES[stem])


def test_a_checkout_finds_the_top_level_directory():
    assert P.DIRECTORY == ROOT / "ptx"
    assert P.DIRECTORY == build.DIRECTORY
    for stem in STEMS:
        assert P.ptx_path(stem).is_file() and P.source_path(stem).is_file()


def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11+")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def test_every_package_is_listed_for_the_wheel():
    # pyproject.toml lists the packages (discovery cannot map ptx/ to cudalibs/_ptx): a new
    # package under cudalibs/ must be added there, or the wheel would lack it.
    listed = set(_pyproject()["packages"])
    present = {".".join(d.relative_to(ROOT).parts) for d in [ROOT / "cudalibs",
                                                             *(ROOT / "cudalibs").rglob("*")]
               if d.is_dir() and (d / "__init__.py").is_file()}
    assert present - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert listed - present == {"cudalibs._ptx"}, "listed packages that do not exist"
    assert _pyproject()["package-dir"] == {"cudalibs._ptx": "ptx"}


def _copy_for_build(dest: Path) -> None:
    """The files a wheel is built from, without build/ or egg-info left by earlier builds."""
    shutil.copy(ROOT / "pyproject.toml", dest)
    shutil.copy(ROOT / "README.md", dest)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(ROOT / "cudalibs", dest / "cudalibs", ignore=ignore)
    shutil.copytree(ROOT / "ptx", dest / "ptx", ignore=ignore)


def test_the_wheel_ships_the_kernel_library(tmp_path):
    from importlib import metadata

    try:
        have = tuple(int(x) for x in metadata.version("setuptools").split(".")[:2])
    except metadata.PackageNotFoundError:
        have = None
    if have is None or have < (70, 1):
        # Not a skip: the test extra installs it, and CI must not lose this check silently.
        pytest.fail(f"building the wheel needs setuptools >= 70.1 (found {have}); "
                    "pip install -e '.[cu13,test]' installs it")
    src, out, site = tmp_path / "src", tmp_path / "dist", tmp_path / "site"
    src.mkdir()
    _copy_for_build(src)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (wheel,) = out.glob("cudalibs-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        z.extractall(site)
    files = [p.name for p in (ROOT / "ptx").iterdir() if p.suffix in (".ptx", ".cu", ".cuh")]
    assert files and all(f"cudalibs/_ptx/{name}" in names for name in files), sorted(names)
    assert "cudalibs/_ptx/README.md" in names
    # every module of the package is in the wheel
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "cudalibs").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules <= names, sorted(modules - names)
    # the installed layout: cudalibs imported from the unpacked wheel finds its package data
    check = ("import cudalibs, cudalibs.ptx as P; "
             "print(cudalibs.__file__); print(P.DIRECTORY); "
             "print(all(P.read_ptx(s).startswith(b'// cudalibs-ptx') and P.source_path(s).is_file()"
             " for s in P.ENTRIES))")
    env = dict(os.environ, PYTHONPATH=str(site))
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    origin, directory, ok = proc.stdout.split()
    assert Path(origin).is_relative_to(site) and Path(directory) == site / "cudalibs" / "_ptx"
    assert ok == "True"


def test_paths_refuse_unknown_files():
    with pytest.raises(KeyError, match="no PTX file"):
        P.ptx_path("nope")
    with pytest.raises(KeyError, match="no source"):
        P.source_path("nope")


def test_header_parser_refuses_foreign_ptx():
    with pytest.raises(ValueError, match="not a cudalibs-generated PTX"):
        build.parse_header("//\n.version 8.0\n")


# -- compilers ----------------------------------------------------------------------------------
def _tool(name, env=None):
    path = os.environ.get(env) if env else None
    return path or shutil.which(name)


@pytest.mark.parametrize("stem", STEMS)
def test_ptxas_assembles_each_file(stem):
    ptxas = _tool("ptxas")
    if not ptxas:
        pytest.skip("ptxas is not on PATH")
    build.validate(_text(stem), ptxas=ptxas)


@pytest.mark.parametrize("stem", STEMS)
def test_cuda_12_0_ptxas_assembles_each_file(stem):
    # ptxas of CUDA 12.0 (nvidia-cuda-nvcc-cu12==12.0.76) knows ISA 8.0 at most: the oldest
    # toolchain whose driver must load these files.
    ptxas = os.environ.get("CUDALIBS_PTXAS_12")
    if not ptxas:
        pytest.skip("set CUDALIBS_PTXAS_12 to the ptxas of CUDA 12.0 to run this check")
    build.validate(_text(stem), ptxas=ptxas)
    if P.arch_specific(stem):
        # An sm_90a file holds wgmma: no other architecture can assemble it.
        with pytest.raises(RuntimeError, match="ptxas -arch=sm_90 rejected"):
            build.validate(_text(stem), ptxas=ptxas, arch="sm_90")
    else:
        build.validate(_text(stem), ptxas=ptxas, arch="sm_90")


def test_validation_reads_an_arch_specific_target():
    """ptxas is run for the file's own target, "a" suffix included (sm_90a, not sm_75)."""
    ptxas = _tool("ptxas")
    if not ptxas:
        pytest.skip("ptxas is not on PATH")
    body = (".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{\n"
            " wgmma.fence.sync.aligned;\n ret;\n}\n")
    build.validate(body, ptxas=ptxas)
    with pytest.raises(RuntimeError, match="ptxas -arch=sm_90 rejected"):
        build.validate(body, ptxas=ptxas, arch="sm_90")


def test_ptxas_rejects_an_instruction_newer_than_the_declared_version():
    # The premise of the lowering: ptxas checks each instruction against .version.  ldmatrix
    # exists on sm_75 but only from PTX ISA 6.5 on.
    ptxas = _tool("ptxas")
    if not ptxas:
        pytest.skip("ptxas is not on PATH")
    body = (".target sm_75\n.address_size 64\n.visible .entry k(.param .u64 p)\n{\n"
            " .reg .b32 %r<6>;\n .shared .align 16 .b8 buf[512];\n mov.u32 %r5, buf;\n"
            " ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%r1}, [%r5];\n ret;\n}\n")
    build.validate(".version 6.5\n" + body, ptxas=ptxas)
    with pytest.raises(RuntimeError, match="requires PTX ISA .version 6.5"):
        build.validate(".version 6.4\n" + body, ptxas=ptxas)


def test_rebuild_with_the_same_nvcc_is_byte_identical():
    nvcc = _tool("nvcc")
    if not nvcc or not _tool("ptxas"):
        pytest.skip("nvcc and ptxas are needed to rebuild")
    release = build.nvcc_release(nvcc)
    recorded = {build.parse_header(_text(s))["nvcc"] for s in STEMS}
    if recorded != {release}:
        pytest.skip(f"the committed PTX was built by {sorted(recorded)}, PATH has {release!r}")
    changed = build.build(check=True, nvcc=nvcc, log=lambda *_: None)
    assert changed == [], f"committed PTX differs from a rebuild: {changed}"


def test_build_check_exits_nonzero_on_a_stale_file(tmp_path):
    nvcc = _tool("nvcc")
    if not nvcc or not _tool("ptxas"):
        pytest.skip("nvcc and ptxas are needed to rebuild")
    for name in ("matmul.cu", "common.cuh"):
        shutil.copy(P.DIRECTORY / name, tmp_path / name)
    (tmp_path / "matmul.ptx").write_text("stale\n")
    assert build.build(["matmul"], check=True, directory=tmp_path, log=lambda *_: None) == ["matmul"]
    assert (tmp_path / "matmul.ptx").read_text() == "stale\n"
    assert build.build(["matmul"], directory=tmp_path, log=lambda *_: None) == ["matmul"]
    assert build.build(["matmul"], check=True, directory=tmp_path, log=lambda *_: None) == []


def _nvrtc_options(stem):
    from cudalibs.driver import nvrtc

    include = nvrtc.cuda_include_dirs()
    if not include:
        pytest.skip("no CUDA headers (cuda_fp16.h, mma.h) found by cuda.pathfinder")
    return [build.nvcc_flags(stem)[0], "-std=c++17", f"-I{P.DIRECTORY}",
            *(f"-I{d}" for d in include)]


@pytest.mark.parametrize("stem", STEMS)
def test_nvrtc_compiles_each_source(stem):
    from cudalibs.driver import _nvrtc_lib, nvrtc

    if not _nvrtc_lib.get.available():
        pytest.skip("NVRTC is not installed")
    image, _log = nvrtc._compile_raw(P.source_path(stem).read_text(), f"{stem}.cu",
                                     _nvrtc_options(stem))
    names = set(re.findall(r"\.entry (\w+)\(", image.decode()))
    assert names == set(P.ENTRIES[stem])


def test_build_script_help_runs_from_the_root():
    # As the README says: `python ptx/build.py` in the root of a checkout, no install needed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "ptx/build.py", "--help"], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {build.COMMAND}")


def test_build_script_runs():
    if not _tool("nvcc") or not _tool("ptxas"):
        pytest.skip("nvcc and ptxas are needed to rebuild")
    proc = subprocess.run([sys.executable, "ptx/build.py", "--check", "layout"],
                          capture_output=True, text=True, cwd=ROOT)
    assert "layout.ptx" in proc.stdout, proc.stderr
    assert proc.returncode in (0, 1)


# -- wrappers: launch arguments against the PTX signatures, without a GPU ----------------------
class _FakeDevice:
    def __init__(self, ordinal):
        self.ordinal = ordinal
        self.multiprocessor_count = 132


class _FakeBuffer:
    __slots__ = ("_ptr",)

    def __init__(self, ptr):
        self._ptr = ptr


DEV0, DEV1 = _FakeDevice(0), _FakeDevice(1)
_next_address = [1 << 32]


def fake(shape, dtype, device=DEV0, strides=None, buffer=None):
    """A DeviceArray over a fake address (never dereferenced: launches are intercepted)."""
    dt = dtypes.lookup(dtype)
    shape = tuple(shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if buffer is None:
        ptr = _next_address[0]
        _next_address[0] += (nbytes + 255) // 256 * 256 + 256
        buffer = _FakeBuffer(ptr)
    strides = c_strides(shape, dt.itemsize) if strides is None else strides
    return DeviceArray._view(buffer._ptr, shape, strides, dt, device, buffer, None)


@pytest.fixture()
def launches(monkeypatch):
    calls = []

    def record(device, name, grid, block, args, stream, shared_mem=0):
        calls.append((device, name, grid, block, args, stream))

    # Every wrapper launches through ptxlib.launch (channel_bias_act through
    # ptxlib.launch_channel_bias_act, which calls it too): one interception point.
    monkeypatch.setattr(ptxlib, "launch", record)
    return calls


_SIGNATURES = {}


def _signature(name):
    from cudalibs.driver import _params

    if not _SIGNATURES:
        for stem in STEMS:
            _SIGNATURES.update(_params.parse_entries(_text(stem)))
    return _SIGNATURES[name]


def _check_launch(call):
    """The arguments pack into the kernel's parameters; the grid is within device limits."""
    from cudalibs.driver import _params

    _device, name, grid, block, args, _stream = call
    params = _signature(name)

    def no_objects(a, p):
        raise AssertionError(f"{name} argument {p.index} is {type(a).__name__}; the wrappers "
                             "pass raw addresses")

    _params.ParamBlock(params, name, no_objects).write(tuple(args))
    assert len(grid) == 3 and len(block) == 3
    assert 1 <= grid[0] <= 2**31 - 1 and 1 <= grid[1] <= 65535 and 1 <= grid[2] <= 65535
    assert 1 <= block[0] * block[1] * block[2] <= 1024
    return name, grid, block, args


F32, F16, F64, BF16 = np.float32, np.float16, np.float64, dtypes.bfloat16
FLOATS = [F32, F64, F16, BF16]


@pytest.mark.parametrize("dtype", FLOATS)
def test_elementwise_launch_arguments(launches, dtype):
    x, y, out = fake((3, 5), dtype), fake((3, 5), dtype), fake((3, 5), dtype)
    assert kernels.add(x, y, out=out) is out
    assert kernels.axpy(2.5, x, y) is y
    assert kernels.scale(x, -1.5, out=out) is out
    assert kernels.fill(x, 0.3) is x
    assert kernels.relu_backward(x, y, out=out) is out
    names = [_check_launch(c)[0] for c in launches]
    suf = ptxlib.SUFFIX[np.dtype(dtype)]
    assert names == [f"{op}_{suf}" for op in ("add", "axpy", "scale", "fill", "relu_backward")]
    # 15 elements: one block of 256 threads covers them (grid-stride loops do the rest).
    assert all(c[2] == (1, 1, 1) and c[3] == (256, 1, 1) for c in launches)
    assert launches[0][4] == (x.ptr, y.ptr, out.ptr, 15)


def test_fill_passes_exact_bits_for_16_bit_types(launches):
    kernels.fill(fake((4,), F16), 0.1)
    kernels.fill(fake((4,), BF16), -2.75)
    kernels.fill(fake((4,), F32), 1 / 3)
    assert launches[0][4][1] == int(np.float16(0.1).view(np.uint16))
    assert launches[1][4][1] == int(np.asarray(-2.75, dtype=BF16).view(np.uint16))
    assert launches[2][4][1] == float(np.float32(1 / 3))
    for c in launches:
        _check_launch(c)


def test_elementwise_grid_is_capped():
    grid, block = ptxlib.elementwise_grid(DEV0, 10**9)
    assert grid == (132 * 16, 1, 1) and block == (256, 1, 1)


@pytest.mark.parametrize("dtype", [F32, F16, BF16])
def test_bias_bn_softmax_launch_arguments(launches, dtype):
    x, out = fake((6, 7), dtype), fake((6, 7), dtype)
    kernels.bias_relu(x, fake((7,), dtype), out=out)
    kernels.bias_gelu(x, fake((7,), dtype), out=out)
    kernels.softmax(x, out=out)
    kernels.log_softmax(x, out=x)  # in place is allowed
    xb, ob = fake((2, 3, 4, 5), dtype), fake((2, 3, 4, 5), dtype)
    kernels.batch_norm_relu_infer(xb, *(fake((3,), F32) for _ in range(4)), eps=1e-3, out=ob)
    for c in launches:
        _check_launch(c)
    assert launches[0][4][3:] == (42, 7)
    assert launches[2][2] == (6, 1, 1) and launches[2][3][0] % 32 == 0
    assert launches[2][4][2:] == (6, 7)
    bn = launches[4][4]
    assert bn[5] == pytest.approx(1e-3) and bn[7:] == (120, 3, 20)


def test_softmax_block_size_follows_row_length(launches):
    for cols in (1, 33, 500, 5000, 10**6):
        kernels.softmax(fake((2, cols), F32), out=fake((2, cols), F32))
    threads = [_check_launch(c)[2][0] for c in launches]
    assert threads == [32, 32, 128, 512, 512]


def test_matmul_launch_arguments(launches):
    a, b = fake((33, 17), F32), fake((17, 65), F32)
    kernels.matmul_naive(a, b, out=fake((33, 65), F32))
    kernels.matmul_tiled(a, b, out=fake((33, 65), F32))
    kernels.wmma_gemm(fake((33, 17), F16), fake((17, 65), F16), out=fake((33, 65), F32))
    kernels.wmma_gemm(fake((33, 17), F16), fake((17, 65), F16), out=fake((33, 65), F16),
                      out_dtype=F16)
    got = [_check_launch(c) for c in launches]
    assert [g[0] for g in got] == ["matmul_naive_f32", "matmul_tiled_f32", "wmma_gemm_f16_f32",
                                   "wmma_gemm_f16_f16"]
    assert got[0][1] == (5, 3, 1) and got[0][2] == (16, 16, 1)
    assert got[1][1] == (3, 2, 1) and got[1][2] == (32, 8, 1)
    assert got[2][1] == (2, 1, 1) and got[2][2] == (128, 1, 1)
    assert got[1][3][3:] == (33, 65, 17)


def test_bmm_launch_arguments_and_broadcasting(launches):
    kernels.bmm(fake((4, 5, 6), F32), fake((4, 6, 7), F32), out=fake((4, 5, 7), F32))
    kernels.bmm(fake((5, 6), F32), fake((4, 6, 7), F32), out=fake((4, 5, 7), F32))
    kernels.bmm(fake((4, 5, 6), F32), fake((6, 7), F32), out=fake((4, 5, 7), F32))
    kernels.bmm(fake((70000, 1, 1), F32), fake((70000, 1, 1), F32), out=fake((70000, 1, 1), F32))
    got = [_check_launch(c) for c in launches]
    assert got[0][1] == (1, 1, 4) and got[0][3][3:] == (4, 5, 7, 6, 30, 42, 35)
    assert got[1][3][-3:] == (0, 42, 35)
    assert got[2][3][-3:] == (30, 0, 35)
    assert got[3][1][2] == 65535  # the kernel loops over the rest of the batch


@pytest.mark.parametrize("dtype,entry", [(F16, "transpose_b16"), (BF16, "transpose_b16"),
                                         (F32, "transpose_b32"), (np.int32, "transpose_b32"),
                                         (F64, "transpose_b64"), (np.complex64, "transpose_b64")])
def test_layout_launch_arguments(launches, dtype, entry):
    kernels.transpose(fake((33, 70), dtype), out=fake((70, 33), dtype))
    kernels.nchw_to_nhwc(fake((2, 3, 4, 5), dtype), out=fake((2, 4, 5, 3), dtype))
    kernels.nhwc_to_nchw(fake((2, 4, 5, 3), dtype), out=fake((2, 3, 4, 5), dtype))
    got = [_check_launch(c) for c in launches]
    assert {g[0] for g in got} == {entry}
    assert got[0][1] == (3, 2, 1) and got[0][3][2:] == (1, 33, 70)
    assert got[1][1] == (1, 1, 2) and got[1][3][2:] == (2, 3, 20)
    assert got[2][3][2:] == (2, 20, 3)


def test_empty_inputs_launch_nothing(launches):
    e = fake((0, 5), F32)
    assert kernels.add(e, fake((0, 5), F32), out=fake((0, 5), F32)).shape == (0, 5)
    kernels.fill(e, 1.0)
    kernels.softmax(fake((3, 0), F32), out=fake((3, 0), F32))
    kernels.matmul_tiled(fake((0, 4), F32), fake((4, 3), F32), out=fake((0, 3), F32))
    kernels.transpose(e, out=fake((5, 0), F32))
    kernels.bmm(fake((0, 2, 2), F32), fake((0, 2, 2), F32), out=fake((0, 2, 2), F32))
    assert launches == []


def test_k_zero_still_launches_to_write_zeros(launches):
    kernels.matmul_tiled(fake((3, 0), F32), fake((0, 4), F32), out=fake((3, 4), F32))
    kernels.wmma_gemm(fake((3, 0), F16), fake((0, 4), F16), out=fake((3, 4), F32))
    assert len(launches) == 2
    for c in launches:
        _check_launch(c)


# -- wrappers: bad input is refused before any launch ------------------------------------------
def _refuses(launches, exc, match, fn, *args, **kwargs):
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)
    assert launches == []


def test_bad_dtypes(launches):
    _refuses(launches, TypeError, "add: x has dtype int32; supported: bfloat16, float16, "
             "float32, float64", kernels.add, fake((3,), np.int32),
             fake((3,), np.int32), out=fake((3,), np.int32))
    _refuses(launches, TypeError, "x is float32 but y is float16", kernels.add, fake((3,), F32),
             fake((3,), F16))
    _refuses(launches, TypeError, "supported: float32$", kernels.matmul_tiled, fake((2, 2), F16),
             fake((2, 2), F16))
    _refuses(launches, TypeError, "supported: float16", kernels.wmma_gemm, fake((2, 2), F32),
             fake((2, 2), F32))
    _refuses(launches, TypeError, "out_dtype", kernels.wmma_gemm, fake((2, 2), F16),
             fake((2, 2), F16), out_dtype=np.float64)
    _refuses(launches, TypeError, "supported: bfloat16, float16, float32$", kernels.softmax,
             fake((2, 2), F64))
    _refuses(launches, TypeError, "1-byte elements", kernels.transpose, fake((2, 2), np.int8))
    _refuses(launches, TypeError, "16-byte elements", kernels.transpose,
             fake((2, 2), np.complex128))
    _refuses(launches, TypeError, "bias is float16 but x is float32", kernels.bias_relu,
             fake((2, 3), F32), fake((3,), F16))
    _refuses(launches, TypeError, "mean has dtype float16", kernels.batch_norm_relu_infer,
             fake((1, 2, 2, 2), F16), fake((2,), F32), fake((2,), F32), fake((2,), F16),
             fake((2,), F32))
    _refuses(launches, TypeError, "out has dtype float16", kernels.scale, fake((3,), F32), 2.0,
             out=fake((3,), F16))


def test_bad_shapes(launches):
    _refuses(launches, ValueError, "no broadcasting", kernels.add, fake((3,), F32),
             fake((4,), F32))
    _refuses(launches, ValueError, "inner dimensions differ", kernels.matmul_naive,
             fake((2, 3), F32), fake((4, 5), F32))
    _refuses(launches, ValueError, "2 dimensions", kernels.matmul_tiled, fake((2, 3, 3), F32),
             fake((3, 5), F32))
    _refuses(launches, ValueError, "batch sizes differ", kernels.bmm, fake((2, 3, 3), F32),
             fake((3, 3, 3), F32))
    _refuses(launches, ValueError, "both 2-D", kernels.bmm, fake((3, 3), F32), fake((3, 3), F32))
    _refuses(launches, ValueError, "bias has 4 elements but x has 3 features", kernels.bias_gelu,
             fake((2, 3), F32), fake((4,), F32))
    _refuses(launches, ValueError, "var has 3 elements but x has 2 channels",
             kernels.batch_norm_relu_infer, fake((1, 2, 2, 2), F32), fake((2,), F32),
             fake((2,), F32), fake((2,), F32), fake((3,), F32))
    _refuses(launches, ValueError, "4 dimensions", kernels.nchw_to_nhwc, fake((2, 3, 4), F32))
    _refuses(launches, ValueError, r"out has shape \(3, 3\), expected \(2, 3\)",
             kernels.matmul_tiled, fake((2, 4), F32), fake((4, 3), F32), out=fake((3, 3), F32))
    _refuses(launches, ValueError, "32-bit limit", kernels.matmul_tiled,
             fake((1, 2**32), F32), fake((2**32, 1), F32))


def test_bad_layout_device_memory(launches):
    a = fake((4, 6), F32)
    _refuses(launches, ValueError, "C-contiguous", kernels.softmax, a.T)
    _refuses(launches, ValueError, "C-contiguous", kernels.add, a[:, ::2], a[:, ::2])
    _refuses(launches, ValueError, "device 1", kernels.add, a, fake((4, 6), F32, device=DEV1))
    _refuses(launches, ValueError, "out is on device 1", kernels.scale, a, 2.0,
             out=fake((4, 6), F32, device=DEV1))
    buf = _FakeBuffer(1 << 40)
    closed = fake((4, 6), F32, buffer=buf)
    buf._ptr = None
    _refuses(launches, ClosedError, "x is closed", kernels.softmax, closed)
    _refuses(launches, TypeError, "host numpy array", kernels.add, np.ones(3, F32),
             fake((3,), F32))
    _refuses(launches, TypeError, "y is required", kernels.add, fake((3,), F32), None)
    _refuses(launches, TypeError, "alpha must be a real number", kernels.axpy, "2",
             fake((3,), F32), fake((3,), F32))
    _refuses(launches, ValueError, "overflows float16", kernels.fill, fake((3,), F16), 1e6)
    _refuses(launches, ValueError, "eps must be finite", kernels.batch_norm_relu_infer,
             fake((1, 2, 1, 1), F32), *(fake((2,), F32) for _ in range(4)), eps=-1.0)


@pytest.mark.parametrize("op,name,call", [
    ("softmax", "x", lambda h, d: kernels.softmax(h)),
    ("bias_gelu", "bias", lambda h, d: kernels.bias_gelu(d, h[0])),
    ("add", "y", lambda h, d: kernels.add(d, h)),
    ("add", "out", lambda h, d: kernels.add(d, d, out=h)),
    ("transpose", "x", lambda h, d: kernels.transpose(h)),
    ("matmul_tiled", "b", lambda h, d: kernels.matmul_tiled(d, h)),
    ("wmma_gemm", "a", lambda h, d: kernels.wmma_gemm(h.astype(F16), d)),
    ("batch_norm_relu_infer", "var", lambda h, d: kernels.batch_norm_relu_infer(
        d.reshape(1, 4, 2, 2), d[0], d[1], d[2], h[3])),
    ("channel_bias_act", "bias", lambda h, d: kernels.channel_bias_act(d.reshape(1, 4, 4),
                                                                        h[0])),
])
def test_host_numpy_inputs_get_the_operand_message(launches, op, name, call):
    """Host data is refused, before any launch, with the words every library uses."""
    host = np.ones((4, 4), F32)
    text = (f"{op}: {name} is a host numpy array; copy it to the GPU first with "
            "cudalibs.to_device()")
    with pytest.raises(TypeError) as info:
        call(host, fake((4, 4), F32))
    assert str(info.value) == text
    assert launches == []


def test_kernels_package_mirrors_the_ptx_sources():
    """One wrapper module per PTX file; the package re-exports every public function, and
    none of them is defined twice."""
    import importlib

    for stem in STEMS:
        mod = importlib.import_module(f"cudalibs.kernels.{stem}")
        for fn in mod.__all__:
            assert getattr(kernels, fn) is getattr(mod, fn)
    exported = [n for stem in STEMS
                for n in importlib.import_module(f"cudalibs.kernels.{stem}").__all__]
    assert len(exported) == len(set(exported))
    assert sorted(exported + ["clear_cache"]) == sorted(kernels.__all__)
    assert kernels.channel_bias_act.__doc__ and "Parameters" in kernels.channel_bias_act.__doc__


def test_overlapping_outputs(launches):
    shared = _FakeBuffer(1 << 41)
    big = fake((8, 8), F32, buffer=shared)
    part = DeviceArray._view(big._ptr + 4 * 8, (8, 8), (32, 4), big._dt, DEV0, shared, None)
    _refuses(launches, ValueError, "out overlaps x", kernels.add, big, fake((8, 8), F32),
             out=part)
    _refuses(launches, ValueError, "cannot work in place", kernels.matmul_tiled, big,
             fake((8, 8), F32), out=big)
    _refuses(launches, ValueError, "cannot work in place", kernels.transpose, big, out=big)
    # The very same elements are fine for elementwise kernels.
    kernels.add(big, fake((8, 8), F32), out=big)
    kernels.axpy(2.0, big, big)
    assert len(launches) == 2


def test_launcher_cache_is_bounded_per_thread_and_drops_closed_streams(monkeypatch):
    prepared = []

    class Kernel:
        def prepare(self, grid, block, *, shared_mem=0, stream=None):
            prepared.append((grid, stream))
            return lambda *args: None

    monkeypatch.setattr(ptxlib, "kernel", lambda device, name: Kernel())
    ptxlib.clear_cache()
    s1 = cl.default_stream()
    limit = ptxlib._Cache.MAX_LAUNCHERS
    for i in range(limit + 10):
        ptxlib.launch(DEV0, "add_f32", (i + 1, 1, 1), (256, 1, 1), (), s1)
    assert len(ptxlib._cache.launchers()) == limit
    n = len(prepared)
    last = (limit + 10, 1, 1)
    ptxlib.launch(DEV0, "add_f32", last, (256, 1, 1), (), s1)
    assert len(prepared) == n  # cached
    # Another wrapper of the same live handle (as a foreign stream gets per call) reuses it.
    other = type(s1)._wrap(0, None, None)
    ptxlib.launch(DEV0, "add_f32", last, (256, 1, 1), (), other)
    assert len(prepared) == n
    # A closed stream's launcher is never reused, whatever the handle.
    closed = type(s1)._wrap(12345, None, None)
    ptxlib.launch(DEV0, "add_f32", last, (256, 1, 1), (), closed)
    closed.close()   # a wrapped handle: closing destroys nothing, only marks it closed
    assert closed.closed
    fresh = type(s1)._wrap(12345, None, None)
    ptxlib.launch(DEV0, "add_f32", last, (256, 1, 1), (), fresh)
    assert prepared[-2:] == [(last, closed), (last, fresh)]
    # Another thread gets launchers of its own.
    import threading

    t = threading.Thread(target=ptxlib.launch, args=(DEV0, "add_f32", last, (256, 1, 1), (), s1))
    t.start()
    t.join()
    assert prepared[-1] == (last, s1) and len(prepared) == n + 3
    ptxlib.clear_cache()
    assert len(ptxlib._cache.launchers()) == 0