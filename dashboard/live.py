"""The live view's data: KPIs and chart series of one model over a window.

Two kinds of KPI, so that the row and the charts give one answer: the rates and
per-request times are the charts' last point (the chart's query and rate window,
at its last timestamp), the others cover the whole window (or are a gauge now).
Plain Python over a ``PromClient``; the Streamlit page caches the result of
``fetch`` as a whole. The queries of one refresh run concurrently (they are
independent), so a refresh costs about the slowest query, not their sum.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pandas as pd

from dashboard import queries as q
from promapi import PromClient, PrometheusError, Range, promql_duration, rate_window_s

# KPI name -> query template, over the whole window (${w} = its length). Each yields at
# most one series.
KPI_QUERIES: dict[str, str] = {
    "max_batch_size": q.MAX_BATCH_SIZE,
    "batch_efficiency": q.BATCH_EFFICIENCY,
    "preferred_hit_ratio": q.PREFERRED_HIT_RATIO,
    "p99_request_s": q.P99_REQUEST_SECONDS,
    "pending_requests": q.PENDING_REQUESTS,
    "failure_ratio": q.FAILURE_RATIO,
}

# Chart series name -> range query template (${w} = the rate window of one point).
SERIES_QUERIES: dict[str, str] = {
    "inferences_per_s": q.INFERENCES_PER_S_OVER_TIME,
    "executions_per_s": q.EXECUTIONS_PER_S_OVER_TIME,
    "average_batch_size": q.AVERAGE_BATCH_SIZE_OVER_TIME,
    "queue_s_per_request": q.QUEUE_SECONDS_PER_REQUEST_OVER_TIME,
    "compute_s_per_request": q.COMPUTE_SECONDS_PER_REQUEST_OVER_TIME,
}

# KPI name -> query template, evaluated as the charts' last point: the rate window of one
# point, at the charts' last timestamp. A KPI with the name of a chart series equals that
# chart's last point; requests/s has no chart, and covers the same seconds.
LATEST_QUERIES: dict[str, str] = {
    "inferences_per_s": q.INFERENCES_PER_S,
    "executions_per_s": q.EXECUTIONS_PER_S,
    "average_batch_size": q.AVERAGE_BATCH_SIZE,
    "queue_s_per_request": q.QUEUE_SECONDS_PER_REQUEST,
    "compute_s_per_request": q.COMPUTE_SECONDS_PER_REQUEST,
    "requests_per_s": q.REQUESTS_PER_S,
}


@dataclass
class LiveData:
    """One refresh of the live view for one model."""

    model: str
    window: Range
    # When the KPIs over the window and the distribution were evaluated.
    at: float
    # The charts' last timestamp, and the seconds of rate() in each point: the latest KPIs.
    latest_at: float
    point_s: float
    kpis: dict[str, float | None]
    # name -> frame with columns time, value (empty when Prometheus has no samples)
    series: dict[str, pd.DataFrame]
    # batch_size (int) -> executions in the window, sizes ascending
    distribution: pd.DataFrame
    preferred_sizes: list[int] = field(default_factory=list)

    @property
    def has_traffic(self) -> bool:
        """Did the model execute anything in the window (not only lately)?"""
        return bool((self.series["executions_per_s"]["value"] > 0).any())


def kpi_time(now: float, scrape_interval_s: float) -> float:
    """When the KPIs over the window are evaluated: now, on a scrape boundary.

    Not the chart window's end: that is aligned to the chart's step, which can be
    minutes on a long window, and a gauge (pending requests) would lag by as much.
    """
    return math.floor(now / scrape_interval_s) * scrape_interval_s


def fetch_range(
    client: PromClient,
    model: str,
    window: Range,
    scrape_interval_s: float,
    target: str | None = None,
    at: float | None = None,
) -> LiveData:
    """Like ``fetch``, for an explicit window (a load run's start and end).

    The KPIs over the window cover its length up to ``at`` (default: the window's end);
    the latest KPIs are the charts' last point; the charts cover the window.
    """
    at = window.end if at is None else at
    sel = q.selector(model, target)
    # Triton's own summaries carry no target label.
    model_only = q.selector(model)
    whole = _window_duration(window)
    point_s = rate_window_s(window.step_s, scrape_interval_s)
    point = promql_duration(point_s)
    latest_at = last_point(window)

    jobs: dict[str, Callable[[], object]] = {}
    for name, template in KPI_QUERIES.items():
        s = model_only if template is q.P99_REQUEST_SECONDS else sel
        jobs[f"kpi:{name}"] = _scalar_job(client, q.build(template, s, whole), at)
    for name, template in LATEST_QUERIES.items():
        jobs[f"latest:{name}"] = _scalar_job(client, q.build(template, sel, point), latest_at)
    for name, template in SERIES_QUERIES.items():
        jobs[f"series:{name}"] = _range_job(client, q.build(template, sel, point), window)
    jobs["distribution"] = _instant_job(client, q.build(q.BATCH_SIZE_DISTRIBUTION, sel, whole), at)
    jobs["preferred"] = _instant_job(client, q.build(q.PREFERRED_BATCH_SIZES, sel), at)
    results = run_concurrently(jobs)

    kpis = {name: _as_float(results[f"kpi:{name}"]) for name in KPI_QUERIES}
    kpis.update({name: _as_float(results[f"latest:{name}"]) for name in LATEST_QUERIES})
    series = {name: _series(results[f"series:{name}"]) for name in SERIES_QUERIES}
    return LiveData(
        model=model,
        window=window,
        at=at,
        latest_at=latest_at,
        point_s=point_s,
        kpis=kpis,
        series=series,
        distribution=distribution_frame(_frame(results["distribution"])),
        preferred_sizes=sorted(
            int(v) for v in _frame(results["preferred"]).get("value", pd.Series(dtype=float))
        ),
    )


def last_point(window: Range) -> float:
    """The timestamp of a range query's last point: Prometheus steps from the start."""
    return window.start + math.floor(window.seconds / window.step_s) * window.step_s


def distribution_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """batch_size (int, ascending) and its share of the window's executions (0..1).

    A share, not a count: increase() extrapolates every size by the same factor, so the
    shares are exact while the counts are estimates.
    """
    if frame.empty or "batch_size" not in frame:
        return pd.DataFrame({"batch_size": pd.Series(dtype=int), "share": []})
    out = pd.DataFrame({"batch_size": frame["batch_size"].astype(int), "value": frame["value"]})
    out = out[out["value"] > 0]
    out["share"] = out["value"] / out["value"].sum()
    return out[["batch_size", "share"]].sort_values("batch_size").reset_index(drop=True)


def models(client: PromClient) -> list[str]:
    """Models the exporter reports, sorted."""
    frame = client.query(q.MODELS)
    return sorted(frame["model"]) if "model" in frame else []


def run_concurrently(jobs: dict[str, Callable[[], object]], workers: int = 8) -> dict[str, object]:
    """Run independent queries at once; the first error is raised after all have finished."""
    with ThreadPoolExecutor(max_workers=min(workers, len(jobs))) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        results: dict[str, object] = {}
        for name, future in futures.items():
            error = future.exception()
            if error is not None:
                raise error
            results[name] = future.result()
    return results


def _window_duration(window: Range) -> str:
    return f"{int(round(window.seconds))}s"


def _scalar_job(client: PromClient, expr: str, at: float) -> Callable[[], object]:
    return lambda: client.scalar(expr, at)


def _instant_job(client: PromClient, expr: str, at: float) -> Callable[[], object]:
    return lambda: client.query(expr, at)


def _range_job(client: PromClient, expr: str, window: Range) -> Callable[[], object]:
    return lambda: client.query_range(expr, window)


def _as_float(value: object) -> float | None:
    if value is None:
        return None
    number = float(value)  # type: ignore[arg-type]
    return None if math.isnan(number) else number


def _frame(value: object) -> pd.DataFrame:
    if not isinstance(value, pd.DataFrame):
        raise PrometheusError(f"internal: expected a frame, got {type(value).__name__}")
    return value


def _series(value: object) -> pd.DataFrame:
    frame = _frame(value)
    if frame.empty:
        return pd.DataFrame({"time": pd.Series(dtype="datetime64[ns, UTC]"), "value": []})
    return frame[["time", "value"]].reset_index(drop=True)
