"""Recurrent-network references: LSTM (with projection), GRU and Elman (tanh / ReLU) layers,
stacked and bidirectional, over padded batches of sequences of different lengths; the
forward pass and backpropagation through time.

The parameters are PyTorch's, by PyTorch's names and shapes (``weight_ih_l0``,
``weight_hh_l0``, ``bias_ih_l0``, ``bias_hh_l0``, ``weight_hr_l0``, ``..._reverse``; gates
stacked along the first dimension in PyTorch's order: LSTM ``i, f, g, o``, GRU ``r, z, n``),
and the cell equations are ``torch.nn.LSTM`` / ``GRU`` / ``RNN``'s:

* LSTM: ``i, f, g, o = σ, σ, tanh, σ (W_ih x + b_ih + W_hh h + b_hh)``;
  ``c' = f c + i g``; ``h' = W_hr (o tanh c')`` (without ``W_hr`` when there is no projection);
* GRU: ``r, z = σ(W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z})``;
  ``n = tanh(W_in x + b_in + r (W_hn h + b_hn))``; ``h' = (1 - z) n + z h``;
* Elman: ``h' = tanh or relu(W_ih x + b_ih + W_hh h + b_hh)``.

Sequence ``b`` of a batch has ``seq_lengths[b]`` valid steps: the forward direction runs steps
``0 .. L_b - 1``, the reverse direction ``L_b - 1 .. 0`` (each sequence reversed on its own, as
packed sequences are), the output is 0 at the padded steps, and the final states are those
after each sequence's own last step.  A layer above the first reads the previous layer's
output (both directions concatenated).  Everything is computed in float64; dropout is not
modelled (it applies in training only, at random).
"""

from __future__ import annotations

import numpy as np

__all__ = ["RNN_MODES", "rnn_gates", "rnn_param_shapes", "rnn_forward", "rnn_backward"]

#: Cell kinds and the number of gates each stacks in its weight matrices.
RNN_MODES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def rnn_gates(mode: str) -> int:
    """Gates stacked in one weight matrix of ``mode`` (LSTM 4, GRU 3, tanh / ReLU 1)."""
    try:
        return RNN_MODES[mode]
    except KeyError:
        raise ValueError(f"mode must be one of {sorted(RNN_MODES)}, not {mode!r}") from None


def rnn_param_shapes(mode: str, input_size: int, hidden_size: int, *, num_layers: int = 1,
                     bidirectional: bool = False, proj_size: int = 0,
                     bias: bool = True) -> dict:
    """``{name: shape}`` of every parameter, in PyTorch's order (``named_parameters()``).

    Per layer and direction: ``weight_ih`` ``(G*H, in)``, ``weight_hh`` ``(G*H, P)``,
    ``bias_ih`` / ``bias_hh`` ``(G*H,)`` (with ``bias``), ``weight_hr`` ``(P, H)`` (with a
    projection), where ``G`` is :func:`rnn_gates`, ``P`` the projection size (else ``H``) and
    ``in`` the input size for layer 0, ``D * P`` above it.
    """
    g = rnn_gates(mode)
    if proj_size and mode != "lstm":
        raise ValueError(f"proj_size is an LSTM option; mode {mode!r} has none")
    out = proj_size or hidden_size
    dirs = 2 if bidirectional else 1
    shapes = {}
    for layer in range(num_layers):
        width = input_size if layer == 0 else dirs * out
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            shapes[f"weight_ih{sfx}"] = (g * hidden_size, width)
            shapes[f"weight_hh{sfx}"] = (g * hidden_size, out)
            if bias:
                shapes[f"bias_ih{sfx}"] = (g * hidden_size,)
                shapes[f"bias_hh{sfx}"] = (g * hidden_size,)
            if proj_size:
                shapes[f"weight_hr{sfx}"] = (proj_size, hidden_size)
    return shapes


def _sigmoid(v):
    return 0.5 * (1.0 + np.tanh(0.5 * v))


