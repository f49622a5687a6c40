"""Data-parallel training of the examples: one process per GPU, gradients all-reduced with NCCL.

What a framework's data-parallel wrapper does (PyTorch's DistributedDataParallel), written
out over cudalibs for the examples' hand-written models:

* **Launch and bootstrap** (:func:`launch`): one process per GPU, started with
  ``multiprocessing``'s "spawn" method.  Rank 0 makes the :class:`cudalibs.nccl.UniqueId`
  and sends its 128 bytes through a pipe to every other rank; each rank builds its one-rank
  share of the communicator on its GPU (rank ``r`` on device ``r``).  A world of one runs in
  the calling process (a one-rank communicator).  Every rank returns a summary to the
  parent; a rank that fails takes the others down after a grace period instead of leaving
  them waiting in a collective.
* **Buckets** (:func:`plan_buckets`, :class:`FlatBuffer`): the gradients live at aligned
  offsets in a few flat buffers, each parameter's gradient a *view* of its buffer, so a
  bucket is a contiguous slice of one buffer and is all-reduced in place -- no packing or
  unpacking.  Buckets follow the order in which the backward produces the gradients, and
  hold up to ``bucket_bytes`` (25 MiB by default, the first one 1 MiB: DistributedDataParallel's
  defaults), so the first ones are complete early in the backward.
* **Overlap** (:class:`GradSync`): the backward announces each gradient once it is written
  (``sync.ready(name)``).  When a bucket's last gradient is announced, an event recorded on
  the compute stream is waited on by a second, communication stream, and the bucket's
  all-reduce is queued there: it runs while the compute stream goes on with the rest of the
  backward.  At the end of the step the compute stream waits for the communication stream
  (another event) before the optimizer reads the gradients.
* **Graphs**: the same step, events and all, can be captured by :class:`cudalibs.StepGraph`:
  the communication stream forks from the capturing stream at the first event it waits on
  and joins back at the last, so the all-reduces become nodes of the one graph.
* **Checks** (:func:`train`): after every step the ranks compare SHA-256 digests of their
  whole training state (gathered with an NCCL all-gather): they must be bitwise identical.
  Rank 0 also runs the one-GPU reference of the example on the combined batch, started
  from the data-parallel state of the step before, and compares the weights after the step
  within a tolerance.  Restarting the reference from the same state every step bounds the
  difference of *one* step; two free-running trajectories of a chaotic training process
  would drift apart from rounding differences alone.

NVLink SHARP (multicast) stays off and NCCL's bootstrap uses the loopback interface (every
rank of this launcher is on one host), unless the environment says otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import time
import traceback
from pathlib import Path

# Before NCCL is loaded, in this process and (inherited) in every rank it spawns.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")

if not __package__:  # loaded from a checkout: use this checkout's cudalibs
    _root = str(Path(__file__).resolve().parent.parent)
    if _root not in sys.path:
        sys.path.insert(0, _root)

import numpy as np  # noqa: E402

import cudalibs as cl  # noqa: E402

__all__ = ["DEFAULT_BUCKET_BYTES", "FIRST_BUCKET_BYTES", "ALIGN", "Bucket", "layout",
           "plan_buckets", "FlatBuffer", "GradSync", "Rank", "launch", "spawn_ranks", "train",
           "gpu_shortage", "add_arguments", "main", "report", "state_digest", "max_rel_diff",
           "copy_state", "Reference", "RankError"]

#: DistributedDataParallel's bucket size (``bucket_cap_mb=25``) and first-bucket size.
DEFAULT_BUCKET_BYTES = 25 << 20
FIRST_BUCKET_BYTES = 1 << 20
#: Elements each view's offset in a flat buffer is rounded up to (512 bytes of float32):
#: every library sees well-aligned pointers.
ALIGN = 128
#: Seconds the other ranks get to finish after one rank failed, before they are killed.
GRACE = 30.0


# -- bucket assignment (pure Python) --------------------------------------------------------
def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def layout(sizes: dict, align: int = ALIGN) -> tuple[dict, int]:
    """Offsets of named arrays packed one after the other, each start rounded up to
    ``align`` elements.

    Parameters
    ----------
    sizes : dict of str to int
        Element counts, in the order they are laid out.
    align : int

    Returns
    -------
    spans : dict of str to (int, int)
        ``(start, stop)`` element offsets of each name.
    total : int
        Elements of the buffer (the last span's stop, rounded up to ``align``).
    """
    if align < 1:
        raise ValueError(f"align must be >= 1, got {align}")
    spans, n = {}, 0
    for name, size in sizes.items():
        if size < 0:
            raise ValueError(f"{name}: negative size {size}")
        spans[name] = (n, n + int(size))
        n = _round_up(n + int(size), align)
    return spans, n


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A contiguous slice ``[start, stop)`` of flat buffer ``buffer`` that is all-reduced
    as one collective once every gradient in ``names`` has been produced.

    ``names`` are in the order the backward produces them; ``nbytes`` counts the padding
    between them too (it is zero on every rank and stays zero).
    """

    index: int
    buffer: int
    start: int
    stop: int
    names: tuple
    nbytes: int


def plan_buckets(buffers, order, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                 first_bucket_bytes: int | None = None) -> list[Bucket]:
    """Group the gradients of flat buffers into buckets of contiguous memory.

    Walking the gradients in ``order`` (the order the backward produces them), a gradient
    joins the bucket open in its buffer when it is that bucket's neighbour in memory (no
    other gradient lies between them) and the bucket stays within the size limit; otherwise
    the open bucket is closed and a new one starts with it.  A gradient larger than the
    limit gets a bucket of its own.

    Parameters
    ----------
    buffers : sequence of (dict of str to (int, int), int)
        For each flat buffer: the ``(start, stop)`` element span of each gradient in it and
        the buffer's item size in bytes.
    order : sequence of str
        Every gradient name exactly once, in the order the backward produces them.
    bucket_bytes : int
        The size limit of a bucket (> 0).
    first_bucket_bytes : int, optional
        The limit of the first bucket opened (default: ``bucket_bytes``); a small one starts
        the first all-reduce early in the backward.

    Returns
    -------
    list of Bucket
        In the order their last gradient is produced (the order they are all-reduced).

    Raises
    ------
    ValueError
        Overlapping spans, a name in two buffers, names of the buffers missing from
        ``order`` or listed twice or unknown, a limit below 1 byte.
    """
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    first = bucket_bytes if first_bucket_bytes is None else first_bucket_bytes
    if first < 1:
        raise ValueError(f"first_bucket_bytes must be positive, got {first_bucket_bytes}")
    where = {}          # name -> (buffer, index among the buffer's spans sorted by start)
    sorted_spans = []
    for b, (spans, itemsize) in enumerate(buffers):
        if itemsize < 1:
            raise ValueError(f"buffer {b}: item size must be positive, got {itemsize}")
        items = sorted(spans.items(), key=lambda kv: kv[1])
        for k, (name, (start, stop)) in enumerate(items):
            if not 0 <= start <= stop:
                raise ValueError(f"{name}: bad span ({start}, {stop})")
            if k and start < items[k - 1][1][1]:
                raise ValueError(f"buffer {b}: {name} overlaps {items[k - 1][0]}")
            if name in where:
                raise ValueError(f"{name} is in buffers {where[name][0]} and {b}")
            where[name] = (b, k)
        sorted_spans.append((items, itemsize))
    order = list(order)
    seen = set()
    for name in order:
        if name not in where:
            raise ValueError(f"{name!r} of the order is in no buffer")
        if name in seen:
            raise ValueError(f"{name!r} is listed twice in the order")
        seen.add(name)
    missing = [n for n in where if n not in seen]
    if missing:
        raise ValueError(f"the order misses {missing}")

    closed = []         # (position of the last member in the order, buffer, lo, hi, names)
    open_ = {}          # buffer -> [lo, hi, names, last position, limit]
    opened = 0

    def extent(b, lo, hi):
        items, itemsize = sorted_spans[b]
        return (items[hi][1][1] - items[lo][1][0]) * itemsize

    for pos, name in enumerate(order):
        b, k = where[name]
        cur = open_.get(b)
        if cur is not None:
            lo, hi = cur[0], cur[1]
            if k == lo - 1 or k == hi + 1:
                nlo, nhi = min(lo, k), max(hi, k)
                if extent(b, nlo, nhi) <= cur[4]:
                    cur[0], cur[1] = nlo, nhi
                    cur[2].append(name)
                    cur[3] = pos
                    continue
            closed.append((cur[3], b, cur[0], cur[1], tuple(cur[2])))
        open_[b] = [k, k, [name], pos, first if opened == 0 else bucket_bytes]
        opened += 1
    for b, cur in open_.items():
        closed.append((cur[3], b, cur[0], cur[1], tuple(cur[2])))
    closed.sort()
    out = []
    for i, (_, b, lo, hi, names) in enumerate(closed):
        items, itemsize = sorted_spans[b]
        start, stop = items[lo][1][0], items[hi][1][1]
        out.append(Bucket(i, b, start, stop, names, (stop - start) * itemsize))
    return out


# -- flat buffers and the overlapped all-reduce (device) ------------------------------------
class FlatBuffer:
    """Named arrays as aligned views of one flat, zero-initialised device buffer.

    Parameters
    ----------
    shapes : dict of str to tuple
        The arrays, in the order they are laid out.
    dtype : dtype-like
    stream : Stream
        Allocation stream (the buffer is freed on it too).
    init : dict of str to DeviceArray, optional
        Values copied into the views (on ``stream``).

    Attributes
    ----------
    flat : DeviceArray
        The whole buffer (1-D).
    spans : dict of str to (int, int)
        Each view's element span in :attr:`flat`.
    views : dict of str to DeviceArray
        The arrays, shaped as asked.
    """

    def __init__(self, shapes: dict, dtype, *, stream, init=None, align: int = ALIGN):
        sizes = {k: int(np.prod(v, dtype=np.int64)) for k, v in shapes.items()}
        self.spans, total = layout(sizes, align)
        self.flat = cl.zeros(max(total, 1), dtype, stream=stream)
        self.views = {k: self.flat[a:b].reshape(tuple(shapes[k]))
                      for k, (a, b) in self.spans.items()}
        for k, v in (init or {}).items():
            self.views[k].copy_(v, stream)

    def __repr__(self) -> str:
        return (f"<FlatBuffer {len(self.views)} arrays, {self.flat.size} elements of "
                f"{self.flat.dtype}>")


class GradSync:
    """The bucketed gradient all-reduce of one rank, overlapped with its backward.

    Parameters
    ----------
    comm : cudalibs.nccl.Communicator
        This rank's communicator.
    stream : Stream
        The compute stream the step runs on.
    buffers : sequence of (DeviceArray, dict of str to (int, int))
        The flat gradient buffers (1-D, C-contiguous) and each gradient's element span in
        them (a :class:`FlatBuffer`'s ``flat`` and ``spans``).
    order : sequence of str
        The gradient names in the order the backward produces them.
    bucket_bytes, first_bucket_bytes : int
        Bucket size limits (:func:`plan_buckets`).
    op : {"avg", "sum"}
        The reduction: ``"avg"`` when each rank's gradient is that of its mean loss,
        ``"sum"`` when it is already normalised by a global count.

    Notes
    -----
    One step runs inside ``with sync.step():``; the backward calls :meth:`ready` with the
    names of the gradients it has just written, :meth:`all_reduce_now` reduces a small
    array the rest of the step needs at once (a token count), and the block's end makes the
    compute stream wait for every all-reduce.  All ranks run the same code, so their
    collectives come in the same order.  One instance serves one thread.
    """

    def __init__(self, comm, stream, buffers, order, *, bucket_bytes=DEFAULT_BUCKET_BYTES,
                 first_bucket_bytes=FIRST_BUCKET_BYTES, op="avg"):
        if op not in ("avg", "sum"):
            raise ValueError(f"op must be 'avg' or 'sum', not {op!r}")
        self.comm, self.stream, self.op = comm, stream, op
        dev = comm.device
        flats = []
        for i, (flat, spans) in enumerate(buffers):
            if flat.ndim != 1 or not flat.is_c_contiguous:
                raise ValueError(f"buffer {i} must be 1-D and C-contiguous, got shape "
                                 f"{flat.shape}")
            if max((b for _, b in spans.values()), default=0) > flat.size:
                raise ValueError(f"buffer {i}: a span ends past its {flat.size} elements")
            flats.append(flat)
        self.order = tuple(order)
        self.buckets = plan_buckets([(spans, flat.itemsize) for flat, spans in buffers],
                                    self.order, bucket_bytes, first_bucket_bytes)
        self._views = [flats[b.buffer][b.start:b.stop] for b in self.buckets]
        self._bucket_of = {n: b.index for b in self.buckets for n in b.names}
        #: The communication stream; its work joins the compute stream at each step's end.
        self.comm_stream = cl.Stream(dev)
        self._ready_events = [cl.Event(dev, timing=False) for _ in self.buckets]
        self._fork, self._back, self._join = (cl.Event(dev, timing=False) for _ in range(3))
        self._pending = None
        self._seen: set = set()
        #: The last step's gradient names in the order :meth:`ready` got them, and its
        #: bucket indices in the order they were all-reduced.
        self.observed: list = []
        self.launched: list = []

    # -- one step --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def step(self):
        """``with sync.step():`` around the forward and backward of one step."""
        self._pending = [len(b.names) for b in self.buckets]
        self.observed, self.launched = [], []
        self._seen = set()
        try:
            yield self
        except BaseException:
            self._pending = None
            raise
        self._finish()

    def ready(self, *names) -> None:
        """The backward has written the gradients ``names`` (on the compute stream): queue
        the all-reduce of every bucket they complete."""
        pending = self._pending
        if pending is None:
            raise RuntimeError("GradSync.ready() outside a `with sync.step():` block")
        for name in names:
            i = self._bucket_of.get(name)
            if i is None:
                raise KeyError(f"GradSync: no gradient named {name!r}")
            if name in self._seen:
                raise RuntimeError(f"GradSync: gradient {name!r} announced twice in one "
                                   "step (its bucket may already be reduced)")
            self._seen.add(name)
            self.observed.append(name)
            pending[i] -= 1
            if pending[i] == 0:
                self._launch(i)

    def _launch(self, i: int) -> None:
        ev, cs = self._ready_events[i], self.comm_stream
        ev.record(self.stream)
        cs.wait(ev)
        view = self._views[i]
        self.comm.all_reduce(view, out=view, op=self.op, stream=cs)
        self.launched.append(i)

    def all_reduce_now(self, arr, op: str = "sum"):
        """All-reduce ``arr`` in place before the compute stream goes on (through the
        communication stream, so that this rank's collectives keep one order); returns it."""
        cs = self.comm_stream
        self._fork.record(self.stream)
        cs.wait(self._fork)
        self.comm.all_reduce(arr, out=arr, op=op, stream=cs)
        self._back.record(cs)
        self.stream.wait(self._back)
        return arr

    def _finish(self) -> None:
        pending, self._pending = self._pending, None
        late = [n for b, left in zip(self.buckets, pending) if left for n in b.names
                if n not in self._seen]
        if late:
            raise RuntimeError(f"GradSync: the step ended without announcing {late}")
        self._join.record(self.comm_stream)
        self.stream.wait(self._join)

    def describe(self) -> str:
        """One line: the buckets and their sizes."""
        sizes = ", ".join(f"{b.nbytes / 1024:.1f} KiB ({len(b.names)})" for b in self.buckets)
        return f"{len(self.buckets)} bucket(s), {self.op} over {self.comm.size} rank(s): {sizes}"

    def __repr__(self) -> str:
        return f"<GradSync {self.describe()}>"


# -- the state checks --------------------------------------------------------------------------
def state_digest(arrays, stream) -> bytes:
    """SHA-256 of the bytes (and dtypes and shapes) of device arrays (synchronises)."""
    h = hashlib.sha256()
    for a in arrays:
        host = a.get(stream=stream)
        h.update(f"{host.dtype}{host.shape}".encode())
        h.update(np.ascontiguousarray(host).tobytes())
    return h.digest()


def copy_state(dst, src, stream) -> None:
    """Copy each array of ``src`` into the matching one of ``dst`` (same device)."""
    dst, src = list(dst), list(src)
    if len(dst) != len(src):
        raise ValueError(f"states of {len(dst)} and {len(src)} arrays")
    for d, s in zip(dst, src):
        d.copy_(s, stream)


def max_rel_diff(got: dict, want: dict) -> tuple[float, str]:
    """The largest norm-wise relative difference over named arrays, and its name."""
    worst, where = 0.0, ""
    for k, w in want.items():
        a, b = np.asarray(got[k], np.float64), np.asarray(w, np.float64)
        d = float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
        if d > worst or not where:
            worst, where = d, k
    return worst, where


def _gather_digests(comm, digest: bytes, stream) -> list[bytes]:
    mine = cl.to_device(np.frombuffer(digest, np.uint8), stream=stream)
    every = comm.all_gather(mine, stream=stream).get(stream=stream)
    n = len(digest)
    return [every[r * n:(r + 1) * n].tobytes() for r in range(comm.size)]


@dataclasses.dataclass
class Reference:
    """Rank 0's one-GPU reference for the checks.

    Attributes
    ----------
    state : callable
        ``state()`` -> the reference model's training-state arrays (matching the replica's).
    step : callable
        ``step(i)`` runs the reference step on combined batch ``i``; returns its loss.
    params : callable
        ``params()`` -> the reference's weights by name (numpy).
    stream : Stream
        Where the reference runs.
    """

    state: object
    step: object
    params: object
    stream: object


# -- the training driver -----------------------------------------------------------------------
def train(ctx, step, inputs, *, stream, state, params, before_step=None, loss_value=None,
          graph=False, check=True, reference=None, rtol=1e-5, every=50) -> dict:
    """Run one rank's training loop, checking after every step.

    Parameters
    ----------
    ctx : Rank
    step : callable
        ``step(*batch)`` queues one data-parallel step on ``stream`` and returns a device
        array (the loss, or what :func:`loss_value` turns into it).
    inputs : sequence of DeviceArray
        This rank's shards of every batch, stacked: ``inputs[j][i]`` is input ``j`` of step
        ``i``.
    stream : Stream
        The step's stream.
    state : callable
        ``state()`` -> the replica's whole training state (weights, optimizer and
        normalisation buffers), as device arrays: digested and compared across ranks.
    params : callable
        ``params()`` -> the replica's weights by name (numpy), compared with the reference.
    before_step : callable, optional
        ``before_step(i)`` before step ``i`` (a learning-rate schedule writing the device).
    loss_value : callable, optional
        ``loss_value(row)`` -> the loss from the step's output copied to the host (default:
        its first element).
    graph : bool
        Capture the step with :class:`cudalibs.StepGraph` (warm-up: step 0) and replay it.
    check : bool
        Compare digests across ranks (and, on rank 0 with ``reference``, the weights with
        the reference's) after every step.
    reference : Reference, optional
        Rank 0's reference; ignored on other ranks.
    rtol : float
        Allowed norm-wise relative difference of any weight from the reference's.
    every : int
        Steps between progress lines (rank 0).

    Returns
    -------
    dict
        ``losses`` (float per step), ``identical`` (every step's digests equal),
        ``worst`` (largest relative difference from the reference, NaN without one),
        ``ok``, ``steps_per_s`` (steps after the first, which pays for plans and capture),
        ``graph_nodes``.
    """
    if loss_value is None:
        def loss_value(row):
            return float(row[0])
    steps = inputs[0].shape[0]
    reference = reference if ctx.root else None
    runner, hist, nodes = None, None, None
    identical, worst, first_bad = True, 0.0, None
    busy = 0.0
    t_start = None
    for i in range(steps):
        if before_step is not None:
            before_step(i)
        if reference is not None and check:
            # The reference starts from the replica's state before this step.
            stream.sync()
            copy_state(reference.state(), state(), reference.stream)
            reference.stream.sync()
        if check or i == 1:
            stream.sync()
        t0 = time.perf_counter()
        if i == 1:
            t_start = t0
        batch = [a[i] for a in inputs]
        if graph and runner is None:
            runner = cl.StepGraph(step, *batch, stream=stream)
            out, nodes = runner.outputs, runner.num_nodes
        elif graph:
            out = runner(*batch)
        else:
            out = step(*batch)
        if hist is None:
            hist = cl.empty((steps, out.size), out.dtype, stream=stream)
        hist[i].copy_(out.reshape(out.size), stream)
        if not check:
            continue
        stream.sync()
        if i:
            busy += time.perf_counter() - t0
        digests = _gather_digests(ctx.comm, state_digest(state(), stream), stream)
        same = all(d == digests[0] for d in digests)
        identical &= same
        diff, name, ref_loss = float("nan"), "", float("nan")
        if reference is not None:
            ref_loss = reference.step(i)
            reference.stream.sync()
            diff, name = max_rel_diff(params(), reference.params())
            worst = max(worst, diff)
            if not diff <= rtol and first_bad is None:
                first_bad = (i, name, diff)
        if not same and first_bad is None:
            first_bad = (i, "ranks differ", float("nan"))
        if (i + 1) % every == 0 or i + 1 == steps or not same:
            loss = loss_value(hist[i].get(stream=stream))
            ctx.log(f"step {i + 1:5d}/{steps}  loss {loss:.6f}  reference {ref_loss:.6f}  "
                    f"ranks {'identical' if same else 'DIFFER'}  "
                    f"max rel. diff vs reference {diff:.2e}")
    stream.sync()
    if not check and steps > 1:
        busy = time.perf_counter() - t_start
    losses = np.array([loss_value(r) for r in hist.get(stream=stream)]) if hist is not None \
        else np.zeros(0)
    ok = identical and (reference is None or not check or worst <= rtol)
    return {"losses": losses, "identical": identical,
            "worst": worst if reference is not None and check else float("nan"),
            "first_bad": first_bad, "ok": ok, "checked": check,
            "steps_per_s": (steps - 1) / busy if steps > 1 and busy > 0 else float("nan"),
            "graph_nodes": nodes}


# -- ranks and their launch --------------------------------------------------------------------
@dataclasses.dataclass
class Rank:
    """One rank of a data-parallel job: its index, the world size, its GPU and its
    communicator (``comm.size == world``)."""

    rank: int
    world: int
    device: object
    comm: object

    @property
    def root(self) -> bool:
        return self.rank == 0

    def log(self, text: str) -> None:
        """Print ``text`` on rank 0 only."""
        if self.root:
            print(text, flush=True)

    def shard(self, host: np.ndarray, axis: int = 0) -> np.ndarray:
        """This rank's equal share of ``host`` along ``axis`` (a global batch)."""
        n = host.shape[axis]
        if n % self.world:
            raise ValueError(f"a batch of {n} does not split over {self.world} ranks")
        k = n // self.world
        index = [slice(None)] * host.ndim
        index[axis] = slice(self.rank * k, (self.rank + 1) * k)
        return np.ascontiguousarray(host[tuple(index)])


def _entry_ref(fn) -> tuple[str, str]:
    path = getattr(getattr(fn, "__code__", None), "co_filename", None)
    if not path or not os.path.exists(path) or "<locals>" in fn.__qualname__:
        raise TypeError(f"launch: {fn!r} must be a module-level function of a source file")
    return os.path.abspath(path), fn.__qualname__


def _load_entry(path: str, qualname: str):
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if f and os.path.abspath(f) == path and hasattr(mod, qualname):
            return getattr(mod, qualname)
    name = "_dp_entry_" + Path(path).stem
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod          # dataclasses look their module up while it loads
    spec.loader.exec_module(mod)
    return getattr(mod, qualname)


def _run_rank(fn, rank: int, world: int, uid, args):
    from cudalibs import nccl

    dev = cl.Device(rank)
    dev.set_current()
    with nccl.Communicator(world, rank, uid, dev) as comm:   # aborted if the body raises
        return fn(Rank(rank, world, dev, comm), *args)


def _share_uid(rank: int, conns):
    """Rank 0 makes the NCCL unique id and writes its bytes into every other rank's pipe;
    the other ranks read theirs.  Returns the id."""
    from cudalibs import nccl

    try:
        if rank == 0:
            uid = nccl.UniqueId()
            for c in conns:
                c.send_bytes(bytes(uid))
            return uid
        return nccl.UniqueId(conns[0].recv_bytes())
    finally:
        for c in conns:
            c.close()


def _child(body, rank, world, conns, args, results):
    try:
        uid = _share_uid(rank, conns)
        results.put((rank, body(rank, world, uid, *args), None))
    except BaseException:  # noqa: BLE001 - reported to the parent
        results.put((rank, None, traceback.format_exc()))


def _entry_body(rank, world, uid, path, qualname, args):
    """What every process of :func:`launch` runs once it has the unique id."""
    return _run_rank(_load_entry(path, qualname), rank, world, uid, args)


class RankError(RuntimeError):
    """One or more ranks failed; the message holds their tracebacks."""


def launch(entry, world: int, args=(), *, spawn: bool | None = None,
           timeout: float | None = None) -> list:
    """Run ``entry(Rank, *args)`` on GPUs ``0 .. world - 1``, one process each.

    Parameters
    ----------
    entry : callable
        A module-level function of a source file (the spawned ranks load that file).
    world : int
        Number of ranks (GPUs).
    args : tuple
        Picklable arguments for every rank.
    spawn : bool, optional
        Start processes even for one rank (default: only for two or more; one rank runs
        in this process).
    timeout : float, optional
        Seconds the whole job may take before its processes are killed.

    Returns
    -------
    list
        What ``entry`` returned, by rank.

    Raises
    ------
    ValueError
        ``world`` below 1 or above the visible GPUs.
    RankError
        A rank raised (its traceback in the message), died, or the job timed out.
    """
    if int(world) != world or world < 1:
        raise ValueError(f"world must be a positive int, got {world!r}")
    visible = cl.device_count()
    if world > visible:
        raise ValueError(f"{world} ranks need {world} GPUs; {visible} visible")
    if spawn is None:
        spawn = world > 1
    if not spawn:
        from cudalibs import nccl

        return [_run_rank(entry, 0, 1, nccl.UniqueId(), tuple(args))]
    path, qualname = _entry_ref(entry)
    return spawn_ranks(_entry_body, world, (path, qualname, tuple(args)), timeout=timeout)


def spawn_ranks(body, world: int, args=(), *, timeout: float | None = None) -> list:
    """Start ``world`` processes ("spawn"); each runs ``body(rank, world, uid, *args)``
    with the :class:`~cudalibs.nccl.UniqueId` that rank 0 made and piped to the others.

    ``body`` must be picklable (a module-level function of an importable module).  Returns
    what the bodies returned, by rank; raises :class:`RankError` when one raised or died
    (the others are killed :data:`GRACE` seconds later) or past ``timeout`` seconds.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    pipes = [ctx.Pipe(duplex=False) for _ in range(world - 1)]    # (reader, writer)
    procs = []
    for r in range(world):
        conns = [w for _, w in pipes] if r == 0 else [pipes[r - 1][0]]
        procs.append(ctx.Process(target=_child, name=f"dp-rank-{r}",
                                 args=(body, r, world, conns, tuple(args), results)))
    for p in procs:
        p.start()
    for rd, wr in pipes:          # the children hold their ends now
        rd.close()
        wr.close()
    out, errors = {}, {}
    deadline = None if timeout is None else time.monotonic() + timeout
    give_up = None
    try:
        while len(out) + len(errors) < world:
            now = time.monotonic()
            if deadline is not None and now > deadline:
                errors["job"] = f"not finished within {timeout:g} s"
                break
            if give_up is not None and now > give_up:
                break
            try:
                rank, value, err = results.get(timeout=1.0)
            except queue_mod.Empty:
                gone = [r for r, p in enumerate(procs)
                        if not p.is_alive() and r not in out and r not in errors]
                if gone and results.empty():
                    for r in gone:
                        errors[r] = f"exited with status {procs[r].exitcode} without a report"
                    give_up = give_up or time.monotonic() + GRACE
                continue
            if err is None:
                out[rank] = value
            else:
                errors[rank] = err
                give_up = give_up or time.monotonic() + GRACE
    finally:
        for p in procs:
            # After a failure the others had their grace period: whatever still runs now
            # waits in a collective that will never complete.
            p.join(timeout=1 if errors else 60)
            if p.is_alive():
                p.kill()
                p.join()
    missing = [r for r in range(world) if r not in out and r not in errors]
    for r in missing:
        errors[r] = "killed: no report after another rank failed"
    if errors:
        raise RankError("\n".join(f"rank {r}: {e}" for r, e in errors.items()))
    return [out[r] for r in range(world)]


# -- the examples' command line ----------------------------------------------------------------
def gpu_shortage(script: str, gpus: int = 1) -> str | None:
    """The one line an example prints before exiting with status 2 when it cannot run here.

    Parameters
    ----------
    script : str
        The example's name, which starts the line.
    gpus : int
        How many GPUs it needs.

    Returns
    -------
    str or None
        What is missing (the driver, a usable GPU, or enough of them), or None when ``gpus``
        GPUs are usable.
    """
    reason = cl.unavailable_reason()
    if reason is None and cl.device_count() < gpus:
        reason = f"{cl.device_count()} visible"
    if reason is None:
        return None
    return f"{script}: needs {'a GPU' if gpus == 1 else f'{gpus} GPUs'}: {reason}"


def add_arguments(parser, rtol: float) -> None:
    """The data-parallel options of an example's command line."""
    g = parser.add_argument_group("data parallel")
    g.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="train data-parallel on N GPUs, one process each (N=1: one rank in "
                   "this process; None: one GPU without the data-parallel machinery); "
                   "--batch is the combined batch, split evenly")
    g.add_argument("--bucket-mb", type=float, default=DEFAULT_BUCKET_BYTES / 2**20,
                   help="gradient bucket size in MiB")
    g.add_argument("--no-check", action="store_true",
                   help="skip the checks after every step (ranks identical, equal to the "
                   "one-GPU reference)")
    g.add_argument("--rtol", type=float, default=rtol,
                   help="allowed relative difference from the reference")


