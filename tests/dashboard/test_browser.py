"""The dashboard of the real running stack in headless Chromium (Debian's, driven by Playwright).

Saves screenshots under test-artifacts/ (gitignored) for a person to look at.
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from dashboard import fmt
from loadgen.results.stored import load_run
from loadgen.results.summary import LoadRun
from runs.store import RunStore
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.dashboard.conftest import busy, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
INPUTDATA = Path(__file__).resolve().parents[1] / "loadgen" / "inputdata"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# Marks a chart has drawn: line paths with at least two points, bars.
DRAWN_MARKS = """
gd => {
  const lines = [...gd.querySelectorAll('.scatterlayer .trace path.js-line')]
    .filter(p => (p.getAttribute('d') || '').includes('L')).length;
  const fills = [...gd.querySelectorAll('.scatterlayer .trace path.js-fill')]
    .filter(p => (p.getAttribute('d') || '').includes('L')).length;
  const bars = gd.querySelectorAll('.barlayer .point').length;
  return lines + fills + bars;
}
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1600, "height": 1200})
    page = context.new_page()
    try:
        yield page
    finally:
        # Whatever happened, the last state of the page is there to look at.
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-last.png"), full_page=True)
        context.close()


def save_whole_page(page: Page, name: str) -> None:
    """Streamlit scrolls inside its own container: grow the window to the content first."""
    height = page.evaluate(
        "Math.max(...[...document.querySelectorAll('section, div')].map(e => e.scrollHeight))"
    )
    page.set_viewport_size({"width": 1600, "height": min(int(height) + 100, 8000)})
    page.wait_for_timeout(1500)  # plotly redraws at the new size
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def chart_marks(page: Page) -> list[int]:
    return [plot.evaluate(DRAWN_MARKS) for plot in page.locator(".js-plotly-plot").all()]


def test_live_view_draws_every_chart(page: Page, loaded_stack: Settings) -> None:
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url))
    page.goto(loaded_stack.url("dashboard"))
    page.get_by_role("heading", name="Live: batch_add_model").wait_for(timeout=60_000)
    page.wait_for_function(
        "document.querySelectorAll('.js-plotly-plot').length === 4", timeout=60_000
    )
    page.wait_for_function(
        f"[...document.querySelectorAll('.js-plotly-plot')].every({DRAWN_MARKS.strip()} ) ",
        timeout=30_000,
    )
    # The wait above is the check that every chart drew marks: reading them again races the
    # live view's refresh, which redraws a chart from empty now and then.
    save_whole_page(page, "dashboard-live.png")
    assert page.get_by_text("Average batch size").first.is_visible()
    assert page.get_by_text("The gap between the lines is batching at work").is_visible()
    # Auto-refresh: the live part re-runs by itself (every 5 s) and its KPI time moves on.
    stamp = page.get_by_text("KPIs at").inner_text()
    page.wait_for_function(f"!document.body.innerText.includes({stamp!r})", timeout=20_000)
    # Everything the page loaded came from the dashboard: nothing off the machine (the
    # page's icon once came from fonts.gstatic.com).
    own = loaded_stack.url("dashboard") + "/"
    assert fetched and not [u for u in fetched if not u.startswith((own, "data:", "blob:"))]


THROUGHPUT = "Inferences/s vs executions/s"
# What the live view shows: each KPI's label and text, each chart's traces by title with
# their last point, and whether Streamlit is still running the script (elements go stale).
SHOWN = """
() => {
  const kpis = {};
  for (const m of document.querySelectorAll('[data-testid="stMetric"]')) {
    const label = m.querySelector('[data-testid="stMetricLabel"]').innerText.trim();
    kpis[label] = m.querySelector('[data-testid="stMetricValue"]').innerText.trim();
  }
  const charts = {};
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    // Streamlit's theme wraps a title in <b>.
    const title = (((gd.layout || {}).title || {}).text || '').replace(/<[^>]*>/g, '');
    charts[title] = {};
    for (const trace of gd._fullData || []) {
      const x = Array.from(trace.x || []), y = Array.from(trace.y || []);
      charts[title][trace.name] = y.length ? [x[x.length - 1], y[y.length - 1]] : null;
    }
  }
  const busy = document.querySelectorAll(
    '[data-stale="true"], [data-testid="stStatusWidgetRunningIcon"]').length;
  return {kpis, charts, busy};
}
"""


