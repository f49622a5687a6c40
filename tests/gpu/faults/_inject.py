"""How a fault is installed: patches that name what they replace, so that a check without a
GPU can tell whether each one still finds its target.

A :class:`Patch` replaces one thing in cudalibs -- a module attribute, a class attribute (a
method), a dict item, or an attribute of such an item -- named by a dotted path with
``[key]`` items (``"GemmPlan.scalar"``, ``"POOLING_MODES[avg_exclude_padding]"``,
``"EPILOGUES[relu_bias].value"``).  Its replacement is made from the original, so a fault is
usually a thin wrapper that changes one argument or one result.

cudalibs binds many functions under several names (``from ._common import gemm_args`` in
one module, a re-export in a package ``__init__``, ``_lookup = _front.lookup``): a patch of
one name would leave the others on the original, and a fault would be silently inert on the
path the tests take.  So a patch of a function or class is, by default, applied wherever any
cudalibs module (or a subclass, for a method) binds that very object; every cudalibs module
is imported first for that.  A patch with ``everywhere=False`` replaces the one name only:
the bug of one call site.  What the scan cannot see are copies kept in containers (a dict of
functions made at import) and objects captured in closures; the catalog avoids patching
those.

:func:`c_call` injects a bug at one library call of one module: the module's ``_lib`` (the
prototype table module it calls through) is replaced by a stand-in whose library object
changes the arguments of one C function, optionally only when called from a function of a
given name.  :func:`kernel_launch` does the same for the launches of the shipped kernels,
which all go through :func:`cudalibs.runtime.ptxlib.launch`.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Patch", "Fault", "c_call", "kernel_launch", "caller_name", "import_cudalibs"]

_TOKEN = re.compile(r"\.?([A-Za-z_]\w*)|\[([^\]]+)\]")


def _steps(path: str) -> list[tuple[str, str]]:
    """``[("attr", name) | ("item", key), ...]`` of a patch path."""
    out, pos = [], 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if m is None or (pos == 0 and path.startswith(".")):
            raise ValueError(f"bad patch path {path!r} at {path[pos:]!r}")
        out.append(("attr", m.group(1)) if m.group(1) else ("item", m.group(2)))
        pos = m.end()
    if not out:
        raise ValueError("empty patch path")
    return out


def import_cudalibs() -> list[str]:
    """Import every module of cudalibs (importing one loads no library), so that every
    binding of a patched object can be found; returns their names."""
    import cudalibs

    names = []
    for info in pkgutil.walk_packages(cudalibs.__path__, "cudalibs.", onerror=lambda n: None):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except Exception:   # noqa: BLE001 - a module that cannot import binds nothing in use
            continue
        names.append(info.name)
    return names


def caller_name(depth: int = 1) -> str:
    """The name of the function ``depth`` frames above the caller of this one (1: the
    function that called the caller)."""
    return sys._getframe(depth + 1).f_code.co_name


@dataclass(frozen=True)
class Patch:
    """One replacement in cudalibs.

    Parameters
    ----------
    module : str
        The module the path starts from (``"cudalibs.cublas.gemm"``).
    path : str
        What is replaced, from the module: attributes and ``[key]`` items (string keys).
    make : callable
        ``make(original) -> replacement``.
    everywhere : bool
        Also replace every other binding of the original object in cudalibs' modules (and,
        for a method, in the class's subclasses).  Only for functions and classes.
    check : callable, optional
        ``check(original) -> str or None``: a further condition for the patch to be live (a C
        function in the prototype table, a kernel in the shipped library), the problem as
        text.
    """

    module: str
    path: str
    make: Callable
    everywhere: bool = True
    check: Callable | None = None

    def locate(self):
        """``(container, kind, key, original)``: what holds the target, ``"attr"`` or
        ``"item"``, its name or key, and its current value.

        Raises
        ------
        LookupError
            The module, an attribute or an item on the path does not exist.
        """
        try:
            obj = importlib.import_module(self.module)
        except ImportError as exc:
            raise LookupError(f"{self}: cannot import {self.module}: {exc}") from None
        steps = _steps(self.path)
        for i, (kind, key) in enumerate(steps):
            container = obj
            try:
                obj = getattr(container, key) if kind == "attr" else container[key]
            except (AttributeError, KeyError, TypeError):
                done = self.path if i == len(steps) - 1 else key
                raise LookupError(f"{self}: {done!r} not found") from None
        return container, kind, key, obj

    def verify(self) -> None:
        """Raise LookupError unless the target exists and passes :attr:`check`."""
        *_, original = self.locate()
        if self.check is not None:
            problem = self.check(original)
            if problem:
                raise LookupError(f"{self}: {problem}")

    def apply(self, monkeypatch) -> list[str]:
        """Install the replacement with ``monkeypatch``; returns where it was put."""
        container, kind, key, original = self.locate()
        replacement = self.make(original)
        if kind == "item":
            monkeypatch.setitem(container, key, replacement)
            return [f"{self.module}:{self.path}"]
        monkeypatch.setattr(container, key, replacement)
        where = [f"{self.module}:{self.path}"]
        if self.everywhere and callable(original):
            where += _rebind(monkeypatch, container, key, original, replacement)
        return where

    def __str__(self) -> str:
        return f"patch {self.module}:{self.path}"


def _rebind(monkeypatch, container, key, original, replacement) -> list[str]:
    """Put ``replacement`` wherever cudalibs binds ``original`` under another name."""
    import_cudalibs()
    where = []
    if isinstance(container, type):
        todo, seen = [container], set()
        while todo:
            cls = todo.pop()
            if cls in seen:
                continue
            seen.add(cls)
            todo.extend(cls.__subclasses__())
            for name, value in list(vars(cls).items()):
                if value is original and not (cls is container and name == key):
                    monkeypatch.setattr(cls, name, replacement)
                    where.append(f"{cls.__module__}:{cls.__qualname__}.{name}")
        return where
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "cudalibs" or mod_name.startswith("cudalibs.")):
            continue
        for name, value in list(vars(mod).items()):
            if value is original and not (mod is container and name == key):
                monkeypatch.setattr(mod, name, replacement)
                where.append(f"{mod_name}:{name}")
    return where


@dataclass(frozen=True)
class Fault:
    """One plausible bug, the tests expected to catch it, and how to install it.

    Attributes
    ----------
    name : str
        Kebab-case, unique in the catalog.
    library : str
        ``"cuBLAS"``, ``"cuDNN"``, ``"driver"``, ``"runtime"``, ``"kernels"`` or ``"NCCL"``.
    description : str
        The bug in one line, and where it is injected when that is not the bug's own place.
    targets : tuple of str
        pytest node ids or files, relative to the repository root.
    patches : tuple of Patch
    """

    name: str
    library: str
    description: str
    targets: tuple
    patches: tuple = field(default=())

    def verify(self) -> None:
        """Raise LookupError unless every patch finds its target (no GPU needed)."""
        for p in self.patches:
            p.verify()

    def apply(self, monkeypatch) -> list[str]:
        """Install every patch with ``monkeypatch`` (undone by ``monkeypatch.undo()``);
        returns where each replacement was put."""
        import_cudalibs()
        where = []
        for p in self.patches:
            where += p.apply(monkeypatch)
        return where


# -- bugs at a library call -------------------------------------------------------------------
def _table_check(getter: str, function: str) -> Callable:
    def check(lib_module) -> str | None:
        while isinstance(lib_module, _ModuleStandIn):     # a second fault on one module
            lib_module = lib_module._fault_real_module
        lazy = getattr(lib_module, getter, None)
        names = {p.name for p in getattr(lazy, "table", ())}
        if function not in names:
            return f"{function} is not in {getattr(lib_module, '__name__', lib_module)}.{getter}"
        return None
    return check


class _LibraryStandIn:
    """A bound library whose one function ``name`` is wrapped; the rest passes through."""

    __slots__ = ("_real", "_name", "_wrap", "_wrapped", "_unchecked")

    def __init__(self, real, name, wrap):
        self._real = real
        self._name = name
        self._wrap = wrap
        self._wrapped = wrap(getattr(real, name))
        self._unchecked = None

    def __getattr__(self, attr):
        if attr == self._name:
            return self._wrapped
        return getattr(self._real, attr)

    def unchecked(self, attr):
        """The library's unchecked entry point, wrapped when it is the changed function."""
        if attr != self._name:
            return self._real.unchecked(attr)
        if self._unchecked is None:
            self._unchecked = self._wrap(self._real.unchecked(attr))
        return self._unchecked


