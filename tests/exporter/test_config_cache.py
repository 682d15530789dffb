"""Model configs are cached between scrapes; a reload, a new version or the TTL refetch them.

A fake Triton (the endpoints the exporter reads, with answers the test changes) counts the
config requests it receives; the last test reloads a real Triton's model with another config.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from bench.standin import serve, varied
from exporter.scrape import Fetcher, parse_snapshot
from exporter.targets import Target
from stack.supervisor import running
from stacksettings import ROOT, Settings, isolated
from tests.exporter.replay import standin_capture
from tests.helpers import infer_add, wait_for
from tritonapi.client import TritonClient

METRICS = '# TYPE nv_inference_count counter\nnv_inference_count{model="m0",version="1"} 3\n'


class FakeTriton:
    def __init__(self, models: int) -> None:
        self.stats: dict[str, dict[str, Any]] = {
            f"m{i}": {"version": "1", "inference_count": 3} for i in range(models)
        }
        self.config_requests: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                fake.answer(self)

            def do_POST(self) -> None:  # noqa: N802
                fake.answer(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path
        if path == "/metrics":
            body, kind = METRICS, "text/plain"
        else:
            kind = "application/json"
            body = json.dumps(self.json(path, handler))
        data = body.encode()
        handler.send_response(200)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def json(self, path: str, handler: BaseHTTPRequestHandler) -> Any:
        if path == "/v2/models/stats":
            return {"model_stats": [self.entry(name, s) for name, s in self.stats.items()]}
        if path == "/v2/repository/index":
            return [{"name": n, "version": "1", "state": "READY"} for n in self.stats]
        if path == "/v2/health/ready":
            return {}
        name = path.split("/")[3]
        self.config_requests.append(name)
        return {"name": name, "max_batch_size": 4, "dynamic_batching": {}}

    @staticmethod
    def entry(name: str, s: dict[str, Any]) -> dict[str, Any]:
        count = s["inference_count"]
        return {
            "name": name,
            "version": s["version"],
            "last_inference": count,
            "inference_count": count,
            "execution_count": count,
            "inference_stats": {"success": {"count": count, "ns": 1000 * count}},
            "batch_stats": [],
        }


@pytest.fixture
def triton() -> Iterator[FakeTriton]:
    fake = FakeTriton(models=3)
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scrape(fetcher: Fetcher, triton: FakeTriton) -> None:
    view = parse_snapshot(fetcher(Target(triton.url, f"{triton.url}/metrics"), 2.0))
    assert {m.stats.name for m in view.models} == set(triton.stats)


def test_unchanged_configs_come_from_the_cache(triton: FakeTriton) -> None:
    fetcher = Fetcher()
    scrape(fetcher, triton)
    assert sorted(triton.config_requests) == ["m0", "m1", "m2"]
    for _ in range(5):
        triton.stats["m1"]["inference_count"] += 7  # traffic does not invalidate
        scrape(fetcher, triton)
    assert len(triton.config_requests) == 3 and fetcher.config_fetches == 3


def test_a_reload_a_new_version_or_the_ttl_fetch_again(triton: FakeTriton) -> None:
    clock = Clock()
    fetcher = Fetcher(config_ttl_s=60.0, clock=clock)
    scrape(fetcher, triton)
    triton.config_requests.clear()
    # A reload: Triton resets the model's statistics.
    triton.stats["m0"]["inference_count"] = 0
    scrape(fetcher, triton)
    assert triton.config_requests == ["m0"]
    # A new version loaded.
    triton.stats["m2"]["version"] = "2"
    scrape(fetcher, triton)
    assert triton.config_requests == ["m0", "m2"]
    # Past the TTL everything is read again (an idle model's reload resets nothing).
    clock.now += 61
    scrape(fetcher, triton)
    assert sorted(triton.config_requests[2:]) == ["m0", "m1", "m2"]


def test_a_model_that_goes_away_leaves_the_cache(triton: FakeTriton) -> None:
    fetcher = Fetcher()
    scrape(fetcher, triton)
    del triton.stats["m1"]
    scrape(fetcher, triton)
    triton.stats["m1"] = {"version": "1", "inference_count": 3}
    triton.config_requests.clear()
    scrape(fetcher, triton)
    assert triton.config_requests == ["m1"]


def config_gauges(settings: Settings, model: str) -> tuple[float, set[float]]:
    """The exporter's max_queue_delay_seconds and preferred sizes of ``model``."""
    text = requests.get(f"{settings.url('exporter')}/metrics", timeout=10).text
    delay, preferred = float("nan"), set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            if sample.name == "triton_batching_max_queue_delay_seconds":
                delay = sample.value
            elif sample.name == "triton_batching_preferred_batch_size":
                preferred.add(sample.value)
    return delay, preferred


def read(settings: Settings, model: str) -> tuple[float, set[float]] | None:
    """:func:`config_gauges` once the exporter exports the model's config, else None."""
    gauges = config_gauges(settings, model)
    return gauges if gauges[1] else None


@pytest.mark.integration
def test_a_real_reload_with_another_config_reaches_the_next_scrape(tmp_path: Path) -> None:
    """A real Triton (explicit model control) and the exporter as the launcher runs them:
    the model reloaded through the repository API with another config (the override lives
    in Triton's memory) is what the next scrape exports, well inside the 60 s TTL."""
    repo = tmp_path / "models"
    shutil.copytree(ROOT / "model_repository" / "batch_add_model", repo / "batch_add_model")
    settings = replace(isolated(tmp_path / "state"), model_repository=repo)
    model = "batch_add_model"
    with running(settings, only={"triton", "exporter"}):
        triton = TritonClient(settings.url("triton_http"), headers=settings.admin_headers())
        client = httpclient.InferenceServerClient(f"{settings.host}:{settings.port('triton_http')}")
        for i in range(3):  # counters a reload visibly resets
            assert infer_add(client, model, i, 1) == i + 1
        # The exporter's first finished read: a scrape waits for its reader at most one and a
        # half fetch timeouts, and on a loaded machine (a whole-suite run's) the first one
        # answered before any read had finished, with no model's series at all.
        first = wait_for("the exporter's first read of the model", lambda: read(settings, model))
        assert first == (0.0005, {2.0, 4.0})
        config = triton.model_config_json(model)
        config["dynamic_batching"].update(
            max_queue_delay_microseconds=2000, preferred_batch_size=[3]
        )
        scraped_at = time.monotonic()
        triton.load_model(model, config=config)
        assert triton.model_config(model).max_queue_delay_us == 2000  # Triton serves it
        assert infer_add(client, model, 2, 2) == 4
        assert config_gauges(settings, model) == (0.002, {3.0})
        assert time.monotonic() - scraped_at < 60  # not the TTL's doing


def test_a_cold_read_of_a_hundred_configs_keeps_its_connections(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A first read asks for every config at once (MAX_PARALLEL per target, two scrapes'
    worth of threads): each connection goes back to the target's pool for the next read.
    A pool smaller than the requests in flight discarded them, one WARNING line each (dozens
    per target at the start of the fleet at scale), and the next read connected again."""
    served = serve([varied(standin_capture("after_load"), 100)])
    url = f"http://127.0.0.1:{served[0].server_address[1]}"
    try:
        with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"):
            snap = Fetcher()(Target(url, f"{url}/metrics"), 10.0)
    finally:
        served[0].shutdown()
        served[0].server_close()
    assert len(snap.configs) == 100 and not snap.down
    assert not [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()]
