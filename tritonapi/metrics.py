"""The few series the exporter takes from Triton's own ``/metrics`` text."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

PENDING = "nv_inference_pending_request_count"
# Failed requests; Triton 2.49+ labels them with a reason: REJECTED, CANCELED, BACKEND, OTHER.
FAILURE = "nv_inference_request_failure"
# Present only when the server has a response cache (--cache-config); checked on 2.51: a
# server without one still has the per-model nv_cache_*_per_model families, at 0.
CACHE_UTIL = "nv_cache_util"

# Triton's per-GPU gauges (docs/user_guide/metrics.md, "GPU Metrics"; label gpu_uuid),
# reported only when Triton sees a GPU through DCGM. Field of GpuStats -> Triton's name.
GPU_FAMILIES = {
    "utilization": "nv_gpu_utilization",  # 0.0 - 1.0
    "memory_used_bytes": "nv_gpu_memory_used_bytes",
    "memory_total_bytes": "nv_gpu_memory_total_bytes",
    "power_watts": "nv_gpu_power_usage",
}


WANTED = frozenset({PENDING, FAILURE, CACHE_UTIL, *GPU_FAMILIES.values()})


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
    # (model, version, reason) -> failed requests; empty before Triton 2.49 (no reason label).
    failures: dict[tuple[str, str, str], float] = field(default_factory=dict)
    # Whether the server has a response cache configured (nv_cache_util is there).
    cache_configured: bool = False


# How a line about one of the families read begins: its HELP, its TYPE, or a sample.
_WANTED_PREFIXES = tuple(
    f"{head}{name}{tail}"
    for name in sorted(WANTED)
    for head, tails in (("# HELP ", (" ",)), ("# TYPE ", (" ",)), ("", ("{", " ")))
    for tail in tails
)
_TRITON_PREFIXES = ("nv_", "# HELP nv_", "# TYPE nv_")


def wanted_lines(text: str) -> tuple[str, bool]:
    """The lines of the families this module reads, and whether any ``nv_*`` name is there.

    Triton's text holds tens of thousands of samples on a busy server (latency summaries
    and histograms per model); parsing only the few families needed keeps a scrape fast.
    """
    lines = text.splitlines()
    keep = [line for line in lines if line.startswith(_WANTED_PREFIXES)]
    triton = bool(keep) or any(line.startswith(_TRITON_PREFIXES) for line in lines)
    return "\n".join(keep) + "\n", triton


def parse_metrics(text: str) -> TritonMetrics:
    """Pending requests, failures by reason and GPUs; ValueError if the text is not
    Triton's metrics.

    Every Triton exposes some ``nv_*`` family; a text without any is another
    program's metrics (a wrong port), not an empty Triton. Families a Triton release does
    not have (GPU gauges without a GPU, failure reasons before 2.49) give no values.
    """
    wanted, triton = wanted_lines(text)
    if not triton:
        raise ValueError("no nv_* metrics in the text: is this Triton's metrics endpoint?")
    try:
        families = list(text_string_to_metric_families(wanted))
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"not Prometheus text: {exc}") from None
    pending: dict[tuple[str, str], float] = {}
    for family in families:
        if family.name != PENDING:
            continue
        for sample in family.samples:
            key = (sample.labels.get("model", ""), sample.labels.get("version", ""))
            pending[key] = sample.value
    cache = any(family.name == CACHE_UTIL for family in families)
    return TritonMetrics(pending, _gpus(families), _failures(families), cache)


def _failures(families: list[Metric]) -> dict[tuple[str, str, str], float]:
    """(model, version, reason) -> failed requests, where Triton labels them (2.49+)."""
    failures: dict[tuple[str, str, str], float] = {}
    for family in families:
        if family.name != FAILURE:
            continue
        for sample in family.samples:
            reason = sample.labels.get("reason")
            if reason and sample.name.endswith("_total"):
                key = (sample.labels.get("model", ""), sample.labels.get("version", ""), reason)
                failures[key] = sample.value
    return failures


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
