"""Soak: the stack's services under the highest closed-loop load for N minutes, and whether
anything grows. Goals: every service's RSS grows < 10 % from the first minute after a warm-up
to the last, and 0 requests unaccounted for.

    STACK_TRITON_VENV=... .venv/bin/python -m bench.soak --minutes 10 [--concurrency C]

A private stack (Triton, exporter, Prometheus, Alertmanager, dashboard); without
--concurrency, 4 s at each of 8, 16 and 32 clients picks the highest throughput. The load is
one `batchscope load concurrency` process, measured as a service too. Every 5 s each
service's RSS (its whole process group) is sampled; printed: the medians of the first minute,
the first after the warm-up (--warmup-minutes, while Prometheus builds its head block) and
the last, and the growths. Then the accounting: the client's ok against Triton's own success
count (statistics API), the store's records and timeline against the client, and the store's
size per request. A run still going 90 s past its duration gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import requests

from bench.common import MODEL, stack
from loadgen.engine.runner import RunParams, run
from runs.store import RunStore
from stack.supervisor import Supervisor, group_members
from stacksettings import ROOT, Settings
from tritonapi.client import TritonClient
from tritonapi.stats import ModelStats

SERVICES = ("triton", "exporter", "alertmanager", "prometheus", "dashboard")
SAMPLE_S = 5.0
GRACE_S = 90.0
RSS_GOAL = 0.10
GOGC = os.environ.get("GOGC", "50 (the stack's default)")


def rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass  # gone meanwhile
    return total


def pick_concurrency(url: str) -> int:
    best, best_rate = 8, 0.0
    for c in (8, 16, 32):
        result = run(RunParams("concurrency", url=url, concurrency=c, duration_s=4))
        rate = result.summary.client.throughput_per_s or 0.0
        print(f"  concurrency {c:>3}: {rate:,.0f} requests/s", flush=True)
        if rate > best_rate:
            best, best_rate = c, rate
    return best


def prometheus_heap(url: str) -> tuple[float, float]:
    """(Go heap in use in bytes, head series) from Prometheus' own /metrics; NaN if unread."""
    found = {"go_memstats_heap_inuse_bytes": math.nan, "prometheus_tsdb_head_series": math.nan}
    try:
        text = requests.get(f"{url}/metrics", timeout=5).text
    except requests.RequestException:
        return math.nan, math.nan
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in found:
            found[name] = float(value)
    return found["go_memstats_heap_inuse_bytes"], found["prometheus_tsdb_head_series"]


