"""Several runs made side by side (worker processes, pods, machines) as one stored run.

The merged run is what one load generator doing all of it would have stored: counts add (any
whole number of a run's client summary, late sends too, so sent = ok + failed + timed out
still holds); latency histograms merge exactly (``Histogram.merge``), so the percentiles are
those of one histogram fed every request; timelines sum second by second on a common clock
(the earliest part's start is second 0, each part moved by its whole-second offset, each
second's percentiles from the merged histograms); records keep their order of completion.

A part comes from a store (its records give the histograms) or from the JSON a run prints
with ``--json`` (``portable`` adds the histograms to it). The server side is not the sum of
the parts' (each part's window saw the others' requests too): the caller gives the server
side of the whole window when it has one (``--processes``), else the merged run says why it
has none.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from loadgen.errors import LoadgenError
from loadgen.results import stored
from loadgen.results.histogram import Histogram, hist_from_json, hist_json
from loadgen.results.params import RunParams
from loadgen.results.recorder import QUANTILES, lateness_of
from loadgen.results.summary import ClientSummary, Latency, LoadRun, RunSummary, ServerSummary
from runs import writes
from runs.schema import TIMELINE_COLUMNS
from runs.store import RunStore

Row = tuple[float, float, str]  # start_s, latency_s, outcome
# What must match for runs to be one run: the same requests to the same model.
SAME = ("scenario", "model", "batch_size", "shapes", "dtypes", "protocol")


@dataclass
class Second:
    counts: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # sent ok failed timed_out
    hist: Histogram = field(default_factory=Histogram)


@dataclass
class Part:
    """One run to merge, with what an exact merge needs."""

    name: str  # where it came from, for messages
    run: LoadRun
    latency: Histogram
    seconds: dict[int, Second]
    first_s: float  # when its first request was due, on its own clock
    source: tuple[Path, int] | None = None  # (store, run id) whose records come along
    lateness: Histogram | None = None  # open loop: send lateness (None: not kept)


# ---- histograms and the portable JSON -----------------------------------------------
@dataclass
class FromRecords:
    latency: Histogram
    seconds: dict[int, Second]
    n: int
    first_s: float
    lateness: Histogram | None = None  # open loop: how late each send left (not in records)


def from_records(rows: Iterable[Row]) -> FromRecords:
    """The run's latency histogram (successful requests), its seconds, how many records and
    the first one's due time: the seconds the recorder counts (sent by when due, outcomes
    by when known)."""
    latency = Histogram()
    seconds: dict[int, Second] = {}
    n, first = 0, math.inf
    for start, lat, outcome in rows:
        n += 1
        first = min(first, start)
        seconds.setdefault(max(int(start), 0), Second()).counts[0] += 1
        done = seconds.setdefault(max(int(start + lat), 0), Second())
        done.counts[1 + OUTCOME_INDEX[outcome]] += 1
        if outcome == "ok":
            latency.add(lat)
            done.hist.add(lat)
    return FromRecords(latency, seconds, n, 0.0 if n == 0 else first)


OUTCOME_INDEX = {"ok": 0, "failed": 1, "timed_out": 2}


def portable(base: dict[str, Any], found: FromRecords) -> dict[str, Any]:
    """``base`` (a run's ``--json``) with what ``loadgen merge`` needs to merge it exactly:
    the latency histogram and, per second, the counts and the histogram. Unchanged when
    the records do not cover the run (a run without a store past its in-memory cap)."""
    if found.n != base["client"]["sent"]:
        return base
    return {
        **base,
        "first_s": found.first_s,
        "latency_histogram": hist_json(found.latency),
        **(
            {"send_lateness_histogram": hist_json(found.lateness)}
            if found.lateness is not None
            else {}
        ),
        "seconds": [
            {"second": s, "counts": sec.counts, "histogram": hist_json(sec.hist)}
            for s, sec in sorted(found.seconds.items())
        ],
    }


# ---- reading parts ------------------------------------------------------------------
def part_from_store(db: Path, run_id: int | None, name: str) -> Part:
    """The run ``run_id`` of store ``db`` (its only one when None)."""
    with RunStore(db) as runs:
        if run_id is None:
            listed = runs.list_runs(limit=2)
            if len(listed) != 1:
                many = f"holds {len(listed)}+ runs" if listed else "holds no run"
                raise LoadgenError(f"{name} {many}: name one as {db}:RUN_ID")
            run_id = int(listed[0]["id"])
        run = stored.load_run(runs, run_id)
        lateness = stored.load_lateness(runs, run_id)
        if run.status == "running":
            raise LoadgenError(f"{name}: run #{run_id} is still going; merge it once it has ended")
        found = from_records(runs.record_times(run_id))
    if found.n != run.summary.client.sent:
        raise LoadgenError(
            f"{name}: run #{run_id} has {found.n:,} records of {run.summary.client.sent:,} sent "
            "(not all of it is in this store), so it cannot be merged exactly"
        )
    return Part(name, run, found.latency, found.seconds, found.first_s, (db, run_id), lateness)


def part_from_json(data: dict[str, Any], name: str) -> Part:
    """A run as ``--json`` printed it (with ``--processes``/``portable``'s histograms)."""
    if "latency_histogram" not in data:
        raise LoadgenError(
            f"{name} is a run's JSON without its histograms (an older loadgen, or a run "
            "without a store past its in-memory records): rerun it with --db and --json"
        )
    try:
        restarted = bool(data.get("server_restarted", False))
        run = LoadRun(
            params=RunParams.from_json(data["params"]),
            status=str(data["status"]),
            started_at=float(data["started_at"]),
            finished_at=float(data["finished_at"]),
            summary=RunSummary.from_json(data["client"], data["server"], restarted),
            run_id=data.get("run_id"),
        )
        seconds = {
            int(s["second"]): Second([int(c) for c in s["counts"]], hist_from_json(s["histogram"]))
            for s in data["seconds"]
        }
        latency = hist_from_json(data["latency_histogram"])
        lateness = data.get("send_lateness_histogram")
        late = None if lateness is None else hist_from_json(lateness)
        first_s = float(data["first_s"])
    except (KeyError, TypeError, ValueError) as exc:
        raise LoadgenError(f"{name} is not a load run's JSON: {exc!r}") from None
    if sum(s.counts[0] for s in seconds.values()) != run.summary.client.sent:
        raise LoadgenError(f"{name}: its seconds do not add up to the requests it sent")
    return Part(name, run, latency, seconds, first_s, lateness=late)


def read_parts(names: Sequence[str]) -> list[Part]:
    """Each FILE (a store, FILE:RUN_ID, or a run's JSON) as a part; LoadgenError with one
    line for anything that is not one."""
    if len(names) < 2:
        raise LoadgenError("merge needs two runs or more: pass two FILEs or more")
    return [_read_part(name) for name in names]


def _read_part(name: str) -> Part:
    path, run_id = Path(name), None
    head, sep, tail = name.rpartition(":")
    if sep and tail.isdigit() and not path.exists():
        path, run_id = Path(head), int(tail)
    if not path.is_file():
        raise LoadgenError(
            f"{name}: no such file; pass load-run stores (--db) or files a run's --json printed"
        )
    with path.open("rb") as fh:
        magic = fh.read(16)
    if magic == b"SQLite format 3\x00":
        try:
            return part_from_store(path, run_id, name)
        except sqlite3.DatabaseError as exc:
            raise LoadgenError(f"{name} is not a load-run store ({exc})") from None
    try:
        data = _json_in(path.read_text())
    except (UnicodeDecodeError, ValueError):
        raise LoadgenError(
            f"{name} is neither a load-run store nor a run's --json output; pass the store "
            "files (--db) or the JSON files the runs wrote"
        ) from None
    if not isinstance(data, dict):
        raise LoadgenError(f"{name} holds a list of runs: save each run's --json on its own")
    return part_from_json(data, name)


def _json_in(text: str) -> Any:
    """The JSON a run printed, also when other lines surround it (``kubectl logs`` gives a
    pod's standard error with its standard output)."""
    try:
        return json.loads(text)
    except ValueError:
        start = text.find("\n{\n") + 1 if not text.startswith("{") else 0
        if start <= 0 and not text.startswith("{"):
            raise
        return json.JSONDecoder().raw_decode(text, start)[0]


# ---- merging ------------------------------------------------------------------------
def check_same(parts: Sequence[Part]) -> None:
    """Runs of the same requests to the same model, each once."""
    first = parts[0].run.params
    seen: dict[tuple[float, RunParams], str] = {}
    for part in parts:
        run_key = (part.run.started_at, part.run.params)
        if run_key in seen:
            raise LoadgenError(
                f"{part.name} is the same run as {seen[run_key]}: pass each run once"
            )
        seen[run_key] = part.name
    for part in parts[1:]:
        p = part.run.params
        for key in SAME:
            if getattr(p, key) != getattr(first, key):
                raise LoadgenError(
                    f"{part.name} is a different run from {parts[0].name}: its {key} is "
                    f"{_show(getattr(p, key))}, not {_show(getattr(first, key))}; merge only "
                    "runs of the same requests to the same model"
                )


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(f"{k}={v}" for k, v in value) or "(none)"
    return repr(value)


@dataclass
class Merged:
    run: LoadRun
    timeline: list[dict[str, Any]]
    found: FromRecords  # what a run's own records would give: for its portable JSON
    offsets: list[float]  # each part's start after the earliest, seconds


def merge(
    parts: Sequence[Part],
    server: ServerSummary | None = None,
    server_error: str = "",
    label: str = "",
) -> Merged:
    """The parts as one run (see the module doc). ``server``: the whole window's server
    side, when the caller measured it; else ``server_error`` says why there is none."""
    check_same(parts)
    t0 = min(p.run.started_at for p in parts)
    offsets = [p.run.started_at - t0 for p in parts]
    latency = Histogram.merged(p.latency for p in parts)
    seconds: dict[int, Second] = {}
    for part, offset in zip(parts, offsets, strict=True):
        shift = int(offset)
        for s, sec in part.seconds.items():
            into = seconds.setdefault(s + shift, Second())
            into.counts = [a + b for a, b in zip(into.counts, sec.counts, strict=True)]
            into.hist.merge(sec.hist)
    timeline = [_row(s, sec) for s, sec in sorted(seconds.items())]
    # Send lateness merges exactly when every part kept its histogram (else: unknown).
    lateness = (
        Histogram.merged(p.lateness for p in parts if p.lateness is not None)
        if all(p.lateness is not None for p in parts)
        else None
    )
    client = _client(parts, offsets, latency, lateness)
    first_s = min(o + p.first_s for o, p in zip(offsets, parts, strict=True))
    found = FromRecords(latency, seconds, client.sent, first_s, lateness)
    restarted = any(p.run.summary.server_restarted for p in parts)
    if server is None and not server_error:
        server_error = (
            f"merged from {len(parts)} runs: each run's statistics window saw the other "
            "runs' requests too, so their server sides do not add; see each run's own"
        )
    run = LoadRun(
        params=_params(parts, label),
        status=_status(parts),
        started_at=t0,
        finished_at=max(p.run.finished_at for p in parts),
        summary=RunSummary(client, server, server_error, restarted),
    )
    return Merged(run, timeline, found, offsets)


def _row(second: int, sec: Second) -> dict[str, Any]:
    h = sec.hist
    values = (second, *sec.counts, h.quantile(0.5), h.quantile(0.99), h.mean)
    return dict(zip(TIMELINE_COLUMNS, values, strict=True))


def _client(
    parts: Sequence[Part],
    offsets: Sequence[float],
    latency: Histogram,
    lateness: Histogram | None,
) -> ClientSummary:
    summaries = [p.run.summary.client for p in parts]
    data: dict[str, Any] = {}
    for f in fields(ClientSummary):
        values = [getattr(c, f.name) for c in summaries]
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            data[f.name] = sum(values)  # every count, whatever fields a version adds
        elif f.name == "not_sent":
            data[f.name] = None if all(v is None for v in values) else sum(v or 0 for v in values)
        else:
            data[f.name] = values[0]
    errors: dict[str, int] = {}
    for c in summaries:
        for kind, n in c.errors.items():
            errors[kind] = errors.get(kind, 0) + n
    data["errors"] = dict(sorted(errors.items(), key=lambda kv: -kv[1]))
    if any(c.shapes for c in summaries):  # each process's shapes sent, added up
        shapes: dict[str, int] = {}
        for c in summaries:
            for key, n in (c.shapes or {}).items():
                shapes[key] = shapes.get(key, 0) + n
        data["shapes"] = dict(sorted(shapes.items(), key=lambda kv: -kv[1]))
    # From the first request out (in any part) to the last outcome known (in any part).
    starts = [o + p.first_s for o, p in zip(offsets, parts, strict=True)]
    ends = [s + c.duration_s for s, c in zip(starts, summaries, strict=True)]
    duration = max(max(ends) - min(starts), 0.0)
    data["duration_s"] = duration
    data["throughput_per_s"] = data["ok"] / duration if duration > 0 else None
    p50, p90, p95, p99 = (latency.quantile(q) for q in QUANTILES)
    data["latency_s"] = Latency(p50, p90, p95, p99, latency.quantile(1.0), latency.mean)
    data["send_lateness_s"] = None if lateness is None else lateness_of(lateness)
    data["error"] = "; ".join(dict.fromkeys(c.error for c in summaries if c.error))
    ended = {c.ended for c in summaries}
    data["ended"] = ended.pop() if len(ended) == 1 else ",".join(sorted(ended))
    return ClientSummary(**data)


def _status(parts: Sequence[Part]) -> str:
    statuses = {p.run.status for p in parts}
    for status in ("failed", "interrupted"):
        if status in statuses:
            return status
    return "ok"


def _params(parts: Sequence[Part], label: str) -> RunParams:
    ps = [p.run.params for p in parts]
    first = ps[0]
    requests = None if any(p.requests is None for p in ps) else sum(p.requests or 0 for p in ps)
    stages = first.stages
    if all(len(p.stages) == len(stages) for p in ps):
        stages = tuple(
            (sum(p.stages[i][0] for p in ps), max(p.stages[i][1] for p in ps))
            for i in range(len(stages))
        )
    return replace(
        first,
        concurrency=sum(p.concurrency for p in ps),
        rate=sum(p.rate for p in ps),
        requests=requests,
        stages=stages,
        max_in_flight=sum(p.max_in_flight for p in ps),
        duration_s=max(p.duration_s for p in ps),
        label=label or f"{first.label + ' ' if first.label else ''}(merged from {len(ps)} runs)",
    )


# ---- storing ------------------------------------------------------------------------
def save(db: str | Path, merged: Merged, parts: Sequence[Part], group_id: str = "") -> int:
    """The merged run into store ``db`` in one transaction, with its timeline and, when
    every part came from a store, its records in order of completion; returns its id."""
    run = merged.run
    values = stored.row_values(
        run.params,
        group_id,
        run.status,
        run.started_at,
        run.finished_at,
        run.summary.client,
        stored.server_column(run.summary),
    )
    sources = [
        (p.source[0], p.source[1], offset)
        for p, offset in zip(parts, merged.offsets, strict=True)
        if p.source is not None
    ]
    lateness = None if merged.found.lateness is None else hist_json(merged.found.lateness)
    with RunStore(db, create=True) as runs:
        return writes.save_merged(
            runs.conn,
            values,
            merged.timeline,
            lateness,
            sources if len(sources) == len(parts) else None,
        )
