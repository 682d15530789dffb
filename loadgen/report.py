"""What the user reads: a progress line while a run goes, a table after it, and the ratio
table of a comparison. Plain text: it goes to logs and CI output as well as terminals."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Any

from loadgen.summary import LoadRun, RunSummary


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


class ProgressBar:
    """One line redrawn in place on a terminal (stderr); silent when stderr is not one."""

    def __init__(self, label: str, stream: IO[str] = sys.stderr, width: int = 24) -> None:
        self.label = label
        self.stream = stream
        self.width = width
        self.live = stream.isatty()

    def __call__(self, snap: dict[str, Any]) -> None:
        if not self.live:
            return
        filled = int(snap["fraction"] * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        line = (
            f"\r{self.label} [{bar}] {snap['elapsed_s']:5.1f}s sent {snap['sent']:,} "
            f"ok {snap['ok']:,} failed {snap['failed']:,} timed out {snap['timed_out']:,} "
            f"in flight {snap['in_flight']:,} p99 {_ms(snap['p99_s'])}"
        )
        self.stream.write(line + ("\n" if snap["final"] else "\x1b[K"))
        self.stream.flush()


def run_table(run: LoadRun) -> str:
    c = run.summary.client
    s = run.summary.server
    p = run.params
    lat = c.latency_s
    lines = [
        f"run {run.run_id if run.run_id is not None else '(not stored)'}: "
        f"{p.describe()} -> {p.model} over {p.protocol}   status: {run.status}",
        "",
        "client side",
        f"  requests      sent {c.sent:,} = ok {c.ok:,} + failed {c.failed:,} "
        f"+ timed out {c.timed_out:,}",
        f"  time          {c.duration_s:.3f} s   throughput {_num(c.throughput_per_s)} /s",
        f"  latency (ok)  p50 {_ms(lat.p50)}  p90 {_ms(lat.p90)}  p95 {_ms(lat.p95)}  "
        f"p99 {_ms(lat.p99)}  max {_ms(lat.max)}",
    ]
    if c.not_sent:
        lines.append(f"  not sent      {c.not_sent:,} due requests dropped at the stop")
    for kind, count in c.errors.items():
        lines.append(f"  error x{count:<6,} {kind}")
    if s is None:
        lines += ["", f"server side: unknown ({run.summary.server_error})"]
        return "\n".join(lines)
    sizes = ", ".join(f"{k}: {v}" for k, v in s.executions_by_batch_size.items()) or "-"
    lines += [
        "",
        "server side (statistics API, this window)",
        f"  requests {s.requests:,}   inferences {s.inferences:,}   "
        f"executions (server calls) {s.executions:,}   "
        f"average batch {_num(s.average_batch_size, 2)}",
        f"  executions by batch size  {sizes}",
        f"  queue    {_ms(s.queue_s_per_request)} per request   "
        f"compute {_ms(s.compute_s_per_request)} per request   "
        f"model call {_ms(s.compute_infer_s_per_execution)} per execution",
    ]
    if run.summary.server_restarted:
        lines.append("  note: Triton restarted during the run; server figures cover since then")
    return "\n".join(lines)


COMPARE_ROWS: list[tuple[str, Callable[[RunSummary], float | None]]] = [
    ("requests ok", lambda s: s.client.ok),
    ("server calls", lambda s: s.server.executions if s.server else None),
    ("average batch", lambda s: s.server.average_batch_size if s.server else None),
    ("total time (s)", lambda s: s.client.duration_s),
    ("throughput (/s)", lambda s: s.client.throughput_per_s),
    ("p50 (ms)", lambda s: _scale(s.client.latency_s.p50)),
    ("p99 (ms)", lambda s: _scale(s.client.latency_s.p99)),
    (
        "queue per request (ms)",
        lambda s: _scale(s.server.queue_s_per_request) if s.server else None,
    ),
]


def _scale(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def compare_rows(a: LoadRun, b: LoadRun) -> list[dict[str, Any]]:
    rows = []
    for name, get in COMPARE_ROWS:
        va, vb = get(a.summary), get(b.summary)
        ratio = va / vb if va is not None and vb else None
        rows.append({"metric": name, "a": va, "b": vb, "a_over_b": ratio})
    return rows


def compare_table(a: LoadRun, b: LoadRun) -> str:
    name_a = f"A: {a.params.model} {a.params.describe()}"
    name_b = f"B: {b.params.model} {b.params.describe()}"
    lines = [name_a, name_b, "", f"{'':<24}{'A':>14}{'B':>14}{'A / B':>10}"]
    for row in compare_rows(a, b):
        cells = [
            "-" if v is None else (f"{v:,.0f}" if isinstance(v, int) else f"{v:,.3f}")
            for v in (row["a"], row["b"])
        ]
        ratio = "-" if row["a_over_b"] is None else f"{row['a_over_b']:.2f}x"
        lines.append(f"{row['metric']:<24}{cells[0]:>14}{cells[1]:>14}{ratio:>10}")
    return "\n".join(lines)


def result_json(run: LoadRun) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "group_id": run.group_id,
        "status": run.status,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "params": run.params.to_json(),
        **run.summary.to_json(),
    }
