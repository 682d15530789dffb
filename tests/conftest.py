"""Fixtures shared by every test: the real stack, started once per session. And the
session's account of reruns: each is listed with its cause, and too many fail the run."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from importlib.metadata import version

import pytest

from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.helpers import RERUN_CAUSES
from tests.module_seconds import deal_order, group_seconds
from tests.module_seconds import load as module_seconds
from tests.rooms import HOST_NETWORK, room

# Reruns are for Triton's crashes and its tracing bug (tests/helpers.TritonCrashes), and for
# a dashboard page that could not fetch Streamlit's modules (docs/development.md). A session
# where more tests than this needed one fails: a crash that frequent is worth a look, and a
# suite that passes only on second tries hides it.
MAX_RERUN_TESTS = 3

# The first pytest-rerunfailures that calls a callable `condition`; older ones take any
# callable as true and rerun every failure of a flaky-marked module.
RERUN_PLUGIN = (16, 7)

# node id -> the cause of each of its reruns, as the reports carry them (xdist included).
_reruns: dict[str, list[str]] = {}


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers this mark; without it (a test run alone, `pytest FILE`) the
    # marks below must still pass --strict-markers.
    config.addinivalue_line("markers", "xdist_group(name): the xdist group a module runs in")
    found = version("pytest-rerunfailures")
    major_minor = re.match(r"(\d+)\.(\d+)", found)
    if major_minor is None or tuple(map(int, major_minor.groups())) < RERUN_PLUGIN:
        raise pytest.UsageError(
            f"pytest-rerunfailures {found} reruns every failure of a flaky module; the tests "
            "need 16.7 or later: run ./stack/test, which installs the test extra's pins"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Put the cause into a rerun's report (before xdist sends it from a worker), and
    count it (in the process that runs the terminal)."""
    if report.outcome != "rerun":
        return
    causes = dict(report.user_properties)
    if "rerun_cause" not in causes:
        cause = RERUN_CAUSES.get(report.nodeid, "no cause recorded (a plugin rerun it?)")
        report.user_properties.append(("rerun_cause", cause))
        causes["rerun_cause"] = cause
    _reruns.setdefault(report.nodeid, []).append(str(causes["rerun_cause"]))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    seed = getattr(config.option, "randomly_seed", None)
    if seed is not None:  # the header says it too, but -q hides the header
        terminalreporter.write_line(
            f"tests ran in random order: replay with --randomly-seed={seed}"
        )
    if not _reruns:
        return
    terminalreporter.section("reruns, with their causes")
    for nodeid, causes in sorted(_reruns.items()):
        for n, cause in enumerate(causes, 1):
            terminalreporter.line(f"RERUN {n} {nodeid}: {cause}")
    verdict = "over the limit: the session fails" if _too_many() else "within the limit"
    terminalreporter.line(
        f"{len(_reruns)} test(s) needed a rerun; at most {MAX_RERUN_TESTS} may ({verdict})"
    )


