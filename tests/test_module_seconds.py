"""The module seconds that order the groups under ``--dist loadgroup`` (tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.module_seconds import from_junit, group_seconds, load, module_of


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


def test_the_deal_puts_after_start_modules_behind_the_first_two_waves(tmp_path: Path) -> None:
    """The order a worker collects under ``--dist loadgroup`` (a plugin sets the option a
    worker gets), for four workers: the autopilot's two modules of judgments behind the first eight
    groups, the `alone` tests last."""
    (tmp_path / "as_a_worker.py").write_text(
        "def pytest_configure(config):\n    config.option.loadgroup = True\n"
    )
    root = Path(__file__).parent.parent
    # Not the session's own options (PYTEST_ADDOPTS may name a plugin on its PYTHONPATH).
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "as_a_worker", "-p", "no:xdist"]
        + ["-p", "no:cacheprovider", "--collect-only", "-q", "tests"],
        cwd=root,
        env={**env, "PYTHONPATH": str(tmp_path), "PYTEST_XDIST_WORKER_COUNT": "4"},
        capture_output=True,
        text=True,
    )
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    modules = list(dict.fromkeys(i.split("::")[0] for i in ids))
    assert modules.index("tests/autopilot/test_autopilot.py") >= 8, modules[:12]
    assert modules.index("tests/autopilot/test_autopilot_rescue.py") >= 8, modules[:12]
    alone = [n for n, i in enumerate(ids) if "2000_per_s" in i or "test_pacing" in i]
    assert alone and min(alone) > max(n for n, i in enumerate(ids) if "test_autopilot.py" in i), (
        modules[-3:]
    )
