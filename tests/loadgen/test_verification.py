"""A model twin that answers wrongly: every wrong answer is caught and counted as a failure.

It runs on its own Triton (started with the launcher's code) over a temp model repository
holding a copy of batch_add_model and the wrong twin kept in tests/loadgen/model_repository.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from loadgen.api import RunParams, run
from loadgen.checks import WRONG_SUM
from stack.services import service_table
from stack.settings import ROOT, Settings
from stack.supervisor import Supervisor
from tests.helpers import make_settings

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def wrong_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("wrong")
    repo = base / "models"
    shutil.copytree(ROOT / "model_repository" / "batch_add_model", repo / "batch_add_model")
    shutil.copytree(HERE / "model_repository" / "add_wrong", repo / "add_wrong")
    settings = replace(
        make_settings(base / "state"), model_repository=repo, skip=frozenset({"prometheus"})
    )
    supervisor = Supervisor(settings, service_table(settings), log=lambda _: None)
    supervisor.up()
    try:
        yield settings
    finally:
        supervisor.down()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_wrong_answers_are_failures(wrong_triton: Settings, protocol: str) -> None:
    urls = {
        "url": wrong_triton.url("triton_http"),
        "grpc_url": f"{wrong_triton.host}:{wrong_triton.port('triton_grpc')}",
    }
    params = RunParams("concurrency", concurrency=4, requests=200, protocol=protocol, **urls)
    wrong = run(replace(params, model="add_wrong")).summary
    assert wrong["client"]["sent"] == wrong["client"]["failed"] == 200
    assert wrong["client"]["errors"] == {WRONG_SUM: 200}
    assert wrong["server"]["requests_success"] == 200  # Triton itself sees nothing wrong
    right = run(params).summary
    assert right["client"]["ok"] == 200 and right["client"]["errors"] == {}
