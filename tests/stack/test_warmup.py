"""The warm-up after `up`: bounded load on every model, visible to Prometheus, and a flag off."""

from __future__ import annotations

import time

import pytest

from batchscope.main import parse
from stack import warmup
from stacksettings import Settings
from tests.dashboard.conftest import prom_has, wait_for


def test_no_warmup_flag() -> None:
    assert parse(["up", "--no-warmup"]).no_warmup is True
    assert parse(["up"]).no_warmup is False


@pytest.mark.integration
def test_warmup_loads_every_model_and_prometheus_sees_it(running_stack: Settings) -> None:
    started = time.monotonic()
    answered = warmup.run_warmup(running_stack, duration_s=2.0, log=lambda _: None)
    # Bounded: its share per model, plus the checks before and after each run.
    assert time.monotonic() - started < 30
    assert set(answered) == set(warmup.models(running_stack))
    assert all(n > 0 for n in answered.values()), answered
    wait_for(
        lambda: prom_has(
            running_stack,
            'increase(triton_batching_inferences_total{model="batch_add_model"}[1m]) > 0',
        ),
        30,
        "Prometheus to see the warm-up",
    )
