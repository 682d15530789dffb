"""A per-size series born inside a short window still counts (a real Prometheus).

The doctor printed "executions by size none" beside "average batch 1.13": over a short window
the totals' series are old, but a batch size's series appears with the model's first batch of
that size and has a single sample in the window, which ``increase()`` drops.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from promapi import PromClient, Range, increase_with_new
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.dashboard.conftest import prom_has, scraped_after, send_bursts, wait_for

pytestmark = pytest.mark.integration

SIZE_SERIES = 'triton_batching_batch_executions_total{model="add_unbatched"}'
TOTAL = 'triton_batching_executions_total{model="add_unbatched"}'


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A stack whose add_unbatched has never executed: its per-size series do not exist yet."""
    settings = isolated(tmp_path_factory.mktemp("new-series"))
    with running(settings, only={"triton", "exporter", "prometheus"}):
        yield settings


def test_a_series_born_in_the_window_counts(fresh: Settings) -> None:
    wait_for(lambda: prom_has(fresh, TOTAL), 30, "the exporter's first scrape")
    prom = PromClient(fresh.url("prometheus"))
    assert prom.query(SIZE_SERIES).empty  # never executed: no per-size series yet
    sent = send_bursts(fresh, "add_unbatched", 5, size=2)
    wait_for(scraped_after(fresh, "exporter", time.time() + 0.5), 30, "a scrape after the load")
    # The per-size series' first sample, to the millisecond (1 s scrapes).
    now = time.time()
    stamps = prom.query_range(f"timestamp({SIZE_SERIES})", Range(now - 60, now, 1))
    first = float(stamps["value"].min())
    at = first + 0.5  # the window (at - 2 s, at] holds that one sample of it
    plain = prom.query(f"sum by (batch_size) (increase({SIZE_SERIES}[2s]))", at)
    counted = prom.query(f"sum by (batch_size) ({increase_with_new(SIZE_SERIES, '2s')})", at)
    total = prom.scalar(f"sum(increase({TOTAL}[2s]))", at)
    assert plain.empty  # what the doctor read before
    assert total is not None and total > 0  # while the older totals' series count
    # All its executions since it appeared (the bursts may straddle two scrapes).
    seen = prom.scalar(f"sum({SIZE_SERIES})", at)
    assert seen is not None and 0 < seen <= sent
    assert dict(zip(counted["batch_size"], counted["value"], strict=True)) == {"1": seen}
