"""The autopilot (``advise --apply``): a change is applied to the live model, watched, and
kept or rolled back by itself; every change is on record.

On a private real Triton (the project's repository, explicit model control, the restricted
APIs behind the stack's key), under open-loop load from the load generator, whose records in
the store are what clients saw. Triton's own config endpoint is the observer of what the model
serves after each outcome. Windows are 3 s here to bound the tests' time; the default is
sized to 2,000 requests.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from advisor.config import BatcherConfig, from_model_config
from autopilot import apply
from autopilot.apply import Predicted, Seen, judge
from batchscope.main import main
from loadgen.engine.runner import RunParams
from runs.changes import Change
from runs.store import RunStore
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.helpers import load_stalling_copy
from tritonapi.client import TritonClient

# Its judgments on a real Triton failed when they ran beside the rescue module's overloads
# (300/s on a model that serves 200, reloads under a backlog), in a session's first minute
# and later: one group with that module runs the two in turn on one worker, dealt after the
# first two waves of modules, while the workers boot (docs/validation/suite-time.md).
JUDGMENTS = "autopilot_judgments"
pytestmark = [pytest.mark.xdist_group(JUDGMENTS), pytest.mark.after_start]
MODEL = "batch_add_model"
SPEC = "max_batch_size 4, preferred [2, 4], delay 500 us, 1 instance(s)"
REPOSITORY = Path(__file__).resolve().parents[2] / "model_repository"
WATCH_S = 3.0
# A change judged on a machine shared with other tests needs windows long enough for the
# rule's noise checks: in 3 s (450 requests) one stall of the shared test machine made the
# clients' p99 60 ms against 4 ms before (CI), and the rule rightly rolled back. 10 s holds
# 1,500 requests, near the default window of 2,000, and a stall of about ten requests (60 ms
# at 150/s) moves only the top of the p99's interval, not its bottom.
LONG_WATCH_S = 10.0


# ---- the rule, on known windows ---------------------------------------------------------


def window(p99_ms: float | None, failed: int = 0, rate: float = 150.0, n: int = 450) -> Seen:
    p99 = None if p99_ms is None else p99_ms / 1e3
    return Seen(
        seconds=3.0,
        answered=n,
        failed=failed,
        throughput_per_s=rate,
        server_mean_s=0.001,
        client_requests=n if p99 is not None else 0,
        client_p99_s=p99,
        client_p99_low_s=None if p99 is None else p99 * 0.9,
        client_p99_high_s=None if p99 is None else p99 * 1.5,
    )


def test_the_rule_keeps_noise_and_rolls_back_what_is_worse_beyond_it() -> None:
    # 3 ms -> 4.5 ms: under x1.2 + 1 ms (4.6 ms): noise.
    assert judge(window(3.0), window(4.5)).outcome == "kept"
    # Tripled: beyond the ratio, and the intervals (2.7-4.5 ms, 8.1-13.5 ms) are apart.
    verdict = judge(window(3.0), window(9.0))
    assert verdict.outcome == "rolled_back"
    assert verdict.reason == "client p99 worse beyond noise: 9.00 ms after, 3.00 ms before"
    # Beyond the ratio, but the intervals overlap (a wide one before): noise ...
    wide = Seen(**{**window(3.0).to_json(), "client_p99_high_s": 0.02})
    assert judge(wide, window(9.0)).outcome == "kept"
    # ... unless Triton's own mean per request moved the same way.
    slower = Seen(**{**window(9.0).to_json(), "server_mean_s": 0.004})
    assert judge(wide, slower).reason == (
        "client p99 worse beyond noise: 9.00 ms after, 3.00 ms before (Triton's mean 1.00 -> "
        "4.00 ms agrees; the p99 intervals overlap)"
    )
    # A noisy tail before (23 ms on a busy machine) hides a server ten times slower: Triton's
    # mean says so, and the p99 did not improve.
    busy = Seen(**{**window(23.0).to_json(), "client_p99_high_s": 0.05})
    ten = Seen(**{**window(25.5).to_json(), "server_mean_s": 0.010})
    assert judge(busy, ten).reason == (
        "Triton's mean 1.00 -> 10.00 ms, worse beyond noise, and the client p99 did not "
        "improve (25.50 ms after, 23.00 ms before)"
    )
    # The same mean, but a tail much better: a trade the advisor may make on purpose.
    better = Seen(**{**window(10.0).to_json(), "server_mean_s": 0.004})
    assert judge(busy, better).outcome == "kept"
    assert judge(window(3.0), window(3.0, failed=2)).reason == "failures rose: 2 after, 0 before"
    # Fewer requests answered: clients that sent less, unless Triton got slower too.
    assert judge(window(3.0), window(3.0, rate=100)).outcome == "kept"
    # A tail better for it, but fewer answered and each slower inside Triton: rolled back.
    fewer = Seen(**{**window(3.0, rate=100).to_json(), "server_mean_s": 0.004})
    assert judge(window(10.0), fewer).reason.startswith("throughput fell beyond noise: 100/s")
    predicted = Predicted(0.002, 0.001, 150.0, {})
    kept = judge(window(3.0), window(3.5), predicted)
    assert kept.reason.endswith("2.00 ms predicted; short of the prediction, but not worse")


def typical(w: Seen, p99_ms: float, mean_ms: float | None = None) -> Seen:
    """``w`` with its median second's p99 (and Triton's mean) as given."""
    mean = w.server_mean_s if mean_ms is None else mean_ms / 1e3
    return Seen(
        **{**w.to_json(), "client_p99_median_second_s": p99_ms / 1e3, "server_mean_s": mean}
    )


def test_a_stall_of_the_clients_is_told_from_a_worse_config() -> None:
    # The CI case: a 20 ms wait removed; one pause of the client machine made the window's
    # p99 161 ms, while a typical second's p99 and Triton's mean fell: kept, and it says why.
    before = typical(window(25.0), 24.0, mean_ms=21.0)
    after = typical(window(161.0), 3.0, mean_ms=1.5)
    verdict = judge(before, after)
    assert verdict.outcome == "kept"
    assert verdict.reason == (
        "client p99 161.00 ms after, 25.00 ms before, from a few seconds only: the median "
        "second's p99 24.00 -> 3.00 ms and Triton's mean 21.00 -> 1.50 ms both did better (a "
        "stall of the clients' machine, not the config)"
    )
    # Every second worse: the config, whatever Triton's mean says.
    assert judge(before, typical(after, 150.0)).outcome == "rolled_back"
    # Triton's mean not better beyond noise, the typical second within noise of before
    # (24 -> 21 ms): nothing against the tail, rolled back, and the line gives the seconds.
    verdict = judge(before, typical(after, 21.0, mean_ms=19.0))
    assert verdict.outcome == "rolled_back"
    assert verdict.reason == (
        "client p99 worse beyond noise: 161.00 ms after, 25.00 ms before; the median "
        "second's p99 24.00 -> 21.00 ms"
    )
    # The CI case of a pause of the whole machine (the server too: requests it held waited
    # in its queue, so its mean says no better): the typical second did better beyond noise
    # (24 -> 3 ms). A config acts on every execution; a few seconds made the tail. Kept.
    paused = judge(before, typical(after, 3.0, mean_ms=19.0))
    assert paused.outcome == "kept"
    assert paused.reason == (
        "client p99 161.00 ms after, 25.00 ms before, from a few seconds only: the median "
        "second's p99 24.00 -> 3.00 ms did better beyond noise (a pause of the machine, not "
        "the config)"
    )
    # Triton's mean worse beyond noise too (the stall held its queue): the same.
    assert judge(before, typical(after, 3.0, mean_ms=40.0)).outcome == "kept"
    # But not when fewer were answered beyond noise too: the tail's verdict stands.
    fewer = typical(Seen(**{**after.to_json(), "throughput_per_s": 100.0}), 3.0, mean_ms=40.0)
    assert judge(before, fewer).outcome == "rolled_back"
    # Too few seconds to say what a typical one saw: the tail decides, as before.
    assert judge(window(25.0), window(161.0)).outcome == "rolled_back"


def test_a_stall_before_the_change_does_not_keep_a_worse_config() -> None:
    # The CI case: a 20 ms wait added (the spec config before); a busy machine made the
    # window before's p99 46 ms, where a typical second's was 3 ms. Triton's mean and every
    # typical second say worse: rolled back, and it says why.
    before = typical(window(46.0), 3.0, mean_ms=0.6)
    after = typical(window(24.0), 23.0, mean_ms=20.0)
    verdict = judge(before, after)
    assert verdict.outcome == "rolled_back"
    assert verdict.reason == (
        "Triton's mean 0.60 -> 20.00 ms, worse beyond noise, and the median second's client "
        "p99 did not improve (3.00 -> 23.00 ms); the client p99 improved from a few seconds "
        "before only (client p99 24.00 ms after, 46.00 ms before: a stall of the clients' "
        "machine before the change)"
    )
    # The second CI case: most of the window before was slow (32 ms; its typical second 20 ms),
    # so the typical second after (22 ms) is within noise of it, not worse: still rolled back.
    busy = typical(window(32.0), 20.0, mean_ms=0.6)
    assert judge(busy, typical(window(23.0), 22.0, mean_ms=20.0)).outcome == "rolled_back"
    # A change that trades the mean for the tail, the typical second's tail better beyond
    # noise too (30 -> 22 ms): the improvement stands, kept.
    traded = typical(window(23.0), 22.0, mean_ms=20.0)
    assert judge(typical(busy, 30.0), traded).outcome == "kept"
    # Triton's mean not worse beyond noise: the tail's improvement stands.
    assert judge(before, typical(after, 23.0, mean_ms=0.7)).outcome == "kept"
    # Too few seconds to say what a typical one saw: the tail decides, as before.
    assert judge(window(46.0), window(24.0)).outcome == "kept"


def test_the_median_second_ignores_one_stalled_second() -> None:
    steady = [(100.0 + s + i / 150, 0.003) for s in range(10) for i in range(150)]
    stalled = steady + [(104.5, 0.4)] * 40  # 40 requests held 400 ms in one second
    assert apply.median_second_p99(steady, 100.0) == 0.003
    assert apply.median_second_p99(stalled, 100.0) == 0.003
    assert apply.quantile(sorted(x for _, x in stalled), 0.99) == 0.4
    assert apply.median_second_p99(steady[:300], 100.0) is None  # 2 seconds


def test_without_clients_the_rule_reads_tritons_mean() -> None:
    before, after = window(None), window(None)
    slower = Seen(**{**after.to_json(), "server_mean_s": 0.004})
    verdict = judge(before, slower)
    assert verdict.reason.startswith("Triton's mean latency worse beyond noise: 4.00 ms after")


def test_the_p99_interval_widens_as_the_window_shrinks() -> None:
    values = [float(i) for i in range(1, 2001)]  # 1..2000: the p99 is 1980
    low, high = apply.quantile_interval(values)
    assert (low, high) == (1971.0, 1989.0)
    # 300 requests: the interval reaches the largest one.
    low, high = apply.quantile_interval([float(i) for i in range(1, 301)])
    assert (low, high) == (293.0, 300.0)


def test_the_window_holds_enough_requests_for_the_noise_and_says_why() -> None:
    assert apply.watch_length(200.0)[0] == 10.0
    seconds, why = apply.watch_length(10.0)
    assert seconds == 200.0 and "2,000 requests at 10/s" in why
    assert apply.watch_length(1.0)[0] == apply.MAX_WATCH_S
    assert "bounded" in apply.watch_length(1.0)[1]
    assert "a rollback is likelier" in apply.given_length(3.0, 150.0)


def test_a_queue_drained_waits_the_delay_and_a_few_executions() -> None:
    # 500 us of delay and 6 ms executions: a drained queue waits up to 25.5 ms on average.
    assert apply.drain_floor(0.0005, 0.006) == pytest.approx(0.0255)
    assert apply.drain_floor(0.0, 0.0) == apply.NOISE_FLOOR_S


def test_a_change_is_kept_in_the_store_and_an_old_store_has_none(tmp_path: Path) -> None:
    change = Change(
        "http://127.0.0.1:1",
        MODEL,
        {"max_batch_size": 4},
        {"max_batch_size": 8},
        {"throughput_per_s": 150.0},
        {"client_p99_s": 0.003},
        {"client_p99_s": 0.009},
        "rolled_back",
        "client p99 worse beyond noise",
    )
    with RunStore(tmp_path / "s.sqlite3", create=True) as store:
        first = store.record_change(change, now=100.0)
        store.record_change(Change(**{**change.__dict__, "model": "other", "outcome": "kept"}))
        assert [c.model for c in store.list_changes()] == ["other", MODEL]
        (got,) = store.list_changes(MODEL)
    assert got == Change(**{**change.__dict__, "at": 100.0, "id": first})
    with pytest.raises(ValueError, match="outcome 'maybe'"):
        Change(**{**change.__dict__, "outcome": "maybe"})
    old = Path(__file__).parent.parent / "advisor" / "data" / "loadruns.sqlite3"
    with RunStore(old) as store:
        assert store.list_changes() == []


def test_apply_needs_the_live_model(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["advise", "--store", "x.sqlite3", "--run", "1", "--p99-ms", "5", "--apply"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        "batchscope advise: error: --apply needs --url and --model: the live model to change"
        " (see 'batchscope advise --help')"
    ]


# ---- on a real Triton ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    # A copy of the project's repository: a test adds a model of its own to it.
    base = tmp_path_factory.mktemp("autopilot-triton")
    models = base / "models"
    shutil.copytree(REPOSITORY, models, ignore=shutil.ignore_patterns("__pycache__"))
    settings = replace(isolated(base / "state"), model_repository=models)
    with running(settings, only=("triton",)):
        yield settings


def from_repository(client: TritonClient, deadline: float) -> TritonClient:
    """The model as config.pbtxt has it, whatever a test before left. A plain load would
    keep serving the last override (Triton 2.51); after an unload, the load reads the
    repository again."""
    client.unload_model(MODEL)
    while MODEL in client.ready_models() and time.monotonic() < deadline:
        time.sleep(0.1)
    client.load_model(MODEL)
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC
    return client


@contextlib.contextmanager
def poisson_traffic(params: RunParams, db: Path) -> Iterator[Path]:
    """``params``' run (Poisson to the model) recorded in ``db`` until the block ends, then
    stopped as Ctrl-C stops it (SIGTERM: the partial run is stored).

    Run by the load generator's CLI in a process of its own, as a user runs it: the clients'
    latencies are what the autopilot judges a change by, and the test's own work beside them
    (the advice, a Streamlit page rerun every half second) held their interpreter in the
    same process, which made a window's client p99 the test's doing (CI, session 37: 226 ms
    before and 331 ms after at 150/s on the add model, and a good change rolled back)."""
    plain = RunParams(
        "rate",
        model=params.model,
        url=params.url,
        rate=params.rate,
        poisson=True,
        duration_s=params.duration_s,
        timeout_s=params.timeout_s,
        seed=params.seed,
    )
    assert params == plain, "poisson_traffic passes only these parameters to the CLI"
    argv = [
        *(
            sys.executable,
            "-m",
            "batchscope",
            "load",
            "rate",
            "--poisson",
            "--rate",
            str(params.rate),
        ),
        *("--duration", str(params.duration_s), "--model", params.model, "--url", params.url),
        *("--timeout", str(params.timeout_s), "--db", str(db)),
        *(("--seed", str(params.seed)) if params.seed is not None else ()),
    ]
    began = time.time()
    err = tempfile.TemporaryFile()  # a file, not a pipe: a full pipe would stop the sender
    sender = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)

    def said() -> str:
        err.seek(0)
        return err.read().decode(errors="replace")[-2000:]

    try:
        # The run's clients answered (the store holds their first second), and the reloaded
        # model warmed up.
        deadline = time.monotonic() + 60
        while not (db.is_file() and answered_since(db, params.model, began)):
            assert sender.poll() is None, said()
            assert time.monotonic() < deadline, "the load run stored no answer in 60 s"
            time.sleep(0.2)
        time.sleep(1.0)
        yield db
    finally:
        if sender.poll() is None:
            sender.send_signal(signal.SIGTERM)
        try:
            sender.wait(timeout=60)
        finally:
            if sender.poll() is None:
                sender.kill()
                sender.wait()
    # 0: the run ended by its duration; 130: stopped, its partial run stored. 1 is the CLI's
    # "some requests failed or timed out" (its report goes to stdout): a run that outlasted
    # its test on a loaded machine and ended by its duration with a request past its timeout
    # (a new clone's whole run here, 2026-12-07). That is the load's outcome, not the
    # sender's fault, and each test judges its own windows; a crash also exits 1 but leaves
    # a traceback on stderr.
    if sender.returncode == 1 and not said():
        assert failed_since(db, params.model, began), "exit 1 with no failed request stored"
    else:
        assert sender.returncode in (0, 130), said()
    err.close()


def failed_since(db: Path, model: str, began: float) -> bool:
    """Whether the store holds a request of ``model`` since ``began`` that did not answer
    right (failed or timed out)."""
    with RunStore(db) as store:
        rows = store.window_outcomes(model, began, time.time())
    return any(outcome != "ok" for _, _, outcome in rows)


def answered_since(db: Path, model: str, began: float) -> bool:
    """Whether the store holds an answered request of ``model`` since ``began`` (False while
    the load generator is still creating it)."""
    try:
        with RunStore(db) as store:
            rows = store.window_outcomes(model, began, time.time())
    except sqlite3.OperationalError:  # its tables are not there yet
        return False
    return any(outcome == "ok" for _, _, outcome in rows)


@pytest.fixture
def client(triton: Settings) -> TritonClient:
    client = TritonClient(triton.url("triton_http"), headers=triton.admin_headers())
    return from_repository(client, time.monotonic() + 10)


@pytest.fixture
def traffic(triton: Settings, tmp_path: Path) -> Iterator[Path]:
    """150/s Poisson to the model, recorded in a store, for the length of the test."""
    params = RunParams(
        "rate",
        model=MODEL,
        url=triton.url("triton_http"),
        rate=150.0,
        poisson=True,
        duration_s=90.0,
        seed=7,
    )
    with poisson_traffic(params, tmp_path / "runs.sqlite3") as db:
        yield db


def live(client: TritonClient, config: BatcherConfig) -> dict[str, Any]:
    return apply.override(client.model_config_json(MODEL), config, MODEL)


@pytest.mark.integration
def test_a_good_change_is_kept(client: TritonClient, traffic: Path) -> None:
    # From a 20 ms wait for batches back to the repository's config: clearly better on any
    # machine (a change to "no delay" was not: on a busy one the extra executions cost more).
    new = client.model_config_json(MODEL)
    client.load_model(MODEL, live(client, BatcherConfig(4, (), 20_000, 1)))
    old = client.model_config_json(MODEL)
    result = apply.apply_and_watch(client, MODEL, old, new, None, LONG_WATCH_S, store=traffic)
    change = result.change
    assert change.outcome == "kept", result.line()
    assert result.line().startswith(f"KEPT {MODEL}: client p99 ")
    served = from_model_config(client.model_config_json(MODEL))
    assert served.describe() == SPEC
    # Judged on what clients saw: a few hundred requests in each window, none failed.
    assert change.before["client_requests"] > 300 and change.after["client_requests"] > 300
    assert change.after["failed"] == 0
    with RunStore(traffic) as store:
        (recorded,) = store.list_changes(MODEL)
        # The reload under load lost no request, the moments between the windows included.
        outcomes = {o for _, _, o in store.window_outcomes(MODEL, 0, time.time())}
    assert recorded.outcome == "kept" and recorded.new_config == new
    assert recorded.old_config == old and recorded.after == change.after
    assert outcomes == {"ok"}


@pytest.mark.integration
def test_a_pause_of_the_clients_machine_does_not_undo_a_good_change(
    client: TritonClient, triton: Settings, tmp_path: Path
) -> None:
    # The load generator in its own process, stopped (SIGSTOP) for 0.6 s in the window after
    # a change that is clearly better (the 20 ms wait back to the repository's config): its
    # clients see the pause as latency, the server does not. At 60/s four requests take
    # 50 ms to come, so every batch waits out the 20 ms and every second's p99 is at least
    # that before the change. At 150/s (a wait of about 10 ms), in a new clone beside
    # another test the median second's p99 went 23.05 -> 56.30 ms: the spec config's more
    # executions cost the busy cores more than the wait it removed, and it was rolled back.
    db = tmp_path / "runs.sqlite3"
    new = client.model_config_json(MODEL)
    client.load_model(MODEL, live(client, SLOW))
    old = client.model_config_json(MODEL)
    argv = ["load", "rate", "-r", "60", "--poisson", "-d", "60", "--seed", "11"]
    url = triton.url("triton_http")
    sender = subprocess.Popen(
        [sys.executable, "-m", "batchscope", *argv, "--url", url, "--db", str(db)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    paused: list[float] = []

    def pause() -> None:
        sender.send_signal(signal.SIGSTOP)
        paused.append(time.monotonic())
        time.sleep(0.6)
        sender.send_signal(signal.SIGCONT)

    def say(line: str) -> None:
        if line.startswith("watching") and line.endswith("after the change"):
            threading.Timer(LONG_WATCH_S / 2, pause).start()

    try:
        time.sleep(3.0)  # the sender's clients started
        result = apply.apply_and_watch(
            client, MODEL, old, new, None, LONG_WATCH_S, store=db, say=say
        )
    finally:
        sender.send_signal(signal.SIGCONT)
        sender.kill()
        sender.wait(timeout=10)
    change = result.change
    assert paused, "the sender was never paused"
    # The pause is in the window's p99 (requests due in it left up to 0.6 s late) ...
    assert change.after["client_p99_s"] > 0.2, change.after
    # ... and is told from the config: kept, and the line says why.
    assert change.outcome == "kept", result.line()
    # The stall rule is what keeps it when the window before was clean (the 20 ms wait:
    # tens of ms). In a CI run on 2 loaded cores the window before held its own stall of
    # the clients (p99 282 ms before, 320 ms after): then the after window is not worse
    # beyond noise and the plain comparison keeps the change, which the reason says.
    if change.before["client_p99_s"] < 0.1:
        assert "a stall of the clients' machine, not the config" in change.reason
    else:
        assert change.reason.startswith("client p99"), change.reason
    assert change.after["server_mean_s"] < change.before["server_mean_s"]
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC


@pytest.mark.integration
def test_a_pause_of_the_servers_machine_does_not_undo_a_good_change(
    client: TritonClient, triton: Settings, tmp_path: Path
) -> None:
    # A copy of the model whose execution stalls for 1.5 s in the window after a change that
    # is clearly better, as a machine that pauses does (CI: 550.89 ms after, 35.01 ms
    # before). The requests Triton holds meanwhile wait in its queue, so its own mean per
    # request says worse, as the clients' p99 does; the typical second does not. Clearly
    # better on a machine however busy: from batches of 8 only, waited for up to 100 ms,
    # back to the repository's config, at 60/s: eight requests take 117 ms to come, so
    # most batches wait out the 100 ms and every second's p99 is at least that, on top of
    # whatever the machine adds to both configs. At 150/s a batch of 8 fills in about 47 ms:
    # in new clones on the busy cores the median second's p99 went 75.30 -> 87.57 ms and
    # 45.11 -> 54.16 ms (from batches of 4), the spec config's own seconds slower there
    # than the waits it removed, and the change was rolled back. From the 20 ms wait, on a
    # machine at load 10 every second's p99 was 32 ms under both configs.
    name, switch = "stalling_add", tmp_path / "stall"
    spec = client.model_config_json(MODEL)
    slow = apply.override(spec, BatcherConfig(8, (8,), 100_000, 1), name)
    old = load_stalling_copy(client, MODEL, name, switch, slow, triton.model_repository)
    new = apply.override(old, from_model_config(spec), name)
    stalled: list[float] = []

    def stall() -> None:
        switch.touch()
        stalled.append(time.monotonic())
        # At 60/s, 90 requests held 0.75 s on average: about 110 ms on Triton's mean over
        # the window's 600, twice the mean the waits of batches of 8 give before.
        time.sleep(1.5)
        switch.unlink()

    def say(line: str) -> None:
        if line.startswith("watching") and line.endswith("after the change"):
            threading.Timer(LONG_WATCH_S / 2, stall).start()

    params = RunParams(
        "rate", model=name, url=client.url, rate=60.0, poisson=True, duration_s=90.0, seed=13
    )
    try:
        with poisson_traffic(params, tmp_path / "runs.sqlite3") as db:
            result = apply.apply_and_watch(
                client, name, old, new, None, LONG_WATCH_S, store=db, say=say
            )
        served = from_model_config(client.model_config_json(name)).describe()
    finally:
        switch.unlink(missing_ok=True)
        client.unload_model(name)
        shutil.rmtree(triton.model_repository / name)
    change = result.change
    assert stalled, (result.line(), change.before, change.after)
    before, after = Seen(**change.before), Seen(**change.after)
    # The stall is in the window's p99 and in Triton's own mean, which says no better ...
    assert after.client_p99_s is not None and after.client_p99_s > 0.5, after
    assert not apply.triton_better(before, after), (before, after)
    # ... and is told from the config by the typical second: kept, and the line says why.
    assert change.outcome == "kept", result.line()
    assert "a pause of the machine, not the config" in change.reason, change.reason
    assert served == SPEC


@pytest.mark.integration
def test_a_change_that_triples_latency_is_rolled_back_within_the_window(
    client: TritonClient, traffic: Path
) -> None:
    old = client.model_config_json(MODEL)
    # Batches of 8 only, waiting up to 60 ms for them: at 150/s a batch fills in about 47 ms
    # and a request waits about 23 ms. Batches of 4 waiting 20 ms (a wait of about 10 ms)
    # were once the change: in a CI run on the loaded machine Triton's mean under the spec
    # config was already 4.10 ms, and the change raised it to 10.26 ms, 2.5 times.
    new = live(client, BatcherConfig(8, (8,), 60_000, 1))
    started = time.monotonic()
    result = apply.apply_and_watch(client, MODEL, old, new, None, WATCH_S, store=traffic)
    took = time.monotonic() - started
    change = result.change
    assert change.outcome == "rolled_back", (result.line(), change.before, change.after)
    # Rolled back for latency, by any of the rule's three signs (each has its unit test
    # above): the clients' p99; Triton's mean with the clients' p99 not improved; or Triton's
    # mean with the p99 improved from a stall before only. On the two shared cores, with the
    # other worker's servers busy, the clients' p99 before the change was once 32.6 ms, once
    # 46.03 ms, once 32.15 ms (a spec config that queues 0.5 ms): the machine's stalls, which
    # the 20 ms wait does not double, so Triton's own statistics and the typical second judge
    # it here.
    assert change.reason.startswith(("client p99 worse beyond noise", "Triton's mean")), (
        change.reason
    )
    assert "worse beyond noise" in change.reason
    # Triton's own mean per request tripled at least (its statistics, not the rule's figures).
    assert change.after["server_mean_s"] > 3 * change.before["server_mean_s"], (
        change.before,
        change.after,
    )
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC
    # Two windows, the settling, the store's commits and two loads: nothing more.
    assert took < 2 * WATCH_S + apply.SETTLE_S + 2 * 1.5 + 15
    with RunStore(traffic) as store:
        (recorded,) = store.list_changes(MODEL)
    assert recorded.outcome == "rolled_back" and recorded.reason == change.reason


@pytest.mark.integration
def test_a_config_that_fails_to_load_is_restored(client: TritonClient, traffic: Path) -> None:
    old = client.model_config_json(MODEL)
    gpu = {**old, "instance_group": [{"name": MODEL, "kind": "KIND_GPU", "count": 1}]}
    result = apply.apply_and_watch(client, MODEL, old, gpu, None, WATCH_S, store=traffic)
    change = result.change
    assert change.outcome == "failed_to_apply", result.line()
    assert "KIND_GPU but no GPUs are available" in change.reason
    # Triton refused the load and kept the model as it was: nothing had to be undone.
    assert change.reason.endswith("the previous config is still served")
    assert change.after == {}
    assert client.is_ready() and client.ready_models().count(MODEL) == 1
    assert from_model_config(client.model_config_json(MODEL)).describe() == SPEC
    with RunStore(traffic) as store:
        assert [c.outcome for c in store.list_changes(MODEL)] == ["failed_to_apply"]


def advise(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["advise", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


ADVISE = ["--model", MODEL, "--p99-ms", "20", "--rate", "150", "--cv", "1", "--window", "1"]
QUICK = ["--requests", "800", "--seeds", "2", "--cores", "2", "--request-us", "100"]


SLOW = BatcherConfig(4, (), 20_000, 1)  # Triton reads no preferred sizes as [4]


def slowed(client: TritonClient) -> dict[str, Any]:
    """Serve the 20 ms wait for batches of 4 (a config the advisor would change), and let
    the traffic run under it for a moment; the config served."""
    client.load_model(MODEL, live(client, SLOW))
    time.sleep(1.5)
    return client.model_config_json(MODEL)


@pytest.mark.integration
def test_the_dry_run_prints_the_change_the_prediction_and_the_rule(
    client: TritonClient, traffic: Path, triton: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    slowed(client)
    url = triton.url("triton_http")
    argv = [*ADVISE, *QUICK, "--watch-s", "4", "--db", str(traffic)]
    code, out, err = advise(capsys, "--url", url, *argv)
    assert code == 0, err
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("apply"))
    assert lines[first].startswith(
        f"apply (dry run; --apply does it): load on the live model {MODEL} at {url}, as a "
        "config override in Triton's memory (config.pbtxt is not touched"
    )
    assert lines[first + 1].startswith(f"  change: {SLOW.describe()} -> max_batch_size ")
    assert lines[first + 2].startswith("  predicted: client p99 ")
    # 4 s at the model's ~150/s: under 2,000 requests, and the line says what that costs.
    assert re.fullmatch(
        r"  watch: 4 s before and after the change \(given by --watch-s: \d{3} requests at "
        r"1\d\d/s, under the 2,000 .* likelier\)",
        lines[first + 3],
    ), lines[first + 3]
    assert lines[first + 4].startswith("  rule: roll back to the previous config if it fails")
    # Nothing was applied, and nothing recorded.
    assert from_model_config(client.model_config_json(MODEL)) == SLOW
    with RunStore(traffic) as store:
        assert store.list_changes() == []


@pytest.mark.integration
def test_apply_without_the_key_is_one_line_before_any_watching(
    triton: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = triton.url("triton_http")
    started = time.monotonic()
    code, _, err = advise(
        capsys, "--url", url, *ADVISE, "--apply", "--admin-key-file", str(tmp_path / "none")
    )
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "403" in err and "--admin-key-file" in err
    assert time.monotonic() - started < 5  # refused before the advisor's window


@pytest.mark.integration
def test_apply_from_the_cli_applies_the_advice_and_records_its_outcome(
    client: TritonClient, traffic: Path, triton: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """From a slowed config the advisor recommends a change, which --apply puts on the
    model and judges. On a quiet machine it is kept (the clients' p99 falls from over 20 ms);
    on an overloaded one a change fitted from a 1 s window can measure worse and is rolled
    back: either way the served config, the exit code, the JSON and the record agree (a kept
    good change and a rolled-back bad one are tested above with configs chosen by hand)."""
    old = slowed(client)
    url = triton.url("triton_http")
    key = str(triton.admin_key_file)
    argv = [*ADVISE, *QUICK, "--watch-s", "3", "--db", str(traffic), "--admin-key-file", key]
    code, out, err = advise(capsys, "--url", url, *argv, "--apply", "--json")
    applied = json.loads(out)["apply"]
    assert applied["dry_run"] is False and applied["new"] not in (None, SLOW.describe())
    assert applied["outcome"] in ("kept", "rolled_back"), applied["reason"]
    kept = applied["outcome"] == "kept"
    assert code == (0 if kept else 1), err
    # The progress went to stderr, the outcome's figures into the JSON and the store.
    assert "watching 3 s before the change" in err
    served = from_model_config(client.model_config_json(MODEL))
    assert served.describe() == (applied["new"] if kept else SLOW.describe())
    after, before = applied["after"], applied["before"]
    if kept:  # not worse beyond noise, by either observer
        assert not apply.worse(after["server_mean_s"], before["server_mean_s"])
    with RunStore(traffic) as store:
        (change,) = store.list_changes(MODEL)
    assert change.id == applied["change_id"] and change.outcome == applied["outcome"]
    assert change.old_config == old and change.after == after
    assert from_model_config(change.new_config).describe() == applied["new"]
    assert change.prediction["config"] == applied["new"]


def test_sequence_ensemble_and_decoupled_models_are_refused_with_the_reason() -> None:
    spec = json.loads(
        (Path(__file__).parent.parent / "advisor" / "data" / "loadruns_config.json").read_text()
    )
    apply.check_model(spec)  # the spec's model: dynamic batching, applied
    # A scheduler is one of a kind (a oneof): the others take dynamic batching's place.
    plain = {k: v for k, v in spec.items() if k != "dynamic_batching"}
    refused = {
        "sequence": {**plain, "sequence_batching": {"max_sequence_idle_microseconds": 1000}},
        "ensemble": {
            **plain,
            "platform": "ensemble",
            "ensemble_scheduling": {
                "step": [{"model_name": "m", "model_version": -1, "input_map": {}}]
            },
        },
        "decoupled": {**spec, "model_transaction_policy": {"decoupled": True}},
    }
    for kind, config in refused.items():
        with pytest.raises(apply.ApplyRefused, match=f"is (an? )?{kind}") as exc:
            apply.check_model(config)
        assert "so its advice is not applied to it" in str(exc.value)
