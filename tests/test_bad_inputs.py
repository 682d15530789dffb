"""Bad input anywhere: one line naming the problem and the fix, exit 2, no traceback, and a
store left byte-for-byte as it was.

Every command runs (batchscope's main, in a forked child of tests/forks.py's server) against
a state folder holding a real load-run store (and no running stack: a Triton URL points at a
port nobody listens on, so no load can leave).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shutil
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from batchscope.main import full_parser
from dashboard import loadruns
from stacksettings import PORTS, free_ports, isolated
from tests.forks import Forks
from tritonapi.modelname import model_name

ROOT = Path(__file__).resolve().parents[1]
STORE = ROOT / "tests" / "advisor" / "data" / "loadruns.sqlite3"
(DEAD,) = free_ports(1)  # nothing listens here: a request to it is refused at once
DEAD_URL = f"http://127.0.0.1:{DEAD}"


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    problem: str  # the message names what is wrong ...
    fix: str  # ... and what to do instead
    env: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        return f"{env} {' '.join(self.argv)}".strip()


def case(*argv: str, problem: str, fix: str, **env: str) -> Case:
    return Case(tuple(argv), problem, fix, env)


STACK = ("batchscope",)
UP = ("batchscope", "up", "--no-warmup")
EXPORTER = ("batchscope", "exporter")
LOADGEN = ("batchscope", "load")
CONC = ("batchscope", "load", "concurrency", "--url", DEAD_URL, "--no-store")
SEQ = ("batchscope", "load", "sequences", "--url", DEAD_URL)
PRIO = ("batchscope", "load", "priorities", "--url", DEAD_URL)
RATE = ("batchscope", "load", "rate", "--url", DEAD_URL, "--no-store")
CAPACITY = ("batchscope", "load", "capacity", "--url", DEAD_URL, "--no-store")
ADVISOR = ("batchscope",)
PREDICT = ("batchscope", "predict", "--service-us", "450,47", "--concurrency", "8")

CASES = [
    # ---- the launcher ----------------------------------------------------------------
    case(*UP, "--triton-http-port", "http", problem="'http' is not a port", fix="1-65535"),
    case(*UP, "--prometheus-port", "70000", problem="70000 is out of range", fix="1-65535"),
    case(*UP, "--skip", "nosuch", problem="unknown service 'nosuch'", fix="known: "),
    case(*UP, "--scrape-interval", "0", problem="--scrape-interval", fix="positive"),
    case(*UP, "--scrape-interval", "nan", problem="--scrape-interval", fix="positive"),
    case(*UP, "--scrape-interval", "soon", problem="invalid float", fix="--scrape-interval"),
    case(*UP, "--host", "0.0.0.0", problem="not loopback", fix="--expose"),
    case(
        *UP,
        "--rules-settings",
        "/nonexistent.yaml",
        problem="/nonexistent.yaml",
        fix="existing settings file",
    ),
    case(*UP, "--model-repository", "/nonexistent", problem="/nonexistent", fix="--model-reposi"),
    case(*UP, problem="STACK_SCRAPE_INTERVAL", fix="seconds", STACK_SCRAPE_INTERVAL="abc"),
    case(*UP, problem="STACK_TRITON_HTTP_PORT", fix="1-65535", STACK_TRITON_HTTP_PORT="0"),
    case(*UP, problem="STACK_HOST", fix="--expose", STACK_HOST="10.1.2.3"),
    case(
        *UP,
        problem="STACK_TRITON_CACHE_BYTES",
        fix="number of bytes",
        STACK_TRITON_CACHE_BYTES="1M",
    ),
    case(*STACK, "frobnicate", problem="invalid choice: 'frobnicate'", fix="choose from"),
    case(*STACK, "restart", problem="SERVICE", fix="required"),
    # ---- loadgen.sequences and loadgen.priorities (issue 18) -------------------------
    case(*SEQ, "--model", "m", "--first-id", "0", problem="--first-id", fix="no correlation ID"),
    case(*SEQ, "--model", "m", "--length", "0", problem="--length", fix="between 1 and"),
    case(*SEQ, "--model", "m", problem="is not answering", fix="./stack/up"),
    case(
        *PRIO, "--model", "m", "--mix", "1-2", problem="'1-2' is not LEVEL:CLIENTS", fix="1:2,2:4"
    ),
    # ---- the exporter ----------------------------------------------------------------
    case(*EXPORTER, "--triton-url", "ftp://x", problem="not an http(s) URL", fix="e.g. http://"),
    case(*EXPORTER, "--triton-url", "http://h:99999", problem="bad port", fix="1-65535"),
    case(*EXPORTER, "--triton-timeout", "0", problem="'0'", fix="(0, 60]"),
    case(*EXPORTER, "--triton-timeout", "nan", problem="'nan'", fix="(0, 60]"),
    case(*EXPORTER, "--triton-timeout", "abc", problem="'abc'", fix="(0, 60]"),
    case(*EXPORTER, "--web.listen-address", "nohost", problem="not HOST:PORT", fix="e.g. 127"),
    case(*EXPORTER, "--web.listen-address", "127.0.0.1:0", problem="HOST:PORT", fix="1-65535"),
    case(
        *EXPORTER,
        "--triton-url",
        "http://a:8000",
        "--triton-url",
        "http://b:8000",
        "--triton-metrics-url",
        "http://a:8002/metrics",
        problem="given 1 time(s) for 2",
        fix="one per --triton-url",
    ),
    case(*EXPORTER, "--triton-url", "a:1", "--triton-url", "a:1", problem="twice", fix="--triton"),
    case(*EXPORTER, "--log.level", "loud", problem="'loud'", fix="choose from"),
    case(*EXPORTER, "--read-interval", "-1", problem="'-1'", fix="[0, 300]"),
    case(*EXPORTER, problem="'loud'", fix="one of", EXPORTER_LOG_LEVEL="loud"),
    case(*EXPORTER, "--triton-admin-key-file", "/nonexistent", problem="/nonexistent", fix="give"),
    # ---- the load generator (the first four ended in a RecursionError) -----------------
    case(*RATE, "-r", "-0.5", problem="--rate must be greater than 0", fix="greater than 0"),
    case(*RATE, "-r", "nan", problem="--rate must be greater than 0", fix="greater than 0"),
    case(*CONC, "--timeout", "200.5", problem="--timeout 200.5s", fix="safe bound of 120s"),
    case(*CONC, "--duration", "86400.5", problem="--duration 86400.5s", fix="safe bound of 86400s"),
    case(*LOADGEN, "runs", "--db", "{notsqlite}", problem="not a load-run store", fix="--db"),
    case(*LOADGEN, "show", "1", "--db", "{notsqlite}", problem="not a load-run store", fix="--db"),
    case(*LOADGEN, "show", "999", "--db", "{store}", problem="no run 999", fix="load runs`"),
    case(*LOADGEN, "runs", "--db", "/nonexistent/x.db", problem="no load-run store", fix="--db"),
    case(*CONC, "-c", "0", problem="must be greater than 0", fix="greater than 0"),
    case(*CONC, "-c", "1000", problem="1000", fix="safe bound of 256"),
    case(*CONC, "-c", "1,x", problem="'1,x'", fix="-c"),
    case(*RATE, "-r", "1e9", problem="1000000000", fix="safe bound"),
    case(*CONC, "-d", "inf", problem="--duration", fix="safe bound"),
    case(*CONC, "--batch-size", "0", problem="--batch-size", fix="greater than 0"),
    case(*LOADGEN, "serial", "-n", "0", "--no-store", problem="--requests", fix="greater than 0"),
    case(*LOADGEN, "steps", "--stage", "abc", "--no-store", problem="'abc'", fix="RATE:SECONDS"),
    case(*LOADGEN, "concurrency", "--url", "ftp://x:1", problem="ftp://x:1", fix="http"),
    case(
        *LOADGEN, "concurrency", "--url", "http://10.9.9.9:8000", problem="10.9.9.9", fix="--allow"
    ),
    case(*LOADGEN, "show", "abc", problem="invalid int value: 'abc'", fix="run_id"),
    case(*CONC, "--shape", "INPUT_A=x", problem="'x'", fix="comma-separated list of sizes"),
    case(*LOADGEN, "compare", "'serial -n 3'", problem="two quoted scenarios", fix="--models"),
    case(*CAPACITY, "--p99-ms", "0", problem="--p99-ms must be greater than 0", fix="than 0"),
    case(*CAPACITY, "--p99-ms", "5", "--steps", "99", problem="--steps 99", fix="bound of 30"),
    case(*CAPACITY, "--p99-ms", "5", "--max-rate", "1e6", problem="--max-rate", fix="bound"),
    case(*CAPACITY, problem="--p99-ms", fix="required"),
    case(*CONC, "-c", "2", "--processes", "3", problem="--processes 3", fix="--concurrency 3"),
    case(*CONC, "--processes", "0", problem="--processes", fix="greater than 0"),
    case(*LOADGEN, "serial", "--processes", "2", problem="serial", fix="one process"),
    case(*LOADGEN, "merge", "/nonexistent.db", "{store}", problem="/nonexistent", fix="--json"),
    case(*LOADGEN, "merge", "{notsqlite}", "{notsqlite}", problem="neither", fix="store files"),
    case(*LOADGEN, "merge", "{store}", "{store}", problem="runs", fix="RUN_ID"),
    case(*LOADGEN, "merge", "{store}", problem="two runs or more", fix="two FILEs"),
    # ---- the advisor -----------------------------------------------------------------
    case(
        *PREDICT,
        "--max-batch-size",
        "8",
        "--request-us",
        "100",
        problem="--request-us",
        fix="--cores",
    ),
    case(
        *ADVISOR,
        "advise",
        "--store",
        str(STORE),
        "--run",
        "1",
        "--max-batch-size",
        "4",
        "--p99-ms",
        "5",
        "--objective",
        "headroom",
        problem="capacity: unknown",
        fix="--probe",
    ),
    case(
        *PREDICT,
        "--max-batch-size",
        "0",
        "--delay-us",
        "100",
        problem="--max-batch-size",
        fix="positive",
    ),
    case(
        *PREDICT, "--max-batch-size", "8", "--delay-us", "-5", problem="--delay-us", fix="0 or more"
    ),
    case(
        *ADVISOR,
        "predict",
        "--service-us",
        "abc",
        "--concurrency",
        "8",
        "--max-batch-size",
        "8",
        problem="--service-us",
        fix="e.g.",
    ),
    case(
        *ADVISOR,
        "advise",
        "--store",
        "{notsqlite}",
        "--run",
        "1",
        "--max-batch-size",
        "8",
        "--delay-us",
        "100",
        "--p99-ms",
        "10",
        problem="not a load-run store",
        fix="--store",
    ),
    case(
        *ADVISOR,
        "advise",
        "--url",
        DEAD_URL,
        "--model",
        "m",
        "--p99-ms",
        "nan",
        problem="--p99-ms",
        fix="positive",
    ),
    # ---- round 3 (issue 29): each of these ended in a traceback, a wrong cause or exit 0 ---
    case(
        *RATE, "-r", "10", "-d", "1", "--poisson", "--seed", "-1", problem="--seed -1", fix="0 to"
    ),
    case(*STACK, "check-config", "--model-repository", "{empty}", problem="no model", fix="--mod"),
    case(*LOADGEN, "runs", "--db", "/dev/null", problem="/dev/null is not a file", fix="--db"),
    case(*CONC, "--model", "m" * 100_000, problem="100,000 characters", fix="name of a folder"),
    case(
        *ADVISOR,
        "advise",
        "--url",
        DEAD_URL,
        "--model",
        "m",
        "--p99-ms",
        "5",
        "--traces",
        "http://127.0.0.1:1",
        problem="--traces: http://127.0.0.1:1",
        fix="exporter's URL",
    ),
]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("bad-inputs")
    shutil.copy(STORE, folder / "loadgen.sqlite3")
    (folder / "notsqlite").write_text("these are my notes, not a database\n")
    (folder / "empty").mkdir()
    yield folder


def fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def run(c: Case, state: Path) -> tuple[int, str]:
    """The case's command, its exit code and its stderr (kept beside the state folder, whose
    files must not change)."""
    out = state.with_name(f"{state.name}.stderr")
    argv = [
        a.format(
            store=state / "loadgen.sqlite3", notsqlite=state / "notsqlite", empty=state / "empty"
        )
        for a in c.argv
    ]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("STACK_", "LOADGEN_"))},
        "STACK_STATE_DIR": str(state),
        "LOADGEN_DB": str(state / "loadgen.sqlite3"),
        "STACK_TRITON_HTTP_PORT": str(DEAD),
        **c.env,
    }
    code = forked(argv[1:], env, out, 120)
    return code, out.read_text(errors="replace")


def test_there_are_at_least_40_cases_across_every_cli() -> None:
    assert len(CASES) >= 40
    assert {c.argv[0] for c in CASES} == {"batchscope"}
    groups = {GROUPS.get(c.argv[1], "") for c in CASES}
    assert groups >= {"stack", "exporter", "loadgen", "advisor"}, groups


# Each case is batchscope's main in a forked child of this worker: the same code as the
# console script (tests/batchscope/test_cli.py checks that they print the same) without
# about a hundred interpreters' start-up, minutes of CPU on a busy 2-core machine.
@pytest.mark.timeout(900)
def test_every_bad_input_is_one_clear_line_exit_2_and_nothing_written(state: Path) -> None:
    before = fingerprint(state)
    results = [run(c, state) for c in CASES]
    problems = []
    for c, (code, stderr) in zip(CASES, results, strict=True):
        errors = [ln for ln in stderr.splitlines() if ln]
        message = errors[-1] if errors else ""
        wrong = []
        if not re.match(r"batchscope( [\w-]+)*: error: ", message):
            wrong.append("not a `batchscope SUBCOMMAND: error:` line")
        if code != 2:
            wrong.append(f"exit {code}")
        if "Traceback" in stderr:
            wrong.append("a traceback")
        if len(errors) != 1:
            wrong.append(f"{len(errors)} lines")
        if c.problem not in message:
            wrong.append(f"no {c.problem!r}")
        if c.fix not in message:
            wrong.append(f"no fix {c.fix!r}")
        if wrong:
            problems.append(f"{c.id}: {', '.join(wrong)}\n    {stderr.strip()[-600:]}")
    assert not problems, "\n".join(problems)
    assert fingerprint(state) == before


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (loadruns.RunForm("concurrency", "m", concurrency=0), "concurrency must be greater than 0"),
        (loadruns.RunForm("concurrency", "m", concurrency=17), "limit of 16; for bigger runs"),
        (loadruns.RunForm("concurrency", "m", duration_s=float("nan")), "duration must be greater"),
        (loadruns.RunForm("concurrency", "m", duration_s=31), "limit of 30 s; for bigger runs"),
        (loadruns.RunForm("rate", "m", rate=-1), "rate must be greater than 0"),
        (loadruns.RunForm("rate", "m", rate=501), "limit of 500/s; for bigger runs"),
        (loadruns.RunForm("serial", "m", requests=65), "limit of 64; for bigger runs"),
        (loadruns.RunForm("nosuch", "m"), "unknown scenario 'nosuch'"),
    ],
)
def test_the_dashboard_form_refuses_with_a_message(
    form: loadruns.RunForm, message: str, tmp_path: Path
) -> None:
    with pytest.raises(loadruns.RunRefused, match=message.replace("(", r"\(")) as refused:
        loadruns.to_params(form, DEAD_URL)
    assert "\n" not in str(refused.value)


# ---- by class: every flag that takes a number, a path, a URL or a model name ------------
# Generated from the parsers themselves (their actions' ``type``, ``dest`` and ``metavar``),
# so a new flag is covered the day it is added. Each case runs in a forked child of this
# process (the modules are imported once), with the same environment as above.

# The tool each command belongs to: a flag the tool's commands share is tried once.
GROUPS = {
    **dict.fromkeys(
        ("up", "down", "restart", "secrets", "status", "check-config", "trace"), "stack"
    ),
    **dict.fromkeys(("rules", "render"), "stack"),
    "doctor": "doctor",
    **dict.fromkeys(("docs", "completion"), "batchscope"),
    "load": "loadgen",
    "exporter": "exporter",
    **dict.fromkeys(("advise", "autopilot", "predict"), "advisor"),
}
NUMERIC_METAVARS = {"PORT", "SECONDS", "S", "N", "B", "R", "X", "AGE"}
URL_METAVARS = {"URL", "EXPORTER_URL"}
PATH_METAVARS = {"FILE", "PREFIX"}
# Paths a command writes or creates (a missing one is made, a folder is what they want).
OUTPUT_PATHS = {"--state-dir", "--output", "--out", "--trace-file", "--calibrations"}
# What each command needs besides the flag under test, chosen so that nothing can start
# (a dead Triton URL, a garbage rules file for `up`, a port in use for the exporter) and
# nothing is written where the store is checked.
(BUSY,) = free_ports(1)
BASE: dict[str, tuple[str, ...]] = {
    "up": ("--no-warmup", "--rules-settings", "{garbage}"),
    "restart": ("exporter",),
    "check-config": (),
    "trace": ("--model", "m", "--url", DEAD_URL),
    "doctor": ("--url", DEAD_URL),
    "secrets": ("--state-dir", "{scratch}/secrets"),
    "load serial": ("--url", DEAD_URL, "--no-store"),
    "load concurrent": ("--url", DEAD_URL, "--no-store"),
    "load concurrency": ("--url", DEAD_URL, "--no-store"),
    "load rate": ("-r", "10", "--url", DEAD_URL, "--no-store"),
    "load steps": ("--stage", "10:1", "--url", DEAD_URL, "--no-store"),
    "load capacity": ("--p99-ms", "5", "--url", DEAD_URL, "--no-store"),
    "load compare": ("serial -n 1", "serial -n 2", "--db", "{scratch}/compare.db"),
    "load runs": ("--db", "{store}"),
    "load show": ("1", "--db", "{store}"),
    "load export": ("1", "--db", "{store}", "--out", "{scratch}/export"),
    "load merge": ("{store}", "{store}", "--db", "{scratch}/merge.db"),
    "load prune": ("--db", "{scratch}/prune.db"),
    "load import": ("{garbage}", "--db", "{scratch}/import.db"),
    "exporter": ("--web.listen-address", f"127.0.0.1:{BUSY}"),
    "predict": ("--service-us", "450,47", "--concurrency", "8", "--max-batch-size", "8"),
    "advise": ("--url", DEAD_URL, "--model", "m", "--p99-ms", "5"),
}
VALUES = {
    # class -> (label, value, refused in every context)
    "number": [
        ("negative", "-1", True),
        ("zero", "0", False),
        ("huge", "1e300", False),
        ("NaN", "nan", True),
        ("non-numeric", "abc", True),
    ],
    "path": [
        ("missing", "/nonexistent/x", False),
        ("a directory", "{scratch}/folder", False),
        ("a device", "/dev/null", False),
        ("unreadable", "{scratch}/loop", False),
        ("garbage", "{garbage}", False),
    ],
    "url": [
        ("wrong scheme", "ftp://127.0.0.1:1", True),
        ("dead", DEAD_URL, False),
        ("another service's port", "{other}", False),
        ("too long", "http://127.0.0.1:1/" + "x" * 10_000, True),
    ],
    "model": [
        ("too long", "m" * 300, True),
        ("odd characters", "a/../b?c", True),
    ],
}
# Reviewed: values these flags take on purpose. (command, flag, label) -> why.
ACCEPTED: dict[tuple[str, str, str], str] = {
    ("up", "--hung-after", "zero"): "0 turns hang restarts off",
    ("load serial", "--gap-ms", "zero"): "back to back",
    ("load serial", "--seed", "zero"): "a seed like any other",
    ("load prune", "--keep", "zero"): "keep none (the store is checked next)",
    ("exporter", "--config-cache-ttl", "zero"): "0: no config cache",
    ("exporter", "--read-interval", "zero"): "0: read at each scrape",
    ("exporter", "--trace-sample", "zero"): "0: always-on trace sampling off (the default)",
    ("advise", "--cv", "zero"): "0: evenly spaced arrivals",
    ("advise", "--delay-us", "zero"): "0: no queue delay, Triton's default",
    ("up", "--triton-url", "dead"): "attach mode watches a server that is down (warned)",
    ("up", "--triton-url", "another service's port"): "warned by the probe, then watched",
    ("load serial", "--db", "missing"): "a new store is made there",
    ("load serial", "--grpc-url", "another service's port"): "used only with --protocol grpc",
    ("load serial", "--exporter-url", "another service's port"): "used only with --trace",
    ("advise", "--model-repository", "missing"): "read only by --verify",
    ("advise", "--db", "missing"): "a new store is made there (by --apply's record)",
    ("advise", "--model-repository", "a directory"): "a repository is a folder",
    ("advise", "--admin-key-file", "missing"): "no key: the default may not exist",
    ("exporter", "--triton-url", "dead"): "read at scrape time: a down Triton is what it reports",
    ("exporter", "--triton-url", "another service's port"): "read at scrape time, reported then",
    ("exporter", "--changes-db", "missing"): "no store yet: no series until the first change",
    ("exporter", "--triton-metrics-url", "dead"): "read at scrape time",
    ("exporter", "--triton-metrics-url", "another service's port"): "read at scrape time",
    ("exporter", "--trace-file", "a device"): "a prefix: Triton writes PREFIX.0, .1, ...",
    ("exporter", "--trace-file", "unreadable"): "a prefix: Triton writes PREFIX.0, .1, ...",
    ("exporter", "--trace-file", "garbage"): "a prefix: Triton writes PREFIX.0, .1, ...",
    # The doctor reads Prometheus and the exporter after Triton: what answers there is
    # judged then (a dead Triton, as here, is the first thing it reports).
    ("doctor", "--metrics-url", "another service's port"): "read after Triton answers",
    ("advise", "--metrics-url", "another service's port"): "read after Triton answers",
    ("autopilot", "--metrics-url", "another service's port"): "read after Triton answers",
    ("doctor", "--prometheus", "another service's port"): "read after Triton answers",
    ("doctor", "--exporter-url", "another service's port"): "read after Triton answers",
}


@dataclass(frozen=True)
class Flag:
    command: str  # "load rate"
    option: str  # "--duration"
    kind: str  # number | path | url | model
    names: tuple[str, ...]  # what an error line may call it


def classify(action: argparse.Action) -> str | None:
    name = getattr(action.type, "__name__", "")
    dest, metavar = action.dest, str(action.metavar or "")
    if action.type is model_name:
        return "model"
    if "url" in dest or metavar in URL_METAVARS or dest in ("prometheus", "traces"):
        return "url"
    if action.type is Path or metavar in PATH_METAVARS or dest in ("db", "out"):
        return "path"
    if action.type in (int, float) or name == "parse" or metavar in NUMERIC_METAVARS:
        return "number"
    if dest in ("concurrency", "scrape_interval"):
        return "number"
    return None


def flags() -> list[Flag]:
    """Every optional flag of every parser with a class, once per distinct flag of a module
    (the load generator's scenarios share their common flags)."""
    found: dict[tuple[str, str], Flag] = {}

    def walk(parser: argparse.ArgumentParser, path: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{path} {name}")
            elif action.option_strings and action.nargs != 0:
                kind = classify(action)
                key = (GROUPS[path.split()[0]], action.option_strings[-1])
                if kind and key not in found and path in BASE:
                    names = (*action.option_strings, action.dest.replace("_", "-"))
                    found[key] = Flag(path, action.option_strings[-1], kind, names)

    (sub,) = [a for a in full_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert set(GROUPS) == set(sub.choices)  # a new command is given its tool here
    for name, parser in sub.choices.items():
        walk(parser, name)
    return list(found.values())


FLAGS = flags()


@dataclass(frozen=True)
class ClassCase:
    flag: Flag
    label: str
    value: str
    strict: bool

    @property
    def id(self) -> str:
        shown = self.value if len(self.value) < 40 else f"{self.value[:20]}..."
        return f"{self.flag.command} {self.flag.option} {shown} ({self.label})"


CLASS_CASES = [
    ClassCase(f, label, value, strict)
    for f in FLAGS
    for label, value, strict in VALUES[f.kind]
    if not (f.kind == "path" and f.option in OUTPUT_PATHS and label in ("missing", "a directory"))
]


class OtherService:
    """Some other HTTP service on a loopback port: it answers, but it is not the one asked for."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                body = b"<html>not what you think</html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@contextlib.contextmanager
def socket_held(port: int) -> Iterator[None]:
    """``port`` on loopback taken (listening) for the with-block: an address in use."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield


FORKS = Forks()


@pytest.fixture(scope="module", autouse=True)
def fork_server() -> Iterator[None]:
    """The fork server (tests/forks.py) lives as long as this module's tests."""
    try:
        yield
    finally:
        FORKS.close()


def forked(argv: list[str], env: dict[str, str], out: Path, timeout_s: float) -> int:
    """Run ``batchscope ARGV...`` (its main) in a forked child; its stderr goes to ``out``."""
    return FORKS.run(argv, env, out, timeout_s)


def verdict(c: ClassCase, code: int, stderr: str, value: str) -> str | None:
    """What is wrong with how the command took the value, or None."""
    errors = [ln for ln in stderr.splitlines() if ln and not ln.startswith(" ")]
    if "Traceback" in stderr:
        return "a traceback"
    if any(ln.startswith("usage:") for ln in errors):
        return "a usage block"
    if code not in (0, 1, 2):
        return f"exit {code}"
    accepted = (c.flag.command, c.flag.option, c.label) in ACCEPTED
    if accepted:
        return None
    if code != 0 and len(errors) != 1:
        return f"{len(errors)} error lines"
    # A value names itself only when it is long enough not to match by chance ("0", "-1").
    names = [*c.flag.names, *([value[:20]] if len(value) > 3 else [])]
    named = bool(errors) and any(n in errors[-1] for n in names)
    if not (code == 2 and named):
        if code == 2:
            return f"refused without naming {c.flag.option}: {errors[-1][:160]}"
        return f"accepted (exit {code})"
    return None


def test_class_cases_cover_every_flag_with_a_number_path_url_or_model() -> None:
    per_class = {kind: sum(c.flag.kind == kind for c in CLASS_CASES) for kind in VALUES}
    print(per_class)
    # Every class has flags in it, and a few well-known ones are found by the walk.
    assert all(per_class.values()), per_class
    options = {(GROUPS[f.command.split()[0]], f.option, f.kind) for f in FLAGS}
    for known in [
        ("loadgen", "--duration", "number"),
        ("loadgen", "--db", "path"),
        ("stack", "--hung-after", "number"),
        ("exporter", "--triton-url", "url"),
        ("advisor", "--traces", "url"),
        ("stack", "--model", "model"),
        ("doctor", "--model", "model"),
    ]:
        assert known in options, known


def test_every_class_case_is_refused_in_one_line_naming_the_flag(
    state: Path, tmp_path: Path
) -> None:
    other = OtherService()
    scratch = tmp_path / "scratch"
    (scratch / "folder").mkdir(parents=True)
    (scratch / "loop").symlink_to(scratch / "loop")  # ELOOP: unreadable even for root
    garbage = scratch / "garbage"
    garbage.write_bytes(bytes(range(256)) * 8)
    before = fingerprint(state)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("STACK_", "LOADGEN_"))},
        "STACK_STATE_DIR": str(state),
        "LOADGEN_DB": str(state / "loadgen.sqlite3"),
        "STACK_TRITON_HTTP_PORT": str(DEAD),
    }
    fill = {
        "store": state / "loadgen.sqlite3",
        "garbage": garbage,
        "scratch": scratch,
        "other": other.url,
    }
    problems = []
    try:
        with socket_held(BUSY):
            for c in CLASS_CASES:
                base = [a.format(**fill) for a in BASE[c.flag.command]]
                if c.flag.option == "--db":  # a run that is stored: the store is checked
                    base = [a for a in base if a != "--no-store"]
                value = c.value.format(**fill)
                argv = [*c.flag.command.split(), *base, c.flag.option, value]
                out = tmp_path / "stderr"
                code = forked(argv, env, out, 20)
                why = verdict(c, code, out.read_text(errors="replace"), value)
                if why:
                    problems.append(f"{c.id}: {why}")
    finally:
        other.server.shutdown()
        other.server.server_close()
    assert not problems, f"{len(problems)} of {len(CLASS_CASES)}:\n" + "\n".join(problems)
    assert fingerprint(state) == before


