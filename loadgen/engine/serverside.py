"""The server's view of a run's window: statistics-API deltas taken before and after.

Counters are Triton's own (``tritonapi.stats``); this module only frames them for a
load run: executions, inferences, average batch size, executions per batch size, and where
the time went (queue vs compute), per request and per execution. The delta covers every
request the model served in the window, including any traffic that was not ours.
"""

from __future__ import annotations

import time

from loadgen.errors import LoadgenError
from loadgen.results.summary import ServerSummary
from tritonapi.client import TritonClient, TritonError
from tritonapi.stats import ModelStats


def snapshot(base_url: str, model: str) -> ModelStats:
    try:
        return TritonClient(base_url).model_stats(model)
    except TritonError as exc:
        raise LoadgenError(f"cannot read statistics of {model!r}: {exc}") from None


def settled_after(base_url: str, model: str, before: ModelStats, answered: int) -> ModelStats:
    """Statistics once the server has counted every request it answered and the
    executions that served them (:meth:`ModelStats.accounts_for`).

    Triton updates statistics just after it sends the answers, requests before batches, so
    a read right after the last answer can miss an execution; wait (briefly) until they are
    in.
    """
    deadline = time.monotonic() + 2.0
    while True:
        after = snapshot(base_url, model)
        if after.minus(before).accounts_for(answered) or time.monotonic() > deadline:
            return after
        time.sleep(0.02)


def _per(ns: int, count: int) -> float | None:
    return ns / 1e9 / count if count else None


def summarize(delta: ModelStats) -> ServerSummary:
    """The summary of one window's delta."""
    execs, infers = delta.execution_count, delta.inference_count
    success, fail = delta.phase("success"), delta.phase("fail")
    requests_n = success.count + fail.count
    queue = delta.phase("queue")
    compute = {p: delta.phase(p).ns for p in ("compute_input", "compute_infer", "compute_output")}
    compute_ns = sum(compute.values())
    batch_compute = sum(b.compute_infer_ns for b in delta.batches.values())
    return ServerSummary(
        model=delta.name,
        version=delta.version,
        requests=requests_n,
        requests_success=success.count,
        requests_failure=fail.count,
        inferences=infers,
        executions=execs,
        average_batch_size=infers / execs if execs else None,
        executions_by_batch_size=delta.executions_by_size(),
        queue_s_total=queue.ns / 1e9,
        compute_s_total=compute_ns / 1e9,
        compute_s_by_phase={k: v / 1e9 for k, v in compute.items()},
        queue_s_per_request=_per(queue.ns, queue.count),
        compute_s_per_request=_per(compute_ns, requests_n),
        request_s_per_request=_per(success.ns + fail.ns, requests_n),
        # Per execution, from batch_stats: what one model call costs at each batch size.
        compute_infer_s_per_execution=_per(batch_compute, execs),
        compute_infer_s_per_execution_by_batch_size={
            k: _per(b.compute_infer_ns, b.executions) for k, b in sorted(delta.batches.items())
        },
        compute_s_per_execution_by_batch_size={
            k: _per(b.compute_input_ns + b.compute_infer_ns + b.compute_output_ns, b.executions)
            for k, b in sorted(delta.batches.items())
        },
    )
