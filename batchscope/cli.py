"""``batchscope SUBCOMMAND``: every tool of the stack under one command.

Each subcommand is the argument parser of the tool that runs it, mounted as it is:
``stack.cli`` (up, down, status, doctor, ...), ``loadgen.cli`` with ``loadgen.sequences``
and ``loadgen.priorities`` (``load ...``), ``advisor.cli`` (advise, predict) and
``exporter.cli`` (``exporter``). Flags are defined once, in the tool; a flag or a
subcommand added there appears here, in ``--help``, in the shell completion and in the
generated CLI reference without a change to this file. batchscope parses the whole command
line first (so usage lines and errors name ``batchscope ...``), then hands the words after
the subcommand to that tool's ``main()``, which parses them again and runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from advisor import cli as advisor_cli
from batchscope import docgen, versions
from exporter import cli as exporter_cli
from loadgen import cli as loadgen_cli
from loadgen import priorities, sequences
from stack import cli as stack_cli

PROG = "batchscope"
SHELLS = ("bash", "zsh")

Main = Callable[[list[str]], int]


@dataclass(frozen=True)
class Mount:
    """One subcommand of batchscope: the tool's parser and how to run the tool."""

    name: str
    help: str
    parser: argparse.ArgumentParser
    run: Main


def subcommands_of(
    parser: argparse.ArgumentParser,
) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """A parser's subcommands as {name: (help, parser)}, in their order."""
    action = _subparsers_action(parser)
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {name: (helps.get(name, ""), sub) for name, sub in action.choices.items()}


def _subparsers_action(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise ValueError(f"{parser.prog} has no subcommands")


def _mount(
    action: argparse._SubParsersAction, name: str, help_text: str, parser: argparse.ArgumentParser
) -> None:
    """Put an existing parser under ``action`` as subcommand ``name``.

    argparse's ``add_parser`` only makes new parsers; this does what it does with one
    that exists (the tool's own), so its flags are not copied and cannot drift.
    """
    if name in action.choices:
        raise ValueError(f"two tools define the subcommand {name!r}")
    action.choices[name] = parser
    action._choices_actions.append(action._ChoicesPseudoAction(name, (), help_text))


def retitle(parser: argparse.ArgumentParser, prog: str) -> None:
    """Name a mounted parser and its own subcommands after the command a user types."""
    parser.prog = prog
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action._prog_prefix = prog
            for name, sub in action.choices.items():
                retitle(sub, f"{prog} {name}")


def _stack_mounts() -> list[Mount]:
    def runner(name: str) -> Main:
        return lambda rest: stack_cli.main([name, *rest])

    return [
        Mount(name, text, sub, runner(name))
        for name, (text, sub) in subcommands_of(stack_cli.build_parser()).items()
    ]


def _advisor_mounts() -> list[Mount]:
    def runner(name: str) -> Main:
        return lambda rest: advisor_cli.main([name, *rest])

    return [
        Mount(name, text, sub, runner(name))
        for name, (text, sub) in subcommands_of(advisor_cli.build_parser()).items()
    ]


# `load sequences` and `load priorities` are modules of their own with their own main().
LOAD_MODULES: dict[str, tuple[Callable[[], argparse.ArgumentParser], Main]] = {
    "sequences": (sequences.build_parser, sequences.main),
    "priorities": (priorities.build_parser, priorities.main),
}


def _load_mount() -> Mount:
    parser = loadgen_cli.build_parser()
    action = _subparsers_action(parser)
    for name, (build, _) in LOAD_MODULES.items():
        sub = build()
        _mount(action, name, sub.description or "", sub)

    def run(rest: list[str]) -> int:
        if rest and rest[0] in LOAD_MODULES:
            return LOAD_MODULES[rest[0]][1](rest[1:])
        return loadgen_cli.main(rest)

    return Mount("load", "load runs and their store (python -m loadgen)", parser, run)


def _exporter_mount() -> Mount:
    parser = exporter_cli.build_parser()
    return Mount("exporter", "run the Prometheus exporter alone", parser, exporter_cli.main)


def _docs_mount() -> Mount:
    parser = docgen.build_parser()
    return Mount("docs", parser.description or "", parser, docgen.main)


def mounts() -> list[Mount]:
    return [
        *_stack_mounts(),
        _load_mount(),
        *_advisor_mounts(),
        _exporter_mount(),
        _docs_mount(),
    ]


class _Versions(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help=kwargs.get("help"))  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(versions.report())
        parser.exit()


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, Mount]]:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="See what Triton's dynamic batcher really does: the stack, load runs, "
        "the doctor, the advisor, the exporter. `batchscope SUBCOMMAND --help` for each.",
    )
    parser.add_argument(
        "--version",
        action=_Versions,
        help="print the versions of the stack, Triton, Prometheus and Alertmanager",
    )
    # Not "command": the mounted parsers use that dest for their own subcommands.
    action = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    table = {}
    for mount in mounts():
        retitle(mount.parser, f"{PROG} {mount.name}")
        _mount(action, mount.name, mount.help, mount.parser)
        table[mount.name] = mount
    completion = action.add_parser(
        "completion",
        help="print the shell completion script (bash or zsh)",
        description="Print a completion script generated from these parsers (shtab). "
        "bash: `batchscope completion bash > ~/.local/share/bash-completion/completions/"
        'batchscope`; zsh: `batchscope completion zsh > "${fpath[1]}/_batchscope"`.',
    )
    completion.add_argument("shell", choices=SHELLS)
    # Every subcommand in one --help: the nested ones (load's) are named here too.
    nested = [
        f"`{PROG} {m.name}` {', '.join(subcommands_of(m.parser))}"
        for m in table.values()
        if any(isinstance(a, argparse._SubParsersAction) for a in m.parser._actions)
    ]
    parser.epilog = "Subcommands of subcommands: " + "; ".join(nested) + "."
    return parser, table


def completion_script(shell: str) -> str:
    import shtab  # only this subcommand needs it

    parser, _ = build_parser()
    return str(shtab.complete(parser, shell=shell))


def innermost(parser: argparse.ArgumentParser, words: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the deepest subcommand named at the front of ``words``."""
    for word in words:
        action = next(
            (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        if action is None or word not in action.choices:
            break
        parser = action.choices[word]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser, table = build_parser()
    args, extra = parser.parse_known_args(words)
    if extra:
        # argparse leaves them to the top level; the usage shown is the subcommand's.
        innermost(parser, words).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.subcommand == "completion":
        print(completion_script(args.shell))
        return 0
    # The top level takes no option with a value, so the subcommand is the first word; the
    # tool parses its own words again: its main() is the one that runs.
    return table[args.subcommand].run(words[words.index(args.subcommand) + 1 :])
