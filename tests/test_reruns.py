"""The rerun rules: a test is rerun only when the Triton it used died of a signal during
it, every rerun is listed with its cause, and more than a few fail the session."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from loadgen.clients import http2
from loadgen.clients.checks import WRONG_SUM
from loadgen.clients.grpc_client import GrpcClient
from loadgen.clients.http_client import HttpClient, UnreadableResponse, next_response, request_head
from loadgen.clients.payloads import Payloads
from loadgen.clients.target import ModelSpec, TensorSpec
from stack.supervisor import running
from stacksettings import ROOT, Settings, isolated, procstat
from tests.helpers import RERUN_CAUSES, UNPARSABLE, TritonCrashes, served_whole, wrong_sums
from tests.integration.test_cross_origin import PageNotShown, streamlit_modules_missing
from tests.loadgen.test_grpc_wire import client_of


@pytest.fixture
def watched(tmp_path: Path) -> tuple[TritonCrashes, Settings]:
    settings = isolated(tmp_path)
    settings.log_file("triton").parent.mkdir(parents=True, exist_ok=True)
    settings.log_file("triton").write_text("I1201 started\nSignal (11) received.\n")
    crashes = TritonCrashes()
    crashes.watch(settings)
    crashes.begin("t::earlier")  # the crash above was an earlier test's
    return crashes, settings


def test_a_crash_report_in_tritons_log_during_the_test_is_a_rerun(
    watched: tuple[TritonCrashes, Settings],
) -> None:
    crashes, settings = watched
    assert not crashes.crashed(AssertionError("Triton failed 3 traced requests"))
    with settings.log_file("triton").open("a") as log:
        log.write("Signal (15) received.\n")  # a stop is no crash
    assert not crashes.crashed(None)
    with settings.log_file("triton").open("a") as log:
        log.write("free(): invalid pointer\nSignal (6) received.\n0# 0x0000 in ?\n")
    assert crashes.crashed(AssertionError("boom"))
    assert crashes.crashed(AssertionError("boom"))  # asked again: the same answer
    assert "'Signal (6) received.'" in RERUN_CAUSES["t::earlier"]
    assert "the test failed with AssertionError('boom')" in RERUN_CAUSES["t::earlier"]
    crashes.begin("t::next")
    assert not crashes.crashed(AssertionError("boom")) and "t::next" not in RERUN_CAUSES


def test_the_supervisors_record_of_a_crash_signal_is_a_rerun(
    watched: tuple[TritonCrashes, Settings],
) -> None:
    crashes, settings = watched

    def record(restarts: int, last_exit: str) -> None:
        row = {"name": "triton", "restarts": restarts, "last_exit": last_exit}
        settings.state_file.write_text(json.dumps({"services": [row]}))

    record(1, "killed by SIGSEGV at 10:00:00")
    crashes.begin("t::supervised")
    assert not crashes.crashed(AssertionError("x"))  # that restart was before the test
    record(2, "killed by SIGKILL at 10:00:05")  # chaos, or a person: not Triton's crash
    assert not crashes.crashed(AssertionError("x"))
    record(3, "killed by SIGABRT at 10:00:09")
    assert crashes.crashed(AssertionError("x"))
    assert "the supervisor recorded 'killed by SIGABRT" in RERUN_CAUSES["t::supervised"]


@pytest.mark.integration
def test_a_triton_that_logged_a_crash_and_serves_nothing_is_restarted(tmp_path: Path) -> None:
    """What a CI run met once (fresh92): Triton logged "Signal (11) received.", did not
    exit, answered ready and executed nothing, and every later test of its module failed.
    Here the same Triton: its python stubs stopped (ready, executing nothing), and the
    crash line in its log."""
    settings = isolated(tmp_path)
    with running(settings, only={"triton"}, supervise=True) as supervisor:
        crashes = TritonCrashes()
        crashes.watch(settings)
        (triton,) = supervisor.read_state()
        stubs = [
            pid
            for pid in procstat.descendants(triton.pid)
            if "triton_python_backend_stub" in " ".join(procstat.cmdline(pid) or [])
        ]
        assert stubs, "no python backend stub below Triton"
        try:
            for pid in stubs:
                os.kill(pid, signal.SIGSTOP)
            crashes.serving(settings)  # it never crashed: not restarted (its test will fail)
            assert supervisor.read_state()[0].pid == triton.pid
            with settings.log_file("triton").open("a") as log:
                log.write("Signal (11) received.\n")
            crashes.serving(settings)
        finally:
            for pid in stubs:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        (after,) = supervisor.read_state()
        assert after.pid != triton.pid and after.restarts == 1
        assert all(procstat.start_time(pid) is None for pid in stubs), "a stopped stub lives on"


def test_failed_requests_alone_fail_the_test() -> None:
    served_whole(0, {})
    with pytest.raises(AssertionError, match=r"Triton failed 2 traced requests: \{'lost': 2\}"):
        served_whole(2, {"lost": 2})


def unreadable(head: bytes) -> str:
    """The error the HTTP client records for an answer with this head (and no body)."""
    with pytest.raises(UnreadableResponse) as caught:
        next_response(head + b"\r\n\r\n")
    return f"unreadable response: {caught.value}"


# The head CI saw twice on a traced run (its header names: content-type,
# inference-header-content-length, and one without a name where Content-Length belongs).
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
    b"Inference-Header-Content-Length: 161\r\n: 173"
)
NAMELESS = unreadable(HEAD)
# What Triton's port sent, as the capture holds it: that answer among others.
WIRE = [b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody", b"xx" + HEAD + b"\r\n\r\n{}"]


def failure(errors: dict[str, int], answers: list[bytes]) -> BaseException:
    with pytest.raises(AssertionError) as caught:
        served_whole(sum(errors.values()), errors, answers)
    return caught.value


def test_an_answer_tracing_corrupted_seen_on_the_wire_is_a_rerun(
    watched: tuple[TritonCrashes, Settings],
) -> None:
    crashes, _ = watched
    assert crashes.crashed(failure({NAMELESS: 1}, WIRE))
    cause = RERUN_CAUSES["t::earlier"]
    assert cause.startswith("Triton's tracing corrupted a request (proven on the wire): ")
    assert crashes.crashed(failure({NAMELESS: 2}, WIRE))


def test_an_answer_tritonclient_could_not_parse_is_a_rerun_when_triton_sent_a_nameless_head(
    watched: tuple[TritonCrashes, Settings],
) -> None:
    crashes, _ = watched
    parse = f"{UNPARSABLE}('Invalid header token', 10)"
    assert crashes.crashed(failure({parse: 1}, WIRE))
    assert not crashes.crashed(failure({parse: 1}, WIRE[:1]))  # no such head from Triton
    assert not crashes.crashed(failure({parse: 2}, WIRE))  # one head, two failures


def add_spec(inputs: tuple[str, ...]) -> ModelSpec:
    """The add model with these FP32 inputs of one value each."""
    return ModelSpec(
        "batch_add_model",
        "1",
        4,
        tuple(TensorSpec(name, "FP32", (1,)) for name in inputs),
        (TensorSpec("OUTPUT_SUM", "FP32", (1,)),),
    )


def grpc_wire(ident: str, inputs: tuple[str, ...] = ("INPUT_A", "INPUT_B")) -> bytes:
    """A segment the load generator's gRPC client would send for request ``ident``: its
    HEADERS and DATA frames, the message from the client's own encoder."""
    model = add_spec(inputs)
    token, index = ident.rsplit("-", 1)
    client = client_of(GrpcClient, 8001, model, 5.0, id_token=token)
    message = client.encode(int(index), Payloads(model, client.tensors, seed=1).take(0)[0])
    head = http2.frame(http2.HEADERS, http2.END_HEADERS, 5, client.header_block)
    return head + http2.frame(http2.DATA, http2.END_STREAM, 5, message)


