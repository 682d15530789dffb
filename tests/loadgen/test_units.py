"""Arithmetic of the load generator, against known answers (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.clients.checks import check_outputs
from loadgen.clients.http_client import UnreadableResponse, next_response
from loadgen.clients.payloads import Payloads, Tensor, request_tensors
from loadgen.clients.slots import FAILED, OK, TIMED_OUT
from loadgen.clients.target import ModelSpec, TensorSpec
from loadgen.engine.shapes import Arrivals, ConstantRate, Steps, count_arrivals
from loadgen.errors import LoadgenError
from loadgen.results.histogram import Histogram, bucket_bounds, bucket_of
from loadgen.results.params import RunParams, validate
from loadgen.results.recorder import Recorder
from loadgen.results.tracing import window_requests
from tritonapi.traces import TracedRequest

ADD = ModelSpec(
    "batch_add_model",
    "1",
    4,
    (TensorSpec("INPUT_A", "FP32", (1,)), TensorSpec("INPUT_B", "FP32", (1,))),
    (TensorSpec("OUTPUT_SUM", "FP32", (1,)),),
)


def test_every_value_falls_in_its_bucket_and_buckets_are_ordered() -> None:
    previous = -1
    for micros in [*range(0, 3000), *range(3000, 10**7, 997)]:
        index = bucket_of(micros)
        low, high = bucket_bounds(index)
        assert low <= micros < high
        assert (high - low) <= max(1, low / 128)
        assert index >= previous
        previous = index


def test_percentiles_match_the_exact_ones_within_bucket_width() -> None:
    values = np.random.default_rng(1).lognormal(-6, 1, 20_000)
    hist = Histogram()
    for v in values:
        hist.add(float(v))
    for q in (0.5, 0.9, 0.99):
        exact = float(np.quantile(values, q, method="inverted_cdf"))
        assert hist.quantile(q) == pytest.approx(exact, rel=0.01)
    assert hist.quantile(1.0) == values.max()
    assert hist.mean == pytest.approx(values.mean())


def test_recorder_accounts_for_every_request() -> None:
    rec = Recorder()
    for i, outcome in enumerate([OK, OK, FAILED, TIMED_OUT, OK]):
        rec.mark_sent(0.001 * i)
        rec.record(0.001 * i, outcome, None if outcome == OK else f"kind {outcome}")
    s = rec.summary()
    assert (s.sent, s.ok, s.failed, s.timed_out) == (5, 3, 1, 1)
    assert s.errors == {"kind 1": 1, "kind 2": 1}
    assert [r[3] for r in rec.records()] == ["ok", "ok", "failed", "timed_out", "ok"]
    row = rec.timeline()[0]
    assert (row["sent"], row["ok"], row["failed"], row["timed_out"]) == (5, 3, 1, 1)


def test_shapes_tick_like_locust() -> None:
    steps = Steps([(100.0, 2.0), (400.0, 1.0)])
    assert [steps.tick(t) for t in (0, 1.99, 2.0, 2.5, 3.0)] == [100, 100, 400, 400, None]
    assert ConstantRate(50, 1).tick(0.5) == 50 and ConstantRate(50, 1).tick(1) is None


def test_an_open_loop_schedule_is_its_seed_and_its_length_is_known_ahead() -> None:
    # Due at 0, 5 ms, 10 ms, ...: 100 requests, or 101 where the sum of the gaps rounds below 0.5.
    assert count_arrivals(ConstantRate(200, 0.5), False, 0) in (100, 101)
    counts = {count_arrivals(Steps([(300, 1.0), (100, 1.0)]), True, seed) for seed in range(20)}
    assert len(counts) > 1 and all(300 < n < 500 for n in counts)  # random around 400

    def offsets(seed: int) -> list[float]:
        arrivals, out = Arrivals(ConstantRate(1000, 0.1), True, seed), []
        while (rate := arrivals.rate()) is not None:
            out.append(arrivals.offset)
            arrivals.advance(rate)
        return out

    assert offsets(7) == offsets(7) != offsets(8)
    assert len(offsets(7)) == count_arrivals(ConstantRate(1000, 0.1), True, 7)


def test_payloads_are_random_per_request_and_the_expected_sum_is_exact() -> None:
    tensors, _ = request_tensors(ADD, 1, {}, {})
    payloads = Payloads(ADD, tensors, seed=3)
    seen = set()
    for i in range(3000):  # crosses chunk boundaries
        inputs, expected, _ = payloads.take(i)
        a, b = np.frombuffer(inputs, "<f4")
        assert np.frombuffer(expected, "<f4")[0] == np.float32(a) + np.float32(b)
        seen.add(inputs)
    assert len(seen) == 3000


def test_large_requests_are_made_a_few_at_a_time() -> None:
    # 2 MiB per request: a step of 1,024 would hold 2 GiB; it holds 4 requests (8 MiB).
    big = [Tensor("INPUT_A", "FP32", (1, 262_144)), Tensor("INPUT_B", "FP32", (1, 262_144))]
    payloads = Payloads(ADD, big, seed=1)
    assert payloads.chunk == 4
    for i in range(9):
        inputs, expected, _ = payloads.take(i)
        a, b = np.frombuffer(inputs, "<f4").reshape(2, -1)
        assert np.array_equal(np.frombuffer(expected, "<f4"), a + b)
    assert len(payloads._inputs) == 4 * payloads.request_bytes


def test_check_outputs_names_the_problem() -> None:
    want = list(ADD.outputs)
    assert check_outputs([("OUTPUT_SUM", "FP32", [1, 1], 4)], want, (1,)) is None
    assert "missing" in str(check_outputs([], want, (1,)))
    assert "FP64" in str(check_outputs([("OUTPUT_SUM", "FP64", [1, 1], 8)], want, (1,)))
    assert "shape" in str(check_outputs([("OUTPUT_SUM", "FP32", [2, 1], 8)], want, (1,)))
    assert "bytes" in str(check_outputs([("OUTPUT_SUM", "FP32", [1, 1], 3)], want, (1,)))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (RunParams("concurrency", concurrency=0), "--concurrency must be greater than 0"),
        (RunParams("concurrency", concurrency=257), "safe bound of 256"),
        (RunParams("rate", rate=0), "--rate must be greater than 0"),
        (RunParams("rate", rate=20_001), "safe bound of 20000/s"),
        (RunParams("rate", rate=10, duration_s=86_401), "safe bound of 86400s"),
        (RunParams("serial", requests=100_000_001), "safe bound of 100000000"),
        (RunParams("steps", stages=((100.0, 0.0),)), "--stage seconds"),
        (RunParams("walk"), "unknown scenario"),
    ],
)
def test_bounds(params: RunParams, message: str) -> None:
    with pytest.raises(LoadgenError, match=message):
        validate(params)


def test_inputs_checked_against_metadata() -> None:
    with pytest.raises(LoadgenError, match="no input 'X'"):
        request_tensors(ADD, 1, {"X": (1,)}, {})
    with pytest.raises(LoadgenError, match="does not match the model's shape"):
        request_tensors(ADD, 1, {"INPUT_A": (3,)}, {})
    with pytest.raises(LoadgenError, match="takes FP32"):
        request_tensors(ADD, 1, {}, {"INPUT_B": "INT8"})
    variable = ModelSpec("v", "1", 0, (TensorSpec("X", "INT32", (-1, 3)),), ())
    with pytest.raises(LoadgenError, match="--shape X=4,3"):
        request_tensors(variable, 1, {}, {})
    tensors, _ = request_tensors(variable, 1, {"X": (5, 3)}, {})
    assert tensors[0].shape == (5, 3) and tensors[0].nbytes == 60


def test_a_runs_window_holds_its_own_requests_and_those_beside_them() -> None:
    """The exporter keeps older traces too: a run keeps the model's requests traced while its
    own were in Triton (another client's shared its batches), not an earlier run's."""

    def traced(i: int, request_id: str, start_us: int, model: str = "m") -> TracedRequest:
        t = start_us * 1000
        return TracedRequest(i, model, "1", request_id, t, t + 100_000, t + 400_000)

    mine = [traced(10, "tok-0000000000", 5_000), traced(11, "tok-0000000001", 5_600)]
    beside = traced(12, "other-1", 5_300)  # another client, during the run
    older = traced(3, "old-0000000000", 1_000)  # an earlier run's
    elsewhere = traced(13, "x", 5_300, model="n")  # another model
    found = window_requests([older, *mine, beside, elsewhere], "tok", "m")
    assert found == [*mine, beside]
    assert window_requests([older], "tok", "m") == []


def test_responses_are_split_by_length_or_chunks_wherever_the_bytes_break() -> None:
    # Triton answers inference with Content-Length; an HTTP/1.1 server may also send chunks.
    sized = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello"
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    plain_end = (
        b"HTTP/1.1 400 Bad Request\r\ntransfer-encoding:  Chunked\r\n\r\n5\r\nerror\r\n0\r\n\r\n"
    )
    stream = sized + chunked + plain_end
    # Every split of the stream into two deliveries gives the same three responses.
    for cut in range(len(stream) + 1):
        got, buf = [], b""
        for piece in (stream[:cut], stream[cut:]):
            buf += piece
            while (answer := next_response(buf)) is not None:
                status, _, body, buf = answer
                got.append((status, body))
        assert got == [(200, b"hello"), (200, b"hello"), (400, b"error")], cut
        assert buf == b""


def test_a_response_without_a_length_shows_its_head() -> None:
    with pytest.raises(
        UnreadableResponse, match=r"chunked: b'HTTP/1.1 200 OK\\r\\nServer: x\\r\\nDate: y'"
    ):
        next_response(b"HTTP/1.1 200 OK\r\nServer: x\r\nDate: y\r\n\r\nbody")
    with pytest.raises(UnreadableResponse, match="bad chunk size"):
        next_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
    with pytest.raises(UnreadableResponse, match="longer than its size"):
        next_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n")
