"""Every public name of cudalibs is used by the GPU tier, or says why it needs no GPU test.

- The public names: the ``__all__`` of :mod:`cudalibs` and of each public package its
  ``dir()`` lists (driver, runtime, cublas, cudnn, cufft, nccl, kernels, testing), and of
  every cudalibs module one of those names (``cudalibs.dtypes``, ``cudalibs.graph``,
  ``cudnn.backend``, ``cudnn.attention``, ``testing.ref``).
- Used by the GPU tier: some file under tests/gpu refers to the name in its code, through its
  imports -- ``cudnn.set_workspace_limit(...)`` after ``from cudalibs import cudnn``, or
  ``set_workspace_limit`` after ``from cudalibs.cudnn import set_workspace_limit``, or an
  attribute of a module bound by ``importlib.import_module("...")``.  The files are read with
  ``ast``: a comment, a string or an import that nothing uses is not a use.  One object under
  several public names (a re-export: ``cudalibs.Device`` is ``cudalibs.driver.Device``) is
  used under all of them; numbers and strings, whose identity means nothing, only by name.
- Otherwise :data:`NO_GPU_TEST` gives the reason, and each reason names the test file(s) where
  the name is tested (or raised and checked): each such file must exist and name it in code.
  An entry whose name is no longer public, or is used by the GPU tier after all, fails too.
- Deprecated names (made by ``cudalibs._ffi.renamed``, docstring ``"Deprecated: ..."``) need
  neither: tests/cpu/test_deprecations.py forbids both tiers to call them, and each is the
  very function it names as its replacement.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import textwrap
import tokenize
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU_TIER = ROOT / "tests" / "gpu"

_VERSION = "host-side: the loaded library's version, read without a device; "
_BUILDER = ("host-side builder of the graph API: its descriptors are finalized without a "
            "device in tests/cpu/test_attention.py, and cuDNN runs the operations on a GPU in "
            "the composite attention graphs of cudnn.sdpa")
_TABLE = "host-side name table of the graph API, checked in "
_TESTING = "host-side helper for test code (numpy arrays, hypothesis strategies); "
_REFERENCE = "host-side float64 numpy reference (what the GPU tests compare with); "

#: ``{public name (without "cudalibs."): why the GPU tier does not use it}``.
NO_GPU_TEST: dict[str, str] = {
    "FunctionNotFoundError": "exception class: raised when a function newer than the loaded "
                             "library is called, which cannot happen with the GPU machine's "
                             "libraries; raised, read and pickled in tests/cpu/test_core.py",
    "StatusError": "exception class: the base of the per-library status errors, which the GPU "
                   "tier catches by their own classes; its fields are checked in "
                   "tests/cpu/test_libraries.py",
    "NcclError": "exception class: NCCL failures are not provoked on a GPU (a failed collective "
                 "can leave its communicator unusable); raised and read in "
                 "tests/cpu/test_nccl.py and tests/cpu/test_core.py",
    "cublas.version": _VERSION + "tests/cpu/test_libraries.py",
    "cublas.version_int": _VERSION + "tests/cpu/test_libraries.py",
    "cublas.lt_version": _VERSION + "tests/cpu/test_libraries.py",
    "cublas.lt_version_int": _VERSION + "tests/cpu/test_libraries.py",
    "cublas.gemm_args": "host-side: the row-major to column-major mapping, arithmetic on shapes "
                        "and strides, checked against numpy products in "
                        "tests/cpu/test_cublas.py; every GEMM of the GPU tier goes through it",
    "cublas.GemmArgs": "host-side record: the named tuple gemm_args returns, checked with it in "
                       "tests/cpu/test_cublas.py",
    "cudnn.version": _VERSION + "tests/cpu/test_libraries.py",
    "cudnn.version_int": _VERSION + "tests/cpu/test_libraries.py",
    "cudnn.last_error_string": "host-side: cuDNN's account of its last failure, which every "
                               "CudnnError carries as its detail; tests/cpu/test_libraries.py",
    "cudnn.check_versions": "host-side: compares the versions of cuDNN's sub-libraries before "
                            "any handle is made; tests/cpu/test_cudnn.py",
    "cudnn.conv_output_shape": "host-side formula, no library call: checked against the "
                               "reference's in tests/cpu/test_cudnn.py; the GPU convolutions "
                               "size their outputs with it",
    "cudnn.backend.make": "host-side: the generic descriptor builder behind every builder of "
                          "the graph API, whose graphs the GPU tier runs; finalized without a "
                          "device in tests/cpu/test_cudnn_graph.py",
    "cudnn.backend.pointwise_backward_operation": _BUILDER,
    "cudnn.backend.reduction": _BUILDER,
    "cudnn.backend.reduction_operation": _BUILDER,
    "cudnn.backend.reshape_operation": _BUILDER,
    "cudnn.backend.rng": _BUILDER,
    "cudnn.backend.rng_operation": _BUILDER,
    "cudnn.backend.TERNARY_MODES": _TABLE + "tests/cpu/test_attention.py",
    "cudnn.backend.BACKWARD_MODES": _TABLE + "tests/cpu/test_attention.py",
    "cudnn.backend.REDUCTION_OPS": _TABLE + "tests/cpu/test_attention.py",
    "cudnn.backend.RNG_DISTRIBUTIONS": _TABLE + "tests/cpu/test_cudnn_graph.py",
    "cudnn.backend.attribute_name": "host-side: the vendor name of an attribute, for messages; "
                                    "tests/cpu/test_cudnn_graph.py",
    "cudnn.backend.descriptor_type_name": "host-side: the vendor name of a descriptor type, for "
                                          "messages; tests/cpu/test_cudnn_graph.py",
    "cudnn.backend.why": "host-side: the short account of a failed graph route that a plan "
                         "keeps as its fallback reason; tests/cpu/test_cudnn_graph.py",
    "cufft.version": _VERSION + "tests/cpu/test_cufft.py",
    "cufft.version_int": _VERSION + "tests/cpu/test_cufft.py",
    "cusparse.version_int": _VERSION + "tests/cpu/test_cusparse.py",
    "cusparse.error_name": "host-side: cuSPARSE's name of a status, read without a device; "
                           "tests/cpu/test_cusparse.py",
    "cusparse.error_string": "host-side: cuSPARSE's text of a status (what every "
                             "CusparseError carries), read without a device; "
                             "tests/cpu/test_cusparse.py",
    "dtypes.DType": "host-side record: one row of the dtype table; tests/cpu/test_core.py",
    "dtypes.CUDNN": "host-side enum table of the dtype table's rows; tests/cpu/test_core.py",
    "dtypes.NCCL": "host-side enum table of the dtype table's rows; tests/cpu/test_core.py",
    "dtypes.DLPACK": "host-side enum table of the dtype table's rows; tests/cpu/test_core.py",
    "dtypes.from_dlpack_code": "host-side lookup in the dtype table (the DLPack imports of the "
                               "GPU tier go through it); tests/cpu/test_core.py",
    "dtypes.from_typestr": "host-side lookup in the dtype table (the array-interface imports "
                           "of the GPU tier go through it); tests/cpu/test_core.py",
    "nccl.version_int": _VERSION + "tests/cpu/test_libraries.py",
    "nccl.unique_id_bytes": "host-side: a new ncclGetUniqueId, made without a device (the GPU "
                            "tier's communicators make theirs through UniqueId); "
                            "tests/cpu/test_libraries.py",
    "testing.with_layout": _TESTING + "tests/cpu/test_testing.py",
    "testing.dtypes": _TESTING + "tests/cpu/test_testing.py",
    "testing.layouts": _TESTING + "tests/cpu/test_testing.py",
    "testing.LAYOUTS": _TESTING + "tests/cpu/test_testing.py",
    "testing.ref.gelu": _REFERENCE + "tests/cpu/test_ref_nn.py",
    "testing.ref.transpose": _REFERENCE + "tests/cpu/test_ref_nn.py",
    "testing.ref.nhwc_to_nchw": _REFERENCE + "tests/cpu/test_ref_nn.py",
    "testing.ref.channel_axis": _REFERENCE + "tests/cpu/test_ref_nn.py",
}


# -- the public surface -------------------------------------------------------------------------
def packages() -> list[str]:
    """:mod:`cudalibs` and every public package it lists (``dir()``: the driver, the runtime,
    the libraries, testing -- whatever a release adds): what the public surface starts from."""
    import cudalibs

    found = ["cudalibs"]
    for name in dir(cudalibs):
        obj = getattr(cudalibs, name) if not name.startswith("_") else None
        if isinstance(obj, types.ModuleType) and hasattr(obj, "__path__") and \
                obj.__name__ == f"cudalibs.{name}":
            found.append(obj.__name__)
    return found


def public_names() -> dict[str, object]:
    """``{name: object}`` of every public name, ``name`` the dotted path from ``cudalibs``
    without the package's own name (``"cudnn.set_workspace_limit"``, ``"Device"``)."""
    found: dict[str, object] = {}
    todo = [(importlib.import_module(name), name) for name in packages()]
    seen: set[int] = set()
    while todo:
        mod, path = todo.pop(0)
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        for attr in mod.__all__:
            obj = getattr(mod, attr)
            found[f"{path}.{attr}".removeprefix("cudalibs.")] = obj
            if isinstance(obj, types.ModuleType) and obj.__name__.startswith("cudalibs."):
                todo.append((obj, f"{path}.{attr}"))
    return found


