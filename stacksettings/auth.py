"""Secrets of the stack: Triton's admin key, the dashboard's token, Alertmanager's password.

Each lives in a file of the state folder at mode 0600; this module names the files and
headers, makes a secret once and reads it back.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

# Triton's restricted HTTP/gRPC APIs (model-repository, shared-memory, trace, logging)
# answer only requests that carry this header with the key from the state folder.
ADMIN_KEY_HEADER = "x-batchscope-admin-key"
ADMIN_KEY_NAME = "triton-admin.key"
RESTRICTED_APIS = ("model-repository", "shared-memory", "trace", "logging")
# The dashboard asks for this token before a load run or the advisor when it is not on loopback.
DASHBOARD_TOKEN_NAME = "dashboard.token"
# Alertmanager answers only this user with the password in the state folder (basic auth via
# its --web.config.file): its API creates silences and takes alerts, and it allows every
# origin in CORS, so without a password any web page in a user's browser could silence the
# stack. Prometheus sends alerts and scrapes it with the same pair.
ALERTMANAGER_USER = "batchscope"
ALERTMANAGER_PASSWORD_NAME = "alertmanager.password"


def ensure_secret(path: Path) -> str:
    """The secret in ``path``, created first if missing; the file is kept at mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        secret = path.read_text().strip()
        if secret:
            return secret
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    secret = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    return secret


def read_secret(path: Path | str | None) -> str | None:
    """The secret in ``path``, or None when there is no such file (or no path)."""
    if not path:
        return None
    try:
        return Path(path).read_text().strip() or None
    except (OSError, UnicodeDecodeError):  # missing, a folder, a loop, binary garbage
        return None


def admin_headers(key_file: Path | str | None) -> dict[str, str]:
    """Headers that open Triton's restricted APIs, or none when there is no key file."""
    key = read_secret(key_file)
    return {ADMIN_KEY_HEADER: key} if key else {}
