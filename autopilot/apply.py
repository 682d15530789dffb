"""Apply a config to the live model, watch what clients see, and roll back by itself.

``advise --apply`` hands the recommended config to :func:`apply_and_watch`: one window
watched before the change, the config loaded as an override through Triton's repository API
(no file written, so a restarted Triton serves ``config.pbtxt`` again), one window watched
after, then the change kept or rolled back by :func:`judge`, and recorded in the run store's
change log. Acting on a server is kept apart from the advisor's modelling so that the model
can be used, and tested, without a server to change.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from advisor.config import BatcherConfig, from_model_config
from advisor.fit import queue_and_execution
from advisor.predict import MIN_GAIN, Prediction, quantile
from autopilot.verify import scratch_config
from observe.sampler import Sampler, watch
from runs.changes import Change
from runs.store import RunStore
from tritonapi.client import TritonClient, TritonError, TritonHTTPError
from tritonapi.modelconfig import parse_json
from tritonapi.stats import ModelStats

# A p99 over 2,000 requests moves by up to 20 % between runs of one config (the advisor's
# MIN_GAIN says the same): a window holds that many requests, within these bounds.
WATCH_REQUESTS = 2000
MIN_WATCH_S = 5.0
MAX_WATCH_S = 300.0
# Worse beyond noise: more than MIN_GAIN times the window before, and by more than the
# clients' own timing jitter (an asyncio sender wakes on a ~1 ms tick).
NOISE_RATIO = MIN_GAIN
NOISE_FLOOR_S = 0.001
# A reloaded python-backend model starts a new stub; its first requests pay for that.
SETTLE_S = 1.0
# Fewer client requests than this in a window and the clients' p99 is not compared (its
# 95% interval would reach the window's largest latency on both sides).
MIN_CLIENT_REQUESTS = 100
Z_95 = 1.96
# Seconds with client requests a window needs for its median second's p99.
MIN_SECONDS = 3
# How often the server is asked whether it still answers during a window.
POLL_S = 0.5
# How long a server that stopped answering is waited for before the rollback is given up.
COME_BACK_S = 30.0
# Triton's queue has drained when a request waits no longer than the config's delay plus
# this many executions (an instance busy with the batch before, and the next few at a load
# near capacity) plus NOISE_FLOOR_S. A backlog waits for all of those ahead of it: seconds.
DRAIN_EXECUTIONS = 4
# No request answered for this long while waiting: the window after says why.
DRAIN_IDLE_S = 2.0


class ServerStopped(Exception):
    """The server (or the model) stopped answering during a window."""


class ApplyRefused(Exception):
    """The change cannot be tried at all (no key, no repository API, no traffic): one line
    naming the fix; nothing was changed."""


@dataclass(frozen=True)
class Seen:
    """What the rule judges one watched window by: Triton's figures from the window (the one
    window type, :class:`observe.window.Window`) and what the clients saw in it (the store's
    records). Kept in the change log, before and after, as JSON."""

    seconds: float
    answered: int  # Triton's successes
    failed: int  # Triton's failures, plus the clients' failed and timed-out requests
    throughput_per_s: float
    server_mean_s: float | None  # Triton's mean time per request (statistics API)
    client_requests: int
    client_p99_s: float | None  # None with fewer than MIN_CLIENT_REQUESTS
    # The p99's 95% interval (order statistics, no assumption on the distribution).
    client_p99_low_s: float | None = None
    client_p99_high_s: float | None = None
    # The median over the window's seconds of each second's client p99 (None under
    # MIN_SECONDS seconds with requests): what a typical second saw. One stall of the
    # clients' machine makes the window's p99 but moves this little (the stall is one
    # second's or two), where a slower config makes every second worse.
    client_p99_median_second_s: float | None = None
    # The window after a change begins once Triton's queue has drained (Drain): how long
    # that took, and whether it did drain within its bound (None: a window before).
    drain_s: float | None = None
    drained: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        p99 = f"client p99 {self.client_p99_s * 1e3:.2f} ms" if self.client_p99_s else ""
        mean = (
            f"Triton's mean {self.server_mean_s * 1e3:.2f} ms"
            if self.server_mean_s is not None
            else "Triton's mean unknown"
        )
        return ", ".join(
            x
            for x in (
                f"{self.throughput_per_s:,.0f}/s",
                p99,
                mean,
                f"{self.failed} failed",
            )
            if x
        )


@dataclass(frozen=True)
class Predicted:
    """The advisor's prediction for the new config, in the terms a window measures."""

    client_p99_s: float | None
    server_p99_s: float | None
    throughput_per_s: float | None
    summary: dict[str, Any]

    @classmethod
    def of(cls, p: Prediction) -> Predicted:
        return cls(p.client_latency_p99_s, p.server_latency_p99_s, p.throughput_per_s, p.summary())


