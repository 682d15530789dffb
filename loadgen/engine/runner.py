"""The Python API of load runs (the commands and the dashboard both call it).

    from loadgen.engine.runner import RunParams, run
    result = run(RunParams("concurrency", concurrency=8, duration_s=3), db="runs.sqlite3")
    result.summary.client.throughput_per_s, result.run_id

The result is a ``LoadRun`` (``loadgen.results.summary``); ``loadgen.results.stored.load_run``
reads a stored run back as the same type.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from loadgen.clients.grpc_client import GrpcClient
from loadgen.clients.http_client import HttpClient
from loadgen.clients.inputdata import data_pool
from loadgen.clients.payloads import (
    Generation,
    Payloads,
    PoolPayloads,
    PoolRequest,
    Tensor,
    check_batch,
    check_names,
    generated_pool,
    request_tensors,
)
from loadgen.clients.slots import Client
from loadgen.clients.target import Address, ModelSpec, check_target, fetch_model, parse_address
from loadgen.engine import pacing, scenarios, serverside
from loadgen.engine.shapes import Arrivals, ConstantRate, LoadShape, Steps, count_arrivals
from loadgen.engine.writer import RunWriter, Tick
from loadgen.errors import LoadgenError
from loadgen.results.params import RunParams, default_urls, validate
from loadgen.results.recorder import LATE_THRESHOLD_S, Recorder
from loadgen.results.result import RunResult
from loadgen.results.summary import LoadRun, RunSummary, ServerSummary
from loadgen.results.tracing import Window, expected_requests, summarize
from tritonapi.client import TritonClient, TritonError
from tritonapi.stats import ModelStats
from tritonapi.traces import MAX_COUNT as MAX_TRACE_COUNT

__all__ = ["RunParams", "RunResult", "LoadRun", "Prepared", "prepare", "run", "LoadgenError"]

CHECKED_KINDS = ("wrong answer", "bad answer")
OPEN_LOOP = ("rate", "steps")
Progress = Callable[[dict[str, Any]], None]


@dataclass
class Prepared:
    """A run checked against the server: the model's metadata and each request's tensors."""

    params: RunParams
    http: Address
    target: Address  # where the load goes (HTTP or gRPC port)
    model: ModelSpec
    tensors: list[Tensor]
    outputs: list[Any]
    window: Window | None = None  # --trace: Triton's trace window over the run
    # The open-loop arrival schedule's seed: --seed, else drawn once here, so that a traced
    # run knows how many requests its schedule holds before it starts.
    arrival_seed: int = 0
    # Requests that differ in size (strings, shape ranges, input data), made before the run,
    # and what their answers are checked against beyond shapes and datatypes.
    pool: list[PoolRequest] | None = None
    checks: str = ""
    payloads: Payloads | PoolPayloads | None = None  # the run's, once it started
    # Open loop: when the schedule's first request is due, on time.perf_counter's clock
    # (CLOCK_MONOTONIC, one for every process); None: as the run starts. The workers of
    # --processes share one start, each a fraction of a gap apart, so their sends interleave.
    start_at: float | None = None


def generation(p: RunParams) -> Generation:
    return Generation(dict(p.ranges), p.input_data == "zero", p.string_length, p.string_data)


def prepare(params: RunParams) -> Prepared:
    """Validate ``params`` and check them against the server's metadata; sends no load."""
    # The target first: a host the stack may not load is refused whatever else is wrong
    # with the run (a form that could not list the host's models has no model either).
    http = parse_address(params.url or default_urls()[0], "--url", 8000)
    check_target(http, "--url", params.allow_remote)
    p = validate(params)
    target = http
    if p.protocol == "grpc":
        target = parse_address(p.grpc_url, "--grpc-url", 8001)
        check_target(target, "--grpc-url", p.allow_remote, grpc=True)
    model = fetch_model(http.base_url, p.model)
    gen = generation(p)
    shapes = dict(p.shapes)
    pool, checks = None, ""
    if p.input_data not in ("random", "zero"):
        check_batch(model, p.batch_size)
        check_given(model, p)
        fixed = {
            k: tuple(d for d in v if isinstance(d, int))
            for k, v in shapes.items()
            if all(isinstance(d, int) for d in v)
        }
        pool, checks = data_pool(p.input_data, model, p.batch_size, fixed)
        tensors, outputs = list(pool[0].tensors), list(model.outputs)
    else:
        tensors, outputs = request_tensors(model, p.batch_size, shapes, dict(p.dtypes), gen)
        ranged = any(not isinstance(d, int) for dims in shapes.values() for d in dims)
        if ranged or any(t.datatype == "BYTES" for t in tensors):
            pool = generated_pool(model, p.batch_size, shapes, gen, p.seed)
            tensors = list(pool[0].tensors)
        elif model.is_add_model:
            checks = "OUTPUT_SUM = INPUT_A + INPUT_B"
    arrival_seed = p.seed if p.seed is not None else secrets.randbits(32)
    window = None
    if p.trace:
        shape = open_loop_shape(p)
        rough = expected_requests(p)
        # A Poisson schedule's length is random: count it, so the window is exactly the run
        # (a window larger than the run never completes, and Triton 2.51 writes an
        # unfinished window only at shutdown). Runs far past the trace bound are refused
        # by the window without counting.
        exact = None
        if shape is not None and rough is not None and rough <= 2 * MAX_TRACE_COUNT:
            exact = count_arrivals(shape, p.poisson, arrival_seed)
        window = Window(p, p.exporter_url, exact)
    return Prepared(p, http, target, model, tensors, outputs, window, arrival_seed, pool, checks)


