"""Attention dropout: the seed and the offset both choose the mask, and the output follows
the mask drawn.

One plan (which dumps its keep-mask) runs with seeds that differ in the offset only, in the
seed only, and with the first seed again: each output is checked against the float64
reference built from its own dumped mask, equal seeds must give equal masks, and different
ones independent masks.  test_attention.py compares an output drawn with another offset
against one of another plan, whose bits may differ anyway.
"""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import testing as T
from cudalibs.cudnn import attention as A
from cudalibs.testing.ref import _attention as R

F16 = np.dtype(np.float16)
P = 0.25
#: Largest error relative to the largest magnitude (probabilities are rounded to float16
#: before the second product, as in every fused attention kernel).
TOL = 1e-2


def _error(actual, expected) -> float:
    a = np.asarray(actual, np.float64)
    e = np.asarray(expected, np.float64)
    assert np.isfinite(a).all(), "non-finite values where the reference has numbers"
    return float(np.abs(a - e).max() / max(np.abs(e).max(), 1e-30))


def _binomial_ok(count, n, p) -> bool:
    """``count`` of ``n`` trials of probability ``p`` within 6 standard deviations of ``n p``."""
    return abs(count - n * p) <= 6 * np.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_each_seed_and_offset_draws_its_own_mask(device, rng, causal):
    if device.compute_capability < (8, 0):
        pytest.skip("fused attention needs compute capability 8.0")
    b, h, s, d = 1, 2, 64, 64
    qh, kh, vh = (T.random_array((b, h, s, d), F16, rng=rng) for _ in range(3))
    q, k, v = (cl.to_device(x) for x in (qh, kh, vh))
    # offsets far apart: a library may count them in blocks of random numbers
    seeds = [(2024, 16), (2024, 16 + 4096), (2025, 16), (2024, 16)]
    plan = A.SdpaPlan(q, k, v, causal=causal, dropout=P, seed=seeds[0], dump_mask=True,
                      max_candidates=1)
    masks = []
    for seed in seeds:
        mask = cl.full((b, h, s, s), T.poison_value(np.float32), np.float32)
        o = plan.execute(q, k, v, seed=seed, mask_out=mask)
        m = mask.get()
        assert set(np.unique(m)) <= {0.0, 1.0}, f"seed {seed}: the mask is not 0/1"
        assert _binomial_ok(int((m == 0).sum()), m.size, P), \
            f"seed {seed}: {int((m == 0).sum())} of {m.size} dropped, for p = {P}"
        want, _ = R.sdpa_forward(qh, kh, vh, causal=causal, dropout_mask=m, dropout=P)
        err = _error(o.get(), want)
        assert err <= TOL, f"seed {seed}: max error {err:.3e} against its own mask"
        masks.append(m)
    first, offset, other, again = masks
    np.testing.assert_array_equal(again, first, err_msg="one seed and offset, two masks")
    # two independent masks differ on each element with probability 2 p (1 - p)
    for what, m in (("another offset", offset), ("another seed", other)):
        differ = int((m != first).sum())
        assert _binomial_ok(differ, m.size, 2 * P * (1 - P)), \
            f"{what}: the mask differs from the first on {differ} of {m.size} elements"
