"""NCCL collectives of cudalibs beside torch.distributed (nccl backend), two GPUs of one host.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/nccl.py [--max-size 1GiB] [--rounds 3]

What is measured
----------------
``all_reduce`` (sum, in place), ``all_gather`` and ``reduce_scatter`` (sum) of float32, from
8 KiB to 1 GiB in x4 steps (1 GiB last), by

* cudalibs: ``comm.all_reduce(x, out=x, stream=s)``, ``comm.all_gather(x, out=y, stream=s)``,
  ``comm.reduce_scatter(y, out=x, stream=s)`` on a :class:`cudalibs.Stream`;
* PyTorch: ``dist.all_reduce(t)``, ``dist.all_gather_into_tensor(out, t)``,
  ``dist.reduce_scatter_tensor(out, t)`` with a ``torch.cuda.Stream`` made current.

Process layout: two processes (multiprocessing "spawn"), one GPU each, the layout of
``torchrun --nproc-per-node 2``.  Each process runs *both* libraries on the same GPU, one after
the other at each size, in rotated order over ``--rounds`` rounds; the two processes meet at a
barrier before every measurement.  Both libraries bootstrap through one ``TCPStore``.

How it is measured
------------------
``benchmarks/_common.py``'s :func:`time_calls`: warm-up calls, then back-to-back calls between
two CUDA events of that library on its stream, repeated; a cell is the median per-call time,
the larger of the two ranks' (a collective is done when its slowest rank is).  Host-side costs
that keep the next call from starting count, so the 8 KiB row is each library's latency as a
user sees it.

The size is that of the whole buffer (the gathered output of all_gather, the input of
reduce_scatter), and bandwidths follow nccl-tests (``n`` ranks, ``t`` seconds per call):
``algbw = size / t``; bus bandwidth ``busbw = algbw * 2(n-1)/n`` for all_reduce and
``algbw * (n-1)/n`` for all_gather and reduce_scatter, in GB/s (1e9 bytes).  ``ours/torch`` is
the ratio of bus bandwidths: above 1 means cudalibs is faster.  NVLink SHARP multicast is off
(``NCCL_NVLS_ENABLE=0``) for both libraries.

Without two GPUs the script prints one line and exits with status 0; without PyTorch the torch
columns read ``n/a``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import queue as queue_mod
import socket
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before any NCCL is loaded, in every process

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _common as common
else:  # python -m benchmarks.nccl
    from . import _common as common

import numpy as np  # noqa: E402

import cudalibs as cl  # noqa: E402

OPS = ("all_reduce", "all_gather", "reduce_scatter")
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
WORLD = 2
REPEATS = 5
HARD_TIMEOUT = 580  # seconds for the whole run, so a hang cannot stall a job


def sizes(max_size: int) -> list[int]:
    out, s = [], 8 * KiB
    while s <= max_size:
        out.append(s)
        s *= 4
    if out and out[-1] < max_size:
        out.append(max_size)
    return out


def bus_factor(op: str, n: int) -> float:
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def label(nbytes: int) -> str:
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if nbytes >= unit:
            return f"{nbytes / unit:g} {name}"
    return f"{nbytes} B"


def iters_for(nbytes: int) -> int:
    # About 20 ms per timed loop, assuming ~100 GB/s or ~20 us per call, whichever is slower.
    est = max(20e-6, nbytes / 100e9)
    return int(min(200, max(5, 20e-3 / est)))


# ----------------------------------------------------------------------------- per rank
def _ours(comm, dev, stream, op, nbytes):
    n = nbytes // 4
    big = cl.zeros((n,), np.float32, device=dev, stream=stream)
    small = cl.zeros((n // WORLD,), np.float32, device=dev, stream=stream)
    if op == "all_reduce":
        def fn():
            comm.all_reduce(big, out=big, stream=stream)
    elif op == "all_gather":
        def fn():
            comm.all_gather(small, out=big, stream=stream)
    else:
        def fn():
            comm.reduce_scatter(big, out=small, stream=stream)
    return fn, (big, small)


def _torch(torch, dist, rank, op, nbytes):
    n = nbytes // 4
    big = torch.zeros(n, dtype=torch.float32, device=f"cuda:{rank}")
    small = torch.zeros(n // WORLD, dtype=torch.float32, device=f"cuda:{rank}")
    if op == "all_reduce":
        def fn():
            dist.all_reduce(big)
    elif op == "all_gather":
        def fn():
            dist.all_gather_into_tensor(big, small)
    else:
        def fn():
            dist.reduce_scatter_tensor(small, big)
    return fn, (big, small)


def run_rank(rank, port, max_size, rounds, q):
    try:
        from cudalibs import nccl

        dev = cl.Device(rank)
        try:
            import torch
            import torch.distributed as dist
            have_torch = torch.cuda.is_available()
        except ImportError:
            have_torch = False
        from datetime import timedelta

        if have_torch:
            store = dist.TCPStore("127.0.0.1", port, WORLD, rank == 0, timedelta(seconds=120))
        else:
            raise RuntimeError("torch.distributed is needed for the TCPStore bootstrap")
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", store=dist.PrefixStore("torch", store), rank=rank,
                                world_size=WORLD, device_id=torch.device(f"cuda:{rank}"))
        comm = nccl.Communicator.from_store(store, rank, WORLD, device=dev)
        stream = cl.Stream(dev)
        tstream = torch.cuda.Stream(device=rank)
        torch.cuda.set_stream(tstream)
        clocks = {"cudalibs": common.cudalibs_clock(stream),
                  "torch": common.torch_clock(torch, tstream)}
        libs = ["cudalibs", "torch"]
        results = {}
        for op in OPS:
            for nbytes in sizes(max_size):
                times = {lib: [] for lib in libs}
                for r in range(rounds):
                    for lib in libs[r % 2:] + libs[:r % 2]:
                        if lib == "cudalibs":
                            fn, keep = _ours(comm, dev, stream, op, nbytes)
                        else:
                            fn, keep = _torch(torch, dist, rank, op, nbytes)
                        comm.barrier()  # both ranks start each measurement together
                        t = common.time_calls(fn, clocks[lib], iters=iters_for(nbytes),
                                              repeats=REPEATS, warmup=3)
                        times[lib].append(common.median_spread(t)[0])
                        clocks[lib].sync()
                        if lib == "cudalibs":
                            for a in keep:
                                a.close()
                        del keep, fn
                results[op, nbytes] = {lib: float(np.median(v)) for lib, v in times.items()}
            torch.cuda.empty_cache()
        comm.barrier()
        comm.close()
        dist.destroy_process_group()
        q.put((rank, results, None))
    except BaseException:  # noqa: BLE001 - reported by the parent
        q.put((rank, None, traceback.format_exc()))


# ----------------------------------------------------------------------------- report
def _header(torch_peer) -> str:
    from cudalibs import nccl

    devs = [cl.Device(i) for i in range(WORLD)]
    p2p = devs[0].can_access_peer(devs[1])
    lines = [
        f"# NCCL collectives, {WORLD} GPUs of one host ({platform.node()})",
        "",
        "GPUs: " + "; ".join(f"{d.ordinal}: {d.name}" for d in devs)
        + f" (peer access: {'yes' if p2p else 'no'})",
        f"cudalibs {cl.__version__}, NCCL {'.'.join(map(str, nccl.version()))}; "
        f"torch {torch_peer.version}",
        "NCCL_NVLS_ENABLE=" + os.environ.get("NCCL_NVLS_ENABLE", ""),
    ]
    return "\n".join(lines)


def _table(results: dict) -> str:
    rows = []
    for (op, nbytes), cell in sorted(results.items(), key=lambda kv: (OPS.index(kv[0][0]),
                                                                        kv[0][1])):
        ours, theirs = cell.get("cudalibs"), cell.get("torch")
        f = bus_factor(op, WORLD)
        bw = {lib: (common.gbps(nbytes, ms) * f if isinstance(ms, float) else None)
              for lib, ms in (("ours", ours), ("torch", theirs))}
        rows.append([op, label(nbytes),
                     f"{ours * 1e3:.1f}" if ours else common.NA,
                     f"{theirs * 1e3:.1f}" if theirs else common.NA,
                     common.fmt_rate(bw["ours"]), common.fmt_rate(bw["torch"]),
                     common.fmt_ratio(bw["ours"], bw["torch"])])
    return common.markdown_table(
        ["op", "size", "ours us", "torch us", "ours busbw GB/s", "torch busbw GB/s",
         "ours/torch"], rows, right=range(2, 7))


def _summary(results: dict) -> list[str]:
    lines = []
    for op in OPS:
        big = [c["torch"] / c["cudalibs"] for (o, n), c in results.items()
               if o == op and n >= 64 * MiB and c.get("torch") and c.get("cudalibs")]
        small = results.get((op, 8 * KiB))
        if big:
            lines.append(f"{op}: busbw ratio ours/torch at >= 64 MiB: min {min(big):.2f}x, "
                         f"median {float(np.median(big)):.2f}x")
        if small and small.get("torch"):
            lines.append(f"{op}: latency at 8 KiB: ours {small['cudalibs'] * 1e3:.1f} us, "
                         f"torch {small['torch'] * 1e3:.1f} us")
    return lines


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__)
    ap.add_argument("--max-size", default="1GiB", help="largest buffer (e.g. 64MiB, 1GiB)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds, the libraries in rotated order; the median is shown")
    args = ap.parse_args(argv)
    text = args.max_size.strip().upper().replace("IB", "").replace("B", "")
    mult = {"K": KiB, "M": MiB, "G": GiB}.get(text[-1:], 1)
    max_size = int(float(text.rstrip("KMG")) * mult)

    common.exit_if_no_gpu("benchmarks/nccl.py", gpus=WORLD)
    torch_peer = common.load_torch()
    if not torch_peer.ok:
        print(f"benchmarks/nccl.py: needs PyTorch, torch.distributed is the peer and the store "
              f"({torch_peer.version})")
        return 2
    t0 = time.perf_counter()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=run_rank, args=(r, port, max_size, args.rounds, q))
             for r in range(WORLD)]
    for p in procs:
        p.start()
    got, deadline = {}, time.monotonic() + HARD_TIMEOUT
    try:
        while len(got) < WORLD and time.monotonic() < deadline:
            try:
                rank, res, err = q.get(timeout=5)
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs):
                    break
                continue
            got[rank] = (res, err)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    errors = [f"rank {r}:\n{e}" for r, (_, e) in got.items() if e]
    if errors or len(got) < WORLD:
        print("\n".join(errors) or f"ranks {sorted(set(range(WORLD)) - set(got))} hung or died",
              file=sys.stderr)
        return 1
    merged = {}
    for key in got[0][0]:
        merged[key] = {lib: max(got[r][0][key][lib] for r in range(WORLD))
                       for lib in got[0][0][key]}
    print(_header(torch_peer))
    print()
    print(_table(merged))
    print()
    for line in _summary(merged):
        print(line)
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
