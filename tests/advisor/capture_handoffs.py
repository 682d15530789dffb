"""Capture ``data/handoff_traces.json.gz``: Triton's traces of Poisson runs, for the unit
tests of advisor.handoff (real timestamps from this project's Triton, not invented ones).

    STACK_TRITON_VENV=.venv-triton .venv/bin/python -m tests.advisor.capture_handoffs

One private stack with the validation bench's models (bench.advisor_validation); per model
one traced open-loop run of 3 s at the bench's middle rate (seed 8), as the bench runs it.
Each request is kept as (queue start, compute start, compute end) in ns from the run's
first arrival; beside them the CPU per request outside the model, from the Triton
process's CPU over the run, and the cores.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path

from advisor import costs
from advisor.fit import fit_service_times
from bench.advisor_validation import TUNING, repository, traced_run
from bench.common import stack
from observe.cpu import CpuMeter, local_server_pid
from runs.store import RunStore
from stacksettings import PORTS
from tritonapi.client import TritonClient

OUT = Path(__file__).parent / "data" / "handoff_traces.json.gz"


def main() -> None:
    captured = {}
    with (
        tempfile.TemporaryDirectory() as tmp,
        stack(services=("triton", "exporter"), model_repository=repository(Path(tmp))) as s,
    ):
        os.environ["STACK_STATE_DIR"] = str(s.state_dir)
        for name, (_, var) in PORTS.items():
            os.environ[var] = str(s.port(name))
        admin = TritonClient(s.url("triton_http"), headers=s.admin_headers())
        for model, rate in TUNING.items():
            # As the bench measures its own config: warm-up, then the traced run, with the
            # Triton process's CPU per request over it.
            url = s.url("triton_http")
            pid = local_server_pid(url)
            assert pid is not None, "the private Triton's process is not visible"
            meter = CpuMeter(pid)
            before = admin.model_stats(model)
            meter.start()
            run_id = traced_run(s, model, rate, 3.0, 8, Path(tmp) / "runs.sqlite3")
            used = meter.stop()
            delta = admin.model_stats(model).minus(before)
            cpu = costs.from_process_cpu(
                used, meter.cores, delta, fit_service_times(delta), "the traced run"
            ).cpu
            with RunStore(Path(tmp) / "runs.sqlite3") as runs:
                traced = runs.load_traced_requests(run_id, model)
            t0 = traced[0].queue_start_ns
            captured[model] = {
                "config": admin.model_config_json(model),
                "rate": rate,
                "request_s": cpu.request_s,
                "cores": cpu.cores,
                "requests": [
                    [r.queue_start_ns - t0, r.compute_start_ns - t0, r.compute_end_ns - t0]
                    for r in traced
                ],
            }
    OUT.write_bytes(gzip.compress(json.dumps(captured).encode()))


if __name__ == "__main__":
    main()
