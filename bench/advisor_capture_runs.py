"""Record stored load runs for the advisor's tests (tests/advisor/data/loadruns.*).

    STACK_TRITON_VENV=... .venv/bin/python -m bench.advisor_capture_runs

Starts Triton with the spec's config (launcher code, free ports), runs the load
generator's API (a Poisson rate run and a concurrency run), and keeps its SQLite
store and the model config JSON, which the store does not hold.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from advisor.config import BatcherConfig
from bench.tritonrun import MODEL, triton, wait_until_quiet
from loadgen.engine.runner import RunParams, run
from tritonapi.client import TritonClient

DATA = Path(__file__).resolve().parent.parent / "tests" / "advisor" / "data"


def main() -> None:
    db = DATA / "loadruns.sqlite3"
    db.unlink(missing_ok=True)
    with triton(BatcherConfig(4, (2, 4), 500)) as settings:
        url = settings.url("triton_http")
        for params in (
            RunParams("rate", url=url, rate=400, poisson=True, duration_s=3, seed=7),
            RunParams("concurrency", url=url, concurrency=8, duration_s=3, requests=1500),
        ):
            wait_until_quiet(0.5, 30.0)
            result = run(params, db=str(db))
            print(
                params.describe(),
                result.status,
                result.run_id,
                result.summary.server.average_batch_size if result.summary.server else None,
            )
        config = TritonClient(url).model_config_json(MODEL)
    with sqlite3.connect(db) as conn:  # keep the committed file small
        conn.execute("VACUUM")
    (DATA / "loadruns_config.json").write_text(json.dumps(config, indent=1) + "\n")
    print(f"wrote {db}")


if __name__ == "__main__":
    main()
