"""The faults: plausible bugs of cudalibs, each with the GPU tests expected to catch it.

Every fault is injected at the place in cudalibs where the bug would live when that place is
Python: the function mapping a flag, the table of modes, the argument list of one library
call or kernel launch, the relaunch patcher.  Where the bug would live in a C library or in a
PTX kernel, the wrapper of the Python function around it produces the bug's effect, and the
description says so ("simulated").

``FAULTS`` is the catalog; :func:`get` finds one by name.  See :mod:`._inject` for how
patches find every binding of what they replace.
"""

from __future__ import annotations

import inspect
import threading
import weakref
from typing import Callable

import numpy as np

import cudalibs
from cudalibs import _ffi
from cudalibs.cublas._common import OP_N, OP_T
from cudalibs.cublas.gemm import GEMM_KEY
from cudalibs.cudnn import _lib as cudnn_lib
from cudalibs.cudnn._common import scalar as cudnn_scalar

from ._inject import Fault, Patch, c_call, caller_name, kernel_launch

__all__ = ["FAULTS", "get", "names"]

GPU = "tests/gpu"
GEMM = f"{GPU}/cublas/test_gemm.py"
LT = f"{GPU}/cublas/test_lt.py"
BLAS = f"{GPU}/cublas/test_blas.py"
RELAUNCH = f"{GPU}/cublas/test_relaunch.py"
CONV = f"{GPU}/cudnn/test_conv.py"
CUDNN_GRAPH = f"{GPU}/cudnn/test_graph.py"
OPS = f"{GPU}/cudnn/test_ops.py"
NORM = f"{GPU}/cudnn/test_layer_norm.py"
ATTENTION = f"{GPU}/cudnn/test_attention.py"
RNN = f"{GPU}/cudnn/test_rnn.py"
ARRAY = f"{GPU}/driver/test_array.py"
LAUNCH = f"{GPU}/driver/test_launch.py"
GRAPH = f"{GPU}/driver/test_graph.py"
STEP = f"{GPU}/driver/test_step.py"
KERNELS = f"{GPU}/kernels/test_kernels.py"
TRAIN = f"{GPU}/kernels/test_train.py"
NCCL = f"{GPU}/nccl/test_single.py"


# -- small builders of replacements -----------------------------------------------------------
def _set_arg(index: int, value_of: Callable):
    """A ``change(args)`` for :func:`c_call`: argument ``index`` becomes ``value_of(args)``."""
    def change(args):
        args[index] = value_of(args)
        return args
    return change


def _launch_arg(index: int, value_of: Callable):
    """A ``change(grid, args)`` for :func:`kernel_launch` on one kernel argument."""
    def change(grid, args):
        args = list(args)
        args[index] = value_of(args)
        return grid, tuple(args)
    return change


def _constant(value):
    """``make(original)`` that puts ``value`` in the original's place."""
    return lambda _original: value


def _keyword(name: str, value_of: Callable):
    """``make(original)`` of a function or method whose keyword ``name`` is replaced by
    ``value_of(given)`` (the given value, or None when not passed)."""
    def make(original):
        def patched(*args, **kwargs):
            kwargs[name] = value_of(kwargs.get(name))
            return original(*args, **kwargs)
        return patched
    return make


# -- cuBLAS -----------------------------------------------------------------------------------
def _beta_dropped(original):
    def scalar(self, value, what):
        return self.zero if what == "beta" else original(self, value, what)
    return scalar


def _copy_of_a_skipped(original):
    def gemm_args(*args, **kwargs):
        res = original(*args, **kwargs)
        return res._replace(copy_a=False) if res.copy_a is True else res
    return gemm_args


def _b_batch_stride_dropped(original):
    def split_batch(shape, strides, what, hint=""):
        batch, stride, mshape, mstrides = original(shape, strides, what, hint)
        if what == "b" or what.endswith(": b"):
            stride = 0
        return batch, stride, mshape, mstrides
    return split_batch


