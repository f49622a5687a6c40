"""Compile a small CUDA C harness for the host, to run a PTX source's own device functions
(conversions, selection keys) on the CPU against numpy: no GPU needed, only nvcc."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cudalibs import ptx as P


def compile_harness(tmp_path_factory, label: str, source: str) -> tuple[Path, Path]:
    """``(folder, executable)`` of ``source`` built with the PTX sources on the include path;
    skips the test when nvcc is not on ``PATH``."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        pytest.skip(f"nvcc is not on PATH: cannot compile the {label} harness for the host")
    tmp = tmp_path_factory.mktemp(label)
    (tmp / "harness.cu").write_text(source)
    exe = tmp / "harness"
    proc = subprocess.run([nvcc, "-O2", "-std=c++17", "-arch=compute_75", f"-I{P.DIRECTORY}",
                           str(tmp / "harness.cu"), "-o", str(exe)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp, exe


def run_harness(exe: Path, *files: Path) -> None:
    """Run the harness on its input and output files."""
    subprocess.run([str(exe), *map(str, files)], check=True, timeout=300)
