"""Layer norm and RMS norm through cudalibs (cuDNN's backend norm operations, and the kernel
library's own) beside PyTorch.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/norm.py                  # both tables
    PYTHONPATH=. python3 benchmarks/norm.py --only kernels   # the kernel library's table only

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
(``algo="find"``: every engine cuDNN's heuristics offer, and for the forward the kernel
library's norm kernel, a candidate of the same plans, timed by the one timer) before the
timed loops; the engine chosen (``norm.ptx`` for the kernel) is printed under the table.

TB/s counts the bytes a pass must move: forward ``x`` + ``y`` + parameters + statistics;
backward ``dy`` + ``x`` + ``dx`` + parameters and their gradients + statistics (1 TB = 1e12
bytes).  How: each library on its own stream with its own CUDA events, a few warm-up calls,
then the median of timed loops of 20 calls with ours and torch's loops interleaved
(benchmarks/_common.py).  The ratio is torch's time over ours: above 1 means cudalibs is
faster.  Without a GPU the script prints one line and exits 0; without torch the peer
columns say n/a.  Nothing here asserts a timing.

The kernel library's table
--------------------------
``cudalibs.kernels.layer_norm`` / ``rms_norm`` (``ptx/norm.cu``) and their backwards at
bfloat16 16384 x 4096, 8192 x 8192 and 32768 x 1024, with bfloat16 and with float32 weights
(and bias), beside torch (``F.layer_norm``, ``F.rms_norm`` on tensors that require grad, and
``torch.autograd.grad`` for the backward; bfloat16 weights only, as above) and beside our cuDNN
plans (``algo="find"``; ``n/a`` where cuDNN has no engine).  ``add+layer`` / ``add+rms`` is the
fused ``s = x + residual; y = norm(s)`` (one launch, ``residual_out`` written), beside torch's
``x + r`` then the norm (two kernels), and its backward with the residual stream's gradient
added into ``dx``, beside torch's autograd through both.  TB/s counts the bytes each pass must
move (as above, plus ``residual`` read and ``residual_out`` written, and ``dresidual`` read in
the fused backward).  ``fp32/bf16 w`` is our time with float32 weights over ours with
bfloat16 weights (the same case): 1.00x means float32 weights cost nothing.
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
from cudalibs import kernels as K

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
    parser = common.arg_parser(__doc__)
    parser.add_argument("--only", choices=("cudnn", "kernels"),
                        help="run one table: our cuDNN plans, or the kernel library's")
    args = parser.parse_args(argv)
    common.exit_if_no_gpu("benchmarks/norm.py")
    peer = common.load_torch()
    torch = peer.module
    dev = cl.Device(0)
    dev.set_current()
    if args.only != "kernels":
        _cudnn_table(dev, torch, peer)
    if args.only != "cudnn":
        _kernel_table(dev, torch, peer)


def _cudnn_table(dev, torch, peer) -> None:
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


# -- the kernel library's norms ---------------------------------------------------------------
KERNEL_SHAPES = ((16384, 4096), (8192, 8192), (32768, 1024))


def _kernel_bytes(n, c, case, wbytes):
    """The bytes a pass of ``case`` must move at (n, c), bfloat16 data."""
    layer = case.startswith(("layer", "add+layer"))
    fused = case.startswith("add+")
    params = (2 if layer else 1) * c * wbytes
    stats = (2 if layer else 1) * n * 4
    data = n * c * 2
    if case.endswith("fwd"):
        return 2 * data + (2 * data if fused else 0) + params + stats
    return 3 * data + (data if fused else 0) + 2 * params + stats


def _kernel_cases(torch, s, arrays, w, b, wdt, cudnn_ok):
    """``{case: (ours, torch's or None, cuDNN's or None)}`` at one shape and weight dtype."""
    x, r, dy, dres, y, so, dx = arrays
    n, c = x.shape
    dw, db = cl.empty((c,), wdt), cl.empty((c,), wdt)
    ln = K.layer_norm(x, w, b, stream=s)
    rn = K.rms_norm(x, w, stream=s)
    aln = K.layer_norm(x, w, b, residual=r, residual_out=so, stream=s)
    arn = K.rms_norm(x, w, residual=r, residual_out=so, stream=s)
    cases = {
        "layer fwd": [lambda: K.layer_norm(x, w, b, out=y, stream=s)],
        "layer bwd": [lambda: K.layer_norm_backward(dy, x, w, ln.mean, ln.rstd,
                                                    out=(dx, dw, db), stream=s)],
        "rms fwd": [lambda: K.rms_norm(x, w, out=y, stream=s)],
        "rms bwd": [lambda: K.rms_norm_backward(dy, x, w, rn.rstd, out=(dx, dw), stream=s)],
        "add+layer fwd": [lambda: K.layer_norm(x, w, b, residual=r, out=y, residual_out=so,
                                               stream=s)],
        "add+layer bwd": [lambda: K.layer_norm_backward(dy, so, w, aln.mean, aln.rstd,
                                                        dresidual=dres, out=(dx, dw, db),
                                                        stream=s)],
        "add+rms fwd": [lambda: K.rms_norm(x, w, residual=r, out=y, residual_out=so, stream=s)],
        "add+rms bwd": [lambda: K.rms_norm_backward(dy, so, w, arn.rstd, dresidual=dres,
                                                    out=(dx, dw), stream=s)],
    }
    theirs = _torch_kernel_cases(torch, arrays, w, b) if torch is not None and wdt == BF16 \
        else {}
    ours_cudnn = _cudnn_kernel_cases(s, arrays, w, b, dw, db) if cudnn_ok else {}
    return {k: (v[0], theirs.get(k), ours_cudnn.get(k)) for k, v in cases.items()}


def _cudnn_kernel_cases(s, arrays, w, b, dw, db):
    x, _, dy, _, y, _, dx = arrays
    n = x.shape[0]
    mean, inv = cl.empty((n, 1), np.float32), cl.empty((n, 1), np.float32)
    out = {}
    try:
        LN.layer_norm(x, w, b, training=True, out=(y, mean, inv), stream=s, algo="find")
        out["layer fwd"] = lambda: LN.layer_norm(x, w, b, training=True, out=(y, mean, inv),
                                                 stream=s, algo="find")
        LN.layer_norm_backward(dy, x, w, mean, inv, out=(dx, dw, db), stream=s, algo="find")
        out["layer bwd"] = lambda: LN.layer_norm_backward(dy, x, w, mean, inv,
                                                          out=(dx, dw, db), stream=s,
                                                          algo="find")
    except LN.NoNormEngineError:
        pass
    try:
        LN.rms_norm(x, w, training=True, out=(y, inv), stream=s, algo="find")
        out["rms fwd"] = lambda: LN.rms_norm(x, w, training=True, out=(y, inv), stream=s,
                                             algo="find")
        LN.rms_norm_backward(dy, x, w, inv, out=(dx, dw), stream=s, algo="find")
        out["rms bwd"] = lambda: LN.rms_norm_backward(dy, x, w, inv, out=(dx, dw), stream=s,
                                                      algo="find")
    except LN.NoNormEngineError:
        pass
    return out


def _torch_kernel_cases(torch, arrays, w, b):
    """torch's calls on views of the same data: the norms, and x + r then the norm."""
    F = torch.nn.functional
    x, r, dy, dres = (torch.from_dlpack(a) for a in arrays[:4])
    c = x.shape[1]
    tx, tr = x.detach().requires_grad_(True), r.detach().requires_grad_(True)
    tw = torch.from_dlpack(w).detach().requires_grad_(True)
    tb = torch.from_dlpack(b).detach().requires_grad_(True)
    torch.cuda.synchronize()
    ly = F.layer_norm(tx, (c,), tw, tb, EPS)
    ts = tx + tr
    aly = F.layer_norm(ts, (c,), tw, tb, EPS)
    cases = {
        "layer fwd": lambda: F.layer_norm(tx, (c,), tw, tb, EPS),
        "layer bwd": lambda: torch.autograd.grad(ly, (tx, tw, tb), dy, retain_graph=True),
        "add+layer fwd": lambda: F.layer_norm(tx + tr, (c,), tw, tb, EPS),
        "add+layer bwd": lambda: torch.autograd.grad((aly, ts), (tx, tr, tw, tb), (dy, dres),
                                                     retain_graph=True),
    }
    if hasattr(F, "rms_norm"):
        ry = F.rms_norm(tx, (c,), tw, EPS)
        ary = F.rms_norm(ts, (c,), tw, EPS)
        cases.update({
            "rms fwd": lambda: F.rms_norm(tx, (c,), tw, EPS),
            "rms bwd": lambda: torch.autograd.grad(ry, (tx, tw), dy, retain_graph=True),
            "add+rms fwd": lambda: F.rms_norm(tx + tr, (c,), tw, EPS),
            "add+rms bwd": lambda: torch.autograd.grad((ary, ts), (tx, tr, tw), (dy, dres),
                                                       retain_graph=True),
        })
    return cases