IDENT = "lg5329ccb8-0000000102"
# The error CI saw once (session 25), with its request id.
LACKS_B = f"gRPC INVALID_ARGUMENT: [request id: {IDENT}] input 'INPUT_B' does not exist in request"


def http_wire(ident: str, inputs: tuple[str, ...] = ("INPUT_A", "INPUT_B")) -> bytes:
    """A segment the load generator's HTTP client would send for request ``ident`` (index 0
    of its token): its head and JSON header from the client's own encoder, then the bytes."""
    model = add_spec(inputs)
    client = client_of(HttpClient, 8000, model, 5.0, id_token=ident.rsplit("-", 1)[0])
    return request_head(client) + b"\0" * 4 * len(inputs)


def tritonclient_wire(ident: str, sizes: tuple[int, int] = (4, 4)) -> bytes:
    """A request body as tritonclient.http writes it (json.dumps' default separators)."""
    header = {
        "id": ident,
        "inputs": [
            {"name": n, "shape": [1, 1], "datatype": "FP32", "parameters": {"binary_data_size": k}}
            for n, k in zip(("INPUT_A", "INPUT_B"), sizes, strict=True)
        ],
        "outputs": [{"name": "OUTPUT_SUM", "parameters": {"binary_data": True}}],
    }
    return json.dumps(header).encode() + b"\0" * 8


