"""Every kernel of cudalibs/ptx, through cudalibs.kernels, against numpy float64 references.

Sizes favour tile and block edges (1, primes, powers of two +- 1, sizes above one block) and
include empty arrays; inputs never hold zeros; outputs are poisoned (NaN) before the kernel
writes them, so an element it skips fails the comparison (outputs the library allocates are
checked where allocation is what a test is about).  ``assert_close`` bounds every element as
well as the norm, so one wrong element among many fails; the grid-remainder loops, which write
a handful of elements, are checked bit for bit on integer inputs.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import kernels as K
from cudalibs import ptx as P
from cudalibs import testing as T
from cudalibs.kernels import grouped90
from cudalibs.runtime import ptxlib
from cudalibs.testing import ref

from .._sizes import bound, fit, gemm_sizes, gpu_settings

GPU = gpu_settings(20)

F32, F64, F16 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)
BF16 = cl.dtypes.bfloat16
ALL = [F32, F64, F16, BF16]
HALF_FLOAT = [F32, F16, BF16]
IDS = lambda d: np.dtype(d).name  # noqa: E731

# Element counts around the block size (256) and the grid cap, plus empty.
counts = st.one_of(st.sampled_from([0, 1, 31, 255, 256, 257, 4099, 65537]),
                   st.integers(0, bound(3000, 1 << 22)))
#: The most elements of one wide example's arrays: references on the host stay quick.
ELEMENTS = 1 << 22


def poisoned(shape, dtype, stream=None, device=None):
    """A device array filled with NaN, to be overwritten by the kernel under test."""
    return cl.to_device(np.full(shape, T.poison_value(dtype), dtype=dtype), device=device,
                        stream=stream)


def odd_integers(shape, dtype, rng):
    """Odd integers in ``±[1, 7]``.  Products of three of them, and sums of those, are
    integers below 2**11 in magnitude: exact in float16 and float32 whatever the order of the
    additions, so a product of such matrices with an inner dimension of 3 has one right
    answer, bit for bit; and three odd products add up to an odd number, never 0, so an
    element left zero (or unwritten) cannot match."""
    return rng.choice(np.array([-7, -5, -3, -1, 1, 3, 5, 7]), size=shape).astype(dtype)


def assert_exact(got, expected, rows=None, what=""):
    """``got`` equals ``expected`` bit for bit (as float64); with ``rows`` (a slice of the
    first axis) those rows are compared first, so that a failure there says so."""
    got = np.asarray(got.get() if hasattr(got, "get") else got).astype(np.float64)
    if rows is not None:
        np.testing.assert_array_equal(got[rows], expected[rows],
                                      err_msg=f"{what}: the rows of the grid remainder loop")
    np.testing.assert_array_equal(got, expected, err_msg=what)


def rand(shape, dtype, rng, **kw):
    return T.random_array(shape, dtype, rng=rng, **kw)


def bits(a):
    a = np.ascontiguousarray(a)
    return a.reshape(-1).view(np.uint8)


# -- loading -----------------------------------------------------------------------------------
@pytest.mark.parametrize("stem", sorted(P.ENTRIES))
def test_every_entry_loads_and_fits_its_block(device, stem):
    """The driver JIT-compiles each shipped PTX; every kernel fits the block its wrapper uses
    (and the dynamic shared memory it asks for: the Hopper grouped GEMM's stages)."""
    largest_block = {"wmma": 128, "softmax": 512, "matmul": 256, "layout": 256,
                     "elementwise": 256, "train": 512, "fp8": 512,
                     "grouped": 256, "grouped90": 384, "moe": 256,
                     "norm": 256}[stem]     # per kernel: tests/gpu/kernels/test_norm_kernels.py
    cc = tuple(device.compute_capability)
    if P.arch_specific(stem) and cc != P.compute_capability(stem):
        pytest.skip(f"{stem}.ptx is built for {P.target(stem)}, which runs on compute "
                    f"capability {P.compute_capability(stem)} only; device 0 has {cc}")
    for name in P.ENTRIES[stem]:
        k = ptxlib.kernel(device, name)
        assert k.max_threads_per_block >= largest_block, (name, k.attributes())
        if stem == "grouped90":
            # grouped90_{dt}_{layout}_{tile}_{out} and grouped90_wgrad_{dt}_{tile}_{out}
            tile, out = name.split("_")[3], name.split("_")[4]
            size = grouped90.wgrad_smem_bytes if "_wgrad_" in name else grouped90.smem_bytes
            smem = size(tile, 4 if out == "f32" else 2)
            optin = device.attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
            assert smem + k.shared_size_bytes <= optin, (name, smem, optin)
        print(name, k.attributes())


# -- elementwise -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ALL, ids=IDS)
@GPU
@given(n=counts, seed=st.integers(0, 2**31), alpha=st.floats(-4, 4).filter(lambda a: abs(a) > 0.1))
def test_add_axpy_scale(device, dtype, n, seed, alpha):
    rng = np.random.default_rng(seed)
    x, y = rand(n, dtype, rng), rand(n, dtype, rng)
    dx, dy = cl.to_device(x), cl.to_device(y)

    out = poisoned(n, dtype)
    assert K.add(dx, dy, out=out) is out
    T.assert_close(out, x.astype(np.float64) + y.astype(np.float64), dtype, msg="add")
    T.assert_close(K.add(dx, dy), x.astype(np.float64) + y.astype(np.float64), dtype,
                   msg="add, allocated out")

    out = poisoned(n, dtype)
    K.scale(dx, alpha, out=out)
    # alpha is applied in float32 (float64 for float64 data), as the kernel documents.
    a = np.float64(alpha) if dtype == F64 else np.float64(np.float32(alpha))
    T.assert_close(out, a * x.astype(np.float64), dtype, msg="scale")

    assert K.axpy(alpha, dx, dy) is dy
    T.assert_close(dy, a * x.astype(np.float64) + y.astype(np.float64), dtype, msg="axpy")


@pytest.mark.parametrize("dtype", ALL, ids=IDS)
@GPU
@given(n=counts, value=st.floats(-1e4, 1e4, allow_nan=False))
def test_fill_is_exact(device, dtype, n, value):
    d = poisoned(n, dtype)
    assert K.fill(d, value) is d
    expected = np.full(n, np.asarray(value, dtype=np.float64).astype(dtype), dtype=dtype)
    np.testing.assert_array_equal(bits(d.get()), bits(expected))


@pytest.mark.parametrize("dtype", ALL, ids=IDS)
@GPU
@given(shape=T.shapes(min_dims=1, max_dims=3, min_side=0, max_side=bound(40, 160)),
       seed=st.integers(0, 2**31))
def test_relu_backward(device, dtype, shape, seed):
    rng = np.random.default_rng(seed)
    g, act = rand(shape, dtype, rng), rand(shape, dtype, rng)
    out = poisoned(shape, dtype)
    K.relu_backward(cl.to_device(g), cl.to_device(act), out=out)
    # A selection, not arithmetic: exact.
    np.testing.assert_array_equal(out.get().astype(np.float64), ref.relu_backward(g, act))


@pytest.mark.parametrize("act", ["relu", "gelu"])
@pytest.mark.parametrize("dtype", HALF_FLOAT, ids=IDS)
@GPU
@given(rows=st.integers(0, bound(70, 1000)), features=T.matrix_sizes(bound(300, 4099)),
       seed=st.integers(0, 2**31), lead=st.sampled_from([(), (2,)]))
def test_bias_act(device, dtype, act, rows, features, seed, lead):
    rng = np.random.default_rng(seed)
    shape = fit((*lead, rows, features), ELEMENTS, keep=(len(lead) + 1,))
    features = shape[-1]
    x, b = rand(shape, dtype, rng, low=-3, high=3), rand(features, dtype, rng)
    out = poisoned(shape, dtype)
    fn = K.bias_relu if act == "relu" else K.bias_gelu
    fn(cl.to_device(x), cl.to_device(b), out=out)
    expected = ref.bias_act(x, b, "relu" if act == "relu" else "gelu_tanh")
    T.assert_close(out, expected, dtype, msg=f"bias_{act} {shape}")


@pytest.mark.parametrize("dtype", HALF_FLOAT, ids=IDS)
@GPU
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, bound(20, 256)),
                       # planes of 256+ elements take the per-plane path of the kernel
                       st.sampled_from([1, 3, 9, 17, 24] + bound([], [33, 64])),
                       st.sampled_from([1, 5, 9, 16, 24] + bound([], [57, 64]))),
       channels_last=st.booleans(), act=st.sampled_from(["relu", "identity"]),
       with_z=st.booleans(), alpha2=st.sampled_from([1.0, 0.5, -2.0]),
       seed=st.integers(0, 2**31))
