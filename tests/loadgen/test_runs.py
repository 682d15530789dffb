"""Load runs against the real Triton started by the launcher's code."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from loadgen import limits
from loadgen.engine.runner import RunParams, run
from loadgen.reports import report
from loadgen.results.stored import load_run, save
from loadgen.results.summary import ServerSummary
from runs.errors import StoreError
from runs.schema import STALE_S
from runs.store import RunStore
from stacksettings import ROOT, Settings
from tests.helpers import load as main
from tests.helpers import model_stats

pytestmark = pytest.mark.integration


def stored_server(db: Path, run_id: int) -> ServerSummary:
    with RunStore(db) as opened:
        server = load_run(opened, run_id).summary.server
    assert server is not None
    return server


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def test_spec_case_one_three_serial_requests_cost_three_executions(
    triton_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.sqlite3"
    code, out = cli(capsys, "serial", "-n", "3", "--url", triton_url, "--db", str(db))
    assert code == 0
    assert (out["client"]["sent"], out["client"]["ok"]) == (3, 3)
    assert out["server"]["executions"] == 3
    assert out["server"]["executions_by_batch_size"] == {"1": 3}
    assert stored_server(db, out["run_id"]).executions == 3


def test_spec_case_two_three_concurrent_requests_are_batched(
    triton_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI's burst of three, judged by Triton's own statistics (read by the test).

    preferred_batch_size [2, 4]: a batch of 2 at once, the third after the queue delay; on
    a loaded machine the batcher may wake late and take all three as one batch. A stall of
    Triton's front end longer than the 500 us delay between two of the three (seen once in
    a CI run of the suite on 2 cores beside 3 other workers) leaves each to be executed
    alone, after waiting out the delay for a partner: then each request's queue time shows
    the batcher waited (as tests/integration/test_experiment.py judges five bursts). A
    model that does not batch executes each at once, and fails."""
    db = tmp_path / "runs.sqlite3"
    before = model_stats(triton_url, "batch_add_model")
    code, out = cli(capsys, "concurrent", "-n", "3", "--url", triton_url, "--db", str(db))
    delta = model_stats(triton_url, "batch_add_model").minus(before)
    assert code == 0
    assert out["client"]["ok"] == 3
    assert delta.inference_count == 3
    assert out["server"]["executions"] == delta.execution_count
    sizes = out["server"]["executions_by_batch_size"]
    if delta.execution_count < 3:
        assert sizes in ({"1": 1, "2": 1}, {"3": 1})
    else:
        queue_us = delta.phase("queue").ns / 1000 / 3
        assert queue_us >= 0.8 * 500, f"executed alone without waiting: {sizes}, {queue_us} us"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_accounting_under_load(
    running_stack: Settings, triton_url: str, tmp_path: Path, protocol: str
) -> None:
    db = tmp_path / "runs.sqlite3"
    grpc_url = f"{running_stack.host}:{running_stack.port('triton_grpc')}"
    params = RunParams(
        "concurrency",
        url=triton_url,
        grpc_url=grpc_url,
        protocol=protocol,
        concurrency=16,
        duration_s=3.0,
    )
    before = model_stats(triton_url, "batch_add_model")
    result = run(params, db=str(db))
    triton = model_stats(triton_url, "batch_add_model").minus(before)
    c, server = result.summary.client, result.summary.server
    # Three rounds of 16 in flight at least (a machine running a bench beside the suite
    # served 45 requests in 1.5 s; an idle one serves thousands).
    assert c.sent >= 3 * 16
    assert c.failed == c.timed_out == 0, c.errors
    # Triton's own count, taken by the test, not the load generator's reading of it.
    assert triton.phase("success").count == triton.inference_count == c.ok == c.sent
    assert server is not None and server.requests == c.sent
    assert (server.average_batch_size or 0) > 1  # 16 in flight get batched
    with RunStore(db) as opened:
        records = opened.load_records(result.run_id or 0)
    assert len(records) == c.sent
    assert sorted(r["seq"] for r in records) == list(range(c.sent))
    with RunStore(db) as opened:
        timeline = opened.load_timeline(result.run_id or 0)
    assert sum(t["ok"] for t in timeline) == c.ok
    assert sum(t["sent"] for t in timeline) == c.sent


