"""Batching gain: batch_add_model's throughput / add_unbatched's at the same closed-loop load,
measured alternately in one run, and explained from measured costs.

    STACK_TRITON_VENV=... .venv/bin/python bench/batching_gain.py [--concurrency 8,16]

Both models run the same model.py; only dynamic batching differs. For each run we take:
- client throughput and p99 (loadgen),
- server-side deltas from the statistics API (executions, average batch, queue per
  request, model-call time per execution),
- the CPU seconds Triton's whole process group used (server + python backend stubs), per
  request.
With CPU per request = a + b / (average batch), the two runs give a (the per-request cost
batching cannot remove: HTTP front end, request/response handling) and b (the
per-execution cost it divides: one model call, stub round trip).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import median, private_triton  # noqa: E402
from loadgen.api import RunParams, run  # noqa: E402
from stacksettings import procstat  # noqa: E402

MODELS = ("batch_add_model", "add_unbatched")


def one(url: str, pgid: int, model: str, c: int, seconds: float) -> dict[str, float]:
    cpu0 = procstat.group_cpu_seconds(pgid)
    r = run(RunParams("concurrency", model=model, url=url, concurrency=c, duration_s=seconds))
    cpu = procstat.group_cpu_seconds(pgid) - cpu0
    cl, sv = r.summary.client, r.summary.server
    assert cl.sent == cl.ok, cl.errors
    assert sv is not None, r.summary.server_error
    assert cl.throughput_per_s and cl.latency_s.p99 and sv.average_batch_size
    assert sv.queue_s_per_request is not None and sv.compute_infer_s_per_execution is not None
    return {
        "throughput": cl.throughput_per_s,
        "p99_ms": cl.latency_s.p99 * 1e3,
        "avg_batch": sv.average_batch_size,
        "executions": sv.executions,
        "requests": sv.requests,
        "queue_ms": sv.queue_s_per_request * 1e3,
        "call_ms": sv.compute_infer_s_per_execution * 1e3,
        "cpu_us_per_request": cpu / sv.requests * 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--concurrency", default="8,16")
    args = parser.parse_args()
    with private_triton() as settings:
        url = settings.url("triton_http")
        pgid = json.loads(settings.state_file.read_text())["services"][0]["pid"]
        run(RunParams("concurrency", url=url, concurrency=8, duration_s=1.0))  # warm-up
        for c in [int(x) for x in args.concurrency.split(",")]:
            runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODELS}
            for _ in range(args.rounds):
                for m in MODELS:
                    runs[m].append(one(url, pgid, m, c, args.seconds))
                    print(f"  c={c} {m:<16} {runs[m][-1]['throughput']:,.0f}/s", flush=True)
            med = {m: {k: median([r[k] for r in runs[m]]) for k in runs[m][0]} for m in MODELS}
            report(c, med, args)
    return 0


def report(c: int, med: dict[str, dict[str, float]], args: argparse.Namespace) -> None:
    bat, unb = med["batch_add_model"], med["add_unbatched"]
    print(
        f"\nbatching gain at concurrency {c}, HTTP, {args.rounds} alternating rounds of "
        f"{args.seconds:g}s (medians)"
    )
    keys = [
        ("throughput", "throughput /s", 0),
        ("p99_ms", "p99 ms", 2),
        ("avg_batch", "average batch", 2),
        ("queue_ms", "queue ms / request", 3),
        ("call_ms", "model call ms / execution", 3),
        ("cpu_us_per_request", "Triton CPU us / request", 0),
    ]
    print(f"{'':<28}{'batch_add_model':>16}{'add_unbatched':>15}{'ratio':>8}")
    for key, name, digits in keys:
        ratio = bat[key] / unb[key] if unb[key] else float("nan")
        print(f"{name:<28}{bat[key]:>16,.{digits}f}{unb[key]:>15,.{digits}f}{ratio:>7.2f}x")
    # cpu = a + b / batch, solved from the two runs (unbatched: batch = 1).
    b_batch = bat["avg_batch"]
    if b_batch > 1:
        b = (unb["cpu_us_per_request"] - bat["cpu_us_per_request"]) / (1 - 1 / b_batch)
        a = unb["cpu_us_per_request"] - b
        print(
            f"Triton CPU per request = {a:,.0f} us per request (not divided by batching) "
            f"+ {b:,.0f} us per execution / batch size"
        )
        print(
            f"  at batch {b_batch:.2f}: per-request share {a / (a + b / b_batch):.0%}; "
            f"the CPU-bound limit of the gain is (a + b) / (a + b / batch) = "
            f"{(a + b) / (a + b / b_batch):.2f}x"
        )


if __name__ == "__main__":
    sys.exit(main())
