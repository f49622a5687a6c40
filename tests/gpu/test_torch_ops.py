"""The PyTorch adapter of examples/torch_ops.py: each autograd Function's forward and backward
against PyTorch's own operations, the Functions on autograd's device thread and on a
non-default stream, a small transformer block and conv net trained through them against the
same models in pure PyTorch, eagerly and replayed from a ``torch.cuda.graph`` capture, and
the refusal of a capture cudalibs is not ready for.

References are PyTorch's operations in float64 on the same (exactly representable) inputs,
so each check bounds the error of the cudalibs result alone.  The error is norm-wise,
``||actual - expected|| / ||expected||``, against the bound of the dtype the result passed
through (:func:`tol`).
"""

import importlib.util
import math
import sys
import threading
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

ROOT = Path(__file__).resolve().parents[2]


def _load_example():
    spec = importlib.util.spec_from_file_location("torch_ops", ROOT / "examples" / "torch_ops.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


E = _load_example()

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: The norm-wise bound of a result computed with float32 accumulation and stored in the
#: dtype: float32 rounding of the sums, or the 2**-11 / 2**-8 rounding of a half output
#: (and of the half intermediates the fused kernels keep).
BASE = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-2}
#: cuBLASLt evaluates GELU and its derivative with a fast tanh, about 1e-5 relative per
#: element forward and a few 1e-5 for the derivative (tests/gpu/cublas/test_lt.py): float32
#: results of the GELU epilogues get these bounds instead of float32's.
GELU_FP32 = {"forward": 1e-4, "backward": 1e-3}
#: Eager against graph-replayed training steps (losses, and each parameter's update over the
#: run): the same kernels on the same operands, and on an H100 the two runs are bitwise
#: equal.  Not guaranteed, though: a library may pick a kernel that adds with atomics, whose
#: order changes from run to run; in float32 that moves the last bits, and through the
#: transformer's bfloat16 attention it may flip a bfloat16 rounding (2**-8) of a few
#: gradient elements.  The first step's loss, before any update, must be bitwise equal.
GRAPH_RTOL = 1e-6
GRAPH_UPDATE_RTOL = {"conv": 1e-5, "transformer": 1e-3}
#: Steps of the model tests: enough for three eager warm-up steps and three replays.
STEPS = 6


def tol(dtype, n: int = 1) -> float:
    """The bound for a result of ``dtype`` whose elements are sums of ``n`` products.

    Rounding errors of a sum of ``n`` terms in random order grow like ``sqrt(n)`` times the
    unit roundoff: the base bounds hold up to ``n = 1024`` (float32: ``sqrt(1024) * 6e-8``
    is about 2e-6, five times below 1e-5) and grow with ``sqrt(n)`` beyond.
    """
    return BASE[dtype] * max(1.0, math.sqrt(n / 1024))


def rel(actual, expected) -> float:
    """``||actual - expected|| / ||expected||`` in float64."""
    a, e = actual.detach().double(), expected.detach().double()
    assert a.shape == e.shape, (a.shape, e.shape)
    n = torch.linalg.vector_norm(e)
    d = torch.linalg.vector_norm(a - e)
    return float(d / n) if n > 0 else float(d)


def check(name, actual, expected, bound):
    err = rel(actual, expected)
    assert err <= bound, f"{name}: relative error {err:.3e} > {bound:.1e}"


def rand(*shape, gen, dtype=torch.float32, scale=1.0):
    """Normal values rounded to ``dtype`` (exact in float64), drawn from the test's ``gen``."""
    return (torch.randn(*shape, generator=gen) * scale).to("cuda", dtype)


def ref64(*tensors):
    """float64 leaf copies (requiring grad) of ``tensors``, None kept."""
    return [None if t is None else t.detach().double().requires_grad_() for t in tensors]


@pytest.fixture(autouse=True)
def _no_tf32():
    with E.full_float32():
        yield


@pytest.fixture
def gen(rng):
    """torch's generator for the test, seeded from its ``rng`` (the run's seed and its id)."""
    return torch.Generator().manual_seed(int(rng.integers(2**63)))


