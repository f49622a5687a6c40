"""torch as a second oracle: present, or reported as absent -- never silently dropped.

A test that compares with torch besides its float64 reference calls :func:`torch_oracle` where
the comparison starts.  Without torch (or, for a comparison on the device, without a CUDA
build of it) the comparison is left out with a :class:`MissingOracleWarning`, which pytest's
summary shows; under ``CUDALIBS_REQUIRE_GPU=1`` (the GPU test machine, where every oracle must
be installed) the test fails instead.  Only an ``ImportError`` counts as absent: torch failing
to import for any other reason is an error of the test.
"""

from __future__ import annotations

import os
import warnings

import pytest

#: The variable of tests/gpu/conftest.py that turns skips into failures.
REQUIRE_GPU = "CUDALIBS_REQUIRE_GPU"


class MissingOracleWarning(UserWarning):
    """A second oracle is not installed, so its comparison was left out."""


def _required() -> bool:
    return os.environ.get(REQUIRE_GPU, "").strip().lower() not in ("", "0", "false", "no")


def _missing(why: str) -> None:
    """Report a comparison left out for want of its oracle: a failure under
    ``CUDALIBS_REQUIRE_GPU=1``, else a warning (at the line of the test that asked)."""
    if _required():
        pytest.fail(f"{REQUIRE_GPU}=1: a second oracle is missing: {why}", pytrace=False)
    warnings.warn(f"comparison left out: {why}", MissingOracleWarning, stacklevel=4)


def torch_oracle(*, cuda: bool):
    """The ``torch`` module, or None (reported by :func:`_missing`) when it is not
    installed or, with ``cuda``, has no usable CUDA device."""
    try:
        import torch
    except ImportError as exc:
        _missing(f"torch cannot be imported ({exc})")
        return None
    if cuda and not torch.cuda.is_available():
        _missing("torch has no usable CUDA device (a CPU-only build?)")
        return None
    return torch