def test_channel_bias_act(device, dtype, shape, channels_last, act, with_z, alpha2, seed):
    rng = np.random.default_rng(seed)
    n, c, h, w = shape
    y0 = rand(shape, dtype, rng, low=-3, high=3)
    b = rand(c, dtype, rng)
    z = rand(shape, dtype, rng, low=-3, high=3) if with_z else None

    def dev(a):
        if not channels_last:
            return cl.to_device(a)
        return cl.to_device(np.ascontiguousarray(a.transpose(0, 2, 3, 1))).transpose(0, 3, 1, 2)

    y = dev(y0)
    got = K.channel_bias_act(y, cl.to_device(b), z=None if z is None else dev(z),
                             alpha2=alpha2, activation=act)
    assert got is y
    pre = y0.astype(np.float64) + b.astype(np.float64).reshape(1, c, 1, 1)
    if with_z:
        pre = pre + alpha2 * z.astype(np.float64)
    expected = np.maximum(pre, 0) if act == "relu" else pre
    T.assert_close(np.asarray(y.get()), expected, dtype,
                   msg=f"{shape} channels_last={channels_last} {act} z={with_z}")


def test_channel_bias_act_bad_input(device):
    y = cl.zeros((2, 4, 3, 3), np.float32)
    with pytest.raises(ValueError, match="bias must be"):
        K.channel_bias_act(y, cl.zeros(3, np.float32))
    with pytest.raises(ValueError, match="activation"):
        K.channel_bias_act(y, cl.zeros(4, np.float32), activation="gelu")
    with pytest.raises(ValueError, match="packed"):
        K.channel_bias_act(cl.zeros((2, 4, 3, 6), np.float32)[..., ::2], cl.zeros(4, np.float32))
    with pytest.raises(ValueError, match="z must match"):
        K.channel_bias_act(y, cl.zeros(4, np.float32), z=cl.zeros((2, 4, 3, 3), np.float16))
    with pytest.raises(ValueError, match="overlaps"):
        K.channel_bias_act(y, y.reshape(-1)[:4])


