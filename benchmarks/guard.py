"""Hot-path guard: the host-bound tables of two checkouts of cudalibs side by side, in one run.

::

    python benchmarks/guard.py --before /path/to/older/checkout [--rounds 2]

Measures, for each checkout in its own process, alternating between them for ``--rounds``
rounds (so host and clock drift fall on both alike), and keeps each figure's median:

- ``benchmarks/launch.py``: kernel launch overhead (plain, prepared, graph per kernel);
- ``benchmarks/gemm.py``: the 64x64 fp32 host-cost table and the strided-batched table;
- ``benchmarks/conv.py``: host time of a cuDNN convolution cache hit.

It prints one table: each figure before and after, after/before (below 1.00 is faster), and
the same ratio divided by the peer's (torch's) ratio from the same processes, which takes out
how fast the host happened to be for each process (seen to move every figure, torch's too, by
a third from one process to the next).  ``--cpu N`` pins every process to one core.  Each
checkout's own benchmark code measures it, so the figures are what that version's benchmarks
print.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _common as common  # noqa: E402

# Runs inside the checkout being measured (cwd and sys.path set to it); prints one JSON object
# {label: microseconds}.
_PROBE = r"""
import json, os, sys, subprocess, io, contextlib
if os.environ.get("GUARD_CPU"):
    # One core for every process of both checkouts: where the scheduler puts a process
    # moved the figures by a third between runs.
    os.sched_setaffinity(0, {int(os.environ["GUARD_CPU"])})
sys.path.insert(0, "benchmarks")
import _common as common
import cudalibs as cl

def table_rows(text):
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append(cells)
    return rows[1:]   # the first row is the header

def num(cell):
    try:
        return float(cell.replace("×", "").replace("x", ""))
    except ValueError:
        return None

out = {}
torch = common.load_torch().module
cupy = common.load_cupy().module

# 1. launch.py, as its own process (it prints a table).
p = subprocess.run([sys.executable, "benchmarks/launch.py"], capture_output=True, text=True)
for cells in table_rows(p.stdout):
    if len(cells) >= 3 and cells[0] in ("2 args", "8 args", "graph, per kernel"):
        for col, name in ((1, "plain"), (2, "prepared")):
            v = num(cells[col])
            if v is not None:
                out[f"launch {cells[0]}, {name}"] = v

# 2. gemm.py: the 64x64 host-cost table and the strided-batched table.
import gemm
for cells in table_rows(gemm.host_cost(torch, cupy)):
    v = num(cells[1])
    if v is not None:
        out[f"gemm 64x64: {cells[0]}"] = v
    if cells[0].startswith("cublas.gemm(a, b)") and num(cells[2]) is not None:
        out["gemm 64x64: torch.matmul"] = num(cells[2])
for cells in table_rows(gemm.batched(torch, cupy)):
    v = num(cells[1])
    if v is not None:
        out[f"strided-batched: {cells[0]}"] = v
    if cells[0] == "gemm_strided_batched(a, b)" and num(cells[2]) is not None:
        out["strided-batched: torch.bmm"] = num(cells[2])

# 3. conv.py: host time of a convolution cache hit.
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
print("GUARD-JSON " + json.dumps(out))
"""


#: The peer figure measured in the same process, per table, that normalises its rows.
_REFERENCE = {
    "gemm 64x64": "gemm 64x64: torch.matmul",
    "strided-batched": "strided-batched: torch.bmm",
    "conv cache hit (graph)": "conv cache hit: torch F.conv2d",
    "conv cache hit (legacy)": "conv cache hit: torch F.conv2d",
}


def _measure(tree: Path, cpu=None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONUNBUFFERED="1")
    if cpu is not None:
        env["GUARD_CPU"] = str(cpu)
    p = subprocess.run([sys.executable, "-c", _PROBE], cwd=tree, env=env, capture_output=True,
                       text=True)
    for line in p.stdout.splitlines():
        if line.startswith("GUARD-JSON "):
            return json.loads(line[len("GUARD-JSON "):])
    raise RuntimeError(f"measuring {tree} failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n"
                       f"{p.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the older checkout")
    ap.add_argument("--after", default=str(HERE.parent), help="the newer checkout (this one)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="also write every sample here")
    ap.add_argument("--cpu", type=int, default=None,
                    help="pin every measuring process to this core")
    args = ap.parse_args()
    common.exit_if_no_gpu("benchmarks/guard.py")
    trees = {"before": Path(args.before).resolve(), "after": Path(args.after).resolve()}
    samples: dict = {"before": {}, "after": {}}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for name in order:
            for k, v in _measure(trees[name], args.cpu).items():
                samples[name].setdefault(k, []).append(v)
    if args.json:
        Path(args.json).write_text(json.dumps(samples, indent=1))
    labels = list(dict.fromkeys([*samples["before"], *samples["after"]]))
    med = {n: {k: statistics.median(v) for k, v in samples[n].items() if v} for n in samples}
    rows = []
    for k in labels:
        bm, am = med["before"].get(k), med["after"].get(k)
        ratio = f"{am / bm:.3f}" if bm and am else common.NA
        # The same ratio with the host's speed taken out: divided by what the peer measured in
        # the same processes (torch's call of that table), where the table has one.
        ref = _REFERENCE.get(k.split(":")[0])
        rb, ra = (med["before"].get(ref), med["after"].get(ref)) if ref else (None, None)
        norm = (f"{(am / bm) / (ra / rb):.3f}" if bm and am and rb and ra and k != ref
                else common.NA)
        rows.append([k, common.NA if bm is None else f"{bm:.2f}",
                     common.NA if am is None else f"{am:.2f}", ratio, norm])
    print(f"# Hot-path guard: median of {args.rounds} alternating rounds; µs per call\n")
    print(common.markdown_table(["figure", "before µs", "after µs", "after/before",
                                 "after/before vs torch"], rows, right={1, 2, 3, 4}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
