"""Every subcommand, and every subcommand of one, given a bad value: exactly one line on
stderr, ``batchscope SUBCOMMAND: error: MESSAGE (see 'batchscope SUBCOMMAND --help')``, and
exit 2, with no usage block before it.

The commands come from batchscope's own table (``batchscope.commands.COMMANDS``) through
the parsers it builds, so a command added there is tried here the day it is added.
"""

from __future__ import annotations

import argparse

import pytest

from batchscope.base import CommandError
from batchscope.commands import COMMANDS
from batchscope.main import full_parser, main, parse

BAD = "not-a-value"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def every_command() -> list[tuple[list[str], argparse.ArgumentParser]]:
    """(the words that name it, its parser) for each command and nested command."""
    found = []

    def walk(words: list[str], parser: argparse.ArgumentParser) -> None:
        found.append((words, parser))
        for name, sub in subcommands(parser).items():
            walk([*words, name], sub)

    for name, parser in subcommands(full_parser()).items():
        walk([name], parser)
    return found


def bad_value(parser: argparse.ArgumentParser) -> list[str]:
    """A value the parser refuses: a choice it lacks or a word where a number goes; else,
    for a command that checks no value while parsing, a word or a flag it does not take."""
    positional = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return [BAD]  # an unknown subcommand
        if action.choices is not None:
            return [action.option_strings[0], BAD] if action.option_strings else [BAD]
        if action.type in (int, float):
            return [action.option_strings[0], BAD] if action.option_strings else [BAD]
        positional = positional or not action.option_strings
    # A positional takes any word (a service's or a file's name, checked when it runs).
    return [f"--{BAD}"] if positional else [BAD]


CASES = [(words, bad_value(parser)) for words, parser in every_command()]


def test_every_command_of_the_table_is_tried() -> None:
    tried = {words[0] for words, _ in CASES}
    assert tried == set(COMMANDS)
    nested = {" ".join(words) for words, _ in CASES if len(words) > 1}
    assert {"load serial", "load compare", "load sequences", "load priorities"} <= nested


@pytest.mark.parametrize(("words", "bad"), CASES, ids=[" ".join([*w, *b]) for w, b in CASES])
def test_a_bad_value_is_one_line_and_exit_2(
    words: list[str], bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    prog = " ".join(["batchscope", *words])
    # Refused while parsing: nothing below runs (no stack starts, no load is sent).
    with pytest.raises(CommandError):
        parse([*words, *bad])
    assert main([*words, *bad]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"{prog}: error: "), line
    assert line.endswith(f" (see '{prog} --help')"), line
    assert "usage:" not in captured.err
