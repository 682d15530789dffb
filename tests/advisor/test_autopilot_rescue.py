"""The autopilot rescues an overloaded model: a change that gives it the capacity it lacks is
kept, though the backlog the old config left is still draining when it is made.

A Triton of its own serving ``add_sleep`` (bench/models: the add model that sleeps 5 ms per
execution whatever the batch, so its capacity is set by its batching, not by these two shared
cores). Served with batches of 1 it answers about 160/s; the clients send 300/s Poisson with
the load generator's default 10 s timeout, so Triton's queue, then the clients' own (their 256
connections all waiting), grows by some 140 requests a second. The change to batches of up to
8 gives it over 1,000/s. Triton's statistics are the observer of the overload and of the
drained queue; its config endpoint of what is served.

Found by this test: the window after began while that backlog drained. Triton answered 465/s
in it (the catch-up, not the 300/s sent), and with batches of up to 4 the clients' p99 after
(5.03 s) was worse than before (3.98 s, the overload just begun): that change was kept only
because the rule read it as a stall of the clients' machine. The window after now begins once
Triton's queue has drained.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from advisor import autopilot
from advisor.config import BatcherConfig, from_model_config
from loadgen.engine.runner import RunParams
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.advisor.test_autopilot import poisson_traffic
from tritonapi.client import TritonClient

pytestmark = pytest.mark.integration
MODEL = "add_sleep"
SOURCE = Path(__file__).resolve().parents[2] / "bench" / "models" / MODEL
OVERLOADED = BatcherConfig(1, (), 0, 1)  # one request per 5 ms execution
RESCUE = BatcherConfig(8, (), 500, 1)  # up to 8 per execution
RATE = 300.0
WATCH_S = 6.0


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("autopilot-rescue")
    shutil.copytree(SOURCE, base / "models" / MODEL)
    settings = replace(isolated(base / "state"), model_repository=base / "models")
    with running(settings, only=("triton",)):
        yield settings


def test_a_change_that_rescues_an_overloaded_model_is_kept_once_the_backlog_drained(
    triton: Settings, tmp_path: Path
) -> None:
    client = TritonClient(triton.url("triton_http"), headers=triton.admin_headers())
    served = client.model_config_json(MODEL)
    client.load_model(MODEL, autopilot.override(served, OVERLOADED, MODEL))
    old = client.model_config_json(MODEL)
    new = autopilot.override(old, RESCUE, MODEL)
    params = RunParams(
        "rate",
        model=MODEL,
        url=triton.url("triton_http"),
        rate=RATE,
        poisson=True,
        duration_s=120.0,
        seed=5,
    )
    lines: list[str] = []
    with poisson_traffic(params, tmp_path / "runs.sqlite3") as db:
        result = autopilot.apply_and_watch(
            client, MODEL, old, new, None, WATCH_S, store=db, say=lines.append
        )
    change, before, after = result.change, result.change.before, result.change.after
    # Overloaded before, by Triton's own count: it answered well under the offered rate, and
    # each request waited in its queue for more than a second on average.
    assert before["throughput_per_s"] < 0.7 * RATE, before
    assert before["server_mean_s"] > 1.0, before
    # The backlog drained before the window after: Triton answered the offered rate in it,
    # not the catch-up beyond it, and its mean time per request was milliseconds.
    assert after["drained"] is True, lines
    assert 0 < after["drain_s"] <= WATCH_S, after
    assert 0.8 * RATE < after["throughput_per_s"] < 1.2 * RATE, after
    assert after["server_mean_s"] < 0.05, after
    # Kept on the clients' own p99, better beyond noise, not as a stall of their machine.
    assert change.outcome == "kept", (result.line(), lines)
    assert change.reason.startswith("client p99 "), change.reason
    assert "stall" not in change.reason
    assert after["client_p99_s"] * autopilot.NOISE_RATIO < before["client_p99_s"], change
    assert after["failed"] == 0, after
    assert from_model_config(client.model_config_json(MODEL)) == RESCUE
    drained = [line for line in lines if line.startswith("Triton's queue drained to")]
    assert len(drained) == 1, lines
