"""Hot-path guard: the host-bound tables of two checkouts of cudalibs side by side, in one run.

::

    python benchmarks/guard.py --before /path/to/older/checkout [--rounds 2]

Measures, for each checkout in its own process, alternating between them for ``--rounds``
rounds (so host and clock drift fall on both alike), and keeps each figure's median:

- ``benchmarks/launch.py``: kernel launch overhead (plain, prepared, graph per kernel);
- ``benchmarks/gemm.py``: the 64x64 fp32 host-cost table and the strided-batched table;
- ``benchmarks/conv.py``: host time of a cuDNN convolution cache hit;
- host time of ``SdpaPlan.execute(q, k, v, out=o)`` on a plan made once and called again
  (bfloat16, causal, b1 h4 s128 d64), beside torch's ``F.scaled_dot_product_attention`` on
  the same problem;
- ``benchmarks/train_step.py``: its table, µs per training step (``--train-step-args`` are
  passed to it; ``--no-train-step`` leaves it out).

It prints one table: each figure before and after, after/before (below 1.00 is faster), and
the same ratio divided by the peer's (torch's) ratio from the same processes, which takes out
how fast the host happened to be for each process (seen to move every figure, torch's too, by
a third from one process to the next).  A figure a checkout could not give has a row saying
why.  ``--cpu N`` pins every process to one core.  Each checkout's own benchmark code
measures it, so the figures are what that version's benchmarks print; the attention figure is
measured by this script's probe in both, through whichever module layout the checkout has.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# This checkout's cudalibs (for the GPU check) and the shared benchmark plumbing; the
# measuring processes import each checkout's own.
sys.path[:0] = [str(HERE.parent), str(HERE)]
import _common as common  # noqa: E402

# Runs inside the checkout being measured (cwd and sys.path set to it); prints one JSON object
# {"figures": {label: microseconds}, "notes": {section: why it gave no figure}}.  It must run
# against every layout of cudalibs it may meet: a library module whose place differs between
# layouts is imported through first_import (the newer path first); cudalibs itself and the
# checkout's own benchmark modules are where every layout has them.
_PROBE = r"""
import importlib, json, os, shlex, statistics, subprocess, sys, time, traceback
if os.environ.get("GUARD_CPU"):
    # One core for every process of both checkouts: where the scheduler puts a process
    # moved the figures by a third between runs.
    os.sched_setaffinity(0, {int(os.environ["GUARD_CPU"])})
sys.path.insert(0, "benchmarks")
import _common as common
import cudalibs as cl

def first_import(*paths):
    # "module" or "module:attribute": the first of paths that imports.
    errors = []
    for path in paths:
        mod, _, attr = path.partition(":")
        try:
            m = importlib.import_module(mod)
            return getattr(m, attr) if attr else m
        except (ImportError, AttributeError) as exc:
            errors.append(f"{path}: {exc}")
    raise ImportError("; ".join(errors))

def table_rows(text):
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append(cells)
    return rows

def num(cell):
    try:
        return float(cell.replace("×", "").replace("x", ""))
    except ValueError:
        return None

def last_line(text):
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return lines[-1][:200] if lines else "no output"

def host_us(fn, sync, calls=200, rounds=15):
    # Wall time of back-to-back calls, the stream synchronised between rounds; the median.
    for _ in range(50):
        fn()
    sync()
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls * 1e6)
        sync()
    return statistics.median(per)

out, notes = {}, {}
torch = common.load_torch().module
cupy = common.load_cupy().module

def section(name, body):
    # One section failing (an API this checkout lacks, a missing peer) leaves the others.
    try:
        why = body()
    except Exception as exc:
        traceback.print_exc()
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    if why:
        notes[name] = why

# 1. launch.py, as its own process (it prints a table).
def launch():
    p = subprocess.run([sys.executable, "benchmarks/launch.py"], capture_output=True, text=True,
                       timeout=600)
    got = 0
    for cells in table_rows(p.stdout)[1:]:
        if len(cells) >= 3 and cells[0] in ("2 args", "8 args", "graph, per kernel"):
            for col, name in ((1, "plain"), (2, "prepared")):
                v = num(cells[col])
                if v is not None:
                    out[f"launch {cells[0]}, {name}"] = v
                    got += 1
    return None if got else f"no table (exit {p.returncode}): {last_line(p.stderr or p.stdout)}"
