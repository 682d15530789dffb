"""Load from several processes (--processes N) and several load generators (loadgen merge),
against a private Triton: the merged run's counts are Triton's own statistics delta, its
histogram, timeline and records add up, and it reads back as any stored run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from loadgen.reports import compare, merge, report
from loadgen.results.histogram import Histogram
from loadgen.results.stored import load_run
from runs.store import RunStore
from stack.supervisor import running
from stacksettings import ROOT, isolated
from tests.helpers import model_stats

pytestmark = pytest.mark.integration
MODEL = "batch_add_model"


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Triton alone, on free ports, serving the project's model repository."""
    os.environ.setdefault("STACK_TRITON_VENV", str(ROOT / ".venv-triton"))
    settings = isolated(tmp_path_factory.mktemp("triton"))
    with running(settings, only=("triton",)):
        yield settings.url("triton_http")


def loadgen(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "batchscope", "load", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def requests_served(url: str) -> int:
    stats = model_stats(url, MODEL)
    return stats.phase("success").count + stats.phase("fail").count


def check_run_adds_up(db: Path, run_id: int) -> None:
    """sent = ok + failed + timed out; records = sent, numbered 0..n-1 by completion;
    the timeline sums to the totals; the summary's percentiles are the records'."""
    with RunStore(db) as opened:
        run = load_run(opened, run_id)
    c = run.summary.client
    assert c.sent == c.ok + c.failed + c.timed_out
    with RunStore(db) as opened:
        records = opened.load_records(run_id)
    assert [r["seq"] for r in records] == list(range(c.sent))
    done = [r["start_s"] + r["latency_s"] for r in records]
    assert done == sorted(done)
    with RunStore(db) as opened:
        timeline = opened.load_timeline(run_id)
    for key in ("sent", "ok", "failed", "timed_out"):
        assert sum(row[key] for row in timeline) == getattr(c, key)
    hist = Histogram()
    for r in records:
        if r["outcome"] == "ok":
            hist.add(r["latency_s"])
    assert (hist.quantile(0.5), hist.quantile(0.99)) == (c.latency_s.p50, c.latency_s.p99)


def test_two_processes_make_one_run_whose_counts_are_tritons(triton: str, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    before = requests_served(triton)
    done = loadgen(
        "concurrency", "-c", "8", "-d", "2", "--processes", "2", "--url", triton,
        "--db", str(db), "--json",
    )  # fmt: skip
    after = requests_served(triton)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["params"]["concurrency"] == 8 and "(2 processes)" in out["params"]["label"]
    c = out["client"]
    assert c["sent"] == c["ok"] == after - before > 0
    assert out["server"]["requests"] == after - before  # the whole window, read once
    with RunStore(db) as opened:
        (row,) = opened.list_runs()
    assert row["sent"] == c["sent"]
    check_run_adds_up(db, row["id"])
    # Both workers sent for the whole run: the merged timeline has load in every second.
    with RunStore(db) as opened:
        timeline = opened.load_timeline(row["id"])
    assert all(r["sent"] > 0 for r in timeline[:2])
    # The run reads back as any run: the table and a comparison with itself.
    with RunStore(db) as opened:
        run = load_run(opened, row["id"])
    assert "2 processes" in report.run_table(run)
    ratios = {r.measure: r.b_over_a for r in compare.compare(run.summary, run.summary)}
    assert ratios["throughput (req/s)"] == 1.0


def test_an_open_loop_rate_is_split_and_adds_up(triton: str, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    before = requests_served(triton)
    done = loadgen(
        "rate", "-r", "200", "-d", "2", "--processes", "2", "--url", triton, "--db", str(db),
    )  # fmt: skip
    after = requests_served(triton)
    assert done.returncode == 0, done.stderr
    with RunStore(db) as opened:
        (row,) = opened.list_runs()
    assert row["sent"] == row["ok"] == after - before
    assert 360 <= row["sent"] <= 440  # 2 x 100/s for 2 s, constant arrivals
    with RunStore(db) as opened:
        run = load_run(opened, row["id"])
    assert run.params.rate == 200
    check_run_adds_up(db, row["id"])


def test_ctrl_c_stops_every_worker_and_keeps_the_run(triton: str, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    before = requests_served(triton)
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchscope", "load", "concurrency", "-c", "4", "-d", "60",
         "--processes", "2", "--url", triton, "--db", str(db)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while requests_served(triton) - before < 500 and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    with RunStore(db) as opened:
        (row,) = opened.list_runs()
    assert row["status"] == "interrupted"
    assert row["sent"] == requests_served(triton) - before  # nothing lost, nothing extra
    check_run_adds_up(db, row["id"])


def test_merge_runs_made_side_by_side(triton: str, tmp_path: Path) -> None:
    """Two load generators at once, each with its own store and --json, merged from the
    stores and from the JSON: the same run either way, and Triton's count."""
    stores = [tmp_path / f"pod-{i}.sqlite3" for i in range(2)]
    before = requests_served(triton)
    with ThreadPoolExecutor(2) as pool:
        done = list(
            pool.map(
                lambda db: loadgen(
                    "concurrency", "-c", "4", "-d", "2", "--url", triton, "--db", str(db),
                    "--json",
                ),
                stores,
            )
        )  # fmt: skip
    served = requests_served(triton) - before
    jsons = []
    for i, d in enumerate(done):
        assert d.returncode == 0, d.stderr
        path = tmp_path / f"pod-{i}.json"
        # As `kubectl logs` gives it: the pod's standard error around its output.
        path.write_text(f"loadgen: a note on stderr\n{d.stdout}loadgen: another\n")
        jsons.append(path)
    merged_db = tmp_path / "merged.sqlite3"
    by_store = loadgen("merge", *map(str, stores), "--db", str(merged_db), "--json")
    by_json = loadgen("merge", *map(str, jsons), "--db", str(merged_db), "--json")
    assert by_store.returncode == 0 and by_json.returncode == 0, by_store.stderr + by_json.stderr
    a, b = json.loads(by_store.stdout), json.loads(by_json.stdout)
    assert a["client"]["sent"] == a["client"]["ok"] == served
    assert a["client"] == b["client"]
    assert a["seconds"] == b["seconds"]
    assert "error" in a["server"]  # the parts' windows overlap: no server side is invented
    with RunStore(merged_db) as opened:
        runs = opened.list_runs()
    assert [r["sent"] for r in runs] == [served, served]
    check_run_adds_up(merged_db, a["run_id"])  # records came from the stores
    with RunStore(merged_db) as opened:
        assert opened.load_records(b["run_id"]) == []  # JSON brings none
    twice = loadgen("merge", str(stores[0]), str(jsons[0]), "--db", str(merged_db))
    assert twice.returncode == 2 and "is the same run as" in twice.stderr
    # The merged run is itself mergeable, and the HDR export counts every ok request.
    hgrm = loadgen("export", str(a["run_id"]), "--hgrm", "--db", str(merged_db))
    assert hgrm.returncode == 0, hgrm.stderr
    assert f"Total count    = {served:12d}]" in hgrm.stdout


def test_merge_refuses_runs_of_another_model(triton: str, tmp_path: Path) -> None:
    paths = []
    for i, model in enumerate(("batch_add_model", "add_unbatched")):
        db = tmp_path / f"{i}.sqlite3"
        done = loadgen("concurrent", "-n", "3", "-m", model, "--url", triton, "--db", str(db))
        assert done.returncode == 0, done.stderr
        paths.append(str(db))
    merged = tmp_path / "merged.sqlite3"
    refused = loadgen("merge", *paths, "--db", str(merged))
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "its model is 'add_unbatched'" in refused.stderr
    assert not merged.exists()


def test_a_store_holding_part_of_a_run_is_refused(triton: str, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    assert loadgen("concurrent", "-n", "4", "--url", triton, "--db", str(db)).returncode == 0
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM records WHERE seq = 0")
    other = tmp_path / "other.sqlite3"
    assert loadgen("concurrent", "-n", "4", "--url", triton, "--db", str(other)).returncode == 0
    refused = loadgen("merge", str(db), str(other), "--db", str(tmp_path / "m.sqlite3"))
    assert refused.returncode == 2 and "3 records of 4 sent" in refused.stderr


def test_merge_sums_every_count_a_summary_holds() -> None:
    """A count a later version adds to the client summary (late sends) is summed too."""
    from dataclasses import replace

    from loadgen.results.params import RunParams
    from loadgen.results.summary import ClientSummary, Latency, LoadRun, RunSummary

    def part(sent: int, start: float) -> merge.Part:
        c = ClientSummary(sent, sent, 0, 0, 1.0, float(sent), Latency(), {"x": 1}, not_sent=2)
        run = LoadRun(
            params=RunParams("rate", rate=10.0),
            status="ok",
            started_at=start,
            finished_at=start + 1,
            summary=RunSummary(c, None, "none"),
        )
        return merge.Part("p", run, Histogram(), {}, 0.0)

    a, b = part(5, 100.0), part(7, 100.5)
    merged = merge.merge([a, b])
    c = merged.run.summary.client
    assert (c.sent, c.ok, c.not_sent, c.errors) == (12, 12, 4, {"x": 2})
    assert merged.run.params.rate == 20.0
    assert c.duration_s == pytest.approx(1.5)
    b.run.params = replace(b.run.params, batch_size=2)
    with pytest.raises(Exception, match="batch_size"):
        merge.merge([a, b])
