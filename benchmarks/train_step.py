"""Time per training step of the example models: cudalibs eager and graph-replayed beside
PyTorch eager and PyTorch with CUDA graphs, same model, batch and dtype, in one process.

Run::

    PYTHONPATH=. python benchmarks/train_step.py [--iters 50] [--repeats 5]

Models (each at a small, host-bound size and a size that keeps the GPU busy):

* ``cnn``: the residual CNN of ``examples/cnn_train.py`` (float32, TF32 off on both sides),
  SGD with momentum; twice: with deterministic convolution algorithms only on both sides
  (the example's default, ``torch.backends.cudnn.deterministic = True``) and with any;
* ``transformer``: the decoder-only transformer of ``examples/transformer_train.py`` (bfloat16
  activations, float32 master weights), AdamW.

Each step is timed the way a training loop runs it: the batch already on the device, the step
queued back to back (``iters`` of them between two CUDA events, median of ``repeats``).  The
graph-replayed variants copy the batch into their static inputs inside the step, as a real
loop must.  The ratio columns are torch's time over ours (above 1: cudalibs is faster).
Timings are printed, never asserted.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cudalibs as cl  # noqa: E402

from _common import (arg_parser, cudalibs_clock, exit_if_no_gpu, fmt_ratio,  # noqa: E402
                     load_torch, markdown_table, time_calls, torch_clock)


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod         # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


# -- the CNN ----------------------------------------------------------------------------------
CNN_SIZES = {
    "small": dict(batch=64, image=(1, 8, 8), channels=(16, 32)),
    "large": dict(batch=256, image=(3, 32, 32), channels=(64, 128)),
}


def _cnn_torch(torch, E, cfg, params, lr, momentum, wd):
    import torch.nn.functional as F
    from torch import nn

    c1, c2 = cfg["channels"]
    cin = cfg["image"][0]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            for i, (a, b) in enumerate([(cin, c1), (c1, c1), (c1, c1), (c1, c2)], 1):
                setattr(self, f"conv{i}", nn.Conv2d(a, b, 3, padding=1, bias=False))
                setattr(self, f"bn{i}", nn.BatchNorm2d(b))
            self.fc = nn.Linear(c2, params["fc.w"].shape[0])

        def forward(self, x):
            r1 = F.relu(self.bn1(self.conv1(x)))
            r2 = F.relu(self.bn2(self.conv2(r1)))
            r3 = F.relu(self.bn3(self.conv3(r2)) + r1)
            r4 = F.relu(self.bn4(self.conv4(F.max_pool2d(r3, 2))))
            return self.fc(r4.mean(dim=(2, 3)))

    net = Net().cuda()
    with torch.no_grad():
        for name, value in params.items():
            layer, kind = name.split(".")
            t = getattr(net, layer).weight if kind in ("w", "g") else getattr(net, layer).bias
            t.copy_(torch.from_numpy(value))
    opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum, weight_decay=wd)

    def step(x, y):
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def _torch_graphed(torch, step, x, y, stream):
    """``step`` captured whole with torch.cuda.graph; returns a callable copying the batch in
    and replaying."""
    sx, sy = x.clone(), y.clone()
    with torch.cuda.stream(stream):
        for _ in range(3):          # warm-up on a side stream, as torch's documentation does
            step(sx, sy)
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        step(sx, sy)

    def run():
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
    return run


def cnn_rows(torch, iters, repeats):
    E = _example("cnn_train")
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    rows = []
    for (size, cfg), det in ((item, det) for item in CNN_SIZES.items() for det in (True, False)):
        # Both sides search their convolution algorithms under the same rule: only
        # deterministic ones (the example's default, for bitwise replays), or all of them.
        torch.backends.cudnn.deterministic = det
        lr, momentum, wd = 0.05, 0.9, 5e-4
        params = E.init_params(0, cfg["channels"], 10, cfg["image"][0])
        rng = np.random.default_rng(0)
        xh = rng.standard_normal((cfg["batch"],) + cfg["image"]).astype(np.float32)
        yh = rng.integers(0, 10, cfg["batch"]).astype(np.int32)

        model = E.ResidualCNN(params, batch=cfg["batch"], image=cfg["image"], lr=lr,
                              momentum=momentum, weight_decay=wd, deterministic=det)
        s = model.stream
        x, y = cl.to_device(xh, stream=s), cl.to_device(yh, stream=s)
        clock = cudalibs_clock(s)
        eager = statistics.median(time_calls(lambda: model.step(x, y), clock, iters=iters,
                                             repeats=repeats, warmup=3))
        graphed = E.GraphedStep(model, x.shape)
        graphed(x, y)
        replay = statistics.median(time_calls(lambda: graphed(x, y), clock, iters=iters,
                                              repeats=repeats, warmup=3))

        ts = torch.cuda.Stream()
        tx = torch.from_numpy(xh).cuda()
        ty = torch.from_numpy(yh).long().cuda()
        tstep = _cnn_torch(torch, E, cfg, params, lr, momentum, wd)
        tclock = torch_clock(torch, ts)
        with torch.cuda.stream(ts):
            t_eager = statistics.median(time_calls(lambda: tstep(tx, ty), tclock, iters=iters,
                                                   repeats=repeats, warmup=3))
        tgraph = _torch_graphed(torch, _cnn_torch(torch, E, cfg, params, lr, momentum, wd),
                                tx, ty, ts)
        with torch.cuda.stream(ts):
            t_graph = statistics.median(time_calls(tgraph, tclock, iters=iters,
                                                   repeats=repeats, warmup=3))
        rows.append(("cnn", size, f"b{cfg['batch']} {cfg['image']} ch{cfg['channels']} fp32"
                     + (", deterministic" if det else ", any algorithm"),
                     eager, replay, t_eager, t_graph))
    torch.backends.cudnn.deterministic = False
    return rows


# -- the transformer ------------------------------------------------------------------------
TFM_SIZES = {
    "small": dict(),                                            # the example's defaults
    "large": dict(d_model=512, heads=8, layers=4, ffn=2048, seq=256, batch=32),
}


def _tfm_torch(torch, E, cfg, params):
    """The same network in PyTorch as its users write it: float32 parameters, bfloat16
    autocast, fused AdamW on the float32 weights (the masters), capturable for the graph."""
    F = torch.nn.functional
    dev = torch.device("cuda")
    w = {k: torch.tensor(v, device=dev, requires_grad=True) for k, v in params.items()}
    names = list(w)
    opt = torch.optim.AdamW(
        [{"params": [w[k] for k in names if E.decays(k)], "weight_decay": cfg.weight_decay},
         {"params": [w[k] for k in names if not E.decays(k)], "weight_decay": 0.0}],
        lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=True, capturable=True)
    c, h, d = cfg.d_model, cfg.heads, cfg.head_dim

    def loss_of(ids, tg):
        b, s = ids.shape
        t = b * s
        with torch.autocast("cuda", dtype=torch.bfloat16):
            x = F.embedding(ids, w["tok_emb"]) + F.embedding(
                torch.arange(s, device=dev), w["pos_emb"])[None]
            x = x.reshape(t, c)
            for i in range(cfg.layers):
                def p(n):
                    return w[f"h{i}.{n}"]
                qkv = F.linear(F.layer_norm(x, (c,), p("ln1.w"), p("ln1.b"), cfg.ln_eps),
                               p("qkv.w"), p("qkv.b"))
                q, k, v = (z.transpose(1, 2) for z in qkv.view(b, s, 3, h, d).unbind(2))
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + F.linear(o.transpose(1, 2).reshape(t, c), p("proj.w"), p("proj.b"))
                hid = F.gelu(F.linear(F.layer_norm(x, (c,), p("ln2.w"), p("ln2.b"),
                                                   cfg.ln_eps), p("fc1.w"), p("fc1.b")),
                             approximate="tanh")
                x = x + F.linear(hid, p("fc2.w"), p("fc2.b"))
            logits = F.linear(F.layer_norm(x, (c,), w["lnf.w"], w["lnf.b"], cfg.ln_eps),
                              w["head.w"])
        return F.cross_entropy(logits.float(), tg.reshape(t), ignore_index=E.IGNORE_INDEX)

    def step(ids, tg):
        opt.zero_grad(set_to_none=False)
        loss = loss_of(ids, tg)
        loss.backward()
        opt.step()
        return loss
    return step


def transformer_rows(torch, iters, repeats):
    from dataclasses import replace

    E = _example("transformer_train")
    rows = []
    for size, over in TFM_SIZES.items():
        cfg = replace(E.Config(), **over).check()
        params = E.init_params(cfg, 0)
        ids_h, tg_h = E.make_batch(np.random.default_rng(0), cfg)
        model = E.build(cfg, 0)
        s = model.stream
        ids, tg = cl.to_device(ids_h, stream=s), cl.to_device(tg_h, stream=s)
        clock = cudalibs_clock(s)
        eager = statistics.median(time_calls(lambda: E.train_step(model, ids, tg), clock,
                                             iters=iters, repeats=repeats, warmup=3))
        graphed = cl.StepGraph(lambda a, b: E.train_step(model, a, b), ids, tg, stream=s)
        replay = statistics.median(time_calls(lambda: graphed(ids, tg), clock, iters=iters,
                                              repeats=repeats, warmup=3))
        ts = torch.cuda.Stream()
        tids = torch.as_tensor(ids_h, device="cuda").long()
        ttg = torch.as_tensor(tg_h, device="cuda").long()
        tclock = torch_clock(torch, ts)
        tstep = _tfm_torch(torch, E, cfg, params)
        with torch.cuda.stream(ts):
            t_eager = statistics.median(time_calls(lambda: tstep(tids, ttg), tclock,
                                                   iters=iters, repeats=repeats, warmup=3))
        tgraph = _torch_graphed(torch, _tfm_torch(torch, E, cfg, params), tids, ttg, ts)
        with torch.cuda.stream(ts):
            t_graph = statistics.median(time_calls(tgraph, tclock, iters=iters,
                                                   repeats=repeats, warmup=3))
        rows.append(("transformer", size,
                     f"d{cfg.d_model} L{cfg.layers} h{cfg.heads} b{cfg.batch} s{cfg.seq} bf16",
                     eager, replay, t_eager, t_graph))
    return rows


def main(argv=None) -> int:
    ap = arg_parser(__doc__)
    ap.add_argument("--iters", type=int, default=30,
                    help="steps queued between the two timing events")
    ap.add_argument("--repeats", type=int, default=5, help="timed loops; the median is shown")
    ap.add_argument("--only", choices=("cnn", "transformer"), help="one model only (None: both)")
    args = ap.parse_args(argv)
    exit_if_no_gpu("benchmarks/train_step.py")
    peer = load_torch()
    if not peer.ok:
        print(f"train_step.py: torch {peer.version}; the comparison needs it")
        return 0
    torch = peer.module
    print(f"device: {cl.Device(0).name}; torch {peer.version}; iters {args.iters}, "
          f"repeats {args.repeats}; ms per step (median)")
    rows = []
    if args.only in (None, "cnn"):
        rows += cnn_rows(torch, args.iters, args.repeats)
    if args.only in (None, "transformer"):
        rows += transformer_rows(torch, args.iters, args.repeats)
    table = [[m, size, what, f"{e:.3f}", f"{g:.3f}", f"{te:.3f}", f"{tg:.3f}",
              fmt_ratio(te, e), fmt_ratio(te, g), fmt_ratio(tg, g)]
             for m, size, what, e, g, te, tg in rows]
    print(markdown_table(["model", "size", "config", "cudalibs eager", "cudalibs graph",
                          "torch eager", "torch graph", "eager vs torch eager",
                          "graph vs torch eager", "graph vs torch graph"], table,
                         right=range(3, 10)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