# -- each Function against PyTorch ---------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_linear(device, gen, dtype, bias):
    rows, k, n = 4 * 24, 80, 72
    x = rand(4, 24, k, dtype=dtype, gen=gen).requires_grad_()
    w = rand(n, k, dtype=dtype, scale=k ** -0.5, gen=gen).requires_grad_()
    b = rand(n, dtype=dtype, gen=gen).requires_grad_() if bias else None
    y = E.linear(x, w, b)
    dy = rand(*y.shape, dtype=dtype, gen=gen)
    y.backward(dy)
    x64, w64, b64 = ref64(x, w, b)
    y64 = F.linear(x64, w64, b64)
    y64.backward(dy.double())
    check("y", y, y64, tol(dtype, k))
    check("dx", x.grad, x64.grad, tol(dtype, n))
    check("dw", w.grad, w64.grad, tol(dtype, rows))
    if bias:
        check("db", b.grad, b64.grad, tol(dtype, rows))
    assert y.dtype == dtype and y.shape == (4, 24, n)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_mlp_gelu_epilogues(device, gen, dtype, bias):
    """gelu_aux_bias / dgelu_bgrad with biases, gelu_aux / dgelu without."""
    rows, d, hidden = 2 * 40, 48, 100      # hidden not a multiple of 8: the aux is padded
    x = rand(2, 40, d, dtype=dtype, gen=gen).requires_grad_()
    w1 = rand(hidden, d, dtype=dtype, scale=d ** -0.5, gen=gen).requires_grad_()
    w2 = rand(d, hidden, dtype=dtype, scale=hidden ** -0.5, gen=gen).requires_grad_()
    b1 = b2 = None
    if bias:
        b1 = rand(hidden, dtype=dtype, scale=0.5, gen=gen).requires_grad_()
        b2 = rand(d, dtype=dtype, scale=0.5, gen=gen).requires_grad_()
    y = E.mlp(x, w1, b1, w2, b2)
    dy = rand(*y.shape, dtype=dtype, gen=gen)
    y.backward(dy)
    ins = ref64(x, w1, b1, w2, b2)
    x64, w164, b164, w264, b264 = ins
    y64 = F.linear(F.gelu(F.linear(x64, w164, b164), approximate="tanh"), w264, b264)
    y64.backward(dy.double())
    fwd = GELU_FP32["forward"] if dtype == torch.float32 else tol(dtype, hidden)
    bwd = GELU_FP32["backward"] if dtype == torch.float32 else tol(dtype, rows)
    check("y", y, y64, fwd)
    for name, got, want in zip(("dx", "dw1", "db1", "dw2", "db2"),
                               (x, w1, b1, w2, b2), ins):
        if got is not None:
            check(name, got.grad, want.grad, bwd)