def deprecated(obj) -> bool:
    """Whether ``obj`` is a deprecated name (``cudalibs._ffi.renamed``)."""
    return callable(obj) and (getattr(obj, "__doc__", None) or "").startswith("Deprecated:")


# -- what a test file uses ------------------------------------------------------------------------
_IMPORTERS = ("importlib.import_module", "import_module", "pytest.importorskip")


def _dotted(node) -> list[str] | None:
    """``["a", "b", "c"]`` of a Name/Attribute chain ``a.b.c``, else None."""
    parts = ast.unparse(node).split(".")
    return parts if all(p.isidentifier() for p in parts) else None


def _module_named(value) -> str | None:
    """The module ``importlib.import_module("x")`` / ``pytest.importorskip("x")`` names."""
    if not isinstance(value, ast.Call) or not value.args:
        return None
    func = _dotted(value.func)
    arg = value.args[0]
    if func and ".".join(func) in _IMPORTERS and isinstance(arg, ast.Constant) and \
            isinstance(arg.value, str):
        return arg.value
    return None


def _aliases(tree: ast.AST) -> dict[str, set[str]]:
    """``{local name: {dotted paths it may stand for}}`` from the imports of a file (in any
    scope), the modules bound by ``import_module`` calls and plain assignments of those."""
    out: dict[str, set[str]] = {}
    assigns = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out.setdefault(a.asname, set()).add(a.name)
                else:
                    top = a.name.split(".")[0]
                    out.setdefault(top, set()).add(top)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    out.setdefault(a.asname or a.name, set()).add(f"{node.module}.{a.name}")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            module = _module_named(node.value)
            if module is not None:
                out.setdefault(node.targets[0].id, set()).add(module)
            else:
                assigns.append((node.targets[0].id, _dotted(node.value)))
    # ``A = cl.cudnn.attention``: an alias of an alias (twice: a chain of two).
    for _ in range(2):
        for target, chain in assigns:
            if chain and chain[0] in out:
                out.setdefault(target, set()).update(
                    ".".join([base] + chain[1:]) for base in list(out[chain[0]]))
    return out


