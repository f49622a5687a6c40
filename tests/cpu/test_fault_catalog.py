"""The fault catalog of tests/gpu/faults, checked without a GPU.

Enough faults, unique names, targets that exist in the GPU tier, and patches that still find
what they replace: a refactor that renames a function, a mode or a C call makes these tests
fail instead of leaving a fault silently inert.  Each fault is also installed and removed
here (installing one touches no GPU), its replacement checked to be in place under every
name cudalibs binds the original to.  The last tests drive the injection helpers, the pytest
plugin (in a subprocess, on a generated suite) and the runner's bookkeeping.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:       # plain `pytest` does not put the checkout on the path
    sys.path.insert(0, str(ROOT))

from tests.gpu.faults import _inject, catalog  # noqa: E402
from tests.gpu.faults import __main__ as runner  # noqa: E402

FAULTS = catalog.FAULTS
LIBRARIES = {"cuBLAS", "cuDNN", "driver", "runtime", "kernels", "NCCL"}
GPU_TIER = ROOT / "tests" / "gpu"


def test_enough_faults_with_unique_kebab_case_names_over_every_library():
    assert len(FAULTS) >= 30
    names = catalog.names()
    assert len(set(names)) == len(names), sorted(n for n in names if names.count(n) > 1)
    for f in FAULTS:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)+", f.name), f.name
        assert f.library in LIBRARIES, (f.name, f.library)
        assert f.description and "\n" not in f.description, f.name
        assert f.patches, f.name
    by_library = {lib: sum(f.library == lib for f in FAULTS) for lib in LIBRARIES}
    assert all(n >= 2 for n in by_library.values()), by_library
    assert catalog.get(names[0]) is FAULTS[0]
    with pytest.raises(KeyError, match="no fault named"):
        catalog.get("no-such-fault")


def _defined(path: Path) -> set[str]:
    """Test functions of a module, as ``name`` and ``Class::name``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(node.name)
        elif isinstance(node, ast.ClassDef):
            out.update(f"{node.name}::{m.name}" for m in node.body
                       if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return out


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_targets_are_tests_of_the_gpu_tier(fault):
    assert fault.targets, fault.name
    for target in fault.targets:
        file, _, node = target.partition("::")
        path = ROOT / file
        assert path.is_file(), f"{fault.name}: {file} does not exist"
        assert GPU_TIER in path.resolve().parents, f"{fault.name}: {file} is not a GPU test"
        assert path.name.startswith("test_"), f"{fault.name}: {file} is not a test module"
        if node:
            name = re.sub(r"\[.*\]$", "", node)
            assert name in _defined(path), f"{fault.name}: no test {name} in {file}"


def _cudalibs_bindings(obj) -> list[str]:
    """Every module attribute of cudalibs that is ``obj``."""
    return [f"{m}:{n}" for m, mod in list(sys.modules.items())
            if mod is not None and (m == "cudalibs" or m.startswith("cudalibs."))
            for n, v in list(vars(mod).items()) if v is obj]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_patches_find_their_targets_and_install_everywhere(fault, monkeypatch):
    fault.verify()
    originals = [p.locate()[3] for p in fault.patches]
    where = fault.apply(monkeypatch)
    assert len(where) >= len(fault.patches), where
    for p, original in zip(fault.patches, originals):
        now = p.locate()[3]
        assert now is not original, f"{p} left the original in place"
        if p.everywhere and callable(original):
            assert _cudalibs_bindings(original) == [], \
                f"{p}: the original is still bound there"
    monkeypatch.undo()
    for p, original in zip(fault.patches, originals):
        assert p.locate()[3] is original, f"{p} was not undone"


def test_a_patch_that_misses_its_target_says_so():
    with pytest.raises(LookupError, match="no_such_function"):
        _inject.Patch("cudalibs.cublas.gemm", "no_such_function", lambda o: o).verify()
    with pytest.raises(LookupError, match=r"POOLING_MODES\[no_such_mode\]"):
        _inject.Patch("cudalibs.cudnn.descriptors", "POOLING_MODES[no_such_mode]",
                      lambda o: o).verify()
    with pytest.raises(LookupError, match="cannot import"):
        _inject.Patch("cudalibs.no_such_module", "x", lambda o: o).verify()
    with pytest.raises(LookupError, match="no shipped kernel"):
        _inject.kernel_launch(r"no_such_kernel_f32", lambda g, a: (g, a)).verify()
    with pytest.raises(LookupError, match="cuNoSuchFunction"):
        _inject.c_call("cudalibs.driver.array", "cuNoSuchFunction", lambda a: a).verify()
    with pytest.raises(LookupError, match="no function no_such_caller"):
        _inject.c_call("cudalibs.driver.array", "cuMemcpyDtoDAsync_v2", lambda a: a,
                       caller="no_such_caller").verify()


PROBE = '''
import types


class _Lazy:
    table = (types.SimpleNamespace(name="f"), types.SimpleNamespace(name="g"))

    def __call__(self):
        return BOUND


class _Bound:
    def f(self, *args):
        return ("f",) + args

    def g(self, *args):
        return ("g",) + args

    def unchecked(self, name):
        return getattr(self, name)


BOUND = _Bound()
_lib = types.SimpleNamespace(get=_Lazy(), CONSTANT=7)


def outer(x):
    return _lib.get().f(x, 1)


def other(x):
    return _lib.get().f(x, 1), _lib.get().g(x), _lib.get().unchecked("f")(x, 2)
'''


def test_c_call_changes_one_function_from_one_caller(tmp_path, monkeypatch):
    (tmp_path / "fault_probe.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import fault_probe

    scoped = _inject.c_call("fault_probe", "f", lambda a: [10 * a[0]] + a[1:], caller="outer")
    scoped.verify()
    scoped.apply(monkeypatch)
    assert fault_probe.outer(2) == ("f", 20, 1)
    assert fault_probe.other(2) == (("f", 2, 1), ("g", 2), ("f", 2, 2))
    assert fault_probe._lib.CONSTANT == 7
    monkeypatch.undo()
    monkeypatch.syspath_prepend(str(tmp_path))
    everywhere = _inject.c_call("fault_probe", "f", lambda a: None if a[0] < 0 else a)
    everywhere.apply(monkeypatch)
    assert fault_probe.outer(-1) == 0            # the call skipped reports success
    assert fault_probe.other(3) == (("f", 3, 1), ("g", 3), ("f", 3, 2))
    assert fault_probe.other(-3)[2] == 0         # the unchecked entry point too


SUITE = '''
from cudalibs.driver import _copy


def test_a_raises():
    raise ValueError("not an assertion")


def test_b_height():
    # a (3, 4) float32 block copied from rows 16 bytes apart into rows 64 bytes apart
    assert _copy.plan((3, 4), (64, 4), (16, 4), 4)[1] == 3


def test_c_after_the_catch():
    pass
'''


def _run_plugin(tmp_path, fault: str, *options) -> tuple[str, dict]:
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    (suite / "test_probe.py").write_text(textwrap.dedent(SUITE))
    report = tmp_path / f"{fault}.json"
    env = dict(os.environ, CUDALIBS_FAULT=fault, CUDALIBS_FAULT_REPORT=str(report),
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.gpu.faults.plugin",
                           "-p", "no:cacheprovider", "--rootdir", str(suite), str(suite),
                           *options], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    return proc.stdout + proc.stderr, json.loads(report.read_text())


def test_the_plugin_installs_reports_and_stops_at_the_catch(tmp_path):
    out, data = _run_plugin(tmp_path, "driver-copy-last-row-dropped", "--fault-stop-on-catch")
    assert "cudalibs fault: driver-copy-last-row-dropped (driver)" in out, out
    assert data["installed_at"] == ["cudalibs.driver._copy:plan"]
    kinds = {f["nodeid"].split("::")[1]: f["kind"] for f in data["failures"]}
    assert kinds == {"test_a_raises": "exception:ValueError", "test_b_height": "assertion"}, data
    assert "test_c_after_the_catch" not in out and data["counts"].get("call:passed", 0) == 0

    out, data = _run_plugin(tmp_path, "none")
    assert "cudalibs fault: none (control run" in out, out
    assert [f["nodeid"].split("::")[1] for f in data["failures"]] == ["test_a_raises"]
    assert data["counts"]["call:passed"] == 2 and data["exitstatus"] == 1


def test_the_plugin_refuses_an_unknown_fault(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    env = dict(os.environ, CUDALIBS_FAULT="no-such-fault", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.gpu.faults.plugin",
                           "--rootdir", str(suite), str(suite)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4 and "no fault named 'no-such-fault'" in proc.stderr, proc.stderr


def test_nothing_in_the_fault_package_is_collected_by_pytest():
    package = GPU_TIER / "faults"
    for path in package.iterdir():
        assert not re.fullmatch(r"test_.*\.py|.*_test\.py|conftest\.py", path.name), path


def test_control_runs_cover_every_target_once_per_file():
    faults = [_inject.Fault("a-b", "driver", "d", ("tests/gpu/x/test_a.py::t1",
                                                  "tests/gpu/x/test_b.py")),
              _inject.Fault("c-d", "driver", "d", ("tests/gpu/x/test_a.py::t2",
                                                  "tests/gpu/x/test_b.py::t3"))]
    assert runner.control_targets(faults) == {
        "tests/gpu/x/test_a.py": ("tests/gpu/x/test_a.py::t1", "tests/gpu/x/test_a.py::t2"),
        "tests/gpu/x/test_b.py": ("tests/gpu/x/test_b.py",)}


def _judged(control: bool, failures, returncode=1, ran=3, errors=()):
    job = runner.Job("x", "none" if control else "x", ("t",), control)
    data = {"failures": [{"nodeid": n, "kind": k} for n, k in failures],
            "collection_errors": [{"message": m} for m in errors],
            "counts": {"call:passed": ran}}
    runner._judge(job, data, returncode, 60)
    return job


def test_the_runner_tells_caught_from_crashed_missed_and_broken():
    job = _judged(False, [("t1", "exception:ValueError"), ("t2", "assertion")])
    assert job.status == "caught" and job.caught_by == ["t2"]
    assert _judged(False, [("t1", "exception:CudaError")]).status == "exception only"
    assert _judged(False, [("t1", "environment")]).status == "not run"
    assert _judged(False, [], returncode=0).status == "missed"
    assert _judged(False, [], returncode=5, ran=0).status == "broken"
    assert _judged(False, [], errors=["ImportError"]).status == "broken"
    assert _judged(False, [("t1", "assertion")], returncode=None).status == "caught"
    assert _judged(False, [], returncode=None).status == "timeout"
    assert _judged(True, [], returncode=0).status == "pass"
    assert _judged(True, [("t1", "assertion")]).status == "fail"
    assert _judged(True, [], returncode=0, ran=0).status == "fail"
    many = [f"tests/gpu/x/test_a.py::t{i}" for i in range(5)]
    assert runner.caught_cell(many) == \
        "x/test_a.py::t0, x/test_a.py::t1, x/test_a.py::t2 and 2 more"


# -- what some faults do, where it shows without a GPU ------------------------------------------
def test_square_transpose_fault_drops_the_flag_of_square_views_only(monkeypatch):
    from cudalibs.cublas import _common

    def flags(m, k, n):
        # a: the transposed view of a C-ordered (k, m) float32 array; b: C-ordered
        args = _common.gemm_args((m, k), (4, 4 * m), (k, n), (4 * n, 4), None, 4)
        return args.transb, args.ldb, args.transa

    assert flags(6, 6, 5) == (_common.OP_T, 6, _common.OP_N)
    catalog.get("cublas-square-transpose-ignored").apply(monkeypatch)
    # the square view read as if C-ordered, with a leading dimension inside its memory
    assert flags(6, 6, 5) == (_common.OP_N, 6, _common.OP_N)
    assert flags(6, 4, 5) == (_common.OP_T, 6, _common.OP_N)     # not square: as before
    assert _common.op_ld(1, 1, 1, 1) == (_common.OP_N, 1)


def test_transpose_batch_fault_passes_a_batch_of_one():
    launches = []
    patch, = catalog.get("kernels-transpose-batch-one").patches
    launch = patch.make(lambda *call: launches.append(call))
    launch(None, "transpose_b32", (2, 1, 3), (32, 8, 1), (0x1000, 0x2000, 3, 5, 40), None)
    launch(None, "add_f32", (4, 1, 1), (256, 1, 1), (0x1000, 0x2000, 0x3000, 1000), None)
    assert launches[0][2] == (2, 1, 3) and launches[0][4] == (0x1000, 0x2000, 1, 5, 40)
    assert launches[1][4] == (0x1000, 0x2000, 0x3000, 1000)


def _attention_spec(causal: bool, backward: bool = False):
    from cudalibs.cudnn.attention import lower

    b, h, s_q, s_kv, d = 1, 2, 64, 96, 64
    q, kv = (h * s_q * d, s_q * d, d, 1), (h * s_kv * d, s_kv * d, d, 1)
    grads = (q, q, kv, kv) if backward else ((), (), (), ())
    return lower.Spec(np.dtype(np.float16), b, h, h, s_q, s_kv, d, d, q, kv, kv, q, 0.125,
                      causal, None, False, 0.0, True, True, False, backward, *grads)


@pytest.mark.cudnn_finalize
def test_shifted_causal_mask_fault_binds_a_shift_of_one(monkeypatch):
    import ctypes

    from cudalibs.cudnn.attention import lower

    uids = dict(lower.UIDS)
    shift = catalog.CAUSAL_SHIFT
    assert shift not in lower.forward_graph(_attention_spec(True)).slots
    catalog.get("cudnn-sdpa-causal-mask-shifted").apply(monkeypatch)
    assert lower.SLOTS == tuple(sorted(lower.UIDS, key=lower.UIDS.get))
    assert lower.UIDS[shift] == max(uids.values()) + 1 < lower._FIRST_VIRTUAL
    for backward in (False, True):
        build = lower.backward_graph if backward else lower.forward_graph
        low = build(_attention_spec(True, backward))
        assert low.graph.finalized and low.slots[-1] == shift
        assert list(low.uids) == sorted(low.uids)
        value = low.scalars[shift]
        assert isinstance(value, ctypes.c_int32) and value.value == 1
    assert shift not in lower.forward_graph(_attention_spec(False)).slots
    monkeypatch.undo()
    assert lower.UIDS == uids and shift not in lower.forward_graph(_attention_spec(True)).slots
