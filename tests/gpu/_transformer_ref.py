"""The model of examples/transformer_train.py in numpy: forward, loss and every parameter's
gradient, dense or mixture-of-experts, in float64 -- the reference of its GPU tests.

:func:`step` computes one training step's loss and gradients from the weights the example's
forward reads (:func:`read_weights`: the bfloat16 copies, the layer norms' float32 masters).
Its ``rnd`` argument rounds at the points where the example rounds to bfloat16 (every
activation and activation gradient it writes in bfloat16): with :func:`bf16` it emulates the
example's precision on the CPU, which is how the GPU tests' tolerances were derived; the
default keeps float64 throughout.  Each operation is written from its definition (the
attention, layer-norm and cross-entropy references of :mod:`cudalibs.testing.ref`), the
backward pass by hand, so it shares no code with the example beyond the parameter names.

Run as a module it trains both models on the CPU, bfloat16 emulated, and prints their loss
curves (the basis of the MoE tests' targets and of the example's ``--moe --compare`` bound)::

    python -m tests.gpu._transformer_ref [--steps 400] [--seed 0]
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

from cudalibs import dtypes
from cudalibs.testing import ref

#: The target label the loss does not count (the example's ``IGNORE_INDEX``).
IGNORE_INDEX = -100
_C = math.sqrt(2.0 / math.pi)
_A = 0.044715


def load_example():
    """examples/transformer_train.py as the module ``transformer_train`` (the tests load it
    by path: examples/ is no package)."""
    path = Path(__file__).resolve().parents[2] / "examples" / "transformer_train.py"
    spec = importlib.util.spec_from_file_location("transformer_train", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod        # dataclasses look their module up while it loads
    spec.loader.exec_module(mod)
    return mod


def keep(x) -> np.ndarray:
    """No rounding: float64 throughout."""
    return np.asarray(x, np.float64)


def bf16(x) -> np.ndarray:
    """``x`` rounded to the nearest bfloat16 (ties to even), as float64."""
    return np.asarray(x, np.float32).astype(dtypes.bfloat16).astype(np.float64)


def read_weights(params: dict) -> dict:
    """What the example's forward reads of float32 master weights ``params``: bfloat16
    copies of every parameter but the layer norms' (float32), as float64 arrays."""
    return {k: keep(np.float32(v)) if (".ln" in k or k.startswith("lnf")) else bf16(v)
            for k, v in params.items()}


def gelu(v):
    """GELU, tanh form (the example's), and its derivative."""
    t = np.tanh(_C * (v + _A * v ** 3))
    return 0.5 * v * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * _C * (
        1.0 + 3.0 * _A * v * v)


class Step(NamedTuple):
    """One step of :func:`step`.

    Attributes
    ----------
    loss : float
        The mean cross-entropy over the counted targets (what ``train_step`` returns).
    grads : dict
        Every parameter's gradient (float64), of the loss plus the load-balancing losses.
    aux : list of float
        Per layer, the MoE load-balancing loss (empty for the dense model).
    counts : list of numpy.ndarray
        Per layer, the rows routed to each expert (of ``tokens * topk``).
    topk : list of numpy.ndarray
        Per layer, the experts of each token ``(tokens, topk)``, best first.
    gaps : list of float
        Per layer, the smallest margin between a token's ``topk``-th and next router logit:
        the routing of a computation whose logits differ by less than half of it is the same.
    logits : list of numpy.ndarray
        Per layer, the router logits ``(tokens, experts)``.
    """

    loss: float
    grads: dict
    aux: list
    counts: list
    topk: list
    gaps: list
    logits: list


def _heads(x, b, s, h, d):
    return x.reshape(b, s, h, d).transpose(0, 2, 1, 3)


def _unheads(x):
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b * s, h * d)


def top_k(logits, k: int):
    """``(ids, margins)``: each row's k largest entries, best first (ties to the lower
    index), and the margin between its k-th and (k+1)-th (inf when k is every column)."""
    ids = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    srt = -np.sort(-logits, axis=1)
    margins = srt[:, k - 1] - srt[:, k] if k < logits.shape[1] else np.full(len(ids), np.inf)
    return ids, margins


