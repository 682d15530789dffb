"""``batchscope --version``: the stack's version and those of the servers it runs.

Each line says where its version came from, and "not found" when there is nothing to
ask: Triton's from the running server (``GET /v2``) or else from the runtime
environment's package, Prometheus' and Alertmanager's from their binaries' ``--version``.
"""

from __future__ import annotations

import glob
import subprocess
from importlib import metadata
from pathlib import Path

from stack.alertmanager import BINARY as ALERTMANAGER
from stacksettings import from_env_or_default
from tritonapi.client import TritonClient, TritonError

DISTRIBUTION = "triton-batchscope"
NOT_FOUND = "not found"
TIMEOUT_S = 2.0


def stack_version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return f"{NOT_FOUND} (the {DISTRIBUTION} package is not installed)"


def triton_version(url: str, venv: Path) -> str:
    """The running server's version, else the runtime package in the Triton environment."""
    try:
        found = TritonClient(url, timeout_s=TIMEOUT_S).server_metadata(TIMEOUT_S)
        return f"{found.get('version', '?')} (running at {url})"
    except TritonError:
        pass
    dists = glob.glob(str(venv / "lib" / "python3.*" / "site-packages" / "nvidia_pytriton-*"))
    if dists:
        package = Path(dists[0]).name.removesuffix(".dist-info").replace("_", "-", 1)
        return f"not running at {url}; runtime {package} in {venv}"
    return f"{NOT_FOUND} (not running at {url}, no runtime in {venv})"


def binary_version(binary: str) -> str:
    """The first line of ``BINARY --version`` (Prometheus' and Alertmanager's style)."""
    try:
        done = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=TIMEOUT_S * 5
        )
    except (OSError, subprocess.TimeoutExpired):
        return NOT_FOUND
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0] if done.returncode == 0 and lines else NOT_FOUND


def report() -> str:
    settings = from_env_or_default()
    rows = [
        ("batchscope", stack_version()),
        ("Triton", triton_version(settings.url("triton_http"), settings.triton_venv)),
        ("Prometheus", binary_version("prometheus")),
        ("Alertmanager", binary_version(ALERTMANAGER)),
    ]
    return "\n".join(f"{name:<13}{value}" for name, value in rows)
