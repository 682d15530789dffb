"""The exporter's options: each flag, else its environment variable, else the default,
checked into one ``Options``; a bad value is a one-line ``ValueError``."""

from __future__ import annotations

import argparse
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from exporter.scrape import CONFIG_TTL_S
from exporter.targets import Target, make_targets
from stacksettings import ADMIN_KEY_HEADER, read_secret

DEFAULT_LISTEN = "127.0.0.1:9733"
DEFAULT_TRITON = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 2.0
LOG_LEVELS = ["debug", "info", "warning", "error"]


def parse_listen_address(value: str) -> tuple[str, int]:
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(
            f"--web.listen-address: {value!r} is not HOST:PORT with a port 1-65535 "
            f"(e.g. {DEFAULT_LISTEN})"
        )
    # ":9733" listens on every interface, as Go exporters do.
    return host.strip("[]") or "0.0.0.0", int(port_text)


def parse_timeout(value: str) -> float:
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        timeout = float(value)
    except ValueError:
        timeout = -1.0
    if not 0 < timeout <= 60:
        raise ValueError(f"--triton-timeout: {value!r} is not a number of seconds in (0, 60]")
    return timeout


def parse_read_interval(value: str) -> float:
    if not value:
        return 0.0
    try:
        interval = float(value)
    except ValueError:
        interval = -1.0
    if not 0 <= interval <= 300:
        raise ValueError(
            f"--read-interval: {value!r} is not a number of seconds in [0, 300] "
            "(0 reads at each scrape; use about Prometheus' scrape interval)"
        )
    return interval


def parse_ttl(value: str) -> float:
    if not value:
        return CONFIG_TTL_S
    try:
        ttl = float(value)
    except ValueError:
        ttl = -1.0
    if not 0 <= ttl <= 3600:
        raise ValueError(f"--config-cache-ttl: {value!r} is not a number of seconds in [0, 3600]")
    return ttl


@dataclass(frozen=True)
class Options:
    targets: list[Target]
    trace_files: list[Path]
    timeout_s: float
    host: str
    port: int
    log_level: str
    headers: dict[str, str] = field(default_factory=dict)
    config_ttl_s: float = CONFIG_TTL_S
    read_interval_s: float = 0.0
    trace_sample: int = 0
    changes_db: Path | None = None


def options_from(args: argparse.Namespace, env: Mapping[str, str]) -> Options:
    """Flags first, then the environment, then defaults; ValueError names the bad one."""

    def env_list(name: str) -> list[str]:
        return [item.strip() for item in env.get(name, "").split(",") if item.strip()]

    targets = make_targets(
        args.triton_url or env_list("TRITON_URL") or [DEFAULT_TRITON],
        args.triton_metrics_url or env_list("TRITON_METRICS_URL"),
    )
    trace_files = [Path(p) for p in args.trace_file or env_list("TRITON_TRACE_FILE")]
    if trace_files and len(trace_files) != len(targets):
        raise ValueError(
            f"--trace-file given {len(trace_files)} time(s) for {len(targets)} --triton-url: "
            "give one per --triton-url, in the same order, or none"
        )
    timeout = parse_timeout(args.triton_timeout or env.get("TRITON_TIMEOUT") or "")
    ttl = parse_ttl(args.config_cache_ttl or env.get("EXPORTER_CONFIG_CACHE_TTL") or "")
    interval = parse_read_interval(args.read_interval or env.get("EXPORTER_READ_INTERVAL") or "")
    host, port = parse_listen_address(
        args.listen_address or env.get("EXPORTER_LISTEN_ADDRESS") or DEFAULT_LISTEN
    )
    level = args.log_level or env.get("EXPORTER_LOG_LEVEL") or "info"
    if level not in LOG_LEVELS:
        raise ValueError(f"EXPORTER_LOG_LEVEL: {level!r} is not one of {', '.join(LOG_LEVELS)}")
    key_file = args.triton_admin_key_file or env.get("TRITON_ADMIN_KEY_FILE") or ""
    headers = {}
    if key_file:
        key = read_secret(key_file)
        if key is None:
            raise ValueError(
                f"--triton-admin-key-file: cannot read a key from {key_file!r}; give the file "
                "`./stack/up` wrote (.stack/triton-admin.key), or leave the flag out"
            )
        headers[ADMIN_KEY_HEADER] = key
    sample = parse_trace_sample(args.trace_sample or env.get("TRITON_TRACE_SAMPLE") or "")
    if sample and not trace_files:
        raise ValueError(
            "--trace-sample needs --trace-file: the exporter reads the sampled traces from "
            "Triton's trace file"
        )
    changes = args.changes_db or env.get("EXPORTER_CHANGES_DB") or ""
    if changes:
        check_changes_db(Path(changes))
    return Options(
        targets,
        trace_files,
        timeout,
        host,
        port,
        level,
        headers,
        ttl,
        interval,
        sample,
        Path(changes) if changes else None,
    )


SQLITE_HEADER = b"SQLite format 3\x00"


def check_changes_db(path: Path) -> None:
    """ValueError (one line) unless ``path`` is a load-run store or not there yet (the first
    load run makes it; until then there is no series)."""
    fix = "give the load-run store's file (.stack/loadgen.sqlite3)"
    try:
        mode = path.stat().st_mode  # not exists(): it reads a link loop as missing
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ValueError(
            f"--changes-db: {str(path)!r} cannot be read ({exc.strerror or exc}); {fix}"
        ) from None
    if not stat.S_ISREG(mode):
        raise ValueError(f"--changes-db: {str(path)!r} is not a file; {fix}")
    try:
        with path.open("rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise ValueError(
            f"--changes-db: {str(path)!r} cannot be read ({exc.strerror or exc}); {fix}"
        ) from None
    if head and head != SQLITE_HEADER:
        raise ValueError(f"--changes-db: {str(path)!r} is not a SQLite store; {fix}")


def parse_trace_sample(value: str) -> int:
    """1 in N (0: off)."""
    if not value:
        return 0
    try:
        rate = int(value)
    except ValueError:
        rate = -1
    if not 0 <= rate <= 1_000_000:
        raise ValueError(f"--trace-sample: {value!r} is not 0 (off) or N in 1..1000000")
    return rate
