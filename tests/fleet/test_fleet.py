"""A fleet on one machine: three Tritons, each in its own network namespace, watched by one
stack in attach mode (``up --triton-url`` x 3), with the real exporter, Prometheus and
Alertmanager on the host.

Each server has its own batching config; the first one restricts its APIs with a key the
stack is not given (a foreign Triton), so the exporter must degrade, not fail. Traffic goes
only to the namespaces' addresses. One test kills a server and starts it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from playwright.sync_api import Page
from prometheus_client.parser import text_string_to_metric_families
from streamlit import config as st_config

from batchscope.main import main as batchscope
from dashboard import fleet as overview
from loadgen.clients.burst import burst, infer_body
from promapi import PromClient
from stack import dashboard as dashboard_row
from stack.supervisor import running
from stacksettings import ROOT, RULES_SETTINGS, Settings, isolated
from tests.dashboard.test_browser import shows, start_run
from tests.deploy.test_compose import COMPOSE, resolved
from tests.fleet import dashboard_run
from tests.fleet.netns import Fleet, Server
from tests.helpers import model_stats, wait_for

# One xdist worker for both fleet modules: the namespaces' names are the machine's.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("fleet")]

BASE = (ROOT / "model_repository" / "batch_add_model" / "config.pbtxt").read_text()
KEY = "fleet-key-0"


def config(name: str, body: str) -> str:
    """The add model's inputs and outputs under ``name``, with ``body`` for its batching."""
    head = BASE.split("dynamic_batching")[0].replace('"batch_add_model"', f'"{name}"')
    return head.replace("max_batch_size: 4", body.split("\n", 1)[0]) + body.split("\n", 1)[1]


# One batching config per server (the first line is the max_batch_size line).
SERVERS = [
    # The spec's config, behind a key the stack does not hold.
    Server(0, {"batch_add_model": BASE}, key=KEY),
    Server(
        1,
        {
            "batch_add_model": config(
                "batch_add_model",
                "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 2000 }\n",
            )
        },
    ),
    Server(
        2,
        {
            "batch_add_model": config(
                "batch_add_model",
                "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 4 ] "
                "max_queue_delay_microseconds: 100 }\n",
            ),
            "add_unbatched": config("add_unbatched", "max_batch_size: 4\n\n"),
        },
    ),
]
MAX_BATCH = {(0, "batch_add_model"): 4, (1, "batch_add_model"): 8}
MAX_BATCH |= {(2, "batch_add_model"): 4, (2, "add_unbatched"): 4}


@dataclass
class Attached:
    fleet: Fleet
    settings: Settings
    started: float

    def prom(self, expr: str) -> list[dict[str, Any]]:
        url = f"{self.settings.url('prometheus')}/api/v1/query"
        body = requests.get(url, params={"query": expr}, timeout=5).json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result


def fast_rules(folder: Path) -> Path:
    """The default rules with windows and `for` durations in seconds."""
    data = yaml.safe_load(RULES_SETTINGS.read_text())
    data["windows"] = {"short": "5s", "long": "10s"}
    for alert in data["alerts"].values():
        alert["for"] = "2s"
    path = folder / "rules-settings.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def attached(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attached]:
    started = time.monotonic()
    folder = tmp_path_factory.mktemp("fleet")
    with Fleet(folder / "servers", [replace(s) for s in SERVERS]) as fleet:
        for server in fleet.servers:
            fleet.start(server)
        fleet.wait_ready()
        settings = replace(
            isolated(folder / "state"),
            rules_settings=fast_rules(folder),
            triton_urls=tuple(s.url for s in fleet.servers),
            triton_metrics_urls=tuple(s.metrics_url for s in fleet.servers),
        )
        # Every service, the dashboard too (the browser test); AppTest drives its own copy.
        with running(settings):
            yield Attached(fleet, settings, started)
    print(f"\nfleet fixture: {time.monotonic() - started:.1f} s wall time")


