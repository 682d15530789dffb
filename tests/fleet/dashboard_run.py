"""Start one load run from the dashboard's form with Streamlit's AppTest, wait for it.

Used in-process by the fleet tests, and run as a script inside a network namespace
(``ip netns exec NS python -m tests.fleet.dashboard_run ...``) for the compose wiring, where
the service name ``triton`` only resolves in that namespace. The script prints the new
run (or the page's errors) as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from loadgen.results.stored import load_run
from runs.store import RunStore

APP = Path(__file__).resolve().parents[2] / "dashboard" / "app.py"
# Run in a namespace, the page has no Prometheus (compose's `prometheus` service is not
# run there) and says so; load runs talk to Triton only and work without it.
NO_PROMETHEUS = "Prometheus at "


def page_errors(at: AppTest) -> list[str]:
    return [str(e.value) for e in at.error if not str(e.value).startswith(NO_PROMETHEUS)]


def start_run(
    at: AppTest, requests: int = 3, token: str | None = None, server: str | None = None
) -> list[str]:
    """Fill the form (scenario ``concurrent``), click Start; the page's errors, if any."""
    at.run()
    if server is not None:
        at.sidebar.selectbox(key="server").set_value(server).run()
    at.sidebar.radio(key="view").set_value("Load runs").run()
    if token is not None:
        at.text_input(key="access_token").input(token).run()
    at.selectbox(key="form_scenario").set_value("concurrent").run()
    at.number_input(key="form_requests").set_value(requests).run()
    at.button(key="form_start").click().run()
    return page_errors(at)


def stored_runs(db: Path) -> Any:
    with RunStore(db) as opened:
        return opened.runs_frame()


def wait_done(at: AppTest, db: Path, timeout_s: float = 60.0) -> list[str]:
    """Re-run the page until the run is over (stored, or refused); the page's errors."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        at.run()
        errors = page_errors(at)
        if errors or (db.exists() and not stored_runs(db).empty and not at.get("progress")):
            return errors
    raise AssertionError("the dashboard's run did not finish")


def newest_run(db: Path, timeout_s: float = 60.0) -> dict[str, Any]:
    """The store's newest run once it has ended: where it went and what came back.

    A run's row is in the store from its start (status ``running``): wait for its end.
    """
    with RunStore(db) as opened:
        run_id = int(opened.runs_frame()["id"].iloc[0])
    deadline = time.monotonic() + timeout_s
    with RunStore(db) as opened:
        run = load_run(opened, run_id)
    while run.status == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
        with RunStore(db) as opened:
            run = load_run(opened, run_id)
    c = run.summary.client
    return {"url": run.params.url, "status": run.status, "sent": c.sent, "ok": c.ok}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", default="0.0.0.0", help="the server.address it runs with")
    parser.add_argument("--token", default=None)
    parser.add_argument("--db", type=Path, required=True)
    args = parser.parse_args()
    st_config.set_option("server.address", args.address)
    at = AppTest.from_file(str(APP), default_timeout=60)
    errors = start_run(at, token=args.token) or wait_done(at, args.db)
    body: dict[str, Any] = {"errors": errors}
    if not errors:
        body["run"] = newest_run(args.db)
    print(json.dumps(body))
    return 0


if __name__ == "__main__":
    sys.exit(main())
