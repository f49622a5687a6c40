"""Data-parallel training of a small MLP on two GPUs with cudalibs.

The model is ``y = relu(x @ W1 + b1) @ W2 + b2`` with the mean squared error loss, trained by
plain SGD.  Every matrix product (forward, backward, and the bias terms, which are products
with a column of ones) is a cuBLAS GEMM through :func:`cudalibs.cublas.gemm`; the element-wise
steps are the kernels of :mod:`cudalibs.kernels`.

Data parallelism: each GPU holds a full copy of the weights and takes half of every batch.
After its backward pass each GPU holds the gradient of the mean loss over *its* half; an
NCCL all-reduce with ``op="avg"`` turns those into the gradient of the mean over the whole
batch (the halves are equal), so both GPUs apply the same update and their weights stay
identical.  The script checks, after every step, that

1. the weights on the two GPUs are bitwise identical, and
2. they equal (within float32 tolerance) those of a single-GPU run over the combined batch,

and exits with status 1 when either fails.

Why one process for both GPUs: ``Communicator.init_all`` plus ``nccl.group()`` lets one
Python thread drive both ranks, so the whole algorithm -- and the single-GPU reference it is
checked against -- reads top to bottom in one file with no launcher.  In a multi-process job
(``torchrun``, ``mpirun``) only two things change: each process makes its own communicator
with ``Communicator.from_store`` / ``Communicator.from_mpi`` and runs the loop body for its
own rank, without the ``group`` (which is only needed when one thread issues the collective
for several ranks).

Run::

    PYTHONPATH=. python examples/data_parallel.py [--steps 10]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# NVLink SHARP multicast stays off (set before NCCL is loaded).
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

if not __package__:  # run as a script from a checkout: use this checkout's cudalibs
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import cudalibs as cl  # noqa: E402
from cudalibs import nccl  # noqa: E402

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:   # the examples' shared module sits beside this file
    sys.path.insert(0, _HERE)
import _dp  # noqa: E402


class MLP:
    """Weights and one training step of the two-layer perceptron, on one GPU."""

    PARAMS = ("W1", "b1", "W2", "b2")

    def __init__(self, host_params: dict, device: cl.Device):
        from cudalibs import cublas, kernels

        self.gemm, self.k = cublas.gemm, kernels
        self.device = device
        self.p = {name: cl.to_device(host_params[name], device=device) for name in self.PARAMS}
        self.grad = {name: cl.empty_like(self.p[name]) for name in self.PARAMS}
        self._ones = {}

    def ones(self, rows: int) -> cl.DeviceArray:
        """A (rows, 1) column of ones: bias terms as GEMMs."""
        if rows not in self._ones:
            self._ones[rows] = cl.to_device(np.ones((rows, 1), np.float32), device=self.device)
        return self._ones[rows]

    def forward(self, x):
        gemm, p = self.gemm, self.p
        ones = self.ones(x.shape[0])
        h = self.k.bias_relu(gemm(x, p["W1"]), p["b1"])           # relu(x W1 + b1)
        y = gemm(h, p["W2"])
        gemm(ones, p["b2"].reshape(1, -1), out=y, beta=1.0)        # y += 1 b2
        return h, y

    def backward(self, x, t):
        """Gradients of mean((y - t)^2) over this GPU's samples, into ``self.grad``.

        Returns
        -------
        float
            The loss over these samples (for printing).
        """
        gemm, p, g, k = self.gemm, self.p, self.grad, self.k
        h, y = self.forward(x)
        ones = self.ones(x.shape[0])
        k.axpy(-1.0, t, y)                                         # y <- y - t
        diff = y.get()
        loss = float(np.mean(diff.astype(np.float64) ** 2))
        dy = k.scale(y, 2.0 / y.size, out=y)                       # dL/dy
        gemm(h.T, dy, out=g["W2"])                                 # h^T dy
        gemm(ones.T, dy, out=g["b2"].reshape(1, -1))               # column sums of dy
        dh = gemm(dy, p["W2"].T)
        dz = k.relu_backward(dh, h)                                # dh where h > 0
        gemm(x.T, dz, out=g["W1"])
        gemm(ones.T, dz, out=g["b1"].reshape(1, -1))
        return loss

    def sgd(self, lr: float) -> None:
        for name in self.PARAMS:
            self.k.axpy(-lr, self.grad[name], self.p[name])        # p <- p - lr g

    def weights(self) -> dict:
        return {name: self.p[name].get() for name in self.PARAMS}


def make_problem(n: int, d_in: int, hidden: int, d_out: int, seed: int):
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((d_in, d_out)).astype(np.float32) / np.sqrt(d_in)
    x = rng.standard_normal((n, d_in)).astype(np.float32)
    t = np.tanh(x @ teacher).astype(np.float32)
    params = {
        "W1": (rng.standard_normal((d_in, hidden)) / np.sqrt(d_in)).astype(np.float32),
        "b1": (0.1 * rng.standard_normal(hidden)).astype(np.float32),
        "W2": (rng.standard_normal((hidden, d_out)) / np.sqrt(hidden)).astype(np.float32),
        "b2": (0.1 * rng.standard_normal(d_out)).astype(np.float32),
    }
    return x, t, params


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--steps", type=int, default=10, help="training steps")
    ap.add_argument("--batch", type=int, default=64, help="combined batch (even)")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    ap.add_argument("--rtol", type=float, default=1e-5,
                    help="allowed norm-wise difference from the single-GPU run")
    args = ap.parse_args(argv)
    shortage = _dp.gpu_shortage("data_parallel", 2)
    if shortage is not None:
        print(shortage)
        return 2
    if args.batch % 2:
        ap.error("--batch must be even")

    x, t, params = make_problem(args.batch, d_in=32, hidden=64, d_out=16, seed=0)
    half = args.batch // 2
    devices = [cl.Device(0), cl.Device(1)]
    comms = nccl.Communicator.init_all(devices)
    try:
        replicas = [MLP(params, d) for d in devices]
        shards = [(cl.to_device(x[r * half:(r + 1) * half], device=d),
                   cl.to_device(t[r * half:(r + 1) * half], device=d))
                  for r, d in enumerate(devices)]
        # The reference: one GPU, the whole batch, the same code.
        single = MLP(params, devices[0])
        whole = (cl.to_device(x, device=devices[0]), cl.to_device(t, device=devices[0]))

        ok = True
        print("| step | loss (2 GPUs) | loss (1 GPU) | ranks identical | rel. diff vs 1 GPU |")
        print("|-----:|--------------:|-------------:|:---------------:|-------------------:|")
        for step in range(1, args.steps + 1):
            losses = [m.backward(*shard) for m, shard in zip(replicas, shards)]
            # One thread issues the all-reduce for both ranks, so the calls go in one group.
            with nccl.group():
                for comm, m in zip(comms, replicas):
                    for name in MLP.PARAMS:
                        comm.all_reduce(m.grad[name], out=m.grad[name], op="avg")
            for m in replicas:
                m.sgd(args.lr)
            ref_loss = single.backward(*whole)
            single.sgd(args.lr)

            w0, w1, ws = (m.weights() for m in (*replicas, single))
            same = all(np.array_equal(w0[n], w1[n]) for n in MLP.PARAMS)
            diff = max(rel_error(w0[n], ws[n]) for n in MLP.PARAMS)
            ok &= same and diff <= args.rtol
            print(f"| {step:4d} | {np.mean(losses):13.6f} | {ref_loss:12.6f} | "
                  f"{'yes' if same else 'NO':^15} | {diff:18.2e} |")
    finally:
        nccl.close_all(comms)

    if ok:
        print(f"OK: after every step the weights on both GPUs were identical and within "
              f"{args.rtol:g} of the single-GPU run")
        return 0
    print("MISMATCH: see the table above")
    return 1


if __name__ == "__main__":
    sys.exit(main())
