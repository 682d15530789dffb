"""``batchscope completion bash|zsh``: a completion script generated from every command's
parser (shtab), so a new flag completes without a change here."""

from __future__ import annotations

import argparse

from batchscope.main import full_parser

SHELLS = ("bash", "zsh")
DESCRIPTION = (
    "Print a completion script generated from these parsers (shtab). "
    "bash: `batchscope completion bash > ~/.local/share/bash-completion/completions/"
    'batchscope`; zsh: `batchscope completion zsh > "${fpath[1]}/_batchscope"`.'
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=SHELLS)


def script(shell: str) -> str:
    import shtab  # only this command needs it

    return str(shtab.complete(full_parser(), shell=shell))


def run(args: argparse.Namespace) -> int:
    print(script(args.shell))
    return 0