# ---- environment variables, by the same classes ----------------------------------------
# (variable, class, the command that reads it). The ports come from stacksettings.PORTS.
# The exporter names its flag when the value came from the variable that stands for it.
ENV_FLAGS = {
    "TRITON_TIMEOUT": "--triton-timeout",
    "EXPORTER_CONFIG_CACHE_TTL": "--config-cache-ttl",
    "EXPORTER_READ_INTERVAL": "--read-interval",
    "TRITON_ADMIN_KEY_FILE": "--triton-admin-key-file",
    "TRITON_URL": "--triton-url",
    "TRITON_METRICS_URL": "--triton-metrics-url",
    "STACK_TRITON_URLS": "--triton-url",
}
ENV_VARS: list[tuple[str, str, str]] = [
    *[(var, "number", "up") for _, var in PORTS.values()],
    ("STACK_SCRAPE_INTERVAL", "number", "up"),
    ("STACK_HUNG_AFTER", "number", "up"),
    ("STACK_TRITON_CACHE_BYTES", "number", "up"),
    ("TRITON_TIMEOUT", "number", "exporter"),
    ("EXPORTER_CONFIG_CACHE_TTL", "number", "exporter"),
    ("EXPORTER_READ_INTERVAL", "number", "exporter"),
    ("STACK_STATE_DIR", "path", "status"),
    ("STACK_MODEL_REPOSITORY", "path", "check-config"),
    ("STACK_RULES_SETTINGS", "path", "up"),
    ("STACK_TRITON_ADMIN_KEY_FILE", "path", "check-config"),
    ("TRITON_ADMIN_KEY_FILE", "path", "exporter"),
    ("LOADGEN_DB", "path", "load runs"),
    ("STACK_TRITON_URLS", "url", "check-config"),
    ("TRITON_URL", "url", "exporter"),
    ("TRITON_METRICS_URL", "url", "exporter"),
]
ENV_BASE = {**BASE, "up": ("--no-warmup",), "load runs": (), "status": ()}
ENV_ACCEPTED = {
    ("STACK_HUNG_AFTER", "zero"): "0 turns hang restarts off",
    ("STACK_TRITON_CACHE_BYTES", "zero"): "0: no response cache",
    ("EXPORTER_READ_INTERVAL", "zero"): "0: read at each scrape",
    ("EXPORTER_CONFIG_CACHE_TTL", "zero"): "0: no config cache",
    ("STACK_TRITON_URLS", "dead"): "check-config says it cannot read it (exit 1: not misuse)",
    ("STACK_TRITON_URLS", "another service's port"): "the same, naming what answered",
    **{
        ("STACK_TRITON_ADMIN_KEY_FILE", label): "read only in attach mode (STACK_TRITON_URLS)"
        for label in ("missing", "a directory", "a device", "garbage")
    },
    ("STACK_STATE_DIR", "missing"): "status of a stack that never ran: says so, exit 1",
    ("STACK_STATE_DIR", "a directory"): "a state folder is a folder",
    ("TRITON_URL", "dead"): "read at scrape time: a down Triton is what it reports",
    ("TRITON_URL", "another service's port"): "read at scrape time, reported then",
    ("TRITON_METRICS_URL", "dead"): "read at scrape time",
    ("TRITON_METRICS_URL", "another service's port"): "read at scrape time",
}
ENV_CASES = [
    (var, command, label, value, strict)
    for var, kind, command in ENV_VARS
    for label, value, strict in VALUES[kind]
]


