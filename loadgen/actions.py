"""What ``batchscope load`` does: run scenarios (one, a sweep, a comparison, a capacity
search) and read, export, prune or import the stored runs, printing their tables."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from loadgen import inputopts, split
from loadgen.engine import capacity, runner
from loadgen.engine.saved import import_saved
from loadgen.errors import LoadgenError
from loadgen.reports import report
from loadgen.results.params import RunParams, default_db
from loadgen.results.summary import result_json
from runs.prune import check_rules
from runs.schema import STALE_S, check_writable
from runs.store import RunStore

SCENARIO_HELP = {
    "serial": "N requests one at a time, a gap after each answer (the experiment's first case)",
    "concurrent": "N requests arriving at once (the experiment's second case: -n 3)",
    "concurrency": "closed loop: C requests in flight for a duration; -c 1,2,4,8 sweeps",
    "rate": "open loop: R requests/s, constant or --poisson arrivals",
    "steps": "open loop in stages: --stage RATE:SECONDS, repeated",
}


def run_capacity(args: argparse.Namespace) -> int:
    """``loadgen capacity``: every step checked before the first is sent (the max rate's
    run bounds them all), then the search; each step stored with one group id."""
    bounds = capacity.CapacityParams(
        args.p99_ms / 1e3, args.max_rate, args.steps, args.step_duration
    )
    bounds.check()
    _db(args)
    args.rate, args.duration = args.max_rate, args.step_duration
    (base,) = params_from("rate", args)
    runner.prepare(capacity.step_params(base, bounds, bounds.max_rate))
    group = f"capacity-{time.time():.3f}"
    stop = threading.Event()

    def probe(rate: float) -> capacity.Step:
        params = capacity.step_params(base, bounds, rate)
        bar = None if args.json else report.ProgressBar(params.describe())
        result = runner.run(params, _db(args), stop, bar, handle_sigint=True, group_id=group)
        if result.store_note:
            print(f"loadgen: {result.store_note}", file=sys.stderr, flush=True)
        step = capacity.verdict(result, bounds.p99_s)
        if not args.json:
            p99 = "-" if step.p99_s is None else f"{step.p99_s * 1e3:.2f} ms"
            verdict = "pass" if step.passed else "FAIL"
            print(f"  {rate:,.1f}/s: p99 {p99}, {step.bad} bad -> {verdict}", flush=True)
        return step

    found = capacity.search(bounds, probe)
    if args.json:
        print(json.dumps({"group_id": group, **found.to_json()}, indent=2))
    else:
        print(capacity.table(found))
    if found.ended == "stop":
        return 130
    return 0 if found.best_rate is not None and found.ended != "error" else 1


AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """'30d', '12h', '45m', '90s', '2w' in seconds; LoadgenError otherwise."""
    number, unit = text[:-1], text[-1:].lower()
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in AGE_UNITS or not value >= 0:
        raise LoadgenError(f"--older-than {text!r}: use a number and a unit, e.g. 30d, 12h, 45m")
    return value * AGE_UNITS[unit]


def _stages(items: Sequence[str]) -> tuple[tuple[float, float], ...]:
    stages = []
    for item in items:
        try:
            rate, seconds = (float(x) for x in item.split(":"))
        except ValueError:
            raise LoadgenError(f"--stage {item!r}: use RATE:SECONDS, e.g. 200:5") from None
        stages.append((rate, seconds))
    return tuple(stages)


def params_from(name: str, args: argparse.Namespace) -> list[RunParams]:
    """The runs a scenario command asks for (several for a concurrency sweep)."""
    base = RunParams(
        scenario=name,
        model=args.model,
        protocol=args.protocol,
        url=args.url,
        grpc_url=args.grpc_url,
        batch_size=args.batch_size,
        timeout_s=args.timeout,
        seed=args.seed,
        label=args.label,
        allow_remote=args.allow_remote,
        trace=args.trace,
        exporter_url=args.exporter_url,
        requests=getattr(args, "requests", None),
        gap_s=getattr(args, "gap_ms", 10.0) / 1e3,
        duration_s=getattr(args, "duration", 5.0),
        rate=getattr(args, "rate", 0.0) or 0.0,
        poisson=getattr(args, "poisson", False),
        stages=_stages(getattr(args, "stage", [])),
        max_in_flight=getattr(args, "max_in_flight", 256),
    )
    base = inputopts.InputOptions.from_args(args).apply(base)
    if name != "concurrency":
        return [base]
    try:
        levels = [int(c) for c in str(args.concurrency).split(",")]
    except ValueError:
        raise LoadgenError(
            f"--concurrency {args.concurrency!r}: use a number or a list like 1,2,4,8"
        ) from None
    return [replace(base, concurrency=c) for c in levels]


def _db(args: argparse.Namespace) -> str | None:
    if getattr(args, "no_store", False):
        return None
    db = args.db or default_db()
    check_writable(db)
    return str(db)


def _exit_code(results: list[runner.RunResult]) -> int:
    if any(r.status == "interrupted" for r in results):
        return 130
    bad = any(
        r.status != "ok" or r.summary.client.failed or r.summary.client.timed_out for r in results
    )
    return 1 if bad else 0


def run_series(
    runs: list[RunParams], args: argparse.Namespace, group: str, tables: bool
) -> list[runner.RunResult]:
    """Runs back to back (a sweep, a comparison), all checked before the first request is
    sent, sharing ``group`` in the store; one that does not end ok ends the series. With
    ``tables``, each run's table is printed as it ends."""
    stop = threading.Event()
    prepared = [runner.prepare(p) for p in runs]
    results = []
    for item in prepared:
        bar = None if args.json else report.ProgressBar(item.params.describe())
        result = runner.run(item, _db(args), stop, bar, handle_sigint=True, group_id=group)
        results.append(result)
        if tables and not args.json:
            print(report.run_table(result), flush=True)
            print()
        if result.store_note:
            print(f"loadgen: {result.store_note}", file=sys.stderr, flush=True)
        if result.status != "ok":
            break
    return results


