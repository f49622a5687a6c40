"""The layers and the contract between them, enforced by reading the source (no import, no GPU).

- Layers, arrows pointing down only: the libraries (cublas, cudnn, nccl, cufft, cusparse,
  kernels) -> runtime -> driver -> the base (``_ffi``, ``_loader``, ``_env``, ``errors``, ``dtypes``).
  Libraries never import each other; production code never imports cudalibs.testing.
- The libraries and the runtime read driver objects through public names only (the contract
  of docs/design.md); the runtime's few exceptions are listed here with their reason.
- No import cycle anywhere in cudalibs, no import of a cudalibs module inside a function
  (which is how a cycle hides), and no private name imported from another module.
- The one front: no library looks plans up in the plan cache or records relaunches by hand.
- No module over 800 lines, the prototype tables aside.

Each test prints every offence, one per line, as ``path:line: what``.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "cudalibs"
DRIVER = ROOT / "driver"
RUNTIME = ROOT / "runtime"
LIBRARIES = ("cublas", "cudnn", "nccl", "cufft", "cusparse", "kernels")
SIBLINGS = LIBRARIES + ("testing",)
#: The base every layer may use.
BASE = ("_ffi", "_loader", "_env", "errors", "dtypes", "ptx")

#: Attributes of driver objects that only the driver itself reads: the old private spellings
#: of the contract (now read through ``address``, ``shape``, ``strides``, ``dtype``,
#: ``device``, ``raw``, ``raw_handle``, ``raw_context``, ``owned``) and the internals behind it.
DRIVER_INTERNALS = frozenset({"_ptr", "_shape", "_strides", "_dtype", "_dt", "_device", "_buf",
                              "_owner", "_contig", "_readonly", "_h", "_handle", "_ctx",
                              "_owned", "_alive"})
#: Runtime modules that read a driver internal, with the reason.
RUNTIME_READS = {
    ("operand.py", "_buf"): "the one operand path's liveness check of an array's buffer",
    ("operand.py", "_ptr"): "the one operand path's liveness check (a freed buffer's _ptr)",
    ("operand.py", "_readonly"): "the one operand path's write check of an out= target, "
                                 "without a call in the common case",
    ("operand.py", "_contig"): "the same check: a C-contiguous target cannot overlap itself",
    ("ptxlib.py", "_alive"): "the shipped kernels' launch path checks its cached stream's "
                             "liveness cell without a call",
}
#: Private modules of the driver another layer may import, and why.
ALLOWED_PRIVATE_MODULES = {
    "_lib": "the raw driver table: ctypes types (CUstream) for the libraries' prototype tables "
            "and cuCtxSetCurrent / cuGraphLaunch on hot paths",
    "_core": "raise_for, the driver's status -> exception helper, for those raw calls",
}
#: Modules whose imports inside functions are kept, with the reason.
ALLOWED_LAZY_IMPORTS = {
    "__main__.py": "`python -m cudalibs` imports each library only when its report runs",
    "_selfcheck.py": "the self-check imports each library it checks when it checks it",
}
#: Production modules that may import cudalibs.testing, and why.
ALLOWED_TESTING_IMPORTS = {
    "_selfcheck.py": "`python -m cudalibs` checks every library against the float64 numpy "
                     "references of cudalibs.testing: it is a test run, shipped as a command",
}
#: Modules allowed over MAX_LINES: the prototype tables, one row per C function.
LONG_MODULES = {"_lib.py", "_nvrtc_lib.py"}
MAX_LINES = 800


def _files(path: Path):
    if path.is_file():
        yield path
        return
    yield from sorted(path.rglob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _rel(path: Path) -> str:
    return os.path.relpath(path, ROOT.parent)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in _files(ROOT)}


def _resolve(path: Path, node) -> list[tuple[str, str | None]]:
    """``(module, name)`` pairs an import statement reaches; ``from . import x`` gives
    ``(pkg.x, None)`` when ``x`` is a module of the package, else ``(pkg, "x")``."""
    if isinstance(node, ast.Import):
        return [(a.name, None) for a in node.names]
    if node.level:
        pkg = _module_name(path).split(".")
        if path.name != "__init__.py":
            pkg = pkg[:-1]
        mod = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    out = []
    for a in node.names:
        if f"{mod}.{a.name}" in MODULES:
            out.append((f"{mod}.{a.name}", None))
        else:
            out.append((mod, a.name))
    return out


def _layer(mod: str) -> str | None:
    """``"driver"``, ``"runtime"``, a library's name, ``"testing"``, ``"base"`` or None."""
    parts = mod.split(".")
    if parts[0] != "cudalibs":
        return None
    if len(parts) == 1:
        return "top"
    head = parts[1]
    if head in ("driver", "runtime") or head in SIBLINGS:
        return head
    return "base" if head in BASE else "top"