def chart_end(shown: dict, title: str, trace: str) -> float:
    """The unix time of a trace's last point (0 when it has none)."""
    last = shown["charts"].get(title, {}).get(trace)
    return 0.0 if last is None else datetime.fromisoformat(last[0]).replace(tzinfo=UTC).timestamp()


def at_rest(page: Page, drawn_since: float, timeout_s: float = 60) -> dict:
    """What the page shows once its charts end at ``drawn_since`` or later (a run of the
    script that began after it) and it no longer changes (two reads a second apart agree)."""
    deadline = time.monotonic() + timeout_s
    before = page.evaluate(SHOWN)
    while time.monotonic() < deadline:
        page.wait_for_timeout(1000)
        now = page.evaluate(SHOWN)
        fresh = chart_end(now, THROUGHPUT, "inferences/s") >= math.floor(drawn_since)
        if fresh and now == before and not now["busy"] and len(now["charts"]) == 4:
            return dict(now)
        before = now
    raise AssertionError(f"the page kept changing for {timeout_s:g} s: {before}")


def test_live_kpis_are_the_charts_last_point(page: Page, loaded_stack: Settings) -> None:
    """A load that starts after an idle stretch of the range: the KPI row shows its rate
    now, the value the charts end on, not an average over the range."""
    s = loaded_stack
    page.goto(s.url("dashboard"))
    page.get_by_role("heading", name="Live: batch_add_model").wait_for(timeout=60_000)

    def idle() -> bool:
        last = page.evaluate(SHOWN)["charts"].get(THROUGHPUT, {}).get("inferences/s")
        return last is not None and last[1] == 0

    # The idle stretch: the throughput chart ends on zero.
    wait_for(idle, 60, "the throughput chart to end on zero")
    with busy(s, "batch_add_model", size=4):
        # Turning auto-refresh off re-runs the page once, under load, and then leaves it still.
        clicked = time.time()
        page.get_by_text("Auto-refresh every").click()
        shown = at_rest(page, drawn_since=clicked)
    save_whole_page(page, "dashboard-live-kpis.png")
    kpis, charts = shown["kpis"], shown["charts"]
    (t_inf, inferences), (t_exe, executions) = (
        charts[THROUGHPUT]["inferences/s"],
        charts[THROUGHPUT]["executions/s"],
    )
    t_avg, average = charts["Average batch size"]["average batch size"]
    t_queue, queue_ms = charts["Queue vs compute time per request"]["queue"]
    t_compute, compute_ms = charts["Queue vs compute time per request"]["compute"]
    assert inferences > 0 and len({t_inf, t_exe, t_avg, t_queue, t_compute}) == 1, shown
    assert kpis["Inferences/s"] == fmt.number(inferences)
    assert kpis["Executions/s"] == fmt.number(executions)
    assert kpis["Average batch size"] == f"{fmt.number(average, 2)} / 4"
    assert kpis["Queue time / request"] == fmt.millis(queue_ms / 1000)
    assert kpis["Compute time / request"] == fmt.millis(compute_ms / 1000)


def shows(page: Page, text: str, timeout_ms: float = 30_000) -> None:
    """Wait until the page shows ``text``, in its text or as a select's value (an input)."""
    page.wait_for_function(
        f"document.body.innerText.includes({text!r}) || "
        f"[...document.querySelectorAll('input')].some(i => i.value.includes({text!r}))",
        timeout=timeout_ms,
    )


def stored_runs(settings: Settings) -> int:
    """Runs in the store that have ended (a run's row is there from its start, 'running')."""
    db = settings.state_dir / "loadgen.sqlite3"
    if not db.exists():  # no run yet in this stack
        return 0
    with RunStore(db) as opened:
        runs = opened.list_runs()
    return sum(r["status"] != "running" for r in runs)


