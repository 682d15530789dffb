"""python -m loadgen SCENARIO | compare | capacity | runs | show | export | merge (triton-loadgen)

Exit codes: 0 every request answered right; 1 some failed or timed out; 2 bad input
(nothing sent, nothing stored); 130 interrupted by Ctrl-C or SIGTERM (the partial run is
stored).
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from loadgen import cli_multi, inputopts
from loadgen.engine import capacity, runner
from loadgen.engine.saved import import_saved
from loadgen.errors import LoadgenError
from loadgen.reports import report
from loadgen.results.params import RunParams, default_db
from loadgen.results.summary import result_json
from runs.errors import StoreError
from runs.prune import check_rules
from runs.schema import STALE_S, check_writable, is_locked
from runs.store import RunStore
from tritonapi.modelname import model_name

SCENARIO_HELP = {
    "serial": "N requests one at a time, a gap after each answer (the experiment's first case)",
    "concurrent": "N requests arriving at once (the experiment's second case: -n 3)",
    "concurrency": "closed loop: C requests in flight for a duration; -c 1,2,4,8 sweeps",
    "rate": "open loop: R requests/s, constant or --poisson arrivals",
    "steps": "open loop in stages: --stage RATE:SECONDS, repeated",
}


def _positive_int(flag: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: give a whole number from 1 up")
        return value

    return parse


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-m",
        "--model",
        type=model_name,
        default="batch_add_model",
        help="model name (batch_add_model)",
    )
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    p.add_argument(
        "--url",
        default="",
        help="Triton HTTP, for metadata and statistics too "
        "(default: the stack's, http://127.0.0.1:8000)",
    )
    p.add_argument("--grpc-url", default="", help="Triton gRPC host:port (127.0.0.1:8001)")
    p.add_argument("--batch-size", type=int, default=1, help="rows per request (1)")
    inputopts.add_arguments(p)
    p.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="a request with no answer by then counts as timed out (10)",
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seed of the random inputs and of a Poisson run's arrival times (default: random)",
    )
    p.add_argument("--label", default="", help="free text stored with the run")
    p.add_argument(
        "--allow-remote", action="store_true", help="allow a target that is not on loopback"
    )
    p.add_argument(
        "--trace",
        action="store_true",
        help="trace every request in Triton and store each one's server-side queue wait and "
        "batch (read through the exporter; a run of at most 5,000 requests)",
    )
    p.add_argument(
        "--exporter-url",
        default="",
        help="the exporter whose /api/traces --trace reads (default: the stack's)",
    )


def _output(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=None, help="results store (LOADGEN_DB, .stack/loadgen.sqlite3)")
    p.add_argument("--no-store", action="store_true", help="do not store the run")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")


def _scenario_args(name: str, p: argparse.ArgumentParser) -> None:
    if name in ("serial", "concurrent"):
        p.add_argument("-n", "--requests", type=int, default=3, help="how many (3)")
    if name == "serial":
        p.add_argument("--gap-ms", type=float, default=10.0, help="pause after each answer (10)")
    if name == "concurrency":
        p.add_argument(
            "-c",
            "--concurrency",
            default="8",
            help="requests in flight; a list (1,2,4,8) runs a sweep (8)",
        )
        p.add_argument("-n", "--requests", type=int, default=None, help="stop after N requests")
    if name in ("concurrency", "rate"):
        p.add_argument("-d", "--duration", type=float, default=5.0, metavar="S", help="(5)")
    if name == "rate":
        p.add_argument("-r", "--rate", type=float, required=True, help="requests per second")
    if name == "steps":
        p.add_argument(
            "--stage",
            action="append",
            default=[],
            metavar="RATE:SECONDS",
            help="one stage; repeat for more",
        )
    if name in ("rate", "steps"):
        p.add_argument("--poisson", action="store_true", help="Poisson arrivals (else constant)")
        p.add_argument(
            "--max-in-flight",
            type=int,
            default=256,
            help="open connections at most; later arrivals wait (256)",
        )


def scenario_parser(name: str, prog: str = "python -m loadgen") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"{prog} {name}", description=SCENARIO_HELP[name])
    _scenario_args(name, p)
    _common(p)
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadgen",
        description="Load runs against Triton that account for every request.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in SCENARIO_HELP.items():
        p = sub.add_parser(name, help=text, description=text)
        _scenario_args(name, p)
        _common(p)
        _output(p)
        cli_multi.add_processes(p)
    cmp = sub.add_parser(
        "compare",
        help="two scenarios or two models back to back, with a ratio table",
        description="Run A then B and print B beside A, with B / A for each measure (above 1: "
        "B has more of it). Either two quoted scenario command lines, or one scenario and "
        "--models A,B.",
        epilog="examples:  compare --models add_unbatched,batch_add_model 'concurrency -c 8 -d 3'"
        "   |   compare 'serial -n 3' 'concurrent -n 3'",
    )
    cmp.add_argument("scenarios", nargs="+", metavar="'SCENARIO ARGS'")
    cmp.add_argument("--models", default="", help="A,B: the same scenario on two models")
    _output(cmp)
    runs = sub.add_parser("runs", help="list stored runs, newest first")
    runs.add_argument("--limit", type=_positive_int("--limit"), default=20)
    runs.add_argument("--db", default=None)
    runs.add_argument("--json", action="store_true")
    show = sub.add_parser("show", help="one stored run's summary")
    show.add_argument("run_id", type=int)
    show.add_argument("--db", default=None)
    export = sub.add_parser("export", help="write a stored run as CSV files")
    export.add_argument("run_id", type=int)
    export.add_argument("--out", default=".", help="folder for the CSV files (.)")
    export.add_argument("--db", default=None)
    cli_multi.add_hgrm(export)
    cli_multi.add_merge(sub)
    prune = sub.add_parser(
        "prune",
        help="delete old runs to keep the store bounded",
        description="Delete the runs past the newest N (--keep) and those older than AGE "
        "(--older-than), with their records; a run still going is kept. Either rule deletes.",
    )
    prune.add_argument("--keep", type=int, default=None, metavar="N", help="newest runs to keep")
    prune.add_argument("--older-than", default=None, metavar="AGE", help="e.g. 30d, 12h, 45m, 90s")
    prune.add_argument("--db", default=None)
    _capacity_parser(sub)
    imp = sub.add_parser(
        "import",
        help="put a run saved beside the store (it was locked, full or corrupt) into it",
    )
    imp.add_argument("saved", metavar="FILE", help="the <store>.run-<time>.json file")
    imp.add_argument("--db", default=None)
    return parser


def _capacity_parser(sub: Any) -> None:
    cap = sub.add_parser(
        "capacity",
        help="the highest open-loop rate whose p99 stays under a bound (binary search)",
        description="Binary search for the highest open-loop rate whose p99 latency (from "
        "each request's due time) stays at or under --p99-ms with every answer right. The "
        "first step runs --max-rate; each step is a stored rate run of --step-duration "
        "seconds; at most --steps of them. The result says whether the step count or the "
        "max rate ended the search.",
    )
    cap.add_argument("--p99-ms", type=float, required=True, metavar="B", help="the p99 bound")
    cap.add_argument(
        "--max-rate", type=float, default=2000.0, metavar="R", help="highest rate tried (2000)"
    )
    cap.add_argument("--steps", type=int, default=8, help="runs at most (8)")
    cap.add_argument(
        "--step-duration", type=float, default=5.0, metavar="S", help="seconds per run (5)"
    )
    cap.add_argument("--poisson", action="store_true", help="Poisson arrivals (else constant)")
    cap.add_argument(
        "--max-in-flight",
        type=int,
        default=256,
        help="open connections at most; later arrivals wait (256)",
    )
    _common(cap)
    _output(cap)


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
        return cli_multi.run_split(runs, args, _db(args))
    group = f"sweep-{time.time():.3f}" if len(runs) > 1 else ""
    results = run_series(runs, args, group, tables=True)
    if args.json:
        payload: Any = [cli_multi.json_of(r, _db(args)) for r in results]
        print(json.dumps(payload[0] if len(payload) == 1 else payload, indent=2))
    return _exit_code(results)


def run_compare(args: argparse.Namespace) -> int:
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
        parser = scenario_parser(argv[0], prog="python -m loadgen compare")
        sub_args = parser.parse_args(argv[1:])
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


def list_runs(args: argparse.Namespace) -> int:
    with RunStore(args.db or default_db()) as runs:
        rows = runs.list_runs(args.limit)
    if args.json:
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


def show_run(args: argparse.Namespace) -> int:
    with RunStore(args.db or default_db()) as runs:
        run = runs.load_row(args.run_id)
    print(json.dumps(run, indent=2))
    return 0


def prune_runs(args: argparse.Namespace) -> int:
    age = None if args.older_than is None else parse_age(args.older_than)
    db = args.db or default_db()
    check_rules(args.keep, age)
    with RunStore(db) as runs:
        done = runs.prune(args.keep, age)
    print(
        f"pruned {len(done.runs)} runs ({done.records:,} records) from {db}: "
        f"{done.bytes_before / 1e6:.1f} MB -> {done.bytes_after / 1e6:.1f} MB"
    )
    return 0


def import_run(args: argparse.Namespace) -> int:
    db = args.db or default_db()
    with RunStore(db, create=True) as runs:
        run_id, added = import_saved(runs, args.saved)
    print(f"run #{run_id} in {db}, {added:,} records added from {args.saved}")
    return 0


def export_run(args: argparse.Namespace) -> int:
    if args.hgrm:
        return cli_multi.export_hgrm(args)
    try:
        with RunStore(args.db or default_db()) as runs:
            paths = runs.export_csv(args.run_id, args.out)
    except OSError as exc:
        raise LoadgenError(
            f"--out {args.out}: cannot write the CSV files there ({exc.strerror or exc}); "
            "give a folder"
        ) from None
    for path in paths:
        print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # SIGTERM behaves like Ctrl-C (during a run the run's own handler takes both).
    term = None
    if threading.current_thread() is threading.main_thread():
        term = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return _main(args)
    finally:
        if term is not None:
            signal.signal(signal.SIGTERM, term)


def _main(args: argparse.Namespace) -> int:
    try:
        if args.command in SCENARIO_HELP:
            return run_scenario(args.command, args)
        if args.command == "compare":
            return run_compare(args)
        if args.command == "runs":
            return list_runs(args)
        if args.command == "show":
            return show_run(args)
        if args.command == "prune":
            return prune_runs(args)
        if args.command == "import":
            return import_run(args)
        if args.command == "capacity":
            return run_capacity(args)
        if args.command == "merge":
            return cli_multi.merge_runs(args)
        return export_run(args)
    except (LoadgenError, StoreError) as exc:
        print(f"loadgen: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except sqlite3.DatabaseError as exc:
        db = getattr(args, "db", None) or default_db()
        if is_locked(exc):
            print(
                f"loadgen: error: {db} is locked by another writer; try again when it is done",
                file=sys.stderr,
            )
            return 1
        # A --db that is some other file: SQLite only notices at the first query.
        print(
            f"loadgen: error: {db} is not a load-run store ({exc}); pass --db with the SQLite "
            "file loadgen writes, or move this file away",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM outside a run's sending
        print(
            "loadgen: interrupted; a run that had started sending is stored as interrupted "
            "with what it had committed",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
