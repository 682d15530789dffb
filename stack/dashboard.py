"""The dashboard (Streamlit), started last: it reads Prometheus, Triton and the run store."""

from __future__ import annotations

import sys

from stack.service import Service
from stacksettings import ROOT, Settings, ensure_secret

# Streamlit's defaults today, set explicitly so that an upgrade or a config file cannot turn
# them off: XSRF tokens on every form post, and no cross-origin requests.
PROTECTIONS = ["--server.enableXsrfProtection", "true", "--server.enableCORS", "true"]


def environment(settings: Settings) -> dict[str, str]:
    """Where the dashboard finds its data (read by dashboard/settings.py)."""
    env = {
        "DASHBOARD_PROMETHEUS_URL": settings.url("prometheus"),
        "DASHBOARD_TRITON_URL": settings.triton_targets[0],
        # Every watched server (the server selector), and the load generator's allowlist:
        # load runs may go to these and nowhere else off loopback.
        "DASHBOARD_TRITON_URLS": ",".join(settings.triton_targets),
        "STACK_TRITON_URLS": ",".join(settings.triton_urls),
        "DASHBOARD_EXPORTER_URL": settings.url("exporter"),
        # Where `batchscope load` stores runs by default (loadgen.results.params.default_db).
        "DASHBOARD_STORE": str(settings.store),
        "DASHBOARD_MODEL_REPOSITORY": str(settings.model_repository),
        # Named in the dashboard's messages when a service stops: the --state-dir in use.
        "DASHBOARD_LOGS_DIR": str(settings.logs_dir),
        # The timeline's trace switch changes trace settings, one of Triton's restricted APIs.
        "DASHBOARD_ADMIN_KEY_FILE": str(settings.triton_key_file or ""),
        "DASHBOARD_SCRAPE_INTERVAL": f"{settings.scrape_interval_s:g}",
    }
    if settings.attached:
        # No local repository: the config view reads each server's served configs.
        env["DASHBOARD_MODEL_REPOSITORY"] = ""
    if not settings.on_loopback:
        # Reachable from the network: load runs and the advisor ask for this token.
        env["DASHBOARD_TOKEN_FILE"] = str(settings.dashboard_token_file)
    return env


def service(settings: Settings) -> Service:
    url = settings.url("dashboard")
    svc = Service(
        name="dashboard",
        argv=[
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ROOT / "dashboard" / "app.py"),
            "--server.address",
            settings.host,
            "--server.port",
            str(settings.port("dashboard")),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
            # Nobody edits the app while the stack runs; watching the tree costs CPU.
            "--server.fileWatcherType",
            "none",
            # No "Deploy" button or developer menu: this is a monitoring page.
            "--client.toolbarMode",
            "viewer",
            *PROTECTIONS,
        ],
        health_url=f"{url}/_stcore/health",
        ports=[settings.port("dashboard")],
        urls={"ui": url},
        env=environment(settings),
        cwd=ROOT,
    )
    if not settings.on_loopback:

        def prepare() -> None:
            ensure_secret(settings.dashboard_token_file)  # mode 0600, made once

        svc.prepare = prepare
    return svc
