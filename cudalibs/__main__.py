"""``python -m cudalibs``: an environment report to paste into a bug, and a GPU self-check.

Exit status 0 when everything found works (also on a machine without a GPU, where the
self-check is skipped), 1 when a self-check fails.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys


def _pkg_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


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
    from .errors import CudaLibsError

    w = out.write
    w(f"cudalibs {__version__}\n")
    w(f"Python {platform.python_version()} ({platform.python_implementation()}) on "
      f"{platform.system()} {platform.machine()}\n")
    w("packages: " + ", ".join(f"{p} {_pkg_version(p)}" for p in
                               ("numpy", "ml_dtypes", "cuda-pathfinder", "cuda-bindings")) + "\n")

    ok = True
    try:
        major, minor = _core.driver_version()
        info = _loader.loaded()["cuda"]
        w(f"driver: CUDA {major}.{minor} ({info.path or 'libcuda'})\n")
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
            info = _loader.loaded()[name]
            w(f"  {name:<9} {v:<10} {info.origin:<15} {info.path}\n")
        except CudaLibsError as exc:
            w(f"  {name:<9} not available: {str(exc).splitlines()[0]}\n")
            hint = getattr(exc, "hint", "")
            if hint:
                w(f"            {hint}\n")

    if n == 0:
        w("self-check: skipped (no GPU)\n")
        return ok
    from ._selfcheck import run

    w("self-check:\n")
    for name, passed, detail in run():
        w(f"  {name:<28} {'ok' if passed else 'FAILED'}  {detail}\n")
        ok = ok and passed
    return ok


def main() -> int:
    return 0 if report() else 1


if __name__ == "__main__":
    sys.exit(main())