def _too_many() -> bool:
    return len(_reruns) > MAX_RERUN_TESTS


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if _too_many() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """With xdist's ``--dist loadgroup`` (stack/test), a module runs whole on one worker (an
    ``alone`` test apart, below), so its module fixtures (a Triton of its own) start once;
    modules that share something of the machine name one group (the fleet's network
    namespaces). The marks go on before xdist reads them (before the yield).

    After the shuffle (pytest-randomly shuffles before its wrapper yields, so before this
    code runs), under loadgroup the groups are put longest first by their seconds in
    tests/module_seconds.json, each group's tests staying in their shuffled order: xdist
    deals the groups out in this order (stack/test turns off its own reordering by test
    count), so no long module starts last and keeps one worker busy after the rest ran dry.
    Groups with an ``alone`` test go after all the others, and modules marked
    ``after_start`` after the first two waves (below).
    A run without xdist keeps the shuffled order of the modules too."""
    groups: dict[str, set[str]] = {}
    for item in items:
        module = getattr(item, "module", None)
        # An `alone` test is a group of its own, dealt last (below), even in a module that
        # names its group; the rest of its module goes with the others, by its seconds.
        alone = item.get_closest_marker("alone") is not None
        if module is not None and (alone or item.get_closest_marker("xdist_group") is None):
            name = f"{module.__name__}.{item.name}" if alone else module.__name__
            item.add_marker(pytest.mark.xdist_group(name))
        group = item.get_closest_marker("xdist_group")
        if group is not None and module is not None:
            groups.setdefault(_group_name(group), set()).add(module.__name__)
    yield
    # On xdist's workers, which collect what runs, `dist` reads "no" and `loadgroup` is set.
    loadgroup = config.getoption("dist", default="no") == "loadgroup"
    if not (loadgroup or getattr(config.option, "loadgroup", False)):
        return
    seconds = group_seconds(groups, module_seconds())
    # The order: tests/module_seconds.deal_order. An `alone` test is a group of its own:
    # dealt last with it, the rest of the autopilot rescue module ran 90 s more on one
    # worker after the other three had run dry.
    solo = {_item_group(item) for item in items if item.get_closest_marker("alone")}
    late = {_item_group(i) for i in items if i.get_closest_marker("after_start")} - solo
    longest_first = sorted(
        dict.fromkeys(_item_group(item) for item in items), key=lambda g: -seconds.get(g, 0.0)
    )
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    rank = {g: n for n, g in enumerate(deal_order(longest_first, solo, late, workers))}
    items.sort(key=lambda item: rank[_item_group(item)])


def _group_name(mark: pytest.Mark) -> str:
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def _item_group(item: pytest.Item) -> str:
    mark = item.get_closest_marker("xdist_group")
    return _group_name(mark) if mark is not None else ""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """On the controller, as each worker reports what it collected: every test carries a
    group, so with ``--dist loadgroup`` every id must end in its group (``…@module``). None
    does when pytest and pytest-xdist disagree on where a node id lives (pytest 9.2 with
    pytest-xdist 3.8): a module's tests and its Triton would then be spread over both
    workers, so the run stops here with the fix."""
    config = getattr(node, "config", None)
    if config is None or config.getoption("dist", default="no") != "loadgroup":
        return
    if ids and not any("@" in i for i in ids):
        pytest.exit(
            "pytest-xdist's --dist loadgroup did not group the tests (no node id names its "
            "group): install the pytest and pytest-xdist versions pyproject.toml allows "
            "(.venv/bin/pip install -e '.[test]')",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


@pytest.fixture(autouse=True)
def _alone_or_shared(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """A test marked ``alone`` runs while no other test runs, on any xdist worker (or in
    another pytest of this user): it holds the session's room alone, every other test holds
    it shared (tests/rooms.py). Marked: the tests whose claim needs the machine's cores whole
    (2,000/s beside Triton on 2 cores)."""
    root = tmp_path_factory.getbasetemp().parent  # one for the session's workers
    with room(root / "alone", request.node.get_closest_marker("alone") is not None):
        yield


@pytest.fixture(autouse=True)
def _steady_host_network(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that drives Chromium (marked ``browser``) holds the host's network shared:
    the fleet's namespaces change its links only while they hold it alone (tests/rooms.py,
    HOST_NETWORK)."""
    if request.node.get_closest_marker("browser") is None:
        yield
        return
    with room(HOST_NETWORK, alone=False):
        yield


@pytest.fixture(scope="session")
def stack_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return isolated(tmp_path_factory.mktemp("stack"))


@pytest.fixture(scope="session")
def running_stack(stack_settings: Settings) -> Iterator[Settings]:
    """Every service of the stack, started with the launcher's own code on free ports."""
    with running(stack_settings):
        yield stack_settings


@pytest.fixture(scope="session")
def triton_url(running_stack: Settings) -> str:
    return running_stack.url("triton_http")
