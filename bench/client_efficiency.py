"""Client efficiency: loadgen's throughput / perf_analyzer's on the same Triton, same model,
same concurrency, measured alternately (perf_analyzer, loadgen, perf_analyzer, ...) so that
both see the same machine load. Goal: >= 0.9.

    STACK_TRITON_VENV=... .venv/bin/python bench/client_efficiency.py [--rounds 3] [--seconds 4]

perf_analyzer comes from bench/perf_analyzer_env.sh (its own .venv-bench, never a project
dependency). Both clients send [1,1] FP32 inputs over HTTP to batch_add_model with binary
tensors; loadgen also checks every answer, perf_analyzer does not.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, private_triton  # noqa: E402
from loadgen.api import RunParams, run  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def perf_analyzer_path() -> str:
    out = subprocess.run(
        [str(ROOT / "bench" / "perf_analyzer_env.sh")], capture_output=True, text=True, check=True
    )
    return out.stdout.strip().splitlines()[-1]


def perf_analyzer(pa: str, url: str, model: str, concurrency: int, seconds: float) -> float:
    out = subprocess.run(
        [
            pa,
            "-m",
            model,
            "-u",
            url,
            "-i",
            "http",
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
        timeout=120,
    )
    found = re.findall(r"Concurrency: \d+, throughput: ([\d.]+) infer/sec", out.stdout)
    if not found:
        found = re.findall(r"Throughput: ([\d.]+) infer/sec", out.stdout)
    if not found:
        raise SystemExit(
            f"perf_analyzer gave no throughput:\n{out.stdout[-2000:]}{out.stderr[-2000:]}"
        )
    return float(found[-1])


def loadgen(url: str, model: str, concurrency: int, seconds: float) -> tuple[float, int]:
    result = run(
        RunParams("concurrency", model=model, url=url, concurrency=concurrency, duration_s=seconds)
    )
    c = result.summary["client"]
    assert c["sent"] == c["ok"] + c["failed"] + c["timed_out"]
    return float(c["throughput_per_s"]), c["failed"] + c["timed_out"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--concurrency", default="8,16")
    parser.add_argument("--model", default="batch_add_model")
    args = parser.parse_args()
    pa = perf_analyzer_path()
    levels = [int(c) for c in args.concurrency.split(",")]
    rows = []
    with private_triton() as settings:
        url = settings.url("triton_http")
        hostport = url.removeprefix("http://")
        loadgen(url, args.model, 8, 1.0)  # warm-up
        for c in levels:
            pas, lgs, ratios, errors = [], [], [], 0
            for _ in range(args.rounds):
                pas.append(perf_analyzer(pa, hostport, args.model, c, args.seconds))
                thr, bad = loadgen(url, args.model, c, args.seconds)
                lgs.append(thr)
                errors += bad
                ratios.append(lgs[-1] / pas[-1])
                print(
                    f"  c={c}: perf_analyzer {pas[-1]:,.0f}/s  loadgen {lgs[-1]:,.0f}/s  "
                    f"ratio {ratios[-1]:.2f}",
                    flush=True,
                )
            rows.append((c, median(pas), median(lgs), median(ratios), errors))
    print(
        f"\nclient efficiency on {args.model}, HTTP, {args.rounds} alternating rounds of "
        f"{args.seconds:g}s (medians)"
    )
    print(
        f"{'concurrency':>11} {'perf_analyzer/s':>16} {'loadgen/s':>10} {'ratio':>6} {'failed':>7}"
    )
    for c, p, lg, r, e in rows:
        print(f"{c:>11} {p:>16,.0f} {lg:>10,.0f} {r:>6.2f} {e:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
