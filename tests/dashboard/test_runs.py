"""Load runs from the dashboard: the bounds, a run in the background, its result, a comparison."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import access, loadruns
from loadgen.reports import report
from stacksettings import Settings
from tests.dashboard.conftest import closed_url
from tests.fleet import dashboard_run

MakeApp = Callable[..., AppTest]
# Recorded by bench/advisor_capture_runs.py: run 1 at 400/s (open loop), run 2 at concurrency 8.
CAPTURED = Path(__file__).parent.parent / "advisor" / "data" / "loadruns.sqlite3"


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (loadruns.RunForm("concurrency", "m", concurrency=17), "concurrency 17 is above"),
        (loadruns.RunForm("concurrency", "m", duration_s=31), "duration 31 s is above"),
        (loadruns.RunForm("rate", "m", rate=501), "rate 501/s is above"),
        (loadruns.RunForm("concurrent", "m", requests=65), "requests 65 is above"),
        (loadruns.RunForm("serial", "m", requests=0), "requests must be greater than 0"),
        (loadruns.RunForm("steps", "m"), "unknown scenario"),
    ],
)
def test_the_form_cannot_ask_for_more_than_the_dashboard_allows(
    form: loadruns.RunForm, message: str
) -> None:
    with pytest.raises(loadruns.RunRefused, match=message):
        loadruns.to_params(form, "http://127.0.0.1:8000")


def test_params_within_bounds_go_to_the_load_generator() -> None:
    p = loadruns.to_params(
        loadruns.RunForm("rate", "batch_add_model", rate=50, duration_s=2), "http://h:1"
    )
    assert (p.scenario, p.model, p.rate, p.duration_s, p.url) == (
        "rate",
        "batch_add_model",
        50,
        2,
        "http://h:1",
    )


def test_the_comparison_is_the_clis_b_over_a() -> None:
    a, b = loadruns.load(CAPTURED, 1), loadruns.load(CAPTURED, 2)
    frame = loadruns.compare(a, b).set_index("measure")
    assert frame.loc["throughput (req/s)", "B / A"] == pytest.approx(5772.650 / 396.960, rel=1e-5)
    assert frame.loc["throughput (req/s)", "B / A"] > 1  # B was faster: a gain reads as one
    # Row for row, the CLI's table shows the same ratios: one function behind both.
    rows = report.compare_table(a, b).splitlines()[4:]  # after A, B, a blank line, the header
    cli = {line[:30].strip(): line.split()[-1] for line in rows}
    assert len(cli) == len(frame)
    for measure, ratio in frame["B / A"].items():
        assert cli[str(measure)] == ("-" if pd.isna(ratio) else f"{ratio:.2f}x")


def test_no_runs_yet_says_how_to_start_one(make_app: MakeApp, tmp_path: Path) -> None:
    at = make_app(closed_url(), closed_url(), store=str(tmp_path / "none.sqlite3")).run()
    at.sidebar.radio(key="view").set_value("Load runs").run()
    assert not at.exception
    infos = [i.value for i in at.info]
    assert any(i.startswith("No load runs yet: start one with the form above") for i in infos)
    # The form is there even with Prometheus down: runs talk to Triton.
    assert at.button(key="form_start").value is False


def test_a_run_that_did_not_start_is_told_to_the_tab_that_started_it(
    make_app: MakeApp, tmp_path: Path
) -> None:
    store = tmp_path / "loadruns.sqlite3"
    at = make_app(closed_url(), closed_url(), store=str(store))
    (error,) = dashboard_run.start_run(at) or dashboard_run.wait_done(at, store)
    assert error.startswith("The run did not start: ") and "not answering" in error, error
    # Another tab (session) of the same dashboard process: nothing ran, nothing to tell.
    other = AppTest.from_file(str(dashboard_run.APP), default_timeout=60).run()
    other.sidebar.radio(key="view").set_value("Load runs").run()
    assert not other.exception
    assert not [e.value for e in other.error if e.value.startswith("The run did not start")]
    assert other.button(key="form_start").value is False  # and it may start its own


def wait_for_run(at: AppTest, runs_stored: int, timeout_s: float = 60) -> None:
    """Re-run the page (as the progress fragment would) until the store holds the run."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        at.run()
        if at.get("progress"):
            continue
        run_boxes = [b for b in at.selectbox if b.key == "run"]
        if run_boxes and len(run_boxes[0].options) == runs_stored:
            return
    raise AssertionError("the run did not finish")


