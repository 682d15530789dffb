"""--host off loopback: refused without --expose; with it, keys and tokens guard what they can."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from stack import control, dashboard, prometheus, triton
from stacksettings import ADMIN_KEY_HEADER, ROOT, ensure_secret, isolated


def test_host_off_loopback_needs_expose_and_says_what_becomes_reachable(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "batchscope",
            "up",
            "--host",
            "0.0.0.0",
            "--state-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "add --expose" in out.stderr
    for what in ("Triton inference", "Prometheus' queries", "Alertmanager", "the dashboard"):
        assert what in out.stderr
    assert not list(tmp_path.iterdir()), "nothing may be written before the refusal"


def test_reachable_names_the_key_and_the_token(tmp_path: Path) -> None:
    settings = replace(isolated(tmp_path), host="0.0.0.0")
    text = control.reachable(settings)
    assert str(settings.admin_key_file) in text and str(settings.dashboard_token_file) in text


def test_secrets_are_made_once_at_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "state" / "key"
    first = ensure_secret(path)
    assert len(first) >= 40 and path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)
    assert ensure_secret(path) == first
    assert path.stat().st_mode & 0o777 == 0o600


def test_prometheus_runs_without_the_lifecycle_api(tmp_path: Path) -> None:
    svc = prometheus.service(isolated(tmp_path))
    assert svc.prepare is not None
    svc.prepare()
    assert not [a for a in svc.argv if "lifecycle" in a]


def test_triton_restricts_its_admin_apis_with_the_stacks_key(tmp_path: Path) -> None:
    settings = isolated(tmp_path)
    svc = triton.service(settings)
    assert svc.prepare is not None
    svc.prepare()
    key = settings.admin_key_file.read_text().strip()
    restricted = f"model-repository,shared-memory,trace,logging:{ADMIN_KEY_HEADER}={key}"
    assert f"--http-restricted-api={restricted}" in svc.argv
    assert f"--grpc-restricted-protocol={restricted}" in svc.argv
    assert settings.admin_key_file.stat().st_mode & 0o777 == 0o600


def test_dashboard_protections_and_token(tmp_path: Path) -> None:
    local = dashboard.service(isolated(tmp_path / "a"))
    argv = " ".join(local.argv)
    assert "--server.enableXsrfProtection true" in argv and "--server.enableCORS true" in argv
    assert "DASHBOARD_TOKEN_FILE" not in local.env and local.prepare is None

    exposed = replace(isolated(tmp_path / "b"), host="0.0.0.0")
    svc = dashboard.service(exposed)
    assert svc.env["DASHBOARD_TOKEN_FILE"] == str(exposed.dashboard_token_file)
    assert svc.prepare is not None
    svc.prepare()
    assert exposed.dashboard_token_file.stat().st_mode & 0o777 == 0o600


def test_secrets_command_makes_both_files(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "batchscope", "secrets", "--state-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    for name in ("triton-admin.key", "dashboard.token"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
