"""What Triton's per-request tracing costs: throughput with tracing off and at sampling
rates from 1/1000 to 1/1, measured alternately in one run, and what reading them costs.

    STACK_TRITON_VENV=... .venv/bin/python -m bench.trace_overhead [--rounds 5 --requests 5000]

A private Triton (the launcher's code: trace file in its state folder, tracing off)
serves batch_add_model under closed-loop load (the load generator, concurrency 8). Each
run sends --requests requests; a traced run is one trace window over exactly those
requests (count = requests / rate). A setting whose window lies outside the server's safe
region (tritonapi.tracesafety: Triton before 2.57 crashes under long traced streams) is
left out, and the output says so. Each round runs the settings
in a rotating order, so that drift of a shared machine hits all three alike; the table
gives each setting's median throughput (requests / wall time, from the server's own
statistics) and its ratio to "off". The rate-1 windows' files are then read the way the
exporter reads them (``TraceFollower.poll`` + ``group_batches``), timed in CPU seconds.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from bench.common import MODEL, median, private_triton
from loadgen.engine.runner import RunParams, run
from stacksettings import Settings
from tritonapi.client import TritonClient
from tritonapi.traces import (
    TracedRequest,
    TraceFollower,
    group_batches,
    start_window,
    stop_window,
    window_left,
)
from tritonapi.tracesafety import Load, UnsafeTrace, plan, server_version

SETTINGS = {"off": 0, "1/1000": 1000, "1/100": 100, "1/10": 10, "1/1": 1}


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one(settings: Settings, rate: int, requests: int, concurrency: int) -> float:
    """Server throughput (inferences/s) of ``requests`` closed-loop requests, traced 1/rate."""
    triton = TritonClient(settings.url("triton_http"), headers=settings.admin_headers())
    if rate:
        # One traced request fewer than the run makes: the window then surely completes.
        start_window(triton, MODEL, count=max(requests // rate - 1, 1), rate=rate)
    before, t0 = triton.model_stats(MODEL), time.monotonic()
    params = RunParams(
        "concurrency",
        model=MODEL,
        url=settings.url("triton_http"),
        concurrency=concurrency,
        duration_s=120.0,
        requests=requests,
    )
    result = run(params)
    wall = time.monotonic() - t0
    assert result.status == "ok", (result.status, result.summary.client.error)
    served = triton.model_stats(MODEL).minus(before).inference_count
    if rate:
        deadline = time.monotonic() + 5
        while window_left(triton, MODEL) and time.monotonic() < deadline:
            time.sleep(0.1)
        stop_window(triton, MODEL)
    return served / wall


def safe_settings(settings: Settings, requests: int, concurrency: int) -> list[str]:
    """The settings whose window this server takes at this load; the rest are named."""
    triton = TritonClient(settings.url("triton_http"), headers=settings.admin_headers())
    version = server_version(triton)
    names = []
    for name, rate in SETTINGS.items():
        try:
            if rate:
                plan(version, Load.closed(concurrency), max(requests // rate - 1, 1), rate, False)
        except UnsafeTrace as exc:
            print(f"  {name}: left out: {exc}")
            continue
        names.append(name)
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    throughput: dict[str, list[float]] = {name: [] for name in SETTINGS}
    read: list[TracedRequest] = []
    read_cpu = 0.0
    with private_triton() as settings:
        follower = TraceFollower(settings.trace_file)
        one(settings, 0, 1_000, args.concurrency)  # warm-up
        names = safe_settings(settings, args.requests, args.concurrency)
        for name in [n for n in SETTINGS if n not in names]:
            del throughput[name]
        for r in range(args.rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                rate = SETTINGS[name]
                throughput[name].append(one(settings, rate, args.requests, args.concurrency))
                print(f"  round {r + 1} {name:>6}: {throughput[name][-1]:,.0f} infer/s", flush=True)
                time.sleep(0.3)  # the window's file
                c0 = cpu_s()
                found = follower.poll()
                group_batches(found)
                read_cpu += cpu_s() - c0
                read += found
    base = median(throughput["off"])
    print(
        f"\n{MODEL}, concurrency {args.concurrency}, {args.rounds} rounds of "
        f"{args.requests:,} requests per setting"
    )
    print(f"{'tracing':<10}{'median infer/s':>16}{'vs off':>10}")
    for name in throughput:
        m = median(throughput[name])
        print(f"{name:<10}{m:>16,.0f}{m / base:>10.3f}")
    per_10k = read_cpu / len(read) * 10_000 if read else float("nan")
    print(
        f"\nreader: {len(read):,} traced requests read and grouped in {read_cpu:.2f} CPU s "
        f"= {per_10k:.2f} CPU s per 10,000 traced requests"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
