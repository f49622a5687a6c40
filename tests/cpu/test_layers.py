"""The layer contract, enforced by reading the source (no import, no GPU).

- The libraries (cublas, cudnn, nccl, kernels) read no private attribute of driver objects
  beyond the documented contract (docs/design.md, "The contract between layers").
- cublas, cudnn, nccl, kernels and testing never import each other; production code never
  imports cudalibs.testing; the driver imports no library.
- The driver's modules import each other as a DAG, with no function-level import of a driver
  module used to dodge a cycle.

Each test prints every offence, one per line, as ``path:line: what``.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "cudalibs"
DRIVER = ROOT / "driver"
LIBRARIES = ("cublas", "cudnn", "nccl", "kernels")
SIBLINGS = LIBRARIES + ("testing",)

#: Driver attributes a library may read (DeviceArray ``_ptr _shape _strides _dtype _device``;
#: Device ``_ctx``; Stream ``_h`` ``_handle`` ``_device``).
CONTRACT = frozenset({"_ptr", "_shape", "_strides", "_dtype", "_device", "_ctx", "_h",
                      "_handle"})
#: Private driver modules a library may import, and why.
ALLOWED_PRIVATE_MODULES = {
    "_handles": "the handle and workspace caches are part of the contract (public classes)",
    "_lib": "the raw driver table: its ctypes types (CUstream) in the libraries' prototype "
            "tables, and cuCtxSetCurrent(device._ctx) / cuGraphLaunch on the hot paths",
    "_core": "raise_for, the driver's one status -> exception helper, for those raw calls",
}
#: Production modules that may import cudalibs.testing, and why.
ALLOWED_TESTING_IMPORTS = {
    "_selfcheck.py": "`python -m cudalibs` checks every library against the float64 numpy "
                     "references of cudalibs.testing: it is a test run, shipped as a command",
}
#: Function-level imports of driver modules inside the driver that are kept, with the reason:
#: ``(module, imported module) -> reason``.
ALLOWED_LAZY_IMPORTS: dict[tuple[str, str], str] = {}


def _files(path: Path):
    if path.is_file():
        yield path
        return
    for p in sorted(path.rglob("*.py")):
        yield p


def _package_files(name: str) -> list[Path]:
    """The files of a library: ``cudalibs/<name>/`` and ``cudalibs/<name>*.py``."""
    out = []
    for p in sorted(ROOT.iterdir()):
        if p.name == name or (p.name.startswith(name) and p.suffix == ".py"):
            out.extend(_files(p))
    return out


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _rel(path: Path) -> str:
    return os.path.relpath(path, ROOT.parent)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined_privates(paths) -> set[str]:
    """Private names defined in these files: module globals, functions, classes, methods,
    ``__slots__`` entries and ``self._x`` / ``obj._x`` assignment targets."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Name):
                            names.add(sub.id)
                        elif isinstance(sub, ast.Attribute):
                            names.add(sub.attr)
                        if (isinstance(t, ast.Name) and t.id == "__slots__"
                                and isinstance(sub, ast.Constant)
                                and isinstance(sub.value, str)):
                            names.add(sub.value)
    return {n for n in names if _is_private(n)}


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(path: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    """Absolute names an import statement reaches: ``from .m import x`` reaches ``pkg.m``;
    ``from . import a, b`` (no module) reaches ``pkg.a`` and ``pkg.b``, which are modules or
    names of the package."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        pkg = _module_name(path).split(".")
        if path.name != "__init__.py":
            pkg = pkg[:-1]
        base = pkg[:len(pkg) - node.level + 1]
        mod = ".".join(base + ([node.module] if node.module else []))
    else:
        mod = node.module or ""
    if node.module:
        return [mod] + [f"{mod}.{a.name}" for a in node.names if _is_private(a.name)]
    return [f"{mod}.{a.name}" for a in node.names]


def _top_package(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "cudalibs" else None


def _report(offences: list[str], what: str) -> None:
    if offences:
        text = "\n".join(sorted(set(offences)))
        print(f"{len(set(offences))} {what}:\n{text}")
        pytest.fail(f"{len(set(offences))} {what}:\n{text}", pytrace=False)


# -- (a) private reads ------------------------------------------------------------------------
def test_libraries_read_only_the_driver_contract():
    driver_privates = _defined_privates(_files(DRIVER)) - CONTRACT
    offences = []
    for lib in LIBRARIES:
        files = _package_files(lib)
        own = _defined_privates(files)
        for path in files:
            for node in ast.walk(_tree(path)):
                if isinstance(node, ast.Attribute) and _is_private(node.attr):
                    if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                        continue
                    if node.attr in driver_privates and node.attr not in own:
                        offences.append(f"{_rel(path)}:{node.lineno}: reads "
                                        f"{ast.unparse(node)} (driver-private {node.attr})")
                elif isinstance(node, ast.ImportFrom):
                    for mod in _resolve(path, node):
                        parts = mod.split(".")
                        if (len(parts) >= 3 and parts[:2] == ["cudalibs", "driver"]
                                and any(_is_private(p) for p in parts[2:])):
                            head = next(p for p in parts[2:] if _is_private(p))
                            if head in ALLOWED_PRIVATE_MODULES and parts[-1] == head:
                                continue
                            if head in ALLOWED_PRIVATE_MODULES and not _is_private(parts[-1]):
                                continue
                            offences.append(f"{_rel(path)}:{node.lineno}: imports {mod} "
                                            "(driver-private)")
    _report(offences, "reads of driver privates outside the contract")


# -- (b) imports between packages -------------------------------------------------------------
def _all_imports(path: Path):
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for mod in _resolve(path, node):
                yield node.lineno, mod


def test_libraries_do_not_import_each_other():
    offences = []
    for lib in SIBLINGS:
        for path in _package_files(lib):
            for line, mod in _all_imports(path):
                other = _top_package(mod)
                if other in SIBLINGS and not other.startswith(lib) and not lib.startswith(other):
                    offences.append(f"{_rel(path)}:{line}: {lib} imports {mod}")
    _report(offences, "imports between libraries")


def test_production_code_does_not_import_testing():
    offences = []
    for path in _files(ROOT):
        if path.relative_to(ROOT).parts[0].startswith("testing"):
            continue
        if str(path.relative_to(ROOT)) in ALLOWED_TESTING_IMPORTS:
            continue
        for line, mod in _all_imports(path):
            if _top_package(mod) == "testing":
                offences.append(f"{_rel(path)}:{line}: imports {mod}")
    _report(offences, "imports of cudalibs.testing from production code")


def test_driver_imports_no_library():
    offences = []
    for path in _files(DRIVER):
        for line, mod in _all_imports(path):
            pkg = _top_package(mod)
            if pkg is not None and any(pkg.startswith(s) for s in SIBLINGS):
                offences.append(f"{_rel(path)}:{line}: imports {mod}")
    _report(offences, "library imports in the driver")


# -- (c) the driver's own import graph --------------------------------------------------------
def _driver_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in _files(DRIVER)}


def _driver_targets(path: Path, node, modules) -> set[str]:
    return {m for m in _resolve(path, node) if m in modules and m != "cudalibs.driver"}


def _top_level_imports(tree: ast.Module):
    """Import statements run at import time: the module body, and bodies of module-level
    ``if``/``try``/``with`` blocks (not functions or classes' methods)."""
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(node, field, []) or []:
                    stack.extend(child.body if isinstance(child, ast.ExceptHandler)
                                 else [child])
        elif isinstance(node, ast.ClassDef):
            stack.extend(n for n in node.body if not isinstance(
                n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def test_driver_import_graph_is_a_dag():
    modules = _driver_modules()
    graph = {m: set() for m in modules}
    for mod, path in modules.items():
        if mod == "cudalibs.driver":
            continue  # the package's __init__ imports everything and is imported by none
        for node in _top_level_imports(_tree(path)):
            graph[mod] |= _driver_targets(path, node, modules)
    cycles = []
    state: dict[str, int] = {}
    trail: list[str] = []

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
    _report(cycles, "import cycles in the driver")


def test_driver_has_no_function_level_driver_imports():
    modules = _driver_modules()
    offences = []
    for mod, path in modules.items():
        tree = _tree(path)
        top = {id(n) for n in _top_level_imports(tree)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                for target in sorted(_driver_targets(path, node, modules)):
                    key = (mod.rsplit(".", 1)[-1], target.rsplit(".", 1)[-1])
                    if key in ALLOWED_LAZY_IMPORTS:
                        continue
                    offences.append(f"{_rel(path)}:{node.lineno}: function-level import of "
                                    f"{target}")
    _report(offences, "function-level imports of driver modules inside the driver")
