"""Train a small decoder-only transformer through cudalibs alone: cuBLASLt, cuDNN, the kernels.

The model (GPT-style, pre-norm), for token ids ``[batch, seq]``::

    x = tok_emb[ids] + pos_emb[positions]                            embedding gathers + add
    repeat `layers` times:
        y = layer_norm(x)                                            cudnn.layer_norm
        q, k, v = split(y @ Wqkv^T + bqkv)                           cuBLASLt, bias epilogue
        o = softmax(q k^T / sqrt(d), causal) v                       cudnn.sdpa, per head
        x = x + (o @ Wproj^T + bproj)                                cuBLASLt bias; kernels.add
        y = layer_norm(x)
        x = x + (gelu(y @ W1^T + b1) @ W2^T + b2)                    cuBLASLt gelu_aux_bias, bias
    logits = layer_norm(x) @ Whead^T                                 untied output layer
    loss = cross_entropy(logits, targets, ignore_index=-100)         train kernels

The backward pass is written out by hand, each step the adjoint of one forward call: the
cross-entropy gradient kernel; weight gradients as cuBLAS GEMMs of bfloat16 operands into
float32 (``dW = dY^T X``) and bias gradients as a product with a row of ones; input gradients
through cuBLASLt; the MLP's GELU through the ``dgelu_bgrad`` epilogue (the gradient of the
pre-activation, read from the forward's ``aux`` matrix, and the first bias's gradient in the
same matmul); ``cudnn.layer_norm_backward`` and ``cudnn.sdpa_backward``; the embedding
scatter-add.  AdamW (:func:`cudalibs.kernels.train.adamw`) updates float32 master weights
and writes their bfloat16 copies, which the next forward reads.

Precision: activations and matmul operands bfloat16 (float32 accumulation everywhere); the
layer-norm parameters are used in float32 directly (cuDNN takes float32 scale and bias with
bfloat16 data); gradients of the weights float32, except the first MLP bias's, which the
``dgelu_bgrad`` epilogue writes in bfloat16.  The parameters live in three flat groups (the
matrices, which get weight decay; the other vectors; the first MLP biases with their
bfloat16 gradients), each one AdamW launch updating its float32 masters and bfloat16 copies.
With ``--fp8`` the forward GEMMs of the blocks' linear layers take fp8 operands (below);
nothing else changes.  With ``--moe`` every block's MLP is a mixture of experts (below).

fp8 (``--fp8``, one GPU of compute capability 8.9 or newer): the forward GEMMs of the four
linear layers of every block (``qkv``, ``proj``, ``fc1``, ``fc2``) run in fp8 with delayed
scaling, in the manner of Transformer Engine's ``DelayedScaling`` recipe; the float32 master
weights, AdamW and the rest of the step are those of the bfloat16 path.  Each such layer
quantizes its bfloat16 input and its float32 master weight to ``float8_e4m3fn``
(:func:`cudalibs.kernels.quantize_fp8`, multiplying by the tensor's current scale and
recording ``max |x|`` in the same pass), and cuBLASLt multiplies them (``a`` row-major,
``b = w.T``: the TN layout its fp8 kernels take; per-tensor ``a_scale``/``b_scale`` the
inverse scales; split float32 accumulation, cuBLASLt's default -- Transformer Engine uses fast
accumulation in the forward) into bfloat16 with the same fused epilogues -- the bias, and for
``fc1`` ``gelu_aux_bias``, which cuBLASLt runs beside fp8 inputs with a bfloat16 output, so
no GEMM of the four stays in bfloat16 for want of an epilogue.  The output layer (``head``)
stays bfloat16, as in the usual fp8 recipes.  After every step one
:func:`cudalibs.kernels.delayed_scale_update` launch records the step's amaxes in a
16-step history per tensor and sets each scale to ``448 / max(history)`` (margin 0), so the
next step quantizes with scales from the amaxes of the steps before it; the state lives on
the device (:class:`Fp8State`) and the update is part of the step, so ``--graph`` captures
it with the rest.  The scales start at 1; the first step (eager, also under ``--graph``,
where it is the warm-up) scales every tensor by its own amax, measured just before it is
quantized, and seeds the history with it.  Only the forward GEMMs are fp8: the backward stays
bfloat16, its input and weight gradients computed from the bfloat16 activations and weight
copies the bfloat16 path keeps (Transformer Engine also runs those GEMMs in fp8, with e5m2
gradients; that is not done here), and attention, the layer norms and the loss are
unchanged.  The target is the same; ``--compare`` also trains the bfloat16 model from the
same seed and requires the two runs' mean losses of the last 20 steps to agree within
``FP8_RTOL`` and ``FP8_ATOL``.  No data parallel with ``--fp8``.

Mixture of experts (``--moe``, ``--experts E`` (8), ``--topk K`` (2)): every block's MLP
becomes ``E`` expert MLPs, each ``ffn / K`` wide -- the ``K`` experts a token goes to have
together the dense MLP's width and cost, the usual way to compare the two -- and a router::

    logits = y @ Wrouter^T                                   cuBLAS, float32 out, no bias
    weights, ids = top K of softmax(logits), renormalised    kernels.topk_softmax
    routing = rows t*K+j sorted by expert, stable           kernels.moe_routing (offsets)
    xs = y[token of each sorted row]                         kernels.moe_permute
    ys = gelu(xs @ W1[e]) @ W2[e] for the rows of expert e    kernels.grouped_mm, twice
    out[t] = sum_j weights[t, j] ys[row of (t, j)]           kernels.moe_unpermute

The expert weights are stacked, ``(E, d_model, ffn / K)`` and ``(E, ffn / K, d_model)``,
float32 masters with bfloat16 copies in the matrices' AdamW group (the router too); the
experts have no biases.  The backward runs the adjoint kernels (``moe_unpermute_backward``,
``moe_permute_backward``, ``topk_softmax_backward``), ``grouped_mm_wgrad`` for the experts'
weight gradients (float32, straight into the flat gradient buffer) and ``grouped_mm`` on the
transposed view of each expert's weight for the input gradients.  The GELU (tanh form) of
the sorted rows, its backward, the float32-to-bfloat16 rounding of the router's logit
gradient and the rows-per-expert counts are four small kernels compiled at start-up with
:func:`cudalibs.compile` (:data:`MOE_SOURCE`): the shipped library has no GELU backward and
no type conversion, and cuBLASLt's GELU epilogues only follow a cuBLASLt matmul.  With
``K = 1`` the weight is the softmax probability itself (renormalised it would be 1 and the
router would learn nothing from the loss), as in the Switch Transformer.  Load balancing
(Switch's auxiliary loss, coefficient ``--moe-aux``, 0.01; 0 turns it off): ``aux =
moe_aux * E * sum_e f_e P_e`` per block, ``f_e`` the share of the ``T K`` routed rows expert
``e`` got and ``P_e`` its mean router probability; its gradient reaches the router through
``P`` (``f`` is a count), and its minimum, balanced routing, is ``moe_aux``.  The losses
:func:`train_step` returns and the target are the cross-entropy alone; each block's ``aux``
and rows per expert are in :attr:`Transformer.moe`, and the progress lines print them.
Nothing of the routing reaches the host: the grouped GEMMs and the permutations read the
group offsets from device memory when they run, so ``--graph`` captures the MoE step like
the dense one and every replay routes its own batch.  The same target; ``--compare``
trains the dense bfloat16 model from the same seed and requires the mean losses of the last
20 steps to agree within ``MOE_RTOL`` and ``MOE_ATOL``.  No ``--fp8`` and no data parallel
with ``--moe``.

The task: reverse a sequence.  Each row is ``a_1 .. a_n SEP a_n .. a_2`` and the targets are
the row shifted by one; the loss counts only the answer half (the reversed tokens): the other
positions carry the ignore index.  A model that has learnt the task predicts every answer
token, so the loss goes to 0; guessing gives ``log(vocab - 2)``.

Learning rate and step counter live on the device: ``--graph`` captures one whole step --
forward, backward, the step counter's increment and the AdamW updates -- into a CUDA graph
(:class:`cudalibs.StepGraph`) and replays it for every batch, the warm-up step being the
first batch run eagerly.  The schedule (linear warm-up, then cosine decay) writes the
device's learning rate between steps, outside the graph.

Target: the mean loss of the last 20 steps below 0.05 after the default 400 steps (batch 64,
sequences of 32 tokens); the script exits with status 1 when it is missed.  Run::

    PYTHONPATH=. python examples/transformer_train.py [--steps 400] [--graph] [--plot loss.png]
    PYTHONPATH=. python examples/transformer_train.py --fp8 [--compare] [--graph]
    PYTHONPATH=. python examples/transformer_train.py --moe [--topk 2] [--compare] [--graph]

Data parallel (``--gpus N``, with or without ``--graph``): one process per GPU (the machinery
is ``examples/_dp.py``); ``--batch`` is the combined batch and every GPU takes its
``batch / N`` rows of each one.  The gradients are summed over the GPUs by NCCL all-reduces
of buckets -- slices of the flat gradient buffers, ``--bucket-mb`` each -- queued on a
communication stream as soon as the backward has written their last gradient, so they
overlap the rest of the backward; with ``--graph`` the whole step, all-reduces included, is
one CUDA graph.  Summing is right because the loss is normalised globally: before the
backward, one all-reduce adds up every GPU's sum of token losses and count of counted
tokens, and each GPU's gradient is divided by the global count.  The run therefore equals
the one-GPU run on the combined batch up to rounding (the bfloat16 gradients of the first MLP
biases are reduced in bfloat16).  After each step the ranks' whole training states must be
bitwise identical, and the weights equal to those of :func:`train_step` on the combined
batch (started from the same state) within ``--rtol`` (exit status 1 otherwise)::

    PYTHONPATH=. python examples/transformer_train.py --gpus 2 [--graph] [--bucket-mb 25]

The model is importable: :func:`init_params` gives the initial weights as numpy arrays,
:func:`build` the model on the GPU, :func:`train_step` one training step on device arrays
(``tests/gpu/test_transformer_train.py`` checks it against PyTorch); :func:`dp_replica` one
GPU's share of a data-parallel run.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

if not __package__:  # run as a script from a checkout: use this checkout's cudalibs
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import cudalibs as cl  # noqa: E402
from cudalibs import dtypes  # noqa: E402
from cudalibs import kernels as tk  # noqa: E402
from cudalibs.cublas import gemm, matmul  # noqa: E402
from cudalibs.cudnn import (layer_norm, layer_norm_backward, sdpa, sdpa_backward,  # noqa: E402
                            softmax_backward)
from cudalibs.kernels import add  # noqa: E402

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:   # the examples' shared data-parallel module sits beside this file
    sys.path.insert(0, _HERE)
import _dp  # noqa: E402

BF16 = dtypes.bfloat16
F32 = np.dtype(np.float32)
I32 = np.dtype(np.int32)
#: The target label of positions the loss does not count (PyTorch's default).
IGNORE_INDEX = -100
#: Mean loss of the last :data:`TARGET_WINDOW` steps the default run gets below.
TARGET_LOSS = 0.05
TARGET_WINDOW = 20
#: ``--fp8 --compare``: the fp8 run's mean loss over the last :data:`TARGET_WINDOW` steps
#: may differ from the bfloat16 run's (same seed) by ``FP8_RTOL`` of the bfloat16 value
#: plus ``FP8_ATOL`` (:func:`fp8_agrees`).  Basis (a float32 numpy emulation of both
#: runs, bfloat16 rounding at the same points, seed 0, not a GPU measurement): after 60 steps
#: 0.3963 against 0.3927, after 400 steps 0.00103 against 0.00102 -- the bounds leave an
#: order of magnitude for the GPU's own roundings; a broken fp8 path stays near log(62).
FP8_RTOL = 0.10
FP8_ATOL = 0.02
#: ``--moe --compare``: the MoE run's mean loss over the last :data:`TARGET_WINDOW` steps
#: may differ from the dense bfloat16 run's (same seed) by ``MOE_RTOL`` of the dense value
#: plus ``MOE_ATOL`` (:func:`moe_agrees`).  Basis (a numpy emulation of both models in
#: float64 with bfloat16 rounding at the same points, tests/gpu/_transformer_ref.py, seed 0,
#: not a GPU measurement): the MoE model learns the task as fast as the dense one -- mean of
#: steps 81-100 0.0093 against 0.0117, of steps 381-400 0.00093 against 0.00102; the bounds
#: leave an order of magnitude for the GPU's roundings and routing.
MOE_RTOL = 0.10
MOE_ATOL = 0.02
#: Elements each parameter's offset in the flat buffers is rounded up to (512 bytes of
#: float32, 256 of bfloat16: every library sees well-aligned pointers).
_ALIGN = 128


@dataclass(frozen=True)
class Config:
    """The model, the task and the optimizer.

    Attributes
    ----------
    vocab : int
        Token ids ``0 .. vocab - 1``; ``vocab - 1`` is the separator, ``0 .. vocab - 3`` the
        data tokens.
    seq : int
        Tokens per row (``2 n``: ``n`` to reverse, the separator, ``n - 1`` answers fed back).
    d_model, heads, layers, ffn : int
        Width, attention heads (``d_model / heads`` a multiple of 8), blocks, MLP width.
    batch : int
        Rows per step.
    lr, warmup, decay_steps, min_lr_ratio : float, int, int, float
        Peak learning rate, linear warm-up steps, the step where the cosine decay ends, and
        its floor as a fraction of the peak.
    betas, eps, weight_decay : AdamW's (weight decay on the matrices only).
    ln_eps : float
        Layer-norm epsilon.
    fp8 : bool
        Run the blocks' linear layers' forward GEMMs in fp8 (``float8_e4m3fn``) with delayed
        scaling (the module docstring's ``--fp8``); the rest of the step stays bfloat16.
    fp8_history : int
        Steps of amax history the delayed scaling takes the maximum over.
    moe : bool
        Every block's MLP a mixture of experts (the module docstring's ``--moe``).
    experts, topk : int
        MoE: the experts per block, and how many of them each token is sent to.
    moe_aux : float
        MoE: the coefficient of the load-balancing loss (0: none).
    """

    vocab: int = 64
    seq: int = 32
    d_model: int = 128
    heads: int = 4
    layers: int = 2
    ffn: int = 512
    batch: int = 64
    lr: float = 2e-3
    warmup: int = 50
    decay_steps: int = 400
    min_lr_ratio: float = 0.1
    betas: tuple = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.01
    ln_eps: float = 1e-5
    fp8: bool = False
    fp8_history: int = 16
    moe: bool = False
    experts: int = 8
    topk: int = 2
    moe_aux: float = 0.01

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def tokens(self) -> int:
        """Tokens per step, ``batch * seq``."""
        return self.batch * self.seq

    @property
    def expert_ffn(self) -> int:
        """MoE: each expert's MLP width, ``ffn / topk`` (a token's experts together have the
        dense MLP's width and cost)."""
        return self.ffn // self.topk

    def check(self) -> "Config":
        if self.seq % 2 or self.seq < 4:
            raise ValueError(f"seq must be even and >= 4, got {self.seq}")
        if self.vocab < 4:
            raise ValueError(f"vocab must be >= 4, got {self.vocab}")
        if self.d_model % self.heads or self.head_dim % 8 or self.head_dim > 128:
            raise ValueError(f"d_model / heads must be a multiple of 8 up to 128 (cuDNN's "
                             f"attention), got {self.d_model} / {self.heads}")
        if self.d_model % 8 or self.ffn % 8:
            raise ValueError("d_model and ffn must be multiples of 8 (cuBLASLt's GELU aux)")
        if self.fp8 and (self.d_model % 16 or self.ffn % 16):
            raise ValueError("fp8: d_model and ffn must be multiples of 16 (the K of cuBLASLt's "
                             f"fp8 GEMMs), got {self.d_model} and {self.ffn}")
        if self.fp8 and self.fp8_history < 1:
            raise ValueError(f"fp8_history must be >= 1, got {self.fp8_history}")
        if self.moe:
            if self.fp8:
                raise ValueError("fp8 and moe do not combine: the experts' grouped GEMMs are "
                                 "bfloat16 (fp8 covers the dense blocks' linear layers)")
            if not 1 <= self.topk <= self.experts:
                raise ValueError(f"moe: topk must be 1 .. experts ({self.experts}), got "
                                 f"{self.topk}")
            if self.ffn % self.topk or self.expert_ffn % 8:
                raise ValueError(f"moe: the experts' width ffn / topk = {self.ffn} / "
                                 f"{self.topk} must be a whole multiple of 8 (the grouped "
                                 "GEMM's K and N)")
            if not self.moe_aux >= 0:
                raise ValueError(f"moe: moe_aux must be >= 0, got {self.moe_aux}")
        return self


