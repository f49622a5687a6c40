"""GPU tier: every test here needs a CUDA GPU; without one they are skipped, with the reason."""

import os

import pytest

import cudalibs

_REASON = cudalibs.unavailable_reason()


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
def rng(request):
    import numpy as np

    return np.random.default_rng(abs(hash(request.node.nodeid)) % 2**32)
