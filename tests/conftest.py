"""Settings shared by both test tiers; GPU fixtures live in tests/gpu/conftest.py.

The hypothesis profile comes from ``HYPOTHESIS_PROFILE``: ``ci`` (the default), ``sanitizer``
(few examples, for compute-sanitizer runs), ``triage`` (no shrinking) or ``wide``: about ten
examples per property test, drawn from bounds that tests/gpu/_sizes.py widens so that the
problems cross tile, block and split-K boundaries (GEMMs of a few thousand per side,
convolutions of up to a few hundred channels, softmax and norm rows of thousands of columns,
RNNs of hidden size 256-512).  A GPU test module's own example count is capped by the profile
(``examples()`` in tests/gpu/_sizes.py), so the smaller profiles do reduce it.

Besides the hypothesis profiles, two rules keep a run from depending on what an earlier one
left behind or on luck (the CPU tier's tests that finalize cuDNN backend descriptors, which
cuDNN 9.28 cannot do without the NVIDIA driver, are marked and skipped in tests/cpu/conftest.py):

* cudalibs' on-disk state -- the tuning store and the compiled-kernel cache -- lives in a
  private temporary directory made for this run (``CUDALIBS_CACHE_DIR`` and
  ``CUDALIBS_TUNING_CACHE`` point there, for subprocesses too, and it is removed at the end).
  Under the user's ``~/.cache/cudalibs`` a stored tuning record would answer instead of the
  timer, and a test of the timing path would pass without timing anything.
* The ``rng`` fixture's generator is seeded from the run's seed (``CUDALIBS_TEST_SEED``: an
  integer, default 0, or ``random`` for a fresh one) and the test's id, with a hash that is the
  same in every process; the header shows the run's seed and a failing test its own, so that
  ``CUDALIBS_TEST_SEED=<seed> pytest <test id>`` replays it.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import sys
import tempfile

import pytest
from hypothesis import Phase, settings

# NCCL picks a network interface at communicator creation; the loopback one always exists.
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")

# No deadline: the first call of a test pays for library loading, compilation and autotuning.
settings.register_profile("ci", deadline=None, max_examples=60)
# Few examples, for runs under compute-sanitizer, which slows every CUDA call down.
settings.register_profile("sanitizer", deadline=None, max_examples=4)
# Quick triage of a broken build: fewer examples and no shrinking of a failing one.
settings.register_profile("triage", deadline=None, max_examples=15,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
# Large problems (tests/gpu/_sizes.py widens the strategies' bounds): few examples, and a
# failing one reported as found -- shrinking would rerun large problems dozens of times.
settings.register_profile("wide", deadline=None, max_examples=10,
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# -- the run's own caches ---------------------------------------------------------------------
#: ``{variable: file or directory below the run's cache directory}``: with both set, nothing
#: cudalibs reads (``XDG_CACHE_HOME``, ``HOME``) can lead its caches elsewhere.
CACHE_VARIABLES = {"CUDALIBS_CACHE_DIR": "", "CUDALIBS_TUNING_CACHE": "tuning.json"}
_CACHE_ROOT = pytest.StashKey[str]()
_SAVED_ENV = pytest.StashKey[dict]()


def _cache_environment(root: str) -> dict[str, str]:
    return {var: os.path.join(root, below) if below else root
            for var, below in CACHE_VARIABLES.items()}


# -- seeds ------------------------------------------------------------------------------------
#: The variable that sets the run's seed: an integer in [0, 2**32), or ``random``.
SEED_VARIABLE = "CUDALIBS_TEST_SEED"
_RUN_SEED = pytest.StashKey[int]()
_TEST_SEED = pytest.StashKey[int]()


def _run_seed() -> int:
    value = os.environ.get(SEED_VARIABLE, "").strip()
    if not value:
        return 0
    if value.lower() == "random":
        seed = secrets.randbelow(2**32)
        # Processes started from here (pytest-xdist workers, tests' subprocesses) draw the
        # same seed instead of one each.
        os.environ[SEED_VARIABLE] = str(seed)
        return seed
    try:
        seed = int(value, 0)
    except ValueError:
        seed = -1
    if not 0 <= seed < 2**32:
        raise pytest.UsageError(f"{SEED_VARIABLE}={value!r}: an integer in [0, 2**32) or "
                                "'random' was expected")
    return seed


def seed_for_test(run_seed: int, nodeid: str) -> int:
    """The ``rng`` seed of the test ``nodeid``: a digest of both (``hash()`` of a string
    changes from process to process, so a failure it seeded could not be replayed)."""
    digest = hashlib.sha256(f"{run_seed}:{nodeid}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def pytest_configure(config):
    # What this sets in the environment is put back when the run ends (pytest.main may be
    # called again in one process).
    saved = {var: os.environ.get(var) for var in (*CACHE_VARIABLES, SEED_VARIABLE)}
    config.stash[_RUN_SEED] = _run_seed()
    # mkdtemp makes the directory with mode 0o700: the caches refuse one others can write.
    root = tempfile.mkdtemp(prefix="cudalibs-tests-")
    config.stash[_CACHE_ROOT] = root
    config.stash[_SAVED_ENV] = saved
    # Before any test imports cudalibs; its readers look at the environment on each use, so
    # a store or cache directory chosen before this point is left by the next lookup.
    os.environ.update(_cache_environment(root))


def pytest_unconfigure(config):
    root = config.stash.get(_CACHE_ROOT, None)
    if root is None:
        return
    tuning = sys.modules.get("cudalibs.runtime.tuning")
    if tuning is not None:
        # Records waiting for their batch are written now, not by an exit handler into a
        # directory that is gone by then (which would make it again).
        tuning.tuning_store().flush()
    for var, value in config.stash[_SAVED_ENV].items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value
    shutil.rmtree(root, ignore_errors=True)


def pytest_report_header(config):
    return [f"{SEED_VARIABLE}={config.stash[_RUN_SEED]} (the rng fixture's seeds derive "
            "from it and each test's id)",
            f"cudalibs caches (tuning store, compiled kernels): {config.stash[_CACHE_ROOT]}"]


@pytest.fixture(scope="session", autouse=True)
def cudalibs_caches(pytestconfig):
    """The run's private cache directory, which the tuning store and the compiled-kernel cache
    use for the whole run (tests that test those keep their own ``tmp_path`` ones)."""
    root = pytestconfig.stash[_CACHE_ROOT]
    # Something between configuration and the first test may have moved them: point them
    # back (a no-op when nothing did).
    os.environ.update(_cache_environment(root))
    return root


@pytest.fixture()
def rng(request):
    """A numpy Generator seeded from the run's seed and this test's id (see
    :func:`seed_for_test`); a failing test's report shows the seed."""
    import numpy as np

    seed = seed_for_test(request.config.stash[_RUN_SEED], request.node.nodeid)
    request.node.stash[_TEST_SEED] = seed
    return np.random.default_rng(seed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    seed = item.stash.get(_TEST_SEED, None)
    if seed is not None and report.failed:
        run = item.config.stash[_RUN_SEED]
        report.sections.append(("rng seed", (
            f"the rng fixture was numpy.random.default_rng({seed}); replay with "
            f"{SEED_VARIABLE}={run} pytest '{item.nodeid}'")))
    return report
