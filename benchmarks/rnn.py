"""cuDNN recurrent layers through cudalibs beside PyTorch's nn.LSTM / nn.GRU, per algorithm.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/rnn.py

What is measured
----------------
float16, tensor-op math, the rows of the RNN issue:

* LSTM, T=128, B=64, 512 -> 512, 2 layers;
* GRU, the same;
* bidirectional LSTM, T=256, B=32, 1024 -> 1024, 1 layer.

For each row and each algorithm the plan offers (``cudnn.RNN(..., seq_len=T, batch_size=B)``
then ``select(i)``; the algorithms cuDNN refuses for the problem are listed with its reason):

``fwd``   a training forward, ``rnn.forward(x, training=True, out=...)`` (the reserve space
          allocated per call, stream-ordered), vs ``module(x)`` with autograd recording;
``bwd``   a training step (the forward, then ``backward_data`` + ``backward_weights``: ``dx``,
          ``dhx``, ``dcx`` and every weight gradient) minus the forward, vs the same for
          ``module(x)`` + ``torch.autograd.grad(y, [x, *params], dy)``.  The backward passes
          update the reserve space, so each needs a forward of its own (cuDNN 9.19 gives
          wrong gradients for a second backward on one reserve); the step is what is timed.

Both sides hold the same weights (the torch module's ``state_dict()`` loaded through the
plan's views).  Then ``autotune()`` (a training step per candidate, the one timer of the
project) and the algorithm it keeps.

How: each library on its own stream with its own CUDA events (benchmarks/_common.py); our
cases and torch's interleaved repeat by repeat; the median of timed loops.  Ratios are torch's
time over ours: above 1 means cudalibs is faster.  No timing is asserted.  Without a GPU the
script prints one line and exits 0; without torch the peer columns say n/a.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.rnn
    from . import _common as common

import cudalibs as cl
from cudalibs.cudnn.rnn import RNN

ROWS = [("LSTM T128 B64 512->512 x2", "lstm", 128, 64, 512, 512, dict(num_layers=2)),
        ("GRU T128 B64 512->512 x2", "gru", 128, 64, 512, 512, dict(num_layers=2)),
        ("biLSTM T256 B32 1024->1024", "lstm", 256, 32, 1024, 1024,
         dict(bidirectional=True))]
ITERS, REPEATS, WARMUP = 5, 5, 2


def _fmt(ms):
    return f"{ms:.2f}" if isinstance(ms, float) else common.NA


def _torch_case(torch, mode, t, b, f, h, kw, ts):
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    m = cls(f, h, num_layers=kw.get("num_layers", 1), bidirectional=kw.get("bidirectional",
                                                                           False))
    m = m.to(device="cuda", dtype=torch.float16)
    tx = (torch.rand(t, b, f, device="cuda", dtype=torch.float16) - 0.5).requires_grad_(True)
    params = list(m.parameters())
    with torch.cuda.stream(ts):
        ty, _ = m(tx)
    tdy = torch.rand_like(ty) - 0.5
    torch.cuda.synchronize()

    def fwd():
        with torch.cuda.stream(ts):
            m(tx)

    def step():
        with torch.cuda.stream(ts):
            y, _ = m(tx)
            torch.autograd.grad(y, [tx] + params, tdy)

    return m, tx, tdy, fwd, step


def row(torch, name, mode, t, b, f, h, kw, s, ts):
    rnn = RNN(mode, f, h, dtype=np.float16, seq_len=t, batch_size=b, **kw)
    rnn.plan()
    cases, labels = [], []
    clock = common.cudalibs_clock(s)
    tm = None
    if torch is not None:
        tm, tx, tdy, tfwd, tstep = _torch_case(torch, mode, t, b, f, h, kw, ts)
        rnn.load_torch_state({k: v.detach() for k, v in tm.state_dict().items()})
        x, dy = cl.from_dlpack(tx.detach()), cl.from_dlpack(tdy)
    else:
        rng = np.random.default_rng(0)
        x = cl.to_device(rng.uniform(-0.5, 0.5, (t, b, f)).astype(np.float16))
        dy = cl.to_device(rng.uniform(-0.5, 0.5, (t, b, rnn.spec.y_size)).astype(np.float16))
    cl.Device(0).synchronize()
    hs, cs = rnn._state_shapes(b)
    out = (cl.empty((t, b, rnn.spec.y_size), np.float16, stream=s),
           cl.empty(hs, np.float16, stream=s),
           cl.empty(cs, np.float16, stream=s) if mode == "lstm" else None)
    dout = (cl.empty((t, b, f), np.float16, stream=s), cl.empty(hs, np.float16, stream=s),
            cl.empty(cs, np.float16, stream=s) if mode == "lstm" else None)
    dw = rnn.new_weights(s)
    for i, c in enumerate(rnn.candidates):
        def fwd(i=i):
            rnn.select(i)
            rnn.forward(x, training=True, out=out, stream=s)

        def step(i=i):
            rnn.select(i)
            state = rnn.forward(x, training=True, out=out, stream=s)[3]
            rnn.backward_data(state, dy, out=dout, stream=s)
            rnn.backward_weights(state, dw, stream=s)

        cases += [(fwd, clock), (step, clock)]
        labels.append(c["name"])
    if torch is not None:
        tclock = common.torch_clock(torch, ts)
        cases += [(tfwd, tclock), (tstep, tclock)]
    times = [common.median_spread(v)[0] for v in common.time_interleaved(
        cases, iters=ITERS, repeats=REPEATS, warmup=WARMUP)]
    tf, tb = (times[-2], times[-1] - times[-2]) if torch is not None else (None, None)
    rows = []
    for k, label in enumerate(labels):
        of, ob = times[2 * k], times[2 * k + 1] - times[2 * k]
        rows.append([name, label, _fmt(of), _fmt(tf), common.fmt_ratio(tf, of), _fmt(ob),
                     _fmt(tb), common.fmt_ratio(tb, ob)])
    rnn.autotune(store=False)
    tuned = rnn.algo
    refused = "; ".join(f"{k}: {v[:90]}" for k, v in rnn.refused.items()) or "none"
    rnn.close()
    return rows, tuned, refused


def main(argv=None) -> None:
    common.arg_parser(__doc__).parse_args(argv)
    common.exit_if_no_gpu("benchmarks/rnn.py")
    peer = common.load_torch()
    torch = peer.module
    dev = cl.Device(0)
    dev.set_current()
    print(f"cudalibs RNN benchmark on {dev!r}; torch: {peer.version}")
    s = cl.Stream(dev)
    ts = torch.cuda.Stream() if torch is not None else None
    if torch is not None:
        torch.backends.cudnn.benchmark = True
    table, notes = [], []
    for name, mode, t, b, f, h, kw in ROWS:
        try:
            rows, tuned, refused = row(torch, name, mode, t, b, f, h, kw, s, ts)
        except Exception as exc:  # noqa: BLE001 - one failing row still prints the others
            table.append([name, "error", str(exc).splitlines()[0][:60]] + [common.NA] * 5)
            continue
        table += rows
        notes.append(f"- {name}: autotune keeps **{tuned}**; refused: {refused}")
    print(common.markdown_table(
        ["problem (fp16)", "algorithm", "fwd ms", "torch fwd ms", "fwd ratio", "bwd ms",
         "torch bwd ms", "bwd ratio"], table, right=(2, 3, 4, 5, 6, 7)))
    print("\n".join(notes))


if __name__ == "__main__":
    main()
