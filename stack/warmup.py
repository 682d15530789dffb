"""A short, bounded warm-up load after `up`, so the dashboard shows live charts at once.

Runs the load generator (closed loop, 4 clients) against each model in turn for
a few seconds in all, then stops: it can never overload the host. The runs are
not stored, so the dashboard's list of load runs stays the user's own.
`up --no-warmup` skips it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from loadgen.engine.runner import LoadgenError, RunParams, run
from promapi import PromClient, PrometheusError
from rules.prometheus_config import local_targets
from stacksettings import Settings
from tritonapi import repocheck

DURATION_S = 6.0
CONCURRENCY = 4


def models(settings: Settings) -> list[str]:
    """Models whose config passes check-config (the others Triton may not have loaded)."""
    return [
        c.name
        for c in repocheck.check_repository(settings.model_repository)
        if c.config is not None and not repocheck.errors([c])
    ]


def wait_for_first_scrapes(settings: Settings) -> bool:
    """Wait until Prometheus has scraped every job once.

    Requests sent before a series' first sample never show in increase() or
    rate(), so load sent right after start would be invisible on the dashboard.
    """
    jobs = len(local_targets(settings))
    client = PromClient(settings.url("prometheus"), timeout_s=2.0)
    deadline = time.monotonic() + 3 * settings.scrape_interval_s + 5.0
    while time.monotonic() < deadline:
        try:
            scraped = client.scalar("count(up)")
            if scraped is not None and scraped >= jobs:
                return True
        except PrometheusError:
            pass
        time.sleep(0.2)
    return False


def run_warmup(
    settings: Settings,
    duration_s: float = DURATION_S,
    log: Callable[[str], None] = print,
) -> dict[str, int]:
    """Load each model for its share of ``duration_s``; return requests answered per model."""
    names = models(settings)
    if not names:
        log("warm-up: no model passes check-config; skipped")
        return {}
    if "prometheus" not in settings.skip:
        wait_for_first_scrapes(settings)
    share = max(duration_s / len(names), 1.0)
    log(
        f"warm-up: {share:g} s of load (concurrency {CONCURRENCY}) on each of "
        f"{', '.join(names)} (--no-warmup skips it)"
    )
    answered: dict[str, int] = {}
    for name in names:
        params = RunParams(
            "concurrency",
            model=name,
            url=settings.url("triton_http"),
            concurrency=CONCURRENCY,
            duration_s=share,
            label="warm-up",
        )
        try:
            # db=None: warm-up runs are not stored with the user's load runs.
            answered[name] = run(params, db=None).summary.client.ok
        except LoadgenError as exc:
            # The stack is up either way; a model the generator cannot feed is skipped.
            log(f"warm-up: {name} skipped ({exc})")
    log("warm-up: " + ", ".join(f"{m} {n} requests" for m, n in answered.items()))
    return answered
