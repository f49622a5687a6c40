"""The transformer of examples/transformer_train.py, trained through cudalibs, against the same
model in PyTorch (same initial weights, same batches, the same precision choices: bfloat16
activations and weights, float32 layer norms and master weights, AdamW on the masters), and
its graph-replayed training step against the eager one.  torch appears only here, never in
the example (and only the comparison with it needs torch).  The ``--fp8`` mode (fp8 forward
GEMMs with delayed scaling) against the bfloat16 run from the same seed, eager and replayed.
The ``--moe`` mode (mixture-of-experts MLPs): one step's loss and every gradient against the
float64 numpy model of ``_transformer_ref`` (the dense model's too), eager against replayed
over 30 steps, the captured step replayed on batches that route differently against eager
steps from the same state, and training to the example's target (``-k moe`` selects them).
"""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl

from . import _transformer_ref as R
from ._sizes import gpu_settings

try:
    import torch
except ImportError:
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch (the reference) is not "
                                 "installed")

STEPS = 5
#: Relative agreement of each step's loss, and of each parameter (norm-wise), with PyTorch:
#: bfloat16 activations round differently in the two (cuDNN's and PyTorch's attention and
#: norm kernels, cuBLASLt's fused epilogues against PyTorch's separate GELU).
RTOL = 2e-2
#: Eager against graph-replayed steps: relative agreement of the losses.  They come out
#: bitwise equal in practice (the same kernels with the same arguments, the plans shared),
#: but that is not guaranteed: the token-embedding gradient is a float32 atomic scatter-add
#: whose order of additions, hence last bits, may change from run to run, eager or replayed
#: alike.  The first step's loss, computed before any update, must be bitwise equal.
GRAPH_RTOL = 1e-6
#: Each run's AdamW update (parameters after the steps minus before) against PyTorch's,
#: relative to the norm of PyTorch's: for each matrix (embeddings included, 4,096 elements or
#: more), each vector (biases and layer norms, 128 to 512 elements), and all parameters as one.
#: Where the bfloat16 gradients differ by rounding, AdamW's first step, ``lr * sign(g)`` per
#: element, moves the elements whose gradient is within that rounding of zero by ``lr`` in
#: opposite directions: their updates differ by ``2 lr`` of some ``5 lr``.  Simulated on the
#: CPU with two bfloat16 implementations (PyTorch's ops against float32 arithmetic rounded to
#: bfloat16 at cudalibs's points), seeds 0-8: matrices 3.0-3.7 % of their update, vectors up
#: to 7 %, all parameters 2.8-3.0 %.  The bounds leave 2-3 times that for the GPU kernels'
#: own roundings; an update 30 % off, in one tensor or in all, fails them.
UPDATE_RTOL = {"matrix": 0.10, "vector": 0.20, "all": 0.08}

FEW = gpu_settings(2)


E = R.load_example()
#: The default model without the learning-rate warm-up, so that five steps move every weight
#: matrix by about 6 % of its norm (three times the tolerance; the example's warm-up would
#: move it by 1.5 %), at a quarter of the example's peak rate: AdamW moves each element by
#: about ``lr`` whatever its gradient's size, so an element whose gradient is within rounding
#: of zero may move either way in the two runs, and small steps keep that inside the
#: tolerance (at ``lr=1e-3`` the worst tensor, a 128-element bias, differed by 1.5e-2).
CFG = replace(E.Config(), warmup=1, lr=5e-4)


def _cudalibs_run(seed, batches):
    model = E.build(CFG, seed)
    s = model.stream
    losses = []
    for i, (ids, tg) in enumerate(batches):
        model.set_lr(E.lr_at(CFG, i))
        loss = E.train_step(model, cl.to_device(ids, stream=s), cl.to_device(tg, stream=s))
        losses.append(float(loss.get(stream=s)))
    return model, np.array(losses)


