"""The parser every command builds on, and the one error every command raises.

A bad flag or value, and a user's mistake found later by a command, is a ``CommandError``;
``batchscope.main`` turns it into one line on stderr, ``batchscope SUBCOMMAND: error:
MESSAGE``, and its exit status (2 for misuse, with where to read more). No command prints
its own error line, and no usage block is printed before it.
"""

from __future__ import annotations

import argparse
from typing import NoReturn

PROG = "batchscope"


class CommandError(Exception):
    """One line for the user and an exit status (2: misuse of the command)."""

    def __init__(self, message: str, exit_code: int = 2, prog: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.prog = prog

    def line(self, prog: str) -> str:
        """The error line (one per problem when a message lists several, a policy's)."""
        where = self.prog or prog
        text = "\n".join(f"{where}: error: {line}" for line in str(self).splitlines())
        return f"{text} (see '{where} --help')" if self.exit_code == 2 else text


class Parser(argparse.ArgumentParser):
    """argparse, with errors raised as ``CommandError`` (no usage block, no exit here)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        # The deepest parser that parsed a command line names it in the error line:
        # a subparser's defaults are set on the namespace after its parent's.
        self.set_defaults(command_prog=self.prog)

    def error(self, message: str) -> NoReturn:
        raise CommandError(message, prog=self.prog)
