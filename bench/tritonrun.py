"""Helpers for the advisor's benches: Triton on free ports with a per-config model repository.

Triton is started by the launcher's own code (``stack.triton.service`` under the
``Supervisor``), with a temporary model repository holding ``batch_add_model`` (the
project's model.py) under the batching config being measured.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import requests

from advisor.config import BatcherConfig
from stack.supervisor import Supervisor, running
from stacksettings import ROOT, Settings, isolated, procstat

MODEL = "batch_add_model"


def write_repository(target: Path, config: BatcherConfig) -> Path:
    """A model repository with batch_add_model under ``config``."""
    source = ROOT / "model_repository" / MODEL
    model_dir = target / MODEL
    (model_dir / "1").mkdir(parents=True)
    shutil.copy2(source / "1" / "model.py", model_dir / "1" / "model.py")
    text = (source / "config.pbtxt").read_text()
    text = re.sub(r"max_batch_size: \d+", config.pbtxt().split("\n", 1)[0], text)
    text = re.sub(r"dynamic_batching \{.*?\}\n", "", text, flags=re.S)
    text += "\n" + config.pbtxt().split("\n", 1)[1] + "\n"
    (model_dir / "config.pbtxt").write_text(text)
    return target


@contextmanager
def triton(config: BatcherConfig) -> Iterator[Settings]:
    """A running Triton serving batch_add_model under ``config``, on free ports."""
    with tempfile.TemporaryDirectory(prefix="advisor-bench-") as tmp:
        repo = write_repository(Path(tmp) / "models", config)
        settings = replace(isolated(Path(tmp) / "state"), model_repository=repo)
        with running(settings, only={"triton"}):
            yield settings


def triton_pids(settings: Settings) -> list[int]:
    """tritonserver and its python backend stubs (children), from the state file."""
    runs = Supervisor(settings, []).read_state()
    root = next(r.pid for r in runs if r.name == "triton")
    return [root, *sorted(procstat.descendants(root))]


def queue_p99_us(metrics_url: str) -> float:
    for line in requests.get(metrics_url, timeout=5).text.splitlines():
        if (
            line.startswith("nv_inference_queue_summary_us{")
            and f'model="{MODEL}"' in line
            and 'quantile="0.99"' in line
        ):
            return float(line.rsplit(" ", 1)[1])
    raise RuntimeError("Triton exports no nv_inference_queue_summary_us (summary_latencies off?)")


def own_cpu_seconds(pids: list[int]) -> float:
    """CPU of the given processes plus this one (the bench and its sender)."""
    return procstat.cpu_seconds([*pids, os.getpid()])


def wait_until_quiet(max_cores: float, timeout_s: float, sample_s: float = 1.0) -> float:
    """Wait (bounded) until other processes use under ``max_cores``; return their last use."""
    deadline = time.monotonic() + timeout_s
    while True:
        before = procstat.machine_busy_seconds()
        time.sleep(sample_s)
        used = (procstat.machine_busy_seconds() - before) / sample_s
        if used < max_cores or time.monotonic() > deadline:
            return used


def perf_analyzer_path() -> str:
    """perf_analyzer from PERF_ANALYZER: the wrapper bench/perf_analyzer_env.sh prints."""
    path = os.environ.get("PERF_ANALYZER", "")
    if not path or not os.access(path, os.X_OK):
        raise SystemExit(
            "set PERF_ANALYZER to perf_analyzer: PERF_ANALYZER=$(bench/perf_analyzer_env.sh)"
        )
    return path


def run_perf_analyzer(
    settings: Settings, concurrency: int, interval_ms: int = 2000
) -> tuple[float, float, dict[str, float]]:
    """(infer/s, the client's CPU seconds, the CSV row) of one perf_analyzer run."""
    with tempfile.NamedTemporaryFile(suffix=".csv") as csv_file:
        argv = [
            perf_analyzer_path(),
            "-m",
            MODEL,
            "-u",
            f"127.0.0.1:{settings.port('triton_http')}",
            "-i",
            "http",
            "--concurrency-range",
            str(concurrency),
            "--measurement-interval",
            str(interval_ms),
            # The machine is shared with other work: perf_analyzer's stability test
            # fails at random. Take the 3 windows as they come; the statistics API
            # and the CPU counters cover exactly what was sent either way.
            "--max-trials",
            "3",
            "-s",
            "1000",
            "-f",
            csv_file.name,
        ]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        output = proc.stdout.read().decode() if proc.stdout else ""
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"perf_analyzer failed: {output[-2000:]}")
        lines = Path(csv_file.name).read_text().splitlines()
    header, row = lines[0].split(","), lines[1].split(",")
    values = {k: float(v) for k, v in zip(header, row, strict=False) if v}
    return values["Inferences/Second"], usage.ru_utime + usage.ru_stime, values
