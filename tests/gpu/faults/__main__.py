"""Run the fault catalog against the GPU tests: ``python -m tests.gpu.faults``.

For each fault, ``python -m pytest <its targets> -p tests.gpu.faults.plugin
--fault-stop-on-catch`` runs in a subprocess with ``CUDALIBS_FAULT=<name>`` and
``CUDALIBS_REQUIRE_GPU=1``, several at once.  A fault is

- **caught** when a test fails by an assertion (see :func:`tests.gpu.faults.plugin.failure_kind`);
- **missed** when every test passes;
- **exception only** when tests fail, but only by exceptions the fault raised (the bug made
  the code crash, which no test needed to notice);
- **not run** when the tests failed only for want of something in the environment (a skip
  that ``CUDALIBS_REQUIRE_GPU=1`` turns into a failure, a missing oracle);
- **broken** when the session could not run its tests (the fault does not install, a
  collection error, no tests collected);
- **timeout** when it ran past ``--timeout``.

Control runs -- the same tests, ``CUDALIBS_FAULT=none`` -- must pass, else the table means
nothing: one per test file, over every test of that file that some fault targets.

The summary goes to stdout and, with ``--out``, a markdown table to a file.  The exit status is
0 only when every fault selected is caught and every control passes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import catalog
from .plugin import CONTROL, FAULT_VARIABLE, REPORT_VARIABLE

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = "tests.gpu.faults.plugin"
#: The hypothesis seed of every run: a run is reproducible, control and fault draw alike.
HYPOTHESIS_SEED = 20240601
#: Failing tests listed in the table per fault before "and N more".
SHOWN = 3
#: Rough cost of a test file's targets, for starting the longest runs first (the cuDNN
#: engines of attention, norms and fused convolutions are compiled at run time).
COST = {"test_attention.py": 6, "test_layer_norm.py": 6, "cudnn/test_graph.py": 5,
        "test_conv.py": 4, "test_bite_causal.py": 4, "test_bite_dropout_offsets.py": 3,
        "test_rnn.py": 3, "test_ops.py": 3, "test_gemm.py": 2, "test_lt.py": 2}


@dataclass
class Job:
    """One pytest subprocess: a fault's targets with the fault, or a control run."""

    name: str                    # the fault's name, or "control: <file>"
    fault: str                   # what CUDALIBS_FAULT is set to
    targets: tuple
    control: bool
    status: str = "pending"
    caught_by: list = field(default_factory=list)
    detail: str = ""
    seconds: float = 0.0
    output_tail: str = ""


def control_targets(faults) -> dict[str, tuple]:
    """``{test file: targets}``: per file, every target of ``faults`` in it, or the file
    itself when one of them names the whole file."""
    per_file: dict[str, set] = {}
    for f in faults:
        for t in f.targets:
            file = t.split("::", 1)[0]
            per_file.setdefault(file, set()).add(t)
    out = {}
    for file, targets in sorted(per_file.items()):
        out[file] = (file,) if file in targets else tuple(sorted(targets))
    return out


def cost(job: Job) -> float:
    """How long ``job`` may take, relatively: a control runs all its tests, a fault usually
    stops at the first that catches it."""
    files = {t.split("::", 1)[0] for t in job.targets}
    weight = sum(next((c for k, c in COST.items() if f.endswith(k)), 1) for f in files)
    return weight * (2 if job.control else 1)


def _command(job: Job, keep_going: bool) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", *job.targets, "-q", "-p", PLUGIN,
           "-p", "no:cacheprovider", f"--hypothesis-seed={HYPOTHESIS_SEED}",
           "--rootdir", str(ROOT)]
    if not job.control and not keep_going:
        cmd.append("--fault-stop-on-catch")
    return cmd


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_job(job: Job, timeout: float, keep_going: bool) -> Job:
    """Run ``job`` in a subprocess and set its status from the plugin's report."""
    with tempfile.TemporaryDirectory(prefix="cudalibs-fault-") as tmp:
        report = Path(tmp) / "report.json"
        env = dict(os.environ)
        env.update({FAULT_VARIABLE: job.fault, REPORT_VARIABLE: str(report),
                    "CUDALIBS_REQUIRE_GPU": "1", "PYTHONDONTWRITEBYTECODE": "1"})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        start = time.monotonic()
        try:
            proc = subprocess.run(_command(job, keep_going), cwd=ROOT, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  timeout=timeout)
            output, returncode = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as exc:
            output = exc.stdout if isinstance(exc.stdout, str) else (
                (exc.stdout or b"").decode(errors="replace"))
            returncode = None
        job.seconds = time.monotonic() - start
        job.output_tail = _tail(output or "")
        data = json.loads(report.read_text()) if report.exists() else None
    _judge(job, data, returncode, timeout)
    return job


def _judge(job: Job, data, returncode, timeout) -> None:
    """The job's status from the plugin's report and pytest's exit status (None: killed
    at the timeout)."""
    if returncode is None:
        job.status, job.detail = "timeout", f"still running after {timeout:.0f} s"
    elif data is None:
        job.status, job.detail = "broken", f"no report (pytest exit status {returncode})"
    if data is None:
        return
    failures, errors = data["failures"], data["collection_errors"]
    kinds = sorted({f["kind"] for f in failures})
    ran = sum(n for k, n in data["counts"].items() if k.startswith("call:"))
    if job.control:
        job.caught_by = [f["nodeid"] for f in failures]
        if returncode is None:
            return
        if returncode == 0 and not failures and not errors and ran:
            job.status, job.detail = "pass", f"{ran} tests"
        else:
            job.status = "fail"
            job.detail = "; ".join(kinds) or ("collection error" if errors else
                                              f"pytest exit status {returncode}, {ran} tests")
        return
    job.caught_by = [f["nodeid"] for f in failures if f["kind"] == "assertion"]
    others = ", ".join(k for k in kinds if k != "assertion")
    if errors:
        job.status = "broken"
        job.detail = "collection error: " + errors[0]["message"][-300:]
    elif job.caught_by:
        job.status, job.detail = "caught", others
    elif returncode is None:
        return                              # timed out before anything was caught
    elif failures and kinds == ["environment"]:
        job.status, job.detail = "not run", "the tests failed for want of something"
    elif failures:
        job.status, job.detail = "exception only", others
    elif not ran:
        job.status, job.detail = "broken", f"no test ran (pytest exit status {returncode})"
    else:
        job.status, job.detail = "missed", f"{ran} tests passed"


