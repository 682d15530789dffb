"""How long a refresh of the live view takes with 1 hour of 1-second data for 2 models.

Writes 1 h of samples of every series the dashboard reads (the exporter's metrics
and Triton's latency summary, 2 models, one sample per second) as OpenMetrics,
turns them into TSDB blocks with ``promtool tsdb create-blocks-from openmetrics``,
starts the real Prometheus on that data folder, and times, side by side in one run:

- the data of one refresh (KPIs + 4 charts) with a 1-second step, one query after
  another: what a naive dashboard would do;
- the same with the dashboard's step (at most 300 points per series), one query
  after another;
- the same, the queries run concurrently (what ``dashboard.live.fetch_range`` does);
- the whole page (``streamlit.testing`` AppTest run of dashboard/app.py), cold
  (caches cleared) and cached (the refresh that follows within the same step).

    .venv/bin/python -m bench.dashboard_refresh [--rounds 5]

Goal: a refresh under 1 s.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
# AppTest runs the page without a server; Streamlit logs a warning per run about that, unless
# this is set before the dashboard (and Streamlit) is imported.
os.environ.setdefault("STREAMLIT_LOGGER_LEVEL", "error")

from dashboard import live  # noqa: E402
from dashboard import queries as q  # noqa: E402
from promapi import PromClient, Range, aligned_range, rate_window  # noqa: E402

MODELS = {"batch_add_model": [2, 4], "other_model": [8]}
MAX_BATCH = {"batch_add_model": 4, "other_model": 8}
HOUR_S = 3600
TARGET = "http://127.0.0.1:8000"


def openmetrics(end: int, seconds: int, seed: int = 1) -> str:
    """Counters that grow like a busy batcher's, one sample per second per series."""
    rng = random.Random(seed)
    start = end - seconds
    lines: list[str] = []
    families: dict[str, list[str]] = {}

    def add(name: str, kind: str, sample: str) -> None:
        if name not in families:
            families[name] = [f"# TYPE {name} {kind}"]
        families[name].append(sample)

    for model, preferred in MODELS.items():
        labels = f'model="{model}",version="1",target="{TARGET}"'
        mbs = MAX_BATCH[model]
        totals = dict.fromkeys(["inf", "exe", "ok", "fail", "queue", "cin", "cinf", "cout"], 0.0)
        by_size = dict.fromkeys(range(1, mbs + 1), 0.0)
        for t in range(start, end + 1):
            for _ in range(rng.randint(50, 150)):
                size = rng.choice([*preferred, *preferred, 1, rng.randint(1, mbs)])
                by_size[size] += 1
                totals["exe"] += 1
                totals["inf"] += size
                totals["ok"] += size
                totals["queue"] += size * rng.uniform(0.0002, 0.002)
                totals["cin"] += size * 0.00002
                totals["cinf"] += size * rng.uniform(0.0003, 0.0008)
                totals["cout"] += size * 0.00001
            for key, name in [
                ("inf", "triton_batching_inferences"),
                ("exe", "triton_batching_executions"),
                ("ok", "triton_batching_requests_success"),
                ("fail", "triton_batching_requests_failure"),
                ("queue", "triton_batching_queue_seconds"),
                ("cin", "triton_batching_compute_input_seconds"),
                ("cinf", "triton_batching_compute_infer_seconds"),
                ("cout", "triton_batching_compute_output_seconds"),
            ]:
                add(name, "counter", f"{name}_total{{{labels}}} {totals[key]:.6f} {t}")
            for size, n in by_size.items():
                add(
                    "triton_batching_batch_executions",
                    "counter",
                    f'triton_batching_batch_executions_total{{{labels},batch_size="{size}"}} '
                    f"{n} {t}",
                )
            for size in preferred:
                add(
                    "triton_batching_preferred_batch_size",
                    "gauge",
                    f'triton_batching_preferred_batch_size{{{labels},size="{size}"}} {size} {t}',
                )
            for name, value in [
                ("triton_batching_max_batch_size", mbs),
                ("triton_batching_model_ready", 1),
                ("triton_batching_pending_requests", rng.randint(0, 5)),
            ]:
                add(name, "gauge", f"{name}{{{labels}}} {value} {t}")
            add(
                "nv_inference_request_summary_us",
                "gauge",
                f'nv_inference_request_summary_us{{model="{model}",version="1",quantile="0.99"}} '
                f"{rng.randint(1500, 4000)} {t}",
            )
    for t in range(start, end + 1):
        add(
            "triton_batching_target_up",
            "gauge",
            f'triton_batching_target_up{{target="{TARGET}"}} 1 {t}',
        )
    for family in families.values():
        lines.extend(family)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_prometheus(data: Path, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    config = folder / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1s\n")
    port = free_port()
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=30d",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(folder / "prometheus.log").open("wb"),
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                return proc, url
        except requests.RequestException:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"Prometheus did not start; see {folder / 'prometheus.log'}")