def test_the_stack_holds_per_target_series_for_every_model(attached: Attached) -> None:
    servers = attached.fleet.servers
    expected = {(servers[i].url, model): mbs for (i, model), mbs in MAX_BATCH.items()}

    def seen() -> dict[tuple[str, str], float]:
        rows = attached.prom("triton_batching_max_batch_size")
        return {(r["metric"]["target"], r["metric"]["model"]): float(r["value"][1]) for r in rows}

    assert wait_for("every server's models in Prometheus", lambda: seen() == expected or None, 120)
    up = {r["metric"]["target"]: r["value"][1] for r in attached.prom("triton_batching_target_up")}
    assert up == {s.url: "1" for s in servers}
    # Prometheus scrapes each server's own metrics too (default port 8002, paired by order).
    instances = {f"{s.address}:8002" for s in servers}

    def scraped() -> set[str]:
        return {r["metric"]["instance"] for r in attached.prom('up{job="triton"} == 1')}

    assert wait_for("Prometheus scraping every server", lambda: scraped() == instances, 20)
    # The first server keeps its repository index behind a key the stack was not given:
    # only its models' READY states are missing; the other two report theirs.
    ready = {r["metric"]["target"] for r in attached.prom("triton_batching_model_ready")}
    assert ready == {servers[1].url, servers[2].url}
    # Batching configs differ per server, and the series say so. The second server's config
    # names no preferred size: Triton 2.51 serves it with preferred_batch_size [max_batch_size].
    preferred = attached.prom("triton_batching_preferred_batch_size")
    sizes = {(r["metric"]["target"], r["metric"]["size"]) for r in preferred}
    assert sizes == {
        (servers[0].url, "2"),
        (servers[0].url, "4"),
        (servers[1].url, "8"),
        (servers[2].url, "4"),
    }


