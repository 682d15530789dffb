"""Where the stack lives and which ports it binds: one object, from flags and environment.

The bottom of the house: every package (launcher, exporter, load generator, advisor,
dashboard, benchmarks) reads ports and paths from here, and this module imports none of
them. The launcher fills :class:`Settings` from its flags; a tool run by hand reads the
same ``STACK_*`` variables through :func:`from_env`, so both agree on where things are.
"""

from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from stacksettings.auth import (
    ADMIN_KEY_NAME,
    ALERTMANAGER_PASSWORD_NAME,
    ALERTMANAGER_USER,
    DASHBOARD_TOKEN_NAME,
    admin_headers,
    read_secret,
)
from stacksettings.ports import free_ports

ROOT = Path(__file__).resolve().parent.parent
RULES_SETTINGS = ROOT / "rules" / "settings.yaml"
STORE_NAME = "loadgen.sqlite3"
# An hour between scrapes already leaves every rule window empty; more is a typing slip.
MAX_SCRAPE_INTERVAL_S = 3600.0

# name -> (default port, environment variable). The launcher's flags use the same names.
PORTS: dict[str, tuple[int, str]] = {
    "triton_http": (8000, "STACK_TRITON_HTTP_PORT"),
    "triton_grpc": (8001, "STACK_TRITON_GRPC_PORT"),
    "triton_metrics": (8002, "STACK_TRITON_METRICS_PORT"),
    "exporter": (9733, "STACK_EXPORTER_PORT"),
    "prometheus": (9090, "STACK_PROMETHEUS_PORT"),
    "alertmanager": (9093, "STACK_ALERTMANAGER_PORT"),
    "dashboard": (8501, "STACK_DASHBOARD_PORT"),
}


