"""examples/data_parallel.py runs, and reports identical weights on both GPUs that match a
single-GPU run over the combined batch."""

import importlib
import os
import subprocess
import sys

import pytest

import cudalibs as cl

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "examples", "data_parallel.py")


def _missing_pieces():
    missing = []
    try:
        if not callable(getattr(importlib.import_module("cudalibs.cublas"), "gemm", None)):
            missing.append("cudalibs.cublas.gemm")
    except ImportError as exc:
        missing.append(f"cudalibs.cublas ({exc})")
    try:
        k = importlib.import_module("cudalibs.kernels")
        missing += [f"cudalibs.kernels.{n}" for n in
                    ("bias_relu", "relu_backward", "axpy", "scale")
                    if not callable(getattr(k, n, None))]
    except ImportError as exc:
        missing.append(f"cudalibs.kernels ({exc})")
    return missing


def test_data_parallel_example():
    if cl.device_count() < 2:
        pytest.skip(f"needs two GPUs ({cl.device_count()} visible)")
    missing = _missing_pieces()
    if missing:
        pytest.skip("the example needs " + ", ".join(missing))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run([sys.executable, SCRIPT, "--steps", "8"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the example hung for 300 s:\n{exc.stdout}\n{exc.stderr}")
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, report
    assert "OK: after every step" in proc.stdout, report
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("|") and "step" not in ln
            and not ln.startswith("|--")]
    assert len(rows) == 8 and all(" yes " in ln for ln in rows), report
