"""The fleet overview from the queries' answers: one row per server and model, worst first."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from dashboard import fleet
from dashboard import queries as q
from dashboard.views import fleet_view
from tests.deploy.tools import promtool

A, B, C = "http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def by_model(values: dict[tuple[str, str], float]) -> pd.DataFrame:
    return frame([{"target": t, "model": m, "value": v} for (t, m), v in values.items()])


def answers() -> dict[str, pd.DataFrame]:
    """A: batches well; B: batches badly, an alert on its model; C: down, nothing else.
    B's add_unbatched had no traffic in the window."""
    models = {(A, "m"): 1.0, (B, "m"): 1.0, (B, "add_unbatched"): 1.0, (C, "m"): 1.0}
    return {
        "rows": by_model(models),
        "success": by_model({(A, "m"): 100.0, (B, "m"): 40.0, (B, "add_unbatched"): 0.0}),
        "failure": by_model({(A, "m"): 1.0, (B, "m"): 0.0}),
        "average": by_model({(A, "m"): 3.6, (B, "m"): 1.2}),
        "max": by_model({(A, "m"): 4.0, (B, "m"): 8.0, (B, "add_unbatched"): 4.0}),
        "preferred": by_model({(A, "m"): 90.0}),
        "has_preferred": by_model({(A, "m"): 1.0, (B, "m"): 1.0}),
        "executions": by_model({(A, "m"): 100.0, (B, "m"): 50.0}),
        "queue": by_model({(A, "m"): 0.0004, (B, "m"): 0.002}),
        "up": frame([{"target": t, "value": float(t != C)} for t in (A, B, C)]),
        "alerts": frame(
            [
                {"alertname": "BatchingIneffective", "target": B, "model": "m", "value": 1.0},
                {"alertname": "TritonDown", "target": C, "value": 1.0},
            ]
        ),
    }


def test_the_worst_batcher_comes_first() -> None:
    table = fleet.overview(answers())
    assert list(zip(table["target"], table["model"], strict=True)) == [
        (C, "m"),  # down
        (B, "m"),  # an alert fires, and efficiency 1.2 / 8
        (A, "m"),  # efficiency 3.6 / 4
        (B, "add_unbatched"),  # no traffic in the window: last
    ]
    c, b, a, idle = (table.iloc[i] for i in range(4))
    assert not c["up"] and c["alerts"] == "TritonDown" and math.isnan(c["requests_per_s"])
    assert b["up"] and b["alerts"] == "BatchingIneffective"
    assert b["batch_efficiency"] == pytest.approx(1.2 / 8)
    # Preferred sizes configured, none hit: 0, not missing.
    assert b["preferred_hit_ratio"] == 0.0
    assert a["requests_per_s"] == pytest.approx(101.0)
    assert a["batch_efficiency"] == pytest.approx(0.9)
    assert a["preferred_hit_ratio"] == pytest.approx(0.9)
    assert a["queue_s_per_request"] == pytest.approx(0.0004)
    assert math.isnan(idle["batch_efficiency"]) and math.isnan(idle["preferred_hit_ratio"])


def test_a_server_down_since_before_the_window_still_gets_a_row() -> None:
    data = answers()
    data["rows"] = by_model({(A, "m"): 1.0})
    table = fleet.overview(data)
    assert (C, "") in set(zip(table["target"], table["model"], strict=True))
    assert table.iloc[0]["target"] == C


def test_the_display_names_units() -> None:
    shown = fleet_view.display(fleet.overview(answers()))
    assert list(shown.columns)[:3] == ["server", "model", "up"]
    assert shown.iloc[0]["up"] == "DOWN"
    assert shown.iloc[2]["batch efficiency %"] == 90.0
    assert shown.iloc[2]["queue ms/request"] == 0.4