@dataclass(frozen=True)
class Verdict:
    outcome: str  # kept | rolled_back (before the rollback is tried)
    reason: str


def watch_length(rate_per_s: float | None) -> tuple[float, str]:
    """The window's length in seconds, and why (for the output)."""
    if not rate_per_s or rate_per_s <= 0:
        return MAX_WATCH_S, f"the rate is unknown: the longest window, {MAX_WATCH_S:g} s"
    wanted = float(math.ceil(WATCH_REQUESTS / rate_per_s))  # whole seconds, rounded up
    seconds = min(MAX_WATCH_S, max(MIN_WATCH_S, wanted))
    why = (
        f"{WATCH_REQUESTS:,} requests at {rate_per_s:,.0f}/s, over which a p99 moves by up "
        f"to {NOISE_RATIO - 1:.0%} between windows of one config"
    )
    if seconds != wanted:
        why += f" (bounded to {MIN_WATCH_S:g}..{MAX_WATCH_S:g} s)"
    return seconds, why


def given_length(seconds: float, rate_per_s: float | None) -> str:
    """Why a window given by hand (--watch-s) is as good as it is."""
    if not rate_per_s:
        return "given by --watch-s"
    n = seconds * rate_per_s
    if n >= WATCH_REQUESTS:
        return f"given by --watch-s: {n:,.0f} requests at {rate_per_s:,.0f}/s"
    return (
        f"given by --watch-s: {n:,.0f} requests at {rate_per_s:,.0f}/s, under the "
        f"{WATCH_REQUESTS:,} over which a p99 is within {NOISE_RATIO - 1:.0%}: a wider noise "
        "than the rule allows for, so a rollback is likelier"
    )


def rollback_rule(seconds: float) -> str:
    """The rule :func:`judge` applies, in one line."""
    return (
        f"roll back to the previous config if it fails to load, the server stops answering, "
        f"failures rise, or over the {seconds:g} s after the change (once Triton's queue has "
        f"drained, waiting up to {seconds:g} s) the p99 exceeds "
        f"x{NOISE_RATIO:g} the {seconds:g} s before plus {NOISE_FLOOR_S * 1e3:g} ms (and "
        "lies outside the 95% interval of the one before, or Triton's mean per request "
        "agrees), or Triton's mean gets worse by as much while the p99 does not improve by "
        "as much (or improves in a few seconds before only, the median second's p99 not "
        "improving by as much), or the throughput falls below "
        f"1/{NOISE_RATIO:g} of it with Triton's mean agreeing; a p99 worse in a few seconds "
        "only, while the median second's p99 and Triton's mean both did better, is a pause "
        "of the clients' machine and is kept, and so is one while the median second's p99 "
        "did better by as much (a pause of the whole machine), unless the throughput fell"
    )


def worse(after: float, before: float) -> bool:
    return after > before * NOISE_RATIO + NOISE_FLOOR_S