@pytest.mark.parametrize("dtype", HALF_FLOAT, ids=IDS)
@GPU
@given(shape=st.tuples(st.integers(1, 4), st.integers(1, bound(40, 512)),
                       st.integers(1, bound(13, 64)), st.integers(1, bound(13, 64))
                       ).map(lambda s: fit(s, ELEMENTS, keep=(1,))),
       eps=st.sampled_from([1e-5, 1e-3, 0.1]), seed=st.integers(0, 2**31))
def test_batch_norm_relu_infer(device, dtype, shape, eps, seed):
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = rand(shape, dtype, rng, low=-3, high=3)
    scale_, shift, mean = (rand(c, F32, rng) for _ in range(3))
    var = rand(c, F32, rng, low=0.1, high=2.0)
    out = poisoned(shape, dtype)
    K.batch_norm_relu_infer(cl.to_device(x), *(cl.to_device(p) for p in (scale_, shift, mean, var)),
                            eps=eps, out=out)
    expected = ref.batch_norm_infer(x, scale_, shift, mean, var, eps, act="relu")
    T.assert_close(out, expected, dtype, msg=f"batch_norm_relu {shape}")


# -- softmax -----------------------------------------------------------------------------------
cols_strategy = st.one_of(st.sampled_from([1, 2, 31, 32, 33, 127, 129, 511, 513, 1025, 4097]),
                          T.matrix_sizes(bound(3000, 16385)))


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dtype", HALF_FLOAT, ids=IDS)
@GPU
@given(rows=st.integers(1, bound(20, 300)), cols=cols_strategy, seed=st.integers(0, 2**31),
       spread=st.sampled_from([1.0, 10.0, 80.0]), lead=st.sampled_from([(), (3,)]))
