"""Launch geometry given as ``int`` subclasses, against a stand-in for ``cuLaunchKernel``: the
launch, and the code a Launcher generates, use the plain integer the object holds, never its
own ``__format__`` / ``__str__`` / ``__index__`` / comparisons."""

from __future__ import annotations

import builtins

import pytest

from cudalibs.driver import launch as LA
from test_module import _fake_kernel   # the launch-path stand-ins of the CPU tests

# If this text reached the generated code it would run: it sets a flag on builtins.
PAYLOAD = "__import__('builtins').__dict__.__setitem__('_cudalibs_payload_ran', 1) or 7"


class Sneaky(int):
    """An int whose every other view of itself lies."""

    def __format__(self, spec):
        return PAYLOAD

    def __str__(self):
        return PAYLOAD

    __repr__ = __str__

    def __index__(self):
        return 7

    def __int__(self):
        return 7

    # Comparisons that would let any value through a range check.
    def __lt__(self, other):
        return False

    def __gt__(self, other):
        return False

    def __le__(self, other):
        return True

    def __ge__(self, other):
        return True

    def __hash__(self):
        return int.__hash__(self)

    def __eq__(self, other):
        return int.__eq__(self, other)


@pytest.fixture()
def kernel(monkeypatch):
    """saxpy(float, ptr, ptr, u32) with a recording cuLaunchKernel; yields the kernel and the
    geometry of each launch ``(gx, gy, gz, bx, by, bz, shared_mem)``."""
    k, _, calls = _fake_kernel(monkeypatch)
    yield k, lambda: [c[0][1:8] for c in calls]
    assert not hasattr(builtins, "_cudalibs_payload_ran")


ARGS = (1.0, 0, 0, 1)


def _plain(values):
    return all(type(v) is int for v in values)


def test_prepared_launcher_uses_the_plain_values(kernel):
    k, launches = kernel
    launcher = k.prepare((Sneaky(3),), Sneaky(32), shared_mem=Sneaky(256))
    launcher(*ARGS)
    assert launches() == [(3, 1, 1, 32, 1, 1, 256)] and _plain(launches()[0])
    assert launcher.shared_mem == 256 and type(launcher.shared_mem) is int
    assert launcher.grid == (3, 1, 1) and _plain(launcher.grid + launcher.block)
    assert PAYLOAD not in repr(launcher)


def test_plain_launch_uses_the_plain_values(kernel):
    k, launches = kernel
    k.launch(Sneaky(2), (Sneaky(4), 2), *ARGS, shared_mem=Sneaky(64))
    assert launches() == [(2, 1, 1, 4, 2, 1, 64)] and _plain(launches()[0])


@pytest.mark.parametrize("value,error", [(-5, "non-negative"), (10**6, "exceed its limit"),
                                         (2**40, "exceed its limit")])
def test_range_checks_see_the_real_value(kernel, value, error):
    """The subclass's comparisons would let these through; the checks use the plain int."""
    k, launches = kernel
    with pytest.raises(ValueError, match=error):
        k.prepare(1, 32, shared_mem=Sneaky(value))
    with pytest.raises(ValueError, match=error):
        k.launch(1, 32, *ARGS, shared_mem=Sneaky(value))
    assert launches() == []


def test_dimension_range_checks_see_the_real_value(kernel):
    k, launches = kernel
    with pytest.raises(ValueError, match="dimension below 1"):
        k.prepare((Sneaky(0),), 32)
    with pytest.raises(ValueError, match="exceeds the device's limit 64"):
        k.prepare(1, (1, 1, Sneaky(65)))
    assert launches() == []


def test_shared_memory_limit_setter_sees_the_real_value(kernel, monkeypatch):
    k, _ = kernel
    set_calls = []

    class Driver:
        def cuFuncSetAttribute(self, f, attr, value):
            set_calls.append(value)
            return 0

    monkeypatch.setattr(LA._lib, "get", lambda: Driver())
    with pytest.raises(ValueError, match="outside"):
        k.max_dynamic_shared_size_bytes = Sneaky(10**9)
    k.max_dynamic_shared_size_bytes = Sneaky(1024)
    assert set_calls == [1024] and type(set_calls[0]) is int and type(k._max_dyn) is int


def test_generated_code_refuses_anything_but_plain_ints(kernel):
    k, _ = kernel
    launcher = k.prepare(1, 32)
    blk, ptr = k._new_block()
    launcher._dims = (1, 1, 1, 32, 1, 1, Sneaky(0))
    with pytest.raises(TypeError, match="plain ints"):
        launcher._generate(blk, ptr)
    launcher._dims = (1, 1, 1, 32, 1, 1, 2**32)
    with pytest.raises(TypeError, match="plain ints"):
        launcher._generate(blk, ptr)
