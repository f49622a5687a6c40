"""The CPU tier's one environment rule: tests that finalize cuDNN backend descriptors.

cuDNN 9.28 finalizes every backend descriptor -- a tensor, a pointwise mode, a variant pack,
an operation graph -- through ``libcudnn_engines_runtime_compiled.so.9``, which links
``libcuda.so.1``: on a machine without the NVIDIA driver each ``cudnnBackendFinalize`` fails
with ``CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED``.  Creating descriptors, setting their
attributes (and the errors doing so wrongly gives), the legacy descriptor API and every check
cudalibs makes before a C call still work there; earlier cuDNN 9 releases finalize all of it
host-side.

So a test that finalizes a backend descriptor says so with ``@pytest.mark.cudnn_finalize``,
and is skipped, with the reason, exactly where a finalize fails for that cause: cuDNN's status
is ``CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED``, ``libcuda.so.1`` does not load here, and a
library beside the loaded libcudnn names ``libcuda.so.1`` among its ELF dependencies
(cudnn_host.py).  Where a finalize works, marked tests run and their failures are failures.
The marks stay exact both ways: an unmarked test that finalizes fails where finalizing fails,
and a marked test that finalizes nothing fails where finalizing works.
"""

from __future__ import annotations

import os
import sys

import pytest

# cudnn_host.py sits next to this file; make it importable under any pytest import mode.
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from cudnn_host import finalize_blocked  # noqa: E402

MARKER = "cudnn_finalize"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{MARKER}: finalizes cuDNN backend descriptors; skipped, with the reason, "
        "where cuDNN cannot (9.28 without libcuda.so.1)")


def pytest_collection_modifyitems(config, items):
    # A skip mark, not a skip raised here: the report then names each test's own place.
    marked = [item for item in items if item.get_closest_marker(MARKER) is not None]
    reason = finalize_blocked() if marked else None
    if reason is not None:
        skip = pytest.mark.skip(reason=f"finalizes cuDNN backend descriptors, and here {reason}")
        for item in marked:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Where cuDNN can finalize, a marked test must finalize something: a mark on a test that
    needs no finalize would skip it for nothing where cuDNN cannot."""
    if item.get_closest_marker(MARKER) is None:
        return (yield)
    from cudalibs.cudnn.backend import descriptors

    finalized = []
    finalize = descriptors.BackendDescriptor.finalize

    def counted(self):
        finalized.append(self.kind)
        return finalize(self)

    descriptors.BackendDescriptor.finalize = counted
    try:
        result = yield
    finally:
        descriptors.BackendDescriptor.finalize = finalize
    if not finalized:
        pytest.fail(f"{item.nodeid} is marked {MARKER} but finalizes no backend descriptor: "
                    "without the mark it runs where cuDNN cannot finalize", pytrace=False)
    return result
