"""Every shell command the README and the manual show is one that runs.

Each fenced ``bash`` block of README.md and docs/ is split into simple commands. A
``batchscope`` command (and ``./stack/up``, which passes its flags to ``batchscope up``) is
parsed by batchscope's own parser, so an unknown subcommand or flag, or a bad value, fails
here as it would for a reader (exit 2). Those that need no server, load, GPU or
cluster are then run for real; the others run their ``--help``, in a subprocess, as typed.
Other tools (docker, kubectl, helm, ...) cannot run here: they must be on the list below,
and the files of this repository they name must exist.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from batchscope.base import CommandError
from batchscope.main import parse as parse_words

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.M | re.S)
ANY_BLOCK = re.compile(r"^```(\S*)\n", re.M)
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}
REDIRECTS = {">", ">>", "<", "2>", "&>"}
# Shell keywords whose line is a loop or a condition; the commands inside are checked.
KEYWORDS = {"for", "while", "if", "do", "done", "then", "fi"}
# Tools the manual may name that cannot run here (no Docker engine, no cluster, no
# registry); their commands are checked only for the repository files they name.
EXTERNAL = {"docker", "kubectl", "helm", "kustomize", "curl", "amtool", "promtool", "mkdocs"}
# batchscope subcommands that need no server, load, GPU or cluster: run for real. A
# subcommand that writes files runs only with --check.
RUNNABLE = {"check-config", "completion", "predict"}
CHECK_ONLY = {"render", "rules", "docs"}
REPO_PATH = re.compile(
    r"^(?:\$\{PWD\}/)?((?:deploy|model_repository|stack|tests|bench|docs)\b[^\s:]*)"
)


def commands(page: Path) -> list[tuple[Path, str]]:
    """(page, simple command) for every command line of the page's shell blocks."""
    found = []
    for block in SHELL_BLOCK.findall(page.read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            tokens = list(lexer)
            if tokens and tokens[0] in {"for", "while", "if"}:
                continue  # a loop's or a condition's head; its body's commands are checked
            words: list[str] = []
            for token in [*tokens, ";"]:
                if token in OPERATORS:
                    words = [w for w in words if w not in KEYWORDS]
                    if words:
                        found.append((page, shlex.join(words)))
                    words = []
                else:
                    words.append(token)
    return found


ALL = [c for page in PAGES for c in commands(page)]


def without_redirects(words: list[str]) -> list[str]:
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in REDIRECTS:
            skip = True
        else:
            kept.append(word)
    return kept


def parse(words: list[str]) -> tuple[int, str, list[str]]:
    """batchscope's parser on the words: (exit code, what it printed, the subcommand words
    at the front, ["load", "serial"]); 0 when it parsed."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            args = parse_words(words)
    except CommandError as exc:
        return exc.exit_code, str(exc), []
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0), out.getvalue(), []
    return 0, out.getvalue(), args.command_prog.split()[1:]


@cache
def run_batchscope(*words: str) -> subprocess.CompletedProcess[str]:
    """A batchscope command as typed (the same --help is run once for the whole module)."""
    return subprocess.run(
        [sys.executable, "-m", "batchscope", *words],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def check_batchscope(words: list[str]) -> None:
    code, printed, path = parse(words)
    assert code == 0, f"batchscope {shlex.join(words)}: exit {code}\n{printed}"
    top = path[0] if path else ""
    runnable = (
        not path
        or (top in RUNNABLE and "--triton-url" not in words)
        or (top in CHECK_ONLY and "--check" in words and "--serve" not in words)
    )
    done = run_batchscope(*(words if runnable else [*path, "--help"]))
    assert done.returncode == 0, f"batchscope {shlex.join(words)}: {done.stderr[-2000:]}"


def check(command: str) -> None:
    words = without_redirects(shlex.split(command))
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        words = words[1:]  # VAR=value before the command
    if not words:
        return  # a line that only sets variables
    first, rest = words[0], words[1:]
    if first == "batchscope":
        check_batchscope(rest)
    elif first == "./stack/up":
        check_batchscope(["up", *rest])
    elif first in ("./stack/test", "source", "cd"):
        target = rest[0] if first != "./stack/test" else "stack/test"
        assert (ROOT / target).exists(), f"{command}: {target} does not exist"
    elif first == "docker" and rest[:4] == ["compose", "run", "--rm", "loadgen"]:
        check_batchscope(["load", *rest[4:]])  # the image's loadgen service runs loadgen
    elif first in EXTERNAL:
        for word in rest:
            match = REPO_PATH.match(word)
            if match:
                assert (ROOT / match.group(1)).exists(), f"{command}: {match.group(1)} is missing"
    elif first.endswith("python") and rest[:3] == ["-m", "streamlit", "run"]:
        assert (ROOT / rest[3]).is_file(), command
    else:
        pytest.fail(f"unknown command {first!r} in {command!r}: spell it with batchscope")


def test_the_pages_have_shell_commands() -> None:
    pages = {page.name for page, _ in ALL}
    assert {"README.md", "quickstart.md", "load-runs.md", "advisor.md"} <= pages
    assert len(ALL) > 50


@pytest.mark.parametrize(("page", "command"), ALL, ids=[f"{p.name}:{c[:60]}" for p, c in ALL])
def test_documented_command_runs(page: Path, command: str) -> None:
    check(command)


def test_every_block_says_its_language() -> None:
    """A block without a language could hide commands from this test."""
    bare = []
    for page in PAGES:
        fence_open = False
        for match in ANY_BLOCK.finditer(page.read_text()):
            fence_open = not fence_open
            if fence_open and not match.group(1):
                bare.append(page.name)
    assert bare == []


@pytest.mark.parametrize(
    "command",
    [
        "batchscope load serial --no-such-flag",
        "batchscope nosuch",
        "batchscope advise --url http://x:8000 --p99-ms ten",
        "./stack/up --detach --no-such-flag",
        "triton-advisor advise --p99-ms 10",
        "docker compose run --rm loadgen serial --bogus",
    ],
)
def test_the_check_fails_on_what_a_reader_could_not_run(command: str) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        check(command)
