"""The plan protocol and the one autotune timer.

Everything planned in cudalibs -- cuBLASLt matmuls, cuBLAS GEMMs, cuDNN convolutions and the
fused convolution, batch-norm, pooling, attention, layer/RMS norm, RNNs -- is a :class:`Plan`:

1. **construct**: validate the problem and build the descriptors (no GPU work);
2. :meth:`Plan.plan`: pick a candidate by the library's heuristics (idempotent);
3. :meth:`Plan.autotune`: time every candidate with :func:`time_candidates` -- the median of
   loops of back-to-back runs on fresh random inputs, the L2 cache flushed before each loop --
   and keep the fastest; the result is kept on disk by the tuning store
   (:mod:`cudalibs.runtime.tuning`), so a second run of a program selects it without timing;
4. ``execute(...)``: write the call's pointers into the prepared arguments and make the call;
   nothing per call is stored on the plan, so several threads may execute one plan at once;
5. :meth:`Plan.close` (or ``with``, or the garbage collector): free the C resources.

The one-shot functions find their plans through :func:`cudalibs.runtime.front.planned` in
the one plan cache (:mod:`cudalibs.runtime.cache`).
"""

from __future__ import annotations

import json
import math
import threading
from typing import Callable, Sequence

import numpy as np

from .._ffi import Resource, refuse_in_capture
from ..driver.array import DeviceArray, empty, to_device
from ..driver.stream import Event, as_stream
from . import log as _log
from .relaunch import summarise
from .tuning import tuning_store

__all__ = ["Plan", "time_candidates", "scratch", "LOOP_MS", "MAX_REPS"]

_logger = _log.get("runtime")


