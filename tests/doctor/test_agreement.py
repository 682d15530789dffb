"""The doctor and the advisor propose one config for one server and traffic.

One private Triton serves the five states of ``test_states`` (healthy, batching off, a serial
client, no delay under spread-out traffic, a full queue) and the issue's two cases:
``mlp_model`` under 150/s Poisson, and the spec's add model without delay at about 409/s
Poisson (0.1 to 0.3 ms of compute per request here). For each, a load run is stored, and
``batchscope doctor --store DB --run 1`` and ``batchscope advise --store DB --run
1`` run as a user runs them (subprocesses): both keep, both find none that meets the bound,
both change to the same config, or both propose nothing when the search's present is off. A
stored run gives both the same inputs; two live windows of one load do not (their fits differ
a little, and a decision near a threshold can flip, as it does between two runs of ``advise``
itself: see the README).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from loadgen.engine.runner import RunParams, run
from stack.supervisor import running
from stacksettings import ROOT, Settings, isolated
from tests.doctor.test_states import build_repository

pytestmark = pytest.mark.integration

# Long enough that two windows of one load fit nearly the same inputs.
P99_MS = "10"
LOAD_S = 4.0
CASES = {
    "add_healthy": {"scenario": "concurrency", "concurrency": 8},
    "add_off": {"scenario": "concurrency", "concurrency": 4},
    "add_serial": {"scenario": "concurrency", "concurrency": 1},
    "add_nodelay": {"scenario": "rate", "rate": 150.0, "poisson": True},
    "add_slow_queue": {"scenario": "rate", "rate": 100.0},
    # The issue's two cases.
    "mlp_model": {"scenario": "rate", "rate": 150.0, "poisson": True},
    "add_nodelay@409": {"scenario": "rate", "rate": 409.0, "poisson": True},
}


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("agreement")
    repo = build_repository(base / "m")
    shutil.copytree(ROOT / "model_repository" / "mlp_model", repo / "mlp_model")
    settings = replace(isolated(base / "state"), model_repository=repo)
    with running(settings, only={"triton"}):
        yield settings


def doctor_config(out: str) -> tuple[str, str]:
    [model] = json.loads(out)
    p = model["prescription"]
    assert p is not None, model["notes"]
    return p["verdict"], p["config"]


def advisor_config(out: str) -> tuple[str, str]:
    data: dict[str, Any] = json.loads(out)
    if not data["present"]["recommend_ready"]:
        return "present off", data["current"]["config"]
    if data["keep"]:
        return "keep", data["current"]["config"]
    if data["recommended"] is None:
        return "none", data["current"]["config"]
    return "change", data["recommended"]["config"]


def answer(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=1200
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_doctor_and_advisor_propose_the_same_config(
    triton: Settings, case: str, tmp_path: Path
) -> None:
    model = case.split("@")[0]
    db = tmp_path / "runs.sqlite3"
    url = triton.url("triton_http")
    params = RunParams(model=model, url=url, duration_s=LOAD_S, **CASES[case])  # type: ignore[arg-type]
    run(params, db=str(db))
    # Their own state folder: the calibration cache goes there, not in the checkout's.
    env = {**os.environ, "STACK_STATE_DIR": str(tmp_path)}
    # Fewer seeds and simulated requests than the defaults (the autopilot's small search),
    # the same for both: the search is the same function either way, on the same stored
    # inputs and seeds, and this keeps it to seconds on a busy machine.
    search = ["--p99-ms", P99_MS, "--seeds", "2", "--requests", "800"]
    stored = ["--store", str(db), "--run", "1", *search, "--json"]
    code, doctor_out, doctor_err = answer(["batchscope", "doctor", *stored], env)
    assert code in (0, 1), doctor_err
    code, advisor_out, advisor_err = answer(["batchscope", "advise", *stored], env)
    # Exit 3 exactly when the search's present is off (nothing recommended, by both).
    silent = not json.loads(advisor_out)["present"]["recommend_ready"]
    assert code == (3 if silent else 0), advisor_err
    verdict, config = doctor_config(doctor_out)
    # The doctor shows the search's present in the advisor's own line.
    [said] = json.loads(doctor_out)
    assert said["prescription"]["present"] == json.loads(advisor_out)["present"]["line"]
    assert (verdict, config) == advisor_config(advisor_out), (doctor_out, advisor_out)
    # Where the search keeps the config, no finding proposes a longer delay.
    [diagnosis] = json.loads(doctor_out)
    if verdict != "change":
        for finding in diagnosis["findings"]:
            assert not any(
                line.startswith("max_queue_delay_microseconds") for line in finding["fix"]
            ), finding
