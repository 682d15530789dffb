"""The autopilot rescues an overloaded model: a change that gives it the capacity it lacks is
kept, though the backlog the old config left is still draining when it is made.

A Triton of its own serving ``add_sleep`` (bench/models: the add model that sleeps 5 ms per
execution whatever the batch, so its capacity is set by its batching, not by the shared
cores). Served with batches of 1 it is short of the 300/s Poisson the clients send (with the
load generator's default 10 s timeout), so Triton's queue, then the clients' own, grows; the
change to batches of up to 8 gives it ample capacity. Triton's statistics observe the
overload and the drained queue; its config endpoint, what is served.

Why the window after begins only once Triton's queue has drained: begun while the backlog
drained, it saw the catch-up rather than the traffic sent, and a change was kept only because
the rule read it as a stall of the clients' machine (the figures are on
docs/validation/autopilot-rescue.md).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from advisor.advice import SearchOptions
from advisor.config import BatcherConfig, from_model_config
from advisor.inputs import Options
from autopilot import apply, loop
from autopilot.policy import Policy
from loadgen.engine.runner import RunParams
from runs.store import RunStore
from stack.supervisor import running
from stacksettings import Settings, isolated
from tests.autopilot.test_autopilot import JUDGMENTS, poisson_traffic
from tests.helpers import TritonCrashes
from tritonapi.client import TritonClient
from tritonapi.stats import ModelStats

CRASHES = TritonCrashes()
pytestmark = [
    pytest.mark.integration,
    # In turn with the autopilot's judgments, on one worker (tests/autopilot/test_autopilot.py).
    pytest.mark.xdist_group(JUDGMENTS),
    pytest.mark.after_start,
    # Rerun only a test during which this module's Triton died of a signal (upstream's
    # python backend aborts now and then under load: docs/development.md, "Reruns only for
    # Triton's own crashes"); tests/conftest.py lists each rerun and caps how many.
    pytest.mark.flaky(reruns=1, condition=CRASHES.crashed),
]
MODEL = "add_sleep"
SOURCE = Path(__file__).resolve().parents[2] / "bench" / "models" / MODEL
OVERLOADED = BatcherConfig(1, (), 0, 1)  # one request per 5 ms execution
RESCUE = BatcherConfig(8, (), 500, 1)  # up to 8 per execution
RATE = 300.0
WATCH_S = 6.0
# The tenfold shift's two rates (test_a_shift_from_50_to_500_per_s...).
LOW_RATE, HIGH_RATE = 50.0, 500.0
# After the change, steps until one serves at most DRAINED times the rate sent (or this many).
DRAIN_STEPS, DRAINED = 15, 1.1
# The clients: Poisson, with the load generator's default 10 s timeout.
PARAMS = RunParams("rate", model=MODEL, rate=RATE, poisson=True, duration_s=120.0)


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    base = tmp_path_factory.mktemp("autopilot-rescue")
    shutil.copytree(SOURCE, base / "models" / MODEL)
    settings = replace(isolated(base / "state"), model_repository=base / "models")
    # Supervised, as ./stack/up runs it: a Triton that crashes is started again, so one
    # crash (rerun, above) does not fail the module's other tests.
    with running(settings, only=("triton",), supervise=True):
        CRASHES.watch(settings)
        yield settings


@pytest.fixture(autouse=True)
def crash_is_this_tests(triton: Settings, request: pytest.FixtureRequest) -> None:
    """A Triton restarted after a crash is waited for; a crash from now on is this test's."""
    CRASHES.forget()
    CRASHES.serving(triton, MODEL)
    CRASHES.begin(request.node.nodeid)