def test_every_environment_class_case_is_refused_in_one_line_naming_the_variable(
    state: Path, tmp_path: Path
) -> None:
    other = OtherService()
    scratch = tmp_path / "scratch"
    (scratch / "folder").mkdir(parents=True)
    (scratch / "loop").symlink_to(scratch / "loop")
    garbage = scratch / "garbage"
    garbage.write_bytes(bytes(range(256)) * 8)
    fill = {"store": state / "loadgen.sqlite3", "garbage": garbage, "scratch": scratch}
    fill["other"] = other.url  # type: ignore[assignment]
    before = fingerprint(state)
    base_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("STACK_", "LOADGEN_"))},
        "STACK_STATE_DIR": str(state),
        "LOADGEN_DB": str(state / "loadgen.sqlite3"),
        "STACK_TRITON_HTTP_PORT": str(DEAD),
        # `up` must never start: a rules file that cannot be read stops it after the checks.
        "STACK_RULES_SETTINGS": str(garbage),
    }
    problems = []
    try:
        with socket_held(BUSY):
            for var, command, label, value, _strict in ENV_CASES:
                filled = value.format(**fill)
                argv = [*command.split(), *(a.format(**fill) for a in ENV_BASE[command])]
                out = tmp_path / "stderr"
                env = {**base_env, var: filled}
                code = forked(argv, env, out, 20)
                stderr = out.read_text(errors="replace")
                errors = [
                    ln for ln in stderr.splitlines() if ln and not ln.startswith((" ", "usage:"))
                ]
                if "Traceback" in stderr or code not in (0, 1, 2):
                    problems.append(f"{var}={value[:30]} ({label}): exit {code}, {stderr[-300:]}")
                    continue
                if (var, label) in ENV_ACCEPTED:
                    continue
                names = [var, ENV_FLAGS.get(var, var)]
                if len(filled) > 3:  # a path or a URL names itself; "0" would match anything
                    names.append(filled[:20])
                named = bool(errors) and any(n in errors[-1] for n in names)
                if not (code == 2 and len(errors) == 1 and named):
                    problems.append(f"{var}={value[:30]} ({label}): exit {code}, {errors[-1:]}")
    finally:
        other.server.shutdown()
        other.server.server_close()
    print({kind: sum(k == kind for _, k, _ in ENV_VARS) * len(VALUES[kind]) for kind in VALUES})
    assert not problems, f"{len(problems)} of {len(ENV_CASES)}:\n" + "\n".join(problems)
    assert fingerprint(state) == before