def _layer_norm(x, w, b):
    # What cuDNN computes for bfloat16 data with float32 parameters: float32 throughout,
    # rounded once to bfloat16.
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    var = (xf - mu).pow(2).mean(-1, keepdim=True)
    return ((xf - mu) * torch.rsqrt(var + CFG.ln_eps) * w + b).to(torch.bfloat16)


def _torch_loss(w, ids, tg):
    F = torch.nn.functional
    b, s = ids.shape
    c, h, d = CFG.d_model, CFG.heads, CFG.head_dim
    t = b * s
    x = F.embedding(ids, w["tok_emb"]) + F.embedding(torch.arange(s, device=ids.device),
                                                     w["pos_emb"])[None]
    x = x.reshape(t, c)
    for i in range(CFG.layers):
        def p(n):
            return w[f"h{i}.{n}"]
        qkv = F.linear(_layer_norm(x, p("ln1.w"), p("ln1.b")), p("qkv.w"), p("qkv.b"))
        q, k, v = (z.transpose(1, 2) for z in qkv.view(b, s, 3, h, d).unbind(2))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(o.transpose(1, 2).reshape(t, c), p("proj.w"), p("proj.b"))
        hid = F.gelu(F.linear(_layer_norm(x, p("ln2.w"), p("ln2.b")), p("fc1.w"), p("fc1.b")),
                     approximate="tanh")    # cuBLASLt's GELU epilogue is the tanh form
        x = x + F.linear(hid, p("fc2.w"), p("fc2.b"))
    logits = F.linear(_layer_norm(x, w["lnf.w"], w["lnf.b"]), w["head.w"])
    return F.cross_entropy(logits.float(), tg.reshape(t), ignore_index=E.IGNORE_INDEX)


def _torch_run(seed, batches):
    dev = torch.device("cuda")
    names = list(E.param_shapes(CFG))
    masters = {k: torch.tensor(v, device=dev, requires_grad=True)
               for k, v in E.init_params(CFG, seed).items()}
    opt = torch.optim.AdamW(
        [{"params": [masters[k] for k in names if E.decays(k)],
          "weight_decay": CFG.weight_decay},
         {"params": [masters[k] for k in names if not E.decays(k)], "weight_decay": 0.0}],
        lr=CFG.lr, betas=CFG.betas, eps=CFG.eps)
    c = CFG.d_model
    losses = []
    for i, (ids, tg) in enumerate(batches):
        # The forward reads bfloat16 copies of the masters, the layer norms float32 ones.
        w = {k: (m.detach().clone() if E.is_layer_norm(k) else m.detach().to(torch.bfloat16))
             .requires_grad_() for k, m in masters.items()}
        loss = _torch_loss(w, torch.as_tensor(ids, device=dev).long(),
                           torch.as_tensor(tg, device=dev).long())
        loss.backward()
        losses.append(loss.item())
        for k, m in masters.items():
            m.grad = w[k].grad.float()
        for i_layer in range(CFG.layers):   # the key bias's exact gradient, as the example
            masters[f"h{i_layer}.qkv.b"].grad[c:2 * c] = 0
        for g in opt.param_groups:
            g["lr"] = float(np.float32(E.lr_at(CFG, i)))   # the example's lr is a float32
        opt.step()
    return {k: m.detach().cpu().numpy() for k, m in masters.items()}, np.array(losses)


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@needs_torch
@FEW
@given(seed=st.integers(0, 2**16))
def test_matches_torch(seed):
    batches = E.make_batches(CFG, STEPS, seed)
    model, losses = _cudalibs_run(seed, batches)
    ref_params, ref_losses = _torch_run(seed, batches)
    print("losses", losses, "torch", ref_losses)
    np.testing.assert_allclose(losses, ref_losses, rtol=RTOL)
    got = model.host_params()
    init = E.init_params(CFG, seed)
    worst = sorted(((_rel(got[k], ref_params[k]), k) for k in got), reverse=True)
    update = {k: got[k].astype(np.float64) - init[k] for k in got}
    ref_update = {k: ref_params[k].astype(np.float64) - init[k] for k in got}
    moved = sorted(((_rel(update[k], ref_update[k]), k) for k in got), reverse=True)
    everything = _rel(np.concatenate([update[k].ravel() for k in got]),
                      np.concatenate([ref_update[k].ravel() for k in got]))
    print("parameters, worst relative differences:", worst[:4])
    print("updates, worst relative differences:", moved[:4], "all parameters:", everything)
    bad = [(k, r) for r, k in worst if r > RTOL]
    assert not bad, f"parameters differ from PyTorch's after {STEPS} steps: {bad}"
    bad = [(k, r) for r, k in moved
           if r > UPDATE_RTOL["matrix" if got[k].ndim > 1 else "vector"]]
    assert not bad, f"the updates of {STEPS} steps differ from PyTorch's: {bad}"
    assert everything <= UPDATE_RTOL["all"], \
        f"the update of all parameters differs from PyTorch's by {everything:.3g}"
    # The updates moved the weights by several times the tolerance: the check above compares
    # them, not the initial weights.
    assert min(_rel(ref_params[k], init[k]) for k in got
               if E.decays(k) and not k.endswith("_emb")) > 2 * RTOL


