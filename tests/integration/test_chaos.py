"""Chaos against the real stack: under load, SIGKILL each service in turn; each comes back.

The stack runs as a user runs it (`batchscope up --detach`), with 1 s scrapes and
``for: 0s`` on the down alerts, while the load generator sends an open-loop 40 requests/s
to Triton. For every service: it is back by itself (new pid, healthy, ``restarts`` 1 in
`status`); for Triton, the exporter and Alertmanager the matching alert fired and resolved;
Prometheus still holds the samples from before its kill; and at the end the load run's
outcomes agree with Triton's statistics API, every difference explained by Triton's outage.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests
import yaml

from loadgen.results.stored import load_run
from runs.store import RunStore
from stacksettings import PORTS, RULES_SETTINGS, Settings, isolated, procstat
from tritonapi.client import TritonClient
from tritonapi.stats import ModelStats

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
# The alert a service's death must raise (Prometheus cannot page about itself, and the
# dashboard has no metrics endpoint to scrape: for those two, coming back is the check).
ALERTS = {"triton": "TritonDown", "exporter": "ExporterDown", "alertmanager": "AlertmanagerDown"}
# The series each alert reads: Prometheus must be scraping it before the kill, or a gap of
# a second or two (the restart) can fall before its first scrape.
WATCHED = {
    "triton": "triton_batching_target_up",
    "exporter": 'up{job="exporter"}',
    "alertmanager": 'up{job="alertmanager"}',
}
# The services whose alert reads Prometheus' own ``up``: held down until it is scraped
# (hold_down says why). Triton's alert reads the exporter's target_up, and Triton's
# restart takes seconds: it is killed while it runs.
HELD_DOWN = ("exporter", "alertmanager")


def wait_for(what: str, check: Callable[[], T], timeout_s: float = 40.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(requests.RequestException, OSError, ValueError, KeyError):
            value = check()
            if value:
                return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f}s: {what}")
        time.sleep(0.25)


def cli(settings: Settings, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "batchscope", *args, "--state-dir", str(settings.state_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def fast_alerts(folder: Path) -> Path:
    data = yaml.safe_load(RULES_SETTINGS.read_text())
    data["windows"] = {"short": "5s", "long": "10s"}
    for alert in data["alerts"].values():
        alert["for"] = "0s"
    data["alertmanager"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    path = folder / "rules-settings.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    folder = tmp_path_factory.mktemp("chaos")
    settings = replace(isolated(folder / "state"), rules_settings=fast_alerts(folder))
    ports = [
        a for name in PORTS for a in (f"--{name.replace('_', '-')}-port", str(settings.port(name)))
    ]
    args = ["up", "--detach", "--no-warmup", "--scrape-interval", "1", *ports]
    args += ["--rules-settings", str(settings.rules_settings)]
    try:
        started = cli(settings, *args)
        assert started.returncode == 0, started.stdout + started.stderr
        yield settings
    finally:
        down = cli(settings, "down")
        assert down.returncode == 0, down.stderr
        assert not any(p.cmdline_has(str(settings.state_dir)) for p in _processes()), "leftovers"


class _Proc:
    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cmdline_has(self, text: str) -> bool:
        try:
            return text in Path(f"/proc/{self.pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return False


def _processes() -> list[_Proc]:
    return [_Proc(p.pid) for p in procstat.processes() if not p.zombie]


def status(settings: Settings) -> dict[str, dict[str, Any]]:
    out = cli(settings, "status", "--json", timeout=60)
    return {row["name"]: row for row in json.loads(out.stdout)["services"]}


def prom(settings: Settings, path: str, **params: Any) -> Any:
    response = requests.get(f"{settings.url('prometheus')}{path}", params=params, timeout=5)
    response.raise_for_status()
    return response.json()["data"]


def fired_and_resolved(settings: Settings, alert: str, since: float) -> bool:
    """ALERTS{alertstate="firing"} has samples since ``since``, and none is firing now."""
    now = time.time()
    firing = f'ALERTS{{alertname="{alert}",alertstate="firing"}}'
    series = prom(settings, "/api/v1/query_range", query=firing, start=since, end=now, step="1s")[
        "result"
    ]
    still = [
        a for a in prom(settings, "/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == alert
    ]
    return bool(series) and not still


@dataclass(frozen=True)
class Kill:
    """One SIGKILL: when, and when the service was seen healthy again. For Triton, also
    its statistics just before (``read_at``), which die with it."""

    killed_at: float
    back_at: float
    read_at: float = 0.0
    before: ModelStats | None = None


def triton_stats(settings: Settings) -> ModelStats:
    return TritonClient(settings.url("triton_http")).model_stats("batch_add_model")


def test_every_service_comes_back_under_load_and_the_run_accounts_for_every_request(
    stack: Settings, tmp_path: Path
) -> None:
    db = tmp_path / "chaos.sqlite3"
    start = triton_stats(stack)
    load = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batchscope",
            "load",
            "rate",
            "-r",
            "40",
            "-d",
            "170",
            "--timeout",
            "2",
        ]
        + ["--url", stack.url("triton_http"), "--db", str(db), "--label", "chaos"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            "Prometheus has seen the load",
            lambda: prom(
                stack, "/api/v1/query", query="sum(triton_batching_inferences_total) > 20"
            )["result"],
        )
        kills = {
            service: kill_and_recover(stack, service)
            for service in ("triton", "exporter", "prometheus", "alertmanager", "dashboard")
        }
    finally:
        stopped_at = time.time()
        load.send_signal(signal.SIGINT)
        _, err = load.communicate(timeout=60)
    assert load.returncode in (0, 1, 130), err
    with RunStore(db) as opened:
        (row,) = opened.list_runs()
        client = load_run(opened, row["id"]).summary.client
        records = opened.load_records(row["id"])
    assert client.sent > 0
    account(records, row["started_at"], kills["triton"], stopped_at, start, stack)


def account(
    records: list[dict[str, Any]],
    t0: float,
    kill: Kill,
    stopped_at: float,
    start: ModelStats,
    stack: Settings,
) -> None:
    """The client's outcomes against Triton's statistics API (the old process's counts
    read just before its kill, the new one's now), every difference explained.

    Explained: a request that failed in flight when Triton died or was sent while it was
    down, one the client gave up on (2 s) that Triton may still have served, and one cut
    off by the load generator's stop (SIGINT) at the end. The old Triton's
    count misses what it served between the read and the kill. Anything else fails."""
    assert kill.before is not None
    served = kill.before.minus(start).phase("success").count
    served += triton_stats(stack).phase("success").count  # the restarted Triton's, from 0
    slack = 0.5  # the run's clock against this process's, and a due time against a send
    sent_at = [t0 + r["start_s"] for r in records]
    done_at = [s + r["latency_s"] for s, r in zip(sent_at, records, strict=True)]
    ok = sum(r["outcome"] == "ok" for r in records)
    outage = [
        r["outcome"] != "ok" and kill.killed_at - 2 - slack <= s <= kill.back_at + slack
        for s, r in zip(sent_at, records, strict=True)
    ]
    given_up = [r["outcome"] == "timed_out" and not o for r, o in zip(records, outage, strict=True)]
    cut_off = [
        r["outcome"] != "ok" and s >= stopped_at - 2 - slack
        for s, r in zip(sent_at, records, strict=True)
    ]
    unexplained = [
        r
        for r, o, g, c in zip(records, outage, given_up, cut_off, strict=True)
        if r["outcome"] != "ok" and not (o or g or c)
    ]
    # Served by the old Triton after the read and before its death: not in its count.
    unread = sum(
        s <= kill.killed_at + slack and d >= kill.read_at - slack
        for s, d in zip(sent_at, done_at, strict=True)
    )
    print(
        f"client: {len(records)} sent, {ok} ok, {sum(outage)} failed around Triton's outage, "
        f"{sum(given_up)} timed out elsewhere, {sum(cut_off)} cut off by the stop; Triton "
        f"served {served} (+ up to {unread} between the last read and the kill)"
    )
    assert not unexplained, unexplained[:5]
    assert ok - served <= unread, "ok requests Triton never counted"
    explained = sum(given_up) + sum(outage) + sum(cut_off)
    assert served - ok <= explained, "Triton served more than the client got"


def hold_down(stack: Settings, service: str, pid: int) -> None:
    """Stop ``service`` (SIGSTOP) until Prometheus has written it down in the series its
    alert reads; the caller then kills it.

    Those alerts read ``up``, which Prometheus writes once a scrape, and fire on a rule
    evaluation (each every 1 s here). A SIGKILL whose restart is quicker than a scrape and
    an evaluation leaves no sample of the outage, and then no alert should fire (a shipped
    one waits 2 m); on a loaded machine Alertmanager's restart was that quick
    (docs/validation/suite-time.md). Held down until Prometheus has seen it, the outage is
    one the alert must see, and the restart is still the SIGKILL's."""
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(
            f"Prometheus seeing {service} down",
            lambda: prom(stack, "/api/v1/query", query=f"{WATCHED[service]} == 0")["result"],
            timeout_s=15,  # the supervisor's own hang check kills at 20 s
        )
    except BaseException:
        os.kill(pid, signal.SIGCONT)
        raise


def kill_and_recover(stack: Settings, service: str) -> Kill:
    before = status(stack)[service]
    if service in WATCHED:
        wait_for(
            f"Prometheus scraping {WATCHED[service]}",
            lambda: prom(
                stack, "/api/v1/query", query=f"count_over_time({WATCHED[service]}[4s]) >= 3"
            )["result"],
        )
    if service == "prometheus":
        time.sleep(12)  # samples old enough to be out of Prometheus' in-memory buffers
        held_at = time.time() - 10
    outage_from = time.time()
    if service in HELD_DOWN:
        hold_down(stack, service, before["pid"])
    read_at, stats = time.time(), triton_stats(stack) if service == "triton" else None
    killed_at = time.time()
    os.kill(before["pid"], signal.SIGKILL)

    def restarted() -> dict[str, Any] | None:
        row = status(stack)[service]
        fresh = row["pid"] != before["pid"] and row["state"] == "healthy"
        return row if fresh else None

    back = wait_for(f"{service} restarted and healthy", restarted, timeout_s=60)
    assert back is not None
    kill = Kill(killed_at, time.time(), read_at, stats)
    print(f"{service}: healthy again {time.time() - killed_at:.1f}s after SIGKILL")
    assert back["restarts"] == before["restarts"] + 1
    assert back["last_exit"].startswith("killed by SIGKILL")
    if service in ALERTS:
        alert = ALERTS[service]
        wait_for(
            f"{alert} fired and resolved",
            lambda: fired_and_resolved(stack, alert, outage_from - 1),
            timeout_s=60,
        )
    if service == "prometheus":
        held = prom(stack, "/api/v1/query", query='up{job="triton"}', time=held_at)
        assert held["result"], "Prometheus lost the samples from before its kill"
    return kill


# ---- hung, not dead: SIGSTOP ------------------------------------------------------------
HUNG_AFTER_S = 6


def shipped_alerts(folder: Path) -> Path:
    """The shipped alerts and `for` durations (TritonDown 0s, ExporterDown 2m), short windows."""
    data = yaml.safe_load(RULES_SETTINGS.read_text())
    data["windows"] = {"short": "5s", "long": "10s"}
    data["alertmanager"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    path = folder / "rules-settings.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def hung_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    folder = tmp_path_factory.mktemp("hung")
    settings = replace(isolated(folder / "state"), rules_settings=shipped_alerts(folder))
    ports = [
        a for name in PORTS for a in (f"--{name.replace('_', '-')}-port", str(settings.port(name)))
    ]
    args = ["up", "--detach", "--no-warmup", "--scrape-interval", "1", *ports]
    args += ["--rules-settings", str(settings.rules_settings), "--hung-after", str(HUNG_AFTER_S)]
    try:
        started = cli(settings, *args)
        assert started.returncode == 0, started.stdout + started.stderr
        yield settings
    finally:
        down = cli(settings, "down")
        assert down.returncode == 0, down.stderr
        assert not any(p.cmdline_has(str(settings.state_dir)) for p in _processes()), "leftovers"


def alertmanager_alerts(settings: Settings, name: str) -> list[dict[str, Any]]:
    response = requests.get(
        f"{settings.url('alertmanager')}/api/v2/alerts",
        params={"filter": f'alertname="{name}"'},
        auth=settings.alertmanager_auth(),
        timeout=5,
    )
    response.raise_for_status()
    alerts: list[dict[str, Any]] = response.json()
    return alerts


def firing_spans(settings: Settings, alert: str, since: float) -> int:
    """Separate firing spans of ``alert`` since ``since`` (1 s steps): one page is one span."""
    query = f'ALERTS{{alertname="{alert}",alertstate="firing"}}'
    result = prom(
        settings, "/api/v1/query_range", query=query, start=since, end=time.time(), step="1s"
    )["result"]
    spans = 0
    for series in result:
        times = [float(t) for t, _ in series["values"]]
        spans += 1 + sum(b - a > 1.5 for a, b in zip(times, times[1:], strict=False))
    return spans


def stop_and_recover(settings: Settings, service: str) -> tuple[float, dict[str, Any]]:
    """SIGSTOP the service's main process; it must come back as a new, healthy process."""
    before = status(settings)[service]
    stopped_at = time.time()
    os.kill(before["pid"], signal.SIGSTOP)

    def restarted() -> dict[str, Any] | None:
        row = status(settings)[service]
        return row if row["pid"] != before["pid"] and row["state"] == "healthy" else None

    back = wait_for(f"{service} restarted after hanging", restarted, timeout_s=90)
    assert back is not None
    print(f"{service}: healthy again {time.time() - stopped_at:.1f}s after SIGSTOP")
    assert back["restarts"] == before["restarts"] + 1
    assert back["last_exit"].startswith("restarted: hung for "), back["last_exit"]
    hung_s = int(back["last_exit"].removeprefix("restarted: hung for ").split()[0])
    assert HUNG_AFTER_S <= hung_s <= HUNG_AFTER_S + 10, back["last_exit"]
    assert procstat.start_time(before["pid"]) is None, "the hung process was left running"
    text = cli(settings, "status", timeout=60).stdout
    assert f"restarted: hung for {hung_s} s" in text, text
    return stopped_at, back


def triton_successes(settings: Settings, model: str) -> int:
    url = f"{settings.url('triton_http')}/v2/models/{model}/stats"
    stats = requests.get(url, timeout=5).json()["model_stats"][0]
    return int(stats["inference_stats"]["success"]["count"])


def test_a_hung_triton_is_restarted_and_the_client_agrees_with_tritons_statistics(
    hung_stack: Settings, tmp_path: Path
) -> None:
    db = tmp_path / "hung.sqlite3"
    load = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batchscope",
            "load",
            "rate",
            "-r",
            "40",
            "-d",
            "45",
            "--timeout",
            "2",
        ]
        + ["--url", hung_stack.url("triton_http"), "--db", str(db), "--label", "hung"]
        + ["--model", "batch_add_model"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(
            "Prometheus has seen the load",
            lambda: prom(
                hung_stack, "/api/v1/query", query="sum(triton_batching_inferences_total) > 20"
            )["result"],
        )
        stopped_at, _ = stop_and_recover(hung_stack, "triton")
        _, err = load.communicate(timeout=120)
    finally:
        if load.poll() is None:
            load.send_signal(signal.SIGINT)
            load.communicate(timeout=60)
    assert load.returncode in (0, 1), err
    with RunStore(db) as opened:
        (row,) = opened.list_runs()
        run = load_run(opened, row["id"])
        records = opened.load_records(row["id"])
    client = run.summary.client
    assert client.sent == client.ok + client.failed + client.timed_out
    assert len(records) == client.sent
    # After the SIGSTOP the old process answered nothing more: every request answered since
    # was answered by the new one, whose own statistics began at zero (no warm-up, and
    # nothing but this run sends inferences). It may also have executed requests the client
    # had given up on (timed out at 2 s on a busy machine), never one that failed to connect.
    after = [r["outcome"] for r in records if run.started_at + r["start_s"] >= stopped_at]
    ok_after, timed_out_after = after.count("ok"), after.count("timed_out")
    served = triton_successes(hung_stack, "batch_add_model")
    print({"sent": client.sent, "after the stop": len(after), "ok": ok_after, "served": served})
    assert ok_after <= served <= ok_after + timed_out_after
    assert ok_after > 0
    assert client.timed_out + client.failed > 0  # the hang cost requests, and says so
    # One page: TritonDown (the exporter could not read Triton), and no ServiceHung beside it.
    wait_for("TritonDown fired", lambda: firing_spans(hung_stack, "TritonDown", stopped_at - 1))
    assert firing_spans(hung_stack, "TritonDown", stopped_at - 1) == 1
    # (Another test's hung exporter may have paged: only Triton's page would be a second.)
    pages = alertmanager_alerts(hung_stack, "ServiceHung")
    assert [p for p in pages if p["labels"]["service"] == "triton"] == []


def test_a_hung_exporter_is_restarted_and_pages_once(hung_stack: Settings) -> None:
    wait_for(
        "Prometheus scraping the exporter",
        lambda: prom(
            hung_stack, "/api/v1/query", query='count_over_time(up{job="exporter"}[4s]) >= 3'
        )["result"],
    )
    stopped_at, _ = stop_and_recover(hung_stack, "exporter")
    pages = wait_for(
        "ServiceHung in Alertmanager", lambda: alertmanager_alerts(hung_stack, "ServiceHung")
    )
    assert [p["labels"]["service"] for p in pages] == ["exporter"]
    time.sleep(3)  # a second page would have arrived by now
    assert [p["labels"]["service"] for p in alertmanager_alerts(hung_stack, "ServiceHung")] == [
        "exporter"
    ]
    # ExporterDown waits 2m: a hang the supervisor ends in seconds pages only once.
    assert firing_spans(hung_stack, "ExporterDown", stopped_at - 1) == 0


def test_stack_restart_goes_through_the_supervisor(stack: Settings) -> None:
    """`batchscope restart SERVICE` as a user types it, answered by the detached
    stack's supervising process: a new, healthy process, one restart more, the old gone."""
    before = status(stack)["alertmanager"]
    done = cli(stack, "restart", "alertmanager")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("restarted alertmanager ("), done.stdout
    after = status(stack)["alertmanager"]
    assert after["pid"] != before["pid"] and after["state"] == "healthy", after
    assert after["restarts"] == before["restarts"] + 1
    assert after["last_exit"].startswith("stopped for `restart`"), after
    assert procstat.start_time(before["pid"]) is None
    ready = requests.get(
        f"{stack.url('alertmanager')}/-/ready", auth=stack.alertmanager_auth(), timeout=10
    )
    assert ready.status_code == 200
    wrong = cli(stack, "restart", "no_such_service", timeout=60)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong.stderr
    assert "no service 'no_such_service' in this stack (running: triton, " in wrong.stderr
