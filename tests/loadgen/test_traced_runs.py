"""Load runs with --trace against a real Triton that writes traces and the exporter that
reads them: every request's server-side wait and batch, joined to its record.

A stack of their own (Triton and the exporter): Triton 2.51 can crash under traced load
(see tritonapi.traces), and such a crash must not take the session's shared stack with it.
The runs stay small and at concurrency 4 for the same reason."""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from advisor import storedrun
from batchscope.main import main as batchscope
from loadgen.engine.runner import RunParams, run
from loadgen.engine.shapes import ConstantRate, count_arrivals
from loadgen.results.stored import load_run
from runs.store import RunStore
from stack.supervisor import running
from stacksettings import PORTS, Settings, free_ports, isolated
from tests.doctor.test_agreement import advisor_config
from tests.helpers import TritonCrashes, served_whole, wire_seen
from tests.helpers import load as main

CRASHES = TritonCrashes()
pytestmark = [
    pytest.mark.integration,
    # Rerun only a test during which this module's Triton died of a signal (an upstream
    # bug); tests/conftest.py lists each rerun and caps how many tests may need one.
    pytest.mark.flaky(reruns=2, condition=CRASHES.crashed),
]


@pytest.fixture(scope="module")
def traced_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = isolated(tmp_path_factory.mktemp("traced"))
    # Supervised, as ./stack/up runs it: a Triton that crashes is started again.
    with running(settings, only={"triton", "exporter"}, supervise=True):
        CRASHES.watch(settings)
        yield settings


@pytest.fixture(autouse=True)
def stack_state(
    traced_stack: Settings, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """loadgen opens trace settings with the key in the stack's state folder, as a user's
    loadgen finds the ./stack/up stack's. A Triton restarted after a crash is waited for;
    a crash from now on is this test's."""
    CRASHES.forget()
    CRASHES.serving(traced_stack)
    CRASHES.begin(request.node.nodeid)
    monkeypatch.setenv("STACK_STATE_DIR", str(traced_stack.state_dir))
    for name, (_, var) in PORTS.items():
        monkeypatch.setenv(var, str(traced_stack.port(name)))


def traced_run(settings: Settings, db: Path, **params: object) -> int:
    p = RunParams(
        "concurrency",
        url=settings.url("triton_http"),
        grpc_url=settings.grpc_address,
        exporter_url=settings.url("exporter"),
        trace=True,
        **params,  # type: ignore[arg-type]
    )
    with wire_seen(settings, p.protocol) as wire:
        result = run(p, db=str(db))
    served_whole(result.summary.client.failed, result.summary.client.errors, wire)
    assert result.status == "ok" and result.run_id is not None
    return result.run_id


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_request_joined_to_its_trace_and_batch(
    traced_stack: Settings, tmp_path: Path, protocol: str
) -> None:
    db = tmp_path / "runs.sqlite3"
    run_id = traced_run(traced_stack, db, concurrency=4, requests=300, protocol=protocol)
    with RunStore(db) as opened:
        loaded = load_run(opened, run_id)
    trace, server = loaded.trace, loaded.summary.server
    assert trace is not None and server is not None
    # Triton 2.51 sometimes leaves the last trace of a window out of its file.
    assert trace.sent == 300 and trace.traced in (299, 300), trace
    assert not trace.note
    if trace.traced == 300:  # every request traced: the grouping is the server's own
        assert trace.batches_by_size == server.executions_by_batch_size
    assert sum(trace.reasons.values()) == sum(trace.batches_by_size.values())
    p50, p99, top = (trace.queue_wait_s[q] for q in ("p50", "p99", "max"))
    assert p50 is not None and p99 is not None and top is not None
    assert p50 <= p99 <= top
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT r.outcome, t.batch_size FROM traced t JOIN records r "
            "ON r.run_id = t.run_id AND r.seq = t.record WHERE t.run_id = ?",
            (run_id,),
        ).fetchall()
    assert len(rows) == trace.traced
    assert Counter(outcome for outcome, _ in rows) == {"ok": trace.traced}