@FEW
@given(seed=st.integers(0, 2**16))
def test_graph_replay_matches_eager(seed):
    steps = 8
    eager_model = E.build(CFG, seed)
    eager = E.train(eager_model, steps, graph=False, seed=seed, log=lambda _: None)
    graph_model = E.build(CFG, seed)
    graphed = E.train(graph_model, steps, graph=True, seed=seed, log=lambda _: None)
    le, lg = eager["losses"], graphed["losses"]
    print("eager", le.tolist(), "graph", lg.tolist(), "bitwise equal:",
          bool((le == lg).all()), "max rel", float(np.max(np.abs(le - lg) / le)))
    assert graphed["step_graph"].replays == steps - 1
    assert graphed["graph_nodes"] > 50
    assert le[0] == lg[0]
    np.testing.assert_allclose(lg, le, rtol=GRAPH_RTOL, atol=0)
    pe, pg = eager_model.host_params(), graph_model.host_params()
    worst = max(_rel(pg[k], pe[k]) for k in pe)
    print("parameters, worst relative difference", worst)
    assert worst <= 1e-5


def test_reaches_target_loss():
    model = E.build(E.Config(), 0)
    result = E.train(model, 400, graph=True, seed=0, log=print)
    tail = float(np.mean(result["losses"][-E.TARGET_WINDOW:]))
    assert tail < E.TARGET_LOSS, tail


def test_bad_batch_raises():
    model = E.build(CFG, 0)
    ids = cl.zeros((CFG.batch, CFG.seq + 2), np.int32, stream=model.stream)
    with pytest.raises(ValueError, match="ids must be int32"):
        E.train_step(model, ids, ids)


# -- fp8 forward GEMMs ------------------------------------------------------------------------
#: Steps of the fp8-against-bfloat16 runs (the default configuration: the first 60 steps of
#: the default 400-step run, 10 past the warm-up), and the window of their closing mean loss.
FP8_STEPS, FP8_TAIL = 60, 10
#: fp8 eager against fp8 graph-replayed: the first loss (one eager step in both) bitwise,
#: the first 10 losses relatively within FP8_GRAPH_RTOL (as for bfloat16 they come out equal
#: in practice; the atomic embedding scatter-add may change last bits, which fp8 rounding can
#: widen), the closing means within FP8_GRAPH_TAIL_RTOL.
FP8_GRAPH_RTOL, FP8_GRAPH_TAIL_RTOL = 1e-4, 1e-2


def _need_fp8():
    cc = tuple(cl.current_device().compute_capability)
    if cc < (8, 9):
        pytest.skip(f"fp8 GEMMs need compute capability >= 8.9 (this GPU: {cc[0]}.{cc[1]})")


