"""The checks on windows with known answers, and the CLI's misuse paths (no server)."""

from __future__ import annotations

import pytest

from batchscope.main import main as batchscope
from doctor import check
from doctor.checkup import SAMPLE_S
from observe.window import Window
from tritonapi.modelconfig import parse_json

SPEC = {
    "name": "m",
    "max_batch_size": 4,
    "dynamic_batching": {"preferred_batch_size": [2, 4], "max_queue_delay_microseconds": "500"},
}


def window(**overrides: object) -> Window:
    values: dict[str, object] = {
        "seconds": 10.0,
        "source": "test",
        "requests_ok": 1000,
        "requests_failed": 0,
        "inferences": 1060,  # = the distribution below: 20 x 1 + 40 x 2 + 240 x 4
        "executions": 300,
        "queue_s": 1.0,  # 1 ms per request
        "compute_s": 0.5,
        "executions_by_size": {1: 20, 2: 40, 4: 240},
        "pending_max": 3,
        "gpus": 0,
    }
    values.update(overrides)
    return Window(**values)  # type: ignore[arg-type]


def codes(config: dict[str, object], w: Window | None) -> list[str]:
    return [f.code for f in check(parse_json(config), w)]


def test_window_numbers() -> None:
    w = window()
    assert w.arrival_rate == 100.0
    assert w.average_batch == pytest.approx(1060 / 300)
    assert w.hit_ratio((2, 4)) == pytest.approx(280 / 300)
    assert w.batched_share == pytest.approx(1040 / 1060)
    # Traffic during 2 s of the 10 s window: the rate while busy.
    assert Window(10.0, "t", 100, 0, 100, 100, 0.0, 0.0, active_seconds=2.0).arrival_rate == 50
    # Little's law: 100/s x (1 ms + 0.5 ms) inside Triton.
    assert w.in_server == pytest.approx(0.15)
    assert Window(1.0, "t", 0, 0, 0, 0, 0.0, 0.0).average_batch is None


def test_healthy_and_idle_have_no_finding() -> None:
    assert codes(SPEC, window()) == []
    assert codes(SPEC, None) == []
    assert codes(SPEC, window(requests_ok=5, inferences=5, executions=5)) == []


def test_config_findings() -> None:
    off = {"name": "m", "max_batch_size": 4}
    assert codes(off, None) == ["batching-off"]
    assert codes({"name": "m", "max_batch_size": 0}, None) == ["no-batch-dimension"]
    too_big = {**SPEC, "dynamic_batching": {"preferred_batch_size": [2, 8]}}
    [finding] = check(parse_json(too_big), None)
    assert finding.code == "preferred-above-max"
    assert finding.fix == (
        "max_batch_size: 8",
        "# or keep max_batch_size 4: preferred_batch_size: [ 2 ]",
    )


def test_serial_against_short_delay() -> None:
    alone = {"executions_by_size": {1: 1000}, "executions": 1000, "queue_s": 0.5}
    # 100/s and 500 µs: 0.05 arrivals per delay, too few to tell; the delay is too short.
    [short] = check(parse_json(SPEC), window(**alone))
    assert short.code == "delay-too-short"
    # One more request per batch at 100/s takes 10 ms: capped at 10,000 µs.
    assert short.fix == ("max_queue_delay_microseconds: 10000",)
    assert ("arrivals per queue delay (rate x delay)", "0.05") in short.numbers
    # 1,000/s and 500 µs: independent arrivals would batch 39 % of the time; none did.
    serial = window(
        requests_ok=10_000,
        inferences=10_000,
        executions=10_000,
        executions_by_size={1: 10_000},
        queue_s=5.0,
    )
    [never] = check(parse_json(SPEC), serial)
    assert never.code == "no-overlap"
    assert ("share that independent arrivals would batch", "39 %") in never.numbers
    assert all(line.startswith("#") for line in never.fix)


def test_delay_proposal_gathers_the_smallest_preferred_size() -> None:
    config = {**SPEC, "dynamic_batching": {"preferred_batch_size": [2, 4]}}  # delay 0
    w = window(
        requests_ok=4000,
        inferences=4000,
        executions=4000,
        executions_by_size={1: 4000},
    )
    [short] = check(parse_json(config), w)
    # 400/s: one more request arrives in 2,500 µs on average.
    assert short.fix == ("max_queue_delay_microseconds: 2500",)


def test_preferred_missed_only_while_batching_works() -> None:
    config = {**SPEC, "dynamic_batching": {"preferred_batch_size": [4]}}
    w = window(executions_by_size={3: 300}, inferences=900)
    [missed] = check(parse_json(config), w)
    assert missed.code == "preferred-missed"
    assert ("executions at a preferred size", "0 %") in missed.numbers
    assert "preferred_batch_size: [ 3 ]" in missed.fix