def test_a_poisson_run_shorter_than_its_rate_says_is_traced_whole(
    traced_stack: Settings, tmp_path: Path
) -> None:
    # A Poisson schedule's length is random: pick a seed whose schedule holds fewer requests
    # than rate x duration. A window sized rate x duration would never complete, and Triton
    # 2.51 writes an unfinished window only at shutdown: no trace at all.
    rate, seconds = 150.0, 2.0
    seed = next(s for s in range(100) if count_arrivals(ConstantRate(rate, seconds), True, s) < 290)
    planned = count_arrivals(ConstantRate(rate, seconds), True, seed)
    db = tmp_path / "runs.sqlite3"
    s = traced_stack
    p = RunParams(
        "rate",
        rate=rate,
        duration_s=seconds,
        poisson=True,
        seed=seed,
        url=s.url("triton_http"),
        exporter_url=s.url("exporter"),
        trace=True,
    )
    with wire_seen(s) as wire:
        result = run(p, db=str(db))
    served_whole(result.summary.client.failed, result.summary.client.errors, wire)
    assert result.status == "ok" and result.run_id is not None
    with RunStore(db) as opened:
        trace = load_run(opened, result.run_id).trace
    assert trace is not None
    assert trace.sent == planned and not trace.note, trace
    assert trace.traced in (planned - 1, planned), trace  # Triton may drop a window's last


