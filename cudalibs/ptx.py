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
           "arch_specific", "compute_capability", "ptx_path", "source_path", "read_ptx"]

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
        + tuple(f"grouped_wgrad_{dt}_{tile}_{out}" for dt in ("bf16", "f16")
                for tile in ("m128", "m64") for out in (dt, "f32"))
        + ("grouped_ptrs",)
    ),
    "moe": (
        ("topk_softmax_f32", "topk_softmax_f16", "topk_softmax_bf16")
        + _suffixed(_suffixed(("topk_softmax_backward",), ("f32", "f16", "bf16")),
                    ("i32", "i64"))
        + _suffixed(("moe_route_count", "moe_route_scatter"), ("i32", "i64"))
        + ("moe_route_scan", "moe_permute")
        + _suffixed(("moe_unpermute", "moe_unpermute_backward"),
                    ("f32_f32", "f16_f16", "f16_f32", "bf16_bf16", "bf16_f32"))
    ),
    "norm": (
        tuple(f"{op}_{d}_{t}_{kind}" for op in ("layer_norm", "rms_norm")
              for t in ("f32", "f16", "bf16")
              for d, kinds in (("fwd", ("v4", "any")), ("bwd", ("v2", "v4", "any")))
              for kind in kinds)
        + _suffixed(("norm_param_grad",), ("f32", "f16", "bf16"))
    ),
    "grouped90": tuple(
        f"grouped90_{dt}_{layout}_{tile}_{out}" for dt in ("bf16", "f16")
        for layout in ("kn", "nk")
        for tile in ("m128n256", "m128n256s", "m128n128", "m128n128s", "m64n256", "m64n256s")
        for out in (dt, "f32"))
        + tuple(f"grouped90_wgrad_{dt}_{tile}_{out}" for dt in ("bf16", "f16")
                for tile in ("m128n256", "m128n256s", "m128n128", "m128n128s", "m64n256",
                             "m64n256s")
                for out in (dt, "f32")),
}

#: The architecture every file is built for unless :data:`TARGETS` names another.
DEFAULT_TARGET = "sm_75"
#: Files built for a newer architecture than :data:`DEFAULT_TARGET`, by stem: the grouped
#: GEMM uses cp.async and bfloat16 tensor-core products, which need sm_80.  The driver cannot
#: load such a file on an older GPU, so the kernel loader refuses it first, saying why.  The
#: Hopper grouped GEMM (wgmma, TMA) needs ``sm_90a``: an architecture-specific target ("a"),
#: whose code runs on compute capability 9.0 only -- not on older GPUs, nor on newer ones.
TARGETS: dict[str, str] = {"grouped": "sm_80", "grouped90": "sm_90a"}


def target(stem: str) -> str:
    """The ``.target`` of ``stem.ptx``: ``"sm_75"``, or what :data:`TARGETS` says."""
    return TARGETS.get(stem, DEFAULT_TARGET)


def arch_specific(stem: str) -> bool:
    """Whether ``stem.ptx`` is built for an architecture-specific target (``sm_90a``): it
    runs on GPUs of exactly :func:`compute_capability`, none newer."""
    return target(stem).endswith("a")


def compute_capability(stem: str) -> tuple[int, int]:
    """The compute capability ``stem.ptx`` is built for: the oldest whose GPUs load it
    (``(7, 5)``, ``(8, 0)``), or the only one for an architecture-specific target
    (``(9, 0)`` for ``sm_90a``)."""
    digits = target(stem).removeprefix("sm_").removesuffix("a")
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
