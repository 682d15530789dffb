"""The one recommendation: the search (:func:`advisor.predict.recommend`) over the inputs of
:mod:`advisor.inputs`, the same for every caller.

``advisor advise``, the dashboard's advisor panel, the doctor's fix lines and the dashboard's
"Why isn't batching working?" panel all ask :func:`advise`, so that one server, window and
bound get one config wherever it is asked for. Where the inputs recorded a shape mix (a stored
run's, or the probe's), the batches each shape forms alone come with it
(:func:`advisor.shapes.by_shape`), for every caller alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from advisor.config import BatcherConfig
from advisor.inputs import InputError, Options, Prepared, gather
from advisor.predict import MIN_GAIN, Recommendation, SearchSpace, recommend
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


@dataclass
class Advice:
    """The prepared inputs, the recommendation, and every note on where things came from."""

    prepared: Prepared
    recommendation: Recommendation
    notes: list[str]
    # Batches per shape, when the inputs hold more than one shape (None otherwise).
    shapes: ShapeSplit | None = None


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
    try:
        rec = recommend(
            config,
            inputs.traffic,
            inputs.service,
            options.p99_bound_s,
            prepared.cpu,
            options.objective,
            space,
            requests=options.requests,
            seeds=options.seeds,
            min_gain=options.min_gain,
            budget_s=options.budget_s,
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    cut = rec.cut_note()
    if cut:
        notes.append(cut)
    mix = None
    if inputs.shapes and len(inputs.shapes) > 1:
        mix = by_shape(
            config,
            inputs.traffic,
            inputs.service,
            inputs.shapes,
            prepared.cpu,
            requests=options.requests,
        )
        notes.extend(mix.lines())
    return Advice(prepared, rec, notes, mix)


def advise(opts: Options, options: SearchOptions, window: Window | None = None) -> Advice:
    """Gather the inputs ``opts`` names (``window``: one the caller already watched) and
    search them."""
    return search(gather(opts, window), options)
