"""Capture real trace files of this project's Triton for the trace reader's tests.

Starts Triton with the launcher's code on free ports (traces to a file, off until a
model's setting turns them on), traces batch_add_model at rate 1 and saves, under
tests/tritonapi/data/traces/:

- ``concurrency/``: 6 clients x 30 requests, the trace file Triton wrote for the window
  of 180 traces, and the statistics API before and after (``stats_before.json``, ...);
- ``lone/``: one request alone (it waits out the 500 µs queue delay);
- ``burst2/``, ``burst4/``: 2 and 4 requests arriving together (last-byte synchronised);
- ``config.json``: the model's config as Triton sends it.

Run it again after changing what is captured:

    .venv/bin/python -m tests.tritonapi.capture_traces
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import tritonclient.http as httpclient

from loadgen.clients.burst import burst, infer_body
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.helpers import add_inputs
from tritonapi.client import TritonClient
from tritonapi.traces import start_window, stop_window, window_left

OUT = Path(__file__).resolve().parent / "data" / "traces"
MODEL = "batch_add_model"


def collect(settings: Settings, name: str) -> None:
    """Move the trace files written so far into OUT/name."""
    folder = OUT / name
    folder.mkdir(parents=True, exist_ok=True)
    time.sleep(0.5)
    for path in sorted(settings.trace_file.parent.glob(settings.trace_file.name + ".*")):
        shutil.move(str(path), folder / path.name)


def traced(settings: Settings, name: str, send: Callable[[], object], count: int) -> None:
    """Trace the next ``count`` requests (all that ``send`` sends) into OUT/name."""
    client = TritonClient(settings.url("triton_http"), headers=settings.admin_headers())
    before = client.statistics_json(MODEL)
    start_window(client, MODEL, count=count)
    send()
    assert window_left(client, MODEL) == 0, "the window did not complete"
    stop_window(client, MODEL)
    after = client.statistics_json(MODEL)
    collect(settings, name)
    (OUT / name / "stats_before.json").write_text(json.dumps(before, indent=1) + "\n")
    (OUT / name / "stats_after.json").write_text(json.dumps(after, indent=1) + "\n")


def clients(settings: Settings, n: int, each: int) -> None:
    def one(i: int) -> None:
        client = httpclient.InferenceServerClient(f"{settings.host}:{settings.port('triton_http')}")
        for k in range(each):
            client.infer(MODEL, add_inputs(i, k), request_id=f"c{i}-{k}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def bursts(settings: Settings, size: int, times: int) -> None:
    bodies = [infer_body({"INPUT_A": [float(i)], "INPUT_B": [1.0]}) for i in range(size)]
    for _ in range(times):
        burst(settings.host, settings.port("triton_http"), MODEL, bodies)
        time.sleep(0.05)


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="capture-traces-") as tmp:
        settings = isolated(Path(tmp) / "state")
        with running(settings, only={"triton"}):
            url = settings.url("triton_http")
            OUT.mkdir(parents=True)
            config = TritonClient(url).model_config_json(MODEL)
            (OUT / "config.json").write_text(json.dumps(config, indent=1) + "\n")
            traced(settings, "concurrency", lambda: clients(settings, 6, 30), 180)
            lone = httpclient.InferenceServerClient(
                f"{settings.host}:{settings.port('triton_http')}"
            )
            traced(
                settings, "lone", lambda: lone.infer(MODEL, add_inputs(1, 2), request_id="lone"), 1
            )
            traced(settings, "burst2", lambda: bursts(settings, 2, 5), 10)
            traced(settings, "burst4", lambda: bursts(settings, 4, 5), 20)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