def uses(source: str) -> set[str]:
    """The dotted paths (and all their prefixes) the code of ``source`` reads."""
    tree = ast.parse(source)
    aliases = _aliases(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Name, ast.Attribute)) or \
                not isinstance(node.ctx, ast.Load):
            continue
        parts = _dotted(node)
        if not parts or parts[0] not in aliases:
            continue
        for base in aliases[parts[0]]:
            full = base.split(".") + parts[1:]
            found.update(".".join(full[:i]) for i in range(1, len(full) + 1))
    return found


def resolve(path: str):
    """The object at dotted ``path`` (its longest importable module, then attributes), or
    None when there is none."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _has_identity(obj) -> bool:
    """Whether two names bound to ``obj`` are one public object rather than equal values."""
    if isinstance(obj, (int, float, complex, str, bytes, type(None))):
        return False
    return not (isinstance(obj, (tuple, frozenset)) and not obj)


def gpu_tier_uses() -> tuple[set[str], set[int]]:
    """``(dotted paths, ids of the objects behind them)`` the GPU tier's code reads."""
    paths: set[str] = set()
    for f in sorted(GPU_TIER.rglob("*.py")):
        paths |= uses(f.read_text(encoding="utf-8"))
    ids = set()
    for p in paths:
        if p == "cudalibs" or p.startswith("cudalibs."):
            obj = resolve(p)
            if obj is not None and _has_identity(obj):
                ids.add(id(obj))
    return {p.removeprefix("cudalibs.") for p in paths}, ids


