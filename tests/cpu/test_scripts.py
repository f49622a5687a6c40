"""Every example and benchmark as a user runs it, on a machine without a GPU.

Each parses its command line before looking for a GPU: ``--help`` answers (with every
option's default), an unknown option is a usage error (status 2), and a run that cannot
happen here prints one line naming what is missing and exits with status 2 -- not 0, which
would read as a benchmark that ran, and not 1, which the training examples keep for a missed
target.  The driver is hidden (``CUDALIBS_CUDA_PATH`` names no file, no device is visible), so
these hold on a GPU machine too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(str(p.relative_to(ROOT)) for folder in ("examples", "benchmarks")
                 for p in (ROOT / folder).glob("*.py") if not p.name.startswith("_"))

#: Arguments a script cannot run without (argparse's own usage error comes first otherwise).
REQUIRED = {"benchmarks/guard.py": ["--before", str(ROOT)]}

RUNS = {"help": ["--help"], "bogus": ["--bogus-flag"], "plain": []}

# Runs one script's command lines one after another in this fresh interpreter, each as
# `python SCRIPT ARGS` would: run as __main__ with the script's folder first on sys.path, its
# exit status taken from SystemExit, an uncaught exception printed as a traceback (status 1).
# Paying the imports (numpy, cudalibs) once per script rather than once per command line
# keeps this file to a few seconds.
_RUNNER = r"""
import contextlib, io, json, os, runpy, sys, traceback
script, runs = sys.argv[1], json.loads(sys.argv[2])
sys.path[0] = os.path.dirname(os.path.abspath(script))
out = {}
for name, args in runs.items():
    sys.argv = [script, *args]
    stdout, stderr = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
            code = 1
    out[name] = [code, stdout.getvalue(), stderr.getvalue()]
print(json.dumps(out))
"""


class Run:
    """What one command line did: ``returncode``, ``stdout``, ``stderr``."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _run(script: str) -> dict:
    env = dict(os.environ, CUDALIBS_CUDA_PATH="/nonexistent/libcuda.so.1",
               CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)   # each script finds this checkout's cudalibs itself
    extra = REQUIRED.get(script, [])
    runs = {name: args if name == "help" else extra + args for name, args in RUNS.items()}
    proc = subprocess.run([sys.executable, "-c", _RUNNER, script, json.dumps(runs)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {name: Run(*got) for name, got in json.loads(proc.stdout.splitlines()[-1]).items()}


@pytest.fixture(scope="module")
def results() -> dict:
    """``(script, run) -> Run`` for every script and run, the scripts in parallel."""
    with ThreadPoolExecutor(max(2, os.cpu_count() or 2)) as pool:
        per_script = dict(zip(SCRIPTS, pool.map(_run, SCRIPTS)))
    return {(s, name): run for s, runs in per_script.items() for name, run in runs.items()}


def _show(proc) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"


def test_every_script_is_covered():
    assert {"examples/cnn_train.py", "examples/transformer_train.py",
            "examples/data_parallel.py", "examples/torch_ops.py", "benchmarks/conv.py",
            "benchmarks/kernels.py", "benchmarks/launch.py", "benchmarks/memory.py",
            "benchmarks/norm.py", "benchmarks/rnn.py", "benchmarks/gemm.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_answers_and_shows_the_defaults(results, script):
    proc = results[script, "help"]
    assert proc.returncode == 0, _show(proc)
    assert proc.stdout.startswith(f"usage: {Path(script).name}"), _show(proc)
    assert "needs" not in proc.stdout and not proc.stderr, _show(proc)
    # one "default:" per option other than --help (argparse prints options two spaces in)
    options = re.findall(r"^  --[\w-]+", proc.stdout, re.M)
    assert len(re.findall(r"default:", proc.stdout)) == len(options), proc.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_unknown_option_is_a_usage_error(results, script):
    proc = results[script, "bogus"]
    assert proc.returncode == 2, _show(proc)
    assert "--bogus-flag" in proc.stderr and "Traceback" not in proc.stderr, _show(proc)


@pytest.mark.parametrize("script", SCRIPTS)
def test_without_a_gpu_one_line_and_status_2(results, script):
    proc = results[script, "plain"]
    assert proc.returncode == 2, _show(proc)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1, _show(proc)
    name = Path(script).stem
    assert lines[0].startswith((f"{name}: needs", f"{script}: needs")), lines
    assert re.search(r"GPU|driver|PyTorch", lines[0]), lines