def start_run(page: Page, settings: Settings, concurrency: int, label: str) -> None:
    before = stored_runs(settings)
    for name, value in (("Concurrency", str(concurrency)), ("Duration (s)", "2")):
        field = page.get_by_label(name)
        field.fill(value)
        field.press("Enter")
    page.get_by_label("Label (optional)").fill(label)
    page.get_by_label("Label (optional)").press("Enter")
    page.wait_for_timeout(1000)  # let Streamlit take the inputs before the click
    page.get_by_role("button", name="Start run").click()
    wait_for(lambda: stored_runs(settings) > before, 60, f"run {label!r} to be stored")


def test_load_run_and_comparison_render(page: Page, loaded_stack: Settings) -> None:
    s = loaded_stack
    page.goto(f"{s.url('dashboard')}/?view=Load+runs")
    page.get_by_role("heading", name="Load runs").wait_for(timeout=60_000)
    start_run(page, s, 1, "one client")
    shows(page, "one client on batch_add_model")
    start_run(page, s, 4, "four clients")
    # Prometheus' scrape of the run's end (the server charts are padded by two scrapes).
    time.sleep(3 * s.scrape_interval_s)
    page.reload()
    page.get_by_role("heading", name="Compare two runs").wait_for(timeout=60_000)
    shows(page, "four clients on batch_add_model")
    page.wait_for_function(
        "document.querySelectorAll('.js-plotly-plot').length === 6", timeout=60_000
    )
    page.wait_for_function(
        f"[...document.querySelectorAll('.js-plotly-plot')].every({DRAWN_MARKS.strip()})",
        timeout=30_000,
    )
    save_whole_page(page, "dashboard-runs.png")
    assert all(n > 0 for n in chart_marks(page)), chart_marks(page)
    compare = page.locator(".js-plotly-plot").last
    assert "B / A" in compare.inner_text()
    assert page.get_by_text("Each bar is run B's value divided by run A's").is_visible()

    # The advisor beside the run: predicted against measured, and its verdict.
    page.get_by_role("button", name="Ask the advisor about this run").click()
    page.get_by_text("Current config: ").first.wait_for(timeout=400_000)
    shows(page, "predicted")
    # The present, in the advisor's one line, renders before the verdict.
    page.get_by_text("present: ").first.wait_for(timeout=60_000)
    # The verdict renders after the prediction: wait for it rather than look once. This
    # checks that it renders, not which it is (the advisor's decisions on a run are tested on
    # captures, tests/dashboard/test_advice.py): a recommendation, "keep it", no config under
    # the 10 ms bound, or nothing recommended where the run's present is off. A run of four
    # clients made while the shared cores stall them gets either of the last two (both seen
    # in whole-suite runs).
    verdict = (
        page.get_by_text("Recommended (")
        .or_(page.get_by_text("Keep it:"))
        .or_(page.get_by_text("No config of the "))
        .or_(page.get_by_text("Nothing recommended: "))
        .first
    )
    verdict.wait_for(timeout=60_000)
    assert verdict.is_visible()
    save_whole_page(page, "dashboard-advisor.png")


def test_batch_timeline_draws_batches_and_arrivals(page: Page, traced_stack: Settings) -> None:
    page.goto(f"{traced_stack.url('dashboard')}/?view=Batch+timeline")
    page.get_by_role("heading", name="Batch timeline").wait_for(timeout=60_000)
    page.wait_for_function(
        "document.querySelectorAll('.js-plotly-plot').length === 1", timeout=60_000
    )
    page.wait_for_function(
        f"[...document.querySelectorAll('.js-plotly-plot')].every({DRAWN_MARKS.strip()} ) ",
        timeout=30_000,
    )
    (marks,) = chart_marks(page)
    # One bar per batch (10 bursts of 3 make at least 10) and a line per waiting request.
    assert marks >= 10
    ticks = page.locator(".js-plotly-plot .scatterlayer .point").count()
    assert ticks >= 30
    assert page.get_by_text("Why batches left").is_visible()
    save_whole_page(page, "dashboard-timeline.png")