def quantile_interval(ordered: list[float], q: float = 0.99) -> tuple[float, float]:
    """A 95% confidence interval of the ``q`` quantile from sorted samples: the order
    statistics whose ranks (1-based) are n*q -/+ 1.96 sd of a binomial(n, q) count, rounded
    outwards (normal approximation), so a p99
    over a few hundred requests reads as wide as it is."""
    n = len(ordered)
    spread = Z_95 * math.sqrt(n * q * (1 - q))
    low = max(0, math.floor(n * q - spread) - 1)
    high = min(n - 1, math.ceil(n * q + spread) - 1)
    return ordered[low], ordered[high]


def intervals_apart(before: Seen, after: Seen) -> bool:
    """The clients' p99 after lies above the 95% interval of the one before (and its own
    interval too)."""
    return (
        after.client_p99_low_s is None
        or before.client_p99_high_s is None
        or after.client_p99_low_s > before.client_p99_high_s
    )


def triton_worse(before: Seen, after: Seen) -> bool:
    """Triton's own mean time per request (statistics API) got worse beyond noise: a second
    observer, steadier than a tail, that tells a slower server from noisier clients."""
    if before.server_mean_s is None or after.server_mean_s is None:
        return False
    return worse(after.server_mean_s, before.server_mean_s)


def triton_better(before: Seen, after: Seen) -> bool:
    """Triton's mean per request got better beyond noise (the mirror of triton_worse)."""
    if before.server_mean_s is None or after.server_mean_s is None:
        return False
    return worse(before.server_mean_s, after.server_mean_s)


def clients_stalled(before: Seen, after: Seen) -> bool:
    """The clients' p99 got worse in a few seconds only, and nothing else says the model did:
    Triton's mean per request got better beyond noise, and the median second's p99 is not
    worse beyond noise. The order-statistic interval assumes requests late independently of
    each other; a pause of the clients' machine (the load generator, not the server) makes
    dozens late at once, which that interval reads as a worse tail."""
    typical_before = before.client_p99_median_second_s
    typical_after = after.client_p99_median_second_s
    return (
        typical_before is not None
        and typical_after is not None
        and not worse(typical_after, typical_before)
        and triton_better(before, after)
    )


def stalled_before(before: Seen, after: Seen) -> bool:
    """The mirror of clients_stalled: the clients' p99 got better only because the window
    before held a pause of the clients' machine. Triton's mean per request got worse beyond
    noise, and the median second's p99 did not get better beyond noise: the typical second
    does not show the improvement that the top 1 % of the window before (a few seconds'
    late sends) shows. A config that really serves the tail better improves it in every
    second it is loaded, not only in the seconds the window before was stalled."""
    typical_before = before.client_p99_median_second_s
    typical_after = after.client_p99_median_second_s
    return (
        typical_before is not None
        and typical_after is not None
        and not worse(typical_before, typical_after)
        and triton_worse(before, after)
    )


def typical_second_better(before: Seen, after: Seen) -> bool:
    """The median second's client p99 got better beyond noise. A batching config acts on
    every execution, so a config that serves the tail worse does so in most loaded seconds;
    when the typical second improved beyond noise, a window's p99 and Triton's mean that say
    worse were made by a few seconds: a pause of the whole machine (server and clients both,
    which no other observer in the window tells from the config)."""
    typical_before = before.client_p99_median_second_s
    typical_after = after.client_p99_median_second_s
    return (
        typical_before is not None
        and typical_after is not None
        and worse(typical_before, typical_after)
    )


def _means(before: Seen, after: Seen) -> str:
    assert before.server_mean_s is not None and after.server_mean_s is not None
    return f"Triton's mean {before.server_mean_s * 1e3:.2f} -> {after.server_mean_s * 1e3:.2f} ms"