def test_fp8_tracks_bf16_eager_and_graph():
    """``Config(fp8=True)`` trains like the bfloat16 model from the same seed: the mean loss
    of steps 51-60 within the example's ``--compare`` bound (:func:`fp8_agrees`), eager and
    with the whole step (scale update included) replayed as a CUDA graph; the eager and
    replayed fp8 runs agree; the scales end finite and derived from the amaxes."""
    _need_fp8()
    cfg = E.Config()
    runs = {}
    for fp8 in (False, True):
        for graph in (False, True):
            model = E.build(replace(cfg, fp8=fp8), 0)
            assert (model.fp8 is None) != fp8
            result = E.train(model, FP8_STEPS, graph=graph, seed=0, log=lambda _: None)
            if graph:
                assert result["step_graph"].replays == FP8_STEPS - 1
            runs[fp8, graph] = (model, result["losses"])
    tails = {k: float(np.mean(v[1][-FP8_TAIL:])) for k, v in runs.items()}
    for (fp8, graph), (_, losses) in runs.items():
        print("fp8" if fp8 else "bf16", "graph" if graph else "eager", "losses",
              np.round(losses[::5], 4).tolist(), f"tail mean {tails[fp8, graph]:.4f}")
        assert np.isfinite(losses).all()
    # The first loss is that of the initial weights: fp8 rounding moves it a little only.
    assert runs[True, False][1][0] == pytest.approx(runs[False, False][1][0], rel=1e-2)
    for graph in (False, True):
        fp8_tail, bf16_tail = tails[True, graph], tails[False, graph]
        assert E.fp8_agrees(fp8_tail, bf16_tail), (
            f"{'graph' if graph else 'eager'}: fp8 tail {fp8_tail:.4f} vs bfloat16 "
            f"{bf16_tail:.4f}, allowed {E.FP8_RTOL} x bfloat16's + {E.FP8_ATOL}")
    le, lg = runs[True, False][1], runs[True, True][1]
    print("fp8 eager vs graph: bitwise equal", bool((le == lg).all()), "max rel",
          float(np.max(np.abs(le - lg) / le)))
    assert le[0] == lg[0]
    np.testing.assert_allclose(lg[:10], le[:10], rtol=FP8_GRAPH_RTOL, atol=0)
    assert tails[True, True] == pytest.approx(tails[True, False], rel=FP8_GRAPH_TAIL_RTOL)
    # The delayed scaling ran: every weight's scale is 448 / the largest amax of the last
    # 16 steps, which is near the weight's current max |w| (AdamW moves each element by
    # about lr per step).
    for graph in (False, True):
        model = runs[True, graph][0]
        scales = model.fp8.host_scales(model.stream)
        params = model.host_params()
        assert all(np.isfinite(v) and v > 0 for v in scales.values()), scales
        for name, scale in scales.items():
            if name.endswith(".w"):
                ref = E.E4M3_MAX / float(np.abs(params[name]).max())
                assert 0.5 * ref <= scale <= 1.1 * ref, (name, scale, ref)
            else:
                assert scale != 1.0, name   # derived from an amax, not the initial 1


def test_fp8_refused_for_data_parallel():
    with pytest.raises(ValueError, match="fp8 is not implemented for data-parallel"):
        E.dp_replica(None, replace(CFG, fp8=True))


# -- mixture of experts -----------------------------------------------------------------------
#: The models of the one-step reference tests: 64 tokens, two blocks of width 32; the MoE one
#: with 8 experts of width 96 / topk (topk 1, 2 or 3).
TINY = replace(E.Config(), vocab=16, seq=16, d_model=32, heads=2, layers=2, ffn=96, batch=4,
               warmup=1)