def test_softmax(device, dtype, log, rows, cols, seed, spread, lead):
    rng = np.random.default_rng(seed)
    shape = fit((*lead, rows, cols), ELEMENTS, keep=(len(lead) + 1,))
    # Large spreads check the max subtraction: exp(80) overflows float16 and nearly float32.
    x = rand(shape, dtype, rng, low=-spread, high=spread)
    out = poisoned(shape, dtype)
    (K.log_softmax if log else K.softmax)(cl.to_device(x), out=out)
    expected = (ref.log_softmax if log else ref.softmax)(x)
    T.assert_close(out, expected, dtype, msg=f"{'log_' if log else ''}softmax {shape}")


def test_softmax_in_place_and_empty(device):
    x = T.random_array((5, 300), np.float32, rng=1)
    d = cl.to_device(x)
    assert K.softmax(d, out=d) is d
    T.assert_close(d, ref.softmax(x), np.float32)
    assert K.softmax(cl.empty((3, 0), np.float32)).shape == (3, 0)
    assert K.log_softmax(cl.empty((0, 7), np.float32)).shape == (0, 7)


# -- matrix products ---------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [K.matmul_naive, K.matmul_tiled], ids=["naive", "tiled"])
@GPU
@given(mnk=gemm_sizes(130, wide_mn=700, wide_k=1025), seed=st.integers(0, 2**31))
def test_matmul(device, fn, mnk, seed):
    m, n, k = mnk
    rng = np.random.default_rng(seed)
    a, b = rand((m, k), F32, rng), rand((k, n), F32, rng)
    out = poisoned((m, n), F32)
    assert fn(cl.to_device(a), cl.to_device(b), out=out) is out
    T.assert_close(out, ref.gemm(a, b), F32, msg=f"{fn.__name__} {m}x{n}x{k}")


@pytest.mark.parametrize("fn", [K.matmul_naive, K.matmul_tiled, K.wmma_gemm],
                         ids=["naive", "tiled", "wmma"])
def test_matmul_empty_and_k_zero(device, fn):
    dt = F16 if fn is K.wmma_gemm else F32
    assert fn(cl.empty((0, 5), dt), cl.empty((5, 3), dt)).shape == (0, 3)
    out = poisoned((4, 3), F32)
    fn(cl.empty((4, 0), dt), cl.empty((0, 3), dt), out=out)
    np.testing.assert_array_equal(out.get(), np.zeros((4, 3), np.float32))


@GPU
@given(batch=st.integers(1, 5), mnk=gemm_sizes(70, wide_mn=300, wide_k=513),
       mode=st.sampled_from(["both", "a2d", "b2d"]), seed=st.integers(0, 2**31))
def test_bmm(device, batch, mnk, mode, seed):
    m, n, k = mnk
    rng = np.random.default_rng(seed)
    a = rand((m, k) if mode == "a2d" else (batch, m, k), F32, rng)
    b = rand((k, n) if mode == "b2d" else (batch, k, n), F32, rng)
    out = poisoned((batch, m, n), F32)
    K.bmm(cl.to_device(a), cl.to_device(b), out=out)
    T.assert_close(out, ref.gemm(a, b), F32, msg=f"bmm {mode} {batch}x{m}x{n}x{k}")


@pytest.mark.parametrize("out_dtype", [F32, F16], ids=IDS)
@GPU
@given(mnk=gemm_sizes(200, wide_mn=1025, wide_k=2049), seed=st.integers(0, 2**31),
       aligned=st.booleans())
