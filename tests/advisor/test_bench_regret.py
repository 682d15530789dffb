"""``bench/advisor_regret.py``'s accounting, on known measurements: the grid's regret, and the
head-to-head one that judges the best and the pick on the same fresh runs."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

import pytest

from advisor.config import BatcherConfig
from bench.advisor_regret import (
    Measured,
    best_of_grid,
    models_and_rates,
    report_one,
    traffic_seen,
)


def entry(
    delay_us: int, roles: str, p99s_ms: Sequence[float], confirmed_ms: Sequence[float] = ()
) -> Measured:
    return Measured(
        BatcherConfig(4, (), delay_us),
        "m",
        roles.split("/"),
        [v / 1e3 for v in p99s_ms],
        [v / 1e3 for v in confirmed_ms],
    )


def test_the_grid_regret_is_against_the_lowest_mean_and_the_head_to_head_one_against_its_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    lucky = entry(100, "grid", [4.0, 6.0], confirmed_ms=[6.0, 6.0, 6.0])  # mean 5.0 in the grid
    pick = entry(0, "pick/grid", [5.5, 6.5], confirmed_ms=[5.4, 5.4, 5.4])  # mean 6.0
    own = entry(3000, "own/grid", [9.0, 11.0])
    entries = [own, pick, lucky]
    assert best_of_grid(entries) is lucky
    found = report_one("m", 100.0, entries, "a verdict", 10.0, 200.0)
    assert found["regret"] == pytest.approx(6.0 / 5.0)
    # Run again side by side, the grid's best was the worse of the two.
    assert found["confirmed"] == pytest.approx(5.4 / 6.0)
    assert found["ratio"] == pytest.approx(0.05)
    assert not found["miss"]
    assert "head to head, 3 more runs each on fresh seeds" in capsys.readouterr().out


def test_a_pick_that_is_the_grids_best_has_regret_one_without_more_runs() -> None:
    best = entry(100, "pick/grid", [4.0, 4.2])
    own = entry(3000, "own/grid", [9.0, 11.0])
    found = report_one("m", 100.0, [own, best], "a verdict", 10.0, 200.0)
    assert found["regret"] == found["confirmed"] == 1.0


def test_a_pick_worse_than_the_own_config_beyond_its_range_is_a_miss_and_unconfirmed_is_none() -> (
    None
):
    own = entry(0, "own/grid", [4.0, 4.4])
    pick = entry(3000, "pick/grid", [9.0, 11.0])
    found = report_one("m", 100.0, [own, pick], "a verdict", 10.0, 200.0)
    assert found["miss"] and found["regret"] == pytest.approx(10.0 / 4.2)
    assert found["confirmed"] is None  # no head-to-head runs were made


def test_the_advisors_read_is_held_against_the_sends_at_the_same_instants() -> None:
    # 100 sends a second, evenly; Triton's answered count stalls from 1 s to 2 s, then
    # catches up (a backlog drained): the same instants, two readings of the traffic
    due = [k / 100 for k in range(400)]
    stamps = [0.1 + 0.2 * i for i in range(20)]
    answered = [sum(d <= (1.0 if 1.0 < t < 2.0 else t) for d in due) for t in stamps]
    line = traffic_seen(list(zip(stamps, map(float, answered), strict=True)), due, late=3)
    read_cv, sent_cv = (float(v) for v in re.findall(r"cv (\d+\.\d+)", line))
    assert read_cv > 2 and sent_cv < 0.2, line
    assert "the load generator's sends at the same instants: 100/s" in line
    assert "(3 sent late)" in line and "pending" not in line
    # Triton's executed count + pending gauge at the same instants: what it received
    sent = [float(sum(d <= t for d in due)) for t in stamps]
    received = list(zip(stamps, sent, strict=True))
    with_it = traffic_seen(list(zip(stamps, map(float, answered), strict=True)), due, 3, received)
    assert with_it.startswith(line)
    assert with_it.endswith(
        f"; executed + pending (the advisor's read): 100/s, cv {sent_cv:.2f}"
    ), with_it
    # metrics not read: no such fit
    assert traffic_seen(list(zip(stamps, map(float, answered), strict=True)), due, 3, []) == line
    # too few samples to fit: said, not raised
    assert traffic_seen([(0.0, 0.0), (1.0, 0.0)], due, 0).startswith("no traffic to compare: ")


def test_the_floor_judges_a_blind_copy_as_the_regret_bench_judges_a_pick(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.regret_floor import report

    # Three copies of one config: the blind pick read higher in the grid than a lucky copy,
    # and again head to head.
    pick = entry(0, "grid/pick", [5.0, 7.0], confirmed_ms=[6.6, 6.0])
    lucky = entry(0, "grid", [4.0, 5.0], confirmed_ms=[5.0, 5.4])
    other = entry(0, "grid", [6.0, 6.0])
    regret, confirmed = report([pick, lucky, other])
    assert regret == pytest.approx(6.0 / 4.5) and confirmed == pytest.approx(6.3 / 5.2)
    assert "grid regret 1.33" in capsys.readouterr().out
    # The pick the lowest: 1 both ways, with no more runs; a pair not run again is an error.
    assert report([entry(0, "grid/pick", [4.0]), other]) == (1.0, 1.0)
    with pytest.raises(ValueError, match="not run head to head"):
        report([entry(0, "grid/pick", [7.0]), other])


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--models", "ho_pair,nope"], "--models: unknown nope"),
        (["--rates", "1,fast"], "--rates '1,fast': a comma-separated list of factors"),
    ],
)
def test_the_regret_benches_refuse_unknown_models_and_rates_with_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--models", default="ho_pair")
    parser.add_argument("--rates", default="1")
    with pytest.raises(SystemExit) as exited:
        models_and_rates(parser, parser.parse_args(argv))
    assert exited.value.code == 2
    assert says in capsys.readouterr().err


def test_the_regret_benches_read_their_models_and_rate_factors() -> None:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--models", default="ho_pair,mlp_model")
    parser.add_argument("--rates", default="1,1.5")
    assert models_and_rates(parser, parser.parse_args([])) == (["ho_pair", "mlp_model"], [1.0, 1.5])
