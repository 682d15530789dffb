"""What Triton's per-request tracing costs: throughput with tracing off, at 1/100 and 1/1,
measured alternately in one run, and what reading the traces costs.

    STACK_TRITON_VENV=... .venv/bin/python bench/trace_overhead.py [--rounds 3 --seconds 5]

A private Triton (the launcher's code: trace file in its state folder, tracing off)
serves batch_add_model under closed-loop load (the load generator, concurrency 8). Each
round runs the three settings one after another, in a rotating order, so that drift of
a shared machine hits all three alike; the table gives the median throughput of each and
its ratio to "off". Throughput is the server's own count (statistics API inference
delta / wall time). A traced run's window is larger than the run (Triton writes a window
only when complete, see tritonapi.traces), so it costs what tracing costs and writes
nothing. Then, separately, a window of --reader-count traced requests is written and
read the way the exporter reads (``TraceFollower.poll`` + ``group_batches``), in CPU s.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import MODEL, median, private_triton  # noqa: E402
from loadgen.api import RunParams, run  # noqa: E402
from stacksettings import Settings  # noqa: E402
from tritonapi.client import TritonClient  # noqa: E402
from tritonapi.traces import (  # noqa: E402
    MAX_COUNT,
    TraceFollower,
    group_batches,
    start_window,
    stop_window,
    window_left,
)

SETTINGS = {"off": 0, "1/100": 100, "1/1": 1}


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one(settings: Settings, rate: int, seconds: float, concurrency: int) -> float:
    """Server throughput (inferences/s) of one closed-loop run traced at 1/rate (0: off)."""
    triton = TritonClient(settings.url("triton_http"))
    if rate:
        start_window(triton, MODEL, count=MAX_COUNT, rate=rate)
    before, t0 = triton.model_stats(MODEL), time.monotonic()
    try:
        params = RunParams(
            "concurrency",
            model=MODEL,
            url=settings.url("triton_http"),
            concurrency=concurrency,
            duration_s=seconds,
        )
        result = run(params)
        assert result.status == "ok", result.status
    finally:
        wall = time.monotonic() - t0
        if rate:
            stop_window(triton, MODEL)
    return triton.model_stats(MODEL).minus(before).inference_count / wall


def reader_cost(settings: Settings, count: int, concurrency: int) -> tuple[int, float]:
    """(traced requests read, CPU seconds it took): one complete window, the exporter's way."""
    triton = TritonClient(settings.url("triton_http"))
    start_window(triton, MODEL, count=count)
    params = RunParams(
        "concurrency",
        model=MODEL,
        url=settings.url("triton_http"),
        concurrency=concurrency,
        duration_s=60.0,
        requests=count,
    )
    run(params)
    deadline = time.monotonic() + 10
    while window_left(triton, MODEL) and time.monotonic() < deadline:
        time.sleep(0.2)
    stop_window(triton, MODEL)
    time.sleep(0.5)
    follower = TraceFollower(settings.trace_file)
    c0 = cpu_s()
    requests = follower.poll()
    group_batches(requests)
    return len(requests), cpu_s() - c0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--reader-count", type=int, default=10_000)
    args = parser.parse_args()
    throughput: dict[str, list[float]] = {name: [] for name in SETTINGS}
    with private_triton() as settings:
        one(settings, 0, 1.0, args.concurrency)  # warm-up
        names = list(SETTINGS)
        for r in range(args.rounds):
            for name in names[r % 3 :] + names[: r % 3]:
                rate = SETTINGS[name]
                throughput[name].append(one(settings, rate, args.seconds, args.concurrency))
                print(f"  round {r + 1} {name:>6}: {throughput[name][-1]:,.0f} infer/s", flush=True)
        read, read_cpu = reader_cost(settings, args.reader_count, args.concurrency)
    base = median(throughput["off"])
    rounds = f"{args.rounds} rounds of {args.seconds:g} s"
    print(f"\n{MODEL}, concurrency {args.concurrency}, {rounds}")
    print(f"{'tracing':<10}{'median infer/s':>16}{'vs off':>10}")
    for name in SETTINGS:
        m = median(throughput[name])
        print(f"{name:<10}{m:>16,.0f}{m / base:>10.3f}")
    per_10k = read_cpu / read * 10_000 if read else float("nan")
    print(
        f"\nreader: {read:,} traced requests read and grouped in {read_cpu:.2f} CPU s "
        f"= {per_10k:.2f} CPU s per 10,000 traced requests"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
