"""Scrape latency of the exporter with 1 model and with 20 models loaded in Triton.

    .venv/bin/python -m bench.scrape_latency [--scrapes 200] [--models 1 20]

For each size a stack (Triton + exporter, the launcher's code) starts over a
temporary repository of batch_add_model copies; every model serves a few
batched bursts first so that its batch statistics are not empty. Then the
exporter's /metrics is fetched back to back, timed from this client, end to end.
"""

from __future__ import annotations

import argparse
import time

import requests

from bench.common import MODEL, percentile, stack
from loadgen.burst import burst, infer_body
from stacksettings import Settings


def warm(settings: Settings, models: list[str]) -> None:
    for model in models:
        for n in (1, 2, 3, 4):
            body = infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})
            burst(settings.host, settings.port("triton_http"), model, [body] * n)


def measure(copies: int, scrapes: int) -> dict[str, float]:
    with stack(copies) as settings:
        index = requests.post(
            f"{settings.url('triton_http')}/v2/repository/index", json={}, timeout=10
        ).json()
        models = [m["name"] for m in index]
        assert len(models) == copies, models
        warm(settings, models)
        url = f"{settings.url('exporter')}/metrics"
        session = requests.Session()
        times = []
        body = ""
        for _ in range(scrapes):
            start = time.perf_counter()
            body = session.get(url, timeout=10).text
            times.append(time.perf_counter() - start)
        assert "triton_batching_target_up{" in body and "} 1.0" in body
        series = sum(1 for line in body.splitlines() if line.startswith("triton_batching_"))
        return {
            "models": copies,
            "p50": percentile(times, 50) * 1000,
            "p99": percentile(times, 99) * 1000,
            "max": max(times) * 1000,
            "series": series,
            "kib": len(body) / 1024,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes per size (200)")
    parser.add_argument("--models", type=int, nargs="+", default=[1, 20], help="sizes (1 20)")
    args = parser.parse_args()
    rows = [measure(n, args.scrapes) for n in args.models]
    print(f"exporter scrape latency, {args.scrapes} back-to-back scrapes per size ({MODEL} copies)")
    print(f"{'models':>6}  {'p50 ms':>7}  {'p99 ms':>7}  {'max ms':>7}  {'series':>6}  {'KiB':>6}")
    for r in rows:
        print(
            f"{r['models']:>6}  {r['p50']:>7.1f}  {r['p99']:>7.1f}  {r['max']:>7.1f}  "
            f"{r['series']:>6}  {r['kib']:>6.1f}"
        )


if __name__ == "__main__":
    main()
