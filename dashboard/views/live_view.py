"""The live view: KPIs, four charts and firing alerts of one model, refreshed in place."""

from __future__ import annotations

import time

import streamlit as st

from dashboard import charts, features, fmt, gpu
from dashboard import data as cached
from dashboard import queries as q
from dashboard.live import LiveData, kpi_time
from dashboard.settings import DashboardSettings
from dashboard.views import doctor_view
from promapi import PrometheusError, aligned_range

TIME_RANGES = {
    "5 minutes": 300,
    "15 minutes": 900,
    "1 hour": 3600,
    "3 hours": 3 * 3600,
    "12 hours": 12 * 3600,
}


def render(
    cfg: DashboardSettings,
    model: str,
    window_s: int,
    auto_refresh: bool,
    target: str | None = None,
) -> None:
    """``target``: one server's series (the sidebar's choice with several), else every one."""
    run_every = cfg.refresh_s if auto_refresh else None
    st.fragment(_panel, run_every=run_every)(cfg, model, window_s, target)


def _panel(cfg: DashboardSettings, model: str, window_s: int, target: str | None) -> None:
    now = time.time()
    window = aligned_range(window_s, end=now, min_step_s=cfg.scrape_interval_s)
    try:
        data = cached.live_data(
            cfg.prometheus_url,
            model,
            window.start,
            window.end,
            window.step_s,
            cfg.scrape_interval_s,
            kpi_time(now, cfg.scrape_interval_s),
            target,
        )
    except PrometheusError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    if render_ensemble(cfg, model, target, data.at):
        pass  # an ensemble executes nothing itself: "no data" would mislead
    elif not data.has_traffic:
        st.info(
            f"No data yet for `{model}`: it executed nothing in the last "
            f"{_label(window_s)}. Send some load (the Load runs page, or `./stack/up` runs a "
            "short warm-up), or choose a longer time range.",
            icon=":material/hourglass_empty:",
        )
    render_kpis(data, window_s)
    render_cache_share(cfg, model, window_s, target, data.at)
    render_failure_reasons(cfg, model, window_s, target, data.at)
    render_charts(data)
    render_gpus(cfg)
    if data.has_traffic:  # the checks are cached for 30 s: refreshes do not re-run them
        doctor_view.render(cfg, model, window_s)
    st.caption(
        f"KPIs at {_clock(data.at)} UTC; charts up to {_clock(data.latest_at)} UTC, one point "
        f"every {window.step_s} s, each a rate over {data.point_s:g} s; "
        f"data from {cfg.prometheus_url}."
    )
    render_alerts(cfg)


def render_kpis(data: LiveData, window_s: int) -> None:
    """Two rows: the charts' last point, then what covers the whole range (said in the label)."""
    k = data.kpis
    latest = f"the charts' last point ({_clock(data.latest_at)} UTC, the last {data.point_s:g} s)"
    over = f"over the last {_short(window_s)}"
    # Labels stay short enough to show whole in a column: the window is in each one.
    span = f", {_short(window_s)}"
    st.caption(
        f"Rates and times per request: {latest}. Batch efficiency, preferred-size hits and "
        f"failed requests: {over}."
    )
    row1 = st.columns(5)
    row1[0].metric(
        "Inferences/s",
        fmt.number(k["inferences_per_s"]),
        help=f"The throughput chart's last point: {latest}.",
    )
    row1[1].metric(
        "Executions/s",
        fmt.number(k["executions_per_s"]),
        help=f"The throughput chart's last point: {latest}.",
    )
    row1[2].metric(
        "Average batch size",
        f"{fmt.number(k['average_batch_size'], 2)} / {fmt.number(k['max_batch_size'], 0)}",
        help=f"Inferences per execution, against max_batch_size; the batch-size chart's last "
        f"point: {latest}.",
    )
    row1[3].metric(
        "Queue time / request",
        fmt.millis(k["queue_s_per_request"]),
        help="Seconds requests waited in Triton's queue, per successful request; the queue "
        f"chart's last point: {latest}.",
    )
    row1[4].metric(
        "Compute time / request",
        fmt.millis(k["compute_s_per_request"]),
        help="Input, infer and output seconds of the batch a request ran in, per successful "
        f"request; the compute band's last point: {latest}.",
    )
    row2 = st.columns(6)
    row2[0].metric(
        f"Requests/s, last {data.point_s:g} s",
        fmt.number(k["requests_per_s"]),
        help=f"Answered and failed requests per second, over the seconds of {latest}.",
    )
    row2[1].metric(
        f"Batch efficiency{span}",
        fmt.ratio(k["batch_efficiency"]),
        help=f"Average batch size {over} / max_batch_size.",
    )
    row2[2].metric(
        f"Preferred hits{span}",
        fmt.ratio(k["preferred_hit_ratio"]),
        help=f"Share of executions {over} whose batch size is one of preferred_batch_size.",
    )
    row2[3].metric(
        f"Failed requests{span}",
        fmt.ratio(k["failure_ratio"]),
        help=f"Failed / all requests {over}, as Triton counts them (an error response "
        "from the python backend counts as a success there).",
    )
    row2[4].metric(
        "p99 latency, recent",
        fmt.millis(k["p99_request_s"]),
        help="From Triton's nv_inference_request_summary_us (summary_latencies=true), over "
        "Triton's own recent window; a dash when Triton has no recent requests or summaries "
        "are off.",
    )
    row2[5].metric("Pending requests now", fmt.count(k["pending_requests"]))


