"""The few series the exporter takes from Triton's own ``/metrics`` text."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

PENDING = "nv_inference_pending_request_count"


def parse_pending(text: str) -> dict[tuple[str, str], float]:
    """Pending requests per (model, version); ValueError if the text is not Triton's metrics.

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
    return pending
