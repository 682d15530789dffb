"""The autopilot's policy: what ``batchscope autopilot`` may change, and how often.

A YAML file (every key optional)::

    max_queue_delay_microseconds: {min: 0, max: 2000}
    max_batch_size: {max: 32}
    preferred_batch_sizes: [4, 8]      # or: any
    instance_count: {max: 2}
    min_minutes_between_changes: 10
    never_touch: [mlp_model]

The bounds restrict the advisor's search space before the search (:meth:`Policy.restrict`),
so that the one search decides among the configs the policy allows, rather than its answer
being edited afterwards. A bad field is one :class:`PolicyError` line each, naming the field
and the fix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from advisor.config import BatcherConfig
from advisor.predict import SearchSpace

# Without a policy file: a change at most every 10 minutes, so that one watched change (two
# windows of up to 5 minutes at low rates) is over before the next is considered.
DEFAULT_MINUTES = 10.0
KEYS = (
    "max_queue_delay_microseconds",
    "max_batch_size",
    "preferred_batch_sizes",
    "instance_count",
    "min_minutes_between_changes",
    "never_touch",
)


class PolicyError(ValueError):
    """A policy file that cannot be used: one line per bad field (the CLI exits 2)."""


@dataclass(frozen=True)
class Policy:
    min_delay_us: int = 0
    max_delay_us: int | None = None
    max_batch_size: int | None = None
    preferred: tuple[int, ...] | None = None  # None: any
    max_instances: int | None = None
    min_minutes_between_changes: float = DEFAULT_MINUTES
    never_touch: frozenset[str] = frozenset()

    def restrict(self, space: SearchSpace, current: BatcherConfig) -> SearchSpace:
        """``space`` cut to the configs this policy allows. A bound not on the grid (a
        delay of 300 us, a max_batch_size of 24) is added to it, so that the edge of what is
        allowed is tried too."""
        sizes = set(space.max_batch_sizes)
        if self.max_batch_size is not None:
            cap = self.max_batch_size
            sizes = {m for m in sizes if m <= cap} | ({cap} if cap <= max(sizes) else set())
        if self.min_delay_us > 0:
            # A max_batch_size of 1 is searched with no delay (there is nothing to wait for),
            # which a minimum delay does not allow.
            sizes.discard(1)
        high = math.inf if self.max_delay_us is None else self.max_delay_us
        delays = {d for d in space.delays_us if self.min_delay_us <= d <= high}
        delays.add(self.min_delay_us)
        if self.max_delay_us is not None:
            delays.add(self.max_delay_us)
        instances = space.instances
        if self.max_instances is not None:
            counts = space.instance_counts(current)
            instances = tuple(c for c in counts if c <= self.max_instances) or (self.max_instances,)
        return replace(
            space,
            max_batch_sizes=tuple(sorted(sizes)),
            delays_us=tuple(sorted(delays)),
            instances=instances,
            preferred_allowed=self.preferred,
        )

    def outside(self, config: BatcherConfig) -> list[str]:
        """How ``config`` breaks this policy (empty when it is within)."""
        problems = []
        delay = config.max_queue_delay_us
        if config.max_batch_size > 1 and delay < self.min_delay_us:
            problems.append(f"delay {delay} us under the minimum {self.min_delay_us}")
        if self.max_delay_us is not None and delay > self.max_delay_us:
            problems.append(f"delay {delay} us over the maximum {self.max_delay_us}")
        if self.max_batch_size is not None and config.max_batch_size > self.max_batch_size:
            problems.append(
                f"max_batch_size {config.max_batch_size} over the maximum {self.max_batch_size}"
            )
        if self.preferred is not None:
            extra = sorted(set(config.preferred_batch_sizes) - set(self.preferred))
            if extra:
                problems.append(f"preferred size(s) {extra} not among {list(self.preferred)}")
        if self.max_instances is not None and config.instances > self.max_instances:
            problems.append(f"{config.instances} instances over the maximum {self.max_instances}")
        return problems

    def describe(self) -> str:
        delay = f"delay {self.min_delay_us}..{self.max_delay_us or 'any'} us"
        batch = f"max_batch_size <= {self.max_batch_size or 'any'}"
        pref = f"preferred {list(self.preferred) if self.preferred is not None else 'any'}"
        inst = f"instances <= {self.max_instances or 'any'}"
        return (
            f"{delay}, {batch}, {pref}, {inst}, at most one change per "
            f"{self.min_minutes_between_changes:g} min"
            + (f", never touch {', '.join(sorted(self.never_touch))}" if self.never_touch else "")
        )


def _whole(value: Any, field: str, least: int, problems: list[str]) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        problems.append(f"{field}: {value!r} is not a whole number >= {least}")
        return None
    return value


def _bounds(
    raw: dict[str, Any], key: str, allowed: tuple[str, ...], example: str, problems: list[str]
) -> dict[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict) or set(value) - set(allowed):
        problems.append(f"{key}: {value!r} is not a mapping of {'/'.join(allowed)}; e.g. {example}")
        return {}
    return value


def parse(raw: Any, source: str = "policy") -> Policy:
    """The policy from a parsed YAML document; PolicyError with one line per bad field."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise PolicyError(f"{source}: the policy must be a YAML mapping of {', '.join(KEYS)}")
    problems: list[str] = []
    for key in sorted(set(raw) - set(KEYS)):
        problems.append(f"{key}: not a policy field (the fields: {', '.join(KEYS)})")
    delay = _bounds(
        raw,
        "max_queue_delay_microseconds",
        ("min", "max"),
        "max_queue_delay_microseconds: {min: 0, max: 2000}",
        problems,
    )
    low = _whole(delay.get("min", 0), "max_queue_delay_microseconds.min", 0, problems)
    high = (
        _whole(delay["max"], "max_queue_delay_microseconds.max", 0, problems)
        if "max" in delay
        else None
    )
    if low is not None and high is not None and low > high:
        problems.append(f"max_queue_delay_microseconds: min {low} is over max {high}")
    batch = _bounds(raw, "max_batch_size", ("max",), "max_batch_size: {max: 32}", problems)
    cap = _whole(batch["max"], "max_batch_size.max", 1, problems) if "max" in batch else None
    inst = _bounds(raw, "instance_count", ("max",), "instance_count: {max: 2}", problems)
    count = _whole(inst["max"], "instance_count.max", 1, problems) if "max" in inst else None
    preferred: tuple[int, ...] | None = None
    given = raw.get("preferred_batch_sizes", "any")
    if given != "any":
        if not isinstance(given, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in given
        ):
            problems.append(
                f"preferred_batch_sizes: {given!r} is not a list of whole numbers >= 1 or "
                "'any'; e.g. preferred_batch_sizes: [4, 8]"
            )
        else:
            preferred = tuple(sorted(set(given)))
    minutes = raw.get("min_minutes_between_changes", DEFAULT_MINUTES)
    if isinstance(minutes, bool) or not isinstance(minutes, int | float) or not minutes >= 0:
        problems.append(f"min_minutes_between_changes: {minutes!r} is not a number of minutes >= 0")
    never = raw.get("never_touch", [])
    if not isinstance(never, list) or not all(isinstance(m, str) and m for m in never):
        problems.append(
            f"never_touch: {never!r} is not a list of model names; e.g. never_touch: [mlp_model]"
        )
        never = []
    if problems:
        raise PolicyError("\n".join(f"{source}: {p}" for p in problems))
    return Policy(
        min_delay_us=low or 0,
        max_delay_us=high,
        max_batch_size=cap,
        preferred=preferred,
        max_instances=count,
        min_minutes_between_changes=float(minutes),
        never_touch=frozenset(never),
    )


def load(path: Path) -> Policy:
    """The policy in the YAML file at ``path``; PolicyError (one line per problem)."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise PolicyError(f"--policy {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise PolicyError(f"--policy {path}: not valid YAML{line}") from None
    return parse(raw, f"--policy {path}")
