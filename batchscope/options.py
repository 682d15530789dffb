"""The flags several commands take, declared once so each means the same everywhere.

``-m/--model`` a model's name (checked as Triton names), ``--url`` Triton's HTTP endpoint,
``--metrics-url`` Triton's /metrics, ``--db`` the load-run store, ``--json`` machine-readable
output. A command adds the ones it takes; only the help's default and whether the flag is
required differ. A command that spelled one otherwise keeps that spelling as an alias only
where compose, Kubernetes or the stack pass it (the exporter's ``--triton-url``).
"""

from __future__ import annotations

import argparse
from typing import Any

from tritonapi.modelname import model_name

Adder = argparse.ArgumentParser | argparse._ArgumentGroup


def add_model(parser: Adder, help: str, required: bool = False, default: Any = None) -> None:
    parser.add_argument(
        "-m", "--model", type=model_name, required=required, default=default, help=help
    )


def add_url(parser: Adder, help: str, *aliases: str, default: Any = None, **kwargs: Any) -> None:
    """``--url``, Triton's HTTP endpoint (``aliases``: a command's older spelling)."""
    parser.add_argument("--url", *aliases, default=default, help=help, **kwargs)


def add_metrics_url(parser: Adder, help: str, *aliases: str, **kwargs: Any) -> None:
    """``--metrics-url``, Triton's /metrics."""
    parser.add_argument("--metrics-url", *aliases, help=help, **kwargs)


def add_db(
    parser: Adder, help: str = "", *aliases: str, default: Any = None, **kwargs: Any
) -> None:
    """``--db``, the load-run store."""
    parser.add_argument(
        "--db", *aliases, default=default, help=help or "the load-run store (LOADGEN_DB)", **kwargs
    )


def add_json(parser: Adder, help: str = "machine-readable output") -> None:
    parser.add_argument("--json", action="store_true", help=help)
