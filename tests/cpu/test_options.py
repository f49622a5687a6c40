"""The switches of cudalibs without a GPU: the Options object and its validation, the
process-wide and scoped ways of setting it, the defaults read from the environment (through
cudalibs._env, in a fresh interpreter where the process default matters), the environment
readers themselves and the loggers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import subprocess
import sys
import threading

import pytest

import cudalibs
from cudalibs import _env
from cudalibs.runtime import log, options as O

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _restore_process_options():
    """Every test starts from the defaults (whatever the environment of this run says) and
    leaves the process-wide options as it found them."""
    before = cudalibs.set_options(cudalibs.Options())
    yield
    cudalibs.set_options(before)
    assert cudalibs.options() == before


def _python(code: str, **env) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter whose environment has no CUDALIBS_* variable but
    those given (so the defaults are read from exactly them)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CUDALIBS_")}
    clean.update(env)
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, clean.get("PYTHONPATH")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=clean, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out


# -- the Options object ---------------------------------------------------------------------
def test_defaults_and_public_names():
    o = cudalibs.Options()
    assert (o.relaunch, o.gemm_backend, o.conv_graph_api, o.sdpa_autotune) == \
        (True, "auto", True, False)
    assert o.sdpa_lowerings == ("composite", "unified") == O.SDPA_LOWERINGS
    assert o.sdpa_backward_lowerings == ("composite", "composite_dp", "unified")
    assert cudalibs.Options is O.Options and cudalibs.option_context is O.option_context
    assert cudalibs.options is O.options and cudalibs.set_options is O.set_options
    assert isinstance(cudalibs.options(), cudalibs.Options)


@pytest.mark.parametrize("field", ["relaunch", "conv_graph_api", "sdpa_autotune"])
@pytest.mark.parametrize("value", [1, 0, "yes", None, 1.0])
def test_flags_must_be_bools(field, value):
    with pytest.raises(TypeError, match=f"Options.{field} must be True or False"):
        cudalibs.Options(**{field: value})


@pytest.mark.parametrize("kw, exc, match", [
    (dict(gemm_backend="magma"), ValueError, "gemm_backend must be one of"),
    (dict(gemm_backend="LT"), ValueError, "gemm_backend"),      # names are exact here
    (dict(sdpa_lowerings=("fast",)), ValueError, "sdpa_lowerings must name"),
    (dict(sdpa_lowerings=()), ValueError, "sdpa_lowerings must name"),
    (dict(sdpa_lowerings=("composite", "composite_dp")), ValueError, "composite_dp"),
    (dict(sdpa_backward_lowerings=("unified", "flash")), ValueError, "flash"),
    (dict(sdpa_backward_lowerings=5), TypeError, "sequence of names"),
])
def test_unknown_backends_and_lowerings_are_refused(kw, exc, match):
    with pytest.raises(exc, match=match):
        cudalibs.Options(**kw)


def test_lowerings_are_kept_as_tuples_and_options_are_frozen():
    o = cudalibs.Options(sdpa_lowerings="unified", sdpa_backward_lowerings=["composite"])
    assert o.sdpa_lowerings == ("unified",) and o.sdpa_backward_lowerings == ("composite",)
    hash(o)     # hashable: options can take part in cache keys
    assert o == cudalibs.Options(sdpa_lowerings=("unified",),
                                 sdpa_backward_lowerings=("composite",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.relaunch = False


def test_replace_validates_and_names_unknown_options():
    o = cudalibs.Options()
    p = o.replace(gemm_backend="cublas", relaunch=False)
    assert (p.gemm_backend, p.relaunch) == ("cublas", False) and o.gemm_backend == "auto"
    with pytest.raises(TypeError, match="unknown option.*relaunches"):
        o.replace(relaunches=False)
    with pytest.raises(TypeError, match="must be True or False"):
        o.replace(relaunch="off")


# -- set_options: process-wide ------------------------------------------------------------
def test_set_options_returns_the_previous_and_accepts_dicts_and_options():
    first = cudalibs.options()
    prev = cudalibs.set_options(gemm_backend="cublas")
    assert prev == first and cudalibs.options().gemm_backend == "cublas"
    prev = cudalibs.set_options({"relaunch": False})
    assert prev.gemm_backend == "cublas" and prev.relaunch == first.relaunch
    assert (cudalibs.options().gemm_backend, cudalibs.options().relaunch) == ("cublas", False)
    want = cudalibs.Options(sdpa_autotune=True)
    cudalibs.set_options(want)                   # an Options replaces every field
    assert cudalibs.options() == want
    # keywords apply over the dict or Options given with them
    cudalibs.set_options({"gemm_backend": "lt"}, gemm_backend="cublas")
    assert cudalibs.options().gemm_backend == "cublas"
    assert cudalibs.set_options() == cudalibs.options()      # nothing given: nothing changes


@pytest.mark.parametrize("call", [
    lambda: cudalibs.set_options(bogus=1),
    lambda: cudalibs.set_options({"bogus": 1}),
    lambda: cudalibs.set_options({"relaunch": False, "bogus": 1}),
])
def test_set_options_names_an_unknown_option_and_changes_nothing(call):
    before = cudalibs.options()
    with pytest.raises(TypeError, match="bogus"):
        call()
    assert cudalibs.options() == before


def test_set_options_refuses_what_is_neither_options_nor_a_dict():
    with pytest.raises(TypeError, match="Options, a dict or None"):
        cudalibs.set_options(["relaunch"])
    with pytest.raises(ValueError, match="gemm_backend"):
        cudalibs.set_options(gemm_backend="fastest")


def test_set_options_is_seen_by_every_thread():
    cudalibs.set_options(gemm_backend="lt")
    seen = []
    t = threading.Thread(target=lambda: seen.append(cudalibs.options().gemm_backend))
    t.start()
    t.join()
    assert seen == ["lt"]


def test_set_gemm_backend_is_the_gemm_backend_option():
    from cudalibs import cublas

    before = cudalibs.options().gemm_backend
    assert cublas.set_gemm_backend("CUBLAS") == before        # any case; the previous back
    assert cublas.gemm_backend() == "cublas" == cudalibs.options().gemm_backend
    assert cublas.set_gemm_backend("lt") == "cublas"
    with cudalibs.option_context(gemm_backend="auto"):
        assert cublas.gemm_backend() == "auto"
    assert cublas.gemm_backend() == "lt"
    with pytest.raises(TypeError, match="string"):
        cublas.set_gemm_backend(3)
    with pytest.raises(ValueError, match="gemm_backend"):
        cublas.set_gemm_backend("magma")
    assert cublas.gemm_backend() == "lt"


# -- option_context: this thread or task, for a block -------------------------------------
def test_option_context_yields_the_options_in_force_and_restores_them():
    before = cudalibs.options()
    with cudalibs.option_context(relaunch=False) as o:
        assert o is cudalibs.options() and o.relaunch is False
        assert o.replace(relaunch=before.relaunch) == before      # only what was asked
    assert cudalibs.options() == before


def test_option_context_accepts_dicts_and_options():
    with cudalibs.option_context({"gemm_backend": "cublas"}, relaunch=False) as o:
        assert (o.gemm_backend, o.relaunch) == ("cublas", False)
    want = cudalibs.Options(conv_graph_api=False, sdpa_autotune=True)
    with cudalibs.option_context(want) as o:
        assert o == want and cudalibs.options() == want


def test_option_context_names_an_unknown_option():
    before = cudalibs.options()
    with pytest.raises(TypeError, match="relaunches"):
        with cudalibs.option_context(relaunches=False):
            pytest.fail("the block must not run")
    with pytest.raises(TypeError, match="bogus"):
        with cudalibs.option_context({"bogus": True}):
            pytest.fail("the block must not run")
    assert cudalibs.options() == before


def test_nested_contexts_restore_the_outer_one_even_on_errors():
    before = cudalibs.options()
    with cudalibs.option_context(relaunch=False):
        with cudalibs.option_context(gemm_backend="lt"):
            o = cudalibs.options()
            assert (o.relaunch, o.gemm_backend) == (False, "lt")
        o = cudalibs.options()
        assert (o.relaunch, o.gemm_backend) == (False, before.gemm_backend)
        with pytest.raises(RuntimeError):
            with cudalibs.option_context(sdpa_autotune=True):
                raise RuntimeError("inside")
        assert cudalibs.options().sdpa_autotune is before.sdpa_autotune
        assert cudalibs.options().relaunch is False
    assert cudalibs.options() == before


def test_option_context_is_not_seen_by_another_thread():
    seen = {}
    entered, checked = threading.Event(), threading.Event()

    def other():
        entered.wait(10)
        seen["other"] = cudalibs.options().relaunch
        checked.set()

    t = threading.Thread(target=other)
    t.start()
    with cudalibs.option_context(relaunch=False):
        entered.set()
        assert checked.wait(10)
        seen["mine"] = cudalibs.options().relaunch
    t.join()
    assert seen == {"other": True, "mine": False}


def test_a_scope_keeps_its_options_when_the_process_default_changes():
    with cudalibs.option_context(gemm_backend="lt"):
        cudalibs.set_options(relaunch=False)
        # the scope holds the whole Options it was opened with
        assert cudalibs.options().relaunch is True
        assert cudalibs.options().gemm_backend == "lt"
    assert cudalibs.options().relaunch is False


def test_option_context_is_per_asyncio_task():
    async def task(backend, log_):
        with cudalibs.option_context(gemm_backend=backend):
            for _ in range(3):
                await asyncio.sleep(0)       # let the other task run inside its own scope
                log_.append((backend, cudalibs.options().gemm_backend))

    async def main():
        log_ = []
        await asyncio.gather(task("lt", log_), task("cublas", log_))
        return log_

    log_ = asyncio.run(main())
    assert len(log_) == 6 and all(want == got for want, got in log_)


def test_resolve_applies_one_calls_options():
    before = cudalibs.options()
    assert O.resolve() is before
    assert O.resolve({"gemm_backend": "lt"}) == before.replace(gemm_backend="lt")
    assert cudalibs.options() == before                # for that call only
    given = cudalibs.Options(relaunch=False)
    assert O.resolve(given) is given
    with pytest.raises(TypeError, match="bogus"):
        O.resolve({"bogus": 1})


def test_a_calls_unknown_option_is_refused_by_name_before_its_operands():
    from cudalibs import cublas

    # None operands would be refused too, with another message: the options come first.
    for call in (lambda: cublas.gemm(None, None, options={"gemm_backends": "lt"}),
                 lambda: cublas.gemm_strided_batched(None, None, options={"gemm_backends": 1}),
                 lambda: cublas.matmul(None, None, options={"gemm_backends": "lt"})):
        with pytest.raises(TypeError, match="gemm_backends"):
            call()


# -- defaults from the environment (a fresh interpreter: read once, at first use) ----------
_SHOW = ("import json, cudalibs\n"
         "from cudalibs import cublas\n"
         "o = cudalibs.options()\n"
         "print(json.dumps([o.relaunch, o.gemm_backend, cublas.gemm_backend()]))\n")


@pytest.mark.parametrize("env, want", [
    ({}, [True, "auto", "auto"]),
    ({"CUDALIBS_RELAUNCH": "0"}, [False, "auto", "auto"]),
    ({"CUDALIBS_RELAUNCH": " Off "}, [False, "auto", "auto"]),
    ({"CUDALIBS_RELAUNCH": "maybe"}, [True, "auto", "auto"]),     # malformed: the default
    ({"CUDALIBS_GEMM_BACKEND": "cublas"}, [True, "cublas", "cublas"]),
    ({"CUDALIBS_GEMM_BACKEND": "LT"}, [True, "lt", "lt"]),
    ({"CUDALIBS_GEMM_BACKEND": "magma"}, [True, "auto", "auto"]),
    ({"CUDALIBS_RELAUNCH": "0", "CUDALIBS_GEMM_BACKEND": "cublas"}, [False, "cublas", "cublas"]),
])
def test_defaults_come_from_the_environment(env, want):
    out = _python(_SHOW, **env)
    assert json.loads(out.stdout) == want
    assert out.stderr == ""


def test_the_environment_is_read_once_when_cudalibs_is_imported():
    code = ("import os, json\n"
            "os.environ['CUDALIBS_GEMM_BACKEND'] = 'cublas'\n"   # before the import: obeyed
            "import cudalibs\n"
            "first = cudalibs.options().gemm_backend\n"
            "os.environ['CUDALIBS_GEMM_BACKEND'] = 'lt'\n"       # after: the default stays
            "os.environ['CUDALIBS_RELAUNCH'] = '0'\n"
            "o = cudalibs.options()\n"
            "print(json.dumps([first, o.gemm_backend, o.relaunch]))\n")
    assert json.loads(_python(code).stdout) == ["cublas", "cublas", True]


# -- the environment readers ----------------------------------------------------------------
@pytest.mark.parametrize("value, default, want", [
    ("0", True, False), ("false", True, False), ("NO", True, False), (" off ", True, False),
    ("1", False, True), ("TRUE", False, True), ("yes", False, True), ("On", False, True),
    ("maybe", True, True), ("maybe", False, False), ("", True, True), ("  ", False, False),
    ("2", False, False), (None, True, True), (None, False, False),
])
def test_flag(monkeypatch, value, default, want):
    if value is None:
        monkeypatch.delenv("CUDALIBS_TEST_FLAG", raising=False)
    else:
        monkeypatch.setenv("CUDALIBS_TEST_FLAG", value)
    assert _env.flag("CUDALIBS_TEST_FLAG", default) is want


@pytest.mark.parametrize("value, choices, want", [
    ("LT", ("auto", "lt"), "lt"), (" auto ", ("auto", "lt"), "auto"),
    ("fastest", ("auto", "lt"), "dflt"), ("", ("auto", "lt"), "dflt"),
    ("  ", None, "dflt"), ("Anything", None, "anything"), (None, ("auto",), "dflt"),
])
def test_text(monkeypatch, value, choices, want):
    if value is None:
        monkeypatch.delenv("CUDALIBS_TEST_TEXT", raising=False)
    else:
        monkeypatch.setenv("CUDALIBS_TEST_TEXT", value)
    assert _env.text("CUDALIBS_TEST_TEXT", "dflt", choices) == want


@pytest.mark.parametrize("value, want", [
    ("12", 12), (" 7 ", 7),
    ("abc", 1024), ("1.5", 1024), ("", 1024), ("1e3", 1024), (None, 1024),   # malformed
    ("0", 1), ("-5", 1),        # whole numbers below the minimum are raised to it
])
def test_integer(monkeypatch, value, want):
    if value is None:
        monkeypatch.delenv("CUDALIBS_TEST_INT", raising=False)
    else:
        monkeypatch.setenv("CUDALIBS_TEST_INT", value)
    assert _env.integer("CUDALIBS_TEST_INT", 1024) == want


def test_integer_minimum(monkeypatch):
    monkeypatch.setenv("CUDALIBS_TEST_INT", "3")
    assert _env.integer("CUDALIBS_TEST_INT", 64, minimum=8) == 8
    monkeypatch.setenv("CUDALIBS_TEST_INT", "16")
    assert _env.integer("CUDALIBS_TEST_INT", 64, minimum=8) == 16


def test_the_other_readers(monkeypatch):
    for var in ("CUDALIBS_TUNING_CACHE", "CUDALIBS_CACHE_DIR", "CUDALIBS_LOG", "CUDA_HOME",
                "CUDA_PATH", "CUDALIBS_CUDNN_PATH", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert _env.tuning_cache() is None and _env.cache_dir() is None
    assert _env.log_level() is None and _env.toolkit_roots() == ()
    assert _env.library_path("CUDALIBS_CUDNN_PATH") is None
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", "   ")
    assert _env.tuning_cache() == ""                       # set to blanks: memory only
    monkeypatch.setenv("CUDALIBS_TUNING_CACHE", " /tmp/t.json ")
    assert _env.tuning_cache() == "/tmp/t.json"
    monkeypatch.setenv("CUDALIBS_CACHE_DIR", "  ")
    assert _env.cache_dir() is None                        # blanks are not a directory
    monkeypatch.setenv("CUDALIBS_LOG", " DEBUG ")
    assert _env.log_level() == "debug"
    monkeypatch.setenv("CUDA_PATH", "/opt/cuda")
    assert _env.toolkit_roots() == ("/opt/cuda",)
    monkeypatch.setenv("CUDA_HOME", "/usr/local/cuda")
    assert _env.toolkit_roots() == ("/usr/local/cuda", "/opt/cuda")
    monkeypatch.setenv("CUDALIBS_CUDNN_PATH", "")
    assert _env.library_path("CUDALIBS_CUDNN_PATH") is None
    monkeypatch.setenv("CUDALIBS_CUDNN_PATH", "/x/libcudnn.so.9")
    assert _env.library_path("CUDALIBS_CUDNN_PATH") == "/x/libcudnn.so.9"
    assert _env.first_set("CUDALIBS_CACHE_DIR", "CUDA_HOME") == "/usr/local/cuda"
    assert _env.home_cache().endswith(os.path.join(".cache", "cudalibs"))


def test_local_rank_reads_the_launchers_variables_in_order(monkeypatch):
    from cudalibs.nccl import bootstrap

    for var in _env.LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(var, raising=False)
    assert _env.local_rank() is None
    monkeypatch.setenv("SLURM_LOCALID", "3")
    assert _env.local_rank() == 3
    monkeypatch.setenv("LOCAL_RANK", "x")        # not a number: the next variable is read
    assert _env.local_rank() == 3
    monkeypatch.setenv("LOCAL_RANK", " 1 ")
    assert _env.local_rank() == 1 == bootstrap.local_rank_from_env()


def test_every_environment_read_goes_through_env():
    """cudalibs._env is where the variables are read, and documented: no other module reads
    os.environ or calls getenv, and every variable a reader is given is listed."""
    import ast
    import pathlib
    import re

    root = pathlib.Path(cudalibs.__file__).parent
    named = set()
    for path in root.rglob("*.py"):
        if path.name == "_env.py" and path.parent == root:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv",
                                                                  "environb"):
                raise AssertionError(f"{path.relative_to(root)} reads the environment itself")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    isinstance(node.func.value, ast.Name) and node.func.value.id == "_env":
                named |= {a.value for a in node.args if isinstance(a, ast.Constant)
                          and isinstance(a.value, str) and a.value.isupper()}
    assert {"CUDALIBS_RELAUNCH", "CUDALIBS_GEMM_BACKEND", "CUDALIBS_PLAN_CACHE_SIZE"} <= named
    listed = " ".join(_env.VARIABLES)
    for name in named:
        assert name in listed or re.fullmatch(r"CUDALIBS_[A-Z]+_PATH", name), name


# -- the loggers ----------------------------------------------------------------------------
def test_the_root_logger_has_a_null_handler_and_children():
    root = logging.getLogger("cudalibs")
    assert log.logger is root
    assert any(isinstance(h, logging.NullHandler) for h in root.handlers)
    assert log.get("runtime") is logging.getLogger("cudalibs.runtime")
    assert log.get("runtime").parent is root


def test_nothing_is_printed_by_default():
    # Without a handler on the way, Python's last-resort handler would print a warning.
    code = ("from cudalibs.runtime import log\n"
            "log.get('runtime').warning('should not be printed')\n"
            "log.get('cudnn').error('nor this')\n")
    out = _python(code)
    assert out.stderr == "" and out.stdout == ""


@pytest.mark.parametrize("level, shown, hidden", [
    ("debug", ["DEBUG: planned", "WARNING: refused"], []),
    ("INFO", ["WARNING: refused"], ["planned"]),
    ("warning", ["WARNING: refused"], ["planned"]),
])
def test_cudalibs_log_prints_to_standard_error(level, shown, hidden):
    code = ("from cudalibs.runtime import log\n"
            "log.get('runtime').debug('planned %s', 'x')\n"
            "log.get('runtime').warning('refused')\n")
    out = _python(code, CUDALIBS_LOG=level)
    assert out.stdout == ""
    for text in shown:
        assert f"cudalibs.runtime: {text}" in out.stderr
    for text in hidden:
        assert text not in out.stderr


def test_an_unknown_log_level_prints_nothing():
    out = _python("from cudalibs.runtime import log\n"
                  "log.get('runtime').warning('hidden')\n", CUDALIBS_LOG="verbose")
    assert out.stderr == ""


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def test_logger():
    lg = log.get("test_once")
    handler = _Records()
    lg.addHandler(handler)
    lg.setLevel(logging.DEBUG)
    yield lg, handler.messages
    lg.removeHandler(handler)
    lg.setLevel(logging.NOTSET)


def test_once_logs_once_per_key(test_logger):
    lg, messages = test_logger
    k1, k2 = ("refused", object()), ("refused", object())     # keys no other test uses
    for _ in range(3):
        log.once(lg, logging.INFO, k1, "shape %s refused", "a")
    log.once(lg, logging.INFO, k2, "shape %s refused", "b")
    log.once(lg, logging.WARNING, k1, "not again")
    assert messages == ["shape a refused", "shape b refused"]


def test_once_keeps_a_key_unsaid_while_its_level_is_off(test_logger):
    lg, messages = test_logger
    key = ("failed", object())
    lg.setLevel(logging.WARNING)
    log.once(lg, logging.INFO, key, "while off")
    lg.setLevel(logging.DEBUG)
    log.once(lg, logging.INFO, key, "once on")
    log.once(lg, logging.INFO, key, "once on")
    assert messages == ["once on"]
