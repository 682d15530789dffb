"""The advisor panel's "Apply with rollback" on a real Triton: the page applies the advice to
the live model, watches it, and the outcome is what Triton serves and what the store records.

The model is slowed on purpose first (a batch waits up to 20 ms for more requests). The advisor
is asked about a captured run of the model so slowed (data/slowed_150.sqlite3.gz, made by
capture_slowed.py), whose present it reproduces, and recommends a change; 150/s Poisson
traffic from the load generator runs through the windows of the apply. Triton's config API
is the observer of what the model serves afterwards.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from advisor.config import BatcherConfig, from_model_config
from autopilot import apply
from loadgen.engine.runner import RunParams
from runs.store import RunStore
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.autopilot.test_autopilot import MODEL, from_repository, poisson_traffic
from tests.dashboard.conftest import closed_url
from tritonapi.client import TritonClient

pytestmark = pytest.mark.integration

SLOW = BatcherConfig(4, (), 20_000, 1)
# 6 s of 150/s Poisson on the model serving SLOW, on a quiet machine (capture_slowed.py).
CAPTURE = Path(__file__).parent / "data" / "slowed_150.sqlite3.gz"
CAPTURED_RUN = 1
# Long enough for the rule's noise checks (tests/autopilot/test_autopilot.py: KEEP_WATCH_S).
WATCH_S = 10.0


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = isolated(tmp_path_factory.mktemp("apply-triton"))
    with running(settings, only=("triton",)):
        yield settings


@pytest.fixture
def slowed(triton: Settings) -> Iterator[TritonClient]:
    """The model serving SLOW (an override), back to config.pbtxt after the test."""
    client = TritonClient(triton.url("triton_http"), headers=triton.admin_headers())
    from_repository(client, time.monotonic() + 10)
    client.load_model(MODEL, apply.override(client.model_config_json(MODEL), SLOW, MODEL))
    assert from_model_config(client.model_config_json(MODEL)) == SLOW
    yield client
    from_repository(client, time.monotonic() + 10)


def rate_run(triton: Settings, seconds: float, seed: int) -> RunParams:
    return RunParams(
        "rate",
        model=MODEL,
        url=triton.url("triton_http"),
        rate=150.0,
        poisson=True,
        duration_s=seconds,
        seed=seed,
    )


def advised(
    make_app: Callable[..., AppTest], triton: Settings, db: Path, key_file: Path
) -> tuple[AppTest, int]:
    """The captured run of the slowed model in a store of the test's own, and the page after
    "Ask the advisor" on it. A run made now would be as the machine's load left it: where
    its present is off, the panel rightly recommends nothing (tests/dashboard/test_advice.py
    reads a capture for the same reason)."""
    db.write_bytes(gzip.decompress(CAPTURE.read_bytes()))
    run_id = CAPTURED_RUN
    at = make_app(
        closed_url(), triton.url("triton_http"), store=str(db), admin_key_file=str(key_file)
    )
    at.session_state["view"] = "Load runs"
    at.run()
    at.button(key=f"ask_{run_id}").click().run(timeout=400)
    assert not at.exception
    shown = [m.value for m in at.markdown if m.value.startswith("`present: ")]
    shown += [i.value for i in at.info]
    assert f"apply_{run_id}" in [b.key for b in at.button], shown  # a recommendation
    return at, run_id


def test_apply_with_rollback_changes_the_live_model_and_records_it(
    make_app: Callable[..., AppTest], triton: Settings, slowed: TritonClient, tmp_path: Path
) -> None:
    db = tmp_path / "runs.sqlite3"
    at, run_id = advised(make_app, triton, db, triton.admin_key_file)
    assert any(i.value.startswith("Recommended") for i in at.info), [i.value for i in at.info]
    (caption,) = [c.value for c in at.caption if c.value.startswith("Apply with rollback")]
    assert f"--model {MODEL} --apply" in caption and "will roll back to the previous" in caption
    at.number_input(key=f"apply_watch_{run_id}").set_value(WATCH_S).run(timeout=400)
    with poisson_traffic(rate_run(triton, 90.0, seed=5), db):
        at.button(key=f"apply_{run_id}").click().run(timeout=400)
        assert not [e.value for e in at.error if not e.value.startswith("Prometheus at")]
        deadline = time.monotonic() + 2 * WATCH_S + 60
        outcome: list[str] = []
        while not outcome and time.monotonic() < deadline:
            # A page run is CPU on the clients' 2 cores: polled every 2 s, not faster.
            time.sleep(2.0)
            at.run(timeout=400)
            outcome = [m.value for m in [*at.success, *at.warning] if f" {MODEL}: " in m.value]
    assert outcome, "the page showed no outcome"
    with RunStore(db) as store:
        (change,) = store.list_changes(MODEL)
    served = from_model_config(slowed.model_config_json(MODEL))
    # What the page says is what happened: the record, and Triton's config.
    assert from_model_config(change.old_config) == SLOW
    new = from_model_config(change.new_config)
    assert new.max_queue_delay_us < 20_000
    # Triton's own time per request (its statistics) fell without the 20 ms wait.
    assert change.after["server_mean_s"] < change.before["server_mean_s"], change
    if change.outcome == "kept":
        # The clients' p99 on a machine this busy may not show the gain beyond noise, which
        # is why it was kept rather than judged better.
        assert outcome[0] == f"KEPT {MODEL}: {change.reason}"
        assert served == new
    else:
        # The rule's other verdict for the same change: the clients' p99, which is what it
        # judges by, worse beyond noise though Triton got faster. In CI, beside 3 other
        # workers on 2 cores, the clients stalled in both windows and more in the second
        # (p99 69 ms before, 170 ms after; 226 and 331 ms in another run). Then the page
        # still says what happened, and the previous config is what Triton serves.
        assert change.outcome == "rolled_back", (outcome, change.reason)
        assert change.reason.startswith("client p99 worse beyond noise"), change.reason
        assert outcome[0] == f"ROLLED BACK {MODEL}: {change.reason}", outcome
        assert served == SLOW


def test_without_the_key_nothing_is_applied(
    make_app: Callable[..., AppTest], triton: Settings, slowed: TritonClient, tmp_path: Path
) -> None:
    db = tmp_path / "runs.sqlite3"
    at, run_id = advised(make_app, triton, db, tmp_path / "no-such.key")
    at.button(key=f"apply_{run_id}").click().run(timeout=400)
    errors = [e.value for e in at.error if e.value.startswith("Not applied: ")]
    assert len(errors) == 1 and "403" in errors[0] and "admin-key-file" in errors[0], errors
    assert from_model_config(slowed.model_config_json(MODEL)) == SLOW
    with RunStore(db) as store:
        assert store.list_changes(MODEL) == []
