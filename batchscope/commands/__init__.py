"""The subcommands of ``batchscope``: for each, the module that builds and runs it, and the
one line ``batchscope --help`` shows.

``--help`` and the dispatch read this table without importing any command, so a TAB or a
``--help`` stays fast. Each module has ``add_arguments(parser)``, which declares its flags
(and its own subcommands), and ``run(args) -> int``, which turns them into the package's
call; ``batchscope.main`` parses a command line once, with that parser.
"""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    module: str
    summary: str


def _in(name: str) -> str:
    return f"batchscope.commands.{name}"


COMMANDS: dict[str, Command] = {
    "up": Command(_in("up"), "start every service, wait until healthy"),
    "down": Command(_in("down"), "stop a detached stack"),
    "restart": Command(_in("restart"), "stop one service and start it again, wait until healthy"),
    "secrets": Command(
        _in("secrets"),
        "make Triton's admin key, the dashboard token and Alertmanager's password (mode 0600) "
        "if missing; compose and `up --expose` use them",
    ),
    "status": Command(_in("status"), "each service, pid, URL, health"),
    "check-config": Command(
        _in("check_config"),
        "validate every model's config.pbtxt, or with --triton-url the configs a running "
        "Triton serves (exit 2 on errors)",
    ),
    "trace": Command(
        _in("trace"), "trace a model's next requests in Triton (the batch timeline's data)"
    ),
    "rules": Command(
        _in("rules"),
        "generate the Prometheus rules and Alertmanager config from the settings file",
    ),
    "render": Command(
        _in("render"), "generate the compose and Kubernetes configs (deploy/) from the local ones"
    ),
    "doctor": Command(
        _in("doctor"),
        "why isn't batching working? the troubleshooting guide's checks on a live server",
    ),
    "load": Command(
        _in("load"),
        "load runs and their store: serial, concurrent, concurrency, rate, steps, compare, "
        "runs, show, export, merge, prune, capacity, import, sequences, priorities",
    ),
    "advise": Command(
        _in("advise"), "predict and recommend from a running Triton or a stored load run"
    ),
    "autopilot": Command(
        _in("autopilot"),
        "watch a live model's traffic, re-advise when it shifts, apply within a policy",
    ),
    "predict": Command(_in("predict"), "predict one config, no server"),
    "exporter": Command(_in("exporter"), "run the Prometheus exporter alone"),
    "docs": Command(
        _in("docs"),
        "regenerate the manual's reference pages (CLI, metrics, alerts) from the code, or "
        "check them, or serve the manual locally",
    ),
    "completion": Command(_in("completion"), "print the shell completion script (bash or zsh)"),
}