# -- the task and the initial weights (numpy only) ------------------------------------------
def make_batch(rng: np.random.Generator, config: Config) -> tuple[np.ndarray, np.ndarray]:
    """One batch of the reversal task: ``(ids, targets)``, int32 ``[batch, seq]``.

    Row: ``a_1 .. a_n SEP a_n .. a_2`` (``n = seq / 2``); targets: the next token, with
    :data:`IGNORE_INDEX` on the first ``n`` positions (the question and the separator), so that
    exactly ``n`` answer tokens per row count.
    """
    b, n = config.batch, config.seq // 2
    a = rng.integers(0, config.vocab - 2, size=(b, n))
    sep = np.full((b, 1), config.vocab - 1)
    full = np.concatenate([a, sep, a[:, ::-1]], axis=1)      # 2n + 1 tokens
    ids = full[:, :-1].astype(np.int32)
    targets = full[:, 1:].astype(np.int32)
    targets[:, :n] = IGNORE_INDEX
    return np.ascontiguousarray(ids), np.ascontiguousarray(targets)


def make_batches(config: Config, steps: int, seed: int = 0) -> list:
    """The ``(ids, targets)`` of ``steps`` training steps, from ``seed`` (what :func:`train`
    feeds)."""
    rng = np.random.default_rng(seed + 1)
    return [make_batch(rng, config) for _ in range(steps)]


