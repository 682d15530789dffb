"""The highest open-loop rate whose p99 stays at or under a bound (``loadgen capacity``).

A bounded binary search: the first step tries ``max_rate``; if its p99 is within the bound
the search ends there (the bound that ended it is the max rate, not the p99). Otherwise each
further step runs the midpoint of the highest rate that passed (0 at first) and the lowest
that failed, for ``step_s`` seconds, until ``steps`` runs are spent. A step passes when
every request was answered right (none failed, timed out or left unsent) and the p99 of
its latency, counted from each request's due time, is at or under the bound. The answer is
the highest rate that passed; the true capacity lies between it and the lowest that failed.

Every step is an ordinary open-loop run (``loadgen.engine.runner.run``), stored like any run, with
one group id for the search.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from loadgen import limits
from loadgen.results.params import RunParams
from loadgen.results.summary import LoadRun

MAX_STEPS = 30
MAX_P99_S = 120.0
# What ended a search: the step count, the max rate (it passed), a stop, or a failed run.
ENDED = {
    "steps": "its step count (--steps); more steps narrow the range",
    "max-rate": "its max rate, which passed: the server may take more (raise --max-rate)",
    "stop": "a stop (Ctrl-C, SIGTERM)",
    "error": "a run that did not end ok",
}


@dataclass(frozen=True)
class CapacityParams:
    p99_s: float  # the bound on each step's p99 latency
    max_rate: float = 2000.0  # requests/s: the first step, and the highest tried
    steps: int = 8  # runs at most
    step_s: float = 5.0  # each run's duration

    def check(self) -> None:
        limits.positive(self.p99_s * 1e3, "--p99-ms", MAX_P99_S * 1e3)
        limits.positive(self.max_rate, "--max-rate", limits.MAX_RATE, "/s")
        limits.positive_int(self.steps, "--steps", MAX_STEPS)
        limits.positive(self.step_s, "--step-duration", limits.MAX_DURATION_S, "s")


@dataclass(frozen=True)
class Step:
    """One run of the search and its verdict."""

    rate: float
    p99_s: float | None
    sent: int
    ok: int
    bad: int  # failed + timed out + not sent
    late_sends: int
    passed: bool
    run_id: int | None = None
    status: str = "ok"  # the run's: ok, interrupted or failed


@dataclass(frozen=True)
class Capacity:
    params: CapacityParams
    steps: list[Step]
    ended: str  # one of ENDED
    best_rate: float | None  # highest rate that passed; None: none did
    lowest_failed: float | None  # lowest rate that failed; None: none did

    def to_json(self) -> dict[str, Any]:
        return {
            "p99_bound_s": self.params.p99_s,
            "max_rate": self.params.max_rate,
            "steps_asked": self.params.steps,
            "step_s": self.params.step_s,
            "ended": self.ended,
            "best_rate": self.best_rate,
            "lowest_failed_rate": self.lowest_failed,
            "steps": [vars(s) for s in self.steps],
        }


def verdict(run: LoadRun, p99_bound_s: float) -> Step:
    c = run.summary.client
    bad = c.failed + c.timed_out + (c.not_sent or 0)
    p99 = c.latency_s.p99
    passed = run.status == "ok" and bad == 0 and p99 is not None and p99 <= p99_bound_s
    return Step(
        run.params.rate, p99, c.sent, c.ok, bad, c.late_sends or 0, passed, run.run_id, run.status
    )


def search(params: CapacityParams, probe: Callable[[float], Step]) -> Capacity:
    """Binary search over (0, max_rate]; ``probe(rate)`` runs one step."""
    params.check()
    done: list[Step] = []
    good, bad = 0.0, params.max_rate
    ended = "steps"
    rate = params.max_rate
    while len(done) < params.steps:
        step = probe(rate)
        done.append(step)
        if step.status != "ok":  # a stop, or a server gone: no verdict on this rate
            ended = "stop" if step.status == "interrupted" else "error"
            break
        if step.passed:
            good = rate
            if rate >= params.max_rate:
                ended = "max-rate"
                break
        else:
            bad = rate
        rate = (good + bad) / 2
    passed = [s.rate for s in done if s.passed]
    failed = [s.rate for s in done if not s.passed and s.status == "ok"]
    return Capacity(
        params,
        done,
        ended,
        max(passed) if passed else None,
        min(failed) if failed else None,
    )


def step_params(base: RunParams, params: CapacityParams, rate: float) -> RunParams:
    """The open-loop run of one step: the base run's target and model at ``rate``."""
    return replace(
        base,
        scenario="rate",
        rate=rate,
        duration_s=params.step_s,
        label=base.label or f"capacity p99<={params.p99_s * 1e3:g}ms",
    )


def table(result: Capacity) -> str:
    """What the user reads: each step, the answer, and what ended the search."""
    p = result.params
    lines = [
        f"capacity: the highest rate with p99 <= {p.p99_s * 1e3:g} ms "
        f"(max rate {p.max_rate:g}/s, at most {p.steps} steps of {p.step_s:g} s)",
        "",
        f"{'step':>4} {'rate/s':>10} {'p99 ms':>9} {'sent':>8} {'bad':>6} {'late':>6}  "
        f"verdict  run",
    ]
    for i, s in enumerate(result.steps, 1):
        p99 = "-" if s.p99_s is None else f"{s.p99_s * 1e3:.2f}"
        run = "-" if s.run_id is None else f"#{s.run_id}"
        lines.append(
            f"{i:>4} {s.rate:>10,.1f} {p99:>9} {s.sent:>8,} {s.bad:>6,} {s.late_sends:>6,}  "
            f"{'pass' if s.passed else 'FAIL' if s.status == 'ok' else s.status:<7}  {run}"
        )
    lines.append("")
    if result.best_rate is None:
        lowest = min((s.rate for s in result.steps), default=p.max_rate)
        lines.append(f"no rate passed: even {lowest:,.1f}/s went over the bound or failed")
    else:
        upper = (
            f", under {result.lowest_failed:,.1f}/s (failed)"
            if result.lowest_failed is not None
            else ""
        )
        lines.append(f"capacity: {result.best_rate:,.1f}/s passed{upper}")
    lines.append(f"ended by: {ENDED[result.ended]}")
    return "\n".join(lines)