def check_given(model: ModelSpec, p: RunParams) -> None:
    """With --input-data the data sets values and shapes: --dtype is still checked, and
    options that generate values are refused rather than silently ignored."""
    check_names(model, "--dtype", [k for k, _ in p.dtypes])
    types = {t.name: t.datatype for t in model.inputs}
    for name, dtype in p.dtypes:
        if dtype != types[name]:
            raise LoadgenError(
                f"--dtype {name}={dtype} does not match the model, which takes {types[name]}"
            )
    if p.ranges or p.string_data is not None:
        raise LoadgenError(
            f"--range and --string-data generate values; --input-data {p.input_data} gives "
            "them: use one or the other"
        )


def open_loop_shape(p: RunParams) -> LoadShape | None:
    """The rate over time of an open-loop run (rate, steps); None for closed-loop runs."""
    if p.scenario == "rate":
        return ConstantRate(p.rate, p.duration_s)
    if p.scenario == "steps":
        return Steps(p.stages)
    return None


def run(
    params: RunParams | Prepared,
    db: str | None = None,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    handle_sigint: bool = False,
    group_id: str = "",
) -> RunResult:
    """Prepare (if needed), send, measure, store (unless ``db`` is None).

    Everything that can be checked before sending is (bounds, server, model, inputs), and
    bad input raises LoadgenError with one clear line. The store gets the run while it goes
    (``loadgen.engine.writer``): status ``running``, the records and timeline committed each
    second, the final status at the end, so memory stays flat however long the run and a
    crash loses at most the last second. A stop (Ctrl-C or SIGTERM in the CLI, or
    ``stop.set()`` from another thread) ends sending, waits for the requests in flight and
    stores the partial run as ``interrupted``; ``summary.client.ended`` says what ended it.
    """
    prepared = params if isinstance(params, Prepared) else prepare(params)
    writer = None if db is None else RunWriter(db, prepared.params, group_id)
    result = execute(prepared, stop or threading.Event(), progress, handle_sigint, writer)
    result.group_id = group_id
    return result


def _client(prepared: Prepared, recorder: Recorder) -> Client:
    p = prepared.params
    cls: type[Client] = GrpcClient if p.protocol == "grpc" else HttpClient
    payloads: Payloads | PoolPayloads
    if prepared.pool is not None:
        ranged = any(not isinstance(d, int) for _, dims in p.shapes for d in dims)
        sample = p.data_order == "random" or (p.input_data in ("random", "zero") and ranged)
        payloads = PoolPayloads(prepared.pool, sample, p.seed, prepared.checks)
    else:
        payloads = Payloads(prepared.model, prepared.tensors, p.seed, generation(p))
    prepared.payloads = payloads
    return cls(
        prepared.target,
        prepared.model,
        prepared.tensors,
        prepared.outputs,
        payloads,
        recorder,
        p.timeout_s,
        id_token=prepared.window.token if prepared.window else "",
    )


