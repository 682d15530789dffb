"""Scrape latency of the exporter as models and targets grow: one Triton of 1, 20 and 100
models; a fleet of 3 Tritons x 20 models, read by one exporter, without and with its config
cache, and off the scrape path every second (--read-interval 1); and 10 stand-in Tritons x
100 models (bench.standin), read at scrape time and every second.

    .venv/bin/python -m bench.scrape_latency [--scrapes 200] [--models 1 20 100] [--fleet 3]
                                             [--standins 10 100]

Each size starts a stack (Triton + exporter, the launcher's code) over batch_add_model
copies, each served a few batched bursts first; then /metrics is fetched back to back, timed
end to end from this client. The fleet shares one admin key, given to the exporter; the
stand-ins serve what the first single Triton answered once warm, under new model names.
Printed per size: the scrape latency; "age", how old the last scrape's data was (about 0 at
scrape time, up to twice the interval with the background reader); "CPU", the exporter's CPU
time over the timed scrapes, per scrape and per scrape and model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests

from bench.common import MODEL, percentile, repository, stack
from bench.standin import Capture, capture, standins, varied
from exporter.scrape import CONFIG_TTL_S
from loadgen.clients.burst import burst, infer_body
from stack.supervisor import Supervisor, running
from stacksettings import ROOT, Settings, ensure_secret, isolated, procstat


def warm(settings: Settings, models: list[str]) -> None:
    for model in models:
        for n in (1, 2, 3, 4):
            body = infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})
            burst(settings.host, settings.port("triton_http"), model, [body] * n)


def measure(copies: int, scrapes: int) -> tuple[dict[str, Any], Capture]:
    """The row of one Triton of ``copies`` models, and what that Triton answered once warm."""
    with stack(copies) as settings:
        row = timed(settings, copies, scrapes, "1 target")
        metrics = f"{settings.url('triton_metrics')}/metrics"
        answers = capture(settings.url("triton_http"), metrics, settings.admin_headers())
        return row, answers


def timed(
    settings: Settings, copies: int, scrapes: int, what: str, warmed: bool = True
) -> dict[str, Any]:
    """Warm every target's models (``warmed``: real Tritons), then time ``scrapes``
    back-to-back scrapes."""
    for url in settings.triton_targets if warmed else ():
        host, port = url.removeprefix("http://").rsplit(":", 1)
        target = replace(settings, host=host).with_ports(triton_http=int(port))
        index = requests.post(
            f"{url}/v2/repository/index", json={}, timeout=10, headers=settings.admin_headers()
        ).json()
        models = [m["name"] for m in index]
        assert len(models) == copies, models
        warm(target, models)
    url = f"{settings.url('exporter')}/metrics"
    pid = next(r.pid for r in Supervisor(settings, []).read_state() if r.name == "exporter")
    session = requests.Session()
    session.get(url, timeout=10)  # the first read (every config fetched) is not timed
    times = []
    body = ""
    cpu = procstat.cpu_seconds([pid])
    for _ in range(scrapes):
        start = time.perf_counter()
        body = session.get(url, timeout=10).text
        times.append(time.perf_counter() - start)
    cpu = procstat.cpu_seconds([pid]) - cpu
    assert body.count("triton_batching_target_up{") == len(settings.triton_targets)
    assert "} 0.0" not in "".join(
        ln for ln in body.splitlines() if ln.startswith("triton_batching_target_up")
    )
    series = sum(1 for line in body.splitlines() if line.startswith("triton_batching_"))
    ages = [
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("triton_batching_data_age_seconds{")
    ]
    return {
        "what": what,
        "models": copies * len(settings.triton_targets),
        "p50": percentile(times, 50) * 1000,
        "p99": percentile(times, 99) * 1000,
        "max": max(times) * 1000,
        "series": series,
        "kib": len(body) / 1024,
        # How old the data of the last scrape was (the background reader's lag).
        "age": max(ages) * 1000,
        "cpu_ms": cpu / scrapes * 1000,
        "cpu_us_model": cpu / scrapes / (copies * len(settings.triton_targets)) * 1e6,
    }


@contextmanager
def fleet(targets: int, copies: int) -> Iterator[tuple[list[Settings], Path]]:
    """``targets`` Tritons on loopback (the launcher's code) sharing one admin key."""
    os.environ.setdefault("STACK_TRITON_VENV", str(ROOT / ".venv-triton"))
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp, ExitStack() as stack_:
        key = Path(tmp) / "triton-admin.key"
        ensure_secret(key)
        tritons = []
        for i in range(targets):
            own = isolated(Path(tmp) / f"triton{i}")
            own = replace(own, model_repository=repository(Path(tmp) / f"repo{i}", copies))
            own.state_dir.mkdir(parents=True)
            shutil.copy(key, own.admin_key_file)  # one key for the fleet
            stack_.enter_context(running(own, only=("triton",)))
            tritons.append(own)
        yield tritons, key


@contextmanager
def attached_exporter(
    urls: list[tuple[str, str]],
    key: Path | None,
    state: Path,
    cache_ttl_s: float,
    read_interval_s: float,
) -> Iterator[Settings]:
    """The launcher's exporter row in attach mode, reading every (HTTP URL, metrics URL)."""
    settings = replace(
        isolated(state),
        # The exporter's Triton timeout is half the scrape interval, at most 2 s
        # (stack.exporter): 2 s, its own default, for every row.
        scrape_interval_s=4.0,
        triton_urls=tuple(http for http, _ in urls),
        triton_metrics_urls=tuple(metrics for _, metrics in urls),
        attached_admin_key_file=key,
    )
    os.environ["EXPORTER_CONFIG_CACHE_TTL"] = f"{cache_ttl_s:g}"
    os.environ["EXPORTER_READ_INTERVAL"] = f"{read_interval_s:g}"
    try:
        with running(settings, only=("exporter",)):
            yield settings
    finally:
        del os.environ["EXPORTER_CONFIG_CACHE_TTL"]
        del os.environ["EXPORTER_READ_INTERVAL"]


# (config cache TTL, read interval, what the row says): the exporter's three ways to read.
FLEET_MODES = [
    (0.0, 0.0, "no cache"),
    (CONFIG_TTL_S, 0.0, "cached"),
    (CONFIG_TTL_S, 1.0, "cached, read every 1s"),
]


def measure_fleet(targets: int, copies: int, scrapes: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with fleet(targets, copies) as (tritons, key):
        urls = [(t.url("triton_http"), f"{t.url('triton_metrics')}/metrics") for t in tritons]
        for ttl, interval, what in FLEET_MODES:
            state = key.parent / f"exporter-{len(rows)}"
            with attached_exporter(urls, key, state, ttl, interval) as settings:
                rows.append(timed(settings, copies, scrapes, f"{targets} targets, {what}"))
    return rows


# (busy, config cache TTL, read interval, what the row says) of the stand-in rows
STANDIN_MODES = [
    (False, CONFIG_TTL_S, 0.0, "cached"),
    (False, CONFIG_TTL_S, 1.0, "read every 1s"),
    (True, CONFIG_TTL_S, 1.0, "busy, read every 1s"),
]


def measure_standins(
    answers: Capture, targets: int, copies: int, scrapes: int
) -> list[dict[str, Any]]:
    """``targets`` stand-ins of ``copies`` models each, read with the config cache at scrape
    time and every second (attach mode's default at a 1 s scrape interval), and busy: every
    model's statistics moved on at each read."""
    rows: list[dict[str, Any]] = []
    served = [varied(answers, copies)] * targets
    for busy, ttl, interval, what in STANDIN_MODES:
        with (
            tempfile.TemporaryDirectory(prefix="bench-standins-") as tmp,
            standins(served, Path(tmp) / "captures", busy) as stand,
        ):
            urls = [(base, f"{base}/metrics") for base in stand.urls]
            state = Path(tmp) / "exporter"
            with attached_exporter(urls, None, state, ttl, interval) as settings:
                label = f"{targets} stand-ins, {what}"
                rows.append(timed(settings, copies, scrapes, label, warmed=False))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes per size (200)")
    parser.add_argument(
        "--models", type=int, nargs="*", default=[1, 20, 100], help="sizes (1 20 100)"
    )
    parser.add_argument(
        "--fleet",
        type=int,
        default=3,
        help="Tritons of 20 models each in the fleet rows (3; 0: none)",
    )
    parser.add_argument(
        "--standins",
        type=int,
        nargs=2,
        default=[10, 100],
        metavar=("TARGETS", "MODELS"),
        help="stand-in Tritons and models each (10 100; 0 0: none)",
    )
    args = parser.parse_args()
    print(f"exporter scrape latency, {args.scrapes} back-to-back scrapes per size ({MODEL} copies)")
    print(
        f"{'':<36}  {'models':>6}  {'p50 ms':>7}  {'p99 ms':>7}  {'max ms':>7}  {'series':>6}  "
        f"{'KiB':>6}  {'age ms':>6}  {'CPU ms':>6}  {'µs/model':>8}",
        flush=True,
    )
    answers = None
    for n in args.models or [1]:  # a Triton to capture, even with no row of its own
        row, answers = measure(n, args.scrapes)
        if args.models:
            show([row])
    if args.fleet:
        show(measure_fleet(args.fleet, 20, args.scrapes))
    if args.standins[0] and answers is not None:
        targets, copies = args.standins
        show(measure_standins(answers, targets, copies, args.scrapes))
    print("age: how old the last scrape's data was (triton_batching_data_age_seconds, max)")
    print("CPU: the exporter's CPU time over the timed scrapes, per scrape; µs/model: per model")


def show(rows: list[dict[str, Any]]) -> None:
    """Each row as it is measured: a run cut short keeps what it printed."""
    for r in rows:
        print(
            f"{r['what']:<36}  {r['models']:>6}  {r['p50']:>7.1f}  {r['p99']:>7.1f}  "
            f"{r['max']:>7.1f}  {r['series']:>6}  {r['kib']:>6.1f}  {r['age']:>6.0f}  "
            f"{r['cpu_ms']:>6.2f}  {r['cpu_us_model']:>8.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
