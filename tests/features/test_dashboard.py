"""The dashboard over the feature models, end to end: Triton -> exporter -> Prometheus ->
the Streamlit app (AppTest). The cache share and the ensemble note in the live view, the
pipeline and the cache in the config view."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from bench.features import CACHE_BYTES, build_repository
from loadgen.engine.runner import RunParams, run
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.dashboard.conftest import make_app, prom_has, scraped_after, wait_for
from tritonapi import TritonClient

pytestmark = pytest.mark.integration
__all__ = ["make_app"]  # the fixture, imported for these tests

MODELS = (
    "add_cached",
    "preprocess",
    "add_pipeline",
    "batch_add_model",
    "add_priority",
    "add_slow_queue",
)


@pytest.fixture(scope="module")
def features_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("features-stack")
    repo = build_repository(base / "models", MODELS)
    settings = replace(
        isolated(base / "state"),
        model_repository=repo,
        triton_cache_bytes=CACHE_BYTES,
        scrape_interval_s=1.0,
    )
    with running(settings, exclude={"dashboard"}):
        wait_for(
            lambda: prom_has(
                settings, 'triton_batching_requests_success_total{model="add_cached"}'
            ),
            60,
            "the exporter's first scrape",
        )
        url = settings.url("triton_http")
        client = TritonClient(url)
        inputs = [
            {"name": "INPUT_A", "datatype": "FP32", "shape": [1, 1], "data": [1.0]},
            {"name": "INPUT_B", "datatype": "FP32", "shape": [1, 1], "data": [2.0]},
        ]
        for _ in range(8):  # 1 miss, 7 hits
            client.infer_json("add_cached", inputs)
        run(
            RunParams(
                scenario="concurrency", model="add_pipeline", url=url, concurrency=4, duration_s=1.0
            )
        )
        done = time.time()
        wait_for(scraped_after(settings, "exporter", done + 1.0), 30, "a scrape after the load")
        yield settings


def texts(at: AppTest, kind: str) -> list[str]:
    return [str(e.value) for e in getattr(at, kind)]


def test_live_view_of_a_cached_model_and_of_an_ensemble(
    make_app: Callable[..., AppTest], features_stack: Settings
) -> None:
    s = features_stack
    at = make_app(s.url("prometheus"), s.url("triton_http")).run()
    assert not at.exception
    at.sidebar.selectbox(key="model").set_value("add_cached").run()
    assert not at.exception
    [note] = [t for t in texts(at, "info") if "response cache" in t]
    # 7 hits in 8 lookups (88%); Prometheus' rate() over the window extrapolates each counter
    # on its own, so the share it gives is near that, not exactly it (87% was seen).
    share = re.match(r"(\d+)% of the lookups in this window were answered from the response", note)
    assert share is not None and 80 <= int(share.group(1)) <= 95, note
    assert note.endswith(
        f"the batch size and efficiency above are those of the other {100 - int(share.group(1))}%."
    ), note
    at.sidebar.selectbox(key="model").set_value("add_pipeline").run()
    assert not at.exception
    infos = texts(at, "info")
    assert any(
        t.startswith("`add_pipeline` is an ensemble (`preprocess` → `batch_add_model`)")
        for t in infos
    ), infos
    assert not any("No data yet" in t for t in infos)


def test_config_view_shows_the_pipeline_the_queues_and_the_cache(
    make_app: Callable[..., AppTest], features_stack: Settings
) -> None:
    s = features_stack
    at = make_app(
        s.url("prometheus"), s.url("triton_http"), model_repository=str(s.model_repository)
    ).run()
    at.sidebar.radio(key="view").set_value("Model config").run()
    assert not at.exception
    markdown = "\n".join(m.value for m in at.markdown)
    assert "Ensemble pipeline of 2 steps" in markdown
    assert "1. `preprocess`: max_batch_size 4, dynamic batching with preferred sizes 4" in markdown
    assert "Response cache: enabled. A hit is answered from the cache" in markdown
    assert "Queue: at most 2 waiting." in markdown
    assert "2 priority levels (default 2)" in markdown
