"""Costs outside the model, measured: never assumed.

The simulator's capacity comes from the CPU model (:class:`advisor.model.CpuModel`): the
cores shared and the CPU each request costs outside the model's execution. Without one the
advisor says "capacity: unknown" rather than print the limit of an infinitely fast front
end. A cost model is measured from the local Triton's CPU (:func:`from_process_cpu`), a
probe (:func:`probe`) or a stored closed-loop run (:func:`from_closed_loop`), and kept as a
:class:`Calibration` with where and when it was measured, cached per server, model and
Triton version (:class:`CalibrationCache`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, CpuModel, ServiceModel
from advisor.simulator import Simulation
from observe.cpu import ServerCpu
from tritonapi.stats import ModelStats

# Fewer requests than this in a window say too little about the per-request cost.
MIN_REQUESTS = 200
# The front end's spread is not measured: exponential work (cv 1), as the capture's.
REQUEST_CV = 1.0


@dataclass(frozen=True)
class Calibration:
    """A measured CPU model, and where and when it was measured.

    Three sources:

    * **the local Triton's CPU** (:func:`from_process_cpu`): when ``--url`` is on this
      machine, the server's CPU seconds over the advisor's window (:mod:`observe.cpu` finds
      the process by its listening port). A python-backend model executes in stub processes
      (children of ``tritonserver``), so the server process's own CPU is the work outside the
      model (HTTP, the batcher, the hand-off to the stub): that, per request served, is the
      cost. A model executed inside the server process has its executions' time taken off
      instead. The cores are the process's CPU set; clients on the same cores lower the
      capacity further.
    * **a probe** (``--probe``, :func:`probe`): a short closed-loop load. On a local server
      its CPU is read as above; on a remote one the per-request cost is the one that makes
      the simulator reproduce the throughput measured at the probe's concurrency
      (:func:`fit_request_cost`), on the cores the user gives.
    * **a stored closed-loop run** (:func:`from_closed_loop`), the same fit as a remote probe.
    """

    cores: float
    request_s: float
    source: str  # how it was measured, in words
    measured_at: float  # unix seconds
    requests: int  # requests it was measured over
    server: str = ""
    model: str = ""
    triton_version: str = ""

    @property
    def cpu(self) -> CpuModel:
        return CpuModel(cores=self.cores, request_s=self.request_s, request_cv=REQUEST_CV)

    @property
    def date(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.measured_at))

    def describe(self) -> str:
        return (
            f"{self.cores:g} cores, {self.request_s * 1e6:.0f} us CPU per request outside the "
            f"model, from {self.source} ({self.requests:,} requests) on {self.date}"
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        return cls(
            cores=float(data["cores"]),
            request_s=float(data["request_s"]),
            source=str(data["source"]),
            measured_at=float(data["measured_at"]),
            requests=int(data["requests"]),
            server=str(data.get("server", "")),
            model=str(data.get("model", "")),
            triton_version=str(data.get("triton_version", "")),
        )


def front_end_s(cpu_s: float, delta: ModelStats, service: ServiceModel) -> float:
    """CPU seconds per request outside the model's executions (a python-backend execution
    keeps one core busy for its wall time)."""
    if delta.inference_count <= 0:
        raise ValueError("no requests were served: nothing to calibrate from")
    execution = sum(n * service.time_s(size) for size, n in delta.executions_by_size().items())
    return max(cpu_s - execution, 0.0) / delta.inference_count


def from_process_cpu(
    cpu: ServerCpu, cores: float, delta: ModelStats, service: ServiceModel, source: str
) -> Calibration:
    """A calibration from the server's CPU over a window and its statistics delta;
    ValueError if the window served too few requests to say."""
    if delta.inference_count < MIN_REQUESTS:
        raise ValueError(
            f"{delta.inference_count} requests in the window, fewer than {MIN_REQUESTS}: "
            "too few to measure the CPU per request"
        )
    if cpu.children_s > 0:  # the model ran in stubs: the server's own CPU is the rest
        request_s = cpu.own_s / delta.inference_count
    else:
        request_s = front_end_s(cpu.own_s, delta, service)
    return Calibration(cores, request_s, source, time.time(), delta.inference_count)


# ---- fitted to a measured closed-loop throughput ------------------------------------------


def fit_request_cost(
    config: BatcherConfig,
    service: ServiceModel,
    concurrency: int,
    measured_per_s: float,
    cores: float,
    requests: int = 4_000,
    simulate: Callable[[CpuModel], float] | None = None,
) -> float:
    """The per-request CPU that makes the simulator serve ``measured_per_s`` at
    ``concurrency`` clients on ``cores`` (bisection; throughput falls as the cost grows).
    ValueError when even a free front end is slower than measured (the service times
    are too slow for what was served)."""

    def throughput(request_s: float) -> float:
        cpu = CpuModel(cores=cores, request_s=request_s, request_cv=REQUEST_CV)
        if simulate is not None:
            return simulate(cpu)
        sim = Simulation(config, service, ClosedLoop(concurrency), cpu, requests, seed=1)
        return sim.run().throughput_per_s

    if throughput(0.0) < measured_per_s * 0.97:
        raise ValueError(
            f"the model's executions alone cannot serve the measured {measured_per_s:,.0f}/s "
            "at that concurrency: the service times are too slow to calibrate against"
        )
    low, high = 0.0, cores / measured_per_s  # all the CPU per request: slower than measured
    for _ in range(14):
        mid = (low + high) / 2
        if throughput(mid) > measured_per_s:
            low = mid
        else:
            high = mid
    return (low + high) / 2


# ---- the cache ----------------------------------------------------------------------------


def cache_key(server: str, model: str, triton_version: str) -> str:
    return f"{server.rstrip('/')} {model} {triton_version or '?'}"


class CalibrationCache:
    """Calibrations in one JSON file, keyed by server, model and Triton version."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):  # none yet, or unreadable: start again
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, server: str, model: str, triton_version: str) -> Calibration | None:
        entry = self._read().get(cache_key(server, model, triton_version))
        try:
            return Calibration.from_json(entry) if isinstance(entry, dict) else None
        except (KeyError, TypeError, ValueError):
            return None

    def put(self, calibration: Calibration) -> None:
        data = self._read()
        key = cache_key(calibration.server, calibration.model, calibration.triton_version)
        data[key] = calibration.to_json()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A name of this process and thread's own: two writers at once (the dashboard and
        # `advisor advise`) each replace the file whole; a shared name let one move the
        # other's half-written file, and the other's replace then failed.
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            tmp.replace(self.path)  # never half a file
        finally:
            tmp.unlink(missing_ok=True)
