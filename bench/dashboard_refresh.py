"""How long a refresh of the live view takes with 1 hour of 1-second data for 2 models;
with ``--fleet``, how long the fleet view of 10 servers x 100 models takes to load in Chromium.

    .venv/bin/python -m bench.dashboard_refresh [--rounds 5] [--fleet]

Writes the samples of every series the dashboard reads as OpenMetrics, turns them into TSDB
blocks (``promtool tsdb create-blocks-from openmetrics``), starts the real Prometheus on them
and times, side by side: one refresh's queries (KPIs + 4 charts) with a 1-second step and
with the dashboard's step, one after another and concurrently (as
``dashboard.live.fetch_range``); and the whole page (``streamlit.testing`` AppTest), cold and
cached. With ``--fleet`` (30 min of 15-second scrapes of 1,000 models) each round opens the
launcher's dashboard's fleet view in a new Chromium tab and times the load from the
browser's clock and from outside, then a search to its rows. The method is detailed in a
comment above ``fleet_bench``. Goals: a refresh under 1 s; the fleet view loaded in at most 3 s.
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
from typing import Any

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


def backfilled(folder: Path, text: str) -> tuple[Path, int]:
    """``text`` (OpenMetrics) as TSDB blocks under ``folder``: the data folder, its samples."""
    source = folder / "data.om"
    source.write_text(text)
    data = folder / "data"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return data, sum(1 for line in text.splitlines() if not line.startswith("#"))


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
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="time the fleet view of 10 servers x 100 models in Chromium instead",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    for tool in ("prometheus", "promtool") + (("chromium",) if args.fleet else ()):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is not installed: apt-get install prometheus chromium")
    if args.fleet:
        return fleet_bench(args.rounds)

    with tempfile.TemporaryDirectory(prefix="dashbench-") as tmp:
        folder = Path(tmp)
        end = int(time.time()) - 1
        t0 = time.perf_counter()
        data, samples = backfilled(folder, openmetrics(end, HOUR_S))
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


FLEET_SERVERS, FLEET_MODELS = 10, 100
FLEET_SCRAPE_S = 15
FLEET_S = 1800


def fleet_openmetrics(end: int, seed: int = 2) -> str:
    """The series the fleet view reads, for every server and model: 15-second samples whose
    counters grow at the model's own rate and average batch size."""
    rng = random.Random(seed)
    times = range(end - FLEET_S, end + 1, FLEET_SCRAPE_S)
    families: dict[str, list[str]] = {}

    def add(name: str, kind: str, sample: str) -> None:
        families.setdefault(name, [f"# TYPE {name} {kind}"]).append(sample)

    for s in range(FLEET_SERVERS):
        target = f"http://10.0.{s}.1:8000"
        for t in times:
            add(
                "triton_batching_target_up",
                "gauge",
                f'triton_batching_target_up{{target="{target}"}} 1 {t}',
            )
        for m in range(FLEET_MODELS):
            labels = f'model="model_{m:03d}",version="1",target="{target}"'
            mbs = rng.choice([4, 8, 16, 32])
            preferred = (mbs // 2, mbs)
            per_s, batch = rng.uniform(1, 500), rng.uniform(1, mbs)
            queue_s = rng.uniform(0.0001, 0.005)
            executions = inferences = queue = 0.0
            by_size = dict.fromkeys(preferred, 0.0)
            for t in times:
                done = per_s * FLEET_SCRAPE_S / batch
                executions += done
                inferences += done * batch
                queue += done * batch * queue_s
                for size in preferred:
                    by_size[size] += done / 4
                for name, value in (
                    ("triton_batching_executions", executions),
                    ("triton_batching_inferences", inferences),
                    ("triton_batching_requests_success", inferences),
                    ("triton_batching_requests_failure", 0.0),
                    ("triton_batching_queue_seconds", queue),
                ):
                    add(name, "counter", f"{name}_total{{{labels}}} {value:.3f} {t}")
                for size, n in by_size.items():
                    add(
                        "triton_batching_batch_executions",
                        "counter",
                        f'triton_batching_batch_executions_total{{{labels},batch_size="{size}"}} '
                        f"{n:.3f} {t}",
                    )
                    add(
                        "triton_batching_preferred_batch_size",
                        "gauge",
                        f'triton_batching_preferred_batch_size{{{labels},size="{size}"}} '
                        f"{size} {t}",
                    )
                add(
                    "triton_batching_max_batch_size",
                    "gauge",
                    f"triton_batching_max_batch_size{{{labels}}} {mbs} {t}",
                )
    lines = [line for family in families.values() for line in family]
    return "\n".join([*lines, "# EOF"]) + "\n"


# The page's frame is there: Streamlit has loaded and drawn the view's header (browser clock).
FLEET_HEADER = """
() => [...document.querySelectorAll('h2')].some(h => h.innerText.trim() === 'Fleet')
  ? performance.now() : false
"""
# The fleet view has drawn its table: the caption counts every row, the grid shows rows and
# the script has finished. Returns the browser's clock then (ms since navigation start).
FLEET_SHOWN = """
(rows) => {
  const text = document.body.innerText;
  const grid = document.querySelectorAll(
    '[data-testid="stDataFrame"] table[role="grid"] tbody tr').length;
  const running = document.querySelectorAll('[data-testid="stStatusWidgetRunningIcon"]').length;
  return text.includes(rows) && grid > 0 && !running ? performance.now() : false;
}
"""


# How the fleet bench times a load (see the module doc): the data is 30 min of 15-second
# scrapes of 1,000 models, each its own batch size and traffic; the dashboard is the
# launcher's (``streamlit run``). Each round opens the fleet view in a new Chromium tab, a new
# session; the server's cache is keyed by the second, so each round reads Prometheus again. A
# load is timed from the browser's clock (``performance.now()`` when the table shows its rows:
# from navigation start) and from outside (around ``goto`` and the wait); then the time from
# typing a search to its rows. (The live-view bench, ``measure``: the dashboard's step is at
# most 300 points per series; the page is timed cold, caches cleared, and cached, the refresh
# that follows within the same step.)
def fleet_bench(rounds: int) -> int:
    from dataclasses import replace

    from playwright.sync_api import sync_playwright

    from dashboard import fleet
    from stack.supervisor import running
    from stacksettings import isolated

    with tempfile.TemporaryDirectory(prefix="fleetbench-") as tmp:
        folder = Path(tmp)
        end = int(time.time()) - 1
        t0 = time.perf_counter()
        data, samples = backfilled(folder, fleet_openmetrics(end))
        print(
            f"wrote {samples:,} samples ({FLEET_S // 60} min at {FLEET_SCRAPE_S} s, "
            f"{FLEET_SERVERS} x {FLEET_MODELS} models) in {time.perf_counter() - t0:.1f} s"
        )
        proc, url = start_prometheus(data, folder)
        try:
            table = fleet.fetch(PromClient(url, timeout_s=60), 300)
            every = FLEET_SERVERS * FLEET_MODELS
            if len(table) != every or table["batch_efficiency"].isna().any():
                raise SystemExit(f"the fleet data is not what the view reads: {len(table)} rows")
            port = int(url.rsplit(":", 1)[1])
            settings = replace(isolated(folder / "state"), scrape_interval_s=1.0).with_ports(
                prometheus=port
            )
            with running(settings, only={"dashboard"}), sync_playwright() as pw:
                browser = pw.chromium.launch(
                    executable_path="/usr/bin/chromium",
                    args=["--headless", "--no-sandbox", "--disable-gpu"],
                )
                try:
                    rows = fleet_rows(browser, settings.url("dashboard"), rounds, every)
                finally:
                    browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"\nFleet view, {FLEET_SERVERS} servers x {FLEET_MODELS} models, 5 min range (ms)")
    print(f"{'what':<58} {'median':>8} {'min':>8} {'max':>8}")
    for name, times in rows:
        print(f"{name:<58} {statistics.median(times):8.0f} {min(times):8.0f} {max(times):8.0f}")
    medians = {name: statistics.median(times) for name, times in rows if "loaded" in name}
    worst = max(medians, key=lambda name: medians[name])
    print(
        f"\ngoal: loaded in at most 3 s (median of a new tab's load): slowest median "
        f"{medians[worst]:.0f} ms, {worst} ({'met' if medians[worst] <= 3000 else 'NOT met'}); "
        f"the first load after the server started, which imports the page's modules: "
        f"{rows[0][1][0]:.0f} ms"
    )
    return 0