class _Net:
    """The structure read from the parameter names (layers, directions, sizes)."""

    def __init__(self, mode, params):
        self.mode = mode
        self.g = rnn_gates(mode)
        self.p = {k: np.asarray(v, dtype=np.float64) for k, v in params.items()}
        if "weight_ih_l0" not in self.p:
            raise ValueError("params has no weight_ih_l0 (PyTorch's names are expected)")
        self.layers = 0
        while f"weight_ih_l{self.layers}" in self.p:
            self.layers += 1
        self.dirs = 2 if "weight_ih_l0_reverse" in self.p else 1
        self.hidden = self.p["weight_hh_l0"].shape[0] // self.g
        self.proj = self.p["weight_hr_l0"].shape[0] if "weight_hr_l0" in self.p else 0
        self.out = self.proj or self.hidden
        self.bias = "bias_ih_l0" in self.p

    def cell(self, layer, d):
        sfx = f"_l{layer}" + ("_reverse" if d else "")
        get = self.p.get
        return sfx, (self.p[f"weight_ih{sfx}"], self.p[f"weight_hh{sfx}"], get(f"bias_ih{sfx}"),
                     get(f"bias_hh{sfx}"), get(f"weight_hr{sfx}"))


def _affine(v, w, b):
    r = v @ w.T
    return r if b is None else r + b


def _cell_forward(mode, w, xt, h, c):
    w_ih, w_hh, b_ih, b_hh, w_hr = w
    gi, gh = _affine(xt, w_ih, b_ih), _affine(h, w_hh, b_hh)
    if mode == "lstm":
        i, f, g, o = np.split(gi + gh, 4, axis=1)
        i, f, g, o = _sigmoid(i), _sigmoid(f), np.tanh(g), _sigmoid(o)
        c2 = f * c + i * g
        tc = np.tanh(c2)
        hf = o * tc
        h2 = hf @ w_hr.T if w_hr is not None else hf
        return h2, c2, (xt, h, c, i, f, g, o, tc, hf)
    if mode == "gru":
        ir, iz, in_ = np.split(gi, 3, axis=1)
        hr, hz, hn = np.split(gh, 3, axis=1)
        r, z = _sigmoid(ir + hr), _sigmoid(iz + hz)
        n = np.tanh(in_ + r * hn)
        return (1.0 - z) * n + z * h, None, (xt, h, r, z, n, hn)
    a = gi + gh
    h2 = np.tanh(a) if mode == "rnn_tanh" else np.maximum(a, 0.0)
    return h2, None, (xt, h, a, h2)


def _accumulate(grads, sfx, w, da_i, da_h, xt, h):
    """Gradients of the two affine maps ``W_ih x + b_ih`` and ``W_hh h + b_hh``."""
    _, _, b_ih, _, _ = w
    grads[f"weight_ih{sfx}"] += da_i.T @ xt
    grads[f"weight_hh{sfx}"] += da_h.T @ h
    if b_ih is not None:
        grads[f"bias_ih{sfx}"] += da_i.sum(axis=0)
        grads[f"bias_hh{sfx}"] += da_h.sum(axis=0)


def _cell_backward(mode, w, saved, dh2, dc2, grads, sfx):
    """``(dx_t, dh_prev, dc_prev)`` from the gradients of the cell's outputs; the weight
    gradients are added to ``grads``."""
    w_ih, w_hh, _, _, w_hr = w
    if mode == "lstm":
        xt, h, c, i, f, g, o, tc, hf = saved
        if w_hr is not None:
            grads[f"weight_hr{sfx}"] += dh2.T @ hf
            dhf = dh2 @ w_hr
        else:
            dhf = dh2
        do = dhf * tc
        dc = dc2 + dhf * o * (1.0 - tc * tc)
        da = np.concatenate([dc * g * i * (1.0 - i), dc * c * f * (1.0 - f),
                             dc * i * (1.0 - g * g), do * o * (1.0 - o)], axis=1)
        _accumulate(grads, sfx, w, da, da, xt, h)
        return da @ w_ih, da @ w_hh, dc * f
    if mode == "gru":
        xt, h, r, z, n, hn = saved
        dn = dh2 * (1.0 - z)
        dz = dh2 * (h - n)
        dan = dn * (1.0 - n * n)
        dar = dan * hn * r * (1.0 - r)
        daz = dz * z * (1.0 - z)
        da_i = np.concatenate([dar, daz, dan], axis=1)
        da_h = np.concatenate([dar, daz, dan * r], axis=1)
        _accumulate(grads, sfx, w, da_i, da_h, xt, h)
        return da_i @ w_ih, da_h @ w_hh + dh2 * z, None
    xt, h, a, h2 = saved
    da = dh2 * (1.0 - h2 * h2) if mode == "rnn_tanh" else dh2 * (a > 0)
    _accumulate(grads, sfx, w, da, da, xt, h)
    return da @ w_ih, da @ w_hh, None


