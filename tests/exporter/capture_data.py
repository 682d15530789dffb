"""Capture the exporter's unit-test data from this project's real Triton.

    .venv/bin/python -m tests.exporter.capture_data

Starts Triton with the launcher's code on free ports, over a temporary model repository: the
project's two models plus ``add_max_batch_0`` (``batch_add_model`` with ``max_batch_size: 0``
and no dynamic batching). It saves the raw HTTP bodies the exporter reads, as Triton sent
them, in one folder per moment under tests/exporter/data/:

- ``rest``: right after start, before any request;
- ``load``: while eight threads send requests and bursts (sources read a few milliseconds
  apart, so they need not agree with each other);
- ``after_load``: once the load has stopped (every source agrees);
- ``restarted``: after Triton was restarted and served three serial requests, i.e. every
  counter went back to near zero (a counter reset).
"""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import requests
import tritonclient.http as httpclient

from loadgen.clients.burst import burst, infer_body
from stack.services import service_table
from stack.supervisor import Supervisor
from stacksettings import ROOT, Settings, isolated
from tests.helpers import infer_add

DATA = Path(__file__).resolve().parent / "data"
MODELS = ("batch_add_model", "add_unbatched", "add_max_batch_0")


def make_repository(folder: Path) -> Path:
    repo = folder / "models"
    for name in ("batch_add_model", "add_unbatched"):
        shutil.copytree(ROOT / "model_repository" / name, repo / name)
    mbs0 = repo / "add_max_batch_0"
    shutil.copytree(ROOT / "model_repository" / "batch_add_model", mbs0)
    text = (mbs0 / "config.pbtxt").read_text()
    text = text.replace('name: "batch_add_model"', 'name: "add_max_batch_0"')
    text = text.replace("max_batch_size: 4", "max_batch_size: 0")
    # Without a batch dimension the full shape is in dims: [1, 1] like the clients send.
    text = text.replace("dims: [ 1 ]", "dims: [ 1, 1 ]")
    text = text[: text.index("dynamic_batching")]
    (mbs0 / "config.pbtxt").write_text(text)
    return repo


def capture(settings: Settings, moment: str) -> None:
    base = settings.url("triton_http")
    folder = DATA / moment
    folder.mkdir(parents=True, exist_ok=True)
    bodies = {
        "metrics.txt": requests.get(f"{settings.url('triton_metrics')}/metrics", timeout=5),
        "stats.json": requests.get(f"{base}/v2/models/stats", timeout=5),
        "index.json": requests.post(f"{base}/v2/repository/index", json={}, timeout=5),
    }
    for model in MODELS:
        bodies[f"config.{model}.json"] = requests.get(f"{base}/v2/models/{model}/config", timeout=5)
    for name, response in bodies.items():
        response.raise_for_status()
        (folder / name).write_bytes(response.content)
    ready = requests.get(f"{base}/v2/health/ready", timeout=5).status_code
    (folder / "ready.txt").write_text(f"{ready}\n")
    print(f"captured {folder}")


def infer(client: httpclient.InferenceServerClient, model: str, a: float, b: float) -> None:
    assert infer_add(client, model, a, b) == a + b


def load(settings: Settings, stop: threading.Event, threads: int = 8) -> list[threading.Thread]:
    address = f"{settings.host}:{settings.port('triton_http')}"

    def closed_loop(i: int) -> None:
        client = httpclient.InferenceServerClient(address)  # one per thread: not thread-safe
        model = MODELS[i % len(MODELS)]
        while not stop.is_set():
            infer(client, model, float(random.randint(0, 99)), float(i))
        client.close()

    def bursts() -> None:
        while not stop.is_set():
            n = random.choice([2, 3, 4])
            burst(
                settings.host,
                settings.port("triton_http"),
                "batch_add_model",
                [infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})] * n,
            )

    workers = [threading.Thread(target=closed_loop, args=(i,)) for i in range(threads - 1)]
    workers.append(threading.Thread(target=bursts))
    for w in workers:
        w.start()
    return workers


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = replace(
            isolated(Path(tmp) / "state"),
            model_repository=make_repository(Path(tmp)),
            skip=frozenset({"prometheus", "exporter"}),
        )
        supervisor = Supervisor(settings, service_table(settings))
        supervisor.up()
        try:
            capture(settings, "rest")
            stop = threading.Event()
            workers = load(settings, stop)
            time.sleep(3.0)
            capture(settings, "load")
            time.sleep(1.0)
            stop.set()
            for w in workers:
                w.join()
            capture(settings, "after_load")
        finally:
            supervisor.down()
        supervisor.up()
        try:
            client = httpclient.InferenceServerClient(
                f"{settings.host}:{settings.port('triton_http')}"
            )
            for i in range(3):
                infer(client, "batch_add_model", float(i), 1.0)
            client.close()
            capture(settings, "restarted")
        finally:
            supervisor.down()


if __name__ == "__main__":
    main()
