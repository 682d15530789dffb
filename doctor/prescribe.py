"""The doctor's fix lines from the advisor's one search, so that the doctor and the advisor
never propose two configs for one server and window.

The checks (:mod:`doctor.checks`) say what is wrong and why; where a finding's fix is a
batching knob (the delay, the preferred sizes, max_batch_size, batching on), the config comes
from :func:`advisor.advice.advise` over the same window: the advisor's recommendation, or
"keep it" with the numbers when no config beats the current one at this load (then no longer
delay is proposed), or nothing where the search's simulation does not reproduce the window
(its present is off). Findings about other things (a full queue, failures, a model without a
batch dimension) keep the checks' own fix.

The doctor sits above the advisor in the layers: it asks the advisor's search, and the
advisor needs nothing of the doctor.
"""

from __future__ import annotations

from dataclasses import replace

from advisor.advice import Advice, SearchOptions, advise
from advisor.inputs import InputError, Options
from advisor.predict import Recommendation
from doctor.checks import CHANGE, KEEP, NONE, OFF, Finding, Prescription
from doctor.diagnosis import Diagnosis
from observe.window import Window

# The findings whose fix is a batching config: the search answers them.
SEARCHED = ("batching-off", "delay-too-short", "preferred-missed", "no-overlap", "queue-latency")
# Under this predicted average batch, a kept config means batching cannot help at this load.
LITTLE_BATCHING = 1.2


def _interval(rec: Recommendation, which: str) -> tuple[float, float] | None:
    interval = rec.best_interval if which == "best" else rec.current_interval
    if interval is None:
        return None
    _, low, high = interval.user_terms()
    return (low, high)


def prescription(rec: Recommendation) -> Prescription:
    """The search's answer in the doctor's words, with the numbers it rests on."""
    now = rec.current
    bound = f"p99 <= {rec.p99_bound_s * 1e3:g} ms"
    predicted = (
        f"predicted for the current config under {now.traffic.describe()}: average batch "
        f"{now.mean_batch_size:.2f}, {now.latency_line()}"
    )
    if rec.best is None:
        return Prescription(
            NONE,
            now.config.describe(),
            (),
            f"no batching config of the {rec.considered} the advisor's search tried meets "
            f"{bound} at this load ({predicted}): the server needs capacity (instances, "
            "hardware), or the bound is too tight",
            _interval(rec, "current"),
        )
    if rec.keep:
        why = (
            "batching cannot help at this load"
            if now.mean_batch_size < LITTLE_BATCHING
            else "the current config is as good as any tried"
        )
        return Prescription(
            KEEP,
            now.config.describe(),
            (),
            f"keep the batching config: {why}: none of the {rec.considered} configs the "
            f"advisor's search tried beats it on {rec.objective} by x{rec.min_gain:g} or more "
            f"beyond the simulation's noise with {bound} ({rec.noise_line('current')}; "
            f"{predicted})",
            _interval(rec, "current"),
        )
    best = rec.best
    return Prescription(
        CHANGE,
        best.config.describe(),
        tuple(best.config.pbtxt().splitlines()),
        f"the advisor's search of {rec.considered} configs recommends "
        f"{best.config.describe()}: {rec.gain_line()} (x{rec.gain_ratio:.2f}), average "
        f"batch {now.mean_batch_size:.2f} -> {best.mean_batch_size:.2f} ({predicted})",
        _interval(rec, "best"),
    )


def _fix(finding: Finding, p: Prescription) -> Finding:
    if p.verdict == CHANGE:
        lines: tuple[str, ...] = ("# the advisor's recommendation (one search):", *p.pbtxt)
    elif p.verdict == KEEP:
        lines = ("# nothing to change in the batching config: keep it (the advisor's search)",)
    else:
        lines = ("# no batching config meets the bound at this load (the advisor's search)",)
    # What the search does not decide (instances, priorities, the client) stays, as a note.
    rest = tuple(
        line if line.startswith("#") else f"# beyond the search: {line}"
        for line in finding.fix
        if finding.code in ("queue-latency", "no-overlap") and "max_queue_delay" not in line
    )
    return replace(finding, fix=lines + rest, proposal=p.text)


def prescribe(d: Diagnosis, rec: Recommendation, present: str = "") -> Diagnosis:
    """``d`` with the search's answer, and its batching findings' fix lines from it;
    ``present``: the line the search's present check printed."""
    p = replace(prescription(rec), present=present)
    findings = [_fix(f, p) if f.code in SEARCHED else f for f in d.findings]
    return replace(d, findings=findings, prescription=p)


def silent(d: Diagnosis, found: Advice) -> Diagnosis:
    """``d`` when the search's present is off: no config proposed, and the batching
    findings keep the checks' own rule of thumb, marked as such."""
    now = found.recommendation.current.config
    p = Prescription(
        OFF,
        now.describe(),
        (),
        "no config proposed: the advisor's simulation does not reproduce this window's "
        "present, so its predictions of other configs would stand on a wrong base",
        present=found.present_line(),
    )
    note = "# the checks' rule of thumb: the advisor's search proposes nothing (present off)"
    findings = [replace(f, fix=(note, *f.fix)) if f.code in SEARCHED else f for f in d.findings]
    return replace(d, findings=findings, prescription=p)


def searched(
    d: Diagnosis,
    opts: Options,
    search: SearchOptions,
    window: Window | None = None,
) -> Diagnosis:
    """``d`` with the advisor's search over the same window (``window``: one already
    watched; else what ``opts`` names); a note instead when it cannot run (too little
    traffic, a config it cannot model)."""
    if d.window is None:
        return d
    try:
        found = advise(opts, search, window)
    except InputError as exc:
        d.notes.append(f"the advisor's search did not run ({exc}): the fixes are the checks' own")
        return d
    cut = found.recommendation.cut_note()
    if cut:
        d.notes.append(cut)
    # Which count the search's traffic came from (received or answered), as advise says.
    d.notes.extend(n for n in found.notes if n.startswith("traffic fitted from the window"))
    if found.silent:
        return silent(d, found)
    return prescribe(d, found.recommendation, found.present_line())
