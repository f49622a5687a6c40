"""The rules tests/conftest.py sets for every run: cudalibs' caches in a private directory of
the run's own, and ``rng`` seeds that replay.

The first test looks at this run; the others run pytest in subprocesses on a tiny generated
suite that has a copy of tests/conftest.py, with different hash salts (``PYTHONHASHSEED``) and
``CUDALIBS_TEST_SEED`` values.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from cudalibs.driver import compile_cache
from cudalibs.runtime.tuning import tuning_store

ROOT = Path(__file__).resolve().parents[2]
CONFTEST = ROOT / "tests" / "conftest.py"

SUITE = """
    import json
    import os

    from cudalibs.driver import compile_cache
    from cudalibs.runtime.tuning import tuning_store


    def test_draw(rng):
        with open(os.environ["REPORT"] + ".draw", "w") as f:
            json.dump({"value": int(rng.integers(2**62)), "store": tuning_store().path,
                       "kernels": compile_cache.cache_dir()}, f)


    def test_fails(rng):
        with open(os.environ["REPORT"] + ".fails", "w") as f:
            json.dump({"value": int(rng.integers(2**62))}, f)
        assert False, "fails on purpose, to show its seed"
"""


def _below(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([path, root]) == root


def test_the_caches_are_this_runs_own(cudalibs_caches):
    root = cudalibs_caches
    # Private: the tuning store and the kernel cache refuse a directory others can write.
    assert stat.S_IMODE(os.lstat(root).st_mode) == 0o700
    store, kernels = tuning_store().path, compile_cache.cache_dir()
    home_cache = os.path.join(os.path.expanduser("~"), ".cache")
    for what, path in (("tuning store", store), ("kernel cache", kernels)):
        assert path is not None and _below(path, root), (what, path, root)
        assert not _below(path, home_cache), (what, path)


def _start(tmp: Path, name: str, **env_vars: str) -> tuple[subprocess.Popen, Path]:
    suite = tmp / "suite"
    if not suite.exists():
        suite.mkdir()
        (suite / "conftest.py").write_text(CONFTEST.read_text())
        (suite / "test_seeded.py").write_text(textwrap.dedent(SUITE))
    env = dict(os.environ)
    env.pop("CUDALIBS_TEST_SEED", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    # The generated suite needs no installed plugin; loading them (and rewriting their
    # modules' asserts) would be most of each run's time.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    report = tmp / name
    env["REPORT"] = str(report)
    env.update(env_vars)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(suite),
         str(suite)], cwd=suite, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    return proc, report


def _finish(started) -> dict:
    proc, report = started
    out, _ = proc.communicate(timeout=120)
    result = {"exit": proc.returncode, "out": out}
    for kind in ("draw", "fails"):
        path = Path(f"{report}.{kind}")
        if path.exists():
            result[kind] = json.loads(path.read_text())
    seed = re.search(r"^CUDALIBS_TEST_SEED=(\d+) ", out, re.MULTILINE)
    result["seed"] = int(seed.group(1)) if seed else None
    caches = re.search(r"^cudalibs caches \(tuning store, compiled kernels\): (\S+)$", out,
                       re.MULTILINE)
    result["caches"] = caches.group(1) if caches else None
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The generated suite's runs, ``{name: result}``; each with another hash salt."""
    tmp = tmp_path_factory.mktemp("suite-rules")
    started = {"default": _start(tmp, "default", PYTHONHASHSEED="1"),
               "random": _start(tmp, "random", PYTHONHASHSEED="2", CUDALIBS_TEST_SEED="random"),
               "bad": _start(tmp, "bad", CUDALIBS_TEST_SEED="twelve")}
    done = {name: _finish(proc) for name, proc in started.items()}
    if done["random"]["seed"] is not None:
        done["replay"] = _finish(_start(tmp, "replay", PYTHONHASHSEED="3",
                                        CUDALIBS_TEST_SEED=str(done["random"]["seed"])))
    return done


GOOD = ("default", "random", "replay")


def test_the_generated_runs_ran(runs):
    for name in GOOD:
        r = runs.get(name)
        assert r is not None, f"no {name} run (the random run showed no seed)"
        # test_fails fails, test_draw passes: exit status 1, and both wrote their report.
        assert r["exit"] == 1 and "draw" in r and "fails" in r, (name, r["out"])


def test_the_run_seed_shown_replays_the_draws_in_another_process(runs):
    default, rand, replay = runs["default"], runs["random"], runs["replay"]
    assert default["seed"] == 0, default["out"]
    # A random run seed is shown in the header; that seed, in a process with another hash
    # salt, gives every test the same draws.
    assert rand["seed"] is not None and replay["seed"] == rand["seed"]
    assert replay["draw"]["value"] == rand["draw"]["value"]
    assert replay["fails"]["value"] == rand["fails"]["value"]
    assert rand["draw"]["value"] != rand["fails"]["value"]      # each test its own stream
    if rand["seed"] != default["seed"]:                         # all but once in 2**32 runs
        assert rand["draw"]["value"] != default["draw"]["value"]


def test_a_failure_shows_its_seed(runs):
    for name in GOOD:
        r = runs[name]
        shown = re.search(r"the rng fixture was numpy\.random\.default_rng\((\d+)\); replay "
                          rf"with CUDALIBS_TEST_SEED={r['seed']} pytest '\S*test_fails'",
                          r["out"])
        assert shown, r["out"]
        # The seed shown is the generator's: it gives the failing test's draw.
        assert np.random.default_rng(int(shown.group(1))).integers(2**62) == r["fails"]["value"]


def test_a_malformed_run_seed_is_refused(runs):
    r = runs["bad"]
    assert r["exit"] == 4 and "CUDALIBS_TEST_SEED='twelve'" in r["out"], r["out"]
    assert "draw" not in r


def test_each_run_has_fresh_private_caches_that_it_removes(runs):
    roots = []
    for name in GOOD:
        r = runs[name]
        root = r["caches"]
        assert root is not None, r["out"]
        assert _below(r["draw"]["store"], root) and _below(r["draw"]["kernels"], root)
        assert not os.path.exists(root), "the run's cache directory outlived it"
        roots.append(root)
    assert len(set(roots)) == len(roots)
