"""What this machine serves of an open-loop rate through ``add_sleep`` at each max batch size.

    .venv/bin/python -m bench.sleep_capacity --rate 2000 --max-batch 10 32 64

``add_sleep`` (bench/models) sleeps 5 ms per execution whatever the batch, so its capacity
would be set by its batching alone, were it not for the CPU its Python backend spends on each
request beside the clients and Triton's front end. The autopilot's rate-shift test
(tests/autopilot/test_autopilot_rescue.py) needs its start config past capacity at the high
rate and the policy's configs well within it; this bench tells where that holds.

A Triton of its own serves the model without a delay; for each max batch size the load
generator's CLI (its own process) sends ``--rate`` Poisson, and after ``--settle-s`` Triton's
statistics over ``--measure-s`` give the rate served, the executions, the average batch and
the mean queue wait. A mean queue far past an execution's time with full batches is a
backlog: the config (or the machine) is short of the rate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from advisor.config import BatcherConfig
from autopilot import apply
from stack.supervisor import running
from stacksettings import ROOT, isolated
from tritonapi.client import TritonClient

MODEL = "add_sleep"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.sleep_capacity", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rate", type=float, required=True, help="Poisson requests per second")
    parser.add_argument("--max-batch", type=int, nargs="+", required=True, metavar="N")
    parser.add_argument("--settle-s", type=float, default=6.0, help="before measuring (6)")
    parser.add_argument("--measure-s", type=float, default=8.0, help="Triton's window (8)")
    args = parser.parse_args(argv)
    if args.rate <= 0 or min(args.max_batch) < 1:
        parser.error("--rate must be positive and each --max-batch at least 1")
    os.environ.setdefault("STACK_TRITON_VENV", str(ROOT / ".venv-triton"))
    print(f"load average {os.getloadavg()[0]:.2f} at the start; {args.rate:g}/s Poisson")
    print("| max batch | served /s | executions /s | average batch | mean queue (ms) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        base = Path(tmp)
        shutil.copytree(ROOT / "bench" / "models" / MODEL, base / "models" / MODEL)
        settings = replace(isolated(base / "state"), model_repository=base / "models")
        with running(settings, only=("triton",)):
            url = settings.url("triton_http")
            client = TritonClient(url, headers=settings.admin_headers())
            served = client.model_config_json(MODEL)
            for size in args.max_batch:
                config = BatcherConfig(size, (), 0, 1)
                client.load_model(MODEL, apply.override(served, config, MODEL))
                duration = args.settle_s + args.measure_s + 2.0
                argv_load = [
                    *(sys.executable, "-m", "batchscope", "load", "rate", "--poisson"),
                    *("--rate", str(args.rate), "--duration", str(duration), "--url", url),
                    *("--model", MODEL, "--db", str(base / f"runs-{size}.sqlite3")),
                ]
                load = subprocess.Popen(argv_load, stdout=subprocess.DEVNULL)
                try:
                    time.sleep(args.settle_s)
                    first, began = client.model_stats(MODEL), time.monotonic()
                    time.sleep(args.measure_s)
                    last, took = client.model_stats(MODEL), time.monotonic() - began
                finally:
                    load.wait()
                delta = last.minus(first)
                queue = delta.phase("queue")
                executions = max(delta.execution_count, 1)
                print(
                    f"| {size} | {delta.phase('success').count / took:,.0f} "
                    f"| {delta.execution_count / took:,.0f} "
                    f"| {delta.inference_count / executions:.1f} "
                    f"| {queue.ns / max(queue.count, 1) / 1e6:,.2f} |",
                    flush=True,
                )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
