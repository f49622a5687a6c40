"""Data-parallel training step of the example models: cudalibs (eager and graph-replayed)
beside PyTorch's DistributedDataParallel, one process per GPU, the same per-GPU batch.

Run::

    PYTHONPATH=. python benchmarks/dp_step.py [--gpus N] [--iters 30] [--repeats 5]
                                              [--only cnn|transformer] [--sizes small,large]

What is measured
----------------
For each model and size of ``benchmarks/train_step.py`` (the residual CNN in float32 without
TF32, SGD with momentum; the transformer in bfloat16 with float32 master weights, AdamW), one
whole data-parallel step -- forward, backward, gradient all-reduce, optimizer -- on each of
``N`` GPUs (``--gpus``, default: every visible one), each GPU with the size's batch:

* cudalibs: the examples' data-parallel step (``examples/_dp.py``): gradients in flat
  buckets (``--bucket-mb``, 25 MiB like DDP), each all-reduced on a communication stream as
  soon as the backward has written it; eager, and the whole step replayed as one CUDA graph;
* PyTorch: the same networks (the builders of ``benchmarks/train_step.py``) wrapped in
  ``torch.nn.parallel.DistributedDataParallel`` over the NCCL backend, with
  ``gradient_as_bucket_view=True`` (its fastest bucket layout) and its other defaults
  (25 MiB buckets, buffers broadcast from rank 0 every forward); eager.

Process layout: ``N`` processes started with "spawn" (``examples/_dp.py``'s launcher: rank 0
makes the NCCL unique id and pipes it to the others; one GPU alone runs in this process);
torch bootstraps through a ``TCPStore``.  Each process times both libraries on its GPU, one
after the other, the ranks meeting at a barrier before every measurement.

How it is measured: ``benchmarks/_common.py``'s :func:`time_calls` -- the step queued back to
back, ``iters`` of them between two CUDA events on the step's stream, the median of
``repeats``; a cell is the largest over the ranks (a step is done when its slowest rank is).
The ratio columns are DDP's time over ours (above 1: cudalibs is faster).  Timings are
printed, never asserted.  With one GPU the all-reduce is a one-rank collective: the numbers
then show the cost of the machinery, not of communication.
"""

from __future__ import annotations