def test_latency_findings() -> None:
    bounded = {
        **SPEC,
        "dynamic_batching": {
            "preferred_batch_size": [2, 4],
            "max_queue_delay_microseconds": "500",
            "default_queue_policy": {"max_queue_size": "8"},
        },
    }
    # Too few answered requests for the traffic checks, but the queue was seen full.
    full = window(requests_ok=10, inferences=10, executions=5, pending_max=8, queue_s=0.01)
    assert codes(bounded, full) == ["queue-full"]
    assert codes(bounded, window(pending_max=7)) == []
    slow = window(queue_s=300.0, compute_s=50.0)  # 300 ms queue per request
    [queue] = check(parse_json(SPEC), slow)
    assert queue.code == "queue-latency"
    assert queue.fix[0] == "instance_group [ { count: 2 kind: KIND_GPU } ]"
    assert ("GPU utilisation", "no GPU reported") in queue.numbers
    hot = window(queue_s=300.0, compute_s=50.0, gpu_utilization=0.97, gpus=1)
    [saturated] = check(parse_json(SPEC), hot)
    assert "GPU is saturated" in saturated.fix[0]
    failing = window(requests_failed=100)
    assert codes(SPEC, failing) == ["failures"]


def test_cli_misuse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        batchscope(["doctor", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "0 no finding, 1 findings, 2 misuse" in out and f"{SAMPLE_S:g} by default" in out
    for argv, message in [
        (["--url", "ftp://x"], "is not an http:// URL"),
        (["--url", "http://127.0.0.1:1"], "Triton at http://127.0.0.1:1 is not answering"),
        # Checked before Triton is asked anything: a bad flag is named as itself.
        (["--url", "http://127.0.0.1:1", "--window", "0"], "--window 0: between 1 and"),
    ]:
        assert batchscope(["doctor", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_queue_full_with_priority_levels_reads_the_smallest_bound() -> None:
    # Level 1 unbounded, level 2 holds 8: 8 pending may mean level 2's queue is full.
    prioritized = {
        **SPEC,
        "dynamic_batching": {
            "priority_levels": 2,
            "default_priority_level": 2,
            "priority_queue_policy": {
                "2": {"max_queue_size": 8, "default_timeout_microseconds": "50000"}
            },
        },
    }
    full = window(requests_ok=10, inferences=10, executions=5, pending_max=8, queue_s=0.01)
    [finding] = check(parse_json(prioritized), full)
    assert finding.code == "queue-full"
    numbers = dict(finding.numbers)
    assert numbers["max_queue_size"] == "8"
    assert numbers["queue of priority 1"] == "unbounded"
    assert numbers["queue of priority 2"] == (
        "at most 8 waiting, rejected after 50000 µs in the queue"
    )
    assert codes(prioritized, window(pending_max=7)) == []


def test_failures_name_the_queue_timeout_where_there_is_one() -> None:
    timed = {
        **SPEC,
        "dynamic_batching": {
            "priority_levels": 2,
            "priority_queue_policy": {
                "2": {"timeout_action": "REJECT", "default_timeout_microseconds": "500000"}
            },
        },
    }
    [finding] = check(parse_json(timed), window(requests_failed=100))
    assert finding.code == "failures"
    assert "Requests of priority 2 time out in the queue" in finding.explanation
    [plain] = check(parse_json(SPEC), window(requests_failed=100))
    assert "time out in the queue" not in plain.explanation


def test_shape_fragmentation_unless_ragged() -> None:
    from doctor.checks import ShapeMix

    ids = {"name": "IDS", "data_type": "TYPE_INT64", "dims": ["-1"]}
    spec = {**SPEC, "input": [ids]}
    mix = ShapeMix(7, {"IDS[1,4]": 60, "IDS[1,9]": 40}, 1.1)
    (found,) = [f for f in check(parse_json(spec), window(), mix) if f.code.startswith("shape")]
    assert dict(found.numbers)["shapes sent in load run #7"] == "2"
    assert any('name: "IDS" allow_ragged_batch: true' in line for line in found.fix)
    ragged = {**SPEC, "input": [{**ids, "allow_ragged_batch": True}]}
    assert "shape-fragmentation" not in [f.code for f in check(parse_json(ragged), window(), mix)]
    one = ShapeMix(7, {"IDS[1,4]": 100}, 1.1)
    assert "shape-fragmentation" not in [f.code for f in check(parse_json(spec), window(), one)]
