"""Train a small residual CNN through cudalibs alone: cuDNN, cuBLAS and the shipped kernels.

The network, for 1 x 8 x 8 images (scikit-learn's handwritten digits)::

    conv3x3(1 -> 16) - batch-norm - ReLU                      r1
    conv3x3(16 -> 16) - batch-norm - ReLU                     r2
    conv3x3(16 -> 16) - batch-norm - (+ r1) - ReLU            r3   (the residual block)
    max-pool 2x2
    conv3x3(16 -> 32) - batch-norm - ReLU                     r4
    global average pool - linear(32 -> 10) - softmax cross-entropy

Every operation is a cudalibs call: convolutions forward and backward, batch normalisation
(training and inference), max pooling and ReLU through :mod:`cudalibs.cudnn`; the linear
layer and its gradients are cuBLAS GEMMs (:func:`cudalibs.cublas.gemm`, the bias gradient a
product with a row of ones); the loss, its gradient, the accuracy count, global average
pooling and its backward, the residual add and SGD with momentum are kernels of the shipped
PTX library (:mod:`cudalibs.kernels`).  The loss and the number of right answers are summed on
the device and read once per epoch; the learning rate lives on the device, so the schedule
changes it between steps without touching a captured graph.

``--graph`` captures one whole training step -- forward, backward, the 14 SGD updates, the
on-device loss and accuracy sums -- into a CUDA graph and replays it for every batch, each
batch first copied into the static input buffers the graph was captured with.  The protocol:
the first batch runs eagerly, which finds every convolution plan (autotuned, ``algo="find"``)
and sizes every workspace on the training stream; the same step is then captured (nothing
runs during capture: every plan and workspace already exists, temporaries become the graph's
own allocations) and replayed from the second batch on.

Data: scikit-learn's digits (1797 images, 10 classes; 80 % train, 20 % test) when
scikit-learn is installed, otherwise a generated set of noisy, shifted 8 x 8 patterns.
Target: at least 95 % test accuracy after the default 12 epochs (the script exits with
status 1 if it is missed).  Run::

    PYTHONPATH=. python examples/cnn_train.py [--graph] [--epochs 12] [--plot loss.png]

Data parallel (``--gpus N``, with or without ``--graph``): one process per GPU (the machinery
is ``examples/_dp.py``); ``--batch`` is the combined batch and every GPU takes its ``batch / N``
rows of each one.  The gradients are averaged over the GPUs by NCCL all-reduces of flat
buckets (``--bucket-mb``), each queued on a communication stream as soon as the backward has
written its last gradient, so they overlap the rest of the backward; with ``--graph`` the
whole step, all-reduces included, is one CUDA graph.  Batch normalisation normalises over
each GPU's own shard (as PyTorch's DistributedDataParallel without SyncBatchNorm does), so
an N-GPU run is *not* the one-GPU run on the combined batch: its reference is the combined
batch processed on one GPU as N shards from the same weights, their gradients averaged
(gradient accumulation, :func:`accumulated_step`).  The running statistics (and the loss)
are averaged over the GPUs at every step, so every GPU evaluates with the same ones.  After
each step the ranks' whole training states must be bitwise identical, and the weights equal
to the reference's within ``--rtol`` (exit status 1 otherwise)::

    PYTHONPATH=. python examples/cnn_train.py --gpus 2 [--graph] [--bucket-mb 25]

The model is importable: :func:`init_params` gives the initial weights as numpy arrays,
:func:`build` the model on the GPU, :meth:`ResidualCNN.step` one training step on device
arrays, :class:`GraphedStep` the captured step (``tests/gpu/test_cnn_train.py`` checks them
against PyTorch); :func:`dp_replica` one GPU's share of a data-parallel run.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

if not __package__:  # run as a script from a checkout: use this checkout's cudalibs
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import cudalibs as cl  # noqa: E402
from cudalibs import cublas, cudnn, kernels  # noqa: E402
from cudalibs import kernels as tk  # noqa: E402

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:   # the examples' shared data-parallel module sits beside this file
    sys.path.insert(0, _HERE)
import _dp  # noqa: E402

#: Test accuracy the default run reaches.
TARGET_ACCURACY = 0.95
#: The batch-norm layers, each following the convolution of the same number.
BN_LAYERS = (1, 2, 3, 4)
#: The gradients in the order the backward writes them.
GRAD_ORDER = ("fc.w", "fc.b", "bn4.g", "bn4.b", "conv4.w", "bn3.g", "bn3.b", "conv3.w",
              "bn2.g", "bn2.b", "conv2.w", "bn1.g", "bn1.b", "conv1.w")
#: What the forward leaves final besides the activations: the running statistics and the loss.
STAT_NAMES = tuple(f"bn{i}.running_{k}" for i in BN_LAYERS for k in ("mean", "var")) + ("loss",)


# -- parameters -----------------------------------------------------------------------------------
def param_shapes(channels=(16, 32), classes=10, in_channels=1) -> dict:
    """``{name: shape}`` of every trainable parameter, in the order SGD updates them."""
    c1, c2 = channels
    return {
        "conv1.w": (c1, in_channels, 3, 3), "bn1.g": (c1,), "bn1.b": (c1,),
        "conv2.w": (c1, c1, 3, 3), "bn2.g": (c1,), "bn2.b": (c1,),
        "conv3.w": (c1, c1, 3, 3), "bn3.g": (c1,), "bn3.b": (c1,),
        "conv4.w": (c2, c1, 3, 3), "bn4.g": (c2,), "bn4.b": (c2,),
        "fc.w": (classes, c2), "fc.b": (classes,),
    }


def init_params(seed=0, channels=(16, 32), classes=10, in_channels=1) -> dict:
    """The initial weights as float32 numpy arrays: He-normal convolutions, batch-norm scale 1
    and shift 0, a linear layer uniform in ``±1/sqrt(fan_in)`` (PyTorch's default)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(channels, classes, in_channels).items():
        if name.startswith("conv"):
            fan_in = int(np.prod(shape[1:]))
            v = rng.normal(0.0, math.sqrt(2.0 / fan_in), shape)
        elif name.endswith(".g"):
            v = np.ones(shape)
        elif name.startswith("bn"):
            v = np.zeros(shape)
        else:
            bound = 1.0 / math.sqrt(channels[1])
            v = rng.uniform(-bound, bound, shape)
        out[name] = v.astype(np.float32)
    return out


# -- the model --------------------------------------------------------------------------------------
class ResidualCNN:
    """The network's weights, SGD state, static activation buffers and one training step.

    Parameters
    ----------
    params : dict of numpy.ndarray
        Initial weights (:func:`init_params`).
    batch : int
        The training batch size (the static buffers are sized for it).
    image : (int, int, int)
        ``(channels, height, width)`` of an input image; height and width even.
    lr, momentum, weight_decay : float
        SGD hyperparameters (PyTorch's rule); ``lr`` is kept in a device scalar
        (:meth:`set_lr`).
    bn_momentum, bn_eps : float
        Batch-norm running-statistics momentum and epsilon (PyTorch's defaults).
    algo : str
        How the convolutions choose their algorithm (``"find"``: autotuned on first use).
    deterministic : bool, default True
        Only deterministic convolution backward algorithms, so that a replayed step gives the
        bits of an eager one; False lets the search pick among all of them (atomics
        included), as PyTorch's benchmark mode does unless ``cudnn.deterministic`` is set.
    stream : Stream, optional
        Where everything runs; a new non-blocking stream by default.
    """

    def __init__(self, params: dict, *, batch: int, image=(1, 8, 8), lr=0.05, momentum=0.9,
                 weight_decay=5e-4, bn_momentum=0.1, bn_eps=1e-5, algo="find",
                 deterministic=True, stream=None):
        s = self.stream = stream if stream is not None else cl.Stream()
        self.names = tuple(params)
        self.p = {k: cl.to_device(np.ascontiguousarray(v, np.float32), stream=s)
                  for k, v in params.items()}
        self.momentum_buffers = {k: cl.zeros(v.shape, stream=s) for k, v in self.p.items()}
        self.running = {i: (cl.zeros(self.p[f"bn{i}.g"].shape, stream=s),
                            cl.full(self.p[f"bn{i}.g"].shape, 1.0, np.float32, stream=s))
                        for i in BN_LAYERS}
        self.momentum, self.weight_decay = float(momentum), float(weight_decay)
        self.bn_momentum, self.bn_eps, self.algo = float(bn_momentum), float(bn_eps), algo
        self.deterministic = bool(deterministic)
        self.lr = cl.to_device(np.array([lr], np.float32), stream=s)
        self.batch = batch
        c1 = self.p["conv1.w"].shape[0]
        c2 = self.p["conv4.w"].shape[0]
        classes = self.p["fc.w"].shape[0]
        _, h, w = image
        n = batch
        big, small = (n, c1, h, w), (n, c1, h // 2, w // 2)
        shapes = {"a1": big, "r1": big, "a2": big, "r2": big, "a3": big, "r3": big,
                  "p": small, "a4": (n, c2, h // 2, w // 2), "r4": (n, c2, h // 2, w // 2),
                  "f": (n, c2), "logits": (n, classes), "dlogits": (n, classes), "df": (n, c2),
                  "dr4": (n, c2, h // 2, w // 2), "da4": (n, c2, h // 2, w // 2), "dp": small,
                  "dr3": big, "da3": big, "dr2": big, "da2": big, "dr1": big, "da1": big}
        #: Activations and their gradients: the same buffers every step (graph-friendly).
        self.buf = {k: cl.empty(v, stream=s) for k, v in shapes.items()}
        #: Gradients the libraries write into a given output (the batch-norm ones are the
        #: arrays cudnn.batch_norm_backward returns).
        self.grad = {k: cl.empty(self.p[k].shape, stream=s)
                     for k in ("conv1.w", "conv2.w", "conv3.w", "conv4.w", "fc.w", "fc.b")}
        self.ones = cl.to_device(np.ones((1, n), np.float32), stream=s)
        #: The last step's mean loss, and the sums since :meth:`reset_totals` (on the device).
        self.loss = cl.zeros((), stream=s)
        self.loss_sum = cl.zeros((), stream=s)
        self.correct = cl.zeros((), np.int64, stream=s)

    # -- host-side helpers ---------------------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        """Write the learning rate the next steps (eager or replayed) read on the device."""
        self.lr.copy_(np.array([lr], np.float32), stream=self.stream)

    def reset_totals(self) -> None:
        self.loss_sum.fill(0, self.stream)
        self.correct.fill(0, self.stream)

    def totals(self) -> tuple[float, int]:
        """``(sum of step losses, right answers)`` since :meth:`reset_totals` (synchronises)."""
        return (float(self.loss_sum.get(stream=self.stream)),
                int(self.correct.get(stream=self.stream)))

    def host_params(self) -> dict:
        return {k: v.get(stream=self.stream) for k, v in self.p.items()}

    def host_running(self) -> dict:
        return {i: (m.get(stream=self.stream), v.get(stream=self.stream))
                for i, (m, v) in self.running.items()}

    # -- the training step -----------------------------------------------------------------------
    def _conv(self, x, name, out):
        return cudnn.conv_forward(x, self.p[name], padding=1, algo=self.algo, out=out,
                                  stream=self.stream)

    def _bn_relu(self, i, x, out, relu=True):
        """Batch-norm (training) of ``x`` into ``out`` with ReLU in place; the state for the
        backward."""
        rm, rv = self.running[i]
        state = cudnn.batch_norm_train(x, self.p[f"bn{i}.g"], self.p[f"bn{i}.b"], rm, rv,
                                       momentum=self.bn_momentum, eps=self.bn_eps, out=out,
                                       stream=self.stream)
        if relu:
            cudnn.activation_forward(out, "relu", out=out, stream=self.stream)
        return state

    def _conv_backward(self, x, dy, name, dx, done):
        """The filter gradient into ``self.grad[name]``, and the input gradient into ``dx``
        (skipped when None).  With :attr:`deterministic`, a replayed step gives the bits of
        an eager one."""
        s, w = self.stream, self.p[name]
        cudnn.conv_backward_filter(x, dy, w.shape, padding=1, algo=self.algo,
                                   deterministic=self.deterministic, out=self.grad[name],
                                   stream=s)
        done(name)
        if dx is not None:
            cudnn.conv_backward_data(dy, w, x.shape, padding=1, algo=self.algo,
                                     deterministic=self.deterministic, out=dx, stream=s)

    def _bn_backward(self, i, x, dy, state, dx, grads, done):
        dx, dg, db = cudnn.batch_norm_backward(x, dy, self.p[f"bn{i}.g"], state, out=dx,
                                               stream=self.stream)
        for name, g in ((f"bn{i}.g", dg), (f"bn{i}.b", db)):
            if name in self.grad:
                # cuDNN returns these in new arrays: one copy into the given gradient buffer.
                g = self.grad[name].copy_(g, self.stream)
            grads[name] = g
        done(f"bn{i}.g", f"bn{i}.b")
        return dx

    def step(self, x, labels) -> None:
        """One training step on ``x`` ``(batch, C, H, W)`` float32 and ``labels``
        ``(batch,)`` int32: forward, loss, backward, SGD.  Queues work on :attr:`stream` and
        returns at once; the loss is in :attr:`loss` (and added to :attr:`loss_sum`).

        Nothing here reads the device, and every temporary (the batch-norm statistics and
        parameter gradients) is dropped before returning, so the step can be captured.
        """
        self.update(self.forward_backward(x, labels))

    def forward_backward(self, x, labels, ready=None) -> dict:
        """The forward, the loss and the backward of :meth:`step`; returns the gradients by
        parameter name (what :meth:`update` applies).

        ``ready``, when given, is called with names as their values become final on the
        stream: the batch-norm running statistics and the loss (``STAT_NAMES``) after the
        forward, then each gradient as the backward writes it (in ``GRAD_ORDER``) -- what a
        data-parallel wrapper needs to start reducing them while the backward goes on.
        Gradients that cuDNN returns in new arrays (the batch-norm ones) are copied into
        :attr:`grad` when it has an entry for them.
        """
        s, p, b = self.stream, self.p, self.buf

        def done(*names):
            if ready is not None:
                ready(*names)

        # forward
        self._conv(x, "conv1.w", b["a1"])
        st1 = self._bn_relu(1, b["a1"], b["r1"])
        self._conv(b["r1"], "conv2.w", b["a2"])
        st2 = self._bn_relu(2, b["a2"], b["r2"])
        self._conv(b["r2"], "conv3.w", b["a3"])
        st3 = self._bn_relu(3, b["a3"], b["r3"], relu=False)
        kernels.add(b["r3"], b["r1"], out=b["r3"], stream=s)           # the residual
        cudnn.activation_forward(b["r3"], "relu", out=b["r3"], stream=s)
        cudnn.pooling_forward(b["r3"], 2, mode="max", out=b["p"], stream=s)
        self._conv(b["p"], "conv4.w", b["a4"])
        st4 = self._bn_relu(4, b["a4"], b["r4"])
        tk.global_avg_pool(b["r4"], out=b["f"], stream=s)
        cublas.gemm(b["f"], p["fc.w"].T, out=b["logits"], stream=s)
        kernels.channel_bias_act(b["logits"], p["fc.b"], activation="identity", stream=s)
        # loss and accuracy, kept on the device
        tk.cross_entropy(b["logits"], labels, out=self.loss, stream=s)
        kernels.add(self.loss_sum, self.loss, out=self.loss_sum, stream=s)
        tk.accuracy_count(b["logits"], labels, self.correct, accumulate=True, stream=s)
        done(*STAT_NAMES)
        # backward
        grads = dict(self.grad)
        d = tk.cross_entropy_backward(b["logits"], labels, out=b["dlogits"], stream=s)
        cublas.gemm(d.T, b["f"], out=self.grad["fc.w"], stream=s)
        done("fc.w")
        cublas.gemm(self.ones, d, out=self.grad["fc.b"].reshape(1, -1), stream=s)
        done("fc.b")
        cublas.gemm(d, p["fc.w"], out=b["df"], stream=s)
        tk.global_avg_pool_backward(b["df"], out=b["dr4"], stream=s)
        kernels.relu_backward(b["dr4"], b["r4"], out=b["dr4"], stream=s)
        da4 = self._bn_backward(4, b["a4"], b["dr4"], st4, b["da4"], grads, done)
        self._conv_backward(b["p"], da4, "conv4.w", b["dp"], done)
        cudnn.pooling_backward(b["p"], b["dp"], b["r3"], 2, mode="max", out=b["dr3"], stream=s)
        kernels.relu_backward(b["dr3"], b["r3"], out=b["dr3"], stream=s)
        da3 = self._bn_backward(3, b["a3"], b["dr3"], st3, b["da3"], grads, done)
        self._conv_backward(b["r2"], da3, "conv3.w", b["dr2"], done)
        kernels.relu_backward(b["dr2"], b["r2"], out=b["dr2"], stream=s)
        da2 = self._bn_backward(2, b["a2"], b["dr2"], st2, b["da2"], grads, done)
        self._conv_backward(b["r1"], da2, "conv2.w", b["dr1"], done)
        kernels.add(b["dr1"], b["dr3"], out=b["dr1"], stream=s)        # the residual's share
        kernels.relu_backward(b["dr1"], b["r1"], out=b["dr1"], stream=s)
        da1 = self._bn_backward(1, b["a1"], b["dr1"], st1, b["da1"], grads, done)
        self._conv_backward(x, da1, "conv1.w", None, done)
        return grads

    def update(self, grads: dict) -> None:
        """SGD with momentum of every parameter with ``grads[name]``."""
        for name in self.names:
            tk.sgd(self.p[name], grads[name], self.momentum_buffers[name], lr=self.lr,
                   momentum=self.momentum, weight_decay=self.weight_decay, stream=self.stream)

    def state(self) -> list:
        """The whole training state as device arrays: weights, momentum buffers and the
        batch-norm running statistics."""
        return ([self.p[k] for k in self.names] + [self.momentum_buffers[k] for k in self.names]
                + [a for i in BN_LAYERS for a in self.running[i]])

    # -- inference -------------------------------------------------------------------------------
    def predict(self, x):
        """Logits of ``x`` (any batch size) with the running batch-norm statistics."""
        s, p = self.stream, self.p
        conv = dict(padding=1, algo=self.algo, stream=s)

        def bn(i, a, relu=True):
            rm, rv = self.running[i]
            y = cudnn.batch_norm_infer(a, p[f"bn{i}.g"], p[f"bn{i}.b"], rm, rv, eps=self.bn_eps,
                                       stream=s)
            return cudnn.activation_forward(y, "relu", out=y, stream=s) if relu else y

        r1 = bn(1, cudnn.conv_forward(x, p["conv1.w"], **conv))
        r2 = bn(2, cudnn.conv_forward(r1, p["conv2.w"], **conv))
        r3 = bn(3, cudnn.conv_forward(r2, p["conv3.w"], **conv), relu=False)
        kernels.add(r3, r1, out=r3, stream=s)
        cudnn.activation_forward(r3, "relu", out=r3, stream=s)
        pooled = cudnn.pooling_forward(r3, 2, mode="max", stream=s)
        r4 = bn(4, cudnn.conv_forward(pooled, p["conv4.w"], **conv))
        logits = cublas.gemm(tk.global_avg_pool(r4, stream=s), p["fc.w"].T, stream=s)
        return kernels.channel_bias_act(logits, p["fc.b"], activation="identity", stream=s)

    def accuracy(self, x, labels) -> float:
        """Share of ``x``'s rows classified as ``labels`` (device arrays; synchronises)."""
        right = tk.accuracy_count(self.predict(x), labels, stream=self.stream)
        return int(right.get(stream=self.stream)) / labels.shape[0]


def build(seed=0, *, batch=64, image=(1, 8, 8), channels=(16, 32), classes=10, **options):
    """A :class:`ResidualCNN` with :func:`init_params` weights; ``options`` go to it."""
    params = init_params(seed, channels, classes, image[0])
    return ResidualCNN(params, batch=batch, image=image, **options)


class GraphedStep:
    """A training step of ``model`` captured once as a CUDA graph and replayed per batch.

    On the first call, :class:`cudalibs.StepGraph` runs the step eagerly on that batch --
    finding every plan and sizing every workspace on the model's stream -- and captures it;
    every call after that copies the batch into the graph's static inputs (device-to-device
    when the batch is on the device) and replays the graph.  The loss and sums land in the
    model's buffers as with an eager step.
    """

    def __init__(self, model: ResidualCNN, x_shape, label_dtype=np.int32):
        self.model = model
        self.x_shape, self.label_dtype = tuple(x_shape), label_dtype
        self.graph = None

    @property
    def nodes(self) -> int:
        """Nodes of the captured step (0 before the first call)."""
        return 0 if self.graph is None else self.graph.num_nodes

    def __call__(self, x, labels) -> None:
        if self.graph is None:
            self.graph = cl.StepGraph(self.model.step, x, labels, stream=self.model.stream)
        else:
            self.graph(x, labels)


# -- data -----------------------------------------------------------------------------------------
def generated_digits(seed=0, n=1800, classes=10, size=8):
    """Noisy 8 x 8 images of ``classes`` random binary patterns, each shifted by up to one
    pixel: a stand-in for the digits when scikit-learn is missing."""
    rng = np.random.default_rng(10_000 + seed)
    protos = (rng.random((classes, size + 1, size + 1)) > 0.55).astype(np.float32)
    labels = np.arange(n) % classes
    shifts = rng.integers(0, 2, size=(n, 2))
    images = np.stack([protos[c, dy:dy + size, dx:dx + size]
                       for c, (dy, dx) in zip(labels, shifts)])
    images += rng.normal(0.0, 0.4, images.shape).astype(np.float32)
    return images, labels


def load_data(seed=0, synthetic=False):
    """``(x_train, y_train, x_test, y_test, name)``: float32 ``(n, 1, 8, 8)`` images
    standardised with the training set's mean and deviation, int32 labels; 20 % held out."""
    name = "generated patterns"
    images = None
    if not synthetic:
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            pass
        else:
            digits = load_digits()
            images, labels = digits.images.astype(np.float32) / 16.0, digits.target
            name = "scikit-learn digits"
    if images is None:
        images, labels = generated_digits(seed)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(labels))
    n_test = len(labels) // 5
    test, train = order[:n_test], order[n_test:]
    mean, std = images[train].mean(), images[train].std()
    x = ((images - mean) / std).astype(np.float32)[:, None]
    y = labels.astype(np.int32)
    return x[train], y[train], x[test], y[test], name


# -- training ---------------------------------------------------------------------------------------
def cosine_lr(base: float, epoch: int, epochs: int) -> float:
    return 0.5 * base * (1.0 + math.cos(math.pi * epoch / epochs))


def epoch_batches(x_train, y_train, batch: int, epochs: int, seed: int = 0):
    """Each epoch's shuffled batches, ``(images (steps, batch, C, H, W), labels (steps,
    batch))`` on the host; the last partial batch is dropped."""
    rng = np.random.default_rng(seed + 1)
    per_epoch = len(y_train) // batch
    for _ in range(epochs):
        order = rng.permutation(len(y_train))[:per_epoch * batch]
        yield (x_train[order].reshape((per_epoch, batch) + x_train.shape[1:]),
               y_train[order].reshape(per_epoch, batch))


def train(model: ResidualCNN, data, *, epochs: int, lr: float, graph: bool = False, seed=0,
          log=print) -> dict:
    """Train for ``epochs``; one line per epoch through ``log``.

    Returns
    -------
    dict
        ``losses`` (every step's loss, float32), ``test_accuracy`` (after the last epoch),
        ``epochs`` (one dict per epoch), ``graph_nodes`` (with ``graph``).
    """
    x_train, y_train, x_test, y_test, _ = data
    s = model.stream
    batch = model.batch
    per_epoch = len(y_train) // batch           # the last partial batch is dropped
    history = cl.empty((epochs * per_epoch,), stream=s)
    test_x, test_y = cl.to_device(x_test, stream=s), cl.to_device(y_test, stream=s)
    run = GraphedStep(model, (batch,) + x_train.shape[1:]) if graph else model.step
    records = []
    k = 0
    for epoch, (xh, yh) in enumerate(epoch_batches(x_train, y_train, batch, epochs, seed)):
        model.set_lr(cosine_lr(lr, epoch, epochs))
        xs, ys = cl.to_device(xh, stream=s), cl.to_device(yh, stream=s)
        model.reset_totals()
        s.sync()
        start = time.perf_counter()
        for i in range(per_epoch):
            run(xs[i], ys[i])
            history[k:k + 1].copy_(model.loss.reshape(1), stream=s)
            k += 1
        s.sync()
        elapsed = time.perf_counter() - start
        loss_sum, right = model.totals()
        rec = {"epoch": epoch + 1, "loss": loss_sum / per_epoch,
               "train_accuracy": right / (per_epoch * batch),
               "test_accuracy": model.accuracy(test_x, test_y),
               "steps_per_s": per_epoch / elapsed, "lr": cosine_lr(lr, epoch, epochs)}
        records.append(rec)
        log(f"epoch {rec['epoch']:2d}/{epochs}  loss {rec['loss']:.4f}  "
            f"train acc {rec['train_accuracy']:6.2%}  test acc {rec['test_accuracy']:6.2%}  "
            f"{rec['steps_per_s']:8.1f} steps/s  lr {rec['lr']:.4f}")
    out = {"losses": history.get(stream=s), "epochs": records,
           "test_accuracy": records[-1]["test_accuracy"] if records else float("nan")}
    if graph:
        out["graph_nodes"] = run.nodes
    return out


def plot(losses, path) -> bool:
    """Write the loss curve to ``path`` (PNG); False when matplotlib is not installed."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:        # the examples' shared plot helper sits beside this file
        sys.path.insert(0, here)
    from _plot import plot_losses

    return plot_losses(losses, path, title="residual CNN trained through cudalibs", ylabel="cross-entropy loss")


# -- data parallel --------------------------------------------------------------------------------
def dp_replica(comm, params: dict, *, batch: int, image=(1, 8, 8),
               bucket_bytes: int = _dp.DEFAULT_BUCKET_BYTES,
               first_bucket_bytes: int = _dp.FIRST_BUCKET_BYTES, **options):
    """One rank's model for data-parallel training, and its step.

    The gradients are views of one flat buffer laid out in backward order (the batch-norm
    ones, which cuDNN returns in new arrays, are copied in: one copy each); the running
    statistics and the loss are views of a second buffer, averaged over the ranks while the
    backward runs.

    Parameters
    ----------
    comm : cudalibs.nccl.Communicator
        This rank's communicator (its device current).
    params : dict
        The initial weights (:func:`init_params`), the same on every rank.
    batch : int
        This rank's share of the combined batch.
    image, options
        As for :class:`ResidualCNN`.
    bucket_bytes, first_bucket_bytes : int
        Gradient bucket limits (:class:`_dp.GradSync`).

    Returns
    -------
    model : ResidualCNN
    sync : _dp.GradSync
    step : callable
        ``step(x, labels)`` queues one data-parallel step and returns :attr:`ResidualCNN.loss`
        (the loss averaged over the ranks).
    """
    model = ResidualCNN(params, batch=batch, image=image, **options)
    s = model.stream
    grads = _dp.FlatBuffer({k: model.p[k].shape for k in GRAD_ORDER}, np.float32, stream=s)
    running = {f"bn{i}.running_{k}": a for i in BN_LAYERS
               for k, a in zip(("mean", "var"), model.running[i])}
    stats = _dp.FlatBuffer({**{k: a.shape for k, a in running.items()}, "loss": ()},
                           np.float32, stream=s, init=running)
    model.grad = dict(grads.views)
    model.running = {i: (stats.views[f"bn{i}.running_mean"], stats.views[f"bn{i}.running_var"])
                     for i in BN_LAYERS}
    model.loss = stats.views["loss"]
    sync = _dp.GradSync(comm, s, [(stats.flat, stats.spans), (grads.flat, grads.spans)],
                        STAT_NAMES + GRAD_ORDER, bucket_bytes=bucket_bytes,
                        first_bucket_bytes=first_bucket_bytes, op="avg")

    def step(x, labels):
        with sync.step():
            grads = model.forward_backward(x, labels, sync.ready)
        model.update(grads)
        return model.loss

    return model, sync, step


def accumulated_step(model: ResidualCNN, shards) -> float:
    """One SGD step of ``model`` on a combined batch given as equal shards, the way the
    data-parallel ranks take it, on one GPU: each shard's forward and backward from the
    same weights and running statistics (batch norm normalises over the shard), then the
    shards' gradients, running statistics and losses averaged, and one update.  With one
    shard this is :meth:`ResidualCNN.step`, bit for bit.  Returns the mean loss (reads the
    device)."""
    s, n = model.stream, len(shards)
    running = [a for i in BN_LAYERS for a in model.running[i]]
    start = [a.copy(stream=s) for a in running] if n > 1 else None
    acc, acc_running, losses = {}, [], []
    for k, (x, y) in enumerate(shards):
        if k:
            _dp.copy_state(running, start, s)
        grads = model.forward_backward(x, y)
        if k == 0:
            acc = {name: g.copy(stream=s) for name, g in grads.items()}
            acc_running = [a.copy(stream=s) for a in running]
        else:
            for name, g in grads.items():
                kernels.add(acc[name], g, out=acc[name], stream=s)
            for a, r in zip(acc_running, running):
                kernels.add(a, r, out=a, stream=s)
        losses.append(float(model.loss.get(stream=s)))
    if n > 1:
        for a in list(acc.values()) + acc_running:
            kernels.scale(a, 1.0 / n, out=a, stream=s)
    _dp.copy_state(running, acc_running, s)
    model.update(acc)
    return float(np.mean(losses))


def dp_rank(ctx, opts: dict) -> dict:
    """One rank of ``--gpus N`` training (run by :func:`_dp.launch`): its replica trains on
    its shard of every combined batch; rank 0 checks against :func:`accumulated_step`."""
    seed, world, batch = opts["seed"], ctx.world, opts["batch"]
    if batch % world:
        raise ValueError(f"--batch {batch} does not split over {world} GPUs")
    b = batch // world
    x_train, y_train, x_test, y_test, name = load_data(seed, opts["synthetic"])
    image = x_train.shape[1:]
    params = init_params(seed, in_channels=image[0])
    model, sync, step = dp_replica(ctx.comm, params, batch=b, image=image,
                                   bucket_bytes=_dp.bucket_bytes(opts))
    s, epochs = model.stream, opts["epochs"]
    xs, ys = (np.concatenate(a) for a in
              zip(*epoch_batches(x_train, y_train, batch, epochs, seed)))
    per_epoch = xs.shape[0] // epochs
    inputs = [cl.to_device(ctx.shard(xs, axis=1), stream=s),
              cl.to_device(ctx.shard(ys, axis=1), stream=s)]
    check = not opts["no_check"]
    models = [model]
    ref = None
    if ctx.root and check:
        rmodel = ResidualCNN(params, batch=b, image=image)
        models.append(rmodel)
        gx, gy = cl.to_device(xs, stream=rmodel.stream), cl.to_device(ys, stream=rmodel.stream)

        def ref_step(i):
            return accumulated_step(rmodel, [(gx[i][k * b:(k + 1) * b], gy[i][k * b:(k + 1) * b])
                                             for k in range(world)])
        ref = _dp.Reference(rmodel.state, ref_step, rmodel.host_params, rmodel.stream)

    def before_step(i):
        if i % per_epoch == 0:
            for m in models:
                m.set_lr(cosine_lr(opts["lr"], i // per_epoch, epochs))

    ctx.log(f"data: {name}, {len(y_train)} training images; combined batch {batch} = {world} "
            f"x {b}; {'CUDA graph replay' if opts['graph'] else 'eager'} steps; "
            f"{sync.describe()}")
    result = _dp.train(ctx, step, inputs, stream=s, state=model.state,
                       params=model.host_params, before_step=before_step, graph=opts["graph"],
                       check=check, reference=ref, rtol=opts["rtol"], every=per_epoch)
    acc = model.accuracy(cl.to_device(x_test, stream=s), cl.to_device(y_test, stream=s))
    reached = acc >= opts["target"]
    ctx.log(f"test accuracy {acc:.2%}: target {opts['target']:.0%} "
            f"{'reached' if reached else 'NOT reached'}")
    result["test_accuracy"] = acc
    _dp.report(ctx, result, opts, batch, "images", reached=reached, plot=plot)
    return result


def arg_parser() -> argparse.ArgumentParser:
    """The command line of :func:`main` (``vars(arg_parser().parse_args([...]))`` gives the
    options a data-parallel rank takes)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--epochs", type=int, default=12, help="passes over the training set")
    parser.add_argument("--batch", type=int, default=64, help="images per step")
    parser.add_argument("--lr", type=float, default=0.1, help="peak learning rate (cosine decay)")
    parser.add_argument("--seed", type=int, default=0, help="initial weights and batch order")
    parser.add_argument("--graph", action="store_true",
                        help="capture one training step as a CUDA graph and replay it")
    parser.add_argument("--synthetic", action="store_true",
                        help="use the generated data set even when scikit-learn is installed")
    parser.add_argument("--plot", nargs="?", const="cnn_train_loss.png", default=None,
                        metavar="PNG", help="write the loss curve to PNG (%(const)s when PNG "
                        "is left out; default: %(default)s, no plot)")
    parser.add_argument("--target", type=float, default=TARGET_ACCURACY,
                        help="test accuracy to reach (exit status 1 otherwise)")
    _dp.add_arguments(parser, rtol=1e-5)
    return parser


def main(argv=None) -> int:
    parser = arg_parser()
    args = parser.parse_args(argv)
    if args.gpus is not None:
        return _dp.main(dp_rank, vars(args))
    shortage = _dp.gpu_shortage("cnn_train")
    if shortage is not None:
        print(shortage)
        return 2

    data = load_data(args.seed, args.synthetic)
    model = build(args.seed, batch=args.batch, image=data[0].shape[1:])
    print(f"data: {data[4]}, {len(data[1])} training and {len(data[3])} test images "
          f"{data[0].shape[1:]}; batch {args.batch}; "
          f"{'CUDA graph replay' if args.graph else 'eager'} steps on {cl.Device(0).name}")
    result = train(model, data, epochs=args.epochs, lr=args.lr, graph=args.graph,
                   seed=args.seed)
    if args.graph:
        print(f"one training step = a graph of {result['graph_nodes']} nodes")
    acc = result["test_accuracy"]
    ok = acc >= args.target
    print(f"test accuracy {acc:.2%}: target {args.target:.0%} "
          f"{'reached' if ok else 'NOT reached'}")
    if args.plot:
        if plot(result["losses"], args.plot):
            print(f"loss curve written to {args.plot}")
        else:
            print("matplotlib is not installed: no plot")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
