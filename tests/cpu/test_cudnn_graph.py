"""cuDNN's graph (backend) API without a GPU: every enum constant the graph wrappers use
against the header, descriptors built and finalized by the real library (tensors,
convolutions, pointwise and convolution operations, operation graphs, heuristics and variant
packs finalize host-side in cuDNN 9), attribute round trips, the errors raised for bad input,
and the conv module's graph/legacy dispatch logic (note filters, cache keys)."""

import os
import sys

import numpy as np
import pytest

import cudalibs
from cudalibs.cudnn import _base, _lib, backend as G, conv
from cudalibs.cudnn.backend import descriptors as GD
from cudalibs.cudnn.conv import legacy as conv_legacy, oneshot as conv_oneshot
from cudalibs.errors import ClosedError, CudnnError

T = _lib

# headers.py sits next to this file (see test_headers.py).
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


# -- enum constants against cudnn_graph.h, each in the enum it belongs to ------------------------
# prefix of the constants in _lib -> the C enum (typedef name) they must come from
ENUMS = [
    ("CUDNN_BACKEND_", "cudnnBackendDescriptorType_t"),
    ("CUDNN_TYPE_", "cudnnBackendAttributeType_t"),
    ("CUDNN_ATTR_", "cudnnBackendAttributeName_t"),
    ("CUDNN_POINTWISE_", "cudnnPointwiseMode_t"),
    ("CUDNN_HEUR_MODE_", "cudnnBackendHeurMode_t"),
    ("CUDNN_NUMERICAL_NOTE_", "cudnnBackendNumericalNote_t"),
    ("CUDNN_BEHAVIOR_NOTE_", "cudnnBackendBehaviorNote_t"),
]


@pytest.fixture(scope="module")
def header():
    if not os.environ.get("CI"):
        pytest.importorskip("clang.cindex", reason="libclang is not installed")
    import headers as H

    return H.load(("cudnn.h",))


@pytest.mark.parametrize("prefix, enum", ENUMS, ids=[e for _, e in ENUMS])
def test_graph_enum_constants_match_header(header, prefix, enum):
    theirs = header.enum(enum)
    ours = {k: v for k, v in vars(_lib).items()
            if k.startswith(prefix) and isinstance(v, int) and not isinstance(v, bool)}
    assert ours, f"no {prefix}* constants in cudalibs.cudnn._lib"
    problems = [f"{k} = {v}: the header's {enum} says {theirs.get(k, 'nothing')}"
                for k, v in sorted(ours.items()) if theirs.get(k) != v]
    assert not problems, "\n".join(problems)


def test_other_graph_constants_match_header(header):
    assert header.enum("cudnnConvolutionMode_t")["CUDNN_CROSS_CORRELATION"] == \
        T.CUDNN_CROSS_CORRELATION
    assert header.enum("cudnnStatus_t")["CUDNN_STATUS_NOT_SUPPORTED"] == \
        T.CUDNN_STATUS_NOT_SUPPORTED
    assert header.integer("CUDNN_DIM_MAX") == T.CUDNN_DIM_MAX


def test_note_tables_cover_the_header(header):
    # every note the library can report gets a name (the filters match names)
    num = {k for k in header.enum("cudnnBackendNumericalNote_t") if not k.endswith("TYPE_COUNT")}
    beh = {k for k in header.enum("cudnnBackendBehaviorNote_t") if not k.endswith("TYPE_COUNT")}
    assert {f"CUDNN_NUMERICAL_NOTE_{v.upper()}" for v in G.NUMERICAL_NOTES.values()} \
        == {k.upper() for k in num}
    assert {f"CUDNN_BEHAVIOR_NOTE_{v.upper()}" for v in G.BEHAVIOR_NOTES.values()} \
        == {k.upper() for k in beh}


def test_every_attribute_type_the_wrapper_sets_is_typed():
    # each (attribute, type) the builders pass has a C element type
    for atype in (T.CUDNN_TYPE_HANDLE, T.CUDNN_TYPE_DATA_TYPE, T.CUDNN_TYPE_BOOLEAN,
                  T.CUDNN_TYPE_INT64, T.CUDNN_TYPE_FLOAT, T.CUDNN_TYPE_DOUBLE,
                  T.CUDNN_TYPE_VOID_PTR, T.CUDNN_TYPE_CONVOLUTION_MODE, T.CUDNN_TYPE_HEUR_MODE,
                  T.CUDNN_TYPE_KNOB_TYPE, T.CUDNN_TYPE_NUMERICAL_NOTE, T.CUDNN_TYPE_POINTWISE_MODE,
                  T.CUDNN_TYPE_BACKEND_DESCRIPTOR, T.CUDNN_TYPE_BEHAVIOR_NOTE):
        assert atype in GD._ELEMENT


