"""Where a library really came from: overrides must be absolute paths, the path reported is the
file the dynamic loader mapped, and a library found in the current directory (through an empty
or relative ``LD_LIBRARY_PATH`` entry) draws a warning.  libm stands in for the NVIDIA
libraries: it is on every Linux machine and already mapped into Python."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import warnings

import pytest

from cudalibs import _loader, errors

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture()
def fresh_loader():
    _loader._forget()
    yield
    _loader._forget()


def _maps_path_of(address: int) -> str:
    """The file /proc/self/maps shows at ``address`` (read here, independently of cudalibs)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            low, high = (int(x, 16) for x in parts[0].split("-"))
            if low <= address < high and len(parts) == 6:
                return parts[5].strip()
    raise AssertionError(f"no mapping holds {address:#x}")


def _libm_mapping() -> str:
    libm = ctypes.CDLL("libm.so.6")
    return _maps_path_of(ctypes.cast(libm.cos, ctypes.c_void_p).value)


@pytest.mark.parametrize("value", ["libm.so.6", "./libnvrtc.so.13", "lib/libnvrtc.so.13"])
def test_relative_or_bare_override_is_refused(fresh_loader, monkeypatch, value):
    monkeypatch.setenv("CUDALIBS_NVRTC_PATH", value)
    with pytest.raises(errors.LibraryNotFoundError) as info:
        _loader.load("nvrtc")
    text = str(info.value)
    assert f"CUDALIBS_NVRTC_PATH={value}: not an absolute path" in text
    assert "set CUDALIBS_NVRTC_PATH to the absolute path" in text
    assert "nvrtc" not in _loader.loaded()


def test_mapped_path_is_the_real_mapping():
    real = _libm_mapping()
    assert os.path.isabs(real)
    assert _loader.mapped_path(ctypes.CDLL("libm.so.6")) == real          # by soname
    assert _loader.mapped_path(ctypes.CDLL(real)) == real                 # by path


def test_loader_reports_the_mapped_file(fresh_loader, monkeypatch, tmp_path):
    real = _libm_mapping()
    # Searched by soname, as the driver is.
    monkeypatch.setitem(_loader.LIBRARIES, "cuda", _loader._Spec(None, ("libm.so.6",), "x"))
    monkeypatch.delenv("CUDALIBS_CUDA_PATH", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, info = _loader.load("cuda")
    assert (info.path, info.origin) == (real, "driver")
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)]
    # An override through a link: the file mapped is reported, not the name given.
    link = tmp_path / "libalias.so"
    link.symlink_to(real)
    monkeypatch.setenv("CUDALIBS_CUDA_PATH", str(link))
    _loader._forget("cuda")
    _, info = _loader.load("cuda")
    assert (info.path, info.origin) == (real, "env override")


def test_library_found_in_the_current_directory_warns(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.warns(RuntimeWarning, match="in the current directory: whoever can write"):
        _loader._warn_relative("cuda", str(tmp_path.resolve() / "libcuda.so.1"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _loader._warn_relative("cuda", _libm_mapping())       # elsewhere: silent


@pytest.mark.parametrize("entry,where,words", [
    (":/nonexistent", ".", "an empty LD_LIBRARY_PATH entry (the current directory)"),
    ("sub:/nonexistent", "sub", "the relative LD_LIBRARY_PATH entry 'sub'"),
])
def test_planted_library_is_reported(tmp_path, entry, where, words):
    """A copy of libm planted as libcuda.so.1 where a relative LD_LIBRARY_PATH entry points
    (the loader reads that variable at process start, so this runs in a child)."""
    folder = tmp_path / where
    folder.mkdir(exist_ok=True)
    shutil.copy(_libm_mapping(), folder / "libcuda.so.1")
    code = ("import warnings; warnings.simplefilter('always')\n"
            "from cudalibs import _loader\n"
            "print(_loader.load('cuda')[1].path)\n")
    env = {k: v for k, v in os.environ.items() if k != "CUDALIBS_CUDA_PATH"}
    env.update(LD_LIBRARY_PATH=entry, PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    planted = str((folder / "libcuda.so.1").resolve())
    assert out.stdout.strip() == planted                # reported as the file it really is
    assert "RuntimeWarning" in out.stderr and planted in out.stderr
    assert words in out.stderr and "CUDALIBS_CUDA_PATH" in out.stderr