# ---- an unknown model, asked of a real Triton -----------------------------------------
MODEL_FLAGS = [f for f in FLAGS if f.kind == "model"]


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The stack's own Triton alone (the one that knows which models it serves)."""
    from stack.supervisor import running

    settings = isolated(tmp_path_factory.mktemp("triton") / "state")
    with running(settings, only={"triton"}):
        yield settings.url("triton_http")


def test_an_unknown_model_is_named_by_every_command_that_takes_one(
    state: Path, triton: str, tmp_path: Path
) -> None:
    before = fingerprint(state)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("STACK_", "LOADGEN_"))},
        "STACK_STATE_DIR": str(state),
        "LOADGEN_DB": str(state / "loadgen.sqlite3"),
        "STACK_TRITON_HTTP_PORT": triton.rsplit(":", 1)[1],
    }
    problems = []
    for flag in MODEL_FLAGS:
        base = [triton if a == DEAD_URL else a for a in BASE[flag.command]]
        argv = [*flag.command.split(), *base, flag.option, "nosuch_model"]
        out = tmp_path / "stderr"
        code = forked(argv, env, out, 60)
        stderr = out.read_text(errors="replace")
        errors = [ln for ln in stderr.splitlines() if ln and not ln.startswith((" ", "usage:"))]
        if code != 2 or len(errors) != 1 or "nosuch_model" not in errors[0]:
            problems.append(f"{flag.command} {flag.option}: exit {code}, {stderr[-400:]}")
    assert len(MODEL_FLAGS) >= 4
    assert not problems, "\n".join(problems)
    assert fingerprint(state) == before