@pytest.mark.parametrize("wdtype", ["like_x", "float32"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_layer_norm(device, gen, dtype, wdtype):
    wd = dtype if wdtype == "like_x" else torch.float32
    c = 96
    x = (rand(3, 20, c, dtype=torch.float32, gen=gen) * 2 + 0.5).to(dtype).requires_grad_()
    w = (1 + 0.2 * rand(c, gen=gen)).to(wd).requires_grad_()
    b = (0.2 * rand(c, gen=gen)).to(wd).requires_grad_()
    y = E.layer_norm(x, w, b, eps=1e-5)
    dy = rand(*y.shape, dtype=dtype, gen=gen)
    y.backward(dy)
    x64, w64, b64 = ref64(x, w, b)
    y64 = F.layer_norm(x64, (c,), w64, b64, eps=1e-5)
    y64.backward(dy.double())
    # Everything derived from half data carries the data's bound (cuDNN rounds its half
    # intermediates), the parameter gradients sum over the 60 rows.
    check("y", y, y64, tol(dtype, c))
    check("dx", x.grad, x64.grad, tol(dtype, c))
    check("dw", w.grad, w64.grad, max(tol(dtype), tol(wd, 60)))
    check("db", b.grad, b64.grad, max(tol(dtype), tol(wd, 60)))
    assert w.grad.dtype == wd and x.grad.dtype == dtype


def _qkv(gen, dtype, case, b=2, h=4, s=64, d=32):
    """``(leaves, (q, k, v))``: separate ``[b, h, s, d]`` tensors (``h / 2`` key/value heads
    for ``"gqa"``), or for ``"packed"`` views into one ``[b, s, 3, h, d]`` projection, as a
    transformer has them."""
    if case == "packed":
        qkv = rand(b, s, 3, h, d, dtype=dtype, gen=gen).requires_grad_()
        return [qkv], tuple(t.transpose(1, 2) for t in qkv.unbind(2))
    h_kv = h // 2 if case == "gqa" else h
    q, k, v = (rand(b, n, s, d, dtype=dtype, gen=gen).requires_grad_() for n in (h, h_kv, h_kv))
    return [q, k, v], (q, k, v)


@pytest.mark.parametrize("case", ["causal", "full", "gqa", "packed"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_attention(device, gen, dtype, case):
    s = 64
    leaves, (q, k, v) = _qkv(gen, dtype, case, s=s)
    causal = case != "full"
    o = E.attention(q, k, v, causal=causal)
    do = rand(*o.shape, dtype=dtype, gen=gen)
    o.backward(do)
    refs = ref64(*leaves)
    if case == "packed":
        q64, k64, v64 = (t.transpose(1, 2) for t in refs[0].unbind(2))
    else:
        q64, k64, v64 = refs
    o64 = F.scaled_dot_product_attention(q64, k64, v64, is_causal=causal,
                                         enable_gqa=case == "gqa")
    o64.backward(do.double())
    check("o", o, o64, tol(dtype, s))
    for t, r in zip(leaves, refs):
        check("grad", t.grad, r.grad, tol(dtype, s))
    if case == "packed":
        # o is laid out like q ([b, s, h, d] in memory): its [b, s, h * d] view is free.
        assert o.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("case", ["nchw", "channels_last", "strided_groups"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
def test_conv2d(device, gen, dtype, case):
    n, c, hw, k = 4, 6, 12, 8
    conv = dict(stride=1, padding=1, groups=1)
    if case == "strided_groups":
        conv = dict(stride=2, padding=1, groups=2)
    x = rand(n, c, hw, hw, dtype=dtype, gen=gen)
    w = rand(k, c // conv["groups"], 3, 3, dtype=dtype, scale=0.3, gen=gen)
    if case == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
        w = w.contiguous(memory_format=torch.channels_last)
    b = rand(k, dtype=dtype, gen=gen)
    for t in (x, w, b):
        t.requires_grad_()
    y = E.conv2d(x, w, b, **conv)
    dy = rand(*y.shape, dtype=dtype, gen=gen)
    y.backward(dy)
    x64, w64, b64 = ref64(x, w, b)
    y64 = F.conv2d(x64, w64, b64, **conv)
    y64.backward(dy.double())
    positions = y.shape[0] * y.shape[2] * y.shape[3]
    window = w.shape[1] * 9
    check("y", y, y64, tol(dtype, window))
    check("dx", x.grad, x64.grad, tol(dtype, k * 9))
    check("dw", w.grad, w64.grad, tol(dtype, positions))
    check("db", b.grad, b64.grad, tol(dtype, positions))
    if case == "channels_last":
        assert y.is_contiguous(memory_format=torch.channels_last)
        assert x.grad.is_contiguous(memory_format=torch.channels_last)


# -- errors come from cudalibs' own checks ----------------------------------------------------
def test_shape_and_dtype_errors(device, gen):
    with pytest.raises(ValueError, match="inner dimensions") as info:
        E.linear(rand(4, 5, gen=gen), rand(3, 6, gen=gen))
    assert info.value.cudalibs_op == "Linear forward"
    with pytest.raises(ValueError, match="float32 but b is float16"):
        E.linear(rand(4, 5, gen=gen), rand(3, 5, dtype=torch.float16, gen=gen))
    q = rand(1, 2, 16, 32, gen=gen)
    with pytest.raises(TypeError, match="fused attention takes"):
        E.attention(q, q, q)
    h = rand(1, 2, 16, 12, dtype=torch.bfloat16, gen=gen)
    with pytest.raises(ValueError, match="multiples of 8"):
        E.attention(h, h, h)
    with pytest.raises(ValueError, match="weight has shape"):
        E.layer_norm(rand(4, 8, gen=gen), torch.ones(6, device="cuda"))
    with pytest.raises(ValueError, match="channels"):
        E.conv2d(rand(1, 3, 8, 8, gen=gen), rand(4, 5, 3, 3, gen=gen))


# -- threads and streams -----------------------------------------------------------------------
def _our_nodes(root):
    """The backward nodes of this file's Functions reachable from ``root``."""
    out, todo, seen = [], [root], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name().endswith("FunctionBackward"):
            out.append(node)
        todo.extend(n for n, _ in node.next_functions)
    return out


def _block_step(model, x, t, record=None):
    """Forward, loss and backward of ``model``; with ``record``, a pre-hook on each of this
    file's backward nodes appends ``(name, thread, torch's current stream)``."""
    model.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), t)
    if record is not None:
        for node in _our_nodes(loss.grad_fn):
            def hook(grads, node=node):
                record.append((node.name(), threading.get_ident(),
                               torch.cuda.current_stream().cuda_stream))
            node.register_prehook(hook)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def test_functions_on_autograd_thread_and_side_stream(device):
    ours, ref = E.build_pair("transformer", seed=3)
    (x, t), = E.make_batches("transformer", 1, seed=4)
    base_loss, base_grads = _block_step(ours, x, t)     # main thread, default stream
    ref_loss, ref_grads = _block_step(ref, x, t)
    side = torch.cuda.Stream()
    record, result, errors = [], {}, []

    def worker():
        try:
            side.wait_stream(torch.cuda.default_stream())
            with torch.cuda.stream(side):
                result["caller"] = threading.get_ident()
                result["out"] = _block_step(ours, x, t, record)
            side.synchronize()
        except BaseException as exc:     # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)

    th = threading.Thread(target=worker, name="torch-ops-worker")
    th.start()
    th.join(120)
    assert not th.is_alive(), "the worker thread hung"
    if errors:
        raise errors[0]
    names = {name for name, _, _ in record}
    assert names == {"LayerNormFunctionBackward", "LinearFunctionBackward",
                     "AttentionFunctionBackward", "MLPFunctionBackward"}, names
    # Autograd ran every backward on its own device thread, on the forward's stream.
    assert all(th_id != result["caller"] for _, th_id, _ in record), record
    assert all(st == side.cuda_stream for _, _, st in record), (record, side.cuda_stream)
    loss, grads = result["out"]
    # The same kernels as on the default stream in the main thread (see GRAPH_RTOL).
    assert rel(loss, base_loss) <= GRAPH_RTOL
    for name, g in grads.items():
        check(f"{name} (side stream against default stream)", g, base_grads[name],
              GRAPH_UPDATE_RTOL["transformer"])
        # Against PyTorch: the gradients pass through bfloat16 attention.
        check(f"{name} (against torch)", g, ref_grads[name], tol(torch.bfloat16))


# -- training against pure torch, eager and graph-replayed ------------------------------------
@pytest.mark.parametrize("kind", ["transformer", "conv"])
def test_model_matches_torch(device, kind):
    r = E.run_model(kind, STEPS, every=STEPS + 1, out=lambda line: None)
    tolr = E.TOLERANCES[kind]
    assert r["loss"] <= tolr["loss"], (r["losses"], r["ref_losses"])
    assert r["update"] <= tolr["update"], (r["worst"], r["update"])
    assert r["weight"] <= tolr["update"]
    assert r["ok"]
    # The steps did train: the loss moved.
    assert r["losses"][-1] != r["losses"][0]


@pytest.mark.parametrize("kind", ["transformer", "conv"])
def test_graph_replay_matches_eager(device, kind):
    batches = E.make_batches(kind, STEPS, seed=11)
    eager, ref = E.build_pair(kind, seed=10)
    start = {n: p.detach().clone() for n, p in ref.named_parameters()}
    graphed, _ = E.build_pair(kind, seed=10)
    losses = E.train_eager(eager, batches, E.loss_fn(kind))
    replayed = E.train_graph(graphed, batches, E.loss_fn(kind), warmup=3)
    ref_losses = E.train_eager(ref, batches, E.loss_fn(kind))
    # The first step runs before any update: the same kernels on the same data, bit for bit.
    assert replayed[0] == losses[0]
    r = E.compare(graphed, eager, start, replayed, losses)
    assert r["loss"] <= GRAPH_RTOL, (replayed, losses)
    assert r["update"] <= GRAPH_UPDATE_RTOL[kind], r
    # And the replayed run against pure torch, within the model's tolerance.
    r = E.compare(graphed, ref, start, replayed, ref_losses)
    assert r["loss"] <= E.TOLERANCES[kind]["loss"] and r["update"] <= \
        E.TOLERANCES[kind]["update"], r


#: Run in a process of its own: a capture that fails leaves PyTorch's CUDA random-number
#: generator refusing calls for the rest of the process.
_UNWARMED = r"""
import importlib.util, json, sys
import torch
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("torch_ops", sys.argv[2])
E = importlib.util.module_from_spec(spec)
sys.modules["torch_ops"] = E
spec.loader.exec_module(E)
model, _ = E.build_pair("transformer", seed=5)
batches = E.make_batches("transformer", 4, seed=6)
out = {"refused": False}
try:
    E.train_graph(model, batches, E.loss_fn("transformer"), warmup=2,
                  capture_stream=torch.cuda.Stream())
except E.CaptureRefused as exc:
    cause = exc.__cause__
    out = {"refused": True, "op": exc.op, "message": str(exc),
           "reason": [c.__name__ for c in type(exc.reason).__mro__],
           "torch_error": None if cause is exc.reason else f"{type(cause).__name__}: {cause}"}
torch.cuda.synchronize()
out["eager_after"] = E.train_eager(model, batches[:2], E.loss_fn("transformer"))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def unwarmed_capture():
    """What a capture on a stream cudalibs never ran on gives (see :data:`_UNWARMED`)."""
    import json
    import subprocess

    proc = subprocess.run([sys.executable, "-c", _UNWARMED, str(ROOT),
                           str(ROOT / "examples" / "torch_ops.py")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_capture_on_unwarmed_stream_is_refused(device, unwarmed_capture):
    """A capture on a stream cudalibs has never run on: its first call there needs a
    workspace, which cudalibs allocates synchronously.  The capture must stop with an error
    that names the operation and the reason, not succeed with a graph that was never ready;
    and the process goes on (the model still trains eagerly)."""
    r = unwarmed_capture
    assert r["refused"], r
    assert r["op"].endswith((" forward", " backward")), r
    assert "CudaLibsError" in r["reason"], r
    assert "capturing" in r["message"], r
    assert len(r["eager_after"]) == 2 and all(math.isfinite(v) for v in r["eager_after"])


def test_unwarmed_capture_refused_before_gpu_work(device, unwarmed_capture):
    """The library's own contract: a call that cannot be captured raises
    :class:`cudalibs.CaptureError` before any GPU work, so PyTorch's capture ends cleanly."""
    r = unwarmed_capture
    assert r["refused"] and "CaptureError" in r["reason"], r
    assert r["torch_error"] is None, r["torch_error"]


# -- the command line --------------------------------------------------------------------------
def test_main(device, capsys):
    assert E.main(["--steps", "4", "--every", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(": step " in line for line in out) == 4     # 2 models x steps 2 and 4
    assert sum(line.endswith(": match") for line in out) == 2, out
    assert E.main(["--steps", "5", "--graph", "--model", "conv", "--every", "5"]) == 0
    out = capsys.readouterr().out
    assert "CUDA graph replay" in out and out.rstrip().endswith(": match"), out


def test_main_without_gpu_and_help(monkeypatch, capsys):
    help_text = E.arg_parser().format_help()
    assert "(default: 10)" in help_text and "(default: both)" in help_text
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert E.main([]) == 2
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("torch_ops: no GPU"), out
