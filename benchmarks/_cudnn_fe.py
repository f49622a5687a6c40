"""cuDNN's own Python frontend (``nvidia-cudnn-frontend``, imported as ``cudnn``) as a
benchmark peer for attention: the same cuDNN library, driven through NVIDIA's bindings.

It is never a dependency of cudalibs.  A run installs the wheel beside the benchmark only,
for example ``pip install --no-deps --target /tmp/fe nvidia-cudnn-frontend`` and then
``--frontend /tmp/fe``; without it the peer's columns say why they are empty.

The frontend is given its best chance: every execution plan its heuristics rank (modes A and
FALLBACK, ``build_plan_policy.ALL``) is built, each is timed on the torch stream, and the
fastest is the one measured against ours -- the same breadth as our ``autotune()``.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Callable


def load(path: str | None):
    """``(module, version text)`` of the frontend, or ``(None, why)``."""
    if path:
        sys.path.insert(0, path)
    try:
        import cudnn as fe
    except Exception as exc:  # ImportError, or a wheel for another Python
        return None, f"not available ({type(exc).__name__}: {str(exc).splitlines()[0][:100]})"
    ver = getattr(fe, "__version__", "?")
    try:
        backend = fe.backend_version()
    except Exception:  # noqa: BLE001 - older frontends lack it
        backend = "?"
    return fe, f"nvidia-cudnn-frontend {ver} (cuDNN backend {backend})"


def _best_plan(graph, run: Callable[[int], None], sync: Callable[[], None]) -> tuple[int, str]:
    """Time every built plan of ``graph`` (a few calls each) and select the fastest."""
    best, best_i = float("inf"), 0
    for i in range(graph.get_execution_plan_count()):
        try:
            run(i)
            sync()
            t0 = time.perf_counter()
            for _ in range(3):
                run(i)
            sync()
            t = time.perf_counter() - t0
        except Exception:  # noqa: BLE001 - a plan that declines at run time is skipped
            continue
        if t < best:
            best, best_i = t, i
    graph.select_plan(best_i)
    try:
        name = graph.get_plan_name_at_index(best_i)
    except Exception:  # noqa: BLE001
        name = f"plan {best_i}"
    return best_i, name


def sdpa_cases(fe, torch, ts, tensors: dict, *, causal: bool, scale: float) -> dict[str, Any]:
    """The frontend's forward and backward of one problem on the torch stream ``ts``.

    ``tensors`` holds torch views of our arrays: q, k, v, o, stats, do, dq, dk, dv (the
    frontend writes its own o/stats/dq/dk/dv into them; the timing is all that is used).
    Returns ``{"fwd": fn, "bwd": fn, "engines": text}``, or ``{"why": text}``.
    """
    dt = {torch.bfloat16: fe.data_type.BFLOAT16, torch.float16: fe.data_type.HALF}[
        tensors["q"].dtype]
    handle = fe.create_handle()
    fe.set_stream(handle=handle, stream=ts.cuda_stream)
    sync = ts.synchronize

    def graph_of():
        return fe.pygraph(io_data_type=dt, intermediate_data_type=fe.data_type.FLOAT,
                          compute_data_type=fe.data_type.FLOAT, handle=handle)

    def finish(g, outs):
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([fe.heur_mode.A, fe.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans(fe.build_plan_policy.ALL)
        ws = torch.empty(max(g.get_workspace_size(), 1), device="cuda", dtype=torch.uint8)
        return ws

    t = tensors
    # forward (training: writes the statistics)
    gf = graph_of()
    q, k, v = (gf.tensor_like(t[n]) for n in ("q", "k", "v"))
    o, stats = gf.sdpa(name="sdpa", q=q, k=k, v=v, generate_stats=True, attn_scale=scale,
                       use_causal_mask=causal)
    o.set_output(True).set_dim(list(t["o"].shape)).set_stride(list(t["o"].stride()))
    stats.set_output(True).set_data_type(fe.data_type.FLOAT)
    ws_f = finish(gf, (o, stats))
    pack_f = {q: t["q"], k: t["k"], v: t["v"], o: t["o"], stats: t["stats"]}
    _, name_f = _best_plan(gf, lambda i: gf.execute_plan_at_index(pack_f, ws_f, i, handle=handle),
                           sync)
    # backward
    gb = graph_of()
    bq, bk, bv, bo, bdo = (gb.tensor_like(t[n]) for n in ("q", "k", "v", "o", "do"))
    bst = gb.tensor_like(t["stats"])
    dq, dk, dv = gb.sdpa_backward(name="sdpa_backward", q=bq, k=bk, v=bv, o=bo, dO=bdo,
                                  stats=bst, attn_scale=scale, use_causal_mask=causal)
    for d, n in ((dq, "dq"), (dk, "dk"), (dv, "dv")):
        d.set_output(True).set_dim(list(t[n].shape)).set_stride(list(t[n].stride()))
    ws_b = finish(gb, (dq, dk, dv))
    pack_b = {bq: t["q"], bk: t["k"], bv: t["v"], bo: t["o"], bdo: t["do"], bst: t["stats"],
              dq: t["dq"], dk: t["dk"], dv: t["dv"]}
    _, name_b = _best_plan(gb, lambda i: gb.execute_plan_at_index(pack_b, ws_b, i, handle=handle),
                           sync)
    keep = (gf, gb, ws_f, ws_b, handle)   # alive as long as the closures are

    def fwd():
        gf.execute(pack_f, ws_f, handle=handle)

    def bwd():
        gb.execute(pack_b, ws_b, handle=handle)

    fwd.keep = bwd.keep = keep
    return {"fwd": fwd, "bwd": bwd, "engines": f"{name_f} / {name_b}"}
