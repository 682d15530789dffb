"""Where the stack lives and which ports it binds: one object, from flags and environment."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from stack.errors import StackError

ROOT = Path(__file__).resolve().parent.parent
RULES_SETTINGS = ROOT / "stack" / "rules" / "settings.yaml"

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


class SettingsError(StackError):
    """A setting from a flag or the environment is unusable."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    state_dir: Path = ROOT / ".stack"
    model_repository: Path = ROOT / "model_repository"
    triton_venv: Path = ROOT / ".venv-triton"
    ports: dict[str, int] = field(default_factory=lambda: {k: v[0] for k, v in PORTS.items()})
    scrape_interval_s: float = 5.0
    # Thresholds, windows and routing of the Prometheus rules and Alertmanager.
    rules_settings: Path = RULES_SETTINGS
    # Services left out of `up` (e.g. {"dashboard"} for a headless run).
    skip: frozenset[str] = frozenset()

    def port(self, name: str) -> int:
        return self.ports[name]

    def url(self, port_name: str) -> str:
        return f"http://{self.host}:{self.port(port_name)}"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "stack.json"

    def with_ports(self, **ports: int) -> Settings:
        return replace(self, ports={**self.ports, **ports})


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
            raise SettingsError(
                f"STACK_SCRAPE_INTERVAL: {scrape!r} is not a number of seconds"
            ) from None
    return replace(
        base,
        host=env.get("STACK_HOST", base.host),
        state_dir=Path(env.get("STACK_STATE_DIR", base.state_dir)).resolve(),
        model_repository=Path(env.get("STACK_MODEL_REPOSITORY", base.model_repository)).resolve(),
        triton_venv=Path(env.get("STACK_TRITON_VENV", base.triton_venv)).resolve(),
        rules_settings=Path(env.get("STACK_RULES_SETTINGS", base.rules_settings)).resolve(),
        ports=ports,
        scrape_interval_s=interval,
    )
