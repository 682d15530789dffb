"""What a load run is asked to do, checked against the safe bounds before anything is sent."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, fields
from typing import Any

from loadgen import limits
from loadgen.clients.payloads import Dim, dims_text, parse_dims
from loadgen.errors import LoadgenError
from stacksettings import from_env_or_default

INPUT_DEFAULTS: dict[str, Any] = {
    "ranges": {},
    "input_data": "random",
    "data_order": "order",
    "string_length": [16, 16],
    "string_data": None,
}
SCENARIOS = ("serial", "concurrent", "concurrency", "rate", "steps")
PROTOCOLS = ("http", "grpc")


def default_urls() -> tuple[str, str]:
    """Triton's HTTP and gRPC addresses of the local stack (its STACK_* port settings)."""
    settings = from_env_or_default()
    # The first Triton the stack watches: its own, or the first attached one.
    return settings.triton_targets[0], settings.grpc_address


def default_db() -> str:
    """LOADGEN_DB, else loadgen.sqlite3 in the stack's state folder (.stack/)."""
    return os.environ.get("LOADGEN_DB") or str(from_env_or_default().store)


@dataclass(frozen=True)
class RunParams:
    scenario: str
    model: str = "batch_add_model"
    protocol: str = "http"
    url: str = ""  # Triton HTTP (metadata and statistics always go over HTTP)
    grpc_url: str = ""
    requests: int | None = None  # serial / concurrent: how many; concurrency: optional cap
    gap_s: float = 0.010
    concurrency: int = 1
    duration_s: float = 5.0
    rate: float = 0.0
    poisson: bool = False
    stages: tuple[tuple[float, float], ...] = ()
    batch_size: int = 1
    # Per input: sizes, each a number or an inclusive range (LO, HI) drawn per request.
    shapes: tuple[tuple[str, tuple[Dim, ...]], ...] = ()
    dtypes: tuple[tuple[str, str], ...] = ()
    # What the inputs hold (loadgen.inputopts): value ranges [LO, HI) per input; "random",
    # "zero", or a perf_analyzer JSON file or a folder of .npy files; its order ("order" or
    # "random", with the seed); generated strings' lengths (characters) or one given string.
    ranges: tuple[tuple[str, tuple[float, float]], ...] = ()
    input_data: str = "random"
    data_order: str = "order"
    string_length: tuple[int, int] = (16, 16)
    string_data: str | None = None
    timeout_s: float = 10.0
    max_in_flight: int = limits.MAX_CONCURRENCY
    allow_remote: bool = False
    seed: int | None = None
    label: str = ""
    # Trace every request in Triton (loadgen.results.tracing), read back through the exporter.
    trace: bool = False
    exporter_url: str = ""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["shapes"] = {
            k: [d if isinstance(d, int) else dims_text([d]) for d in v] for k, v in self.shapes
        }
        data["dtypes"] = dict(self.dtypes)
        # Inputs as they always were (random, no ranges) keep the shape stores have had.
        data["ranges"] = {k: list(v) for k, v in self.ranges}
        data["string_length"] = list(self.string_length)
        for key, default in INPUT_DEFAULTS.items():
            if data[key] == default:
                del data[key]
        data["stages"] = [list(s) for s in self.stages]
        if not self.trace:  # an untraced run keeps the shape stores have always had
            del data["trace"], data["exporter_url"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunParams:
        """The params that ``to_json`` wrote (a stored run's); keys of other versions are
        left out."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["shapes"] = tuple(
            (k, tuple(d if isinstance(d, int) else parse_dims(str(d), k)[0] for d in v))
            for k, v in data.get("shapes", {}).items()
        )
        values["dtypes"] = tuple(data.get("dtypes", {}).items())
        values["ranges"] = tuple((k, (v[0], v[1])) for k, v in data.get("ranges", {}).items())
        if "string_length" in data:
            lo, hi = data["string_length"]
            values["string_length"] = (lo, hi)
        values["stages"] = tuple((rate, seconds) for rate, seconds in data.get("stages", []))
        return cls(**values)

    def describe(self) -> str:
        s = self.scenario
        if s == "serial":
            return f"serial n={self.requests} gap={self.gap_s * 1e3:g}ms"
        if s == "concurrent":
            return f"concurrent n={self.requests}"
        if s == "concurrency":
            return f"concurrency c={self.concurrency} {self.duration_s:g}s"
        if s == "rate":
            kind = "poisson" if self.poisson else "constant"
            return f"rate {self.rate:g}/s {kind} {self.duration_s:g}s"
        return "steps " + " ".join(f"{r:g}/s*{d:g}s" for r, d in self.stages)


# Longer than any real address: a paste gone wrong (and past what servers accept in a line).
MAX_URL = 2048
# numpy's generators take seeds of 32 bits (and none below 0).
MAX_SEED = 2**32 - 1


def validate(p: RunParams) -> RunParams:
    """The params with defaults filled in; LoadgenError (exit 2) on anything out of bounds."""
    if p.scenario not in SCENARIOS:
        raise LoadgenError(f"unknown scenario {p.scenario!r} (one of {', '.join(SCENARIOS)})")
    if p.protocol not in PROTOCOLS:
        raise LoadgenError(f"--protocol {p.protocol!r}: use http or grpc")
    if not p.model:
        raise LoadgenError("--model must name a model")
    if p.seed is not None and not 0 <= p.seed <= MAX_SEED:
        raise LoadgenError(f"--seed {p.seed}: use a whole number from 0 to {MAX_SEED}")
    limits.positive(p.timeout_s, "--timeout", limits.MAX_TIMEOUT_S, "s")
    limits.positive_int(p.batch_size, "--batch-size", 1 << 20)
    limits.positive_int(p.max_in_flight, "--max-in-flight", limits.MAX_CONCURRENCY)
    # Checked here, not only when gRPC is used: a wrong flag is a mistake either way.
    scheme = p.grpc_url.split("://", 1)[0] if "://" in p.grpc_url else "grpc"
    if scheme not in ("grpc", "http") or len(p.grpc_url) > MAX_URL:
        raise LoadgenError(f"--grpc-url {p.grpc_url[:40]!r}: give HOST:PORT (e.g. 127.0.0.1:8001)")
    if p.exporter_url:
        scheme = p.exporter_url.split("://", 1)[0] if "://" in p.exporter_url else ""
        if scheme not in ("http", "https") or len(p.exporter_url) > MAX_URL:
            raise LoadgenError(
                f"--exporter-url {p.exporter_url[:40]!r}: give the exporter's http(s) URL "
                f"(at most {MAX_URL} characters), e.g. http://127.0.0.1:9733"
            )
    http_url, grpc_url = default_urls()
    changes: dict[str, Any] = {"url": p.url or http_url, "grpc_url": p.grpc_url or grpc_url}
    if p.trace:
        changes["exporter_url"] = p.exporter_url or from_env_or_default().url("exporter")
    if p.scenario in ("serial", "concurrent"):
        n = 3 if p.requests is None else p.requests
        cap = limits.MAX_CONCURRENCY if p.scenario == "concurrent" else limits.MAX_REQUESTS
        changes["requests"] = limits.positive_int(n, "--requests", cap)
        limits.non_negative(p.gap_s * 1e3, "--gap-ms", limits.MAX_GAP_S * 1e3, " ms")
    if p.scenario == "concurrency":
        limits.positive_int(p.concurrency, "--concurrency", limits.MAX_CONCURRENCY)
        if p.requests is not None:
            limits.positive_int(p.requests, "--requests", limits.MAX_REQUESTS)
    if p.scenario in ("concurrency", "rate"):
        limits.positive(p.duration_s, "--duration", limits.MAX_DURATION_S, "s")
    if p.scenario == "rate":
        limits.positive(p.rate, "--rate", limits.MAX_RATE, "/s")
        _check_volume(p.rate * p.duration_s)
    if p.scenario == "steps":
        if not p.stages:
            raise LoadgenError("steps needs at least one --stage RATE:SECONDS")
        if len(p.stages) > limits.MAX_STAGES:
            raise LoadgenError(f"{len(p.stages)} stages is past the bound of {limits.MAX_STAGES}")
        for rate, seconds in p.stages:
            limits.positive(rate, "--stage rate", limits.MAX_RATE, "/s")
            limits.positive(seconds, "--stage seconds", limits.MAX_DURATION_S, "s")
        total = sum(s for _, s in p.stages)
        limits.positive(total, "total --stage seconds", limits.MAX_DURATION_S, "s")
        _check_volume(sum(r * s for r, s in p.stages))
        changes["duration_s"] = total
    from dataclasses import replace

    return replace(p, **changes)


def _check_volume(expected: float) -> None:
    if expected > limits.MAX_REQUESTS:
        raise LoadgenError(
            f"this run would send about {expected:.0f} requests, past the bound of "
            f"{limits.MAX_REQUESTS}: lower the rate or the duration"
        )