def test_a_change_that_rescues_an_overloaded_model_is_kept_once_the_backlog_drained(
    triton: Settings, tmp_path: Path
) -> None:
    client = TritonClient(triton.url("triton_http"), headers=triton.admin_headers())
    served = client.model_config_json(MODEL)
    client.load_model(MODEL, apply.override(served, OVERLOADED, MODEL))
    old = client.model_config_json(MODEL)
    new = apply.override(old, RESCUE, MODEL)
    params = replace(PARAMS, url=triton.url("triton_http"), seed=5)
    lines: list[str] = []
    with poisson_traffic(params, tmp_path / "runs.sqlite3") as db:
        result = apply.apply_and_watch(
            client, MODEL, old, new, None, WATCH_S, store=db, say=lines.append
        )
    change, before, after = result.change, result.change.before, result.change.after
    # Overloaded before, by Triton's own count: it answered well under the offered rate, and
    # each request waited in its queue for more than a second on average.
    assert before["throughput_per_s"] < 0.7 * RATE, before
    assert before["server_mean_s"] > 1.0, before
    # The backlog drained before the window after: Triton answered the offered rate in it,
    # not the catch-up beyond it, and its mean time per request was milliseconds.
    assert after, f"no window after the change: {change.outcome}: {change.reason}; {lines}"
    assert after["drained"] is True, lines
    assert 0 < after["drain_s"] <= WATCH_S, after
    assert 0.8 * RATE < after["throughput_per_s"] < 1.2 * RATE, after
    assert after["server_mean_s"] < 0.05, after
    # Kept on the clients' own p99, better beyond noise, not as a stall of their machine.
    assert change.outcome == "kept", (result.line(), lines)
    assert change.reason.startswith("client p99 "), change.reason
    assert "stall" not in change.reason
    assert after["client_p99_s"] * apply.NOISE_RATIO < before["client_p99_s"], change
    assert after["failed"] == 0, after
    assert from_model_config(client.model_config_json(MODEL)) == RESCUE
    drained = [line for line in lines if line.startswith("Triton's queue drained to")]
    assert len(drained) == 1, lines


def test_a_shift_into_saturation_leads_to_one_kept_change_and_no_oscillation(
    triton: Settings, tmp_path: Path
) -> None:
    """30/s, then 300/s, with ``batchscope autopilot --apply``'s loop in 4 s steps. At 300/s
    batches of 1 saturate the model: Triton answers its capacity, about 160/s, so its counts
    show no rate shift worth a change (x5 only from 30/s, and flat). The autopilot reads the
    saturation from Triton's queue, advises for twice the rate answered, and applies it; then
    the traffic is the baseline of the config kept, and nothing more changes."""
    client = TritonClient(triton.url("triton_http"), headers=triton.admin_headers())
    served = client.model_config_json(MODEL)
    client.load_model(MODEL, apply.override(served, OVERLOADED, MODEL))
    db = tmp_path / "runs.sqlite3"
    url = triton.url("triton_http")
    # A gain of x2 keeps batches of 1 at 30/s. What is on offer there grows with the
    # machine's load (the slower each execution, the more batching saves): x1.29 on a quiet
    # machine (16.8 -> 13.0 ms), x1.60 in a CI run (23.58 -> 14.70 ms), which x1.5 applied.
    # Saturated, a change gains without bound; a second change is the pilot's choice.
    opts = pilot_options(triton, db, Policy(min_minutes_between_changes=0), 2.0, watch_s=4.0)
    steps, lines = two_steps(opts, replace(PARAMS, url=url, rate=30.0, duration_s=120.0, seed=3))
    assert lines[0].endswith("no advice yet: advising"), lines
    assert lines[1].startswith(f"{MODEL}: present: batch "), lines  # before the decision
    assert lines[2].startswith(f"KEEP {MODEL}: max_batch_size 1,"), lines
    # The next interval advises nothing: within the bounds, or one odd interval, which the
    # loop does not call a shift (two in a row are: loop.SUSTAINED). Poisson at 30/s in 4 s
    # holds 120 requests, and on a busy machine the sender's pauses bunch them: in a whole
    # run beside other sessions one interval read burstiness 1.44 against 0.74.
    assert "no advice" in lines[3] or lines[3].endswith(f"interval 1 of {loop.SUSTAINED}"), lines
    before_shift = len(lines)
    high = replace(PARAMS, url=url, rate=RATE, duration_s=120.0, seed=4)
    with poisson_traffic(high, db):
        for _ in range(6):
            steps.step()
            if any(line.startswith(("KEPT", "ROLLED BACK")) for line in lines):
                break
        for _ in range(3):
            steps.step()
        first = client.model_stats(MODEL)
        steps.step()
        last = client.model_stats(MODEL)
    shifted = lines[before_shift:]
    # Every line whole in a failure's message (a list's repr is cut short).
    said = "\n".join(shifted)
    # Saturated, by Triton's queue, for two intervals, then advised for twice what it answered.
    assert "saturated (its requests waited" in shifted[0], said
    assert "advising for" in shifted[1] and "x2 the rate it answered" in shifted[1], said
    with RunStore(db) as store:
        changes = store.list_changes(MODEL)
    assert [c.outcome for c in changes] == ["kept"], said
    kept = from_model_config(changes[0].new_config)
    assert kept.max_batch_size > 1 and from_model_config(client.model_config_json(MODEL)) == kept
    # Then the baseline, and no advice that changes anything: no oscillation.
    after = shifted[shifted.index(next(x for x in shifted if x.startswith("KEPT"))) + 1 :]
    assert any("the baseline for it from now on" in line for line in after), said
    assert not any(line.startswith(("DRY RUN", "WAIT", "KEPT", "ROLLED")) for line in after), said
    # Triton's own statistics, over the last interval: the offered rate served, from a
    # queue that is no backlog.
    delta = last.minus(first)
    seconds = opts.interval_s
    assert delta.phase("success").count > 0.8 * RATE * seconds, delta
    assert delta.phase("queue").ns / delta.phase("queue").count < 50e6, delta