def _route(cfg, logits, ids=None):
    """``(weights, ids, probs, gap)`` of top-k softmax routing: the softmax over all experts,
    the k largest (or the experts ``ids`` given), renormalised to sum 1 for k > 1 (for k = 1
    the probability itself, as the example); ``gap`` the smallest margin of :func:`top_k`."""
    k = cfg.topk
    m = logits.max(axis=1, keepdims=True)
    e = np.exp(logits - m)
    probs = e / e.sum(axis=1, keepdims=True)
    own, margins = top_k(logits, k)
    ids = own if ids is None else np.asarray(ids, np.int64).reshape(own.shape)
    gap = float(margins.min())
    w = np.take_along_axis(probs, ids, axis=1)
    if k > 1:
        w = w / w.sum(axis=1, keepdims=True)
    return w, ids, probs, gap


def _route_backward(cfg, probs, ids, w, dw):
    """The router logits' gradient of the routing weights' gradient ``dw``."""
    dl = np.zeros_like(probs)
    if cfg.topk > 1:    # w = softmax of the selected logits
        np.put_along_axis(dl, ids, w * (dw - (w * dw).sum(axis=1, keepdims=True)), axis=1)
        return dl
    dp = np.zeros_like(probs)
    np.put_along_axis(dp, ids, dw, axis=1)
    return probs * (dp - (probs * dp).sum(axis=1, keepdims=True))


def _moe_forward(cfg, w, i, y2, rnd, ids):
    t = y2.shape[0]
    n_e, k = cfg.experts, cfg.topk
    logits = y2 @ w[f"h{i}.router.w"].T
    weights, ids, probs, gap = _route(cfg, logits, ids)
    expert = ids.reshape(-1)                 # row t * k + j: token t's j-th expert
    token = np.arange(t * k) // k
    w1, w2 = w[f"h{i}.experts.fc1.w"], w[f"h{i}.experts.fc2.w"]
    xs = y2[token]
    pre = np.zeros((t * k, w1.shape[2]))
    ys = np.zeros((t * k, y2.shape[1]))
    for e in range(n_e):
        m = expert == e
        pre[m] = rnd(xs[m] @ w1[e])
    act = rnd(gelu(pre)[0])
    for e in range(n_e):
        m = expert == e
        ys[m] = rnd(act[m] @ w2[e])
    y = rnd((weights.reshape(-1, 1) * ys).reshape(t, k, -1).sum(axis=1))
    counts = np.bincount(expert, minlength=n_e).astype(np.float64)
    g = cfg.moe_aux * n_e / (t * t * k) * counts      # d aux / d probs[t, e], every t
    aux = float(g @ probs.sum(axis=0))
    return y, (probs, weights, ids, expert, token, xs, pre, act, ys, g, logits, counts, gap,
               aux)


def _moe_backward(cfg, w, G, i, dy, y2, saved, rnd):
    probs, weights, ids, expert, token, xs, pre, act, ys, g = saved[:10]
    t, k = dy.shape[0], cfg.topk
    w1, w2 = w[f"h{i}.experts.fc1.w"], w[f"h{i}.experts.fc2.w"]
    dys = rnd(weights.reshape(-1, 1) * dy[token])
    dweights = (dy[token] * ys).sum(axis=1).reshape(t, k)
    gw1, gw2 = np.zeros_like(w1), np.zeros_like(w2)
    dact = np.zeros_like(act)
    dxs = np.zeros_like(xs)
    for e in range(cfg.experts):
        m = expert == e
        gw2[e] = act[m].T @ dys[m]
        dact[m] = rnd(dys[m] @ w2[e].T)
    dpre = rnd(dact * gelu(pre)[1])
    for e in range(cfg.experts):
        m = expert == e
        gw1[e] = xs[m].T @ dpre[m]
        dxs[m] = rnd(dpre[m] @ w1[e].T)
    dy2 = rnd(dxs.reshape(t, k, -1).sum(axis=1))
    dl = _route_backward(cfg, probs, ids, weights, dweights)
    if cfg.moe_aux:
        dl = dl + probs * (g - (probs * g).sum(axis=1, keepdims=True))
    dl = rnd(dl)
    G[f"h{i}.experts.fc1.w"], G[f"h{i}.experts.fc2.w"] = gw1, gw2
    G[f"h{i}.router.w"] = dl.T @ y2
    return rnd(dy2 + rnd(dl @ w[f"h{i}.router.w"]))


