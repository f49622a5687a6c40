"""The rules tests/conftest.py sets for every run: cudalibs' caches in a private directory of
the run's own, and ``rng`` seeds that replay; and the rule that makes the GPU tier's random
inputs replay too (read from its source): every draw is seeded by the ``rng`` fixture or, in a
hypothesis test, by a seed hypothesis drew.

The first test looks at this run; the others run pytest in subprocesses on a tiny generated
suite that has a copy of tests/conftest.py, with different hash salts (``PYTHONHASHSEED``) and
``CUDALIBS_TEST_SEED`` values.
"""

from __future__ import annotations

import ast
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


# -- randomness in the GPU tier that replays ------------------------------------------------------
GPU_TIER = ROOT / "tests" / "gpu"
#: numpy.random's names that make a seeded generator (anything else there is global state).
_NUMPY_MAKERS = frozenset({"default_rng", "Generator", "SeedSequence", "PCG64", "PCG64DXSM",
                           "Philox", "SFC64", "MT19937", "BitGenerator"})
#: torch's drawing functions, which take ``generator=`` (without one: torch's global state).
_TORCH_DRAWS = frozenset({"rand", "randn", "randint", "randperm", "normal", "bernoulli",
                          "multinomial", "rand_like", "randn_like", "randint_like"})
#: ``{file: number of unseeded draws}`` of GPU-tier files whose draws do not all replay yet.
#: The count keeps each from growing and fails once the file is fixed, so the entry goes too.
UNSEEDED: dict[str, int] = {}


def _draws_unseeded(node: ast.Call) -> str | None:
    """What is wrong with a call, if it draws random numbers that no seed of the run's fixes."""
    func = node.func
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    dotted = ".".join(reversed(parts))
    name = parts[0] if parts else ""
    kw = {k.arg: k.value for k in node.keywords}

    def none(v):
        return isinstance(v, ast.Constant) and v.value is None

    if name == "random_array" and ("rng" not in kw or none(kw["rng"])):
        return "random_array without rng= (a fresh unseeded generator)"
    if name == "default_rng" and (not node.args and "seed" not in kw
                                  or node.args and none(node.args[0])):
        return "default_rng() without a seed"
    if dotted.startswith(("np.random.", "numpy.random.")) and len(parts) == 3 and \
            name not in _NUMPY_MAKERS:
        return f"{dotted}: numpy's global random state"
    if dotted.startswith("torch.") and len(parts) == 2 and name in _TORCH_DRAWS and \
            "generator" not in kw:
        return f"{dotted} without generator=: torch's global random state"
    return None


def _is_given(fn) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if (isinstance(target, ast.Name) and target.id == "given") or \
                (isinstance(target, ast.Attribute) and target.attr == "given"):
            return True
    return False


def unseeded_draws(source: str, where: str) -> list[str]:
    """``"<where>:<line>: why"`` of every draw in ``source`` that a failing run could not
    replay: random inputs outside hypothesis must come from the ``rng`` fixture (seeded from
    the run's seed), and a hypothesis test must draw its seed from hypothesis -- the ``rng``
    fixture there would give each example the draws left over from the one before."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            why = _draws_unseeded(node)
            if why:
                found.append((node.lineno, why))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_given(node):
            if any(a.arg == "rng" for a in node.args.args + node.args.kwonlyargs):
                found.append((node.lineno, f"the hypothesis test {node.name} takes the rng "
                                           "fixture; draw a seed with hypothesis instead"))
    return [f"{where}:{line}: {why}" for line, why in sorted(found)]


def test_the_gpu_tiers_random_inputs_replay():
    bad, counts = [], {}
    for path in sorted(GPU_TIER.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        found = unseeded_draws(path.read_text(encoding="utf-8"), rel)
        if rel in UNSEEDED:
            counts[rel] = len(found)
        else:
            bad += found
    assert not bad, "draws a failing run could not replay:\n" + "\n".join(bad)
    stale = {rel: n for rel, n in counts.items() if n != UNSEEDED[rel]}
    assert not stale, (f"unseeded draws now {stale}, listed as {UNSEEDED}: bring UNSEEDED in "
                       "line (remove a file whose draws all replay)")


def test_the_replay_rule_catches_what_it_should():
    src = textwrap.dedent('''
        import numpy as np
        import torch
        from hypothesis import given
        from cudalibs import testing as T

        def test_plain(rng):
            T.random_array(4, np.float32)
            T.random_array(4, np.float32, rng=None)
            np.random.default_rng()
            np.random.rand(3)
            torch.randn(3, device="cuda")
            T.random_array(4, np.float32, rng=rng)
            np.random.default_rng(7).standard_normal(3)
            torch.randn(3, generator=g)

        @given(seed=st.integers(0, 9))
        def test_drawn(rng, seed):
            np.random.default_rng(seed)
    ''')
    found = unseeded_draws(src, "x.py")
    assert [f.split(":")[1] for f in found] == ["8", "9", "10", "11", "12", "18"], found
