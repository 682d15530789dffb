"""The module seconds that order the groups under ``--dist loadgroup`` (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.module_seconds import deal_order, from_junit, group_seconds, load, module_of


def test_a_junit_classname_names_its_module_with_or_without_a_class() -> None:
    assert module_of("tests.advisor.test_autopilot") == "tests.advisor.test_autopilot"
    assert module_of("tests.loadgen.test_runs.TestExport") == "tests.loadgen.test_runs"


def test_a_group_is_the_sum_of_its_modules_and_an_unknown_module_counts_as_the_median() -> None:
    seconds = {"a": 10.0, "b": 30.0, "c": 100.0}
    groups = {"fleet": {"a", "b"}, "c": {"c"}, "new": {"d"}}
    assert group_seconds(groups, seconds) == {"fleet": 40.0, "c": 100.0, "new": 30.0}
    assert group_seconds({"new": {"d"}}, {}) == {"new": 0.0}


def test_the_seconds_add_up_per_module_from_a_real_junit_report(tmp_path: Path) -> None:
    """A real pytest run writes the report: one module with a class, one without."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_a.py").write_text(
        "import time\n"
        "def test_one():\n    time.sleep(0.2)\n"
        "class TestB:\n    def test_two(self):\n        time.sleep(0.3)\n"
    )
    (suite / "test_c.py").write_text("def test_three():\n    pass\n")
    report = tmp_path / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "--rootdir",
            str(tmp_path),
            str(suite),
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    seconds = from_junit(str(report))
    assert set(seconds) == {"suite.test_a", "suite.test_c"}
    assert 0.5 <= seconds["suite.test_a"] < 5 and seconds["suite.test_c"] < 0.5


def test_the_committed_file_names_test_modules_that_exist() -> None:
    """A renamed module leaves a stale name behind, and its new name would count as a median
    one: refresh the file (python -m tests.module_seconds JUNIT) when this fails."""
    root = Path(__file__).parent.parent
    missing = [m for m in load() if not (root / (m.replace(".", "/") + ".py")).exists()]
    assert load() and not missing, missing


def test_the_deal_puts_late_groups_behind_the_first_two_waves_and_solo_ones_last() -> None:
    longest_first = ["a", "b", "late1", "c", "d", "e", "f", "solo", "late2", "g"]
    order = deal_order(longest_first, {"solo"}, {"late1", "late2"}, workers=2)
    assert order == ["a", "b", "c", "d", "late1", "late2", "e", "f", "g", "solo"]
    # Fewer groups than two waves: the late ones still before the solo ones.
    assert deal_order(["late1", "a", "solo"], {"solo"}, {"late1"}, 4) == ["a", "late1", "solo"]


def test_the_autopilots_judgment_modules_are_dealt_late() -> None:
    """The two modules whose judgments failed beside each other share a group, dealt late."""
    from tests.autopilot import test_autopilot, test_autopilot_rescue

    for module in (test_autopilot, test_autopilot_rescue):
        marks = module.pytestmark if isinstance(module.pytestmark, list) else [module.pytestmark]
        assert "after_start" in [m.name for m in marks], module.__name__
        # One group: the two run in turn, never beside each other.
        groups = [m.args[0] for m in marks if m.name == "xdist_group"]
        assert groups == [test_autopilot.JUDGMENTS], module.__name__
