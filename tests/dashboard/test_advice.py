"""The advisor panel beside a load run of the real stack."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from batchscope.main import main as batchscope
from loadgen.engine.runner import RunParams, run
from loadgen.results.stored import load_run
from runs.store import RunStore
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.dashboard.conftest import closed_url

pytestmark = pytest.mark.integration

CLOSED_LOOP = Path(__file__).parents[1] / "advisor" / "data" / "closed_loop_c4.sqlite3.gz"
CAPTURED_RUN = 4  # untraced, four clients, 1,500 requests


@pytest.fixture(scope="module")
def lone_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Triton alone: the panel needs the store and Triton, not Prometheus."""
    settings = isolated(tmp_path_factory.mktemp("advice-triton"))
    with running(settings, only=("triton",)):
        yield settings


def test_advisor_predicts_the_run_and_recommends(
    make_app: Callable[..., AppTest], lone_triton: Settings, tmp_path: Path
) -> None:
    """A stored run of four clients (a real capture whose present the advisor reproduces:
    tests/advisor/test_present_closed_loop.py): the panel predicts it against what it
    measured, shows the present in the advisor's one line, and gives its verdict. A run
    made now would be as the machine's load left it, and on a loaded one its present may be
    off, where the panel recommends nothing."""
    db = tmp_path / "runs.sqlite3"
    db.write_bytes(gzip.decompress(CLOSED_LOOP.read_bytes()))
    with RunStore(db) as store:
        server = load_run(store, CAPTURED_RUN).summary.server
    assert server is not None and server.average_batch_size is not None
    measured = server.average_batch_size
    at = make_app(closed_url(), lone_triton.url("triton_http"), store=str(db))
    at.session_state["view"] = "Load runs"
    at.session_state["run"] = CAPTURED_RUN
    at.run()
    at.button(key=f"ask_{CAPTURED_RUN}").click().run(timeout=400)
    errors = [e.value for e in at.error if not e.value.startswith("Prometheus at")]
    assert not at.exception and not errors
    (table,) = [d.value for d in at.dataframe if "predicted" in d.value.columns]
    table = table.set_index("measure")
    row = table.loc["average batch size"]
    assert row["measured"] == f"{measured:,.2f}"
    assert 1.0 <= float(row["predicted"]) <= 4.0
    (present,) = [m.value for m in at.markdown if m.value.startswith("`present: ")]
    assert present.startswith("`present: batch ") and "nothing recommended" not in present
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


def test_runs_of_one_traffic_are_pooled_as_advise_run_pools_them(
    make_app: Callable[..., AppTest],
    lone_triton: Settings,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The panel offers the other runs `advise --run A,B` would pool with the one shown (not
    a run of another traffic), and with one chosen, shows what `advise --run 4,5` says: the
    same runs fitted, the average batch measured over both, the same present and verdict.
    The runs pooled are a capture's (four clients), whose present the advisor reproduces;
    the run of another traffic is made now."""
    url = lone_triton.url("triton_http")
    db = tmp_path / "runs.sqlite3"
    db.write_bytes(gzip.decompress(CLOSED_LOOP.read_bytes()))
    params = RunParams(
        "concurrency", model="batch_add_model", url=url, concurrency=2, duration_s=0.5
    )
    run(params, db=str(db))  # another traffic: not offered
    with RunStore(db) as store:
        servers = [load_run(store, run_id).summary.server for run_id in (4, 5)]
    at = make_app(closed_url(), url, store=str(db))
    at.session_state["view"] = "Load runs"
    at.session_state["run"] = 4
    at.run()
    pool = at.multiselect(key="pool_4")
    assert list(pool.options) == ["6", "5", "3", "2", "1"]  # the capture's, newest first
    pool.set_value([5]).run()
    at.button(key="ask_4").click().run(timeout=400)
    errors = [e.value for e in at.error if not e.value.startswith("Prometheus at")]
    assert not at.exception and not errors
    captions = [c.value for c in at.caption]
    assert any(c.startswith("Fitted on runs 4, 5 pooled (concurrency, ") for c in captions), (
        captions
    )
    (table,) = [d.value for d in at.dataframe if "predicted" in d.value.columns]
    measured = table.set_index("measure").loc["average batch size", "measured"]
    assert all(s is not None for s in servers)
    both = sum(s.inferences for s in servers if s) / sum(s.executions for s in servers if s)
    assert measured == f"{both:,.2f}"
    # The CLI on the same runs, with the dashboard's bound and calibration file.
    calibrations = db.parent / "advisor-calibrations.json"
    argv = ["advise", "--store", str(db), "--run", "4,5", "--p99-ms", "10", "--json"]
    assert batchscope([*argv, "--calibrations", str(calibrations)]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["present"]["recommend_ready"] is True, said["present"]["line"]
    assert any(m.value == f"`{said['present']['line']}`" for m in at.markdown)
    if said["keep"]:
        assert any(m.value.startswith("Keep it") for m in at.success), [i.value for i in at.info]
    elif said["recommended"] is None:
        assert any(w.value.startswith("No config") for w in at.warning)
    else:
        config = said["recommended"]["config"]
        assert any(f"**{config}**" in i.value for i in at.info), [i.value for i in at.info]