#: The routers' initial weights times this: logits spread over about one unit (std 1.1), so
#: that the routing weights are far from uniform and their gradients matter.
ROUTER_SCALE = 10.0
#: The device's top-k choice must be the reference's for every token whose k-th and (k+1)-th
#: router logits are further apart than this.  The bfloat16 emulation (below) puts the
#: logits within 0.022 of float64's; closer calls may go either way (it broke 21 of 9,216
#: token-block ties the other way, all within 0.1), and the reference then follows the
#: device's routing (``R.step(routing=...)``).
ROUTE_MARGIN = 0.1
#: One step against the float64 reference: the loss, the load-balancing losses, and every
#: gradient norm-wise (relative to the reference's norm), matrices and vectors (biases and
#: layer norms, 32 to 96 elements).  Basis: the reference with bfloat16 rounding where the
#: example rounds (``R.bf16``) against float64, following the emulation's routing, TINY with
#: seeds 100-123, dense and topk 1, 2, 3: loss within 8.0e-5, aux 4.8e-4, matrices' gradients
#: 0.0077 (the experts' 0.0076), vectors' 0.0121 -- the bounds leave 2.5-3 times that for
#: what the emulation leaves out (cuDNN's attention rounds its probabilities to bfloat16,
#: cuBLASLt's GELU epilogue works on the unrounded product); a wrong expert, weight or
#: routing gradient is off by O(1).
STEP_LOSS_RTOL, STEP_AUX_RTOL = 1e-3, 5e-3
STEP_GRAD_RTOL = {"matrix": 2e-2, "vector": 4e-2}
#: The default model with ``--moe`` (8 experts of width 256, top 2).
MOE_CFG = replace(E.Config(), moe=True)
#: Eager against graph-replayed MoE training: steps, and the relative agreement of the first
#: 10 losses after the first (which must be bitwise equal) and of all of them.  As for the
#: dense model they come out bitwise equal in practice -- the MoE kernels are deterministic
#: --, but the token-embedding gradient's atomic scatter-add may change last bits, and then a
#: token whose router logits are within those bits of a tie may go to another expert: a
#: discrete change of one token's MLP output among 2,048, some 1e-4 of the mean loss, which
#: later steps may carry on and widen.
MOE_GRAPH_STEPS, MOE_GRAPH_RTOL = 30, (1e-3, 1e-2)

MOE_FEW = gpu_settings(4)


def _scaled_router(cfg, seed):
    host = E.init_params(cfg, seed)
    return {k: v * np.float32(ROUTER_SCALE) if k.endswith("router.w") else v
            for k, v in host.items()}


def _device_step(cfg, host, ids, targets):
    """One forward and backward (no update) of the example's model from weights ``host``:
    ``(loss, grads, routing, counts, aux)``; the last three per MoE block (the experts of
    each token, rows per expert, the load-balancing loss; None for the dense model).  The
    gradients and statistics are poisoned with NaN first, so that one not written shows."""
    model = E.Transformer(cfg, host)
    s = model.stream
    for g in model.grads.values():
        g.fill(np.nan, stream=s)
    if model.moe is not None:
        model.moe.counts.fill(np.nan, stream=s)
        model.moe.aux.fill(np.nan, stream=s)
    d_ids, d_tg = cl.to_device(ids, stream=s), cl.to_device(targets, stream=s)
    with s:
        ce, logits, saved = E.forward(model, d_ids, d_tg)
        E.backward(model, d_ids, d_tg, ce, logits, saved)
    loss = float(ce.loss.get(stream=s).reshape(-1)[0])
    grads = {k: v.get(stream=s).astype(np.float64) for k, v in model.grads.items()}
    if model.moe is None:
        return loss, grads, None, None, None
    routing = [layer[-1][2].get(stream=s) for layer in saved[0]]
    return (loss, grads, routing, model.moe.counts.get(stream=s),
            model.moe.aux.get(stream=s))


