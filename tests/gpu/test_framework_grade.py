"""The library under the conditions a framework puts it in, one regression per test group:

1. cuDNN's backward-filter convolution records a memset of its (small) output and a kernel;
   its relaunch instantiates and runs on a framework's stream and on the default one, bit
   for bit the library call;
2. a worker thread whose first library call is a call shape's second call records the
   relaunch there (gemm, matmul, a held Matmul plan, conv_forward);
3. an epilogue vector (bias) below 16-byte alignment is read, or for the ``*_bgrad``
   epilogues written, through an aligned copy, with the aligned bias's result;
4. torch's float8 tensors come in as float8 arrays sharing the tensor's memory, or are
   refused with a TypeError naming the dtype (never a KeyError); bfloat16 and complex64
   round-trip;
5. a relaunch is an optimisation: one that fails at launch (a status or an exception) is
   turned off for its call shape, counted and logged once, and the call is made through the
   library, whose own errors are raised as ever;
6. options on the hot path: a per-call gemm backend, and relaunching turned off for a block
   or a call.

Each test compares with the library call itself (relaunching off) bit for bit, and with the
float64 reference within the element type's tolerance.
"""

import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cublas, cudnn
from cudalibs import testing as T
from cudalibs.runtime import relaunch
from cudalibs.testing import ref

from .cublas._util import dgelu
from .cudnn._helpers import rand

BF16 = cl.dtypes.bfloat16


def _cached(kind, **fields):
    """The most recently used cached plan of ``kind`` whose key has these field values."""
    found = [e.plan for e in cl.plan_cache.entries(kind)
             if all(e.key[k] == v for k, v in fields.items())]
    assert found, f"no cached {kind} plan with {fields}: {cl.plan_cache.entries(kind)}"
    return found[-1]


def _bitwise(got, want, what):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, (what, i, g.dtype, w.dtype)
        assert g.tobytes() == w.tobytes(), f"{what}: call {i} differs from the library call"


# -- 1. a recorded memset of a small output ------------------------------------------------------
def _filter_gradients(device, rng, n, w_shape=(16, 3, 3, 3), c=3, stream=lambda: None,
                      sync=None):
    """Four backward-filter convolutions of x (n, c, 16, 16) and dy (n, K, 16, 16), padding
    1, each on ``stream()``; checked against the library call (relaunching off) and the
    float64 reference, and the plan's relaunch recorded."""
    sync = sync or cl.default_stream().sync
    k = w_shape[0]
    xh = T.random_array((n, c, 16, 16), np.float32, rng=rng)
    dyh = T.random_array((n, k, 16, 16), np.float32, rng=rng)
    x, dy = cl.to_device(xh), cl.to_device(dyh)
    # to_device copies on cudalibs' current stream, which a framework's stream does not wait
    # for
    device.synchronize()
    outs = [cudnn.conv_backward_filter(x, dy, w_shape, padding=1, stream=stream())
            for _ in range(4)]
    sync()
    got = [o.get() for o in outs]
    plan = _cached("cudnn_conv_backward_filter", x_shape=x.shape, dy_shape=dy.shape,
                   w_shape=tuple(w_shape), padding=1, out_strides=None, deterministic=False,
                   algo="find", graph_api=cl.options().conv_graph_api)
    info = plan.relaunch_info()
    # Recorded on the second call: the graph of a memset of dw and the kernel instantiates
    # (with the call's addresses, never the probes past the end of dw's small allocation).
    assert info["recorded"] == 1 and not info["refused"] and not info["failed"], (info, plan)
    with cl.option_context(relaunch=False):
        lib = [cudnn.conv_backward_filter(x, dy, w_shape, padding=1, stream=stream())
               for _ in range(2)]
        sync()
        want = [o.get() for o in lib]
    if plan.deterministic:
        _bitwise(got + want[1:], [want[0]] * (len(got) + 1), repr(plan))
    else:
        # An engine cuDNN reports nondeterministic (atomic accumulation) may order its sums
        # differently from run to run, the library's own calls included.
        for i, g in enumerate(got):
            T.assert_close(g, want[0].astype(np.float64), np.float32, msg=f"call {i} {plan!r}")
    expected = ref.conv_backward_filter(xh, dyh, w_shape, padding=1)
    for i, g in enumerate(got):
        T.assert_close(g, expected, np.float32, msg=f"call {i} {plan!r}")
    del outs, lib        # freed here, on the stream they were made on, while it exists


