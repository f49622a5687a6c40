"""Regenerate (or check) the PTX of the kernel library from its CUDA C sources.

Usage, in the root of a checkout::

    python ptx/build.py            # rewrite every .ptx from its .cu
    python ptx/build.py --check    # exit 1 if a committed .ptx differs from a rebuild
    python ptx/build.py --ptxas /path/to/cuda-12.0/ptxas   # validate with another ptxas

Each ``name.cu`` is compiled with ``nvcc -ptx -arch=compute_75 -O3 -std=c++17`` (``compute_80``
or ``compute_90a`` for the files :data:`cudalibs.ptx.TARGETS` names: the grouped GEMM's cp.async
and bfloat16 tensor-core products need sm_80, its Hopper version's wgmma and TMA the
architecture-specific sm_90a), the ``.version`` line nvcc writes (9.0 for nvcc 13) is lowered
to :data:`PTX_VERSION`, and the result is assembled with ``ptxas -arch=`` the file's own target
(``sm_75``, ``sm_80``, ``sm_90a``), which rejects any instruction or directive newer than the
declared ISA version, so a file that passes is legal PTX 8.0 (see README.md for why 8.0; ISA
8.0 is also the first to know sm_90a and wgmma).
A comment header records the sha256 of every source file the PTX was built from, the nvcc
release and the command, so a test can tell that a committed PTX matches its sources without
a compiler, and a rebuild with the same nvcc reproduces the file byte for byte.

The build needs nvcc and ptxas (on ``PATH``, or ``--nvcc`` / ``--ptxas``); using the kernels
needs neither.  The script builds the files in its own directory, and takes the list of kernels
each file must define from :data:`cudalibs.ptx.ENTRIES`.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The directory of the sources and the PTX built from them: this script's own.
DIRECTORY = Path(__file__).resolve().parent

if __name__ == "__main__":
    # Run as a script: the cudalibs of the checkout this file belongs to, not another copy.
    sys.path.insert(0, str(DIRECTORY.parent))

from cudalibs.ptx import ENTRIES, target  # noqa: E402

__all__ = ["PTX_VERSION", "TARGET", "NVCC_FLAGS", "nvcc_flags", "COMMAND", "DIRECTORY", "build",
           "generate",
           "validate", "nvcc_release", "parse_header", "source_hashes", "tag_line", "main"]

#: The PTX ISA version every shipped file declares: the newest the CUDA 12.0 driver loads.
PTX_VERSION = "8.0"
#: The target of every shipped file: the oldest architecture nvcc 13 still compiles for
#: (and new enough for WMMA, sm_70+).
TARGET = "sm_75"
#: nvcc options, after ``-ptx``, of a file built for :data:`TARGET`.  No ``--use_fast_math``:
#: expf/tanhf/division stay IEEE-accurate so the float32 results meet the 1e-5 tolerance of
#: the tests.
NVCC_FLAGS = ("-arch=compute_75", "-O3", "-std=c++17")


def nvcc_flags(stem: str) -> tuple[str, ...]:
    """nvcc options, after ``-ptx``, for ``stem.cu``: :data:`NVCC_FLAGS` with the virtual
    architecture of the file's target (``cudalibs.ptx.target``)."""
    return (f"-arch=compute_{target(stem).removeprefix('sm_')}",) + NVCC_FLAGS[1:]
#: How to run this script; the first line of every generated file names it.
COMMAND = "python ptx/build.py"

_HEADER_TAG = "// cudalibs-ptx"
_VERSION_RE = re.compile(r"^\.version\s+(\d+)\.(\d+)\s*$", re.M)
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_TARGET_RE = re.compile(r"^\.target\s+(sm_\d+a?)\s*$", re.M)


def _which(tool: str, given: str | None) -> str:
    path = given or shutil.which(tool)
    if not path:
        raise FileNotFoundError(f"{tool} not found on PATH; pass --{tool} /path/to/{tool}")
    return path


def nvcc_release(nvcc: str | None = None) -> str:
    """The ``Cuda compilation tools, release X.Y, VX.Y.Z`` line of ``nvcc --version``."""
    out = subprocess.run([_which("nvcc", nvcc), "--version"], capture_output=True, text=True,
                         check=True).stdout
    for line in out.splitlines():
        if line.startswith("Cuda compilation tools"):
            return line.strip()
    raise RuntimeError(f"cannot read the release from nvcc --version:\n{out}")


def _sources(stem: str, directory: Path) -> list[Path]:
    """``stem.cu`` and the local headers it includes (recursively), in a stable order."""
    first = directory / f"{stem}.cu"
    seen: list[Path] = []
    todo = [first]
    while todo:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.append(path)
        for name in _INCLUDE_RE.findall(path.read_text()):
            dep = directory / name
            if dep.exists():
                todo.append(dep)
    return seen


