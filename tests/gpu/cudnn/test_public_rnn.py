"""The RNN plan's public pieces on a GPU: ``DropoutDescriptor`` (the states cuDNN asks for,
dropout applied between layers at the stated rate with the surviving values scaled by
``1 / (1 - p)``, the same seed giving the same mask), ``rnn_spec`` / ``RNNSpec`` against the
reference's gate counts (``RNN_MODES``, ``rnn_gates``), ``RNNDescriptor`` holding each
algorithm of ``RNN_ALGOS``, and the ``RNNDataDescriptor`` pair the plan caches under
``RNN_DATA_KEY``."""

import ctypes

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cudnn
from cudalibs import testing as T
from cudalibs.cudnn._base import raise_for
from cudalibs.cudnn.handle import handle_for
from cudalibs.testing.ref import _rnn as ref

from .._plans import cached


def _states_bytes(h) -> int:
    size = ctypes.c_size_t()
    st = cudnn._lib.get().cudnnDropoutGetStatesSize(h.raw, ctypes.byref(size))
    if st:
        raise_for(st, "cudnnDropoutGetStatesSize")
    return size.value


# -- dropout --------------------------------------------------------------------------------------
def test_dropout_descriptor_holds_its_states(device):
    h = handle_for(device, cl.current_stream().raw_handle)
    size = _states_bytes(h)
    assert size > 0
    states = cl.empty((size,), np.uint8)
    d = cudnn.DropoutDescriptor(h.raw, 0.25, 1234, states)
    p, ptr, seed = ctypes.c_float(), ctypes.c_void_p(), ctypes.c_ulonglong()
    st = cudnn._lib.get().cudnnGetDropoutDescriptor(d.raw, h.raw, ctypes.byref(p),
                                                    ctypes.byref(ptr), ctypes.byref(seed))
    assert st == 0, st
    assert p.value == np.float32(0.25) and ptr.value == states.address and seed.value == 1234
    assert d.key == (0.25, 1234) and "p=0.25 seed=1234" in repr(d)
    # states smaller than cuDNN asks for are refused; no dropout needs none
    with pytest.raises(cl.CudnnError):
        cudnn.DropoutDescriptor(h.raw, 0.25, 1234, cl.empty((size // 2,), np.uint8))
    cudnn.DropoutDescriptor(h.raw, 0.0, 1).close()
    d.close()
    assert d.closed


def _dropout_probe(p, seed, hidden, rng_w):
    """A two-layer ReLU RNN that shows the dropout between its layers: layer 0 maps positive
    inputs to positive outputs (positive input weights, no recurrence, no bias), layer 1 is the
    identity (``weight_ih_l1 = I``).  Its inference output is layer 0's output ``h``; its
    training output is ``dropout(h)``: 0 where dropped, ``h / (1 - p)`` elsewhere."""
    rnn = cudnn.RNN("rnn_relu", hidden, hidden, num_layers=2, dropout=p, seed=seed)
    params = {name: np.zeros(v.shape, np.float32) for name, v in rnn.parameters().items()}
    params["weight_ih_l0"] = T.random_array((hidden, hidden), np.float32, rng=rng_w,
                                            low=0.5 / hidden, high=1.5 / hidden)
    params["weight_ih_l1"] = np.eye(hidden, dtype=np.float32)
    rnn.load_torch_state(params)
    return rnn


@pytest.mark.parametrize("p", [0.25, 0.6])
def test_dropout_between_layers_drops_at_its_rate_and_scales_the_rest(device, rng, p):
    t, b, hidden = 16, 32, 64
    weight_seed = int(rng.integers(2**31))
    x = cl.to_device(T.random_array((t, b, hidden), np.float32, rng=rng, low=0.5, high=1.5))
    rnn = _dropout_probe(p, 7, hidden, np.random.default_rng(weight_seed))
    h = rnn.forward(x)[0].get().astype(np.float64)
    assert (h > 0).all(), "the probe's first layer should pass positive values"
    y = rnn.forward(x, training=True)[0].get().astype(np.float64)
    kept = y != 0
    dropped = 1.0 - kept.mean()
    sigma = np.sqrt(p * (1 - p) / y.size)
    assert abs(dropped - p) <= 6 * sigma, f"dropped {dropped:.4f} of {y.size}, p = {p}"
    T.assert_close(y[kept], h[kept] / (1 - p), np.float32, msg="the kept values' scaling")
    # the same seed, the same mask; another seed, another
    same = _dropout_probe(p, 7, hidden, np.random.default_rng(weight_seed))
    np.testing.assert_array_equal(same.forward(x, training=True)[0].get(), y.astype(np.float32))
    other = _dropout_probe(p, 8, hidden, np.random.default_rng(weight_seed))
    assert ((other.forward(x, training=True)[0].get() != 0) != kept).any()
    for r in (rnn, same, other):
        r.close()


# -- the problem, its descriptors -----------------------------------------------------------------
@pytest.mark.parametrize("mode", sorted(ref.RNN_MODES))
def test_rnn_spec_matches_the_reference_and_runs(device, rng, mode):
    spec = cudnn.rnn_spec(mode, 6, 10, num_layers=2, bidirectional=True)
    assert isinstance(spec, cudnn.RNNSpec)
    assert spec.gates == ref.rnn_gates(mode) == ref.RNN_MODES[mode]
    assert (spec.layer_dirs, spec.y_size, spec.out_size) == (4, 20, 10)
    shapes = {name: shape for name, _, _, shape in spec.params()}
    assert shapes == ref.rnn_param_shapes(mode, 6, 10, num_layers=2, bidirectional=True)
    rnn = cudnn.RNN(mode, 6, 10, num_layers=2, bidirectional=True)
    assert rnn.spec.describe() == spec.describe()
    params = {k: T.random_array(v.shape, np.float32, rng=rng, low=-0.3, high=0.3)
              for k, v in rnn.parameters().items()}
    rnn.load_torch_state(params)
    xh = T.random_array((5, 3, 6), np.float32, rng=rng)
    y, hy, _ = rnn.forward(cl.to_device(xh))
    ry, rhy, _ = ref.rnn_forward(mode, xh, params)
    T.assert_close(y, ry, np.float32)
    T.assert_close(hy, rhy, np.float32)
    rnn.close()


def test_each_algorithm_is_its_descriptor(device, rng):
    t, b = 6, 8
    rnn = cudnn.RNN("lstm", 16, 32, num_layers=2, dtype=np.float16, seq_len=t, batch_size=b)
    params = {k: T.random_array(v.shape, np.float16, rng=rng, low=-0.2, high=0.2)
              for k, v in rnn.parameters().items()}
    rnn.load_torch_state(params)
    rnn.plan()
    names = [c["name"] for c in rnn.candidates]
    assert set(names) | set(rnn.refused) == set(cudnn.RNN_ALGOS)
    xh = T.random_array((t, b, 16), np.float16, rng=rng)
    want, _, _ = ref.rnn_forward("lstm", xh, params)
    for i, name in enumerate(names):
        rnn.select(i)
        desc = rnn.descriptor
        assert isinstance(desc, cudnn.RNNDescriptor) and rnn.algo == name
        held = desc.read()
        assert held["algo"] == cudnn.RNN_ALGOS[name], (name, held)
        assert (held["inputSize"], held["hiddenSize"], held["numLayers"]) == (16, 32, 2)
        T.assert_close(rnn.forward(cl.to_device(xh))[0], want, np.float16, msg=name)
    rnn.close()


def test_batch_shapes_are_cached_as_data_descriptors(device, rng):
    t, b, f = 7, 4, 5
    rnn = cudnn.RNN("gru", f, 9)
    xh = T.random_array((t, b, f), np.float32, rng=rng)
    lengths = (7, 3, 5, 1)
    y, _, _ = rnn.forward(cl.to_device(xh), seq_lengths=list(lengths))
    (entry,) = cached(cudnn.RNN_DATA_KEY, seq_len=t, batch=b, seq_lengths=lengths,
                      x_size=f, y_size=9)
    data = entry.plan
    for desc, size in ((data.x_desc, f), (data.y_desc, 9)):
        assert isinstance(desc, cudnn.RNNDataDescriptor) and not desc.closed
        assert desc.key[2:] == (t, b, size, lengths)
    params = {k: v.get() for k, v in rnn.parameters().items()}
    ry, _, _ = ref.rnn_forward("gru", xh, params, seq_lengths=list(lengths))
    T.assert_close(y, ry, np.float32)
    # the same shape again is a cache hit: no second entry
    rnn.forward(cl.to_device(xh), seq_lengths=list(lengths))
    assert len(cached(cudnn.RNN_DATA_KEY, seq_len=t, batch=b, seq_lengths=lengths,
                      x_size=f, y_size=9)) == 1
    rnn.close()
