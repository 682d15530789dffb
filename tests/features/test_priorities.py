"""Priority levels and preserve_ordering on a real Triton: config view, exporter, load.

add_priority: 50 ms per batch of at most 4, levels 1 and 2 (level 2: a queue of 16, 500 ms
timeout). add_ordered: batch_add_model's code with preserve_ordering and two instances.
"""

from __future__ import annotations

import pytest

from dashboard.features import PRESERVE_ORDERING_COST, config_notes
from loadgen.errors import LoadgenError
from loadgen.priorities import PriorityParams, parse_mix, run_mix
from stacksettings import Settings
from tests.features.conftest import registry_for
from tests.helpers import load
from tritonapi import TritonClient

pytestmark = pytest.mark.integration


def test_config_view_shows_each_priority_queue(features_triton: Settings) -> None:
    config = TritonClient(features_triton.url("triton_http")).model_config("add_priority")
    notes = config_notes(config)
    assert notes[0] == (
        "2 priority levels (default 2): a request of a lower level is batched only when no "
        "higher one waits. Queues: priority 1: unbounded; priority 2: at most 16 waiting, "
        "rejected after 500000 µs in the queue."
    )
    assert "HTTP 503" in notes[1] and "counts these rejections nowhere" in notes[1]
    registry = registry_for(features_triton)
    labels = {"target": features_triton.url("triton_http"), "model": "add_priority"}
    assert (
        registry.get_sample_value("triton_batching_priority_levels", {**labels, "version": "1"})
        == 2
    )


def test_a_mixed_priority_run_serves_level_1_first(features_triton: Settings) -> None:
    # 12 closed-loop clients against 4 places per 50 ms batch: a batch takes the 3 level-1
    # clients first, the 9 of level 2 share what is left (and some wait past 500 ms).
    registry = registry_for(features_triton)
    labels = {
        "target": features_triton.url("triton_http"),
        "model": "add_priority",
        "version": "1",
        "reason": "REJECTED",
    }
    name = "triton_batching_request_failures_by_reason_total"
    before = registry.get_sample_value(name, labels)
    params = PriorityParams(
        "add_priority", parse_mix("1:3,2:9"), features_triton.url("triton_http"), 3.0
    )
    results = run_mix(params)
    high, low = results[1], results[2]
    assert high.ok > 30 and low.ok > 30, (high, low)
    assert high.errors == {}
    p50_high, p50_low = high.quantile(0.5), low.quantile(0.5)
    assert p50_high is not None and p50_low is not None
    assert p50_high < 0.75 * p50_low, (p50_high, p50_low)
    # A queue timeout is a 503 to the client, and Triton 2.51 counts it as REJECTED
    # (unlike a full queue's 503).
    timeouts = sum(n for kind, n in low.errors.items() if "Request timeout expired" in kind)
    assert timeouts == sum(low.errors.values()), low.errors
    assert registry.get_sample_value(name, labels) == (before or 0) + timeouts


def test_bad_mixes_are_one_line_and_exit_2(
    features_triton: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    url = features_triton.url("triton_http")
    cases = [
        (["--model", "add_priority", "--mix", "3:1"], "priority 3 is not a level"),
        (["--model", "add_priority", "--mix", "1-2"], "'1-2' is not LEVEL:CLIENTS"),
        (["--model", "batch_add_model", "--mix", "1:1"], "has no priority levels"),
        (["--model", "add_priority", "--mix", "1:1,1:2"], "names a priority level twice"),
    ]
    for argv, message in cases:
        assert load(["priorities", *argv, "--url", url, "--duration", "0.5"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    with pytest.raises(LoadgenError, match="at least 1 client"):
        run_mix(PriorityParams("add_priority", ((1, 0),), url))


def test_preserve_ordering_is_shown_with_its_cost(features_triton: Settings) -> None:
    client = TritonClient(features_triton.url("triton_http"))
    assert PRESERVE_ORDERING_COST in config_notes(client.model_config("add_ordered"))
    assert PRESERVE_ORDERING_COST not in config_notes(client.model_config("batch_add_model"))
    registry = registry_for(features_triton)
    labels = {"target": client.url, "version": "1"}
    ordered = {**labels, "model": "add_ordered"}
    plain = {**labels, "model": "batch_add_model"}
    assert registry.get_sample_value("triton_batching_preserve_ordering_enabled", ordered) == 1
    assert registry.get_sample_value("triton_batching_preserve_ordering_enabled", plain) == 0
