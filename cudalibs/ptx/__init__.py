"""The kernel library shipped inside the wheel: CUDA C sources and the PTX built from them.

Each ``name.cu`` here sits beside the ``name.ptx`` that ``python -m cudalibs.ptx.build`` makes
from it with nvcc (see README.md for how and why: PTX ISA 8.0 for ``sm_75``, which every driver
from CUDA 12.0 on loads and JIT-compiles for its own GPU).  :mod:`cudalibs.kernels` wraps the
kernels; this module only says where the files are and which kernels each one holds.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DIRECTORY", "ENTRIES", "ptx_path", "source_path", "read_ptx"]

#: The directory holding the ``.cu`` sources and ``.ptx`` files.
DIRECTORY = Path(__file__).resolve().parent


def _suffixed(names, suffixes):
    return tuple(f"{n}_{s}" for n in names for s in suffixes)


#: Every ``.entry`` each PTX file must define, by file stem.
ENTRIES: dict[str, tuple[str, ...]] = {
    "elementwise": (
        _suffixed(("add", "axpy", "scale", "fill", "relu_backward"), ("f32", "f64", "f16", "bf16"))
        + _suffixed(("bias_relu", "bias_gelu", "batch_norm_relu", "channel_bias_act"),
                    ("f32", "f16", "bf16"))
    ),
    "matmul": ("matmul_naive_f32", "matmul_tiled_f32", "bmm_f32"),
    "softmax": _suffixed(("softmax", "log_softmax"), ("f32", "f16", "bf16")),
    "layout": ("transpose_b16", "transpose_b32", "transpose_b64"),
    "wmma": ("wmma_gemm_f16_f32", "wmma_gemm_f16_f16"),
}


def ptx_path(stem: str) -> Path:
    """Path of the shipped ``stem.ptx``.

    Raises
    ------
    KeyError
        ``stem`` is not one of :data:`ENTRIES`.
    """
    if stem not in ENTRIES:
        raise KeyError(f"no PTX file {stem!r} in the kernel library; have {sorted(ENTRIES)}")
    return DIRECTORY / f"{stem}.ptx"


def source_path(stem: str) -> Path:
    """Path of the CUDA C source ``stem.cu`` the PTX is built from."""
    if stem not in ENTRIES:
        raise KeyError(f"no source {stem!r} in the kernel library; have {sorted(ENTRIES)}")
    return DIRECTORY / f"{stem}.cu"


def read_ptx(stem: str) -> bytes:
    """The bytes of the shipped ``stem.ptx``."""
    return ptx_path(stem).read_bytes()