def used_on_a_gpu() -> dict[str, bool]:
    """``{public name: whether the GPU tier uses it}``."""
    paths, ids = gpu_tier_uses()
    return {name: name in paths or (_has_identity(obj) and id(obj) in ids)
            for name, obj in public_names().items()}


def _names_in_code(path: Path) -> set[str]:
    """Every identifier in the code of ``path`` (comments and strings left out)."""
    toks = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    return {t.string for t in toks if t.type == tokenize.NAME}


_CITED = re.compile(r"tests/[\w/]+\.py")


# -- the rules ------------------------------------------------------------------------------------
def test_every_public_name_is_used_on_a_gpu_or_says_why():
    objs = public_names()
    missing = [name for name, used in used_on_a_gpu().items()
               if not used and name not in NO_GPU_TEST and not deprecated(objs[name])]
    assert not missing, (
        f"{len(missing)} public name(s) no file under tests/gpu uses: write a GPU test "
        "(tests/gpu/<area>/test_public_<topic>.py), or give the reason in NO_GPU_TEST:\n  "
        + "\n  ".join(sorted(missing)))


def test_every_reason_is_for_a_public_name_that_needs_one():
    objs = public_names()
    used = used_on_a_gpu()
    stale = sorted(set(NO_GPU_TEST) - set(objs))
    assert not stale, f"NO_GPU_TEST names what is not public (renamed or gone): {stale}"
    needless = sorted(n for n in NO_GPU_TEST if used[n] or deprecated(objs[n]))
    assert not needless, ("the GPU tier uses these (or they are deprecated): remove their "
                          f"NO_GPU_TEST entries: {needless}")


def test_every_reason_says_where_the_name_is_tested():
    bad = []
    for name, reason in sorted(NO_GPU_TEST.items()):
        cited = _CITED.findall(reason)
        if len(reason) < 40 or not cited:
            bad.append(f"{name}: a reason of a sentence naming the test file(s) that test it")
            continue
        short = name.rsplit(".", 1)[-1]
        for rel in cited:
            path = ROOT / rel
            if not path.is_file():
                bad.append(f"{name}: {rel} does not exist")
            elif short not in _names_in_code(path):
                bad.append(f"{name}: {rel} does not name {short} in its code")
    assert not bad, "\n".join(bad)


def test_the_scan_counts_code_only():
    src = textwrap.dedent('''
        import importlib
        import cudalibs as cl
        from cudalibs import cudnn
        from cudalibs.cublas import gemm_backend, version
        from cudalibs.kernels import fill
        LN = importlib.import_module("cudalibs.cudnn.norm.layer")
        A = cl.cudnn.attention

        # cudnn.set_workspace_limit in a comment
        def test():
            "cl.cudnn.workspace_limit in a docstring"
            cudnn.DropoutDescriptor
            gemm_backend()
            LN.NormForwardPlan
            A.MAX_HEAD_DIM
            print("kernels.clear_cache")
    ''')
    found = uses(src)
    for used in ("cudalibs.cudnn.DropoutDescriptor", "cudalibs.cublas.gemm_backend",
                 "cudalibs.cudnn.norm.layer.NormForwardPlan",
                 "cudalibs.cudnn.attention.MAX_HEAD_DIM", "cudalibs.cudnn"):
        assert used in found, used
    for unused in ("cudalibs.cudnn.set_workspace_limit", "cudalibs.cudnn.workspace_limit",
                   "cudalibs.cublas.version", "cudalibs.kernels.fill",
                   "cudalibs.kernels.clear_cache"):
        assert unused not in found, unused
    # a re-export is one object under both names
    assert resolve("cudalibs.cudnn.norm.layer.NormForwardPlan") is \
        resolve("cudalibs.cudnn.NormForwardPlan")
    assert resolve("cudalibs.no_such_name") is None