# -- descriptors built by the library, no GPU ----------------------------------------------------
def _nhwc(shape):
    from cudalibs.cudnn.descriptors import packed_strides

    return packed_strides(shape, True)


@pytest.mark.cudnn_finalize
def test_tensor_round_trip():
    t = G.tensor(7, np.float16, (2, 8, 5, 6), _nhwc((2, 8, 5, 6)), alignment=16)
    assert t.finalized and "TENSOR" in repr(t) and "finalized" in repr(t)
    assert t.get(T.CUDNN_ATTR_TENSOR_DIMENSIONS, T.CUDNN_TYPE_INT64) == [2, 8, 5, 6]
    assert t.get(T.CUDNN_ATTR_TENSOR_STRIDES, T.CUDNN_TYPE_INT64) == [240, 1, 48, 8]
    assert t.get(T.CUDNN_ATTR_TENSOR_UNIQUE_ID, T.CUDNN_TYPE_INT64, 1) == [7]
    assert t.get(T.CUDNN_ATTR_TENSOR_DATA_TYPE, T.CUDNN_TYPE_DATA_TYPE, 1) == [T.CUDNN_DATA_HALF]
    assert t.get(T.CUDNN_ATTR_TENSOR_IS_VIRTUAL, T.CUDNN_TYPE_BOOLEAN, 1) == [False]
    v = G.tensor(101, np.float32, (2, 8, 5, 6), (240, 30, 6, 1), virtual=True)
    assert v.get(T.CUDNN_ATTR_TENSOR_IS_VIRTUAL, T.CUDNN_TYPE_BOOLEAN, 1) == [True]
    assert v.count(T.CUDNN_ATTR_TENSOR_DIMENSIONS, T.CUDNN_TYPE_INT64) == 4


@pytest.mark.cudnn_finalize
def test_convolution_round_trip():
    c = G.convolution((1, 2), (2, 1), (1, 3))
    get = lambda a: c.get(a, T.CUDNN_TYPE_INT64)  # noqa: E731
    assert get(T.CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS) == [1, 2]
    assert get(T.CUDNN_ATTR_CONVOLUTION_POST_PADDINGS) == [1, 2]
    assert get(T.CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES) == [2, 1]
    assert get(T.CUDNN_ATTR_CONVOLUTION_DILATIONS) == [1, 3]
    assert c.get(T.CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, T.CUDNN_TYPE_INT64, 1) == [2]
    assert c.get(T.CUDNN_ATTR_CONVOLUTION_COMP_TYPE, T.CUDNN_TYPE_DATA_TYPE, 1) == \
        [T.CUDNN_DATA_FLOAT]


@pytest.mark.cudnn_finalize
def test_pointwise_descriptors_finalize():
    # (cuDNN 9.19 answers NOT_SUPPORTED to getting a pointwise descriptor's attributes)
    for mode in ("add", "relu", "identity"):
        pw = G.pointwise(mode)
        assert pw.finalized and pw.kind == T.CUDNN_BACKEND_POINTWISE_DESCRIPTOR


def _conv_graph(op="forward", dtype=np.float16, n=2, c=8, k=16, hw=8):
    x_shape, w_shape, y_shape = (n, c, hw, hw), (k, c, 3, 3), (n, k, hw, hw)
    shapes = {"forward": (x_shape, w_shape, y_shape),
              "backward_data": (w_shape, y_shape, x_shape),
              "backward_filter": (x_shape, y_shape, w_shape)}[op]
    a, b, cc = (G.tensor(u, dtype, s, _nhwc(s)) for u, s in zip((1, 2, 3), shapes))
    o = G.conv_operation(op, a, b, cc, G.convolution((1, 1), (1, 1), (1, 1)))
    return G.operation_graph([o]), o


@pytest.mark.cudnn_finalize
@pytest.mark.parametrize("op", sorted(G.CONV_OPS))
def test_conv_operations_and_graph_finalize_without_a_gpu(op):
    graph, o = _conv_graph(op)
    assert o.finalized and graph.finalized and graph._refs == [o]
    alpha = {"forward": T.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
             "backward_data": T.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
             "backward_filter": T.CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA}[op]
    assert o.get(alpha, T.CUDNN_TYPE_FLOAT, 1) == [1.0]