def endpoint_answers() -> pd.DataFrame:
    """A is read with its metrics port refused; B answers on every endpoint. An endpoint
    that answers has an empty reason, which Prometheus drops: no `reason` label."""
    return frame(
        [
            {
                "target": A,
                "endpoint": "metrics",
                "url": "http://10.0.0.1:8002/metrics",
                "reason": "connection refused",
                "value": 0.0,
            },
            {"target": A, "endpoint": "statistics", "url": f"{A}/v2/models/stats", "value": 1.0},
            {"target": B, "endpoint": "metrics", "url": "http://10.0.0.2:8002/metrics"}
            | {"value": 1.0},
        ]
    )


def test_an_endpoint_down_is_named_on_its_servers_rows() -> None:
    table = fleet.overview({**answers(), "endpoints": endpoint_answers()})
    keys = zip(table["target"], table["model"], strict=True)
    down = dict(zip(keys, table["endpoints_down"], strict=True))
    assert down[(A, "m")] == "metrics (connection refused)"
    assert down[(B, "m")] == "" and down[(B, "add_unbatched")] == ""
    assert down[(C, "m")] == ""  # down altogether: that is `up`, not an endpoint
    shown = fleet_view.display(table)
    assert "metrics (connection refused)" in set(shown["endpoints down"])


def test_an_endpoint_alert_is_its_column_and_does_not_rank_a_batcher_worse() -> None:
    data = {**answers(), "endpoints": endpoint_answers()}
    data["alerts"] = pd.concat(
        [data["alerts"], frame([{"alertname": "TritonEndpointDown", "target": A, "value": 1.0}])]
    )
    table = fleet.overview(data)
    rows = list(zip(table["target"], table["model"], strict=True))
    assert rows.index((B, "m")) < rows.index((A, "m"))  # still the worse batcher first
    a = table.iloc[rows.index((A, "m"))]
    assert a["alerts"] == "" and a["endpoints_down"] == "metrics (connection refused)"


def test_the_endpoint_table_says_where_each_endpoint_is_read_and_the_fix() -> None:
    table = fleet.endpoint_table(endpoint_answers())
    assert table.to_dict("records") == [
        {
            "target": A,
            "endpoint": "metrics",
            "url": "http://10.0.0.1:8002/metrics",
            "up": False,
            "reason": "connection refused",
            "fix": "give --triton-metrics-url",
        },
        {
            "target": A,
            "endpoint": "statistics",
            "url": f"{A}/v2/models/stats",
            "up": True,
            "reason": "",
            "fix": "",
        },
        {
            "target": B,
            "endpoint": "metrics",
            "url": "http://10.0.0.2:8002/metrics",
            "up": True,
            "reason": "",
            "fix": "",
        },
    ]
    assert fleet.endpoint_table(pd.DataFrame()).empty


def test_every_fleet_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule, with Prometheus' own parser."""
    exprs = [
        fleet.ROWS,
        *fleet.REQUESTS_PER_S.values(),
        fleet.AVERAGE_BATCH_SIZE,
        fleet.MAX_BATCH_SIZE,
        fleet.PREFERRED_EXECUTIONS,
        fleet.HAS_PREFERRED,
        fleet.EXECUTIONS,
        fleet.QUEUE_SECONDS_PER_REQUEST,
        fleet.FIRING,
        q.ENDPOINTS,
    ]
    rules = [
        {"record": f"fleet:q{i}", "expr": e.replace("${w}", "300s")} for i, e in enumerate(exprs)
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "fleet", "rules": rules}]}))
    out = promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout


def test_search_keeps_the_rows_that_hold_every_word_in_their_order() -> None:
    table = fleet.overview(answers())
    assert list(fleet.search(table, "")["model"]) == list(table["model"])
    found = fleet.search(table, "  M  ")  # any case, spaces around
    assert list(zip(found["target"], found["model"], strict=True)) == [(C, "m"), (B, "m"), (A, "m")]
    # Words match the server or the model; each must match.
    assert list(fleet.search(table, "10.0.0.2 unbatched")["model"]) == ["add_unbatched"]
    assert list(fleet.search(table, "10.0.0.2")["model"]) == ["m", "add_unbatched"]
    assert fleet.search(table, "10.0.0.1 unbatched").empty
    # A regex character is a character.
    assert fleet.search(table, ".*").empty