HTTP_IDENT = "lg5329ccb8-0000000000"
# The error CI saw once over HTTP (session 37), in the load generator's words.
HTTP_LACKS_B = f"HTTP 400: [request id: {HTTP_IDENT}] input 'INPUT_B' does not exist in request"
# The backend's phrasing over HTTP (stop 47's CI), and the same over gRPC.
HTTP_UNKNOWN_B = f"HTTP 400: [request id: {HTTP_IDENT}] unknown request input name INPUT_B"
UNKNOWN_B = f"gRPC INVALID_ARGUMENT: [request id: {IDENT}] unknown request input name INPUT_B"


@pytest.mark.parametrize(
    ("wire", "ident", "other", "lacks"),
    [
        (grpc_wire, IDENT, "lg5329ccb8-0000000101", LACKS_B),
        (http_wire, HTTP_IDENT, "lg11111111-0000000000", HTTP_LACKS_B),
        (grpc_wire, IDENT, "lg5329ccb8-0000000101", UNKNOWN_B),
        (http_wire, HTTP_IDENT, "lg11111111-0000000000", HTTP_UNKNOWN_B),
    ],
)
def test_a_request_that_held_the_input_it_was_told_it_lacked_is_a_rerun(
    watched: tuple[TritonCrashes, Settings],
    wire: Callable[[str], bytes],
    ident: str,
    other: str,
    lacks: str,
) -> None:
    crashes, _ = watched
    another = wire(other)
    assert crashes.crashed(failure({lacks: 1}, [another, another + wire(ident)]))
    assert f"request id: {ident}" in RERUN_CAUSES["t::earlier"]


def test_tritonclients_http_request_is_read_too(watched: tuple[TritonCrashes, Settings]) -> None:
    crashes, _ = watched
    assert crashes.crashed(failure({HTTP_LACKS_B: 1}, [tritonclient_wire(HTTP_IDENT)]))


# One exchange with Triton 2.51 (./stack/up's, 2026-12-05), as a capture holds it: the load
# generator's HTTP request (id lg5329ccb8-0000000000, INPUT_A 1.25, INPUT_B 2.5), sent
# over a socket, and Triton's answer (OUTPUT_SUM 3.75).
CAPTURES = Path(__file__).with_name("captures")
ADD_REQUEST = (CAPTURES / "add_request.bin").read_bytes()
ADD_ANSWER = (CAPTURES / "add_response.bin").read_bytes()
SUM_375 = struct.pack("<f", 3.75)
# The same answer with another sum in its OUTPUT_SUM bytes (what stop 49's CI met once).
WRONG_ANSWER = ADD_ANSWER[: -len(SUM_375)] + struct.pack("<f", 3.5)