# ---- inputs of models unlike the add model (issue 31): these need the model's metadata, so
# they run against a private Triton serving the models of tests/loadgen/inputdata.
INPUTDATA = ROOT / "tests" / "loadgen" / "inputdata"


@pytest.fixture(scope="module")
def inputs_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from dataclasses import replace

    from stack.supervisor import running
    from stacksettings import isolated

    base = tmp_path_factory.mktemp("bad-inputdata")
    shutil.copytree(INPUTDATA / "model_repository", base / "models")
    settings = replace(isolated(base / "state"), model_repository=base / "models")
    with running(settings, only={"triton"}):
        yield settings.url("triton_http")


def _one_line_exit_2(c: Case, state: Path) -> None:
    before = fingerprint(state)
    code, stderr = run(c, state)
    errors = [ln for ln in stderr.splitlines() if ln and not ln.startswith(" ")]
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert len(errors) == 1, stderr
    assert c.problem in errors[0] and c.fix in errors[0], errors[0]
    assert fingerprint(state) == before


@pytest.mark.integration
def test_a_data_file_naming_an_input_the_model_lacks(inputs_url: str, state: Path) -> None:
    _one_line_exit_2(
        case(
            *("batchscope", "load", "concurrency", "--url", inputs_url, "-m", "bounded_ids"),
            *("--input-data", str(INPUTDATA / "text_stats.json")),
            problem="the model has no tensor 'TEXT'",
            fix="(it has IDS)",
        ),
        state,
    )