def render_ensemble(cfg: DashboardSettings, model: str, target: str | None, at: float) -> bool:
    """If ``model`` is an ensemble, say so and name its steps; True then."""
    expr = q.build(features.ENSEMBLE_STEPS, q.selector(model, target))
    try:
        frame = cached.instant_at(cfg.prometheus_url, expr, at)
    except PrometheusError:
        return False
    if frame.empty or "step_model" not in frame:
        return False
    steps = [
        (int(step), str(name))
        for step, name in zip(frame["step"], frame["step_model"], strict=True)
    ]
    st.info(features.ensemble_note(model, steps), icon=":material/account_tree:")
    return True


def render_cache_share(
    cfg: DashboardSettings, model: str, window_s: int, target: str | None, at: float
) -> None:
    """The share of requests the response cache answered: the batcher never saw them."""
    expr = q.build(features.CACHE_HIT_SHARE, q.selector(model, target), f"{window_s}s")
    try:
        share = cached.scalar_at(cfg.prometheus_url, expr, at)
    except PrometheusError:
        return
    note = features.cache_note(share)
    if note:
        st.info(note, icon=":material/cached:")


def render_failure_reasons(
    cfg: DashboardSettings, model: str, window_s: int, target: str | None, at: float
) -> None:
    """Why requests failed in the window, where Triton says (2.49+); nothing otherwise."""
    expr = q.build(q.FAILURES_BY_REASON, q.selector(model, target), f"{window_s}s")
    try:
        frame = cached.instant_at(cfg.prometheus_url, expr, at)
    except PrometheusError:
        return
    if frame.empty or "reason" not in frame:
        return
    parts = [
        f"{reason} {value:,.0f}"
        for reason, value in sorted(zip(frame["reason"], frame["value"], strict=True))
    ]
    st.warning(
        f"Failed requests in the window, by Triton's reason (estimates): {', '.join(parts)}",
        icon=":material/error:",
    )


def render_charts(data: LiveData) -> None:
    left, right = st.columns(2)
    with left:
        st.plotly_chart(charts.render_throughput(data), key="chart_throughput")
        st.caption(charts.CAPTIONS["throughput"])
        st.plotly_chart(charts.render_distribution(data), key="chart_distribution")
        st.caption(charts.CAPTIONS["distribution"])
    with right:
        st.plotly_chart(charts.render_batch_size(data), key="chart_batch_size")
        st.caption(charts.CAPTIONS["batch_size"])
        st.plotly_chart(charts.render_queue_compute(data), key="chart_queue_compute")
        st.caption(charts.CAPTIONS["queue_compute"])


def render_gpus(cfg: DashboardSettings) -> None:
    """Utilisation and memory per GPU (every target), or one line when there is none."""
    try:
        results = {
            name: cached.instant(cfg.prometheus_url, expr) for name, expr in gpu.QUERIES.items()
        }
    except PrometheusError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    figure = gpu.render_gpu(gpu.gpu_frame(results))
    if figure is None:
        st.caption(gpu.NO_GPU)
        return
    st.plotly_chart(figure, key="chart_gpu")
    st.caption(
        "Per GPU Triton reports: utilisation and memory in use, now. Low utilisation under "
        "load with small batches says the GPU waits for work that batching could bring."
    )


def render_alerts(cfg: DashboardSettings) -> None:
    st.subheader("Alerts")
    try:
        alerts = cached.alerts(cfg.prometheus_url)
    except PrometheusError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    firing = alerts[alerts["state"] == "firing"]
    if firing.empty:
        st.success("No alert is firing.", icon=":material/check_circle:")
    for row in firing.itertuples():
        where = ", ".join(f"{k}={row.labels[k]}" for k in ("model", "target") if k in row.labels)
        text = f"**{row.alertname}** ({row.severity or 'no severity'}): {row.summary}"
        st.error(text + (f" ({where})" if where else ""), icon=":material/notifications_active:")
    pending = alerts[alerts["state"] == "pending"]
    if not pending.empty:
        # One alert rule can be pending for several series (models, targets): name it once.
        names = list(dict.fromkeys(pending["alertname"]))
        st.caption("Pending (not firing yet): " + ", ".join(names))


def _label(window_s: int) -> str:
    for label, seconds in TIME_RANGES.items():
        if seconds == window_s:
            return label
    return f"{window_s} s"


def _short(window_s: int) -> str:
    """A range as a label says it: "5 min", "3 h"."""
    if window_s % 3600 == 0:
        return f"{window_s // 3600} h"
    if window_s % 60 == 0:
        return f"{window_s // 60} min"
    return f"{window_s} s"


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts))