def bucket_bytes(opts: dict) -> int:
    """The bucket limit in bytes of parsed options (``vars(args)``)."""
    return max(1, int(opts["bucket_mb"] * 2**20))


def main(entry, opts: dict) -> int:
    """Launch ``entry(Rank, opts)`` on ``opts["gpus"]`` GPUs; the exit status.

    Every rank returns a summary with ``ok`` (its checks and, on rank 0, the example's
    target); the status is 0 when all are, 1 otherwise (a failed rank included), 2 when too
    few GPUs are visible.
    """
    world = opts["gpus"]
    if world < 1:
        print(f"--gpus must be >= 1, got {world}")
        return 2
    shortage = gpu_shortage("data parallel", world)
    if shortage is not None:
        print(shortage)
        return 2
    try:
        results = launch(entry, world, (opts,))
    except RankError as exc:
        print(f"data parallel: FAILED\n{exc}")
        return 1
    return 0 if all(r["ok"] for r in results) else 1


def report(ctx, result: dict, opts: dict, batch: int, unit: str, *, reached: bool,
           plot=None) -> None:
    """Rank 0's closing lines: the loss curve (``plot(losses, path)`` when ``--plot``), the
    checks' outcome, then the speed.  ``result["ok"]`` becomes False unless the example's
    target was ``reached``."""
    result["ok"] = result["ok"] and reached
    if opts.get("plot") and ctx.root and plot is not None:
        ctx.log(f"loss curve written to {opts['plot']}" if plot(result["losses"], opts["plot"])
                else "matplotlib is not installed: no plot")
    if result["checked"]:
        good = result["identical"] and not result["worst"] > opts["rtol"]
        line = (f"checks after every step: the {ctx.world} ranks' training states "
                f"{'bitwise identical' if result['identical'] else 'DIFFER'}; weights within "
                f"{result['worst']:.2e} of the one-GPU reference (rtol {opts['rtol']:g}): "
                f"{'OK' if good else 'FAILED'}")
        if result["first_bad"] is not None:
            line += f" (first at step {result['first_bad'][0] + 1}: {result['first_bad'][1]})"
        ctx.log(line)
    else:
        ctx.log("checks skipped (--no-check)")
    rate = result["steps_per_s"]
    ctx.log(f"data parallel on {ctx.world} GPU(s), "
            f"{'CUDA graph replay' if opts['graph'] else 'eager'}: {rate:.1f} steps/s "
            f"({rate * batch:,.0f} {unit}/s)")
