"""Bad input anywhere: one line naming the problem and the fix, exit 2, no traceback, and a
store left byte-for-byte as it was.

Every command runs as a real subprocess against a state folder holding a real load-run store
(and no running stack: a Triton URL points at a port nobody listens on, so no load can leave).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dashboard import runs
from stacksettings import free_ports

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


STACK = ("stack",)
UP = ("stack", "up", "--no-warmup")
EXPORTER = ("exporter",)
LOADGEN = ("loadgen",)
CONC = ("loadgen", "concurrency", "--url", DEAD_URL, "--no-store")
SEQ = ("loadgen.sequences", "--url", DEAD_URL)
PRIO = ("loadgen.priorities", "--url", DEAD_URL)
RATE = ("loadgen", "rate", "--url", DEAD_URL, "--no-store")
CAPACITY = ("loadgen", "capacity", "--url", DEAD_URL, "--no-store")
ADVISOR = ("advisor",)
PREDICT = ("advisor", "predict", "--service-us", "450,47", "--concurrency", "8")

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
    case(*SEQ, "--model", "m", problem="is not answering", fix="python -m stack up"),
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
    case(*LOADGEN, "show", "999", "--db", "{store}", problem="no run 999", fix="loadgen runs"),
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
        problem="--traces http://127.0.0.1:1",
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


def run(c: Case, state: Path) -> subprocess.CompletedProcess[str]:
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
    return subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_there_are_at_least_40_cases_across_every_cli() -> None:
    assert len(CASES) >= 40
    assert {c.argv[0].split(".")[0] for c in CASES} == {"stack", "exporter", "loadgen", "advisor"}


def test_every_bad_input_is_one_clear_line_exit_2_and_nothing_written(state: Path) -> None:
    before = fingerprint(state)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda c: run(c, state), CASES))
    problems = []
    for c, result in zip(CASES, results, strict=True):
        errors = [ln for ln in result.stderr.splitlines() if ln and not ln.startswith(" ")]
        errors = [ln for ln in errors if not ln.startswith("usage:")]
        message = errors[-1] if errors else ""
        wrong = []
        if result.returncode != 2:
            wrong.append(f"exit {result.returncode}")
        if "Traceback" in result.stderr:
            wrong.append("a traceback")
        if len(errors) != 1:
            wrong.append(f"{len(errors)} lines")
        if c.problem not in message:
            wrong.append(f"no {c.problem!r}")
        if c.fix not in message:
            wrong.append(f"no fix {c.fix!r}")
        if wrong:
            problems.append(f"{c.id}: {', '.join(wrong)}\n    {result.stderr.strip()[-600:]}")
    assert not problems, "\n".join(problems)
    assert fingerprint(state) == before


@pytest.mark.parametrize(
    ("form", "message"),
    [
        (runs.RunForm("concurrency", "m", concurrency=0), "concurrency must be greater than 0"),
        (runs.RunForm("concurrency", "m", concurrency=17), "limit of 16; for bigger runs"),
        (runs.RunForm("concurrency", "m", duration_s=float("nan")), "duration must be greater"),
        (runs.RunForm("concurrency", "m", duration_s=31), "limit of 30 s; for bigger runs"),
        (runs.RunForm("rate", "m", rate=-1), "rate must be greater than 0"),
        (runs.RunForm("rate", "m", rate=501), "limit of 500/s; for bigger runs"),
        (runs.RunForm("serial", "m", requests=65), "limit of 64; for bigger runs"),
        (runs.RunForm("nosuch", "m"), "unknown scenario 'nosuch'"),
    ],
)
def test_the_dashboard_form_refuses_with_a_message(
    form: runs.RunForm, message: str, tmp_path: Path
) -> None:
    with pytest.raises(runs.RunRefused, match=message.replace("(", r"\(")) as refused:
        runs.to_params(form, DEAD_URL)
    assert "\n" not in str(refused.value)
