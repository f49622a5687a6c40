"""cuDNN convolution and batch-norm through cudalibs beside PyTorch, on ResNet-50 layers.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/conv.py

What is measured
----------------
ResNet-50 convolution layers at batch 32, ``(C, H, K, R, stride)``: (64, 56, 64, 3, 1),
(256, 56, 64, 1, 1), (128, 28, 128, 3, 1), (512, 7, 512, 3, 1) and the stride-2 3x3
downsample (128, 56, 128, 3, 2); ``padding = R // 2``.  Two configurations:

* float32 NCHW with TF32 tensor cores allowed on both sides (cudalibs ``math="tf32"``;
  PyTorch's default ``torch.backends.cudnn.allow_tf32 = True``);
* float16 channels-last (NHWC), float32 accumulation.

For each layer and configuration:

``forward``          ``cudnn.conv_forward(x, w, out=y, algo="find")`` (graph API first, see
                     cudalibs.cudnn.conv; the table names the backend and engine or
                     algorithm chosen) vs ``F.conv2d(x, w)``
                     with ``torch.backends.cudnn.benchmark = True`` (both search once, then
                     reuse the winner); TFLOP/s = 2 N K P Q C R S / time.
``fused``            ``cudnn.conv_bias_act(x, w, b, activation="relu", out=y)`` vs PyTorch's
                     ``F.conv2d(x, w)`` -> ``add_(bias)`` -> ``relu_()``.

Then, per configuration, batch-norm training (32 x 256 x 56 x 56, spatial): forward
(``batch_norm_train``, running statistics updated) and backward (``batch_norm_backward``) vs
``F.batch_norm(training=True)`` and its autograd backward; and the host time of one cache-hit
``conv_forward`` call on a tiny problem (GPU time negligible): cudalibs' whole call, the bare
``cudnnConvolutionForward`` ctypes call it wraps (so the difference is what cudalibs adds; the
target is <= 15 us), and ``F.conv2d``; once on a graph plan (bare call:
``cudnnBackendExecute`` with the cached variant pack) and once on the legacy API
(``cl.option_context(conv_graph_api=False)``).  A graph plan's repeated call launches the
kernels it recorded from the library call again (a relaunch, :class:`cudalibs.Options`)
instead of calling ``cudnnBackendExecute``, so there "added by cudalibs" compares our whole
call with the library call it stands in for.

How: each library on its own stream with its own CUDA events, warm-up calls (the algorithm
search happens there), then the median of timed loops of 30 calls (benchmarks/_common.py);
for the convolutions the loops of ours and torch's forward and fused cases alternate, so clock
changes during the run hit both sides alike.  Ratios are
ours over torch's throughput (or torch's time over ours): above 1 means cudalibs is faster.
Without a GPU the script prints one line and exits 0; without torch the peer columns say n/a.
"""

from __future__ import annotations

import ctypes
import sys
import time
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.conv
    from . import _common as common

import cudalibs as cl
from cudalibs import cudnn

BATCH = 32
LAYERS = [(64, 56, 64, 3, 1), (256, 56, 64, 1, 1), (128, 28, 128, 3, 1), (512, 7, 512, 3, 1),
          (128, 56, 128, 3, 2)]
CONFIGS = [("fp32 NCHW (TF32)", np.float32, False, "tf32"),
           ("fp16 NHWC", np.float16, True, None)]
ITERS, REPEATS, WARMUP = 30, 7, 3


def _device_array(host, channels_last):
    if not channels_last:
        return cl.to_device(host)
    return cl.to_device(np.ascontiguousarray(host.transpose(0, 2, 3, 1))).transpose(0, 3, 1, 2)


def _empty(shape, dtype, channels_last):
    if not channels_last:
        return cl.empty(shape, dtype)
    n, c, h, w = shape
    return cl.empty((n, h, w, c), dtype).transpose(0, 3, 1, 2)


def _torch_view(torch, arr):
    return torch.from_dlpack(arr)


def _time(fn, clock):
    times = common.time_calls(fn, clock, iters=ITERS, repeats=REPEATS, warmup=WARMUP)
    return common.median_spread(times)[0]


def _fmt(v, digits=1):
    return f"{v:.{digits}f}" if isinstance(v, float) else common.NA


