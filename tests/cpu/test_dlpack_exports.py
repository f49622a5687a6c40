"""Exported DLPack capsules: held until consumed or abandoned, and never a destructor that runs
inside a consumer's error handling (no GPU needed: the table is host-side)."""

from __future__ import annotations

import gc

from cudalibs.driver import _dlpack as D


class _Owner:
    """Stands for the array an export keeps alive."""


def _export(owner, versioned=True):
    return D.export(0x1000, (2, 3), (3, 1), (2, 32), D.kDLCUDA, 0, owner, versioned)


def test_an_abandoned_capsule_is_released_by_the_next_export():
    base = D.exports_alive()
    owner = _Owner()
    cap = _export(owner)
    assert D.exports_alive() == base + 1
    del cap
    gc.collect()
    assert D.exports_alive() == base
    # Nothing keeps the owner alive any more.
    import weakref
    ref = weakref.ref(owner)
    del owner
    gc.collect()
    assert ref() is None


def test_a_consumed_capsule_lives_until_the_consumer_calls_the_deleter():
    base = D.exports_alive()
    for versioned, used in ((True, D.USED_V), (False, D.USED)):
        cap = _export(_Owner(), versioned)
        name = D.NAME_V if versioned else D.NAME
        addr = D._PyCapsule_GetPointer_obj(cap, name)
        # What a consumer does: rename the capsule, keep the tensor, drop the capsule.
        assert D._PyCapsule_SetName(cap, used) == 0
        del cap
        gc.collect()
        assert D.exports_alive() == base + 1
        D.DELETER(D._DELETER_ADDR)(addr)
        assert D.exports_alive() == base


def test_a_refusing_consumer_keeps_its_own_exception():
    # A consumer that raises while it holds the capsule: the capsule dies during the
    # exception's propagation, and no callback of ours runs there to replace the error.
    def consumer(capsule):
        raise TypeError("float8 is not supported by this consumer")

    try:
        consumer(_export(_Owner()))
    except TypeError as exc:
        assert "float8" in str(exc)
    else:
        raise AssertionError("the consumer's TypeError was lost")
    assert D.exports_alive() >= 0