def test_the_captured_exchange_is_what_the_proof_reads() -> None:
    assert ADD_ANSWER.endswith(SUM_375) and ADD_ANSWER.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b'{"id":"lg5329ccb8-0000000000","inputs"' in ADD_REQUEST
    assert wrong_sums([ADD_REQUEST, ADD_ANSWER]) == 0
    assert wrong_sums([ADD_ANSWER + WRONG_ANSWER, ADD_REQUEST]) == 1


def test_a_wrong_sum_that_triton_sent_is_a_rerun(watched: tuple[TritonCrashes, Settings]) -> None:
    crashes, _ = watched
    assert crashes.crashed(failure({WRONG_SUM: 1}, [WRONG_ANSWER, ADD_REQUEST]))
    assert WRONG_SUM in RERUN_CAUSES["t::earlier"]


@pytest.mark.parametrize(
    ("errors", "answers"),
    [
        # Triton's answer held the right sum: the client misread it
        ({WRONG_SUM: 1}, [ADD_ANSWER, ADD_REQUEST]),
        # the request is not on the wire (nothing says what the sum should be)
        ({WRONG_SUM: 1}, [WRONG_ANSWER]),
        # the wrong answer is another request's
        ({WRONG_SUM: 1}, [WRONG_ANSWER, ADD_REQUEST.replace(b"0000000000", b"0000000001")]),
        # the client counted two, the wire shows one
        ({WRONG_SUM: 2}, [WRONG_ANSWER, ADD_REQUEST]),
        # Triton's answer is cut before its sum's bytes
        ({WRONG_SUM: 1}, [WRONG_ANSWER[:-2], ADD_REQUEST]),
    ],
)
def test_a_wrong_sum_not_shown_on_the_wire_is_no_rerun(
    watched: tuple[TritonCrashes, Settings], errors: dict[str, int], answers: list[bytes]
) -> None:
    crashes, _ = watched
    assert not crashes.crashed(failure(errors, answers))