class SettingsError(ValueError):
    """A setting from a flag or the environment is unusable (misuse: exit code 2)."""

    exit_code = 2


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    state_dir: Path = ROOT / ".stack"
    model_repository: Path = ROOT / "model_repository"
    triton_venv: Path = ROOT / ".venv-triton"
    ports: dict[str, int] = field(default_factory=lambda: {k: v[0] for k, v in PORTS.items()})
    scrape_interval_s: float = 5.0
    # A running service whose health check has failed this long is hung: the supervisor
    # kills its process group and starts it again, as if it had died (0: never).
    hung_after_s: float = 20.0
    # Thresholds, windows and routing of the Prometheus rules and Alertmanager.
    rules_settings: Path = RULES_SETTINGS
    # Services left out of `up` (e.g. {"dashboard"} for a headless run).
    skip: frozenset[str] = frozenset()
    # Attach mode: Tritons that already run (HTTP URLs, STACK_TRITON_URLS); the stack then
    # starts none of its own. Metrics URLs pair by order (STACK_TRITON_METRICS_URLS).
    triton_urls: tuple[str, ...] = ()
    triton_metrics_urls: tuple[str, ...] = ()
    # The key of an attached Triton's restricted APIs, if it has one (none by default).
    attached_admin_key_file: Path | None = None
    # Bytes of Triton's local response cache (--cache-config local,size=N); 0: no cache.
    # Only models with `response_cache { enable: true }` use it.
    triton_cache_bytes: int = 0
    # "explicit": models can be loaded and unloaded at run time (all are loaded at start).
    triton_model_control: str = "none"

    def port(self, name: str) -> int:
        return self.ports[name]

    def url(self, port_name: str) -> str:
        return f"http://{self.host}:{self.port(port_name)}"

    @property
    def attached(self) -> bool:
        """True when the stack watches Tritons it did not start (``--triton-url``)."""
        return bool(self.triton_urls)

    @property
    def triton_targets(self) -> tuple[str, ...]:
        """Every Triton HTTP URL this stack watches: the attached ones, else its own."""
        return self.triton_urls or (self.url("triton_http"),)

    @property
    def grpc_address(self) -> str:
        """Triton's gRPC endpoint as host:port (gRPC has no URL scheme of its own): the
        stack's own Triton, or in attach mode the first attached server's host on the gRPC
        port (Triton's default 8001, or STACK_TRITON_GRPC_PORT), as for the HTTP target."""
        host = self.host
        if self.triton_urls:
            host = urlsplit(self.triton_urls[0]).hostname or host
            if ":" in host:  # an IPv6 literal goes back in brackets
                host = f"[{host}]"
        return f"{host}:{self.port('triton_grpc')}"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def log_file(self, service: str) -> Path:
        return self.logs_dir / f"{service}.log"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "stack.json"

    @property
    def trace_file(self) -> Path:
        """Triton's trace file prefix: it writes ``trace.json.0``, ``.1``, ... beside it."""
        return self.state_dir / "traces" / "trace.json"

    @property
    def admin_key_file(self) -> Path:
        """The key of Triton's restricted APIs (mode 0600, made by `up`)."""
        return self.state_dir / ADMIN_KEY_NAME

    @property
    def triton_key_file(self) -> Path | None:
        """The key file that opens the watched Tritons' restricted APIs: the stack's own,
        or in attach mode the one given (often none: a foreign Triton may not restrict)."""
        return self.attached_admin_key_file if self.attached else self.admin_key_file

    def admin_headers(self) -> dict[str, str]:
        """Headers that open the watched Triton's restricted APIs (none without a key)."""
        return admin_headers(self.triton_key_file)

    @property
    def dashboard_token_file(self) -> Path:
        return self.state_dir / DASHBOARD_TOKEN_NAME

    @property
    def alertmanager_password_file(self) -> Path:
        """Alertmanager's basic-auth password for ALERTMANAGER_USER (mode 0600, made by `up`)."""
        return self.state_dir / ALERTMANAGER_PASSWORD_NAME

    def alertmanager_auth(self) -> tuple[str, str]:
        """(user, password) for Alertmanager's API and UI."""
        return ALERTMANAGER_USER, read_secret(self.alertmanager_password_file) or ""

    @property
    def on_loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def store(self) -> Path:
        """The load generator's SQLite results store."""
        return self.state_dir / STORE_NAME

    def with_ports(self, **ports: int) -> Settings:
        return replace(self, ports={**self.ports, **ports})


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_port(value: str, what: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise SettingsError(f"{what}: {value!r} is not a port number (use 1-65535)") from None
    if not 1 <= port <= 65535:
        raise SettingsError(f"{what}: {port} is out of range (use 1-65535)")
    return port


def from_env(env: dict[str, str] | None = None) -> Settings:
    """Settings from STACK_* environment variables, defaults for the rest."""
    env = dict(os.environ if env is None else env)
    base = Settings()
    ports = dict(base.ports)
    for name, (_, var) in PORTS.items():
        if env.get(var):
            ports[name] = parse_port(env[var], var)
    scrape = env.get("STACK_SCRAPE_INTERVAL", "")
    interval = base.scrape_interval_s
    if scrape:
        try:
            interval = float(scrape)
        except ValueError:
            interval = -1.0
        if not 0 < interval <= MAX_SCRAPE_INTERVAL_S:
            raise SettingsError(
                f"STACK_SCRAPE_INTERVAL: {scrape!r} is not a positive number of seconds, at "
                f"most {MAX_SCRAPE_INTERVAL_S:g}"
            ) from None
    return replace(
        base,
        hung_after_s=parse_seconds(
            env.get("STACK_HUNG_AFTER", ""), "STACK_HUNG_AFTER", base.hung_after_s
        ),
        triton_cache_bytes=_cache_bytes(env.get("STACK_TRITON_CACHE_BYTES", "")),
        triton_urls=env_list(env, "STACK_TRITON_URLS"),
        triton_metrics_urls=env_list(env, "STACK_TRITON_METRICS_URLS"),
        attached_admin_key_file=(
            _env_path(env, "STACK_TRITON_ADMIN_KEY_FILE", Path())
            if env.get("STACK_TRITON_ADMIN_KEY_FILE")
            else None
        ),
        host=env.get("STACK_HOST", base.host),
        state_dir=_env_path(env, "STACK_STATE_DIR", base.state_dir, folder=True),
        model_repository=_env_path(
            env, "STACK_MODEL_REPOSITORY", base.model_repository, folder=True
        ),
        triton_venv=_env_path(env, "STACK_TRITON_VENV", base.triton_venv),
        rules_settings=_env_path(env, "STACK_RULES_SETTINGS", base.rules_settings),
        ports=ports,
        scrape_interval_s=interval,
    )


def _env_path(env: dict[str, str], name: str, default: Path, folder: bool = False) -> Path:
    """A path variable made absolute; one SettingsError line for a symlink loop, or for
    something that is not a folder where one is wanted."""
    raw = Path(env.get(name) or default)
    try:
        path = raw.resolve()
        other = folder and path.exists() and not path.is_dir()
    except (OSError, RuntimeError) as exc:  # RuntimeError: Python's "Symlink loop"
        raise SettingsError(f"{name}: {raw} cannot be read ({exc}); give another path") from None
    if other:
        raise SettingsError(f"{name}: {raw} is not a folder; give a folder's path")
    return path


def parse_seconds(text: str, what: str, default: float, zero_ok: bool = True) -> float:
    """A number of seconds from a flag or variable ('' gives ``default``); 0 only when
    ``zero_ok`` (it then means "never"). Anything else is one SettingsError line."""
    if text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    low_ok = value >= 0 if zero_ok else value > 0
    if not (low_ok and value < 86_400):
        allowed = "0 (never) or a positive number" if zero_ok else "a positive number"
        raise SettingsError(f"{what}: {text!r} is not {allowed} of seconds below 86400")
    return value


def _cache_bytes(text: str) -> int:
    """STACK_TRITON_CACHE_BYTES: the local response cache's size; empty or 0 for none."""
    if not text:
        return 0
    if not text.isdigit():
        raise SettingsError(
            f"STACK_TRITON_CACHE_BYTES: {text!r} is not a number of bytes (e.g. 16777216 for "
            "16 MiB; 0 for no response cache)"
        )
    return int(text)


def env_list(env: dict[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated variable as its non-empty items."""
    return tuple(item.strip() for item in env.get(name, "").split(",") if item.strip())


def from_env_or_default(env: dict[str, str] | None = None) -> Settings:
    """:func:`from_env`, or the defaults when a STACK_* variable is unusable.

    For tools that only need a sensible default (a URL, a store path) and report
    their own flags' errors: a broken variable of the launcher's is not theirs to reject.
    """
    try:
        return from_env(env)
    except SettingsError:
        return Settings()


def isolated(state_dir: Path) -> Settings:
    """Settings on free loopback ports with their own state folder and 1 s scrapes.

    For tests and benchmarks that run a private stack beside a user's. Only
    STACK_TRITON_VENV is taken from the environment: a developer's other STACK_*
    variables must not leak in.
    """
    env = {k: v for k, v in os.environ.items() if k == "STACK_TRITON_VENV"}
    ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
    return replace(from_env(env), state_dir=state_dir, ports=ports, scrape_interval_s=1.0)
