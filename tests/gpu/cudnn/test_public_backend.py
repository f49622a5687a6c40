"""cuDNN's graph API as the public ``cudnn.backend`` module offers it, used by hand on a GPU:
tensors, convolutions and matmuls, pointwise operations and operation graphs built with its
builders; the heuristics' ``EngineConfig``s with their notes; ``execution_plan`` and
``variant_pack`` run with ``cudnnBackendExecute``; the shared engine search (``candidates``,
``banned_notes``, ``FIND_MAX_PLANS``, ``FIND_MAX_COMPILED``).  Every result is checked against
the float64 references: for each operation of ``CONV_OPS`` (whose table fixes the operand
order) and for a matmul + bias + ReLU graph."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import testing as T
from cudalibs.cudnn import backend
from cudalibs.cudnn.descriptors import packed_strides
from cudalibs.cudnn.handle import handle_for
from cudalibs.testing import ref


UIDS = (1, 2, 3)
X, W, PAD = (2, 8, 10, 9), (6, 8, 3, 3), (1, 1)


def _conv_problem(op, rng):
    """``(shapes in CONV_OPS order, host inputs, reference output)`` of ``op``."""
    ys = ref.conv_output_shape(X, W, 1, PAD)
    if op == "forward":
        xh, wh = (T.random_array(s, np.float32, rng=rng) for s in (X, W))
        return (X, W, ys), (xh, wh), ref.conv_forward(xh, wh, padding=PAD)
    if op == "backward_data":
        wh, dyh = (T.random_array(s, np.float32, rng=rng) for s in (W, ys))
        return (W, ys, X), (wh, dyh), ref.conv_backward_data(dyh, wh, X, padding=PAD)
    xh, dyh = (T.random_array(s, np.float32, rng=rng) for s in (X, ys))
    return (X, ys, W), (xh, dyh), ref.conv_backward_filter(xh, dyh, W, padding=PAD)


def _conv_graph(h, op, shapes):
    tensors = [backend.tensor(uid, np.float32, shape, packed_strides(shape, False))
               for uid, shape in zip(UIDS, shapes)]
    assert all(isinstance(t, backend.BackendDescriptor) and t.finalized for t in tensors)
    conv = backend.convolution(PAD, (1, 1), (1, 1), compute=np.float32)
    return backend.operation_graph([backend.conv_operation(op, *tensors, conv)], h.raw)


def _poisoned(shape, dtype, s):
    """An output full of NaN, made on the stream the graph runs on (a cudalibs stream does
    not wait for the legacy default stream)."""
    return cl.full(shape, T.poison_value(dtype), dtype, stream=s)


def _workspace(nbytes):
    """A device buffer of ``nbytes`` (None for none) and its address (0 for none)."""
    buf = cl.alloc(nbytes) if nbytes else None
    return buf, (buf.ptr if buf is not None else 0)


@pytest.mark.parametrize("op", list(backend.CONV_OPS))
def test_a_hand_built_convolution_graph_runs_its_engines(device, rng, op):
    s = cl.Stream()
    h = handle_for(device, s.raw_handle)
    shapes, inputs, want = _conv_problem(op, rng)
    graph = _conv_graph(h, op, shapes)
    configs = backend.engine_configs(graph)
    assert configs and all(isinstance(c, backend.EngineConfig) for c in configs)
    known = set(backend.NUMERICAL_NOTES.values()) | set(backend.BEHAVIOR_NOTES.values())
    for c in configs:
        assert c.name.startswith(f"eng{c.engine}")
        # a note this cuDNN adds to the header's is named by its value ("note12")
        assert all(n in known or n.startswith("note")
                   for n in c.numerical_notes | c.behavior_notes), c
    # true float32: no tensor cores, no down-conversion; at most one runtime compile
    banned = backend.banned_notes(np.float32, "fma", False)
    usable = [c for c in configs if not c.numerical_notes & banned]
    compiled, ran, failed = 0, [], []
    for cfg in usable:
        if len(ran) == 3:
            break
        if "runtime_compilation" in cfg.behavior_notes:
            if compiled:
                continue
            compiled += 1
        try:
            plan = backend.execution_plan(h.raw, cfg, UIDS)
        except cl.CudnnError as exc:          # the configuration does not take this problem
            failed.append(f"{cfg.name}: {exc.name}")
            continue
        assert isinstance(plan, backend.ExecutionPlan) and plan.name == cfg.name
        ws, ws_ptr = _workspace(plan.workspace_size)
        a, b = (cl.to_device(x, stream=s) for x in inputs)
        out = _poisoned(shapes[2], np.float32, s)
        pack = backend.variant_pack(UIDS, (a.address, b.address, out.address), ws_ptr)
        plan.run_pack(h.raw, pack)
        T.assert_close(out.get(stream=s), want, np.float32, msg=f"{op} {plan!r}")
        ran.append(cfg.name)
        del ws
    assert ran, f"no engine of {len(usable)} ran {op}; failed to finalize: {failed}"


def test_the_engine_search_bounds_its_candidates(device, rng):
    s = cl.Stream()
    h = handle_for(device, s.raw_handle)
    shapes, inputs, want = _conv_problem("forward", rng)
    graph = _conv_graph(h, "forward", shapes)
    banned = backend.banned_notes(np.float32, "fma", False)
    assert "tensor_core" in banned and "nondeterministic" not in banned
    assert "nondeterministic" in backend.banned_notes(np.float32, "fma", True)
    pairs = backend.candidates(h, graph, UIDS, banned, 1 << 30, backend.FIND_MAX_PLANS)
    assert 1 <= len(pairs) <= backend.FIND_MAX_PLANS
    compiled = sum("runtime_compilation" in c["notes"] for c, _ in pairs)
    assert compiled <= backend.FIND_MAX_COMPILED
    a, b = (cl.to_device(x, stream=s) for x in inputs)
    for cand, plan in pairs:
        assert not set(cand["notes"]) & banned and cand["workspace"] == plan.workspace_size
        ws, ws_ptr = _workspace(plan.workspace_size)
        out = _poisoned(shapes[2], np.float32, s)
        # through the plan's own path: cudnnBackendExecute first, then its recorded kernels
        for i in range(3):
            plan.run(device, s, (a.address, b.address, out.address), ws_ptr, backend.ALIGNMENT)
            T.assert_close(out.get(stream=s), want, np.float32, msg=f"{cand['name']}, call {i}")
        del ws
    # under a limit of no workspace, only plans that need none
    try:
        lean = backend.candidates(h, graph, UIDS, banned, 0, 4)
    except backend.NoGraph as exc:
        assert "workspace limit 0" in str(exc)
    else:
        assert all(c["workspace"] == 0 for c, _ in lean)


def test_a_matmul_bias_relu_graph(device, rng):
    """``relu(a @ b + bias)`` in float16 with float32 accumulation: the fusion pattern of
    cuDNN's runtime-compiled engines, built from the module's matmul and pointwise pieces."""
    m, n, k = 64, 48, 40
    assert {"add", "relu"} <= set(backend.POINTWISE_MODES)
    s = cl.Stream()
    h = handle_for(device, s.raw_handle)
    dt = np.float16

    def t(uid, shape, dtype=dt, virtual=False):
        strides = [int(np.prod(shape[i + 1:])) for i in range(len(shape))]
        return backend.tensor(uid, dtype, shape, strides, virtual=virtual)

    a, b, bias, c = t(1, (1, m, k)), t(2, (1, k, n)), t(3, (1, 1, n)), t(4, (1, m, n))
    prod = t(101, (1, m, n), np.float32, virtual=True)
    biased = t(102, (1, m, n), np.float32, virtual=True)
    ops = [backend.matmul_operation(a, b, prod, backend.matmul(compute=np.float32)),
           backend.pointwise_operation(backend.pointwise("add"), prod, biased, bias),
           backend.pointwise_operation(backend.pointwise("relu"), biased, c)]
    graph = backend.operation_graph(ops, h.raw)
    pairs = backend.candidates(h, graph, (1, 2, 3, 4), backend.banned_notes(dt, "tensor_op",
                                                                             False),
                               1 << 30, 2)
    ah, bh, biash = (T.random_array(shape, dt, rng=rng) for shape in ((m, k), (k, n), (n,)))
    want = np.maximum(T.ref.gemm(ah, bh) + biash.astype(np.float64), 0.0)
    da, db, dbias = (cl.to_device(x, stream=s) for x in (ah, bh, biash))
    for cand, plan in pairs:
        ws, ws_ptr = _workspace(plan.workspace_size)
        out = _poisoned((m, n), dt, s)
        plan.execute(h.raw, (da.address, db.address, dbias.address, out.address), ws_ptr)
        T.assert_close(out.get(stream=s), want, dt, msg=cand["name"])
        del ws