def execute(
    prepared: Prepared,
    stop: threading.Event,
    progress: Progress | None = None,
    handle_sigint: bool = False,
    writer: RunWriter | None = None,
) -> RunResult:
    """Send the run's load and measure it; with a ``writer``, the run goes into the store
    as it proceeds (see the module doc)."""
    p = prepared.params
    before = serverside.snapshot(prepared.http.base_url, p.model)
    facts = _server_facts(prepared.http.base_url, p.model)
    if prepared.window is not None:
        prepared.window.open()
    open_loop = p.scenario in OPEN_LOOP
    recorder = Recorder(
        track_index=p.trace, late_threshold_s=LATE_THRESHOLD_S if open_loop else None
    )
    # Open loop: paced from here, so that the store's writer thread (started below)
    # inherits the scheduling the sending thread gets (see engine.pacing.paced).
    with pacing.paced() if open_loop else contextlib.nullcontext():
        return _execute_with(
            prepared, before, facts, recorder, stop, progress, handle_sigint, writer
        )


def _execute_with(
    prepared: Prepared,
    before: ModelStats,
    facts: tuple[str, dict[str, Any] | None],
    recorder: Recorder,
    stop: threading.Event,
    progress: Progress | None,
    handle_sigint: bool,
    writer: RunWriter | None,
) -> RunResult:
    if writer is None:
        result = _execute(prepared, before, recorder, stop, progress, handle_sigint, None)
        result.triton_version, result.model_config = facts
        return result
    writer.start(time.time(), recorder.summary())
    try:
        result = _execute(prepared, before, recorder, stop, progress, handle_sigint, writer)
        result.triton_version, result.model_config = facts
    except BaseException as exc:
        if isinstance(exc, LoadgenError) and recorder.sent == 0:
            writer.discard()  # bad input found by the server: nothing half-written
            raise
        # Ctrl-C outside the loop's handler, an error, a bug: keep every record, and a final
        # status that says the summary is that of the last second.
        status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        writer.push(_tick(recorder))
        writer.abort(status, f"the run ended before its summary was complete: {exc!r}")
        raise
    result.group_id = writer.group_id
    writer.finish(result, _tick(recorder))
    result.store_note = writer.note
    return result


def _tick(recorder: Recorder) -> Tick:
    return Tick(
        recorder.drain(),
        recorder.errors,
        recorder.per_second.take_changed(),
        recorder.summary(),
        time.time(),
    )


def _execute(
    prepared: Prepared,
    before: ModelStats,
    recorder: Recorder,
    stop: threading.Event,
    progress: Progress | None,
    handle_sigint: bool,
    writer: RunWriter | None,
) -> RunResult:
    p = prepared.params
    base = prepared.http.base_url
    status, not_sent, error, ended = "ok", None, "", ""
    try:
        drive = _drive(prepared, recorder, stop, progress, handle_sigint, writer)
        if p.scenario in OPEN_LOOP:  # sends paced to the microsecond (see engine.pacing)
            with asyncio.Runner(loop_factory=pacing.loop_factory) as r:
                not_sent, ended = r.run(drive)
        else:
            not_sent, ended = asyncio.run(drive)
    except LoadgenError:
        raise
    except OSError as exc:
        if recorder.sent == 0:
            raise LoadgenError(
                f"cannot reach Triton at {prepared.target.base_url}: {exc}"
            ) from None
        status, error, ended = "failed", f"{type(exc).__name__}: {exc}", "error"
    if stop.is_set():
        status, ended = "interrupted", "stop"
    recorder.close_seconds(everything=True)
    finished = time.time()
    # Requests the model itself answered: the ok ones and the wrong answers (a rejection by
    # Triton's core, e.g. HTTP 400, is counted nowhere in its statistics).
    answered = recorder.counts[0] + sum(
        n for kind, n in recorder.errors_by_kind().items() if kind.startswith(CHECKED_KINDS)
    )
    server: ServerSummary | None = None
    server_error, restarted = "", False
    try:
        after = serverside.settled_after(base, p.model, before, answered)
        delta: ModelStats = after.minus(before)
        server, restarted = serverside.summarize(delta), after.is_reset_since(before)
    except LoadgenError as exc:  # the server went away during the run: keep what we saw
        server_error = str(exc)
        if status == "ok":
            status = "failed"
    client = replace(recorder.summary(), not_sent=not_sent, error=error, ended=ended)
    if prepared.payloads is not None:
        client = replace(
            client,
            shapes=prepared.payloads.shapes_sent(),
            checked=prepared.checks or "shapes and datatypes only",
        )
    traced, trace = None, None
    if prepared.window is not None:
        found = prepared.window.close(recorder.sent, _config(base, p.model))
        traced = [] if isinstance(found, str) else found
        trace = summarize(traced, recorder.sent, found if isinstance(found, str) else "")
    return RunResult(
        params=p,
        status=status,
        started_at=recorder.wall_t0,
        finished_at=finished,
        summary=RunSummary(client, server, server_error, restarted),
        timeline=recorder.timeline(),
        recorder=recorder,
        traced=traced,
        trace=trace,
        traced_requests=prepared.window.requests if prepared.window is not None else None,
    )