def _lt_scalars_dropped(original):
    def _run(self, algo, a_ptr, b_ptr, c_ptr, d_ptr, s, ptrs=(), alpha_p=None, beta_p=None):
        return original(self, algo, a_ptr, b_ptr, c_ptr, d_ptr, s, ptrs)
    return _run


def _gemv_beta_dropped(original):
    def scalar(value, scale, what):
        return original(0 if what == "gemv: beta" else value, scale, what)
    return scalar


def _gemm_key_without_b_strides(key):
    if isinstance(key, tuple) and key and key[0] is GEMM_KEY:
        i = GEMM_KEY.fields.index("b_strides") + 1      # the kind comes first
        key = key[:i] + (None,) + key[i + 1:]
    return key


def _lookup_normalised(original):
    def lookup(key):
        return original(_gemm_key_without_b_strides(key))
    return lookup


def _insert_normalised(original):
    def insert(key, plan, *args, **kwargs):
        return original(_gemm_key_without_b_strides(key), plan, *args, **kwargs)
    return insert


def _bias_pointer_offset(original):
    def _call_pointers(self, bias, aux, a_scale, b_scale, s):
        ptrs, aux_out, after = original(self, bias, aux, a_scale, b_scale, s)
        if self._epi.bias != "in":          # a *_bgrad epilogue writes its bias: left alone
            return ptrs, aux_out, after
        src = cudalibs.asarray(bias, stream=s)
        n = src.shape[0]
        half = (n + 1) // 2
        # What cuBLASLt would read from bias.address + half elements, without reading past
        # the bias (where the real bug reads whatever lies there): the tail, then zeros.
        shifted = cudalibs.zeros((n,), src.dtype, device=self._device, stream=s)
        if n > half:
            shifted[:n - half].copy_(src[half:], s)
        ptrs = [(name, shifted.address if name == "bias_pointer" else value)
                for name, value in ptrs]

        def done(before=after, keep=shifted):
            # Runs once the matmul is enqueued: until then the copy must not be freed.
            if before is not None:
                before()
        return ptrs, aux_out, done
    return _call_pointers


def _square_transpose_ignored(original):
    def op_ld(rows, cols, s0, s1, prefer_t=False):
        res = original(rows, cols, s0, s1, prefer_t)
        if res is not None and res[0] == OP_T and rows == cols > 1:
            return OP_N, res[1]
        return res
    return op_ld


