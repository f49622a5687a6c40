"""BatchNormPlan run end to end against recording fakes of cuDNN's batch-norm entry points.

No GPU here: the handle, the workspace, the output allocations and the six batch-norm calls
are replaced by recorders (the descriptors are the real library's, which needs no device).
This checks what the plan decides and passes: Ex or plain entry point per direction, the
fallback when cuDNN refuses the first Ex call (and only then), the reserve handed from the
forward to the backward, the pointers of each call -- also when many threads execute one
plan at once, which must never mix one thread's pointers into another's call.
"""

import itertools
import threading

import numpy as np
import pytest
from gpu._threads import in_threads   # the tests' one harness for work from many threads
from test_cudnn import _DEV   # the stand-in device of the cuDNN CPU tests

from cudalibs import dtypes
from cudalibs.cudnn import norm
from cudalibs.cudnn.norm import batch as bn
from cudalibs.driver.array import DeviceArray
from cudalibs.runtime.cache import cache
from cudalibs.errors import CudnnError

NOT_SUPPORTED = 3000
WS, RS = 256, 64
WS_PTR = 0xA0000


class _FakeCudnn:
    """The entry points batch-norm calls, each recorded with its arguments; everything else
    goes to the real library."""

    def __init__(self, real):
        self.real = real          # descriptors: the real library (no device needed)
        self.calls = []
        self.lock = threading.Lock()
        self.status = {}          # function name -> list of statuses to return, then 0

    def _ret(self, name, args):
        with self.lock:
            self.calls.append((name, args))
            queue = self.status.get(name)
            return queue.pop(0) if queue else 0

    def _size(self, name, out, value, args):
        out._obj.value = value      # the c_size_t behind ctypes.byref
        return self._ret(name, args)

    def cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(self, *a):
        return self._size("fwd_ws", a[-1], WS, a)

    def cudnnGetBatchNormalizationBackwardExWorkspaceSize(self, *a):
        return self._size("bwd_ws", a[-1], 2 * WS, a)

    def cudnnGetBatchNormalizationTrainingExReserveSpaceSize(self, *a):
        return self._size("reserve_size", a[-1], RS, a)

    def __getattr__(self, name):
        if name.startswith("cudnnBatchNormalization"):
            return lambda *a: self._ret(name, a)
        return getattr(self.real, name)

    def named(self, name):
        return [a for n, a in self.calls if n == name]


class _Handle:
    raw = None


_ptrs = itertools.count(0x100000, 0x1000)


def _alloc(out, shape, dtype, channels_last, dev, s, name="out", strides=None, op=None):
    if out is not None:
        return out
    dt = dtypes.lookup(dtype)
    st = tuple(v * dt.itemsize for v in bn.packed_strides(shape, channels_last)) \
        if len(shape) >= 3 else tuple(int(np.prod(shape[i + 1:])) * dt.itemsize
                                       for i in range(len(shape)))
    return DeviceArray._view(next(_ptrs), tuple(shape), st, dt, dev, None, None)


@pytest.fixture()
def lib(monkeypatch):
    fake = _FakeCudnn(bn._lib.get())
    monkeypatch.setattr(bn._lib, "get", lambda: fake)
    monkeypatch.setattr(bn, "handle_for", lambda dev, stream: _Handle())
    monkeypatch.setattr(bn, "workspace", lambda dev, stream, n: (WS_PTR, n))
    monkeypatch.setattr(bn, "output", _alloc)
    monkeypatch.setattr(bn, "empty", lambda shape, dtype, device, stream:
                        _alloc(None, shape, dtype, False, device, stream))
    yield fake
    cache.clear(norm.BATCH_NORM_KEY.name)


def _arr(shape, dtype=np.float32, cl=False):
    """A stand-in device array at a fresh address."""
    return _alloc(None, shape, dtype, cl, _DEV, None)


def _problem(dtype=np.float16, cl=True):
    pd = np.float64 if dtype == np.float64 else np.float32
    return (_arr((4, 8, 5, 5), dtype, cl), _arr((4, 8, 5, 5), dtype, cl), _arr((8,), pd),
            _arr((8,), pd))


def test_ex_forward_and_backward_with_the_reserve(lib):
    x, dy, g, b = _problem()
    plan = norm.BatchNormPlan(x).plan()
    assert [n for n, _ in lib.calls] == ["fwd_ws", "reserve_size", "bwd_ws", "reserve_size"]
    assert plan.entry_points == {"forward": "ex", "backward": "ex"}
    assert plan.reserve_bytes == RS and plan.workspace_bytes == 2 * WS
    r = repr(plan)
    assert f"forward: Ex, workspace {WS} B, reserve {RS} B" in r
    assert f"backward: Ex, workspace {2 * WS} B" in r and "persistent" in r
    state = plan.execute(x, g, b, eps=1e-3)
    (call,) = lib.named("cudnnBatchNormalizationForwardTrainingEx")
    assert call[1] == bn._lib.CUDNN_BATCHNORM_SPATIAL_PERSISTENT
    assert call[6] == x._ptr and call[10] == state.y._ptr and call[12:14] == (g._ptr, b._ptr)
    assert call[-7:-5] == (state.save_mean._ptr, state.save_inv_std._ptr)
    assert call[-4:-2] == (WS_PTR, WS) and call[-2] == state.reserve._ptr
    assert call[-1] == RS == state.reserve.nbytes
    assert state.path == "ex" and plan.paths == {"forward": "ex"}
    dx, dg, db = plan.backward(x, dy, g, state)
    (bcall,) = lib.named("cudnnBatchNormalizationBackwardEx")
    assert bcall[8] == x._ptr and bcall[12] == dy._ptr and bcall[16] == dx._ptr
    assert bcall[-2:] == (state.reserve._ptr, RS) and bcall[-4:-2] == (WS_PTR, 2 * WS)
    assert bcall[-7:-5] == (state.save_mean._ptr, state.save_inv_std._ptr)
    # no reserve: the plain backward, recorded as such, the Ex decision unchanged
    plan.backward(x, dy, g, state.save_mean, state.save_inv_std, eps=1e-3)
    assert len(lib.named("cudnnBatchNormalizationBackward")) == 1
    assert plan.paths["backward without reserve"].startswith("legacy: no reserve")
    assert plan.paths["backward"] == "ex" and plan.entry_points["backward"] == "ex"
    assert "backward without reserve: legacy" in repr(plan)
    with pytest.raises(ValueError, match="needs 64"):
        plan.backward(x, dy, g, state.save_mean, state.save_inv_std, reserve=_arr((8,),
                                                                                  np.uint8))
    plan.close()