def _medians(torch, ts, fns, clock):
    """Median ms per call of each of ``fns`` (ours, torch's, cuDNN's; None skipped), their
    loops interleaved."""
    cases = []
    for i, fn in enumerate(fns):
        if fn is not None:
            cases.append((fn, common.torch_clock(torch, ts) if i == 1 else clock))
    if fns[1] is not None:
        torch.cuda.set_stream(ts)
    try:
        times = common.time_interleaved(cases, iters=ITERS, repeats=REPEATS, warmup=WARMUP)
    finally:
        if fns[1] is not None:
            torch.cuda.set_stream(torch.cuda.default_stream())
    med = iter(common.median_spread(t)[0] for t in times)
    return [next(med) if fn is not None else None for fn in fns]


def _kernel_table(dev, torch, peer) -> None:
    print(f"\n# cudalibs.kernels layer / RMS norm, bfloat16 data, {dev.name}; torch "
          f"{peer.version}\n")
    s = cl.Stream(dev)
    ts = torch.cuda.Stream() if torch is not None else None
    clock = common.cudalibs_clock(s)
    rng = np.random.default_rng(1)
    table = []
    for n, c in KERNEL_SHAPES:
        arrays = tuple(_rand((n, c), BF16, rng) for _ in range(4)) + tuple(
            cl.empty((n, c), BF16) for _ in range(3))
        with_bf16 = {}
        for wname, wdt in (("bf16", BF16), ("fp32", np.float32)):
            w, b = _rand((c,), wdt, rng, 0.5, 1.5), _rand((c,), wdt, rng)
            cases = _kernel_cases(torch, s, arrays, w, b, wdt, cudnn_ok=True)
            for case, fns in cases.items():
                t_ours, t_torch, t_cudnn = (None if t is None else t * 1e3
                                            for t in _medians(torch, ts, fns, clock))
                nbytes = _kernel_bytes(n, c, case, np.dtype(wdt).itemsize)
                if wname == "bf16":
                    with_bf16[case] = t_ours
                table.append([f"{n}x{c} {case} w {wname}", _fmt(t_ours),
                              _fmt(nbytes / (t_ours * 1e-6) / 1e12, 2),
                              _fmt(t_torch),
                              _fmt(nbytes / (t_torch * 1e-6) / 1e12 if t_torch else None, 2),
                              common.fmt_ratio(t_torch, t_ours), _fmt(t_cudnn),
                              common.fmt_ratio(t_cudnn, t_ours),
                              common.fmt_ratio(t_ours, with_bf16.get(case))
                              if wname == "fp32" else ""])
        for a in arrays:
            a.close()
    print(common.markdown_table(["case", "ours us", "ours TB/s", "torch us", "torch TB/s",
                                 "torch/ours", "cuDNN us", "cuDNN/ours", "fp32/bf16 w"], table,
                                right=(1, 2, 3, 4, 5, 6, 7, 8)))
    s.close()


if __name__ == "__main__":
    main()