CUBLAS = (
    Fault("cublas-gemm-beta-dropped", "cuBLAS",
          "gemm's scalars: a call's beta is taken as 0, so out is overwritten instead of "
          "accumulated (GemmPlan.scalar)",
          (f"{GEMM}::test_strided_batched_accumulates", f"{GEMM}::test_gemm_matches_numpy"),
          (Patch("cudalibs.cublas.gemm", "GemmPlan.scalar", _beta_dropped),)),
    Fault("cublas-gemm-strided-copy-skipped", "cuBLAS",
          "the row-major mapping drops the copy of an `a` without a unit stride: cuBLAS reads "
          "its memory with the copy's leading dimension (gemm_args)",
          (f"{GEMM}::test_copy_path_for_strided_operands", f"{GEMM}::test_gemm_matches_numpy"),
          (Patch("cudalibs.cublas._common", "gemm_args", _copy_of_a_skipped),)),
    Fault("cublas-gemm-b-batch-stride-dropped", "cuBLAS",
          "batch splitting gives b a batch stride of 0: every product of a batch uses b[0] "
          "(split_batch)",
          (f"{GEMM}::test_strided_batched",),
          (Patch("cudalibs.cublas._common", "split_batch", _b_batch_stride_dropped),)),
    Fault("cublas-lt-route-drops-scalars", "cuBLAS",
          "gemm's cuBLASLt route runs with the plan's alpha=1, beta=0 instead of the call's "
          "(Matmul._run ignores the host scalars it is given)",
          (f"{GEMM}::test_repeated_calls_compute_what_the_call_would",
           f"{GEMM}::test_gemm_matches_numpy"),
          (Patch("cudalibs.cublas.lt", "Matmul._run", _lt_scalars_dropped),)),
    Fault("cublas-lt-bias-pointer-offset", "cuBLAS",
          "the epilogue's bias pointer is taken half the bias in: output column j gets "
          "bias[j + ceil(N/2)], the last columns none (simulated in bounds at "
          "Matmul._call_pointers: the pointer passed is an aligned copy of that tail, "
          "zero-padded, where the bug would read past the bias)",
          (f"{LT}::test_matmul_epilogues", f"{LT}::test_autotuned_plan_equals_heuristic"),
          (Patch("cudalibs.cublas.lt", "Matmul._call_pointers", _bias_pointer_offset),)),
    Fault("cublas-gemm-batched-drops-last", "cuBLAS",
          "gemm_batched passes batchCount n - 1 to cublasGemmBatchedEx: the last product is "
          "never written",
          (f"{GEMM}::test_gemm_batched_lists",),
          (c_call("cudalibs.cublas.batched", "cublasGemmBatchedEx",
                  _set_arg(17, lambda a: max(a[17] - 1, 1))),)),
    Fault("cublas-gemv-beta-dropped", "cuBLAS",
          "gemv converts its beta as 0: y is overwritten instead of accumulated "
          "(blas._scalar at the gemv call)",
          (f"{BLAS}::test_gemv",),
          (Patch("cudalibs.cublas.blas", "_scalar", _gemv_beta_dropped, everywhere=False),)),
    Fault("cublas-dotc-not-conjugated", "cuBLAS",
          "dot(..., conjugate=True) calls cublasDotEx: x is not conjugated",
          (f"{BLAS}::test_level1",),
          (Patch("cudalibs.cublas.blas", "dot", _keyword("conjugate", lambda given: False)),)),
    Fault("cublas-gemm-key-ignores-b-strides", "cuBLAS",
          "gemm's plan-cache key leaves out b's strides: a transposed or padded b of a cached "
          "shape runs the plan (leading dimension, transpose flag) of another layout",
          (f"{GPU}/cublas/test_bite_plan_keys.py", f"{GEMM}::test_gemm_matches_numpy"),
          (Patch("cudalibs.cublas.gemm", "_lookup", _lookup_normalised, everywhere=False),
           Patch("cudalibs.runtime.front", "insert", _insert_normalised, everywhere=False))),
    Fault("cublas-square-transpose-ignored", "cuBLAS",
          "a transposed view of a square operand is passed with CUBLAS_OP_N, as if "
          "C-ordered (its leading dimension cannot tell them apart): a.T @ b is computed "
          "for a square a.T, a @ b.T for a square b.T, in bounds (op_ld, as gemm_args and "
          "the cuBLASLt plans call it)",
          (f"{GPU}/cublas/test_bite_transpose.py", f"{GEMM}::test_gemm_matches_numpy"),
          (Patch("cudalibs.cublas._common", "op_ld", _square_transpose_ignored),)),
)


# -- cuDNN ------------------------------------------------------------------------------------
def _add_tensor_beta_zero(args):
    # cudnnAddTensor(handle, alpha, bias desc, bias, beta, y desc, y): the scalars are
    # addresses of host values, kept per (precision, value)
    double = args[4] == cudnn_scalar(1.0, True)
    args[4] = cudnn_scalar(0.0, double)
    return args


def _eps_default(original):
    def check_eps(eps, op):
        return original(1e-5, op)
    return check_eps


def _swish_beta_one(original):
    def act_key(mode, coef, swish_beta, propagate_nan, op):
        return original(mode, coef, 1.0, propagate_nan, op)
    return act_key


def _lstm_gates_swapped(original):
    def load(self, values, *args, **kwargs):
        names = list(self)
        if "weight_hh_l0" in names:
            hidden = self["weight_hr_l0" if "weight_hr_l0" in names else "weight_hh_l0"].shape[1]
            if self["weight_hh_l0"].shape[0] == 4 * hidden:
                values = {k: _swap_first_gates(k, v, hidden) for k, v in values.items()}
        return original(self, values, *args, **kwargs)
    return load


