"""bench/present_replay.py on a real saved blind run: it reads back what each check was
given, and under the run's own setting does every check and prediction again exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.advisor_blind import PRESENT, Inputs
from bench.present_replay import main, replay, replay_point, setting

DATA = Path(__file__).parent / "data"
# bench.advisor_blind --quick --probe --save on bench/models/add_sleep (2026-12-07), made with
# the clustering fit only where the present is off (trigger 0.5) and the search on 10,000
# requests: the setting under which replaying it must give its own rows back.
RUN = DATA / "blind_replay.json"
TRIGGER, WIDE = 0.5, False


def rows() -> list[dict[str, Any]]:
    return json.loads(RUN.read_text())["rows"]


def test_a_checks_inputs_read_back_as_they_were_saved() -> None:
    presents = [r for r in rows() if r["which"] == PRESENT]
    assert len(presents) == 3
    for r in presents:
        i = Inputs.decode(r["inputs"])
        assert Inputs.decode(json.loads(json.dumps(i.to_json()))) == i
        assert i.measured.avg_batch == pytest.approx(r["batch"][1])


def test_the_runs_own_setting_gives_its_rows_back() -> None:
    saved = {(r["rate"], r["which"]): r for r in rows()}
    with setting(TRIGGER, WIDE):
        for r in rows():
            if r["which"] != PRESENT:
                continue
            point = replay_point(r, search_requests=0)
            assert point.check.figure("average batch").simulated == r["batch"][0]
            assert point.check.figure("mean queue").simulated == r["queue_s"][0]
            for which, batch in point.predicted.items():
                assert batch == saved[(r["rate"], which)]["batch"][0], which


def test_the_tally_counts_what_the_blind_bench_counted() -> None:
    # The run's own table: present 3/3, other configs 5/9.
    tally = replay(rows(), TRIGGER, 0, WIDE)
    assert (tally.present_met, tally.points) == (3, 3)
    assert (tally.others_met, tally.others) == (5, 9)
    assert tally.simulations > 3  # at least the quick search's ends, per point


def test_a_run_saved_without_inputs_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        main([str(DATA / "blind_capture.json")])
    assert stop.value.code == 2
    (line,) = [ln for ln in capsys.readouterr().err.splitlines() if "error:" in ln]
    assert "carry no check inputs" in line and "--save" in line