def test_filter_gradient_relaunches_on_a_framework_stream(device, rng):
    torch = pytest.importorskip("torch")
    cl.plan_cache.clear("cudnn_conv_backward_filter")    # recorded here, not earlier
    with torch.cuda.stream(torch.cuda.Stream()):
        _filter_gradients(device, rng, 29, stream=torch.cuda.current_stream,
                          sync=lambda: torch.cuda.current_stream().synchronize())


def test_filter_gradients_of_two_problems_relaunch_on_the_default_stream(device, rng):
    cl.plan_cache.clear("cudnn_conv_backward_filter")
    _filter_gradients(device, rng, 32)
    _filter_gradients(device, rng, 33, (32, 16, 3, 3), 16)


# -- the calls of tests 2, 5 and 6 -----------------------------------------------------------------
class _Case:
    """One call of a fixed problem: ``call()`` queues it on ``stream`` and returns the
    output; ``plan()`` is the plan that serves it; ``expected`` the float64 reference;
    ``operands`` the device inputs."""

    def __init__(self, call, plan, expected, dtype, stream, operands):
        self.call, self.plan, self.expected, self.dtype = call, plan, expected, dtype
        self.stream, self.operands = stream, operands

    def get(self, outs):
        return [o.get(stream=self.stream) for o in outs]


#: The kinds of plan cache entries each one-shot case uses.
KINDS = {"gemm": "gemm", "matmul": "cublaslt_matmul", "conv_forward": "cudnn_conv_forward"}


def _case(op, device, rng, s) -> _Case:
    """A problem each library relaunches as one short chain of nodes on Hopper: a 64x64x64
    float32 product (one cuBLASLt kernel) and a 3x3 float16 channels-last convolution."""
    if op == "conv_forward":
        xh, x = rand((8, 32, 16, 16), "float16", rng, True)
        wh, w = rand((32, 32, 3, 3), "float16", rng, True)
        device.synchronize()
        return _Case(lambda: cudnn.conv_forward(x, w, padding=1, stream=s),
                     lambda: _cached("cudnn_conv_forward", x_shape=x.shape,
                                     x_strides=x.strides, w_shape=w.shape, padding=1,
                                     out_strides=None, algo="find"),
                     ref.conv_forward(xh, wh, padding=1), np.float16, s, (x, w))
    ah = T.random_array((64, 64), np.float32, rng=rng)
    bh = T.random_array((64, 64), np.float32, rng=rng)
    a, b = cl.to_device(ah, stream=s), cl.to_device(bh, stream=s)
    expected = T.ref.gemm(ah, bh)
    if op == "gemm":
        return _Case(lambda: cublas.gemm(a, b, stream=s),
                     lambda: _cached("gemm", a_shape=a.shape, a_strides=a.strides,
                                     b_shape=b.shape, a_dtype=a.dtype, out_shape=None,
                                     algo=None, compute=None),
                     expected, np.float32, s, (a, b))
    if op == "matmul":
        return _Case(lambda: cublas.matmul(a, b, stream=s),
                     lambda: _cached("cublaslt_matmul", a_shape=a.shape, a_strides=a.strides,
                                     b_shape=b.shape, a_dtype=a.dtype, epilogue=None,
                                     out_layout=None, bias_align=None),
                     expected, np.float32, s, (a, b))
    assert op == "Matmul", op
    plan = cublas.Matmul(a, b)
    return _Case(lambda: plan.execute(a, b, stream=s), lambda: plan, expected, np.float32, s,
                 (a, b))


def _fresh(op) -> None:
    """Drop the cached plans of ``op``'s kind: its call shape is new to this test."""
    if op in KINDS:
        cl.plan_cache.clear(KINDS[op])


OPS = ["gemm", "matmul", "Matmul", "conv_forward"]


# -- 2. worker threads get the fast path -----------------------------------------------------------
@pytest.mark.parametrize("op", OPS)
def test_a_worker_threads_first_call_records_the_relaunch(device, rng, op):
    _fresh(op)
    s = cl.Stream()
    case = _case(op, device, rng, s)
    first = case.call()                       # the call shape's first call, on this thread
    with ThreadPoolExecutor(max_workers=1) as pool:
        # A new thread: the second call of the shape is its first library call, and records
        # the relaunch (the thread's handle is made before the capture); the third launches.
        second, third = pool.submit(lambda: (case.call(), case.call())).result()
    got = case.get([first, second, third])
    plan = case.plan()
    info = plan.relaunch_info()
    assert info["recorded"] == 1 and not info["refused"] and not info["failed"], (info, plan)
    with cl.option_context(relaunch=False):
        want = case.get([case.call() for _ in range(3)])
    _bitwise(got, want, f"{op} {plan!r}")
    for i, g in enumerate(got):
        T.assert_close(g, case.expected, case.dtype, msg=f"{op} call {i}")
    s.sync()
    s.close()