def test_wmma_gemm(device, out_dtype, mnk, seed, aligned):
    m, n, k = mnk
    rng = np.random.default_rng(seed)
    a, b = rand((m, k), F16, rng), rand((k, n), F16, rng)
    if aligned:
        da, db = cl.to_device(a), cl.to_device(b)
    else:
        # Start one element into a buffer: base addresses off the 16-byte grid, which must
        # take the element-wise load path even when K or N is a multiple of 8.
        fa = cl.to_device(np.concatenate([[np.float16(1)], a.ravel()]))
        fb = cl.to_device(np.concatenate([[np.float16(1)], b.ravel()]))
        da, db = fa[1:].reshape(m, k), fb[1:].reshape(k, n)
    out = poisoned((m, n), out_dtype)
    K.wmma_gemm(da, db, out=out, out_dtype=out_dtype)
    # fp16 inputs, fp32 accumulation: the fp16 tolerance, whatever the output type.
    T.assert_close(out, ref.gemm(a, b), F16, msg=f"wmma {m}x{n}x{k} aligned={aligned}")


def test_wmma_gemm_multiple_of_tile_sizes(device):
    rng = np.random.default_rng(7)
    for m, n, k in [(64, 64, 32), (128, 192, 256), (512, 512, 512)]:
        a, b = rand((m, k), F16, rng), rand((k, n), F16, rng)
        out = poisoned((m, n), F32)
        assert K.wmma_gemm(cl.to_device(a), cl.to_device(b), out=out) is out
        T.assert_close(out, ref.gemm(a, b), F16, msg=f"wmma {m}x{n}x{k}")
        assert K.wmma_gemm(cl.to_device(a), cl.to_device(b)).dtype == F32


def test_grids_beyond_the_y_and_z_limits(device):
    """Sizes whose tiles exceed 65535 in grid y or z exercise the kernels' remainder loops:
    the tiles past the first 65535 are the few rows (or batch elements) at the end, a handful
    of the millions of elements, which a norm-wise comparison would not notice missing.  The
    inputs are odd integers (:func:`odd_integers`), so every product has one exact answer:
    each output, poisoned first, is compared bit for bit, the remainder rows first."""
    rng = np.random.default_rng(3)
    for fn, tile in ((K.matmul_naive, 16), (K.matmul_tiled, 32)):
        m = 65535 * tile + 3
        a, b = odd_integers((m, 3), F32, rng), odd_integers((3, 3), F32, rng)
        out = poisoned((m, 3), F32)
        fn(cl.to_device(a), cl.to_device(b), out=out)
        assert_exact(out, ref.gemm(a, b), slice(65535 * tile, None), fn.__name__)
    m = 65535 * 64 + 5
    a, b = odd_integers((m, 3), F16, rng), odd_integers((3, 2), F16, rng)
    for out_dtype in (F32, F16):
        out = poisoned((m, 2), out_dtype)
        K.wmma_gemm(cl.to_device(a), cl.to_device(b), out=out, out_dtype=out_dtype)
        assert_exact(out, ref.gemm(a, b), slice(65535 * 64, None), f"wmma_gemm to {out_dtype}")
    batch = 65535 + 4
    a, b = odd_integers((batch, 2, 3), F32, rng), odd_integers((batch, 3, 2), F32, rng)
    out = poisoned((batch, 2, 2), F32)
    K.bmm(cl.to_device(a), cl.to_device(b), out=out)
    assert_exact(out, ref.gemm(a, b), slice(65535, None), "bmm")
    x = rand((65535 * 32 + 7, 3), F16, rng)
    out = poisoned((3, 65535 * 32 + 7), F16)
    K.transpose(cl.to_device(x), out=out)
    np.testing.assert_array_equal(bits(out.get()[:, 65535 * 32:]), bits(x.T[:, 65535 * 32:]),
                                  err_msg="transpose: the columns of the grid remainder loop")
    np.testing.assert_array_equal(bits(out.get()), bits(x.T))
    x = rand((65535 + 2, 3, 2, 2), F32, rng)
    out = poisoned((65535 + 2, 2, 2, 3), F32)
    K.nchw_to_nhwc(cl.to_device(x), out=out)
    np.testing.assert_array_equal(bits(out.get()[65535:]), bits(ref.nchw_to_nhwc(x)[65535:]),
                                  err_msg="nchw_to_nhwc: the batch of the grid remainder loop")
    np.testing.assert_array_equal(bits(out.get()), bits(ref.nchw_to_nhwc(x)))


