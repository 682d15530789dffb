"""The advisor beside a load run: what it predicts for the run's traffic, against what was
measured, and the config it recommends. Plain Python over ``advisor``'s API."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from advisor import (
    CpuModel,
    Prediction,
    Recommendation,
    from_model_config,
    predict,
    recommend,
    storedrun,
)
from tritonapi.client import TritonClient

# Simulated requests per candidate config: enough for stable averages, few enough that a
# recommendation (about 150 configs) takes seconds, not minutes, on a small machine.
REQUESTS = 2_000
P99_BOUND_S = 0.010


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


def advise(db: Path, run_id: int, triton_url: str, p99_bound_s: float = P99_BOUND_S) -> Advice:
    """ValueError (one line) when the run cannot be modelled (a one-burst run, no statistics);
    tritonapi.TritonError when the model's config cannot be read from ``triton_url``."""
    run = storedrun.load(db, run_id)
    config = from_model_config(TritonClient(triton_url).model_config(run.model))
    cpu = CpuModel()
    predicted = predict(config, run.traffic, run.service, cpu, requests=REQUESTS)
    rec = recommend(config, run.traffic, run.service, p99_bound_s, cpu, requests=REQUESTS)
    return Advice(
        describe=run.describe,
        current=config.describe(),
        traffic=run.traffic.describe(),
        predicted=predicted,
        recommendation=rec,
        measured_batch_size=run.measured_batch_size,
        measured_throughput_per_s=run.measured_throughput_per_s,
        measured_distribution=measured_shares(db, run_id),
    )


def measured_shares(db: Path, run_id: int) -> dict[int, float]:
    from loadgen import store

    server = store.load_run(db, run_id).summary.server
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
