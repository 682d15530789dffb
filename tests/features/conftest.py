"""One private Triton serving the feature models of tests/features/repository/.

The models that are batch_add_model with another config get its model.py copied in
(one implementation, several configs). The server runs with a 1 MiB local response
cache, so that add_cached's hits are real, and in explicit model control, so that a test
can unload a model.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from exporter.collector import BatchingCollector
from exporter.scrape import Fetcher
from exporter.targets import Target
from stack.supervisor import running
from stacksettings import ROOT, Settings, isolated

HERE = Path(__file__).parent / "repository"
ADD = ROOT / "model_repository" / "batch_add_model"
# Feature models that run batch_add_model's code under a config of their own.
ADD_CODE = ("add_cached", "add_ordered")
# Feature models that run add_slow_queue's code (50 ms per batch): slow enough to queue.
SLOW_CODE = ("add_priority",)
CACHE_BYTES = 1 << 20


def build_repository(target: Path, models: tuple[str, ...] | None = None) -> Path:
    """The feature models (all, or ``models``) and batch_add_model, which the ensemble uses."""
    for folder in sorted(HERE.iterdir()):
        if models is None or folder.name in models:
            shutil.copytree(
                folder, target / folder.name, ignore=shutil.ignore_patterns("__pycache__")
            )
    for name in ADD_CODE:
        if (target / name).exists():
            (target / name / "1").mkdir(exist_ok=True)
            shutil.copy(ADD / "1" / "model.py", target / name / "1" / "model.py")
    for name in SLOW_CODE:
        if (target / name).exists():
            (target / name / "1").mkdir(exist_ok=True)
            shutil.copy(
                HERE / "add_slow_queue" / "1" / "model.py", target / name / "1" / "model.py"
            )
    if models is None:
        shutil.copytree(
            ADD, target / "batch_add_model", ignore=shutil.ignore_patterns("__pycache__")
        )
    return target


@pytest.fixture(scope="session")
def features_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("features")
    settings = replace(
        isolated(base / "state"),
        model_repository=build_repository(base / "models"),
        triton_cache_bytes=CACHE_BYTES,
        # A test unloads an ensemble's step and loads it again.
        triton_model_control="explicit",
    )
    with running(settings, only={"triton"}):
        yield settings


def registry_for(settings: Settings) -> CollectorRegistry:
    """The exporter's collector over the private Triton, on a registry of its own."""
    target = Target(settings.url("triton_http"), settings.url("triton_metrics") + "/metrics")
    registry = CollectorRegistry()
    fetch = Fetcher(headers=settings.admin_headers())
    registry.register(BatchingCollector([target], fetch=fetch))
    return registry
