"""The op layer across libraries on a GPU: one operand path (one family of messages), the one
timer, the plan cache's bound, and release_all()."""

from __future__ import annotations

import contextlib
import gc

import numpy as np
import pytest

import cudalibs as cl
from cudalibs.runtime import plan as P
from cudalibs.runtime.cache import cache as plan_cache

HOST = r"is a host numpy array; copy it to the GPU first with cudalibs.to_device\(\)"


def _libraries_on_host_input():
    """(label, call) pairs, each passing a host numpy array where a device array belongs."""
    from cudalibs import cublas, cudnn, kernels, nccl

    h2 = np.ones((4, 4), np.float32)
    h4 = np.ones((1, 2, 4, 4), np.float32)

    def nccl_call():
        [comm] = nccl.Communicator.init_all([cl.Device(0)])
        try:
            comm.all_reduce(np.ones(4, np.float32))
        finally:
            comm.close()

    return [
        ("gemm: a", lambda: cublas.gemm(h2, cl.to_device(h2))),
        ("matmul: a", lambda: cublas.matmul(h2, cl.to_device(h2))),
        ("conv_forward: x", lambda: cudnn.conv_forward(h4, cl.to_device(h4[:, :, :3, :3]))),
        ("softmax: x", lambda: kernels.softmax(h2)),
        ("all_reduce: send", nccl_call),
    ]


@pytest.mark.parametrize("index", range(5))
def test_every_library_refuses_host_arrays_with_the_same_words(device, index):
    label, call = _libraries_on_host_input()[index]
    with pytest.raises(TypeError, match=f"{label} {HOST}"):
        call()


def test_asarray_refuses_host_numpy_though_it_speaks_dlpack(device):
    with pytest.raises(TypeError, match=HOST):
        cl.asarray(np.ones(3, np.float32))


def test_operand_device_and_closed_checks(device):
    from cudalibs.runtime.operand import operand

    a = cl.to_device(np.ones((2, 3), np.float32))
    assert operand(a, "a", "op", ndim=2, dtypes=(np.dtype(np.float32),), contiguous=True) is a
    with pytest.raises(ValueError, match="op: a must be C-contiguous"):
        operand(a.T, "a", "op", contiguous=True)
    with pytest.raises(ValueError, match="op: a must have 3 dimensions"):
        operand(a, "a", "op", ndim=3)
    with pytest.raises(TypeError, match="op: a has dtype float32; supported: float16"):
        operand(a, "a", "op", dtypes=(np.dtype(np.float16),))
    a.close()
    with pytest.raises(cl.ClosedError, match="op: a is closed"):
        operand(a, "a", "op")


class _CopyPlan(P.Plan):
    """Candidates are copies of different sizes, each a known amount of device work."""

    kind = "copy-test"

    def __init__(self, device, sizes):
        self._init_plan(device)
        self._own(lambda: None)
        self.sizes = sizes

    def _heuristics(self):
        return [{"name": f"copy {n}", "id": n, "workspace": 0} for n in self.sizes]

    def _select(self, i):
        self.current = self.sizes[i]

    @contextlib.contextmanager
    def _runner(self, stream):
        bufs = {n: (P.scratch((n,), np.float32, self._device, stream),
                    cl.empty((n,), np.float32, device=self._device, stream=stream))
                for n in self.sizes}
        try:
            yield lambda i: bufs[self.sizes[i]][1].copy_(bufs[self.sizes[i]][0], stream=stream)
        finally:
            stream.sync()

    def _problem(self):
        return f"copies {self.sizes}"

    def _tuning_key(self):
        return {"sizes": self.sizes}


#: Bytes a second that no GPU's memory reaches (B200's HBM3e moves about 8e12).
FASTER_THAN_ANY_GPU = 20e12