def _swap_first_gates(name, value, hidden):
    """PyTorch's LSTM blocks ``i, f, g, o`` of a host parameter loaded as ``f, i, g, o``."""
    if not isinstance(value, np.ndarray) or not name.startswith(("weight_ih", "weight_hh",
                                                                 "bias_ih", "bias_hh")):
        return value
    out = value.copy()
    out[:hidden], out[hidden:2 * hidden] = value[hidden:2 * hidden], value[:hidden]
    return out


#: The by-value int32 scalar the shifted causal mask adds to the row index.  A graph's tensors,
#: by-value ones included, are bound through their slots (``UIDS``, ``SLOTS``): the shift needs
#: a slot of its own.
CAUSAL_SHIFT = "causal_shift"


def _causal_right_bound_one(original):
    def pw(self, mode, x, b=None, *args, **kwargs):
        if mode == "cmp_ge" and caller_name() == "causal":
            # row + 1 >= col, built the way cuDNN's frontend builds a diagonal band with a
            # right bound of 1 (an int32 by-value shift added to the row index before the
            # comparison), so that the attention engines take the graph.
            i32 = np.dtype(np.int32)
            shift = self.value(CAUSAL_SHIFT, 1, i32)
            x = original(self, "add", x, shift, dims=kwargs["dims"], compute=i32,
                         out_dtype=i32)
        return original(self, mode, x, b, *args, **kwargs)
    return pw


def _causal_compares_rows_and_columns(_pw) -> str | None:
    from cudalibs.cudnn.attention import lower

    source = inspect.getsource(lower._Builder.causal)
    if '"cmp_ge"' not in source or "self.pw(" not in source:
        return "_Builder.causal no longer builds its mask with self.pw('cmp_ge', row, col)"
    return None


def _with_causal_shift_uid(uids):
    return {**uids, CAUSAL_SHIFT: max(uids.values()) + 1}


def _with_causal_shift_slot(slots):
    # the new unique id is the largest: its slot comes last in unique-id order
    return tuple(slots) + (CAUSAL_SHIFT,)


def _by_value_scalar(slot, value_of):
    """``make`` of ``_Builder.value``: the by-value scalar ``slot`` holds ``value_of(spec,
    value)`` instead of ``value``."""
    def make(original):
        def value(self, name, v, *args, **kwargs):
            if name == slot:
                v = value_of(self.spec, v)
            return original(self, name, v, *args, **kwargs)
        return value
    return make


def _offset_ignored(original):
    def seed_ints(op, seed):
        s, _ = original(op, seed)
        return s, 0
    return seed_ints


