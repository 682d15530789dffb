"""The exporter's text writer against prometheus_client's own, byte for byte.

The families are the collector's on real captures (tests/exporter/data/), the trace
families on real trace files, and hand-made families for the cases the collector
never produces (escapes, a UTF-8 label name, timestamps, _created samples).
"""

from __future__ import annotations

import gzip
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from exporter.collector import BatchingCollector
from exporter.exposition import compress, gzip_accepted, prerender, render
from exporter.scrape import Snapshot
from exporter.targets import Target
from tests.exporter.replay import snapshot
from tests.exporter.test_tracing import book, registry

URL = "http://127.0.0.1:8000"


def reference(families: list[Metric]) -> bytes:
    class Fixed:
        def collect(self) -> list[Metric]:
            return families

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Fixed())
    return generate_latest(reg)


def test_the_collectors_families_on_every_capture_are_written_as_generate_latest_does() -> None:
    for moment in ("rest", "load", "after_load", "restarted"):
        targets = [Target(f"http://127.0.0.1:{8000 + i}", "m") for i in range(3)]

        def fetch(_target: Target, _timeout_s: float, moment: str = moment) -> Snapshot:
            return snapshot(moment)

        collector = BatchingCollector(targets, fetch=fetch)
        families = list(collector.collect())
        text = render(families)
        assert text == reference(families), moment
        assert text.count(b"triton_batching_executions_total{") == 9  # 3 models x 3 targets


def test_trace_histograms_are_written_as_generate_latest_does(tmp_path: Path) -> None:
    b = book(tmp_path, 1, "concurrency")
    b.update(now_ns=2**62)
    families = list(registry(b).collect())
    assert any(f.type == "histogram" and f.samples for f in families)
    assert render(families) == reference(families)


def test_escapes_odd_names_timestamps_and_created_samples_match() -> None:
    quoted = GaugeMetricFamily("g", 'help with \\ and \n and "', labels=["model", "a"])
    quoted.add_metric(['we"ird\\name\nx', "1"], 1.5)
    quoted.add_metric(["plain", "2"], float("inf"))
    quoted.add_metric(["nan", "3"], float("nan"))
    quoted.add_metric(["big", "4"], 123456789.0)
    utf8 = GaugeMetricFamily("u", "a label name outside the legacy set", labels=["mödel"])
    utf8.add_metric(["x"], 1)
    stamped = GaugeMetricFamily("s", "with a timestamp", labels=["x"])
    stamped.add_metric(["1"], 2, timestamp=1700000000.5)
    created = CounterMetricFamily("c", "with _created", labels=["x"], created=1700000000.0)
    created.add_metric(["1"], 3, created=1700000000.0)
    info = InfoMetricFamily("i", "info", labels=["target"])
    info.add_metric([URL], {"backend": "python", "b": 'q"'})
    hist = HistogramMetricFamily("h", "histogram", labels=["m"])
    hist.add_metric(["x"], [("0.1", 1), ("+Inf", 2)], 0.5)
    unlabelled = GaugeMetricFamily("plain_gauge", "no labels", value=7)
    families = [quoted, utf8, stamped, created, info, hist, unlabelled]
    assert render(families) == reference(families)


def test_a_prerendered_family_is_written_from_its_kept_text() -> None:
    family = GaugeMetricFamily("g", "help", labels=["target"])
    family.add_metric([URL], 1)
    before = render([family])
    prerender(family)
    family.samples.clear()  # the kept text is what is written
    assert render([family]) == before


def test_gzip_only_when_the_scraper_accepts_it() -> None:
    assert gzip_accepted("gzip")
    assert gzip_accepted("deflate, gzip;q=0.5")
    assert not gzip_accepted("identity")
    assert not gzip_accepted("")
    body = b"x 1\n" * 1000
    assert gzip.decompress(compress(body)) == body
