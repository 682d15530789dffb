"""What the user reads: a progress line while a run goes, a table after it, and the ratio
table of a comparison (``loadgen.reports.compare``, the one the dashboard shows too). Plain text: it
goes to logs and CI output as well as terminals."""

from __future__ import annotations

import sys
from typing import IO, Any

from loadgen.reports.compare import compare
from loadgen.results.summary import ENDED, Latency, LoadRun
from loadgen.results.tracing import TraceSummary
from tritonapi.traces import REASON_TEXT


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


class ProgressBar:
    """One line redrawn in place on a terminal (stderr); silent when stderr is not one."""

    def __init__(self, label: str, stream: IO[str] | None = None, width: int = 24) -> None:
        self.label = label
        # Read when the bar is made, not when this module is imported (a command imports
        # it lazily, perhaps while a caller has swapped sys.stderr for a moment).
        self.stream = stream or sys.stderr
        self.width = width
        self.live = self.stream.isatty()

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
    lat = c.latency_s
    missed = c.schedule_missed()
    lines = [
        f"{run.describe()} over {run.params.protocol}   status: {run.status}"
        + ("   SCHEDULE NOT KEPT" if missed else ""),
        "",
        "client side",
        f"  requests      sent {c.sent:,} = ok {c.ok:,} + failed {c.failed:,} "
        f"+ timed out {c.timed_out:,}",
        f"  time          {c.duration_s:.3f} s   throughput {_num(c.throughput_per_s)} /s",
        f"  latency (ok)  p50 {_ms(lat.p50)}  p90 {_ms(lat.p90)}  p95 {_ms(lat.p95)}  "
        f"p99 {_ms(lat.p99)}  max {_ms(lat.max)}",
    ]
    if c.ended:
        lines.append(f"  ended by      {ENDED.get(c.ended, c.ended)}{_limit(run, c.ended)}")
    if c.not_sent:
        lines.append(f"  not sent      {c.not_sent:,} due requests dropped at the stop")
    if c.send_lateness_s is not None:
        lines.append(f"  send lateness {lateness_line(c.send_lateness_s)}")
    if c.late_sends is not None:
        lines.append(f"  late sends    {late_sends(c.late_sends, c.sent, c.late_threshold_s)}")
    lines += input_lines(run)
    if missed:
        lines.append(f"  note: {missed}")
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
    if run.trace is not None:
        lines += ["", *trace_lines(run.trace)]
    return "\n".join(lines)


SHOWN_SHAPES = 6


def input_lines(run: LoadRun) -> list[str]:
    """What the requests held and what their answers were checked against; with several
    shapes, what that does to batching (runs stored before these were recorded: none)."""
    c, p = run.summary.client, run.params
    lines = []
    held = []
    if p.input_data != "random":
        held.append(p.input_data + (" (random order)" if p.data_order == "random" else ""))
    held += [f"{name} in [{lo:g}, {hi:g})" for name, (lo, hi) in p.ranges]
    if p.string_data is not None:
        held.append(f"strings {p.string_data!r}")
    elif tuple(p.string_length) != (16, 16):
        lo, hi = p.string_length
        held.append(f"strings of {lo}" + (f"..{hi}" if hi != lo else "") + " characters")
    if held:
        lines.append(f"  inputs        {', '.join(held)}")
    if c.checked:
        checked = c.checked
        if checked == "shapes and datatypes only":
            checked += " (no expected outputs given)"
        lines.append(f"  checked       {checked}")
    if c.shapes:
        shown = ", ".join(f"{k} x{n:,}" for k, n in list(c.shapes.items())[:SHOWN_SHAPES])
        more = len(c.shapes) - SHOWN_SHAPES
        extra = f", and {more:,} more" if more > 0 else ""
        lines.append(f"  shapes sent   {len(c.shapes):,} distinct: {shown}{extra}")
        if len(c.shapes) > 1:
            lines.append(
                "  note: Triton's statistics do not split by shape, so executions and average "
                "batch below are for all shapes together; its dynamic batcher groups only "
                f"requests of the same shape unless the model allows ragged batching, so a "
                f"batch here held requests of one of {len(c.shapes):,} shapes"
            )
    return lines


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.0f} us"


def lateness_line(late: Latency) -> str:
    """Open-loop runs: how late the sends left after their due times."""
    return f"p50 {_us(late.p50)}  p99 {_us(late.p99)}  max {_us(late.max)} after the due time"


def late_sends(late: int, sent: int, threshold_s: float | None) -> str:
    """Open-loop runs: how many requests went out late (perf_analyzer's "delayed")."""
    share = f" ({late / sent:.1%})" if sent else ""
    after = "" if threshold_s is None else f" more than {threshold_s * 1e3:g} ms"
    return (
        f"{late:,} of {sent:,}{share} went out{after} after they were due; "
        "their latency counts from the due time"
    )


def _limit(run: LoadRun, ended: str) -> str:
    p = run.params
    if ended == "duration":
        return f" ({p.duration_s:g} s asked)"
    if ended == "requests" and p.requests:
        return f" ({p.requests:,} asked)"
    if ended == "error" and run.summary.client.error:
        return f": {run.summary.client.error}"
    return ""


def trace_lines(t: TraceSummary) -> list[str]:
    """The --trace section: exact server-side waits and how the run's requests were grouped."""
    lines = [
        f"server side, traced (Triton's own traces of this run's requests: {t.traced:,} "
        f"of {t.sent:,})"
    ]
    if t.note:
        lines.append(f"  {t.note}")
    if not t.traced:
        return lines
    w = t.queue_wait_s
    sizes = ", ".join(f"{size}: {n:,}" for size, n in t.batches_by_size.items())
    batches = sum(t.batches_by_size.values())
    lines += [
        f"  queue wait   p50 {_ms(w['p50'])}  p90 {_ms(w['p90'])}  p99 {_ms(w['p99'])}  "
        f"max {_ms(w['max'])}   (exact, per request)",
        f"  grouped into {batches:,} batches by size  {sizes}",
    ]
    if t.reasons:
        why = ", ".join(
            f"{REASON_TEXT.get(r, r)} {n / batches:.0%}" for r, n in sorted(t.reasons.items())
        )
        lines.append(f"  why they left  {why}")
    return lines


def _cell(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if isinstance(value, int) else f"{value:,.3f}"


def compare_table(a: LoadRun, b: LoadRun) -> str:
    """``loadgen.reports.compare`` as text: A, B and B / A per measure."""
    lines = [f"A: {a.describe()}", f"B: {b.describe()}", ""]
    lines.append(f"{'':<30}{'A':>14}{'B':>14}{'B / A':>10}")
    for row in compare(a.summary, b.summary):
        ratio = "-" if row.b_over_a is None else f"{row.b_over_a:.2f}x"
        lines.append(f"{row.measure:<30}{_cell(row.a):>14}{_cell(row.b):>14}{ratio:>10}")
    return "\n".join(lines)


def compare_json(a: LoadRun, b: LoadRun) -> list[dict[str, Any]]:
    return [
        {"measure": r.measure, "a": r.a, "b": r.b, "b_over_a": r.b_over_a}
        for r in compare(a.summary, b.summary)
    ]