def fleet_rows(browser: Any, url: str, rounds: int, every: int) -> list[tuple[str, list[float]]]:
    """The first load of the server; then rounds of a new tab in a fresh browser profile (a
    first visit: Streamlit's scripts downloaded again) and a new tab of a browser that has
    been there (its HTTP cache holds them), each a new session; then a search."""
    shown = f"{every:,} of {every:,} rows"

    def load(context: Any) -> tuple[Any, float, float, float]:
        page = context.new_page()
        time.sleep(1.1)  # the next second: the server's cache misses
        t0 = time.perf_counter()
        page.goto(f"{url}/?view=Fleet")
        header = page.wait_for_function(FLEET_HEADER, timeout=120_000).json_value()
        at = page.wait_for_function(FLEET_SHOWN, arg=shown, timeout=120_000).json_value()
        return page, float(header), float(at), (time.perf_counter() - t0) * 1000

    viewport = {"width": 1500, "height": 900}
    returning = browser.new_context(viewport=viewport)
    _, _, first, _ = load(returning)
    times: dict[str, list[float]] = {}
    for round_ in range(1, rounds + 1):
        fresh = browser.new_context(viewport=viewport)
        _, header, at, wall = load(fresh)
        fresh.close()
        times.setdefault("first visit: the page's header drawn (browser clock)", []).append(header)
        times.setdefault("first visit: loaded (browser clock)", []).append(at)
        times.setdefault("first visit: loaded (outside: goto to rows shown)", []).append(wall)
        page, header, at, wall = load(returning)
        times.setdefault("new tab, browser been there: loaded (browser clock)", []).append(at)
        times.setdefault("new tab, browser been there: loaded (outside)", []).append(wall)
        box = page.locator(".st-key-fleet_search input")
        t0 = time.perf_counter()
        box.fill(f"model_{round_:03d}")
        box.press("Enter")
        page.wait_for_function(FLEET_SHOWN, arg=f"{FLEET_SERVERS} of {every:,} rows")
        times.setdefault("search typed to its rows shown (outside)", []).append(
            (time.perf_counter() - t0) * 1000
        )
        page.close()
    returning.close()
    return [("first load after the server started (browser clock)", [first]), *times.items()]


if __name__ == "__main__":
    sys.exit(main())