def soak(
    settings: Settings, minutes: float, concurrency: int | None, folder: Path, warmup_s: float
) -> int:
    url = settings.url("triton_http")
    services = {r.name: r for r in Supervisor(settings, []).read_state()}
    print(f"services: {', '.join(f'{n} (pid {r.pid})' for n, r in services.items())}")
    if concurrency is None:
        print("picking the concurrency with the highest throughput:", flush=True)
        concurrency = pick_concurrency(url)
    seconds = minutes * 60
    db = folder / "soak.sqlite3"
    before = TritonClient(url).model_stats(MODEL)
    print(f"soak: concurrency {concurrency} for {seconds:g} s into {db}", flush=True)
    out_path, err_path = folder / "loadgen.out.json", folder / "loadgen.err"
    out_file, err_file = out_path.open("w"), err_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "batchscope", "load", "concurrency", "-c", str(concurrency)]
        + ["-d", f"{seconds:g}", "--url", url, "--db", str(db), "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        # Files, not pipes: nothing reads a pipe until the run ends, and a result over the
        # pipe's 64 KiB would block the load generator until the bench's SIGTERM.
        stdout=out_file,
        stderr=err_file,
    )
    t0 = time.monotonic()
    samples: list[tuple[float, dict[str, int], float]] = []  # (t, service -> rss, load1)
    head_series: list[float] = []
    stopped_by_bench = ""
    while proc.poll() is None:
        t = time.monotonic() - t0
        rss = {name: rss_bytes(group_members(r)) for name, r in services.items()}
        rss["loadgen"] = rss_bytes([proc.pid])
        heap, series = prometheus_heap(settings.url("prometheus"))
        rss["prometheus Go heap"] = int(heap) if heap == heap else 0
        samples.append((t, rss, os.getloadavg()[0]))
        head_series.append(series)
        if len(samples) % 12 == 0:
            print(
                f"  {t:6.0f} s  loadgen RSS {rss['loadgen'] / 2**20:6.1f} MiB  "
                f"Triton {rss.get('triton', 0) / 2**20:6.1f} MiB  load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
        if t > seconds + GRACE_S and not stopped_by_bench:
            stopped_by_bench = "SIGTERM"
            proc.send_signal(signal.SIGTERM)
        if t > seconds + GRACE_S + 30:
            stopped_by_bench = "SIGKILL"
            proc.kill()
        time.sleep(SAMPLE_S)
    proc.wait()
    out_file.close()
    err_file.close()
    out, err = out_path.read_text(), err_path.read_text()
    elapsed = time.monotonic() - t0
    after = TritonClient(url).model_stats(MODEL)
    if not out.strip():
        print(f"the load generator printed no result (exit {proc.returncode}):\n{err[-2000:]}")
        return 1
    result = json.loads(out)
    report_rss(samples, elapsed, warmup_s)
    print(
        f"Prometheus head series: {head_series[0]:.0f} at the start, {head_series[-1]:.0f} at "
        f"the end; its GOGC: {GOGC}"
    )
    return report_accounting(result, db, after.minus(before), err, samples)


def report_rss(
    samples: list[tuple[float, dict[str, int], float]], elapsed: float, warmup_s: float
) -> None:
    def median_of(name: str, lo: float, hi: float) -> float:
        return statistics.median(s[1][name] for s in samples if lo <= s[0] < hi) / 2**20

    warm = (warmup_s, warmup_s + 60)
    print(
        f"\nRSS, median of each minute's samples (every {SAMPLE_S:g} s). The first "
        f"{warmup_s / 60:g} min are warm-up (Prometheus cuts its first head chunks after 120 "
        "scrapes); growth is from the warm minute to the last, the goal's measure:"
    )
    print(
        f"  {'service':<20}{'0-1 min MiB':>12}{f'{warm[0] / 60:g}-{warm[1] / 60:g} min':>12}"
        f"{'last min':>10}{'growth':>9}{'from 0-1':>10}"
    )
    for name in samples[0][1]:
        first = median_of(name, 0, 60)
        a = median_of(name, *warm)
        b = median_of(name, elapsed - 60, elapsed + 1)
        growth = (b - a) / a if a else float("nan")
        raw = (b - first) / first if first else float("nan")
        if name.endswith("Go heap"):
            mark = "(part of prometheus' RSS)"
        else:
            mark = "ok" if growth < RSS_GOAL else f"over the {RSS_GOAL:.0%} goal"
        print(f"  {name:<20}{first:>12.1f}{a:>12.1f}{b:>10.1f}{growth:>+9.1%}{raw:>+10.1%}  {mark}")
    loads = [s[2] for s in samples]
    print(
        f"load average (1 min) over the soak: min {min(loads):.2f}, median "
        f"{statistics.median(loads):.2f}, max {max(loads):.2f} (2 cores, shared)"
    )


def report_accounting(result: dict, db: Path, server: ModelStats, err: str, samples: list) -> int:
    """The client's counts against Triton's statistics over the same window (an observer
    the load generator does not control), and the store against the client. Unaccounted:
    every difference the run cannot explain. The only explained one: a request the client
    gave up on (timed out) that Triton still served, which Triton counts as a success."""
    c = result["client"]
    run_id = result["run_id"]
    records, timeline = [], []
    if run_id is not None:
        with RunStore(db) as runs:
            records, timeline = runs.load_records(run_id), runs.load_timeline(run_id)
    stored = {
        o: sum(1 for r in records if r["outcome"] == o) for o in ("ok", "failed", "timed_out")
    }
    served, refused = server.phase("success").count, server.phase("fail").count
    # Triton served more than the client got: only timed-out requests may explain it.
    over = max(0, served - c["ok"] - c["timed_out"])
    under = max(0, c["ok"] - served)  # an ok the server never counted: never explained
    # The client's failures are printed with their errors beside Triton's: some never
    # reached it (the client's own faults), so the two failure counts need not agree.
    store_gaps = sum(abs(stored[o] - c[o]) for o in stored) + abs(len(records) - c["sent"])
    store_gaps += abs(sum(t["sent"] for t in timeline) - c["sent"])
    unaccounted = over + under + store_gaps
    size = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))
    print("\nrequests (the client's, then Triton's statistics API over the window):")
    print(
        f"  client: sent {c['sent']:,}: ok {c['ok']:,}, failed {c['failed']:,}, timed out "
        f"{c['timed_out']:,}   over {c['duration_s']:.1f} s: {c['throughput_per_s'] or 0:,.0f}/s"
    )
    print(
        f"  Triton: {served:,} served, {refused:,} failed, {server.inference_count:,} inferences "
        f"in {server.execution_count:,} executions"
    )
    print(
        f"  status {result['status']}, ended by {c.get('ended', '?')}; records in the store "
        f"{len(records):,} (ok {stored['ok']:,}, failed {stored['failed']:,}, timed out "
        f"{stored['timed_out']:,}); timeline: sent {sum(t['sent'] for t in timeline):,}, ok "
        f"{sum(t['ok'] for t in timeline):,} over {len(timeline)} seconds"
    )
    if c["failed"] or c["timed_out"]:
        print(f"  the client's errors: {c.get('errors', {})}")
    print(
        f"  unaccounted for: {unaccounted:,} (ok the server never counted {under:,}; served "
        f"beyond ok + timed out {over:,}; store against client {store_gaps:,})"
    )
    print(
        f"store: {size / 1e6:.1f} MB for {len(records):,} records: "
        f"{size / max(len(records), 1):.1f} bytes a request (as many MB per million requests)"
    )
    if err.strip():
        print(f"load generator's stderr: {err.strip()[-500:]}")
    return 0 if unaccounted == 0 and result["status"] == "ok" else 1


# Method notes (the module doc's summary). The RSS of a service is its whole process group:
# Triton's python-backend stubs count with Triton. The warm-up is left out because Prometheus
# is still building its head block then: each series gets its first in-memory chunk, cut after
# 120 samples (2 min at the stack's 1 s scrapes), and the Go heap finds its size; the growth
# from the very first minute is printed too, and Prometheus' own Go heap and head series are
# read from its /metrics. Triton's success count comes from the statistics API, which the load
# generator does not control; a timed-out request Triton still served is the one difference
# explained.
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument(
        "--warmup-minutes",
        type=float,
        default=3.0,
        help="left out of the growth: Prometheus' head block and heap settle (3)",
    )
    args = parser.parse_args()
    if not args.warmup_minutes >= 0:
        parser.error("--warmup-minutes must be 0 or more")
    if not args.minutes >= args.warmup_minutes + 2:
        parser.error(
            "--minutes must be at least --warmup-minutes + 2 (a warm minute and a last minute)"
        )
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with stack(services=SERVICES) as settings:
        return soak(
            settings, args.minutes, args.concurrency, settings.state_dir, args.warmup_minutes * 60
        )


if __name__ == "__main__":
    sys.exit(main())
