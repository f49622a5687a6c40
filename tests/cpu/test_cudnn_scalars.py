"""cuDNN's alpha/beta host scalars: an address handed to a call stays valid and keeps its
value whatever other values are made meanwhile, in this thread or others
(:func:`cudalibs.cudnn._common.scalar`)."""

import ctypes
import threading

from cudalibs.cudnn import _common as C


def _read(addr, double):
    return (ctypes.c_double if double else ctypes.c_float).from_address(addr).value


def test_a_kept_address_survives_many_distinct_values():
    alpha = C.scalar(1.5, False)
    beta = C.scalar(-0.25, True)
    for i in range(C.MAX_SCALARS + 200):
        C.scalar(1000.0 + i * 0.5, i % 2 == 0)
    assert _read(alpha, False) == 1.5
    assert _read(beta, True) == -0.25
    assert len(C._SCALARS) <= C.MAX_SCALARS
    # a kept value is found again at the same address
    assert C.scalar(1.5, False) == alpha


def test_values_beyond_the_bound_are_distinct_within_a_call():
    for i in range(C.MAX_SCALARS + 10):
        C.scalar(5000.0 + i, False)
    assert len(C._SCALARS) == C.MAX_SCALARS
    # a call's alpha and beta, both new values: two slots, both intact
    a = C.scalar(123.5, False)
    b = C.scalar(-7.75, False)
    assert a != b
    assert (_read(a, False), _read(b, False)) == (123.5, -7.75)
    d = C.scalar(2.0 ** 60 + 3.0, True)
    assert _read(d, True) == 2.0 ** 60 + 3.0


def test_threads_never_see_each_others_values():
    for i in range(C.MAX_SCALARS + 10):
        C.scalar(9000.0 + i, True)
    errors = []
    start = threading.Barrier(8)

    def work(t):
        start.wait()
        for j in range(3000):
            va, vb = t * 1e6 + j + 0.5, -(t * 1e6 + j + 0.25)
            a, b = C.scalar(va, False), C.scalar(vb, False)
            # what a C call made now would read
            if (_read(a, False), _read(b, False)) != (ctypes.c_float(va).value,
                                                      ctypes.c_float(vb).value):
                errors.append((t, j))
                return

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:5]
