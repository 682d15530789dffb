"""``bench/autopilot.py``'s accounting, on known changes: when the autopilot converged, and
how long a change served the clients a config that measured worse."""

from __future__ import annotations

import pytest

from advisor.config import BatcherConfig
from bench.advisor_regret import Measured
from bench.autopilot import Step, converged_s, report


def step(outcome: str, before_ms: float, after_ms: float, loaded: float = 30.0) -> Step:
    return Step(outcome, loaded, loaded + 12.0, 10.0, before_ms / 1e3, after_ms / 1e3)


def test_a_better_change_kept_converges_at_its_decision_and_was_never_worse() -> None:
    good = step("kept", 20.0, 8.0)
    assert not good.worse and good.worse_for_s(120.0) == 0.0
    assert not good.beyond_one_window
    assert converged_s([good], [(42.0, "KEPT")]) == 42.0


def test_a_worse_change_undone_counts_its_window_and_one_kept_counts_the_rest_of_the_run() -> None:
    # Worse beyond the rule's noise: over x1.2 the p99 before, plus 1 ms.
    undone = step("rolled_back", 8.0, 20.0)
    assert undone.worse and undone.worse_for_s(120.0) == 12.0  # from the load to the rollback
    assert not undone.beyond_one_window
    kept = step("kept", 8.0, 20.0, loaded=60.0)
    assert kept.worse and kept.worse_for_s(120.0) == 60.0  # to the end of the run
    assert kept.beyond_one_window
    # Within the noise (8 ms x1.2 + 1 ms = 10.6 ms): not worse, kept or not.
    assert not step("kept", 8.0, 10.5).worse
    assert step("kept", 8.0, 10.7).worse
    # The last kept change is the convergence, a rollback after it is not.
    assert converged_s([undone, kept], []) == 72.0


def test_with_nothing_kept_it_converged_at_the_first_decision_that_kept_the_config() -> None:
    assert converged_s([], [(40.0, "WAIT"), (55.0, "KEEP"), (70.0, "KEEP")]) == 55.0
    assert converged_s([step("rolled_back", 8.0, 20.0)], [(80.0, "KEEP")]) == 42.0
    assert converged_s([], [(40.0, "NO ADVICE")]) is None  # nothing decided
    failed = Step("rollback_failed", 30.0, 50.0, 10.0, 0.008, None)
    assert failed.beyond_one_window and failed.worse_for_s(100.0) == 70.0
    unseen = Step("kept", None, 50.0, 10.0, 0.008, 0.030)
    assert unseen.worse_for_s(100.0) is None


def measured(delay_us: int, roles: str, p99s_ms: list[float], again_ms: list[float]) -> Measured:
    ms = [v / 1e3 for v in p99s_ms]
    return Measured(
        BatcherConfig(4, (), delay_us), "m", roles.split("/"), ms, [v / 1e3 for v in again_ms]
    )


def test_the_final_config_is_judged_against_the_grids_best_also_head_to_head(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # In the grid the final config's mean is x1.2 the lucky best's; run again side by side,
    # the final config is the faster of the two.
    lucky = measured(100, "grid", [4.0, 6.0], [6.2, 6.0, 5.8])
    final = measured(0, "final/grid", [5.5, 6.5], [5.0, 5.2, 5.4])
    live = measured(0, "live", [5.8, 6.2], [])
    start = measured(3000, "start/grid", [9.0, 11.0], [])
    entries = [live, start, final, lucky]
    kept = step("kept", 10.0, 6.0)
    met = report([kept], 120.0, entries, [(42.0, "KEPT")], 120.0)
    out = capsys.readouterr().out
    assert "regret 1.20  (goal <= 1.10) MISS" in out
    assert "head to head, 3 more runs each on fresh seeds: final 5.20 ms" in out
    assert "head-to-head regret 0.87  (goal <= 1.10) PASS" in out
    assert not met  # the goals are judged on the grid's regret; the head to head is beside it
