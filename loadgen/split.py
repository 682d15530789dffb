"""Load from more than one process or machine, and the HDR export: ``--processes N`` on
the load runs, ``batchscope load merge FILES...`` and ``load export --hgrm``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from loadgen.engine import workers
from loadgen.errors import LoadgenError
from loadgen.reports import merge, report
from loadgen.reports.hgrm import hgrm
from loadgen.results import stored
from loadgen.results.histogram import Histogram
from loadgen.results.params import RunParams, default_db
from loadgen.results.summary import LoadRun, result_json
from runs.store import RunStore

PROCESSES_HELP = (
    "split the run across N worker processes and store it as one run: concurrency, "
    "--requests and --max-in-flight are divided among them (the first ones take the "
    "remainder), a rate or each --stage's rate is divided by N (1)"
)


def json_of(result: Any, db: str | None) -> dict[str, Any]:
    """A run's ``--json``, with the histograms ``loadgen merge`` needs (``merge.portable``):
    from its records in the store, or those still in memory for a run without one."""
    base = result_json(result)
    if db is not None and result.run_id is not None:
        with RunStore(db) as runs:
            found = merge.from_records(runs.record_times(result.run_id))
    else:
        found = merge.from_records((r[1], r[2], r[3]) for r in result.records())
    if result.summary.client.send_lateness_s is not None:
        found.lateness = result.recorder.lateness
    return merge.portable(base, found)


def run_split(runs: list[RunParams], args: argparse.Namespace, db: str | None) -> int:
    """Each run (a sweep's levels one after another) across ``args.processes`` workers."""
    group = f"sweep-{time.time():.3f}" if len(runs) > 1 else ""
    # Everything checked before the first worker starts: bad input sends nothing.
    for params in runs:
        workers.split(params, args.processes)
    done: list[workers.SplitRun] = []
    for params in runs:
        split = workers.run(params, args.processes, db, group)
        done.append(split)
        if not args.json:
            print(report.run_table(split.run), flush=True)
            print()
        for error in split.worker_errors:
            print(f"loadgen: {error}", file=sys.stderr, flush=True)
        if split.run.status != "ok":
            break
    if args.json:
        payload = [merge.portable(result_json(s.run), s.merged.found) for s in done]
        print(json.dumps(payload[0] if len(payload) == 1 else payload, indent=2))
    return exit_code([s.run for s in done])


def exit_code(runs: list[LoadRun]) -> int:
    if any(r.status == "interrupted" for r in runs):
        return 130
    c = [r.summary.client for r in runs]
    return (
        1 if any(r.status != "ok" for r in runs) or any(x.failed or x.timed_out for x in c) else 0
    )


def merge_runs(files: list[str], label: str, db: str | None, as_json: bool) -> int:
    parts = merge.read_parts(files)
    merged = merge.merge(parts, label=label)
    db = db or default_db()
    merged.run.run_id = merge.save(db, merged, parts)
    if as_json:
        print(json.dumps(merge.portable(result_json(merged.run), merged.found), indent=2))
    else:
        print(report.run_table(merged.run))
        if not all(p.source is not None for p in parts):
            print("\n(per-request records: only runs read from stores bring them; none here)")
    return 0


def export_hgrm(db: str | None, run_id: int, unit: str) -> int:
    """The run's latency as HdrHistogram's percentile distribution, on stdout."""
    db = db or default_db()
    with RunStore(db) as runs:
        run = stored.load_run(runs, run_id)
        found = merge.from_records(runs.record_times(run_id))
    if found.n != run.summary.client.sent:
        raise LoadgenError(
            f"run {run_id} has {found.n:,} records of {run.summary.client.sent:,} sent in "
            f"{db}: its latency histogram cannot be rebuilt"
        )
    latency: Histogram = found.latency
    sys.stdout.write(hgrm(latency, unit))
    return 0