def param_shapes(config: Config) -> dict:
    """``{name: shape}`` of every parameter (PyTorch's ``nn.Linear`` layout: ``(out, in)``).

    With ``config.moe`` each block's ``fc1``/``fc2`` are replaced by the router
    ``h{i}.router.w`` ``(experts, d_model)`` (an ``nn.Linear`` without bias) and the stacked
    expert weights ``h{i}.experts.fc1.w`` ``(experts, d_model, expert_ffn)`` and
    ``h{i}.experts.fc2.w`` ``(experts, expert_ffn, d_model)``, in the ``(in, out)`` layout
    the grouped GEMM multiplies by (``torch._grouped_mm``'s); the experts have no biases.
    """
    c, f, v = config.d_model, config.ffn, config.vocab
    shapes = {"tok_emb": (v, c), "pos_emb": (config.seq, c)}
    for i in range(config.layers):
        shapes.update({f"h{i}.ln1.w": (c,), f"h{i}.ln1.b": (c,),
                       f"h{i}.qkv.w": (3 * c, c), f"h{i}.qkv.b": (3 * c,),
                       f"h{i}.proj.w": (c, c), f"h{i}.proj.b": (c,),
                       f"h{i}.ln2.w": (c,), f"h{i}.ln2.b": (c,)})
        if config.moe:
            e, h = config.experts, config.expert_ffn
            shapes.update({f"h{i}.router.w": (e, c), f"h{i}.experts.fc1.w": (e, c, h),
                           f"h{i}.experts.fc2.w": (e, h, c)})
        else:
            shapes.update({f"h{i}.fc1.w": (f, c), f"h{i}.fc1.b": (f,),
                           f"h{i}.fc2.w": (c, f), f"h{i}.fc2.b": (c,)})
    shapes.update({"lnf.w": (c,), "lnf.b": (c,), "head.w": (v, c)})
    return shapes


def is_layer_norm(name: str) -> bool:
    """Whether ``name`` is a layer norm's scale or shift."""
    return ".ln" in name or name.startswith("lnf")


def decays(name: str) -> bool:
    """Whether AdamW's weight decay applies to parameter ``name``: the matrices (the
    embeddings included), not the biases nor the layer norms."""
    return name.endswith("_emb") or (name.endswith(".w") and not is_layer_norm(name))


def init_params(config: Config, seed: int = 0) -> dict:
    """The initial weights, float32 numpy arrays by name.

    Matrices and embeddings normal with std 0.02 (the residual projections ``proj`` and
    ``fc2`` -- the experts' too -- scaled by ``1 / sqrt(2 layers)``, GPT-2's rule); layer-norm
    scales 1.  Biases and layer-norm shifts start at small random values (std 0.02) rather
    than zeros, so no parameter starts at exactly zero.  The router's small weights start
    every token near uniform routing.
    """
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in param_shapes(config).items():
        if is_layer_norm(name) and name.endswith(".w"):
            v = np.ones(shape)
        else:
            std = 0.02
            if name.endswith(("proj.w", "fc2.w")):
                std /= math.sqrt(2 * config.layers)
            v = rng.normal(0.0, std, shape)
        out[name] = v.astype(np.float32)
    return out


def lr_at(config: Config, step: int) -> float:
    """The learning rate of step ``step`` (0-based): linear warm-up, then cosine decay to
    ``min_lr_ratio * lr`` at ``decay_steps`` (held after it)."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    t = min(1.0, (step - config.warmup) / max(1, config.decay_steps - config.warmup))
    floor = config.min_lr_ratio
    return config.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t)))


# -- the model on the device -----------------------------------------------------------------
def _round_up(n: int, m: int) -> int:
    return (n + m - 1) // m * m


class _Flat:
    """The parameters of one AdamW group in flat buffers: float32 masters and moments, the
    gradients (``grad_dtype``) and the bfloat16 copies, each parameter a view at an aligned
    offset.  The gradient buffer's padding is zeroed once and never written, so the update
    leaves the padding at zero."""

    def __init__(self, host: dict, names, weight_decay: float, stream, grad_dtype=F32):
        offsets, n = {}, 0
        for name in names:
            offsets[name] = n
            n = _round_up(n + host[name].size, _ALIGN)
        flat = np.zeros(n, np.float32)
        for name in names:
            flat[offsets[name]:offsets[name] + host[name].size] = host[name].ravel()
        s = stream
        self.names = tuple(names)
        #: Each parameter's element span in the flat buffers.
        self.spans = {k: (o, o + host[k].size) for k, o in offsets.items()}
        self.weight_decay = float(weight_decay)
        self.master = cl.to_device(flat, stream=s)
        self.grad = cl.zeros(n, grad_dtype, stream=s)
        self.exp_avg = cl.zeros(n, F32, stream=s)
        self.exp_avg_sq = cl.zeros(n, F32, stream=s)
        # The first bf16 copies, rounded to nearest even on the host as AdamW rounds them.
        self.copy = cl.to_device(flat.astype(BF16), stream=s)

        def views(arr):
            return {k: arr[o:o + host[k].size].reshape(host[k].shape)
                    for k, o in offsets.items()}

        self.params, self.grads, self.copies = (views(self.master), views(self.grad),
                                                views(self.copy))

    def update(self, **kw) -> None:
        """One AdamW launch over the whole group."""
        tk.adamw(self.master, self.grad, self.exp_avg, self.exp_avg_sq,
                 weight_decay=self.weight_decay, param_copy=self.copy, **kw)


#: The linear layers of a block whose forward GEMMs ``--fp8`` runs in fp8 (the output layer
#: ``head`` stays bfloat16).
FP8_LINEARS = ("qkv", "proj", "fc1", "fc2")
E4M3 = dtypes.float8_e4m3fn
#: The largest finite ``float8_e4m3fn``: delayed scaling maps the amax of reference to it.
E4M3_MAX = 448.0


class Fp8State:
    """The delayed-scaling state of the fp8 forward GEMMs, on the device.

    Two tensors per fp8 linear layer ``h{i}.{qkv,proj,fc1,fc2}``: its input activation
    (``"<layer>.x"``) and its weight (``"<layer>.w"``).  For all of them at once: an amax
    history ``[fp8_history, n]`` (newest row first), this step's amaxes, the scales the next
    quantization multiplies by, and their inverses (the dequantisation factors the fp8
    matmul takes as ``a_scale``/``b_scale``).  Tensor ``j`` owns column ``4 j`` of each (the
    other columns stay at amax 0 and scale 1): cuBLASLt reads a scale at 16-byte aligned
    addresses only, and one :func:`~cudalibs.kernels.delayed_scale_update` launch then updates
    every tensor.

    Start: every scale 1, the history zeros, :attr:`seeded` False.  While it is False (the
    first training step; with ``--graph`` the step graph's eager warm-up), each tensor is
    scaled by its own amax, measured just before it is quantized (``scale = 448 / amax``:
    "current scaling"); that step's amaxes then start the history, and from the second step
    on every quantization uses the scale derived from the previous steps' amaxes (delayed
    scaling, Transformer Engine's ``DelayedScaling`` with ``margin=0`` and
    ``amax_compute_algo="max"``).
    """

    #: float32s between two tensors' columns: 16 bytes, cuBLASLt's alignment of fp8 scales.
    STRIDE = 4

    def __init__(self, config: Config, stream):
        s = stream
        self.names = tuple(f"h{i}.{lin}.{t}" for i in range(config.layers)
                           for lin in FP8_LINEARS for t in ("x", "w"))
        n = len(self.names) * self.STRIDE
        self.history = cl.zeros((config.fp8_history, n), F32, stream=s)
        self.amax = cl.zeros(n, F32, stream=s)
        self.scale = cl.to_device(np.ones(n, np.float32), stream=s)
        self.scale_inv = cl.to_device(np.ones(n, np.float32), stream=s)
        # The first step's per-tensor scale update reads and writes a history of its own.
        self._first = cl.zeros(1, F32, stream=s)
        self._col = {name: j * self.STRIDE for j, name in enumerate(self.names)}
        #: False until the first step has recorded its amaxes (a host flag: the first step
        #: queues the extra amax passes, the later ones, captured or not, do not).
        self.seeded = False

    def views(self, name: str) -> tuple:
        """``(amax, scale, scale_inv)`` of tensor ``name``: one-element device views."""
        j = self._col[name]
        return tuple(a[j:j + 1] for a in (self.amax, self.scale, self.scale_inv))

    def quantize(self, name: str, x):
        """``(e4m3 x * scale, scale_inv)`` of tensor ``name``, recording ``max |x|`` in the
        same pass (before the first update: scaled by its own amax, see the class)."""
        amax, scale, scale_inv = self.views(name)
        if not self.seeded:
            tk.amax(x, out=amax)
            tk.delayed_scale_update(self._first, amax, scale, scale_inv, fp8_max=E4M3_MAX,
                                    algo="most_recent")
        return tk.quantize_fp8(x, scale, dtype=E4M3, amax=amax), scale_inv

    def update(self) -> None:
        """The delayed scaling of every tensor, one launch: this step's amaxes into the
        history, the next scales from its maximum."""
        tk.delayed_scale_update(self.history, self.amax, self.scale, self.scale_inv,
                                fp8_max=E4M3_MAX, algo="max")
        self.seeded = True

    def arrays(self) -> list:
        """The state's device arrays (history, amaxes, scales, inverses)."""
        return [self.history, self.amax, self.scale, self.scale_inv]

    def host_scales(self, stream) -> dict:
        """``{tensor name: scale}`` as floats (synchronises)."""
        sc = self.scale.get(stream=stream)
        return {k: float(sc[j]) for k, j in self._col.items()}


