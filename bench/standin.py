"""Stand-in Tritons for the scrape benchmark: a real Triton's answers, captured once, served
for many models under varied names, one port per target, from a process of their own.

Ten Tritons of a hundred python-backend models each do not fit this machine beside the
exporter, and what the exporter does depends on what it reads, not on who serves it. So the
answers it reads (``/metrics``, the statistics API, the repository index, every config and
readiness) are captured from a real Triton, each model is repeated under new names
(``batch_add_model`` -> ``batch_add_model_m042``) in every endpoint alike, and the bodies
are served as captured, HTTP API and ``/metrics`` on the same port. Busy stand-ins
(``--busy``) answer every statistics request with every model's counters moved on, as if each
model had executed a batch of 2 since the last request: nothing a reader kept still holds.
Given a later capture per target, each answers it from the moment ``Served.later`` asks.

    .venv/bin/python -m bench.standin [--busy] FOLDER   # serves FOLDER/target*.json
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests


@dataclass(frozen=True)
class Capture:
    """What the exporter reads of one Triton, as Triton sent it."""

    metrics: str
    stats: dict[str, Any]
    index: list[dict[str, Any]]
    configs: dict[str, dict[str, Any]]
    ready: int


def capture(url: str, metrics_url: str, headers: dict[str, str]) -> Capture:
    """The answers of the Triton at ``url`` (the repository index is a restricted API)."""

    def get(path: str) -> Any:
        response = requests.get(f"{url}{path}", timeout=10, headers=headers)
        response.raise_for_status()
        return response.json()

    index = requests.post(f"{url}/v2/repository/index", json={}, timeout=10, headers=headers)
    index.raise_for_status()
    stats = get("/v2/models/stats")
    names = sorted({str(e["name"]) for e in stats["model_stats"]})
    return Capture(
        metrics=requests.get(metrics_url, timeout=10).text,
        stats=stats,
        index=index.json(),
        configs={name: get(f"/v2/models/{name}/config") for name in names},
        ready=requests.get(f"{url}/v2/health/ready", timeout=10).status_code,
    )


def varied(source: Capture, models: int) -> Capture:
    """``models`` models, each a captured one (taken in turn) under a name of its own."""
    originals = sorted(source.configs)
    names = {
        f"{originals[i % len(originals)]}_m{i:03d}": originals[i % len(originals)]
        for i in range(models)
    }
    copies: dict[str, list[str]] = {}
    for name, original in names.items():
        copies.setdefault(original, []).append(name)

    def renamed(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for entry in entries:
            for name in copies.get(str(entry["name"]), []):
                out.append({**copy.deepcopy(entry), "name": name})
        return out

    return Capture(
        metrics=_varied_metrics(source.metrics, copies),
        stats={**source.stats, "model_stats": renamed(source.stats["model_stats"])},
        index=renamed(source.index),
        configs={
            name: {**copy.deepcopy(source.configs[o]), "name": name} for name, o in names.items()
        },
        ready=source.ready,
    )


_MODEL_LABEL = re.compile(r'model="([^"]*)"')


def _varied_metrics(text: str, copies: dict[str, list[str]]) -> str:
    """Each sample line of a captured model once per copy, its model label renamed."""
    lines = []
    for line in text.splitlines():
        match = _MODEL_LABEL.search(line) if not line.startswith("#") else None
        if match is None:
            lines.append(line)
            continue
        for name in copies.get(match.group(1), []):
            lines.append(f"{line[: match.start(1)]}{name}{line[match.end(1) :]}")
    return "\n".join(lines) + "\n"


def _bodies(capture: Capture) -> dict[tuple[str, str], tuple[int, bytes, str]]:
    as_json = "application/json"
    bodies = {
        ("GET", "/metrics"): (200, capture.metrics.encode(), "text/plain; charset=utf-8"),
        ("GET", "/v2/models/stats"): (200, json.dumps(capture.stats).encode(), as_json),
        ("POST", "/v2/repository/index"): (200, json.dumps(capture.index).encode(), as_json),
        ("GET", "/v2/health/ready"): (capture.ready, b"", as_json),
    }
    for name, config in capture.configs.items():
        bodies[("GET", f"/v2/models/{name}/config")] = (200, json.dumps(config).encode(), as_json)
    return bodies


def busier(stats: dict[str, Any]) -> None:
    """Every model of a statistics answer after one more execution of a batch of 2."""
    for entry in stats["model_stats"]:
        entry["inference_count"] += 2
        entry["execution_count"] += 1
        entry["last_inference"] += 1
        for phase in entry["inference_stats"].values():
            phase["count"] += 2
            phase["ns"] += 1000
        for size in entry["batch_stats"]:
            if size["batch_size"] == 2:
                for phase in ("compute_input", "compute_infer", "compute_output"):
                    size[phase]["count"] += 1
                    size[phase]["ns"] += 1000


class _Answers:
    """One stand-in's bodies; a busy one's statistics move on at every request."""

    def __init__(self, capture: Capture, busy: bool) -> None:
        self.busy = busy
        self.lock = threading.Lock()
        self.answer(capture)

    def answer(self, capture: Capture) -> None:
        """Answer ``capture`` from now on (one swap: a request sees the old or the new)."""
        bodies, stats = _bodies(capture), copy.deepcopy(capture.stats)
        with self.lock:
            self.bodies, self.stats = bodies, stats

    def __call__(self, method: str, path: str) -> tuple[int, bytes, str]:
        with self.lock:
            if self.busy and (method, path) == ("GET", "/v2/models/stats"):
                busier(self.stats)
                return 200, json.dumps(self.stats).encode(), "application/json"
            bodies = self.bodies
        return bodies.get((method, path), (404, b'{"error":"not found"}', ""))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as Triton does
    # Headers and body go out in two writes: without this, Nagle's algorithm holds the body
    # until the client's delayed ACK (40 ms) on a kept-alive connection.
    disable_nagle_algorithm = True
    server: _Server

    def _answer(self, method: str) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        status, body, kind = self.server.answers(method, self.path.split("?")[0])
        self.send_response(status)
        self.send_header("Content-Type", kind or "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answers: _Answers) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = answers

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a reader that hangs up mid-answer (the exporter stopping) is no news


def serve(captures: list[Capture], busy: bool = False) -> list[_Server]:
    """One server per capture on a free loopback port, serving on threads of this process."""
    servers: list[_Server] = []
    for one in captures:
        server = _Server(_Answers(one, busy))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    return servers


@dataclass
class Served:
    """The stand-ins of ``standins``: each target's base URL, and the switch to the later
    captures."""

    urls: list[str]
    proc: subprocess.Popen[str]

    def later(self) -> None:
        """Every stand-in answers its later capture once this returns."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("later\n")
        self.proc.stdin.flush()
        if self.proc.stdout.readline().strip() != "later":
            raise RuntimeError(f"the stand-ins did not switch (exit {self.proc.poll()})")


