"""Measure the advisor's cost model on this machine's real Triton, and record the capture.

    PERF_ANALYZER=$(bench/perf_analyzer_env.sh) .venv/bin/python -m bench.advisor_calibrate

1. Service time per batch size at low CPU contention: batch_add_model (max_batch_size 64, no
   preferred sizes, 2,000 us queue delay) under perf_analyzer at concurrency 1-16, so
   batches of about C form on an otherwise idle CPU; the first run also gives the p99 of the
   batcher's lateness (Triton's queue summary).
2. CPU per request outside execution, from the same runs: CPU seconds of tritonserver, its
   stubs and perf_analyzer, less the fitted execution time of the batches formed.
3. The issue's crossover case: max_batch_size 64 + 1,000 us + no preferred sizes against
   max_batch_size 4 + preferred [2, 4] (+ 500 us), at concurrency 8 and 32.

Everything raw (statistics, configs, CPU seconds, perf_analyzer's CSV row) goes to
tests/advisor/data/calibration.json, from which the advisor's tests rebuild the model.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from advisor.config import BatcherConfig
from bench.tritonrun import (
    MODEL,
    queue_p99_us,
    run_perf_analyzer,
    triton,
    triton_pids,
    wait_until_quiet,
)
from stacksettings import procstat
from tritonapi.client import TritonClient

OUT = Path(__file__).resolve().parent.parent / "tests" / "advisor" / "data" / "calibration.json"
SERVICE_CONFIG = BatcherConfig(64, (), 2000)
CROSSOVER = {
    "max64_delay1000": BatcherConfig(64, (), 1000),
    "max4_pref2_4": BatcherConfig(4, (2, 4), 500),
}


def measured_run(settings: Any, concurrency: int) -> dict[str, Any]:
    triton = TritonClient(settings.url("triton_http"))
    pids = triton_pids(settings)
    # The machine is shared: wait (bounded) for other work to calm down, and record
    # how much CPU it used during the run anyway.
    wait_until_quiet(0.5, 30.0)
    before = triton.statistics_json(MODEL)
    cpu_before = procstat.cpu_seconds(pids)
    busy_before = procstat.machine_busy_seconds()
    start = time.monotonic()
    rate, client_cpu, row = run_perf_analyzer(settings, concurrency)
    wall = time.monotonic() - start
    server_cpu = procstat.cpu_seconds(pids) - cpu_before
    busy = procstat.machine_busy_seconds() - busy_before
    other_cores = max(0.0, busy - server_cpu - client_cpu) / wall
    after = triton.statistics_json(MODEL)
    # Cumulative since the server started: only the first run on a server is its own.
    p99 = queue_p99_us(f"{settings.url('triton_metrics')}/metrics")
    print(
        f"  c{concurrency}: {rate:,.0f} infer/s, server CPU {server_cpu:.2f} s, "
        f"client CPU {client_cpu:.2f} s, wall {wall:.1f} s, other processes {other_cores:.2f} cores"
    )
    return {
        "concurrency": concurrency,
        "infer_per_s": rate,
        "server_cpu_s": server_cpu,
        "client_cpu_s": client_cpu,
        "wall_s": wall,
        "stats_before": before,
        "stats_after": after,
        "perf_analyzer": row,
        "queue_p99_us": p99,
        "other_cores": other_cores,
    }


def main() -> None:
    capture: dict[str, Any] = {"cores": os.cpu_count(), "service_runs": [], "crossover": {}}
    print(f"service-time runs: {SERVICE_CONFIG.describe()}")
    with triton(SERVICE_CONFIG) as settings:
        capture["service_config"] = TritonClient(settings.url("triton_http")).model_config_json(
            MODEL
        )
        for c in (1, 2, 4, 8, 16):
            capture["service_runs"].append(measured_run(settings, c))
    for name, config in CROSSOVER.items():
        print(f"crossover {name}: {config.describe()}")
        with triton(config) as settings:
            runs = [measured_run(settings, c) for c in (8, 32)]
            capture["crossover"][name] = {
                "config": TritonClient(settings.url("triton_http")).model_config_json(MODEL),
                "runs": runs,
            }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(capture, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
