"""Settings shared by both test tiers; GPU fixtures live in tests/gpu/conftest.py."""

import os

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
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