# -- 3. a bias below 16-byte alignment ----------------------------------------------------------
def test_an_unaligned_bias_is_read_through_an_aligned_copy(device, rng):
    ah = T.random_array((64, 96), BF16, rng=rng)
    bh = T.random_array((96, 48), BF16, rng=rng)
    # Random values, not ones: a copy from the wrong offset would show.
    vh = T.random_array((64,), BF16, rng=rng)
    a, b = cl.to_device(ah), cl.to_device(bh)
    bias = cl.to_device(vh)[1:49]                        # 2 bytes past a 256-byte boundary
    assert bias.address % 16 == 2
    aligned = cl.to_device(np.ascontiguousarray(vh[1:49]))
    assert aligned.address % 16 == 0
    want = cublas.matmul(a, b, bias=aligned).get()
    for i in range(4):          # a plan of its own (the bias alignment is in the key), repeated
        got = cublas.matmul(a, b, bias=bias).get()
        assert got.tobytes() == want.tobytes(), f"call {i}"
    np.testing.assert_array_equal(bias.get().view(np.uint16), vh[1:49].view(np.uint16))
    # The bfloat16 bias epilogue rounds the product before adding the bias: its error is
    # relative to the summands (see tests/gpu/cublas/test_lt.py).
    pre = T.ref.gemm(ah, bh) + vh[1:49].astype(np.float64)
    terms = np.abs(ah.astype(np.float64)) @ np.abs(bh.astype(np.float64)) + \
        np.abs(vh[1:49].astype(np.float64))
    cancel = max(1.0, float(np.linalg.norm(terms) / np.linalg.norm(pre)))
    T.assert_close(want, pre, rtol=T.TOLERANCES["bfloat16"] * cancel)


def test_a_bias_gradient_lands_in_an_unaligned_view(device, rng):
    m, n, k = 64, 48, 96
    gh = T.random_array((m, k), BF16, rng=rng)
    wh = T.random_array((k, n), BF16, rng=rng)
    auxh = T.random_array((m, n), BF16, rng=rng)         # the forward's GELU input
    g, w, aux = cl.to_device(gh), cl.to_device(wh), cl.to_device(auxh)
    poison = T.poison_value(BF16)
    aligned = cl.full((n,), poison, BF16)
    dx_want = cublas.matmul(g, w, epilogue="dgelu_bgrad", aux=aux, bias=aligned).get()
    db_want = aligned.get()
    for i in range(4):
        base = cl.full((64,), poison, BF16)
        view = base[1:1 + n]                             # 2-byte aligned
        assert view.address % 16 == 2
        dx = cublas.matmul(g, w, epilogue="dgelu_bgrad", aux=aux, bias=view).get()
        written = base.get().astype(np.float32)
        assert dx.tobytes() == dx_want.tobytes(), f"call {i}: dx"
        # the gradient lands in the view, bit for bit the aligned call's, and nowhere else
        assert base.get()[1:1 + n].tobytes() == db_want.tobytes(), f"call {i}: bias gradient"
        assert np.isnan(written[0]) and np.isnan(written[1 + n:]).all(), f"call {i}: {written}"
    expected_dx = T.ref.gemm(gh, wh) * dgelu(auxh.astype(np.float64))
    T.assert_close(dx_want, expected_dx, rtol=2e-2)
    T.assert_close(db_want, expected_dx.sum(axis=0), rtol=2e-2)


# -- 4. torch's float8, bfloat16 and complex64 tensors -----------------------------------------------
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2"])
def test_torch_float8_comes_in_or_is_refused_by_name(device, rng, name):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(T.random_array((64, 64), np.float32, rng=rng)).to(
        "cuda", getattr(torch, name))
    try:
        a = cl.asarray(t)
    except TypeError as exc:
        assert name in str(exc), f"the refusal does not name the dtype: {exc}"
        return
    except KeyError as exc:         # what the producer's array interface raises for float8
        pytest.fail(f"asarray raised KeyError for a torch.{name} tensor: {exc!r}")
    assert a.dtype == getattr(cl.dtypes, name), a.dtype
    assert a.address == t.data_ptr() and a.shape == (64, 64), (a, t.data_ptr())
    torch.cuda.synchronize()
    assert a.get().view(np.uint8).tobytes() == t.view(torch.uint8).cpu().numpy().tobytes()


