"""Capture ``data/closed_loop_c4.sqlite3.gz``: closed-loop runs at concurrency 4 on
batch_add_model, stored as the load generator stores them, for the unit test of the present
on closed-loop traffic (tests/advisor/test_present_closed_loop.py).

    STACK_TRITON_VENV=.venv-triton .venv/bin/python -m tests.advisor.capture_closed_loop

A private stack (Triton and the exporter, which reads the traces). Two CPU-bound processes
share the cores during the runs, as the suite's other tests do: the clients turn slowly and
batch in pairs, the traffic the simulation once did not reproduce. Three traced runs of 500
requests (Triton 2.51's safe window), then three untraced ones of 1,500. The committed
capture was made with the machine otherwise quiet (load average 0.67 before, 1.09 after);
with the cores shared far more (load average 9.5) the clients took 8 ms a turn and no run's
present was reproduced.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import stack
from loadgen.engine.runner import RunParams, run
from stacksettings import PORTS
from tests.helpers import write_capture

OUT = Path(__file__).parent / "data" / "closed_loop_c4.sqlite3.gz"
HOGS = 2


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, stack(copies=None) as s:
        db = Path(tmp) / "runs.sqlite3"
        os.environ["STACK_STATE_DIR"] = str(s.state_dir)
        for name, (_, var) in PORTS.items():
            os.environ[var] = str(s.port(name))
        url = s.url("triton_http")
        run(RunParams("concurrency", url=url, concurrency=4, requests=300))  # warm-up
        hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(HOGS)]
        try:
            for _ in range(3):
                traced = RunParams(
                    "concurrency",
                    url=url,
                    exporter_url=s.url("exporter"),
                    trace=True,
                    concurrency=4,
                    requests=500,
                )
                print(run(traced, db=str(db)).run_id)
            for _ in range(3):
                plain = RunParams("concurrency", url=url, concurrency=4, requests=1500)
                print(run(plain, db=str(db)).run_id)
        finally:
            for hog in hogs:
                hog.kill()
        write_capture(db, OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