def sequential(client: PromClient, model: str, window: Range, scrape_s: float) -> None:
    """One refresh's queries one after another (no thread pool)."""
    sel = q.selector(model)
    whole = f"{int(window.seconds)}s"
    for template in live.KPI_QUERIES.values():
        client.scalar(q.build(template, sel, whole), window.end)
    point = rate_window(window.step_s, scrape_s)
    for template in live.LATEST_QUERIES.values():
        client.scalar(q.build(template, sel, point), live.last_point(window))
    for template in live.SERIES_QUERIES.values():
        client.query_range(q.build(template, sel, point), window)
    client.query(q.build(q.BATCH_SIZE_DISTRIBUTION, sel, whole), window.end)
    client.query(q.build(q.PREFERRED_BATCH_SIZES, sel), window.end)


def timed(fn: Callable[[], object], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per row (5)")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not installed: apt-get install prometheus")

    with tempfile.TemporaryDirectory(prefix="dashbench-") as tmp:
        folder = Path(tmp)
        end = int(time.time()) - 1
        t0 = time.perf_counter()
        source = folder / "data.om"
        source.write_text(openmetrics(end, HOUR_S))
        data = folder / "data"
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
            check=True,
            capture_output=True,
            timeout=600,
        )
        samples = sum(1 for line in source.open() if not line.startswith("#"))
        print(
            f"wrote {samples:,} samples (1 h at 1 s, 2 models) in {time.perf_counter() - t0:.1f} s"
        )
        proc, url = start_prometheus(data, folder)
        try:
            return measure(url, end, args.rounds)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def measure(url: str, end: int, rounds: int) -> int:
    client = PromClient(url, timeout_s=60)
    scrape_s = 1.0
    fine = Range(end - HOUR_S, end, 1)
    chosen = aligned_range(HOUR_S, end=end, min_step_s=scrape_s)
    check = live.fetch_range(client, "batch_add_model", chosen, scrape_s)
    points = len(check.series["inferences_per_s"])
    if points < 100 or check.kpis["average_batch_size"] is None:
        raise SystemExit(f"the generated data is not visible to the queries ({points} points)")

    rows: list[tuple[str, list[float]]] = []
    for model in MODELS:
        rows.append(
            (
                f"{model}: step 1 s, one query after another",
                timed(partial(sequential, client, model, fine, scrape_s), rounds),
            )
        )
        rows.append(
            (
                f"{model}: step {chosen.step_s} s, one query after another",
                timed(partial(sequential, client, model, chosen, scrape_s), rounds),
            )
        )
        rows.append(
            (
                f"{model}: step {chosen.step_s} s, concurrent (live.fetch_range)",
                timed(partial(live.fetch_range, client, model, chosen, scrape_s), rounds),
            )
        )
    rows.extend(page_rows(url, rounds))

    print(f"\nLive-view refresh, 1 h window, {rounds} rounds each (median, min, max in ms)")
    base = statistics.median(rows[0][1])
    print(f"{'what':<58} {'median':>8} {'min':>8} {'max':>8} {'vs 1st':>7}")
    for name, times in rows:
        med = statistics.median(times)
        print(
            f"{name:<58} {med * 1000:8.1f} {min(times) * 1000:8.1f} "
            f"{max(times) * 1000:8.1f} {med / base:7.2f}"
        )
    worst_cold = max(statistics.median(t) for n, t in rows if "page, cold" in n)
    print(
        f"\ngoal: a refresh under 1 s; whole page cold: {worst_cold * 1000:.0f} ms "
        f"({'met' if worst_cold < 1.0 else 'NOT met'})"
    )
    return 0


def page_rows(url: str, rounds: int) -> list[tuple[str, list[float]]]:
    """The whole page through Streamlit's AppTest: cold (caches cleared) vs cached."""
    import streamlit as st
    from streamlit import logger as st_logger
    from streamlit.testing.v1 import AppTest

    st_logger.set_log_level("error")  # no "no runtime found" line per cleared cache

    os.environ.update(
        DASHBOARD_PROMETHEUS_URL=url,
        # No Triton here: the page shows its warning and still draws everything.
        DASHBOARD_TRITON_URL=f"http://127.0.0.1:{free_port()}",
        DASHBOARD_SCRAPE_INTERVAL="1",
    )
    rows = []
    for model in MODELS:
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60)
        at.session_state["model"] = model
        at.session_state["window"] = "1 hour"
        at.run()
        if at.exception or len(at.get("plotly_chart")) != 4:
            raise SystemExit(f"the page did not render its 4 charts: {at.exception}")
        cold, cached = [], []
        for _ in range(rounds):
            st.cache_data.clear()
            t0 = time.perf_counter()
            at.run()
            cold.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            at.run()
            cached.append(time.perf_counter() - t0)
        rows.append((f"{model}: whole page, cold (AppTest)", cold))
        rows.append((f"{model}: whole page, cached (AppTest)", cached))
    return rows


if __name__ == "__main__":
    sys.exit(main())
