"""NCCL GPU tests: the environment NCCL must see, and communicators shared by a module."""

import os

# Before NCCL is first loaded: NVLink SHARP (multicast) stays off in every test, and the
# bootstrap uses the loopback interface (tests/conftest.py sets the latter for both tiers).
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")

import pytest  # noqa: E402

import cudalibs  # noqa: E402


@pytest.fixture(scope="module")
def comm1(device):
    """A one-rank communicator on device 0."""
    from cudalibs import nccl

    c = nccl.Communicator(1, 0, nccl.UniqueId(), device)
    yield c
    c.close()


@pytest.fixture(scope="module")
def comms2():
    """Rank 0 on device 0 and rank 1 on device 1, driven from this thread (init_all)."""
    if cudalibs.device_count() < 2:
        pytest.skip(f"needs two GPUs ({cudalibs.device_count()} visible)")
    from cudalibs import nccl

    comms = nccl.Communicator.init_all([0, 1])
    yield comms
    nccl.close_all(comms)
