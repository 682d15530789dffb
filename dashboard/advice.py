"""The advisor beside a load run: what it predicts for the run's traffic, against what was
measured, and the config it recommends, with the noise over seeds, where the costs came from
and when, and (on request) the recommendation checked by experiment. Plain Python over
``advisor``'s API.

Costs: a concurrency run's own throughput calibrates them (the cores: this machine's when
the run's server was on loopback); otherwise the advisor's cache for the run's server,
model and Triton version (``advise`` fills it); otherwise the capacity is unknown."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from advisor import (
    CpuModel,
    Prediction,
    Recommendation,
    costs,
    from_model_config,
    predict,
    recommend,
    storedrun,
    verify,
)
from loadgen.inputopts import InputOptions
from stacksettings import from_env_or_default
from tritonapi.client import TritonClient

# Simulated requests per candidate config: enough for stable averages, few enough that a
# recommendation (about 150 configs) takes seconds, not minutes, on a small machine.
REQUESTS = 2_000
P99_BOUND_S = 0.010
SEEDS = 3  # the noise interval: fewer than the CLI's 5, the panel answers in seconds
CALIBRATIONS = from_env_or_default().state_dir / "advisor-calibrations.json"
VERIFY_S = 4.0


@dataclass
class Advice:
    describe: str
    current: str
    traffic: str
    predicted: Prediction
    recommendation: Recommendation
    measured_batch_size: float | None
    measured_throughput_per_s: float | None
    measured_distribution: dict[int, float]
    model: str = ""
    config_source: str = ""  # where the config came from
    costs: str = ""  # where the costs came from, and when ("" : unknown)
    capacity_known: bool = False
    inputs: InputOptions | None = None  # what the run's requests held: replayed alike


def run_costs(
    run: storedrun.StoredRun, config: Any, calibrations: Path
) -> costs.Calibration | None:
    """The run's own calibration (a concurrency run), else the cached one, else None."""
    cores = costs.local_cores(run.server)
    if run.concurrency and cores is not None:
        try:
            return storedrun.calibration(run, config, cores)
        except ValueError:
            pass
    cache = costs.CalibrationCache(calibrations)
    return cache.get(run.server, run.model, run.triton_version) if run.server else None


def advise(
    db: Path,
    run_id: int,
    triton_url: str,
    p99_bound_s: float = P99_BOUND_S,
    calibrations: Path = CALIBRATIONS,
) -> Advice:
    """ValueError (one line) when the run cannot be modelled (a one-burst run, no statistics);
    tritonapi.TritonError when a run stored without its config has it read from
    ``triton_url`` and that fails."""
    run = storedrun.load(db, run_id)
    if run.config is not None:
        config = run.config
        config_source = f"as Triton {run.triton_version} reported it when the run began"
    else:
        config = from_model_config(TritonClient(triton_url).model_config(run.model))
        config_source = "read from the server now (the run was stored without it)"
    calibration = run_costs(run, config, calibrations)
    # A traced run's time outside Triton (its client, the network, the front end), and the
    # batcher's hand-offs measured from its traces.
    cpu = storedrun.with_outside(calibration.cpu if calibration else CpuModel(), run.outside)
    if run.handoff is not None:
        cpu = run.handoff.apply(cpu)
    predicted = predict(config, run.traffic, run.service, cpu, requests=REQUESTS)
    rec = recommend(
        config, run.traffic, run.service, p99_bound_s, cpu, requests=REQUESTS, seeds=SEEDS
    )
    return Advice(
        describe=run.describe,
        current=config.describe(),
        traffic=run.traffic.describe(),
        predicted=predicted,
        recommendation=rec,
        measured_batch_size=run.measured_batch_size,
        measured_throughput_per_s=run.measured_throughput_per_s,
        measured_distribution=measured_shares(db, run_id),
        model=run.model,
        config_source=config_source,
        costs=calibration.describe() if calibration else "",
        capacity_known=calibration is not None,
        inputs=run.inputs,
    )


def check(
    a: Advice, triton_url: str, headers: dict[str, str], repository: Path
) -> verify.Verification:
    """The recommendation checked by experiment (scratch copies; see ``advisor.verify``)."""
    return verify.verify(
        triton_url, headers, a.model, repository, a.recommendation, VERIFY_S, inputs=a.inputs
    )


def verification_frame(checked: verify.Verification) -> pd.DataFrame:
    rows = [
        (c.which, name, predicted, measured)
        for c in checked.checks
        for name, predicted, measured in c.rows()
    ]
    frame = pd.DataFrame(rows, columns=["config", "measure", "predicted", "measured"])
    return frame.astype({"predicted": float, "measured": float})


def measured_shares(db: Path, run_id: int) -> dict[int, float]:
    from loadgen.store.runstore import RunStore

    with RunStore(db) as runs:
        server = runs.load_run(run_id).summary.server
    sizes = server.executions_by_batch_size if server else {}
    total = sum(sizes.values())
    return {size: n / total for size, n in sizes.items()} if total else {}


def predicted_vs_measured(a: Advice) -> pd.DataFrame:
    p = a.predicted
    rows = [
        ("average batch size", p.mean_batch_size, a.measured_batch_size),
        ("throughput (req/s)", p.throughput_per_s, a.measured_throughput_per_s),
    ]
    for size in sorted(set(p.batch_size_distribution) | set(a.measured_distribution)):
        rows.append(
            (
                f"share of executions at batch size {size}",
                p.batch_size_distribution.get(size, 0.0),
                a.measured_distribution.get(size, 0.0),
            )
        )
    frame = pd.DataFrame(rows, columns=["measure", "predicted", "measured"])
    frame = frame.astype({"predicted": float, "measured": float})
    frame["measured / predicted"] = frame["measured"] / frame["predicted"].where(
        frame["predicted"] > 0
    )
    return frame
