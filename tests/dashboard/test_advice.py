"""The advisor panel beside a load run of the real stack."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from loadgen.api import RunParams, run
from stacksettings import Settings

pytestmark = pytest.mark.integration


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
    at.button(key="ask_1").click().run(timeout=120)
    assert not at.exception and not [e.value for e in at.error]
    (table,) = [d.value for d in at.dataframe if "predicted" in d.value.columns]
    table = table.set_index("measure")
    row = table.loc["average batch size"]
    assert row["measured"] == f"{measured:,.2f}"
    assert 1.0 <= float(row["predicted"]) <= 4.0
    verdict = [i.value for i in at.info] + [m.value for m in at.success]
    assert any(v.startswith(("Recommended", "Keep it")) for v in verdict), verdict
