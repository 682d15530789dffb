"""The one recommendation: the search (:func:`advisor.predict.recommend`) over the inputs of
:mod:`advisor.inputs`, the same for every caller.

``advisor advise``, the dashboard's advisor panel, the doctor's fix lines and the dashboard's
"Why isn't batching working?" panel all ask :func:`advise`, so that one server, window and
bound get one config wherever it is asked for. Before any other config is predicted, the one
served is checked against the window (:func:`advisor.present.check_present`): calibrated, its
inferred release time stands under every prediction; off, nothing is searched and the
:class:`Advice` is ``silent``. Where the inputs recorded a shape mix (a stored run's, or the
probe's), the batches each shape forms alone come with it (:func:`advisor.shapes.by_shape`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from advisor.config import BatcherConfig
from advisor.inputs import InputError, Options, Prepared, gather
from advisor.model import CpuModel
from advisor.predict import (
    MIN_GAIN,
    Recommendation,
    SearchSpace,
    predict,
    recommend,
    resolve_objective,
)
from advisor.present import PresentCheck, check_present
from advisor.shapes import ShapeSplit, by_shape
from observe.window import Window


class Bounds(Protocol):
    """What the search needs of a policy: bounds that cut its space, and their one line."""

    def restrict(self, space: SearchSpace, current: BatcherConfig) -> SearchSpace: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class SearchOptions:
    """What the search looks for, as plain values (the CLI's flags, the callers' defaults)."""

    p99_bound_s: float = 0.010
    objective: str = "auto"
    seeds: int = 5
    requests: int = 5000
    max_batch_limit: int = 64
    min_gain: float = MIN_GAIN
    try_instances: tuple[int, ...] = ()
    # Wall time for the whole search; past it the answer says it was cut (Recommendation.
    # cut_note). A search on ordinary traffic ends well inside it; it bounds the rare
    # window whose configs each simulate slowly (a doctor run held for minutes in CI).
    budget_s: float = 120.0
    # The autopilot's policy (autopilot.policy.Policy): its bounds cut the search space
    # before the search.
    policy: Bounds | None = None
    # Processes the search's simulations run in (advisor.predict.recommend): the answer is
    # the same for any count. The command line uses the cores it may run on
    # (search_workers); the dashboard and the autopilot, which run it in a thread of a
    # long-lived process, one.
    workers: int = 1


def search_workers() -> int:
    """The cores this process may run on (its CPU set), at most 8: a search has about 60
    configs to simulate, each one process's work."""
    return max(1, min(len(os.sched_getaffinity(0)), 8))


@dataclass
class Advice:
    """The prepared inputs, the recommendation, and every note on where things came from."""

    prepared: Prepared
    recommendation: Recommendation
    notes: list[str]
    # Batches per shape, when the inputs hold more than one shape (None otherwise).
    shapes: ShapeSplit | None = None
    # The served config's present, simulated against the window (None: not checked, and
    # ``prepared.inputs.present_why`` says why).
    present: PresentCheck | None = None

    @property
    def silent(self) -> bool:
        """The present is off its bounds (or nothing executed): no config is recommended,
        and ``recommendation`` holds the current config's prediction alone."""
        return self.present is not None and not self.present.recommend_ready

    def present_line(self) -> str:
        """The present in one line, for every output: checked, or why it was not."""
        if self.present is not None:
            return self.present.line()
        return f"present: not checked ({self.prepared.inputs.present_why or 'no window'})"

    def present_json(self) -> dict[str, object]:
        if self.present is not None:
            return self.present.to_json()
        return {"status": "not checked", "recommend_ready": True, "line": self.present_line()}


def search(prepared: Prepared, options: SearchOptions) -> Advice:
    """The recommendation for ``prepared``; InputError (one line) when the search cannot run
    (an objective that needs what is unknown, a bad bound)."""
    inputs = prepared.inputs
    config = inputs.config
    space = SearchSpace(
        max_batch_sizes=tuple(
            m for m in SearchSpace().max_batch_sizes if m <= options.max_batch_limit
        ),
        instances=options.try_instances,
    )
    notes = list(inputs.notes)
    if options.policy is not None:
        space = options.policy.restrict(space, config)
        notes.append(f"searched within the policy: {options.policy.describe()}")
    notes.append(
        f"a change must gain at least x{options.min_gain:g} to be recommended (--min-gain)"
    )
    counts = space.instance_counts(config)
    notes.append(
        f"instance counts searched: {', '.join(map(str, counts))}"
        + (
            f" (the current; others with --try-instances, extrapolated from {config.instances})"
            if not options.try_instances
            else f" (hand-offs measured with {config.instances}: other counts are extrapolated)"
        )
    )
    present = (
        check_present(
            config,
            inputs.traffic,
            inputs.service,
            inputs.present,
            prepared.cpu,
            seed=1,
            stored=inputs.run is not None,
        )
        if inputs.present is not None
        else None
    )
    # Calibrated, the present's cost model (with the inferred parts) is the one the other
    # configs are predicted with; off, nothing is searched.
    cpu = present.cpu if present is not None and present.cpu is not None else prepared.cpu
    if present is not None and not present.recommend_ready:
        rec = _present_only(prepared, options, cpu)
    else:
        try:
            rec = recommend(
                config,
                inputs.traffic,
                inputs.service,
                options.p99_bound_s,
                cpu,
                options.objective,
                space,
                requests=options.requests,
                seeds=options.seeds,
                min_gain=options.min_gain,
                budget_s=options.budget_s,
                workers=options.workers,
            )
        except ValueError as exc:
            raise InputError(str(exc)) from None
        cut = rec.cut_note()
        if cut:
            notes.append(cut)
    # The batches each shape forms under the current config: a description, not advice,
    # so a present that is off still has it.
    mix = None
    if inputs.shapes and len(inputs.shapes) > 1:
        mix = by_shape(
            config,
            inputs.traffic,
            inputs.service,
            inputs.shapes,
            cpu,
            requests=options.requests,
        )
        notes.extend(mix.lines())
    return Advice(prepared, rec, notes, mix, present)


def _present_only(prepared: Prepared, options: SearchOptions, cpu: CpuModel) -> Recommendation:
    """The current config's prediction alone, no config searched: what a present that is
    off still shows (how far off it is), with nothing to act on."""
    inputs = prepared.inputs
    try:
        objective = resolve_objective(options.objective, inputs.traffic, cpu)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    current = predict(inputs.config, inputs.traffic, inputs.service, cpu, options.requests)
    return Recommendation(current, None, objective, options.p99_bound_s, considered=0)


def advise(opts: Options, options: SearchOptions, window: Window | None = None) -> Advice:
    """Gather the inputs ``opts`` names (``window``: one the caller already watched) and
    search them."""
    return search(gather(opts, window), options)
