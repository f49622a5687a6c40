"""Two spawned processes, one GPU each, bootstrapped through a torch.distributed TCPStore
(``Communicator.from_store``): every collective and reduction for several dtypes against
numpy, in blocking and non-blocking mode.  A hard timeout keeps a hang from stalling the
suite.

The store's server runs in this process, on a port the system picks as it binds (port 0),
and the ranks connect to the port it reports.  Probing for a free port and binding it later
would leave a gap in which another process (a parallel test run) can take it.
"""

import multiprocessing as mp
import queue as queue_mod
import time
from datetime import timedelta

import pytest

import cudalibs as cl

from . import _nccl_worker

HARD_TIMEOUT = 300


def _store_server():
    """A TCPStore server on a port of the system's choosing; the ranks connect to
    ``server.port`` as clients.  It counts no workers (world size None) and so waits for
    none: the ranks are started after it."""
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=60),
                         wait_for_workers=False)


def _spawn(target, args_for_rank, hard_timeout=HARD_TIMEOUT):
    """Start one process per rank; collect ``(failures_or_outcome, error)`` by rank."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args_for_rank(r), q)) for r in range(2)]
    for p in procs:
        p.start()
    results = {}
    deadline = time.monotonic() + hard_timeout
    try:
        while len(results) < 2:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, failures, error = q.get(timeout=min(left, 5))
            except queue_mod.Empty:
                if not any(p.is_alive() for p in procs) and q.empty():
                    break
                continue
            results[rank] = (failures, error)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
                p.join()
    missing = sorted(set(range(2)) - set(results))
    assert not missing, (f"rank(s) {missing} reported nothing within {hard_timeout} s "
                         f"(exit codes {[p.exitcode for p in procs]})")
    return results, procs


def _needs_two_gpus_and_torch():
    if cl.device_count() < 2:
        pytest.skip(f"needs two GPUs ({cl.device_count()} visible)")
    pytest.importorskip("torch.distributed", reason="the store comes from torch.distributed")


def test_two_processes_through_a_store(rng):
    _needs_two_gpus_and_torch()
    server, seed = _store_server(), int(rng.integers(2**31))
    assert server.port > 0
    results, procs = _spawn(_nccl_worker.run_rank, lambda r: (r, 2, server.port, seed))
    errors = [f"rank {r}:\n{e}" for r, (_, e) in sorted(results.items()) if e]
    assert not errors, "\n".join(errors)
    failures = [f for _, (fs, _) in sorted(results.items()) for f in fs]
    assert not failures, f"seed {seed}:\n" + "\n".join(failures)
    assert [p.exitcode for p in procs] == [0, 0]


def test_peer_that_dies_ends_in_an_error():
    """Rank 1 exits after the bootstrap; rank 0's all_reduce + sync must raise within its
    timeout (a timeout error, or NCCL's own report of the lost peer), never hang, and leave
    the process usable."""
    _needs_two_gpus_and_torch()
    server = _store_server()
    results, _ = _spawn(_nccl_worker.run_dead_peer, lambda r: (r, 2, server.port),
                        hard_timeout=180)
    outcome, error = results[0]
    assert error is None, error
    assert outcome["error"] is not None, f"the collective succeeded without its peer: {outcome}"
    assert outcome["elapsed"] < 60, outcome
    assert outcome["closed"], outcome  # aborted by the error path
    assert outcome["after"] == [0.0, 1.0, 2.0, 3.0], outcome
