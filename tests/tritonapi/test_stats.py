"""When a window's statistics account for the requests answered in it, on real captures.

``rest`` and ``after_load`` are one Triton's ``/v2/models/stats`` before and after a load
run (tests/exporter/data). The states in between are the ones a read can see while a
backend is reporting: each request's statistics first, then its batch's.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from tritonapi.stats import Duration, ModelStats, parse_statistics

DATA = Path(__file__).resolve().parents[1] / "exporter" / "data"


def captured(when: str, model: str = "batch_add_model") -> ModelStats:
    stats = parse_statistics(json.loads((DATA / when / "stats.json").read_text()))
    return next(s for s in stats if s.name == model)


def with_phases(stats: ModelStats, **counts: int) -> ModelStats:
    phases = dict(stats.phases)
    for name, count in counts.items():
        phases[name] = Duration(count, phases.get(name, Duration()).ns)
    return replace(stats, phases=phases)


def test_a_load_runs_window_accounts_for_its_answers_and_no_more() -> None:
    delta = captured("after_load").minus(captured("rest"))
    assert delta.phase("success").count == 3283
    assert delta.accounts_for(3283)
    assert not delta.accounts_for(3284)


def test_requests_counted_before_their_last_batch_are_not_yet_accounted_for() -> None:
    before, after = captured("rest"), captured("after_load")
    # Every request's statistics are in; the last execution, a batch of 4, is not yet.
    between = replace(
        after,
        inference_count=after.inference_count - 4,
        execution_count=after.execution_count - 1,
    )
    delta = between.minus(before)
    assert delta.phase("success").count == 3283
    assert not delta.accounts_for(3283)
    assert not delta.accounts_for(1)


def test_cache_hits_never_reach_a_batch_and_are_not_waited_for() -> None:
    before = captured("rest")
    # Twelve answers, nine from the cache: three requests reached the batcher.
    after = with_phases(
        replace(before, inference_count=3, execution_count=3),
        success=12,
        cache_hit=9,
        cache_miss=3,
    )
    assert after.minus(before).accounts_for(12)
    short = replace(after, inference_count=2, execution_count=2)
    assert not short.minus(before).accounts_for(12)


def test_failed_requests_count_without_an_execution() -> None:
    """A backend reports no batch when every request of it failed."""
    before = captured("rest")
    after = with_phases(before, success=0, fail=3)
    assert after.minus(before).accounts_for(3)
    assert not after.minus(before).accounts_for(4)