@pytest.mark.integration
def test_a_data_file_that_is_not_json(inputs_url: str, state: Path) -> None:
    _one_line_exit_2(
        case(
            *("batchscope", "load", "rate", "-r", "10", "--url", inputs_url, "-m", "bounded_ids"),
            *("--input-data", str(INPUTDATA / "model_repository" / "bounded_ids" / "config.pbtxt")),
            problem="not a readable JSON file",
            fix="",
        ),
        state,
    )


def test_a_data_file_that_does_not_exist(state: Path) -> None:
    _one_line_exit_2(
        case(
            *CONC,
            *("--input-data", "nosuch.json"),
            problem="--input-data nosuch.json: no such file",
            fix="perf_analyzer JSON data file",
        ),
        state,
    )


@pytest.mark.integration
def test_a_range_outside_the_dtype(inputs_url: str, state: Path) -> None:
    _one_line_exit_2(
        case(
            *("batchscope", "load", "concurrency", "--url", inputs_url, "-m", "bounded_ids"),
            *("--shape", "IDS=8", "--range", "IDS=-1:1e20"),
            problem="INT64 holds whole numbers",
            fix="LO:HI must lie in",
        ),
        state,
    )
    _one_line_exit_2(
        case(
            *("batchscope", "load", "concurrency", "--url", inputs_url, "-m", "fp16_pair"),
            *("--range", "X=0:70000"),
            problem="outside what FP16 holds",
            fix="65504",
        ),
        state,
    )


@pytest.mark.integration
def test_a_shape_outside_the_models_dims(inputs_url: str, state: Path) -> None:
    _one_line_exit_2(
        case(
            *("batchscope", "load", "concurrency", "--url", inputs_url, "-m", "fp16_pair"),
            *("--shape", "Y=2:4,3"),
            problem="--shape Y=2:4,3 does not match the model's shape [2, 3]",
            fix="-1 = any size",
        ),
        state,
    )
