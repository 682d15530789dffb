"""Running the command-line validators the deployment tests use."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def run_tool(
    argv: list[str], cwd: Path | None = None, env_drop: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not (env_drop and k.startswith(env_drop))}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    assert binary, "promtool is missing: ./stack/test installs Debian's prometheus"
    return run_tool([binary, *args])
