"""Ensembles, the response cache and sequence batching on a real Triton, through the
exporter's collector, the load generator and the dashboard's notes.

Counters are compared as differences over one test (the session's Triton is shared).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dashboard.features import config_notes
from loadgen.engine.runner import RunParams, run
from loadgen.errors import LoadgenError
from loadgen.sequences import (
    NO_START,
    SequenceParams,
    error_kind,
    expected_running_sum,
    run_sequences,
    send_step,
    sequence_config,
)
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.features.conftest import build_repository, registry_for
from tests.helpers import load, model_stats, stats_counting, wait_for
from tritonapi import TritonClient, TritonHTTPError

pytestmark = pytest.mark.integration


def series(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of one name: sorted labels (without target) -> value."""
    return {
        tuple(sorted((k, v) for k, v in s.labels.items() if k != "target")): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name
    }


def of(registry: CollectorRegistry, name: str, model: str, **labels: str) -> float | None:
    key = tuple(sorted({"model": model, "version": "1", **labels}.items()))
    return series(registry, name).get(key)


def add_inputs(a: float, b: float) -> list[dict[str, object]]:
    return [
        {"name": "INPUT_A", "datatype": "FP32", "shape": [1, 1], "data": [a]},
        {"name": "INPUT_B", "datatype": "FP32", "shape": [1, 1], "data": [b]},
    ]


# ---- ensembles ---------------------------------------------------------------------------


def test_ensemble_is_counted_once_and_its_steps_batch_on_their_own(
    features_triton: Settings,
) -> None:
    registry = registry_for(features_triton)
    steps = ("preprocess", "batch_add_model")

    def counts() -> dict[str, float]:
        out = {
            m: of(registry, "triton_batching_inferences_total", m) or 0.0
            for m in ("add_pipeline", *steps)
        }
        out["requests"] = (
            of(registry, "triton_batching_requests_success_total", "add_pipeline") or 0.0
        )
        return out

    before = counts()
    before_stats = model_stats(features_triton.url("triton_http"), "add_pipeline")
    params = RunParams(
        scenario="concurrency",
        model="add_pipeline",
        url=features_triton.url("triton_http"),
        concurrency=8,
        duration_s=1.5,
    )
    client = run(params).summary.client
    after = counts()
    assert client.ok > 50 and client.failed == 0, client.errors
    # Triton's statistics of an ensemble count one inference and one execution per request
    # (the exporter leaves them out, below): the load generator's wait for the executions
    # behind the answers ends for an ensemble too.
    window = model_stats(features_triton.url("triton_http"), "add_pipeline").minus(before_stats)
    assert window.accounts_for(client.ok)
    assert window.inference_count == window.execution_count == client.ok
    # The ensemble's requests are the client's; its inference and batch series are absent.
    assert after["requests"] - before["requests"] == client.ok
    assert of(registry, "triton_batching_inferences_total", "add_pipeline") is None
    assert of(registry, "triton_batching_executions_total", "add_pipeline") is None
    assert of(registry, "triton_batching_average_batch_size", "add_pipeline") is None
    assert not any(
        dict(k)["model"] == "add_pipeline"
        for k in series(registry, "triton_batching_batch_executions_total")
    )
    # Each step executed every request once: summed over models, one inference per step.
    for step in steps:
        assert after[step] - before[step] == client.ok
    # Each step formed its own batches: more than one request per execution under load.
    assert (of(registry, "triton_batching_average_batch_size", "preprocess") or 0) > 1
    assert of(registry, "triton_batching_scheduler_info", "add_pipeline", scheduler="ensemble")
    assert of(
        registry,
        "triton_batching_ensemble_step_info",
        "add_pipeline",
        step="1",
        step_model="preprocess",
    )
    assert of(
        registry,
        "triton_batching_ensemble_step_info",
        "add_pipeline",
        step="2",
        step_model="batch_add_model",
    )