CUDNN = (
    Fault("cudnn-conv-bias-beta-zero", "cuDNN",
          "conv_forward's bias pass calls cudnnAddTensor with beta 0: out holds the bias alone, "
          "the convolution is discarded",
          (f"{CONV}::test_conv_forward[legacy]",),
          (c_call("cudalibs.cudnn.conv.plans", "cudnnAddTensor", _add_tensor_beta_zero),)),
    Fault("cudnn-conv-wgrad-accumulates", "cuDNN",
          "the backward-filter plan is made with beta=1: the filter gradient is added to what "
          "out held instead of overwriting it",
          (f"{CONV}::test_conv_backward_filter[legacy]",),
          (Patch("cudalibs.cudnn.conv.plans", "ConvBackwardFilterPlan.__init__",
                 _keyword("beta", lambda given: 1.0 if not given else given)),)),
    Fault("cudnn-conv-bias-act-alpha2-ignored", "cuDNN",
          "the fused conv + bias + activation takes the residual's scale alpha2 as 1",
          (f"{CUDNN_GRAPH}::test_fused_equals_composition_and_reference",),
          (Patch("cudalibs.cudnn.conv.fused", "ConvBiasActPlan.__init__",
                 _keyword("alpha2", lambda given: 1.0)),)),
    Fault("cudnn-batchnorm-momentum-inverted", "cuDNN",
          "batch_norm_train passes 1 - momentum as cuDNN's exponentialAverageFactor: the "
          "running statistics move the wrong amount",
          (f"{OPS}::test_batch_norm_train_and_backward",),
          (c_call("cudalibs.cudnn.norm.batch", "cudnnBatchNormalizationForwardTrainingEx",
                  _set_arg(14, lambda a: 1.0 - a[14])),
           c_call("cudalibs.cudnn.norm.batch", "cudnnBatchNormalizationForwardTraining",
                  _set_arg(11, lambda a: 1.0 - a[11])))),
    Fault("cudnn-batchnorm-infer-eps-default", "cuDNN",
          "batch_norm_infer ignores its eps and passes the default 1e-5 to cuDNN",
          (f"{OPS}::test_batch_norm_infer",),
          (c_call("cudalibs.cudnn.norm.batch", "cudnnBatchNormalizationForwardInference",
                  _set_arg(13, lambda a: 1e-5)),)),
    Fault("cudnn-layernorm-eps-default", "cuDNN",
          "layer/RMS norm plans ignore the eps asked for and bake the default 1e-5 in "
          "(check_eps as layer.py calls it)",
          (f"{NORM}::test_layer_norm_matches_reference",
           f"{NORM}::test_rms_norm_matches_reference"),
          (Patch("cudalibs.cudnn.norm.layer", "check_eps", _eps_default, everywhere=False),)),
    Fault("cudnn-pooling-avg-exclude-counts-padding", "cuDNN",
          "the pooling mode table maps 'avg_exclude_padding' to "
          "CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING",
          (f"{OPS}::test_pooling", f"{OPS}::test_against_torch"),
          (Patch("cudalibs.cudnn.descriptors", "POOLING_MODES[avg_exclude_padding]",
                 _constant(cudnn_lib.CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING)),)),
    Fault("cudnn-activation-swish-beta-ignored", "cuDNN",
          "activation descriptors are keyed and built with swish_beta 1 whatever is asked",
          (f"{GPU}/cudnn/test_bite_activation_coefficients.py", f"{OPS}::test_activation"),
          (Patch("cudalibs.cudnn.descriptors", "_act_key", _swish_beta_one),)),
    Fault("cudnn-softmax-log-runs-accurate", "cuDNN",
          "the softmax algorithm table maps 'log' to CUDNN_SOFTMAX_ACCURATE: softmax_forward "
          "returns probabilities where log-probabilities were asked",
          (f"{OPS}::test_softmax",),
          (Patch("cudalibs.cudnn.activation", "SOFTMAX_ALGORITHMS[log]",
                 _constant(cudnn_lib.CUDNN_SOFTMAX_ACCURATE)),)),
    Fault("cudnn-sdpa-causal-mask-shifted", "cuDNN",
          "the causal mask keeps key j for query i where j <= i + 1 (a diagonal band right "
          "bound of 1 where 0 is meant): each query also sees the next key (_Builder.causal's "
          "row >= col, as row + 1 >= col)",
          (f"{GPU}/cudnn/test_bite_causal.py", f"{ATTENTION}::test_forward_against_reference"),
          (Patch("cudalibs.cudnn.attention.lower", "_Builder.pw", _causal_right_bound_one,
                 check=_causal_compares_rows_and_columns),
           Patch("cudalibs.cudnn.attention.lower", "UIDS", _with_causal_shift_uid),
           Patch("cudalibs.cudnn.attention.lower", "SLOTS", _with_causal_shift_slot))),
    Fault("cudnn-sdpa-scale-squared", "cuDNN",
          "the composite attention graphs bind scale**2 as the score scale (1/d where 1/sqrt(d) "
          "is meant)",
          (f"{ATTENTION}::test_forward_against_reference",),
          (Patch("cudalibs.cudnn.attention.lower", "_Builder.value",
                 _by_value_scalar("scale", lambda spec, v: v * v)),)),
    Fault("cudnn-sdpa-dropout-offset-ignored", "cuDNN",
          "by-value dropout seeds lose their offset (0 is bound): calls that differ only in "
          "the offset draw one and the same mask",
          (f"{GPU}/cudnn/test_bite_dropout_offsets.py",
           f"{ATTENTION}::test_dropout_forward_and_backward_replay_one_mask"),
          (Patch("cudalibs.cudnn.attention.plan", "seed_ints", _offset_ignored),)),
    Fault("cudnn-sdpa-backward-drops-dropout-scale", "cuDNN",
          "the composite attention backward binds 1 for the dropout rescale 1/(1-p)",
          (f"{ATTENTION}::test_dropout_forward_and_backward_replay_one_mask",),
          (Patch("cudalibs.cudnn.attention.lower", "_Builder.value",
                 _by_value_scalar("drop_scale",
                                  lambda spec, v: 1.0 if spec.backward else v)),)),
    Fault("cudnn-rnn-lstm-gates-swapped", "cuDNN",
          "loading PyTorch's LSTM parameters swaps the input and forget gate blocks "
          "(RNNWeights.load)",
          (f"{RNN}::test_forward_and_backward_match_reference",),
          (Patch("cudalibs.cudnn.rnn.weights", "RNNWeights.load", _lstm_gates_swapped),)),
    Fault("cudnn-rnn-wgrad-overwrites", "cuDNN",
          "RNN.backward_weights zeroes the gradient space even when asked to accumulate",
          (f"{RNN}::test_forward_and_backward_match_reference",),
          (Patch("cudalibs.cudnn.rnn.plan", "RNN.backward_weights",
                 _keyword("accumulate", lambda given: False)),)),
)


