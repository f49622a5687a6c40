"""``python -m cudalibs``: an environment report to paste into a bug, and a GPU self-check.

Exit status (:data:`EXIT_STATUSES`): 0 when everything found works (also on a machine without
a GPU, where the self-check is skipped), 1 when a device or a self-check fails, 2 for a usage
error, 3 when none of the CUDA libraries can be loaded.  A library that is missing comes with
the command that installs it, in the form that works where cudalibs came from: a checkout
installs its own extras (``pip install ".[cu13]"``); anywhere else, the NVIDIA wheel itself.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import sys

from . import __version__, _env

#: Everything found works.
EXIT_OK = 0
#: A device or a self-check failed.
EXIT_FAILED = 1
#: None of the CUDA libraries loads (2 is argparse's, for a usage error).
EXIT_NO_LIBRARY = 3

#: Exit status -> what it means, as ``--help`` prints it.  A script tells "nothing installed"
#: (3) from "installed but broken" (1) without reading the report.
EXIT_STATUSES = {
    EXIT_OK: "everything found works (the self-check is skipped without a GPU)",
    EXIT_FAILED: "a device or a self-check failed",
    2: "usage error (an unknown option)",
    EXIT_NO_LIBRARY: "no CUDA library (NVRTC, cuBLAS, cuBLASLt, cuDNN, NCCL, cuFFT, cuSPARSE) "
                     "could be loaded",
}


def _pkg_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _library_versions() -> dict:
    """name -> callable giving the loaded library's version string."""
    from . import cublas, cudnn, cufft, cusparse, nccl
    from .driver import nvrtc

    def dotted(t):
        return ".".join(str(x) for x in t)

    return {
        "nvrtc": lambda: dotted(nvrtc.version()),
        "cublas": lambda: dotted(cublas.version()),
        "cublasLt": lambda: dotted(cublas.lt_version()),
        "cudnn": lambda: dotted(cudnn.version()),
        "nccl": lambda: dotted(nccl.version()),
        "cufft": lambda: dotted(cufft.version()),
        "cusparse": lambda: dotted(cusparse.version()),
    }


def report(out=sys.stdout) -> int:
    """Print the environment report and run the self-check.

    Returns
    -------
    int
        The exit status, one of :data:`EXIT_STATUSES`: :data:`EXIT_NO_LIBRARY` when no
        library loads, else :data:`EXIT_FAILED` when a device or a self-check failed, else
        :data:`EXIT_OK`.
    """
    from . import _loader
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
        major, minor, _ = _core.driver_version()
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
    usable = 0
    for name, version in _library_versions().items():
        try:
            v = version()
            usable += 1
            info = _loader.loaded().get(name)
            origin, path = (info.origin, info.path) if info else ("(loaded)", "")
            w(f"  {name:<9} {v:<10} {origin:<15} {path}\n")
        except LibraryNotFoundError as exc:
            w(f"  {name:<9} not available: {str(exc).splitlines()[0]}\n")
            # The loader's own hint (install_hint, or how to fix a CUDALIBS_<NAME>_PATH
            # that does not load), so that the report and the error say the same.
            if exc.hint:
                w(f"            {exc.hint}\n")
        except CudaLibsError as exc:
            w(f"  {name:<9} not available: {str(exc).splitlines()[0]}\n")

    if not usable:
        w("no CUDA library could be loaded: install them (see above) or fix the "
          "CUDALIBS_<NAME>_PATH variables\n")
        return EXIT_NO_LIBRARY
    if n == 0:
        w("self-check: skipped (no GPU)\n")
        return EXIT_OK if ok else EXIT_FAILED
    from ._selfcheck import run

    w("self-check:\n")
    for name, passed, detail in run():
        w(f"  {name:<28} {'ok' if passed else 'FAILED'}  {detail}\n")
        ok = ok and passed
    return EXIT_OK if ok else EXIT_FAILED


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
        + "\nexit status:\n" + "".join(
            f"  {status}  {what}\n" for status, what in EXIT_STATUSES.items()))
    parser.add_argument("--version", action="version", version=f"cudalibs {__version__}")
    parser.parse_args(argv)
    return report()


if __name__ == "__main__":
    sys.exit(main())