#: The element-wise steps of the MoE MLP the kernel library has no kernel for, compiled once
#: per process by :func:`cudalibs.compile` (NVRTC; disk-cached): GELU (tanh form) on the
#: expert-sorted rows and its backward -- the dense MLP's GELU is a cuBLASLt epilogue, which
#: only follows a cuBLASLt matmul, and :func:`cudalibs.kernels.bias_gelu` has no backward --,
#: float32 to bfloat16 (the router's logit gradient, for its bfloat16 GEMMs), and the routing
#: offsets as float32 counts of rows per expert.  bfloat16 travels as its 16 bits (no header),
#: rounded to nearest even; every value is computed in float32.
MOE_SOURCE = r"""
typedef unsigned short bf16_t;
typedef unsigned long long u64;

__device__ __forceinline__ float bf16_load(bf16_t h) {
    return __uint_as_float(((unsigned int)h) << 16);
}
__device__ __forceinline__ bf16_t bf16_round(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                             // ties to even
    return (bf16_t)(u >> 16);
}
// tanh(sqrt(2/pi) (v + 0.044715 v^3)), the GELU approximation of cuBLASLt and PyTorch's "tanh"
__device__ __forceinline__ float gelu_tanh(float v) {
    return tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v));
}

extern "C" __global__ void moe_gelu(const bf16_t* pre, bf16_t* act, u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const float v = bf16_load(pre[i]);
        act[i] = bf16_round(0.5f * v * (1.0f + gelu_tanh(v)));
    }
}

extern "C" __global__ void moe_gelu_backward(const bf16_t* dact, const bf16_t* pre, bf16_t* dpre,
                                             u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x) {
        const float v = bf16_load(pre[i]);
        const float t = gelu_tanh(v);
        const float grad = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * 0.7978845608028654f
                           * (1.0f + 3.0f * 0.044715f * v * v);
        dpre[i] = bf16_round(bf16_load(dact[i]) * grad);
    }
}

extern "C" __global__ void moe_to_bf16(const float* x, bf16_t* y, u64 n) {
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (u64)gridDim.x * blockDim.x)
        y[i] = bf16_round(x[i]);
}

extern "C" __global__ void moe_counts(const int* offsets, float* counts, int experts) {
    const int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < experts) counts[e] = (float)(offsets[e + 1] - offsets[e]);
}
"""
_MOE_THREADS = 256
#: Blocks of a grid-stride launch at most (enough to fill any GPU several times over).
_MOE_BLOCKS = 4096