# -- driver and runtime -----------------------------------------------------------------------
def _grid_one_short(original):
    def as_dim3(v, what):
        dims = original(v, what)
        if what == "grid" and dims[0] > 1:
            dims = (dims[0] - 1,) + tuple(dims[1:])
        return dims
    return as_dim3


def _height_one_short(original):
    def plan(shape, dst_strides, src_strides, itemsize):
        p = original(shape, dst_strides, src_strides, itemsize)
        if p is None or p[1] < 2:
            return p
        width, height, dpitch, spitch, outer = p
        return width, height - 1, dpitch, spitch, outer
    return plan


def _last_doubling_skipped(args):
    dst, src, nbytes = args[0], args[1], args[2]
    # fill doubles a seeded block: each copy goes `done` bytes past the start; the last one,
    # shorter than that, is the partial tail the bug leaves unwritten.
    return None if nbytes < dst - src else args


def _no_update(self, graph) -> None:
    """Leaves the executable graph as it was."""


def _stale_output(original):
    first = threading.local()       # per thread, as each has an executable graph of its own

    def launch(self, addresses, stream_h):
        seen = getattr(first, "outputs", None)
        if seen is None:
            seen = first.outputs = weakref.WeakKeyDictionary()
        out = seen.setdefault(self, addresses[0])
        return original(self, (out,) + tuple(addresses[1:]), stream_h)
    return launch


def _host_inputs_not_copied(original):
    def call(self, *inputs):
        inputs = tuple(buf if isinstance(x, np.ndarray) else x
                       for x, buf in zip(inputs, self.inputs)) + inputs[len(self.inputs):]
        return original(self, *inputs)
    return call


