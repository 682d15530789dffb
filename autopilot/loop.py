"""``batchscope autopilot``: watch a live model's traffic, re-advise when it shifts, and apply
the advice within a policy, one watched change at a time.

Each interval (:meth:`Pilot.step`) restores a kept config that a restarted Triton forgot,
otherwise measures the traffic through the one sampler, and advises when the traffic shifted
or the model saturated; a change goes through :func:`autopilot.apply.apply_and_watch`
(``--apply``) or is printed (a dry run). The policy (:mod:`autopilot.policy`) bounds what may
change and how often.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from advisor import advice
from advisor.advice import SearchOptions
from advisor.config import from_model_config
from advisor.fit import SATURATED_RATE, saturated_traffic, saturation
from advisor.inputs import InputError, Options, fit_window, watch
from advisor.model import OpenLoop
from advisor.predict import Prediction
from autopilot import apply
from autopilot.policy import Policy
from observe.window import Window
from runs.changes import Change
from runs.store import RunStore
from tritonapi.client import TritonClient, TritonError

# A rate fitted from a 30 s window of Poisson traffic at tens per second is within a few
# percent of the true one, and the advisor's delay grid steps by x2 to x2.5 (100, 250, 500,
# 1000, 2000 us): a rate x1.5 away is well past the noise and re-advises before the best
# delay is two grid steps off.
RATE_RATIO = 1.5
# The burstiness is fitted from the counts in 20 bins (inputs.sample_step); for Poisson
# traffic that estimate's standard error is about 0.16 whatever the rate (simulated), so two
# intervals of unchanged traffic differ by more than 0.5 in about 3 % of pairs by chance ...
CV_CHANGE = 0.5
# ... and in two intervals running in under 1 in 1,000. One odd interval (a client's retry
# burst, a pause of the sender) is not a shift: two in a row are.
SUSTAINED = 2
# After a kept change, the baseline is the mean of this many intervals under it. At 2,000/s
# under batches of 15 to 30 the burstiness read from Triton's counts moves more than the
# 0.16 above (0.65 to 1.73 under one config and the same Poisson clients here: a standard
# error near 0.28); one low first interval made the next two read as a shift and brought a
# second change (docs/validation.md, "The autopilot at 200/s then 2,000/s, on a model whose
# cost is time"). Two intervals halve the baseline's share of that noise.
BASELINE_INTERVALS = 2
DEFAULT_INTERVAL_S = 30.0
# What a change that was made (or tried) counts against min_minutes_between_changes; a
# re-applied kept config is a restore, not a new change.
CHANGES = ("kept", "rolled_back", "failed_to_apply", "rollback_failed")


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) until the block is over, then raise it: a change begun is
    finished and recorded, never left half made. The handler only notes the signal; outside
    the main thread (where no handler can be set) the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


class Refused(Exception):
    """The model may not be piloted (never_touch, sequence, ensemble, decoupled, no access):
    one line; nothing was watched or changed (the CLI exits 2)."""


@dataclass(frozen=True)
class PilotOptions:
    url: str
    model: str
    policy: Policy  # the bounds every search is cut to (search.policy is set from it)
    search: SearchOptions
    inputs: Options  # the advisor's inputs (url, model, costs given) for each advice
    apply: bool = False
    interval_s: float = DEFAULT_INTERVAL_S
    store: Path | None = None
    watch_s: float | None = None  # apply_and_watch's windows (default: sized to the rate)
    headers: dict[str, str] = field(default_factory=dict)  # the restricted APIs' key


def shift(base: OpenLoop, now: OpenLoop) -> str:
    """Why ``now`` is a shift from ``base`` ("" when it is not)."""
    ratio = now.rate_per_s / base.rate_per_s
    reasons = []
    if ratio > RATE_RATIO or ratio < 1 / RATE_RATIO:
        reasons.append(f"rate x{ratio:.2f}")
    if abs(now.cv - base.cv) > CV_CHANGE:
        reasons.append(f"burstiness {base.cv:.2f} -> {now.cv:.2f}")
    return ", ".join(reasons)


def traffic_text(t: OpenLoop) -> str:
    return f"{t.rate_per_s:,.1f}/s cv {t.cv:.2f}"


def check(client: TritonClient, opts: PilotOptions) -> None:
    """Refused unless the model may be piloted: not in never_touch, a dynamic-batching model
    with one response per request, and (with --apply) a repository API that answers us."""
    if opts.model in opts.policy.never_touch:
        raise Refused(
            f"autopilot: {opts.model} is in the policy's never_touch list; nothing is watched "
            "or changed (remove it from never_touch to pilot it)"
        )
    try:
        config = client.model_config_json(opts.model)
    except TritonError as exc:
        raise Refused(f"autopilot: {exc}; check --url and --model") from None
    try:
        apply.check_model(config)
        if opts.apply:
            apply.check_access(client)
    except apply.ApplyRefused as exc:
        text = str(exc).removeprefix("--apply: ")
        raise Refused(f"autopilot: {text.replace('is not applied', 'is not piloted')}") from None


class Pilot:
    """One model's autopilot: :meth:`step` is one interval."""

    def __init__(
        self,
        opts: PilotOptions,
        say: Callable[[str], None] = print,
    ) -> None:
        self.opts = opts
        self.say = say
        self.client = TritonClient(opts.url, headers=opts.headers)
        self.baseline: OpenLoop | None = None  # what the current config was chosen for
        self.shifted = 0  # consecutive intervals beyond the thresholds
        self.last_dry_change: float | None = None  # a dry run's "would apply", for the limit
        self.steps = 0
        self.gone_told: int | None = None  # the kept change a dry run said is gone
        self.failed_reapply: set[int] = set()  # kept changes whose re-apply failed
        self.results: list[apply.Result] = []
        # A config just kept changes what Triton's counts show of the same clients: a
        # backlog drains, executions stop stalling. Its first BASELINE_INTERVALS intervals
        # (not saturated) are its baseline.
        self.rebaseline = False
        self.settling: list[OpenLoop] = []
        self.saturated = 0  # consecutive intervals in which the model was saturated

    # ---- 1. the kept config after a restart ---------------------------------------------

    def kept(self) -> Change | None:
        """The newest kept (or re-applied) change of this server and model in the store."""
        if self.opts.store is None or not self.opts.store.is_file():
            return None
        with RunStore(self.opts.store) as store:
            found = store.list_changes(self.opts.model, limit=1000)
        mine = (c for c in found if c.server == self.client.url)
        return next((c for c in mine if c.outcome in ("kept", "reapplied")), None)

    def restore(self) -> bool:
        """Re-apply the kept config when the model serves another (a dry run says it is
        gone); whether the step ends here (a re-apply was tried, or the served config
        could not be read)."""
        kept = self.kept()
        if kept is None:
            return False
        try:
            served = self.client.model_config_json(self.opts.model)
        except TritonError as exc:
            self.say(f"{self.opts.model}: the served config cannot be read ({exc})")
            return True
        want, now = from_model_config(kept.new_config), from_model_config(served)
        if want == now:
            return False
        gone = (
            f"the kept config of change #{kept.id} ({want.describe()}) is gone: Triton serves "
            f"{now.describe()} (a restarted Triton serves config.pbtxt)"
        )
        if not self.opts.apply:
            if self.gone_told != kept.id:  # one line per kept change found gone
                self.say(f"GONE {self.opts.model}: {gone}; --apply loads it again")
                self.gone_told = kept.id
            return False  # a dry run goes on to measure and advise on what is served
        if kept.id in self.failed_reapply:
            return False  # told and recorded once: not tried again by this run
        problem = ""
        with deferred_interrupt():
            try:
                self.client.load_model(self.opts.model, kept.new_config)
                served_now = from_model_config(self.client.model_config_json(self.opts.model))
                if served_now != want:
                    problem = f"Triton serves {served_now.describe()} after the load"
            except TritonError as exc:
                problem = " ".join(str(exc).split())  # Triton's own reason spans lines
        outcome = "reapply_failed" if problem else "reapplied"
        reason = f"{gone}; " + (
            f"loading it again failed: {problem} (not tried again by this run)"
            if problem
            else "loaded it again"
        )
        if problem and kept.id is not None:
            self.failed_reapply.add(kept.id)
        self.record(
            Change(
                server=self.client.url,
                model=self.opts.model,
                old_config=served,
                new_config=kept.new_config,
                prediction=kept.prediction,
                before={},
                after={},
                outcome=outcome,
                reason=reason,
                at=time.time(),
            )
        )
        return True

    def record(self, change: Change) -> None:
        if self.opts.store is not None:
            with RunStore(self.opts.store, create=True) as store:
                change = Change(**{**asdict(change), "id": store.record_change(change)})
        result = apply.Result(change)
        self.results.append(result)
        self.say(result.line())

    # ---- 2-4. traffic, shift, advice -------------------------------------------------------

    def step(self) -> None:
        """One interval: restore, else measure, and advise when due.

        1. **The kept config still served?** The store's newest ``kept`` (or ``reapplied``)
           change of this server and model says what the model should serve. A restarted
           Triton forgets an override and serves ``config.pbtxt`` again: when the served
           batching differs, ``--apply`` loads the kept config again (``reapplied``, or
           ``reapply_failed``); a dry run prints one line that the kept config is gone. The
           step ends there: the next one measures the traffic under the config restored.
        2. **The traffic**: the model watched for the interval and the rate and burstiness
           fitted as ``advise --url`` does (:func:`advisor.inputs.watch`,
           :func:`advisor.inputs.fit_window`): from the requests received (Triton's executed
           count + pending gauge) with ``--metrics-url``, else from those answered.
        3. **Saturated?** When requests waited behind a backlog (:func:`advisor.fit.saturation`)
           the rate the counts show is the capacity, not what clients send: in
           :data:`SUSTAINED` consecutive intervals it advises for
           x:data:`advisor.fit.SATURATED_RATE` that rate, whatever the baseline.
           **Shifted?** Against the traffic the current config was chosen for: a rate beyond
           x:data:`RATE_RATIO` either way, or a burstiness (CV) moved by more than
           :data:`CV_CHANGE`, in :data:`SUSTAINED` consecutive intervals. After a change is
           kept, the first interval under it becomes the baseline and advises nothing: a
           config that serves better makes the same clients' traffic look smoother, which
           read against the old baseline was a shift, a second advice and a second change.
        4. **Advise** within the policy (:meth:`autopilot.policy.Policy.restrict` cuts the
           search space first) and apply, at most one change per the policy's
           ``min_minutes_between_changes``, counted from the store's record.
        """
        self.steps += 1
        if self.restore():
            return
        model, opts = self.opts.model, self.opts
        try:
            window = watch(opts.url, model, opts.interval_s, opts.inputs.metrics_url or None)
            seen = fit_window(window)
            traffic = seen.traffic
        except (InputError, ValueError) as exc:
            self.say(f"{model}: traffic not measured over {opts.interval_s:g} s ({exc})")
            return
        if self.saturated_step(window, seen.answered):
            return
        if self.rebaseline:
            self.settling.append(traffic)
            head = f"{model}: traffic {traffic_text(traffic)} under the config just kept"
            if len(self.settling) < BASELINE_INTERVALS:
                self.say(
                    f"{head}: baseline interval {len(self.settling)} of {BASELINE_INTERVALS}; "
                    "no advice"
                )
                return
            n = len(self.settling)
            mean = OpenLoop(
                sum(t.rate_per_s for t in self.settling) / n,
                sum(t.cv for t in self.settling) / n,
            )
            self.baseline, self.shifted, self.rebaseline, self.settling = mean, 0, False, []
            self.say(
                f"{head}: the baseline for it from now on, {traffic_text(mean)} (the mean of "
                f"{n} intervals); no advice"
            )
            return
        if self.baseline is None:
            self.say(f"{model}: traffic {traffic_text(traffic)}; no advice yet: advising")
        else:
            why = shift(self.baseline, traffic)
            self.shifted = self.shifted + 1 if why else 0
            base = f"{model}: traffic {traffic_text(traffic)} (config chosen for " + (
                f"{traffic_text(self.baseline)})"
            )
            if not why:
                self.say(f"{base}: within x{RATE_RATIO:g} and cv +/-{CV_CHANGE:g}; no advice")
                return
            if self.shifted < SUSTAINED:
                self.say(f"{base}: shifted ({why}), interval {self.shifted} of {SUSTAINED}")
                return
            self.say(f"{base}: shifted ({why}) for {SUSTAINED} intervals: advising")
        self.advise(window, traffic)

    def saturated_step(self, window: Window, traffic: OpenLoop) -> bool:
        """Whether the model was saturated in ``window`` (:func:`advisor.fit.saturation`);
        then the step ends here, advising (for SATURATED_RATE times the rate it answered)
        once it has been so for SUSTAINED intervals. A saturated model is advised on whatever
        the baseline says: the traffic its counts show is its capacity, not a shift. After a
        kept change, the first interval that is not saturated becomes the baseline (one
        still draining the old config's backlog is not)."""
        try:
            served = from_model_config(self.client.model_config_json(self.opts.model))
        except TritonError:
            self.saturated = 0
            return False
        assert window.delta is not None  # a window of the statistics API
        why = saturation(window.delta, served.delay_s)
        if not why:
            self.saturated = 0
            return False
        self.saturated += 1
        head = f"{self.opts.model}: traffic {traffic_text(traffic)} answered, saturated ({why})"
        if self.saturated < SUSTAINED:
            self.say(f"{head}: interval {self.saturated} of {SUSTAINED}")
            return True
        asked = saturated_traffic(traffic)  # what the advice, from the same window, asks for
        self.say(
            f"{head} for {SUSTAINED} intervals: advising for {traffic_text(asked)}, "
            f"x{SATURATED_RATE:g} the rate it answered"
        )
        self.saturated = 0
        self.advise(window, asked)
        return True

    def advise(self, window: Window, traffic: OpenLoop) -> None:
        opts, model = self.opts, self.opts.model
        try:
            # The policy given is the one searched within, whatever ``search`` held.
            search = replace(opts.search, policy=opts.policy)
            found = advice.advise(opts.inputs, search, window)
        except InputError as exc:
            self.say(f"NO ADVICE {model}: {exc}")
            return
        self.say(f"{model}: {found.present_line()}")
        if found.silent:
            # Nothing is applied from a model that does not reproduce the present; the
            # baseline stays unset, so the next interval's window is advised again.
            self.say(
                f"NO ADVICE {model}: the advisor's simulation does not reproduce this window "
                "(present off): nothing applied from an uncalibrated model"
            )
            return
        self.baseline, self.shifted = traffic, 0
        rec = found.recommendation
        bound = f"p99 <= {rec.p99_bound_s * 1e3:g} ms"
        if rec.best is None:
            self.say(f"NO CHANGE {model}: no config within the policy meets {bound}")
            return
        if rec.keep:
            outside = opts.policy.outside(rec.current.config)
            self.say(
                f"KEEP {model}: {rec.current.config.describe()}; none of the "
                f"{rec.considered} configs within the policy beats it by x{rec.min_gain:g} "
                f"under {bound}"
                + (f" (it is itself outside the policy: {'; '.join(outside)})" if outside else "")
            )
            return
        wait = self.too_soon()
        change = f"{rec.current.config.describe()} -> {rec.best.config.describe()}"
        if wait:
            self.say(f"WAIT {model}: {change} is due, but {wait}")
            return
        if not opts.apply:
            self.last_dry_change = time.time()
            self.say(
                f"DRY RUN {model}: would apply {change}; predicted {rec.best.latency_line()} "
                f"({rec.gain_line()}); --apply does it"
            )
            return
        self.say(
            f"APPLY {model}: {change}; predicted {rec.best.latency_line()} ({rec.gain_line()})"
        )
        self.apply(rec.best)

    def too_soon(self) -> str:
        """Why a change may not be made now ("" when it may)."""
        minutes = self.opts.policy.min_minutes_between_changes
        last = self.last_dry_change if not self.opts.apply else None
        if self.opts.store is not None and self.opts.store.is_file():
            with RunStore(self.opts.store) as store:
                made = [
                    c.at
                    for c in store.list_changes(self.opts.model, limit=100)
                    if c.server == self.client.url and c.outcome in CHANGES
                ]
            if made:
                last = max(made[0], last or 0.0)
        if last is None:
            return ""
        ago = (time.time() - last) / 60
        if ago >= minutes:
            return ""
        return (
            f"the last change was {ago:.1f} min ago and the policy allows one per {minutes:g} min"
        )

    def apply(self, best: Prediction) -> None:
        opts, model = self.opts, self.opts.model
        rate = best.traffic.rate_per_s if isinstance(best.traffic, OpenLoop) else None
        seconds = opts.watch_s or apply.watch_length(rate)[0]
        try:
            old = self.client.model_config_json(model)
            new = apply.override(old, best.config, model)
            with deferred_interrupt():  # a change begun is judged (or undone) and recorded
                result = apply.apply_and_watch(
                    self.client,
                    model,
                    old,
                    new,
                    apply.Predicted.of(best),
                    seconds,
                    store=opts.store,
                    say=self.say,
                )
        except apply.ApplyRefused as exc:
            self.say(f"NOT APPLIED {model}: {str(exc).removeprefix('--apply: ')}")
            return
        except TritonError as exc:
            self.say(f"NOT APPLIED {model}: {exc}; nothing was changed")
            return
        self.results.append(result)
        self.rebaseline, self.settling = result.change.outcome == "kept", []
        self.say(result.line())


def run(
    opts: PilotOptions,
    once: bool = False,
    for_s: float | None = None,
    say: Callable[[str], None] = print,
) -> Pilot:
    """Steps until ``once`` is done, ``for_s`` has passed, or Ctrl-C; Refused before the
    first when the model may not be piloted."""
    pilot = Pilot(opts, say)
    check(pilot.client, opts)
    say(
        f"autopilot {opts.model} at {opts.url}: "
        + ("applying" if opts.apply else "dry run (--apply changes the model)")
        + f", every {opts.interval_s:g} s, within: {opts.policy.describe()}; traffic from "
        + (
            f"the requests received (Triton's metrics at {opts.inputs.metrics_url})"
            if opts.inputs.metrics_url
            else "the requests answered (no --metrics-url)"
        )
    )
    deadline = None if for_s is None else time.monotonic() + for_s
    try:
        while True:
            pilot.step()
            if once or (deadline is not None and time.monotonic() >= deadline):
                break
    except KeyboardInterrupt:
        say("autopilot: stopped (Ctrl-C); a change under way was finished and recorded first")
    return pilot
