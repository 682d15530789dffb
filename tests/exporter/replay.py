"""Test helpers: recorded Triton answers (real captures under data/) and a replay server.

The replay server answers Triton's endpoints over real HTTP with a captured
moment, so the exporter's real fetch path runs against it; single paths can be
overridden with garbage (HTML, truncated JSON, an error status) or made to hang.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.standin import Capture
from exporter.scrape import Snapshot
from exporter.targets import Target

DATA = Path(__file__).resolve().parent / "data"


def snapshot(moment: str) -> Snapshot:
    """A captured moment (rest, load, after_load, restarted) as the fetcher returns it."""
    folder = DATA / moment
    configs = {
        path.name.removeprefix("config.").removesuffix(".json"): json.loads(path.read_text())
        for path in folder.glob("config.*.json")
    }
    return Snapshot(
        metrics_text=(folder / "metrics.txt").read_text(),
        stats=json.loads((folder / "stats.json").read_text()),
        index=json.loads((folder / "index.json").read_text()),
        configs=configs,
        ready=(folder / "ready.txt").read_text().strip() == "200",
    )


def standin_capture(moment: str) -> Capture:
    """A captured moment as bench.standin serves it (``varied`` renames its models)."""
    folder = DATA / moment
    return Capture(
        metrics=(folder / "metrics.txt").read_text(),
        stats=json.loads((folder / "stats.json").read_text()),
        index=json.loads((folder / "index.json").read_text()),
        configs={
            path.name.removeprefix("config.").removesuffix(".json"): json.loads(path.read_text())
            for path in folder.glob("config.*.json")
        },
        ready=int((folder / "ready.txt").read_text()),
    )


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"


def captured_replies(moment: str) -> dict[tuple[str, str], Reply]:
    folder = DATA / moment
    replies = {
        ("GET", "/metrics"): Reply(
            200, (folder / "metrics.txt").read_bytes(), "text/plain; charset=utf-8"
        ),
        ("GET", "/v2/models/stats"): Reply(200, (folder / "stats.json").read_bytes()),
        ("POST", "/v2/repository/index"): Reply(200, (folder / "index.json").read_bytes()),
        ("GET", "/v2/health/ready"): Reply(int((folder / "ready.txt").read_text()), b""),
    }
    for path in folder.glob("config.*.json"):
        model = path.name.removeprefix("config.").removesuffix(".json")
        replies[("GET", f"/v2/models/{model}/config")] = Reply(200, path.read_bytes())
    return replies


@dataclass
class ReplayServer:
    """Serves Triton's HTTP and metrics endpoints on one port."""

    replies: dict[tuple[str, str], Reply]
    hang: set[str] = field(default_factory=set)  # paths that never answer until close
    released: threading.Event = field(default_factory=threading.Event)
    port: int = 0

    @property
    def target(self) -> Target:
        url = f"http://127.0.0.1:{self.port}"
        return Target(url, f"{url}/metrics")


@contextmanager
def replay_server(
    replies: dict[tuple[str, str], Reply], hang: set[str] | None = None
) -> Iterator[ReplayServer]:
    state = ReplayServer(replies, hang or set())

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if self.path in state.hang:
                state.released.wait(30)
                return
            reply = state.replies.get((method, self.path), Reply(404, b'{"error":"not found"}'))
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._answer("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    # A short poll interval: shutdown() waits up to one interval.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.released.set()
        server.shutdown()
        server.server_close()