@pytest.mark.integration
def test_run_from_the_form_then_compare_two(
    make_app: MakeApp, loaded_stack: Settings, tmp_path: Path
) -> None:
    s = loaded_stack
    at = make_app(s.url("prometheus"), s.url("triton_http"), store=str(tmp_path / "r.sqlite3"))
    at.run()
    at.sidebar.radio(key="view").set_value("Load runs").run()
    at.selectbox(key="form_scenario").set_value("serial").run()
    at.number_input(key="form_requests").set_value(6).run()
    at.button(key="form_start").click().run()
    assert not at.exception
    wait_for_run(at, 1)
    shown = {m.label: m.value for m in at.metric}
    assert shown["Sent"] == "6" and shown["Failed / timed out"] == "0 / 0"
    # Serial requests are never batched: one execution each.
    assert shown["Model executions"] == "6" and shown["Average batch size"] == "1.00"

    at.selectbox(key="form_scenario").set_value("concurrency").run()
    at.number_input(key="form_concurrency").set_value(4).run()
    at.number_input(key="form_duration").set_value(2.0).run()
    at.button(key="form_start").click().run()
    wait_for_run(at, 2)
    assert not at.exception and not [e.value for e in at.error]
    shown = {m.label: m.value for m in at.metric}
    sent = int(shown["Sent"].replace(",", ""))
    executions = int(shown["Model executions"].replace(",", ""))
    assert sent > 0 and executions > 0
    # Beside the result: the server's charts over the run's window.
    assert {"run_server_throughput", "run_server_distribution"} <= {
        c.proto.id.rsplit("-", 1)[-1] for c in at.get("plotly_chart")
    }

    # The comparison defaults to the previous run (A) against the new one (B).
    table = at.dataframe[-1].value.set_index("measure")
    assert table.loc["requests sent", "A"] == "6.00"
    assert table.loc["requests sent", "B"] == f"{sent:,.2f}"
    row = table.loc["model executions"]
    assert (row["A"], row["B"]) == ("6.00", f"{executions:,.2f}")
    assert row["B / A"] == f"{executions / 6:.2f}x"
    # Nothing failed in either run: no ratio of zeros, a dash.
    assert table.loc["requests failed or timed out", "B / A"] == "–"


@pytest.mark.parametrize(
    ("address", "token", "rule"),
    [
        ("127.0.0.1", None, access.OPEN),
        ("localhost", None, access.OPEN),
        ("0.0.0.0", None, access.CLOSED),
        ("", None, access.CLOSED),  # Streamlit's default: every interface
        ("10.0.0.5", "s3cret", access.TOKEN),
        ("127.0.0.1", "s3cret", access.TOKEN),
    ],
)
def test_off_loopback_load_runs_need_a_token(address: str, token: str | None, rule: str) -> None:
    assert access.policy(address, token) == rule


def test_only_the_configured_token_is_accepted() -> None:
    assert access.accepts(" s3cret\n", "s3cret")
    assert not access.accepts("guess", "s3cret")
    assert not access.accepts("", None)


def test_the_page_asks_for_the_token_before_the_form(make_app: MakeApp, tmp_path: Path) -> None:
    store = str(tmp_path / "none.sqlite3")
    at = make_app(closed_url(), closed_url(), address="0.0.0.0", store=store, token="s3cret")
    at.run()
    at.sidebar.radio(key="view").set_value("Load runs").run()
    assert not at.exception
    assert not [b for b in at.button if b.key == "form_start"]
    at.text_input(key="access_token").set_value("guess").run()
    assert any("not the one configured" in e.value for e in at.error)
    assert not [b for b in at.button if b.key == "form_start"]
    at.text_input(key="access_token").set_value("s3cret").run()
    assert at.button(key="form_start").value is False


def test_off_loopback_without_a_token_the_form_is_off(make_app: MakeApp, tmp_path: Path) -> None:
    at = make_app(closed_url(), closed_url(), address="0.0.0.0", store=str(tmp_path / "n.db"))
    at.run()
    at.sidebar.radio(key="view").set_value("Load runs").run()
    assert not at.exception
    assert any("no access token is set" in w.value for w in at.warning)
    assert not [b for b in at.button if b.key == "form_start"]


@pytest.mark.parametrize(
    ("headers", "loopback", "refused"),
    [
        # The dashboard's own page, by either loopback name.
        ({"Origin": "http://127.0.0.1:8501", "Host": "127.0.0.1:8501"}, True, False),
        ({"origin": "http://localhost:8501", "host": "localhost:8501"}, True, False),
        # Another port of the same address: Streamlit's own check lets it in.
        ({"Origin": "http://127.0.0.1:9999", "Host": "127.0.0.1:8501"}, True, True),
        ({"Origin": "http://evil.example", "Host": "127.0.0.1:8501"}, True, True),
        # DNS rebinding: same origin as far as the browser knows, but not a loopback name.
        ({"Origin": "http://evil.example:8501", "Host": "evil.example:8501"}, True, True),
        # Behind compose's port or an ingress the name is the operator's.
        ({"Origin": "https://batch.example", "Host": "batch.example"}, False, False),
        ({"Origin": "https://evil.example", "Host": "batch.example"}, False, True),
        # Not a browser page: no Origin.
        ({"Host": "127.0.0.1:8501"}, True, False),
    ],
)
def test_a_page_of_another_origin_is_refused(
    headers: dict[str, str], loopback: bool, refused: bool
) -> None:
    assert (access.foreign_origin(headers, loopback) is not None) is refused
