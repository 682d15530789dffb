"""``batchscope SUBCOMMAND``: every tool of the stack under one command.

The first word names the command (``batchscope.commands.COMMANDS``); only that command's
module is imported, its parser built and the rest of the line parsed once. Every error a
command raises (``batchscope.base.CommandError``) becomes one line here.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from batchscope.base import PROG, CommandError, Parser
from batchscope.commands import COMMANDS


class _Versions(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help=kwargs.get("help"))  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from batchscope import versions  # asks the servers: only --version needs it

        print(versions.report())
        parser.exit()


def module_of(name: str) -> ModuleType:
    return importlib.import_module(COMMANDS[name].module)


def top_parser() -> tuple[Parser, argparse._SubParsersAction]:
    """``batchscope`` itself: ``--version`` and the subcommands' names (none is built)."""
    parser = Parser(
        prog=PROG,
        description="See what Triton's dynamic batcher really does: the stack, load runs, "
        "the doctor, the advisor, the exporter. `batchscope SUBCOMMAND --help` for each.",
    )
    parser.add_argument(
        "--version",
        action=_Versions,
        help="print the versions of the stack, Triton, Prometheus and Alertmanager",
    )
    action = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")
    return parser, action


def add_command(action: argparse._SubParsersAction, name: str) -> Parser:
    """Subcommand ``name`` under ``action``, with its module's flags."""
    module = module_of(name)
    parser: Parser = action.add_parser(
        name,
        help=COMMANDS[name].summary,
        description=getattr(module, "DESCRIPTION", None) or COMMANDS[name].summary,
    )
    module.add_arguments(parser)
    return parser


def full_parser() -> Parser:
    """Every command's parser under one: the CLI reference and the shell completion."""
    parser, action = top_parser()
    for name in COMMANDS:
        add_command(action, name)
    return parser


def parse(words: Sequence[str]) -> argparse.Namespace:
    """The one parse of a command line: ``batchscope`` alone, or one command's words."""
    parser, action = top_parser()
    if not words or words[0].startswith("-") or words[0] not in COMMANDS:
        for name, command in COMMANDS.items():
            action.add_parser(name, help=command.summary, add_help=False)
        parser.parse_args(words)  # --help, --version, or the error that names the problem
        raise CommandError("give a SUBCOMMAND", prog=PROG)  # pragma: no cover
    add_command(action, words[0])
    args, extra = parser.parse_known_args(words)
    if extra:
        raise CommandError(f"unrecognized arguments: {' '.join(extra)}", prog=args.command_prog)
    args.command_line = tuple(words)  # `up --detach` starts its supervisor with the same words
    return args


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    prog = PROG if not words else f"{PROG} {words[0]}"
    try:
        args = parse(words)
        prog = args.command_prog
        return int(module_of(words[0]).run(args))
    except CommandError as exc:
        print(exc.line(prog), file=sys.stderr)
        return exc.exit_code
