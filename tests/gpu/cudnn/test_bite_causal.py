"""Causal attention sees exactly the keys up to its own position: the forward output and its
statistics against the float64 reference, at shapes where a mask one key off shows.

Every query row of a top-left causal mask sees a different number of keys, from one (row 0)
up; a mask shifted by one diagonal (each query also seeing the next key, or missing its own)
changes row 0 from ``v[0]`` to a mix of two values rows, far beyond the tolerance.  The
shapes cover ``s_q == s_kv`` and both ``s_q < s_kv`` and ``s_q > s_kv`` (the diagonal then
leaves keys unseen, or rows that see every key), at tile multiples and off them.
test_attention.py draws causal problems among many others, a few per run.
"""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import testing as T
from cudalibs.cudnn import attention as A

F16 = np.dtype(np.float16)
BF16 = cl.dtypes.bfloat16
#: Largest error relative to the reference's size (probabilities are rounded to the input
#: type before the second product, as in every fused attention kernel).
TOL = 1e-2

#: (b, h, s_q, s_kv, d)
SHAPES = [(1, 2, 64, 64, 64), (2, 2, 77, 77, 64), (1, 2, 64, 128, 64), (1, 2, 128, 64, 64),
          (2, 1, 96, 80, 128)]


def _poisoned(shape, dtype):
    return cl.full(shape, T.poison_value(dtype), dtype)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}h{}-sq{}-skv{}-d{}".format(*s))
@pytest.mark.parametrize("dtype", [F16, BF16], ids=lambda d: np.dtype(d).name)
def test_causal_forward_against_reference(device, rng, dtype, shape):
    if device.compute_capability < (8, 0):
        pytest.skip("fused attention needs compute capability 8.0")
    b, h, s_q, s_kv, d = shape
    qh = T.random_array((b, h, s_q, d), dtype, rng=rng)
    kh, vh = (T.random_array((b, h, s_kv, d), dtype, rng=rng) for _ in range(2))
    out = _poisoned((b, h, s_q, d), dtype)
    stats = _poisoned((b, h, s_q, 1), np.float32)
    o, st = A.sdpa(cl.to_device(qh), cl.to_device(kh), cl.to_device(vh), causal=True,
                   training=True, out=out, stats=stats)
    assert (o.address, st.address) == (out.address, stats.address)   # written where asked
    want_o, want_stats = T.ref.sdpa_forward(qh, kh, vh, causal=True)
    what = f"causal {np.dtype(dtype).name} b={b} h={h} s_q={s_q} s_kv={s_kv} d={d}"
    # top-left causal: every query row sees key 0, so every row is specified
    assert T.ref.valid_rows((b, s_q, s_kv), causal=True).all()
    got = out.get()
    T.assert_close(got, want_o, rtol=TOL, msg=f"{what}: o")
    T.assert_close(stats, want_stats, rtol=TOL, msg=f"{what}: stats")
    # the first rows, where one key more or less changes the output most, on their own
    rows = min(s_q, s_kv, 4)
    T.assert_close(got[:, :, :rows], want_o[:, :, :rows], rtol=TOL,
                   msg=f"{what}: o of the first {rows} rows")
