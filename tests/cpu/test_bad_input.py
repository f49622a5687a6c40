"""Every public callable answers bad input clearly, before any C call.

The walk finds its callables by introspection, so a callable is covered the day it is
exported:

- scope: the ``__all__`` of :mod:`cudalibs` (the driver objects re-exported there, the
  runtime), :mod:`cudalibs.cublas`, :mod:`cudalibs.cudnn`, :mod:`cudalibs.nccl`,
  :mod:`cudalibs.cufft`, :mod:`cudalibs.cusparse`, :mod:`cudalibs.kernels` and
  :mod:`cudalibs.graph`.  Not walked: the submodules those name
  (``cudnn.backend`` and ``cudnn.attention`` are lower layers whose public objects
  :mod:`cudalibs.cudnn` re-exports), :mod:`cudalibs.dtypes` (its ``lookup`` is the dtype
  conversion behind every ``dtype`` argument walked here, named by its caller) and
  :mod:`cudalibs.testing` (host-side helpers for test code, on numpy arrays, whose contract
  is numpy's errors and ``AssertionError``).
- what is called: every function; every class's constructor and its class and static
  methods; and the methods and property setters of the objects a machine without a GPU can
  hold: a :class:`~cudalibs.DeviceArray` and a :class:`~cudalibs.DeviceBuffer` over a
  stand-in device, and a :class:`~cudalibs.PlanCache`.  Exceptions and records (dataclasses,
  named tuples) are left out: they hold what they are given.  The methods of objects only a
  GPU makes (streams, modules, plans, communicators) are the GPU tier's.
- how: for each required parameter (and a ``*args`` one the valid values give), with every
  other one valid, the call is made with ``None`` there, with an ``object()`` and with a
  ``str``; an array parameter also gets a wrong dtype (bool) and a wrong shape (one more
  dimension).

A C call is what bad input must never reach: every library load
(:class:`cudalibs._ffi.LazyLibrary`) raises :class:`ReachedC` during the walk, and so does the
stand-in device on any use beyond its ordinal and compute capability.  The call with valid
values only, made first, must get that far (or return): it proves the values valid, so that a
probe's error is the probe's.  A probe must raise a ``TypeError`` or ``ValueError`` (the
errors of cudalibs that answer bad input subclass them) whose message names the call and the
parameter.  A wrong dtype or shape may instead be taken (the call reaches C: many operations
take any dtype or another rank), as long as nothing else escapes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import inspect
import re

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import _ffi, dtypes
from cudalibs.cudnn import _base as cudnn_base, _lib as cudnn_lib
from cudalibs.driver.array import DeviceArray
from cudalibs.driver.memory import DeviceBuffer
from cudalibs.runtime.cache import PlanCache


class ReachedC(Exception):
    """A call got past its argument checks: it loaded a library or used the device."""


class _Device:
    """A stand-in device: an ordinal and a compute capability, nothing a C call could use."""

    ordinal = 0
    compute_capability = (9, 0)

    def __getattr__(self, name):
        raise ReachedC(f"device.{name}")

    def __repr__(self):
        return "<stand-in device 0>"


DEV = _Device()


_NEXT = 1 << 32


def fake_buffer(nbytes=64):
    """A DeviceBuffer over no memory on the stand-in device."""
    return DeviceBuffer._make(0x10000, nbytes, DEV)


def fake(shape, dtype=np.float32):
    """A C-contiguous DeviceArray over no memory on the stand-in device."""
    dt = dtypes.lookup(dtype)
    strides, acc = [], dt.itemsize
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    global _NEXT
    _NEXT += 1 << 20   # each its own addresses: no two operands overlap
    return DeviceArray._view(_NEXT, tuple(shape), tuple(reversed(strides)), dt, DEV, None,
                             None)


F16, F32, I32, I64, U8 = np.float16, np.float32, np.int32, np.int64, np.uint8
C64 = np.complex64


def _csr_arrays():
    return {"indptr": fake((5,), I32), "indices": fake((8,), I32), "data": fake((8,)),
            "shape": (4, 4)}


def _moe_routing():
    """The routing of 4 tokens' 2 choices to 3 experts, over fake arrays."""
    return cl.kernels.MoeRouting(fake((4,), I32), fake((8,), I32), fake((8,), I32))


def _csr():
    """A 4x4 CSR matrix over fake arrays (its construction makes no C call)."""
    return cl.cusparse.CSR(**_csr_arrays())


def _scipy_csr():
    import scipy.sparse as sp
    return sp.eye(4, format="csr", dtype=np.float32)


class _TorchCsr:
    """What from_torch reads of a torch sparse CSR tensor, over fake arrays."""

    layout = "torch.sparse_csr"
    is_sparse = False
    shape = (4, 4)

    def dim(self):
        return 2

    def crow_indices(self):
        return fake((5,), I32)

    def col_indices(self):
        return fake((8,), I32)

    def values(self):
        return fake((8,))

