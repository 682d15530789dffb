"""Alertmanager, the real server (Debian's ``prometheus-alertmanager``), with the config of
:mod:`rules.alertmanager_config` written at start.

An alert with no webhook configured still shows in Alertmanager's UI and in its API
(``GET /api/v2/alerts``, or ``amtool alert query``), which is where the local stack's
notifications are seen. A separate webhook-log process would only duplicate that
API, with one more port and one more thing to keep running.

Every request needs basic auth (``--web.config.file``, :func:`web_config`): Alertmanager
0.25 answers CORS preflights with ``Access-Control-Allow-Origin: *`` and has no flag to
change that, so without a password any web page could create silences. The user is
``batchscope``; the password is the state folder's ``alertmanager.password``.
"""

from __future__ import annotations

from pathlib import Path

import bcrypt
import yaml

from rules import alertmanager_config, rulesettings
from stack.prometheus import find_binary
from stack.service import Service
from stacksettings import ALERTMANAGER_USER, Settings, ensure_secret

BINARY = "prometheus-alertmanager"
# The web config (basic auth) `batchscope secrets` writes for compose, in the state folder.
WEB_CONFIG = "alertmanager-web.yml"
INSTALL_HINT = (
    "install it with `apt-get install prometheus-alertmanager` (Debian/Ubuntu; ./stack/up does "
    "this when run as root), or put a `prometheus-alertmanager` binary on PATH"
)


def web_config(password: str) -> str:
    """The exporter-toolkit web config: one user, the password as a bcrypt hash."""
    # Cost 10, bcrypt's default; Alertmanager caches a verified password, so it is paid
    # once per new connection's credentials, not per request.
    digest = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
    body = {"basic_auth_users": {ALERTMANAGER_USER: digest}}
    return "# Written by `batchscope`; edits are overwritten.\n" + yaml.safe_dump(body)


def write_web_config(password_file: Path, path: Path) -> Path:
    """The password (made once, mode 0600) and its web config beside it."""
    password = ensure_secret(password_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(web_config(password))
    tmp.replace(path)
    return path


def write_config(settings: Settings) -> Path:
    folder = settings.state_dir / "alertmanager"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "alertmanager.yml"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(alertmanager_config.render(rulesettings.load(settings.rules_settings)))
    tmp.replace(path)
    return path


def service(settings: Settings) -> Service:
    folder = settings.state_dir / "alertmanager"
    url = settings.url("alertmanager")
    svc = Service(
        name="alertmanager",
        argv=[],
        health_url=f"{url}/-/ready",
        live_url=f"{url}/-/healthy",
        ports=[settings.port("alertmanager")],
        urls={"ui": url, "alerts": f"{url}/api/v2/alerts"},
        health_auth_file=settings.alertmanager_password_file,
    )

    def prepare() -> None:
        binary = find_binary(BINARY, INSTALL_HINT)
        cfg = write_config(settings)
        web = write_web_config(settings.alertmanager_password_file, folder / "web.yml")
        svc.argv = [
            binary,
            f"--config.file={cfg}",
            f"--web.config.file={web}",
            f"--storage.path={folder / 'data'}",
            f"--web.listen-address={settings.host}:{settings.port('alertmanager')}",
            f"--web.external-url={url}",
            # A single local instance: no gossip port, nothing to discover.
            "--cluster.listen-address=",
        ]

    svc.prepare = prepare
    return svc