DRIVER = (
    Fault("driver-launch-grid-one-short", "driver",
          "launch geometry: a grid's x extent comes out one block short (_as_dim3)",
          (f"{LAUNCH}::test_saxpy_against_numpy",),
          (Patch("cudalibs.driver.launch", "_as_dim3", _grid_one_short),)),
    Fault("driver-copy-last-row-dropped", "driver",
          "the strided-copy planner folds one row too few into a pitched copy's height: the "
          "last row of every block of a view copy is not copied (_copy.plan)",
          (f"{ARRAY}::test_strided_views_match_numpy", f"{ARRAY}::test_copy_into_strided_views"),
          (Patch("cudalibs.driver._copy", "plan", _height_one_short),)),
    Fault("driver-fill-tail-unwritten", "driver",
          "DeviceArray.fill of 8- and 16-byte patterns stops doubling one copy short: the "
          "last partial block keeps its old contents",
          (f"{ARRAY}::test_fill_every_dtype",),
          (c_call("cudalibs.driver.array", "cuMemcpyDtoDAsync_v2", _last_doubling_skipped,
                  caller="fill"),)),
    Fault("driver-graph-update-dropped", "driver",
          "GraphExec.update returns without updating: the executable graph keeps the "
          "parameters it was instantiated with",
          (f"{GRAPH}::test_update_with_new_arguments",),
          (Patch("cudalibs.driver.graph", "GraphExec.update", _constant(_no_update)),)),
    Fault("runtime-relaunch-stale-output", "runtime",
          "a recorded relaunch keeps the output address of its first launch: later calls "
          "write the first call's out (simulated at KernelRelaunch.launch)",
          (f"{RELAUNCH}::test_relaunch_engages_for_a_small_gemm",
           f"{RELAUNCH}::test_relaunched_matmul_is_the_library_call"),
          (Patch("cudalibs.runtime.relaunch", "KernelRelaunch.launch", _stale_output),)),
    Fault("runtime-step-host-input-not-copied", "runtime",
          "StepGraph.__call__ skips the host-to-device copy of numpy inputs: the replay "
          "reads the previous batch",
          (f"{STEP}::test_replayed_steps_equal_eager_steps_bitwise",
           f"{STEP}::test_parameters_follow_the_eager_sequence"),
          (Patch("cudalibs.runtime.step", "StepGraph.__call__", _host_inputs_not_copied),)),
)


# -- the kernel library -----------------------------------------------------------------------
def _unshifted(op: str, x: np.ndarray) -> np.ndarray:
    """(log-)softmax in float32 without subtracting the row's maximum first."""
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        xf = x.astype(np.float32)
        e = np.exp(xf)
        total = e.sum(axis=-1, keepdims=True, dtype=np.float32)
        return xf - np.log(total) if op == "log_softmax" else e / total


def _softmax_unshifted(original):
    def _softmax(op, x, out, stream):
        arr = cudalibs.asarray(x)
        if _ffi.capture_open() or not arr.size:
            return original(op, x, out, stream)
        host = arr.get(stream=stream)           # before the kernel: out may be x itself
        res = original(op, x, out, stream)
        res.copy_(_unshifted(op, host).astype(res.dtype), stream=stream)
        return res
    return _softmax


def _fill_skipped_in(function: str):
    def make(original):
        def fill(self, *args, **kwargs):
            if caller_name() == function:
                return self
            return original(self, *args, **kwargs)
        return fill
    return make


def _no_overlap_check(op, named) -> None:
    """Accepts any operands."""


def _grid_x_short(grid, args):
    return ((grid[0] - 1 if grid[0] > 1 else grid[0]),) + grid[1:], args