class MoeState:
    """The mixture-of-experts blocks' statistics on the device, and the MoE MLP's own
    kernels (:data:`MOE_SOURCE`).

    Every forward writes, for each block, the rows its routing sent to each expert and its
    load-balancing loss into fixed device arrays (a captured step writes them at every
    replay), so a progress line reads the last step's without the step waiting for the host.

    Attributes
    ----------
    config : Config
    counts : DeviceArray
        float32 ``(layers, experts)``: rows (of ``tokens * topk``) routed to each expert.
    aux : DeviceArray
        float32 ``(layers,)``: each block's load-balancing loss (0 when ``moe_aux`` is 0).
    ones : DeviceArray
        float32 ``(tokens, 1)`` of ones: the router probabilities' column sums, and the
        load-balancing gradient broadcast to every token, are products with it.
    module : Module
        The compiled :data:`MOE_SOURCE`.
    """

    def __init__(self, config: Config, stream):
        s = stream
        self.config = config
        self.module = cl.compile(MOE_SOURCE, name="transformer_moe.cu")
        self.counts = cl.zeros((config.layers, config.experts), F32, stream=s)
        self.aux = cl.zeros(config.layers, F32, stream=s)
        self.ones = cl.to_device(np.ones((config.tokens, 1), np.float32), stream=s)

    def _map(self, name: str, out, *args) -> None:
        """One grid-stride launch of element-wise kernel ``name`` over ``out``."""
        n = out.size
        if n:
            blocks = min(-(-n // _MOE_THREADS), _MOE_BLOCKS)
            self.module[name].launch(blocks, _MOE_THREADS, *args, out, n)

    def gelu(self, pre):
        """``gelu(pre)`` (tanh form) of a bfloat16 array, in a new one."""
        act = cl.empty(pre.shape, BF16)
        self._map("moe_gelu", act, pre)
        return act

    def gelu_backward(self, dact, pre):
        """``dact * gelu'(pre)``, bfloat16."""
        dpre = cl.empty(pre.shape, BF16)
        self._map("moe_gelu_backward", dpre, dact, pre)
        return dpre

    def to_bf16(self, x):
        """A float32 array rounded to bfloat16 (nearest even), in a new array."""
        y = cl.empty(x.shape, BF16)
        self._map("moe_to_bf16", y, x)
        return y

    def count(self, offsets, layer: int) -> None:
        """Block ``layer``'s rows per expert (differences of the routing's offsets) into
        :attr:`counts`."""
        experts = self.counts.shape[1]
        self.module["moe_counts"].launch(-(-experts // _MOE_THREADS), _MOE_THREADS, offsets,
                                         self.counts[layer], experts)

    def summary(self, stream) -> tuple:
        """``(fewest, most rows of one expert in any block, sum of the blocks'
        load-balancing losses)`` of the last forward (synchronises)."""
        counts = self.counts.get(stream=stream)
        return int(counts.min()), int(counts.max()), float(self.aux.get(stream=stream).sum())

    def __repr__(self) -> str:
        c = self.config
        return (f"<MoeState {c.layers} blocks of {c.experts} experts, top-{c.topk} of "
                f"{c.tokens} tokens, load-balancing coefficient {c.moe_aux}>")


class Transformer:
    """The model's parameters, optimizer state and device scalars (see the module docstring).

    Attributes
    ----------
    config : Config
    params : dict of DeviceArray
        float32 master weights by name (views into the flat group buffers).
    copies : dict of DeviceArray
        bfloat16 copies the forward reads, by name (every parameter but the layer norms',
        which cuDNN reads in float32).
    grads : dict of DeviceArray
        The last step's gradients by name (float32; the first MLP biases' bfloat16).
    groups : list of _Flat
        The AdamW groups: the matrices (weight decay; with MoE the routers and the stacked
        expert weights too), the other float32-gradient vectors, and the first MLP biases
        (bfloat16 gradients from the ``dgelu_bgrad`` epilogue; no such group with MoE).
    lr : DeviceArray
        float32, one element: the learning rate the next update reads (:meth:`set_lr`).
    step : DeviceArray
        int32, one element: AdamW's step counter, advanced on the device by every step.
    fp8 : Fp8State or None
        The delayed-scaling state of the fp8 forward GEMMs (``config.fp8``), else None.
    moe : MoeState or None
        The MoE blocks' statistics and kernels (``config.moe``), else None.
    stream : Stream
        Where every step runs (eager and captured).
    """

    def __init__(self, config: Config, host: dict, stream=None):
        self.config = config.check()
        s = self.stream = stream if stream is not None else cl.Stream()
        names = list(param_shapes(config))
        missing = set(names) - set(host)
        if missing:
            raise ValueError(f"missing parameters: {sorted(missing)}")
        # Each group is laid out in the order the backward writes the gradients (AdamW is
        # element-wise, so the layout changes no value): a data-parallel bucket is then a
        # contiguous run of gradients that are finished one after the other.
        backward_order = grad_order(config)
        gelu_bias = [n for n in backward_order if n.endswith("fc1.b")]
        self.groups = [
            _Flat(host, [n for n in backward_order if decays(n)], config.weight_decay, s),
            _Flat(host, [n for n in backward_order if not decays(n) and n not in gelu_bias],
                  0.0, s)]
        if gelu_bias:       # the MoE experts have no biases
            self.groups.append(_Flat(host, gelu_bias, 0.0, s, grad_dtype=BF16))
        self.params, self.copies, self.grads = {}, {}, {}
        for g in self.groups:
            self.params.update(g.params)
            self.grads.update(g.grads)
            self.copies.update({k: v for k, v in g.copies.items() if not is_layer_norm(k)})
        self.names = tuple(names)
        b, t = config.batch, config.tokens
        self.pos_ids = cl.to_device(np.tile(np.arange(config.seq, dtype=np.int32), (b, 1)),
                                    stream=s)
        self.ones_tokens = cl.to_device(np.ones((1, t), BF16), stream=s)
        self.ones_batch = cl.to_device(np.ones((1, b), BF16), stream=s)
        self.lr = cl.to_device(np.array([lr_at(config, 0)], np.float32), stream=s)
        self.step = cl.zeros(1, I32, stream=s)
        self.fp8 = Fp8State(config, s) if config.fp8 else None
        self.moe = MoeState(config, s) if config.moe else None

    def set_lr(self, lr) -> None:
        """Write the learning rate that the next steps (eager or replayed) read: a float, or
        a one-element float32 device array (copied on the device)."""
        src = lr if isinstance(lr, cl.DeviceArray) else np.array([lr], np.float32)
        self.lr.copy_(src, stream=self.stream)

    def host_params(self) -> dict:
        """The float32 master weights as numpy arrays (synchronises)."""
        return {k: self.params[k].get(stream=self.stream) for k in self.names}

    def state(self) -> list:
        """The whole training state as device arrays: per group the float32 masters, the
        two moments and the bfloat16 copies, then the step counter."""
        fp8 = [] if self.fp8 is None else self.fp8.arrays()
        return [a for g in self.groups for a in (g.master, g.exp_avg, g.exp_avg_sq, g.copy)] \
            + [self.step] + fp8

    def __repr__(self) -> str:
        c = self.config
        n = sum(int(np.prod(v.shape)) for v in self.params.values())
        fp8 = ", fp8 forward GEMMs" if c.fp8 else ""
        mlp = (f"MoE MLPs of {c.experts} experts of width {c.expert_ffn}, top-{c.topk}"
               if c.moe else f"ffn {c.ffn}")
        return (f"<Transformer {c.layers} layers, d_model {c.d_model}, {c.heads} heads, "
                f"{mlp}, vocab {c.vocab}, seq {c.seq}: {n:,} parameters{fp8}>")


def build(config: Config | None = None, seed: int = 0, stream=None) -> Transformer:
    """A :class:`Transformer` on the current device with the weights of :func:`init_params`."""
    config = (config or Config()).check()
    return Transformer(config, init_params(config, seed), stream=stream)


# -- one training step ---------------------------------------------------------------------
def _heads(x2d, b, s, h, d):
    """A C-contiguous ``[b*s, h*d]`` seen as the logical ``[b, h, s, d]`` of attention."""
    return x2d.reshape(b, s, h, d).transpose(0, 2, 1, 3)


def _bias_grad(model, dy, out):
    """``out = sum of dy's rows`` in float32: a row of ones times ``dy``."""
    gemm(model.ones_tokens, dy, out=out.reshape(1, out.shape[0]))


def _linear(model: Transformer, x, name: str, **kw):
    """``x @ W.T`` of linear layer ``name`` with the epilogue of ``kw`` (bias, GELU): a
    bfloat16 matmul, or with fp8 (``model.fp8``) x and the float32 master weight quantized
    to e4m3 with their current scales and multiplied in fp8 (bfloat16 out, the same bias
    and epilogue; per-tensor ``a_scale``/``b_scale`` = the scales' inverses)."""
    if model.fp8 is None:
        return matmul(x, model.copies[name + ".w"].T, **kw)
    qx, sx = model.fp8.quantize(name + ".x", x)
    qw, sw = model.fp8.quantize(name + ".w", model.params[name + ".w"])
    return matmul(qx, qw.T, a_scale=sx, b_scale=sw, **kw)


def _moe_mlp(model: Transformer, i: int, y):
    """Block ``i``'s mixture-of-experts MLP on its normalised input ``y`` ``[tokens, d]``:
    ``(out, saved)``, ``saved`` what :func:`_moe_mlp_backward` reads.

    Router logits in float32 (bfloat16 operands); the top-k routing, the permutation into
    expert order and the grouped GEMMs read their sizes from device memory, so nothing waits
    for the host and a captured step replays with any routing.  Writes the block's rows per
    expert and load-balancing loss into ``model.moe``.
    """
    cfg, moe, W = model.config, model.moe, model.copies
    t, e, k = cfg.tokens, cfg.experts, cfg.topk
    logits = cl.empty((t, e), F32)
    gemm(y, W[f"h{i}.router.w"].T, out=logits)
    # k = 1: the probability itself (renormalised it would be 1, leaving the router without
    # a gradient from the loss), as the Switch Transformer.
    weights, ids = tk.topk_softmax(logits, k, renormalize=k > 1)
    routing = tk.moe_routing(ids, e)
    moe.count(routing.offsets, i)
    xs = tk.moe_permute(y, routing)                                     # [t k, d]
    pre = tk.grouped_mm(xs, W[f"h{i}.experts.fc1.w"], routing.offsets)  # [t k, h]
    act = moe.gelu(pre)
    ys = tk.grouped_mm(act, W[f"h{i}.experts.fc2.w"], routing.offsets)  # [t k, d]
    out = tk.moe_unpermute(ys, routing, weights)                        # [t, d]
    probs = grad = None
    if cfg.moe_aux:
        # Switch's load-balancing loss moe_aux * E * sum_e f_e P_e: f_e = counts_e / (t k)
        # the share of rows expert e got, P_e the mean of its router probability.  Its
        # gradient, d/d probs[s, e] = moe_aux * E * counts_e / (t k t) = grad[e] for every
        # token s, goes through P alone (f is a count).
        probs = tk.softmax(logits)
        grad = tk.scale(moe.counts[i], cfg.moe_aux * e / (t * t * k))
        psum = gemm(probs.T, moe.ones)                                   # [e, 1]
        gemm(grad.reshape(1, e), psum, out=moe.aux[i:i + 1].reshape(1, 1))
    return out, (logits, weights, ids, routing, xs, pre, act, ys, probs, grad)


def _moe_mlp_backward(model: Transformer, i: int, dout, y, saved, done):
    """The adjoint of :func:`_moe_mlp`: the gradient of its input ``y`` for the gradient
    ``dout`` of its output; the expert and router weights' gradients into ``model.grads``
    (and, with ``moe_aux``, the load-balancing loss's, through the router)."""
    cfg, moe, W, G = model.config, model.moe, model.copies, model.grads
    logits, weights, ids, routing, xs, pre, act, ys, probs, grad = saved
    fc1, fc2, router = f"h{i}.experts.fc1.w", f"h{i}.experts.fc2.w", f"h{i}.router.w"
    dys, dweights = tk.moe_unpermute_backward(dout, ys, routing, weights)
    tk.grouped_mm_wgrad(act, dys, routing.offsets, out=G[fc2])
    done(fc2)
    # Input gradients: the grouped GEMM by each expert's transposed weight (a view).
    dpre = moe.gelu_backward(tk.grouped_mm(dys, W[fc2].transpose(0, 2, 1), routing.offsets),
                             pre)
    tk.grouped_mm_wgrad(xs, dpre, routing.offsets, out=G[fc1])
    done(fc1)
    dxs = tk.grouped_mm(dpre, W[fc1].transpose(0, 2, 1), routing.offsets)
    dy = tk.moe_permute_backward(dxs, routing, cfg.topk)                # sums the k copies
    dlogits = tk.topk_softmax_backward(logits, ids, dweights, renormalize=cfg.topk > 1)
    if probs is not None:
        # dlogits += probs * (grad - probs . grad): the softmax's backward of grad broadcast
        # to every token (a product with a column of ones).
        softmax_backward(probs, gemm(moe.ones, grad.reshape(1, cfg.experts)), out=dlogits,
                         beta=1.0)
    dl = moe.to_bf16(dlogits)
    gemm(dl.T, y, out=G[router])
    done(router)
    return add(dy, gemm(dl, W[router]))


def forward(model: Transformer, ids, targets, totals=None):
    """The forward pass: ``(CrossEntropy, logits, saved)``, ``saved`` what the backward
    reads.

    With ``totals`` (float32, two elements) the loss is not averaged: the sum of the counted
    tokens' losses goes to ``totals[0]`` and their number to ``totals[1]`` (the returned
    ``loss`` and ``count`` are views of them), so that data-parallel ranks can add both up
    before the backward divides by the global count.
    """
    cfg = model.config
    b, s = cfg.batch, cfg.seq
    t, c, h, d = cfg.tokens, cfg.d_model, cfg.heads, cfg.head_dim
    P, W = model.params, model.copies
    x = add(tk.embedding(W["tok_emb"], ids), tk.embedding(W["pos_emb"], model.pos_ids))
    x = x.reshape(t, c)
    layers = []
    for i in range(cfg.layers):
        def p(n):
            return f"h{i}.{n}"
        y1, mu1, r1 = layer_norm(x, P[p("ln1.w")], P[p("ln1.b")], eps=cfg.ln_eps,
                                 training=True)
        qkv = _linear(model, y1, p("qkv"), bias=W[p("qkv.b")])          # [t, 3c]
        # q, k, v read in place from the packed [b, s, 3, h, d] projection.
        qkv = qkv.reshape(b, s, 3, h, d)
        q, k, v = (qkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3))
        o = cl.empty((t, c), BF16)                                       # [b, s, h, d]
        _, stats = sdpa(q, k, v, causal=True, training=True, out=_heads(o, b, s, h, d))
        xm = add(x, _linear(model, o, p("proj"), bias=W[p("proj.b")]))
        y2, mu2, r2 = layer_norm(xm, P[p("ln2.w")], P[p("ln2.b")], eps=cfg.ln_eps,
                                 training=True)
        if cfg.moe:
            out, mlp = _moe_mlp(model, i, y2)
        else:
            act, pre = _linear(model, y2, p("fc1"), bias=W[p("fc1.b")],
                               epilogue="gelu_aux_bias")
            out, mlp = _linear(model, act, p("fc2"), bias=W[p("fc2.b")]), (act, pre)
        layers.append((x, y1, mu1, r1, q, k, v, o, stats, xm, y2, mu2, r2, mlp))
        x = add(xm, out)
    yf, muf, rf = layer_norm(x, P["lnf.w"], P["lnf.b"], eps=cfg.ln_eps, training=True)
    logits = matmul(yf, W["head.w"].T)
    if totals is None:
        ce = tk.cross_entropy(logits, targets.reshape(t), ignore_index=IGNORE_INDEX)
    else:
        ce = tk.cross_entropy(logits, targets.reshape(t), ignore_index=IGNORE_INDEX,
                              reduction="sum", out=totals[0:1], count=totals[1:2])
    return ce, logits, (layers, x, yf, muf, rf)


def backward(model: Transformer, ids, targets, ce, logits, saved, ready=None) -> None:
    """Every parameter's gradient into :attr:`Transformer.grads`.

    ``ready``, when given, is called with parameter names as their gradients are written,
    in the order of :func:`grad_order` (what a data-parallel wrapper needs to reduce them
    while the backward goes on).  The gradient is that of ``ce``'s mean: the sum of the
    counted tokens' losses divided by ``ce.count``.
    """
    def done(*names):
        if ready is not None:
            ready(*names)

    cfg = model.config
    b, s = cfg.batch, cfg.seq
    t, c, h, d = cfg.tokens, cfg.d_model, cfg.heads, cfg.head_dim
    P, W, G = model.params, model.copies, model.grads
    layers, x, yf, muf, rf = saved
    dlogits = tk.cross_entropy_backward(logits, targets.reshape(t), ce.count,
                                        ignore_index=IGNORE_INDEX)
    gemm(dlogits.T, yf, out=G["head.w"])
    done("head.w")
    dx, _, _ = layer_norm_backward(matmul(dlogits, W["head.w"]), x, P["lnf.w"], muf, rf,
                                   out=(None, G["lnf.w"], G["lnf.b"]))
    done("lnf.w", "lnf.b")
    for i in reversed(range(cfg.layers)):
        def p(n):
            return f"h{i}.{n}"
        x, y1, mu1, r1, q, k, v, o, stats, xm, y2, mu2, r2, mlp = layers[i]
        # MLP: dx is the gradient of its output (the residual passes it through unchanged).
        if cfg.moe:
            dy2 = _moe_mlp_backward(model, i, dx, y2, mlp, done)
        else:
            act, pre = mlp
            _bias_grad(model, dx, G[p("fc2.b")])
            done(p("fc2.b"))
            gemm(dx.T, act, out=G[p("fc2.w")])
            done(p("fc2.w"))
            dpre = matmul(dx, W[p("fc2.w")], epilogue="dgelu_bgrad", aux=pre,
                          bias=G[p("fc1.b")])
            done(p("fc1.b"))
            gemm(dpre.T, y2, out=G[p("fc1.w")])
            done(p("fc1.w"))
            dy2 = matmul(dpre, W[p("fc1.w")])
        dn, _, _ = layer_norm_backward(dy2, xm, P[p("ln2.w")], mu2, r2,
                                       out=(None, G[p("ln2.w")], G[p("ln2.b")]))
        done(p("ln2.w"), p("ln2.b"))
        dx = add(dx, dn)
        # Attention.
        _bias_grad(model, dx, G[p("proj.b")])
        done(p("proj.b"))
        gemm(dx.T, o, out=G[p("proj.w")])
        done(p("proj.w"))
        do = matmul(dx, W[p("proj.w")])
        grads = [cl.empty((t, c), BF16) for _ in range(3)]
        sdpa_backward(q, k, v, _heads(o, b, s, h, d), _heads(do, b, s, h, d), stats,
                      causal=True, out=tuple(_heads(g, b, s, h, d) for g in grads))
        dqkv = cl.empty((t, 3 * c), BF16)
        for j, g in enumerate(grads):
            dqkv[:, j * c:(j + 1) * c].copy_(g)
        _bias_grad(model, dqkv, G[p("qkv.b")])
        # The key bias adds one value to every score of a row, which the softmax ignores: its
        # gradient is exactly zero.  Computed, it is rounding noise, which AdamW's
        # normalisation would turn into full-size random steps; write the exact value.
        G[p("qkv.b")][c:2 * c].fill(0)
        done(p("qkv.b"))
        gemm(dqkv.T, y1, out=G[p("qkv.w")])
        done(p("qkv.w"))
        dn, _, _ = layer_norm_backward(matmul(dqkv, W[p("qkv.w")]), x, P[p("ln1.w")], mu1, r1,
                                       out=(None, G[p("ln1.w")], G[p("ln1.b")]))
        done(p("ln1.w"), p("ln1.b"))
        dx = add(dx, dn)
    tk.embedding_backward(dx.reshape(b, s, c), ids, cfg.vocab, out=G["tok_emb"])
    done("tok_emb")
    # Every row of the batch reads the same position rows: their gradient is a sum over it.
    gemm(model.ones_batch, dx.reshape(b, s * c), out=G["pos_emb"].reshape(1, s * c))
    done("pos_emb")


def grad_order(config: Config) -> tuple:
    """The parameter names in the order :func:`backward` writes their gradients."""
    names = ["head.w", "lnf.w", "lnf.b"]
    mlp = (("experts.fc2.w", "experts.fc1.w", "router.w") if config.moe
           else ("fc2.b", "fc2.w", "fc1.b", "fc1.w"))
    for i in reversed(range(config.layers)):
        names += [f"h{i}.{n}" for n in mlp + ("ln2.w", "ln2.b", "proj.b", "proj.w", "qkv.b",
                                              "qkv.w", "ln1.w", "ln1.b")]
    return tuple(names + ["tok_emb", "pos_emb"])


def update(model: Transformer) -> None:
    """Advance the device step counter, then AdamW on every group (masters and bf16 copies)."""
    cfg = model.config
    tk.step_increment(model.step)
    for g in model.groups:
        g.update(step=model.step, lr=model.lr, betas=cfg.betas, eps=cfg.eps)


def _check_batch(op: str, cfg: Config, ids, targets) -> None:
    want = (cfg.batch, cfg.seq)
    for arr, name in ((ids, "ids"), (targets, "targets")):
        if tuple(arr.shape) != want or arr.dtype != I32:
            raise ValueError(f"{op}: {name} must be int32 {want}, got {arr.dtype} "
                             f"{tuple(arr.shape)}")


def train_step(model: Transformer, ids, targets):
    """One training step on ``model.stream``: forward, backward, AdamW, and with fp8 the
    delayed-scaling update of every scale (:meth:`Fp8State.update`).

    Parameters
    ----------
    ids, targets : DeviceArray
        int32 ``[batch, seq]`` (:func:`make_batch`).

    Returns
    -------
    DeviceArray
        The mean loss over the counted targets (float32, one element), on the device.
    """
    _check_batch("train_step", model.config, ids, targets)
    with model.stream:
        ce, logits, saved = forward(model, ids, targets)
        backward(model, ids, targets, ce, logits, saved)
        update(model)
        if model.fp8 is not None:
            model.fp8.update()
    return ce.loss


def accuracy(model: Transformer, ids, targets) -> float:
    """The fraction of answer tokens the model predicts (argmax), on one batch
    (synchronises)."""
    with model.stream:
        _, logits, _ = forward(model, ids, targets)
        right = tk.accuracy_count(logits, targets.reshape(model.config.tokens),
                                  ignore_index=IGNORE_INDEX)
    return int(right.get(stream=model.stream)) / (model.config.tokens // 2)


# -- the training loop ---------------------------------------------------------------------
def train(model: Transformer, steps: int, *, graph: bool = False, seed: int = 0,
          every: int = 50, log=print) -> dict:
    """Train ``steps`` steps on the batches of :func:`make_batches`.

    Returns ``{"losses": numpy array, "seconds", "graph_nodes", "step_graph"}`` (the last two
    None when eager).  Each step's loss is copied into a device array as the steps run and
    read at the progress lines only, so no step waits for the host.  With MoE every progress
    line is followed by one with the last step's fewest and most rows routed to one expert
    (over the blocks) and its load-balancing loss.
    """
    cfg = model.config
    s = model.stream
    host = make_batches(cfg, steps, seed)
    ids_all = cl.to_device(np.stack([x for x, _ in host]), stream=s)
    tg_all = cl.to_device(np.stack([y for _, y in host]), stream=s)
    lrs = cl.to_device(np.array([lr_at(cfg, i) for i in range(steps)], np.float32), stream=s)
    hist = cl.zeros(steps, F32, stream=s)
    nodes = None
    step_fn = None
    s.synchronize()
    t0 = last_t = time.perf_counter()
    last = 0
    for i in range(steps):
        model.set_lr(lrs[i:i + 1])
        if graph and step_fn is None:
            # The warm-up is this first step, run eagerly; then the capture (which runs
            # nothing), and every later step is one replay.
            step_fn = cl.StepGraph(lambda a, b: train_step(model, a, b), ids_all[i],
                                   tg_all[i], stream=s)
            nodes = step_fn.num_nodes
            loss = step_fn.outputs
        elif graph:
            loss = step_fn(ids_all[i], tg_all[i])
        else:
            loss = train_step(model, ids_all[i], tg_all[i])
        hist[i:i + 1].copy_(loss.reshape(1), s)
        if (i + 1) % every == 0 or i + 1 == steps:
            now_loss = float(hist[i:i + 1].get(stream=s)[0])
            now = time.perf_counter()
            rate = (i + 1 - last) * cfg.tokens / (now - last_t)
            log(f"step {i + 1:5d}/{steps}  loss {now_loss:.4f}  lr {lr_at(cfg, i):.2e}  "
                f"{rate:,.0f} tokens/s")
            if model.moe is not None:
                fewest, most, aux = model.moe.summary(s)
                log(f"           tokens per expert min {fewest} max {most} (of "
                    f"{cfg.tokens * cfg.topk} routed per block, {cfg.experts} experts, mean "
                    f"{cfg.tokens * cfg.topk // cfg.experts}); load-balancing loss {aux:.4f}")
            last, last_t = i + 1, now
    s.synchronize()
    seconds = time.perf_counter() - t0
    return {"losses": hist.get(stream=s), "seconds": seconds, "graph_nodes": nodes,
            "step_graph": step_fn}


def plot(losses, path) -> bool:
    """Write the loss curve to ``path`` (PNG); False when matplotlib is not installed."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:        # the examples' shared plot helper sits beside this file
        sys.path.insert(0, here)
    from _plot import plot_losses

    return plot_losses(losses, path, title="transformer on sequence reversal (cudalibs)", ylabel="cross-entropy (answer tokens)", target=TARGET_LOSS)


# -- data parallel -------------------------------------------------------------------------
def dp_replica(comm, config: Config, seed: int = 0, *,
               bucket_bytes: int = _dp.DEFAULT_BUCKET_BYTES,
               first_bucket_bytes: int = _dp.FIRST_BUCKET_BYTES):
    """One rank's model for data-parallel training, and its step.

    The buckets are slices of the three AdamW groups' flat gradient buffers (every gradient
    is already a view of one: no copies); the bfloat16 group's gradients are reduced in
    bfloat16.  The loss is not a per-rank mean: each rank sums its counted tokens' losses and
    counts them, one all-reduce adds both up over the ranks before the backward, and the
    backward divides by the global count -- so the summed gradients are those of the mean
    over all counted tokens of the combined batch, whatever each shard holds.

    Parameters
    ----------
    comm : cudalibs.nccl.Communicator
        This rank's communicator (its device current).
    config : Config
        ``batch`` is this rank's share of the combined batch.
    seed : int
        Initial weights (:func:`init_params`), the same on every rank.
    bucket_bytes, first_bucket_bytes : int
        Gradient bucket limits (:class:`_dp.GradSync`).

    Returns
    -------
    model : Transformer
    sync : _dp.GradSync
    step : callable
        ``step(ids, targets)`` queues one data-parallel step; returns a float32 device
        array ``[sum of the counted tokens' losses, their number]`` over all ranks.
    """
    if config.fp8:
        raise ValueError("fp8 is not implemented for data-parallel training (each rank's "
                         "amaxes would need an all-reduce before the scale update)")
    if config.moe:
        raise ValueError("moe is not implemented for data-parallel training (the "
                         "load-balancing loss needs the combined batch's expert counts and "
                         "router means, an all-reduce before its gradient)")
    model = build(config, seed)
    s = model.stream
    totals = cl.zeros(2, F32, stream=s)
    sync = _dp.GradSync(comm, s, [(g.grad, g.spans) for g in model.groups], grad_order(config),
                        bucket_bytes=bucket_bytes, first_bucket_bytes=first_bucket_bytes,
                        op="sum")

    def step(ids, targets):
        _check_batch("data-parallel step", config, ids, targets)
        with model.stream:
            with sync.step():
                ce, logits, saved = forward(model, ids, targets, totals)
                sync.all_reduce_now(totals)
                backward(model, ids, targets, ce, logits, saved, sync.ready)
            update(model)
        return totals

    return model, sync, step


def _config(opts: dict) -> Config:
    """The configuration of parsed command-line options (``vars(args)``)."""
    return replace(Config(), batch=opts["batch"], lr=opts["lr"], layers=opts["layers"],
                   d_model=opts["d_model"], ffn=4 * opts["d_model"],
                   decay_steps=opts["steps"], fp8=bool(opts.get("fp8", False)),
                   moe=bool(opts.get("moe", False)),
                   experts=opts.get("experts", Config.experts),
                   topk=opts.get("topk", Config.topk),
                   moe_aux=opts.get("moe_aux", Config.moe_aux)).check()


def dp_rank(ctx, opts: dict) -> dict:
    """One rank of ``--gpus N`` training (run by :func:`_dp.launch`): its replica trains on
    its rows of every combined batch; rank 0 checks against :func:`train_step` on the whole
    batch."""
    cfg, world, seed, steps = _config(opts), ctx.world, opts["seed"], opts["steps"]
    if cfg.batch % world:
        raise ValueError(f"--batch {cfg.batch} does not split over {world} GPUs")
    local = replace(cfg, batch=cfg.batch // world)
    model, sync, step = dp_replica(ctx.comm, local, seed, bucket_bytes=_dp.bucket_bytes(opts))
    s = model.stream
    host = make_batches(cfg, steps, seed)
    ids, tgs = np.stack([x for x, _ in host]), np.stack([y for _, y in host])
    inputs = [cl.to_device(ctx.shard(ids, axis=1), stream=s),
              cl.to_device(ctx.shard(tgs, axis=1), stream=s)]
    lrs = cl.to_device(np.array([lr_at(cfg, i) for i in range(steps)], np.float32), stream=s)
    check = not opts["no_check"]
    ref = None
    if ctx.root and check:
        rmodel = build(cfg, seed)
        rs = rmodel.stream
        gi, gt = cl.to_device(ids, stream=rs), cl.to_device(tgs, stream=rs)

        def ref_step(i):
            rmodel.set_lr(lr_at(cfg, i))
            return train_step(rmodel, gi[i], gt[i]).get(stream=rs).item()
        ref = _dp.Reference(rmodel.state, ref_step, rmodel.host_params, rs)

    ctx.log(f"{model!r}; combined batch {cfg.batch} = {world} x {local.batch} rows of "
            f"{cfg.seq} tokens; {'CUDA graph replay' if opts['graph'] else 'eager'} steps; "
            f"{sync.describe()}")
    result = _dp.train(ctx, step, inputs, stream=s, state=model.state,
                       params=model.host_params, before_step=lambda i: model.set_lr(lrs[i:i + 1]),
                       loss_value=lambda row: float(row[0]) / float(row[1]),
                       graph=opts["graph"], check=check, reference=ref, rtol=opts["rtol"],
                       every=opts["every"])
    tail = float(np.mean(result["losses"][-TARGET_WINDOW:]))
    reached = tail < opts["target"]
    ctx.log(f"mean loss of the last {min(TARGET_WINDOW, steps)} steps {tail:.4f}: target "
            f"{opts['target']} {'reached' if reached else 'NOT reached'}")
    result["tail_loss"] = tail
    _dp.report(ctx, result, opts, cfg.tokens, "tokens", reached=reached, plot=plot)
    return result


def fp8_shortage() -> str | None:
    """The line ``--fp8`` exits with (status 2) on a GPU without fp8 tensor cores (compute
    capability below 8.9), else None."""
    cc = cl.current_device().compute_capability
    if tuple(cc) >= (8, 9):
        return None
    return (f"transformer_train: --fp8 needs compute capability 8.9 or newer (fp8 tensor "
            f"cores); this GPU is {cc[0]}.{cc[1]}")


def _agrees(loss: float, ref_loss: float, rtol: float, atol: float) -> bool:
    """``|loss - ref_loss| <= rtol |ref_loss| + atol`` (NaN never agrees)."""
    return bool(abs(loss - ref_loss) <= rtol * abs(ref_loss) + atol)


def fp8_agrees(fp8_loss: float, bf16_loss: float) -> bool:
    """Whether a mean loss of the fp8 run is within :data:`FP8_RTOL` (of the bfloat16
    value) plus :data:`FP8_ATOL` of the bfloat16 run's from the same seed (NaN never
    agrees)."""
    return _agrees(fp8_loss, bf16_loss, FP8_RTOL, FP8_ATOL)


def moe_agrees(moe_loss: float, dense_loss: float) -> bool:
    """Whether a mean loss of the MoE run is within :data:`MOE_RTOL` (of the dense value)
    plus :data:`MOE_ATOL` of the dense bfloat16 run's from the same seed (NaN never
    agrees)."""
    return _agrees(moe_loss, dense_loss, MOE_RTOL, MOE_ATOL)


def arg_parser() -> argparse.ArgumentParser:
    """The command line of :func:`main` (``vars(arg_parser().parse_args([...]))`` gives the
    options a data-parallel rank takes)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--steps", type=int, default=400, help="training steps")
    parser.add_argument("--batch", type=int, default=Config.batch, help="sequences per step")
    parser.add_argument("--lr", type=float, default=Config.lr, help="peak learning rate")
    parser.add_argument("--layers", type=int, default=Config.layers, help="transformer blocks")
    parser.add_argument("--d-model", type=int, default=Config.d_model, help="model width")
    parser.add_argument("--seed", type=int, default=0, help="initial weights and batches")
    parser.add_argument("--every", type=int, default=50, help="steps between progress lines")
    parser.add_argument("--graph", action="store_true",
                        help="capture one training step as a CUDA graph and replay it")
    parser.add_argument("--plot", nargs="?", const="transformer_train_loss.png", default=None,
                        metavar="PNG", help="write the loss curve to PNG (%(const)s when PNG "
                        "is left out; default: %(default)s, no plot)")
    parser.add_argument("--target", type=float, default=TARGET_LOSS,
                        help=f"mean loss of the last {TARGET_WINDOW} steps to get below "
                        "(exit status 1 otherwise)")
    parser.add_argument("--fp8", action="store_true",
                        help="the blocks' linear layers' forward GEMMs in fp8 (e4m3) with "
                        "delayed scaling; backward and the rest bfloat16 (one GPU, "
                        "compute capability 8.9 or newer)")
    parser.add_argument("--moe", action="store_true",
                        help="every block's MLP a mixture of experts: top-k routing on the "
                        "GPU, grouped GEMMs, a load-balancing loss (one GPU)")
    parser.add_argument("--experts", type=int, default=Config.experts,
                        help="with --moe: experts per block")
    parser.add_argument("--topk", type=int, default=Config.topk,
                        help="with --moe: experts per token; each expert's MLP is "
                        "4 d_model / topk wide")
    parser.add_argument("--moe-aux", type=float, default=Config.moe_aux,
                        help="with --moe: the load-balancing loss's coefficient (0: none)")
    parser.add_argument("--compare", action="store_true",
                        help="with --fp8 or --moe: also train the dense bfloat16 model from "
                        f"the same seed and require the mean losses of the last "
                        f"{TARGET_WINDOW} steps to agree: within {FP8_RTOL} x bfloat16's + "
                        f"{FP8_ATOL} for --fp8, {MOE_RTOL} x dense's + {MOE_ATOL} for --moe "
                        "(exit status 1 otherwise)")
    _dp.add_arguments(parser, rtol=1e-2)
    return parser


def main(argv=None) -> int:
    parser = arg_parser()
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    if args.compare and not (args.fp8 or args.moe):
        parser.error("--compare compares an --fp8 or --moe run with the dense bfloat16 one: "
                     "give --fp8 or --moe")
    if args.fp8 and args.gpus is not None:
        parser.error("--fp8 trains on one GPU (no --gpus): the data-parallel step does not "
                     "reduce the amaxes")
    if args.moe and args.gpus is not None:
        parser.error("--moe trains on one GPU (no --gpus): the data-parallel step does not "
                     "reduce the load-balancing loss's statistics")
    try:
        cfg = _config(vars(args))
    except ValueError as exc:
        parser.error(str(exc))
    if args.gpus is not None:
        return _dp.main(dp_rank, vars(args))
    shortage = _dp.gpu_shortage("transformer_train")
    if shortage is None and args.fp8:
        shortage = fp8_shortage()
    if shortage is not None:
        print(shortage)
        return 2
    model = build(cfg, args.seed)
    print(f"{model!r}; batch {cfg.batch} x {cfg.seq} tokens; "
          f"{'CUDA graph replay' if args.graph else 'eager'} steps on "
          f"{cl.current_device().name}")
    result = train(model, args.steps, graph=args.graph, seed=args.seed, every=args.every)
    losses = result["losses"]
    if args.graph:
        print(f"one training step = a graph of {result['graph_nodes']} nodes")
    tail = float(np.mean(losses[-TARGET_WINDOW:]))
    rng = np.random.default_rng(args.seed + 2)
    ids, tg = make_batch(rng, cfg)
    acc = accuracy(model, cl.to_device(ids, stream=model.stream),
                   cl.to_device(tg, stream=model.stream))
    print(f"{args.steps} steps in {result['seconds']:.2f} s "
          f"({args.steps * cfg.tokens / result['seconds']:,.0f} tokens/s); answer-token "
          f"accuracy on a new batch {acc:.2%}")
    ok = tail < args.target
    print(f"mean loss of the last {min(TARGET_WINDOW, len(losses))} steps {tail:.4f}: target "
          f"{args.target} {'reached' if ok else 'NOT reached'}")
    if args.fp8:
        scales = model.fp8.host_scales(model.stream)
        print(f"fp8 scales after the last step: {min(scales.values()):.4g} .. "
              f"{max(scales.values()):.4g} over {len(scales)} tensors")
    if args.compare:
        print("the dense bfloat16 run from the same seed, for --compare:")
        ref = train(build(replace(cfg, fp8=False, moe=False), args.seed), args.steps,
                    graph=args.graph, seed=args.seed, every=args.every)
        ref_losses = ref["losses"]
        ref_tail = float(np.mean(ref_losses[-TARGET_WINDOW:]))
        name, agrees, rtol, atol = (("fp8", fp8_agrees, FP8_RTOL, FP8_ATOL) if args.fp8
                                    else ("MoE", moe_agrees, MOE_RTOL, MOE_ATOL))
        agree = agrees(tail, ref_tail)
        marks = sorted({min(n, args.steps) - 1 for n in (10, 50, 100, 200, args.steps)})
        print("loss at steps " + ", ".join(
            f"{i + 1}: {name} {losses[i]:.4f} dense {ref_losses[i]:.4f}" for i in marks))
        print(f"mean loss of the last {min(TARGET_WINDOW, len(losses))} steps: {name} "
              f"{tail:.4f}, dense bfloat16 {ref_tail:.4f}, difference "
              f"{tail - ref_tail:+.4f} (allowed {rtol} x dense's + {atol}): "
              f"{'agree' if agree else 'DO NOT agree'}")
        ok = ok and agree
    if args.plot:
        if plot(losses, args.plot):
            print(f"loss curve written to {args.plot}")
        else:
            print("matplotlib is not installed: no plot")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
