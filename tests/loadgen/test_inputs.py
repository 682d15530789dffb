"""Load on models unlike the add model: strings, variable dims with a shape mix, ids under a
bound, FP16 inputs of two shapes, and perf_analyzer's ``--input-data`` files.

The models (python backend, in tests/loadgen/inputdata/model_repository) run on their own
Triton started with the launcher's code. Triton's statistics are the observer: the requests
it executed successfully must match what loadgen says it sent right.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dashboard import advice
from loadgen.engine.runner import RunParams, run
from loadgen.inputopts import InputOptions
from stack.supervisor import running
from stacksettings import Settings, admin_headers, isolated
from tests.helpers import model_stats

pytestmark = pytest.mark.integration
DATA = Path(__file__).resolve().parent / "inputdata"


@pytest.fixture(scope="module")
def inputs_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("inputs")
    repo = base / "models"
    shutil.copytree(DATA / "model_repository", repo)
    # Twins that only the advisor's tests load, each its own: models that have never executed.
    for name in ("bounded_ids_fresh", "bounded_ids_untouched"):
        fresh = repo / name
        shutil.copytree(repo / "bounded_ids", fresh)
        config = (fresh / "config.pbtxt").read_text()
        (fresh / "config.pbtxt").write_text(config.replace('"bounded_ids"', f'"{name}"'))
    settings = replace(isolated(base / "state"), model_repository=repo)
    with running(settings, only={"triton"}):
        yield settings


def _run(settings: Settings, protocol: str, model: str, requests: int = 120, **texts: object):
    params = RunParams(
        "concurrency",
        model=model,
        concurrency=4,
        requests=requests,
        protocol=protocol,
        seed=11,
        url=settings.url("triton_http"),
        grpc_url=f"{settings.host}:{settings.port('triton_grpc')}",
    )
    return run(InputOptions.from_texts(**texts).apply(params))  # type: ignore[arg-type]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_strings_generated_and_given(inputs_triton: Settings, protocol: str) -> None:
    made = _run(inputs_triton, protocol, "text_stats", string_length="1:40").summary
    assert made.client.ok == made.client.sent == 120, made.client.errors
    assert made.server is not None and made.server.requests_success == 120
    assert made.client.checked == "shapes and datatypes only"
    # Strings of 1..40 characters, some multi-byte: the shapes stay [1,1], sizes differ.
    assert made.client.shapes == {"TEXT[1,1]": 120}
    given = _run(inputs_triton, protocol, "text_stats", string_data="naïve café").summary
    assert given.client.ok == 120, given.client.errors


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_shape_mix_and_ids_under_a_bound(inputs_triton: Settings, protocol: str) -> None:
    # Ids over the dtype's range: the model refuses every request, and says why.
    wild = _run(inputs_triton, protocol, "bounded_ids", shape=["IDS=4:64"]).summary
    assert wild.client.failed == wild.client.sent == 120
    assert all("outside 0..999" in kind for kind in wild.client.errors)
    fine = _run(
        inputs_triton, protocol, "bounded_ids", shape=["IDS=4:64"], value_range=["IDS=0:1000"]
    ).summary
    assert fine.client.ok == 120, fine.client.errors
    assert fine.server is not None and fine.server.requests_success == 120
    shapes = fine.client.shapes or {}
    assert len(shapes) > 10 and sum(shapes.values()) == 120
    lengths = {int(k.split(",")[1].rstrip("]")) for k in shapes}
    assert min(lengths) >= 4 and max(lengths) <= 64


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_fp16_two_shapes_defaults_are_finite(inputs_triton: Settings, protocol: str) -> None:
    # The model refuses NaN and infinity: default values never hold them.
    out = _run(inputs_triton, protocol, "fp16_pair", requests=200).summary
    assert out.client.ok == 200, out.client.errors
    assert out.client.shapes == {"X[1,4] Y[1,2,3]": 200}
    wide = _run(
        inputs_triton, protocol, "fp16_pair", value_range=["X=-65000:65000", "Y=0:1"]
    ).summary
    assert wide.client.ok == 120, wide.client.errors


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_data_files_with_expected_outputs(
    inputs_triton: Settings, protocol: str, tmp_path: Path
) -> None:
    ids = _run(
        inputs_triton, protocol, "bounded_ids", input_data=str(DATA / "bounded_ids.json")
    ).summary
    assert ids.client.ok == 120, ids.client.errors
    assert ids.client.checked.startswith("outputs against the data's expected values (SUM)")
    # In order: the 4 entries in turn, 30 each.
    assert ids.client.shapes == {"IDS[1,4]": 30, "IDS[1,8]": 30, "IDS[1,5]": 30, "IDS[1,3]": 30}
    text = _run(
        inputs_triton, protocol, "text_stats", input_data=str(DATA / "text_stats.json")
    ).summary
    assert text.client.ok == 120, text.client.errors
    # A wrong expected value is caught on the entry that carries it, and only there.
    doc = json.loads((DATA / "bounded_ids.json").read_text())
    doc["validation_data"][1]["SUM"] = [361]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(doc))
    bad = _run(
        inputs_triton,
        protocol,
        "bounded_ids",
        input_data=str(wrong),
        data_order="random",
    ).summary
    assert set(bad.client.errors) == {"wrong answer: SUM differs from the data's validation_data"}
    assert bad.client.failed == (bad.client.shapes or {})["IDS[1,8]"]
    assert 10 < bad.client.failed < 60  # sampled with the seed, not in order


def test_npy_folder_with_batches(inputs_triton: Settings, tmp_path: Path) -> None:
    ids = np.arange(48, dtype=np.int64).reshape(6, 8) * 10
    np.save(tmp_path / "IDS.npy", ids)
    np.save(tmp_path / "SUM.npy", ids.sum(axis=1, keepdims=True))
    params = RunParams(
        "concurrency",
        model="bounded_ids",
        concurrency=2,
        requests=60,
        batch_size=3,
        url=inputs_triton.url("triton_http"),
    )
    out = run(InputOptions.from_texts(input_data=str(tmp_path)).apply(params)).summary
    assert out.client.ok == 60, out.client.errors
    assert out.client.shapes == {"IDS[3,8]": 60}
    assert out.server is not None and out.server.requests_success == 60


def test_cli_processes_and_capacity_take_the_input_options(inputs_triton: Settings) -> None:
    url = inputs_triton.url("triton_http")
    common = ["--url", url, "-m", "bounded_ids", "--shape", "IDS=4:64", "--range", "IDS=0:1000"]
    split = subprocess.run(
        [
            sys.executable,
            "-m",
            "batchscope",
            "load",
            "concurrency",
            "-c",
            "4",
            "-n",
            "200",
            "--seed",
            "3",
        ]
        + [*common, "--processes", "2", "--no-store"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert split.returncode == 0, split.stdout + split.stderr
    assert "= ok 200 + failed 0" in split.stdout
    distinct = re.search(r"shapes sent +(\d+) distinct", split.stdout)
    assert distinct and int(distinct.group(1)) > 10, split.stdout
    assert "batch here held requests of one of" in split.stdout
    assert "inputs        IDS in [0, 1000)" in split.stdout
    assert "checked       shapes and datatypes only (no expected outputs given)" in split.stdout
    capacity = subprocess.run(
        [
            sys.executable,
            "-m",
            "batchscope",
            "load",
            "capacity",
            "--p99-ms",
            "50",
            "--max-rate",
            "100",
        ]
        + [*common, "--step-duration", "1", "--steps", "2", "--no-store"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert capacity.returncode in (0, 1), capacity.stdout + capacity.stderr
    assert "outside 0..999" not in capacity.stdout + capacity.stderr


def test_advise_probe_on_a_model_that_never_executed_needs_the_traffic(
    inputs_triton: Settings,
) -> None:
    url = inputs_triton.url("triton_http")
    assert model_stats(url, "bounded_ids_untouched").execution_count == 0
    argv = ["advise", "--url", url, "--model", "bounded_ids_untouched", "--p99-ms", "50"]
    argv += ["--probe", "--probe-s", "1", "--shape", "IDS=4:64", "--range", "IDS=0:1000"]
    argv += ["--calibrations", str(inputs_triton.state_dir / "calibrations.json")]
    out = subprocess.run(
        [sys.executable, "-m", "batchscope", *argv], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().endswith(
        "give the traffic with --rate or --concurrency (see 'batchscope advise --help')"
    )
    assert len(out.stderr.strip().splitlines()) == 1
    assert model_stats(url, "bounded_ids_untouched").inference_count == 0  # nothing was sent


def test_advise_probe_on_a_model_that_never_executed(inputs_triton: Settings) -> None:
    url = inputs_triton.url("triton_http")
    argv = ["advise", "--url", url, "--model", "bounded_ids_fresh", "--p99-ms", "50"]
    argv += ["--concurrency", "4", "--probe", "--probe-s", "1", "--json"]
    argv += ["--shape", "IDS=4:64", "--range", "IDS=0:1000"]
    argv += ["--calibrations", str(inputs_triton.state_dir / "calibrations.json")]
    before = model_stats(url, "bounded_ids_fresh")
    assert before.execution_count == 0
    out = subprocess.run(
        [sys.executable, "-m", "batchscope", *argv], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    advice = json.loads(out.stdout)
    notes = advice["notes"]
    assert any("model had never executed" in n for n in notes), notes
    # The probe sent a shape mix: the advisor simulates batches per shape.
    assert len(advice["by_shape"]["shapes"]) > 5
    assert advice["by_shape"]["method"].startswith("arrivals split by each shape's share")
    after = model_stats(url, "bounded_ids_fresh")
    # Every request of the probe answered: the ids stayed under the bound and every
    # length was accepted.
    assert after.execution_count > 0
    assert after.phase("fail").count == 0
    assert after.phase("success").count == after.inference_count > 0
    # One probe load: the one that fitted the service times measured the costs too, over
    # every request the model has ever served (Triton's count).
    cached = json.loads((inputs_triton.state_dir / "calibrations.json").read_text())
    [calibration] = [c for c in cached.values() if c["model"] == "bounded_ids_fresh"]
    assert calibration["requests"] == after.inference_count
    assert calibration["source"].startswith("a 1 s probe at concurrency ")


@pytest.mark.parametrize("where", ["live", "stored"])
def test_doctor_names_shape_fragmentation_from_a_stored_run(
    inputs_triton: Settings, tmp_path: Path, where: str
) -> None:
    url = inputs_triton.url("triton_http")
    db = tmp_path / "runs.sqlite3"
    params = RunParams(
        "concurrency", model="bounded_ids", concurrency=8, requests=300, seed=4, url=url
    )
    opts = InputOptions.from_texts(shape=["IDS=4:12"], value_range=["IDS=0:1000"])
    stored = run(opts.apply(params), db=str(db))
    assert stored.summary.client.ok == 300
    # Live, the doctor reads the newest run of the model with several shapes from the
    # default store (LOADGEN_DB); --store DB --run ID diagnoses that run, its mix included.
    argv = ["--url", url, "--model", "bounded_ids", "--window", "1"]
    if where == "stored":
        argv = ["--store", str(db), "--run", str(stored.run_id), "--requests", "500"]
    out = subprocess.run(
        [sys.executable, "-m", "batchscope", "doctor", *argv, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LOADGEN_DB": str(db)},
    )
    assert out.returncode == 1, out.stderr  # a finding
    (diagnosis,) = json.loads(out.stdout)
    (found,) = [f for f in diagnosis["findings"] if f["code"] == "shape-fragmentation"]
    assert found["numbers"][f"shapes sent in load run #{stored.run_id}"] == "9"
    assert 'input { name: "IDS" allow_ragged_batch: true ... }' in found["fix"]


def test_doctor_without_a_default_store_reads_no_shape_mix(
    inputs_triton: Settings, tmp_path: Path
) -> None:
    url = inputs_triton.url("triton_http")
    missing = tmp_path / "none.sqlite3"
    argv = ["--url", url, "--model", "bounded_ids", "--window", "1", "--json"]
    out = subprocess.run(
        [sys.executable, "-m", "batchscope", "doctor", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "LOADGEN_DB": str(missing)},
    )
    assert out.returncode in (0, 1), out.stderr  # no store is no error
    (diagnosis,) = json.loads(out.stdout)
    assert "shape-fragmentation" not in [f["code"] for f in diagnosis["findings"]]
    assert not missing.exists()  # and none was made


def test_advise_verify_replays_with_the_input_options(
    inputs_triton: Settings, tmp_path: Path
) -> None:
    url = inputs_triton.url("triton_http")
    db = tmp_path / "runs.sqlite3"
    params = RunParams(
        "concurrency", model="bounded_ids", concurrency=4, duration_s=1.5, seed=5, url=url
    )
    opts = InputOptions.from_texts(shape=["IDS=4:16"], value_range=["IDS=0:1000"])
    warm = run(opts.apply(params), db=str(db))  # executions to fit the service times from
    assert warm.summary.client.failed == 0 and warm.run_id is not None
    common = ["--p99-ms", "50", "--requests", "800", "--cores", "2", "--request-us", "100"]
    common += ["--verify", "--verify-s", "1", "--json"]
    common += ["--model-repository", str(inputs_triton.model_repository)]
    common += ["--admin-key-file", str(inputs_triton.admin_key_file)]
    live = ["--url", url, "--model", "bounded_ids", "--rate", "100", "--cv", "1"]
    live += ["--window", "0.5", "--shape", "IDS=4:16", "--range", "IDS=0:1000"]
    # From the stored run, no input options given: the run's own are replayed. Its traffic
    # given as it was sent: a stored run's present may be off the simulation's on a loaded
    # machine, and nothing is recommended or verified then; the replay is what this checks.
    stored = ["--store", str(db), "--run", str(warm.run_id), "--url", url, "--concurrency", "4"]
    for argv in (live, stored):
        out = subprocess.run(
            [sys.executable, "-m", "batchscope", "advise", *argv, *common],
            capture_output=True,
            text=True,
            timeout=300,
        )
        # Without the options the replay would be refused (IDS has variable dims), exit 2.
        assert out.returncode == 0, out.stdout + out.stderr
        checks = json.loads(out.stdout)["verification"]["checks"]
        current = {r["measure"]: r for r in checks[0]["rows"]}
        assert current["throughput (req/s)"]["measured"] > 0


def test_dashboard_advice_splits_by_shape_and_replays_the_runs_inputs(
    inputs_triton: Settings, tmp_path: Path
) -> None:
    url = inputs_triton.url("triton_http")
    db = tmp_path / "runs.sqlite3"
    params = RunParams(
        "concurrency", model="bounded_ids", concurrency=4, duration_s=1.5, seed=6, url=url
    )
    opts = InputOptions.from_texts(shape=["IDS=4:9"], value_range=["IDS=0:1000"])
    stored = run(opts.apply(params), db=str(db))
    assert stored.summary.client.failed == 0 and stored.run_id is not None
    sent = stored.summary.client.shapes
    assert sent is not None and len(sent) > 1
    a = advice.advise(db, (stored.run_id,), url, calibrations=tmp_path / "calibrations.json")
    assert a.inputs == opts  # rebuilt from the run's stored parameters
    assert a.shapes is not None
    assert {s.shape for s in a.shapes.shares} == set(sent)
    assert any(n.startswith("batches per shape") for n in a.notes)
    # The replay sends the run's own inputs: without them IDS's variable dims are refused.
    checked = advice.check(
        a, url, admin_headers(inputs_triton.admin_key_file), inputs_triton.model_repository
    )
    current = {name: measured for name, _, measured in checked.checks[0].rows()}
    assert (current["throughput (req/s)"] or 0) > 0
