"""Every PromQL query the dashboard runs, as named constants, and how they are filled in.

The queries read the exporter's raw counters with rate()/increase() over the
selected window, so the dashboard works with or without the recording rules.
Ratios divide two increases over the same window, never averages of averages,
and a zero denominator is filtered out (``> 0``): no data gives no series, not
a NaN or a made-up zero. A Triton restart resets the counters; rate() and
increase() treat that as a counter reset, so nothing goes negative.

Placeholders: ``${sel}`` is the label matcher of the selected model, ``${w}``
the range of rate()/increase(). Other ``$`` signs (label_replace's ``$1``) are
left alone.
"""

from __future__ import annotations

import re

# ---- KPIs (instant queries) ---------------------------------------------------------
# ${w} is the window a KPI covers: the whole time range, or one chart point's rate window
# for the KPIs that are the charts' last point (dashboard.live.LATEST_QUERIES).

INFERENCES_PER_S = "sum(rate(triton_batching_inferences_total{${sel}}[${w}]))"
EXECUTIONS_PER_S = "sum(rate(triton_batching_executions_total{${sel}}[${w}]))"
# Inferences per execution: the batch size the batcher actually formed, on average.
AVERAGE_BATCH_SIZE = (
    "sum(increase(triton_batching_inferences_total{${sel}}[${w}]))"
    " / (sum(increase(triton_batching_executions_total{${sel}}[${w}])) > 0)"
)
MAX_BATCH_SIZE = "max(triton_batching_max_batch_size{${sel}})"
# Average batch size / max_batch_size, as the exporter's triton_batching_efficiency_ratio,
# but over the window instead of since Triton started.
BATCH_EFFICIENCY = f"({AVERAGE_BATCH_SIZE}) / ({MAX_BATCH_SIZE} > 0)"
# Executions whose batch size is a preferred size / all executions. The preferred
# sizes come as series with label size="N"; renamed to batch_size they select the
# matching series of the distribution. When no preferred size has formed (no such
# series, or one too new for increase()), the ratio is 0, not missing: the "or" gives
# 0 for a model that has preferred sizes, as the recording rule does.
PREFERRED_HIT_RATIO = (
    "(sum(increase(triton_batching_batch_executions_total{${sel}}[${w}])"
    " and on (target, model, version, batch_size)"
    " label_replace(triton_batching_preferred_batch_size{${sel}},"
    ' "batch_size", "$1", "size", "(.*)"))'
    " or 0 * group(triton_batching_preferred_batch_size{${sel}}))"
    " / (sum(increase(triton_batching_batch_executions_total{${sel}}[${w}])) > 0)"
)
QUEUE_SECONDS_PER_REQUEST = (
    "sum(increase(triton_batching_queue_seconds_total{${sel}}[${w}]))"
    " / (sum(increase(triton_batching_requests_success_total{${sel}}[${w}])) > 0)"
)
# Three sums, not one regex over __name__: increase() drops the names, and the three
# series of one model would then collide ("vector cannot contain metrics with the
# same labelset").
COMPUTE_SECONDS_PER_REQUEST = (
    "(sum(increase(triton_batching_compute_input_seconds_total{${sel}}[${w}]))"
    " + sum(increase(triton_batching_compute_infer_seconds_total{${sel}}[${w}]))"
    " + sum(increase(triton_batching_compute_output_seconds_total{${sel}}[${w}])))"
    " / (sum(increase(triton_batching_requests_success_total{${sel}}[${w}])) > 0)"
)
# Triton's own latency summary (--metrics-config=summary_latencies=true), in
# microseconds over Triton's sliding window; NaN when no request came recently,
# which ``>= 0`` drops.
P99_REQUEST_SECONDS = 'max(nv_inference_request_summary_us{${sel}, quantile="0.99"} >= 0) / 1e6'
PENDING_REQUESTS = "sum(triton_batching_pending_requests{${sel}})"
# Counts over a window are not shown: increase() extrapolates to the window's edges, so
# its totals are estimates (25 % high for a short burst between two scrapes). Rates, and
# ratios of two increases over the same window (where the extrapolation cancels), are
# what the dashboard shows.
REQUESTS_PER_S = (
    "sum(rate(triton_batching_requests_success_total{${sel}}[${w}]))"
    " + sum(rate(triton_batching_requests_failure_total{${sel}}[${w}]))"
)
FAILURE_RATIO = (
    "sum(increase(triton_batching_requests_failure_total{${sel}}[${w}]))"
    " / ((sum(increase(triton_batching_requests_success_total{${sel}}[${w}]))"
    " + sum(increase(triton_batching_requests_failure_total{${sel}}[${w}]))) > 0)"
)

# Failed requests by Triton's reason (REJECTED, CANCELED, BACKEND, OTHER; Triton 2.49+),
# only the reasons that failed in the window. No series on older Tritons.
FAILURES_BY_REASON = (
    "sum by (reason) (increase(triton_batching_request_failures_by_reason_total{${sel}}[${w}])) > 0"
)

# ---- charts (range queries; ${w} = the rate window of one point) -----------------------

# Same expressions as the latest KPIs, evaluated at every step: a KPI is its chart's last point.
INFERENCES_PER_S_OVER_TIME = INFERENCES_PER_S
EXECUTIONS_PER_S_OVER_TIME = EXECUTIONS_PER_S
AVERAGE_BATCH_SIZE_OVER_TIME = AVERAGE_BATCH_SIZE
QUEUE_SECONDS_PER_REQUEST_OVER_TIME = QUEUE_SECONDS_PER_REQUEST
COMPUTE_SECONDS_PER_REQUEST_OVER_TIME = COMPUTE_SECONDS_PER_REQUEST
# The batch sizes the batcher formed over the whole window (instant query, bars).
BATCH_SIZE_DISTRIBUTION = (
    "sum by (batch_size) (increase(triton_batching_batch_executions_total{${sel}}[${w}]))"
)
PREFERRED_BATCH_SIZES = "max by (size) (triton_batching_preferred_batch_size{${sel}})"

# ---- the stack's state --------------------------------------------------------------

# Models the exporter has seen (whether or not they served anything yet).
MODELS = "group by (model) (triton_batching_model_ready)"
# Per Triton target the exporter reads: 1 if it answered.
TARGETS_UP = "triton_batching_target_up"
# Each endpoint of each Triton the exporter reads: where from (url), 1 if it answered, and
# why not (reason); present while its target is read.
ENDPOINTS = (
    "max by (target, endpoint, url, reason) (triton_batching_endpoint_info)"
    " * on (target, endpoint) group_left ()"
    " max by (target, endpoint) (triton_batching_endpoint_up)"
)
# Did Prometheus reach the exporter and Triton at the last scrape (job -> 0/1)?
SCRAPE_UP = "max by (job) (up)"

_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def label_value(value: str) -> str:
    """A string as a PromQL double-quoted label value."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def selector(model: str, target: str | None = None) -> str:
    """The label matchers of one model (on every target the exporter reads, or one)."""
    if not model:
        raise ValueError("a model name is required")
    matchers = [f"model={label_value(model)}"]
    if target:
        matchers.append(f"target={label_value(target)}")
    return ", ".join(matchers)


def build(template: str, sel: str, window: str = "") -> str:
    """Fill a template's ``${sel}`` and ``${w}``; a template needing ``${w}`` must get one."""
    values = {"sel": sel, "w": window}

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            raise ValueError(f"unknown placeholder ${{{name}}} in {template!r}")
        if not values[name]:
            raise ValueError(f"{template!r} needs a value for ${{{name}}}")
        return values[name]

    return _PLACEHOLDER.sub(fill, template)