def test_refused_first_ex_call_falls_back_once(lib):
    x, _, g, b = _problem(np.float32, False)
    lib.status["cudnnBatchNormalizationForwardTrainingEx"] = [NOT_SUPPORTED]
    plan = norm.BatchNormPlan(x)
    first = plan.execute(x, g, b)
    assert first.path == "legacy" and first.reserve is None
    assert plan.paths["forward"].startswith("legacy: ") and "legacy" in plan.entry_points[
        "forward"]
    second = plan.execute(x, g, b)
    assert second.path == "legacy"
    # the refusal is remembered: one Ex attempt, two plain calls
    assert len(lib.named("cudnnBatchNormalizationForwardTrainingEx")) == 1
    assert len(lib.named("cudnnBatchNormalizationForwardTraining")) == 2
    assert "forward: legacy (" in repr(plan)
    plan.close()


def test_failure_after_a_successful_ex_call_raises(lib):
    x, _, g, b = _problem()
    plan = norm.BatchNormPlan(x)
    plan.execute(x, g, b)
    lib.status["cudnnBatchNormalizationForwardTrainingEx"] = [NOT_SUPPORTED]
    with pytest.raises(CudnnError):
        plan.execute(x, g, b)
    assert plan.entry_points["forward"] == "ex"
    # a fused call cuDNN refuses is an error too, never a silent unfused run
    lib.status["cudnnBatchNormalizationForwardTrainingEx"] = [NOT_SUPPORTED]
    with pytest.raises(CudnnError):
        plan.execute(x, g, b, activation="relu")
    plan.close()


def test_float64_takes_the_plain_entry_points_without_asking(lib):
    x, dy, g, b = _problem(np.float64, False)
    plan = norm.BatchNormPlan(x).plan()
    assert lib.calls == []
    assert all(v.startswith("legacy: float64") for v in plan.entry_points.values())
    state = plan.execute(x, g, b)
    plan.backward(x, dy, g, state)
    assert [n for n, _ in lib.calls] == ["cudnnBatchNormalizationForwardTraining",
                                         "cudnnBatchNormalizationBackward"]
    plan.close()


def test_inference_and_the_one_shots_share_the_cached_plan(lib):
    x, _, g, b = _problem()
    m, v = _arr((8,)), _arr((8,))
    y = norm.batch_norm_infer(x, g, b, m, v, eps=1e-3)
    (call,) = lib.named("cudnnBatchNormalizationForwardInference")
    assert call[1] == bn._lib.CUDNN_BATCHNORM_SPATIAL      # inference: the plain mode
    assert call[5] == x._ptr and call[7] == y._ptr and call[9:13] == (g._ptr, b._ptr, m._ptr,
                                                                      v._ptr)
    state = norm.batch_norm_train(x, g, b)
    norm.batch_norm_backward(x, x, g, state)
    (e,) = cache.entries(norm.BATCH_NORM_KEY.name)
    assert e.plan.training and norm.batch_norm_paths(x) == {"forward": "ex", "backward": "ex"}
    # the plan was asked for its sizes once, when it was planned
    assert len(lib.named("fwd_ws")) == 1 and len(lib.named("bwd_ws")) == 1


def test_threads_sharing_a_plan_pass_their_own_pointers(lib):
    x0, _, g, b = _problem()
    plan = norm.BatchNormPlan(x0).plan()
    per_thread = [[_problem()[:2] for _ in range(20)] for _ in range(8)]

    def work(t, stream):          # host-only threads: no stream
        seen = {}
        for x, dy in per_thread[t]:
            state = plan.execute(x, g, b)
            dx, _, _ = plan.backward(x, dy, g, state)
            seen[x._ptr] = (state.y._ptr, state.reserve._ptr, dx._ptr)
        return seen

    seen = {(t, xp): v for t, got in enumerate(in_threads(None, work, 8))
            for xp, v in got.items()}
    fwd = {c[6]: c for c in lib.named("cudnnBatchNormalizationForwardTrainingEx")}
    bwd = {c[8]: c for c in lib.named("cudnnBatchNormalizationBackwardEx")}
    assert len(seen) == 160 and len(fwd) == len(bwd) == 160
    for (t, xp), (yp, rp, dxp) in seen.items():
        assert fwd[xp][10] == yp and fwd[xp][-2] == rp, (t, hex(xp))
        assert bwd[xp][16] == dxp and bwd[xp][-2] == rp, (t, hex(xp))
    plan.close()
