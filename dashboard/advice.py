"""The advisor beside a load run: what it predicts for the run's traffic, against what was
measured, and the config it recommends, with the noise over seeds, where the costs came from
and when, and (on request) the recommendation checked by experiment. The inputs and the search
are the advisor's own (:func:`advisor.advice.advise`), the same as ``advisor advise --store``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from advisor import Prediction, Recommendation
from advisor.advice import SearchOptions
from advisor.advice import advise as advisor_advise
from advisor.inputs import Options
from advisor.shapes import ShapeSplit
from autopilot import verify
from loadgen.inputopts import InputOptions

P99_BOUND_S = 0.010
# The search's own defaults (seeds, simulated requests), the same as `advisor advise` and the
# doctor's: one run gets one recommendation wherever it is asked for.
SEARCH = SearchOptions(p99_bound_s=P99_BOUND_S)
# Beside the results store (the stack's state dir, as `advisor advise` keeps it there): the
# dashboard that shows a store calibrates with its own file, never another stack's.
CALIBRATIONS_NAME = "advisor-calibrations.json"
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
    measured_client_p99_s: float | None = None
    model: str = ""
    config_source: str = ""  # where the config came from
    costs: str = ""  # where the costs came from, and when ("" : unknown)
    capacity_known: bool = False
    outside: str = ""  # where the time outside Triton came from, or that it is unknown
    notes: tuple[str, ...] = ()
    inputs: InputOptions | None = None  # what the run's requests held: replayed alike
    shapes: ShapeSplit | None = None  # batches per shape, when the run sent several
    # The present, simulated against measured, in the advisor's one line; ``silent`` when it
    # is off its bounds and nothing is recommended (``recommendation.best`` is None then).
    present: str = ""
    silent: bool = False


def advise(
    db: Path,
    run_ids: tuple[int, ...],
    triton_url: str,
    p99_bound_s: float = P99_BOUND_S,
    calibrations: Path | None = None,
) -> Advice:
    """The advice on one stored run, or on several of one traffic pooled (as ``advise --run
    A,B,C``). ValueError (one line) when the runs cannot be modelled (a one-burst run, no
    statistics) or pooled, or a run stored without its config cannot have it read from
    ``triton_url``."""
    found = advisor_advise(
        Options(
            store=db,
            runs=run_ids,
            url=triton_url,
            calibrations=calibrations or db.parent / CALIBRATIONS_NAME,
        ),
        replace(SEARCH, p99_bound_s=p99_bound_s),
    )
    inputs, rec = found.prepared.inputs, found.recommendation
    calibration = found.prepared.costs.calibration
    run = inputs.run
    assert run is not None  # a stored run was the source
    return Advice(
        describe=run.describe,
        current=inputs.config.describe(),
        traffic=inputs.traffic.describe(),
        predicted=rec.current,
        recommendation=rec,
        measured_batch_size=run.measured_batch_size,
        measured_throughput_per_s=run.measured_throughput_per_s,
        measured_distribution=run.measured_distribution,
        measured_client_p99_s=run.measured_client_p99_s,
        model=run.model,
        config_source=next((n for n in found.notes if n.startswith("config ")), ""),
        costs=calibration.describe() if calibration else "",
        capacity_known=found.prepared.costs.known,
        outside=found.prepared.outside_line,
        notes=tuple(found.notes),
        inputs=run.inputs,
        shapes=found.shapes,
        present=found.present_line(),
        silent=found.silent,
    )


def check(
    a: Advice, triton_url: str, headers: dict[str, str], repository: Path
) -> verify.Verification:
    """The recommendation checked by experiment (scratch copies; see ``autopilot.verify``)."""
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


def predicted_vs_measured(a: Advice) -> pd.DataFrame:
    p = a.predicted
    rows = [
        ("average batch size", p.mean_batch_size, a.measured_batch_size),
        ("throughput (req/s)", p.throughput_per_s, a.measured_throughput_per_s),
        (
            "client p99 latency (ms)",
            None if p.client_latency_p99_s is None else p.client_latency_p99_s * 1e3,
            None if a.measured_client_p99_s is None else a.measured_client_p99_s * 1e3,
        ),
        # Predicted only: the run's statistics hold no server-side percentile.
        ("server-side p99 latency, queue + compute (ms)", p.server_latency_p99_s * 1e3, None),
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