# -- scope -----------------------------------------------------------------------------------------
MODULES = (cl, cl.cublas, cl.cudnn, cl.nccl, cl.cufft, cl.cusparse, cl.kernels, cl.graph)


def _is_record(obj) -> bool:
    return inspect.isclass(obj) and (dataclasses.is_dataclass(obj) or hasattr(obj, "_fields"))


def callables():
    """``(name, callable)`` of everything the walk calls; a method of an instance is bound
    later (its name has a ``#``: ``"DeviceArray#fill"``)."""
    seen, found = set(), []
    for mod in MODULES:
        prefix = "" if mod is cl else mod.__name__.replace("cudalibs.driver.", "").replace(
            "cudalibs.", "") + "."
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.ismodule(obj) or not callable(obj) or id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isclass(obj) and (issubclass(obj, BaseException) or _is_record(obj)):
                continue
            found.append((prefix + name, obj))
            if inspect.isclass(obj):
                for attr, raw in vars(obj).items():
                    if not attr.startswith("_") and isinstance(raw, (classmethod, staticmethod)):
                        found.append((f"{prefix}{name}.{attr}", getattr(obj, attr)))
    for cls, (make, methods) in INSTANCES.items():
        for attr, raw in vars(cls).items():
            if attr.startswith("_"):
                continue
            if (methods and inspect.isfunction(raw)) or (isinstance(raw, property) and raw.fset):
                found.append((f"{cls.__name__}#{attr}", (make, methods)))
    return found


# -- valid values --------------------------------------------------------------------------------
class _Store:
    """A stand-in key-value store (``torch.distributed.Store``'s ``set``, ``get``, ``add``)."""

    def set(self, key, value):
        raise ReachedC("store.set")

    def get(self, key):
        raise ReachedC("store.get")

    def add(self, key, n):
        raise ReachedC("store.add")


