"""The fleet view at scale in Chromium: 10 stand-in Tritons x 100 models, worst first, searched.

The stand-ins are bench/standin.py's, in a process of their own, serving a real capture
(tests/exporter/data) renamed to 100 models: a third copies of ``add_unbatched`` (average batch
1 of 4), a third of ``batch_add_model`` (about 1.5 of 4), a third of ``add_max_batch_0`` (no
batching). The real exporter reads all ten, the real Prometheus scrapes it, and the page is
the launcher's dashboard. The servers answer the ``load`` capture, then the later
``after_load``: the window holds an increase for every model. The page is opened once the
queries it makes show that at the time it evaluates them (dashboard.fleet.fetch). How long
it takes to load is bench/dashboard_refresh.py's (a timed test fails on a busy machine).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, replace

import pandas as pd
import pytest
import yaml
from playwright.sync_api import Page

from bench.standin import standins, varied
from dashboard import fleet
from dashboard.views.fleet_view import WINDOWS
from promapi import PromClient
from stack.supervisor import running
from stacksettings import RULES_SETTINGS, Settings, isolated
from tests.dashboard.test_browser import ARTIFACTS
from tests.exporter.replay import standin_capture
from tests.helpers import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

SERVERS, MODELS = 10, 100
BEFORE, AFTER = (varied(standin_capture(moment), MODELS) for moment in ("load", "after_load"))
# Each copy's name is the captured model's with _mNNN added (bench.standin.varied).
KIND = {name: name.rsplit("_m", 1)[0] for name in AFTER.configs}
# The exporter reads 1,000 models from ten servers per scrape: a second was too short for it
# on this shared machine (Prometheus' scrape timeout is the interval).
SCRAPE_S = 3.0
WINDOW_S = next(iter(WINDOWS.values()))  # the page's first time range, shown at first
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
    urls: list[str]


def page_time() -> float:
    """When the page evaluates its queries if opened now: the last scrape boundary
    (dashboard.views.fleet_view._step), up to one scrape before now."""
    return time.time() // SCRAPE_S * SCRAPE_S


def unsettled(frame: pd.DataFrame) -> str:
    """What keeps the overview from the one the test checks ("" once it is that one): every
    model of every server read with each endpoint up, no alert firing and an increase of each
    model in the window."""
    if len(frame) != SERVERS * MODELS:
        return f"{len(frame)} rows"
    down = int((~frame["up"].astype(bool)).sum())
    endpoints = sorted(set(frame.loc[frame["endpoints_down"] != "", "endpoints_down"]))
    alerting = sorted(set(frame.loc[frame["alerts"] != "", "alerts"]))
    idle = int(frame["average_batch_size"].isna().sum())
    if down or endpoints or alerting or idle:
        return (
            f"{down} rows down, endpoints down {endpoints}, alerts {alerting}, "
            f"{idle} rows without an increase"
        )
    return ""


@pytest.fixture(scope="module")
def scale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scale]:
    folder = tmp_path_factory.mktemp("fleet-scale")
    with ExitStack() as stack:
        served = stack.enter_context(
            standins([BEFORE] * SERVERS, folder / "captures", later=[AFTER] * SERVERS)
        )
        rules = yaml.safe_load(RULES_SETTINGS.read_text())
        rules["windows"] = {"short": "9s", "long": "30s"}
        (folder / "rules-settings.yaml").write_text(yaml.safe_dump(rules))
        settings = replace(
            isolated(folder / "state"),
            rules_settings=folder / "rules-settings.yaml",
            scrape_interval_s=SCRAPE_S,
            triton_urls=tuple(served.urls),
            triton_metrics_urls=tuple(f"{url}/metrics" for url in served.urls),
        )
        stack.enter_context(running(settings, only={"exporter", "prometheus", "dashboard"}))
        prometheus = PromClient(settings.url("prometheus"))

        # increase() needs a sample of each counter before the later capture: every sample
        # stored before the switch is of the first one.
        def counted() -> bool:
            found = prometheus.query("count(triton_batching_executions_total)")
            return not found.empty and float(found["value"].iloc[0]) == SERVERS * MODELS

        wait_for("every model's counters", counted, 90)
        served.later()
        # The page's own queries, at the time the page would evaluate them. Not the scrapes'
        # timestamps: the exporter reads in the background (--read-interval), so a scrape
        # after the switch may serve a read from before it; nor Prometheus at "now": the
        # page evaluates at the last scrape boundary, when a first read's timeout at start
        # (1,000 configs) may still fire TritonDown over its short window (9 s here).
        why: list[str] = []

        def settled() -> bool:
            why[:] = [unsettled(fleet.fetch(prometheus, WINDOW_S, page_time()))]
            return not why[0]

        try:
            wait_for("the overview of every server up, quiet and with an increase", settled, 90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {why[0]}") from None
        yield Scale(settings, served.urls)


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
    rows = search(page, "batch_add_model_m002", SERVERS)
    assert sorted(r["server"] for r in rows) == sorted(scale.urls)
    assert {r["model"] for r in rows} == {"batch_add_model_m002"}
    # One server's first ten models (every word must match): the unbatched ones (1, 4, 7),
    # then the batched ones (2, 5, 8), the models that cannot batch (no efficiency) last.
    # A server whose address is in no other's (port 4002 would be in port 40025's).
    url = next(u for u in scale.urls if not any(u in other for other in scale.urls if other != u))
    rows = search(page, f"{url} _m00", 10)
    assert {r["server"] for r in rows} == {url}
    assert [KIND[r["model"]] for r in rows] == (
        ["add_unbatched"] * 3 + ["batch_add_model"] * 3 + ["add_max_batch_0"] * 4
    ), rows
    assert [r["batch efficiency %"] for r in rows][-4:] == [""] * 4
    assert all(r["batch efficiency %"] for r in rows[:6]), rows
    page.screenshot(path=str(ARTIFACTS / "dashboard-fleet-search.png"))
    # Nothing matches: the page says so.
    page.locator(".st-key-fleet_search input").fill("no-such-model")
    page.locator(".st-key-fleet_search input").press("Enter")
    page.get_by_text("No server or model matches 'no-such-model'.").wait_for(timeout=30_000)
