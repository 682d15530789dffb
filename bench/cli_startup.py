"""How long each command line takes to answer ``--help`` or refuse a bad flag: its start-up.

Every command a user types, and every one the test suite runs as a subprocess (the bad-input
tests alone run more than a hundred), first imports its modules; a refusal or a ``--help``
is all start-up. This times them side by side in one run, interleaved round by round, each
as a fresh ``python -m`` process:

- the bare interpreter (``python -c pass``), the floor;
- this working tree;
- with ``--against REV``, the same commands at another commit (a temporary git worktree,
  removed after), so a change's gain is a ratio measured on the same machine minutes apart.

    .venv/bin/python -m bench.cli_startup [--rounds 7] [--against REV]

It prints the median wall time per command and tree, and the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEAD_URL = "http://127.0.0.1:9"  # nothing listens: no command here reaches a server

COMMANDS: list[tuple[str, list[str]]] = [
    ("interpreter", ["-c", "pass"]),
    ("batchscope --help", ["-m", "batchscope", "--help"]),
    ("advise --help", ["-m", "batchscope", "advise", "--help"]),
    ("load --help", ["-m", "batchscope", "load", "--help"]),
    ("exporter --help", ["-m", "batchscope", "exporter", "--help"]),
    ("doctor bad flag", ["-m", "batchscope", "doctor", "--window", "0"]),
    (
        "predict bad flag",
        ["-m", "batchscope", "predict", "--service-us", "x", "--concurrency", "8"],
    ),
    ("load rate bad flag", ["-m", "batchscope", "load", "rate", "--url", DEAD_URL, "-r", "0"]),
    ("status --help", ["-m", "batchscope", "status", "--help"]),
    ("down --help", ["-m", "batchscope", "down", "--help"]),
]


def once(args: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        timeout=60,
    )
    return time.perf_counter() - start


def module_file(cwd: Path) -> str:
    """Which tree ``python -m`` imports from in ``cwd`` (the bench checks it is that one)."""
    out = subprocess.run(
        [sys.executable, "-c", "import stack; print(stack.__file__)"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


@contextlib.contextmanager
def worktree(rev: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", "--quiet", str(path), rev],
            cwd=ROOT,
            check=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, check=False
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs of each command per tree")
    parser.add_argument("--against", metavar="REV", help="also time the tree at this commit")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    with contextlib.ExitStack() as stack:
        trees = {"this tree": ROOT}
        if args.against:
            trees[args.against] = stack.enter_context(worktree(args.against))
        for name, path in trees.items():
            where = module_file(path)
            if not where.startswith(str(path)):
                print(f"{name}: python imports the project from {where}, not {path}")
                return 1
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for label, argv in COMMANDS:
                for name, path in trees.items():
                    times.setdefault((label, name), []).append(once(argv, path))
    names = list(trees)
    floor = statistics.median(times[("interpreter", "this tree")])
    head = ["command", *[f"{n} (ms)" for n in names]]
    if len(names) == 2:
        head.append(f"this tree / {names[1]}")
    head.append("this tree / interpreter")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for label, _ in COMMANDS:
        medians = [statistics.median(times[(label, n)]) for n in names]
        row = [label, *[f"{m * 1000:,.0f}" for m in medians]]
        if len(names) == 2:
            row.append(f"{medians[0] / medians[1]:.2f}")
        row.append(f"{medians[0] / floor:.1f}")
        print("| " + " | ".join(row) + " |")
    print(f"\n{args.rounds} rounds, interleaved; load average {_load():.1f}")
    return 0


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


if __name__ == "__main__":
    raise SystemExit(main())
