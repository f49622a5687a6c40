"""What a user installs and first runs: the license, the wheel's files and metadata,
``python -m cudalibs``'s version and exit statuses, and the ``cudalibs.testing`` install hint.
"""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import cudalibs
from cudalibs import __main__ as main_mod

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("CUDA", "NVRTC", "CUBLAS", "CUBLASLT", "CUDNN", "NCCL", "CUFFT", "CUSPARSE")


def _python(*args, env=None, cwd=ROOT) -> subprocess.CompletedProcess:
    """``python ARGS`` importing cudalibs from this checkout."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=cwd)


# -- the license ---------------------------------------------------------------------------------
def test_the_license_is_apache_2_0():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    readme = (ROOT / "README.md").read_text()
    assert "Apache License 2.0" in readme and "(LICENSE)" in readme


# -- the wheel -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """``(file names, METADATA headers, LICENSE text)`` of a wheel built from this checkout's
    packaging files, as pip builds it."""
    from importlib import metadata

    have = tuple(int(x) for x in metadata.version("setuptools").split(".")[:2])
    if have < (77, 0):
        # Not a skip: the test extra installs it, and CI must not lose this check silently.
        pytest.fail(f"building the wheel needs setuptools >= 77 (found {have}); "
                    "pip install -e '.[cu13,test]' installs it")
    tmp = tmp_path_factory.mktemp("wheel")
    src, out = tmp / "src", tmp / "dist"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in ("cudalibs", "ptx"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--no-index", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = out.glob("cudalibs-*.whl")
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        info = f"cudalibs-{cudalibs.__version__}.dist-info"
        meta = email.parser.Parser().parsestr(z.read(f"{info}/METADATA").decode())
        license_text = z.read(f"{info}/licenses/LICENSE").decode()
    return names, meta, license_text


def test_the_wheel_leaves_the_build_script_out(wheel):
    names, _, _ = wheel
    assert "cudalibs/_ptx/build.py" not in names
    # the kernel library itself is all there
    shipped = {p.name for p in (ROOT / "ptx").iterdir()
               if p.suffix in (".ptx", ".cu", ".cuh") or p.name == "README.md"}
    assert {n.removeprefix("cudalibs/_ptx/") for n in names
            if n.startswith("cudalibs/_ptx/")} == shipped
    # and the only Python in the wheel is the package's own
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "cudalibs").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert {n for n in names if n.endswith(".py")} == modules


def test_the_wheel_carries_the_license(wheel):
    _, meta, license_text = wheel
    assert meta["License-Expression"] == "Apache-2.0"
    assert license_text == (ROOT / "LICENSE").read_text()
    # PEP 639: the expression replaces the classifier, which must not contradict it
    assert not [c for c in meta.get_all("Classifier") if c.startswith("License ::")]


def test_the_python_classifiers_match_requires_python(wheel):
    _, meta, _ = wheel
    low = re.fullmatch(r">=3\.(\d+)", meta["Requires-Python"])
    assert low, meta["Requires-Python"]
    minors = sorted(int(m) for c in meta.get_all("Classifier")
                    for m in re.findall(r"^Programming Language :: Python :: 3\.(\d+)$", c))
    assert minors and minors[0] == int(low.group(1))
    assert minors == list(range(minors[0], minors[-1] + 1)), minors
    assert "Programming Language :: Python :: 3 :: Only" in meta.get_all("Classifier")


# -- python -m cudalibs --------------------------------------------------------------------------
def test_version_option():
    proc = _python("-m", "cudalibs", "--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"cudalibs {cudalibs.__version__}\n"


def test_help_lists_every_exit_status():
    proc = _python("-m", "cudalibs", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--version" in proc.stdout
    section = proc.stdout.split("exit status:\n", 1)[1]
    for status, what in main_mod.EXIT_STATUSES.items():
        assert f"  {status}  {what}" in section
    assert set(main_mod.EXIT_STATUSES) == {0, 1, 2, 3}
    assert main_mod.EXIT_NO_LIBRARY == 3


def test_no_usable_library_is_status_3(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDALIBS_")}
    env.update({f"CUDALIBS_{name}_PATH": str(tmp_path / f"missing-{name.lower()}.so")
                for name in LIBRARIES})
    proc = _python("-m", "cudalibs", env=env, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "no CUDA library could be loaded" in proc.stdout
    assert proc.stdout.count("not available") == len(LIBRARIES) - 1, proc.stdout
    assert "Traceback" not in proc.stderr


def test_one_usable_library_is_not_status_3(tmp_path):
    # Only NVRTC left (the CPU tier has its wheel): the report runs, with the others missing.
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDALIBS_")}
    env.update({f"CUDALIBS_{name}_PATH": str(tmp_path / f"missing-{name.lower()}.so")
                for name in LIBRARIES if name != "NVRTC"})
    proc = _python("-m", "cudalibs", env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^  nvrtc +\d+(\.\d+)+ ", proc.stdout, re.M), proc.stdout
    assert "self-check: skipped (no GPU)" in proc.stdout


# -- cudalibs.testing without hypothesis ---------------------------------------------------------
def test_strategies_without_hypothesis_say_how_to_install_it():
    code = """
import sys
sys.modules["hypothesis"] = None          # as if the test extra were not installed
import numpy as np
from cudalibs import testing as t
a = t.random_array(5, "float32", rng=0)
t.assert_close(a, a.copy(), "float32")    # the rest of cudalibs.testing works without it
for strategy in (t.dtypes, t.shapes, t.matrix_sizes):
    try:
        strategy()
    except ImportError as exc:
        print(type(exc).__name__, "|", exc)
"""
    proc = _python("-c", code)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, proc.stdout
    for line in lines:
        kind, message = line.split(" | ")
        assert kind == "ImportError"      # not a bare ModuleNotFoundError
        assert "hypothesis" in message and 'pip install -e ".[test]"' in message
