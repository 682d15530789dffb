"""The dashboard of the real running stack in headless Chromium (Debian's, driven by Playwright).

Saves screenshots under test-artifacts/ (gitignored) for a person to look at.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from stack.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.browser]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
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
    try:
        yield context.new_page()
    finally:
        context.close()


def chart_marks(page: Page) -> list[int]:
    return [plot.evaluate(DRAWN_MARKS) for plot in page.locator(".js-plotly-plot").all()]


def test_live_view_draws_every_chart(page: Page, loaded_stack: Settings) -> None:
    page.goto(loaded_stack.url("dashboard"))
    page.get_by_role("heading", name="Live: batch_add_model").wait_for(timeout=60_000)
    page.wait_for_function(
        "document.querySelectorAll('.js-plotly-plot').length === 4", timeout=60_000
    )
    page.wait_for_function(
        f"[...document.querySelectorAll('.js-plotly-plot')].every({DRAWN_MARKS.strip()} ) ",
        timeout=30_000,
    )
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-live.png"), full_page=True)
    assert all(n > 0 for n in chart_marks(page)), chart_marks(page)
    assert page.get_by_text("Average batch size").first.is_visible()
    assert page.get_by_text("The gap between the lines is batching at work").is_visible()
