"""The live view's numbers against a known answer: Triton's own statistics, and its charts.

Over a window that holds exactly one load, the ratios the dashboard computes in
PromQL must equal the same ratios of Triton's statistics deltas: both counters
of a ratio come from the same exporter scrape, so increase()'s extrapolation
cancels out. Each KPI beside a chart must equal that chart's last point, whose
rate window is a step and a scrape (at least four scrapes): it reaches back before
the step, so the test sets the step for that window to hold the one load and no more.
"""

from __future__ import annotations

import math
import time

import pytest
import requests

from dashboard import live
from dashboard import queries as q
from promapi import PromClient, Range, aligned_range
from stacksettings import Settings
from tests.dashboard.conftest import busy, scraped_after, send_bursts, wait_for
from tests.helpers import model_stats, stats_counting
from tritonapi.stats import ModelStats

pytestmark = pytest.mark.integration


def settled(s: Settings, triton_url: str, model: str) -> tuple[ModelStats, int]:
    """The model's statistics and a whole second ``start``: every exporter sample from a
    scrape before ``start`` on holds them, and Prometheus holds one after ``start``. Read on
    both sides of those scrapes, and equal: a load sent just before may still be counted
    (Triton updates its statistics after the answers)."""
    scrape = math.ceil(s.scrape_interval_s)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        before = model_stats(triton_url, model)
        start = math.ceil(time.time()) + scrape
        wait_for(scraped_after(s, "exporter", start + 0.01), 30, "a scrape before the load")
        if model_stats(triton_url, model) == before:
            return before, start
    raise AssertionError(f"{model}'s statistics kept changing for 30 s")


def test_kpis_equal_triton_statistics_over_the_same_window(
    loaded_stack: Settings, triton_url: str
) -> None:
    s = loaded_stack
    before, start = settled(s, triton_url, "batch_add_model")
    sent = send_bursts(s, "batch_add_model", 20, size=4)
    after = stats_counting(triton_url, "batch_add_model", before, sent)
    done = time.time()
    wait_for(scraped_after(s, "exporter", done), 30, "a scrape after the load")
    # A step of three scrapes at least: the rate window of a shorter one is four scrapes.
    end = max(math.ceil(time.time()), start + 3 * math.ceil(s.scrape_interval_s))
    time.sleep(max(0.0, end - time.time()))
    delta = after.minus(before)

    # One step over the whole window. Its point's rate window, and so the latest KPIs', is
    # the step and a scrape before it: from that scrape on the samples hold `before` (a
    # window reaching back further read a load sent just before the test, the chart test's
    # in a shuffled order: an average batch of 2.50 against Triton's 2.58).
    data = live.fetch_range(
        PromClient(s.url("prometheus")),
        "batch_add_model",
        Range(start, end, end - start),
        s.scrape_interval_s,
    )
    assert (data.latest_at, data.point_s) == (end, end - start + s.scrape_interval_s)
    assert data.kpis["average_batch_size"] == data.series["average_batch_size"]["value"].iloc[-1]

    assert data.kpis["average_batch_size"] == pytest.approx(
        delta.inference_count / delta.execution_count, rel=1e-9
    )
    assert data.kpis["batch_efficiency"] == pytest.approx(
        delta.inference_count / delta.execution_count / 4, rel=1e-9
    )
    assert data.kpis["queue_s_per_request"] == pytest.approx(
        delta.phase("queue").seconds / delta.phase("success").count, rel=1e-6
    )
    compute = sum(
        delta.phase(p).seconds for p in ("compute_input", "compute_infer", "compute_output")
    )
    assert data.kpis["compute_s_per_request"] == pytest.approx(
        compute / delta.phase("success").count, rel=1e-6
    )
    assert data.kpis["failure_ratio"] == 0
    assert data.kpis["max_batch_size"] == 4
    assert data.preferred_sizes == [2, 4]
    assert 0 < data.kpis["preferred_hit_ratio"] <= 1  # type: ignore[operator]
    # The distribution's sizes are sizes Triton formed, and its bars hold the load.
    sizes = set(data.distribution["batch_size"])
    assert sizes <= set(after.executions_by_size())
    assert data.series["inferences_per_s"]["value"].max() > 0


def test_each_kpi_beside_a_chart_is_that_charts_last_point(loaded_stack: Settings) -> None:
    """A load that starts mid-range: the KPIs show its rate now, as the charts end on it,
    not an average over the range's idle minutes."""
    s = loaded_stack
    with busy(s, "batch_add_model", size=4):
        now = time.time()
        window = aligned_range(300, end=now, min_step_s=s.scrape_interval_s)
        data = live.fetch_range(
            PromClient(s.url("prometheus")),
            "batch_add_model",
            window,
            s.scrape_interval_s,
            at=live.kpi_time(now, s.scrape_interval_s),
        )
    assert data.latest_at == window.end
    assert set(live.SERIES_QUERIES) <= set(live.LATEST_QUERIES)
    for name in live.SERIES_QUERIES:
        last = data.series[name].iloc[-1]
        assert last["time"].timestamp() == data.latest_at, name
        assert data.kpis[name] is not None, name
        assert data.kpis[name] == last["value"], name
    assert data.kpis["inferences_per_s"] > 0  # type: ignore[operator]


def test_every_query_is_accepted_by_the_real_prometheus(loaded_stack: Settings) -> None:
    url = f"{loaded_stack.url('prometheus')}/api/v1/query"
    sel = q.selector("batch_add_model")
    for name in dir(q):
        template = getattr(q, name)
        if not (name.isupper() and isinstance(template, str)):
            continue
        expr = q.build(template, sel, "60s") if "${w}" in template else q.build(template, sel)
        answer = requests.get(url, params={"query": expr}, timeout=10).json()
        assert answer["status"] == "success", (name, answer)
