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


#: What the example calls besides NCCL: all of it is part of cudalibs, so a piece that does
#: not import is a failure of this package (a skip would hide it).
PIECES = {"cudalibs.cublas": ("gemm",),
          "cudalibs.kernels": ("bias_relu", "relu_backward", "axpy", "scale")}


def _missing_pieces():
    missing = []
    for module, names in PIECES.items():
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module} ({type(exc).__name__}: {exc})")
            continue
        missing += [f"{module}.{n}" for n in names if not callable(getattr(mod, n, None))]
    return missing


def test_the_example_finds_what_it_calls():
    # On any machine with a GPU, two or not: the pieces are importable and callable.
    missing = _missing_pieces()
    assert not missing, "the example needs " + ", ".join(missing)


def test_data_parallel_example():
    missing = _missing_pieces()
    if missing:
        pytest.fail("the example needs " + ", ".join(missing), pytrace=False)
    if cl.device_count() < 2:
        pytest.skip(f"needs two GPUs ({cl.device_count()} visible)")
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