def _typical(before: Seen, after: Seen) -> str:
    """'; the median second's p99 a -> b ms' when both are known: a rollback's line says
    whether the typical second agreed."""
    typical_before = before.client_p99_median_second_s
    typical_after = after.client_p99_median_second_s
    if typical_before is None or typical_after is None:
        return ""
    return f"; the median second's p99 {typical_before * 1e3:.2f} -> {typical_after * 1e3:.2f} ms"


def judge(before: Seen, after: Seen, predicted: Predicted | None = None) -> Verdict:
    """Keep or roll back, from the two windows (the prediction only annotates).

    Worse beyond noise needs two things: the figure moved past x NOISE_RATIO + NOISE_FLOOR_S,
    and something independent of its own noise agrees: the clients' p99 intervals are apart,
    or Triton's mean per request moved the same way. Triton's mean worse beyond noise is
    enough by itself unless the clients' p99 improved beyond noise (a change may trade the
    mean for the tail, which is what the advisor optimises). A throughput drop counts only
    with Triton's mean agreeing (in an open loop, clients that sent less are not a slower
    server). A tail worse while the median second's p99 did better beyond noise is a few
    seconds' pause (:func:`typical_second_better`), kept unless the throughput fell.
    """
    if after.failed > before.failed:
        return Verdict(
            "rolled_back", f"failures rose: {after.failed} after, {before.failed} before"
        )
    slower = triton_worse(before, after)
    if after.client_p99_s is not None and before.client_p99_s is not None:
        name, now, then = "client p99", after.client_p99_s, before.client_p99_s
        promised = predicted.client_p99_s if predicted else None
        apart = intervals_apart(before, after)
        agrees = "" if apart else f" ({_means(before, after)} agrees; the p99 intervals overlap)"
        beyond = worse(now, then) and (apart or slower)
    elif after.server_mean_s is not None and before.server_mean_s is not None:
        name, now, then = "Triton's mean latency", after.server_mean_s, before.server_mean_s
        promised, agrees, beyond = None, "", slower
    else:
        return Verdict("rolled_back", "no latency measured after the change to judge it by")
    against = f"{now * 1e3:.2f} ms after, {then * 1e3:.2f} ms before" + (
        f", {promised * 1e3:.2f} ms predicted" if promised is not None else ""
    )
    if beyond and not slower and name == "client p99" and clients_stalled(before, after):
        assert before.client_p99_median_second_s is not None
        assert after.client_p99_median_second_s is not None
        return Verdict(
            "kept",
            f"client p99 {against}, from a few seconds only: the median second's p99 "
            f"{before.client_p99_median_second_s * 1e3:.2f} -> "
            f"{after.client_p99_median_second_s * 1e3:.2f} ms and {_means(before, after)} "
            "both did better (a stall of the clients' machine, not the config)",
        )
    fell = before.throughput_per_s > 0 and (
        after.throughput_per_s * NOISE_RATIO < before.throughput_per_s
    )
    tail_worse = beyond or (slower and name == "client p99" and not worse(then, now))
    if tail_worse and name == "client p99" and not fell and typical_second_better(before, after):
        means = f", {_means(before, after)}" if slower or not apart else ""
        assert before.client_p99_median_second_s is not None
        assert after.client_p99_median_second_s is not None
        return Verdict(
            "kept",
            f"client p99 {against}{means}, from a few seconds only: the median second's p99 "
            f"{before.client_p99_median_second_s * 1e3:.2f} -> "
            f"{after.client_p99_median_second_s * 1e3:.2f} ms did better beyond noise (a "
            "pause of the machine, not the config)",
        )
    if beyond:
        return Verdict(
            "rolled_back", f"{name} worse beyond noise: {against}{agrees}{_typical(before, after)}"
        )
    if slower and name == "client p99" and not worse(then, now):
        # The server got slower and the clients' tail did not get better for it: their p99
        # is the noisier figure (a busy client machine moves it), Triton's mean the steadier.
        return Verdict(
            "rolled_back",
            f"{_means(before, after)}, worse beyond noise, and the client p99 did not improve "
            f"({against})",
        )
    if slower and name == "client p99" and stalled_before(before, after):
        assert before.client_p99_median_second_s is not None
        assert after.client_p99_median_second_s is not None
        return Verdict(
            "rolled_back",
            f"{_means(before, after)}, worse beyond noise, and the median second's client "
            f"p99 did not improve ({before.client_p99_median_second_s * 1e3:.2f} -> "
            f"{after.client_p99_median_second_s * 1e3:.2f} ms); the client p99 improved from "
            f"a few seconds before only (client p99 {against}: a stall of the clients' "
            "machine before the change)",
        )
    if fell and slower:
        return Verdict(
            "rolled_back",
            f"throughput fell beyond noise: {after.throughput_per_s:,.0f}/s after, "
            f"{before.throughput_per_s:,.0f}/s before ({_means(before, after)})",
        )
    short = promised is not None and worse(now, promised)
    return Verdict(
        "kept",
        f"{name} {against}" + ("; short of the prediction, but not worse" if short else ""),
    )


