"""One rank of the two-process NCCL tests (run in a process of the multiprocessing "spawn"
context): bootstrap through a client of the parent's torch.distributed TCPStore, run every
collective against numpy and report the failures through a queue."""

import os
import traceback

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")

import numpy as np  # noqa: E402

from . import _reference as R  # noqa: E402

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int8", "uint8", "int64"]
SHAPE = (38, 3)


def _cases(quick):
    dtypes = DTYPES[:2] if quick else DTYPES
    for dtype in dtypes:
        floating = dtype in ("float32", "float64", "float16", "bfloat16")
        for op in ["sum", "prod", "max", "min"] + (["avg"] if floating else []):
            yield dtype, "all_reduce", op
        for root in (0, 1):
            yield dtype, "broadcast", root
            yield dtype, "reduce", root
        yield dtype, "all_gather", None
        yield dtype, "reduce_scatter", "sum"
        yield dtype, "reduce_scatter", "max"
        yield dtype, "send_recv", None
        yield dtype, "all_to_all", None


def run_cases(comm, seed, quick=False):
    import cudalibs as cl
    from cudalibs import nccl
    from cudalibs import testing as T

    rank, world, dev = comm.rank, comm.size, comm.device
    failures = []
    for i, (dtype, what, arg) in enumerate(_cases(quick)):
        rng = np.random.default_rng(seed + i)
        xs = [T.random_array(SHAPE, dtype, rng=rng) for _ in range(world)]
        x = cl.to_device(xs[rank], device=dev)
        try:
            if what == "all_reduce":
                out = comm.all_reduce(x, op=arg)
                expected = R.all_reduce(xs, arg)[rank]
            elif what == "broadcast":
                out = comm.broadcast(x, root=arg)
                expected = R.broadcast(xs, arg)[rank]
            elif what == "reduce":
                out = comm.reduce(x, op="sum", root=arg)
                if rank != arg:
                    assert out is None
                    continue
                expected = R.reduce_all(xs, "sum")
            elif what == "all_gather":
                out = comm.all_gather(x)
                expected = R.all_gather(xs)[rank]
            elif what == "reduce_scatter":
                out = comm.reduce_scatter(x, op=arg)
                expected = R.reduce_scatter(xs, arg)[rank]
            elif what == "send_recv":
                out = cl.full(SHAPE, T.poison_value(dtype), dtype, device=dev)
                peer = (rank + 1) % world
                with nccl.group():
                    comm.send(x, peer)
                    comm.recv(out, (rank - 1) % world)
                expected = xs[(rank - 1) % world]
            else:
                out = comm.all_to_all(x)
                expected = R.all_to_all(xs)[rank]
            comm.sync()
            T.assert_close(out.get().reshape(-1), R.cast(expected, dtype).reshape(-1), dtype)
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            failures.append(f"rank {rank} {what}({arg}) {dtype}: {type(exc).__name__}: {exc}")
    return failures


def _client(port, world):
    """A client of the parent's TCPStore server (each rank is one; none hosts it)."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", port, world, False, timedelta(seconds=60))


def run_rank(rank, world, port, seed, queue):
    try:
        from cudalibs import nccl

        store = _client(port, world)
        comm = nccl.Communicator.from_store(store, rank, world, device=rank)
        assert (comm.rank, comm.size, comm.cu_device) == (rank, world, rank)
        failures = run_cases(comm, seed)
        nb = nccl.Communicator.from_store(store, rank, world, device=rank,
                                          key="cudalibs/nccl/uid-nonblocking",
                                          blocking=False, timeout=60)
        failures += [f"non-blocking: {f}" for f in run_cases(nb, seed + 1000, quick=True)]
        comm.barrier()
        nb.close()
        comm.close()
        queue.put((rank, failures, None))
    except BaseException:  # noqa: BLE001 - the parent reports it
        queue.put((rank, None, traceback.format_exc()))


def run_dead_peer(rank, world, port, q):
    """Rank 1 leaves right after the communicator is up; rank 0's next collective must end
    in an error (a timeout, or NCCL noticing the lost peer) instead of hanging."""
    try:
        import time

        import cudalibs as cl
        from cudalibs import nccl

        store = _client(port, world)
        comm = nccl.Communicator.from_store(store, rank, world, device=rank, blocking=False,
                                            timeout=60)
        comm.barrier()
        if rank == 1:
            q.put((rank, {"left": True}, None))
            q.close()
            q.join_thread()  # the report must leave before the process does
            os._exit(0)  # dies without closing: the peer is simply gone
        time.sleep(1.0)
        x = cl.to_device(np.ones(1 << 22, np.float32), device=rank)
        t0 = time.monotonic()
        outcome = {}
        try:
            comm.timeout = 8.0  # generous for the bootstrap, short from here on
            comm.all_reduce(x, out=x)
            comm.sync()
            outcome["error"] = None
        except nccl.NcclTimeoutError as exc:
            outcome.update(error="NcclTimeoutError", message=str(exc))
        except Exception as exc:  # noqa: BLE001 - NCCL may also report the lost peer
            outcome.update(error=type(exc).__name__, message=str(exc))
        outcome["elapsed"] = time.monotonic() - t0
        outcome["closed"] = comm.closed
        comm.abort()
        # The process and the GPU still work.
        with nccl.Communicator(1, 0, nccl.UniqueId(), rank) as solo:
            y = cl.to_device(np.arange(4, dtype=np.float32), device=rank)
            outcome["after"] = solo.all_reduce(y).get().tolist()
        q.put((rank, outcome, None))
    except BaseException:  # noqa: BLE001
        q.put((rank, None, traceback.format_exc()))