def test_the_one_timer_measures_candidates_and_the_store_remembers(device, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", str(tmp_path / "t.json"))
    # large enough that device time, not the host cost of a copy call, is what is measured
    sizes = [1 << 27, 1 << 23, 1 << 25]
    timer, timed = P.time_candidates, []
    monkeypatch.setattr(P, "time_candidates",
                        lambda *a, **k: timed.append(timer(*a, **k)) or timed[-1])
    p = _CopyPlan(device, sizes)
    cands = p.autotune(stream=cl.Stream())
    ms = [c["ms"] for c in cands]
    assert len(timed) == 1 and ms == timed[0], "the candidates must carry the timer's numbers"
    assert all(np.isfinite(ms))
    # A copy of n float32 reads and writes 4n bytes each.  A timer that measured the host's
    # launch instead of the device's work reports far less than the largest copy takes at a
    # bandwidth no GPU has; a slow or shared GPU only takes longer, so this cannot flake the
    # way comparing the candidates' times with each other can.
    largest = int(np.argmax(sizes))
    floor_ms = 2 * 4 * sizes[largest] / FASTER_THAN_ANY_GPU * 1e3
    assert ms[largest] >= floor_ms, (ms, floor_ms)
    # The choice is the fastest as measured, whichever candidate that was.
    best = int(np.argmin(ms))
    assert p.choice == best and p.tuned
    calls = []
    monkeypatch.setattr(P, "time_candidates", lambda *a, **k: calls.append(1) or [1.0] * 3)
    q = _CopyPlan(device, sizes)
    q.autotune()
    assert q.choice == best and calls == [], "a stored choice must be taken without timing"


def test_scratch_is_random_and_never_zero(device):
    s = cl.Stream()
    for dt in (np.float32, np.float16, np.int32):
        x = P.scratch((1000,), dt, device, s).get()
        assert np.all(x != 0) and len(np.unique(x)) > 1
    strided = P.scratch((4, 3), np.float32, device, s, strides=(4, 16))
    assert strided.strides == (4, 16) and np.all(strided.copy().get() != 0)


def test_one_shot_plans_share_one_bounded_cache(device):
    from cudalibs import cublas

    keep = plan_cache.maxsize
    try:
        plan_cache.clear()
        plan_cache.maxsize = 8
        for n in range(1, 30):
            a = cl.to_device(np.ones((n, 3), np.float32))
            cublas.gemm(a, a.T)
            cublas.matmul(a, a.T)
            assert len(plan_cache) <= 8
        kinds = {e.kind for e in plan_cache.entries()}
        assert kinds, "the one-shot functions put their plans in the one cache"
        for e in plan_cache.entries():
            assert isinstance(e.key, dict) and e.key
    finally:
        plan_cache.maxsize = keep


def test_release_all_frees_what_cudalibs_holds(device):
    from cudalibs import cublas, cudnn

    s = cl.Stream()
    a = cl.to_device(np.ones((64, 64), np.float32), stream=s)
    cublas.gemm(a, a, stream=s)
    x = cl.to_device(np.ones((2, 4, 8, 8), np.float32), stream=s)
    w = cl.to_device(np.ones((4, 4, 3, 3), np.float32), stream=s)
    cudnn.conv_forward(x, w, padding=1, stream=s)
    s.sync()
    assert len(plan_cache) > 0
    del a, x, w
    gc.collect()
    cl.release_all()
    assert len(plan_cache) == 0
    pool = device.memory_pool
    assert pool.cached_bytes == 0


def test_kernel_launch_cache_does_not_keep_a_dropped_stream_alive(device):
    import weakref

    from cudalibs import kernels

    x = cl.to_device(np.random.default_rng(0).standard_normal((4, 33)).astype(np.float32))
    s = cl.Stream()
    y = kernels.softmax(x, stream=s)
    s.sync()
    want = y.get()
    r = weakref.ref(s)
    # y's memory is freed on the stream it was allocated on, so y holds s: drop both.
    del s, y
    gc.collect()
    assert r() is None, "the launcher cache kept an unreferenced stream alive"
    s2 = cl.Stream()   # may reuse the handle value: must get a launcher of its own
    np.testing.assert_array_equal(kernels.softmax(x, stream=s2).get(), want)


def test_a_module_compiled_without_a_driver_loads_on_first_use(device, monkeypatch, tmp_path):
    from cudalibs.driver import _core, nvrtc
    from cudalibs.errors import LibraryNotFoundError

    real = _core.driver_version
    calls = []

    def first_missing():
        calls.append(1)
        if len(calls) == 1:
            raise LibraryNotFoundError("cuda", ["stand-in"], "no driver yet")
        return real()

    monkeypatch.setattr(_core, "driver_version", first_missing)
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", str(tmp_path))
    nvrtc.clear_memory_cache()
    mod = cl.compile('extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }',
                     arch=device.arch)
    assert "not loaded yet" in repr(mod)
    x = cl.to_device(np.arange(32, dtype=np.float32))
    mod["twice"].launch(1, 32, x)
    np.testing.assert_array_equal(x.get(), 2 * np.arange(32, dtype=np.float32))
    assert mod.device is device and "on device" in repr(mod)
    mod.close()
    assert mod.closed
