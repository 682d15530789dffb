"""One run from several worker processes (``--processes N``), merged into one stored run.

One Python process sends only so much (its event loop and the per-request Python work share
one core), so ``--processes N`` starts N workers (multiprocessing, spawn), each with its
share of the load: C / N requests in flight, R / N of a rate and of each --stage's rate (N
Poisson streams of R / N are one of R), --requests and --max-in-flight split like
concurrency (the first C mod N workers one more).

Each worker checks the target and its inputs, waits at a barrier so that all start together,
and streams its run into a store of its own in a temporary folder. Open-loop workers share
one start (``START_AHEAD_S`` after the barrier, on CLOCK_MONOTONIC) and worker i's schedule
begins i / R after it, so N constant streams interleave into one of R. The parent reads the
server's statistics once around the whole window, then merges the workers' runs exactly
(``loadgen.reports.merge``) into one run of the real store, records included, and removes
the workers' stores; until then each worker's run is only in its own store.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen import limits
from loadgen.engine import runner, serverside
from loadgen.errors import LoadgenError
from loadgen.reports import merge
from loadgen.results.params import RunParams
from loadgen.results.summary import LoadRun

MAX_PROCESSES = 64
START_TIMEOUT_S = 120.0  # for every worker to import, check the target and be ready
START_AHEAD_S = 0.5  # the shared open-loop start: this long after all are ready
SPLITS = ("concurrent", "concurrency", "rate", "steps")


def _share(total: int, n: int, i: int) -> int:
    return total // n + (1 if i < total % n else 0)


def split(params: RunParams, n: int) -> list[RunParams]:
    """Each worker's params (see the module doc); LoadgenError if the load cannot be split
    into ``n`` parts."""
    limits.positive_int(n, "--processes", MAX_PROCESSES)
    p = params
    if n == 1:
        return [p]
    if p.scenario not in SPLITS:
        raise LoadgenError(
            f"--processes splits {', '.join(SPLITS)} runs; {p.scenario} sends one request "
            "at a time: run it in one process"
        )
    if p.trace:
        raise LoadgenError("--trace reads one process's requests: run it without --processes")
    if p.scenario == "concurrency" and p.concurrency < n:
        raise LoadgenError(
            f"--processes {n} needs --concurrency {n} or more (one request in flight each); "
            f"got {p.concurrency}"
        )
    if p.requests is not None and p.requests < n:
        raise LoadgenError(f"--processes {n} needs --requests {n} or more; got {p.requests}")
    seed = p.seed
    return [
        replace(
            p,
            concurrency=max(_share(p.concurrency, n, i), 1),
            requests=None if p.requests is None else _share(p.requests, n, i),
            rate=p.rate / n,
            stages=tuple((rate / n, seconds) for rate, seconds in p.stages),
            max_in_flight=max(_share(p.max_in_flight, n, i), 1),
            seed=None if seed is None else seed + i,  # each its own inputs, reproducibly
        )
        for i in range(n)
    ]


@dataclass
class SplitRun:
    merged: merge.Merged
    run_id: int | None
    worker_errors: list[str]

    @property
    def run(self) -> LoadRun:
        return self.merged.run


def run(params: RunParams, n: int, db: str | None, group_id: str = "") -> SplitRun:
    """``params`` sent by ``n`` worker processes, merged, stored in ``db`` (unless None).

    Bad input raises LoadgenError before any worker starts. Ctrl-C or SIGTERM to this
    process stops the workers as it stops one run: they stop sending, wait for the requests
    in flight, and the merged run is stored as interrupted."""
    prepared = runner.prepare(params)
    shares = split(prepared.params, n)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n + 1)
    start_at = ctx.Value("d", 0.0)  # the open-loop schedule's start, once all are ready
    results: Any = ctx.Queue()
    folder = Path(tempfile.mkdtemp(prefix="loadgen-workers-"))
    stores = [folder / f"worker-{i}.sqlite3" for i in range(n)]
    procs = [
        ctx.Process(
            target=_worker,
            args=(i, n, shares[i], str(stores[i]), barrier, results, start_at),
            name=f"loadgen-worker-{i}",
        )
        for i in range(n)
    ]
    base = prepared.http.base_url
    stopping = threading.Event()

    def forward(signum: int, frame: object) -> None:
        stopping.set()  # each signal is passed on: a second one abandons what is in flight
        for proc in procs:
            if proc.pid is not None and proc.exitcode is None:
                os.kill(proc.pid, signal.SIGTERM)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for proc in procs:
            proc.start()
        before = serverside.snapshot(base, prepared.params.model)
        started = _wait_ready(barrier)
        start_at.value = time.perf_counter() + START_AHEAD_S
        messages = _collect(results, procs)
        errors = [m[1] for m in messages if m[1]]
        if not started or any(m[2] == "unstarted" for m in messages):
            raise LoadgenError(
                "the workers did not start: " + ("; ".join(dict.fromkeys(errors)) or "stopped")
            )
        parts = [merge.part_from_store(path, None, f"worker {i}") for i, path in enumerate(stores)]
        server, server_error, restarted = _server_side(base, prepared.params.model, before, parts)
        label = f"{params.label} ({n} processes)".strip()
        merged = merge.merge(parts, server, server_error, label=label)
        if restarted:
            merged.run.summary = replace(merged.run.summary, server_restarted=True)
        merged.run.params = replace(merged.run.params, seed=params.seed)
        merged.run.group_id = group_id
        run_id = None if db is None else merge.save(db, merged, parts, group_id)
        merged.run.run_id = run_id
        return SplitRun(merged, run_id, errors)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        shutil.rmtree(folder, ignore_errors=True)


def _collect(results: Any, procs: list[Any]) -> list[tuple[int, str, str]]:
    """Each worker's (index, error, status), in order; a worker that died without a word
    (killed) is one that failed."""
    messages: dict[int, tuple[int, str, str]] = {}
    while len(messages) < len(procs):
        try:
            m = results.get(timeout=0.5)
            messages[m[0]] = m
        except queue.Empty:
            if all(not p.is_alive() for p in procs):
                break
    for proc in procs:
        proc.join()
    for i, proc in enumerate(procs):
        messages.setdefault(i, (i, f"worker {i} ended with exit code {proc.exitcode}", "failed"))
    return [messages[i] for i in range(len(procs))]


def _wait_ready(barrier: Any) -> bool:
    try:
        barrier.wait(timeout=START_TIMEOUT_S)
        return True
    except threading.BrokenBarrierError:
        return False


def _server_side(
    base: str, model: str, before: Any, parts: list[merge.Part]
) -> tuple[Any, str, bool]:
    answered = 0
    for part in parts:
        c = part.run.summary.client
        answered += c.ok + sum(
            n for kind, n in c.errors.items() if kind.startswith(runner.CHECKED_KINDS)
        )
    try:
        after = serverside.settled_after(base, model, before, answered)
    except LoadgenError as exc:
        return None, str(exc), False
    return serverside.summarize(after.minus(before)), "", after.is_reset_since(before)


def _worker(
    index: int, n: int, params: RunParams, db: str, barrier: Any, results: Any, start_at: Any
) -> None:
    """One worker: check, wait for the others, run into its own store, say how it went."""
    # Its own process group: a Ctrl-C at the terminal reaches the parent alone, which
    # passes it on once (a second one would abandon the requests in flight).
    os.setpgrp()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        prepared = runner.prepare(params)
    except (LoadgenError, KeyboardInterrupt) as exc:
        barrier.abort()
        results.put((index, str(exc) or "stopped", "unstarted"))
        return
    try:
        barrier.wait(timeout=START_TIMEOUT_S)
    except (threading.BrokenBarrierError, KeyboardInterrupt):
        results.put((index, "", "unstarted"))
        return
    prepared.start_at = _shared_start(start_at, index, n, params)
    try:
        result = runner.run(prepared, db, threading.Event(), handle_sigint=True)
        results.put((index, result.summary.client.error or result.store_note, result.status))
    except BaseException as exc:  # the run is in its store as far as it went
        results.put((index, f"worker {index}: {exc!r}", "failed"))


def _shared_start(start_at: Any, index: int, n: int, params: RunParams) -> float | None:
    """When this worker's open-loop schedule begins: the shared start, plus its place among
    the N interleaved streams (``index`` / the whole first rate); None for closed loops."""
    rate = params.rate if params.scenario == "rate" else (params.stages or ((0.0, 0.0),))[0][0]
    if params.scenario not in ("rate", "steps") or rate <= 0:
        return None
    deadline = time.monotonic() + START_TIMEOUT_S
    while start_at.value == 0.0 and time.monotonic() < deadline:
        time.sleep(0.001)  # the parent sets it the moment the barrier opens
    if start_at.value == 0.0:
        return None
    return float(start_at.value) + index / (rate * n)