def _seq_major(x, batch_first):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 3:
        raise ValueError(f"x must be 3-D ((T, B, F), or (B, T, F) batch-first), got {x.shape}")
    return np.swapaxes(x, 0, 1) if batch_first else x


def _lengths(seq_lengths, t, b):
    if seq_lengths is None:
        return np.full(b, t, dtype=np.int64)
    lengths = np.asarray(seq_lengths, dtype=np.int64).reshape(-1)
    if lengths.shape != (b,) or (lengths < 1).any() or (lengths > t).any():
        raise ValueError(f"seq_lengths must hold {b} lengths in [1, {t}], got {lengths}")
    return lengths


def _state(v, shape, name):
    if v is None:
        return np.zeros(shape)
    v = np.asarray(v, dtype=np.float64)
    if v.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {v.shape}")
    return v


def rnn_forward(mode, x, params, hx=None, cx=None, *, seq_lengths=None, batch_first=False,
                return_cache=False, storage=None):
    """The forward pass of a (stacked, optionally bidirectional) recurrent network.

    Parameters
    ----------
    mode : {"lstm", "gru", "rnn_tanh", "rnn_relu"}
    x : array-like
        ``(T, B, input_size)``, or ``(B, T, input_size)`` with ``batch_first``.
    params : dict
        PyTorch's parameters by name (see :func:`rnn_param_shapes`); the layers, directions,
        hidden and projection sizes and the presence of biases are read from them.
    hx, cx : array-like, optional
        Initial states ``(L*D, B, P)`` and (LSTM) ``(L*D, B, H)``; zeros when omitted.
    seq_lengths : array-like of int, optional
        ``(B,)`` valid steps per sequence, each in ``[1, T]`` (default all ``T``).
    batch_first : bool
    return_cache : bool
        Also return what :func:`rnn_backward` needs.
    storage : dtype-like, optional
        The type the network's hidden states are stored in between steps and layers (a
        library running in float16 or bfloat16 keeps them so): each new hidden state is
        rounded to it before it is used again. Everything else stays float64. It matters for
        ``rnn_relu``, whose gradient changes by a whole term where a pre-activation within
        rounding of zero takes the other side of it: with ``storage``, the reference's ReLU
        masks are those of a network computing from the rounded states. The backward of
        such a cache rounds the gradients handed between steps and layers the same way.

    Returns
    -------
    tuple
        ``(y, hy, cy)`` in float64 (``cy`` None except for LSTM), ``y`` in ``x``'s layout with
        ``D * P`` features and zeros at padded steps; ``(y, hy, cy, cache)`` with
        ``return_cache``.
    """
    net = _Net(mode, params)
    if storage is None:
        store = None
    else:
        kept = np.dtype(storage)
        store = lambda v: v.astype(kept).astype(np.float64)  # noqa: E731
    xs = _seq_major(x, batch_first)
    t, b, _ = xs.shape
    lengths = _lengths(seq_lengths, t, b)
    nld = net.layers * net.dirs
    h0 = _state(hx, (nld, b, net.out), "hx")
    c0 = _state(cx, (nld, b, net.hidden), "cx") if mode == "lstm" else None
    hy = np.zeros_like(h0)
    cy = np.zeros_like(c0) if c0 is not None else None
    steps = []          # per layer: {direction: [(t, mask, saved), ...]}
    inp = xs
    for layer in range(net.layers):
        out = np.zeros((t, b, net.dirs * net.out))
        per_dir = {}
        for d in range(net.dirs):
            sfx, w = net.cell(layer, d)
            k = layer * net.dirs + d
            h = h0[k]
            c = c0[k] if c0 is not None else None
            rec = []
            for s in (range(t) if d == 0 else range(t - 1, -1, -1)):
                m = (lengths > s)[:, None]
                h2, c2, saved = _cell_forward(mode, w, inp[s], h, c)
                if store is not None:
                    h2 = store(h2)
                h = np.where(m, h2, h)
                if c is not None:
                    c = np.where(m, c2, c)
                out[s, :, d * net.out:(d + 1) * net.out] = np.where(m, h2, 0.0)
                rec.append((s, m, saved))
            hy[k] = h
            if cy is not None:
                cy[k] = c
            per_dir[d] = rec
        steps.append(per_dir)
        inp = out
    y = np.swapaxes(inp, 0, 1) if batch_first else inp
    if not return_cache:
        return y, hy, cy
    cache = {"net": net, "steps": steps, "shape": xs.shape, "batch_first": batch_first,
             "store": store}
    return y, hy, cy, cache


