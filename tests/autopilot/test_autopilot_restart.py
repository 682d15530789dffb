"""The autopilot when the server stops answering in the window after a change.

A Triton of its own, kept by the stack's supervisor (a killed one is started again, as
`batchscope up` does). SIGKILLed in the window after, it comes back serving config.pbtxt, and
the autopilot loads the previous config on it; stopped for good, the record says that the
rollback failed and what a restart will serve. Triton's config endpoint and the supervisor's
pids are the observers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor.config import BatcherConfig, from_model_config
from autopilot import apply
from loadgen.engine.runner import RunParams
from runs.store import RunStore
from stack.supervisor import Supervisor, group_members, running
from stacksettings import isolated
from tests.autopilot.test_autopilot import MODEL, SPEC, from_repository, live, poisson_traffic
from tritonapi.client import TritonClient

pytestmark = pytest.mark.integration
WATCH_S = 4.0


@pytest.fixture(scope="module")
def supervisor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Supervisor]:
    settings = isolated(tmp_path_factory.mktemp("autopilot-restart"))
    with running(settings, only=("triton",), supervise=True) as kept:
        yield kept


def served_from_repository(supervisor: Supervisor) -> TritonClient:
    """A ready Triton serving the model as config.pbtxt has it (a test before may have
    stopped it, or left an override: unload, then load)."""
    settings = supervisor.settings
    client = TritonClient(settings.url("triton_http"), headers=settings.admin_headers())
    if "triton" in supervisor.held:
        supervisor.start_service("triton")
    deadline = time.monotonic() + 60
    while not client.is_ready() and time.monotonic() < deadline:
        time.sleep(0.2)
    return from_repository(client, deadline)


def supervised_traffic(
    supervisor: Supervisor, db: Path, seconds: float, seed: int, rate: float = 150.0
) -> contextlib.AbstractContextManager[Path]:
    """Poisson at ``rate`` to the supervised Triton's model for up to ``seconds``, into
    ``db``."""
    params = RunParams(
        "rate",
        model=MODEL,
        url=supervisor.settings.url("triton_http"),
        rate=rate,
        poisson=True,
        duration_s=seconds,
        timeout_s=2.0,
        seed=seed,
    )
    return poisson_traffic(params, db)


@pytest.fixture
def client(supervisor: Supervisor) -> TritonClient:
    return served_from_repository(supervisor)


@pytest.fixture
def traffic(supervisor: Supervisor, tmp_path: Path) -> Iterator[Path]:
    with supervised_traffic(supervisor, tmp_path / "runs.sqlite3", 120.0, seed=11) as db:
        yield db


def change_in_thread(
    client: TritonClient, db: Path, come_back_s: float
) -> tuple[threading.Thread, list[apply.Result]]:
    old = client.model_config_json(MODEL)
    new = live(client, BatcherConfig(4, (2, 4), 0, 1))
    results: list[apply.Result] = []

    def apply_change() -> None:
        results.append(
            apply.apply_and_watch(
                client, MODEL, old, new, None, WATCH_S, store=db, come_back_s=come_back_s
            )
        )

    thread = threading.Thread(target=apply_change)
    thread.start()
    # The change is in once Triton serves it: the window after has begun (or is about to).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        served = from_model_config(client.model_config_json(MODEL))
        if served.max_queue_delay_us == 0:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the new config was never served")
    time.sleep(apply.SETTLE_S + 0.5)
    return thread, results


def test_a_triton_killed_in_the_window_comes_back_with_the_previous_config(
    supervisor: Supervisor, client: TritonClient, traffic: Path
) -> None:
    thread, results = change_in_thread(client, traffic, come_back_s=90)
    pid = supervisor.children["triton"].pid
    os.kill(pid, signal.SIGKILL)
    thread.join(timeout=120)
    assert not thread.is_alive()
    (result,) = results
    change = result.change
    assert change.outcome == "rolled_back", result.line()
    assert change.reason.startswith(f"the server stopped answering (Triton at {client.url}")
    assert change.reason.endswith("the previous config is served again")
    assert supervisor.children["triton"].pid != pid  # a new Triton answers
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC
    with RunStore(traffic) as store:
        (recorded,) = store.list_changes(MODEL)
    assert recorded.outcome == "rolled_back" and recorded.after == {}


def test_a_triton_that_does_not_come_back_is_on_record_as_a_failed_rollback(
    supervisor: Supervisor, client: TritonClient, traffic: Path
) -> None:
    thread, results = change_in_thread(client, traffic, come_back_s=3)
    # Held, as stop_service holds it, so that the supervisor does not start it again; killed
    # at once (a graceful stop would answer on through the window, draining the clients).
    supervisor.held.add("triton")
    (killed,) = [r for r in supervisor.read_state() if r.name == "triton"]
    os.kill(killed.pid, signal.SIGKILL)
    thread.join(timeout=60)
    assert not thread.is_alive()
    (result,) = results
    change = result.change
    assert change.outcome == "rollback_failed", result.line()
    assert "the server did not answer again within 3 s" in change.reason
    assert "when it restarts it serves config.pbtxt" in change.reason
    assert result.line().startswith(f"ROLLBACK FAILED {MODEL}: the server stopped answering")
    with RunStore(traffic) as store:
        (recorded,) = store.list_changes(MODEL)
    assert recorded.outcome == "rollback_failed" and recorded.reason == change.reason
    started = supervisor.start_service("triton")
    assert client.is_ready()
    # Nothing of the killed Triton lives on (its python backend stubs were left orphaned).
    assert started.pid != killed.pid and not group_members(killed)
    # Restarted, it serves the file: the change is gone, as the record says.
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC
