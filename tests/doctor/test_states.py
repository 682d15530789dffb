"""The doctor against a real Triton in each state the troubleshooting guide names.

One private Triton serves five models built under tmp_path from batch_add_model's
code: healthy (the spec's config, many clients), batching off, a serial client, a
queue delay of 0 under spread-out traffic, and a slow model whose bounded queue fills
and rejects requests. Each test watches the statistics API while a bounded load run
(at most a few seconds) goes on, then runs the checks. The healthy batcher must get
no finding; every other state must get its own finding and not another state's.
"""

from __future__ import annotations

import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from batchscope.main import main as batchscope
from doctor import diagnose
from doctor.diagnosis import Diagnosis
from loadgen.engine.runner import RunParams, run
from observe.sampler import Sampler
from stack.supervisor import running
from stacksettings import ROOT, Settings, isolated
from tritonapi import TritonClient

pytestmark = pytest.mark.integration

SOURCE = ROOT / "model_repository" / "batch_add_model"
BATCHING = re.compile(r"dynamic_batching \{.*?\n\}\n?", re.S)

# The features' add model that takes 50 ms per batch: slow enough for a small queue to fill.
SLOW_MODEL = ROOT / "tests" / "features" / "repository" / "add_slow_queue" / "1" / "model.py"

MODELS = {
    # name: (dynamic_batching block or "" for none, max_batch_size)
    "add_healthy": (
        "dynamic_batching {\n  preferred_batch_size: [ 2, 4 ]\n"
        "  max_queue_delay_microseconds: 500\n}\n",
        4,
    ),
    "add_off": ("", 4),
    # A 5 ms delay: one client's requests, each waiting out the delay, show "arrivals per
    # delay" (rate x delay = delay / round trip) of at least 0.2, the doctor's bar for
    # "no-overlap", unless the client spends over 4 x 5 ms between answer and next request
    # (with 2 ms, over 8 ms did it once on a machine running a bench beside the suite).
    "add_serial": (
        "dynamic_batching {\n  preferred_batch_size: [ 2, 4 ]\n"
        "  max_queue_delay_microseconds: 5000\n}\n",
        4,
    ),
    "add_nodelay": (
        "dynamic_batching {\n  preferred_batch_size: [ 2, 4 ]\n"
        "  max_queue_delay_microseconds: 0\n}\n",
        4,
    ),
    "add_slow_queue": (
        "dynamic_batching {\n  default_queue_policy { max_queue_size: 2 }\n}\n",
        2,
    ),
}


def build_repository(repo: Path) -> Path:
    config = (SOURCE / "config.pbtxt").read_text()
    for name, (batching, mbs) in MODELS.items():
        folder = repo / name
        (folder / "1").mkdir(parents=True)
        text = BATCHING.sub(batching, config).replace('"batch_add_model"', f'"{name}"')
        text = text.replace("max_batch_size: 4", f"max_batch_size: {mbs}")
        (folder / "config.pbtxt").write_text(text)
        if name == "add_slow_queue":
            shutil.copy(SLOW_MODEL, folder / "1" / "model.py")
        else:
            shutil.copy(SOURCE / "1" / "model.py", folder / "1" / "model.py")
    return repo


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("doctor")
    settings = replace(isolated(base / "state"), model_repository=build_repository(base / "m"))
    with running(settings, only={"triton"}):
        yield settings


def watch(settings: Settings, model: str, **load: object) -> Diagnosis:
    """The doctor's diagnosis of ``model`` over a window holding one load run."""
    client = TritonClient(settings.url("triton_http"), headers=settings.admin_headers())
    metrics = settings.url("triton_metrics") + "/metrics"
    sampler = Sampler(client, [model], metrics)
    sampler.start()
    params = RunParams(model=model, url=settings.url("triton_http"), **load)  # type: ignore[arg-type]
    done = threading.Event()
    # Pending requests are read from /metrics during the run, as the CLI does.

    def poll() -> None:
        while not done.wait(0.2):
            sampler.poll()

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        run(params)
    finally:
        done.set()
        poller.join()
    window = sampler.finish()[model]
    return diagnose(client, model, window, sampler.notes)


def codes(d: Diagnosis) -> list[str]:
    return [f.code for f in d.findings]


def state_codes(found: list[str]) -> list[str]:
    """The codes less "queue-latency", for open-loop loads on the shared test machine.

    At 150 requests/s, a stall of Triton's process for one second (other tests' servers on
    the same two cores) queues about 150 requests for half a second each: over 100 ms per
    request across a 3-4 s run, the doctor's bar for that finding, whatever the config. The
    doctor is right to say so then; the state under test is the rest of its findings.
    (tests/doctor/test_checks.py tests the finding's arithmetic.)
    """
    return [code for code in found if code != "queue-latency"]


def test_healthy_batcher_has_no_finding(triton: Settings) -> None:
    d = watch(triton, "add_healthy", scenario="concurrency", concurrency=8, duration_s=3.0)
    assert d.window is not None and d.window.requests > 100
    assert d.window.average_batch is not None and d.window.average_batch > 2
    assert d.findings == [], d.findings
    assert d.traces == "traces off"


def test_batching_off(triton: Settings) -> None:
    d = watch(triton, "add_off", scenario="concurrency", concurrency=4, duration_s=2.0)
    assert codes(d) == ["batching-off"]
    finding = d.findings[0]
    assert ("average batch size in the window", "1.00") in finding.numbers
    assert finding.fix[0] == "dynamic_batching {"


def test_serial_requests_never_overlap(triton: Settings) -> None:
    d = watch(triton, "add_serial", scenario="concurrency", concurrency=1, duration_s=3.0)
    assert codes(d) == ["no-overlap"]
    numbers = dict(d.findings[0].numbers)
    assert numbers["requests in a batch of 2 or more"] == "0 %"
    assert d.window is not None and d.window.in_server is not None and d.window.in_server < 1
    # The polls saw requests during the 3 s run, not while the load generator prepared.
    assert d.window.active_seconds is not None
    assert 2.0 <= d.window.active_seconds <= min(3.6, d.window.seconds)


def test_delay_too_short(triton: Settings) -> None:
    d = watch(triton, "add_nodelay", scenario="rate", rate=150.0, poisson=True, duration_s=3.0)
    assert state_codes(codes(d)) == ["delay-too-short"]
    fix = d.findings[0].fix
    assert len(fix) == 1 and re.fullmatch(r"max_queue_delay_microseconds: \d+", fix[0])
    proposed = int(fix[0].split(": ")[1])
    # One more request per batch at ~150/s needs about 1/150 s.
    assert 3_000 <= proposed <= 10_000


def test_full_queue_rejects(triton: Settings) -> None:
    # 100 requests/s against 40/s of capacity (batches of 2, 50 ms each): most get a 503.
    d = watch(triton, "add_slow_queue", scenario="rate", rate=100.0, duration_s=2.0)
    assert "queue-full" in codes(d)
    numbers = dict(next(f for f in d.findings if f.code == "queue-full").numbers)
    assert numbers["max_queue_size"] == "2"
    assert d.window is not None and d.window.pending_max is not None
    assert d.window.pending_max >= 2
    assert not {"no-overlap", "delay-too-short", "batching-off"} & set(codes(d))


def test_cli(triton: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    url = triton.url("triton_http")
    assert batchscope(["doctor", "--url", url, "--model", "add_off", "--window", "1"]) == 1
    out = capsys.readouterr().out
    assert "FINDING [config] dynamic batching is off" in out
    assert "traces off" in out and "max_queue_delay_microseconds: 100" in out
    assert batchscope(["doctor", "--url", url, "--model", "add_healthy", "--window", "1"]) == 0
    assert "no finding" in capsys.readouterr().out
    assert batchscope(["doctor", "--url", url, "--model", "nope", "--window", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such ready model" in err
    # With the key of the restricted repository index, the message lists the ready models.
    key = ["--admin-key-file", str(triton.admin_key_file)]
    assert batchscope(["doctor", "--url", url, "--model", "nope", *key]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such ready model" in err and "add_healthy" in err