@pytest.mark.cudnn_finalize
def test_fused_graph_finalizes_without_a_gpu():
    y_shape = (2, 16, 8, 8)
    x = G.tensor(1, np.float16, (2, 8, 8, 8), _nhwc((2, 8, 8, 8)))
    w = G.tensor(2, np.float16, (16, 8, 3, 3), _nhwc((16, 8, 3, 3)))
    y = G.tensor(3, np.float16, y_shape, _nhwc(y_shape))
    b = G.tensor(4, np.float16, (1, 16, 1, 1), _nhwc((1, 16, 1, 1)))
    v1 = G.tensor(101, np.float32, y_shape, _nhwc(y_shape), virtual=True)
    v2 = G.tensor(102, np.float32, y_shape, _nhwc(y_shape), virtual=True)
    ops = [G.conv_operation("forward", x, w, v1, G.convolution((1, 1), (1, 1), (1, 1)),
                            alpha=0.5),
           G.pointwise_operation(G.pointwise("add"), v1, v2, b),
           G.pointwise_operation(G.pointwise("relu"), v2, y)]
    graph = G.operation_graph(ops)
    assert graph.finalized and graph._refs == ops
    assert ops[0].get(T.CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, T.CUDNN_TYPE_FLOAT,
                      1) == [0.5]


@pytest.mark.cudnn_finalize
def test_heuristics_without_a_gpu():
    graph, _ = _conv_graph()
    heur = G.make(T.CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
                   (T.CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, T.CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    graph),
                   (T.CUDNN_ATTR_ENGINEHEUR_MODE, T.CUDNN_TYPE_HEUR_MODE, T.CUDNN_HEUR_MODE_A))
    # the ranking exists host-side; the configurations themselves may need a device
    assert heur.count(T.CUDNN_ATTR_ENGINEHEUR_RESULTS, T.CUDNN_TYPE_BACKEND_DESCRIPTOR) > 0
    errors = []
    cfgs = G.engine_configs(graph, errors=errors)
    assert isinstance(cfgs, list)
    for cfg in cfgs:  # a host that can finalize them: each is described and unique
        assert cfg.name.startswith("eng") and cfg.heuristic in ("a", "fallback")
    assert len({(c.engine, c.knobs) for c in cfgs}) == len(cfgs)
    with pytest.raises(ValueError, match="heuristic mode"):
        G.engine_configs(graph, ("nope",))


def test_engine_config_name():
    ec = G.EngineConfig(None, 12, ((2, 1), (3, 0)), frozenset(), frozenset(), "a")
    assert ec.name == "eng12 k2=1,k3=0"
    assert G.EngineConfig(None, 0, (), frozenset(), frozenset(), "a").name == "eng0"


@pytest.mark.cudnn_finalize
def test_variant_pack_finalizes_host_side():
    vp = G.variant_pack([1, 2, 3], [0x10000, 0x20000, 0x30000], 0x40000)
    assert vp.finalized and vp.kind == T.CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR


def test_variant_pack_refuses_unpaired_lists():
    with pytest.raises(ValueError, match="unique ids"):
        G.variant_pack([1, 2], [0x10000])


# -- lifetime and bad input --------------------------------------------------------------------
def test_descriptor_lifetime():
    d = G.BackendDescriptor(T.CUDNN_BACKEND_TENSOR_DESCRIPTOR)
    assert d.handle and not d.closed and "open" in repr(d)
    d.close()
    d.close()  # twice is harmless
    assert d.closed and "closed" in repr(d)
    with pytest.raises(ClosedError):
        d.set(T.CUDNN_ATTR_TENSOR_UNIQUE_ID, T.CUDNN_TYPE_INT64, 1)


def test_bad_input_raises_before_the_library():
    with pytest.raises(ValueError, match="descriptor type"):
        G.BackendDescriptor(999)
    with pytest.raises(ValueError, match="one stride"):
        G.tensor(1, np.float32, (2, 3, 4), (12, 4))
    with pytest.raises(ValueError, match=">= 1"):
        G.tensor(1, np.float32, (2, 0, 4), (0, 4, 1))
    with pytest.raises(ValueError, match="power of two"):
        G.tensor(1, np.float32, (2, 3, 4), (12, 4, 1), alignment=12)
    with pytest.raises(TypeError):
        G.tensor(1, "complex64", (2, 3, 4), (12, 4, 1))
    with pytest.raises(ValueError, match="padding"):
        G.convolution((-1, 0), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="one entry"):
        G.convolution((1,), (1, 1), (1, 1))
    with pytest.raises(ValueError, match="pointwise mode"):
        G.pointwise("gelu_please")
    # The operation is refused before its descriptors are looked at: they need no finalize.
    t = G.BackendDescriptor(T.CUDNN_BACKEND_TENSOR_DESCRIPTOR)
    conv = G.BackendDescriptor(T.CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)
    with pytest.raises(ValueError, match="op must be"):
        G.conv_operation("sideways", t, t, t, conv)
    d = G.BackendDescriptor(T.CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)
    with pytest.raises(TypeError, match="backend descriptors"):
        d.set(T.CUDNN_ATTR_OPERATIONGRAPH_OPS, T.CUDNN_TYPE_BACKEND_DESCRIPTOR, [42])
    with pytest.raises(ValueError, match="not supported"):
        d.set(T.CUDNN_ATTR_OPERATIONGRAPH_OPS, 26, [1])  # CUDNN_TYPE_FRACTION


