"""A short, bounded warm-up load after `up`, so the dashboard shows live charts at once.

Sends small simultaneous bursts (the batcher's favourite case) to every model
whose inputs are fixed-shape FP32 tensors, for a few seconds in one thread, then
stops: it can never overload the host. `up --no-warmup` skips it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable

import requests
from tritonclient.grpc import model_config_pb2

from loadgen.burst import burst
from stack import checkconfig, prometheus
from stack.settings import Settings

DURATION_S = 5.0
# At most this many requests at once, whatever max_batch_size says.
MAX_BURST = 4


def request_body(config: model_config_pb2.ModelConfig) -> bytes | None:
    """A request of ones for every input, or None if the model takes other than FP32."""
    inputs = []
    for tensor in config.input:
        if tensor.data_type != model_config_pb2.TYPE_FP32 or any(d < 0 for d in tensor.dims):
            return None
        dims = list(tensor.dims)
        # A batching model's tensors carry the batch dimension first.
        shape = [1, *dims] if config.max_batch_size > 0 else dims
        inputs.append(
            {
                "name": tensor.name,
                "shape": shape,
                "datatype": "FP32",
                "data": [1.0] * math.prod(dims),
            }
        )
    return json.dumps({"inputs": inputs}).encode() if inputs else None


def targets(settings: Settings) -> dict[str, tuple[bytes, int]]:
    """model -> (request body, burst size) for every model the warm-up can feed."""
    found: dict[str, tuple[bytes, int]] = {}
    for check in checkconfig.check_repository(settings.model_repository):
        if check.config is None or checkconfig.errors([check]):
            continue
        body = request_body(check.config)
        if body is not None:
            size = min(MAX_BURST, max(check.config.max_batch_size, 2))
            found[check.name] = (body, size)
    return found


def wait_for_first_scrapes(settings: Settings) -> bool:
    """Wait until Prometheus has scraped every job once.

    Requests sent before a series' first sample never show in increase() or
    rate(), so load sent right after start would be invisible on the dashboard.
    """
    jobs = len(prometheus.local_targets(settings))
    url = f"{settings.url('prometheus')}/api/v1/query"
    deadline = time.monotonic() + 3 * settings.scrape_interval_s + 5.0
    while time.monotonic() < deadline:
        try:
            result = requests.get(url, params={"query": "count(up)"}, timeout=2).json()
            series = result["data"]["result"]
            if series and float(series[0]["value"][1]) >= jobs:
                return True
        except (requests.RequestException, ValueError, KeyError):
            pass
        time.sleep(0.2)
    return False


def run(
    settings: Settings,
    duration_s: float = DURATION_S,
    log: Callable[[str], None] = print,
) -> dict[str, int]:
    """Send bursts round-robin to each model for ``duration_s``; return requests sent each."""
    plan = targets(settings)
    sent = dict.fromkeys(plan, 0)
    if not plan:
        log("warm-up: no model with fixed-shape FP32 inputs to send to; skipped")
        return sent
    if "prometheus" not in settings.skip:
        wait_for_first_scrapes(settings)
    log(f"warm-up: {duration_s:g} s of small bursts to {', '.join(plan)} (--no-warmup skips it)")
    deadline = time.monotonic() + duration_s
    host, port = settings.host, settings.port("triton_http")
    while time.monotonic() < deadline:
        for model, (body, size) in plan.items():
            try:
                answers = burst(host, port, model, [body] * size, timeout_s=5.0, settle_s=0.01)
            except OSError as exc:
                # The stack is up either way; a failed warm-up is only less data to show.
                log(f"warm-up: stopped, {model} did not answer ({exc})")
                return sent
            sent[model] += sum(1 for a in answers if "error" not in a)
    log("warm-up: " + ", ".join(f"{m} {n} requests" for m, n in sent.items()))
    return sent
