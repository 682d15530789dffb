"""The advisor panel beside a load run of the real stack."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from loadgen.engine.runner import RunParams, run
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.dashboard.conftest import closed_url

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def lone_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Triton alone: the panel needs the store and Triton, not Prometheus."""
    settings = isolated(tmp_path_factory.mktemp("advice-triton"))
    with running(settings, only=("triton",)):
        yield settings


def test_advisor_predicts_the_run_and_recommends(
    make_app: Callable[..., AppTest], loaded_stack: Settings, tmp_path: Path
) -> None:
    s = loaded_stack
    db = tmp_path / "runs.sqlite3"
    params = RunParams(
        "concurrency",
        model="batch_add_model",
        url=s.url("triton_http"),
        concurrency=4,
        duration_s=2.0,
    )
    server = run(params, db=str(db)).summary.server
    assert server is not None and server.average_batch_size is not None
    measured = server.average_batch_size
    at = make_app(s.url("prometheus"), s.url("triton_http"), store=str(db))
    at.session_state["view"] = "Load runs"
    at.run()
    at.button(key="ask_1").click().run(timeout=400)
    assert not at.exception and not [e.value for e in at.error]
    (table,) = [d.value for d in at.dataframe if "predicted" in d.value.columns]
    table = table.set_index("measure")
    row = table.loc["average batch size"]
    assert row["measured"] == f"{measured:,.2f}"
    assert 1.0 <= float(row["predicted"]) <= 4.0
    verdict = [i.value for i in at.info] + [m.value for m in at.success]
    assert any(v.startswith(("Recommended", "Keep it")) for v in verdict), (
        verdict,
        [w.value for w in at.warning],
    )


def test_the_panel_shows_costs_noise_and_a_verification(
    make_app: Callable[..., AppTest], lone_triton: Settings, tmp_path: Path
) -> None:
    s = lone_triton
    url = s.url("triton_http")
    db = tmp_path / "runs.sqlite3"
    params = RunParams("concurrency", model="batch_add_model", url=url, duration_s=2.0)
    run(params, db=str(db))
    at = make_app(
        closed_url(),
        url,
        store=str(db),
        admin_key_file=str(s.admin_key_file),
        model_repository=str(s.model_repository),
    )
    at.session_state["view"] = "Load runs"
    at.run()
    at.button(key="ask_1").click().run(timeout=400)
    captions = [c.value for c in at.caption]
    # The config came with the run; its closed-loop throughput calibrated the costs.
    assert any("as Triton 2.51.0 reported it when the run began" in m.value for m in at.markdown)
    (costs,) = [c for c in captions if c.startswith("Costs outside the model")]
    assert "from the throughput of stored run 1 at concurrency 1" in costs
    (noise,) = [c for c in captions if c.startswith("Current, over 5 simulation seeds")]
    assert "throughput" in noise and " to " in noise
    at.button(key="verify_1").click().run(timeout=400)
    # Prometheus is down on purpose (the panel does not need it): its error is the only one.
    errors = [e.value for e in at.error if not e.value.startswith("Prometheus at")]
    assert not at.exception and not errors
    (checked,) = [d.value for d in at.dataframe if "config" in d.value.columns]
    assert checked["config"].iloc[0] == "current"
    batch = checked[checked["measure"] == "average batch size"]
    assert 1.0 <= float(batch["measured"].iloc[0]) <= 4.0
