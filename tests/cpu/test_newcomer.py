"""What a first session with cudalibs runs into, without a GPU: the subpackages as attributes,
``import cudalibs.graph``, compiling with no driver, ``python -m cudalibs`` and its install
hints, and the dtype table refusing ``None``."""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import pydoc
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import cudalibs as cl
from cudalibs import __main__ as main_mod
from cudalibs import _loader
from cudalibs import dtypes
from cudalibs.errors import LibraryNotFoundError, NvrtcError

ROOT = Path(__file__).resolve().parents[2]
LAZY = ("cublas", "cudnn", "nccl", "kernels", "testing")


def _python(*parts: str) -> subprocess.CompletedProcess:
    """Run the code ``parts`` in a fresh interpreter that imports cudalibs from this checkout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    code = "\n".join(textwrap.dedent(p) for p in parts)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)


# The CUDA libraries mapped into the running process.
_LOADED = """
    import os

    def loaded():
        with open("/proc/self/maps") as f:
            names = {os.path.basename(line.split()[-1]) for line in f if "/" in line}
        return sorted(n for n in names if n.startswith(("libcuda.", "libcublas", "libcudnn",
                                                        "libnccl", "libnvrtc")))
"""


# -- the library subpackages are attributes, imported on first touch ---------------------------
def test_subpackages_are_listed_by_dir():
    names = dir(cl)
    for name in LAZY + ("graph", "dtypes", "compile"):
        assert name in names, name


def test_touching_the_subpackages_loads_no_library():
    proc = _python(_LOADED, """
    import cudalibs
    listed = dir(cudalibs)
    mods = [cudalibs.cublas, cudalibs.cudnn, cudalibs.nccl, cudalibs.testing]
    assert [m.__name__ for m in mods] == ["cudalibs.cublas", "cudalibs.cudnn", "cudalibs.nccl",
                                          "cudalibs.testing"]
    assert cudalibs.cublas.gemm and cudalibs.cudnn.conv_forward and cudalibs.nccl.Communicator
    print("LOADED", loaded())
    cudalibs.driver.nvrtc.version()  # the check sees a library once one is loaded
    print("AFTER", loaded())
    """)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout, proc.stdout
    assert "AFTER ['libnvrtc" in proc.stdout, proc.stdout


def test_kernels_is_an_attribute():
    import importlib

    assert cl.kernels is importlib.import_module("cudalibs.kernels")


def test_help_on_a_library_function():
    text = pydoc.render_doc(cl.cublas.gemm, renderer=pydoc.plaintext)
    assert "gemm(" in text and "Parameters" in text


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'cudalibs' has no attribute 'cublaz'"):
        cl.cublaz  # noqa: B018 - the access is the test
    assert not hasattr(cl, "cublaz")


def test_import_cudalibs_graph():
    import cudalibs.driver.graph
    import cudalibs.graph as g

    assert g is cudalibs.driver.graph is cl.graph
    from cudalibs.graph import capture  # noqa: F401 - the import is the test


# -- compile: arguments first, the driver only when it is needed -------------------------------
SOURCE = r'''extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }'''


def test_compile_refuses_a_non_string_before_loading_anything():
    proc = _python(_LOADED, """
    import cudalibs as cl
    for bad in (123, b"bytes"):
        try:
            cl.compile(bad)
        except TypeError as exc:
            assert "source must be a str" in str(exc), exc
        else:
            raise AssertionError("no TypeError")
    for kwargs in ({"options": "-O3"}, {"name": 5}, {"arch": "hopper"}, {"target": "sass"}):
        try:
            cl.compile("x", **kwargs)
        except (TypeError, ValueError):
            pass
        else:
            raise AssertionError(kwargs)
    print("LOADED", loaded())
    """)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout, proc.stdout


@pytest.fixture()
def no_driver(monkeypatch, tmp_path):
    """This process as on a machine without the NVIDIA driver, whatever the real one has."""
    from cudalibs.driver import _core, device, nvrtc

    def missing():
        raise LibraryNotFoundError("cuda", ["libcuda.so.1: not found (stand-in)"],
                                   "install the NVIDIA driver")

    def no_device(*args, **kwargs):
        raise AssertionError("an explicit arch must not ask the driver for a device")

    monkeypatch.setattr(_core, "driver_version", missing)
    monkeypatch.setattr(device, "as_device", no_device)
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", str(tmp_path / "cache"))
    nvrtc.clear_memory_cache()
    yield tmp_path / "cache"
    nvrtc.clear_memory_cache()


def test_compile_with_an_arch_compiles_without_a_driver(no_driver):
    # NVRTC runs: a compile error is the compiler's, not a missing driver ...
    with pytest.raises(NvrtcError) as info:
        cl.compile("__global__ void k() { undefined_thing(); }", arch="sm_90")
    assert "undefined_thing" in info.value.detail
    # ... and a good source compiles into a Module that loads on first use
    mod = cl.compile(SOURCE, arch="sm_90")
    assert mod.kind == "ptx" and mod.ptx_version is not None
    assert mod.kernel_names and not mod.closed
    assert "not loaded yet" in repr(mod)
    assert list(no_driver.rglob("*.bin")), "the compiled image was not cached"
    # loading it is what needs the driver
    with pytest.raises(LibraryNotFoundError) as info:
        mod[mod.kernel_names[0]]
    assert info.value.library == "cuda"
    mod.close()
    assert mod.closed
    with pytest.raises(cl.ClosedError):
        mod[mod.kernel_names[0]]


def test_compile_without_arch_asks_the_device(monkeypatch):
    from cudalibs.driver import device

    asked = []

    def as_device(dev):
        asked.append(dev)
        raise LibraryNotFoundError("cuda", [], "stand-in")

    monkeypatch.setattr(device, "as_device", as_device)
    with pytest.raises(LibraryNotFoundError):
        cl.compile(SOURCE)
    assert asked == [None]


# -- python -m cudalibs -------------------------------------------------------------------------
def test_help_prints_usage_and_exits_0():
    proc = subprocess.run([sys.executable, "-m", "cudalibs", "--help"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: python -m cudalibs")
    assert "libraries:" not in proc.stdout  # the report did not run


def test_unknown_option_is_a_usage_error():
    with pytest.raises(SystemExit) as info:
        main_mod.main(["--no-such-option"])
    assert info.value.code == 2


def _missing(monkeypatch, name: str) -> None:
    """Make the loader fail to find library ``name`` the way it does where it is absent."""
    monkeypatch.delenv(_loader.env_var(name), raising=False)
    monkeypatch.setitem(_loader.LIBRARIES, name, dataclasses.replace(
        _loader.LIBRARIES[name], pathfinder="cudalibs-no-such-library",
        sonames=("libcudalibs-no-such-library.so.0",)))
    monkeypatch.delitem(_loader._cache, name, raising=False)


def _report_with_missing(monkeypatch, name: str) -> tuple[str, LibraryNotFoundError]:
    """The report, and the loader's error, for a library that is not installed."""
    _missing(monkeypatch, name)
    with pytest.raises(LibraryNotFoundError) as info:
        _loader.load(name)
    monkeypatch.setattr(main_mod, "_library_versions",
                        lambda: {name: lambda: _loader.load(name)})
    out = io.StringIO()
    main_mod.report(out)
    return out.getvalue(), info.value


