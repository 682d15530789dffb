"""The manual's generated references match the code they are generated from.

``batchscope docs --check`` fails when a committed page under docs/reference/ differs
from what the parsers, the exporter's families or the rules say now; these tests run it,
show that it catches a stale page, and check that each source is read whole.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from batchscope import docgen
from batchscope.commands import COMMANDS
from batchscope.main import full_parser
from exporter import catalog
from exporter.collector import BatchingCollector
from exporter.scrape import Snapshot
from exporter.targets import Target
from rules import rulegen, rulesettings
from tests.exporter.replay import snapshot

ROOT = Path(__file__).resolve().parents[2]
TARGET = Target("http://127.0.0.1:8000", "http://127.0.0.1:8002/metrics")


def test_the_committed_references_are_current() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "batchscope", "docs", "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def test_check_names_a_stale_page_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "docs" / "reference"
    copy.mkdir(parents=True)
    for path, text in docgen.pages().items():
        (copy / path.name).write_text(text)  # current pages, whatever is committed
    stale = copy / "metrics.md"
    stale.write_text(stale.read_text().replace("counter", "gauge", 1))
    before = stale.read_text()
    monkeypatch.setattr(docgen, "REFERENCE", copy)
    monkeypatch.setattr(docgen, "ROOT", tmp_path)
    assert docgen.regenerate(check=True, serve=None) == 1
    assert capsys.readouterr().err.strip() == (
        "docs/reference/metrics.md differs from the code: run `batchscope docs`"
    )
    assert stale.read_text() == before
    assert docgen.regenerate(check=False, serve=None) == 0
    assert docgen.regenerate(check=True, serve=None) == 0


def test_the_cli_page_has_every_subcommand_and_flag() -> None:
    page = docgen.cli_page()
    (sub,) = [a for a in full_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == list(COMMANDS)
    for name, command in sub.choices.items():
        assert f"`batchscope {name}`" in page
        for action in command._actions:
            for option in action.option_strings:
                if action.help != "==SUPPRESS==" and option not in ("-h", "--help"):
                    assert f"`{option}`" in page, f"{name} {option}"


def test_the_catalog_holds_every_family_a_scrape_shows() -> None:
    """A scrape of real captures: each family it shows is in the catalog, same type, labels
    and help (the metrics page is the catalog)."""

    def fetch(_target: Target, _timeout_s: float) -> Snapshot:
        return snapshot("after_load")

    registry = CollectorRegistry()
    registry.register(BatchingCollector([TARGET], fetch=fetch))
    scraped = list(text_string_to_metric_families(generate_latest(registry).decode()))
    declared = {
        series: entry for entry in catalog.families() for series in entry.exposed.split(", ")
    }
    assert len(scraped) > 15
    for family in scraped:
        for sample in family.samples:
            assert sample.name in declared, sample.name
            entry = declared[sample.name]
            assert family.documentation == entry.help
            # The text format has no info type: an info family reads back as a gauge.
            assert family.type == ("gauge" if entry.type == "info" else entry.type)
            assert set(sample.labels) <= set(entry.labels), sample
    page = docgen.metrics_page()
    assert all(f"`{f.exposed}`" in page for f in catalog.families())


def test_the_alerts_page_has_every_alert_and_recording_rule() -> None:
    groups = rulegen.groups(rulesettings.load())
    page = docgen.alerts_page()
    for group in groups["alerts.yml"]:
        for rule in group["rules"]:
            assert f"## {rule['alert']}\n" in page
    for group in groups["recording.yml"]:
        for rule in group["rules"]:
            assert f"`{rule['record']}`" in page
