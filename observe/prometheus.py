"""A window from the exporter's counters in Prometheus: ``increase()`` of each over the
window, so that a Triton restart inside it is a counter reset, not a negative number, and
the part of the window with traffic measured to about one scrape interval.
"""

from __future__ import annotations

import math

from observe.window import Window
from promapi import PromClient, increase_with_new, promql_duration


def _label(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


MAX_STEPS = 2000  # subquery steps when measuring the active part of a window


def _active_seconds(prom: PromClient, sel: str, seconds: float) -> float | None:
    """Seconds of the window in which requests arrived, to about one scrape interval.

    The scrape interval comes from the data: the samples of the success counter over its
    life in the window. Each step of a subquery then asks whether the counters grew over
    the last two to three scrapes; the steps that say yes are the busy time.
    """
    w = promql_duration(seconds)
    counter = f"triton_batching_requests_success_total{{{sel}}}"
    fine = max(1, math.ceil(seconds / MAX_STEPS))
    samples = prom.scalar(f"max(count_over_time({counter}[{w}]))")
    first = prom.scalar(f"time() - min_over_time(timestamp(max({counter}))[{w}:{fine}s])")
    if not samples or samples < 3 or not first:
        return None
    interval = first / (samples - 1)
    step = max(fine, math.ceil(interval))
    look = math.ceil(2.5 * interval)  # holds two samples wherever it falls
    grew = (
        f"sum(increase({counter}[{look}s]))"
        f" + sum(increase(triton_batching_requests_failure_total{{{sel}}}[{look}s])) > 0"
    )
    steps = prom.scalar(f"count_over_time(({grew})[{w}:{step}s])")
    return None if steps is None else min(seconds, steps * step)


def prometheus_window(
    prom: PromClient, model: str, seconds: float, target: str | None = None
) -> Window | None:
    """The model's last ``seconds`` from the exporter's counters; None if Prometheus has none."""
    sel = f"model={_label(model)}" + (f", target={_label(target)}" if target else "")
    w = promql_duration(seconds)

    def total(metric: str) -> float | None:
        return prom.scalar(f"sum(increase({metric}{{{sel}}}[{w}]))")

    if prom.scalar(f"count(triton_batching_executions_total{{{sel}}})") is None:
        return None
    executions = increase_with_new(f"triton_batching_batch_executions_total{{{sel}}}", w)
    by_size = prom.query(f"sum by (batch_size) ({executions})")
    sizes = (
        {int(row["batch_size"]): float(row["value"]) for _, row in by_size.iterrows()}
        if "batch_size" in by_size
        else {}
    )
    compute = [
        total(f"triton_batching_compute_{p}_seconds_total") for p in ("input", "infer", "output")
    ]
    gpu_sel = f"{{target={_label(target)}}}" if target else ""
    gpus = prom.scalar(f"count(triton_batching_gpu_utilization_ratio{gpu_sel})")
    active = _active_seconds(prom, sel, seconds)
    busy = f", traffic during {active:,.0f} s of it" if active is not None else ""
    return Window(
        seconds=seconds,
        source=f"Prometheus at {prom.base_url}, the exporter's counters over the last {w}{busy}",
        active_seconds=active,
        requests_ok=total("triton_batching_requests_success_total") or 0.0,
        requests_failed=total("triton_batching_requests_failure_total") or 0.0,
        inferences=total("triton_batching_inferences_total") or 0.0,
        executions=total("triton_batching_executions_total") or 0.0,
        queue_s=total("triton_batching_queue_seconds_total") or 0.0,
        compute_s=math.fsum(c or 0.0 for c in compute),
        executions_by_size=sizes,
        pending_max=prom.scalar(
            f"max(max_over_time(triton_batching_pending_requests{{{sel}}}[{w}]))"
        ),
        gpu_utilization=prom.scalar(
            f"avg(avg_over_time(triton_batching_gpu_utilization_ratio{gpu_sel}[{w}]))"
        ),
        gpus=int(gpus) if gpus is not None else 0,
    )
