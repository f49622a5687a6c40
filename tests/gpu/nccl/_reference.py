"""numpy references of the NCCL collectives, over every rank's input at once.

Each function takes the list of the ranks' inputs (host arrays, rank order) and returns the
list of what each rank should hold afterwards, computed in float64 (int64 for integers,
wrapping to the element type like the GPU's integer arithmetic does).
"""

import numpy as np


def _wide(x):
    return x.astype(np.int64) if x.dtype.kind in "iu" else x.astype(np.float64)


def reduce_all(inputs, op):
    xs = [_wide(x) for x in inputs]
    if op == "sum":
        r = np.sum(xs, axis=0)
    elif op == "prod":
        r = np.prod(xs, axis=0)
    elif op == "max":
        r = np.max(xs, axis=0)
    elif op == "min":
        r = np.min(xs, axis=0)
    elif op == "avg":
        r = np.sum(xs, axis=0) / len(xs)
    else:
        raise ValueError(op)
    return r


def cast(r, dtype):
    """The wide result as ``dtype``; integers wrap, as two's-complement GPU arithmetic does."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        return np.asarray(r).astype(np.int64).astype(dtype)
    return np.asarray(r)


def all_reduce(inputs, op):
    r = reduce_all(inputs, op)
    return [r for _ in inputs]


def all_gather(inputs):
    g = np.concatenate([_wide(x).reshape(-1) for x in inputs])
    return [g for _ in inputs]


def reduce_scatter(inputs, op):
    r = reduce_all(inputs, op).reshape(-1)
    k = r.size // len(inputs)
    return [r[i * k:(i + 1) * k] for i in range(len(inputs))]


def all_to_all(inputs):
    n = len(inputs)
    flat = [_wide(x).reshape(-1) for x in inputs]
    k = flat[0].size // n
    return [np.concatenate([flat[src][dst * k:(dst + 1) * k] for src in range(n)])
            for dst in range(n)]


def broadcast(inputs, root):
    return [_wide(inputs[root]) for _ in inputs]
