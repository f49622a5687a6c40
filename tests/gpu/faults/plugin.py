"""pytest plugin: run a test session with one fault of the catalog installed.

Load it with ``-p tests.gpu.faults.plugin``.  Without ``CUDALIBS_FAULT`` in the environment it
does nothing.  With ``CUDALIBS_FAULT=<name>`` it installs that fault of
:mod:`tests.gpu.faults.catalog` when pytest is configured -- before any test module is
imported, so a test's own ``from cudalibs... import name`` sees the fault too -- and removes it
when pytest ends; ``CUDALIBS_FAULT=none`` is the control run: the same session settings, no
fault.  The header names the fault.

A fault or control session also:

- runs hypothesis without its example database and without shrinking, reporting one failure
  per test (a fault run must neither depend on what an earlier run stored nor spend minutes
  shrinking an example that already failed);
- classifies each failing test: ``assertion`` (an ``assert``, a numpy testing assertion,
  ``pytest.fail`` or ``pytest.raises``' "DID NOT RAISE": the test noticed), ``environment``
  (a skip that ``CUDALIBS_REQUIRE_GPU=1`` turned into a failure, a missing second oracle), or
  ``exception:<type>`` (anything else raised: the fault crashed the code rather than being
  noticed);
- with ``--fault-stop-on-catch``, stops after the first ``assertion`` failure (failures of the
  other kinds do not stop it);
- writes the outcomes as JSON to ``$CUDALIBS_FAULT_REPORT`` when that is set.
"""

from __future__ import annotations

import json
import os

import pytest

from ._inject import import_cudalibs

#: The variable naming the fault to install.
FAULT_VARIABLE = "CUDALIBS_FAULT"
#: Where the session's outcomes are written (JSON), when set.
REPORT_VARIABLE = "CUDALIBS_FAULT_REPORT"
#: The value of :data:`FAULT_VARIABLE` for a control run.
CONTROL = "none"
#: The hypothesis profile of fault and control sessions.
PROFILE = "cudalibs-faults"


def pytest_addoption(parser):
    parser.getgroup("cudalibs faults").addoption(
        "--fault-stop-on-catch", action="store_true", default=False,
        help=f"with {FAULT_VARIABLE} set: stop after the first test that fails by an "
             "assertion (the fault is caught)")


def _hypothesis_profile() -> None:
    """Load a profile like the one in force, without the example database, shrinking and
    multiple-bug reports."""
    from hypothesis import Phase, settings

    base = settings.default
    phases = tuple(p for p in base.phases if p not in (Phase.shrink, Phase.explain))
    settings.register_profile(PROFILE, parent=base, database=None, phases=phases,
                              report_multiple_bugs=False)
    settings.load_profile(PROFILE)


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    name = os.environ.get(FAULT_VARIABLE, "").strip()
    if not name:
        return
    # Imported here: without the variable the plugin imports nothing of cudalibs.
    from . import catalog

    fault = None
    if name != CONTROL:
        try:
            fault = catalog.get(name)
        except KeyError as exc:
            raise pytest.UsageError(f"{FAULT_VARIABLE}={name}: {exc.args[0]}") from None
    _hypothesis_profile()
    config.pluginmanager.register(FaultSession(config, name, fault), "cudalibs-fault-session")


def _leaves(exc):
    """``exc`` and, for an exception group, every exception inside it."""
    yield exc
    for inner in getattr(exc, "exceptions", ()) or ():
        yield from _leaves(inner)


def failure_kind(excinfo) -> str:
    """``"assertion"``, ``"environment"`` or ``"exception:<type>"`` (see the module
    docstring) of a failing phase's exception info."""
    if excinfo is None:
        return "environment"
    value = excinfo.value
    if isinstance(value, pytest.skip.Exception):
        return "environment"                # a skip turned into a failure
    if isinstance(value, pytest.fail.Exception):
        return "environment" if str(value).startswith("CUDALIBS_REQUIRE_GPU") else "assertion"
    if any(isinstance(e, AssertionError) for e in _leaves(value)):
        return "assertion"
    return f"exception:{type(value).__name__}"


def _message(report) -> str:
    """The first line of what a failing report says (its crash message when it has one)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    text = getattr(crash, "message", None) or str(report.longrepr or "")
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else ""


class FaultSession:
    """The fault (or none) installed for one pytest session, and what its tests did."""

    def __init__(self, config, name: str, fault):
        self.config = config
        self.name = name
        self.fault = fault
        self.monkeypatch = pytest.MonkeyPatch()
        self.where: list[str] = []
        self.failures: list[dict] = []
        self.collection_errors: list[dict] = []
        self.counts: dict[str, int] = {}
        self.written = False
        # Every module of cudalibs imported in control runs too, as installing a fault does:
        # the two kinds of session differ by the fault alone.
        import_cudalibs()
        if fault is not None:
            try:
                self.where = fault.apply(self.monkeypatch)
            except Exception as exc:
                self.monkeypatch.undo()
                raise pytest.UsageError(f"{FAULT_VARIABLE}={name}: the fault cannot be "
                                        f"installed: {type(exc).__name__}: {exc}") from None

    def pytest_report_header(self, config):
        if self.fault is None:
            return [f"cudalibs fault: none (control run, {FAULT_VARIABLE}={CONTROL})"]
        f = self.fault
        return [f"cudalibs fault: {f.name} ({f.library}): {f.description}",
                f"cudalibs fault installed at: {', '.join(self.where)}"]

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        # tryfirst makes this wrapper the outermost: it sees the report as the conftests
        # left it (a skip turned into a failure, say).
        report = yield
        if report.when == "call" or report.outcome != "passed":
            key = f"{report.when}:{report.outcome}"
            self.counts[key] = self.counts.get(key, 0) + 1
        if report.failed:
            kind = failure_kind(call.excinfo)
            self.failures.append({"nodeid": item.nodeid, "when": report.when, "kind": kind,
                                  "message": _message(report)})
            if kind == "assertion" and self.config.getoption("fault_stop_on_catch"):
                item.session.shouldfail = f"fault caught by {item.nodeid}"
        return report

    def pytest_collectreport(self, report):
        if report.failed:
            self.collection_errors.append({"nodeid": report.nodeid,
                                           "message": str(report.longrepr)[-2000:]})

    def pytest_sessionfinish(self, session, exitstatus):
        self.write(int(exitstatus))

    def pytest_unconfigure(self, config):
        self.monkeypatch.undo()
        if not self.written:
            self.write(None)

    def write(self, exitstatus) -> None:
        """The outcomes as JSON into ``$CUDALIBS_FAULT_REPORT`` (nothing when unset)."""
        self.written = True
        path = os.environ.get(REPORT_VARIABLE)
        if not path:
            return
        data = {"fault": self.name, "installed_at": self.where, "exitstatus": exitstatus,
                "counts": self.counts, "failures": self.failures,
                "collection_errors": self.collection_errors}
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
