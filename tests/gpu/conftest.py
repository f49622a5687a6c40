"""GPU tier: every test here needs a CUDA GPU; without one they are skipped, with the reason.

On the GPU test machine set ``CUDALIBS_REQUIRE_GPU=1``: then a skip cannot hide a regression.
Every skip in this tier -- the whole tier for want of a GPU or driver, ``pytest.skip`` or
``pytest.importorskip`` for a missing library or tool, a ``skipif`` marker -- becomes a
failure that carries the skip's reason.  Only what the machine's hardware rules out may still
skip: too few GPUs (a two-GPU test on a one-GPU machine) or a GPU without the feature
(a compute capability, a device attribute); :data:`HARDWARE_REASONS` lists the phrasings.
"""

import os
import re

import pytest

import cudalibs

_REASON = cudalibs.unavailable_reason()

#: The variable that turns skips into failures.
REQUIRE_GPU = "CUDALIBS_REQUIRE_GPU"

#: Skip reasons that name a limit of the machine's hardware, not something missing from its
#: software: these stay skips under ``CUDALIBS_REQUIRE_GPU=1``.
HARDWARE_REASONS = re.compile(
    r"needs (two|three|four|eight|\d+) GPUs"        # device count ...
    r"|\(\d+ visible\)"                              # ... as "needs 2 GPUs (1 visible)"
    r"|compute capability"                           # fp8 needs compute capability >= 8.9
    r"|the device has no ",                          # a device attribute it lacks
    re.IGNORECASE)


def _require_gpu() -> bool:
    return os.environ.get(REQUIRE_GPU, "").strip().lower() not in ("", "0", "false", "no")


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
    else:
        text = str(longrepr)
    return text.removeprefix("Skipped: ")


def _fail_instead(report) -> None:
    """Turn a skipped report into a failed one that carries the skip's reason."""
    if not (report.skipped and _require_gpu()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if HARDWARE_REASONS.search(reason):
        return
    where = ""
    if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
        where = f" (at {report.longrepr[0]}:{report.longrepr[1]})"
    report.outcome = "failed"
    report.longrepr = (f"{REQUIRE_GPU}=1: this skip would hide the test: {reason}{where}; "
                       "install what it needs, or run without the variable")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _fail_instead(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    # A module-level pytest.importorskip skips the whole file at collection.
    report = yield
    _fail_instead(report)
    return report


def pytest_collection_modifyitems(config, items):
    if _REASON is None:
        return
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason=f"GPU tier skipped: {_REASON}")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def device():
    """Device 0, initialised once for the session."""
    dev = cudalibs.Device(0)
    dev.set_current()
    return dev


@pytest.fixture(autouse=True)
def _device0_current():
    """Each test starts with device 0's context current, whatever the last one left."""
    if _REASON is None:
        cudalibs.Device(0).set_current()
    yield


@pytest.fixture(scope="session")
def two_devices():
    if cudalibs.device_count() < 2:
        pytest.skip("needs two GPUs")
    return cudalibs.Device(0), cudalibs.Device(1)


@pytest.fixture()
def process_options():
    """``cudalibs.set_options`` for one test: the process-wide options (what every thread
    sees, worker threads included, unlike an ``option_context`` block, which is the calling
    thread's own) are put back as they were when the test ends, pass or fail."""
    saved = cudalibs.set_options()      # no changes: returns the options in force
    yield cudalibs.set_options
    cudalibs.set_options(saved)


@pytest.fixture()
def rng(request):
    import numpy as np

    return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)
