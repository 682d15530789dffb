"""Shared by the benchmarks: a private stack over a chosen model repository.

Started with the launcher's own code on free ports, like the tests, so what is
measured is what `./stack/up` runs. Only the services a benchmark names start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from advisor.config import BatcherConfig
from autopilot import verify
from stack.supervisor import running
from stacksettings import ROOT, Settings, isolated
from tritonapi.client import TritonClient, TritonError

MODEL = "batch_add_model"


def repository(folder: Path, copies: int) -> Path:
    """batch_add_model alone (copies=1) or ``copies`` renamed copies of it."""
    repo = folder / "models"
    source = ROOT / "model_repository" / MODEL
    if copies == 1:
        shutil.copytree(source, repo / MODEL)
        return repo
    for i in range(copies):
        name = f"add_copy_{i:02d}"
        shutil.copytree(source, repo / name)
        config = repo / name / "config.pbtxt"
        config.write_text(config.read_text().replace(f'name: "{MODEL}"', f'name: "{name}"'))
    return repo


@contextmanager
def stack(
    copies: int | None = 1,
    services: tuple[str, ...] = ("triton", "exporter"),
    scrape_interval_s: float = 1.0,
    model_repository: Path | None = None,
    supervise: bool = False,
) -> Iterator[Settings]:
    """``services`` of the stack; ``copies=None`` serves the project's model repository, or
    ``model_repository`` when given. ``supervise``: a service that dies is restarted."""
    os.environ.setdefault("STACK_TRITON_VENV", str(ROOT / ".venv-triton"))
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        settings = isolated(Path(tmp) / "state")
        settings = replace(
            settings,
            model_repository=(
                model_repository
                or (settings.model_repository if copies is None else repository(Path(tmp), copies))
            ),
            scrape_interval_s=scrape_interval_s,
        )
        with running(settings, only=services, supervise=supervise):
            yield settings


def private_triton() -> contextlib.AbstractContextManager[Settings]:
    """Triton alone, serving the project's model repository."""
    return stack(copies=None, services=("triton",))


@contextmanager
def scratch_copies(
    settings: Settings,
    admin: TritonClient,
    model: str,
    configs: Sequence[BatcherConfig | None],
    tag: str,
) -> Iterator[list[str]]:
    """``model`` under each config as a scratch copy (repository API), named
    ``<model>__advisor_<tag><i>``; None stands for the model itself. Yields the names that
    serve them, in order; the copies are unloaded on the way out, whatever happens."""
    loaded: list[str] = []
    try:
        names = []
        for i, config in enumerate(configs):
            if config is None:
                names.append(model)
                continue
            name = f"{model}{verify.SUFFIX}{tag}{i}"
            scratch = verify.scratch_config(admin.model_config_json(model), config, name)
            admin.load_model(name, scratch, verify.model_files(settings.model_repository, model))
            loaded.append(name)
            names.append(name)
        yield names
    finally:
        for name in loaded:
            with contextlib.suppress(TritonError):
                admin.unload_model(name)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def mean(values: list[float]) -> float:
    return statistics.fmean(values)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