def _server_facts(base_url: str, model: str) -> tuple[str, dict[str, Any] | None]:
    """Triton's version and the model's config JSON as the server reports them, kept with
    the run so that it can be modelled later without the server ("", None if unreadable)."""
    client = TritonClient(base_url)
    try:
        version = str(client.server_metadata().get("version", ""))
    except TritonError:
        version = ""
    try:
        config: dict[str, Any] | None = client.model_config_json(model)
    except TritonError:
        config = None
    return version, config


def _config(base_url: str, model: str) -> Any:
    """The model's config for the traced batches' departure reasons; None if unreadable."""
    try:
        return TritonClient(base_url).model_config(model)
    except TritonError:
        return None


async def _drive(
    prepared: Prepared,
    recorder: Recorder,
    stop_event: threading.Event,
    progress: Progress | None,
    handle_sigint: bool,
    writer: RunWriter | None,
) -> tuple[int | None, str]:
    """Send the scenario's load; return the due requests not sent (open loop; else None)
    and what ended the run (``summary.ENDED``)."""
    p = prepared.params
    loop = asyncio.get_running_loop()
    client = _client(prepared, recorder)
    stop = stop_event.is_set

    def on_sigint() -> None:
        if stop_event.is_set():  # the second Ctrl-C: stop waiting for answers
            client.abandon_all("abandoned at a second Ctrl-C")
        stop_event.set()

    if handle_sigint:  # SIGTERM behaves like Ctrl-C
        loop.add_signal_handler(signal.SIGINT, on_sigint)
        loop.add_signal_handler(signal.SIGTERM, on_sigint)
    ticker = asyncio.ensure_future(_report_progress(recorder, p, progress)) if progress else None
    each_second = asyncio.ensure_future(_each_second(recorder, writer))
    not_sent, ended = None, "requests"
    try:
        recorder.t0, recorder.wall_t0 = time.perf_counter(), time.time()
        if p.scenario == "serial":
            assert p.requests is not None
            await scenarios.serial(client, p.requests, p.gap_s, stop)
        elif p.scenario == "concurrent":
            assert p.requests is not None
            await scenarios.concurrent(client, p.requests, stop)
        elif p.scenario == "concurrency":
            await scenarios.closed_loop(client, p.concurrency, p.duration_s, p.requests, stop)
            if not (p.requests and recorder.sent >= p.requests):
                ended = "duration"
        else:
            ended = "duration"
            shape = open_loop_shape(p)
            assert shape is not None
            arrivals = Arrivals(shape, p.poisson, prepared.arrival_seed)
            origin = None if prepared.start_at is None else prepared.start_at - recorder.t0
            not_sent = await scenarios.open_loop(client, arrivals, p.max_in_flight, stop, origin)
    finally:
        if ticker is not None:
            ticker.cancel()
        each_second.cancel()
        await client.close()
        if handle_sigint:
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)
    if progress:
        progress(_progress_snapshot(recorder, p, final=True))
    return not_sent, ended


async def _each_second(recorder: Recorder, writer: RunWriter | None) -> None:
    """Fold the seconds that are over into the run's histogram and hand the store what
    happened since the last second: memory holds about one second of records."""
    while True:
        await asyncio.sleep(1.0)
        recorder.close_seconds()
        if writer is not None:
            writer.push(_tick(recorder))
        else:
            recorder.per_second.dirty.clear()  # nobody takes the changes


def _progress_snapshot(recorder: Recorder, p: RunParams, final: bool = False) -> dict[str, Any]:
    elapsed = recorder.now()
    if p.scenario in ("serial", "concurrent"):
        fraction = recorder.done / (p.requests or 1)
    else:
        fraction = elapsed / p.duration_s if p.duration_s else 0.0
    ok, failed, timed_out = recorder.counts
    return {
        "elapsed_s": elapsed,
        "fraction": 1.0 if final else min(fraction, 1.0),
        "sent": recorder.sent,
        "ok": ok,
        "failed": failed,
        "timed_out": timed_out,
        "in_flight": recorder.in_flight,
        "p99_s": recorder.latency().quantile(0.99),
        "final": final,
    }


async def _report_progress(recorder: Recorder, p: RunParams, progress: Progress) -> None:
    while True:
        await asyncio.sleep(0.25)
        progress(_progress_snapshot(recorder, p))