class Plan(Resource):
    """Base of every planned operation: construct -> :meth:`plan` / :meth:`autotune` ->
    ``execute()`` -> :meth:`close`.

    A subclass builds its descriptors in ``__init__`` and calls :meth:`_own` (from
    :class:`~cudalibs._ffi.Resource`) for what it must free; then it provides:

    - ``_heuristics()``: the list of candidates (dicts with at least ``"name"``), best guess
      first;
    - ``_select(i)``: make candidate ``i`` the one ``execute`` runs (build its plan);
    - ``_runner(stream)``: a context that yields ``run(i)``, which runs candidate ``i`` once
      on scratch inputs on ``stream`` (used only for timing), and frees them at exit;
    - ``_problem()``: a short text of the problem for ``repr``;
    - ``_tuning_key()``: a JSON-able description of the problem (shapes, dtypes, options; no
      addresses) under which :class:`TuningStore` keeps the autotuned choice;
    - ``execute(...)``: the call itself, reading only prepared state.

    Attributes
    ----------
    candidates : list of dict
        What the heuristics offered; after :meth:`autotune` each has ``"ms"``.
    choice : int
        The index of the candidate ``execute`` runs.
    tuned : bool
        Whether the choice came from timing (now or from the tuning store).
    """

    __slots__ = ("_device", "_candidates", "_choice", "_tuned", "_planned", "_plan_lock",
                 "__dict__")

    kind = "plan"          # the tuning store's and the cache's name for this kind of plan
    library = "cudalibs"   # whose version goes into the tuning key
    #: Whether :meth:`autotune` flushes the L2 cache before each timed loop.  True suits an
    #: operation whose inputs come cold from memory; a plan whose inputs a network has just
    #: written (a convolution's activations) sets it false and is timed as it will run.
    tune_flush_l2 = True

    def _init_plan(self, device) -> None:
        self._device = device
        self._candidates: list[dict] = []
        self._choice = -1
        self._tuned = False
        self._planned = False
        self._plan_lock = threading.RLock()

    # -- subclass hooks ------------------------------------------------------------------------
    def _heuristics(self) -> list[dict]:
        raise NotImplementedError

    def _select(self, i: int) -> None:
        raise NotImplementedError

    def _runner(self, stream):
        raise NotImplementedError(f"{type(self).__name__} cannot be autotuned")

    def _problem(self) -> str:
        return ""

    def _tuning_key(self):
        return None

    def _library_version(self) -> str:
        return ""

    def _workspace_bytes(self) -> int:
        c = self._candidates[self._choice] if 0 <= self._choice < len(self._candidates) else {}
        return int(c.get("workspace", 0))

    def relaunch_slots(self) -> list:
        """The :class:`~cudalibs.runtime.relaunch.RelaunchSlots` of this plan (its recorded
        relaunches by call shape); none for a plan that never relaunches."""
        return []

    def usable(self) -> bool:
        """Whether the plan can still run (open, and nothing it uses closed behind its back);
        the plan cache builds a new plan in place of one that is not."""
        return self._finalizer.alive

    def relaunch_info(self) -> dict:
        """``{"recorded", "refused", "pending", "failed", "threads", "reasons"}`` over this
        plan's call shapes (see :meth:`cudalibs.runtime.cache.PlanCache.info`)."""
        out = {"recorded": 0, "refused": 0, "pending": 0, "failed": 0, "threads": 0,
               "reasons": {}}
        for slots in self.relaunch_slots():
            summarise(slots, out)
        return out

    # -- the protocol --------------------------------------------------------------------------
    @property
    def candidates(self) -> list[dict]:
        """The candidates the heuristics offered (copies), with ``ms`` once timed."""
        return [dict(c) for c in self._candidates]

    @property
    def choice(self) -> int:
        """Index of the candidate that :meth:`execute` runs (-1 before :meth:`plan`)."""
        return self._choice

    @property
    def tuned(self) -> bool:
        """Whether the choice was made by timing."""
        return self._tuned

    @property
    def time_ms(self) -> float | None:
        """The chosen candidate's measured time, if it was timed."""
        if 0 <= self._choice < len(self._candidates):
            return self._candidates[self._choice].get("ms")
        return None

    @property
    def workspace_bytes(self) -> int:
        """Scratch bytes the chosen candidate needs."""
        return self._workspace_bytes()

    def plan(self):
        """Pick the heuristics' first workable candidate (does nothing if already planned).

        Returns
        -------
        Plan
            ``self``, so ``Plan(...).plan()`` chains.
        """
        self._live()
        if self._planned:
            return self
        with self._plan_lock:
            if not self._planned:
                cands = self._heuristics()
                if not cands:
                    raise ValueError(f"{type(self).__name__}: no candidate for {self._problem()}")
                self._candidates = cands
                self._select(0)
                self._choice = 0
                self._planned = True
                if _logger.isEnabledFor(10):
                    _logger.debug("planned %s: %d candidate(s), first %s, workspace %d B",
                                  type(self).__name__ + " " + self._problem(), len(cands),
                                  cands[0].get("name", 0), self._workspace_bytes())
        return self

    def select(self, i: int) -> None:
        """Run candidate ``i`` from now on (an index into :attr:`candidates`)."""
        self.plan()
        i = int(i)
        if not 0 <= i < len(self._candidates):
            raise IndexError(f"candidate {i} out of range: {len(self._candidates)} candidates")
        with self._plan_lock:
            self._select(i)
            self._choice = i

    def autotune(self, *, stream=None, rounds: int = 5, store: bool = True,
                 force: bool = False) -> list[dict]:
        """Time every candidate and run the fastest from now on.

        The timer is :func:`time_candidates`: per candidate, the median of ``rounds`` loops of
        back-to-back runs of about half a millisecond, on fresh random inputs, with the L2
        cache flushed before each loop (unless the plan's class sets :attr:`tune_flush_l2`
        false); the candidates' loops are interleaved so that clock and host drift fall on all
        alike.  The result is kept in :func:`tuning_store` under
        the problem, the device architecture and the library version, and a later autotune of
        the same problem (in this process or another) selects it without timing, unless
        ``force``.

        Returns
        -------
        list of dict
            :attr:`candidates`, with ``ms`` for each timed one (``inf`` for one that failed).
        """
        refuse_in_capture(f"{type(self).__name__}.autotune()",
                          "timing candidates waits on events from the host")
        self.plan()
        key = self._store_key() if store else None
        st = tuning_store() if key is not None else None
        if st is not None and not force:
            rec = st.get(key)
            if rec is not None and self._apply_record(rec):
                _logger.debug("tuning store hit for %s %s: %s", type(self).__name__,
                              self._problem(), self._candidates[self._choice].get("name"))
                return self.candidates
        s = as_stream(stream, self._device)
        with self._plan_lock:
            keep = self._choice
            with self._runner(s) as run:
                def make(i):
                    def go():
                        run(i)
                    return go
                times = time_candidates([make(i) for i in range(len(self._candidates))], s,
                                        rounds=rounds, device=self._device,
                                        flush=self.tune_flush_l2)
            for c, t in zip(self._candidates, times):
                c["ms"] = t
            ok = [i for i, t in enumerate(times) if math.isfinite(t)]
            if not ok:
                self._select(keep)
                raise RuntimeError(f"{type(self).__name__}: no candidate ran for "
                                   f"{self._problem()}")
            best = min(ok, key=lambda i: times[i])
            self._select(best)
            self._choice = best
            self._tuned = True
        _logger.info("autotuned %s %s: %s in %.4f ms of %d candidate(s), workspace %d B",
                     type(self).__name__, self._problem(), self._candidates[best].get("name"),
                     times[best], len(times), self._workspace_bytes())
        if st is not None:
            st.put(key, {"candidate": self._candidates[best].get("id", best),
                         "index": best, "ms": times[best],
                         "names": [c.get("name") for c in self._candidates]})
        return self.candidates

    def _store_key(self):
        tk = self._tuning_key()
        if tk is None:
            return None
        dev = self._device
        arch = dev.arch if dev is not None else "?"
        return json.dumps([self.kind, arch, self._library_version(), tk], sort_keys=True,
                          default=str)

    def _apply_record(self, rec) -> bool:
        """Select the stored choice if it still names one of this plan's candidates."""
        try:
            want = rec["candidate"]
            idx = int(rec["index"])
        except (KeyError, TypeError, ValueError):
            return False
        ids = [c.get("id", i) for i, c in enumerate(self._candidates)]
        if 0 <= idx < len(ids) and ids[idx] == want:
            i = idx
        elif want in ids:
            i = ids.index(want)
        else:
            return False            # the library offers other candidates now: re-measure
        try:
            with self._plan_lock:
                self._select(i)
                self._choice = i
        except Exception:   # noqa: BLE001 - a stored choice that no longer builds: re-measure
            return False
        ms = rec.get("ms")
        if isinstance(ms, (int, float)):
            self._candidates[i]["ms"] = float(ms)
        self._tuned = True
        return True

    def __repr__(self) -> str:
        name = type(self).__name__
        if self.closed:
            return f"<{name} {self._problem()} (closed)>"
        if self._choice < 0:
            return f"<{name} {self._problem()}: not planned>"
        c = self._candidates[self._choice]
        t = c.get("ms")
        timing = f"{t * 1e3:.1f} us (autotuned)" if isinstance(t, float) and self._tuned \
            else "heuristic choice, untimed"
        return (f"<{name} {self._problem()}: {c.get('name', self._choice)} "
                f"[{self._choice + 1}/{len(self._candidates)}], workspace "
                f"{self._workspace_bytes()} B, {timing}{self._relaunch_text()}>")

    def _relaunch_text(self) -> str:
        """``", relaunch: 1 recorded, 1 refused"`` (empty when the plan relaunches nothing)."""
        if not self.relaunch_slots():
            return ""
        r = self.relaunch_info()
        parts = [f"{r[k]} {k}" for k in ("recorded", "refused", "failed", "pending") if r[k]]
        return f", relaunch: {', '.join(parts) or 'not yet'}"


