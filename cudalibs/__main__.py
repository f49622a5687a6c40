"""``python -m cudalibs``: an environment report to paste into a bug, and a GPU self-check.

Exit status 0 when everything found works (also on a machine without a GPU, where the
self-check is skipped), 1 when a self-check fails.  A library that is missing comes with the
command that installs it, in the form that works where cudalibs came from: a checkout installs
its own extras (``pip install ".[cu13]"``); anywhere else, the NVIDIA wheel itself.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import pathlib
import platform
import sys

from . import _env


def _pkg_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# Library -> the NVIDIA wheel that ships it, for CUDA 13 and CUDA 12 (the ``cu13`` and
# ``cu12`` extras of pyproject.toml install exactly these).
_WHEELS = {
    "nvrtc": ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12"),
    "cublas": ("nvidia-cublas", "nvidia-cublas-cu12"),
    "cublasLt": ("nvidia-cublas", "nvidia-cublas-cu12"),
    "cudnn": ("nvidia-cudnn-cu13", "nvidia-cudnn-cu12"),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12"),
}


def checkout_root() -> str | None:
    """The source checkout cudalibs runs from (a pyproject.toml naming it beside the package),
    or None for an installed copy."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    return root if 'name = "cudalibs"' in text else None


def _editable_install_of(root: str) -> bool:
    """Whether the installed cudalibs distribution is ``pip install -e`` of checkout ``root``."""
    try:
        info = json.loads(importlib.metadata.distribution("cudalibs").read_text(
            "direct_url.json") or "{}")
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return (bool(info.get("dir_info", {}).get("editable"))
            and info.get("url", "").rstrip("/") == pathlib.Path(root).as_uri())


def install_hint(library: str) -> str | None:
    """The command that installs ``library`` (``"cublas"``) for this copy of cudalibs, or None
    for a library no pip wheel provides.

    From a checkout: its own extras, ``pip install ".[cu13]"`` (``-e`` when the checkout is
    installed editable), run in the checkout.  Otherwise the NVIDIA wheel itself: the extras
    belong to the cudalibs project, which the package index does not have.
    """
    if library not in _WHEELS:
        return None
    cu13, cu12 = _WHEELS[library]
    root = checkout_root()
    if root is not None:
        flag = "-e " if _editable_install_of(root) else ""
        return (f'pip install {flag}".[cu13]" in {root} (".[cu12]" for a CUDA 12 driver), '
                f"which installs {cu13}")
    return f"pip install {cu13} (or {cu12} for a CUDA 12 driver)"


def _library_versions() -> dict:
    """name -> callable giving the loaded library's version string."""
    from . import cublas, cudnn, nccl
    from .driver import nvrtc

    def dotted(t):
        return ".".join(str(x) for x in t)

    def lt():
        v = cublas.lt_version()
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"

    return {
        "nvrtc": lambda: dotted(nvrtc.version()),
        "cublas": lambda: dotted(cublas.version()),
        "cublasLt": lt,
        "cudnn": lambda: dotted(cudnn.version_tuple()),
        "nccl": lambda: dotted(nccl.version_tuple()),
    }


def report(out=sys.stdout) -> bool:
    """Print the environment report and run the self-check; return whether all passed."""
    from . import __version__, _loader
    from .driver import _core
    from .driver.device import Device, device_count
    from .errors import CudaLibsError, LibraryNotFoundError

    w = out.write
    w(f"cudalibs {__version__}\n")
    w(f"Python {platform.python_version()} ({platform.python_implementation()}) on "
      f"{platform.system()} {platform.machine()}\n")
    w("packages: " + ", ".join(f"{p} {_pkg_version(p)}" for p in
                               ("numpy", "ml_dtypes", "cuda-pathfinder", "cuda-bindings")) + "\n")

    ok = True
    try:
        major, minor = _core.driver_version()
        # A library bound before the loader's record was reset has no record: say so.
        info = _loader.loaded().get("cuda")
        w(f"driver: CUDA {major}.{minor} ({(info and info.path) or 'libcuda'})\n")
        have_driver = True
    except CudaLibsError as exc:
        w("driver: no NVIDIA driver found\n")
        for line in str(exc).splitlines()[1:]:
            w(f"  {line.strip()}\n")
        have_driver = False

    n = device_count() if have_driver else 0
    w(f"devices: {n}\n")
    for i in range(n):
        try:
            d = Device(i)
            free, total = d.mem_info()
            cc = d.compute_capability
            w(f"  {i}: {d.name}, compute capability {cc[0]}.{cc[1]}, "
              f"{d.multiprocessor_count} SMs, {total / 2**30:.1f} GiB ({free / 2**30:.1f} GiB "
              f"free), PCI {d.pci_bus_id}\n")
        except CudaLibsError as exc:
            ok = False
            w(f"  {i}: error: {exc}\n")

    w("libraries:\n")
    for name, version in _library_versions().items():
        try:
            v = version()
            info = _loader.loaded().get(name)
            origin, path = (info.origin, info.path) if info else ("(loaded)", "")
            w(f"  {name:<9} {v:<10} {origin:<15} {path}\n")
        except LibraryNotFoundError as exc:
            w(f"  {name:<9} not available: {str(exc).splitlines()[0]}\n")
            # A CUDALIBS_<NAME>_PATH that does not load is fixed there, not by installing.
            override = _env.library_path(_loader.env_var(exc.library))
            hint = (None if override else install_hint(exc.library)) or exc.hint
            if hint:
                w(f"            {hint}\n")
        except CudaLibsError as exc:
            w(f"  {name:<9} not available: {str(exc).splitlines()[0]}\n")

    if n == 0:
        w("self-check: skipped (no GPU)\n")
        return ok
    from ._selfcheck import run

    w("self-check:\n")
    for name, passed, detail in run():
        w(f"  {name:<28} {'ok' if passed else 'FAILED'}  {detail}\n")
        ok = ok and passed
    return ok


def main(argv=None) -> int:
    """Run ``python -m cudalibs``: print the report (the default) and return the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m cudalibs",
        description="Print the cudalibs environment report: Python and packages, the NVIDIA "
                    "driver and devices, each CUDA library's version and where it was loaded "
                    "from (or how to install it), then a short GPU self-check against numpy "
                    "(skipped without a GPU). Paste the output into a bug report.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="environment variables:\n" + "".join(
            f"  {name}\n      {what}\n" for name, what in _env.VARIABLES.items())
        + "\nExit status: 0 when everything found works, 1 when a self-check fails.")
    parser.parse_args(argv)
    return 0 if report() else 1


if __name__ == "__main__":
    sys.exit(main())
