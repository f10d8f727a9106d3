"""The pytest plugin of llm_datadist_ffi: engine topologies, faults, the alias, lint as errors.

Installed with the package (entry point ``pytest11``); nothing to configure. It gives

- ``topology``: a factory, ``topology(prompts=2, decoders=1, api="v2")``, of engine
  processes (``llm_datadist_ffi.testing.topology.Topology``), all ended after the test,
  also when it fails or a process hangs; a failing test's report shows each process's
  stderr;
- ``faults``: ``llm_datadist_ffi.testing.faults.Faults``, whose faults are undone after
  the test (``faults.fail("pull_blocks", LLMStatusCode.LLM_TIMEOUT, on=...)``);
- ``llm_datadist_alias``: ``import llm_datadist`` works during the test (the package's
  vendor-compatible module), and no longer after it unless it did before;
- ``--lldd-backend=auto|mock|companion``: what ``llm_datadist_alias`` gives: the
  compat alias on the mock, or the vendor's own package with the companion installed
  (``llm_datadist_ffi.companion``); ``auto`` (the default) takes the vendor's package
  where it is importable, so a connector's suite runs with the same lints on a laptop
  and on an NPU host;
- lint warnings (``llm_datadist_ffi.LintWarning``) are errors in every test and in the
  topology processes; ``--lldd-lint=warn`` shows them as warnings, ``--lldd-lint=ignore``
  hides them. A test's or module's own ``filterwarnings`` mark wins over the option;
- call traces: with ``LLM_DATADIST_FFI_TRACE=DIR`` in pytest's environment, the topology
  processes of each test trace into ``DIR/<test id>`` (``trace.directory_for``), and a
  failing test's report gets that trace merged and summarised (``trace.attach_to_report``).
"""
from __future__ import annotations

import dataclasses
import sys
from types import ModuleType
from typing import Any, Callable, Generator, Iterator, List

import pytest

from . import trace
from .faults import Faults
from .topology import Topology

__all__ = ["LINT_OPTION", "LINT_ACTIONS", "BACKEND_OPTION", "topology", "faults", "llm_datadist_alias"]

LINT_OPTION = "--lldd-lint"
#: option value -> the ``warnings`` action for ``LintWarning``
LINT_ACTIONS = {"error": "error", "warn": "default", "ignore": "ignore"}
_LINT_CLASS = "llm_datadist_ffi.lint.LintWarning"
BACKEND_OPTION = "--lldd-backend"

_topologies_key = pytest.StashKey[List[Topology]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llm_datadist_ffi")
    group.addoption(LINT_OPTION, choices=sorted(LINT_ACTIONS), default="error",
                    help="what a LintWarning of llm_datadist_ffi does in tests and topology processes: "
                         "error (default), warn or ignore")
    group.addoption(BACKEND_OPTION, choices=("auto", "mock", "companion"), default="auto",
                    help="what llm_datadist_alias gives: the mock through the compat alias, the vendor's own "
                         "llm_datadist with the companion, or auto (the companion where the vendor's package "
                         "is importable)")


def _lint_action(config: pytest.Config) -> str:
    return LINT_ACTIONS[str(config.getoption(LINT_OPTION))]


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    mark = pytest.mark.filterwarnings(f"{_lint_action(config)}::{_LINT_CLASS}")
    for item in items:
        # first in the item's own marks: every filterwarnings mark of the test, its class
        # or its module is applied after this one and so takes precedence
        item.add_marker(mark, append=False)


# an old-style wrapper: the new style needs pytest 8, the package supports pytest 7
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed:
        return
    for topo in item.stash.get(_topologies_key, []):
        for process in topo.processes:
            text = process.stderr_if_open()
            if text:
                report.sections.append((f"stderr of {process.name} (cluster {process.cluster_id}, "
                                        f"pid {process.pid})", text))
    directory = trace.directory_for(item.nodeid)
    if directory is not None:
        trace.attach_to_report(item, report, directory)


@pytest.fixture
def topology(request: pytest.FixtureRequest) -> Iterator[Callable[..., Topology]]:
    """``topology(prompts=1, decoders=1, **options)`` starts engine processes
    (``Topology.start``, whose keywords it takes); they end after the test."""
    started: List[Topology] = []
    request.node.stash[_topologies_key] = started

    def start(prompts: int = 1, decoders: int = 1, **kwargs: Any) -> Topology:
        kwargs.setdefault("lint", _lint_action(request.config))
        directory = trace.directory_for(request.node.nodeid)
        if directory is not None:              # this test's processes: a trace of their own
            traced = {trace.TRACE_ENV: str(directory)}
            if kwargs.get("specs") is not None:
                kwargs["specs"] = [dataclasses.replace(s, env={**s.env, **traced}) for s in kwargs["specs"]]
            else:
                kwargs["env"] = {**(kwargs.get("env") or {}), **traced}
        topo = Topology.start(prompts, decoders, **kwargs)
        started.append(topo)
        return topo

    yield start
    for topo in started:
        topo.close()


@pytest.fixture
def faults() -> Iterator[Faults]:
    """Fault injection for the test (``Faults``), undone after it."""
    injected = Faults()
    yield injected
    injected.clear()


@pytest.fixture
def llm_datadist_alias(request: pytest.FixtureRequest) -> Iterator[ModuleType]:
    """``import llm_datadist`` works during the test; the module. On the mock
    (``--lldd-backend=mock``, or ``auto`` without the vendor's package) it is this
    package's compat alias, no longer installed after the test unless it was before;
    with the companion it is the vendor's own package, wrapped during the test."""
    from ..companion import choose
    if choose(str(request.config.getoption(BACKEND_OPTION))) == "companion":
        from .. import companion
        was_wrapped = companion.is_installed()
        module = companion.install()
        try:
            yield module
        finally:
            if not was_wrapped:
                companion.uninstall()
        return
    from .. import compat
    was_installed = compat.is_installed()
    compat.install()
    try:
        yield sys.modules["llm_datadist"]
    finally:
        if not was_installed:
            compat.uninstall()
