"""Closing the loop: a recommendation checked by experiment (``advise --verify``).

Each config (the current one, and the recommended one when there is one) is loaded as a
scratch copy of the model through Triton's repository API (explicit model control: the
config JSON and the model's files travel in the load request, so no repository folder is
touched), under the name ``<model>__advisor_<which>``. After a second of warm-up, the
same traffic is replayed against it through the load generator (open loop: the same rate,
Poisson or constant; closed loop: the same concurrency), and the copy is unloaded whatever
happens. Measuring
both configs the same way, one after the other, keeps the comparison fair on a busy
machine: the live model's own traffic is not mixed in.

The repository API is one of Triton's restricted APIs: the caller passes the key's headers.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, OpenLoop, Traffic
from advisor.predict import Prediction, Recommendation
from loadgen.engine import runner as loadgen_api
from loadgen.inputopts import InputOptions
from loadgen.results.params import RunParams
from loadgen.results.summary import LoadRun
from tritonapi.client import TritonClient

SUFFIX = "__advisor_"
WARM_UP_S = 1.0  # of the same traffic, not measured


@dataclass(frozen=True)
class Measured:
    mean_batch_size: float | None
    latency_p99_s: float | None
    throughput_per_s: float | None
    queue_mean_s: float | None
    requests: int


@dataclass(frozen=True)
class Check:
    """One config: predicted against measured."""

    which: str  # current | recommended
    config: BatcherConfig
    predicted: Prediction
    measured: Measured

    def rows(self) -> list[tuple[str, float | None, float | None]]:
        p, m = self.predicted, self.measured
        return [
            ("average batch size", p.mean_batch_size, m.mean_batch_size),
            (
                # The client's, predicted only when the time outside Triton is known.
                "client p99 (ms)",
                None if p.client_latency_p99_s is None else p.client_latency_p99_s * 1e3,
                None if m.latency_p99_s is None else m.latency_p99_s * 1e3,
            ),
            (
                "mean queue wait (us)",
                p.queue_delay_mean_s * 1e6,
                None if m.queue_mean_s is None else m.queue_mean_s * 1e6,
            ),
            ("throughput (req/s)", p.throughput_per_s, m.throughput_per_s),
        ]


@dataclass(frozen=True)
class Verification:
    checks: list[Check]
    seconds: float

    def measured_gain(self, objective: str) -> float | None:
        """The recommended config's measured gain over the current one, in the objective's
        terms (None when there is no recommendation or a figure is missing)."""
        if len(self.checks) < 2:
            return None
        now, best = self.checks[0].measured, self.checks[1].measured
        if objective == "latency":
            if now.latency_p99_s and best.latency_p99_s:
                return now.latency_p99_s / best.latency_p99_s
            return None
        if objective == "throughput" and now.throughput_per_s and best.throughput_per_s:
            return best.throughput_per_s / now.throughput_per_s
        return None  # headroom and cost are not measured by a replay

    def to_json(self, objective: str) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "measured_gain": self.measured_gain(objective),
            "checks": [
                {
                    "which": c.which,
                    "config": c.config.describe(),
                    "rows": [
                        {"measure": name, "predicted": p, "measured": m} for name, p, m in c.rows()
                    ],
                }
                for c in self.checks
            ],
        }


def scratch_config(server_config: dict[str, Any], config: BatcherConfig, name: str) -> dict:
    """The server's config JSON of the model with ``config``'s batching, named ``name``."""
    out = copy.deepcopy(server_config)
    out["name"] = name
    out["max_batch_size"] = config.max_batch_size
    if config.dynamic_batching:
        dynamic = dict(out.get("dynamic_batching") or {})
        dynamic["preferred_batch_size"] = list(config.preferred_batch_sizes)
        dynamic["max_queue_delay_microseconds"] = config.max_queue_delay_us
        out["dynamic_batching"] = dynamic
    else:
        out.pop("dynamic_batching", None)
    groups = out.get("instance_group") or [{"kind": "KIND_CPU"}]
    out["instance_group"] = [{**groups[0], "count": config.instances, "name": name}]
    return out


def model_files(repository: Path, model: str) -> dict[str, bytes]:
    """Every file of the model's folder but its config (links followed); ValueError (one
    line) when the folder is not there."""
    folder = Path(repository) / model
    if not folder.is_dir():
        raise ValueError(
            f"no folder {folder} to copy the model from: give --model-repository (the "
            "repository the server loads)"
        )
    files = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if (
            path.is_file()
            and relative.parts[0] != "config.pbtxt"
            and "__pycache__" not in str(relative)
        ):
            files[str(relative)] = path.read_bytes()
    return files


def replay_params(url: str, model: str, traffic: Traffic, seconds: float, seed: int) -> RunParams:
    if isinstance(traffic, OpenLoop):
        return RunParams(
            "rate",
            model=model,
            url=url,
            rate=traffic.rate_per_s,
            poisson=traffic.cv > 0.5,
            duration_s=seconds,
            seed=seed,
            label="advisor verify",
        )
    assert isinstance(traffic, ClosedLoop)
    return RunParams(
        "concurrency",
        model=model,
        url=url,
        concurrency=traffic.concurrency,
        duration_s=seconds,
        seed=seed,
        label="advisor verify",
    )


def measured(run: LoadRun) -> Measured:
    client, server = run.summary.client, run.summary.server
    return Measured(
        mean_batch_size=server.average_batch_size if server else None,
        latency_p99_s=client.latency_s.p99,
        throughput_per_s=client.throughput_per_s,
        queue_mean_s=server.queue_s_per_request if server else None,
        requests=client.sent,
    )


def verify(
    url: str,
    headers: dict[str, str],
    model: str,
    repository: Path,
    rec: Recommendation,
    seconds: float = 5.0,
    seed: int = 1,
    inputs: InputOptions | None = None,
) -> Verification:
    """Load each config as a scratch copy, replay the traffic, unload (see the module doc).
    Raises ValueError (no model files), TritonError (the server refused), LoadgenError."""
    client = TritonClient(url, headers=headers)
    server_config = client.model_config_json(model)
    files = model_files(repository, model)
    todo: list[tuple[str, Prediction]] = [("current", rec.current)]
    if rec.best is not None and not rec.keep:
        todo.append(("recommended", rec.best))
    checks = []
    for which, prediction in todo:
        name = f"{model}{SUFFIX}{which}"
        client.load_model(name, scratch_config(server_config, prediction.config, name), files)
        try:
            params = replay_params(url, name, prediction.traffic, seconds, seed)
            if inputs is not None:  # what the requests hold: the same options as loadgen's
                params = inputs.apply(params)
            # A fresh copy's first requests pay for its start (imports, first calls).
            loadgen_api.run(replace(params, duration_s=WARM_UP_S, seed=seed + 1), db=None)
            run = loadgen_api.run(params, db=None)
        finally:
            client.unload_model(name)
        checks.append(Check(which, prediction.config, prediction, measured(run)))
    return Verification(checks, seconds)
