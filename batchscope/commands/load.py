"""``batchscope load``: load runs against Triton that account for every request, and the
store they are kept in.

Exit codes: 0 every request answered right; 1 some failed or timed out; 2 bad input
(nothing sent, nothing stored); 130 interrupted by Ctrl-C or SIGTERM (the partial run is
stored).
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import sys
import threading
from typing import Any

from batchscope import options
from batchscope.base import PROG, CommandError, Parser
from loadgen import actions, inputopts, priorities, sequences, split
from loadgen.actions import SCENARIO_HELP
from loadgen.errors import LoadgenError
from loadgen.reports import hgrm
from loadgen.results.params import default_db
from runs.errors import StoreError
from runs.schema import is_locked

DESCRIPTION = "Load runs against Triton that account for every request."
DB_HELP = "results store (LOADGEN_DB, .stack/loadgen.sqlite3)"


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
    options.add_model(p, "model name (batch_add_model)", default="batch_add_model")
    p.add_argument("--protocol", choices=("http", "grpc"), default="http")
    options.add_url(
        p,
        "Triton HTTP, for metadata and statistics too "
        "(default: the stack's, http://127.0.0.1:8000)",
        default="",
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
    options.add_db(p, "results store (LOADGEN_DB, .stack/loadgen.sqlite3)")
    p.add_argument("--no-store", action="store_true", help="do not store the run")
    options.add_json(p, "print JSON instead of the table")


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


def parse_scenario(words: list[str]) -> argparse.Namespace:
    """One side of ``load compare``: a quoted scenario command line."""
    p = Parser(prog=f"{PROG} load compare {words[0]}", description=SCENARIO_HELP[words[0]])
    _scenario_args(words[0], p)
    _common(p)
    try:
        return p.parse_args(words[1:])
    except CommandError as exc:  # named as compare's: that is the command typed
        raise CommandError(f"{' '.join(words)!r}: {exc}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, text in SCENARIO_HELP.items():
        p = sub.add_parser(name, help=text, description=text)
        _scenario_args(name, p)
        _common(p)
        _output(p)
        add_processes(p)
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
    options.add_db(runs, DB_HELP)
    options.add_json(runs)
    show = sub.add_parser("show", help="one stored run's summary")
    show.add_argument("run_id", type=int)
    options.add_db(show, DB_HELP)
    export = sub.add_parser("export", help="write a stored run as CSV files")
    export.add_argument("run_id", type=int)
    export.add_argument("--out", default=".", help="folder for the CSV files (.)")
    options.add_db(export, DB_HELP)
    add_hgrm(export)
    add_merge(sub)
    prune = sub.add_parser(
        "prune",
        help="delete old runs to keep the store bounded",
        description="Delete the runs past the newest N (--keep) and those older than AGE "
        "(--older-than), with their records; a run still going is kept. Either rule deletes.",
    )
    prune.add_argument("--keep", type=int, default=None, metavar="N", help="newest runs to keep")
    prune.add_argument("--older-than", default=None, metavar="AGE", help="e.g. 30d, 12h, 45m, 90s")
    options.add_db(prune, DB_HELP)
    _capacity_parser(sub)
    imp = sub.add_parser(
        "import",
        help="put a run saved beside the store (it was locked, full or corrupt) into it",
    )
    imp.add_argument("saved", metavar="FILE", help="the <store>.run-<time>.json file")
    options.add_db(imp, DB_HELP)
    _modules(sub)


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


def add_processes(p: argparse.ArgumentParser) -> None:
    p.add_argument("--processes", type=int, default=1, metavar="N", help=split.PROCESSES_HELP)


def add_merge(sub: Any) -> None:
    m = sub.add_parser(
        "merge",
        help="combine runs made side by side (pods, machines) into one stored run",
        description="Merge runs of the same requests to the same model, made at the same "
        "time by several load generators, into one stored run: counts add, latency "
        "histograms merge exactly, timelines sum on the earliest run's clock. Each FILE is "
        "a store with one run (FILE:RUN_ID for one of several) or a run's --json output. "
        "The server side is left out (each run's statistics saw the others' requests).",
    )
    m.add_argument("files", nargs="+", metavar="FILE")
    m.add_argument("--label", default="", help="the merged run's label")
    options.add_db(m, "the store to put it in (LOADGEN_DB)")
    options.add_json(m, "print JSON instead of the table")


def add_hgrm(export: argparse.ArgumentParser) -> None:
    export.add_argument(
        "--hgrm",
        action="store_true",
        help="print HdrHistogram's percentile distribution (.hgrm) of the run's latency "
        "(successful requests) instead of writing CSV files",
    )
    export.add_argument(
        "--unit", choices=tuple(hgrm.UNITS), default="us", help="--hgrm values in us or ms (us)"
    )


def _modules(sub: Any) -> None:
    """``load sequences`` and ``load priorities``: the stateful and the priority models."""
    text = (
        "Send sequences (START ... END, one correlation ID each) to a stateful "
        "model served with sequence batching."
    )
    seq = sub.add_parser("sequences", help=text, description=text)
    options.add_model(seq, "a model with sequence_batching", required=True)
    options.add_url(seq, "Triton HTTP URL (default: the stack's)", default="")
    seq.add_argument("--sequences", type=int, default=8, help="how many sequences")
    seq.add_argument("--length", type=int, default=5, help="requests per sequence")
    seq.add_argument("--concurrency", type=int, default=4, help="sequences in flight")
    seq.add_argument("--first-id", type=int, default=1, help="first correlation ID")
    seq.add_argument("--gap-ms", type=float, default=0.0, help="pause between steps")
    seq.add_argument("--timeout-s", type=float, default=10.0, help="per request")
    text = "Closed-loop clients per priority level against one model, side by side."
    prio = sub.add_parser("priorities", help=text, description=text)
    options.add_model(prio, "a model with priority_levels", required=True)
    prio.add_argument("--mix", required=True, help="LEVEL:CLIENTS pairs, e.g. 1:2,2:4")
    options.add_url(prio, "Triton HTTP URL (default: the stack's)", default="")
    prio.add_argument("--duration", type=float, default=3.0, help="seconds")
    prio.add_argument("--timeout-s", type=float, default=10.0, help="per request")


def run_sequences(args: argparse.Namespace) -> int:
    params = sequences.SequenceParams(
        model=args.model,
        url=args.url,
        sequences=args.sequences,
        length=args.length,
        concurrency=args.concurrency,
        first_id=args.first_id,
        gap_s=args.gap_ms / 1e3,
        timeout_s=args.timeout_s,
    )
    result = sequences.run_sequences(params)
    print(sequences.report(result))
    return 0 if result.failed == 0 else 1


def run_priorities(args: argparse.Namespace) -> int:
    params = priorities.PriorityParams(
        args.model, priorities.parse_mix(args.mix), args.url, args.duration, args.timeout_s
    )
    results = priorities.run_mix(params)
    print(priorities.report(params, results))
    return 0


def run(args: argparse.Namespace) -> int:
    # SIGTERM behaves like Ctrl-C (during a run the run's own handler takes both).
    term = None
    if threading.current_thread() is threading.main_thread():
        term = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        return _run(args)
    finally:
        if term is not None:
            signal.signal(signal.SIGTERM, term)


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command in SCENARIO_HELP:
            return actions.run_scenario(args.command, args)
        if args.command == "compare":
            return actions.run_compare(args, parse_scenario)
        if args.command == "runs":
            return actions.list_runs(args.db, args.limit, args.json)
        if args.command == "show":
            return actions.show_run(args.db, args.run_id)
        if args.command == "prune":
            return actions.prune_runs(args.db, args.keep, args.older_than)
        if args.command == "import":
            return actions.import_run(args.db, args.saved)
        if args.command == "capacity":
            return actions.run_capacity(args)
        if args.command == "merge":
            return split.merge_runs(args.files, args.label, args.db, args.json)
        if args.command == "sequences":
            return run_sequences(args)
        if args.command == "priorities":
            return run_priorities(args)
        if args.hgrm:
            return split.export_hgrm(args.db, args.run_id, args.unit)
        return actions.export_run(args.db, args.run_id, args.out)
    except (LoadgenError, StoreError) as exc:
        raise CommandError(str(exc), exc.exit_code) from None
    except sqlite3.DatabaseError as exc:
        db = getattr(args, "db", None) or default_db()
        if is_locked(exc):
            raise CommandError(
                f"{db} is locked by another writer; try again when it is done", 1
            ) from None
        # A --db that is some other file: SQLite only notices at the first query.
        raise CommandError(
            f"{db} is not a load-run store ({exc}); pass --db with the SQLite "
            "file loadgen writes, or move this file away"
        ) from None
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM outside a run's sending
        print(
            f"{args.command_prog}: interrupted; a run that had started sending is stored as "
            "interrupted with what it had committed",
            file=sys.stderr,
        )
        return 130
