"""The seconds each test module took in a whole run, which ``--dist loadgroup`` uses to start
the longest modules first (tests/conftest.py): a long module dealt out last keeps one worker
busy after the others ran out of work.

Refresh it from a run's JUnit report (the figures only order the modules, so an old file
slows the suite at worst; a module missing from it counts as a middling one)::

    ./stack/test --junitxml=/tmp/junit.xml -n 4 --dist loadgroup
    .venv/bin/python -m tests.module_seconds /tmp/junit.xml > tests/module_seconds.json
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

FILE = Path(__file__).with_name("module_seconds.json")


def module_of(classname: str) -> str:
    """``tests.pkg.test_mod`` from a JUnit classname, which ends in the test's class if any."""
    return ".".join(part for part in classname.split(".") if not part[:1].isupper())


def from_junit(path: str) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for case in ET.parse(path).iter("testcase"):
        module = module_of(case.get("classname", ""))
        seconds[module] = seconds.get(module, 0.0) + float(case.get("time", 0))
    return {module: round(s, 1) for module, s in sorted(seconds.items())}


def load() -> dict[str, float]:
    return json.loads(FILE.read_text()) if FILE.exists() else {}


def group_seconds(groups: dict[str, set[str]], seconds: dict[str, float]) -> dict[str, float]:
    """Each xdist group's seconds: the sum of its modules', a module not in ``seconds``
    taken as the median module."""
    typical = statistics.median(seconds.values()) if seconds else 0.0
    return {
        group: sum(seconds.get(module, typical) for module in modules)
        for group, modules in groups.items()
    }


def deal_order(longest_first: list[str], solo: set[str], late: set[str], workers: int) -> list[str]:
    """The order xdist is handed the groups in: longest first, the groups in ``late`` after
    the first two waves, the groups in ``solo`` (an ``alone`` test each) last.

    xdist deals each worker one group, then the next in line as its group nears its end, so
    the first ``workers`` groups start together, while every worker boots its session stack
    and Chromium. A module marked ``after_start`` judges latency in windows that boot would
    spoil. An ``alone`` test waits for every test running beside it, and every worker that
    asks for its next test waits behind it (the turnstile): dealt among the long modules it
    idled the other workers for as long as the longest test then running; dealt last, it
    waits only for the short modules that end the session (docs/validation/suite-time.md)."""
    rest = [g for g in longest_first if g not in solo]
    early = [g for g in rest if g not in late]
    cut = 2 * workers
    return (
        early[:cut]
        + [g for g in rest if g in late]
        + early[cut:]
        + [g for g in longest_first if g in solo]
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.module_seconds JUNIT_XML > tests/module_seconds.json")
    print(json.dumps(from_junit(sys.argv[1]), indent=1))