@pytest.mark.parametrize("name", ["bfloat16", "complex64"])
def test_torch_bfloat16_and_complex64_round_trip(device, rng, name):
    torch = pytest.importorskip("torch")
    host = T.random_array((64, 64), np.complex64 if name == "complex64" else np.float32,
                          rng=rng)
    t = torch.from_numpy(host).to("cuda", getattr(torch, name))
    a = cl.asarray(t)
    assert a.dtype == (BF16 if name == "bfloat16" else np.dtype(np.complex64)), a.dtype
    assert a.address == t.data_ptr() and a.shape == (64, 64)
    back = torch.from_dlpack(a)
    assert back.dtype == t.dtype and back.data_ptr() == t.data_ptr()
    assert torch.equal(back, t)
    torch.cuda.synchronize()
    if name == "bfloat16":
        want = t.view(torch.int16).cpu().numpy()
        assert a.get().view(np.int16).tobytes() == want.tobytes()
    else:
        assert a.get().tobytes() == t.cpu().numpy().tobytes()


# -- 5. a relaunch is an optimisation ------------------------------------------------------------------
#: Plans whose relaunch failed here, kept while the tests run: the library logs a failure once
#: per (relaunch slots object, call shape), remembering the object by its id, which a later
#: plan could otherwise be given again.
_FAILED_PLANS = []


def _status_one(self, addresses, stream_h):
    return 1                    # CUDA_ERROR_INVALID_VALUE, as a broken launch would answer


def _raising(self, addresses, stream_h):
    raise RuntimeError("this relaunch fails on purpose")


def _error(call):
    """``(type, message)`` of what ``call()`` raises."""
    try:
        call()
    except Exception as exc:    # noqa: BLE001 - compared below, whatever it is
        return type(exc), str(exc)
    raise AssertionError("the call did not raise")


def _wrong_shape_call(op, device, rng):
    """A call of ``op`` with an operand of the wrong shape."""
    if op == "conv_forward":
        _, x = rand((8, 32, 16, 16), "float16", rng, True)
        _, w = rand((32, 16, 3, 3), "float16", rng, True)     # 16 input channels, not 32
        return lambda: cudnn.conv_forward(x, w, padding=1)
    a = cl.to_device(T.random_array((64, 64), np.float32, rng=rng))
    b = cl.to_device(T.random_array((32, 64), np.float32, rng=rng))   # inner dimension 32
    if op == "gemm":
        return lambda: cublas.gemm(a, b)
    if op == "matmul":
        return lambda: cublas.matmul(a, b)
    plan = cublas.Matmul(a, a)
    return lambda: plan.execute(a, b)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("failure", [_status_one, _raising], ids=["status", "raises"])
