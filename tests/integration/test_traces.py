"""Batches rebuilt from Triton's own traces equal its statistics API, live.

A private Triton (the launcher's code: traces to a file of the state folder, off until
turned on per model) and the exporter that reads the files. Three models: the spec's
add model, a copy with 2 instances, and a copy whose inputs have a variable length (and
a plain copy for the exporter's counters). Each is traced at rate 1 for a bounded load,
then the batches rebuilt from the traces the exporter serves (/api/traces) must match the
statistics API's batch_stats deltas exactly.
"""

from __future__ import annotations

import http.client
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import requests
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from stack.supervisor import running
from stacksettings import ROOT, Settings, isolated
from tests.helpers import UNPARSABLE, TritonCrashes, served_whole, stats_counting, wire_seen
from tritonapi.client import TritonClient
from tritonapi.stats import ModelStats
from tritonapi.traces import TracedRequest, group_batches, start_window, stop_window, window_left

CRASHES = TritonCrashes()
pytestmark = [
    pytest.mark.integration,
    # Rerun only a test during which this module's Triton died of a signal (an upstream
    # bug); tests/conftest.py lists each rerun and caps how many tests may need one.
    pytest.mark.flaky(reruns=2, condition=CRASHES.crashed),
]

SOURCE = ROOT / "model_repository" / "batch_add_model"
TWO_INSTANCES = "instance_group [ { count: 2 kind: KIND_CPU } ]"


def add_copy(repo: Path, name: str, edit: dict[str, str]) -> None:
    shutil.copytree(SOURCE, repo / name)
    config = repo / name / "config.pbtxt"
    text = config.read_text().replace('name: "batch_add_model"', f'name: "{name}"')
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new)
    config.write_text(text)


@pytest.fixture(scope="module")
def traced_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    tmp = tmp_path_factory.mktemp("traces")
    repo = tmp / "models"
    shutil.copytree(SOURCE, repo / "batch_add_model")
    add_copy(
        repo,
        "add_two_instances",
        {"dynamic_batching {": f"{TWO_INSTANCES}\ndynamic_batching {{"},
    )
    add_copy(repo, "add_variable", {"dims: [ 1 ]": "dims: [ -1 ]"})
    add_copy(repo, "add_counted", {})  # only the exporter's counting test traces it
    settings = replace(isolated(tmp / "state"), model_repository=repo)
    # Supervised, as ./stack/up runs it: a Triton that crashes is started again.
    with running(settings, only={"triton", "exporter"}, supervise=True):
        CRASHES.watch(settings)
        yield settings


@pytest.fixture(autouse=True)
def triton_back(traced_stack: Settings, request: pytest.FixtureRequest) -> None:
    """A Triton restarted after a crash is waited for; a crash from now on is this test's."""
    CRASHES.forget()
    CRASHES.serving(traced_stack)
    CRASHES.begin(request.node.nodeid)


def load(settings: Settings, model: str, clients: int, each: int, widths: list[int]) -> None:
    """``clients`` threads, each sending ``each`` requests of its width in turn; every sum
    checked. A request Triton failed is counted and the client goes on; the failures are
    judged with the wire's witness (:func:`served_whole`)."""
    wrong: list[str] = []
    failed: Counter[str] = Counter()

    def one(i: int) -> None:
        url = f"{settings.host}:{settings.port('triton_http')}"
        client = httpclient.InferenceServerClient(url)
        width = widths[i % len(widths)]
        for k in range(each):
            inputs = []
            for name in ("INPUT_A", "INPUT_B"):
                tensor = httpclient.InferInput(name, [1, width], "FP32")
                tensor.set_data_from_numpy(np.full((1, width), float(k), dtype=np.float32))
                inputs.append(tensor)
            try:
                result = client.infer(model, inputs, request_id=f"{model}-{i}-{k}")
            except InferenceServerException as exc:  # the load generator's words for it
                failed[f"HTTP {exc.status()}: {exc.message()}"[:200]] += 1
                continue
            except http.client.HTTPException as exc:  # its parser's, on a head it cannot read
                failed[f"{UNPARSABLE}{exc}"[:200]] += 1
                client = httpclient.InferenceServerClient(url)  # that connection is lost
                continue
            if result.as_numpy("OUTPUT_SUM").tolist() != [[2.0 * k] * width]:
                wrong.append(f"{model} {i}-{k}: wrong sum")

    with wire_seen(settings) as wire:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    served_whole(sum(failed.values()), dict(failed), wire)
    assert not wrong, wrong[:3]


