"""What Triton's other batching features do to a model, in words for the dashboard.

Plain functions over the typed config (no Streamlit): the config view shows
:func:`config_notes` under each model, the live view :func:`cache_note` under the KPIs.
"""

from __future__ import annotations

from collections.abc import Mapping

from tritonapi.modelconfig import ModelConfig

# Share of the requests answered from the response cache in the window; no series
# without cache lookups (a model without the cache, or a server without one).
CACHE_HIT_SHARE = (
    "sum(increase(triton_batching_cache_hits_total{${sel}}[${w}]))"
    " / (sum(increase(triton_batching_cache_hits_total{${sel}}[${w}]))"
    " + sum(increase(triton_batching_cache_misses_total{${sel}}[${w}])) > 0)"
)
# 1 where the server the model is on has a response cache, 0 where it has none.
CACHE_CONFIGURED = (
    "max(triton_batching_response_cache_configured"
    " and on (target) group by (target) (triton_batching_model_config_info{${sel}}))"
)

# An ensemble's steps (label step, step_model); no series for any other model.
ENSEMBLE_STEPS = "max by (step, step_model) (triton_batching_ensemble_step_info{${sel}})"

PRESERVE_ORDERING_COST = (
    "preserve_ordering is on: responses leave in the order the requests arrived. A batch "
    "that finishes before an earlier one waits for it, so with several instances one slow "
    "batch delays every response behind it (head-of-line blocking); with one instance it "
    "costs nothing."
)


def config_notes(
    config: ModelConfig,
    configs: Mapping[str, ModelConfig] | None = None,
    server_cache: bool | None = None,
) -> list[str]:
    """One markdown line per feature the model uses, with what it changes for the batcher.

    ``configs``: the other models by name (an ensemble's steps); ``server_cache``: whether
    the server has a response cache (None: not known).
    """
    notes: list[str] = []
    if config.ensemble:
        notes += _ensemble(config, configs or {})
    if config.sequence is not None:
        notes.append(_sequence(config))
    if config.dynamic is not None:
        notes += _queues(config)
        if config.dynamic.preserve_ordering:
            notes.append(PRESERVE_ORDERING_COST)
    if config.response_cache:
        notes.append(_cache(server_cache))
    return notes


def _ensemble(config: ModelConfig, configs: Mapping[str, ModelConfig]) -> list[str]:
    lines = [
        f"Ensemble pipeline of {len(config.ensemble)} steps. The ensemble has no batcher of "
        "its own: each step batches on its own, and Triton's batch counts for the ensemble "
        "itself repeat its steps' (the exporter leaves them out)."
    ]
    for i, step in enumerate(config.ensemble, start=1):
        step_config = configs.get(step.model)
        what = (
            step_config.batching_summary()
            if step_config is not None
            else "not loaded: requests to the ensemble fail"
        )
        lines.append(f"{i}. `{step.model}`: {what}")
    return lines


def _sequence(config: ModelConfig) -> str:
    seq = config.sequence
    assert seq is not None
    controls = ", ".join(
        f"{name} ({kind.removeprefix('CONTROL_SEQUENCE_')})" for kind, name in seq.controls
    )
    return (
        f"Sequence batching ({seq.strategy}): each sequence holds a batch slot from its START "
        f"to its END request, and a batch takes at most one request per slot; a slot is freed "
        f"after {seq.max_sequence_idle_us / 1e6:g} s without a request. Control inputs: "
        f"{controls or 'none'}. A request of a new sequence without START is refused."
    )


def _queues(config: ModelConfig) -> list[str]:
    d = config.dynamic
    assert d is not None
    queues = d.queue_policies()
    lines = []
    if d.priority_levels > 1:
        levels = "; ".join(f"priority {level}: {policy.describe()}" for level, policy in queues)
        lines.append(
            f"{d.priority_levels} priority levels (default {d.default_priority_level}): a "
            f"request of a lower level is batched only when no higher one waits. Queues: "
            f"{levels}."
        )
    bounded = [policy for _, policy in queues if policy.max_queue_size]
    if bounded:
        lines.append(
            "A full queue answers HTTP 503 'Exceeds maximum queue size' at once; Triton 2.51 "
            "counts these rejections nowhere (not as failures, not as reason REJECTED): only "
            "the clients see them, and the QueueFull alert watches the pending count."
        )
    only = queues[0][1]
    if d.priority_levels <= 1 and (only.max_queue_size or only.default_timeout_us):
        lines.insert(0, f"Queue: {only.describe()}.")
    return lines


def _cache(server_cache: bool | None) -> str:
    if server_cache is False:
        return (
            "Response cache: enabled in the model, but the server has no cache configured "
            "(start Triton with --cache-config local,size=N): nothing is cached, every "
            "request reaches the batcher."
        )
    known = "" if server_cache else " (whether the server has a cache is not known here)"
    return (
        f"Response cache: enabled{known}. A hit is answered from the cache and never "
        "reaches the batcher, so the batch size and efficiency shown are those of the "
        "requests that did (the misses)."
    )


def cache_note(hit_share: float | None) -> str | None:
    """Under the live KPIs: how much of the traffic the batcher never saw."""
    if hit_share is None:
        return None
    return (
        f"{hit_share:.0%} of the lookups in this window were answered from the response cache "
        "and never reached the batcher: the batch size and efficiency above are those of the "
        f"other {1 - hit_share:.0%}."
    )


def ensemble_note(model: str, steps: list[tuple[int, str]]) -> str:
    """The live view of an ensemble: it forms no batches; its steps do."""
    chain = " → ".join(f"`{name}`" for _, name in sorted(steps))
    return (
        f"`{model}` is an ensemble ({chain}): it forms no batches of its own, so it has no "
        "batch size, efficiency or distribution here. Choose a step to see how that step "
        "batches; the ensemble's own requests, failures and queue time are below."
    )
