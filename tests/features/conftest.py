"""One private Triton serving the feature models of tests/features/repository/.

The models that are batch_add_model with another config get its model.py copied in
(one implementation, several configs). The server runs with a 1 MiB local response
cache, so that add_cached's hits are real, and in explicit model control, so that a test
can unload a model.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry

from bench.features import CACHE_BYTES, FEATURES, build_repository
from exporter.collector import BatchingCollector
from exporter.scrape import Fetcher
from exporter.targets import Target
from stack.supervisor import running
from stacksettings import Settings, isolated

HERE = FEATURES  # the feature models, tests/features/repository/


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