# -- the one timer ---------------------------------------------------------------------------
#: Target length of one timed loop (ms) and the loop's bounds in runs.
LOOP_MS = 0.5
MAX_REPS = 200


#: ``plan.device``, the device the plan runs on: the ``_device`` slot under its public name, so
#: the libraries' hot paths read it at slot speed.
Plan.device = Plan.__dict__["_device"]


def time_candidates(runs: Sequence[Callable[[], None]], stream, *, rounds: int = 5,
                    device=None, flush: bool = True) -> list[float]:
    """Milliseconds per run of each callable: the median over ``rounds`` loops.

    Each callable queues one run on ``stream``.  Per candidate: one warm-up run (lazy module
    loads, first-use caches), one run that sizes its loop to about :data:`LOOP_MS`; then, in
    each round and for each candidate in turn, the L2 cache is flushed (a memset of twice its
    size) and a loop of back-to-back runs is timed with CUDA events.  Interleaving the
    candidates spreads clock and host drift over all of them; loops rather than single runs
    keep short kernels from being ranked by launch noise.  A candidate that raises gets
    ``inf``.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    refuse_in_capture("timing candidates (an autotune)",
                      "timing waits on events from the host")
    dev = device if device is not None else stream.device
    start, end = Event(dev), Event(dev)
    flush_buf = None
    if flush:
        l2 = dev.properties.l2_cache_size or (50 << 20)
        flush_buf = empty(2 * l2, np.uint8, device=dev, stream=stream)
    reps: list[int] = []
    try:
        for run in runs:
            try:
                run()
                start.record(stream)
                run()
                end.record(stream)
                end.sync()
                one = max(start.elapsed_ms(end), 1e-4)
                reps.append(max(1, min(MAX_REPS, int(LOOP_MS / one))))
            except Exception:   # noqa: BLE001 - a candidate that cannot run is not a choice
                reps.append(0)
        samples: list[list[float]] = [[] for _ in runs]
        for r in range(rounds):
            for i, run in enumerate(runs):
                n = reps[i]
                if not n:
                    continue
                if flush_buf is not None:
                    flush_buf.fill(r & 0xFF, stream)
                try:
                    start.record(stream)
                    for _ in range(n):
                        run()
                    end.record(stream)
                    end.sync()
                except Exception:   # noqa: BLE001
                    reps[i] = 0
                    samples[i] = []
                    continue
                samples[i].append(start.elapsed_ms(end) / n)
        return [sorted(s)[len(s) // 2] if s else float("inf") for s in samples]
    finally:
        if flush_buf is not None:
            flush_buf.close()
        start.close()
        end.close()


def scratch(shape, dtype, device, stream, strides=None, rng=None):
    """A device array of ``shape`` (and byte ``strides``) holding random, non-zero values,
    for timing: zeros can run faster than real data and would flatter a candidate."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng() if rng is None else rng
    item = dt.itemsize
    if strides is None:
        count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
        lo = 0
    else:
        lo, hi = 0, item
        for n, st in zip(shape, strides):
            if n > 1:
                if st < 0:
                    lo += (n - 1) * st
                else:
                    hi += (n - 1) * st
        count = (hi - lo + item - 1) // item
    count = max(count, 1)
    if dt.kind in "iu":
        host = rng.integers(1, 4, size=count).astype(dt)
    elif dt.kind == "b":
        host = np.ones(count, dt)
    else:
        vals = rng.uniform(0.5, 1.5, size=count) * rng.choice((-1.0, 1.0), size=count)
        host = vals.astype(dt)
    flat = to_device(host, device=device, stream=stream)
    if strides is None:
        return flat.reshape(shape) if len(shape) else flat.reshape(())
    return DeviceArray.from_buffer(flat.base, shape, dt, strides, offset=-lo)