def test_attribute_errors_carry_cudnn_text():
    d = G.BackendDescriptor(T.CUDNN_BACKEND_TENSOR_DESCRIPTOR)
    with pytest.raises(CudnnError) as info:
        d.set(T.CUDNN_ATTR_TENSOR_UNIQUE_ID, T.CUDNN_TYPE_FLOAT, 1.0)   # an int64 attribute
    err = info.value
    assert err.function == "cudnnBackendSetAttribute" and "CUDNN_ATTR_TENSOR_UNIQUE_ID" in str(err)
    assert err.name == "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE"
    assert err.detail  # cudnnGetLastErrorString's account
    # the short account of a failed graph route that plans keep (plan.fallback)
    assert G.why(err) == (f"cudnnBackendSetAttribute: CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE "
                          f"({err.detail})")
    assert G.why(ValueError("no engine")) == "ValueError: no engine"
    with pytest.raises(CudnnError, match="cudnnBackendGetAttribute"):
        d.get(T.CUDNN_ATTR_TENSOR_DIMENSIONS, T.CUDNN_TYPE_INT64)   # not finalized yet


def test_names_in_messages():
    for value, name_of, prefix, unknown in (
            (T.CUDNN_ATTR_TENSOR_UNIQUE_ID, G.attribute_name, "CUDNN_ATTR_", "attribute"),
            (T.CUDNN_BACKEND_TENSOR_DESCRIPTOR, G.descriptor_type_name, "CUDNN_BACKEND_",
             "descriptor type")):
        name = name_of(value)
        assert name.startswith(prefix) and getattr(T, name) == value
        assert name_of(-1) == f"{unknown} -1"
    assert G.RNG_DISTRIBUTIONS == {"bernoulli": T.CUDNN_RNG_DISTRIBUTION_BERNOULLI,
                                   "uniform": T.CUDNN_RNG_DISTRIBUTION_UNIFORM,
                                   "normal": T.CUDNN_RNG_DISTRIBUTION_NORMAL}
    with pytest.raises(ValueError, match="distribution must be one of"):
        G.rng("poisson")


@pytest.mark.cudnn_finalize
def test_library_errors_carry_cudnn_text():
    d = G.BackendDescriptor(T.CUDNN_BACKEND_TENSOR_DESCRIPTOR)
    with pytest.raises(CudnnError) as info:
        d.finalize()  # no dimensions set
    err = info.value
    assert err.function == "cudnnBackendFinalize" and "TENSOR" in str(err)
    assert err.detail  # cudnnGetLastErrorString's account
    t = G.tensor(1, np.float32, (1, 2, 3, 4), (24, 12, 4, 1))
    with pytest.raises(CudnnError, match="CUDNN_ATTR_TENSOR_UNIQUE_ID"):
        t.set(T.CUDNN_ATTR_TENSOR_UNIQUE_ID, T.CUDNN_TYPE_INT64, 2)  # finalized: frozen


@pytest.mark.cudnn_finalize
def test_graph_keeps_its_parts_alive():
    import gc

    graph, _ = _conv_graph()
    gc.collect()
    (op,) = graph._refs
    assert not op.closed and all(not t.closed for t in op._refs)


# -- the conv module's dispatch logic ------------------------------------------------------------
def test_banned_notes():
    b = G.banned_notes
    fma = b(np.float32, "fma", False)
    assert {"tensor_core", "down_convert_inputs", "reduced_precision_reduction"} <= fma
    assert "nondeterministic" not in fma
    tf32 = b(np.float32, "tf32", True)
    assert "tensor_core" not in tf32 and "down_convert_inputs" in tf32
    assert "nondeterministic" in tf32
    half = b(np.float16, "tensor_op", False)
    assert "tensor_core" not in half and "reduced_precision_reduction" in half
    assert b(np.float32, "allow_conversion", False) == frozenset()