def conv_rows(torch, s, ts):
    rows = []
    rng = np.random.default_rng(0)
    for name, dtype, chl, math in CONFIGS:
        for c, h, k, r, stride in LAYERS:
            pad = r // 2
            p = (h + 2 * pad - r) // stride + 1
            flops = 2.0 * BATCH * k * p * p * c * r * r
            x = _device_array(rng.standard_normal((BATCH, c, h, h), np.float32).astype(dtype), chl)
            w = _device_array((rng.standard_normal((k, c, r, r), np.float32) * 0.05).astype(dtype),
                              chl)
            b = cl.to_device(rng.standard_normal(k, np.float32).astype(dtype))
            y = _empty((BATCH, k, p, p), dtype, chl)
            kw = dict(stride=stride, padding=pad, math=math, stream=s)
            clock = common.cudalibs_clock(s)
            cases = [(lambda: cudnn.conv_forward(x, w, out=y, **kw), clock),
                     (lambda: cudnn.conv_bias_act(x, w, b, out=y, **kw), clock)]
            if torch is not None:
                tx, tw, tb = (_torch_view(torch, a) for a in (x, w, b))
                s.sync()
                tclock = common.torch_clock(torch, ts)
                F = torch.nn.functional
                tbv = tb.view(1, -1, 1, 1)
                cases += [(lambda: F.conv2d(tx, tw, None, stride, pad), tclock),
                          (lambda: F.conv2d(tx, tw, None, stride, pad).add_(tbv).relu_(),
                           tclock)]
                torch.cuda.set_stream(ts)   # torch's calls run on ts, as ours run on s
            try:
                medians = [common.median_spread(t)[0] for t in common.time_interleaved(
                    cases, iters=ITERS, repeats=REPEATS, warmup=WARMUP)]
            finally:
                if torch is not None:
                    torch.cuda.set_stream(torch.cuda.default_stream())
            ours, fused = medians[:2]
            theirs, theirs_fused = medians[2:] if torch is not None else (None, None)
            plan = _plan_of("forward", x, w, math)
            fplan = _plan_of("fused", x, w, math)
            tf = flops / (ours * 1e-3) / 1e12
            ttf = flops / (theirs * 1e-3) / 1e12 if theirs else None
            rows.append([name, f"{c},{h},{k},{r},s{stride}", _fmt(tf), _fmt(ttf),
                         common.fmt_ratio(tf, ttf), _plan_name(plan),
                         _fmt(fused * 1e3, 0),
                         _fmt(theirs_fused * 1e3 if theirs_fused else None, 0),
                         common.fmt_ratio(theirs_fused, fused), _plan_name(fplan)])
            x.close(), w.close(), y.close(), b.close()
    return rows


def _plan_of(op, x, w, math):
    """The newest cached plan of ``op`` for these operands (keys by name: cudnn.conv.*_KEY)."""
    plans = [e.plan for e in cudnn.algo_cache()
             if e.plan.op == op and tuple(e.plan.operand_shapes.values())[0] == x.shape
             and e.key["w_shape"] == w.shape and e.key["math"] == math]
    return plans[-1] if plans else None


def _plan_name(plan):
    """``graph eng12 k2=1`` / ``legacy implicit_precomp_gemm``: the backend and what it runs."""
    return f"{plan.backend} {plan.algo_name}" if plan is not None else common.NA


def bn_rows(torch, s, ts):
    rows = []
    rng = np.random.default_rng(1)
    shape = (BATCH, 256, 56, 56)
    for name, dtype, chl, _ in CONFIGS:
        x = _device_array(rng.standard_normal(shape, np.float32).astype(dtype), chl)
        dy = _device_array(rng.standard_normal(shape, np.float32).astype(dtype), chl)
        g, b = (cl.to_device(rng.standard_normal(256, np.float32)) for _ in range(2))
        rm, rv = cl.zeros(256, np.float32), cl.full(256, 1.0, np.float32)
        y = _empty(shape, dtype, chl)
        clock = common.cudalibs_clock(s)
        # The state carries the reserve space the Ex forward fills and the Ex backward reads,
        # so the backward measured is the fast one (as in a training step).
        saved = cudnn.batch_norm_train(x, g, b, rm, rv, out=y, stream=s)
        fwd = _time(lambda: cudnn.batch_norm_train(x, g, b, rm, rv, out=y, stream=s), clock)
        bwd = _time(lambda: cudnn.batch_norm_backward(x, dy, g, saved, stream=s), clock)
        paths = cudnn.norm.batch_norm_paths(x)
        tf = tb = None
        if torch is not None:
            F = torch.nn.functional
            s.sync()
            tx = _torch_view(torch, x).detach().requires_grad_(True)
            tdy = _torch_view(torch, dy)
            tg = _torch_view(torch, g).detach().requires_grad_(True)
            tbb = _torch_view(torch, b).detach().requires_grad_(True)
            trm, trv = torch.zeros(256, device="cuda"), torch.ones(256, device="cuda")
            tclock = common.torch_clock(torch, ts)
            with torch.cuda.stream(ts):
                tf = _time(lambda: F.batch_norm(tx.detach(), trm, trv, tg.detach(),
                                                tbb.detach(), training=True), tclock)
                ty = F.batch_norm(tx, trm, trv, tg, tbb, training=True)
                tb = _time(lambda: torch.autograd.grad(ty, (tx, tg, tbb), tdy,
                                                       retain_graph=True), tclock)
        rows.append([name, f"forward (train) [{paths.get('forward', '?')[:60]}]",
                     _fmt(fwd * 1e3, 0), _fmt(tf * 1e3 if tf else None, 0),
                     common.fmt_ratio(tf, fwd)])
        rows.append([name, f"backward [{paths.get('backward', '?')[:60]}]", _fmt(bwd * 1e3, 0),
                     _fmt(tb * 1e3 if tb else None, 0), common.fmt_ratio(tb, bwd)])
        for a in (x, dy, g, b, rm, rv, y):
            a.close()
    return rows


