"""A saved blind run's present checks and predictions, done again offline with other settings.

    .venv/bin/python -m bench.present_replay FILE [--setting TRIGGER:WHERE:N ...]

``bench.advisor_blind --save`` keeps what each point's present check was given. This bench
checks each present again under every combination of the settings given (the clustering
fit's trigger, the requests the search simulates), predicts the same three other configs from
it, and judges both against what the run measured, as the blind bench does. One table: per
setting, the points met against issue 54's goals and the checks' simulations and CPU time,
in one run (compare the ratios). A setting chosen on these windows is fitted to them: it is
judged blind only by a new run of ``bench.advisor_blind`` on models it has not seen.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from advisor import present as present_mod
from advisor.predict import predict
from advisor.present import (
    BATCH_BOUND,
    QUEUE_BOUND,
    QUEUE_FLOOR_S,
    Figure,
    Measured,
    PresentCheck,
    check_present,
)
from bench.advisor_blind import OTHERS, PRESENT, Inputs, alternatives

# ---- the replay ----------------------------------------------------------------------------


@dataclass
class Tally:
    """One setting's results over every point."""

    trigger: float
    search_requests: int
    wide: bool
    present_met: int = 0
    points: int = 0
    others_met: int = 0
    others: int = 0
    simulations: int = 0
    check_s: float = 0.0


@dataclass(frozen=True)
class Point:
    """One saved point done again: its check, and the average batch predicted for each other
    config the run measured."""

    inputs: Inputs
    check: PresentCheck
    predicted: dict[str, float]
    check_s: float


@contextmanager
def setting(trigger: float, wide: bool) -> Iterator[None]:
    """The clustering fit's setting for the block (``wide``: it runs wherever its signature
    shows, not only where the present is off)."""
    saved = present_mod.CLUSTER_TRIGGER, present_mod.CLUSTER_ONLY_WHERE_OFF
    present_mod.CLUSTER_TRIGGER, present_mod.CLUSTER_ONLY_WHERE_OFF = trigger, not wide
    try:
        yield
    finally:
        present_mod.CLUSTER_TRIGGER, present_mod.CLUSTER_ONLY_WHERE_OFF = saved


def replay_point(row: dict[str, Any], search_requests: int) -> Point:
    """A present row's check and predictions, done again under the setting in force."""
    i = Inputs.decode(row["inputs"])
    began = time.process_time()
    check = check_present(
        i.config, i.traffic, i.service, i.measured, i.cpu, search_requests=search_requests
    )
    spent = time.process_time() - began
    cpu = check.cpu or i.cpu
    predicted = {
        which: predict(config, i.traffic, i.service, cpu, i.requests, seed=i.seed).mean_batch_size
        for which, config in alternatives(i.config)
    }
    return Point(i, check, predicted, spent)


def replay(
    rows: Sequence[dict[str, Any]], trigger: float, search_requests: int, wide: bool
) -> Tally:
    """Every saved point's check and predictions under one setting."""
    tally = Tally(trigger, search_requests, wide)
    measured_of = {
        (r["model"], r["rate"], r["which"]): r["batch"][1] for r in rows if r["which"] in OTHERS
    }
    with setting(trigger, wide):
        for r in rows:
            if r["which"] != PRESENT or not r.get("inputs"):
                continue
            point = replay_point(r, search_requests)
            tally.check_s += point.check_s
            tally.simulations += point.check.simulations
            tally.points += 1
            tally.present_met += judged(point.check, point.inputs.measured)
            for which, batch in point.predicted.items():
                measured = measured_of.get((r["model"], r["rate"], which))
                if measured:
                    tally.others += 1
                    tally.others_met += Figure("average batch", batch, measured, BATCH_BOUND).within
    return tally


def judged(check: PresentCheck, measured: Measured) -> bool:
    """The blind bench's judgment of a present: batch and queue within the fixed bounds
    (the check itself may widen the queue's by its window's spread)."""
    if not check.figures:
        return False
    batch = check.figure("average batch").simulated
    queue = check.figure("mean queue").simulated
    return (
        Figure("average batch", batch, measured.avg_batch, BATCH_BOUND).within
        and Figure("mean queue", queue, measured.mean_queue_s, QUEUE_BOUND, QUEUE_FLOOR_S).within
    )


def table(tallies: Sequence[Tally]) -> str:
    head = (
        f"{'trigger':>8}{'where':>8}{'search req':>11} | {'present met':>12} | "
        f"{'others met':>12} | "
        f"{'simulations':>11}{'check CPU s':>12}{'x first':>8}"
    )
    lines = [head, "-" * len(head)]
    first = tallies[0].check_s or 1.0
    for t in tallies:
        searched = str(t.search_requests or "all")
        lines.append(
            f"{t.trigger:>8g}{'always' if t.wide else 'off':>8}{searched:>11} | "
            f"{t.present_met:>5}/{t.points:<6} | "
            f"{t.others_met:>5}/{t.others:<6} | {t.simulations:>11}{t.check_s:>12.1f}"
            f"{t.check_s / first:>8.2f}"
        )
    return "\n".join(lines)


def own_where() -> str:
    return "off" if present_mod.CLUSTER_ONLY_WHERE_OFF else "always"


def parse_setting(text: str) -> tuple[float, bool, int]:
    """``--setting TRIGGER:WHERE:N`` as (trigger, wide, search requests)."""
    try:
        trigger, where, n = text.split(":")
        parsed = (float(trigger), where == "always", int(n))
    except ValueError:
        parsed = None
    if parsed is None or where not in ("off", "always") or parsed[0] < 0 or parsed[2] < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: use TRIGGER:WHERE:N, e.g. 0.25:always:5000")
    return parsed


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.present_replay",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
    )
    p.add_argument("file", type=Path, help="a run saved by bench.advisor_blind --save")
    p.add_argument(
        "--setting",
        action="append",
        type=parse_setting,
        metavar="TRIGGER:WHERE:N",
        help="a setting to replay under, repeated for several: the clustering fit's trigger "
        "(units of the bounds), where it runs (off: only where the present is off; always: "
        "wherever its signature shows) and the requests per simulation of the search (0: as "
        "many as the verdict's); default the advisor's own, "
        f"{present_mod.CLUSTER_TRIGGER:g}:{own_where()}:{present_mod.SEARCH_REQUESTS}",
    )
    args = p.parse_args(argv)
    try:
        rows = json.loads(args.file.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        p.error(f"{args.file}: not a saved blind run ({exc}); make one with --save")
    if not any(r.get("inputs") for r in rows):
        p.error(
            f"{args.file}: its points carry no check inputs; "
            "make a new run with bench.advisor_blind --save"
        )
    settings = args.setting or [
        (present_mod.CLUSTER_TRIGGER, own_where() == "always", present_mod.SEARCH_REQUESTS)
    ]
    tallies = [replay(rows, trigger, n, wide) for trigger, wide, n in settings]
    print(table(tallies))
    return 0


if __name__ == "__main__":
    sys.exit(main())