def test_a_failing_relaunch_falls_back_to_the_library_call(device, rng, monkeypatch, caplog,
                                                           op, failure):
    _fresh(op)
    s = cl.Stream()
    case = _case(op, device, rng, s)
    monkeypatch.setattr(relaunch.KernelRelaunch, "launch", failure)
    caplog.set_level(logging.WARNING, logger="cudalibs.runtime")
    before = relaunch.totals()
    # The second call records the relaunch, whose launch fails: that call and every later
    # one are made through the library.
    got = case.get([case.call() for _ in range(5)])
    plan = case.plan()
    _FAILED_PLANS.append(plan)
    info = plan.relaunch_info()
    assert info["failed"] == 1 and not info["recorded"], (info, plan)
    assert any("failed at launch" in why for why in info["reasons"]), info
    if op != "Matmul":          # a held plan is not in the cache
        assert cl.plan_cache.info()["relaunch"]["failed"] >= 1, cl.plan_cache.info()
    # counted once, and turned off for the call shape: no later call tries it again
    assert relaunch.totals()["failed"] == before["failed"] + 1, (before, relaunch.totals())
    said = [r for r in caplog.records
            if r.name == "cudalibs.runtime" and "failed at launch" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert said[0].levelno == logging.WARNING
    # every call returned the library's result
    with cl.option_context(relaunch=False):
        want = case.get([case.call() for _ in range(5)])
    _bitwise(got, want, f"{op} {plan!r}")
    for i, g in enumerate(got):
        T.assert_close(g, case.expected, case.dtype, msg=f"{op} call {i}")
    # a library error is raised as with relaunching off
    wrong = _wrong_shape_call(op, device, rng)
    failing = _error(wrong)
    with cl.option_context(relaunch=False):
        assert _error(wrong) == failing
    assert issubclass(failing[0], ValueError), failing
    s.sync()
    s.close()


# -- 6. options on the hot path -----------------------------------------------------------------------
def test_gemm_backend_per_call(device, rng):
    cl.plan_cache.clear("gemm")
    ah = T.random_array((96, 80), np.float32, rng=rng)
    bh = T.random_array((80, 72), np.float32, rng=rng)
    a, b = cl.to_device(ah), cl.to_device(bh)
    backend = cl.options().gemm_backend
    # Six calls: a recording that raises is tried again on later calls, and refused after
    # three tries, so by the sixth call the call shape is decided.
    via_cublas = [cublas.gemm(a, b, options={"gemm_backend": "cublas"}) for _ in range(6)]
    assert cl.options().gemm_backend == backend          # the option was the call's only
    plan = _cached("gemm", a_shape=a.shape, b_shape=b.shape, out_shape=None, algo=None)
    # every call went to cublasGemmEx: the cuBLASLt route was never built, and the call
    # shape is cublasGemmEx's (recorded or refused on its second call)
    assert plan.lt is None, plan
    assert len(plan.relaunches) + len(plan.relaunches.reasons()) == 1, plan.relaunch_info()
    default = [cublas.gemm(a, b) for _ in range(6)]
    if backend != "cublas":
        assert plan.lt, f"the default backend ({backend}) has no cuBLASLt route: {plan!r}"
    expected = T.ref.gemm(ah, bh)
    for i, (x, y) in enumerate(zip(via_cublas, default)):
        T.assert_close(x, expected, np.float32, msg=f"cublas backend, call {i}")
        T.assert_close(y, expected, np.float32, msg=f"default backend, call {i}")
        # two libraries: they agree to rounding, not bit for bit
        T.assert_close(x, y.get().astype(np.float64), np.float32, msg=f"call {i}")


@pytest.mark.parametrize("op", OPS)
def test_relaunch_off_records_nothing(device, rng, op):
    _fresh(op)
    s = cl.Stream()
    case = _case(op, device, rng, s)
    before = relaunch.totals()
    with cl.option_context(relaunch=False) as o:
        assert o.relaunch is False and cl.options().relaunch is False
        off = case.get([case.call() for _ in range(4)])
        plan = case.plan()
        info = plan.relaunch_info()
        assert (info["recorded"], info["pending"], info["refused"], info["failed"]) == \
            (0, 0, 0, 0), info
    assert relaunch.totals()["recorded"] == before["recorded"]
    # The same calls after the block: recorded on the second, so the block was what kept
    # them on the library call.
    on = case.get([case.call() for _ in range(3)])
    info = plan.relaunch_info()
    assert info["recorded"] == 1, (info, plan)
    _bitwise(on, off, f"{op} {plan!r}")
    for i, g in enumerate(off):
        T.assert_close(g, case.expected, case.dtype, msg=f"{op} call {i}")
    s.sync()
    s.close()


@pytest.mark.parametrize("op", ["gemm", "matmul"])
def test_relaunch_off_for_one_call(device, rng, op):
    _fresh(op)
    s = cl.Stream()
    case = _case(op, device, rng, s)
    fn = cublas.gemm if op == "gemm" else cublas.matmul
    a, b = case.operands
    before = cl.options()
    off = case.get([fn(a, b, stream=s, options={"relaunch": False}) for _ in range(4)])
    assert cl.options() == before                  # the option was the calls' only
    plan = case.plan()
    info = plan.relaunch_info()
    assert (info["recorded"], info["pending"], info["refused"]) == (0, 0, 0), info
    # Those calls did not count as calls of the shape: the next two record it.
    on = case.get([case.call() for _ in range(2)])
    assert plan.relaunch_info()["recorded"] == 1, plan.relaunch_info()
    _bitwise(on, off, f"{op} {plan!r}")
    for i, g in enumerate(off):
        T.assert_close(g, case.expected, np.float32, msg=f"call {i}")
    s.sync()
    s.close()