def _short(nodeid: str) -> str:
    return nodeid.removeprefix("tests/gpu/")


def caught_cell(nodeids: list) -> str:
    """At most :data:`SHOWN` test names, shortened, and how many more."""
    shown = [_short(n) for n in nodeids[:SHOWN]]
    more = len(nodeids) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(faults: list[Job], controls: list[Job], wall: float, jobs: int) -> str:
    """The run as markdown: the faults' table, the controls' table, details of the rest."""
    lib = {f.name: f.library for f in catalog.FAULTS}
    desc = {f.name: f.description for f in catalog.FAULTS}
    lines = ["# Fault-injection run of the GPU tests", "",
             summary(faults, controls, wall, jobs), "",
             "| fault | library | description | caught by | status |",
             "|---|---|---|---|---|"]
    for j in faults:
        status = j.status + (f" ({j.detail})" if j.detail and j.status != "caught" else "")
        lines.append(f"| {j.name} | {lib[j.name]} | {_cell(desc[j.name])} | "
                     f"{_cell(caught_cell(j.caught_by))} | {_cell(status)} |")
    if controls:
        lines += ["", "## Control runs (no fault)", "", "| tests | status | seconds |",
                  "|---|---|---|"]
        for j in controls:
            what = ", ".join(_short(t) for t in j.targets)
            status = j.status + (f" ({j.detail})" if j.detail else "")
            lines.append(f"| {_cell(what)} | {_cell(status)} | {j.seconds:.0f} |")
    bad = [j for j in controls if j.status != "pass"] + \
        [j for j in faults if j.status != "caught"]
    if bad:
        lines += ["", "## Not caught, broken or failing: the end of their output", ""]
        for j in bad:
            lines += [f"### {j.name} ({j.status})", "", "```", j.output_tail, "```", ""]
    return "\n".join(lines) + "\n"


def summary(faults: list[Job], controls: list[Job], wall: float, jobs: int) -> str:
    counts: dict[str, int] = {}
    for j in faults:
        counts[j.status] = counts.get(j.status, 0) + 1
    parts = [f"{n} {s}" for s, n in sorted(counts.items())]
    passed = sum(j.status == "pass" for j in controls)
    ctl = f"controls: {passed}/{len(controls)} pass" if controls else "controls: not run"
    return (f"{len(faults)} faults: {', '.join(parts) or 'none'}; {ctl}; "
            f"{wall:.0f} s wall with {jobs} jobs.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.gpu.faults",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=4,
                        help="pytest processes at once (default 4)")
    parser.add_argument("--only", nargs="+", action="extend", metavar="NAME", default=[],
                        help="run these faults only")
    parser.add_argument("--out", metavar="FILE.md", help="write the markdown table there")
    parser.add_argument("--list", action="store_true", help="list the faults and exit")
    parser.add_argument("--timeout", type=float, default=420.0,
                        help="seconds per pytest process (default 420)")
    parser.add_argument("--no-control", action="store_true",
                        help="skip the control runs (the table then proves less)")
    parser.add_argument("--keep-going", action="store_true",
                        help="run every target of a fault, not only up to the first catch")
    args = parser.parse_args(argv)

    if args.list:
        for f in catalog.FAULTS:
            print(f"{f.name}  [{f.library}]  {f.description}")
            for t in f.targets:
                print(f"    {t}")
        print(f"{len(catalog.FAULTS)} faults")
        return 0
    selected = list(catalog.FAULTS)
    if args.only:
        try:
            selected = [catalog.get(n) for n in args.only]
        except KeyError as exc:
            parser.error(exc.args[0])
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")

    controls = [] if args.no_control else [
        Job(f"control: {_short(file)}", CONTROL, targets, True)
        for file, targets in control_targets(selected).items()]
    faults = [Job(f.name, f.name, tuple(f.targets), False) for f in selected]
    todo = sorted(controls + faults, key=cost, reverse=True)     # the longest first
    print(f"{len(faults)} faults, {len(controls)} control runs, {args.jobs} at once "
          f"(timeout {args.timeout:.0f} s each)", flush=True)
    start = time.monotonic()
    lock, done = threading.Lock(), [0]

    def one(job: Job) -> Job:
        run_job(job, args.timeout, args.keep_going)
        with lock:
            done[0] += 1
            extra = f": {caught_cell(job.caught_by)}" if job.caught_by else (
                f": {job.detail}" if job.detail else "")
            print(f"[{done[0]}/{len(todo)}] {job.name}: {job.status} ({job.seconds:.0f} s)"
                  f"{extra}", flush=True)
        return job

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, todo))
    wall = time.monotonic() - start
    text = markdown(faults, controls, wall, args.jobs)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    print()
    print(summary(faults, controls, wall, args.jobs))
    for j in faults:
        if j.status != "caught":
            print(f"  not caught: {j.name}: {j.status} {j.detail}")
    for j in controls:
        if j.status != "pass":
            print(f"  control failing: {j.name}: {j.status} {j.detail}")
    ok = all(j.status == "caught" for j in faults) and all(j.status == "pass" for j in controls)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
