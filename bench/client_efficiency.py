"""Client efficiency: loadgen's throughput / perf_analyzer's on the same Triton, same model,
same protocol and concurrency, measured alternately (perf_analyzer, loadgen, perf_analyzer,
...) so that both see the same machine load. Goal: >= 0.9 on HTTP and on gRPC.

    STACK_TRITON_VENV=... .venv/bin/python -m bench.client_efficiency [--rounds 3] [--seconds 4]
        [--protocols http,grpc] [--concurrency 8,16]

perf_analyzer comes from bench/perf_analyzer_env.sh (its own .venv-bench, never a project
dependency). Both clients send [1,1] FP32 inputs to batch_add_model (binary tensors over
HTTP, raw_input_contents over gRPC); loadgen also checks every answer, perf_analyzer does not.
Client CPU per request: perf_analyzer's user+system time (a child process) and loadgen's
process time (every thread, grpc's own included), each over the requests it got answered.
"""

from __future__ import annotations

import argparse
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.common import median, private_triton
from loadgen.engine.runner import RunParams, run
from tritonapi.client import TritonClient

ROOT = Path(__file__).resolve().parent.parent


def perf_analyzer_path() -> str:
    out = subprocess.run(
        [str(ROOT / "bench" / "perf_analyzer_env.sh")], capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def perf_analyzer(
    pa: str, http: str, target: str, protocol: str, model: str, concurrency: int, seconds: float
) -> tuple[float, float]:
    """Throughput of its final window, and its CPU per request over all its windows."""
    before, cpu0 = TritonClient(http).model_stats(model), children_cpu_s()
    out = subprocess.run(
        [
            pa,
            "-m",
            model,
            "-u",
            target,
            "-i",
            protocol,
            "--concurrency-range",
            str(concurrency),
            "--measurement-interval",
            str(int(seconds * 1000)),
            "--stability-percentage",
            "100",
            "--max-trials",
            "10",
            "--shape",
            "INPUT_A:1",
            "--shape",
            "INPUT_B:1",
        ],
        capture_output=True,
        text=True,
        # Its windows stretch on a loaded machine: up to 10 of them, each given 3x its time.
        timeout=60 + 30 * seconds,
    )
    found = re.findall(r"Concurrency: \d+, throughput: ([\d.]+) infer/sec", out.stdout)
    if not found:
        found = re.findall(r"Throughput: ([\d.]+) infer/sec", out.stdout)
    if not found:
        raise SystemExit(
            f"perf_analyzer gave no throughput:\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
        )
    delta = TritonClient(http).model_stats(model).minus(before)
    cpu_per_request = (children_cpu_s() - cpu0) / max(delta.phase("success").count, 1)
    return float(found[-1]), cpu_per_request


def loadgen(
    http: str, grpc_url: str, protocol: str, model: str, concurrency: int, seconds: float
) -> tuple[float, int, float]:
    cpu0 = time.process_time()
    params = RunParams(
        "concurrency",
        model=model,
        url=http,
        grpc_url=grpc_url,
        protocol=protocol,
        concurrency=concurrency,
        duration_s=seconds,
    )
    result = run(params)
    c = result.summary.client
    assert c.sent == c.ok + c.failed + c.timed_out
    cpu_per_request = (time.process_time() - cpu0) / max(c.sent, 1)
    return float(c.throughput_per_s or 0.0), c.failed + c.timed_out, cpu_per_request


Row = tuple[str, int, float, float, float, int, float, float]


def measure(
    pa: str, http: str, grpc_url: str, protocol: str, model: str, c: int, rounds: int, secs: float
) -> Row:
    """``rounds`` alternating pairs (perf_analyzer then loadgen); medians of each."""
    target = grpc_url if protocol == "grpc" else http.removeprefix("http://")
    pas, lgs, ratios, errors, pa_cpu, lg_cpu = [], [], [], 0, [], []
    for _ in range(rounds):
        thr, cpu = perf_analyzer(pa, http, target, protocol, model, c, secs)
        pas.append(thr)
        pa_cpu.append(cpu * 1e6)
        thr, bad, cpu = loadgen(http, grpc_url, protocol, model, c, secs)
        lgs.append(thr)
        lg_cpu.append(cpu * 1e6)
        errors += bad
        ratios.append(lgs[-1] / pas[-1])
        print(
            f"  {protocol} c={c}: perf_analyzer {pas[-1]:,.0f}/s  loadgen {lgs[-1]:,.0f}/s  "
            f"ratio {ratios[-1]:.2f}",
            flush=True,
        )
    return (
        protocol,
        c,
        median(pas),
        median(lgs),
        median(ratios),
        errors,
        median(pa_cpu),
        median(lg_cpu),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--concurrency", default="8,16")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--model", default="batch_add_model")
    args = parser.parse_args()
    pa = perf_analyzer_path()
    levels = [int(c) for c in args.concurrency.split(",")]
    protocols = [p for p in args.protocols.split(",") if p]
    rows = []
    with private_triton() as settings:
        http, grpc_url = settings.url("triton_http"), settings.grpc_address
        for protocol in protocols:  # warm-up: the model, the connections, grpc's threads
            loadgen(http, grpc_url, protocol, args.model, 8, 1.0)
        for protocol in protocols:
            for c in levels:
                rows.append(
                    measure(pa, http, grpc_url, protocol, args.model, c, args.rounds, args.seconds)
                )
    print(
        f"\nclient efficiency on {args.model}, {args.rounds} alternating rounds of "
        f"{args.seconds:g}s (medians; ratio: median of the rounds' ratios)"
    )
    print(
        "| protocol | concurrency | perf_analyzer infer/s | loadgen infer/s | ratio | failed "
        "| client CPU µs/request: perf_analyzer | loadgen |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for proto, c, p, lg, r, e, pc, lc in rows:
        print(
            f"| {proto.upper() if proto == 'http' else 'gRPC'} | {c} | {p:,.0f} | {lg:,.0f} "
            f"| {r:.2f} | {e} | {pc:,.0f} | {lc:,.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
