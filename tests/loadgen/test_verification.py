"""Models that answer wrongly: every wrong answer is caught and counted as a failure.

They run on their own Triton (started with the launcher's code) over a temp model repository
holding a copy of batch_add_model and the models kept in tests/loadgen/model_repository:
``add_wrong`` (A - B instead of A + B), ``identity`` (not an add model, a variable dim) and
``identity_badshape`` (answers with a shape its metadata does not promise).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from loadgen.clients.checks import WRONG_SUM
from loadgen.engine.runner import RunParams, run
from loadgen.errors import LoadgenError
from stack.supervisor import running
from stacksettings import ROOT, Settings, isolated

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def wrong_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("wrong")
    repo = base / "models"
    shutil.copytree(ROOT / "model_repository" / "batch_add_model", repo / "batch_add_model")
    for model in (HERE / "model_repository").iterdir():
        shutil.copytree(model, repo / model.name)
    settings = replace(isolated(base / "state"), model_repository=repo)
    with running(settings, only={"triton"}):
        yield settings


def _params(settings: Settings, protocol: str, **kwargs: object) -> RunParams:
    return RunParams(
        "concurrency",
        concurrency=4,
        requests=200,
        protocol=protocol,
        url=settings.url("triton_http"),
        grpc_url=f"{settings.host}:{settings.port('triton_grpc')}",
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_wrong_answers_are_failures(wrong_triton: Settings, protocol: str) -> None:
    params = _params(wrong_triton, protocol)
    wrong = run(replace(params, model="add_wrong")).summary
    assert wrong.client.sent == wrong.client.failed == 200
    assert wrong.client.errors == {WRONG_SUM: 200}
    assert wrong.server is not None
    assert wrong.server.requests_success == 200  # Triton itself sees nothing wrong
    right = run(params).summary
    assert right.client.ok == 200 and right.client.errors == {}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_any_model_inputs_from_metadata_outputs_checked(
    wrong_triton: Settings, protocol: str
) -> None:
    with pytest.raises(LoadgenError, match="variable dims .* --shape INPUT0="):
        run(_params(wrong_triton, protocol, model="identity"))
    good = run(_params(wrong_triton, protocol, model="identity", shapes=(("INPUT0", (5,)),)))
    assert good.summary.client.ok == 200
    bad = run(_params(wrong_triton, protocol, model="identity_badshape")).summary.client
    assert bad.failed == bad.sent == 200
    assert bad.errors == {"bad answer: OUTPUT0 has shape [1, 4], metadata says [1, 3]": 200}
