"""The few series the exporter takes from Triton's own ``/metrics`` text."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

PENDING = "nv_inference_pending_request_count"

# Triton's per-GPU gauges (docs/user_guide/metrics.md, "GPU Metrics"; label gpu_uuid),
# reported only when Triton sees a GPU through DCGM. Field of GpuStats -> Triton's name.
GPU_FAMILIES = {
    "utilization": "nv_gpu_utilization",  # 0.0 - 1.0
    "memory_used_bytes": "nv_gpu_memory_used_bytes",
    "memory_total_bytes": "nv_gpu_memory_total_bytes",
    "power_watts": "nv_gpu_power_usage",
}


@dataclass(frozen=True)
class GpuStats:
    """One GPU as Triton reports it; None where Triton did not report that gauge."""

    uuid: str
    utilization: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_watts: float | None = None


@dataclass(frozen=True)
class TritonMetrics:
    # Pending requests per (model, version).
    pending: dict[tuple[str, str], float]
    # Empty on a server without a GPU: no nv_gpu_* series at all.
    gpus: list[GpuStats]


def parse_metrics(text: str) -> TritonMetrics:
    """Pending requests and GPUs; ValueError if the text is not Triton's metrics.

    Every Triton exposes some ``nv_*`` family; a text without any is another
    program's metrics (a wrong port), not an empty Triton.
    """
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"not Prometheus text: {exc}") from None
    if not any(f.name.startswith("nv_") for f in families):
        raise ValueError("no nv_* metrics in the text: is this Triton's metrics endpoint?")
    pending: dict[tuple[str, str], float] = {}
    for family in families:
        if family.name != PENDING:
            continue
        for sample in family.samples:
            key = (sample.labels.get("model", ""), sample.labels.get("version", ""))
            pending[key] = sample.value
    return TritonMetrics(pending, _gpus(families))


def _gpus(families: list[Metric]) -> list[GpuStats]:
    by_name = {family.name: family for family in families}
    values: dict[str, dict[str, float]] = {}
    for field_name, triton_name in GPU_FAMILIES.items():
        family = by_name.get(triton_name)
        if family is None:
            continue
        for sample in family.samples:
            uuid = sample.labels.get("gpu_uuid")
            if uuid:  # a sample without its GPU cannot be told apart from another one
                values.setdefault(uuid, {})[field_name] = sample.value
    return [GpuStats(uuid, **fields) for uuid, fields in sorted(values.items())]