# -- layout ------------------------------------------------------------------------------------
LAYOUT_DTYPES = [F16, BF16, F32, F64, np.dtype(np.int16), np.dtype(np.int32),
                 np.dtype(np.complex64)]


@pytest.mark.parametrize("dtype", LAYOUT_DTYPES, ids=IDS)
@GPU
@given(r=st.one_of(st.just(0), T.matrix_sizes(bound(200, 4099))),
       c=st.one_of(st.just(0), T.matrix_sizes(bound(200, 4099))), seed=st.integers(0, 2**31))
def test_transpose(device, dtype, r, c, seed):
    r, c = fit((r, c), ELEMENTS)
    x = rand((r, c), dtype, np.random.default_rng(seed))
    out = poisoned((c, r), dtype)
    assert K.transpose(cl.to_device(x), out=out) is out
    np.testing.assert_array_equal(bits(out.get()), bits(x.T))


@pytest.mark.parametrize("dtype", [F32, F16, BF16, F64], ids=IDS)
@GPU
@given(shape=st.tuples(st.integers(0, 3), st.integers(1, bound(40, 256)),
                       st.integers(1, bound(12, 64)), st.integers(1, bound(12, 64))),
       seed=st.integers(0, 2**31))
def test_nchw_nhwc_round_trip(device, dtype, shape, seed):
    x = rand(shape, dtype, np.random.default_rng(seed))
    n, c, h, w = shape
    out = poisoned((n, h, w, c), dtype)
    K.nchw_to_nhwc(cl.to_device(x), out=out)
    np.testing.assert_array_equal(bits(out.get()), bits(ref.nchw_to_nhwc(x)))
    back = poisoned(shape, dtype)
    K.nhwc_to_nchw(out, out=back)
    np.testing.assert_array_equal(bits(back.get()), bits(x))


# -- streams, in place, interop ----------------------------------------------------------------
def test_work_runs_on_the_given_stream(device):
    rng = np.random.default_rng(11)
    x = rand((300, 257), F32, rng)
    s = cl.Stream(device)
    d = cl.to_device(x, stream=s)
    y = K.softmax(d, stream=s)  # allocated on s
    z = K.scale(y, 2.0, stream=s, out=poisoned(x.shape, F32, stream=s))
    s.sync()
    T.assert_close(z.get(stream=s), 2 * ref.softmax(x), F32)
    with s:  # the current stream
        w = K.transpose(d, out=poisoned(x.T.shape, F32, stream=s))
    s.sync()
    np.testing.assert_array_equal(w.get(stream=s), x.T)
    s.close()


def test_in_place_elementwise(device):
    rng = np.random.default_rng(12)
    x = rand(1000, F32, rng)
    d = cl.to_device(x)
    K.scale(d, 3.0, out=d)
    K.add(d, d, out=d)
    K.axpy(-1.0, d, d)  # d - d
    np.testing.assert_array_equal(d.get(), np.zeros(1000, np.float32))


def test_foreign_arrays(device, rng):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no GPU")
    a, b, h = (torch.from_numpy(rand(shape, dt, rng)).cuda()
               for shape, dt in (((37, 19), F32), ((19, 23), F32), ((8, 100), F16)))
    out = K.matmul_tiled(a, b, out=poisoned((37, 23), F32))
    torch.cuda.synchronize()
    expected = (a.double() @ b.double()).cpu().numpy()
    T.assert_close(out, expected, F32)
    got = K.softmax(h, out=poisoned((8, 100), F16))
    ref_ = torch.softmax(h.double(), dim=-1).cpu().numpy()
    T.assert_close(got, ref_, F16)


