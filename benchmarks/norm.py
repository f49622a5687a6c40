"""Layer norm and RMS norm through cudalibs (cuDNN's backend norm operations) beside PyTorch.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/norm.py

What is measured
----------------
bfloat16 ``x`` of 16384 x 4096 (rows x features, a transformer's activations), normalised
over the last dimension, eps 1e-5:

``layer fwd``   ``cudnn.layer_norm(x, w, b, training=True, out=(y, mean, inv_std))`` vs
                ``F.layer_norm(x, (4096,), w, b)`` on a tensor that requires grad (torch's
                kernel always writes the statistics the backward needs, as ours does here);
``layer fwd (inference)``  ours without the statistics, torch under ``no_grad``;
``layer bwd``   ``cudnn.layer_norm_backward(dy, x, w, mean, inv_std, out=(dx, dw, db))`` vs
                ``torch.autograd.grad(y, (x, w, b), dy)`` (torch's backward kernels);
``rms ...``     the same for ``cudnn.rms_norm`` / ``F.rms_norm``.

The weight and bias are bfloat16 on both sides (rows marked ``w fp32`` use float32 weights
on ours, as mixed-precision training keeps them).  Our plans are autotuned once
(``algo="find"``: every engine cuDNN's heuristics offer, timed by the one timer) before the
timed loops; the engine chosen is printed under the table.

TB/s counts the bytes a pass must move: forward ``x`` + ``y`` + parameters + statistics;
backward ``dy`` + ``x`` + ``dx`` + parameters and their gradients + statistics (1 TB = 1e12
bytes).  How: each library on its own stream with its own CUDA events, a few warm-up calls,
then the median of timed loops of 20 calls with ours and torch's loops interleaved
(benchmarks/_common.py).  The ratio is torch's time over ours: above 1 means cudalibs is
faster.  Without a GPU the script prints one line and exits 0; without torch the peer
columns say n/a.  Nothing here asserts a timing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.norm
    from . import _common as common

import cudalibs as cl
# The module of the layer / RMS norm plans: its one-shots, the plan cache's entries and
# NoNormEngineError under one name.
from cudalibs.cudnn.norm import layer as LN

ROWS, FEATS, EPS = 16384, 4096, 1e-5
ITERS, REPEATS, WARMUP = 20, 9, 3
BF16 = cl.dtypes.lookup("bfloat16").numpy


def _rand(shape, dtype, rng, low=-1.0, high=1.0):
    return cl.to_device(rng.uniform(low, high, shape).astype(np.float32).astype(dtype))


def _bytes(mode, bwd, wbytes, xbytes=2):
    n, c = ROWS, FEATS
    stats = (2 if mode == "layer" else 1) * n * 4
    params = (2 if mode == "layer" else 1) * c * wbytes
    if not bwd:
        return 2 * n * c * xbytes + params + stats
    return 3 * n * c * xbytes + c * wbytes + params + stats


def _fmt(v, digits=1):
    return f"{v:.{digits}f}" if isinstance(v, float) else common.NA


def main(argv=None) -> None:
    common.arg_parser(__doc__).parse_args(argv)
    common.exit_if_no_gpu("benchmarks/norm.py")
    peer = common.load_torch()
    torch = peer.module
    dev = cl.Device(0)
    dev.set_current()
    print(f"# Layer norm / RMS norm, bfloat16 {ROWS} x {FEATS}, {dev.name}; "
          f"cuDNN {'.'.join(map(str, cl.cudnn.version()))}; torch {peer.version}\n")
    s = cl.Stream(dev)
    ts = torch.cuda.Stream() if torch is not None else None
    rng = np.random.default_rng(0)
    x = _rand((ROWS, FEATS), BF16, rng)
    dy = _rand((ROWS, FEATS), BF16, rng)
    y, dx = cl.empty((ROWS, FEATS), BF16), cl.empty((ROWS, FEATS), BF16)
    mean, inv = cl.empty((ROWS, 1), np.float32), cl.empty((ROWS, 1), np.float32)
    rows, chosen = [], []
    clock = common.cudalibs_clock(s)
    for wname, wdt in (("bf16", BF16), ("fp32", np.float32)):
        w = _rand((FEATS,), wdt, rng, 0.5, 1.5)
        b = _rand((FEATS,), wdt, rng)
        dw, db = cl.empty((FEATS,), wdt), cl.empty((FEATS,), wdt)
        wb = np.dtype(wdt).itemsize
        ours = {
            ("layer", "fwd"): lambda: LN.layer_norm(x, w, b, training=True, out=(y, mean, inv),
                                                    stream=s, algo="find"),
            ("layer", "fwd (inference)"): lambda: LN.layer_norm(x, w, b, out=y, stream=s,
                                                                algo="find"),
            ("layer", "bwd"): lambda: LN.layer_norm_backward(dy, x, w, mean, inv,
                                                             out=(dx, dw, db), stream=s,
                                                             algo="find"),
            ("rms", "fwd"): lambda: LN.rms_norm(x, w, training=True, out=(y, inv), stream=s,
                                                algo="find"),
            ("rms", "fwd (inference)"): lambda: LN.rms_norm(x, w, out=y, stream=s, algo="find"),
            ("rms", "bwd"): lambda: LN.rms_norm_backward(dy, x, w, inv, out=(dx, dw), stream=s,
                                                         algo="find"),
        }
        theirs = _torch_cases(torch, x, dy, w, b) if torch is not None and wname == "bf16" \
            else {}
        for (mode, what), fn in ours.items():
            try:
                fn()      # plans (and autotunes) ours; a problem cuDNN cannot run says why
            except LN.NoNormEngineError as exc:
                rows.append([f"{mode} {what} w {wname}", "no engine", common.NA, common.NA,
                             common.NA, common.NA])
                chosen.append(f"{rows[-1][0]}: {str(exc)[:300]}")
                continue
            cases = [(fn, clock)]
            if (mode, what) in theirs:
                cases.append((theirs[(mode, what)], common.torch_clock(torch, ts)))
                torch.cuda.set_stream(ts)
            try:
                times = common.time_interleaved(cases, iters=ITERS, repeats=REPEATS,
                                                warmup=WARMUP)
            finally:
                if torch is not None:
                    torch.cuda.set_stream(torch.cuda.default_stream())
            med = [common.median_spread(t)[0] for t in times]
            t_ours = med[0]
            t_torch = med[1] if len(med) > 1 else None
            nbytes = _bytes(mode, what == "bwd", wb)
            rows.append([f"{mode} {what}" + (" w fp32" if wname == "fp32" else ""),
                         _fmt(t_ours * 1e3), _fmt(nbytes / (t_ours * 1e-3) / 1e12, 2),
                         _fmt(t_torch * 1e3 if t_torch else None),
                         _fmt(nbytes / (t_torch * 1e-3) / 1e12 if t_torch else None, 2),
                         common.fmt_ratio(t_torch, t_ours)])
            chosen.append(f"{rows[-1][0]}: {_plan(mode, what, wdt)}")
        for a in (w, b, dw, db):
            a.close()
    print(common.markdown_table(["case", "ours us", "ours TB/s", "torch us", "torch TB/s",
                                 "torch/ours"], rows, right=(1, 2, 3, 4, 5)))
    print("\nplans:")
    for line in chosen:
        print(f"- {line}")
    for a in (x, dy, y, dx, mean, inv):
        a.close()
    s.close()


def _plan(mode, what, wdt):
    """The cached plan a case ran (keys read by name)."""
    kind = "cudnn_norm_backward" if what == "bwd" else "cudnn_norm_forward"
    for e in reversed(LN.norm_cache()):
        k = e.key
        if (e.kind == kind and k["mode"] == mode and k["weight_dtype"] == np.dtype(wdt)
                and k.get("training", True) == (what == "fwd" or what == "bwd")):
            return repr(e.plan)
    return common.NA


def _torch_cases(torch, x, dy, w, b):
    """torch's calls on views of the same data (bfloat16 weights, like ours)."""
    F = torch.nn.functional
    tx = torch.from_dlpack(x).detach().requires_grad_(True)
    tw = torch.from_dlpack(w).detach().requires_grad_(True)
    tb = torch.from_dlpack(b).detach().requires_grad_(True)
    tdy = torch.from_dlpack(dy)
    torch.cuda.synchronize()
    ly = F.layer_norm(tx, (FEATS,), tw, tb, EPS)
    cases = {("layer", "fwd"): lambda: F.layer_norm(tx, (FEATS,), tw, tb, EPS),
             ("layer", "bwd"): lambda: torch.autograd.grad(ly, (tx, tw, tb), tdy,
                                                           retain_graph=True)}

    def infer(fn):
        def run():
            with torch.no_grad():
                fn()
        return run

    cases[("layer", "fwd (inference)")] = infer(lambda: F.layer_norm(tx, (FEATS,), tw, tb, EPS))
    if hasattr(F, "rms_norm"):
        ry = F.rms_norm(tx, (FEATS,), tw, EPS)
        cases[("rms", "fwd")] = lambda: F.rms_norm(tx, (FEATS,), tw, EPS)
        cases[("rms", "fwd (inference)")] = infer(lambda: F.rms_norm(tx, (FEATS,), tw, EPS))
        cases[("rms", "bwd")] = lambda: torch.autograd.grad(ry, (tx, tw), tdy,
                                                            retain_graph=True)
    return cases


if __name__ == "__main__":
    main()