def _imports(path: Path, top_only: bool = False):
    """``(line, module, name, at_module_level)`` of every cudalibs import in ``path``."""
    tree = _tree(path)
    top = {id(n) for n in _module_level(tree)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            level = id(node) in top
            if top_only and not level:
                continue
            for mod, name in _resolve(path, node):
                if mod.startswith("cudalibs"):
                    yield node.lineno, mod, name, level


def _module_level(tree: ast.Module):
    """Statements run at import time: the body and module-level if/try/with blocks."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, field, []) or []:
                    stack.extend(child.body if isinstance(child, ast.ExceptHandler)
                                 else [child])
        elif isinstance(node, ast.ClassDef):
            stack.extend(n for n in node.body if not isinstance(
                n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _report(offences: list[str], what: str) -> None:
    if offences:
        text = "\n".join(sorted(set(offences)))
        pytest.fail(f"{len(set(offences))} {what}:\n{text}", pytrace=False)


# -- the layers -------------------------------------------------------------------------------
#: What each layer may import (besides itself and the base).
MAY_IMPORT = {
    "base": set(),
    "driver": set(),
    "runtime": {"driver"},
    "testing": {"driver", "runtime"},
    **{lib: {"driver", "runtime"} for lib in LIBRARIES},
}


def test_imports_point_down_the_layers():
    offences = []
    for mod, path in MODULES.items():
        own = _layer(mod)
        if own not in MAY_IMPORT:
            continue        # the package's __init__, __main__, _selfcheck: the top
        for line, target, _, _ in _imports(path):
            other = _layer(target)
            if other in (own, "base", None) or other in MAY_IMPORT[own]:
                continue
            offences.append(f"{_rel(path)}:{line}: {own} imports {target} ({other})")
    _report(offences, "imports against the layers")


def test_production_code_does_not_import_testing():
    offences = []
    for mod, path in MODULES.items():
        if _layer(mod) == "testing" or path.name in ALLOWED_TESTING_IMPORTS:
            continue
        for line, target, _, _ in _imports(path):
            if _layer(target) == "testing":
                offences.append(f"{_rel(path)}:{line}: imports {target}")
    _report(offences, "imports of cudalibs.testing from production code")


# -- the contract ------------------------------------------------------------------------------
def test_libraries_and_runtime_read_driver_objects_through_public_names():
    offences = []
    for mod, path in MODULES.items():
        layer = _layer(mod)
        if layer not in LIBRARIES and layer != "runtime":
            continue
        for node in ast.walk(_tree(path)):
            if not (isinstance(node, ast.Attribute) and node.attr in DRIVER_INTERNALS):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            if layer == "runtime" and (path.name, node.attr) in RUNTIME_READS:
                continue
            offences.append(f"{_rel(path)}:{node.lineno}: reads {ast.unparse(node)} (use the "
                            "public name of the contract)")
    _report(offences, "reads of driver internals outside the driver")


def test_no_private_module_of_the_driver_is_imported_from_above():
    offences = []
    for mod, path in MODULES.items():
        if _layer(mod) in ("driver", "base", "top", None):
            continue
        for line, target, name, _ in _imports(path):
            parts = target.split(".")
            if parts[:2] != ["cudalibs", "driver"] or len(parts) < 3:
                continue
            if _is_private(parts[2]) and parts[2] not in ALLOWED_PRIVATE_MODULES:
                offences.append(f"{_rel(path)}:{line}: imports {target} (driver-private)")
    _report(offences, "imports of the driver's private modules")


def test_no_private_name_is_imported_from_another_module():
    offences = []
    for mod, path in MODULES.items():
        for line, target, name, _ in _imports(path):
            if name is not None and _is_private(name):
                offences.append(f"{_rel(path)}:{line}: imports {name} from {target}")
    _report(offences, "private names imported across modules")


# -- the import graph -----------------------------------------------------------------------------
def test_no_import_cycle_in_cudalibs():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        for _, target, _, _ in _imports(path, top_only=True):
            if target in MODULES and target != mod:
                graph[mod].add(target)
    cycles, state, trail = [], {}, []

    def visit(m):
        state[m] = 1
        trail.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycles.append(" -> ".join(trail[trail.index(n):] + [n]))
            elif n not in state:
                visit(n)
        trail.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    _report(cycles, "import cycles")


def test_no_cudalibs_import_inside_a_function():
    offences = []
    for mod, path in MODULES.items():
        if path.name in ALLOWED_LAZY_IMPORTS:
            continue
        for line, target, _, level in _imports(path):
            if not level:
                offences.append(f"{_rel(path)}:{line}: imports {target} inside a function")
    _report(offences, "function-level imports of cudalibs modules")


# -- the one front ------------------------------------------------------------------------------
_CACHE_NAMES = {"cache", "_cache", "_plan_cache", "plan_cache"}
_BY_HAND = {"get", "put", "pop", "get_or_build", "discard"}


def test_libraries_go_through_the_one_front():
    offences = []
    for mod, path in MODULES.items():
        if _layer(mod) not in LIBRARIES:
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                f = node.func
                if (f.attr in _BY_HAND and isinstance(f.value, ast.Name)
                        and f.value.id in _CACHE_NAMES):
                    offences.append(f"{_rel(path)}:{node.lineno}: {ast.unparse(f)}(): look plans "
                                    "up through cudalibs.runtime.front")
                if f.attr in ("record", "due") and isinstance(f.value, ast.Name) and \
                        "relaunch" in f.value.id:
                    offences.append(f"{_rel(path)}:{node.lineno}: {ast.unparse(f)}(): relaunch "
                                    "through RelaunchSlots.launch")
            elif isinstance(node, ast.Name) and node.id == "KernelRelaunch":
                offences.append(f"{_rel(path)}:{node.lineno}: uses KernelRelaunch directly")
    _report(offences, "plan-cache lookups or relaunches written outside the front")


# -- size -----------------------------------------------------------------------------------------
def test_no_module_over_800_lines():
    offences = []
    for path in _files(ROOT):
        if path.name in LONG_MODULES:
            continue
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            offences.append(f"{_rel(path)}: {n} lines")
    _report(offences, f"modules over {MAX_LINES} lines")


def test_the_checks_see_the_packages():
    # A check that reads no file passes vacuously: make sure the walk finds the layers.
    layers = {_layer(m) for m in MODULES}
    assert {"driver", "runtime", "base", "testing", *LIBRARIES} <= layers
    assert len(MODULES) > 60