def source_hashes(stem: str, directory: Path = DIRECTORY) -> dict[str, str]:
    """``{file name: sha256 hex}`` of ``stem.cu`` and every local header it includes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in _sources(stem, directory)}


def parse_header(ptx: str) -> dict:
    """The build record at the top of a generated PTX.

    Returns
    -------
    dict
        ``sources`` ({file: sha256}), ``nvcc`` (release line), ``command`` and
        ``original_version`` (what nvcc declared before lowering).

    Raises
    ------
    ValueError
        The text has no cudalibs build header.
    """
    rec: dict = {"sources": {}}
    lines = ptx.splitlines()
    if not lines or not lines[0].startswith(_HEADER_TAG):
        raise ValueError("not a cudalibs-generated PTX (no build header)")
    for line in lines:
        if not line.startswith("//"):
            break
        body = line[2:].strip()
        key, _, value = body.partition(": ")
        if key == "source-sha256":
            name, digest = value.split()
            rec["sources"][name] = digest
        elif key in ("nvcc", "command", "original-version"):
            rec[key.replace("-", "_")] = value
    return rec


def tag_line(cu: str) -> str:
    """The first line of the PTX generated from ``cu``: what made it, and not to edit it."""
    return f"{_HEADER_TAG}: generated from {cu} by `{COMMAND}`; do not edit."


def generate(stem: str, *, nvcc: str | None = None, directory: Path = DIRECTORY) -> str:
    """Compile ``stem.cu`` and return the text of its ``.ptx`` (header included, not written).

    Raises
    ------
    subprocess.CalledProcessError
        nvcc failed (its output is in the exception).
    RuntimeError
        nvcc declared a PTX version this script does not recognise.
    """
    nvcc = _which("nvcc", nvcc)
    release = nvcc_release(nvcc)
    cu = f"{stem}.cu"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / f"{stem}.ptx"
        # Run in the source directory with a relative file name: nothing machine-specific can
        # reach the output, so a rebuild elsewhere is byte-identical.
        cmd = [nvcc, "-ptx", *nvcc_flags(stem), cu, "-o", str(out)]
        proc = subprocess.run(cmd, cwd=directory, capture_output=True, text=True)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, cmd, proc.stdout, proc.stderr)
        body = out.read_text()
    m = _VERSION_RE.search(body)
    if m is None:
        raise RuntimeError(f"nvcc output for {cu} has no .version line")
    original = f"{m.group(1)}.{m.group(2)}"
    want = tuple(int(x) for x in PTX_VERSION.split("."))
    if (int(m.group(1)), int(m.group(2))) > want:
        body = body[:m.start()] + f".version {PTX_VERSION}" + body[m.end():]
    header = [
        tag_line(cu),
        *(f"// source-sha256: {name} {digest}"
          for name, digest in source_hashes(stem, directory).items()),
        f"// nvcc: {release}",
        f"// command: nvcc -ptx {' '.join(nvcc_flags(stem))} {cu}",
        f"// original-version: {original}",
        f"// .version lowered to {PTX_VERSION} so drivers from CUDA 12.0 on load it; "
        f"ptxas -arch={target(stem)} accepts it as ISA {PTX_VERSION}.",
    ]
    return "\n".join(header) + "\n" + body


def validate(ptx_text: str, *, ptxas: str | None = None, arch: str | None = None) -> None:
    """Assemble ``ptx_text`` with ptxas for ``arch`` (default: the text's own ``.target``, else
    :data:`TARGET`); raise with ptxas' log if it refuses.

    ptxas checks every instruction against the declared ``.version``, so this proves the
    lowered file is legal at that ISA version.

    Raises
    ------
    RuntimeError
        ptxas rejected the PTX.
    """
    ptxas = _which("ptxas", ptxas)
    if arch is None:
        m = _TARGET_RE.search(ptx_text)
        arch = m.group(1) if m else TARGET
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx_text)
        proc = subprocess.run([ptxas, f"-arch={arch}", str(src), "-o", str(Path(tmp) / "k.cubin")],
                              capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"ptxas -arch={arch} rejected the PTX:\n{proc.stderr}{proc.stdout}")


def build(stems=None, *, nvcc: str | None = None, ptxas: str | None = None,
          check: bool = False, directory: Path = DIRECTORY, log=print) -> list[str]:
    """Regenerate (``check=False``) or compare (``check=True``) the PTX of ``stems``.

    Returns
    -------
    list of str
        The stems whose committed PTX differs from the rebuild (``check=True``), or that were
        rewritten.
    """
    changed = []
    for stem in stems or ENTRIES:
        text = generate(stem, nvcc=nvcc, directory=directory)
        validate(text, ptxas=ptxas)
        missing = [e for e in ENTRIES.get(stem, ()) if f".entry {e}(" not in text]
        if missing:
            raise RuntimeError(f"{stem}.ptx lacks the entries {missing}")
        path = directory / f"{stem}.ptx"
        old = path.read_text() if path.exists() else None
        if old != text:
            changed.append(stem)
            if not check:
                path.write_text(text)
        state = ("differs" if check else "rewritten") if old != text else "up to date"
        log(f"{stem}.ptx: {state}")
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("stems", nargs="*", help=f"files to build (default all: {', '.join(ENTRIES)})")
    parser.add_argument("--check", action="store_true",
                        help="compare with the committed PTX instead of writing; exit 1 on a difference")
    parser.add_argument("--nvcc", help="nvcc to use (default: the one on PATH)")
    parser.add_argument("--ptxas", help="ptxas to validate with (default: the one on PATH)")
    args = parser.parse_args(argv)
    unknown = [s for s in args.stems if s not in ENTRIES]
    if unknown:
        parser.error(f"unknown files {unknown}; choose from {list(ENTRIES)}")
    changed = build(args.stems or None, nvcc=args.nvcc, ptxas=args.ptxas, check=args.check)
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