def host_overhead(torch, s):
    """Microseconds of host time per call on a cache hit (tiny problem, GPU time ~nil)."""
    rng = np.random.default_rng(2)
    x = cl.to_device(rng.standard_normal((1, 8, 8, 8), np.float32))
    w = cl.to_device(rng.standard_normal((8, 8, 3, 3), np.float32))
    y = cl.empty((1, 8, 8, 8), np.float32)
    n = 2000

    def per_call(fn):
        for _ in range(50):
            fn()
        s.sync()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
            s.sync()
        return best

    def measure(graph_api):
        """(ours with out=, ours allocating, the bare library call, plan) on one backend."""
        with cl.option_context(conv_graph_api=graph_api):
            ours = per_call(lambda: cudnn.conv_forward(x, w, padding=1, out=y, stream=s))
            ours_alloc = per_call(lambda: cudnn.conv_forward(x, w, padding=1, stream=s))
        plan = [e.plan for e in cudnn.algo_cache()
                if e.plan.op == "forward" and e.key["x_shape"] == x.shape
                and e.key["graph_api"] == graph_api][-1]
        h = cudnn.handle._handles.get(s.device)
        h.bind(s.handle)
        L = cudnn._lib.get()
        ws_ptr, ws_size = cudnn.handle.workspace(s.device, s.handle, plan.workspace_size)
        xp, wp, yp = x.ptr, w.ptr, y.ptr
        if plan.backend == "graph":
            g = plan.gplan
            vp = g.pack((xp, wp, yp), ws_ptr)
            hr, pr, vr = h.raw, g._raw, vp._raw
            raw = per_call(lambda: L.cudnnBackendExecute(hr, pr, vr))
        else:
            one, zero = ctypes.c_float(1), ctypes.c_float(0)
            a_, b_ = ctypes.addressof(one), ctypes.addressof(zero)
            xd, wd, cd, yd = plan._exe.raws   # the chosen legacy candidate's descriptors
            raw = per_call(lambda: L.cudnnConvolutionForward(h.raw, a_, xd, xp, wd, wp, cd,
                                                             plan.algo, ws_ptr, ws_size, b_,
                                                             yd, yp))
        return ours, ours_alloc, raw, plan

    graph = measure(True)
    legacy = measure(False)
    theirs = None
    if torch is not None:
        tx, tw, ty = (torch.from_dlpack(a) for a in (x, w, y))
        theirs = per_call(lambda: torch.nn.functional.conv2d(tx, tw, padding=1))
    return graph, legacy, theirs


def main(argv=None) -> int:
    common.arg_parser(__doc__).parse_args(argv)
    common.exit_if_no_gpu("benchmarks/conv.py")
    torch_peer = common.load_torch()
    torch = torch_peer.module
    dev = cl.Device(0)
    s = cl.Stream(dev)
    ts = None
    if torch is not None:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = True
        ts = torch.cuda.Stream()
    cudnn.set_workspace_limit(1 << 30)
    print("## cuDNN convolution and batch-norm\n")
    print(f"- device: {dev.name} ({dev.arch}); cuDNN {'.'.join(map(str, cudnn.version()))}"
          f" via cudalibs {cl.__version__}; {torch_peer.name} {torch_peer.version}")
    print(f"- batch {BATCH}; median of {REPEATS} loops of {ITERS} calls, CUDA events per library;"
          " ratios > 1 mean cudalibs is faster\n")
    t0 = time.perf_counter()
    rows = conv_rows(torch, s, ts)
    print(common.markdown_table(
        ["config", "C,H,K,R,stride", "ours TFLOP/s", "torch TFLOP/s", "fwd ours/torch",
         "our backend + algo", "fused us", "torch conv+add+relu us", "fused torch/ours",
         "fused backend + algo"],
        rows, right={2, 3, 4, 6, 7, 8}))
    print()
    print(common.markdown_table(["config", "batch-norm 32x256x56x56", "ours us", "torch us",
                                 "torch/ours"], bn_rows(torch, s, ts), right={2, 3, 4}))
    graph, legacy, theirs = host_overhead(torch, s)
    rows = []
    for (ours, ours_alloc, raw, plan), bare in ((graph, "cudnnBackendExecute"),
                                                (legacy, "cudnnConvolutionForward")):
        tag = f"{plan.backend} ({plan.algo_name})"
        if plan.backend != "graph":
            bare = "cudnnConvolutionForward"
        rows += [[f"{tag}: cudalibs conv_forward(out=y)", f"{ours:.1f}"],
                 [f"{tag}: cudalibs conv_forward (allocates y)", f"{ours_alloc:.1f}"],
                 [f"{tag}: bare {bare} via ctypes", f"{raw:.1f}"],
                 [f"{tag}: added by cudalibs (target <= 15)", f"{ours - raw:.1f}"]]
    rows.append(["torch F.conv2d", _fmt(theirs)])
    print()
    print(common.markdown_table(["host time per call (cache hit, 1x8x8x8 conv)", "us"], rows,
                                right={1}))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    s.sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
