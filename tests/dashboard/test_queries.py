"""The dashboard's PromQL: how templates are filled, and that every query is valid PromQL."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from dashboard import live
from dashboard import queries as q
from promapi import Range


def test_selector_escapes_label_values() -> None:
    assert q.selector("batch_add_model") == 'model="batch_add_model"'
    assert q.selector('we"ird\\', "http://h:8000") == (
        'model="we\\"ird\\\\", target="http://h:8000"'
    )
    with pytest.raises(ValueError):
        q.selector("")


def test_build_fills_selector_and_window() -> None:
    expr = q.build(q.INFERENCES_PER_S, q.selector("m"), "5m")
    assert expr == 'sum(rate(triton_batching_inferences_total{model="m"}[5m]))'


def test_build_leaves_label_replace_dollar_groups_alone() -> None:
    expr = q.build(q.PREFERRED_HIT_RATIO, q.selector("m"), "300s")
    assert '"$1"' in expr
    assert "${" not in expr


def test_a_windowed_query_without_a_window_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\$\{w\}"):
        q.build(q.FAILURE_RATIO, q.selector("m"))


def test_an_unknown_placeholder_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown placeholder"):
        q.build("sum(x{${model}})", "a")


def test_ratios_filter_zero_denominators_so_no_data_gives_no_series() -> None:
    for template in (q.AVERAGE_BATCH_SIZE, q.QUEUE_SECONDS_PER_REQUEST, q.PREFERRED_HIT_RATIO):
        assert ") > 0)" in template


def every_query() -> dict[str, str]:
    sel = q.selector("batch_add_model", "http://127.0.0.1:8000")
    names = {n: getattr(q, n) for n in dir(q) if n.isupper() and isinstance(getattr(q, n), str)}
    built = {
        name: q.build(t, sel, "300s") if "${w}" in t else q.build(t, sel)
        for name, t in names.items()
    }
    shown = {*live.KPI_QUERIES.values(), *live.LATEST_QUERIES.values()}
    assert shown | set(live.SERIES_QUERIES.values()) <= set(names.values())
    return built


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each query as a recording rule, with Prometheus' own parser."""
    rules = [
        {"record": f"dashboard:{name.lower()}", "expr": expr}
        for name, expr in every_query().items()
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules)} rules found" in out.stdout


def test_the_latest_kpis_are_taken_where_a_range_query_steps_last() -> None:
    assert live.last_point(Range(1000, 1300, 5)) == 1300
    # A range that is not a whole number of steps ends on the step before its end.
    assert live.last_point(Range(1000, 1307, 5)) == 1305