def _ln(x, w, b, eps, rnd):
    y, mu, r = ref.layer_norm(x, w, b, eps)
    return rnd(y), (x, w, mu, r)


def _ln_backward(dy, saved, eps, rnd):
    x, w, mu, r = saved
    dx, dw, db = ref.layer_norm_backward(dy, x, w, mu, r, eps)
    return rnd(dx), dw, db


def step(cfg, w: dict, ids, targets, rnd=keep, routing=None) -> Step:
    """Loss and gradients of one step of the example's model (``cfg`` a ``Config``) on
    weights ``w`` (:func:`read_weights`) and one batch, rounding with ``rnd`` where the
    example rounds to bfloat16.

    ``routing``, per MoE block the experts of each token ``(tokens, topk)``, replaces the
    reference's own top-k choice: a computation rounding differently may break a near tie
    of router logits the other way, and then only the same routing gives comparable
    gradients (its choice is checked against :attr:`Step.logits` where they are clear).
    """
    b, s = cfg.batch, cfg.seq
    c, h, d = cfg.d_model, cfg.heads, cfg.d_model // cfg.heads
    t = b * s
    ids = np.asarray(ids).reshape(b, s)
    x = rnd(w["tok_emb"][ids] + w["pos_emb"][None]).reshape(t, c)
    layers = []
    for i in range(cfg.layers):
        def p(n):
            return w[f"h{i}.{n}"]
        y1, ln1 = _ln(x, p("ln1.w"), p("ln1.b"), cfg.ln_eps, rnd)
        qkv = rnd(y1 @ p("qkv.w").T + p("qkv.b")).reshape(b, s, 3, h, d)
        q, k, v = (qkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3))
        o = rnd(_unheads(ref.sdpa_forward(q, k, v, causal=True)[0]))
        xm = rnd(x + rnd(o @ p("proj.w").T + p("proj.b")))
        y2, ln2 = _ln(xm, p("ln2.w"), p("ln2.b"), cfg.ln_eps, rnd)
        if cfg.moe:
            out, mlp = _moe_forward(cfg, w, i, y2, rnd, None if routing is None
                                    else routing[i])
        else:
            pre = rnd(y2 @ p("fc1.w").T + p("fc1.b"))
            act = rnd(gelu(pre)[0])
            out, mlp = rnd(act @ p("fc2.w").T + p("fc2.b")), (pre, act)
        layers.append((y1, ln1, q, k, v, o, y2, ln2, mlp))
        x = rnd(xm + out)
    yf, lnf = _ln(x, w["lnf.w"], w["lnf.b"], cfg.ln_eps, rnd)
    logits = rnd(yf @ w["head.w"].T)
    tg = np.asarray(targets).reshape(t)
    loss = ref.cross_entropy(logits, tg, ignore_index=IGNORE_INDEX)[0]
    G = {}
    dlogits = rnd(ref.cross_entropy_backward(logits, tg, ignore_index=IGNORE_INDEX))
    G["head.w"] = dlogits.T @ yf
    dx, G["lnf.w"], G["lnf.b"] = _ln_backward(rnd(dlogits @ w["head.w"]), lnf, cfg.ln_eps, rnd)
    for i in reversed(range(cfg.layers)):
        def p(n):
            return w[f"h{i}.{n}"]
        y1, ln1, q, k, v, o, y2, ln2, mlp = layers[i]
        if cfg.moe:
            dy2 = _moe_backward(cfg, w, G, i, dx, y2, mlp, rnd)
        else:
            pre, act = mlp
            G[f"h{i}.fc2.b"], G[f"h{i}.fc2.w"] = dx.sum(axis=0), dx.T @ act
            dpre = rnd((dx @ p("fc2.w")) * gelu(pre)[1])
            G[f"h{i}.fc1.b"], G[f"h{i}.fc1.w"] = rnd(dpre.sum(axis=0)), dpre.T @ y2
            dy2 = rnd(dpre @ p("fc1.w"))
        dn, G[f"h{i}.ln2.w"], G[f"h{i}.ln2.b"] = _ln_backward(dy2, ln2, cfg.ln_eps, rnd)
        dx = rnd(dx + dn)
        G[f"h{i}.proj.b"], G[f"h{i}.proj.w"] = dx.sum(axis=0), dx.T @ o
        do = rnd(dx @ p("proj.w"))
        dq, dk, dv = (rnd(_unheads(a)) for a in
                      ref.sdpa_backward(q, k, v, _heads(do, b, s, h, d), causal=True))
        dqkv = np.stack([dq, dk, dv], axis=1).reshape(t, 3 * c)
        gb = dqkv.sum(axis=0)
        gb[c:2 * c] = 0.0       # the key bias's exact gradient (the example writes it)
        G[f"h{i}.qkv.b"], G[f"h{i}.qkv.w"] = gb, dqkv.T @ y1
        dn, G[f"h{i}.ln1.w"], G[f"h{i}.ln1.b"] = _ln_backward(rnd(dqkv @ p("qkv.w")), ln1,
                                                               cfg.ln_eps, rnd)
        dx = rnd(dx + dn)
    G["tok_emb"] = ref.embedding_backward(dx.reshape(b, s, c), ids, cfg.vocab)
    G["pos_emb"] = dx.reshape(b, s, c).sum(axis=0)
    moe = [lay[-1] for lay in layers] if cfg.moe else []
    return Step(float(loss), G, [m[13] for m in moe], [m[11] for m in moe],
                [m[2] for m in moe], [m[12] for m in moe], [m[10] for m in moe])


