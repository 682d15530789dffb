"""The load-runs page shows the autopilot's record: each config change, its outcome, and the
p99 before and after, read from the store (a real one, written by RunStore)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from streamlit.testing.v1 import AppTest

from dashboard import charts, loadruns
from runs.changes import Change
from runs.store import RunStore
from tests.dashboard.conftest import closed_url

MakeApp = Callable[..., AppTest]
# A real config JSON of the spec's model, as Triton 2.51 served it (tests/advisor/data).
SPEC = json.loads(
    (Path(__file__).parents[1] / "advisor" / "data" / "loadruns_config.json").read_text()
)


def seeded(path: Path) -> Path:
    slow = {**SPEC, "dynamic_batching": {**SPEC["dynamic_batching"]}}
    slow["dynamic_batching"]["max_queue_delay_microseconds"] = 20000
    with RunStore(path, create=True) as store:
        store.record_change(
            Change(
                "http://127.0.0.1:8000",
                "batch_add_model",
                SPEC,
                slow,
                {},
                {"client_p99_s": 0.00292},
                {"client_p99_s": 0.02243},
                "rolled_back",
                "client p99 worse beyond noise: 22.43 ms after, 2.92 ms before",
            ),
            now=0.0,
        )
        store.record_change(
            Change(
                "http://127.0.0.1:8000",
                "batch_add_model",
                slow,
                SPEC,
                {},
                {"server_mean_s": 0.0108},  # no load run was going: Triton's mean
                {"server_mean_s": 0.0012},
                "kept",
                "Triton's mean latency 1.20 ms after, 10.80 ms before",
            ),
            now=60.0,
        )
    return path


def test_the_frame_reads_the_record_newest_first(tmp_path: Path) -> None:
    frame = loadruns.changes(seeded(tmp_path / "s.sqlite3"))
    assert list(frame["outcome"]) == ["kept", "rolled_back"]
    rolled = frame.iloc[1]
    assert rolled["time (UTC)"] == "1970-01-01 00:00:00"
    assert rolled["from"] == "max_batch_size 4, preferred [2, 4], delay 500 us, 1 instance(s)"
    assert rolled["to"] == "max_batch_size 4, preferred [2, 4], delay 20000 us, 1 instance(s)"
    assert (rolled["p99 before (ms)"], rolled["p99 after (ms)"]) == (2.92, 22.43)
    assert (frame.iloc[0]["p99 before (ms)"], frame.iloc[0]["p99 after (ms)"]) == (10.8, 1.2)
    figure = charts.render_changes(frame)
    assert [list(t.y) for t in figure.data] == [[10.8, 2.92], [1.2, 22.43]]
    assert loadruns.changes(tmp_path / "none.sqlite3").empty


def test_the_load_runs_page_lists_the_changes(make_app: MakeApp, tmp_path: Path) -> None:
    store = seeded(tmp_path / "s.sqlite3")
    at = make_app(closed_url(), closed_url(), store=str(store)).run()
    at.sidebar.radio(key="view").set_value("Load runs").run()
    assert not at.exception
    (expander,) = [e for e in at.expander if "advise --apply" in e.label]
    assert expander.label == "Config changes by `batchscope advise --apply` (2)"
    shown = expander.dataframe[0].value
    assert list(shown["outcome"]) == ["kept", "rolled_back"]
    assert shown.iloc[1]["why"].startswith("client p99 worse beyond noise")


def test_without_changes_the_page_shows_none(make_app: MakeApp, tmp_path: Path) -> None:
    at = make_app(closed_url(), closed_url(), store=str(tmp_path / "none.sqlite3")).run()
    at.sidebar.radio(key="view").set_value("Load runs").run()
    assert not at.exception
    assert not [e for e in at.expander if "advise --apply" in e.label]