def rnn_backward(cache, dy, dhy=None, dcy=None):
    """Backpropagation through time of :func:`rnn_forward` (called with ``return_cache``).

    Parameters
    ----------
    cache : dict
        The fourth result of :func:`rnn_forward`.
    dy : array-like
        Gradient of the loss by ``y`` (its shape and layout); padded steps are ignored.
    dhy, dcy : array-like, optional
        Gradients by ``hy`` and (LSTM) ``cy``; zeros when omitted.

    Returns
    -------
    tuple
        ``(dx, dhx, dcx, dparams)``: gradients by ``x`` (zeros at padded steps), ``hx``,
        ``cx`` (None except for LSTM) and every parameter, by name, all float64.
    """
    net, steps = cache["net"], cache["steps"]
    t, b, _ = cache["shape"]
    nld = net.layers * net.dirs
    dys = _seq_major(dy, cache["batch_first"])
    if dys.shape != (t, b, net.dirs * net.out):
        raise ValueError(f"dy has shape {np.shape(dy)}; y's shape was "
                         f"{(t, b, net.dirs * net.out)} (seq-major)")
    dh_top = _state(dhy, (nld, b, net.out), "dhy")
    dc_top = _state(dcy, (nld, b, net.hidden), "dcy") if net.mode == "lstm" else None
    grads = {k: np.zeros_like(v) for k, v in net.p.items()}
    dhx = np.zeros_like(dh_top)
    dcx = np.zeros_like(dc_top) if dc_top is not None else None
    store = cache.get("store")
    d_out = dys
    for layer in range(net.layers - 1, -1, -1):
        d_in = None
        for d in range(net.dirs):
            sfx, w = net.cell(layer, d)
            k = layer * net.dirs + d
            dh = dh_top[k].copy()
            dc = dc_top[k].copy() if dc_top is not None else None
            for s, m, saved in reversed(steps[layer][d]):
                dh_t = dh + np.where(m, d_out[s, :, d * net.out:(d + 1) * net.out], 0.0)
                dh2 = np.where(m, dh_t, 0.0)
                dc2 = np.where(m, dc, 0.0) if dc is not None else None
                dxt, dhp, dcp = _cell_backward(net.mode, w, saved, dh2, dc2, grads, sfx)
                if d_in is None:
                    d_in = np.zeros((t, b, dxt.shape[1]))
                d_in[s] += dxt
                dh = dhp + np.where(m, 0.0, dh_t)
                if store is not None:
                    dh = store(dh)
                if dc is not None:
                    dc = dcp + np.where(m, 0.0, dc)
            dhx[k] = dh
            if dcx is not None:
                dcx[k] = dc
        # the gradient handed to the layer below is stored like the states (see storage)
        d_out = store(d_in) if store is not None and layer > 0 else d_in
    dx = np.swapaxes(d_out, 0, 1) if cache["batch_first"] else d_out
    return dx, dhx, dcx, grads