class _Mpi:
    """A stand-in mpi4py communicator."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1

    def Bcast(self, buf, root=0):
        raise ReachedC("mpi Bcast")


def _conv():
    return {"x": fake((2, 4, 8, 8)), "w": fake((2, 4, 3, 3)), "dy": fake((2, 2, 6, 6))}


def _attn(*names):
    arrs = {n: fake((1, 2, 8, 64), F16) for n in ("q", "k", "v", "o", "do")}
    arrs["stats"] = fake((1, 2, 8, 1), F32)
    return {n: arrs[n] for n in names}


def _attn8(*names):
    """fp8 attention operands (head dim 128, as the fp8 backward needs) and float32 scalars."""
    arrs = {n: fake((1, 2, 16, 128), dtypes.float8_e4m3fn) for n in ("q", "k", "v", "o", "do")}
    arrs["stats"] = fake((1, 2, 16, 1), F32)
    return {n: arrs[n] if n in arrs else fake((1,), F32) for n in names}


_FP8_FWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o")
_FP8_BWD_SCALES = ("descale_q", "descale_k", "descale_v", "descale_o", "descale_do",
                   "descale_s", "descale_dp", "scale_s", "scale_dq", "scale_dk", "scale_dv",
                   "scale_dp")


def _bn(*names):
    arrs = {"x": fake((2, 4, 8, 8)), "dy": fake((2, 4, 8, 8))}
    return {n: arrs[n] if n in arrs else fake((4,)) for n in names}


def _norm(*names):
    arrs = {"x": fake((4, 16)), "dy": fake((4, 16)), "weight": fake((16,))}
    return {n: arrs[n] if n in arrs else fake((4, 1)) for n in names}


def _mat(*names, dtype=F32, shape=(4, 4)):
    return {n: fake(shape, dtype) for n in names}


def _vec(*names, shape=(8,), dtype=F32):
    return {n: fake(shape, dtype) for n in names}


#: A valid value of each required parameter of each callable, by the walk's name of it.
VALID = {
    "as_device": lambda: {"device": 0},
    "DeviceBuffer.from_handle": lambda: {"ptr": 0x10000, "size": 64},
    "HostBuffer": lambda: {"nbytes": 64},
    "alloc": lambda: {"nbytes": 64},
    "alloc_async": lambda: {"nbytes": 64},
    "pinned_empty": lambda: {"shape": (4,)},
    "to_device": lambda: {"obj": np.zeros(4, F32)},
    "empty": lambda: {"shape": (4,)},
    "zeros": lambda: {"shape": (4,)},
    "full": lambda: {"shape": (4,), "value": 1.0},
    "empty_like": lambda: {"a": fake((4,))},
    "zeros_like": lambda: {"a": fake((4,))},
    "full_like": lambda: {"a": fake((4,)), "value": 1.0},
    "asarray": lambda: {"obj": fake((4,))},
    "from_dlpack": lambda: {"obj": fake((4,))},
    "Stream.from_handle": lambda: {"handle": 0},
    "as_stream": lambda: {"stream": 0},
    "Module.from_ptx": lambda: {"src": ".version 8.0\n.target sm_90\n"},
    "Module.from_cubin": lambda: {"src": b"\x7fELF"},
    "Module.from_fatbin": lambda: {"src": b"\x50\xed\x55\xba"},
    "compile": lambda: {"source": 'extern "C" __global__ void k() {}'},
    "operand": lambda: {"x": fake((4,)), "name": "x", "op": "operand"},
    "operands": lambda: {"op": "operands", "named": ((fake((4,)), "x"),)},
    "StepGraph": lambda: {"fn": lambda: None},
    "capture_step": lambda: {"fn": lambda: None},
    # cuBLAS
    "cublas.gemm": lambda: _mat("a", "b"),
    "cublas.gemm_strided_batched": lambda: _mat("a", "b", shape=(2, 4, 4)),
    "cublas.gemm_batched": lambda: {"a_list": [fake((4, 4))], "b_list": [fake((4, 4))]},
    "cublas.tune_gemm": lambda: _mat("a", "b"),
    "cublas.gemm_args": lambda: {"a_shape": (4, 4), "a_strides": (16, 4), "b_shape": (4, 4),
                                 "b_strides": (16, 4), "out_strides": (16, 4), "itemsize": 4},
    "cublas.GemmPlan": lambda: _mat("a", "b"),
    "cublas.set_gemm_backend": lambda: {"name": cl.cublas.gemm_backend()},
    "cublas.axpy": lambda: {"alpha": 1.0, **_vec("x", "y")},
    "cublas.scal": lambda: {"alpha": 1.0, **_vec("x")},
    "cublas.dot": lambda: _vec("x", "y"),
    "cublas.nrm2": lambda: _vec("x"),
    "cublas.gemv": lambda: {"a": fake((4, 4)), "x": fake((4,))},
    "cublas.Matmul": lambda: _mat("a", "b"),
    "cublas.matmul": lambda: _mat("a", "b"),
    "cublas.MatrixLayout": lambda: {"dtype": F32, "rows": 4, "cols": 4},
    "cublas.MatmulDesc": lambda: {"compute_type": 68, "scale_type": 0},
    "cublas.gemm_grouped": lambda: {"a_list": [fake((4, 8))], "b_list": [fake((8, 4))]},
    "cublas.GroupedGemm": lambda: {"a_list": [fake((4, 8))], "b_list": [fake((8, 4))]},
    # cuDNN
    "cudnn.conv_forward": lambda: {k: v for k, v in _conv().items() if k in ("x", "w")},
    "cudnn.conv_backward_data": lambda: {k: v for k, v in _conv().items() if k in ("dy", "w")},
    "cudnn.conv_backward_filter": lambda: {"x": fake((2, 4, 8, 8)), "dy": fake((2, 2, 6, 6)),
                                           "filter_shape": (2, 4, 3, 3)},
    "cudnn.conv_backward_bias": lambda: {"dy": fake((2, 2, 6, 6))},
    "cudnn.conv_bias_act": lambda: {"x": fake((2, 4, 8, 8)), "w": fake((2, 4, 3, 3)),
                                    "bias": fake((1, 2, 1, 1))},
    "cudnn.conv_output_shape": lambda: {"x_shape": (2, 4, 8, 8), "w_shape": (2, 4, 3, 3)},
    "cudnn.ConvForwardPlan": lambda: {k: v for k, v in _conv().items() if k in ("x", "w")},
    "cudnn.ConvBackwardDataPlan": lambda: {k: v for k, v in _conv().items() if k in ("dy", "w")},
    "cudnn.ConvBackwardFilterPlan": lambda: {"x": fake((2, 4, 8, 8)), "dy": fake((2, 2, 6, 6)),
                                             "filter_shape": (2, 4, 3, 3)},
    "cudnn.ConvBiasActPlan": lambda: {k: v for k, v in _conv().items() if k in ("x", "w")},
    "cudnn.batch_norm_train": lambda: _bn("x", "scale", "bias"),
    "cudnn.batch_norm_infer": lambda: _bn("x", "scale", "bias", "mean", "var"),
    "cudnn.batch_norm_backward": lambda: _bn("x", "dy", "scale"),
    "cudnn.batch_norm_paths": lambda: _bn("x"),
    "cudnn.BatchNormPlan": lambda: _bn("x"),
    "cudnn.pooling_forward": lambda: {"x": fake((2, 4, 8, 8)), "window": 2},
    "cudnn.pooling_backward": lambda: {"y": fake((2, 4, 4, 4)), "dy": fake((2, 4, 4, 4)),
                                       "x": fake((2, 4, 8, 8)), "window": 2},
    "cudnn.pooling_output_shape": lambda: {"x_shape": (2, 4, 8, 8), "window": 2},
    "cudnn.activation": lambda: _bn("x"),
    "cudnn.activation_backward": lambda: {n: fake((2, 4, 8, 8)) for n in ("y", "dy", "x")},
    "cudnn.softmax": lambda: _bn("x"),
    "cudnn.softmax_backward": lambda: {n: fake((2, 4, 8, 8)) for n in ("y", "dy")},
    "cudnn.add_tensor": lambda: {"a": fake((1, 4, 1, 1)), "c": fake((2, 4, 8, 8))},
    "cudnn.TensorDescriptor": lambda: {"dtype": F32, "shape": (2, 4, 8, 8),
                                       "strides": (256, 64, 8, 1)},
    "cudnn.FilterDescriptor": lambda: {"dtype": F32, "shape": (2, 4, 3, 3)},
    "cudnn.ConvolutionDescriptor": lambda: {"padding": (0, 0), "stride": (1, 1),
                                            "dilation": (1, 1), "groups": 1, "compute": 0,
                                            "math": 0},
    "cudnn.PoolingDescriptor": lambda: {"mode": "max", "window": (2, 2), "padding": (0, 0),
                                        "stride": (2, 2)},
    "cudnn.ActivationDescriptor": lambda: {"mode": "relu"},
    "cudnn.DropoutDescriptor": lambda: {"handle": ctypes.cast(1, cudnn_lib.cudnnHandle_t),
                                        "p": 0.1, "seed": 0},
    "cudnn.set_workspace_limit": lambda: {"nbytes": cl.cudnn.workspace_limit()},
    "cudnn.sdpa": lambda: _attn("q", "k", "v"),
    "cudnn.sdpa_backward": lambda: _attn("q", "k", "v", "o", "do", "stats"),
    "cudnn.SdpaPlan": lambda: _attn("q", "k", "v"),
    "cudnn.SdpaBackwardPlan": lambda: _attn("q", "k", "v", "o", "do"),
    "cudnn.sdpa_fp8": lambda: _attn8("q", "k", "v", *_FP8_FWD_SCALES),
    "cudnn.sdpa_fp8_backward": lambda: _attn8("q", "k", "v", "o", "do", "stats",
                                              *_FP8_BWD_SCALES),
    "cudnn.SdpaFp8Plan": lambda: _attn8("q", "k", "v"),
    "cudnn.SdpaFp8BackwardPlan": lambda: _attn8("q", "k", "v", "o", "do"),
    "cudnn.layer_norm": lambda: _norm("x", "weight"),
    "cudnn.layer_norm_backward": lambda: _norm("dy", "x", "weight", "mean", "inv_std"),
    "cudnn.rms_norm": lambda: _norm("x", "weight"),
    "cudnn.rms_norm_backward": lambda: _norm("dy", "x", "weight", "inv_rms"),
    "cudnn.NormForwardPlan": lambda: _norm("x", "weight"),
    "cudnn.NormBackwardPlan": lambda: _norm("dy", "x", "weight"),
    "cudnn.RNN": lambda: {"mode": "lstm", "input_size": 8, "hidden_size": 16},
    "cudnn.RNNWeights": lambda: {"space": fake((64,), U8), "layout": {}},
    "cudnn.rnn_spec": lambda: {"mode": "lstm", "input_size": 8, "hidden_size": 16},
    "cudnn.RNNDescriptor": lambda: {"spec": cl.cudnn.rnn_spec("lstm", 8, 16), "algo": 0},
    "cudnn.RNNDataDescriptor": lambda: {"dtype": 0, "layout": 0, "seq_len": 4, "batch": 2,
                                        "vector_size": 8, "lengths": [4, 4]},
    # NCCL
    "nccl.UniqueId.from_bytes": lambda: {"data": bytes(128)},
    "nccl.Communicator": lambda: {"nranks": 1, "rank": 0,
                                  "uid": cl.nccl.UniqueId.from_bytes(bytes(128))},
    "nccl.Communicator.init_all": lambda: {"devices": [0]},
    "nccl.Communicator.from_store": lambda: {"store": _Store(), "rank": 0, "world_size": 1},
    "nccl.Communicator.from_mpi": lambda: {"mpi_comm": _Mpi()},
    "nccl.close_all": lambda: {"comms": []},
    # cuFFT
    "cufft.FFTPlan": lambda: {"x": fake((8,), C64)},
    **{f"cufft.{op}": (lambda: {"a": fake((8, 8), C64)}) for op in (
        "fft", "ifft", "irfft", "fft2", "ifft2", "irfft2", "fftn", "ifftn", "irfftn")},
    **{f"cufft.{op}": (lambda: {"a": fake((8, 8), F32)}) for op in ("rfft", "rfft2", "rfftn")},
    # cuSPARSE: matrices over fake arrays (made without a C call)
    "cusparse.error_name": lambda: {"status": 3},
    "cusparse.error_string": lambda: {"status": 3},
    "cusparse.CSR": lambda: _csr_arrays(),
    "cusparse.CSC": lambda: _csr_arrays(),
    "cusparse.COO": lambda: {"row": fake((8,), I32), "col": fake((8,), I32),
                             "data": fake((8,)), "shape": (4, 4)},
    "cusparse.BSR": lambda: {"indptr": fake((3,), I32), "indices": fake((2,), I32),
                             "data": fake((2, 2, 2)), "shape": (4, 4)},
    "cusparse.from_scipy": lambda: {"matrix": _scipy_csr()},
    "cusparse.from_torch": lambda: {"tensor": _TorchCsr()},
    "cusparse.from_dense": lambda: {"x": fake((4, 4))},
    "cusparse.SpMV": lambda: {"A": _csr()},
    "cusparse.SpMM": lambda: {"A": _csr(), "b": fake((4, 3))},
    "cusparse.SDDMM": lambda: {"a": fake((4, 2)), "b": fake((2, 4)), "C": _csr()},
    "cusparse.SpGEMM": lambda: {"A": _csr(), "B": _csr()},
    "cusparse.SpSV": lambda: {"A": _csr()},
    "cusparse.SpSM": lambda: {"A": _csr(), "b": fake((4, 3))},
    "cusparse.spmv": lambda: {"A": _csr(), "x": fake((4,))},
    "cusparse.spmm": lambda: {"A": _csr(), "B": fake((4, 3))},
    "cusparse.sddmm": lambda: {"a": fake((4, 2)), "b": fake((2, 4)), "C": _csr()},
    "cusparse.spgemm": lambda: {"A": _csr(), "B": _csr()},
    "cusparse.spsv": lambda: {"A": _csr(), "x": fake((4,))},
    "cusparse.spsm": lambda: {"A": _csr(), "B": fake((4, 3))},
    "cusparse.BlockedELL": lambda: {"ell_col_ind": fake((2, 1), I32), "values": fake((4, 2)),
                                    "shape": (4, 4), "block_size": 2},
    "cusparse.BlockedELL.from_scipy": lambda: {"matrix": _scipy_csr().tobsr((2, 2))},
    "cusparse.BlockedELL.from_dense": lambda: {"x": fake((4, 4)), "block_size": 2},
    # the shipped kernels
    "kernels.add": lambda: _vec("x", "y"),
    "kernels.axpy": lambda: {"alpha": 1.0, **_vec("x", "y")},
    "kernels.scale": lambda: {"alpha": 1.0, **_vec("x")},
    "kernels.fill": lambda: {"value": 1.0, **_vec("x")},
    "kernels.matmul_naive": lambda: _mat("a", "b"),
    "kernels.matmul_tiled": lambda: _mat("a", "b"),
    "kernels.bmm": lambda: _mat("a", "b", shape=(2, 4, 4)),
    "kernels.softmax": lambda: _mat("x", shape=(4, 8)),
    "kernels.log_softmax": lambda: _mat("x", shape=(4, 8)),
    "kernels.transpose": lambda: _mat("x", shape=(4, 8)),
    "kernels.nchw_to_nhwc": lambda: _mat("x", shape=(2, 4, 8, 8)),
    "kernels.nhwc_to_nchw": lambda: _mat("x", shape=(2, 8, 8, 4)),
    "kernels.bias_relu": lambda: {"x": fake((4, 8)), "bias": fake((8,))},
    "kernels.bias_gelu": lambda: {"x": fake((4, 8)), "bias": fake((8,))},
    "kernels.channel_bias_act": lambda: {"y": fake((2, 4, 8, 8)), "bias": fake((4,))},
    "kernels.batch_norm_relu_infer": lambda: {"x": fake((2, 4, 8, 8)),
                                              **_vec("scale", "shift", "mean", "var",
                                                     shape=(4,))},
    "kernels.relu_backward": lambda: _vec("grad", "act"),
    "kernels.wmma_gemm": lambda: _mat("a", "b", dtype=F16, shape=(16, 16)),
    "kernels.cross_entropy": lambda: {"logits": fake((4, 10)), "labels": fake((4,), I64)},
    "kernels.cross_entropy_backward": lambda: {"logits": fake((4, 10)),
                                               "labels": fake((4,), I64)},
    "kernels.accuracy_count": lambda: {"logits": fake((4, 10)), "labels": fake((4,), I64)},
    "kernels.sgd": lambda: {"lr": 0.1, **_vec("param", "grad")},
    "kernels.adamw": lambda: {"step": 1, "lr": 0.1,
                              **_vec("param", "grad", "exp_avg", "exp_avg_sq")},
    "kernels.step_increment": lambda: {"step": fake((1,), I32)},
    "kernels.embedding": lambda: {"weight": fake((10, 8)), "ids": fake((4,), I64)},
    "kernels.embedding_backward": lambda: {"dy": fake((4, 8)), "ids": fake((4,), I64),
                                           "num_embeddings": 10},
    "kernels.global_avg_pool": lambda: {"x": fake((2, 4, 8, 8))},
    "kernels.global_avg_pool_backward": lambda: {"dy": fake((2, 4)), "x_shape": (2, 4, 8, 8)},
    "kernels.amax": lambda: {"x": fake((4, 8))},
    "kernels.quantize_fp8": lambda: {"x": fake((4, 8)), "scale": fake((1,))},
    "kernels.dequantize_fp8": lambda: {"q": fake((4, 8), dtypes.float8_e4m3fn),
                                       "scale_inv": fake((1,))},
    "kernels.delayed_scale_update": lambda: {"amax_history": fake((16, 2)),
                                             **_vec("amax", "scale", "scale_inv", shape=(2,))},
    "kernels.grouped_mm": lambda: {"x": fake((16, 8), dtypes.bfloat16), "offsets": fake((3,), I32),
                                   "w": fake((2, 8, 16), dtypes.bfloat16)},
    "kernels.GroupedMM": lambda: {"x": fake((16, 8), dtypes.bfloat16), "offsets": fake((3,), I32),
                                  "w": fake((2, 8, 16), dtypes.bfloat16)},
    "kernels.grouped_mm_wgrad": lambda: {"x": fake((16, 8), dtypes.bfloat16),
                                         "dy": fake((16, 16), dtypes.bfloat16),
                                         "offsets": fake((2,), I32)},
    "kernels.GroupedMMWgrad": lambda: {"x": fake((16, 8), dtypes.bfloat16),
                                       "dy": fake((16, 16), dtypes.bfloat16),
                                       "offsets": fake((2,), I32)},
    "kernels.grouped_mm_backward": lambda: {"x": fake((16, 8), dtypes.bfloat16),
                                            "w": fake((2, 8, 16), dtypes.bfloat16),
                                            "dy": fake((16, 16), dtypes.bfloat16),
                                            "offsets": fake((3,), I32)},
    "kernels.topk_softmax": lambda: {"logits": fake((4, 8)), "k": 2},
    "kernels.topk_softmax_backward": lambda: {"logits": fake((4, 8)), "ids": fake((4, 2), I32),
                                              "dweights": fake((4, 2))},
    "kernels.moe_routing": lambda: {"ids": fake((4, 2), I32), "experts": 8},
    "kernels.moe_permute": lambda: {"x": fake((4, 16)), "routing": _moe_routing()},
    "kernels.moe_permute_backward": lambda: {"dx_sorted": fake((8, 16)), "k": 2,
                                             "routing": _moe_routing()},
    "kernels.moe_unpermute": lambda: {"y_sorted": fake((8, 16)), "routing": _moe_routing(),
                                      "weights": fake((4, 2))},
    "kernels.moe_unpermute_backward": lambda: {"dy": fake((4, 16)), "y_sorted": fake((8, 16)),
                                               "routing": _moe_routing(),
                                               "weights": fake((4, 2))},
    "kernels.layer_norm": lambda: {"x": fake((4, 8)), "weight": fake((8,))},
    "kernels.rms_norm": lambda: {"x": fake((4, 8)), "weight": fake((8,))},
    "kernels.layer_norm_backward": lambda: {"dy": fake((4, 8)), "x": fake((4, 8)),
                                            "weight": fake((8,)), "mean": fake((4, 1)),
                                            "rstd": fake((4, 1))},
    "kernels.rms_norm_backward": lambda: {"dy": fake((4, 8)), "x": fake((4, 8)),
                                          "weight": fake((8,)), "rstd": fake((4,))},
    # methods of objects a machine without a GPU holds
    "DeviceArray#copy_": lambda: {"src": fake((4,))},
    "DeviceArray#fill": lambda: {"value": 1.0},
    "DeviceArray#reshape": lambda: {"shape": (2, 2)},
    "DeviceArray#transpose": lambda: {"axes": 0},
    "DeviceArray#view": lambda: {"dtype": I32},
    "DeviceArray.from_buffer": lambda: {"buffer": fake_buffer(), "shape": (4,), "dtype": F32},
    "DeviceBuffer#copy_from": lambda: {"src": fake_buffer()},
    "DeviceBuffer#memset": lambda: {"value": 0},
    "PlanCache#maxsize": lambda: {"maxsize": 8},
    "graph.capture": lambda: {"stream": 0x1234},
}
# The descriptor factories take what the descriptor classes take.
for _f, _c in (("tensor", "Tensor"), ("filter", "Filter"), ("convolution", "Convolution"),
               ("pooling", "Pooling"), ("activation", "Activation")):
    VALID[f"cudnn.{_f}_descriptor"] = VALID[f"cudnn.{_c}Descriptor"]

#: The objects whose methods and property setters the walk calls, and whether their methods
#: are walked: a PlanCache's take any key, as a dict's do, so only its setter is.
INSTANCES = {DeviceArray: (lambda: fake((4,)), True),
             DeviceBuffer: (lambda: fake_buffer(), True),
             PlanCache: (lambda: PlanCache(8), False)}

#: Callables (or one parameter of one) the walk leaves out, each with its reason.
ALLOWED = {
    "Launcher": "made by Kernel.prepare from a Kernel, which needs a loaded module (a GPU); "
                "its geometry checks are Kernel's (test_launch_geometry)",
    "cublas.Epilogue": "a record of the EPILOGUES table: users name an epilogue by its key",
    # The one operand path's names come from library code, as literals: checking them would
    # cost every operand of every call.
    ("operand", "name"): "a literal of the calling library (checked nowhere, on purpose)",
    ("operands", "op"): "a literal of the calling library, None allowed (messages only)",
    ("operands", "named"): "(array, name) pairs written out by the calling library",
}

#: Required parameters for which None is a documented value: None may reach C there.
NONE_IS_A_VALUE = {
    ("as_device", "device"): "the current device",
    ("as_stream", "stream"): "the current stream",
    ("DeviceArray#transpose", "axes"): "the axes reversed, as numpy's transpose(None)",
    ("cublas.gemm_args", "out_strides"): "a new C-contiguous output",
}

#: Callables whose messages name another operation, with the reason.
OP_ALIASES = {
    "cudnn.rnn_spec": ("RNN", "checks the options of an RNN, in the RNN's name"),
}

#: One-shots that check a problem's dtypes and shapes where they plan it, on a cache miss, in
#: the plan's name (their own front checks each operand's presence and kind, in theirs).
PLANNED_BY = {
    "cublas.gemm": "GemmPlan", "cublas.gemm_strided_batched": "GemmPlan",
    "cublas.tune_gemm": "GemmPlan", "cublas.matmul": "Matmul",
    "cudnn.conv_forward": "ConvForwardPlan", "cudnn.conv_backward_data": "ConvBackwardDataPlan",
    "cudnn.conv_backward_filter": "ConvBackwardFilterPlan",
    "cudnn.conv_bias_act": "ConvBiasActPlan", "cudnn.batch_norm_train": "BatchNormPlan",
    "cudnn.batch_norm_infer": "BatchNormPlan", "cudnn.batch_norm_backward": "BatchNormPlan",
    "cudnn.sdpa": "SdpaPlan", "cudnn.sdpa_backward": "SdpaBackwardPlan",
    "cudnn.sdpa_fp8": "SdpaFp8Plan", "cudnn.sdpa_fp8_backward": "SdpaFp8BackwardPlan",
}


# -- the walk -------------------------------------------------------------------------------------
@dataclasses.dataclass
class Target:
    """One callable as the walk calls it: by keyword for each parameter, positionally for a
    ``*args`` one."""

    name: str
    call: object
    required: tuple
    var: str | None
    ops: tuple
    positional: tuple = ()

    def __call__(self, values):
        kw = dict(values)
        args = ()
        if self.var in kw:
            v = kw.pop(self.var)
            # The parameters before a *args one go positionally too.
            args = tuple(kw.pop(p) for p in self.positional) + (
                v if isinstance(v, tuple) else (v,))
        return self.call(*args, **kw)


def _target(name, obj) -> Target:
    if "#" in name:
        cls_name, attr = name.split("#")
        make = obj[0]
        cls = type(make())
        if isinstance(vars(cls).get(attr), property):
            return Target(name, lambda **kw: setattr(make(), attr, kw[attr]), (attr,), None,
                          (f"{cls_name}.{attr}",))
        sig = inspect.signature(getattr(make(), attr))
        call = lambda *a, **kw: getattr(make(), attr)(*a, **kw)  # noqa: E731
        ops = (attr,)
    else:
        sig = inspect.signature(obj)
        call = obj
        ops = tuple({name.rsplit(".", 1)[-1], getattr(obj, "__name__", name)})
        if name in OP_ALIASES:
            ops += (OP_ALIASES[name][0],)
    required, var, positional = [], None, []
    for p in sig.parameters.values():
        if p.kind is p.VAR_POSITIONAL:
            var = p.name
        elif p.kind is not p.VAR_KEYWORD and p.default is p.empty:
            required.append(p.name)
        if var is None and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional.append(p.name)
    return Target(name, call, tuple(required), var, ops, tuple(positional))


def targets():
    return [_target(n, o) for n, o in callables() if n not in ALLOWED]


def run(target: Target, values):
    """``("returned" | "reached C" | "error", exception)`` of one call."""
    try:
        target(values)
    except ReachedC as exc:
        return "reached C", exc
    except Exception as exc:   # noqa: BLE001 - what escapes is what the walk judges
        return "error", exc
    return "returned", None


#: Parameter names that are English words: named only where a verb or punctuation follows
#: (``"a is float32"``, not the article of ``"a str"``).
WORDS = {"a", "do"}


def clear(target: Target, param: str, exc, ops=()) -> bool:
    """Whether ``exc`` answers bad input clearly: a TypeError or ValueError naming the call
    (or one of ``ops``) and the parameter."""
    if not isinstance(exc, (TypeError, ValueError)):
        return False
    msg = str(exc)
    after = r"(?= (is|has|must|needs|and|of|but)\b|[:,)'(]|$)" if param in WORDS else r"(?!\w)"
    return any(op in msg for op in target.ops + ops) and re.search(
        rf"(?<!\w){re.escape(param)}{after}", msg) is not None


def probes(value):
    """``(kind, bad value)`` for a parameter whose valid value is ``value``."""
    yield "None", None
    yield "object()", object()
    if not isinstance(value, str):
        yield "str", "bogus"
    if isinstance(value, DeviceArray):
        yield "dtype", fake(value.shape, np.bool_)
        yield "shape", fake(value.shape + (3,), value.dtype)


def walk(target: Target):
    """The walk of one callable: a list of ``(param, kind, verdict, exception)``, where the
    verdict is ``"clear"``, ``"accepted"`` (a wrong dtype or shape the call takes), or
    ``"internal"``; ``param`` is None for the valid call."""
    valid = VALID[target.name]
    how, exc = run(target, valid())
    out = [(None, "valid", "accepted" if how != "error" else "internal", exc)]
    # A *args parameter is probed where the valid values give it (reshape's shape).
    params = target.required + ((target.var,) if target.var in valid() else ())
    for param in params:
        if (target.name, param) in ALLOWED:
            continue
        for kind, bad in probes(valid()[param]):
            how, exc = run(target, {**valid(), param: bad})
            planned = (PLANNED_BY[target.name],) if kind in ("dtype", "shape") and \
                target.name in PLANNED_BY else ()
            if how == "error" and clear(target, param, exc, planned):
                verdict = "clear"
            elif how != "error" and (kind in ("dtype", "shape") or (
                    kind == "None" and (target.name, param) in NONE_IS_A_VALUE)):
                verdict = "accepted"
            else:
                verdict = "internal"
            out.append((param, kind, verdict, exc))
    return out


@pytest.fixture(autouse=True)
def _no_c_calls(monkeypatch):
    """Every library load raises ReachedC; no stand-in device outlives the test."""
    def refuse(self):
        raise ReachedC(f"load of {self.name}")

    monkeypatch.setattr(_ffi.LazyLibrary, "__call__", refuse)
    # The stand-in device's (architecture, cuDNN version), part of cuDNN's cache keys: known
    # here, as on a machine that ran one call, so the walk sees the checks behind the lookup.
    cudnn_base._env_of[DEV.ordinal] = (DEV.compute_capability, 90000)
    yield
    cudnn_base._env_of.clear()


TARGETS = targets()
#: What the walk calls with bad input: a callable with a required parameter, or a ``*args``
#: one the valid values give.
WALKED = [t for t in TARGETS if t.required or t.name in VALID]


def test_the_walk_covers_every_public_callable():
    names = {t.name for t in TARGETS}
    assert len(names) == len(TARGETS)
    missing = [t.name for t in TARGETS if t.required and t.name not in VALID]
    assert not missing, f"give the walk valid values for {missing}"
    assert {"cudnn.sdpa", "cublas.gemm", "kernels.add", "nccl.Communicator.init_all",
            "to_device", "PlanCache#maxsize", "DeviceArray#fill"} <= names
    # No entry of the lists outlives its callable (a renamed function must be named anew).
    every = {n for n, _ in callables()}
    listed = set(VALID) | set(OP_ALIASES) | set(PLANNED_BY) | {
        k if isinstance(k, str) else k[0] for k in (*ALLOWED, *NONE_IS_A_VALUE)}
    assert listed <= every, f"stale entries: {sorted(listed - every)}"


@pytest.mark.parametrize("target", WALKED, ids=lambda t: t.name)
def test_bad_input_is_answered_clearly(target):
    bad = [f"{target.name}({p}={kind}): {type(e).__name__}: {e}"
           for p, kind, verdict, e in walk(target) if verdict == "internal"]
    assert not bad, "\n".join(bad)


def test_operands_refuses_none_only_where_required():
    x = fake((4,))
    with pytest.raises(TypeError, match=r"^op: b is required \(got None\)$"):
        cl.operands("op", (x, "a"), (None, "b"), (None, "c"), required=2)
    a, b, c, dev = cl.operands("op", (x, "a"), (x, "b"), (None, "c"), required=2)
    assert (a, b, c, dev) == (x, x, None, DEV)
