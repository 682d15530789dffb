"""Load for stateful models: sequences of requests under Triton's sequence batcher.

A sequence is ``length`` requests with one correlation ID, sent one after another (each
waits for the previous answer: the model's state moves in order); the first carries
``sequence_start``, the last ``sequence_end``. ``concurrency`` sequences are in flight at
once, so the sequence batcher has that many slots to batch across. Step ``i`` of every
sequence sends the value ``i + 1`` in each element of each input, so a model that sums
over a sequence answers ``1, 3, 6, ...``: ``expected_running_sum`` says what to compare.

Triton refuses a request of a sequence it does not know without START (HTTP 400 "must
specify the START flag"): a sequence that was never started, or one idle longer than
``max_sequence_idle_microseconds`` whose slot was freed. That refusal is recorded under
one error kind that says so, never as a generic failure.

    batchscope load sequences --model seq_accumulate --sequences 20 --length 5 --concurrency 4
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from loadgen.errors import LoadgenError
from loadgen.results.params import default_urls
from tritonapi.client import TritonClient, TritonError, TritonHTTPError, TritonUnreachable
from tritonapi.modelconfig import ModelConfig, Tensor

# KServe v2 JSON datatypes of the model config's TYPE_* we can fill with small numbers.
DATATYPES = {
    "TYPE_FP32": "FP32",
    "TYPE_FP64": "FP64",
    "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64",
}
NO_START = (
    "HTTP 400: Triton does not know this sequence and the request has no START: it was "
    "never started, or it idled longer than max_sequence_idle_microseconds and lost its slot"
)
# Outputs kept for the caller to check, at most (a long run keeps counting, not storing).
MAX_KEPT = 10_000
MAX_SEQUENCES = 100_000
MAX_LENGTH = 10_000
MAX_CONCURRENCY = 256


@dataclass(frozen=True)
class SequenceParams:
    model: str
    url: str = ""
    sequences: int = 8
    length: int = 5
    concurrency: int = 4
    first_id: int = 1  # correlation IDs first_id .. first_id + sequences - 1 (0 is "none")
    gap_s: float = 0.0  # pause between two requests of one sequence
    timeout_s: float = 10.0

    def check(self) -> None:
        if not self.model:
            raise LoadgenError("--model is required")
        for name, value, most in (
            ("--sequences", self.sequences, MAX_SEQUENCES),
            ("--length", self.length, MAX_LENGTH),
            ("--concurrency", self.concurrency, MAX_CONCURRENCY),
        ):
            if not 1 <= value <= most:
                raise LoadgenError(f"{name} must be between 1 and {most} (got {value})")
        if self.first_id < 1:
            raise LoadgenError(
                f"--first-id must be 1 or more (got {self.first_id}): Triton reads 0 as "
                "'no correlation ID'"
            )
        if self.gap_s < 0 or self.timeout_s <= 0:
            raise LoadgenError("--gap-ms must be 0 or more and --timeout-s more than 0")


@dataclass
class SequenceResult:
    params: SequenceParams
    sent: int = 0
    ok: int = 0
    failed: int = 0
    # Sequences whose every request was answered.
    completed: int = 0
    duration_s: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    # Correlation ID -> the first output's first element per answered step (up to MAX_KEPT).
    outputs: dict[int, list[float]] = field(default_factory=dict)


def expected_running_sum(length: int, elements: int = 1) -> list[float]:
    """What a model summing its input over a sequence answers for steps 1..length."""
    return [float(elements * (i + 1) * (i + 2) // 2) for i in range(length)]


def read_config(client: TritonClient, model: str) -> ModelConfig:
    """The model's config, or one LoadgenError line that says what to do."""
    try:
        return client.model_config(model)
    except TritonUnreachable as exc:
        raise LoadgenError(f"{exc}; start it with `./stack/up` or pass --url") from None
    except TritonHTTPError as exc:
        if exc.status in (400, 404):
            raise LoadgenError(
                f"--model: Triton at {client.url} has no ready model {model!r} ({exc.error})"
            ) from None
        raise LoadgenError(str(exc)) from None
    except TritonError as exc:
        raise LoadgenError(str(exc)) from None


def sequence_config(client: TritonClient, model: str) -> ModelConfig:
    """The model's config; LoadgenError unless it is a stateful (sequence batching) model."""
    config = read_config(client, model)
    if config.sequence is None:
        raise LoadgenError(
            f"model {model!r} has no sequence batching (scheduler: {config.scheduler}): send "
            "it ordinary load runs (batchscope load concurrency, rate ...), not sequences"
        )
    json_inputs(config, 1.0)  # refuses input types it cannot fill, before any is sent
    return config


