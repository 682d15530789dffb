"""The fleet view at scale in Chromium: 10 stand-in Tritons x 100 models, worst first, searched.

Each stand-in is tests/exporter/replay.py's replay server with a real capture renamed to 100
models (tests/fleet/manymodels.py): a third are copies of ``add_unbatched`` (average batch 1
of 4), a third of ``batch_add_model`` (about 1.5 of 4), a third of ``add_max_batch_0`` (no
batching). The real exporter reads all ten, the real Prometheus scrapes it, and the page is
the launcher's dashboard. The servers answer the ``load`` capture, then the later
``after_load``: the window holds an increase for every model. How long the page takes to
load is bench/dashboard_refresh.py's (a timed test would fail on a busy machine, not on slow code).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace
from itertools import cycle

import pytest
import requests
import yaml
from playwright.sync_api import Page

from stack.supervisor import running
from stacksettings import RULES_SETTINGS, Settings, isolated
from tests.dashboard.test_browser import ARTIFACTS
from tests.exporter.replay import ReplayServer, replay_server
from tests.fleet import manymodels
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

SERVERS, MODELS = 10, 100
NAMES = [f"{source}_{i:03d}" for i, source in zip(range(MODELS), cycle(manymodels.CAPTURED))]
KIND = manymodels.origin(NAMES)
# The exporter reads 1,000 models from ten servers per scrape: a second was too short for it
# on this shared machine (Prometheus' scrape timeout is the interval).
SCRAPE_S = 3.0
# The rows Streamlit's table shows (glide-data-grid draws on a canvas and keeps an accessible
# table of the rows in view), each as {column header: text}.
VISIBLE_ROWS = """
() => {
  const grid = document.querySelector('[data-testid="stDataFrame"] table[role="grid"]');
  if (!grid) return [];
  const names = [...grid.querySelectorAll('thead th')].map(th => th.innerText.trim());
  return [...grid.querySelectorAll('tbody tr')].map(tr => Object.fromEntries(
    [...tr.querySelectorAll('td')].map((td, i) => [names[i], td.innerText.trim()])));
}
"""


@dataclass
class Scale:
    settings: Settings
    servers: list[ReplayServer]

    def prom(self, expr: str) -> float | None:
        url = f"{self.settings.url('prometheus')}/api/v1/query"
        result = requests.get(url, params={"query": expr}, timeout=10).json()["data"]["result"]
        return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def scale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scale]:
    folder = tmp_path_factory.mktemp("fleet-scale")
    with ExitStack() as stack:
        servers = [
            stack.enter_context(replay_server(manymodels.replies("load", NAMES)))
            for _ in range(SERVERS)
        ]
        rules = yaml.safe_load(RULES_SETTINGS.read_text())
        rules["windows"] = {"short": "9s", "long": "30s"}
        (folder / "rules-settings.yaml").write_text(yaml.safe_dump(rules))
        settings = replace(
            isolated(folder / "state"),
            rules_settings=folder / "rules-settings.yaml",
            scrape_interval_s=SCRAPE_S,
            triton_urls=tuple(s.target.url for s in servers),
            triton_metrics_urls=tuple(s.target.metrics_url for s in servers),
        )
        stack.enter_context(running(settings, only={"exporter", "prometheus", "dashboard"}))
        scaled = Scale(settings, servers)
        every = SERVERS * MODELS

        def counted(expr: str) -> bool:
            return scaled.prom(f"count({expr})") == every

        # increase() needs a sample of each counter before the later capture.
        wait_for("every model's counters", lambda: counted("triton_batching_executions_total"), 90)
        later = manymodels.replies("after_load", NAMES)
        for server in servers:
            server.replies = later
        switched = time.time()
        wait_for(
            "a scrape of the later capture",
            lambda: counted(f"timestamp(triton_batching_executions_total) > {switched:.3f}"),
            60,
        )
        # The page reads Prometheus at the last scrape boundary: one after that scrape.
        scraped = scaled.prom("max(timestamp(triton_batching_executions_total))") or 0.0
        time.sleep(max(0.0, scraped + SCRAPE_S - time.time()))
        # The first reads of 1,000 configs can outlast the exporter's timeout and fire
        # TritonDown until its short window (9 s here) holds no failed read: the ranking is
        # checked on a quiet fleet.
        firing: list[str] = []

        def quiet() -> bool:
            url = f"{settings.url('prometheus')}/api/v1/query"
            alerts = requests.get(url, params={"query": 'ALERTS{alertstate="firing"}'}, timeout=10)
            firing[:] = [str(a["metric"]) for a in alerts.json()["data"]["result"]]
            up = scaled.prom("count(triton_batching_target_up == 1)")
            return up == SERVERS and not firing

        try:
            wait_for("every server read and no alert firing", quiet, 60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: firing {firing[:3]}") from None
        yield scaled


def visible(page: Page) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = page.evaluate(VISIBLE_ROWS)
    return rows


def rank_key(row: dict[str, str]) -> tuple[bool, bool, bool, float]:
    """dashboard.fleet.rank's order, read off a row as shown: down, alerting, then the
    lowest batch efficiency; rows without one (no traffic, no batching) last."""
    efficiency = row["batch efficiency %"]
    return (
        row["up"] == "up",
        row["firing alerts"] == "",
        efficiency == "",
        float(efficiency or "inf"),
    )


def search(page: Page, text: str, rows: int) -> list[dict[str, str]]:
    """Type ``text`` in the search box; the rows shown once they are ``rows`` rows that each
    hold every word (the caption counts them too)."""
    box = page.locator(".st-key-fleet_search input")
    box.fill(text)
    box.press("Enter")
    words = text.lower().split()

    def shown() -> list[dict[str, str]] | None:
        found = visible(page)
        haystacks = [f"{r['server']} {r['model']}".lower() for r in found]
        matching = all(w in h for w in words for h in haystacks)
        return found if len(found) == rows and matching else None

    found = wait_for(f"the rows matching {text!r}", shown, 60)
    assert found is not None  # wait_for returns a truthy value
    assert page.get_by_text(f"{rows:,} of 1,000 rows, worst first").is_visible()
    return found


def test_the_fleet_of_a_thousand_models_worst_first_and_searched(page: Page, scale: Scale) -> None:
    page.set_viewport_size({"width": 1800, "height": 900})  # every column in view
    page.goto(f"{scale.settings.url('dashboard')}/?view=Fleet")
    page.get_by_text("1,000 of 1,000 rows, worst first").wait_for(timeout=60_000)
    page.wait_for_function(f"({VISIBLE_ROWS.strip()})().length >= 10")
    # The window as it is (the whole page would be the table's 1,000 rows tall): the manual's
    # screenshot (docs/img/dashboard-fleet.png) is this file.
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-fleet.png"))
    # The worst batchers first: with every server up and quiet, the unbatched copies, a
    # quarter of their max batch each (an alert that fires meanwhile ranks its rows first).
    top = visible(page)
    assert [rank_key(r) for r in top] == sorted(rank_key(r) for r in top), top
    quiet = [r for r in top if rank_key(r)[:2] == (True, True)]
    assert quiet and {KIND[r["model"]] for r in quiet} == {"add_unbatched"}, top
    assert {r["batch efficiency %"] for r in quiet} == {"25"}, top

    # One model on every server: its ten rows.
    rows = search(page, "batch_add_model_001", SERVERS)
    assert sorted(r["server"] for r in rows) == sorted(s.target.url for s in scale.servers)
    assert {r["model"] for r in rows} == {"batch_add_model_001"}
    # One server's first ten models (every word must match): the unbatched ones (0, 3, 6, 9),
    # then the batched ones, the model that cannot batch (no efficiency) last.
    urls = [s.target.url for s in scale.servers]
    # A server whose address is in no other's (port 4002 would be in port 40025's).
    url = next(u for u in urls if not any(u in other for other in urls if other != u))
    rows = search(page, f"{url} _00", 10)
    assert {r["server"] for r in rows} == {url}
    assert [KIND[r["model"]] for r in rows] == (
        ["add_unbatched"] * 4 + ["batch_add_model"] * 3 + ["add_max_batch_0"] * 3
    ), rows
    assert [r["batch efficiency %"] for r in rows][-3:] == [""] * 3
    page.screenshot(path=str(ARTIFACTS / "dashboard-fleet-search.png"))
    # Nothing matches: the page says so.
    page.locator(".st-key-fleet_search input").fill("no-such-model")
    page.locator(".st-key-fleet_search input").press("Enter")
    page.get_by_text("No server or model matches 'no-such-model'.").wait_for(timeout=30_000)
