"""cuDNN's convolution settings on a GPU: the workspace limit (``set_workspace_limit``,
``workspace_limit``) is honoured by the plans and the one-shots -- nothing that needs more
than the limit is picked, and the results stay right -- and restored; every algorithm named in
``FWD_ALGOS``, ``BWD_DATA_ALGOS`` and ``BWD_FILTER_ALGOS`` computes the convolution or is
refused by cuDNN as not supported for the problem."""

import numpy as np
import pytest

from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.cudnn.backend import engines
from cudalibs.cudnn.conv.legacy import not_supported
from cudalibs.testing import ref

from .._threads import in_threads
from ._helpers import poisoned, rand

#: A problem whose candidates differ in workspace: FFT and Winograd-nonfused algorithms and
#: split-reduction engines need scratch memory, implicit GEMM needs none.
X, W, PAD = (4, 32, 24, 24), (32, 32, 5, 5), 2


@pytest.fixture()
def limit():
    """The process-wide limit, put back as it was when the test ends."""
    saved = cudnn.workspace_limit()
    yield saved
    cudnn.set_workspace_limit(saved)
    assert cudnn.workspace_limit() == saved


def _workspaces(plan):
    return [c["workspace"] for c in plan.plan().candidates]


@pytest.mark.parametrize("graph", [True, False], ids=["graph", "legacy"])
def test_the_workspace_limit_is_honoured_and_restored(device, rng, limit, monkeypatch, graph):
    monkeypatch.setattr(engines, "FIND_MAX_COMPILED", 1)   # one runtime compile per search
    xh, x = rand(X, "float32", rng)
    wh, w = rand(W, "float32", rng)
    want = ref.conv_forward(xh, wh, padding=PAD)
    kw = dict(padding=PAD, algo="find", graph_api=graph, max_candidates=8)
    free = cudnn.ConvForwardPlan(x, w, **kw)
    if not graph:
        # FFT needs scratch memory for any such problem: the limit below has work to do
        assert max(_workspaces(free)) > 0, f"no candidate needs workspace: {free.candidates}"
    cudnn.set_workspace_limit(0)
    assert cudnn.workspace_limit() == 0
    capped = cudnn.ConvForwardPlan(x, w, **kw)
    assert _workspaces(capped) and max(_workspaces(capped)) == 0, capped.candidates
    capped.autotune(store=False)
    assert capped.workspace_bytes == 0, repr(capped)
    T.assert_close(capped.execute(x, w, out=poisoned(want.shape, np.float32)), want,
                   np.float32, msg=repr(capped))
    # the one-shot finds a plan made under the limit (the limit is part of its key)
    cudnn.clear_algo_cache()
    T.assert_close(cudnn.conv_forward(x, w, padding=PAD), want, np.float32)
    (entry,) = [e for e in cudnn.algo_cache() if e.plan.op == "forward"]
    assert entry.key["workspace_limit"] == 0 and entry.plan.workspace_bytes == 0, entry
    # an explicit workspace_limit= takes precedence over the default
    wide = cudnn.ConvForwardPlan(x, w, workspace_limit=limit, **kw)
    assert _workspaces(wide) == _workspaces(free)
    # the limit is the process's: a worker thread plans under it too
    seen = in_threads(device, lambda t, s: (cudnn.workspace_limit(),
                                           max(_workspaces(cudnn.ConvForwardPlan(x, w, **kw)))),
                      2)
    assert seen == [(0, 0), (0, 0)]
    cudnn.set_workspace_limit(limit)
    assert cudnn.workspace_limit() == limit
    again = cudnn.ConvForwardPlan(x, w, **kw)
    assert _workspaces(again) == _workspaces(free), "the restored limit admits them again"
    for p in (free, capped, wide, again):
        p.close()


def test_a_bad_limit_is_refused(limit):
    with pytest.raises((TypeError, ValueError)):
        cudnn.set_workspace_limit(-1)
    with pytest.raises((TypeError, ValueError)):
        cudnn.set_workspace_limit("1 GiB")
    assert cudnn.workspace_limit() == limit


# -- every named legacy algorithm ----------------------------------------------------------------
#: Algorithms that compute the convolution by a transform (FFT, Winograd): float32 results
#: carry the transform's rounding, an order of magnitude above a direct sum's.
TRANSFORMS = ("fft", "winograd")
OPS = [("forward", cudnn.FWD_ALGOS), ("backward_data", cudnn.BWD_DATA_ALGOS),
       ("backward_filter", cudnn.BWD_FILTER_ALGOS)]


@pytest.mark.parametrize("op, algos", OPS, ids=[op for op, _ in OPS])
def test_every_named_algorithm_computes_or_is_refused(device, rng, op, algos):
    xs, ws, pad = (2, 8, 12, 12), (8, 8, 3, 3), 1
    xh, x = rand(xs, "float32", rng)
    wh, w = rand(ws, "float32", rng)
    ys = ref.conv_output_shape(xs, ws, 1, pad)
    dyh, dy = rand(ys, "float32", rng)
    if op == "forward":
        want = ref.conv_forward(xh, wh, padding=pad)
        call = lambda algo: cudnn.conv_forward(x, w, padding=pad, algo=algo,  # noqa: E731
                                               out=poisoned(ys, np.float32))
    elif op == "backward_data":
        want = ref.conv_backward_data(dyh, wh, xs, padding=pad)
        call = lambda algo: cudnn.conv_backward_data(dy, w, padding=pad,  # noqa: E731
                                                     algo=algo, out=poisoned(xs, np.float32))
    else:
        want = ref.conv_backward_filter(xh, dyh, ws, padding=pad)
        call = lambda algo: cudnn.conv_backward_filter(x, dy, padding=pad,  # noqa: E731
                                                       algo=algo, out=poisoned(ws, np.float32))
    ran, refused = [], {}
    for name, value in algos.items():
        try:
            got = call(name)
        except cudnn.NoAlgorithmError as exc:
            pytest.fail(f"{op} {name}: {exc} (nothing here limits workspace or determinism)")
        except Exception as exc:          # noqa: BLE001 - sorted below
            status = getattr(exc, "status", None)
            assert status is not None and not_supported(status), \
                f"{op} {name} (= {value}) failed other than as not supported: {exc!r}"
            refused[name] = exc
            continue
        rtol = 1e-4 if name.startswith(TRANSFORMS) else None
        T.assert_close(got, want, np.float32, rtol=rtol, msg=f"{op} algorithm {name}")
        plan = [e.plan for e in cudnn.algo_cache()
                if e.plan.op == op and e.key["algo"] == name][-1]
        assert plan.backend == "legacy" and plan.algo == value, repr(plan)
        ran.append(name)
    # the first algorithm of each operation takes every problem
    assert next(iter(algos)) in ran, f"{op}: ran {ran}, refused {list(refused)}"
