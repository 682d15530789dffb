"""Every metric family the exporter can export, from the collectors' own declarations.

The collectors build their families in one place each (``collector.declared``,
``tracing.declared``); this module reads those same objects, empty, so the manual's
metrics reference (``batchscope docs``) and a scrape cannot disagree on a name, a type,
a label or a help text.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.core import Metric

from exporter import changes, collector, tracing

# An info family's labels beyond those it is declared with come with each sample (the
# settings it describes); they are listed here. tests/docs/test_generated.py scrapes real
# captures and fails when a sample carries a label this catalog does not list.
INFO_LABELS: dict[str, tuple[str, ...]] = {
    "triton_batching_model_config": (
        "backend",
        "platform",
        "preferred_batch_sizes",
        "instance_kinds",
    ),
    "triton_batching_endpoint": ("url", "reason"),
}

# What a family of each type is called on the wire (prometheus_client's exposition).
SUFFIX = {"counter": "_total", "info": "_info", "histogram": "_bucket, _sum, _count"}


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    labels: tuple[str, ...]
    help: str

    @property
    def exposed(self) -> str:
        """The series name(s) a scrape shows, e.g. ``x_total`` for counter ``x``."""
        suffix = SUFFIX.get(self.type, "")
        if self.type == "histogram":
            return ", ".join(f"{self.name}{s.strip()}" for s in suffix.split(","))
        return self.name + suffix


def _family(metric: Metric) -> Family:
    labels = tuple(getattr(metric, "_labelnames", ()))
    if metric.type == "histogram":
        labels = (*labels, "le")
    labels = (*labels, *INFO_LABELS.get(metric.name, ()))
    return Family(metric.name, metric.type, labels, metric.documentation)


def families() -> list[Family]:
    """Every family, in the order a scrape exposes them."""
    return [_family(m) for m in (*collector.declared(), *tracing.declared(), *changes.declared())]
