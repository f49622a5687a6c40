"""The CI script, .ci/run: the three dependency sets it derives from the README's test command
(pinned, newest, CUDA 12) and its account of each set's skips, grouped by reason."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / ".ci" / "run"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(RUN), *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_three_sets_come_from_the_readme_command():
    done = _run("--dry-run")
    assert done.returncode == 0, done.stderr
    sets = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert list(sets) == ["pinned", "newest", "cuda12"]
    pinned, newest, cuda12 = sets["pinned"], sets["newest"], sets["cuda12"]
    assert "-c .ci/constraints.txt" in pinned and '".[cu13,test]"' in pinned
    # newest: the same command without the pins
    assert newest == pinned.replace("-c .ci/constraints.txt ", "")
    # CUDA 12: the newest command with the cu12 extra, as the README tells CUDA 12 users
    assert cuda12 == newest.replace('".[cu13,test]"', '".[cu12,test]"')
    assert "cu13" not in cuda12 and "constraints" not in cuda12


def test_skips_are_counted_by_reason(tmp_path):
    log = tmp_path / "pytest.log"
    log.write_text(
        "....sss\n"
        "=========================== short test summary info ============================\n"
        "SKIPPED [74] tests/cpu/conftest.py:169: finalizes cuDNN backend descriptors\n"
        "SKIPPED [6] tests/cpu/test_ptx.py:198: set CUDALIBS_PTXAS_12: the ptxas of CUDA 12.0\n"
        "SKIPPED [35] tests/cpu/other.py:12: finalizes cuDNN backend descriptors\n"
        "SKIPPED [1] tests/gpu/a.py: no GPU\n"
        "SKIPPED [1] tests/gpu/b.py: no GPU\n"
        "SKIPPED [1] tests/gpu/c.py: no GPU\n"
        "SKIPPED [1] tests/gpu/d.py: no GPU\n"
        "4 passed, 119 skipped in 1.00s\n")
    done = _run("--skips", str(log))
    assert done.returncode == 0, done.stderr
    counts = [line.split(None, 1) for line in done.stdout.splitlines()]
    # most first, each reason once with the sum of its skips and where they come from
    assert [int(n) for n, _ in counts] == [109, 6, 4]
    assert counts[0][1] == ("finalizes cuDNN backend descriptors  "
                            "(tests/cpu/conftest.py:169, tests/cpu/other.py:12)")
    # a reason with a colon of its own stays whole
    assert counts[1][1].startswith("set CUDALIBS_PTXAS_12: the ptxas of CUDA 12.0  (")
    assert counts[2][1] == ("no GPU  (tests/gpu/a.py, tests/gpu/b.py, tests/gpu/c.py, "
                            "and 1 more)")
    # a log without skips has nothing to say
    log.write_text("4 passed in 1.00s\n")
    assert _run("--skips", str(log)).stdout == ""