KERNELS_FAULTS = (
    Fault("kernels-add-last-element-unwritten", "kernels",
          "add's launch passes n - 1 as the element count: the last element of out is never "
          "written",
          (f"{KERNELS}::test_add_axpy_scale",),
          (kernel_launch(r"add_(f32|f64|f16|bf16)", _launch_arg(3, lambda a: max(a[3] - 1, 1))),)),
    Fault("kernels-softmax-no-max-subtraction", "kernels",
          "softmax / log_softmax without subtracting the row maximum (exp overflows to inf "
          "for large inputs); simulated: the wrapper writes the float32 result of that "
          "formula",
          (f"{GPU}/kernels/test_bite_softmax_range.py", f"{KERNELS}::test_softmax"),
          (Patch("cudalibs.kernels.softmax", "_softmax", _softmax_unshifted),)),
    Fault("kernels-wmma-last-column-tile", "kernels",
          "wmma_gemm's grid has one 64-column tile too few: the last columns of out are "
          "never written",
          (f"{KERNELS}::test_wmma_gemm",),
          (kernel_launch(r"wmma_gemm_f16_(f32|f16)", _grid_x_short),)),
    Fault("kernels-transpose-batch-one", "kernels",
          "the batched transpose passes the kernel a batch of 1: nchw_to_nhwc and "
          "nhwc_to_nchw write image 0 only (the kernel's batch argument bounds its loop over "
          "the images; the grid's z extent alone does not, the loop covers what it leaves)",
          (f"{GPU}/kernels/test_bite_layout.py", f"{KERNELS}::test_nchw_nhwc_round_trip"),
          (kernel_launch(r"transpose_b(16|32|64)", _launch_arg(2, lambda a: 1)),)),
    Fault("kernels-sgd-weight-decay-dropped", "kernels",
          "sgd's launch passes weight_decay 0",
          (f"{TRAIN}::test_sgd",),
          (kernel_launch(r"sgd_(f32|f16|bf16)", _launch_arg(7, lambda a: 0.0)),)),
    Fault("kernels-adamw-no-bias-correction", "kernels",
          "adamw without bias correction: a host step is passed as 2**31 - 1, where "
          "1 - beta**t is 1 (device step counters are left alone)",
          (f"{TRAIN}::test_adamw",),
          (kernel_launch(r"adamw_\w+", _launch_arg(
              12, lambda a: 2**31 - 1 if a[13] == 0 else a[12])),)),
    Fault("kernels-cross-entropy-counts-ignored-rows", "kernels",
          "the cross-entropy reduction is launched without the ignore flag: ignored rows are "
          "counted in the mean",
          (f"{TRAIN}::test_cross_entropy",),
          (kernel_launch(r"cross_entropy_reduce_i(32|64)", _launch_arg(6, lambda a: 0)),)),
    Fault("kernels-embedding-grad-accumulates", "kernels",
          "embedding_backward skips zeroing out before the scatter-add: the gradient is "
          "accumulated into whatever out held instead of overwriting it",
          (f"{TRAIN}::test_embedding",),
          (Patch("cudalibs.driver.array", "DeviceArray.fill",
                 _fill_skipped_in("embedding_backward")),)),
    Fault("kernels-update-overlap-check-skipped", "kernels",
          "a missing validation: the optimizers no longer refuse in-place operands that "
          "overlap (train._disjoint)",
          (f"{TRAIN}::test_bad_arguments_raise_before_any_launch",),
          (Patch("cudalibs.kernels.train", "_disjoint", _constant(_no_overlap_check)),)),
)


# -- NCCL -------------------------------------------------------------------------------------
NCCL_FAULTS = (
    Fault("nccl-allreduce-count-short", "NCCL",
          "all_reduce passes count n - 1 to ncclAllReduce: the last element is not reduced "
          "into out",
          (f"{NCCL}::test_all_reduce_one_rank",),
          (c_call("cudalibs.nccl.collectives", "ncclAllReduce",
                  _set_arg(2, lambda a: a[2] - 1 if a[2] > 1 else a[2])),)),
    Fault("nccl-reduce-into-send", "NCCL",
          "reduce passes the send buffer as recvbuff: the result lands in send, out keeps "
          "its contents",
          (f"{NCCL}::test_other_collectives_one_rank",),
          (c_call("cudalibs.nccl.collectives", "ncclReduce", _set_arg(1, lambda a: a[0])),)),
)


#: Every fault, by library.
FAULTS: tuple = CUBLAS + CUDNN + DRIVER + KERNELS_FAULTS + NCCL_FAULTS


def names() -> list[str]:
    """The names of :data:`FAULTS`, in catalog order."""
    return [f.name for f in FAULTS]


def get(name: str) -> Fault:
    """The fault named ``name``.

    Raises
    ------
    KeyError
        No fault has that name (the message lists them).
    """
    for f in FAULTS:
        if f.name == name:
            return f
    raise KeyError(f"no fault named {name!r}; the faults are: {', '.join(names())}")
