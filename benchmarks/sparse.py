"""cuSPARSE through cudalibs beside cupyx.scipy.sparse and torch.sparse: SpMV and SpMM.

Run from a checkout::

    PYTHONPATH=. python3 benchmarks/sparse.py [--matrices poisson,powerlaw,block] [--quick]

What is measured
----------------
Three matrices, in float32 and float64, each library on a stream of its own on device 0:

1. **poisson**: the 5-point 2-D Poisson stencil on a 1024 x 1024 grid (10^6 rows, 5 entries
   a row), CSR;
2. **powerlaw**: a graph of 10^6 rows whose row lengths follow a power law (Zipf, exponent
   2.1, mean about 8 entries a row, a few rows of thousands), CSR: the load imbalance
   SpMV algorithms differ on;
3. **block**: a block-sparse matrix of 16 x 16 dense blocks (65536 rows, 1% of the blocks
   stored), CSR, BSR and Blocked-ELL (SpMM only: cuSPARSE's SpMV does not take Blocked-ELL;
   each block row padded to the widest, on tensor cores).

SpMV is ``y = A @ x``; SpMM is ``C = A @ B`` with ``B`` of 64 columns, row-major.  cudalibs
calls its one-shots (``cusparse.spmv``, ``cusparse.spmm`` with ``out=`` given, after a
warm-up call planned them: SpMM's algorithm is autotuned on that call, among every algorithm
cuSPARSE offers; SpMV runs cuSPARSE's default); cupyx multiplies its ``csr_matrix`` by a
``cupy`` array (``A @ x``); torch its ``sparse_csr`` tensor (``torch.mv`` / ``torch.mm``) --
the peers' rows use CSR whatever format ours is in.  Device time per call: warm-up calls, then
loops of back-to-back calls between two CUDA events of each library, the libraries' loops
interleaved; the cell is the median loop's time in milliseconds.  Ratios are the peer's time
over ours (above 1: cudalibs is faster).  Each case first compares cudalibs' result with the
peers' (the relative norm-wise difference is printed on stderr: Blocked-ELL's float32 runs
at TF32 precision, about 1e-4 from the peers); nothing here asserts a time.

A last table puts SpMM's autotuned algorithm beside cuSPARSE's default (``SpMM`` plans with
``alg="CUSPARSE_SPMM_ALG_DEFAULT"``) on each matrix.  A peer that is not installed shows
``n/a``.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

import numpy as np

if not __package__:  # run as a script: measure this checkout's cudalibs, not an installed one
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import _common as common
else:  # python -m benchmarks.sparse
    from . import _common as common

import cudalibs as cl
from cudalibs import cusparse

NA = "n/a"
REPEATS, WARMUP, LOOP_MS = 5, 3, 100.0
MATRICES = ("poisson", "powerlaw", "block")
DTYPES = (np.float32, np.float64)
SPMM_COLS = 64


# -- the matrices (host, scipy) -------------------------------------------------------------
def poisson(n: int):
    import scipy.sparse as sp
    one = sp.diags([-1, 2, -1], [-1, 0, 1], shape=(n, n))
    eye = sp.identity(n)
    return (sp.kron(eye, one) + sp.kron(one, eye)).tocsr()


def powerlaw(rows: int, rng):
    import scipy.sparse as sp
    lengths = np.minimum(rng.zipf(2.1, rows) * 4, rows // 4)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cols = rng.integers(0, rows, indptr[-1])
    m = sp.csr_matrix((np.ones(indptr[-1]), cols, indptr), shape=(rows, rows))
    m.sum_duplicates()
    m.data = rng.uniform(-1, 1, m.data.size)
    return m


def block(rows: int, b: int, density: float, rng):
    import scipy.sparse as sp
    nb = rows // b
    pattern = sp.random(nb, nb, density=density, format="csr", random_state=rng)
    blocks = rng.uniform(-1, 1, (pattern.nnz, b, b))
    return sp.bsr_matrix((blocks, pattern.indices, pattern.indptr), shape=(rows, rows))


def matrix(name: str, quick: bool, rng):
    if name == "poisson":
        return poisson(512 if quick else 1024)
    if name == "powerlaw":
        return powerlaw(1 << 18 if quick else 10 ** 6, rng)
    return block(1 << 14 if quick else 1 << 16, 16, 0.01, rng)


# -- one case -------------------------------------------------------------------------------
class Runner:
    """The lanes (one stream and clock per library) and the failures so far."""

    def __init__(self, torch_peer: common.Peer, cupy_peer: common.Peer):
        self.lanes = common.lanes(torch_peer, cupy_peer)
        self.failed = False

    def case(self, host, dt, op: str, rng, fmt: str) -> list:
        """``[ours ms, cupyx ms, torch ms]`` of SpMV (``op="spmv"``) or SpMM, ours on
        ``host`` in format ``fmt``."""
        ln = self.lanes
        s = ln.stream
        h, A = _ours(host, dt, fmt, s)
        rows, cols = h.shape
        dense = (rng.uniform(-1, 1, cols) if op == "spmv" else
                 rng.uniform(-1, 1, (cols, SPMM_COLS))).astype(dt)
        x = cl.to_device(dense, stream=s)
        out = cl.empty((rows,) if op == "spmv" else (rows, SPMM_COLS), dt, stream=s)
        fn = cusparse.spmv if op == "spmv" else cusparse.spmm
        fn(A, x, out, stream=s)                   # plans it; the timed calls are hits
        ours = out.get(stream=s)
        cases = {"cudalibs": (lambda: fn(A, x, out, stream=s), ln.clock)}
        csr = h.tocsr()
        if ln.cupy is not None:
            cp = ln.cupy
            import cupyx.scipy.sparse as cps   # a peer, present on the GPU machine only
            with ln.cupy_stream:
                ca, cx = cps.csr_matrix(csr), cp.asarray(dense)
                got = (ca @ cx).get()
            ln.cupy_stream.synchronize()
            print(f"  {op} {dt.__name__}: cudalibs vs cupyx {common.rel_diff(ours, got):.1e}",
                  file=sys.stderr)

            def cupy_call():
                with ln.cupy_stream:
                    ca @ cx

            cases["cupyx"] = (cupy_call, ln.cupy_clock)
        if ln.torch is not None:
            torch = ln.torch
            with torch.cuda.stream(ln.torch_stream):
                ta = torch.sparse_csr_tensor(torch.from_numpy(csr.indptr.astype(np.int64)),
                                             torch.from_numpy(csr.indices.astype(np.int64)),
                                             torch.from_numpy(csr.data),
                                             size=csr.shape).cuda()
                tx = torch.from_numpy(dense).cuda()
                tfn = torch.mv if op == "spmv" else torch.mm
                got = tfn(ta, tx).cpu().numpy()
            print(f"  {op} {dt.__name__}: cudalibs vs torch {common.rel_diff(ours, got):.1e}",
                  file=sys.stderr)

            def torch_call():
                with torch.cuda.stream(ln.torch_stream):
                    tfn(ta, tx)

            cases["torch"] = (torch_call, ln.torch_clock)
        trial = common.time_calls(*cases["cudalibs"], iters=1, repeats=1, warmup=1)[0]
        iters = max(1, min(200, int(LOOP_MS / max(trial, 1e-3))))
        times = common.time_interleaved(list(cases.values()), iters=iters, repeats=REPEATS,
                                        warmup=WARMUP)
        res = {label: common.median_spread(t)[0] for label, t in zip(cases, times)}
        for arr in (x, out):
            arr.close()
        A.close()
        return [res["cudalibs"], res.get("cupyx", NA), res.get("torch", NA)]

    def tuned_vs_default(self, host, dt, rng, fmt: str) -> list:
        """``[autotuned ms, default ms, tuned algorithm]`` of one SpMM."""
        s = self.lanes.stream
        h, A = _ours(host, dt, fmt, s)
        b = cl.to_device(rng.uniform(-1, 1, (h.shape[1], SPMM_COLS)).astype(dt), stream=s)
        tuned = cusparse.SpMM(A, b)
        tuned.autotune(stream=s)
        default = cusparse.SpMM(A, b, alg="CUSPARSE_SPMM_ALG_DEFAULT").plan()
        out = cl.empty((h.shape[0], SPMM_COLS), dt, stream=s)
        cases = [(lambda p=p: p.execute(b, out, stream=s), self.lanes.clock)
                 for p in (tuned, default)]
        times = common.time_interleaved(cases, iters=20, repeats=REPEATS, warmup=WARMUP)
        name = tuned.candidates[tuned.choice]["name"].replace("CUSPARSE_SPMM_", "")
        for obj in (tuned, default, b, out, A):
            obj.close()
        return [common.median_spread(times[0])[0], common.median_spread(times[1])[0], name]

    def guarded(self, label, fn, width=3):
        try:
            return fn()
        except Exception:   # noqa: BLE001 - report the case and go on
            self.failed = True
            print(f"{label} failed:\n{traceback.format_exc()}", file=sys.stderr)
            return ["error"] * width


def _ours(host, dt, fmt: str, s):
    """``(scipy matrix, our matrix)`` of ``host`` in ``fmt`` ("csr", "bsr", "blocked_ell")
    with values of ``dt``."""
    if fmt == "blocked_ell":
        h = host.tobsr().astype(dt)
        return h, cusparse.BlockedELL.from_scipy(h, stream=s)
    h = (host.tobsr() if fmt == "bsr" else host.tocsr()).astype(dt)
    return h, cusparse.from_scipy(h, stream=s)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if v < 10 else f"{v:.1f}"
    return NA if v is None else str(v)


def _ratio(ours, theirs) -> str:
    return common.fmt_ratio(theirs, ours) if isinstance(ours, float) else NA


def main(argv=None) -> int:
    ap = common.arg_parser(__doc__)
    ap.add_argument("--matrices", default=",".join(MATRICES),
                    help=f"comma-separated matrices to measure, of {', '.join(MATRICES)}")
    ap.add_argument("--quick", action="store_true",
                    help="smaller matrices (a quarter of the rows) and fewer timed loops")
    args = ap.parse_args(argv)
    names = [m for m in args.matrices.split(",") if m]
    unknown = [m for m in names if m not in MATRICES]
    if unknown:
        ap.error(f"unknown matrix(es) {', '.join(unknown)}: choose from {', '.join(MATRICES)}")
    common.exit_if_no_gpu("benchmarks/sparse.py")
    global REPEATS
    if args.quick:
        REPEATS = 3
    t0 = time.perf_counter()
    peers = {"cupyx": common.load_cupy(), "torch": common.load_torch()}
    r = Runner(peers["torch"], peers["cupyx"])
    rng = np.random.default_rng(0)
    dev = r.lanes.device
    print("## cuSPARSE: cudalibs beside cupyx.scipy.sparse and torch.sparse\n")
    print(f"- device: {dev.name} ({dev.arch}); cuSPARSE "
          f"{'.'.join(map(str, cusparse.version()))} via cudalibs {cl.__version__}")
    for p in peers.values():
        print(f"- {p.name} {p.version}")
    print(f"- median of {REPEATS} interleaved loops between CUDA events; ratios are the peer's "
          "time over ours (above 1: cudalibs is faster)\n")
    rows, tuned_rows = [], []
    for name in names:
        host = matrix(name, args.quick, rng)
        formats = ("csr", "bsr", "blocked_ell") if name == "block" else ("csr",)
        for fmt in formats:
            for dt in DTYPES:
                label = f"{name} {fmt} {np.dtype(dt).name}"
                for op in ("spmm",) if fmt == "blocked_ell" else ("spmv", "spmm"):
                    res = r.guarded(label + " " + op,
                                    lambda: r.case(host, dt, op, rng, fmt))
                    rows.append([label, op, *map(_fmt, res), _ratio(res[0], res[1]),
                                 _ratio(res[0], res[2])])
                res = r.guarded(label + " tuned", lambda: r.tuned_vs_default(
                    host, dt, rng, fmt))
                tuned_rows.append([label, *map(_fmt, res[:2]), str(res[2]),
                                   _ratio(res[0], res[1])])
    print(common.markdown_table(["matrix", "op", "cudalibs ms", "cupyx ms", "torch ms",
                                 "cupyx / ours", "torch / ours"], rows, right={2, 3, 4, 5, 6}))
    print("\n### SpMM: autotuned algorithm against cuSPARSE's default\n")
    print(common.markdown_table(["matrix", "tuned ms", "default ms", "tuned algorithm",
                                 "default / tuned"], tuned_rows, right={1, 2, 4}))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 1 if r.failed else 0


if __name__ == "__main__":
    sys.exit(main())
