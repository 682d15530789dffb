"""Validate every model of a Triton model repository before the server sees it.

Parsing uses the real ModelConfig protobuf that Triton itself uses
(:mod:`tritonapi.modelconfig`), so a syntax error is reported with the line and
column Triton would complain about. On top of the syntax, the batching rules a
config can break without Triton refusing it are checked. ``batchscope
check-config``, the launcher's ``up`` and the dashboard's config view run these.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonapi.client import TritonClient
from tritonapi.modelconfig import (
    ModelConfig,
    ParseError,
    from_proto,
    parse_json,
    parse_pbtxt,
    to_dict,
)

ERROR = "error"
WARNING = "warning"

Add = Callable[..., None]  # add(message, severity=ERROR): records one finding


@dataclass(frozen=True)
class Finding:
    model: str
    path: Path | str  # a config.pbtxt, or the URL a running Triton serves the config at
    severity: str
    message: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = str(self.path)
        if self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        return f"{where}: {self.severity}: {self.message}"


@dataclass
class ModelCheck:
    name: str
    folder: Path | str  # the model's folder, or its URL on a running Triton
    config: ModelConfig | None
    findings: list[Finding]
    # The file as protobuf JSON (field names as written), for display; empty if it does not parse.
    parsed: dict[str, Any] = field(default_factory=dict)


def check_model(folder: Path) -> ModelCheck:
    name = folder.name
    path = folder / "config.pbtxt"
    found: list[Finding] = []

    def add(message: str, severity: str = ERROR, **where: int | None) -> None:
        found.append(Finding(name, path, severity, message, **where))

    if not path.is_file():
        add(
            "config.pbtxt is missing: every model folder needs one (Triton's auto-complete "
            "is not used by this stack)"
        )
        return ModelCheck(name, folder, None, found)
    try:
        message = parse_pbtxt(path.read_text())
    except ParseError as exc:
        add(_parse_message(exc), line=exc.GetLine(), column=exc.GetColumn())
        return ModelCheck(name, folder, None, found)
    config = from_proto(message)

    if config.name and config.name != name:
        add(
            f'name "{config.name}" does not match the folder name "{name}": Triton refuses '
            "to load it; rename one of them"
        )
    _check_batching(config, add)
    _check_versions(folder, config, add)
    return ModelCheck(name, folder, config, found, to_dict(message))


def _parse_message(exc: ParseError) -> str:
    # "3:50 : 'text': Value out of range: -5" -> the part after the position.
    message = re.sub(r"^\d+:\d+ : ", "", str(exc))
    if "Value out of range: -" in message:
        return (
            f"negative value ({message}): delays, timeouts and sizes "
            "cannot be negative; use 0 or more"
        )
    return f"syntax error: {message}"


def _check_batching(config: ModelConfig, add: Add) -> None:
    mbs = config.max_batch_size
    if mbs < 0:
        add(f"max_batch_size is {mbs}: use 0 (no batching) or a positive size")
    dyn = config.dynamic
    if dyn is None:
        return
    if mbs == 0:
        add(
            "dynamic_batching is set but max_batch_size is 0: the batcher can never form a "
            "batch; set max_batch_size > 0 or remove dynamic_batching"
        )
    preferred = list(dyn.preferred_batch_size)
    bad = [p for p in preferred if p <= 0]
    if bad:
        add(f"preferred_batch_size {bad} must be positive")
    if mbs > 0 and preferred and max(preferred) > mbs:
        add(
            f"preferred_batch_size {max(preferred)} is larger than max_batch_size {mbs}: "
            "a preferred size above the maximum can never form; lower it or raise "
            "max_batch_size"
        )
    if len(set(preferred)) != len(preferred):
        add(f"preferred_batch_size {preferred} lists a size twice", WARNING)
    if mbs == 1:
        add("max_batch_size is 1: dynamic batching cannot merge requests", WARNING)


def _check_versions(folder: Path, config: ModelConfig, add: Add) -> None:
    versions = sorted(p for p in folder.iterdir() if p.is_dir() and p.name.isdigit())
    if not versions:
        add(f"no version folder (e.g. {folder.name}/1/): Triton has nothing to load")
        return
    if config.backend == "python":
        filename = config.default_model_filename or "model.py"
        for version in versions:
            if not (version / filename).is_file():
                add(f"{version.name}/{filename} is missing: the python backend needs it")


def check_repository(repository: Path) -> list[ModelCheck]:
    if not repository.is_dir():
        raise FileNotFoundError(f"model repository {repository} does not exist")
    return [
        check_model(folder)
        for folder in sorted(repository.iterdir())
        if folder.is_dir() and not folder.name.startswith((".", "_"))
    ]


def errors(checks: list[ModelCheck]) -> list[Finding]:
    return [f for c in checks for f in c.findings if f.severity == ERROR]


def check_served(url: str, name: str, payload: Any) -> ModelCheck:
    """The batching checks on the configuration a running Triton serves
    (``GET /v2/models/<name>/config``): for a server whose repository is not on this machine."""
    path = f"{url}/v2/models/{name}/config"
    found: list[Finding] = []

    def add(message: str, severity: str = ERROR, **where: int | None) -> None:
        found.append(Finding(name, path, severity, message, **where))

    try:
        config = parse_json(payload)
    except ValueError as exc:
        add(f"the served config does not parse: {exc}")
        return ModelCheck(name, f"{url}/v2/models/{name}", None, found)
    _check_batching(config, add)
    parsed = payload if isinstance(payload, dict) else {}
    return ModelCheck(name, f"{url}/v2/models/{name}", config, found, parsed)


def check_server(client: TritonClient, timeout_s: float = 5.0) -> list[ModelCheck]:
    """:func:`check_served` for every model a running Triton has loaded (its statistics API
    lists them, and is open where the repository index may be restricted). TritonError when
    the server does not answer."""
    return [
        check_served(client.url, name, client.model_config_json(name, timeout_s=timeout_s))
        for name in client.served_models(timeout_s)
    ]
