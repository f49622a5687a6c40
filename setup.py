"""The one build step pyproject.toml cannot declare: leaving ptx/build.py out of the wheel.

ptx/ is installed as the package ``cudalibs._ptx`` (see ``[tool.setuptools]`` in
pyproject.toml), and setuptools ships every ``*.py`` of a package as a module, whatever
``exclude-package-data`` says.  ``build.py`` regenerates the PTX with nvcc in a checkout; an
installed copy has no use for it, so the wheel carries only the kernel files and their notes.
Everything else about the package is in pyproject.toml.
"""

from setuptools import setup
from setuptools.command.build_py import build_py

#: (package, module) pairs that stay in the source tree only.
CHECKOUT_ONLY = {("cudalibs._ptx", "build")}


class BuildPy(build_py):
    """``build_py`` without the :data:`CHECKOUT_ONLY` modules."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if (m[0], m[1]) not in CHECKOUT_ONLY]


setup(cmdclass={"build_py": BuildPy})
