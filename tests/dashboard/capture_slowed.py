"""Capture ``data/slowed_150.sqlite3.gz``: batch_add_model served with batches of 4 that
wait up to 20 ms (the apply panel tests' ``SLOW``), under 150/s Poisson for 6 s, stored as
the load generator stores it (with the served config).

    STACK_TRITON_VENV=.venv-triton .venv/bin/python -m tests.dashboard.capture_slowed

The apply panel's tests ask the advisor about this run and apply its advice to a live
Triton. A run made during the suite is as the other workers' load leaves the machine, and
where its present is off the panel rightly recommends nothing: the test would then judge
the load, not the panel. A private Triton; the committed capture was made with the machine
otherwise quiet (its load averages are in the commit that added it).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from autopilot import apply
from bench.common import private_triton
from loadgen.engine.runner import RunParams, run
from tests.dashboard.test_apply import MODEL, SLOW
from tests.helpers import write_capture
from tritonapi.client import TritonClient

OUT = Path(__file__).parent / "data" / "slowed_150.sqlite3.gz"
SECONDS = 6.0


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, private_triton() as s:
        db = Path(tmp) / "runs.sqlite3"
        url = s.url("triton_http")
        client = TritonClient(url, headers=s.admin_headers())
        client.load_model(MODEL, apply.override(client.model_config_json(MODEL), SLOW, MODEL))
        warm = RunParams("rate", model=MODEL, url=url, rate=150.0, poisson=True, duration_s=2.0)
        run(warm)
        params = RunParams(
            "rate", model=MODEL, url=url, rate=150.0, poisson=True, duration_s=SECONDS, seed=3
        )
        print(run(params, db=str(db)).run_id)
        write_capture(db, OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