def test_threads_do_not_share_launchers(device):
    """Same shapes, same (default) stream, two threads: each result has its own arguments."""
    import threading

    rng = np.random.default_rng(14)
    n = 4097
    xs = [rand(n, F32, rng) for _ in range(4)]
    ds = [cl.to_device(x) for x in xs]
    errors = []

    def work(i):
        try:
            for _ in range(50):
                out = K.scale(ds[i], float(i + 2), out=poisoned(n, F32))
                got = out.get()
                np.testing.assert_array_equal(got, (xs[i] * np.float32(i + 2)))
        except Exception as exc:  # reported below, with the thread's index
            errors.append((i, exc))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


# -- bad input on a real device ----------------------------------------------------------------
def test_bad_input_raises_before_launch(device):
    a = cl.to_device(np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        K.matmul_tiled(a.T, a)
    with pytest.raises(TypeError, match="host numpy array"):
        K.softmax(np.ones((2, 2), np.float32))
    with pytest.raises(TypeError, match="supported"):
        K.softmax(cl.to_device(np.ones((2, 2), np.int32)))
    with pytest.raises(ValueError, match="cannot work in place"):
        K.transpose(a, out=a)
    c = cl.to_device(np.ones((4, 4), np.float32))
    c.close()
    with pytest.raises(cl.ClosedError):
        K.add(a, c)
    closed_stream = cl.Stream(device)
    closed_stream.close()
    with pytest.raises(cl.ClosedError):
        K.add(a, a, stream=closed_stream)
    # The process is fine and the library still works.
    np.testing.assert_array_equal(K.add(a, a, out=poisoned((4, 4), F32)).get(),
                                  np.full((4, 4), 2, np.float32))


def test_other_device_is_refused(two_devices):
    d0, d1 = two_devices
    a = cl.to_device(np.ones(8, np.float32), device=d0)
    b = cl.to_device(np.ones(8, np.float32), device=d1)
    with pytest.raises(ValueError, match="device"):
        K.add(a, b)
    # Each device loads its own module.
    np.testing.assert_array_equal(K.add(b, b, out=poisoned(8, F32, device=d1)).get(),
                                  np.full(8, 2, np.float32))


# -- plain launch, prepared launcher and graph replay agree ------------------------------------
def test_launch_prepared_and_graph_replay_agree(device):
    rng = np.random.default_rng(13)
    n = 10_001
    x, y = rand(n, F32, rng), rand(n, F32, rng)
    dx, dy = cl.to_device(x), cl.to_device(y)
    kernel = ptxlib.kernel(device, "add_f32")
    grid, block = ptxlib.elementwise_grid(device, n)
    s = cl.Stream(device)
    outs = [poisoned(n, F32) for _ in range(3)]
    kernel.launch(grid, block, dx, dy, outs[0], n, stream=s)
    kernel.prepare(grid, block, stream=s)(dx, dy, outs[1], n)
    with cl.graph.capture(s) as g:
        K.add(dx, dy, out=outs[2], stream=s)
    exe = g.instantiate()
    s.sync()
    assert np.isnan(outs[2].get()).all()  # captured, not run
    exe.replay(stream=s)
    s.sync()
    expected = bits(outs[0].get())
    np.testing.assert_array_equal(bits(outs[1].get()), expected)
    np.testing.assert_array_equal(bits(outs[2].get()), expected)
    T.assert_close(outs[0], x.astype(np.float64) + y.astype(np.float64), F32)
    # Replays repeat the captured launch: fresh inputs in the same memory, a new result.
    x2 = rand(n, F32, rng)
    dx.copy_(x2, stream=s)
    exe.replay(stream=s)
    s.sync()
    T.assert_close(outs[2].get(stream=s), x2.astype(np.float64) + y.astype(np.float64), F32)
    exe.close()
    g.close()
    s.close()