class Observer:
    """Watches one model through the one sampler (:mod:`observe.sampler`): Triton's
    statistics, and the clients' requests in a store."""

    def __init__(
        self,
        client: TritonClient,
        model: str,
        store: Path | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.model = model
        self.store = store
        self.sleep = sleep

    def _stats(self, sampler: Sampler) -> ModelStats:
        """The model's statistics at the sampler's newest read."""
        stats = sampler.latest.get(self.model)
        if stats is None:
            raise ServerStopped(f"Triton at {self.client.url} has no statistics of {self.model}")
        return stats

    def watch(self, seconds: float) -> Seen:
        """Watch ``seconds``, reading every POLL_S; ServerStopped when the server or the
        model stops answering."""
        start = time.time()
        try:
            watched = watch(
                self.client, [self.model], seconds, step_s=POLL_S, strict=True, sleep=self.sleep
            )
        except TritonError as exc:
            raise ServerStopped(str(exc)) from None
        end = time.time()
        seen = watched.windows.get(self.model)
        if seen is None or seen.delta is None:
            raise ServerStopped(f"Triton at {self.client.url} has no statistics of {self.model}")
        delta = seen.delta
        answered = delta.phase("success").count
        spent = delta.phase("success").ns
        timed, client_failed = self._clients(start, end)
        latencies = sorted(latency for _, latency in timed)
        enough = len(latencies) >= MIN_CLIENT_REQUESTS
        low, high = quantile_interval(latencies) if enough else (None, None)
        elapsed = end - start
        return Seen(
            seconds=round(elapsed, 3),
            answered=answered,
            failed=delta.phase("fail").count + client_failed,
            throughput_per_s=answered / elapsed if elapsed > 0 else 0.0,
            server_mean_s=spent / answered / 1e9 if answered else None,
            client_requests=len(latencies) + client_failed,
            client_p99_s=quantile(latencies, 0.99) if enough else None,
            client_p99_low_s=low,
            client_p99_high_s=high,
            client_p99_median_second_s=median_second_p99(timed, start),
        )

    def drain(self, limit_s: float, delay_s: float) -> Drain:
        """Wait until Triton's queue has drained, for up to ``limit_s``.

        A config that serves better than the one before it still inherits that one's
        backlog: requests queued in Triton, and the clients' own requests waiting for a
        connection. While it drains, clients see the old config's waits, and a window then
        would judge the backlog, not the config. Each poll reads Triton's statistics: the
        requests answered since the last, their mean queue wait and their mean execution.
        Drained when that wait is no longer than :func:`drain_floor` (``delay_s`` is the new
        config's delay). Not waited for when no request is answered for DRAIN_IDLE_S, or past
        ``limit_s``: the window after then judges the config as it stands. A wait that grows
        is waited out too: after a reload the clients' own backlog refills Triton's queue
        (seen: 630 -> 957 ms in the 2 s after a reload to a config with more capacity).
        ServerStopped as :meth:`watch`."""
        start = time.monotonic()
        sampler = Sampler(self.client, [self.model], strict=True)
        try:
            sampler.start()
        except TritonError as exc:
            raise ServerStopped(str(exc)) from None
        last, answered_at = self._stats(sampler), start
        waits: list[float] = []

        def ended(drained: bool, why: str) -> Drain:
            first, final = (waits[0], waits[-1]) if waits else (None, None)
            seconds = time.monotonic() - start
            return Drain(round(seconds, 3), drained, why, first, final)

        while True:
            self.sleep(POLL_S)
            try:
                sampler.poll()
            except TritonError as exc:
                raise ServerStopped(str(exc)) from None
            now = self._stats(sampler)
            means = queue_and_execution(now.minus(last))
            if means is not None:
                last, answered_at = now, time.monotonic()
                waits.append(means[0])
                floor = drain_floor(delay_s, means[1])
                if waits[-1] <= floor:
                    return ended(True, f"drained to a wait within {floor * 1e3:.2f} ms")
            elif time.monotonic() - answered_at >= DRAIN_IDLE_S:
                return ended(False, f"answered nothing for {DRAIN_IDLE_S:g} s: not waited for")
            if time.monotonic() - start >= limit_s:
                return ended(False, f"had not drained within {limit_s:g} s: judged as it stands")

    def _clients(self, start: float, end: float) -> tuple[list[tuple[float, float]], int]:
        """(end, latency) of the clients' answered requests in the window, and how many
        failed."""
        if self.store is None or not self.store.is_file():
            return [], 0
        self.sleep(1.5)  # the load runs commit their records once a second
        with RunStore(self.store) as store:
            rows = store.window_outcomes(self.model, start, end)
        ok = [(ended, latency) for ended, latency, outcome in rows if outcome == "ok"]
        return ok, len(rows) - len(ok)


@dataclass(frozen=True)
class Drain:
    """The wait, after a change, for Triton's queue to drain (:meth:`Observer.drain`)."""

    seconds: float
    drained: bool
    why: str  # one phrase, for the progress line
    first_wait_s: float | None = None  # Triton's mean queue wait per request, first poll
    last_wait_s: float | None = None  # ... and last

    def line(self) -> str:
        waits = (
            f"; mean queue wait {self.first_wait_s * 1e3:,.2f} -> {self.last_wait_s * 1e3:,.2f} ms"
            if self.first_wait_s is not None and self.last_wait_s is not None
            else ""
        )
        return f"Triton's queue {self.why} ({self.seconds:.1f} s{waits})"


def drain_floor(delay_s: float, execution_s: float) -> float:
    """The longest mean queue wait of a drained queue (see DRAIN_EXECUTIONS)."""
    return delay_s + DRAIN_EXECUTIONS * execution_s + NOISE_FLOOR_S


def median_second_p99(timed: list[tuple[float, float]], start: float) -> float | None:
    """The median over whole seconds (from ``start``) of each second's p99 of the
    ``(end, latency)`` pairs; None with fewer than MIN_SECONDS seconds holding requests."""
    seconds: dict[int, list[float]] = {}
    for ended, latency in timed:
        seconds.setdefault(int(ended - start), []).append(latency)
    if len(seconds) < MIN_SECONDS:
        return None
    return statistics.median(quantile(v, 0.99) for v in seconds.values())


@dataclass(frozen=True)
class Result:
    change: Change

    def line(self) -> str:
        c = self.change
        verb = {
            "kept": "KEPT",
            "rolled_back": "ROLLED BACK",
            "failed_to_apply": "FAILED TO APPLY",
            "rollback_failed": "ROLLBACK FAILED",
            "reapplied": "REAPPLIED",
            "reapply_failed": "REAPPLY FAILED",
        }[c.outcome]
        return f"{verb} {c.model}: {c.reason}"


def override(server_config: dict[str, Any], config: BatcherConfig, model: str) -> dict[str, Any]:
    """The live model's config JSON with ``config``'s batching (the override to load)."""
    return scratch_config(server_config, config, model)


def check_access(client: TritonClient) -> None:
    """ApplyRefused (one line naming the fix) unless the repository API answers us."""
    try:
        client.repository_index()
    except TritonHTTPError as exc:
        if exc.status == 403:
            raise ApplyRefused(
                f"--apply: Triton at {client.url} restricts its repository API and refused "
                "the key (403); give --admin-key-file with the key of its restricted APIs "
                "(.stack/triton-admin.key for the stack's own Triton)"
            ) from None
        raise ApplyRefused(
            f"--apply: Triton at {client.url} has no usable repository API ({exc.status}); "
            "start it with --model-control-mode=explicit"
        ) from None
    except TritonError as exc:
        raise ApplyRefused(f"--apply: {exc}") from None


def check_model(config: dict[str, Any]) -> None:
    """ApplyRefused unless the model is one the advisor models: stateless requests, one
    response each, scheduled by Triton's dynamic (or default) batcher."""
    try:
        typed = parse_json(config)
    except ValueError as exc:
        raise ApplyRefused(f"--apply: the model's config does not parse ({exc})") from None
    if typed.scheduler in ("ensemble", "sequence"):
        raise ApplyRefused(
            f"--apply: {typed.name} is {'an' if typed.scheduler == 'ensemble' else 'a'} "
            f"{typed.scheduler} model; the advisor models the dynamic batcher only, so its "
            "advice is not applied to it"
        )
    policy = config.get("model_transaction_policy") or {}
    if isinstance(policy, dict) and policy.get("decoupled"):
        raise ApplyRefused(
            f"--apply: {typed.name} is decoupled (any number of responses per request); the "
            "advisor models one response per request, so its advice is not applied to it"
        )


def _load(client: TritonClient, model: str, config: dict[str, Any]) -> str:
    """Load ``config`` on the live model; "" when it is served, else why not."""
    try:
        client.load_model(model, config)
        served = client.model_config_json(model)
    except TritonError as exc:
        return str(exc)
    if from_model_config(served) != from_model_config(config):
        return (
            f"Triton serves {from_model_config(served).describe()}, not the config loaded "
            f"({from_model_config(config).describe()})"
        )
    return ""


def _serves(client: TritonClient, model: str, config: dict[str, Any]) -> bool:
    """Whether the model is ready and serves ``config``'s batching."""
    try:
        ready = model in client.ready_models()
        served = client.model_config_json(model)
    except TritonError:
        return False
    return ready and from_model_config(served) == from_model_config(config)


def _restore(client: TritonClient, model: str, old: dict[str, Any], wait_s: float) -> str:
    """Load the previous config again, waiting up to ``wait_s`` for a server that stopped
    answering; "" when it is served again, else why not."""
    deadline = time.monotonic() + wait_s
    while not client.is_ready(timeout_s=2.0):
        if time.monotonic() > deadline:
            return (
                f"the server did not answer again within {wait_s:g} s; when it restarts it "
                "serves config.pbtxt, not the previous config if that was itself an override"
            )
        time.sleep(POLL_S)
    return _load(client, model, old)


def apply_and_watch(
    client: TritonClient,
    model: str,
    old_config: dict[str, Any],
    new_config: dict[str, Any],
    predicted: Predicted | None,
    seconds: float,
    store: Path | None = None,
    come_back_s: float = COME_BACK_S,
    say: Callable[[str], None] = lambda line: None,
) -> Result:
    """Watch, apply ``new_config``, watch, keep or roll back, record.

    1. Watch the model for one window *before* the change (as long as the one after, so the
       two compare like for like).
    2. Load the new config on the live model as a config override
       (``POST /v2/repository/models/<m>/load`` with ``parameters.config``).
    3. Let the reloaded model settle (:data:`SETTLE_S`), wait (up to one window) until the
       backlog the old config left has drained from Triton's queue (:meth:`Observer.drain`),
       then watch one window *after*.
    4. Keep the change, or load the previous config again when the model failed to load, the
       server stopped answering, failures rose, the latency got worse beyond the noise, or the
       throughput fell beyond it (:func:`judge`).
    5. Record the change, the two windows, the prediction and the outcome (``runs.changes``).

    A window's figures come from Triton's statistics API (an observer the autopilot does not
    control) and, when load runs of the model are going on, from the clients' own records in
    the store. The p99 compared is the clients' when both windows hold at least
    :data:`MIN_CLIENT_REQUESTS` of them, otherwise Triton's mean time per request, and the
    outcome line says which.

    ``old_config`` is what the model serves now (Triton's config JSON); ``say`` hears the
    progress lines. ApplyRefused (nothing changed, nothing recorded) for a sequence, ensemble
    or decoupled model, when there is no traffic to judge by, or when the server is gone
    before the change."""
    check_model(old_config)
    observer = Observer(client, model, store)
    say(f"watching {seconds:g} s before the change")
    try:
        before = observer.watch(seconds)
    except ServerStopped as exc:
        raise ApplyRefused(f"--apply: before the change: {exc}; nothing was changed") from None
    if before.answered == 0 and before.client_requests == 0:
        raise ApplyRefused(
            f"--apply: no request of {model} in the {seconds:g} s before the change: a change "
            "is judged by the traffic it serves; apply it while the model has traffic"
        )
    say(f"before: {before.line()}")
    say(f"loading the new config on {model}")
    problem = _load(client, model, new_config)
    after: Seen | None = None
    if problem and _serves(client, model, old_config):
        # Triton refused the load and kept the model as it was (a config it rejects, or a
        # server without explicit model control): nothing to undo.
        outcome = "failed_to_apply"
        reason = f"the new config did not load ({problem}); the previous config is still served"
        if "not allowed" in problem:
            reason += "; start Triton with --model-control-mode=explicit"
    elif problem:
        undone = _restore(client, model, old_config, come_back_s)
        outcome = "failed_to_apply" if not undone else "rollback_failed"
        reason = f"the new config did not load ({problem}); " + (
            "the previous config is served again"
            if not undone
            else f"and the previous one could not be loaded again: {undone}"
        )
    else:
        time.sleep(SETTLE_S)
        delay_s = from_model_config(new_config).delay_s
        say(f"waiting up to {seconds:g} s for Triton's queue to drain")
        try:
            drain = observer.drain(seconds, delay_s)
            say(drain.line())
            say(f"watching {seconds:g} s after the change")
            after = replace(observer.watch(seconds), drain_s=drain.seconds, drained=drain.drained)
            verdict = judge(before, after, predicted)
        except ServerStopped as exc:
            verdict = Verdict("rolled_back", f"the server stopped answering ({exc})")
        outcome, reason = verdict.outcome, verdict.reason
        if after is not None and not after.drained:
            reason += f" (judged before Triton's queue drained: {drain.line()})"
        if outcome == "rolled_back":
            undone = _restore(client, model, old_config, come_back_s)
            if undone:
                outcome, reason = "rollback_failed", f"{reason}; rollback failed: {undone}"
            else:
                reason += "; the previous config is served again"
    change = Change(
        server=client.url,
        model=model,
        old_config=old_config,
        new_config=new_config,
        prediction=predicted.summary if predicted else {},
        before=before.to_json(),
        after=after.to_json() if after else {},
        outcome=outcome,
        reason=reason,
        at=time.time(),
    )
    if store is not None:
        with RunStore(store, create=True) as opened:
            change = Change(**{**asdict(change), "id": opened.record_change(change)})
    return Result(change)
