"""batchscope: one command over every tool, typed as a user types it (subprocess).

The subcommands are those of the table in batchscope/commands/; these tests compare the
help with that table and with the commands' own parsers rather than with a list written
here, so a subcommand added there is checked too.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchscope.commands import COMMANDS, Command
from batchscope.main import full_parser, parse

ROOT = Path(__file__).resolve().parents[2]
BATCHSCOPE = [sys.executable, "-m", "batchscope"]
SCRIPT = Path(sys.executable).parent / "batchscope"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*BATCHSCOPE, *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )


def listed(help_text: str) -> set[str]:
    """The subcommand names argparse lists under a usage's SUBCOMMAND/COMMAND heading."""
    names = set()
    for line in help_text.splitlines():
        words = line.split()
        if line.startswith("    ") and not line.startswith("     ") and words:
            names.add(words[0])
    return names


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands by name, in their order (none: empty)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_help_lists_every_subcommand_of_the_table() -> None:
    done = run("--help")
    assert done.returncode == 0, done.stderr
    assert listed(done.stdout) == set(COMMANDS)
    assert list(subcommands(full_parser())) == list(COMMANDS)
    # The subcommands of subcommands are named too (load's, in its summary).
    text = " ".join(done.stdout.split()) + " "
    for name, command in subcommands(full_parser()).items():
        for nested in subcommands(command):
            assert f" {nested}," in text or f" {nested} " in text, f"{name} {nested}"


def test_load_lists_every_load_subcommand_with_sequences_and_priorities() -> None:
    done = run("load", "--help")
    assert done.returncode == 0, done.stderr
    expected = set(subcommands(subcommands(full_parser())["load"]))
    assert {"serial", "compare", "merge", "sequences", "priorities"} <= expected
    assert listed(done.stdout) == expected


def test_the_console_script_is_installed_and_answers() -> None:
    done = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: batchscope ")