def test_graph_switch_is_read_at_plan_time():
    from test_cudnn import _fake   # the stand-in device arrays of the cuDNN CPU tests

    from cudalibs import cudnn

    def make(**kw):
        return cudnn.ConvForwardPlan(_fake((2, 8, 8, 8), np.float16, True),
                                     _fake((16, 8, 3, 3), np.float16, True), padding=1, **kw)

    try:
        assert cudalibs.options().conv_graph_api is True
        assert make()._graph is True
        with cudalibs.option_context(conv_graph_api=False):
            off = make()
            assert make(graph_api=True)._graph is True     # the plan's own argument wins
        assert off._graph is False
        assert make()._graph is True                        # the scope ended with the block
    finally:
        _base._env_of.clear()  # the stand-in device must not leak into GPU tests


def test_not_supported_statuses():
    ns = conv_legacy.not_supported
    assert ns(3000) and ns(3007)
    assert not ns(0) and not ns(2000)
    assert not ns(9)


def test_cache_key_tells_graph_from_legacy():
    class Dev:
        ordinal = 0
        compute_capability = (9, 0)

    class Arr:
        def __init__(self, shape, strides):
            self.shape, self.strides, self.dtype = shape, strides, np.dtype(np.float16)

    x, w = Arr((2, 8, 4, 4), (256, 1, 64, 16)), Arr((8, 8, 3, 3), (144, 1, 48, 16))
    args = (1, 1, 1, 1, "find", None, False, 1 << 20, None, 1.0, 0.0)
    try:
        legacy = conv_oneshot.problem_key(conv.FORWARD_KEY, Dev(), x, w, None, *args, False)
        graph = conv_oneshot.problem_key(conv.FORWARD_KEY, Dev(), x, w, None, *args, True)
    finally:
        _base._env_of.clear()  # the stand-in device must not leak into GPU tests
    assert legacy != graph
    nl, ng = conv.FORWARD_KEY.named(legacy), conv.FORWARD_KEY.named(graph)
    assert {k for k in ng if ng[k] != nl[k]} == {"graph_api"}
    # the fields other code reads, by name
    assert ng["x_shape"] == x.shape and ng["math"] is None
    assert ng["deterministic"] is False and ng["workspace_limit"] == 1 << 20
    assert ng["graph_api"] is True


# -- where a finalize cannot work: the skip of the tests marked cudnn_finalize ------------------
def test_the_finalize_skip_needs_all_three_conditions(monkeypatch, tmp_path):
    import cudnn_host as CH

    lib = tmp_path / "libcudnn.so.9"
    lib.write_bytes(b"")
    (tmp_path / "libcudnn_engines_runtime_compiled.so.9").write_bytes(b"")
    monkeypatch.setattr(CH, "loaded_cudnn_path", lambda: str(lib))
    monkeypatch.setattr(CH, "elf_needed",
                        lambda p: [CH.LIBCUDA] if "runtime_compiled" in p else ["libc.so.6"])
    monkeypatch.setattr(CH, "libcuda_missing", lambda: "libcuda.so.1: cannot open")
    err = CudnnError(CH.SUBLIBRARY_LOADING_FAILED, "cudnnBackendFinalize")
    reason = CH.cudnn_needs_missing_libcuda(err)
    assert reason.startswith("cudnnBackendFinalize: CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED")
    assert "libcudnn_engines_runtime_compiled.so.9 links libcuda.so.1" in reason
    assert "(libcuda.so.1: cannot open)" in reason
    # one condition short and the failure stands: another status or error ...
    assert CH.cudnn_needs_missing_libcuda(CudnnError(2000, "cudnnBackendFinalize")) is None
    assert CH.cudnn_needs_missing_libcuda(ValueError("no")) is None
    # ... no library of cuDNN's linking the driver ...
    monkeypatch.setattr(CH, "elf_needed", lambda p: ["libc.so.6"])
    assert CH.cudnn_needs_missing_libcuda(err) is None
    # ... or a driver that loads
    monkeypatch.setattr(CH, "elf_needed", lambda p: [CH.LIBCUDA])
    monkeypatch.setattr(CH, "libcuda_missing", lambda: None)
    assert CH.cudnn_needs_missing_libcuda(err) is None


def test_elf_dependencies_of_the_loaded_cudnn():
    import cudnn_host as CH

    from cudalibs import cudnn

    cudnn.version()
    needed = CH.elf_needed(CH.loaded_cudnn_path())
    assert needed and all(n.startswith("lib") for n in needed)
    assert CH.elf_needed(__file__) == []   # not an ELF file
