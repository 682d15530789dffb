"""Batch timeline: every batch and every wait of one model's last seconds, from Triton's traces."""

from __future__ import annotations

import time

import streamlit as st

from dashboard import access, fmt, timeline
from dashboard import data as cached
from dashboard.settings import DashboardSettings
from promapi import PrometheusError
from stacksettings import admin_headers

# The button's window: shrunk to the server's safe region (tritonapi.tracesafety) on a
# Triton with the tracing crash.
TRACE_COUNT = 1_000
TRACE_SECONDS = 60
DEFAULT_MODEL = "batch_add_model"
WINDOWS = {"5 seconds": 5, "10 seconds": 10, "30 seconds": 30, "2 minutes": 120}
CAPTION = (
    "One lane per instance (lanes are inferred: batches that overlap ran on different "
    "instances). Each bar is a batch from compute start to end, coloured by its size; each "
    "red tick is a request's arrival, joined by a grey line to the batch that took it. Hover "
    "a bar for its size, why it left and each request's wait."
)


@st.cache_resource(show_spinner=False)
def switch() -> timeline.TraceSwitch:
    """One for the whole dashboard process: at most one trace window at a time."""
    return timeline.TraceSwitch()


def render(cfg: DashboardSettings, models: list[str]) -> None:
    st.header("Batch timeline")
    if not models:
        st.info("No model to show yet: start the stack with ./stack/up.")
        return
    left, middle, right = st.columns([2, 2, 3])
    # The model being traced, else the spec's model, else the first.
    preferred = [m for m in (switch().model, DEFAULT_MODEL) if m in models]
    st.session_state.setdefault("timeline_model", preferred[0] if preferred else models[0])
    model = left.selectbox("Model", models, key="timeline_model")
    label = middle.selectbox("Last", list(WINDOWS), index=1, key="timeline_window")
    with right:
        _trace_switch(cfg, model)
    try:
        window = timeline.fetch(cfg.exporter_url, cfg.triton_url, model, WINDOWS[label])
    except timeline.TimelineError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    if not window.requests:
        st.info(
            f"No traces of {model} in the last {WINDOWS[label]} s. Triton traces a model only "
            f"when asked: press 'Trace the next {TRACE_COUNT:,} requests' and send load, or run "
            f"`.venv/bin/batchscope trace --model {model}` from a shell.",
            icon=":material/hourglass_empty:",
        )
        return
    _notes(window)
    st.plotly_chart(timeline.render_timeline(window), width="stretch")
    st.caption(CAPTION)
    waits, reasons = st.columns(2)
    with waits:
        st.subheader("Queue wait")
        table = timeline.waits_table(window, _stats_mean(cfg, window))
        st.dataframe(fmt.table(table, {"ms": "{:.3f}"}), hide_index=True)
        st.caption(
            "Exact percentiles of the traced requests' waits (COMPUTE_START - QUEUE_START), "
            "beside the mean the statistics API gives over the same seconds: the mean hides "
            "the tail."
        )
    with reasons:
        st.subheader("Why batches left")
        if not window.exact:
            st.warning(
                "Sampled traces (not every request was traced): batch sizes and reasons "
                "need trace rate 1; the waits above are still exact for the sample.",
                icon=":material/warning:",
            )
        elif window.config is None:
            st.warning("The model's config is unavailable: no reasons.")
        else:
            shares = timeline.reason_shares(window)
            st.dataframe(fmt.table(shares, {"share": "{:.0%}"}), hide_index=True)


def _trace_switch(cfg: DashboardSettings, model: str) -> None:
    active = switch()
    if active.active:
        st.info(
            f"Tracing {active.model}: {active.left:,} requests to go, at most "
            f"{active.until - time.time():.0f} s more."
        )
        return
    if active.outcome:
        st.caption(active.outcome)
    # Tracing costs the server CPU, like a load run: the same token guards it off loopback.
    if not access.gate(cfg):
        return
    label = f"Trace the next {TRACE_COUNT:,} requests"
    if st.button(label, help=f"Triton traces them (at most {TRACE_SECONDS} s), then stops"):
        try:
            headers = admin_headers(cfg.admin_key_file)
            note = active.start(cfg.triton_url, model, TRACE_COUNT, TRACE_SECONDS, headers)
            st.success(
                f"Tracing the next {active.count:,} requests of {model}: send load, then refresh."
            )
            if note:
                st.caption(note)
        except timeline.TimelineError as exc:
            st.error(str(exc))


def _notes(window: timeline.TraceWindow) -> None:
    notes = [f"{len(window.requests):,} traced requests in {len(window.batches):,} batches"]
    if window.drawn < len(window.batches):
        notes.append(f"the newest {window.drawn:,} batches are drawn")
    if window.trace_rate and window.trace_rate > 1:
        notes.append(f"sampled: 1 request in {window.trace_rate} traced")
    if window.gaps:
        notes.append(f"{window.gaps} trace file(s) lost since the exporter started")
    if window.incomplete:
        notes.append(
            f"{window.incomplete:,} requests from a window that ended unfinished (Triton "
            "died or tracing was stopped): incomplete"
        )
    st.caption("; ".join(notes))


def _stats_mean(cfg: DashboardSettings, window: timeline.TraceWindow) -> float | None:
    """The statistics API's queue time per request (through the exporter) over the traced span.

    Evaluated one scrape after the last traced request, over the span (at least four
    scrapes, which increase() needs): the same seconds, give or take a scrape.
    """
    start_s, end_s = window.span_s()
    scrape = cfg.scrape_interval_s
    span = f"{max(round(end_s - start_s + scrape), round(4 * scrape), 1)}s"
    selector = f'model="{window.model}"'
    expr = (
        f"sum(increase(triton_batching_queue_seconds_total{{{selector}}}[{span}])) / "
        f"sum(increase(triton_batching_requests_success_total{{{selector}}}[{span}]))"
    )
    try:
        value = cached.scalar_at(cfg.prometheus_url, expr, round(end_s + scrape, 3))
    except PrometheusError:
        return None
    return None if value is None or value != value else value  # NaN: nothing counted
