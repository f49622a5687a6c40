"""Fixtures of the driver's GPU tests: the array libraries they exchange memory with."""

import pytest


@pytest.fixture(scope="module")
def torch():
    """PyTorch with CUDA (skips without it)."""
    t = pytest.importorskip("torch")
    if not t.cuda.is_available():
        pytest.skip("torch without CUDA")
    return t


@pytest.fixture(scope="module")
def cupy():
    """CuPy (skips without it)."""
    return pytest.importorskip("cupy")