def _check_one_step(cfg, seed):
    host = _scaled_router(cfg, seed)
    ids, tg = E.make_batch(np.random.default_rng(seed), cfg)
    loss, grads, routing, counts, aux = _device_step(cfg, host, ids, tg)
    ref = R.step(cfg, R.read_weights(host), ids, tg, routing=routing)
    print("loss", loss, "reference", ref.loss)
    if cfg.moe:
        for i, (got, logits) in enumerate(zip(routing, ref.logits)):
            assert got.shape == (cfg.tokens, cfg.topk) and got.dtype == np.int32
            own, margins = R.top_k(logits, cfg.topk)
            same = (np.sort(got, axis=1) == np.sort(own, axis=1)).all(axis=1)
            clear = margins > ROUTE_MARGIN
            print(f"block {i}: {int((~clear).sum())} near ties, {int((~same).sum())} routed "
                  f"otherwise; rows per expert {counts[i].tolist()}, aux {aux[i]:.5f}")
            assert same[clear].all(), (
                f"block {i}: tokens {np.flatnonzero(clear & ~same).tolist()} routed to "
                f"{got[clear & ~same].tolist()}, the reference's top-{cfg.topk} is "
                f"{own[clear & ~same].tolist()}")
        np.testing.assert_array_equal(counts, np.stack(ref.counts))
        np.testing.assert_allclose(aux, ref.aux, rtol=STEP_AUX_RTOL)
    assert loss == pytest.approx(ref.loss, rel=STEP_LOSS_RTOL)
    assert set(grads) == set(ref.grads) == set(E.param_shapes(cfg))
    worst = sorted(((_rel(grads[k], ref.grads[k]), k) for k in grads), reverse=True)
    print("gradients, worst relative differences:", worst[:5])
    bad = [(k, r) for r, k in worst
           if not r <= STEP_GRAD_RTOL["matrix" if grads[k].ndim > 1 else "vector"]]
    assert not bad, f"gradients differ from the float64 reference's: {bad}"
    c = cfg.d_model
    for i in range(cfg.layers):
        assert (grads[f"h{i}.qkv.b"][c:2 * c] == 0).all()


@MOE_FEW
@given(seed=st.integers(0, 2**16), topk=st.sampled_from([1, 2, 3]))
def test_moe_step_matches_numpy_reference(seed, topk):
    """The MoE model's loss, load-balancing losses, routing and every gradient of one step
    against the float64 model (top-1 unrenormalised, top-2 and top-3 renormalised)."""
    _check_one_step(replace(TINY, moe=True, experts=8, topk=topk), seed)


@FEW
@given(seed=st.integers(0, 2**16))
def test_dense_step_matches_numpy_reference(seed):
    """The same reference for the dense model: what the MoE test adds is the MoE MLP."""
    _check_one_step(TINY, seed)


def test_moe_graph_matches_eager():
    """30 steps of the default MoE model, eager and with the whole step replayed as a CUDA
    graph (routing, grouped GEMMs and load-balancing loss included): the same losses, and
    the routing statistics written by every replay."""
    runs = {}
    for graph in (False, True):
        model = E.build(MOE_CFG, 0)
        assert model.moe is not None and len(model.groups) == 2
        runs[graph] = model, E.train(model, MOE_GRAPH_STEPS, graph=graph, seed=0, log=print)
    le, lg = runs[False][1]["losses"], runs[True][1]["losses"]
    print("eager", np.round(le, 5).tolist(), "graph", np.round(lg, 5).tolist(),
          "bitwise equal:", bool((le == lg).all()), "max rel",
          float(np.max(np.abs(le - lg) / le)))
    assert runs[True][1]["step_graph"].replays == MOE_GRAPH_STEPS - 1
    assert np.isfinite(le).all() and np.isfinite(lg).all()
    assert le[0] == lg[0]
    np.testing.assert_allclose(lg[:10], le[:10], rtol=MOE_GRAPH_RTOL[0], atol=0)
    np.testing.assert_allclose(lg, le, rtol=MOE_GRAPH_RTOL[1], atol=0)
    routed = MOE_CFG.tokens * MOE_CFG.topk
    for graph, (model, _) in runs.items():
        counts = model.moe.counts.get(stream=model.stream)
        aux = model.moe.aux.get(stream=model.stream)
        print("graph" if graph else "eager", "rows per expert", counts.tolist(), "aux",
              aux.tolist())
        assert (counts.sum(axis=1) == routed).all()
        # Switch's loss is its coefficient for balanced routing, E times that when every
        # token goes to one expert.
        assert ((aux >= MOE_CFG.moe_aux / 2) & (aux <= MOE_CFG.moe_aux * 8)).all()


