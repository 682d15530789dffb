"""The Streamlit app in every state, with streamlit.testing's AppTest.

Each state shows a message that says what to do, never a traceback
(``at.exception`` is empty in every test).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import gpu
from promapi import aligned_range
from stacksettings import Settings
from tests.dashboard.conftest import busy, closed_url
from tests.helpers import wait_for

pytestmark = pytest.mark.integration

MakeApp = Callable[..., AppTest]


def texts(at: AppTest, kind: str) -> list[str]:
    return [str(e.value) for e in getattr(at, kind)]


def charts(at: AppTest) -> dict[str, dict]:
    """Plotly figures by chart key, decoded."""
    return {
        c.proto.id.rsplit("-", 1)[-1].removeprefix("chart_"): json.loads(c.proto.spec)
        for c in at.get("plotly_chart")
    }


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_prometheus_unreachable_says_what_to_do(make_app: MakeApp) -> None:
    url = closed_url()
    at = make_app(url, closed_url()).run()
    assert not at.exception
    (error,) = texts(at, "error")
    assert f"Prometheus at {url} is unreachable" in error
    assert "./stack/up" in error and "DASHBOARD_PROMETHEUS_URL" in error
    assert not at.get("plotly_chart")


def test_a_bad_setting_is_one_line_not_a_traceback(make_app: MakeApp) -> None:
    at = make_app(closed_url(), closed_url(), refresh_s="soon").run()
    assert not at.exception
    assert texts(at, "error") == [
        "DASHBOARD_REFRESH_S='soon' is not a number of seconds: fix the variable and "
        "restart the dashboard."
    ]


def test_triton_down(make_app: MakeApp, tritonless_stack: Settings) -> None:
    s = tritonless_stack
    at = make_app(s.url("prometheus"), s.url("triton_http")).run()
    assert not at.exception
    warnings = " ".join(texts(at, "warning"))
    assert f"Triton at {s.url('triton_http')} is not answering" in warnings
    assert "Prometheus cannot scrape its `triton` job" in warnings
    assert f"The exporter cannot read Triton at {s.url('triton_http')}" in warnings
    # Without Triton the exporter has no model to report: nothing to chart yet.
    (info,) = texts(at, "info")
    assert info.startswith("No data yet: Prometheus has no series from the exporter")

    # The alert rules see it too: TritonDown fires once the exporter failed to read Triton
    # twice within a minute (rules/settings.yaml), and the page names the target.
    def firing() -> list[str]:
        return [e for e in texts(at.run(), "error") if e.startswith("**TritonDown** (critical)")]

    (alert,) = wait_for("TritonDown on the dashboard", firing, timeout_s=60)
    assert f"target={s.url('triton_http')}" in alert
    assert not at.exception


def test_model_config_view_with_triton_down_shows_files_and_findings(
    make_app: MakeApp, tmp_path: Path
) -> None:
    repo = tmp_path / "models"
    shutil.copytree(Path(__file__).resolve().parents[2] / "model_repository", repo)
    config = repo / "add_unbatched" / "config.pbtxt"
    config.write_text(
        config.read_text().replace(
            "max_batch_size: 4",
            "max_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 8 ] }",
        )
    )
    at = make_app(closed_url(), closed_url(), model_repository=str(repo))
    at.run()
    at.sidebar.radio(key="view").set_value("Model config").run()
    assert not at.exception
    errors = texts(at, "error")
    assert any("check-config found 1 error(s)" in e for e in errors)
    assert any("preferred_batch_size 8 is larger than max_batch_size 4" in e for e in errors)
    assert any("only the files are shown" in w for w in texts(at, "warning"))
    assert [h.value for h in at.subheader] == ["add_unbatched", "batch_add_model", "mlp_model"]
    summaries = [m.value for m in at.markdown]
    assert any("preferred sizes 2, 4 and a queue delay of 500 µs" in m for m in summaries)


def test_no_data_yet_for_a_model_that_served_nothing(
    make_app: MakeApp, idle_stack: Settings
) -> None:
    s = idle_stack
    at = make_app(s.url("prometheus"), s.url("triton_http")).run()
    assert not at.exception
    assert not texts(at, "error") and not texts(at, "warning")
    (info,) = texts(at, "info")
    assert "No data yet for `batch_add_model`" in info and "Load runs" in info
    # No rate before Prometheus holds two scrapes in the window, a rate of zero after: which
    # one depends on how long the idle stack has run (the order of the module's tests).
    assert metrics(at)["Inferences/s"] in ("–", "0.0")


def test_live_view_with_data(make_app: MakeApp, loaded_stack: Settings) -> None:
    s = loaded_stack
    # The rates and the average batch are the charts' last point: the model is busy now.
    with busy(s, "batch_add_model"):
        at = make_app(s.url("prometheus"), s.url("triton_http")).run()
    assert not at.exception
    assert not texts(at, "error") and not texts(at, "warning") and not texts(at, "info")
    assert at.sidebar.selectbox(key="model").value == "batch_add_model"
    shown = metrics(at)
    assert float(shown["Inferences/s"]) > 0
    average, limit = shown["Average batch size"].split(" / ")
    assert 1.0 < float(average) <= 4.0 and limit == "4"
    assert shown["Failed requests, 5 min"] == "0%"
    figures = charts(at)
    assert set(figures) == {"throughput", "distribution", "batch_size", "queue_compute"}
    bars = figures["distribution"]["data"][0]
    assert "2" in bars["x"]  # bursts of 3 form batches of 2, a preferred size
    captions = " ".join(c.value for c in at.caption)
    assert "The gap between the lines is batching at work" in captions
    # This machine's Triton runs on the CPU: the GPU panel says so instead of empty axes.
    assert gpu.NO_GPU in captions
    assert "No alert is firing." in texts(at, "success")


def test_model_selector_switches_the_view(make_app: MakeApp, loaded_stack: Settings) -> None:
    s = loaded_stack
    at = make_app(s.url("prometheus"), s.url("triton_http")).run()
    with busy(s, "add_unbatched", size=2) as began:
        at.sidebar.selectbox(key="model").set_value("add_unbatched").run()
        assert not at.exception
        assert at.header[0].value == "Live: add_unbatched"
        # No dynamic batching: every request executes alone.
        assert metrics(at)["Average batch size"] == "1.00 / 4"
        # An hour's chart steps 15 s: its last point, the KPIs' time, holds the load from here.
        wait_for(
            "an hour chart's point after the load began",
            lambda: aligned_range(3600, min_step_s=s.scrape_interval_s).end > began + 2,
        )
        at.sidebar.selectbox(key="window").set_value("1 hour").run()
    assert not at.exception and metrics(at)["Average batch size"] == "1.00 / 4"


def test_model_config_view_with_triton_up(make_app: MakeApp, running_stack: Settings) -> None:
    s = running_stack
    at = make_app(s.url("prometheus"), s.url("triton_http"))
    at.run()
    at.sidebar.radio(key="view").set_value("Model config").run()
    assert not at.exception and not texts(at, "error") and not texts(at, "warning")
    assert any("check-config: 3 model(s) OK" in t for t in texts(at, "success"))
    # Per model: the file as parsed, and the config as Triton loaded it (defaults filled in).
    assert len(at.json) == 6
    unbatched, batched, mlp = (json.loads(at.json[i].value) for i in (1, 3, 5))
    assert [c["name"] for c in (unbatched, batched, mlp)] == [
        "add_unbatched",
        "batch_add_model",
        "mlp_model",
    ]
    assert "dynamic_batching" not in unbatched
    assert batched["dynamic_batching"]["preferred_batch_size"] == [2, 4]
    assert batched["max_batch_size"] == 4
    summaries = [m.value for m in at.markdown]
    assert any("no dynamic batching: every request executes alone" in m for m in summaries)


def test_why_isnt_batching_working_panel(make_app: MakeApp, loaded_stack: Settings) -> None:
    s = loaded_stack
    at = make_app(s.url("prometheus"), s.url("triton_http")).run()
    at.sidebar.selectbox(key="model").set_value("add_unbatched").run()
    assert not at.exception
    assert "Why isn't batching working?" in [h.value for h in at.subheader]
    markdown = [m.value for m in at.markdown]
    assert "**dynamic batching is off: every request executes alone** (config)" in markdown
    captions = " ".join(c.value for c in at.caption)
    assert "batch traces: traces off" in captions and "Prometheus at" in captions
    # Until the advisor's search answers, the checks' rule of thumb is shown as such.
    assert "rule of thumb, until the search answers: dynamic_batching {" in captions
    [ask] = [b for b in at.button if (b.key or "").startswith("ask_doctor_search_add_unbatched")]
    ask.click().run(timeout=300)
    assert not at.exception
    config = [m.value for m in at.markdown if m.value.startswith("**Config (")]
    # The search's answer (the window may be too short for it: then a note says why).
    notes = " ".join(c.value for c in at.caption)
    assert config or "the advisor's search did not run" in notes, notes
    if config:  # above the verdict, the search's present in the advisor's one line
        assert any(m.value.startswith("`present: ") for m in at.markdown), config


def test_batch_timeline_draws_batches_waits_and_reasons(
    make_app: MakeApp, traced_stack: Settings
) -> None:
    s = traced_stack
    at = make_app(s.url("prometheus"), s.url("triton_http"), exporter_url=s.url("exporter"))
    at.run()
    at.sidebar.radio(key="view").set_value("Batch timeline").run()
    assert not at.exception
    assert not texts(at, "error")
    (figure,) = charts(at).values()
    bars = [t for t in figure["data"] if t["type"] == "bar"]
    assert bars and all(t["orientation"] == "h" for t in bars)
    # The bursts of 3: a batch of 2 at once (preferred) and 1 after the queue delay.
    sizes = {int(t["name"].removeprefix("batch of ")) for t in bars}
    assert sizes <= {1, 2, 3}
    ticks = next(t for t in figure["data"] if t.get("name") == "request arrives")
    assert len(ticks["x"]) >= 30
    waits, reasons = at.dataframe
    rows = dict(zip(waits.value["queue wait"], waits.value["ms"], strict=True))
    assert set(rows) >= {"p50 (traces)", "p99 (traces)", "mean (statistics API)"}
    assert rows["p99 (traces)"] != "–" and rows["mean (statistics API)"] != "–"
    shares = dict(zip(reasons.value["why the batch left"], reasons.value["batches"], strict=True))
    # Each batch of 2 (the preferred size) left for that reason, and most bursts made one;
    # on a busy 2-core machine a burst's requests can come too far apart to (9 of 10 once).
    drawn = {int(t["name"].removeprefix("batch of ")): len(t["x"]) for t in bars}
    assert shares["reached a preferred size"] == drawn.get(2, 0) >= 5
    assert shares["its oldest request waited out the queue delay"] >= 1


def test_batch_timeline_without_traces_says_how_to_get_them(
    make_app: MakeApp, idle_stack: Settings
) -> None:
    s = idle_stack
    at = make_app(s.url("prometheus"), s.url("triton_http"), exporter_url=s.url("exporter"))
    at.run()
    at.sidebar.radio(key="view").set_value("Batch timeline").run()
    assert not at.exception
    (info,) = [t for t in texts(at, "info") if "No traces" in t]
    assert "batchscope trace --model" in info
