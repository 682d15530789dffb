"""--processes 1 vs 2 against a Triton that is not the limit: bench/models/add_sleep sleeps
5 ms per execution and batches up to 64 in two instances, so the server has capacity to
spare and spends little CPU; the load client's own cost per request is what limits.

    STACK_TRITON_VENV=... .venv/bin/python -m bench.multiprocess [--rounds 3] [--seconds 5]

Each round runs `batchscope load concurrency` with --processes 1, then 2 (alternating, so
that both see the same machine load), the same total concurrency, every answer checked.
Prints per N: the median throughput, the client's CPU per request (the loadgen process and
its workers, from the kernel's accounting of waited-for children: it includes each worker's
start, about a second of imports, spread over the run), p99 and Triton's average batch; and
the throughput ratio N=2 / N=1; and Triton's CPU per request (its process group: the server
and the python-backend stubs), which says whether the server is the limit after all. Two
processes can only help where the machine has a core
to spare for the second: the load average is printed with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from bench.common import median
from stack.supervisor import running
from stacksettings import ROOT, isolated, procstat

MODELS = ROOT / "bench" / "models"
MODEL = "add_sleep"


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(
    url: str, pgid: int, processes: int, concurrency: int, seconds: float
) -> dict[str, float]:
    cpu0, server0 = children_cpu_s(), procstat.group_cpu_seconds(pgid)
    out = subprocess.run(
        [
            sys.executable, "-m", "batchscope", "load", "concurrency", "-m", MODEL,
            "-c", str(concurrency), "-d", str(seconds), "--processes", str(processes),
            "--url", url, "--no-store", "--json",
        ],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    cpu, server_cpu = children_cpu_s() - cpu0, procstat.group_cpu_seconds(pgid) - server0
    if out.returncode not in (0, 1):
        raise SystemExit(f"loadgen --processes {processes} failed: {out.stderr.strip()}")
    data = json.loads(out.stdout)
    if out.returncode == 1:  # some requests failed or timed out: say which, do not hide it
        raise SystemExit(f"loadgen --processes {processes}: {data['client']}")
    c, s = data["client"], data["server"]
    return {
        "throughput": c["throughput_per_s"],
        "cpu_us": cpu / c["sent"] * 1e6,
        "server_cpu_us": server_cpu / c["sent"] * 1e6,
        "p99_ms": c["latency_s"]["p99"] * 1e3,
        "batch": s["average_batch_size"],
        "sent": c["sent"],
        "server_requests": s["requests"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=64, help="in all, split among processes")
    args = ap.parse_args()
    os.environ.setdefault("STACK_TRITON_VENV", str(ROOT / ".venv-triton"))
    with tempfile.TemporaryDirectory(prefix="bench-mp-") as tmp:
        settings = replace(isolated(Path(tmp) / "state"), model_repository=MODELS)
        with running(settings, only=("triton",)):
            url = settings.url("triton_http")
            pgid = json.loads(settings.state_file.read_text())["services"][0]["pid"]
            one_run(url, pgid, 1, args.concurrency, 1.0)  # warm-up: the first batches, imports
            results: dict[int, list[dict[str, float]]] = {1: [], 2: []}
            for r in range(args.rounds):
                for n in (1, 2):
                    got = one_run(url, pgid, n, args.concurrency, args.seconds)
                    # Exact accounting: the merged run's requests are Triton's own count.
                    assert got["sent"] == got["server_requests"], got
                    results[n].append(got)
                    print(
                        f"round {r + 1} processes {n}: {got['throughput']:,.0f}/s "
                        f"{got['cpu_us']:.0f} us CPU/request",
                        file=sys.stderr,
                        flush=True,
                    )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nmachine: {os.cpu_count()} cores, load average {load} at the end")
    print(
        f"add_sleep (5 ms per execution, batches up to 64, 2 instances), HTTP, concurrency "
        f"{args.concurrency} in all, {args.seconds:g} s runs, median of {args.rounds} rounds\n"
    )
    print(
        "| processes | throughput infer/s | client CPU per request | Triton CPU per request "
        "| p99 | average batch |"
    )
    print("|---|---|---|---|---|---|")
    for n, runs in results.items():
        print(
            f"| {n} | {median([x['throughput'] for x in runs]):,.0f} "
            f"| {median([x['cpu_us'] for x in runs]):.0f} us "
            f"| {median([x['server_cpu_us'] for x in runs]):.0f} us "
            f"| {median([x['p99_ms'] for x in runs]):.2f} ms "
            f"| {median([x['batch'] for x in runs]):.1f} |"
        )
    ratio = median([x["throughput"] for x in results[2]]) / median(
        [x["throughput"] for x in results[1]]
    )
    print(f"\nthroughput 2 processes / 1 process: {ratio:.2f}")


if __name__ == "__main__":
    main()
