"""``python -m bench.advisor_blind``: its arguments, what it derives from a model's config, and
its table's arithmetic on a real run's capture (``data/blind_capture.json``), with no Triton."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from advisor.config import BatcherConfig, from_model_config
from bench import advisor_blind
from bench.advisor_blind import AGAIN, OTHERS, PRESENT, Capture, Row
from stacksettings import ROOT
from tritonapi.modelconfig import from_proto, parse_pbtxt

CAPTURE = Path(__file__).parent / "data" / "blind_capture.json"
BLIND = ROOT / "bench" / "models" / "blind"


def error_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        advisor_blind.parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_every_model_folder_is_checked_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "give at least one MODEL_DIR" in error_of([], capsys)
    assert "not a model folder; give one holding config.pbtxt and 1/model.py" in error_of(
        [str(tmp_path)], capsys
    )
    bad = tmp_path / "bad"
    (bad / "1").mkdir(parents=True)
    (bad / "1" / "model.py").write_text("")
    (bad / "config.pbtxt").write_text("max_batch_size: [")
    assert "not a model config" in error_of([str(bad)], capsys)
    (bad / "config.pbtxt").write_text('name: "other"')
    assert "name 'other' is not the folder's ('bad')" in error_of([str(bad)], capsys)
    ids = str(BLIND / "bl_ids")
    assert "a second model named 'bl_ids'" in error_of([ids, ids], capsys)
    assert "give no MODEL_DIR" in error_of(["--table", str(CAPTURE), ids], capsys)
    assert "each share between 0 and 1" in error_of(["--busy", "0.5,1.2", ids], capsys)


def test_the_options_of_a_quick_run() -> None:
    args = advisor_blind.parse_args(["--quick", "--busy", "0.3,0.6", str(BLIND / "bl_text")])
    assert args.quick and args.busy == (0.3, 0.6) and args.max_rate == 2000.0
    assert args.models == [(BLIND / "bl_text").resolve()]
    assert advisor_blind.QUICK.window_s < advisor_blind.FULL.window_s


def test_the_load_and_the_configs_come_from_the_models_config() -> None:
    typed = from_proto(parse_pbtxt((BLIND / "bl_ids" / "config.pbtxt").read_text()))
    assert advisor_blind.input_options(typed, 12).shapes == (("IDS", (12,)),)
    served = from_model_config(typed)
    others = dict(advisor_blind.alternatives(served))
    assert list(others) == list(OTHERS)
    assert others["delay"] == BatcherConfig(32, (), 1000, 1)
    assert others["max batch"] == BatcherConfig(16, (), 0, 1)
    assert others["preferred"] == BatcherConfig(32, (8,), 0, 1)
    # Preferred sizes are dropped where there were some, and kept within a smaller max batch;
    # a model served without dynamic batching gets it for every other config.
    text = dict(advisor_blind.alternatives(BatcherConfig(16, (4, 8, 16), 400, 1)))
    assert text["preferred"].preferred_batch_sizes == ()
    assert text["max batch"].preferred_batch_sizes == (4, 8)
    off = advisor_blind.alternatives(BatcherConfig(4, (), 0, 1, dynamic_batching=False))
    assert all(c.dynamic_batching for _, c in off)


def test_a_config_is_written_into_the_copy_with_the_rest_kept() -> None:
    original = (BLIND / "bl_text" / "config.pbtxt").read_text()
    changed = BatcherConfig(8, (2,), 1600, 1)
    text = advisor_blind.with_config(original, changed, "bl_text")
    typed = from_proto(parse_pbtxt(text))
    assert from_model_config(typed) == changed
    assert [t.name for t in typed.inputs] == ["TEXT"]
    assert [t.name for t in typed.outputs] == ["SCORE", "TRIGRAMS"]
    assert typed.backend == "python"


def test_rates_keep_the_instances_busy_by_the_shares_below_the_cap() -> None:
    assert advisor_blind.rates_for(0.002, 2, (0.25, 0.5), 10_000) == [250.0, 500.0]
    # Past the cap they are scaled down alike, and stay apart.
    assert advisor_blind.rates_for(100e-6, 1, (0.35, 0.7), 2000) == [1000.0, 2000.0]


def within(simulated: float, measured: float, bound: float, floor: float = 0.0) -> bool:
    return abs(simulated - measured) <= bound * max(measured, floor)


def test_the_tables_shares_on_a_real_run() -> None:
    capture = Capture.from_json(json.loads(CAPTURE.read_text()))
    rows = capture.rows
    assert {r.which for r in rows} == {PRESENT, AGAIN, *OTHERS}
    present = [r for r in rows if r.which == PRESENT]
    others = [r for r in rows if r.which in OTHERS]
    # Each row's verdict, recomputed here: the present's batch and queue, the others' batch.
    expected_present = sum(
        within(r.batch[0], r.batch[1] or 0, 0.10)
        and within(r.queue_s[0], r.queue_s[1] or 0, 0.25, 20e-6)
        for r in present
    )
    expected_others = sum(within(r.batch[0], r.batch[1] or 0, 0.10) for r in others)
    text = advisor_blind.table(capture)
    found = re.search(r"present \(.*\): (\d+)/(\d+) points met", text)
    assert found is not None, text
    assert (int(found[1]), int(found[2])) == (expected_present, len(present))
    found = re.search(r"other configs \(.*\): (\d+)/(\d+) points met \((\d+)%\): (\S+)", text)
    assert found is not None, text
    assert (int(found[1]), int(found[2])) == (expected_others, len(others))
    assert found[4] == ("MET" if expected_others >= 0.8 * len(others) else "NOT")
    # The served config measured twice: the window's batch against the second run's.
    first = {(r.model, r.rate): r.batch[1] for r in present}
    again = [(first[(r.model, r.rate)], r.batch[1]) for r in rows if r.which == AGAIN]
    close = sum(within(b or 0, a or 0, 0.10) for a, b in again)
    found = re.search(r"second measurement .* average batch: (\d+)/(\d+) points", text)
    assert found is not None, text
    assert (int(found[1]), int(found[2])) == (close, len(again))
    assert f"{capture.load_start[0]:.2f}" in text and f"{capture.load_end[0]:.2f}" in text
    # One line per row, and a present that the check called off is shown as not met.
    assert sum(line.startswith(tuple({r.model for r in rows})) for line in text.splitlines()) == (
        len(rows)
    )


def test_a_point_without_a_measurement_is_not_met() -> None:
    row = Row("m", 100.0, "delay", "", (1.5, None), (1e-3, None), (None, None))
    assert not row.met


def test_the_table_is_printed_again_from_a_saved_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert advisor_blind.main(["--table", str(CAPTURE)]) == 0
    out = capsys.readouterr().out
    assert "points met" in out and "load average" in out
