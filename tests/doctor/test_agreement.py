"""The doctor and the advisor propose one config for one server and traffic.

One private Triton serves the five states of ``test_states`` (healthy, batching off, a serial
client, no delay under spread-out traffic, a full queue) and the issue's two cases:
``mlp_model`` under 150/s Poisson, and the spec's add model without delay at about 409/s
Poisson (0.1 to 0.3 ms of compute per request here). For each, while a bounded load run goes
on (until both have answered), ``python -m stack doctor`` and ``python -m advisor advise``
run side by side as a user runs them (subprocesses, each watching the server for the same
seconds) and their configs are compared: both keep, both find none that meets the bound,
or both change to the same config.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
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
WINDOW_S = 8.0
P99_MS = "10"
# The load runs until both processes have answered (a stop event), at most this long.
LOAD_S = 240.0
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


def doctor_config(out: str) -> tuple[str, str, tuple[float, float]]:
    [model] = json.loads(out)
    p = model["prescription"]
    assert p is not None, model["notes"]
    return p["verdict"], p["config"], tuple(p["interval"])


def advisor_config(out: str) -> tuple[str, str, tuple[float, float]]:
    data: dict[str, Any] = json.loads(out)
    current = data["current_interval"]
    if data["keep"]:
        return "keep", data["current"]["config"], (current["low"], current["high"])
    if data["recommended"] is None:
        return "none", data["current"]["config"], (current["low"], current["high"])
    best = data["recommended_interval"]
    return "change", data["recommended"]["config"], (best["low"], best["high"])


@pytest.mark.parametrize("case", list(CASES))
def test_doctor_and_advisor_propose_the_same_config(
    triton: Settings, case: str, tmp_path: Path
) -> None:
    model = case.split("@")[0]
    url = triton.url("triton_http")
    params = RunParams(model=model, url=url, duration_s=LOAD_S, **CASES[case])  # type: ignore[arg-type]
    stop = threading.Event()
    loader = threading.Thread(target=run, args=(params,), kwargs={"stop": stop})
    # Their own state folder: the calibration cache goes there, not in the checkout's.
    env = {**os.environ, "STACK_STATE_DIR": str(tmp_path)}
    window = ["--url", url, "--model", model, "--window", f"{WINDOW_S:g}", "--p99-ms", P99_MS]
    loader.start()
    try:
        # The load is under way before either window opens (the processes' imports take a
        # second or more, too).
        stop.wait(1.0)
        doctor = subprocess.Popen(
            [sys.executable, "-m", "stack", "doctor", *window, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        advisor = subprocess.Popen(
            [sys.executable, "-m", "advisor", "advise", *window, "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        doctor_out, doctor_err = doctor.communicate(timeout=300)
        advisor_out, advisor_err = advisor.communicate(timeout=300)
    finally:
        stop.set()
        loader.join()
    assert doctor.returncode in (0, 1), doctor_err
    assert advisor.returncode == 0, advisor_err
    (verdict, config, low_high), (a_verdict, a_config, a_low_high) = (
        doctor_config(doctor_out),
        advisor_config(advisor_out),
    )
    assert verdict == a_verdict, (doctor_out, advisor_out)
    if config != a_config:
        # Two windows of one load fit slightly different inputs, as two runs of `advise`
        # do: a different config is the same answer only if the search counts it as
        # equivalent, its objective within the other's noise over seeds.
        print(f"{case}: the doctor proposed {config}, the advisor {a_config}")
        assert low_high[0] <= a_low_high[1] and a_low_high[0] <= low_high[1], (
            doctor_out,
            advisor_out,
        )
    # Where the search keeps the config, no finding proposes a longer delay.
    [diagnosis] = json.loads(doctor_out)
    if verdict != "change":
        for finding in diagnosis["findings"]:
            assert not any(
                line.startswith("max_queue_delay_microseconds") for line in finding["fix"]
            ), finding
