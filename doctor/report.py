"""The doctor's findings as text (the CLI, the dashboard) and as JSON."""

from __future__ import annotations

from typing import Any

from doctor.checks import MIN_REQUESTS, ms, pct, per_s
from doctor.diagnosis import Diagnosis
from observe.window import Window


def facts(d: Diagnosis) -> list[str]:
    """What was measured, finding or not: the lines above the findings."""
    config = d.config
    lines = [
        f"config: {config.batching_summary()}; {config.instances or 1} instance(s)",
        f"batch traces: {d.traces}",
    ]
    w = d.window
    if w is None:
        return [*lines, "traffic: not read"]
    lines.append(
        f"window: {w.source}: {w.requests:,.0f} requests ({per_s(w.arrival_rate)}), "
        f"{w.requests_failed:,.0f} failed"
    )
    if w.requests < MIN_REQUESTS:
        lines.append(
            f"traffic: fewer than {MIN_REQUESTS} requests answered in the window, so only the "
            "config and the queue bound were checked: send load while the doctor watches, "
            "or widen --window"
        )
        return lines
    lines.extend(_traffic(w, config.preferred_batch_sizes))
    return lines


def _traffic(w: Window, preferred: tuple[int, ...]) -> list[str]:
    out = []
    if w.average_batch is not None:
        dist = ", ".join(f"{s}: {pct(v)}" for s, v in w.distribution().items())
        hit = w.hit_ratio(preferred)
        out.append(
            f"formed: average batch {w.average_batch:.2f}; executions by size {dist or 'none'}"
            + (f"; at a preferred size {pct(hit)}" if hit is not None else "")
        )
    q, c = w.queue_per_request_s, w.compute_per_request_s
    if q is not None and c is not None:
        inside = w.in_server
        out.append(
            f"overlap: {inside:.2f} requests inside Triton at once (arrival rate x "
            f"({ms(q)} queue + {ms(c)} compute))"
            + (f"; pending at most {w.pending_max:g}" if w.pending_max is not None else "")
        )
    if w.gpu_utilization is not None:
        out.append(f"GPU: {pct(w.gpu_utilization)} utilised on average ({w.gpus} GPU(s))")
    elif w.gpus == 0:
        out.append("GPU: none reported (a CPU-only server)")
    return out


def text(diagnoses: list[Diagnosis]) -> str:
    out: list[str] = []
    for d in diagnoses:
        out.append(f"== {d.model}")
        out.extend(f"  {line}" for line in facts(d))
        out.extend(f"  note: {note}" for note in d.notes)
        if d.prescription is not None:
            if d.prescription.present:
                out.append(f"  {d.prescription.present}")
            out.append(f"  config ({d.prescription.verdict}): {d.prescription.text}")
            out.extend(f"    {line}" for line in d.prescription.pbtxt)
        if not d.findings:
            out.append("  no finding")
        for f in d.findings:
            out.append(f"  FINDING [{f.check}] {f.title}")
            out.extend(f"    {name}: {value}" for name, value in f.numbers)
            out.append(f"    why: {f.explanation}")
            if f.proposal:
                out.append(f"    proposal: {f.proposal}")
            out.append("    fix (config.pbtxt):")
            out.extend(f"      {line}" for line in f.fix)
        out.append("")
    count = sum(len(d.findings) for d in diagnoses)
    out.append(f"{count} finding(s) in {len(diagnoses)} model(s)")
    return "\n".join(out)


def to_json(diagnoses: list[Diagnosis]) -> list[dict[str, Any]]:
    return [
        {
            "model": d.model,
            "facts": facts(d),
            "notes": d.notes,
            "traces": d.traces,
            "findings": [f.to_json() for f in d.findings],
            "prescription": d.prescription.to_json() if d.prescription else None,
        }
        for d in diagnoses
    ]