section("launch", launch)

# 2. gemm.py: the 64x64 host-cost table and the strided-batched table.
def gemm():
    import gemm
    for cells in table_rows(gemm.host_cost(torch, cupy))[1:]:
        v = num(cells[1])
        if v is not None:
            out[f"gemm 64x64: {cells[0]}"] = v
        if cells[0].startswith("cublas.gemm(a, b)") and num(cells[2]) is not None:
            out["gemm 64x64: torch.matmul"] = num(cells[2])
    for cells in table_rows(gemm.batched(torch, cupy))[1:]:
        v = num(cells[1])
        if v is not None:
            out[f"strided-batched: {cells[0]}"] = v
        if cells[0] == "gemm_strided_batched(a, b)" and num(cells[2]) is not None:
            out["strided-batched: torch.bmm"] = num(cells[2])
section("gemm", gemm)

# 3. conv.py: host time of a convolution cache hit.
def conv():
    import conv
    s = cl.Stream()
    graph, legacy, theirs = conv.host_overhead(torch, s)
    for tag, res in (("graph", graph), ("legacy", legacy)):
        out[f"conv cache hit ({tag}): conv_forward(out=y)"] = res[0]
        out[f"conv cache hit ({tag}): conv_forward allocating"] = res[1]
        out[f"conv cache hit ({tag}): bare library call"] = res[2]
        out[f"conv cache hit ({tag}): added by cudalibs"] = res[0] - res[2]
    if theirs is not None:
        out["conv cache hit: torch F.conv2d"] = theirs
section("conv", conv)

# 4. SdpaPlan.execute on a plan made once: the host time of the attention hot path.
def sdpa():
    import numpy as np
    SdpaPlan = first_import("cudalibs.cudnn.attention.sdpa:SdpaPlan",   # one package per op
                            "cudalibs.cudnn.attention:SdpaPlan")        # one module
    bf16 = cl.dtypes.bfloat16
    s = cl.Stream()
    rng = np.random.default_rng(4)
    shape = (1, 4, 128, 64)
    q, k, v = (cl.to_device((rng.standard_normal(shape, np.float32) * 0.5).astype(bf16),
                            stream=s) for _ in range(3))
    o = cl.empty(shape, bf16, stream=s)
    plan = SdpaPlan(q, k, v, causal=True)
    plan.execute(q, k, v, out=o, stream=s)
    out["sdpa b1 h4 s128 d64 causal: SdpaPlan.execute(out=o)"] = host_us(
        lambda: plan.execute(q, k, v, out=o, stream=s), s.sync)
    if torch is not None:
        s.sync()
        tq, tk, tv = (torch.from_dlpack(a) for a in (q, k, v))
        ts = torch.cuda.Stream()
        F = torch.nn.functional
        with torch.cuda.stream(ts):
            out["sdpa b1 h4 s128 d64 causal: torch F.scaled_dot_product_attention"] = host_us(
                lambda: F.scaled_dot_product_attention(tq, tk, tv, is_causal=True),
                ts.synchronize)
    s.sync()
section("sdpa", sdpa)

# 5. train_step.py, as its own process: ms per step, kept as µs.
def train_step():
    if os.environ.get("GUARD_TRAIN_STEP") == "skip":
        return "skipped (--no-train-step)"
    args = shlex.split(os.environ.get("GUARD_TRAIN_STEP", ""))
    p = subprocess.run([sys.executable, "benchmarks/train_step.py", *args],
                       capture_output=True, text=True, timeout=1800)
    rows = table_rows(p.stdout)
    if len(rows) < 2:
        return f"no table (exit {p.returncode}): {last_line(p.stderr or p.stdout)}"
    head = rows[0]
    for cells in rows[1:]:
        for i in range(3, min(7, len(cells))):
            v = num(cells[i])
            if v is not None:
                out[f"train_step {cells[0]} {cells[1]}: {head[i]}"] = v * 1e3
section("train_step", train_step)