def test_server_side_deltas_agree_with_the_statistics_api(triton_url: str) -> None:
    before = model_stats(triton_url, "batch_add_model")
    result = run(RunParams("rate", url=triton_url, rate=400, duration_s=1.0, poisson=True))
    delta = model_stats(triton_url, "batch_add_model").minus(before)
    server = result.summary.server
    assert server is not None
    assert server.executions == delta.execution_count
    assert server.inferences == delta.inference_count == result.summary.client.ok
    assert server.executions_by_batch_size == delta.executions_by_size()
    assert server.queue_s_total == delta.phase("queue").ns / 1e9
    assert server.average_batch_size == delta.inference_count / delta.execution_count


def _cli_env(db: Path) -> dict[str, str]:
    return {**os.environ, "LOADGEN_DB": str(db), "PYTHONPATH": str(ROOT)}


def _start_cli_run(triton_url: str, db: Path, seconds: int = 30) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batchscope",
            "load",
            "concurrency",
            "-c",
            "4",
            "-d",
            str(seconds),
            "--url",
            triton_url,
            "--json",
        ],
        env=_cli_env(db),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    # Wait until load is flowing (the server has counted some of it), not during imports.
    before = model_stats(triton_url, "batch_add_model").inference_count
    deadline = time.monotonic() + 30
    while model_stats(triton_url, "batch_add_model").inference_count < before + 200:
        assert time.monotonic() < deadline and proc.poll() is None, "no load arrived"
        time.sleep(0.05)
    return proc


def _running_with_records(db: Path) -> int:
    """Wait for the run's first commits: it reads as running, with records; its id."""
    deadline = time.monotonic() + 20
    while True:
        assert time.monotonic() < deadline, "the run never showed up in the store"
        try:
            with RunStore(db) as opened:
                runs = opened.list_runs()
                first = runs and opened.load_records(runs[0]["id"], limit=1)
            if first:
                assert runs[0]["status"] == "running"
                return int(runs[0]["id"])
        except (sqlite3.OperationalError, StoreError):  # the store is being made
            pass
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupted_run_is_stored(triton_url: str, tmp_path: Path, sig: signal.Signals) -> None:
    db = tmp_path / "runs.sqlite3"
    before = model_stats(triton_url, "batch_add_model")
    proc = _start_cli_run(triton_url, db)
    run_id = _running_with_records(db)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    triton = model_stats(triton_url, "batch_add_model").minus(before)
    assert proc.returncode == 130, err
    result = json.loads(out)
    assert result["status"] == "interrupted" and result["run_id"] == run_id
    assert result["client"]["duration_s"] < 20 and result["client"]["ended"] == "stop"
    with RunStore(db) as opened:
        stored = load_run(opened, result["run_id"])
    assert stored.status == "interrupted"
    c = stored.summary.client
    with RunStore(db) as opened:
        records = opened.load_records(result["run_id"])
        timeline = opened.load_timeline(run_id)
    assert len(records) == c.sent > 0
    outcomes = Counter(r["outcome"] for r in records)
    assert outcomes == Counter(ok=c.ok, failed=c.failed, timed_out=c.timed_out), outcomes
    # Triton answered every request the run counts as ok; only the ones the interrupt cut
    # off (answered or not, never read) may differ.
    assert c.ok <= triton.phase("success").count <= c.sent, (triton, c)
    assert sum(t["sent"] for t in timeline) == c.sent


