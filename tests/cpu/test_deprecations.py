"""Deprecated names stay callable for users, but nothing the project ships calls them.

A deprecated name is one made by ``cudalibs._ffi.renamed`` (its docstring starts with
"Deprecated:"); the benchmarks, examples and tests must use what replaced it, so that the day
the old name goes, nothing of ours breaks.  The one place that calls them is inside
``pytest.warns(DeprecationWarning)``, where a test checks that the old names still answer.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODULES = ("cudalibs", "cudalibs.driver", "cudalibs.cublas", "cudalibs.cudnn", "cudalibs.nccl",
           "cudalibs.kernels", "cudalibs.testing", "cudalibs.runtime")


def deprecated_names() -> dict[str, set[str]]:
    """``{attribute name: {module, ...}}`` of every deprecated public callable, the modules
    by their full and their last name (``cudalibs.cublas`` and ``cublas``)."""
    found: dict[str, set[str]] = {}
    for modname in MODULES:
        mod = importlib.import_module(modname)
        for name in dir(mod):
            obj = getattr(mod, name, None)
            doc = getattr(obj, "__doc__", None) or ""
            if callable(obj) and doc.startswith("Deprecated:"):
                found.setdefault(name, set()).update({modname, modname.rsplit(".", 1)[-1]})
    return found


def _sources():
    for folder in ("benchmarks", "examples", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def _dotted(node) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _expects_deprecation(node) -> bool:
    """Whether ``node`` is ``with pytest.warns(DeprecationWarning, ...)``."""
    return isinstance(node, ast.With) and any(
        isinstance(item.context_expr, ast.Call)
        and _dotted(item.context_expr.func) == "pytest.warns"
        and item.context_expr.args and _dotted(item.context_expr.args[0]) == "DeprecationWarning"
        for item in node.items)


def _walk(node):
    """``ast.walk`` that does not enter a block expecting a deprecation warning."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not _expects_deprecation(child):
            yield from _walk(child)


def test_the_deprecated_names_are_found():
    names = deprecated_names()
    # The known ones; finding them proves the scan works, not that the list is complete.
    for name, module in (("version_tuple", "cudnn"), ("version_tuple", "nccl"),
                         ("plan_cache", "cublas"), ("clear_plan_cache", "cublas")):
        assert module in names.get(name, ()), names


def test_nothing_shipped_calls_a_deprecated_name():
    names = deprecated_names()
    hits = []
    for rel, path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=rel)
        for node in _walk(tree):
            # ``cublas.plan_cache`` is deprecated, ``cl.plan_cache`` (the one cache) is not:
            # an attribute counts only when read from a module that holds the old name.
            if isinstance(node, ast.Attribute) and node.attr in names:
                owner = _dotted(node.value)
                if owner is not None and (owner in names[node.attr]
                                          or owner.rsplit(".", 1)[-1] in names[node.attr]):
                    hits.append(f"{rel}:{node.lineno}: {owner}.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module in {
                    m for mods in names.values() for m in mods}:
                hits += [f"{rel}:{node.lineno}: from {node.module} import {a.name}"
                         for a in node.names if node.module in names.get(a.name, ())]
    assert not hits, "deprecated names called; use what replaced them:\n" + "\n".join(hits)


@pytest.mark.parametrize("spelling", ["cublas.plan_cache()", "nccl.version_tuple()"])
def test_a_call_of_a_deprecated_name_fails_the_suite(spelling):
    # pyproject.toml turns the deprecation warning into an error inside the suite.
    from cudalibs import cublas, nccl  # noqa: F401  (named by ``spelling``)

    with pytest.raises(DeprecationWarning, match="is deprecated: use"):
        eval(spelling)