@contextmanager
def standins(
    captures: list[Capture],
    folder: Path,
    busy: bool = False,
    later: list[Capture] | None = None,
) -> Iterator[Served]:
    """The captures served by a process of their own (its CPU is not the exporter's nor the
    timing client's); ``later``, one per target, are answered after ``Served.later``."""
    folder.mkdir(parents=True, exist_ok=True)
    if later is not None and len(later) != len(captures):
        raise ValueError("one later capture per target")
    for i, one in enumerate(captures):
        (folder / f"target{i:03d}.json").write_text(json.dumps(asdict(one)))
    for i, one in enumerate(later or []):
        (folder / f"later{i:03d}.json").write_text(json.dumps(asdict(one)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.standin", *(["--busy"] if busy else []), str(folder)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ports = [int(p) for p in proc.stdout.readline().split()]
        if len(ports) != len(captures):
            raise RuntimeError(f"the stand-in process did not start (exit {proc.poll()})")
        yield Served([f"http://127.0.0.1:{port}" for port in ports], proc)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _loaded(paths: list[Path]) -> list[Capture]:
    return [Capture(**json.loads(path.read_text())) for path in paths]


def main() -> None:
    busy = "--busy" in sys.argv[1:]
    folder = Path(sys.argv[-1])
    servers = serve(_loaded(sorted(folder.glob("target*.json"))), busy)
    later = _loaded(sorted(folder.glob("later*.json")))
    print(" ".join(str(s.server_address[1]) for s in servers), flush=True)
    # Served on the servers' threads until the caller terminates this process or closes
    # stdin; each "later" line switches every server to its later capture.
    for line in sys.stdin:
        if line.strip() != "later":
            continue
        if len(later) != len(servers):
            print("no later captures", flush=True)
            continue
        for server, one in zip(servers, later, strict=True):
            server.answers.answer(one)
        print("later", flush=True)


if __name__ == "__main__":
    main()