def test_a_killed_run_keeps_all_but_its_last_second(triton_url: str, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    proc = _start_cli_run(triton_url, db)
    run_id = _running_with_records(db)
    time.sleep(1.5)
    proc.kill()
    proc.communicate(timeout=30)
    with RunStore(db) as opened:
        row = opened.load_row(run_id)
    assert row["status"] == "running"
    with RunStore(db) as opened:
        records = opened.load_records(run_id)
    # Everything up to its last commit, which is at most about a second old.
    assert len(records) == row["ok"] + row["failed"] + row["timed_out"] > 1000
    assert row["summary"]["duration_s"] > 1.5
    with RunStore(db, create=True) as opened:
        assert opened.settle_abandoned(time.time() + STALE_S + 1) == [run_id]
    with RunStore(db) as opened:
        assert load_run(opened, run_id).status == "failed"


def test_a_run_is_cut_short_by_nothing_but_its_own_limits(
    triton_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old cap ended closed-loop runs at limits.MAX_REQUESTS whatever their duration, with
    status ok. Now only the run's own limits end it, and the summary and table say which."""
    monkeypatch.setattr(limits, "MAX_REQUESTS", 50)
    db = tmp_path / "runs.sqlite3"
    result = run(RunParams("concurrency", url=triton_url, concurrency=4, duration_s=2), str(db))
    c = result.summary.client
    assert result.status == "ok" and c.ended == "duration"
    assert c.sent > 50 and c.duration_s >= 1.9
    assert "ended by      its duration (2 s asked)" in report.run_table(result)
    with RunStore(db) as opened:
        assert load_run(opened, result.run_id or 0).summary.client.ended == "duration"
    monkeypatch.undo()
    counted = run(RunParams("concurrency", url=triton_url, concurrency=4, requests=300), str(db))
    assert (counted.summary.client.sent, counted.summary.client.ended) == (300, "requests")


def test_a_locked_store_saves_the_run_beside_it_and_says_so_in_one_line(
    triton_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "runs.sqlite3"
    RunStore(db, create=True).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the lock throughout
    try:
        out = subprocess.run(
            [sys.executable, "-m", "batchscope", "load", "concurrency", "-c", "4", "-d", "1"]
            + ["--url", triton_url, "--json"],
            env=_cli_env(db),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    finally:
        holder.rollback()
        holder.close()
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)  # the result is printed all the same
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "database is locked" in lines[0], lines
    (saved,) = tmp_path.glob("runs.sqlite3.run-*.json")
    assert str(saved) in lines[0]
    beside = json.loads(saved.read_text())
    assert (
        beside["client"] == printed["client"]
        and beside["records_in_file"] == printed["client"]["sent"]
    )
    with RunStore(db) as opened:
        assert opened.list_runs() == []


BAD_INPUTS = [
    (["serial", "-m", "no_such_model"], "has no model 'no_such_model'"),
    (["serial", "--shape", "NOPE=1"], "has no input 'NOPE'"),
    (["serial", "--shape", "INPUT_A=2,2"], "does not match the model's shape"),
    (["serial", "--dtype", "INPUT_A=INT64"], "which takes FP32"),
    (["serial", "--batch-size", "5"], "outside 1..4"),
    (["concurrency", "-c", "0"], "--concurrency must be greater than 0"),
    (["rate", "-r", "0"], "--rate must be greater than 0"),
    (["rate", "-r", "-3"], "--rate must be greater than 0"),
    (["concurrency", "-c", "300"], "safe bound of 256"),
    (["rate", "-r", "25000"], "safe bound of 20000/s"),
    (["concurrency", "-d", "90000"], "safe bound of 86400s"),
    (["serial", "-n", "200000000"], "safe bound of 100000000"),
    (["rate", "-r", "20000", "-d", "86400"], "past the bound of 100000000"),
    (["steps", "--stage", "100:1", "--stage", "0:1"], "--stage rate must be greater than 0"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUTS)
def test_bad_input_exits_2_and_writes_nothing(
    triton_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    db = tmp_path / "runs.sqlite3"
    RunStore(db, create=True).close()
    before = db.read_bytes()
    assert main([*argv, "--url", triton_url, "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert db.read_bytes() == before


def test_unreachable_server_and_remote_target(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.sqlite3"
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["serial", "--url", f"http://127.0.0.1:{port}", "--db", str(db)]) == 2
    assert "is not answering" in capsys.readouterr().err
    assert main(["serial", "--url", "http://192.0.2.1:8000", "--db", str(db)]) == 2
    assert "--allow-remote" in capsys.readouterr().err
    assert not db.exists()


def ratio_in_table(table: str, measure: str) -> float:
    (line,) = [line for line in table.splitlines() if line.startswith(measure)]
    return float(line.split()[-1].rstrip("x"))


def test_compare_two_models_prints_the_ratio_table(
    triton_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.sqlite3"
    code = main(
        [
            "compare",
            "--models",
            "add_unbatched,batch_add_model",
            f"concurrency -c 8 -d 1 --url {triton_url}",
            "--db",
            str(db),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "model executions" in out and "throughput (req/s)" in out and "B / A" in out
    with RunStore(db) as opened:
        runs = opened.list_runs()
    assert [r["model"] for r in runs] == ["batch_add_model", "add_unbatched"]
    assert runs[0]["group_id"] == runs[1]["group_id"] != ""
    with RunStore(db) as opened:
        unbatched = load_run(opened, runs[1]["id"])
    # No batching: one execution per request.
    assert stored_server(db, runs[1]["id"]).executions == unbatched.summary.client.ok
    # B batches, A cannot (its average batch is exactly 1): B / A reads above 1.
    assert ratio_in_table(out, "average batch size") > 1


def test_b_faster_than_a_reads_as_a_gain(
    triton_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Serial requests (A) against eight clients (B): B's throughput is many times A's, and
    the table says so as B / A above 1, in the text and in --json alike."""
    db = tmp_path / "runs.sqlite3"
    argv = [
        "compare",
        f"serial -n 20 --gap-ms 20 --url {triton_url}",
        f"concurrency -c 8 -d 1 --url {triton_url}",
        "--db",
        str(db),
    ]
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[3].split() == ["A", "B", "B", "/", "A"]
    gain = ratio_in_table(table, "throughput (req/s)")
    assert gain > 2
    assert main([*argv, "--json"]) == 0
    ratios = {r["measure"]: r for r in json.loads(capsys.readouterr().out)["ratios"]}
    row = ratios["throughput (req/s)"]
    assert row["b"] > row["a"] and row["b_over_a"] == row["b"] / row["a"] > 2


def test_a_stored_run_reads_back_as_the_same_typed_run(triton_url: str, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    params = RunParams(
        "steps",
        url=triton_url,
        stages=((300.0, 0.3), (100.0, 0.3)),
        poisson=True,
        seed=3,
        shapes=(("INPUT_A", (1,)), ("INPUT_B", (1,))),
        dtypes=(("INPUT_A", "FP32"),),
        label="round trip",
    )
    result = run(params, db=str(db))
    assert result.run_id is not None and result.summary.client.not_sent is not None
    with RunStore(db) as opened:
        stored = load_run(opened, result.run_id)
    assert stored.params == result.params
    assert stored.summary == result.summary
    assert (stored.status, stored.started_at, stored.finished_at, stored.group_id) == (
        result.status,
        result.started_at,
        result.finished_at,
        result.group_id,
    )
    assert stored.describe() == result.describe()
    # The restart flag is kept too (a restart itself is not provoked here).
    restarted = replace(result, summary=replace(result.summary, server_restarted=True))
    with RunStore(db, create=True) as opened:
        assert load_run(opened, save(opened, restarted)).summary.server_restarted


def test_csv_export(triton_url: str, tmp_path: Path) -> None:
    db = tmp_path / "runs.sqlite3"
    result = run(RunParams("serial", url=triton_url, requests=5, gap_s=0), db=str(db))
    assert main(["export", str(result.run_id), "--db", str(db), "--out", str(tmp_path)]) == 0
    records = (tmp_path / f"run-{result.run_id}-records.csv").read_text().splitlines()
    assert records[0] == "seq,start_s,latency_s,outcome,error"
    assert len(records) == 6
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM timeline").fetchone()[0] >= 1
    with RunStore(db) as opened:
        assert list(opened.records_frame(result.run_id or 0)["outcome"]) == ["ok"] * 5