print("GUARD-JSON " + json.dumps({"figures": out, "notes": notes}))
"""


#: The peer figure measured in the same process, per table, that normalises its rows.
_REFERENCE = {
    "gemm 64x64": "gemm 64x64: torch.matmul",
    "strided-batched": "strided-batched: torch.bmm",
    "conv cache hit (graph)": "conv cache hit: torch F.conv2d",
    "conv cache hit (legacy)": "conv cache hit: torch F.conv2d",
    "sdpa b1 h4 s128 d64 causal":
        "sdpa b1 h4 s128 d64 causal: torch F.scaled_dot_product_attention",
}


def _reference(label: str):
    table = label.split(":")[0]
    if table.startswith("train_step "):
        return f"{table}: torch eager"     # train_step.py's torch eager step, same process
    return _REFERENCE.get(table)


def _measure(tree: Path, cpu=None, train_step=None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
    if cpu is not None:
        env["GUARD_CPU"] = str(cpu)
    env["GUARD_TRAIN_STEP"] = "skip" if train_step is None else train_step
    p = subprocess.run([sys.executable, "-c", _PROBE], cwd=tree, env=env, capture_output=True,
                       text=True)
    for line in p.stdout.splitlines():
        if line.startswith("GUARD-JSON "):
            return json.loads(line[len("GUARD-JSON "):])
    raise RuntimeError(f"measuring {tree} failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n"
                       f"{p.stderr[-3000:]}")


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__)
    ap.add_argument("--before", required=True, help="the older checkout")
    ap.add_argument("--after", default=str(HERE.parent), help="the newer checkout (this one)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="alternating rounds per checkout; the median is shown")
    ap.add_argument("--json", help="also write every sample here")
    ap.add_argument("--cpu", type=int, default=None,
                    help="pin every measuring process to this core (None: no pinning)")
    ap.add_argument("--train-step-args", default="",
                    help="arguments for each checkout's benchmarks/train_step.py "
                         "(e.g. \"--iters 20 --repeats 3\")")
    ap.add_argument("--no-train-step", action="store_true",
                    help="leave benchmarks/train_step.py out (it takes minutes per process)")
    args = ap.parse_args(argv)
    common.exit_if_no_gpu("benchmarks/guard.py")
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    train_step = None if args.no_train_step else shlex.join(shlex.split(args.train_step_args))
    samples: dict = {"before": {}, "after": {}}
    notes: dict = {"before": {}, "after": {}}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for name in order:
            got = _measure(trees[name], args.cpu, train_step)
            for k, v in got["figures"].items():
                samples[name].setdefault(k, []).append(v)
            for k, why in got["notes"].items():
                notes[name].setdefault(k, []).append(why)
    if args.json:
        Path(args.json).write_text(json.dumps({"samples": samples, "notes": notes}, indent=1))
    labels = list(dict.fromkeys([*samples["before"], *samples["after"]]))
    med = {n: {k: statistics.median(v) for k, v in samples[n].items() if v} for n in samples}
    rows = []
    for k in labels:
        bm, am = med["before"].get(k), med["after"].get(k)
        ratio = f"{am / bm:.3f}" if bm and am else common.NA
        # The same ratio with the host's speed taken out: divided by what the peer measured in
        # the same processes (torch's call of that table), where the table has one.
        ref = _reference(k)
        rb, ra = (med["before"].get(ref), med["after"].get(ref)) if ref else (None, None)
        norm = (f"{(am / bm) / (ra / rb):.3f}" if bm and am and rb and ra and k != ref
                else common.NA)
        rows.append([k, common.NA if bm is None else f"{bm:.2f}",
                     common.NA if am is None else f"{am:.2f}", ratio, norm])
    # A section that gave no figure in some process: why, per checkout (the last reason).
    for section in dict.fromkeys([*notes["before"], *notes["after"]]):
        cells = []
        for name in ("before", "after"):
            whys = notes[name].get(section)
            cells.append(f"{len(whys)}/{args.rounds}: {whys[-1]}" if whys else "ok")
        rows.append([f"{section}: not measured", *cells, common.NA, common.NA])
    print(f"# Hot-path guard: median of {args.rounds} alternating rounds; µs per call "
          "(train_step rows: µs per training step)\n")
    print(common.markdown_table(["figure", "before µs", "after µs", "after/before",
                                 "after/before vs torch"], rows, right={1, 2, 3, 4}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
