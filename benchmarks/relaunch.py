"""Recorded relaunches of cuDNN calls beside the same calls with relaunch off.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/relaunch.py [--quick]

What is measured
----------------
From the second call of a call shape on, cudalibs launches the kernels it recorded from the
library call again with the call's operand addresses (a relaunch) instead of calling
``cudnnBackendExecute``; inside ``cl.option_context(relaunch=False)`` every call is the
library call.  Both settings run the same cached plan (the option is no part of a plan's key),
so what differs is the call path alone.  The cases, bfloat16:

``sdpa fwd``  attention forward, causal: ``SdpaPlan.execute(q, k, v, out=o)`` (inference),
              the training forward ``execute(q, k, v, out=o, stats=st)``, and the one-shot
              ``cudnn.sdpa(q, k, v, causal=True, out=o)`` (a plan-cache lookup per call);
              b1 h8 s128 d64 (host-bound) and b4 h16 s1024 d128;
``ln fwd``    ``cudnn.layer_norm(x, w, b, out=y)`` (inference) and with ``training=True,
              out=(y, mean, inv_std)``; 256 x 1024 (host-bound) and 16384 x 4096.

Two figures per case and setting; the two settings alternate loop by loop (on, off, off, on,
...), so a drift of the host's or the GPU's clocks hits both alike:

- host µs per call: wall time of ``CALLS`` back-to-back calls, the stream synchronised
  between rounds outside the timed region; the median of ``ROUNDS`` rounds;
- stream µs per call: CUDA events around ``ITERS`` back-to-back calls on the call's stream
  (as ``benchmarks/_common.py`` times), the median of ``REPEATS``: the GPU time, or the host
  time where the host cannot keep the GPU busy.

``off/on`` is the time with relaunch off over the time with it on: above 1 the relaunch is
faster.  The last column says what the case's plan holds after the run: ``recorded`` when its
call shape relaunches, else why not (a refused recording means both settings made the library
call, and the ratio is noise).  Timings are printed, never asserted.  Without a GPU the script
prints one line and exits with status 0.
"""

from __future__ import annotations

import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.relaunch
    from . import _common as common

import cudalibs as cl
from cudalibs import cudnn
from cudalibs.cudnn import attention as attn
# The module of the layer norm plans: its one-shot and the plan cache's entries of its kind.
from cudalibs.cudnn.norm import layer as LN

CALLS, ROUNDS = 50, 15            # host figure: calls per round, rounds
ITERS, REPEATS, WARMUP = 50, 7, 5  # stream figure: calls per loop, loops; untimed calls first
#: (label, relaunch option): "on" is asked for explicitly, so CUDALIBS_RELAUNCH=0 in the
#: environment cannot turn both columns into the library call.
SETTINGS = (("on", True), ("off", False))
SDPA_SHAPES = ((1, 8, 128, 64), (4, 16, 1024, 128))   # (b, h, s, d)
LN_SHAPES = ((256, 1024), (16384, 4096))             # (rows, features)
BF16 = cl.dtypes.bfloat16


class Case:
    """One call to time: ``fn()`` queues it on ``stream``; ``plan()`` finds the plan it ran
    (after the first calls), for the relaunch column."""

    def __init__(self, op, problem, call, fn, plan, keep):
        self.op, self.problem, self.call = op, problem, call
        self.fn, self.plan, self.keep = fn, plan, keep


def _rand(shape, rng, stream, scale=0.5, shift=0.0):
    host = (rng.standard_normal(shape, np.float32) * scale + shift).astype(BF16)
    return cl.to_device(host, stream=stream)


