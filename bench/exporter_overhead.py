"""Triton throughput with the exporter scraped every second ÷ the same load without scraping.

    .venv/bin/python -m bench.exporter_overhead [--rounds 5] [--seconds 6] [--concurrency 8]

Closed-loop load on batch_add_model at a fixed concurrency, in alternating
rounds (scraped, unscraped, scraped, ...) in one run so that drift on a shared
machine hits both sides alike. The load client is NVIDIA's perf_analyzer when
.venv-bench has it (`python3 -m venv .venv-bench && .venv-bench/bin/pip install
tritonclient==2.41.0`; never a project dependency), else a Python closed loop
with one tritonclient per thread. The goal is a ratio >= 0.98.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import requests
import tritonclient.http as httpclient

from bench.common import MODEL, mean, stack
from stack.supervisor import Supervisor
from stacksettings import ROOT, Settings, procstat

BENCH_VENV = ROOT / ".venv-bench"


def perf_analyzer() -> tuple[Path, dict[str, str]] | None:
    """The binary and its environment: its two libraries come, renamed, with nvidia-pytriton."""
    binary = BENCH_VENV / "bin" / "perf_analyzer"
    libs = sorted(
        Path(os.environ.get("STACK_TRITON_VENV", ROOT / ".venv-triton")).glob(
            "lib/python3.*/site-packages/nvidia_pytriton.libs"
        )
    )
    if not binary.exists() or not libs:
        return None
    links = Path(tempfile.mkdtemp(prefix="perf-libs-"))
    for pattern, name in (
        ("libcudart-*.so.12*", "libcudart.so.12"),
        ("libb64-*.so.0d", "libb64.so.0d"),
    ):
        found = sorted(libs[-1].glob(pattern))
        if not found:
            return None
        (links / name).symlink_to(found[0])
    env = {**os.environ, "LD_LIBRARY_PATH": f"{links}:{libs[-1]}"}
    return binary, env


class Scraper:
    """GET the exporter's /metrics every second, as Prometheus would."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.scrapes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        session = requests.Session()
        while not self.stop.is_set():
            started = time.monotonic()
            body = session.get(self.url, timeout=5).text
            assert "triton_batching_target_up" in body
            self.scrapes += 1
            self.stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    def __enter__(self) -> Scraper:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()


def round_perf_analyzer(
    settings: Settings, seconds: float, concurrency: int, tool: tuple[Path, dict[str, str]]
) -> float:
    binary, env = tool
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.csv"
        window_ms = int(seconds * 1000 / 3)
        done = subprocess.run(
            [
                str(binary),
                "-m",
                MODEL,
                "-i",
                "http",
                "-u",
                f"{settings.host}:{settings.port('triton_http')}",
                f"--concurrency-range={concurrency}",
                "--measurement-mode=time_windows",
                f"--measurement-interval={window_ms}",
                # Three windows accepted as they are (a 1000% band): on a shared machine
                # perf_analyzer's stability search may never end; the alternation of
                # rounds is what controls for drift here.
                "--max-trials=3",
                "--stability-percentage=1000",
                "-f",
                str(report),
            ],
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=seconds * 10 + 60,
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr)[-2000:]
            raise SystemExit(f"perf_analyzer failed ({done.returncode}):\n{output}")
        with report.open() as f:
            row = next(csv.DictReader(f))
        return float(row["Inferences/Second"])


def round_python(settings: Settings, seconds: float, concurrency: int) -> float:
    address = f"{settings.host}:{settings.port('triton_http')}"
    deadline = time.monotonic() + seconds
    counts = [0] * concurrency

    def loop(i: int) -> None:
        client = httpclient.InferenceServerClient(address)  # one per thread: not thread-safe
        inputs = []
        for name in ("INPUT_A", "INPUT_B"):
            tensor = httpclient.InferInput(name, [1, 1], "FP32")
            tensor.set_data_from_numpy(np.array([[float(i)]], dtype=np.float32))
            inputs.append(tensor)
        while time.monotonic() < deadline:
            client.infer(MODEL, inputs)
            counts[i] += 1
        client.close()

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(concurrency)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="pairs of rounds (5)")
    parser.add_argument("--seconds", type=float, default=6.0, help="length of one round (6)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight (8)")
    parser.add_argument("--client", choices=["auto", "perf_analyzer", "python"], default="auto")
    args = parser.parse_args()
    tool = perf_analyzer() if args.client != "python" else None
    if args.client == "perf_analyzer" and tool is None:
        parser.error(f"perf_analyzer not found in {BENCH_VENV}: see this script's docstring")
    client = "perf_analyzer" if tool else "python closed loop"

    with stack() as settings:

        def measure() -> float:
            if tool:
                return round_perf_analyzer(settings, args.seconds, args.concurrency, tool)
            return round_python(settings, args.seconds, args.concurrency)

        exporter_pid = next(
            r.pid for r in Supervisor(settings, []).read_state() if r.name == "exporter"
        )
        measure()  # warm-up, not counted
        scraped: list[float] = []
        plain: list[float] = []
        scrapes = 0
        exporter_cpu = 0.0
        for i in range(args.rounds * 2):
            if i % 2 == 0:
                before = procstat.cpu_seconds([exporter_pid])
                with Scraper(f"{settings.url('exporter')}/metrics") as scraper:
                    scraped.append(measure())
                scrapes += scraper.scrapes
                exporter_cpu += procstat.cpu_seconds([exporter_pid]) - before
            else:
                plain.append(measure())

    print(
        f"client: {client}, model {MODEL}, concurrency {args.concurrency}, "
        f"{args.rounds} x 2 alternating rounds of {args.seconds:g} s, {scrapes} scrapes"
    )
    print(
        f"{'round':>5}  {'scraped 1/s (infer/s)':>22}  {'no scraping (infer/s)':>22}  {'ratio':>6}"
    )
    for i, (a, b) in enumerate(zip(scraped, plain, strict=True), 1):
        print(f"{i:>5}  {a:>22.1f}  {b:>22.1f}  {a / b:>6.3f}")
    ratio = mean(scraped) / mean(plain)
    print(f"{'mean':>5}  {mean(scraped):>22.1f}  {mean(plain):>22.1f}  {ratio:>6.3f}")
    pairs = statistics.median(a / b for a, b in zip(scraped, plain, strict=True))
    print(f"overhead ratio (goal >= 0.98): {ratio:.3f} (median of the pairs: {pairs:.3f})")
    # A figure that noise from other processes cannot move: the exporter's own CPU time.
    per_scrape = exporter_cpu / max(scrapes, 1)
    print(
        f"exporter CPU: {per_scrape * 1000:.1f} ms per scrape = {per_scrape * 100:.2f}% of "
        f"one core at 1 scrape/s ({os.cpu_count()} cores here)"
    )


if __name__ == "__main__":
    main()