def json_inputs(config: ModelConfig, value: float) -> list[dict[str, Any]]:
    """One request's inputs as JSON tensors: a batch of one (if the model batches), every
    element ``value``, variable dimensions as 1."""
    batched = config.max_batch_size > 0
    for tensor in config.inputs:
        if tensor.data_type not in DATATYPES:
            raise LoadgenError(
                f"input {tensor.name} of {config.name!r} is {tensor.data_type}: only "
                f"{', '.join(sorted(DATATYPES))} can be sent here"
            )
    return [_tensor(t, batched, value) for t in config.inputs]


def _tensor(tensor: Tensor, batched: bool, value: float) -> dict[str, Any]:
    dims = [1 if d < 0 else d for d in tensor.dims]
    shape = [1, *dims] if batched else dims
    count = 1
    for d in shape:
        count *= d
    number: float | int = value if DATATYPES[tensor.data_type].startswith("FP") else int(value)
    return {
        "name": tensor.name,
        "datatype": DATATYPES[tensor.data_type],
        "shape": shape,
        "data": [number] * count,
    }


def error_kind(exc: TritonError) -> str:
    if isinstance(exc, TritonHTTPError):
        if exc.status == 400 and "START flag" in exc.error:
            return NO_START
        return f"HTTP {exc.status}: {exc.error}"[:200]
    return str(exc)[:200]


def send_step(
    client: TritonClient,
    config: ModelConfig,
    sequence_id: int,
    step: int,
    start: bool,
    end: bool,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Step ``step`` (from 0) of sequence ``sequence_id``: every input holds ``step + 1``."""
    inputs = json_inputs(config, float(step + 1))
    parameters = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    return client.infer_json(config.name, inputs, parameters, timeout_s)


def _first_value(answer: dict[str, Any]) -> float | None:
    outputs = answer.get("outputs") or []
    data = outputs[0].get("data") if outputs and isinstance(outputs[0], dict) else None
    return float(data[0]) if isinstance(data, list) and data else None


def run_sequences(params: SequenceParams, stop: threading.Event | None = None) -> SequenceResult:
    """Send every sequence; the counts, the error kinds and (bounded) the outputs."""
    params.check()
    url = params.url or default_urls()[0]
    config = sequence_config(TritonClient(url, params.timeout_s), params.model)
    result = SequenceResult(params)
    errors: Counter[str] = Counter()
    lock = threading.Lock()
    stop = stop or threading.Event()
    keep = params.sequences * params.length <= MAX_KEPT
    local = threading.local()

    def one(sequence_id: int) -> None:
        client = getattr(local, "client", None)
        if client is None:  # one session per thread: requests' sessions are not shared
            client = local.client = TritonClient(url, params.timeout_s)
        answered: list[float] = []
        for step in range(params.length):
            if stop.is_set():
                return
            if step and params.gap_s:
                time.sleep(params.gap_s)
            last = step == params.length - 1
            try:
                answer = send_step(client, config, sequence_id, step, step == 0, last)
            except TritonError as exc:
                with lock:
                    result.sent += 1
                    result.failed += 1
                    errors[error_kind(exc)] += 1
                return  # the rest of this sequence would be refused too
            value = _first_value(answer)
            if value is not None:
                answered.append(value)
            with lock:
                result.sent += 1
                result.ok += 1
        with lock:
            result.completed += 1
            if keep:
                result.outputs[sequence_id] = answered

    started = time.monotonic()
    ids = range(params.first_id, params.first_id + params.sequences)
    with ThreadPoolExecutor(params.concurrency, thread_name_prefix="sequence") as pool:
        list(pool.map(one, ids))
    result.duration_s = time.monotonic() - started
    result.errors = dict(errors.most_common())
    return result


def report(result: SequenceResult) -> str:
    p = result.params
    lines = [
        f"{p.model}: {result.completed} of {p.sequences} sequences of {p.length} requests "
        f"completed, {p.concurrency} in flight at once, in {result.duration_s:.2f} s",
        f"requests: {result.sent} sent, {result.ok} ok, {result.failed} failed",
    ]
    lines += [f"  {n} x {kind}" for kind, n in result.errors.items()]
    return "\n".join(lines)
