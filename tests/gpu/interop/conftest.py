"""The interop tier: every op family driven as PyTorch and CuPy programs drive it.

Before NCCL is first loaded (the one-rank all-reduce here), NVLink SHARP stays off and the
bootstrap uses the loopback interface, as in ``tests/gpu/nccl``.
"""

import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