def test_check_config_reads_each_servers_served_configs(
    attached: Attached, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check-config", "--state-dir", str(attached.settings.state_dir)]
    for server in attached.fleet.servers:
        argv += ["--triton-url", server.url]
    assert batchscope(argv) == 0
    out = capsys.readouterr().out
    assert "check-config: 4 model(s) OK on http://10.213.77.2:8000" in out


@pytest.fixture
def dashboard_env(
    attached: Attached, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Path]:
    """The environment the launcher gives the dashboard in attach mode; the store's path."""
    db = tmp_path / "runs.sqlite3"
    env = dashboard_row.environment(attached.settings)
    for name, value in {**env, "DASHBOARD_STORE": str(db), "LOADGEN_DB": str(db)}.items():
        monkeypatch.setenv(name, value)
    before = st_config.get_option("server.address")
    st_config.set_option("server.address", "127.0.0.1")
    yield db
    st_config.set_option("server.address", before)


def test_a_dashboard_load_run_reaches_a_namespaced_server(
    attached: Attached, dashboard_env: Path
) -> None:
    server = attached.fleet.servers[1]
    before = model_stats(server.url, "batch_add_model").execution_count
    at = dashboard_run.AppTest.from_file(str(dashboard_run.APP), default_timeout=60)
    assert dashboard_run.start_run(at, requests=4, server=server.url) == []
    assert dashboard_run.wait_done(at, dashboard_env) == []
    assert dashboard_run.newest_run(dashboard_env) == {
        "url": server.url,
        "status": "ok",
        "sent": 4,
        "ok": 4,
    }
    # The requests reached that server (and were batched there: fewer executions).
    executed = model_stats(server.url, "batch_add_model").execution_count - before
    assert 1 <= executed <= 4


def test_a_load_run_outside_the_allowlist_is_refused_with_one_line(
    attached: Attached, dashboard_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The host side of the first veth: a real address of this machine, not a stack target.
    outside = f"http://{attached.fleet.servers[0].host_address}:8000"
    monkeypatch.setenv("DASHBOARD_TRITON_URL", outside)
    monkeypatch.setenv("DASHBOARD_TRITON_URLS", outside)
    at = dashboard_run.AppTest.from_file(str(dashboard_run.APP), default_timeout=60)
    (error,) = dashboard_run.start_run(at) or dashboard_run.wait_done(at, dashboard_env)
    assert error.startswith(f"The run did not start: --url: {outside} is neither loopback nor")
    assert "--allow-remote" in error and "\n" not in error
    assert not dashboard_env.exists()  # nothing was stored
    # The CLI refuses it the same way, before sending anything.
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASHBOARD_")}
    done = subprocess.run(
        [sys.executable, "-m", "batchscope", "load", "concurrent", "--url", outside, "--no-store"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "--url" in line and "neither loopback nor one of the stack's Tritons" in line


@pytest.mark.browser
def test_a_load_run_from_the_dashboard_in_a_browser_reaches_a_namespaced_server(
    attached: Attached, page: Page
) -> None:
    settings, server = attached.settings, attached.fleet.servers[0]
    page.goto(f"{settings.url('dashboard')}/?view=Load+runs")
    page.get_by_role("heading", name="Load runs").wait_for(timeout=60_000)
    # The server selector starts on the first server the stack watches.
    shows(page, server.url)
    before = model_stats(server.url, "batch_add_model").execution_count
    start_run(page, settings, 2, "browser to the first server")
    db = settings.store
    assert dashboard_run.newest_run(db)["url"] == server.url
    assert dashboard_run.newest_run(db)["status"] == "ok"
    assert model_stats(server.url, "batch_add_model").execution_count > before


def test_the_compose_wiring_reaches_triton_by_its_service_name(
    attached: Attached, tmp_path: Path
) -> None:
    """The exporter and the dashboard with the environment compose.yaml resolves to, in the
    first server's namespace, where ``triton`` resolves to that server (its hosts file)."""
    fleet, server = attached.fleet, attached.fleet.servers[0]
    compose = resolved(COMPOSE)["services"]
    fleet.hosts(server, {"triton": server.address})
    # What compose mounts (secrets, volumes) is replaced by files here.
    key_file, token_file, db = tmp_path / "key", tmp_path / "token", tmp_path / "runs.sqlite"
    key_file.write_text(KEY + "\n")
    token_file.write_text("compose-token\n")
    mounted = {
        "/run/secrets/triton_admin_key": str(key_file),
        "/run/secrets/dashboard_token": str(token_file),
        "/data/runs.sqlite": str(db),
        "/models": str(ROOT / "model_repository"),
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith(("STACK_", "DASHBOARD_"))}

    def environment(service: str) -> dict[str, str]:
        env = compose[service].get("environment") or {}
        return {**base, **{k: mounted.get(v, v) for k, v in env.items()}}

    command = compose["exporter"]["command"]
    assert command[:2] == ["batchscope", "exporter"]
    exporter = subprocess.Popen(
        fleet.exec_argv(server, [sys.executable, "-m", "batchscope", "exporter", *command[2:]]),
        cwd=ROOT,
        env=environment("exporter"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:

        def exported() -> str | None:
            try:
                text = requests.get(f"http://{server.address}:9733/metrics", timeout=2).text
            except requests.RequestException:
                return None
            return text if 'target_up{target="http://triton:8000"} 1.0' in text else None

        text = wait_for("the compose exporter reads triton", exported, 30)
        assert text is not None
        # The compose secret opens the restricted repository index: the states are there.
        ready = [
            (sample.labels["target"], sample.labels["model"], sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "triton_batching_model_ready"
        ]
        assert ready == [("http://triton:8000", "batch_add_model", 1.0)]

        before = model_stats(server.url, "batch_add_model").execution_count
        done = subprocess.run(
            fleet.exec_argv(
                server,
                [
                    sys.executable,
                    "-m",
                    "tests.fleet.dashboard_run",
                    "--token",
                    "compose-token",
                    "--db",
                    str(db),
                ],
            ),
            cwd=ROOT,
            env=environment("dashboard"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        body = json.loads(done.stdout.strip().splitlines()[-1])
        assert body == {
            "errors": [],
            "run": {"url": "http://triton:8000", "status": "ok", "sent": 3, "ok": 3},
        }
        assert model_stats(server.url, "batch_add_model").execution_count > before
    finally:
        exporter.kill()
        exporter.wait(timeout=10)


def test_the_fleet_view_ranks_the_worst_batcher_first(
    attached: Attached, dashboard_env: Path
) -> None:
    first, second = attached.fleet.servers[:2]
    body = infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})

    def counted() -> bool:  # increase() counts from a series' first sample, so one before
        rows = attached.prom('triton_batching_executions_total{model="batch_add_model"}')
        return {first.url, second.url} <= {r["metric"]["target"] for r in rows}

    wait_for("both servers' execution counters in Prometheus before the load", counted, 120)
    # The first server gets bursts of 4 (its max_batch_size), the second bursts of 2 (of 8).
    for server, size in ((first, 4), (second, 2)):
        for _ in range(15):
            answers = burst(server.address, 8000, "batch_add_model", [body] * size)
            assert all(a["outputs"][0]["data"] == [3.0] for a in answers)
    done = time.time()
    wait_for(
        "a scrape after the load",
        lambda: attached.prom(f'timestamp(up{{job="exporter"}}) > {done + 1.5:.3f}'),
        30,
    )
    table = overview.fetch(PromClient(attached.settings.url("prometheus")), 120)
    rows = list(zip(table["target"], table["model"], strict=True))
    assert sorted(rows) == sorted((attached.fleet.servers[i].url, m) for i, m in MAX_BATCH)
    assert table["up"].all()
    busy = table[table["batch_efficiency"].notna()]
    assert list(busy["target"])[:2] == [second.url, first.url]
    efficiency = dict(zip(busy["target"], busy["batch_efficiency"], strict=True))
    # With preferred sizes [2, 4] the first server often sends a batch as soon as 2 are in.
    assert efficiency[second.url] <= 0.5 and efficiency[second.url] < efficiency[first.url]
    # The page shows the same table over its own range (5 minutes: another test's load on a
    # third server may rank it first there), and this test's two servers in the same order.
    at = dashboard_run.AppTest.from_file(str(dashboard_run.APP), default_timeout=60).run()
    at.sidebar.radio(key="view").set_value("Fleet").run()
    assert not at.exception
    shown = list(at.dataframe[0].value["server"])
    same = overview.fetch(PromClient(attached.settings.url("prometheus")), 300)
    assert sorted(shown) == sorted(same["target"])
    assert shown.index(second.url) < shown.index(first.url)
    assert set(at.dataframe[0].value["up"]) == {"up"}


def test_killing_one_server_fires_triton_down_for_it_only(
    attached: Attached, dashboard_env: Path
) -> None:
    """It kills a server and, whatever happens, starts it again and waits until the stack
    reads it, so the module's other tests find all three in any order."""
    fleet = attached.fleet
    dead = fleet.servers[2]
    models = {model for (i, model) in MAX_BATCH if i == 2}

    def known() -> bool:  # the fleet view keeps what the stack saw before the kill
        rows = attached.prom(f'triton_batching_max_batch_size{{target="{dead.url}"}}')
        return {r["metric"]["model"] for r in rows} == models

    wait_for("the stack reads the server's models before the kill", known, 120)
    fleet.kill(dead)
    try:
        _only_the_dead_server_is_down(attached, dead, fleet.servers[:2], time.time())
    finally:
        fleet.start(dead)
        fleet.wait_ready()

        def read_again() -> bool:
            rows = attached.prom(f'triton_batching_target_up{{target="{dead.url}"}} == 1')
            return bool(rows)

        wait_for("the restarted server read by the exporter", read_again, 60)


def _only_the_dead_server_is_down(
    attached: Attached, dead: Server, alive: list[Server], killed_at: float
) -> None:

    def firing() -> list[dict[str, Any]]:
        return attached.prom('ALERTS{alertname="TritonDown", alertstate="firing"}')

    alerts = wait_for("TritonDown firing", firing, 60)
    time.sleep(3)  # a few more evaluations: nothing else may fire
    alerts = firing()
    assert [a["metric"].get("target") for a in alerts] == [dead.url]
    up = {r["metric"]["target"]: r["value"][1] for r in attached.prom("triton_batching_target_up")}
    assert up == {dead.url: "0", **{s.url: "1" for s in alive}}
    # The other two keep reporting: fresh samples of their models after the kill.
    fresh = attached.prom(f"timestamp(triton_batching_max_batch_size) > {killed_at + 1:.3f}")
    assert {r["metric"]["target"] for r in fresh} == {s.url for s in alive}
    # The fleet view puts the dead server first, with its alert, and keeps its models.
    table = overview.fetch(PromClient(attached.settings.url("prometheus")), 120)
    down = table[~table["up"]]
    assert (
        set(down["target"]) == {dead.url} and list(table["target"])[: len(down)] == [dead.url] * 2
    )
    assert set(down["alerts"]) == {"TritonDown"}
    # The dashboard names the server and why, and only that one.
    at = dashboard_run.AppTest.from_file(str(dashboard_run.APP), default_timeout=60).run()
    warnings = [str(w.value) for w in at.warning if "The exporter cannot read" in str(w.value)]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"The exporter cannot read Triton at {dead.url} (")
    assert "connection refused" in warnings[0]