def test_config_view_shows_the_pipeline_with_each_steps_batching(
    features_triton: Settings,
) -> None:
    client = TritonClient(features_triton.url("triton_http"))
    configs = {m: client.model_config(m) for m in ("add_pipeline", "preprocess", "batch_add_model")}
    notes = config_notes(configs["add_pipeline"], configs)
    assert notes[0].startswith("Ensemble pipeline of 2 steps")
    assert notes[1] == "1. `preprocess`: " + configs["preprocess"].batching_summary()
    assert "preferred sizes 4" in notes[1]
    assert notes[2] == "2. `batch_add_model`: " + configs["batch_add_model"].batching_summary()
    # A step that is not loaded is named as such.
    missing = config_notes(configs["add_pipeline"], {"batch_add_model": configs["batch_add_model"]})
    assert missing[1] == "1. `preprocess`: not loaded: requests to the ensemble fail"


def control(admin: TritonClient, model: str, action: str) -> None:
    """Load or unload a model (Triton answers with an empty body, not JSON)."""
    response = admin.session.post(
        f"{admin.url}/v2/repository/models/{model}/{action}", json={}, headers=admin.headers
    )
    assert response.status_code == 200, response.text


def test_an_unloaded_step_takes_the_ensemble_with_it(features_triton: Settings) -> None:
    url = features_triton.url("triton_http")
    admin = TritonClient(url, headers=features_triton.admin_headers())
    registry = registry_for(features_triton)
    try:
        control(admin, "preprocess", "unload")

        # Triton 2.51 unloads the ensemble with its step (checked): both leave the
        # statistics, so their series go absent, and the index says why.
        def unloaded() -> bool:
            states = {e["name"]: e.get("state") for e in admin.repository_index()}
            return states["preprocess"] == states["add_pipeline"] == "UNAVAILABLE"

        wait_for("the step and its ensemble unloaded", unloaded)
        for model in ("add_pipeline", "preprocess"):
            assert of(registry, "triton_batching_requests_success_total", model) is None
            assert of(registry, "triton_batching_model_ready", model) == 0
            assert (
                of(registry, "triton_batching_scheduler_info", model, scheduler="ensemble") is None
            )
        assert of(registry, "triton_batching_model_ready", "batch_add_model") == 1
        # The load generator: one line naming the model and what is ready instead.
        with pytest.raises(LoadgenError, match="has no model 'add_pipeline'"):
            run(RunParams(scenario="serial", model="add_pipeline", url=url, requests=1))
    finally:
        for model in ("preprocess", "add_pipeline"):
            control(admin, model, "load")
    assert admin.infer_json(
        "add_pipeline", [{"name": "RAW", "datatype": "FP32", "shape": [1, 1], "data": [2.0]}]
    )["outputs"][0]["data"] == [6.0]


# ---- the response cache ------------------------------------------------------------------


def test_cache_hits_never_reach_the_batcher(features_triton: Settings) -> None:
    registry = registry_for(features_triton)
    client = TritonClient(features_triton.url("triton_http"))
    names = (
        "triton_batching_cache_hits_total",
        "triton_batching_cache_misses_total",
        "triton_batching_inferences_total",
        "triton_batching_requests_success_total",
    )
    before = {n: of(registry, n, "add_cached") or 0.0 for n in names}
    before_stats = model_stats(features_triton.url("triton_http"), "add_cached")
    # 10 identical requests (1 miss, 9 hits) and 2 new ones (2 misses), serially.
    for _ in range(10):
        answer = client.infer_json("add_cached", add_inputs(1.5, 2.0))
        assert answer["outputs"][0]["data"] == [3.5]
    for a in (10.0, 20.0):
        client.infer_json("add_cached", add_inputs(a, 1.0))
    # The last miss's execution is counted just after its answer: read once it is in.
    stats_counting(features_triton.url("triton_http"), "add_cached", before_stats, 12)
    delta = {n: (of(registry, n, "add_cached") or 0.0) - before[n] for n in names}
    assert delta == {
        "triton_batching_cache_hits_total": 9,
        "triton_batching_cache_misses_total": 3,
        # Only the misses reached the batcher: the batch size is computed on those.
        "triton_batching_inferences_total": 3,
        "triton_batching_requests_success_total": 12,
    }
    target = features_triton.url("triton_http")
    assert (
        registry.get_sample_value("triton_batching_response_cache_configured", {"target": target})
        == 1
    )
    notes = config_notes(client.model_config("add_cached"), server_cache=True)
    assert notes == [
        "Response cache: enabled. A hit is answered from the cache and never reaches the "
        "batcher, so the batch size and efficiency shown are those of the requests that did "
        "(the misses)."
    ]
    # Models without the cache have no cache series (not zeros).
    assert of(registry, "triton_batching_cache_hits_total", "batch_add_model") is None