def train(example, cfg, steps: int, seed: int = 0, rnd=bf16, log=None) -> np.ndarray:
    """The losses of ``steps`` steps of ``example.train`` (the example module) emulated:
    the same initial weights, batches and learning rates, AdamW on float64 masters, the
    forward reading their copies (:func:`read_weights`, which rounds to bfloat16 -- the
    example's float32 masters round the same way up to float32's own rounding)."""
    params = {k: v.astype(np.float64) for k, v in example.init_params(cfg, seed).items()}
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(a) for k, a in params.items()}
    losses = []
    for i, (ids, tg) in enumerate(example.make_batches(cfg, steps, seed)):
        r = step(cfg, read_weights(params), ids, tg, rnd)
        losses.append(r.loss)
        lr = float(np.float32(example.lr_at(cfg, i)))
        for k in params:
            wd = cfg.weight_decay if example.decays(k) else 0.0
            params[k], m[k], v[k] = ref.adamw(params[k], r.grads[k], m[k], v[k], step=i + 1,
                                              lr=lr, betas=cfg.betas, eps=cfg.eps,
                                              weight_decay=wd)
        if log is not None and ((i + 1) % 20 == 0 or i + 1 == steps):
            extra = (f"  aux {sum(r.aux):.4f}  tokens per expert "
                     f"{int(min(map(np.min, r.counts)))}..{int(max(map(np.max, r.counts)))}"
                     if cfg.moe else "")
            log(f"step {i + 1:4d}  loss {r.loss:.4f}  mean of last 20 "
                f"{np.mean(losses[-20:]):.4f}{extra}")
    return np.array(losses)


def _main(argv=None) -> None:
    import argparse
    from dataclasses import replace

    parser = argparse.ArgumentParser(description="train the example's models on the CPU, "
                                     "bfloat16 emulated")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dense", action="store_true", help="also the dense model")
    args = parser.parse_args(argv)
    example = load_example()
    cfg = replace(example.Config(), decay_steps=args.steps)
    runs = [("moe", replace(cfg, moe=True))] + ([("dense", cfg)] if args.dense else [])
    for name, c in runs:
        print(name)
        losses = train(example, c, args.steps, args.seed, log=print)
        print(name, "mean of the last 20 steps", float(np.mean(losses[-20:])))


if __name__ == "__main__":
    _main()
