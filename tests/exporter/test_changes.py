"""triton_batching_config_changes_total: the autopilot's record in the store, counted by
outcome at scrape time; no store or no table, no series."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import requests
from prometheus_client import CollectorRegistry

from exporter.changes import ChangesCollector
from runs.changes import OUTCOMES, Change
from runs.store import RunStore
from stacksettings import ROOT, free_ports
from tests.exporter.test_cli import wait_healthy

NAME = "triton_batching_config_changes_total"
SERVER = "http://127.0.0.1:8000"


def change(model: str, outcome: str) -> Change:
    return Change(SERVER, model, {}, {}, {}, {}, {}, outcome, "why")


def store_with(path: Path, *changes: Change) -> Path:
    with RunStore(path, create=True) as store:
        for c in changes:
            store.record_change(c)
    return path


def sample(registry: CollectorRegistry, model: str, outcome: str) -> float | None:
    labels = {"target": SERVER, "model": model, "outcome": outcome}
    return registry.get_sample_value(NAME, labels)


def test_changes_are_counted_by_model_and_outcome(tmp_path: Path) -> None:
    db = store_with(
        tmp_path / "runs.sqlite3",
        change("a", "kept"),
        change("a", "rolled_back"),
        change("a", "kept"),
        change("b", "failed_to_apply"),
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ChangesCollector(db))
    assert sample(registry, "a", "kept") == 2.0
    assert sample(registry, "a", "rolled_back") == 1.0
    # Every outcome of a model that has had a change is a series, at 0 until it happens.
    assert sample(registry, "a", "failed_to_apply") == 0.0
    assert sample(registry, "b", "failed_to_apply") == 1.0
    assert sample(registry, "b", "kept") == 0.0
    # The store is the count: a change recorded after the registration is in the next scrape.
    store_with(db, change("b", "kept"))
    assert sample(registry, "b", "kept") == 1.0
    # The exporter exports every outcome the store's change log knows.
    from exporter.changes import OUTCOMES as EXPORTED

    assert EXPORTED == OUTCOMES


def test_no_store_or_no_table_is_no_series(tmp_path: Path) -> None:
    old = Path(__file__).parents[1] / "advisor" / "data" / "loadruns.sqlite3"
    for db in (tmp_path / "missing.sqlite3", old):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ChangesCollector(db))
        assert not any(m.name.startswith("triton_batching_config") for m in registry.collect())
    assert not (tmp_path / "missing.sqlite3").exists()  # read-only: nothing made


def test_the_exporter_process_serves_the_counter(tmp_path: Path) -> None:
    db = store_with(tmp_path / "runs.sqlite3", change("batch_add_model", "rolled_back"))
    (port, dead) = free_ports(2)
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batchscope",
            "exporter",
            f"--triton-url=http://127.0.0.1:{dead}",  # no Triton: the store alone is read
            f"--changes-db={db}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_healthy(f"{base}/healthz", proc)
        metrics = requests.get(f"{base}/metrics", timeout=5).text
        assert (
            f'{NAME}{{model="batch_add_model",outcome="rolled_back",target="{SERVER}"}} 1.0'
        ) in metrics
        assert "# TYPE triton_batching_config_changes_total counter" in metrics
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()