class _ModuleStandIn:
    """Stands in for a module's ``_lib``: its ``getter()`` returns a :class:`_LibraryStandIn`;
    every other attribute is the real module's (the stand-in's own names are prefixed so as
    not to hide one of them)."""

    def __init__(self, real_module, getter, name, wrap):
        self._fault_real_module = real_module
        self._fault_getter = getter
        self._fault_name = name
        self._fault_wrap = wrap
        self._fault_bound = {}

    def __getattr__(self, attr):
        if attr != self._fault_getter:
            return getattr(self._fault_real_module, attr)
        return self._fault_get

    def _fault_get(self):
        real = getattr(self._fault_real_module, self._fault_getter)()
        stand_in = self._fault_bound.get(id(real))
        if stand_in is None:
            stand_in = _LibraryStandIn(real, self._fault_name, self._fault_wrap)
            self._fault_bound[id(real)] = stand_in
        return stand_in


def c_call(module: str, function: str, change: Callable, *, caller: str | None = None,
           lib: str = "_lib", getter: str = "get") -> Patch:
    """A bug at the calls of C ``function`` that ``module`` makes through ``lib.getter()``.

    ``change(args)`` returns the arguments the call is made with, or None to skip the call
    (it then reports success, status 0).  With ``caller``, only calls made directly from a
    function of that name are changed.
    """
    def wrap(fn):
        def call(*args):
            if caller is None or caller_name() == caller:
                args = change(list(args))
                if args is None:
                    return 0
            return fn(*args)
        return call

    def make(real_module):
        return _ModuleStandIn(real_module, getter, function, wrap)

    table = _table_check(getter, function)

    def check(real_module) -> str | None:
        problem = table(real_module)
        if problem or caller is None:
            return problem
        source = importlib.import_module(module).__file__
        with open(source, encoding="utf-8") as f:
            if not re.search(rf"\bdef {re.escape(caller)}\(", f.read()):
                return f"no function {caller}() in {module}"
        return None

    return Patch(module, lib, make, everywhere=False, check=check)


def kernel_launch(pattern: str, change: Callable) -> Patch:
    """A bug in the launch arguments of the shipped kernels whose names match ``pattern`` (a
    regular expression, matched in full): ``change(grid, args) -> (grid, args)``."""
    rx = re.compile(pattern)

    def make(launch):
        def patched(device, name, grid, block, args, stream, shared_mem=0):
            if rx.fullmatch(name):
                grid, args = change(tuple(grid), tuple(args))
            return launch(device, name, grid, block, args, stream, shared_mem)
        return patched

    def check(_launch) -> str | None:
        from cudalibs import ptx

        names = [n for names in ptx.ENTRIES.values() for n in names]
        if not any(rx.fullmatch(n) for n in names):
            return f"no shipped kernel matches {pattern!r}"
        return None

    return Patch("cudalibs.runtime.ptxlib", "launch", make, check=check)