def sdpa_cases(s, shapes) -> list:
    out = []
    for b, h, sq, d in shapes:
        rng = np.random.default_rng(0)
        q, k, v = (_rand((b, h, sq, d), rng, s) for _ in range(3))
        o = cl.empty(q.shape, BF16, stream=s)
        st = cl.empty((b, h, sq, 1), np.float32, stream=s)
        problem = f"b{b} h{h} s{sq} d{d} causal"
        keep = (q, k, v, o, st)
        infer = attn.SdpaPlan(q, k, v, causal=True)
        train = attn.SdpaPlan(q, k, v, causal=True, training=True)

        def oneshot_plan(q=q):
            found = [e.plan for e in cl.plan_cache.entries(attn.SDPA_KEY.name)
                     if e.key["q_shape"] == q.shape and not e.key["training"]]
            return found[-1] if found else None

        out += [
            Case("sdpa fwd", problem, "SdpaPlan.execute(out=o)",
                 lambda p=infer, q=q, k=k, v=v, o=o: p.execute(q, k, v, out=o, stream=s),
                 lambda p=infer: p, keep),
            Case("sdpa fwd", problem, "SdpaPlan.execute(out=o, stats=st), training",
                 lambda p=train, q=q, k=k, v=v, o=o, st=st: p.execute(q, k, v, out=o, stats=st,
                                                                      stream=s),
                 lambda p=train: p, keep),
            Case("sdpa fwd", problem, "cudnn.sdpa(causal=True, out=o)",
                 lambda q=q, k=k, v=v, o=o: attn.sdpa(q, k, v, causal=True, out=o, stream=s),
                 oneshot_plan, keep),
        ]
    return out


def ln_cases(s, shapes) -> list:
    out = []
    for rows, feats in shapes:
        rng = np.random.default_rng(1)
        x = _rand((rows, feats), rng, s)
        w = _rand((feats,), rng, s, 0.25, 1.0)
        b = _rand((feats,), rng, s)
        y = cl.empty((rows, feats), BF16, stream=s)
        mean = cl.empty((rows, 1), np.float32, stream=s)
        inv = cl.empty((rows, 1), np.float32, stream=s)
        problem = f"{rows} x {feats}"
        keep = (x, w, b, y, mean, inv)

        def plan_of(training, x=x):
            found = [e.plan for e in LN.norm_cache()
                     if e.kind == LN.NORM_FORWARD_KEY.name and e.key["mode"] == "layer"
                     and e.key["x_shape"] == x.shape and bool(e.key["training"]) == training]
            return found[-1] if found else None

        out += [
            Case("ln fwd", problem, "cudnn.layer_norm(x, w, b, out=y)",
                 lambda x=x, w=w, b=b, y=y: cudnn.layer_norm(x, w, b, out=y, stream=s),
                 lambda f=plan_of: f(False), keep),
            Case("ln fwd", problem, "cudnn.layer_norm(training=True, out=(y, mean, inv))",
                 lambda x=x, w=w, b=b, y=y, m=mean, r=inv: cudnn.layer_norm(
                     x, w, b, training=True, out=(y, m, r), stream=s),
                 lambda f=plan_of: f(True), keep),
        ]
    return out


def _relaunch_text(plan) -> str:
    """``recorded``, or why the plan's call shape does not relaunch."""
    if plan is None:
        return "plan not found"
    r = plan.relaunch_info()
    if r["recorded"]:
        return "recorded" + (f" (+{r['refused'] + r['failed']} refused)"
                             if r["refused"] or r["failed"] else "")
    why = "; ".join(str(k)[:80] for k in r["reasons"])
    if r["failed"] or r["refused"]:
        return f"REFUSED: {why}"
    return "not recorded (pending)" if r["pending"] else "not recorded"


