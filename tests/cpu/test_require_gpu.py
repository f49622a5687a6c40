"""``CUDALIBS_REQUIRE_GPU=1`` turns the GPU tier's skips into failures.

Each tier test runs pytest in a subprocess on a tiny generated tier: a copy of
tests/gpu/conftest.py beside a few tests that skip the ways the real ones do.  A root conftest
stands in for the machine (no driver, or one GPU), and an ``nvidia-smi`` first on ``PATH`` for
what the machine shows (no GPU, or one), so the outcome does not depend on the machine running
this.  The last tests check tests/gpu/_oracles.py, the GPU tests' second oracle, the same way:
absent, it is a warning, or a failure under the variable.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import subprocess
import sys
import textwrap
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_CONFTEST = ROOT / "tests" / "gpu" / "conftest.py"
ORACLES = ROOT / "tests" / "gpu" / "_oracles.py"

NO_DRIVER = """
import cudalibs
cudalibs.unavailable_reason = lambda: "no NVIDIA driver (stand-in)"
"""

ONE_GPU = """
import types
import cudalibs
cudalibs.unavailable_reason = lambda: None
cudalibs.device_count = lambda: 1
cudalibs.Device = lambda ordinal: types.SimpleNamespace(set_current=lambda: None)
"""

TESTS = {
    "test_tier.py": """
        import pytest

        def test_runs():
            pass

        def test_library_missing():
            pytest.importorskip("cudalibs_no_such_module")

        @pytest.mark.skipif(True, reason="cuDNN is not installed")
        def test_skipif_library():
            pass

        def test_nvcc_missing():
            pytest.skip("nvcc is not on PATH (needed to build a fatbin)")

        def test_two_gpus():
            pytest.skip("needs two GPUs (1 visible)")

        def test_capability():
            pytest.skip("fp8 needs compute capability >= 8.9")

        @pytest.mark.xfail(reason="known", strict=True)
        def test_expected_failure():
            assert False
    """,
    "test_module_skip.py": """
        import pytest

        pytest.importorskip("cudalibs_no_such_module")

        def test_never_collected():
            pass
    """,
}


#: What ``nvidia-smi -L`` says, as a shell script: on a machine without GPUs ...
SMI_NO_GPU = """#!/bin/sh
echo "No devices were found"
exit 6
"""
#: ... and on one with a GPU.
SMI_ONE_GPU = """#!/bin/sh
echo "GPU 0: NVIDIA Stand-in (UUID: GPU-00000000-0000-0000-0000-000000000000)"
"""


def _run(tmp_path: Path, machine: str, require: bool, smi: str = SMI_NO_GPU,
         extra_env: dict | None = None) -> dict[str, str]:
    """Run the generated tier; ``{test name: outcome}`` from pytest's JUnit XML."""
    gpu = tmp_path / "gpu"
    gpu.mkdir(exist_ok=True)
    (tmp_path / "conftest.py").write_text(machine)
    (gpu / "conftest.py").write_text(GPU_CONFTEST.read_text())
    for name, body in TESTS.items():
        (gpu / name).write_text(textwrap.dedent(body))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(smi)
    (bin_dir / "nvidia-smi").chmod(0o755)
    env = dict(os.environ)
    env.pop("CUDALIBS_REQUIRE_GPU", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")]).rstrip(os.pathsep)
    env.update(extra_env or {})
    if require:
        env["CUDALIBS_REQUIRE_GPU"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    xml = tmp_path / f"report-{require}.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
         "--continue-on-collection-errors", f"--junitxml={xml}", "--rootdir", str(tmp_path),
         str(gpu)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert xml.exists(), proc.stdout + proc.stderr
    outcomes = {}
    for case in ET.parse(xml).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        text = " ".join((child.get("message") or "") + (child.text or "") for child in case)
        name = case.get("name") or case.get("classname")
        outcomes[name] = (kinds[0] if kinds else "passed", text)
    outcomes["_exit"] = (proc.returncode, proc.stdout + proc.stderr)
    return outcomes


def _kind(outcomes, name):
    return outcomes[name][0]


def test_without_a_gpu_the_tier_skips(tmp_path):
    out = _run(tmp_path, NO_DRIVER, require=False)
    assert out["_exit"][0] == 0, out["_exit"][1]
    assert _kind(out, "test_runs") == "skipped"
    assert "GPU tier skipped: no NVIDIA driver (stand-in)" in out["test_runs"][1]


def test_a_gpu_in_sight_that_cudalibs_cannot_use_fails_the_tier(tmp_path):
    # nvidia-smi lists a GPU, cudalibs finds no driver: a loader regression, not "no GPU".
    out = _run(tmp_path, NO_DRIVER, require=False, smi=SMI_ONE_GPU)
    assert out["_exit"][0] != 0, out["_exit"][1]
    for name in ("test_runs", "test_library_missing", "test_two_gpus", "test_capability"):
        kind, text = out[name]
        assert kind in ("failure", "error"), (name, kind, out["_exit"][1])
        assert "a GPU is in sight" in text and "NVIDIA Stand-in" in text, text
        assert "no NVIDIA driver (stand-in)" in text, text


def test_gpus_hidden_on_purpose_skip_the_tier(tmp_path):
    out = _run(tmp_path, NO_DRIVER, require=False, smi=SMI_ONE_GPU,
               extra_env={"CUDA_VISIBLE_DEVICES": ""})
    assert out["_exit"][0] == 0, out["_exit"][1]
    assert _kind(out, "test_runs") == "skipped"
    assert "GPU tier skipped: no NVIDIA driver (stand-in)" in out["test_runs"][1]


def test_without_a_gpu_required_the_tier_fails_with_the_reason(tmp_path):
    out = _run(tmp_path, NO_DRIVER, require=True)
    assert out["_exit"][0] != 0
    for name in ("test_runs", "test_library_missing", "test_two_gpus"):
        kind, text = out[name]
        assert kind in ("failure", "error"), (name, kind)
        assert "CUDALIBS_REQUIRE_GPU=1" in text and "no NVIDIA driver (stand-in)" in text


@pytest.mark.parametrize("require", [False, True])
def test_on_a_gpu_machine_only_hardware_limits_may_skip(tmp_path, require):
    out = _run(tmp_path, ONE_GPU, require=require)
    exit_code, log = out["_exit"]
    assert _kind(out, "test_runs") == "passed", log
    # the machine rules these out: skipped either way, with their reason
    assert _kind(out, "test_two_gpus") == "skipped" and "1 visible" in out["test_two_gpus"][1]
    assert _kind(out, "test_capability") == "skipped"
    # an expected failure is neither a skip nor a failure
    assert _kind(out, "test_expected_failure") == "skipped"
    missing = {"test_library_missing": "cudalibs_no_such_module",
               "test_skipif_library": "cuDNN is not installed",
               "test_nvcc_missing": "nvcc is not on PATH"}
    module = [k for k in out if k.endswith("test_module_skip")]
    if not require:
        assert exit_code == 0, log
        assert all(_kind(out, name) == "skipped" for name in missing), out
        assert not module or _kind(out, module[0]) == "skipped"
        return
    assert exit_code != 0
    for name, reason in missing.items():
        kind, text = out[name]
        assert kind in ("failure", "error"), (name, kind, log)
        assert reason in text and "CUDALIBS_REQUIRE_GPU=1" in text, text
    # a module that skips at import (pytest.importorskip at the top) fails to collect
    assert module and _kind(out, module[0]) == "error", log
    assert "cudalibs_no_such_module" in out[module[0]][1]


# -- the second oracle ------------------------------------------------------------------------
@pytest.fixture()
def oracles(monkeypatch):
    """tests/gpu/_oracles.py, loaded from its file, with CUDALIBS_REQUIRE_GPU unset."""
    spec = importlib.util.spec_from_file_location("gpu_oracles_under_test", ORACLES)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.delenv("CUDALIBS_REQUIRE_GPU", raising=False)
    return mod


class _BrokenImport(importlib.abc.MetaPathFinder):
    """Makes ``import torch`` fail the way a broken install does (not an ImportError)."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise OSError("libtorch_cuda.so: undefined symbol (stand-in)")
        return None


def test_an_absent_oracle_warns(oracles, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)       # import torch: ImportError
    with pytest.warns(oracles.MissingOracleWarning, match="torch cannot be imported"):
        assert oracles.torch_oracle(cuda=False) is None


def test_an_absent_oracle_fails_when_the_gpu_is_required(oracles, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setenv("CUDALIBS_REQUIRE_GPU", "1")
    with pytest.raises(pytest.fail.Exception, match="CUDALIBS_REQUIRE_GPU=1: a second oracle"):
        oracles.torch_oracle(cuda=False)


def test_an_oracle_without_cuda_is_absent_for_device_checks_only(oracles, monkeypatch):
    cpu_only = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", cpu_only)
    assert oracles.torch_oracle(cuda=False) is cpu_only
    with pytest.warns(oracles.MissingOracleWarning, match="no usable CUDA device"):
        assert oracles.torch_oracle(cuda=True) is None
    monkeypatch.setenv("CUDALIBS_REQUIRE_GPU", "1")
    with pytest.raises(pytest.fail.Exception, match="no usable CUDA device"):
        oracles.torch_oracle(cuda=True)


def test_an_oracle_that_fails_to_import_is_not_swallowed(oracles, monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_BrokenImport(), *sys.meta_path])
    with pytest.raises(OSError, match="undefined symbol"):
        oracles.torch_oracle(cuda=False)
