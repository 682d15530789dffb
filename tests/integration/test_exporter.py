"""The exporter against the real Triton under concurrent load, and Prometheus scraping it.

The stack's own exporter (started by the launcher from the service table) is
read over HTTP, exactly as Prometheus reads it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest
import requests
import tritonclient.http as httpclient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporter.collector import BatchingCollector
from exporter.scrape import Fetcher
from exporter.targets import Target
from loadgen.clients.burst import burst, infer_body
from stacksettings import Settings, free_ports
from tests.helpers import infer_add

pytestmark = pytest.mark.integration

MODEL = "batch_add_model"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def read(url: str) -> Samples:
    text = requests.get(url, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def pick(samples: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return {lab: v for (n, lab), v in samples.items() if n == name and want <= set(lab)}


def one(samples: Samples, name: str, **labels: str) -> float:
    found = pick(samples, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return next(iter(found.values()))


def concurrent_load(settings: Settings, threads: int = 6, per_thread: int = 40) -> None:
    """Closed-loop clients (one tritonclient per thread) plus simultaneous bursts."""
    address = f"{settings.host}:{settings.port('triton_http')}"
    errors: list[BaseException] = []

    def guarded(work: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                work()
            except BaseException as exc:  # reported by the test thread below
                errors.append(exc)

        return run

    def client_loop() -> None:
        client = httpclient.InferenceServerClient(address)  # created in its own thread
        try:
            for _ in range(per_thread):
                a, b = float(random.randint(-50, 50)), float(random.randint(-50, 50))
                assert infer_add(client, MODEL, a, b) == a + b
        finally:
            client.close()

    def bursts() -> None:
        for n in (4, 3, 2, 4, 3):
            replies = burst(
                settings.host,
                settings.port("triton_http"),
                MODEL,
                [infer_body({"INPUT_A": [1.0], "INPUT_B": [float(i)]}) for i in range(n)],
            )
            assert [r["outputs"][0]["data"] for r in replies] == [[1.0 + i] for i in range(n)]

    workers = [threading.Thread(target=guarded(client_loop)) for _ in range(threads)]
    workers.append(threading.Thread(target=guarded(bursts)))
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert not errors, errors


def quiet_reads(settings: Settings) -> tuple[Samples, Samples]:
    """The exporter's and Triton's metrics, read while no request is in flight.

    Triton may still be updating its counters right after the last response;
    a read counts only if Triton's own metrics are the same before and after it.
    """
    exporter = f"{settings.url('exporter')}/metrics"
    triton = f"{settings.url('triton_metrics')}/metrics"
    for _ in range(20):
        before = pick(read(triton), "nv_inference_exec_count_total", model=MODEL)
        ours = read(exporter)
        theirs = read(triton)
        if pick(theirs, "nv_inference_exec_count_total", model=MODEL) == before:
            return ours, theirs
        time.sleep(0.1)
    raise AssertionError("Triton's counters kept moving after the load stopped")


def test_distribution_adds_up_to_tritons_counts_under_concurrent_load(
    running_stack: Settings,
) -> None:
    concurrent_load(running_stack)
    ours, theirs = quiet_reads(running_stack)
    target = running_stack.url("triton_http")
    labels = {"target": target, "model": MODEL, "version": "1"}
    assert one(ours, "triton_batching_target_up", target=target) == 1

    by_size = {
        int(dict(lab)["batch_size"]): v
        for lab, v in pick(ours, "triton_batching_batch_executions_total", **labels).items()
    }
    executions = one(ours, "triton_batching_executions_total", **labels)
    inferences = one(ours, "triton_batching_inferences_total", **labels)
    assert max(by_size) > 1, f"no batch was formed under concurrent load: {by_size}"
    assert sum(by_size.values()) == executions
    assert sum(size * n for size, n in by_size.items()) == inferences

    nv_count = one(theirs, "nv_inference_count_total", model=MODEL, version="1")
    nv_exec = one(theirs, "nv_inference_exec_count_total", model=MODEL, version="1")
    assert (inferences, executions) == (nv_count, nv_exec)
    assert one(ours, "triton_batching_average_batch_size", **labels) == pytest.approx(
        nv_count / nv_exec, rel=1e-12
    )
    assert 0 < one(ours, "triton_batching_efficiency_ratio", **labels) <= 1
    assert one(ours, "triton_batching_max_batch_size", **labels) == 4
    assert one(ours, "triton_batching_preferred_batch_size", size="2", **labels) == 2


def test_prometheus_has_scraped_the_exporters_series(running_stack: Settings) -> None:
    # Traffic of its own: the executions series exists once the model has executed, and this
    # test may run first on a worker's stack (a four-worker CI run did, and failed).
    concurrent_load(running_stack, threads=2, per_thread=5)
    prometheus = running_stack.url("prometheus")
    query = f'triton_batching_batch_executions_total{{job="exporter",model="{MODEL}"}}'
    up_query = 'triton_batching_target_up{job="exporter"}'
    deadline = time.monotonic() + 30
    result: list = []
    up: list = []
    while time.monotonic() < deadline:
        params = {"query": query}
        result = requests.get(f"{prometheus}/api/v1/query", params=params, timeout=5).json()[
            "data"
        ]["result"]
        up = requests.get(
            f"{prometheus}/api/v1/query", params={"query": up_query}, timeout=5
        ).json()["data"]["result"]
        if result and up:
            break
        time.sleep(0.5)
    assert result, f"Prometheus has no {query}"
    assert {r["metric"]["batch_size"] for r in result} >= {"1"}
    assert all(r["metric"]["target"] == running_stack.url("triton_http") for r in result)
    assert [float(r["value"][1]) for r in up] == [1.0]


def test_one_exporter_reads_the_real_triton_beside_a_dead_one(running_stack: Settings) -> None:
    (port,) = free_ports(1)
    dead = Target(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/metrics")
    real = Target(
        running_stack.url("triton_http"), f"{running_stack.url('triton_metrics')}/metrics"
    )
    registry = CollectorRegistry()
    # The stack's Triton keeps its repository index (model_ready) behind the stack's key.
    fetch = Fetcher(running_stack.admin_headers())
    registry.register(BatchingCollector([dead, real], timeout_s=2.0, fetch=fetch))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
    }
    assert one(samples, "triton_batching_target_up", target=dead.url) == 0
    assert one(samples, "triton_batching_target_up", target=real.url) == 1
    assert one(samples, "triton_batching_model_ready", target=real.url, model=MODEL) == 1
    assert not pick(samples, "triton_batching_executions_total", target=dead.url)