@pytest.mark.parametrize(
    ("words", "prog"),
    [
        (["up"], "batchscope up"),
        (["doctor"], "batchscope doctor"),
        (["load", "serial"], "batchscope load serial"),
        (["load", "sequences"], "batchscope load sequences"),
        (["load", "priorities"], "batchscope load priorities"),
        (["advise"], "batchscope advise"),
        (["predict"], "batchscope predict"),
        (["exporter"], "batchscope exporter"),
    ],
)
def test_each_subcommand_help_names_the_command_typed(words: list[str], prog: str) -> None:
    done = run(*words, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {prog} ")


def test_a_flag_of_the_command_shows_in_its_help() -> None:
    """Every option of the exporter command's parser is in `batchscope exporter --help`."""
    ours = run("exporter", "--help").stdout
    theirs = subcommands(full_parser())["exporter"]
    for action in theirs._actions:
        for option in action.option_strings:
            assert option in ours


@pytest.mark.parametrize(
    "words",
    [
        ["nosuch"],
        ["load", "nosuch"],
        ["load", "serial", "--no-such-flag"],
        ["up", "--no-such-flag"],
        ["advise", "--no-such-flag"],
        ["exporter", "--no-such-flag"],
    ],
)
def test_an_unknown_command_or_flag_is_usage_error_2(words: list[str]) -> None:
    done = run(*words)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "error:" in line and line.startswith("batchscope")
    assert "Traceback" not in done.stderr


def test_a_command_added_to_the_table_appears_without_a_change_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = Command("batchscope.commands.render", "added by another change")
    monkeypatch.setitem(COMMANDS, "extra-command", extra)
    assert "extra-command" in subcommands(full_parser())
    args = parse(["extra-command", "--check"])
    assert args.check is True and args.command_prog == "batchscope extra-command"


def test_the_script_and_python_m_batchscope_print_the_same() -> None:
    ours = run("check-config")
    theirs = subprocess.run(
        [str(SCRIPT), "check-config"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert (ours.returncode, ours.stdout, ours.stderr) == (
        theirs.returncode,
        theirs.stdout,
        theirs.stderr,
    )
    assert ours.returncode == 0 and "OK" in ours.stdout


def test_predict_gives_the_same_from_the_script() -> None:
    words = [
        "predict",
        "--max-batch-size",
        "8",
        "--delay-us",
        "500",
        "--service-us",
        "450,47",
        "--concurrency",
        "4",
        "--calibration",
        "tests/advisor/data/calibration.json",
    ]
    ours = run(*words)
    theirs = subprocess.run(
        [str(SCRIPT), *words],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert ours.returncode == theirs.returncode == 0, ours.stderr + theirs.stderr
    assert ours.stdout == theirs.stdout and ours.stdout


@pytest.mark.parametrize("module", ["stack", "loadgen", "advisor", "exporter"])
def test_batchscope_is_the_only_entry_point(module: str) -> None:
    """The tools' own `python -m` mains are gone: one command, one way to type it."""
    done = subprocess.run(
        [sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and "cannot be directly executed" in done.stderr, done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "batchscope", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith("usage: batchscope "), done.stderr


def test_stack_up_passes_its_flags_to_batchscope_up() -> None:
    env = {**os.environ, "STACK_TRITON_VENV": os.environ.get("STACK_TRITON_VENV", "")}
    env = {k: v for k, v in env.items() if v}
    done = subprocess.run(
        [str(ROOT / "stack" / "up"), "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "usage: batchscope up " in done.stdout


def versions(env: dict[str, str]) -> dict[str, str]:
    done = run("--version", env=env)
    assert done.returncode == 0, done.stderr
    return {line[:13].strip(): line[13:] for line in done.stdout.splitlines()}


def first_line(*command: str) -> str:
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=60)
    return (done.stdout or done.stderr).splitlines()[0]


def test_version_names_the_servers_binaries_say(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "STACK_TRITON_HTTP_PORT": "9",  # discard: nothing answers HTTP there
        "STACK_TRITON_VENV": str(tmp_path / "no-venv"),
    }
    found = versions(env)
    assert list(found) == ["batchscope", "Triton", "Prometheus", "Alertmanager"]
    assert found["batchscope"] == __import__("importlib.metadata").metadata.version(
        "triton-batchscope"
    )
    assert found["Prometheus"] == first_line("prometheus", "--version")
    assert found["Alertmanager"] == first_line("prometheus-alertmanager", "--version")
    assert found["Triton"].startswith("not found")


def test_version_says_not_found_for_what_is_absent(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PATH": str(tmp_path),  # no prometheus, no alertmanager
        "STACK_TRITON_HTTP_PORT": "9",
        "STACK_TRITON_VENV": str(tmp_path / "no-venv"),
    }
    found = versions(env)
    assert found["Prometheus"] == "not found"
    assert found["Alertmanager"] == "not found"
    assert found["Triton"].startswith("not found")


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_completion_scripts_parse_and_know_the_subcommands(shell: str, tmp_path: Path) -> None:
    done = run("completion", shell)
    assert done.returncode == 0, done.stderr
    script = tmp_path / f"batchscope.{shell}"
    script.write_text(done.stdout)
    syntax = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    for word in ("check-config", "load", "advise", "--detach", "--p99-ms", "sequences"):
        assert word in done.stdout


def test_bash_completion_completes_a_subcommand_and_a_flag(tmp_path: Path) -> None:
    script = tmp_path / "batchscope.bash"
    script.write_text(run("completion", "bash").stdout)
    probe = (
        f"source {script}\n"
        'complete_words() { COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ));'
        ' COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=();'
        " _shtab_batchscope; printf '%s\\n' \"${COMPREPLY[@]}\"; }\n"
        "complete_words batchscope che\n"
        "echo --\n"
        "complete_words batchscope up --det\n"
    )
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60)
    first, _, second = done.stdout.partition("--\n")
    assert first.split() == ["check-config"], done.stderr
    assert second.split() == ["--detach"], done.stderr
