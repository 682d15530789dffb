"""Safe bounds for a load run: a tool that can flood a server refuses absurd numbers.

Each cap is well above what a 2-core machine can drive and well below what could hurt a
server. Memory no longer bounds a run (records stream to the store, latency is aggregated as
the run goes), so duration and requests are bounded by disk: a stored request takes about
40 bytes, and ``loadgen prune`` keeps the store bounded. These bounds refuse a run up
front, with one line; none of them cuts a run short.
"""

from __future__ import annotations

from loadgen.errors import LoadgenError


def _show(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"


MAX_CONCURRENCY = 256
MAX_RATE = 20_000.0  # requests per second
MAX_DURATION_S = 86_400.0  # a day's soak
MAX_REQUESTS = 100_000_000  # about 4 GB of records in the store
MAX_GAP_S = 60.0
MAX_TIMEOUT_S = 120.0
MAX_STAGES = 100
MAX_REQUEST_BYTES = 16 * 1024 * 1024


def positive(value: float, flag: str, cap: float, unit: str = "") -> float:
    """``value`` if 0 < value <= cap, else one clear error naming the flag and the bound."""
    if not value > 0:  # also catches NaN
        raise LoadgenError(f"{flag} must be greater than 0 (got {_show(value)})")
    if value > cap:
        raise LoadgenError(
            f"{flag} {_show(value)}{unit} is past the safe bound of {_show(cap)}{unit}"
        )
    return value


def positive_int(value: int, flag: str, cap: int) -> int:
    return int(positive(value, flag, cap))


def non_negative(value: float, flag: str, cap: float, unit: str = "") -> float:
    if not value >= 0:
        raise LoadgenError(f"{flag} must be 0 or more (got {_show(value)})")
    if value > cap:
        raise LoadgenError(
            f"{flag} {_show(value)}{unit} is past the safe bound of {_show(cap)}{unit}"
        )
    return value
