"""Costs measured, never assumed: on a private real Triton (the project's repository).

- a stored run keeps the config and Triton version, so ``advise --store --run`` needs
  nothing else;
- a local Triton's CPU over the advisor's window gives the costs, cached per server,
  model and Triton version with their date, and used from the cache next time;
- without costs the capacity is "unknown (run with --probe)", never a number;
- ``--probe`` measures them with a short closed-loop load.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from advisor import costs, inputs
from advisor.fit import fit_traffic
from batchscope.main import main
from loadgen.engine.runner import RunParams, run
from loadgen.results.result import RunResult
from loadgen.results.stored import load_run
from observe.cpu import local_server_pid, process_tree_cpu_s
from observe.sampler import watch
from observe.window import Window
from runs.store import RunStore
from stack.supervisor import running
from stacksettings import Settings, free_ports, isolated, procstat
from tests.helpers import load_stalling_copy
from tritonapi.client import TritonClient, TritonHTTPError

pytestmark = pytest.mark.integration
MODEL = "batch_add_model"


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    settings = isolated(tmp_path_factory.mktemp("advisor-triton"))
    with running(settings, only=("triton",)):
        yield settings


@pytest.fixture(scope="module")
def url(triton: Settings) -> str:
    return triton.url("triton_http")


def advise(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["advise", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def load(url: str, seconds: float, concurrency: int = 4) -> threading.Thread:
    params = RunParams("concurrency", model=MODEL, url=url, concurrency=concurrency)
    thread = threading.Thread(target=run, args=(replace(params, duration_s=seconds),))
    thread.start()
    return thread


def test_a_stored_run_keeps_the_config_and_version_and_needs_nothing_else(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.sqlite3"
    params = RunParams("concurrency", model=MODEL, url=url, concurrency=4, duration_s=1.5)
    run_id = run(params, db=str(db)).run_id
    assert run_id is not None
    with RunStore(db) as opened:
        stored = load_run(opened, run_id)
    client = TritonClient(url)
    assert stored.triton_version == client.server_metadata()["version"]
    assert stored.model_config == client.model_config_json(MODEL)
    cache = tmp_path / "calibrations.json"
    argv = ["--store", str(db), "--run", str(run_id), "--p99-ms", "20", "--requests", "800"]
    # The run's own traffic, given: on a loaded machine its present may be off the
    # simulation's (nothing is recommended then); the config and version are what this checks.
    argv += ["--concurrency", "4"]
    code, out, err = advise(capsys, *argv, "--calibrations", str(cache), "--json")
    assert code == 0, err
    result = json.loads(out)
    version = stored.triton_version
    assert f"config as Triton {version} reported it when the run began" in result["notes"]
    assert result["current"]["config"].startswith("max_batch_size 4, preferred [2, 4]")


def test_an_old_store_has_no_config_and_reads_as_before() -> None:
    db = Path(__file__).parent / "data" / "loadruns.sqlite3"
    with RunStore(db) as opened:
        assert opened.load_server(1) == ("", None)
    with RunStore(db) as opened:
        assert load_run(opened, 1).model_config is None


def test_the_local_tritons_cpu_gives_the_costs_and_they_are_cached(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = local_server_pid(url)
    assert pid is not None and "tritonserver" in Path(f"/proc/{pid}/cmdline").read_text()
    cache = tmp_path / "calibrations.json"
    base = ["--url", url, "--model", MODEL, "--p99-ms", "20", "--requests", "800"]
    sender = load(url, 3.0)
    try:
        # The traffic given, as sent: four clients that wait for their answers read as
        # open-loop traffic make a present the advisor does not reproduce (nothing is
        # recommended then); the costs are what this checks.
        code, out, err = advise(
            capsys,
            *base,
            "--concurrency",
            "4",
            "--window",
            "2",
            "--calibrations",
            str(cache),
            "--json",
        )
    finally:
        sender.join()
    assert code == 0, err
    # The python backend's stubs are its children, and they did the model's work: counted.
    assert process_tree_cpu_s(pid) > procstat.cpu_seconds([pid])
    result = json.loads(out)
    calibration = result["calibration"]
    assert calibration["source"] == "the local Triton's CPU over the 2 s window"
    assert calibration["cores"] == len(os.sched_getaffinity(pid))
    assert 5e-6 < calibration["request_s"] < 5e-3
    assert calibration["requests"] >= costs.MIN_REQUESTS
    assert result["capacity_known"] and result["current"]["throughput_limit_per_s"] > 0
    version = TritonClient(url).server_metadata()["version"]
    cached = json.loads(cache.read_text())
    assert list(cached) == [costs.cache_key(url, MODEL, version)]
    # No traffic now: nothing to measure in the window, so the cached costs are used, dated.
    code, out, err = advise(
        capsys, *base, "--rate", "200", "--window", "0.5", "--calibrations", str(cache)
    )
    assert code == 0, err
    assert "costs: cached (0.0 h old): " in out
    assert calibration["source"] in out


def test_without_costs_the_capacity_is_unknown(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "none-yet.json"
    load(url, 0.5, concurrency=1).join()  # executions to fit from, all before the window
    argv = ["--url", url, "--model", MODEL, "--p99-ms", "20", "--rate", "200"]
    code, out, err = advise(
        capsys, *argv, "--window", "0.5", "--requests", "800", "--calibrations", str(cache)
    )
    assert code == 0, err
    assert "capacity: unknown (run with --probe)" in out
    assert "limit" not in out and "capacity 1" not in out
    assert not cache.exists()


def test_probe_measures_the_costs_with_a_short_load(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "calibrations.json"
    load(url, 0.5, concurrency=1).join()  # executions to fit from, all before the window
    pid = local_server_pid(url)
    assert pid is not None
    client = TritonClient(url)
    served_before = client.model_stats(MODEL).inference_count
    cpu_before = procstat.cpu_seconds([pid])
    argv = ["--url", url, "--model", MODEL, "--p99-ms", "20", "--rate", "200"]
    code, out, err = advise(
        capsys,
        *argv,
        "--window",
        "0.5",
        "--requests",
        "800",
        "--probe",
        "--probe-s",
        "1.5",
        "--calibrations",
        str(cache),
        "--json",
    )
    # Read around the whole command, by this test: Triton's own CPU (its stubs did the
    # model's work) and its count of requests, all of them the probe's.
    spent_s = procstat.cpu_seconds([pid]) - cpu_before
    served = client.model_stats(MODEL).inference_count - served_before
    assert code == 0, err
    result = json.loads(out)
    calibration = result["calibration"]
    assert calibration["source"].startswith("a 1.5 s probe at concurrency 8 (")
    assert calibration["requests"] == served
    # The probe's CPU per request is the kernel's count over the probe alone: at most this
    # test's over the whole command, which adds the idle server's few ticks while the
    # advisor watched its 0.5 s window and searched.
    tick_s = 1 / os.sysconf("SC_CLK_TCK")
    assert calibration["request_s"] * served <= spent_s + 2 * tick_s
    assert calibration["request_s"] * served >= 0.5 * spent_s
    assert result["capacity_known"] and result["current"]["throughput_limit_per_s"] > 0


def test_the_mlp_model_answers_its_seeded_network_and_batches(url: str) -> None:
    """mlp_model (model_repository/): the answer is the seeded numpy network's, and
    concurrent requests are executed in batches."""
    import importlib.util
    import sys
    import types

    import numpy as np
    import tritonclient.http as httpclient

    from stacksettings import ROOT

    sys.modules.setdefault("triton_python_backend_utils", types.ModuleType("pb_utils"))
    spec = importlib.util.spec_from_file_location(
        "mlp_model_py", ROOT / "model_repository" / "mlp_model" / "1" / "model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = np.random.default_rng(3).standard_normal((1, 64), dtype=np.float32)
    client = httpclient.InferenceServerClient(url.removeprefix("http://"))
    tensor = httpclient.InferInput("INPUT", [1, 64], "FP32")
    tensor.set_data_from_numpy(x)
    got = client.infer("mlp_model", [tensor]).as_numpy("OUTPUT")
    client.close()
    assert got.shape == (1, 16)
    np.testing.assert_allclose(got, module.forward(module.weights(), x), rtol=1e-4, atol=1e-5)
    params = RunParams("concurrency", model="mlp_model", url=url, concurrency=8, duration_s=1.5)
    server = run(params).summary.server
    assert server is not None and server.average_batch_size is not None
    assert server.average_batch_size > 2


def test_verify_loads_scratch_copies_replays_the_traffic_and_removes_them(
    triton: Settings, url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--url", url, "--model", MODEL, "--p99-ms", "20", "--rate", "150", "--cv", "1"]
    sender = load(url, 1.5, concurrency=2)  # executions to fit the service times from
    sender.join()
    code, out, err = advise(
        capsys,
        *argv,
        "--window",
        "0.5",
        "--requests",
        "800",
        "--cores",
        "2",
        "--request-us",
        "100",
        "--verify",
        "--verify-s",
        "2",
        "--admin-key-file",
        str(triton.admin_key_file),
        "--json",
    )
    assert code == 0, err
    result = json.loads(out)
    checks = result["verification"]["checks"]
    assert [c["which"] for c in checks] == ["current"] + ([] if result["keep"] else ["recommended"])
    current = {r["measure"]: r for r in checks[0]["rows"]}
    # 150/s Poisson on the spec's config: mostly batches of 1 and 2, every request answered.
    assert 1.0 <= current["average batch size"]["measured"] < 2.5
    assert current["throughput (req/s)"]["measured"] == pytest.approx(150, rel=0.25)
    assert checks[0]["config"] == result["current"]["config"]
    client = TritonClient(url, headers=triton.admin_headers())
    for which in ("current", "recommended"):  # the copies are gone
        with pytest.raises(TritonHTTPError):
            client.model_config_json(f"{MODEL}__advisor_{which}")
    assert client.model_config_json(MODEL)["max_batch_size"] == 4  # the live model untouched


def test_verify_without_the_key_is_one_line(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--url", url, "--model", MODEL, "--p99-ms", "20", "--rate", "150"]
    # The model must have executed (its own state, not another test's) for advise to reach
    # --verify, whose refusal is what this checks.
    load(url, 1.0).join()
    code, _, err = advise(
        capsys,
        *argv,
        "--window",
        "0.5",
        "--requests",
        "500",
        "--seeds",
        "2",
        "--verify",
        "--admin-key-file",
        str(tmp_path / "no-key"),
    )
    assert code == 2
    assert "403" in err and "--admin-key-file" in err
    assert len(err.strip().splitlines()) == 1


def test_the_window_reads_the_requests_received_from_tritons_metrics_after_each_count(
    triton: Settings,
) -> None:
    url = triton.url("triton_http")
    metrics = f"{triton.url('triton_metrics')}/metrics"
    sender = load(url, 3.0)
    try:
        window = inputs.watch(url, MODEL, 2.0, metrics_url=metrics)
        # a metrics URL that answers nothing: the counts are read all the same
        unread = inputs.watch(url, MODEL, 0.5, metrics_url=f"http://127.0.0.1:{free_ports(1)[0]}/")
    finally:
        sender.join()
    assert len(window.samples) >= 10 and len(window.received) >= len(window.samples) - 3
    assert not window.pending_note, window.pending_note
    # Each read between two counts: executed + pending from the metrics is no less than the
    # statistics' count before it and no more than the one after plus the 4 clients' requests
    # (the metrics and the statistics count the same executions). A count read slowly is
    # left out of the samples (its time is not known), so the first metrics read may have
    # no count before it on a busy machine: the reads between two counts are judged.
    bracketed = [
        (t, received)
        for t, received in window.received
        if window.samples[0][0] <= t < window.samples[-1][0]
    ]
    assert len(bracketed) >= 8, (window.samples, window.received)
    for t, received in bracketed:
        before = max(a for u, a in window.samples if u <= t)
        after = min(a for u, a in window.samples if u > t)
        assert before <= received <= after + 4, (window.samples, window.received)
    assert window.samples[-1][1] > window.samples[0][1]  # the load was answered meanwhile
    assert unread.samples and unread.received == [] and "not read" in unread.pending_note
    assert inputs.watch(url, MODEL, 0.5).received == []  # not asked for: not read


def test_a_stalled_model_is_read_as_the_clients_sent_it_from_the_requests_received(
    triton: Settings, tmp_path: Path
) -> None:
    """A copy of the add model stalled for a second mid-window: Triton keeps receiving,
    answers nothing, then answers in a lump what came evenly. The answered count reads that
    as a burst; executed + pending, read together from the metrics, reads what the load
    generator sent (its own clock and records: the observer), as the advisor, the doctor
    and the autopilot fit it. Read apart (the statistics' count, then the gauge), a count
    taken during the drain and a gauge after it missed the lump (CI, stop 49). Watched for
    8 s, so 0.4 s between reads: on cores the whole suite shares, a read's time or Triton's
    receiving is some ms off, which moves a short bin's count the most (0.2 s bins read
    too bursty in a whole run: docs/validation/suite-time.md)."""
    url = triton.url("triton_http")
    admin = TritonClient(url, headers=triton.admin_headers())
    name, switch = "stalling_add", tmp_path / "stall"
    load_stalling_copy(admin, MODEL, name, switch)
    try:
        params = RunParams("rate", model=name, url=url, rate=200.0, duration_s=10.0)
        result: list[RunResult] = []
        sender = threading.Thread(target=lambda: result.append(run(params)))
        sender.start()
        try:
            time.sleep(1.0)
            watched: list[Window] = []
            metrics = f"{triton.url('triton_metrics')}/metrics"
            watcher = threading.Thread(
                target=lambda: watched.append(inputs.watch(url, name, 8.0, metrics_url=metrics))
            )
            watcher.start()
            time.sleep(3.5)
            switch.touch()
            time.sleep(1.0)
            switch.unlink()
            watcher.join()
        finally:
            switch.unlink(missing_ok=True)
            sender.join()
    finally:
        admin.unload_model(name)
    [window], [load] = watched, result
    client = load.summary.client
    assert client.ok == client.sent and (client.late_sends or 0) <= client.sent // 20, client
    offset = time.monotonic() - load.recorder.clock()
    sent_at = sorted(load.recorder.t0 + offset + r[1] for r in load.records())
    sent = fit_traffic([(t, float(bisect.bisect_right(sent_at, t))) for t, _ in window.samples])
    seen = inputs.fit_window(window)
    assert seen.received is not None, seen.why_answered
    assert sent.cv < 0.5  # 200/s at even steps
    assert seen.answered.cv > sent.cv + 1.5, (seen.answered, sent)  # the stall as a burst
    assert abs(seen.received.cv - sent.cv) < 0.5, (seen.received, sent)
    assert seen.received.rate_per_s == pytest.approx(sent.rate_per_s, rel=0.1)


def test_the_doctor_reads_the_pending_gauge_beside_each_count_as_the_advisor_does(
    triton: Settings,
) -> None:
    url = triton.url("triton_http")
    client = TritonClient(url)
    sender = load(url, 3.5)
    try:
        read = watch(client, [MODEL], 2.0, f"{triton.url('triton_metrics')}/metrics").windows
        nowhere = f"http://127.0.0.1:{free_ports(1)[0]}/metrics"
        unwatched = watch(client, [MODEL], 1.0, nowhere)
    finally:
        sender.join()
    unread, notes = unwatched.windows, unwatched.notes
    window = read[MODEL]
    assert len(window.samples) >= 10 and len(window.received) >= len(window.samples) - 3
    assert "from the requests received" in inputs.fit_window(window).describe()
    alone = unread[MODEL]
    assert alone.samples and alone.received == []
    assert alone.pending_note.startswith(f"Triton's metrics at {nowhere} not read")
    assert inputs.fit_window(alone).describe().endswith(f"({alone.pending_note})")
    assert any(n.startswith(alone.pending_note) for n in notes)
