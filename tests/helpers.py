"""Helpers for tests: requests to the add model, and its statistics."""

from __future__ import annotations

import ast
import gzip
import json
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import requests
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2

from bench.wire import Capture, requests_in
from loadgen.clients.checks import WRONG_SUM
from stack.control import restart
from stacksettings import Settings
from tritonapi.client import TritonClient
from tritonapi.stats import ModelStats


def add_inputs(a: float, b: float) -> list[httpclient.InferInput]:
    """INPUT_A and INPUT_B of the add model, one row of one value each."""
    inputs = []
    for name, value in (("INPUT_A", a), ("INPUT_B", b)):
        tensor = httpclient.InferInput(name, [1, 1], "FP32")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
        inputs.append(tensor)
    return inputs


def infer_add(client: httpclient.InferenceServerClient, model: str, a: float, b: float) -> float:
    """One request to an add model; its OUTPUT_SUM."""
    return float(client.infer(model, add_inputs(a, b)).as_numpy("OUTPUT_SUM")[0, 0])


def model_stats(url: str, model: str) -> ModelStats:
    """The model's cumulative statistics (the newest version) from Triton's statistics API."""
    return TritonClient(url).model_stats(model)


T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], timeout_s: float = 30.0) -> T:
    """``check()``'s first truthy value, polled every 0.5 s; AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f}s: {what}")
        time.sleep(0.5)


def stats_counting(url: str, model: str, before: ModelStats, answered: int) -> ModelStats:
    """The model's statistics once they count the ``answered`` requests answered since
    ``before`` (success and failure) and the executions that served them
    (:meth:`ModelStats.accounts_for`), waited for up to 5 s (:func:`wait_for`); the test
    then asserts its exact counts on them.

    Triton updates a model's statistics just after it sends the answers of an execution,
    requests before the batch: a read right after the last answer missed that execution in
    CI (the unbatched twin's burst of three read 2 executions, 2026-12-05; the serial three
    read 3 requests and 2 executions, 2026-12-07). The load generator waits the same way
    (``loadgen.engine.serverside.settled_after``)."""

    def counting() -> ModelStats | None:
        after = model_stats(url, model)
        return after if after.minus(before).accounts_for(answered) else None

    counted = wait_for(f"{model}'s statistics to count {answered} answered requests", counting, 5.0)
    assert counted is not None  # wait_for returns a truthy value
    return counted


class FailedRequests(AssertionError):
    """:func:`served_whole`'s failure. ``errors`` counts the load generator's error texts;
    ``proven`` holds those that a packet capture shows to be Triton's corruption
    (:func:`proven_on_the_wire`)."""

    def __init__(self, failed: int, errors: dict[str, int], proven: frozenset[str]) -> None:
        super().__init__(f"Triton failed {failed} traced requests: {errors}")
        self.errors = dict(errors)
        self.proven = proven


def served_whole(failed: int, errors: dict[str, int], wire: Sequence[bytes] = ()) -> None:
    """Fail the test if a traced run had failed requests.

    ``wire``: the TCP payloads a capture saw during the run (:func:`wire_seen`): over HTTP
    both ways, over gRPC what the client sent to Triton. The rerun condition
    (:class:`TritonCrashes`) looks at Triton's log, and at these errors only for an answer
    tracing corrupted, proven so on the wire (:func:`corrupted_by_triton`). Every other
    failed request (connection lost with Triton alive, a wrong sum, the ids tracing patches
    into requests) fails the test."""
    if not failed:
        return
    proven = frozenset(text for text, n in errors.items() if proven_on_the_wire(text, wire, n))
    raise FailedRequests(failed, errors, proven)


@contextmanager
def wire_seen(settings: Settings, protocol: str = "http") -> Iterator[list[bytes]]:
    """The segments tcpdump saw inside the block (the list is filled when it ends): over
    HTTP both ways (what Triton's port sent, then what was sent to it), over gRPC what was
    sent to Triton's port. The witness of :func:`served_whole` for a failure that is
    Triton's corruption; the block must send requests, and the witness must have seen them
    (else it could prove nothing)."""
    seen: list[bytes] = []
    if protocol == "http":
        port = settings.port("triton_http")
        wires = [Capture(port, "http", direction="from"), Capture(port, "http", direction="to")]
    else:
        wires = [Capture(settings.port("triton_grpc"), "grpc", direction="to")]
    try:
        with ExitStack() as stack:
            for wire in wires:
                stack.enter_context(wire)
            yield seen
        for wire in wires:
            seen.extend(wire.payloads())
    finally:
        for wire in wires:
            wire.close()
    if protocol == "http":
        saw = sum(segment.count(b"HTTP/1.1 200 OK\r\n") for segment in seen)
        sent = sum(requests_in(segment, "http") for segment in seen)
        saw = min(saw, sent)
    else:
        saw = sum(requests_in(segment, "grpc") for segment in seen)
    assert saw > 0, f"the capture of Triton's {protocol} port saw none of the run"


# What Triton 2.51's tracing bug (a Trace freed while in use: DESIGN.md) did to a traced
# request without killing the server; each seen in CI, never untraced:
# - a whole "HTTP/1.1 200 OK" head whose header line where Content-Length belongs has no
#   name (2 of 6 runs in session 27, on the traced test with the largest window);
# - a gRPC INVALID_ARGUMENT saying the request lacks an input (once, session 25), and the
#   same over HTTP, a 400 (once, session 37);
# - an HTTP 400 "unknown request input name INPUT_B" (once, stop 47's CI): the backend asked
#   the request for an input it had been admitted with (TRITONBACKEND_RequestInput found no
#   such name in the request's map), on the rerun of a test whose first try met the first kind;
# - an HTTP 200 whose OUTPUT_SUM was not INPUT_A + INPUT_B (once, stop 49's CI, in
#   test_the_advisor_pools_several_traced_runs): the model adds what Triton hands it (its
#   execute() is one numpy sum), and no untraced run of the suite ever met a wrong sum.
UNREADABLE = "unreadable response: no Content-Length and not chunked: "
NAMELESS_HEADER = re.compile(rb"^HTTP/1\.1 200 OK(\r\n[^:\r\n]+:[^\r\n]*)*\r\n:")
MISSING_INPUT = re.compile(
    r"^(?P<protocol>gRPC INVALID_ARGUMENT|HTTP 400): \[request id: (?P<ident>[\w-]+)\] "
    r"(?:input '(?P<quoted>\w+)' does not exist in request"
    r"|unknown request input name (?P<bare>\w+)$)"
)
# The same nameless header line, met by tritonclient's HTTP client (geventhttpclient), whose
# parser names no head ("Invalid header token"): such a failure is written with this prefix,
# and proven by the count of Triton's answers on the wire whose head has a nameless line.
UNPARSABLE = "tritonclient could not parse Triton's answer: "
MAX_CORRUPTED = 2  # more in one run is something else


def nameless_heads(wire: Sequence[bytes]) -> int:
    """Triton's ``HTTP/1.1 200 OK`` heads on the wire with a header line that has no name."""
    heads = (
        b"HTTP/1.1 200 OK" + part.split(b"\r\n\r\n", 1)[0]
        for segment in wire
        for part in segment.split(b"HTTP/1.1 200 OK")[1:]
    )
    return sum(NAMELESS_HEADER.match(head) is not None for head in heads)


def proven_on_the_wire(text: str, wire: Sequence[bytes], count: int = 1) -> bool:
    """Whether the capture shows that the failure ``text`` (``count`` requests) was Triton's
    doing:

    - an unreadable HTTP answer: its head is among the bytes Triton sent, and has a nameless
      header line (so the client did not lose its place, and Triton's memory was wrong);
    - a request "lacking" an input (either of Triton's phrasings): the client's request
      with that id holds that input and its bytes: over gRPC read from its HTTP/2 DATA
      frame and parsed as protobuf, over HTTP its JSON header parsed, with each input's
      binary bytes after it;
    - an answer tritonclient could not parse (:data:`UNPARSABLE`): at least ``count`` of
      Triton's answers on the wire have a head with a nameless header line;
    - a wrong sum: at least ``count`` of Triton's HTTP answers on the wire carry an
      OUTPUT_SUM other than the sum of the inputs that the request of the same id carried
      (:func:`wrong_sums`; over gRPC only the requests are captured, so it proves nothing)."""
    if text == WRONG_SUM:
        return wrong_sums(wire) >= count
    if text.startswith(UNPARSABLE):
        return nameless_heads(wire) >= count
    if text.startswith(UNREADABLE):
        try:
            head = ast.literal_eval(text[len(UNREADABLE) :])
        except (ValueError, SyntaxError):
            return False
        return (
            isinstance(head, bytes)
            and NAMELESS_HEADER.match(head) is not None
            and any(head + b"\r\n\r\n" in segment for segment in wire)
        )
    missing = MISSING_INPUT.match(text)
    if missing is None:
        return False
    protocol, ident = missing["protocol"], missing["ident"]
    name = missing["quoted"] or missing["bare"]
    if protocol.startswith("HTTP"):
        return any(name in inputs for inputs in _http_requests(wire, ident))
    for request in _grpc_requests(wire, ident.encode()):
        names = [t.name for t in request.inputs]
        if request.id == ident and name in names:
            return len(request.raw_input_contents) == len(names)
    return False


def _http_bodies(wire: Sequence[bytes], key: str) -> Iterator[tuple[str, dict[str, bytes]]]:
    """(id, {tensor name: its bytes}) of each HTTP inference JSON header with an id whose
    ``key`` ("inputs" of a request, "outputs" of Triton's answer) lists binary tensors
    (``binary_data_size``) whose bytes follow whole in the same captured segment."""
    start = re.compile(rb'\{"id":\s*"')
    decoder = json.JSONDecoder()
    for segment in wire:
        for found in start.finditer(segment):
            text = segment[found.start() :].decode("latin-1")  # one character per byte
            try:
                header, end = decoder.raw_decode(text)
                tensors = header[key]
                names = [str(t["name"]) for t in tensors]
                sizes = [int(t["parameters"]["binary_data_size"]) for t in tensors]
                ident = str(header["id"])
            except (ValueError, KeyError, TypeError):
                continue
            if len(text) - end < sum(sizes):
                continue
            at = found.start() + end
            data = {}
            for name, size in zip(names, sizes, strict=True):
                data[name] = segment[at : at + size]
                at += size
            yield ident, data


def _http_requests(wire: Sequence[bytes], ident: str) -> Iterator[set[str]]:
    """The input names of each HTTP inference request with id ``ident`` whose JSON header
    and every input's binary bytes sit whole in one captured segment."""
    for found, inputs in _http_bodies(wire, "inputs"):
        if found == ident:
            yield set(inputs)


def wrong_sums(wire: Sequence[bytes]) -> int:
    """How many of Triton's HTTP answers on the wire carry an OUTPUT_SUM (FP32) that is
    not INPUT_A + INPUT_B of any request with the answer's id on the wire: Triton sent a
    wrong sum for the bytes the client sent. Answers whose request is not whole on the
    wire count for nothing."""
    sent: dict[str, list[np.ndarray]] = {}
    for ident, inputs in _http_bodies(wire, "inputs"):
        a, b = inputs.get("INPUT_A"), inputs.get("INPUT_B")
        if a is not None and b is not None and len(a) == len(b) and len(a) % 4 == 0:
            sent.setdefault(ident, []).append(np.frombuffer(a, "<f4") + np.frombuffer(b, "<f4"))
    wrong = 0
    for ident, outputs in _http_bodies(wire, "outputs"):
        got = outputs.get("OUTPUT_SUM")
        if got is None or ident not in sent or len(got) % 4:
            continue
        answer = np.frombuffer(got, "<f4")
        if not any(np.array_equal(answer, total) for total in sent[ident]):
            wrong += 1
    return wrong


def _grpc_requests(wire: Sequence[bytes], ident: bytes) -> Iterator[Any]:
    """The ModelInferRequests whose whole gRPC message sits in one HTTP/2 DATA frame of a
    captured segment holding ``ident`` (segments are read from a frame boundary)."""
    for segment in wire:
        if ident not in segment:
            continue
        off = 24 if segment.startswith(b"PRI * HTTP/2.0") else 0
        while off + 9 <= len(segment):
            length = int.from_bytes(segment[off : off + 3], "big")
            kind = segment[off + 3]
            payload = segment[off + 9 : off + 9 + length]
            off += 9 + length
            if kind > 9:  # not a frame boundary
                break
            if kind != 0 or ident not in payload or len(payload) < 5 or payload[0] != 0:
                continue
            size = int.from_bytes(payload[1:5], "big")
            if len(payload) == 5 + size:
                yield service_pb2.ModelInferRequest.FromString(payload[5:])


def corrupted_by_triton(error: BaseException | None) -> str:
    """The first error text when every failed request of a traced run is proven on the wire
    to be Triton's corruption, and at most :data:`MAX_CORRUPTED` failed; else ""."""
    if not isinstance(error, FailedRequests) or not error.errors:
        return ""
    if sum(error.errors.values()) > MAX_CORRUPTED:
        return ""
    if all(text in error.proven for text in error.errors):
        return next(iter(error.errors))
    return ""


# Why each test was rerun, by node id: written by TritonCrashes.crashed, read by
# tests/conftest.py for the summary of reruns (xdist's workers send it in the report).
RERUN_CAUSES: dict[str, str] = {}


class TritonCrashes:
    """Rerun a traced-load test only when the Triton it used died of a signal during it.

    Triton 2.51's tracing corrupts its memory now and then, whatever the client does
    (upstream, fixed in 2.57: see DESIGN.md). A test of the traced path that meets such a
    crash says nothing about this project's code, so it is rerun, and only then:
    :meth:`crashed` is the condition of a ``flaky`` mark (pytest-rerunfailures >= 16.7 calls
    it after the test). It is true when, since :meth:`begin` at the test's start, the
    Triton log gained a crash report ("Signal (11) received." and the like), or the
    supervisor's state records a new exit of Triton by a crash signal. Failed requests alone
    (:func:`served_whole`) never are. Triton runs supervised, so it is back
    (:meth:`wait_ready`) before the rerun. tests/conftest.py lists every rerun with the
    cause kept here, and fails the session when more than a few tests needed one.
    """

    # Triton's handler prints "Signal (N) received." for a crash (6, 11) and for a stop
    # (SIGTERM 15, SIGINT 2): only the first kind counts.
    SIGNATURE = re.compile(r"^Signal \((?!15\)|2\))\d+\) received.*$", re.MULTILINE)
    # The supervisor's record of a child killed by a signal its handler had no time to log.
    KILLED = re.compile(r"^killed by SIG(SEGV|ABRT|BUS|FPE|ILL)\b")

    def __init__(self) -> None:
        self.settings: Settings | None = None
        self.nodeid = ""
        self.log_seen = 0
        self.restarts_seen = 0

    def watch(self, settings: Settings) -> None:
        """The (supervised) stack whose Triton the tests of this module use."""
        self.settings = settings

    def forget(self) -> None:
        """A test is setting up: no crash is anyone's until :meth:`begin` (a test whose
        setup fails waiting for Triton is not rerun for the previous test's crash)."""
        self.nodeid = ""

    def begin(self, nodeid: str) -> None:
        """A test starts: what Triton's log and the supervisor hold now is not its crash."""
        assert self.settings is not None, "watch() the stack first"
        self.nodeid = nodeid
        self.log_seen = len(self._reports())
        self.restarts_seen = self._triton_record()[0]
        RERUN_CAUSES.pop(nodeid, None)

    def _reports(self) -> list[str]:
        assert self.settings is not None
        try:
            text = self.settings.log_file("triton").read_text(errors="replace")
        except OSError:
            return []
        return self.SIGNATURE.findall(text)

    def _triton_record(self) -> tuple[int, str]:
        """Triton's (restarts, last_exit) in the supervisor's state file."""
        assert self.settings is not None
        try:
            services = json.loads(self.settings.state_file.read_text())["services"]
        except (OSError, ValueError, KeyError):
            return 0, ""
        row: dict[str, Any] = next((s for s in services if s.get("name") == "triton"), {})
        return int(row.get("restarts", 0)), str(row.get("last_exit", ""))

    def crashed(self, error: BaseException | None = None) -> bool:
        """Whether the watched Triton died of a signal since :meth:`begin`, or the test
        failed only for answers that tracing corrupted (:func:`corrupted_by_triton`). Asked
        after every test, passed or failed, with its error; the same answer each time."""
        if self.settings is None or not self.nodeid:
            return False
        reports = self._reports()[self.log_seen :]
        restarts, last_exit = self._triton_record()
        cause = ""
        if reports:
            log = self.settings.log_file("triton")
            cause = f"Triton crashed during the test: {reports[0].strip()!r} in {log}"
        elif restarts > self.restarts_seen and self.KILLED.match(last_exit):
            cause = f"Triton crashed during the test: the supervisor recorded {last_exit!r}"
        elif corrupted := corrupted_by_triton(error):
            cause = f"Triton's tracing corrupted a request (proven on the wire): {corrupted:.300}"
        if cause and error is not None:
            RERUN_CAUSES[self.nodeid] = f"{cause}; the test failed with {error!r:.200}"
        return bool(cause)

    def serving(self, settings: Settings, model: str = "batch_add_model") -> None:
        """Until the watched Triton answers ready and serves one request of ``model``.

        After a crash the restarted Triton 2.51 once answered ready and then no request at
        all (4 sent, 4 timed out), and once a Triton logged "Signal (11) received." and did
        not exit: it kept its ports and executed nothing, so the supervisor saw nothing to
        restart. A Triton that crashed before (the supervisor counts a restart, or its log
        holds a crash report) and is not ready and serving within a minute is restarted once
        here through the supervisor, as a user would (`batchscope restart triton`); one that
        never crashed and serves nothing fails the test, as it should."""
        if not (self._triton_record()[0] or self._reports()):
            self.wait_ready(settings)
            return
        try:
            self.wait_ready(settings)
        except AssertionError:
            pass
        else:
            if self._answers(settings, model):
                return
        restart(settings, "triton")
        self.wait_ready(settings)
        assert self._answers(settings, model), f"Triton serves no request of {model}"

    @staticmethod
    def _answers(settings: Settings, model: str) -> bool:
        url = f"{settings.url('triton_http')}/v2/models/{model}/infer"
        inputs = [
            {"name": n, "shape": [1, 1], "datatype": "FP32", "data": [1.0]}
            for n in ("INPUT_A", "INPUT_B")
        ]
        try:
            answer = requests.post(url, json={"inputs": inputs}, timeout=10)
        except requests.RequestException:
            return False
        return answer.status_code == 200

    @staticmethod
    def wait_ready(settings: Settings, timeout_s: float = 60.0) -> None:
        """Until the (restarted) Triton answers ready; AssertionError after ``timeout_s``."""
        url = f"{settings.url('triton_http')}/v2/health/ready"

        def ready() -> bool:
            try:
                return requests.get(url, timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_for(f"Triton ready at {url}", ready, timeout_s)


def load(argv: Sequence[str]) -> int:
    """``batchscope load ARGV...`` in this process; its exit status."""
    from batchscope.main import main

    return main(["load", *argv])


# A copy of the add model whose execution waits while a file exists (at most 5 s): a stall
# of the model alone, Triton's front end and queue left to run. (Stopping the python stub
# with SIGSTOP instead crashed Triton once: the stub held a lock Triton timed out on.)
STALLING_MODEL = """
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

SWITCH = {switch!r}


class TritonPythonModel:
    def execute(self, requests):
        deadline = time.monotonic() + 5.0
        while os.path.exists(SWITCH) and time.monotonic() < deadline:
            time.sleep(0.002)
        out = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT_A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT_B").as_numpy()
            tensor = pb_utils.Tensor("OUTPUT_SUM", (a + b).astype(np.float32))
            out.append(pb_utils.InferenceResponse(output_tensors=[tensor]))
        return out
"""


def load_stalling_copy(
    admin: TritonClient,
    source: str,
    name: str,
    switch: Path,
    config: dict[str, Any] | None = None,
    repository: Path | None = None,
) -> dict[str, Any]:
    """Load ``name``: the add model ``source``'s config (or ``config``) with an execution
    that waits while ``switch`` exists, through the repository API (the caller's key). With
    ``repository`` (the server's own, writable), the model's file is written there, so a
    later load of a config alone finds it (as the autopilot's do); else it travels in the
    load request. Its config as served is returned."""
    body = {**(config or admin.model_config_json(source)), "name": name}
    model_py = STALLING_MODEL.format(switch=str(switch)).encode()
    if repository is None:
        admin.load_model(name, body, {"1/model.py": model_py})
    else:
        (repository / name / "1").mkdir(parents=True, exist_ok=True)
        (repository / name / "1" / "model.py").write_bytes(model_py)
        admin.load_model(name, body)
    return admin.model_config_json(name)


def write_capture(db: Path, out: Path) -> None:
    """Write the load-run store ``db`` to ``out``, compacted and gzipped, as the committed
    captures are (a store read by the tests after ``gzip.decompress``)."""
    with sqlite3.connect(db) as conn:
        conn.execute("VACUUM")
    out.write_bytes(gzip.compress(db.read_bytes(), 9))
