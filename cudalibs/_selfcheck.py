"""The GPU self-check behind ``python -m cudalibs``: each library against numpy, briefly.

A check is a function returning a short detail string and raising on failure; :data:`CHECKS`
lists them in order, and each library's binding adds its own.
"""

from __future__ import annotations

import time
import traceback

import numpy as np


def _memory_round_trip() -> str:
    from .driver import Device, Stream, device_count, to_device
    from .testing import assert_close, random_array

    for i in range(device_count()):
        dev = Device(i)
        host = random_array((257, 33), np.float32, rng=np.random.default_rng(i))
        with Stream(dev) as s:
            d = to_device(host, device=dev, stream=s)
            back = d.T.copy().get()
            s.sync()
        assert_close(back, host.T, np.float32)
        d.fill(3.5)
        assert_close(d.get(), np.full_like(host, 3.5), np.float32)
    return f"{device_count()} device(s): H2D, strided D2D, D2H, fill"


#: (name, check) pairs run in order.
CHECKS = [
    ("memory round trip", _memory_round_trip),
]


def run():
    """Yield ``(name, passed, detail)`` for each check."""
    for name, check in CHECKS:
        t0 = time.perf_counter()
        try:
            detail = check()
            yield name, True, f"{detail} ({(time.perf_counter() - t0) * 1e3:.0f} ms)"
        except Exception as exc:
            last = traceback.format_exception_only(type(exc), exc)[-1].strip()
            yield name, False, last
