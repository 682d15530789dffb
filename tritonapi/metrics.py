"""The few series the exporter takes from Triton's own ``/metrics`` text."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

PENDING = "nv_inference_pending_request_count"
# Inferences executed (a request of batch 1 is one), the statistics' inference_count.
INFERENCES = "nv_inference_count"
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


WANTED = frozenset({PENDING, INFERENCES, FAILURE, CACHE_UTIL, *GPU_FAMILIES.values()})


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
    # Inferences executed per (model, version).
    inferences: dict[tuple[str, str], float] = field(default_factory=dict)

    def received(self, model: str, version: str) -> float | None:
        """The requests ``model``'s ``version`` had received when this text was written:
        those executed plus those pending (None where either series is missing). Both
        come from one read, taken together: a count read apart from the gauge, before a
        stalled model answers its backlog and the gauge after, misses that backlog.
        Requests executing are in neither (at most a batch in flight)."""
        done = self.inferences.get((model, version))
        waiting = self.pending.get((model, version))
        return None if done is None or waiting is None else done + waiting


# A sample line of one of the families read, after its line break. Anchored on the break
# rather than on ^ with re.MULTILINE: the pattern then begins with a literal, which the
# regex engine looks for with a fast search instead of trying every position of the text.
_WANTED_LINE = re.compile(
    r"\nnv_(?:" + "|".join(re.escape(name[3:]) for name in sorted(WANTED)) + r")([ {][^\n]*)"
)
_TRITON_LINE = re.compile(r"^(?:# (?:HELP|TYPE) )?nv_", re.MULTILINE)


def wanted_lines(text: str) -> tuple[str, bool]:
    """The sample lines of the families this module reads, and whether any ``nv_*`` name
    is there.

    Triton's text holds tens of thousands of samples on a busy server (latency summaries
    and histograms per model); parsing only the few families needed keeps a scrape fast.
    """
    keep = [match.group(0)[1:].rstrip("\r") for match in _WANTED_LINE.finditer("\n" + text)]
    triton = bool(keep) or _TRITON_LINE.search(text) is not None
    return "\n".join(keep) + "\n", triton


# One sample line of the text format: name, optional {labels}, value, optional timestamp.
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*")
_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_UNESCAPE = re.compile(r"\\(.)")

# (name, labels, value) of one sample.
Sample = tuple[str, dict[str, str], float]


def parse_metrics(text: str) -> TritonMetrics:
    """Pending and executed requests, failures by reason and GPUs; ValueError if the text is not
    Triton's metrics.

    Every Triton exposes some ``nv_*`` family; a text without any is another
    program's metrics (a wrong port), not an empty Triton. Families a Triton release does
    not have (GPU gauges without a GPU, failure reasons before 2.49) give no values.
    """
    return parse_wanted(*wanted_lines(text))


def parse_wanted(wanted: str, triton: bool) -> TritonMetrics:
    """``parse_metrics`` of what ``wanted_lines`` kept of a text."""
    if not triton:
        raise ValueError("no nv_* metrics in the text: is this Triton's metrics endpoint?")
    by_name: dict[str, list[Sample]] = {}
    for sample in _samples(wanted):
        by_name.setdefault(sample[0], []).append(sample)
    pending, inferences = _per_version(by_name, PENDING), _per_version(by_name, INFERENCES)
    cache = CACHE_UTIL in by_name
    failures = _failures(by_name.get(FAILURE, []))
    return TritonMetrics(pending, _gpus(by_name), failures, cache, inferences)


def _per_version(by_name: dict[str, list[Sample]], name: str) -> dict[tuple[str, str], float]:
    """(model, version) -> the value of family ``name``."""
    return {(ls.get("model", ""), ls.get("version", "")): v for _, ls, v in by_name.get(name, [])}


def _samples(text: str) -> list[Sample]:
    """The samples of the text format's lines (only a few families are read, so a small
    parser rather than prometheus_client's general one, which cost a scrape far more)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise ValueError(f"not Prometheus text: cannot read the line {line[:120]!r}")
        name, label_text, value_text = match.groups()
        try:
            value = float(value_text)
        except ValueError:
            raise ValueError(f"not Prometheus text: {value_text!r} is not a number") from None
        samples.append((name, _labels(label_text or "", line), value))
    return samples


def _labels(text: str, line: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    end = 0
    for match in _LABEL.finditer(text):
        if match.start() != end:
            break
        name, value = match.groups()
        labels[name] = _UNESCAPE.sub(_unescaped, value) if "\\" in value else value
        end = match.end()
    if end != len(text.rstrip(" \t")) and text.strip():
        raise ValueError(f"not Prometheus text: cannot read the labels of {line[:120]!r}")
    return labels


def _unescaped(match: re.Match[str]) -> str:
    char = match.group(1)
    return "\n" if char == "n" else char


def _failures(samples: list[Sample]) -> dict[tuple[str, str, str], float]:
    """(model, version, reason) -> failed requests, where Triton labels them (2.49+)."""
    failures: dict[tuple[str, str, str], float] = {}
    for _, labels, value in samples:
        reason = labels.get("reason")
        if reason:
            key = (labels.get("model", ""), labels.get("version", ""), reason)
            failures[key] = value
    return failures


def _gpus(by_name: dict[str, list[Sample]]) -> list[GpuStats]:
    values: dict[str, dict[str, float]] = {}
    for field_name, triton_name in GPU_FAMILIES.items():
        for _, labels, value in by_name.get(triton_name, []):
            uuid = labels.get("gpu_uuid")
            if uuid:  # a sample without its GPU cannot be told apart from another one
                values.setdefault(uuid, {})[field_name] = value
    return [GpuStats(uuid, **fields) for uuid, fields in sorted(values.items())]
