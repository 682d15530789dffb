"""Triton's other batching features as series: queue limits, priorities, the response
cache, sequence batching and ensembles.

Each changes what the batcher sees, so each is shown beside the batching series: a bounded
queue's size per priority (Triton 2.51 counts a request rejected by a full queue nowhere, so
the bound beside the pending count is what the alert reads); the response cache's hits and
misses (a hit never reaches the batcher); the scheduler; and an ensemble's steps. An ensemble
has no batcher: Triton reports each of its requests as an "execution of batch size 1", and
its steps report the same inferences again, so its inference, execution and batch series are
left out and summing over models counts each inference once. What it writes, by example:
:class:`FeatureFamilies`.
"""

from __future__ import annotations

from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tritonapi.modelconfig import ModelConfig

MODEL = ["target", "model", "version"]
STATS = "Triton statistics API /v2/models/stats"
CONFIG = "Triton /v2/models/<model>/config"


def batches_of(config: ModelConfig) -> bool:
    """Whether the model's inference, execution and batch counts are its own batches."""
    return config.scheduler != "ensemble"


class FeatureFamilies:
    """The features' families for one scrape; ``add`` one model at a time.

    - a bounded queue: ``triton_batching_max_queue_size`` per queue (``priority="default"``,
      or the priority level). Triton 2.51 counts a request rejected by a full queue
      nowhere (not in the statistics' failures, not in
      ``nv_inference_request_failure{reason="REJECTED"}``, checked): the bound beside the
      pending count is what the alert reads, and the clients' HTTP 503s are the count;
    - the response cache: hits and misses from the statistics API, only for models with
      ``response_cache { enable: true }``. A hit never reaches the batcher: Triton leaves it
      out of ``inference_count`` and ``execution_count``, so the batch size and efficiency
      are those of the requests the batcher saw;
    - the scheduler: ``triton_batching_scheduler_info{scheduler="dynamic|sequence|ensemble|default"}``;
    - an ensemble: one ``triton_batching_ensemble_step_info`` per step. The ensemble's
      inference, execution and batch series are left out (its requests, failures and times
      stay): summing over models counts each inference once, at the step that executed it.

    Example::

        triton_batching_max_queue_size{target="http://127.0.0.1:8000",model="add_slow_queue",version="1",priority="default"} 2.0
        triton_batching_cache_hits_total{target="http://127.0.0.1:8000",model="add_cached",version="1"} 5.0
        triton_batching_scheduler_info{target="http://127.0.0.1:8000",model="add_pipeline",version="1",scheduler="ensemble"} 1.0
        triton_batching_ensemble_step_info{target="http://127.0.0.1:8000",model="add_pipeline",version="1",step="1",step_model="preprocess"} 1.0
    """  # noqa: E501

    def __init__(self) -> None:
        self.max_queue_size = GaugeMetricFamily(
            "triton_batching_max_queue_size",
            f"Requests a bounded queue holds before Triton rejects new ones with HTTP 503, per "
            f"queue: priority=default or the priority level ({CONFIG}: dynamic_batching."
            "default_queue_policy / priority_queue_policy .max_queue_size; unbounded queues "
            "have no series). Triton 2.51 counts these rejections nowhere.",
            labels=[*MODEL, "priority"],
        )
        self.queue_timeout = GaugeMetricFamily(
            "triton_batching_queue_timeout_seconds",
            f"Longest a request waits in a queue before Triton rejects or delays it, per queue "
            f"({CONFIG}: default_timeout_microseconds; none where requests never time out).",
            labels=[*MODEL, "priority"],
        )
        self.priority_levels = GaugeMetricFamily(
            "triton_batching_priority_levels",
            f"Priority levels of the dynamic batcher ({CONFIG}: dynamic_batching."
            "priority_levels; only models that have them).",
            labels=MODEL,
        )
        self.preserve_ordering = GaugeMetricFamily(
            "triton_batching_preserve_ordering_enabled",
            f"1 if responses are returned in request order ({CONFIG}: dynamic_batching."
            "preserve_ordering), else 0; only models with a dynamic batcher.",
            labels=MODEL,
        )
        self.cache_enabled = GaugeMetricFamily(
            "triton_batching_response_cache_enabled",
            f"1 if the model asks for the response cache, else 0 ({CONFIG}: "
            "response_cache.enable). Triton caches only if the server has a cache "
            "(--cache-config).",
            labels=MODEL,
        )
        self.cache_configured = GaugeMetricFamily(
            "triton_batching_response_cache_configured",
            "1 if the server has a response cache (--cache-config), else 0 (Triton /metrics: "
            "nv_cache_util is present only then).",
            labels=["target"],
        )
        self.cache_hits = CounterMetricFamily(
            "triton_batching_cache_hits",
            f"Requests answered from the response cache, never reaching the batcher ({STATS}: "
            "inference_stats.cache_hit.count; only models with the cache enabled, on a server "
            "that has one).",
            labels=MODEL,
        )
        self.cache_misses = CounterMetricFamily(
            "triton_batching_cache_misses",
            f"Requests looked up in the response cache and not found ({STATS}: "
            "inference_stats.cache_miss.count; only models with the cache enabled, on a server "
            "that has one).",
            labels=MODEL,
        )
        self.scheduler = GaugeMetricFamily(
            "triton_batching_scheduler_info",
            f"The scheduler that runs the model: dynamic, sequence, ensemble or default "
            f"(every request alone) ({CONFIG}).",
            labels=[*MODEL, "scheduler"],
        )
        self.ensemble_step = GaugeMetricFamily(
            "triton_batching_ensemble_step_info",
            f"One series per step of an ensemble, step counted from 1 ({CONFIG}: "
            "ensemble_scheduling.step[].model_name).",
            labels=[*MODEL, "step", "step_model"],
        )

    def add_target(self, url: str, cache_configured: bool) -> None:
        self.cache_configured.add_metric([url], 1.0 if cache_configured else 0.0)

    def add(self, labels: list[str], config: ModelConfig, raw_stats: Any = None) -> None:
        self.scheduler.add_metric([*labels, config.scheduler], 1.0)
        self.cache_enabled.add_metric(labels, 1.0 if config.response_cache else 0.0)
        for i, step in enumerate(config.ensemble, start=1):
            self.ensemble_step.add_metric([*labels, str(i), step.model], 1.0)
        d = config.dynamic
        if d is not None:
            self.preserve_ordering.add_metric(labels, 1.0 if d.preserve_ordering else 0.0)
            if d.priority_levels > 0:
                self.priority_levels.add_metric(labels, d.priority_levels)
            for priority, policy in d.queue_policies():
                if policy.max_queue_size > 0:
                    self.max_queue_size.add_metric([*labels, priority], policy.max_queue_size)
                if policy.default_timeout_us > 0:
                    self.queue_timeout.add_metric(
                        [*labels, priority], policy.default_timeout_us / 1e6
                    )

    def add_cache(
        self, labels: list[str], config: ModelConfig, hits: int | None, misses: int | None
    ) -> None:
        """Cache counters, for a model that enables the cache and where Triton reported them."""
        if not config.response_cache:
            return
        if hits is not None:
            self.cache_hits.add_metric(labels, hits)
        if misses is not None:
            self.cache_misses.add_metric(labels, misses)

    def families(self) -> list[Metric]:
        return [
            self.max_queue_size,
            self.queue_timeout,
            self.priority_levels,
            self.preserve_ordering,
            self.cache_enabled,
            self.cache_configured,
            self.cache_hits,
            self.cache_misses,
            self.scheduler,
            self.ensemble_step,
        ]