def test_the_cli_report_shows_the_traced_side(
    traced_stack: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = traced_stack
    argv = ["concurrency", "-c", "4", "--requests", "200", "--trace", "--db", str(tmp_path / "r")]
    with wire_seen(s) as wire:
        code = main([*argv, "--url", s.url("triton_http"), "--exporter-url", s.url("exporter")])
    out = capsys.readouterr().out
    with RunStore(tmp_path / "r") as opened:
        clients = [load_run(opened, r["id"]).summary.client for r in opened.list_runs()]
    for client in clients:
        served_whole(client.failed, client.errors, wire)
    assert code == 0
    assert "server side, traced (Triton's own traces of this run's requests:" in out
    assert "queue wait   p50 " in out and "grouped into " in out and "why they left" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["concurrency", "-c", "2"], "--trace needs a run of known size: give --requests"),
        (["concurrency", "--requests", "6000"], "--trace covers at most 5,000 requests"),
        (["rate", "-r", "500", "-d", "20"], "--trace covers at most 5,000 requests"),
    ],
)
def test_runs_that_cannot_be_traced_are_refused(
    traced_stack: Settings,
    tmp_path: Path,
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = tmp_path / "r.sqlite3"
    url = traced_stack.url("triton_http")
    assert main([*argv, "--trace", "--url", url, "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not db.exists()


def test_no_exporter_is_one_line(
    traced_stack: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    closed = f"http://127.0.0.1:{free_ports(1)[0]}"
    argv = ["serial", "--trace", "--url", traced_stack.url("triton_http"), "--exporter-url"]
    assert main([*argv, closed, "--db", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--trace reads Triton's traces through the exporter" in err and closed in err


def test_the_advisor_measures_hand_offs_from_the_exporters_traces(
    traced_stack: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A traced run leaves its traces in the exporter; `advise --traces` measures the
    batcher's hand-offs from them and simulates with them. The stored traced run gives the
    time its requests spent outside Triton."""
    s = traced_stack
    db = tmp_path / "runs.sqlite3"
    # 500: the most a window may hold on Triton 2.51 (tritonapi.tracesafety).
    run_id = traced_run(s, db, concurrency=4, requests=500)
    # The run's traffic given as it was sent (four clients): the present is then not
    # checked, whatever the machine's load did to this short run (a run whose executions
    # stalled for milliseconds is one no simulation reproduces, and advise is silent on
    # it). The present on such traffic is checked on a capture: test_present_closed_loop.
    stored = ["advise", "--store", str(db), "--run", str(run_id), "--p99-ms", "20"]
    stored += ["--concurrency", "4"]
    assert batchscope([*stored, "--seeds", "2", "--requests", "1000"]) == 0
    out = capsys.readouterr().out
    assert "present: not checked (the traffic was given (--rate or --concurrency)" in out
    assert "time outside Triton's queue and execution: " in out
    # Triton 2.51 sometimes leaves the last trace of a window out of its file.
    spread = r"median, p99 [\d,]+ us \(the run's (499|500) traced requests; the spread is "
    spread += r"simulated\)"
    assert re.search(spread, out), out
    # The run keeps Triton's timestamps: the hand-offs come from them, without the server.
    with RunStore(db) as opened:
        kept = opened.load_traced_requests(run_id, "batch_add_model")
    assert len(kept) in (499, 500) and all(r.queue_start_ns <= r.compute_start_ns for r in kept)
    line = next(x for x in out.splitlines() if x.startswith("hand-offs from traces: "))
    assert re.search(r"\(the run's (499|500) traced requests\)$", line), line
    argv = ["advise", "--url", s.url("triton_http"), "--model", "batch_add_model"]
    argv += ["--rate", "500", "--window", "1", "--seeds", "2", "--requests", "1000"]
    argv += ["--p99-ms", "20", "--calibrations", str(tmp_path / "c.json")]
    assert batchscope([*argv, "--traces", s.url("exporter")]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("hand-offs from traces: "))
    assert "dispatch " in line and "timer slack " in line and " traced requests)" in line
    closed = f"http://127.0.0.1:{free_ports(1)[0]}"
    assert batchscope([*argv, "--traces", closed]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--traces: " in err and closed in err


def test_the_advisor_pools_several_traced_runs(
    traced_stack: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`advise --run A,B,C,D` pools three short traced runs and an untraced one of one
    traffic: the hand-offs and the time outside Triton over all the traced requests, the
    batch sizes over all the runs' statistics (Triton's, per run, as stored), the service
    times over the untraced run's alone (tracing costs time in every execution)."""
    s = traced_stack
    db = tmp_path / "runs.sqlite3"
    ids = [traced_run(s, db, concurrency=4, requests=200) for _ in range(3)]
    plain = RunParams("concurrency", url=s.url("triton_http"), concurrency=4, requests=200)
    untraced = run(plain, db=str(db))
    assert untraced.status == "ok" and untraced.run_id is not None
    assert untraced.summary.client.failed == 0
    ids.append(untraced.run_id)
    with RunStore(db) as opened:
        loaded = [load_run(opened, run_id) for run_id in ids]
    traced = [run.trace.traced for run in loaded if run.trace]
    servers = [run.summary.server for run in loaded if run.summary.server]
    assert len(traced) == 3 and len(servers) == 4
    pooled = storedrun.load_runs(db, ids)
    assert pooled.run_ids == tuple(ids) and pooled.requests == 800
    assert pooled.traced_requests == sum(traced)
    assert pooled.outside is not None and pooled.outside.requests == sum(traced)
    assert pooled.handoff is not None
    assert pooled.measured_batch_size == pytest.approx(
        sum(server.inferences for server in servers) / sum(server.executions for server in servers)
    )
    # Each execution's compute by size (batch statistics, all three phases, as stored) adds
    # up to Triton's per-request total (inference statistics count a batch once per request).
    stats = servers[-1]
    by_size = stats.compute_s_per_execution_by_batch_size
    assert set(by_size) == set(stats.executions_by_batch_size)
    sizes = stats.executions_by_batch_size
    total = sum(n * size * (by_size[size] or 0.0) for size, n in sizes.items())
    assert total == pytest.approx(stats.compute_s_total, rel=0.02)
    assert pooled.service_runs == (untraced.run_id,)
    assert pooled.service == storedrun.load(db, untraced.run_id).service
    argv = ["advise", "--store", str(db), "--run", ",".join(map(str, ids)), "--p99-ms", "20"]
    argv += ["--concurrency", "4"]  # as sent: the present not checked (see above)
    assert batchscope([*argv, "--seeds", "2", "--requests", "1000"]) == 0
    out = capsys.readouterr().out
    assert "present: not checked (the traffic was given (--rate or --concurrency)" in out
    names = ", ".join(map(str, ids))
    assert f"from stored runs {names} pooled (concurrency, ok, 800 requests)" in out
    assert f"service times fitted from the statistics of untraced run {ids[-1]} " in out
    assert f"(the 4 runs' {sum(traced):,} traced requests)" in out
    assert f"the 4 runs' {sum(traced):,} traced requests; the spread is simulated" in out
    # The doctor on the same runs: their statistics summed for its checks, and the same
    # search on the same pooled inputs, so the same proposal (one answer to one question).
    # The doctor takes no given traffic: both check the present on the runs, and agree on
    # its answer too (a config, or nothing where the present is off: advise's exit 3).
    searched = [*argv[1:-2], "--seeds", "2", "--requests", "1000", "--json"]
    code = batchscope(["advise", *searched])
    said = capsys.readouterr().out
    assert code == (0 if json.loads(said)["present"]["recommend_ready"] else 3)
    advised = advisor_config(said)
    assert batchscope(["doctor", *searched]) in (0, 1)
    [diagnosis] = json.loads(capsys.readouterr().out)
    requests = sum(server.requests_success + server.requests_failure for server in servers)
    window = next(line for line in diagnosis["facts"] if line.startswith("window: "))
    assert window.startswith(f"window: stored runs {names} of {db} ("), window
    assert f": {requests:,} requests (" in window, window
    p = diagnosis["prescription"]
    assert p is not None, diagnosis["notes"]
    assert (p["verdict"], p["config"]) == advised, (diagnosis, advised)
