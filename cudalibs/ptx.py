"""The kernel library shipped with cudalibs: CUDA C sources and the PTX built from them.

The files live in the top-level ``ptx/`` directory of the source tree, each ``name.cu`` beside
the ``name.ptx`` that ``python ptx/build.py`` makes from it with nvcc (see ptx/README.md for how
and why: PTX ISA 8.0 for ``sm_75``, which every driver from CUDA 12.0 on loads and
JIT-compiles for its own GPU; :data:`TARGETS` names the files built for a newer one).  A
wheel installs them as package data in ``cudalibs/_ptx`` (pyproject.toml maps the directory
there); a checkout, run in place or installed editable, reads them from ``ptx/`` itself.
:mod:`cudalibs.kernels` wraps the kernels; this module only says where the files are, which
kernels each one holds and what it is built for.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DIRECTORY", "SEARCHED", "ENTRIES", "TARGETS", "DEFAULT_TARGET", "target",
           "compute_capability", "ptx_path", "source_path", "read_ptx"]

_PACKAGE = Path(__file__).resolve().parent

#: Where the files are looked for, in order: an installed wheel's package data, then the
#: ``ptx/`` directory beside the package in a source checkout.
SEARCHED: tuple[Path, ...] = (_PACKAGE / "_ptx", _PACKAGE.parent / "ptx")


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
    "train": (
        _suffixed(_suffixed(("cross_entropy_forward", "cross_entropy_backward",
                             "accuracy_count", "embedding", "embedding_backward"),
                            ("f32", "f16", "bf16")), ("i32", "i64"))
        + _suffixed(("cross_entropy_reduce",), ("i32", "i64"))
        + _suffixed(("sgd", "global_avg_pool", "global_avg_pool_backward"),
                    ("f32", "f16", "bf16"))
        + _suffixed(_suffixed(("adamw",), ("f32", "f16", "bf16")), ("f16", "bf16"))
        + ("step_increment_i32",)
    ),
    "fp8": (
        _suffixed(("amax",), ("f32", "f16", "bf16"))
        + _suffixed(_suffixed(("quantize", "dequantize"), ("e4m3", "e5m2")),
                    ("f32", "f16", "bf16"))
        + ("delayed_scale_update_f32",)
    ),
    "grouped": (
        tuple(f"grouped_mm_{dt}_{layout}_{tile}_{out}" for dt in ("bf16", "f16")
              for layout in ("kn", "nk") for tile in ("m128", "m64") for out in (dt, "f32"))
        + ("grouped_ptrs",)
    ),
}

#: The architecture every file is built for unless :data:`TARGETS` names another.
DEFAULT_TARGET = "sm_75"
#: Files built for a newer architecture than :data:`DEFAULT_TARGET`, by stem: the grouped
#: GEMM uses cp.async and bfloat16 tensor-core products, which need sm_80.  The driver cannot
#: load such a file on an older GPU, so the kernel loader refuses it first, saying why.
TARGETS: dict[str, str] = {"grouped": "sm_80"}


def target(stem: str) -> str:
    """The ``.target`` of ``stem.ptx``: ``"sm_75"``, or what :data:`TARGETS` says."""
    return TARGETS.get(stem, DEFAULT_TARGET)


def compute_capability(stem: str) -> tuple[int, int]:
    """The oldest compute capability whose GPUs load ``stem.ptx``: ``(7, 5)``, ``(8, 0)``."""
    digits = target(stem).removeprefix("sm_")
    return int(digits[:-1]), int(digits[-1])


def _find() -> Path:
    # The first place that holds the library's files (a PTX and its source); else the
    # installed location, so a missing file is reported there with every place searched.
    for directory in SEARCHED:
        if all((directory / f"{stem}{ext}").is_file()
               for stem in ENTRIES for ext in (".ptx", ".cu")):
            return directory
    return SEARCHED[0]


#: The directory holding the ``.cu`` sources and ``.ptx`` files.
DIRECTORY: Path = _find()


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
    """Path of the CUDA C source ``stem.cu`` the PTX is built from.

    Raises
    ------
    KeyError
        ``stem`` is not one of :data:`ENTRIES`.
    """
    if stem not in ENTRIES:
        raise KeyError(f"no source {stem!r} in the kernel library; have {sorted(ENTRIES)}")
    return DIRECTORY / f"{stem}.cu"


def read_ptx(stem: str) -> bytes:
    """The bytes of the shipped ``stem.ptx``.

    Raises
    ------
    KeyError
        ``stem`` is not one of :data:`ENTRIES`.
    FileNotFoundError
        The file is in none of :data:`SEARCHED` (an install without its package data).
    """
    path = ptx_path(stem)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"the kernel library's {stem}.ptx is missing: looked in "
            f"{', '.join(str(d) for d in SEARCHED)} (reinstall cudalibs, or run from a "
            "checkout that has ptx/)") from None
