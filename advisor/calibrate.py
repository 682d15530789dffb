"""The costs batching does not remove, measured on a real Triton.

A simulated batcher predicts only as well as the costs it is given, and the front end's CPU
per request and the batcher timer's lateness are not in Triton's statistics. A calibration
run is a closed-loop load (perf_analyzer at concurrency C) during which the CPU seconds of
every process on the request path (the client, ``tritonserver``, its python backend stubs)
and the model's statistics delta are read; :func:`calibrate` turns them into a
:class:`~advisor.model.ServiceModel` and a :class:`~advisor.model.CpuModel`.

``bench/advisor_calibrate.py`` takes these measurements and stores the raw capture
(statistics JSON before and after each run, CPU seconds, perf_analyzer's CSV row);
:func:`load_capture` reads it back.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor.config import BatcherConfig, from_model_config
from advisor.fit import batch_times, fit_service_times
from advisor.model import CpuModel, ServiceModel
from tritonapi.stats import ModelStats, parse_statistics

# The front-end work's spread is not measured: exponential (cv 1) is the assumption.
DEFAULT_REQUEST_CV = 1.0


@dataclass(frozen=True)
class CalibrationRun:
    concurrency: int
    config: BatcherConfig
    cpu_s: float  # client + server CPU seconds during the run
    delta: ModelStats  # statistics delta over the run
    client_outside_s: float  # client-observed mean time outside server queue + compute
    infer_per_s: float  # the client's measured throughput
    # Triton's cumulative queue-time summary p99 after the run (None if not captured).
    queue_p99_s: float | None = None


def front_end_cost_s(run: CalibrationRun, service: ServiceModel) -> float:
    """CPU seconds per request outside model execution in this run."""
    if run.delta.inference_count <= 0:
        raise ValueError("the run served no requests: nothing to calibrate from")
    executions = run.delta.executions_by_size().items()
    execution = sum(n * service.time_s(size) for size, n in executions)
    return max(run.cpu_s - execution, 0.0) / run.delta.inference_count


def fit_runs(runs: Sequence[CalibrationRun]) -> ServiceModel:
    """Service times from the summed per-size statistics of the runs."""
    points: dict[int, list[float]] = defaultdict(lambda: [0, 0.0])
    for run in runs:
        for size, (n, seconds) in batch_times(run.delta).items():
            points[size][0] += n
            points[size][1] += seconds
    return fit_service_times({s: (int(n), t) for s, (n, t) in points.items()})


def calibrate(
    runs: Sequence[CalibrationRun], cores: float, request_cv: float = DEFAULT_REQUEST_CV
) -> tuple[ServiceModel, CpuModel]:
    """Service model and CPU model from calibration runs.

    * Service time per batch size: :func:`advisor.fit.fit_service_times` on the deltas.
      Runs with a long queue delay and few clients are used, so that batches execute
      while the CPU is otherwise idle (the clients are all waiting).
    * ``request_s``, CPU per request outside execution: the run's CPU seconds minus
      ``sum(executions(size) * service(size))`` (a python-backend execution keeps one
      core busy), per request.
    * ``timer_slack_s`` and ``timer_slack_tail_s``: at concurrency 1 every request waits
      alone for the whole queue delay, so its queue time minus the configured delay is
      how late the batcher wakes. The mean comes from the statistics API; the p99 from
      Triton's ``nv_inference_queue_summary_us`` (the run is the first on a fresh
      server, so the summary holds only its requests). A shifted exponential matches
      both: p99 - mean = (ln 100 - 1) * tail.
    * ``request_latency_s``: at concurrency 1, the client-observed time outside the
      server's queue and compute (perf_analyzer's "Client Send" + "Network+Server
      Send/Recv" + "Client Recv") minus ``request_s``: waiting that costs no CPU.
    """
    if not runs:
        raise ValueError("no calibration runs")
    service = fit_runs(runs)
    requests = sum(r.delta.inference_count for r in runs)
    request_s = sum(front_end_cost_s(r, service) * r.delta.inference_count for r in runs) / requests
    single = [r for r in runs if r.concurrency == 1]
    slack = tail = latency = 0.0
    if single:
        run = single[0]
        queue = run.delta.phase("queue")
        mean_slack = (
            max(queue.ns / queue.count / 1e9 - run.config.delay_s, 0.0) if queue.count else 0.0
        )
        slack = mean_slack
        if run.queue_p99_s is not None:
            p99_slack = max(run.queue_p99_s - run.config.delay_s, mean_slack)
            tail = (p99_slack - mean_slack) / (math.log(100) - 1)
            slack = mean_slack - tail
            if slack < 0:  # a pure exponential is the widest this family gets
                slack, tail = 0.0, mean_slack
        latency = max(run.client_outside_s - request_s, 0.0)
    cpu = CpuModel(
        cores=cores,
        request_s=request_s,
        request_cv=request_cv,
        request_latency_s=latency,
        timer_slack_s=slack,
        timer_slack_tail_s=tail,
    )
    return service, cpu


def parse_run(raw: dict[str, Any], config: BatcherConfig, model: str) -> CalibrationRun:
    def stats(payload: Any) -> ModelStats:
        found = [s for s in parse_statistics(payload) if s.name == model]
        if not found:
            raise ValueError(f"capture has no statistics for {model!r}")
        return found[0]

    row = raw["perf_analyzer"]
    outside_us = row["Client Send"] + row["Network+Server Send/Recv"] + row.get("Client Recv", 0)
    return CalibrationRun(
        concurrency=int(raw["concurrency"]),
        config=config,
        cpu_s=float(raw["server_cpu_s"]) + float(raw["client_cpu_s"]),
        delta=stats(raw["stats_after"]).minus(stats(raw["stats_before"])),
        client_outside_s=outside_us / 1e6,
        infer_per_s=float(raw["infer_per_s"]),
        queue_p99_s=float(raw["queue_p99_us"]) / 1e6 if "queue_p99_us" in raw else None,
    )


@dataclass(frozen=True)
class Capture:
    """A calibration capture as written by bench/advisor_calibrate.py."""

    cores: float
    service_runs: list[CalibrationRun]
    # name -> runs of the crossover configs
    crossover: dict[str, list[CalibrationRun]]

    def calibrate(self, max_concurrency: int = 8) -> tuple[ServiceModel, CpuModel]:
        """Calibrate on the service runs with few clients (low CPU contention)."""
        runs = [r for r in self.service_runs if r.concurrency <= max_concurrency]
        return calibrate(runs, self.cores)


def load_capture(path: Path, model: str = "batch_add_model") -> Capture:
    """Read a capture; ValueError naming the problem if it is not one."""
    try:
        data = json.loads(Path(path).read_text())
        service_config = from_model_config(data["service_config"])
        crossover = {}
        for name, entry in data.get("crossover", {}).items():
            config = from_model_config(entry["config"])
            crossover[name] = [parse_run(r, config, model) for r in entry["runs"]]
        return Capture(
            cores=float(data["cores"]),
            service_runs=[parse_run(r, service_config, model) for r in data["service_runs"]],
            crossover=crossover,
        )
    except OSError as exc:
        raise ValueError(f"cannot read calibration capture {path}: {exc.strerror}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is not a calibration capture ({exc!r})") from None
