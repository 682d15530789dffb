"""Batching gain: a batched model's throughput / its unbatched twin's at the same closed-loop
load, measured alternately in one run, and explained from measured costs. Two pairs: the
add model (batch_add_model / add_unbatched), whose compute is nothing beside Triton's
per-request work, and the compute-heavy MLP (mlp_model / mlp_unbatched), where batching pays
most. Both models of a pair run the same model.py; only dynamic batching differs.

    STACK_TRITON_VENV=... .venv/bin/python -m bench.batching_gain [--concurrency 8,16]
        [--pairs add,mlp]

Printed per run: client throughput and p99 (loadgen); server-side deltas from the statistics
API (executions, average batch, queue per request, model-call time per execution); the CPU
seconds of Triton's whole process group (server + python backend stubs) per request. With
CPU per request = a + b / (average batch), the two runs give a (the per-request cost batching
cannot remove: HTTP front end, request/response handling) and b (the per-execution cost it
divides: one model call, stub round trip).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from bench.common import median, stack
from loadgen.engine.runner import RunParams, run
from stacksettings import ROOT, procstat

PAIRS = {"add": ("batch_add_model", "add_unbatched"), "mlp": ("mlp_model", "mlp_unbatched")}


def repository(folder: Path) -> Path:
    """The project's models and mlp_unbatched: mlp_model with dynamic batching off."""
    repo = folder / "models"
    shutil.copytree(ROOT / "model_repository", repo, symlinks=True)
    twin = repo / "mlp_unbatched"
    shutil.copytree(repo / "mlp_model", twin)
    text = (twin / "config.pbtxt").read_text()
    text = text.replace('name: "mlp_model"', 'name: "mlp_unbatched"')
    start = text.index("dynamic_batching {")
    text = text[:start] + text[text.index("}", start) + 1 :]
    (twin / "config.pbtxt").write_text(text)
    return repo


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
    parser.add_argument("--pairs", default="add,mlp", help="add, mlp or both")
    args = parser.parse_args()
    pairs = [PAIRS[name] for name in args.pairs.split(",")]
    models = [m for pair in pairs for m in pair]
    with (
        tempfile.TemporaryDirectory(prefix="bench-gain-") as tmp,
        stack(services=("triton",), model_repository=repository(Path(tmp))) as settings,
    ):
        url = settings.url("triton_http")
        pgid = json.loads(settings.state_file.read_text())["services"][0]["pid"]
        for m in models:  # warm-up
            run(RunParams("concurrency", model=m, url=url, concurrency=8, duration_s=1.0))
        for c in [int(x) for x in args.concurrency.split(",")]:
            runs: dict[str, list[dict[str, float]]] = {m: [] for m in models}
            for _ in range(args.rounds):
                for m in models:
                    runs[m].append(one(url, pgid, m, c, args.seconds))
                    print(f"  c={c} {m:<16} {runs[m][-1]['throughput']:,.0f}/s", flush=True)
            med = {m: {k: median([r[k] for r in runs[m]]) for k in runs[m][0]} for m in models}
            for batched, unbatched in pairs:
                report(c, med, args, batched, unbatched)
    return 0


def report(
    c: int,
    med: dict[str, dict[str, float]],
    args: argparse.Namespace,
    batched: str,
    unbatched: str,
) -> None:
    bat, unb = med[batched], med[unbatched]
    print(
        f"\nbatching gain of {batched} at concurrency {c}, HTTP, {args.rounds} alternating "
        f"rounds of {args.seconds:g}s (medians)"
    )
    keys = [
        ("throughput", "throughput /s", 0),
        ("p99_ms", "p99 ms", 2),
        ("avg_batch", "average batch", 2),
        ("queue_ms", "queue ms / request", 3),
        ("call_ms", "model call ms / execution", 3),
        ("cpu_us_per_request", "Triton CPU us / request", 0),
    ]
    print(f"{'':<28}{batched:>16}{unbatched:>15}{'ratio':>8}")
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