@pytest.mark.alone  # 500/s of clients and Triton's front end need these 2 cores whole
def test_a_shift_from_50_to_500_per_s_leads_to_one_kept_change_and_no_oscillation(
    triton: Settings, tmp_path: Path
) -> None:
    """Issue 27's tenfold shift: 50/s, then 500/s, with ``batchscope autopilot --apply``'s
    loop in 2 s steps and a policy that allows a change at any time. Steps and the change's
    windows (2.5 s) are shorter than the other tests' because this test holds both cores
    alone.

    Batches of up to 3 without a delay are kept at 50/s (batches of 1 form there; no config
    is worth x2). At 500/s an execution takes its 5 ms sleep and its hand-offs, over which
    more than 3 requests arrive, so up to 3 is past the model's capacity: requests wait behind
    one another, and the queue grows. The shift is advised on at its second interval, or
    saturation read from Triton's queue, one change to bigger batches is applied and kept, and
    the steps after it change nothing; once the backlog the start config left has drained,
    the rate sent is served from a short queue.

    Issue 27 wrote the shift as 200/s then 2,000/s. On these two cores the Python backend's
    work for each request, beside the clients' and Triton's front end, sets a capacity of its
    own: at 2,000/s batches of up to 32, the most the policy allows, serve the rate only with
    full batches and a backlog, and at 1,000/s an instance is busy without pause whatever its
    batches, its queue at this test's bound (``python -m bench.sleep_capacity``; the figures
    are on docs/validation/autopilot-rate-shift.md). At 500/s the start serves about two
    thirds of the rate sent, so the advice for twice the rate it answered (saturated) asks
    for more than is sent, and the configs the policy allows serve it from a queue of a few
    executions."""
    client = TritonClient(triton.url("triton_http"), headers=triton.admin_headers())
    served = client.model_config_json(MODEL)
    start = BatcherConfig(3, (), 0, 1)
    client.load_model(MODEL, apply.override(served, start, MODEL))
    db = tmp_path / "runs.sqlite3"
    url = triton.url("triton_http")
    # x2: at the low rate no config is worth it (in 1 of 12 runs at x1.5 a change was applied
    # there, and gained nothing: 11.84 -> 12.31 ms; that was the served config's short
    # simulated run read as saturated, which needs no gain, since fixed in advisor.predict); at
    # the high rate the gain on offer is far more.
    policy = Policy(max_batch_size=32, max_instances=1, min_minutes_between_changes=0)
    opts = pilot_options(triton, db, policy, 2.0, watch_s=2.5, interval_s=2.0)
    low = replace(PARAMS, url=url, rate=LOW_RATE, duration_s=120.0, seed=13)
    steps, lines = two_steps(opts, low)
    said = "\n".join(["the autopilot said:", *lines, *recorded(db)])
    assert lines[0].endswith("no advice yet: advising"), said
    assert lines[1].startswith(f"{MODEL}: present: batch "), said  # before the decision
    # The start is kept at the low rate. A first window whose present is off may come
    # before the KEEP, and nothing else: at 50/s a window holds about 100 requests, and in
    # a new clone's whole run here (2026-12-07) its mean queue missed the bound its own
    # spread widened (1.22 simulated against 0.86 ms measured, bound +-36 %); the second
    # step's window was calibrated and kept the start.
    keeps = [i for i, line in enumerate(lines) if line.startswith(f"KEEP {MODEL}: ")]
    assert keeps and lines[keeps[0]].startswith(f"KEEP {MODEL}: {start.describe()}"), said
    for line in lines[: keeps[0]]:
        assert (
            line.endswith("no advice yet: advising")
            or line.startswith(f"{MODEL}: present: ")
            or line.startswith(f"NO ADVICE {MODEL}: the advisor's simulation does not reproduce")
        ), said
    assert from_model_config(client.model_config_json(MODEL)) == start
    before_shift = len(lines)
    high = replace(PARAMS, url=url, rate=HIGH_RATE, duration_s=150.0, seed=14)
    with poisson_traffic(high, db):
        # Two intervals to call it a shift or saturation, then the advice; or a kept config
        # at the shift, then saturation, read by turns at the edge (11 steps in one CI run).
        # The first interval changes nothing (one is never a shift: loop.SUSTAINED), so
        # Triton's executions over it are the start config's.
        shifting = client.model_stats(MODEL)
        steps.step()
        assert not steps.results, "\n".join(lines)
        executed_before = sizes(client.model_stats(MODEL).minus(shifting))
        for _ in range(13):
            steps.step()
            if steps.results:
                break
        changed_at = len(lines)
        for _ in range(4):  # the traffic goes on: nothing more to change
            steps.step()
        # Then until an interval serves no more than the rate sent: the backlog the start
        # config left (Triton's queue and the clients') drained, or none drains. Served
        # faster, Triton still catches up, at full batches and with the backlog's waits.
        for _ in range(DRAIN_STEPS):
            first = client.model_stats(MODEL)
            began = time.monotonic()
            steps.step()
            last = client.model_stats(MODEL)
            served_per_s = last.minus(first).phase("success").count / (time.monotonic() - began)
            if served_per_s <= DRAINED * HIGH_RATE:
                break
    shifted = lines[before_shift:]
    said = "\n".join(["the autopilot said:", *lines, *recorded(db)])
    advised = [i for i, line in enumerate(shifted) if "for 2 intervals: advising" in line]
    # Called a rate shift, or saturation read from Triton's queue (up to 3 is past the
    # model's capacity).
    assert advised, said
    assert any(w in shifted[advised[0]] for w in ("shifted (rate x", "saturated (")), said
    # Each advice says the advisor's present first (not checked when saturated: advised
    # for more than it answered).
    assert all(shifted[i + 1].startswith(f"{MODEL}: present: ") for i in advised), said
    # One advice applies; any other (one at the shift's edge before it, a burstiness blip
    # after it) changes nothing. At the edge of saturation the window holds a backlog the
    # simulation does not reproduce: its present is off, and nothing is applied from it.
    applied = [i for i in advised if shifted[i + 2].startswith("APPLY")]
    assert len(applied) == 1, said
    assert all(
        shifted[i + 2].startswith(("KEEP", "NO CHANGE", "NO ADVICE"))
        for i in advised
        if i != applied[0]
    ), said
    assert all(
        "(present off)" in shifted[i + 2] for i in advised if shifted[i + 2].startswith("NO ADVICE")
    ), said
    with RunStore(db) as store:
        changes = store.list_changes(MODEL)
    assert [c.outcome for c in changes] == ["kept"], said
    (change,) = changes
    kept = from_model_config(change.new_config)
    assert kept.max_batch_size > start.max_batch_size, said
    assert opts.policy.outside(kept) == [], said  # the policy given is the one searched within
    assert from_model_config(client.model_config_json(MODEL)) == kept, said
    assert lines[changed_at - 1].startswith(f"KEPT {MODEL}: "), said
    applying = f"APPLY {MODEL}: {start.describe()} -> {kept.describe()}; predicted client p99 "
    assert shifted[applied[0] + 2].startswith(applying), said
    assert change.reason.startswith("client p99 "), said
    assert change.after["failed"] == 0, said
    # The baseline is taken over two intervals under the config kept, advising nothing.
    assert "under the config just kept: baseline interval 1 of 2" in lines[changed_at], said
    assert "the baseline for it from now on" in lines[changed_at + 1], said
    assert "(the mean of 2 intervals); no advice" in lines[changed_at + 1], said
    later = lines[changed_at:]
    assert not any(
        line.startswith(("DRY RUN", "WAIT", "APPLY", "KEPT", "ROLLED", "NOT APPLIED"))
        for line in later
    ), said
    # Triton's own statistics: batches past 3 formed once the change was in (over the last
    # interval), none before (over the first at the high rate); over the last interval, the
    # backlog drained, the offered rate was served from a queue that is no backlog.
    delta = last.minus(first)
    assert max(executed_before) <= start.max_batch_size < max(sizes(delta)), said
    print(said)  # the lines, for `pytest -s` (docs/validation/autopilot-rate-shift.md quotes them)
    assert delta.phase("success").count > 0.8 * HIGH_RATE * opts.interval_s, delta
    assert delta.phase("queue").ns / delta.phase("queue").count < 20e6, delta


