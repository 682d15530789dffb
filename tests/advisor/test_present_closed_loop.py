"""The present on closed-loop traffic, from real runs (data/closed_loop_c4.sqlite3.gz, made
by capture_closed_loop.py): four clients on batch_add_model on a machine whose cores are
shared, which batch in pairs because the two answers of an execution return together.

The simulation once drew the time outside Triton per request, parted the pairs, and called
the present off on exactly this traffic (advise exit 3 in the suite's traced-run tests)."""

from __future__ import annotations

import functools
import gzip
from dataclasses import replace
from pathlib import Path

import pytest

from advisor.inputs import Options, Prepared, gather
from advisor.present import check_present

CAPTURE = Path(__file__).parent / "data" / "closed_loop_c4.sqlite3.gz"
TRACED, UNTRACED = (1, 2, 3), (4,)
# The traced runs whose hand-offs hold measured releases: their present is one simulation.
RELEASED = (1, 2)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("closed") / "runs.sqlite3"
    db.write_bytes(gzip.decompress(CAPTURE.read_bytes()))
    return db


@functools.cache
def prepared(store: Path, run_id: int) -> Prepared:
    return gather(Options(store=store, runs=(run_id,), calibrations=store.with_suffix(".json")))


@pytest.mark.parametrize("run_id", [*TRACED, *UNTRACED])
def test_the_closed_loop_present_is_reproduced(store: Path, run_id: int) -> None:
    p = prepared(store, run_id)
    i = p.inputs
    assert i.present is not None and i.traffic.describe() == "closed loop, concurrency 4"
    assert 1.9 <= i.present.avg_batch <= 2.1  # pairs, the case
    assert (i.outside is not None) == (run_id in TRACED)
    check = check_present(i.config, i.traffic, i.service, i.present, p.cpu)
    assert check.recommend_ready, check.line()


@pytest.mark.parametrize("run_id", RELEASED)
def test_drawn_per_request_the_spread_parts_the_pairs(store: Path, run_id: int) -> None:
    """The same run, its measured spread drawn per request with the front end's assumed
    one on top (as before): the pairs part, batches come out smaller and queues longer,
    past the bounds."""
    p = prepared(store, run_id)
    i = p.inputs
    assert i.outside is not None and i.present is not None and p.cpu.release_samples
    apart = replace(p.cpu, request_cv=1.0, outside_spread=(0.0,), outside_own=i.outside.spread_s)
    check = check_present(i.config, i.traffic, i.service, i.present, apart)
    batch, queue = check.figure("average batch"), check.figure("mean queue")
    assert batch.simulated < batch.measured and queue.simulated > queue.measured, check.line()
    assert not check.recommend_ready, check.line()