def measure(case: Case, clock: common.Clock, s: cl.Stream) -> dict:
    """``{setting: (host µs, stream µs)}`` of one case, the settings alternating."""
    for _, on in SETTINGS:
        with cl.option_context(relaunch=on):
            for _ in range(WARMUP):      # the second call of the shape records it
                case.fn()
        s.sync()
    host = {name: [] for name, _ in SETTINGS}
    stream = {name: [] for name, _ in SETTINGS}
    for r in range(ROUNDS):
        for name, on in (SETTINGS if r % 2 == 0 else SETTINGS[::-1]):
            with cl.option_context(relaunch=on):
                t0 = time.perf_counter()
                for _ in range(CALLS):
                    case.fn()
                host[name].append((time.perf_counter() - t0) / CALLS * 1e6)
            s.sync()
    events = {name: (clock.event(), clock.event()) for name, _ in SETTINGS}
    for r in range(REPEATS):
        for name, on in (SETTINGS if r % 2 == 0 else SETTINGS[::-1]):
            start, end = events[name]
            with cl.option_context(relaunch=on):
                clock.record(start)
                for _ in range(ITERS):
                    case.fn()
                clock.record(end)
            stream[name].append(clock.elapsed_ms(start, end) / ITERS * 1e3)
    return {name: (statistics.median(host[name]), statistics.median(stream[name]))
            for name, _ in SETTINGS}


def _fmt(v) -> str:
    if not isinstance(v, float):
        return common.NA
    return f"{v:.1f}" if v < 1000 else f"{v:.0f}"


def main(argv=None) -> int:
    global ROUNDS, REPEATS
    ap = common.arg_parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer timed rounds and loops")
    ap.add_argument("--only", choices=("sdpa", "ln"), help="one op family only (None: both)")
    args = ap.parse_args(argv)
    if args.quick:
        ROUNDS, REPEATS = 5, 3
    common.exit_if_no_gpu("benchmarks/relaunch.py")
    dev = cl.Device(0)
    s = cl.Stream(dev)
    clock = common.cudalibs_clock(s)
    print("## Recorded relaunches of cuDNN calls vs relaunch off\n")
    print(f"- device: {dev.name} ({dev.arch}); cuDNN "
          f"{'.'.join(map(str, cudnn.version()))} via cudalibs {cl.__version__}")
    print(f"- host: median of {ROUNDS} rounds of {CALLS} calls; stream: median of {REPEATS} "
          f"loops of {ITERS} calls between CUDA events; off/on > 1: the relaunch is faster\n")
    t0 = time.perf_counter()
    builders = []
    if args.only in (None, "sdpa"):
        builders.append(("sdpa fwd", lambda: sdpa_cases(s, SDPA_SHAPES)))
    if args.only in (None, "ln"):
        builders.append(("ln fwd", lambda: ln_cases(s, LN_SHAPES)))
    rows = []
    for op, build in builders:
        try:
            cases = build()
        except Exception as exc:  # noqa: BLE001 - one op family failing must not hide the other
            traceback.print_exc()
            rows.append([op, "", f"error: {type(exc).__name__}: {str(exc)[:100]}"] +
                        [common.NA] * 7)
            continue
        for case in cases:
            try:
                res = measure(case, clock, s)
                state = _relaunch_text(case.plan())
            except Exception as exc:  # noqa: BLE001 - report the case and go on
                traceback.print_exc()
                rows.append([case.op, case.problem, case.call] + [common.NA] * 6 +
                            [f"error: {type(exc).__name__}: {str(exc)[:100]}"])
                continue
            (h_on, g_on), (h_off, g_off) = res["on"], res["off"]
            rows.append([case.op, case.problem, case.call, _fmt(h_on), _fmt(h_off),
                         common.fmt_ratio(h_off, h_on), _fmt(g_on), _fmt(g_off),
                         common.fmt_ratio(g_off, g_on), state])
            print(f"  {' | '.join(rows[-1])} ({time.perf_counter() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
        s.sync()
        for case in cases:
            for a in case.keep:
                if not a.closed:
                    a.close()
    print(common.markdown_table(
        ["op", "problem", "call", "host µs on", "host µs off", "host off/on", "stream µs on",
         "stream µs off", "stream off/on", "relaunch"], rows, right={3, 4, 5, 6, 7, 8}))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    s.sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