def pilot_options(
    triton: Settings,
    db: Path,
    policy: Policy,
    min_gain: float,
    watch_s: float,
    interval_s: float = 4.0,
) -> loop.PilotOptions:
    """``batchscope autopilot --apply``'s loop in steps of ``interval_s``, with small searches
    (p99 <= 100 ms) to bound the tests' time, and the costs given (no probe beside the load).
    The traffic from the requests received, as the stack's autopilot reads it (its metrics)."""
    url = triton.url("triton_http")
    return loop.PilotOptions(
        url=url,
        model=MODEL,
        policy=policy,
        search=SearchOptions(p99_bound_s=0.1, requests=800, seeds=2, min_gain=min_gain),
        inputs=Options(
            url=url,
            model=MODEL,
            metrics_url=f"{triton.url('triton_metrics')}/metrics",
            cores=2,
            request_us=100,
            calibrations=db.parent / "c.json",
        ),
        interval_s=interval_s,
        store=db,
        headers=triton.admin_headers(),
        apply=True,
        watch_s=watch_s,
    )


def two_steps(opts: loop.PilotOptions, traffic: RunParams) -> tuple[loop.Pilot, list[str]]:
    """The loop, and what it said over its first two steps under ``traffic`` (the first
    advises; the second sees the traffic the config was chosen for). The traffic stops when
    the two steps end; its duration only bounds it: in a whole-suite run on a loaded
    machine the first step's advice outlasted a 30 s run, and the second step's window
    found no traffic at all."""
    assert opts.store is not None
    lines: list[str] = []
    steps = loop.Pilot(opts, lines.append)
    with poisson_traffic(traffic, opts.store):
        steps.step()
        steps.step()
    return steps, lines


def sizes(delta: ModelStats) -> set[int]:
    """The batch sizes Triton executed over a statistics delta: its own count, the observer
    the autopilot does not control."""
    return {size for size, n in delta.executions_by_size().items() if n > 0}


def recorded(db: Path) -> list[str]:
    """The store's record of each change, for a failure's message."""
    if not db.is_file():
        return []
    with RunStore(db) as store:
        return [
            f"recorded: {c.outcome} ({c.reason}) {from_model_config(c.old_config).describe()}"
            f" -> {from_model_config(c.new_config).describe()}"
            for c in store.list_changes(MODEL)
        ]