import socket
import statistics
import sys
from datetime import timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _p in (ROOT, ROOT / "benchmarks", ROOT / "examples"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import _dp  # noqa: E402  (sets the NCCL environment before NCCL loads)
import train_step as TS  # noqa: E402  (the torch builders and the example loader)
from _common import (arg_parser, cudalibs_clock, exit_if_no_gpu, fmt_ratio,  # noqa: E402
                     load_torch, markdown_table, time_calls, torch_clock)

import cudalibs as cl  # noqa: E402

HARD_TIMEOUT = 580   # seconds for the whole job, so that a hang cannot stall a machine
LR, MOMENTUM, WD = 0.05, 0.9, 5e-4


def _closure(fn, name: str):
    """The value ``fn`` captured under ``name``: the builders of train_step.py keep the torch
    model inside the step function they return, and DDP must wrap the model itself."""
    names = fn.__code__.co_freevars
    if name not in names:
        raise RuntimeError(f"{fn.__qualname__} no longer captures {name!r}: update "
                           "dp_step.py to the builders of train_step.py")
    return fn.__closure__[names.index(name)].cell_contents


def _median(fn, clock, opts) -> float:
    return statistics.median(time_calls(fn, clock, iters=opts["iters"], repeats=opts["repeats"],
                                        warmup=3))


def _ours(ctx, step, args, stream, opts) -> tuple[float, float]:
    """(eager, graph-replayed) ms per data-parallel step of ours."""
    clock = cudalibs_clock(stream)
    ctx.comm.barrier()
    eager = _median(lambda: step(*args), clock, opts)
    graphed = cl.StepGraph(step, *args, stream=stream)
    ctx.comm.barrier()
    replay = _median(lambda: graphed(*args), clock, opts)
    graphed.close()
    return eager, replay


def _ddp(torch, ctx, module, make_opt, loss_fn, args, opts) -> float:
    """ms per DistributedDataParallel step of ``module``."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ts = torch.cuda.Stream()
    ts.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(ts):
        # Made on the stream its steps run on, as autograd's gradient accumulators want.
        ddp = DDP(module, device_ids=[ctx.rank], gradient_as_bucket_view=True,
                  bucket_cap_mb=opts["bucket_mb"])
        opt = make_opt(ddp)

        def step():
            opt.zero_grad(set_to_none=False)
            loss = loss_fn(ddp, *args)
            loss.backward()
            opt.step()

        ctx.comm.barrier()
        return _median(step, torch_clock(torch, ts), opts)


def cnn_case(torch, ctx, size, opts):
    E = TS._example("cnn_train")
    cfg = TS.CNN_SIZES[size]
    params = E.init_params(0, cfg["channels"], 10, cfg["image"][0])
    rng = np.random.default_rng(1 + ctx.rank)          # each rank its own shard
    xh = rng.standard_normal((cfg["batch"],) + cfg["image"]).astype(np.float32)
    yh = rng.integers(0, 10, cfg["batch"]).astype(np.int32)
    model, sync, step = E.dp_replica(ctx.comm, params, batch=cfg["batch"], image=cfg["image"],
                                     lr=LR, momentum=MOMENTUM, weight_decay=WD,
                                     bucket_bytes=_dp.bucket_bytes(opts))
    s = model.stream
    x, y = cl.to_device(xh, stream=s), cl.to_device(yh, stream=s)
    eager, replay = _ours(ctx, step, (x, y), s, opts)
    ddp = None
    if torch is not None:
        import torch.nn.functional as F

        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
        net = _closure(TS._cnn_torch(torch, E, cfg, params, LR, MOMENTUM, WD), "net")
        tx, ty = torch.from_numpy(xh).cuda(), torch.from_numpy(yh).long().cuda()
        ddp = _ddp(torch, ctx, net,
                   lambda m: torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM,
                                             weight_decay=WD),
                   lambda m, a, b: F.cross_entropy(m(a), b), (tx, ty), opts)
    what = f"b{cfg['batch']}/GPU {cfg['image']} ch{cfg['channels']} fp32"
    return ("cnn", size, what, sync.describe(), eager, replay, ddp)


def transformer_case(torch, ctx, size, opts):
    from dataclasses import replace

    E = TS._example("transformer_train")
    cfg = replace(E.Config(), **TS.TFM_SIZES[size]).check()
    params = E.init_params(cfg, 0)
    ids_h, tg_h = E.make_batch(np.random.default_rng(1 + ctx.rank), cfg)
    model, sync, step = E.dp_replica(ctx.comm, cfg, 0, bucket_bytes=_dp.bucket_bytes(opts))
    s = model.stream
    ids, tg = cl.to_device(ids_h, stream=s), cl.to_device(tg_h, stream=s)
    eager, replay = _ours(ctx, step, (ids, tg), s, opts)
    ddp = None
    if torch is not None:
        from torch import nn

        loss_of = _closure(TS._tfm_torch(torch, E, cfg, params), "loss_of")
        w = _closure(loss_of, "w")

        class Weights(nn.Module):
            """The builder's weights as the parameters of a module, which DDP needs."""

            def __init__(self):
                super().__init__()
                self.p = nn.ParameterDict({k.replace(".", "_"): nn.Parameter(t.detach())
                                           for k, t in w.items()})

            def forward(self, a, b):
                return loss_of(a, b)

        module = Weights()
        # The builder's forward reads its weights from ``w``: point it at the parameters.
        w.update({k: module.p[k.replace(".", "_")] for k in list(w)})
        names = list(w)

        def make_opt(_):
            return torch.optim.AdamW(
                [{"params": [w[k] for k in names if E.decays(k)],
                  "weight_decay": cfg.weight_decay},
                 {"params": [w[k] for k in names if not E.decays(k)], "weight_decay": 0.0}],
                lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=True)

        tids = torch.as_tensor(ids_h, device="cuda").long()
        ttg = torch.as_tensor(tg_h, device="cuda").long()
        ddp = _ddp(torch, ctx, module, make_opt, lambda m, a, b: m(a, b), (tids, ttg), opts)
    what = f"d{cfg.d_model} L{cfg.layers} h{cfg.heads} b{cfg.batch}/GPU s{cfg.seq} bf16"
    return ("transformer", size, what, sync.describe(), eager, replay, ddp)


def bench_rank(ctx, opts: dict) -> list:
    """One rank: every case, ours then DDP; rows of milliseconds."""
    peer = load_torch()
    torch = peer.module
    if torch is not None:
        import torch.distributed as dist

        torch.cuda.set_device(ctx.rank)
        store = dist.TCPStore("127.0.0.1", opts["port"], ctx.world, ctx.root,
                              timedelta(seconds=120))
        dist.init_process_group("nccl", store=store, rank=ctx.rank, world_size=ctx.world,
                                device_id=torch.device(f"cuda:{ctx.rank}"))
    rows = []
    try:
        for model in ("cnn", "transformer"):
            if opts["only"] not in (None, model):
                continue
            for size in opts["sizes"]:
                case = cnn_case if model == "cnn" else transformer_case
                rows.append(case(torch, ctx, size, opts))
                if torch is not None:
                    torch.cuda.empty_cache()
    finally:
        if torch is not None:
            dist.destroy_process_group()
    return [{"rows": rows, "torch": peer.version}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    ap = arg_parser(__doc__)
    ap.add_argument("--gpus", type=int, default=None, help="ranks (None: every GPU)")
    ap.add_argument("--iters", type=int, default=30,
                    help="steps queued between the two timing events")
    ap.add_argument("--repeats", type=int, default=5, help="timed loops; the median is shown")
    ap.add_argument("--only", choices=("cnn", "transformer"), help="one model only (None: both)")
    ap.add_argument("--sizes", default="small,large",
                    help="comma-separated sizes of train_step.py (small, large)")
    ap.add_argument("--bucket-mb", type=float, default=_dp.DEFAULT_BUCKET_BYTES / 2**20,
                    help="cudalibs' gradient bucket size in MiB")
    args = ap.parse_args(argv)
    exit_if_no_gpu("benchmarks/dp_step.py")
    world = cl.device_count() if args.gpus is None else args.gpus
    if not 1 <= world <= cl.device_count():
        print(f"dp_step.py: --gpus {world}, but {cl.device_count()} GPU(s) visible")
        return 2
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    bad = [s for s in sizes if s not in TS.CNN_SIZES]
    if bad:
        ap.error(f"unknown sizes {bad}; choose from {sorted(TS.CNN_SIZES)}")
    opts = dict(vars(args), sizes=sizes, port=_free_port())
    results = _dp.launch(bench_rank, world, (opts,), timeout=HARD_TIMEOUT)
    per_rank = [r[0]["rows"] for r in results]
    print(f"{world} x {cl.Device(0).name}; torch {results[0][0]['torch']}; iters "
          f"{args.iters}, repeats {args.repeats}; ms per data-parallel step (median, slowest "
          "rank)")
    table = []
    for cells in zip(*per_rank):
        m, size, what, buckets = cells[0][:4]
        eager, replay = (max(c[k] for c in cells) for k in (4, 5))
        ddp = None if cells[0][6] is None else max(c[6] for c in cells)
        table.append([m, size, what, str(world), f"{eager:.3f}", f"{replay:.3f}",
                      "n/a" if ddp is None else f"{ddp:.3f}", fmt_ratio(ddp, eager),
                      fmt_ratio(ddp, replay)])
        print(f"  {m} {size}: {buckets}")
    print(markdown_table(["model", "size", "config", "GPUs", "cudalibs eager",
                          "cudalibs graph", "torch DDP", "DDP / ours eager",
                          "DDP / ours graph"], table, right=range(3, 9)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
