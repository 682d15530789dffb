"""The dashboard's feature notes and queries, without a server."""

from __future__ import annotations

from pathlib import Path

import yaml

from dashboard import queries as q
from dashboard.features import (
    CACHE_CONFIGURED,
    CACHE_HIT_SHARE,
    ENSEMBLE_STEPS,
    cache_note,
    config_notes,
    ensemble_note,
)
from stacksettings import ROOT
from tests.features.conftest import HERE
from tritonapi.modelconfig import ModelConfig, from_proto, parse_pbtxt

PROMTOOL_TESTS = ROOT / "tests" / "rules" / "dashboard_features_test.yml"


def config(name: str) -> ModelConfig:
    return from_proto(parse_pbtxt((HERE / name / "config.pbtxt").read_text()))


def test_the_promtool_tested_queries_are_the_dashboards() -> None:
    tests = yaml.safe_load(Path(PROMTOOL_TESTS).read_text())["tests"][0]["promql_expr_test"]
    exprs = [t["expr"] for t in tests]
    steps = yaml.safe_load(Path(PROMTOOL_TESTS).read_text())["tests"][1]["promql_expr_test"]
    assert steps[0]["expr"] == q.build(ENSEMBLE_STEPS, q.selector("add_pipeline"))
    assert steps[1]["expr"] == q.build(ENSEMBLE_STEPS, q.selector("batch_add_model"))
    assert exprs[0] == q.build(CACHE_HIT_SHARE, q.selector("add_cached"), "5m")
    assert exprs[1] == q.build(CACHE_HIT_SHARE, q.selector("idle"), "5m")
    assert exprs[2] == q.build(CACHE_CONFIGURED, q.selector("add_cached", "http://t:8000"))


def test_cache_note() -> None:
    assert cache_note(None) is None
    assert cache_note(0.75) == (
        "75% of the lookups in this window were answered from the response cache and never "
        "reached the batcher: the batch size and efficiency above are those of the other 25%."
    )


def test_a_bounded_queue_without_priorities() -> None:
    notes = config_notes(config("add_slow_queue"))
    assert notes[0] == "Queue: at most 2 waiting."
    assert notes[1].startswith("A full queue answers HTTP 503 'Exceeds maximum queue size'")


def test_cache_of_unknown_server_says_so() -> None:
    [note] = config_notes(config("add_cached"))
    assert note.startswith("Response cache: enabled (whether the server has a cache is not known")


def test_ensemble_note_orders_the_steps() -> None:
    note = ensemble_note("add_pipeline", [(2, "batch_add_model"), (1, "preprocess")])
    assert note.startswith("`add_pipeline` is an ensemble (`preprocess` → `batch_add_model`)")
