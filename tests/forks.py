"""Batchscope's main in forked children of one small server process.

The bad-input tests (tests/test_bad_inputs.py) run the CLI some 500 times. A new interpreter
for each costs its start; a fork of the pytest worker costs a copy of the page tables of a
process that may by then hold everything the suite imported, and on a whole run those
forks were most of that module's CPU. This server imports the project's packages and
nothing else, then forks a child per command, so each fork copies a small process.

`python -m tests.forks` is the server: one JSON line in (argv, environment, the file for
stderr, a timeout), one line out (the exit code; 124 when killed at its timeout).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
# What a command may import, imported once in the server (the children inherit it).
PACKAGES = (
    "advisor",
    "autopilot",
    "batchscope",
    "deploygen",
    "doctor",
    "exporter",
    "loadgen",
    "observe",
    "promapi",
    "runs",
    "stack",
    "stacksettings",
    "tritonapi",
)


def fork_main(argv: list[str], env: dict[str, str], out: Path, timeout_s: float) -> int:
    """Run ``batchscope ARGV...`` (its main) in a forked child of this process, with ``env``
    as its whole environment and its stderr to ``out``; its exit code."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 99
        try:
            os.environ.clear()
            os.environ.update(env)
            err = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(err, 2)
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            # A parent's sys.stderr and sys.stdout may be replaced (pytest's capture): point
            # them at the fds.
            sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - lives until _exit
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            from batchscope.main import main

            code = main(argv) or 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - reported as the traceback it is
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return 124
        time.sleep(0.01)


class Forks:
    """A client of the server, started on first use and stopped by :meth:`close`."""

    def __init__(self) -> None:
        self._server: subprocess.Popen[str] | None = None

    def run(self, argv: list[str], env: dict[str, str], out: Path, timeout_s: float) -> int:
        """``batchscope ARGV...`` in a child of the server (see :func:`fork_main`)."""
        if self._server is None:
            self._server = subprocess.Popen(
                [sys.executable, "-m", "tests.forks"],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        stdin, stdout = self._pipes()
        stdin.write(json.dumps([argv, env, str(out), timeout_s]) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server exited ({self._server.wait(10)})")
        return int(line)

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self._server is not None
        assert self._server.stdin is not None and self._server.stdout is not None
        return self._server.stdin, self._server.stdout

    def close(self) -> None:
        """Stop the server (it ends when its input does), killed if it does not."""
        server, self._server = self._server, None
        if server is None:
            return
        assert server.stdin is not None and server.stdout is not None
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        server.stdout.close()


def serve() -> None:
    """The server: the project's packages imported, then one command per input line."""
    for name in PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not module.name.endswith(".__main__"):
                importlib.import_module(module.name)
    for line in sys.stdin:
        argv, env, out, timeout_s = json.loads(line)
        print(fork_main(argv, env, Path(out), timeout_s), flush=True)


if __name__ == "__main__":
    serve()