def traced_requests(
    settings: Settings, model: str, expected: int, since_ns: int
) -> list[TracedRequest]:
    """The exporter's traced requests of ``model`` that Triton received after ``since_ns``,
    once it holds ``expected`` of them (bounded wait).

    ``since_ns`` is this process's monotonic clock, which is Triton's steady clock on the
    same Linux host (the exporter's clock offset rests on it, docs/traces.md). The exporter
    keeps 120 s of traces across Triton's restarts: a test rerun after an upstream crash
    would otherwise count its first try's requests too (docs/validation/suite-time.md).
    """
    url = f"{settings.url('exporter')}/api/traces"
    deadline = time.monotonic() + 10
    while True:
        body = requests.get(url, params={"model": model, "seconds": "120"}, timeout=10).json()
        found = [
            r
            for r in map(TracedRequest.from_json, body["requests"])
            if r.request_start_ns >= since_ns
        ]
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.mark.parametrize(
    ("model", "clients", "widths"),
    [
        # Concurrency stays modest: long traced streams at 8 crash Triton 2.51.
        ("batch_add_model", 4, [1]),
        ("add_two_instances", 6, [1]),
        ("add_variable", 6, [1, 2, 3]),
    ],
)
def test_batches_from_traces_equal_batch_stats(
    traced_stack: Settings, model: str, clients: int, widths: list[int]
) -> None:
    triton = TritonClient(traced_stack.url("triton_http"), headers=traced_stack.admin_headers())
    since_ns = time.monotonic_ns()
    before = triton.model_stats(model)
    start_window(triton, model, count=clients * 40)
    try:
        load(traced_stack, model, clients, 40, widths)
    finally:
        left = window_left(triton, model)
        stop_window(triton, model)
    assert left == 0  # the window is complete: Triton has written it
    # Every request answered (load() fails the test otherwise); their executions are
    # counted just after the answers.
    url = traced_stack.url("triton_http")
    delta = stats_counting(url, model, before, clients * 40).minus(before)
    traced = traced_requests(traced_stack, model, delta.inference_count, since_ns)
    assert len(traced) == delta.inference_count == clients * 40
    batches = group_batches(traced)
    assert dict(Counter(b.size for b in batches)) == delta.executions_by_size()
    lanes = {b.lane for b in batches}
    assert lanes <= ({0, 1} if model == "add_two_instances" else {0})
    if model == "add_variable":
        # Triton batches only requests of one shape; each batch holds one client's width.
        width = {r.request_id: int(r.request_id.split("-")[1]) % 3 for r in traced}
        assert all(len({width[r.request_id] for r in b.requests}) == 1 for b in batches)


def traced_counts(settings: Settings, model: str) -> tuple[float, float, bool]:
    """The exporter's traced queue waits and rebuilt batches of ``model`` (counts so far),
    and whether it exports the model's sample ratio."""
    text = requests.get(f"{settings.url('exporter')}/metrics", timeout=10).text
    waits = batches = 0.0
    ratio = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            if sample.name == "triton_batching_queue_wait_seconds_count":
                waits += sample.value
            elif sample.name == "triton_batching_batches_total":
                batches += sample.value
            elif sample.name == "triton_batching_trace_sample_ratio":
                ratio = True
    return waits, batches, ratio


def traced_window(settings: Settings, model: str, clients: int, each: int) -> ModelStats:
    """``clients`` x ``each`` requests traced as one window; the statistics API's delta."""
    triton = TritonClient(settings.url("triton_http"), headers=settings.admin_headers())
    before = triton.model_stats(model)
    start_window(triton, model, count=clients * each)
    try:
        load(settings, model, clients, each, [1])
    finally:
        left = window_left(triton, model)
        stop_window(triton, model)
    assert left == 0
    return stats_counting(settings.url("triton_http"), model, before, clients * each).minus(before)


def test_the_exporter_counts_traced_waits_and_batches(traced_stack: Settings) -> None:
    """Traced windows of its own (the test runs alone and in any order): the exporter
    counts each request's wait once, and each batch once it can no longer grow. Its model
    is traced by no other test: nothing another left open is counted meanwhile."""
    model = "add_counted"
    since_ns = time.monotonic_ns()
    waits_before, batches_before, _ = traced_counts(traced_stack, model)
    first = traced_window(traced_stack, model, 2, 40)
    # A batch is counted once a request that started 50 ms after its end is read (or after
    # 10 s): the second window closes every batch of the first.
    time.sleep(0.2)
    second = traced_window(traced_stack, model, 1, 2)
    assert first.inference_count == 80 and second.inference_count == 2
    assert len(traced_requests(traced_stack, model, 82, since_ns)) == 82
    waits, batches, ratio = traced_counts(traced_stack, model)
    assert waits - waits_before == 82
    assert first.execution_count <= batches - batches_before
    assert batches - batches_before <= first.execution_count + second.execution_count
    assert ratio
    assert not list(traced_stack.trace_file.parent.glob("trace.json.*"))
