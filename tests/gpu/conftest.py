"""GPU tier: every test here needs a CUDA GPU; without one they are skipped, with the reason.

On the GPU test machine set ``CUDALIBS_REQUIRE_GPU=1``: then a skip cannot hide a regression.
Every skip in this tier -- the whole tier for want of a GPU or driver, ``pytest.skip`` or
``pytest.importorskip`` for a missing library or tool, a ``skipif`` marker -- becomes a
failure that carries the skip's reason.  Only what the machine's hardware rules out may still
skip: too few GPUs (a two-GPU test on a one-GPU machine) or a GPU without the feature
(a compute capability, a device attribute); :data:`HARDWARE_REASONS` lists the phrasings.

Without the variable, the tier is skipped only where no GPU is in sight.  When the machine
shows one independently of cudalibs (``nvidia-smi -L`` lists it, or the kernel driver's
``/proc/driver/nvidia/gpus`` and a ``/dev/nvidia*`` device node exist) but cudalibs cannot
load or start the driver, every test fails with the reason: that is a loader or driver
regression, not a machine without a GPU.  ``CUDA_VISIBLE_DEVICES=`` (empty) hides the GPUs on
purpose, and the tier is skipped again.

The ``rng`` fixture and the run's private caches come from tests/conftest.py.
"""

import glob
import os
import re
import shutil
import subprocess

import pytest

import cudalibs

_REASON = cudalibs.unavailable_reason()


def _gpu_in_sight() -> str | None:
    """What shows an NVIDIA GPU on this machine without cudalibs (a phrase), or None.

    ``nvidia-smi`` asks the kernel driver: a GPU it lists is there, and its "No devices were
    found" is believed.  When it is missing or cannot reach the driver, the kernel driver's
    own listing counts, with a device node beside it (a container without GPUs may see the
    host's ``/proc/driver/nvidia`` but has no ``/dev/nvidia*``)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return None                     # hidden on purpose
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            proc = None
        if proc is not None:
            gpus = [ln.strip() for ln in proc.stdout.splitlines() if ln.startswith("GPU ")]
            if gpus:
                return f"nvidia-smi -L lists {len(gpus)} GPU(s), first {gpus[0]!r}"
            if proc.returncode == 0 or "No devices were found" in proc.stdout + proc.stderr:
                return None
    try:
        listed = os.listdir("/proc/driver/nvidia/gpus")
    except OSError:
        listed = []
    nodes = glob.glob("/dev/nvidia[0-9]*")
    if listed and nodes:
        return (f"/proc/driver/nvidia/gpus lists {len(listed)} GPU(s) and "
                f"{', '.join(sorted(nodes))} exist")
    return None


def _broken_reason() -> str | None:
    """The failure that every test of the tier reports: a GPU is in sight, yet cudalibs
    cannot use it."""
    if _REASON is None:
        return None
    seen = _gpu_in_sight()
    if seen is None:
        return None
    return (f"a GPU is in sight ({seen}) but cudalibs cannot use it: {_REASON}; a loader or "
            "driver regression fails here instead of reading as 'no GPU' (to skip the tier "
            "on purpose, hide the GPUs with CUDA_VISIBLE_DEVICES=)")


_BROKEN = _broken_reason()

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
    if _REASON is None or _BROKEN is not None:   # usable, or failed by _gpu_usable
        return
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason=f"GPU tier skipped: {_REASON}")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _gpu_usable():
    """Fails every test of the tier, first of its fixtures, when :data:`_BROKEN` says why."""
    if _BROKEN is not None:
        pytest.fail(_BROKEN, pytrace=False)


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