@pytest.fixture(scope="module")
def triton_without_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("nocache")
    settings = replace(
        isolated(base / "state"),
        model_repository=build_repository(Path(base / "models"), ("add_cached",)),
    )
    with running(settings, only={"triton"}):
        yield settings


def test_cache_enabled_on_a_server_without_one(triton_without_cache: Settings) -> None:
    registry = registry_for(triton_without_cache)
    client = TritonClient(triton_without_cache.url("triton_http"))
    for _ in range(3):
        client.infer_json("add_cached", add_inputs(1.0, 1.0))
    target = triton_without_cache.url("triton_http")
    assert (
        registry.get_sample_value("triton_batching_response_cache_configured", {"target": target})
        == 0
    )
    assert of(registry, "triton_batching_response_cache_enabled", "add_cached") == 1
    # Triton reports 0 hits and 0 misses here: not a measurement, so no series.
    assert of(registry, "triton_batching_cache_hits_total", "add_cached") is None
    assert of(registry, "triton_batching_cache_misses_total", "add_cached") is None
    assert of(registry, "triton_batching_inferences_total", "add_cached") == 3
    [note] = config_notes(client.model_config("add_cached"), server_cache=False)
    assert "the server has no cache configured" in note and "--cache-config" in note


# ---- sequence batching -------------------------------------------------------------------


def test_sequences_keep_their_state_and_batch_across_slots(features_triton: Settings) -> None:
    registry = registry_for(features_triton)
    model = "seq_accumulate"
    before = {
        n: of(registry, n, model) or 0.0
        for n in ("triton_batching_inferences_total", "triton_batching_requests_success_total")
    }
    params = SequenceParams(
        model=model,
        url=features_triton.url("triton_http"),
        sequences=16,
        length=6,
        concurrency=4,
        first_id=1000,
    )
    result = run_sequences(params)
    assert result.errors == {}
    assert result.completed == 16 and result.ok == result.sent == 96
    # Every sequence's own running sum: the slots kept the sequences apart.
    assert all(v == expected_running_sum(6) for v in result.outputs.values())
    assert len(result.outputs) == 16
    after = {n: of(registry, n, model) or 0.0 for n in before}
    # The statistics count the real requests only, not the idle slots' fillers.
    assert (
        after["triton_batching_requests_success_total"]
        - before["triton_batching_requests_success_total"]
        == 96
    )
    assert (
        after["triton_batching_inferences_total"] - before["triton_batching_inferences_total"] == 96
    )
    assert of(registry, "triton_batching_scheduler_info", model, scheduler="sequence") == 1
    sizes = {
        dict(k)["batch_size"]
        for k in series(registry, "triton_batching_batch_executions_total")
        if dict(k)["model"] == model
    }
    assert sizes and sizes <= {"1", "2", "3", "4"}
    [note] = config_notes(sequence_config(TritonClient(params.url), model))
    assert note.startswith("Sequence batching (direct)") and "START (START)" in note


def test_a_sequence_without_start_is_refused_with_a_clear_error(
    features_triton: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    client = TritonClient(features_triton.url("triton_http"))
    config = sequence_config(client, "seq_accumulate")
    with pytest.raises(TritonHTTPError) as refused:
        send_step(client, config, 424242, 0, start=False, end=False)
    assert error_kind(refused.value) == NO_START
    # Ordinary load runs refuse a stateful model up front, naming the way to load it.
    with pytest.raises(LoadgenError, match="batchscope load sequences --model seq_accumulate"):
        run(RunParams(scenario="serial", model="seq_accumulate", url=client.url, requests=1))
    # And sequences refuse a model without sequence batching: one line, exit code 2.
    assert load(["sequences", "--model", "batch_add_model", "--url", client.url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no sequence batching (scheduler: dynamic)" in err
    assert (
        load(["sequences", "--model", "seq_accumulate", "--url", client.url, "--first-id", "0"])
        == 2
    )
    assert "Triton reads 0 as 'no correlation ID'" in capsys.readouterr().err
