"""The Triton client against the real Triton of the session's stack."""

from __future__ import annotations

import pytest

from stacksettings import Settings, admin_headers, free_ports
from tritonapi.client import (
    TritonBadResponse,
    TritonClient,
    TritonHTTPError,
    TritonUnreachable,
    metrics_text,
)
from tritonapi.metrics import parse_metrics

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def triton(running_stack: Settings) -> TritonClient:
    """A client with the stack's key: the repository index and trace settings are restricted."""
    headers = admin_headers(running_stack.admin_key_file)
    assert headers, "the stack wrote no admin key"
    return TritonClient(running_stack.url("triton_http"), headers=headers)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2/repository/index"),
        ("POST", "/v2/repository/models/batch_add_model/unload"),
        ("GET", "/v2/systemsharedmemory/status"),
        ("GET", "/v2/cudasharedmemory/status"),
        ("GET", "/v2/trace/setting"),
        ("GET", "/v2/logging"),
    ],
)
def test_restricted_apis_need_the_stacks_key(
    running_stack: Settings, method: str, path: str
) -> None:
    client = TritonClient(running_stack.url("triton_http"))
    for headers in ({}, {"x-batchscope-admin-key": "guess"}):
        client.headers = headers
        with pytest.raises(TritonHTTPError) as caught:
            client.request_json(method, path, body={} if method == "POST" else None)
        assert caught.value.status == 403, path
    assert running_stack.admin_key_file.stat().st_mode & 0o777 == 0o600
    # Inference, metadata, health and statistics stay open.
    assert client.ready() and client.model_metadata("batch_add_model")


def test_server_and_model_metadata(triton: TritonClient) -> None:
    assert triton.ready()
    assert triton.server_metadata()["version"] == "2.51.0"
    meta = triton.model_metadata("batch_add_model")
    assert {t["name"] for t in meta["inputs"]} == {"INPUT_A", "INPUT_B"}
    assert triton.ready_models() == ["add_unbatched", "batch_add_model", "mlp_model"]


def test_model_config_is_typed(triton: TritonClient) -> None:
    config = triton.model_config("batch_add_model")
    assert (config.max_batch_size, config.preferred_batch_sizes) == (4, (2, 4))
    assert config.max_queue_delay_us == 500
    assert triton.model_config("add_unbatched").dynamic is None


def test_model_stats_of_the_newest_version(triton: TritonClient) -> None:
    stats = triton.model_stats("batch_add_model")
    assert (stats.name, stats.version) == ("batch_add_model", "1")


def test_an_unknown_model_keeps_tritons_own_error(triton: TritonClient) -> None:
    with pytest.raises(TritonHTTPError) as caught:
        triton.model_config("no_such_model")
    # Triton 2.51 answers 400 here, and 404 once started with --http-restricted-api.
    assert caught.value.status in (400, 404)
    assert "no_such_model" in caught.value.error
    assert "GET /v2/models/no_such_model/config" in str(caught.value)


def test_trace_settings_are_read_and_changed_per_model(triton: TritonClient) -> None:
    assert "trace_rate" in triton.trace_settings()
    # Another test's finished window may have left this model its own settings (level
    # TIMESTAMPS, count 0), and 2.51 refuses any update of them that leaves that pair as it
    # is ("Attempting to set invalid trace setting"): start from the global settings.
    keys = ("trace_level", "trace_rate", "trace_count", "log_frequency")
    triton.update_trace_settings(dict.fromkeys(keys), model="add_unbatched")
    try:
        changed = triton.update_trace_settings({"trace_rate": 7}, model="add_unbatched")
        assert changed["trace_rate"] == "7"
        assert triton.trace_settings("add_unbatched")["trace_rate"] == "7"
    finally:
        # None clears the model's own value: the global setting applies again.
        triton.update_trace_settings({"trace_rate": None}, model="add_unbatched")
    assert (
        triton.trace_settings("add_unbatched")["trace_rate"]
        == (triton.trace_settings()["trace_rate"])
    )


def test_metrics_text_is_tritons(running_stack: Settings) -> None:
    text = metrics_text(f"{running_stack.url('triton_metrics')}/metrics")
    assert ("batch_add_model", "1") in parse_metrics(text).pending


def test_nothing_listening_is_unreachable() -> None:
    (port,) = free_ports(1)
    client = TritonClient(f"http://127.0.0.1:{port}", timeout_s=2)
    with pytest.raises(TritonUnreachable, match="connection refused"):
        client.server_metadata()
    assert not client.is_ready()


def test_another_server_is_not_mistaken_for_triton(running_stack: Settings) -> None:
    # Streamlit answers any path with its HTML page.
    client = TritonClient(running_stack.url("dashboard"))
    with pytest.raises(TritonBadResponse, match="not JSON"):
        client.server_metadata()