def test_moe_replay_routes_each_batch():
    """The captured step replayed on batches that route differently gives what an eager
    step from the same state gives: the same loss, rows per expert and load-balancing loss
    (bitwise: the forward is deterministic), gradients and updated weights.  The batches are
    replayed in the opposite order to the eager steps, so that nothing of one batch's routing
    can carry over unseen."""
    model = E.build(MOE_CFG, 0)
    s = model.stream
    n = 4
    batches = [(cl.to_device(i, stream=s), cl.to_device(t, stream=s))
               for i, t in E.make_batches(MOE_CFG, n + 1, seed=7)]
    # The warm-up, an eager step on batch 0, moves the weights off their initial values.
    step = cl.StepGraph(lambda a, b: E.train_step(model, a, b), *batches[0], stream=s)
    state = model.state()
    snapshot = [cl.empty_like(a, stream=s).copy_(a, stream=s) for a in state]

    def from_snapshot(run):
        for a, b in zip(state, snapshot):
            a.copy_(b, stream=s)
        loss = run()
        return {"loss": loss.get(stream=s).reshape(-1)[0],
                "counts": model.moe.counts.get(stream=s),
                "aux": model.moe.aux.get(stream=s),
                "grads": {k: g.get(stream=s).astype(np.float64)
                          for k, g in model.grads.items()},
                "params": model.host_params()}

    order = list(range(1, n + 1))
    eager = {j: from_snapshot(lambda: E.train_step(model, *batches[j])) for j in order}
    replayed = {j: from_snapshot(lambda: step(*batches[j])) for j in reversed(order)}
    assert step.replays == n
    assert len({eager[j]["counts"].tobytes() for j in order}) == n, \
        "the batches should route differently"
    for j in order:
        e, r = eager[j], replayed[j]
        print(f"batch {j}: loss {e['loss']:.5f} rows per expert {e['counts'].tolist()}")
        assert r["loss"] == e["loss"], (j, r["loss"], e["loss"])
        np.testing.assert_array_equal(r["counts"], e["counts"])
        np.testing.assert_array_equal(r["aux"], e["aux"])
        worst = max((_rel(r["grads"][k], e["grads"][k]), k) for k in e["grads"])
        moved = max((_rel(r["params"][k], e["params"][k]), k) for k in e["params"])
        print(f"batch {j}: gradients, worst relative difference {worst}; weights {moved}")
        assert worst[0] <= 1e-4 and moved[0] <= 1e-5


def test_moe_reaches_target_loss():
    """The default MoE model trained as ``--moe --graph`` reaches the example's target, with
    balanced routing at the end: every expert within half to one and a half times its fair
    share of rows, the load-balancing loss near its minimum (its coefficient per block).
    Basis: the bfloat16 emulation (``python -m tests.gpu._transformer_ref``, seed 0): mean
    loss of the last 20 steps 0.00093, 460 to 590 rows per expert (fair share 512), the two
    blocks' load-balancing losses 0.0201 together."""
    model = E.build(MOE_CFG, 0)
    result = E.train(model, 400, graph=True, seed=0, log=print)
    tail = float(np.mean(result["losses"][-E.TARGET_WINDOW:]))
    assert tail < E.TARGET_LOSS, tail
    fewest, most, aux = model.moe.summary(model.stream)
    fair = MOE_CFG.tokens * MOE_CFG.topk / MOE_CFG.experts
    assert 0.5 * fair <= fewest and most <= 1.5 * fair, (fewest, most, fair)
    assert aux <= 1.25 * MOE_CFG.moe_aux * MOE_CFG.layers, aux


def test_moe_main_compares_with_dense(capsys):
    """``--moe --compare --graph``: the command line trains both models, prints the routing
    statistics at its progress lines, and the two agree (exit status 0)."""
    rc = E.main(["--moe", "--compare", "--graph", "--every", "100"])
    out = capsys.readouterr().out
    print(out)
    assert "tokens per expert min" in out and "MoE MLPs of 8 experts" in out
    assert rc == 0 and "): agree" in out