def run_scenario(name: str, args: argparse.Namespace) -> int:
    runs = params_from(name, args)
    _db(args)  # a store that cannot take the run is said before anything is sent
    if args.processes != 1:
        return split.run_split(runs, args, _db(args))
    group = f"sweep-{time.time():.3f}" if len(runs) > 1 else ""
    results = run_series(runs, args, group, tables=True)
    if args.json:
        payload: Any = [split.json_of(r, _db(args)) for r in results]
        print(json.dumps(payload[0] if len(payload) == 1 else payload, indent=2))
    return _exit_code(results)


def run_compare(args: argparse.Namespace, parse: Callable[[list[str]], argparse.Namespace]) -> int:
    """Two runs back to back; ``parse`` reads a quoted scenario's words."""
    lines = list(args.scenarios)
    models = [m for m in args.models.split(",") if m] if args.models else []
    if models and (len(models) != 2 or len(lines) != 1):
        raise LoadgenError("compare --models A,B takes two models and one quoted scenario")
    if not models and len(lines) != 2:
        raise LoadgenError("compare takes two quoted scenarios (or one with --models A,B)")
    runs: list[RunParams] = []
    for line in lines:
        argv = shlex.split(line)
        if not argv or argv[0] not in SCENARIO_HELP:
            raise LoadgenError(
                f"compare: {line!r} does not start with a scenario ({', '.join(SCENARIO_HELP)})"
            )
        sub_args = parse(argv)
        found = params_from(argv[0], sub_args)
        if len(found) != 1:
            raise LoadgenError("compare: a sweep (-c 1,2,...) cannot be one side of a comparison")
        runs.extend(found)
    if models:
        runs = [replace(runs[0], model=models[0]), replace(runs[0], model=models[1])]
    results = run_series(runs, args, f"compare-{time.time():.3f}", tables=False)
    if len(results) == 2:
        if args.json:
            out = {
                "a": result_json(results[0]),
                "b": result_json(results[1]),
                "ratios": report.compare_json(results[0], results[1]),
            }
            print(json.dumps(out, indent=2))
        else:
            print(report.compare_table(results[0], results[1]))
    return _exit_code(results)


def list_runs(db: str | None, limit: int, as_json: bool) -> int:
    with RunStore(db or default_db()) as runs:
        rows = runs.list_runs(limit)
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"{'id':>5} {'status':<12}{'scenario':<12}{'model':<20}{'sent':>8}{'ok':>8}"
        f"{'failed':>7}{'timeout':>8}{'thr/s':>10}{'p99 ms':>9}"
    )
    for r in rows:
        if r["status"] == "running" and r["finished_at"] < time.time() - STALE_S:
            r["status"] = "running?"  # no commit for a while: its process may have died
        thr = "-" if r["throughput_per_s"] is None else f"{r['throughput_per_s']:.0f}"
        p99 = "-" if r["p99_s"] is None else f"{r['p99_s'] * 1e3:.2f}"
        print(
            f"{r['id']:>5} {r['status']:<12}{r['scenario']:<12}{r['model']:<20}{r['sent']:>8}"
            f"{r['ok']:>8}{r['failed']:>7}{r['timed_out']:>8}{thr:>10}{p99:>9}"
        )
    return 0


def show_run(db: str | None, run_id: int) -> int:
    with RunStore(db or default_db()) as runs:
        run = runs.load_row(run_id)
    print(json.dumps(run, indent=2))
    return 0


def prune_runs(db: str | None, keep: int | None, older_than: str | None) -> int:
    age = None if older_than is None else parse_age(older_than)
    db = db or default_db()
    check_rules(keep, age)
    with RunStore(db) as runs:
        done = runs.prune(keep, age)
    print(
        f"pruned {len(done.runs)} runs ({done.records:,} records) from {db}: "
        f"{done.bytes_before / 1e6:.1f} MB -> {done.bytes_after / 1e6:.1f} MB"
    )
    return 0


def import_run(db: str | None, saved: str) -> int:
    db = db or default_db()
    with RunStore(db, create=True) as runs:
        run_id, added = import_saved(runs, saved)
    print(f"run #{run_id} in {db}, {added:,} records added from {saved}")
    return 0


def export_run(db: str | None, run_id: int, out: str) -> int:
    """The run's CSV files in ``out``, their paths printed."""
    try:
        with RunStore(db or default_db()) as runs:
            paths = runs.export_csv(run_id, out)
    except OSError as exc:
        raise LoadgenError(
            f"--out {out}: cannot write the CSV files there ({exc.strerror or exc}); give a folder"
        ) from None
    for path in paths:
        print(path)
    return 0