@pytest.mark.parametrize(
    ("errors", "answers"),
    [
        # Triton never sent that head: the client made it up (lost its place in the stream)
        ({NAMELESS: 1}, WIRE[:1]),
        ({NAMELESS: 1}, []),
        # one of ours beside it, or more than two: not the upstream bug alone
        ({NAMELESS: 1, "connection lost": 1}, WIRE),
        ({NAMELESS: 3}, WIRE),
        # a head that is whole and named, without a length: no sign of Triton's memory
        (
            {unreadable(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain"): 1},
            [b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"],
        ),
        # the request really lacked INPUT_B, or is not on the wire: the client's own fault
        ({LACKS_B: 1}, [grpc_wire(IDENT, ("INPUT_A",))]),
        ({LACKS_B: 1}, [grpc_wire("lg5329ccb8-0000000101")]),
        ({HTTP_LACKS_B: 1}, [http_wire(HTTP_IDENT, ("INPUT_A",))]),
        ({HTTP_LACKS_B: 1}, [http_wire("lg11111111-0000000000")]),
        ({HTTP_UNKNOWN_B: 1}, [http_wire(HTTP_IDENT, ("INPUT_A",))]),
        ({UNKNOWN_B: 1}, [grpc_wire(IDENT, ("INPUT_A",))]),
        # a name that goes on is not the name Triton said
        ({HTTP_UNKNOWN_B + "_X": 1}, [http_wire(HTTP_IDENT)]),
        # the header says 4 bytes of INPUT_B follow, but the segment ends before them
        ({HTTP_LACKS_B: 1}, [tritonclient_wire(HTTP_IDENT, (4, 12))]),
        # the gRPC proof is no HTTP proof
        ({HTTP_LACKS_B: 1}, [grpc_wire(HTTP_IDENT)]),
        ({"wrong sum": 1}, WIRE),
    ],
)
def test_other_failed_requests_are_no_rerun(
    watched: tuple[TritonCrashes, Settings], errors: dict[str, int], answers: list[bytes]
) -> None:
    crashes, _ = watched
    assert not crashes.crashed(failure(errors, answers))
    assert not crashes.crashed(AssertionError(str(errors)))  # the text alone is not enough


SESSION = """
import pytest
from pathlib import Path

from tests.helpers import RERUN_CAUSES

TRIES = Path(__file__).with_name("tries")
NOW = []


@pytest.fixture(autouse=True)
def current(request):
    NOW[:] = [request.node.nodeid]


def crash(error):
    if error is not None and "crash" in str(error):
        RERUN_CAUSES[NOW[0]] = f"cause: {error}"
        return True
    return False


@pytest.mark.flaky(reruns=2, condition=crash)
@pytest.mark.parametrize("n", range(COUNT))
def test_first_try_fails(n):
    with TRIES.open("a") as f:
        f.write(f"{n}\\n")
    if TRIES.read_text().split().count(str(n)) == 1:
        raise AssertionError(f"crash {n}")


@pytest.mark.flaky(reruns=2, condition=crash)
def test_its_own_fault_is_not_rerun():
    raise AssertionError("wrong sum")
"""


@pytest.mark.parametrize(("count", "workers"), [(3, 0), (4, 0), (4, 2)])
def test_reruns_are_listed_and_more_than_three_fail_the_session(
    tmp_path: Path, count: int, workers: int
) -> None:
    """A session whose only failures are reruns passes with 3 and fails with 4; a failure
    the condition rejects is not rerun at all. With xdist's workers too (the causes travel
    in the reports)."""
    (tmp_path / "test_session.py").write_text(SESSION.replace("COUNT", str(count)))
    argv = [sys.executable, "-m", "pytest", str(tmp_path), "-p", "tests.conftest", "-q"]
    argv += ["-p", "no:randomly", "-p", "no:cacheprovider", "-n", str(workers), "-k"]
    for select, expect in (("first_try", 0 if count <= 3 else 1), ("own_fault", 1)):
        tries = tmp_path / "tries"
        tries.unlink(missing_ok=True)
        done = subprocess.run(
            [*argv, select, "--rootdir", str(tmp_path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        out = done.stdout
        assert done.returncode == expect, out
        if select == "own_fault":
            assert "1 failed" in out and " rerun in " not in out and "RERUN" not in out, out
            continue
        for n in range(count):
            line = f"RERUN 1 test_session.py::test_first_try_fails[{n}]: cause: crash {n}\n"
            assert line in out, out
        limit = "over the limit" if count > 3 else "within the limit"
        assert f"{count} test(s) needed a rerun; at most 3 may ({limit}" in out, out
        assert sorted(tries.read_text().split()) == [str(n) for n in range(count) for _ in (0, 1)]


def test_a_page_that_could_not_fetch_streamlits_modules_is_a_rerun() -> None:
    static = "http://127.0.0.1:8501/static/js/"
    missing = PageNotShown("no field 'Concurrency' in 60 s", "t::page", [static + "A.js"])
    assert streamlit_modules_missing(missing)
    assert static + "A.js" in RERUN_CAUSES.pop("t::page")
    # any other failure of the page, or of the test, is no rerun
    assert not streamlit_modules_missing(PageNotShown("no heading", "t::page", []))
    assert not streamlit_modules_missing(AssertionError(f"Failed to fetch {static}A.js"))
    assert not streamlit_modules_missing(None)
    assert "t::page" not in RERUN_CAUSES