@pytest.mark.parametrize("name", ["nvrtc", "nccl"])
def test_install_hint_from_a_checkout(monkeypatch, name):
    assert _loader.checkout_root() == str(ROOT)
    text, err = _report_with_missing(monkeypatch, name)
    wheel = _loader.WHEELS[name][0]
    # one hint: the error's and the report's are the same line
    assert err.hint == _loader.install_hint(name) and err.hint in text and err.hint in str(err)
    assert 'install ".[cu13]" in ' + str(ROOT) in text or \
        'install -e ".[cu13]" in ' + str(ROOT) in text, text
    assert "cudalibs[cu13]" not in text + str(err)
    assert wheel in text


def test_install_hint_for_an_installed_copy(monkeypatch):
    monkeypatch.setattr(_loader, "checkout_root", lambda: None)
    text, err = _report_with_missing(monkeypatch, "nccl")
    assert "pip install nvidia-nccl-cu13 (or nvidia-nccl-cu12 for a CUDA 12 driver)" in text
    assert err.hint in text and "cudalibs[" not in text
    assert _loader.install_hint("cuda") is None  # the driver is no pip wheel


def test_a_bad_path_override_is_fixed_at_the_variable(monkeypatch):
    _missing(monkeypatch, "nccl")
    monkeypatch.setenv("CUDALIBS_NCCL_PATH", "/nowhere/libnccl.so.2")
    monkeypatch.setattr(main_mod, "_library_versions",
                        lambda: {"nccl": lambda: _loader.load("nccl")})
    out = io.StringIO()
    main_mod.report(out)
    assert "fix or unset CUDALIBS_NCCL_PATH" in out.getvalue()
    assert "pip install" not in out.getvalue()


def test_library_not_found_message_has_no_blank_line():
    # cuda.pathfinder's messages end in a newline, and some span lines
    err = LibraryNotFoundError("nvrtc", ["pathfinder: not found\n", "two: first\nsecond\n"],
                               "pip install it\n")
    lines = str(err).split("\n")
    assert all(line.strip() for line in lines), lines
    assert lines == ["cannot load the nvrtc library", "  tried pathfinder: not found",
                     "  tried two: first", "    second", "  pip install it"]
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


# -- dtypes -------------------------------------------------------------------------------------
def test_lookup_none_is_a_type_error():
    with pytest.raises(TypeError, match="dtype is None"):
        dtypes.lookup(None)
    assert dtypes.lookup("float32").name == "float32"