@pytest.fixture(scope="module")
def inputs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Triton serving the models of tests/loadgen/inputdata (one with variable dims), and
    the dashboard in front of it."""
    base = tmp_path_factory.mktemp("inputs-dashboard")
    shutil.copytree(INPUTDATA / "model_repository", base / "models")
    settings = replace(isolated(base / "state"), model_repository=base / "models")
    with running(settings, only={"triton", "dashboard"}):
        yield settings


def open_form(page: Page, s: Settings, model: str) -> None:
    """The Load runs view with ``model`` picked in the form."""
    page.goto(f"{s.url('dashboard')}/?view=Load+runs")
    page.get_by_role("heading", name="Load runs").wait_for(timeout=60_000)
    # The page's first run, as long as the heading's: in two whole-suite runs on a loaded
    # machine the picker was not yet stable when Playwright's default 30 s ran out.
    page.locator(".st-key-form_model input").click(timeout=60_000)
    page.get_by_role("option", name=model, exact=True).click()
    shows(page, f"Inputs of {model}")


def submit_form(page: Page, s: Settings, fields: dict[str, str]) -> LoadRun:
    """Fill ``fields`` (by widget key), start, and return the stored run (found by its
    label, the ``form_label`` field)."""
    for key, value in fields.items():
        field = page.locator(f".st-key-{key} input")
        field.fill(value)
        field.press("Enter")
    page.wait_for_timeout(1000)  # let Streamlit take the inputs before the click
    page.get_by_role("button", name="Start run").click()
    db = s.state_dir / "loadgen.sqlite3"
    found: list[LoadRun] = []

    def stored() -> bool:
        if not db.exists():
            return False
        with RunStore(db) as store:
            for row in store.list_runs():
                run = load_run(store, int(row["id"]))
                if run.params.label == fields["form_label"] and row["status"] != "running":
                    found.append(run)
                    return True
        return False

    wait_for(stored, 60, f"run {fields['form_label']!r} to be stored")
    return found[0]


def test_a_run_on_a_variable_dims_model_with_a_shape_from_the_form(
    page: Page, inputs_stack: Settings
) -> None:
    s = inputs_stack
    fields = {
        "form_concurrency": "2",
        "form_duration": "2",
        "form_shapes": "IDS=4:32",
        "form_ranges": "IDS=0:1000",
        "form_label": "shape mix",
    }
    open_form(page, s, "bounded_ids")
    run = submit_form(page, s, fields)
    # The form listed the model's inputs and said the variable dim needs a shape.
    shows(page, "Variable dims (-1) need a shape")
    shows(page, "INT64 [-1]")
    assert run.params.model == "bounded_ids"
    assert run.params.shapes == (("IDS", ((4, 32),)),)
    c = run.summary.client
    assert c.sent > 0 and c.ok == c.sent, c.errors
    assert c.shapes is not None and len(c.shapes) > 5
    assert run.summary.server is not None and run.summary.server.requests_success == c.sent
    shows(page, "shape mix on bounded_ids")
    shows(page, f"shapes sent {len(c.shapes)} distinct")
    save_whole_page(page, "dashboard-shape-mix.png")


def test_a_run_from_an_uploaded_data_file(page: Page, inputs_stack: Settings) -> None:
    s = inputs_stack
    open_form(page, s, "text_stats")
    page.locator(".st-key-form_input_data input[type=file]").set_input_files(
        str(INPUTDATA / "text_stats.json")
    )
    # The file's name shows as soon as the browser has it; this line once the server does.
    shows(page, "The requests will take their inputs from text_stats.json.")
    fields = {"form_concurrency": "2", "form_duration": "2", "form_label": "uploaded data"}
    run = submit_form(page, s, fields)
    assert Path(run.params.input_data).parent == s.state_dir / "inputdata"
    c = run.summary.client
    assert c.sent > 0 and c.ok == c.sent, c.errors
    assert c.checked.startswith("outputs against the data's expected values (LENGTH, UPPER)")
