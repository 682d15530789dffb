"""The batch timeline: Triton's traces of one model's last seconds, as batches and waits.

Plain Python over the exporter's ``/api/traces`` (the exporter reads Triton's trace
files) and the trace reader of ``tritonapi.traces``: it rebuilds the batches, their
lanes and why each left; the Streamlit view only draws what this returns.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from tritonapi.client import TritonClient, TritonError
from tritonapi.modelconfig import ModelConfig
from tritonapi.traces import (
    REASON_TEXT,
    REASONS,
    Batch,
    ExporterUnavailable,
    TracedRequest,
    group_batches,
    percentile,
    read_exporter,
    start_window,
    stop_window,
    with_reasons,
)
from tritonapi.tracesafety import safe_window

MAX_SECONDS = 120
# At most this many batches are drawn: a browser chart of more says nothing more.
MAX_BATCHES = 2_000
SIZE_COLORS = ["#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"]
QUANTILES = (0.5, 0.9, 0.99)


class TimelineError(RuntimeError):
    """The traces cannot be shown; the message says why and what to do."""


@dataclass
class TraceWindow:
    model: str
    seconds: float
    requests: list[TracedRequest]
    batches: list[Batch]
    clock_offset_ns: int  # unix ns = steady ns + offset
    sample_ratio: float | None  # traced share now (0: tracing is off)
    trace_rate: int | None  # 1 in N: the rate the model is (or was last) traced at
    gaps: int
    config: ModelConfig | None
    drawn: int = 0  # batches in the figure (the newest, at most MAX_BATCHES)
    # Traced requests of windows that ended unfinished (Triton died, or tracing stopped).
    incomplete: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def span_s(self) -> tuple[float, float]:
        """First arrival and last compute end of the window, in unix seconds."""
        start = min(r.queue_start_ns for r in self.requests)
        end = max(r.compute_end_ns for r in self.requests)
        return (start + self.clock_offset_ns) / 1e9, (end + self.clock_offset_ns) / 1e9

    @property
    def exact(self) -> bool:
        """Every request traced: batch sizes and departure reasons are exact."""
        return self.trace_rate == 1


def fetch(
    exporter_url: str, triton_url: str, model: str, seconds: float, timeout_s: float = 5.0
) -> TraceWindow:
    """The last ``seconds`` of traced requests of ``model``; TimelineError if unavailable."""
    if not 0 < seconds <= MAX_SECONDS:
        raise TimelineError(f"choose a window of 1 to {MAX_SECONDS} seconds")
    try:
        found = read_exporter(exporter_url, model, seconds, timeout_s)
    except ExporterUnavailable as exc:
        raise TimelineError(
            f"{exc}: is the exporter running with --trace-file (./stack/up starts it so)?"
        ) from None
    try:
        config: ModelConfig | None = TritonClient(triton_url, timeout_s).model_config(model)
    except TritonError:
        config = None  # batches are still drawn, without departure reasons
    traced = found.requests
    batches = group_batches(traced)
    if config is not None:
        batches = with_reasons(batches, {model: config})
    return TraceWindow(
        model=model,
        seconds=seconds,
        requests=traced,
        batches=batches,
        clock_offset_ns=found.clock_offset_ns,
        sample_ratio=found.sample_ratio,
        trace_rate=found.trace_rate,
        gaps=found.gaps,
        config=config,
        drawn=min(len(batches), MAX_BATCHES),
        incomplete=sum(found.cut([r]) for r in traced),
        reasons=dict(Counter(b.reason for b in batches if b.reason)),
    )


def waits_table(window: TraceWindow, stats_mean_s: float | None) -> pd.DataFrame:
    """Exact queue-wait percentiles of the traced requests beside the statistics API's mean."""
    waits = [r.queue_wait_ns for r in window.requests]
    rows = [(f"p{round(q * 100)} (traces)", _ms_ns(percentile(waits, q))) for q in QUANTILES]
    mean = sum(waits) / len(waits) / 1e6 if waits else None
    rows += [
        ("mean (traces)", mean),
        ("mean (statistics API)", None if stats_mean_s is None else stats_mean_s * 1e3),
    ]
    return pd.DataFrame(rows, columns=["queue wait", "ms"])


def reason_shares(window: TraceWindow) -> pd.DataFrame:
    """Share of the window's batches by why they left, in the rule's order."""
    total = sum(window.reasons.values())
    rows = [
        (REASON_TEXT[r], window.reasons.get(r, 0), window.reasons.get(r, 0) / total if total else 0)
        for r in REASONS
    ]
    return pd.DataFrame(rows, columns=["why the batch left", "batches", "share"])


def _ms_ns(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e6


def _when(ns: int, offset: int) -> pd.Timestamp:
    return pd.Timestamp(ns + offset, unit="ns", tz="UTC")


def render_timeline(window: TraceWindow) -> go.Figure:
    """One lane per instance: each batch a bar from compute start to end, coloured by size;
    each request a tick at its arrival, joined to its batch. Hover tells size, reason, waits."""
    fig = go.Figure()
    batches = window.batches[-MAX_BATCHES:]
    off = window.clock_offset_ns
    top = max([b.size for b in batches] or [1])
    for size in sorted({b.size for b in batches}):
        mine = [b for b in batches if b.size == size]
        color = SIZE_COLORS[min(size - 1, len(SIZE_COLORS) - 1) if top <= 6 else (size * 5) // top]
        fig.add_trace(
            go.Bar(
                base=[_when(b.compute_start_ns, off) for b in mine],
                x=[max(b.compute_end_ns - b.compute_start_ns, 1) / 1e6 for b in mine],
                y=[f"lane {b.lane + 1}" for b in mine],
                orientation="h",
                marker_color=color,
                name=f"batch of {size}",
                hovertext=[_batch_hover(b) for b in mine],
                hoverinfo="text",
                width=0.5,
            )
        )
    xs: list[Any] = []
    ys: list[Any] = []
    for b in batches:
        for r in b.requests:
            xs += [_when(r.queue_start_ns, off), _when(b.compute_start_ns, off), None]
            ys += [f"lane {b.lane + 1}", f"lane {b.lane + 1}", None]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines",
            line={"color": "rgba(120,120,120,0.5)", "width": 1},
            name="wait in the queue",
            hoverinfo="skip",
        )
    )
    arrivals = [(r, b) for b in batches for r in b.requests]
    fig.add_trace(
        go.Scatter(
            x=[_when(r.queue_start_ns, off) for r, _ in arrivals],
            y=[f"lane {b.lane + 1}" for _, b in arrivals],
            mode="markers",
            marker={"symbol": "line-ns-open", "size": 12, "color": "#d62728"},
            name="request arrives",
            hovertext=[
                f"request {r.request_id or r.trace_id}: waited {r.queue_wait_ns / 1e3:,.0f} µs "
                f"for a batch of {b.size}"
                for r, b in arrivals
            ],
            hoverinfo="text",
        )
    )
    # Bars' x is a duration in ms on a date axis: Plotly reads it as ms from `base`.
    fig.update_xaxes(type="date", title="time (UTC)")
    fig.update_yaxes(title="instance lane", autorange="reversed")
    fig.update_layout(
        title=f"Batches of {window.model}, last {window.seconds:g} s of traces",
        height=160 + 60 * (1 + max([b.lane for b in batches] or [0])),
        barmode="overlay",
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": -0.35},
    )
    return fig


def _batch_hover(b: Batch) -> str:
    waits = ", ".join(f"{r.queue_wait_ns / 1e3:,.0f}" for r in b.requests)
    reason = REASON_TEXT.get(b.reason, "reason unknown (no config)")
    compute_us = (b.compute_end_ns - b.compute_start_ns) / 1e3
    return f"batch of {b.size}: {reason}<br>compute {compute_us:,.0f} µs<br>waits (µs): {waits}"


# ---- the dashboard's trace switch ------------------------------------------------------------


class TraceSwitch:
    """At most one trace window at a time for the whole dashboard process (every tab).

    It traces the model's next ``count`` requests (rate 1) and watches the window from a
    thread: Triton writes it when complete; after ``seconds`` an unfinished window is
    switched off, so a closed browser tab cannot leave Triton tracing.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.model = ""
        self.until = 0.0
        self.left = 0
        self.count = 0  # the window asked for (after the safe region's shrink)
        self.outcome = ""

    @property
    def active(self) -> bool:
        return time.time() < self.until and self.left > 0

    def start(
        self,
        triton_url: str,
        model: str,
        count: int,
        seconds: float,
        headers: dict[str, str] | None = None,
    ) -> str:
        """Start a window of up to ``count`` requests, shrunk to the server's safe region
        (tritonapi.tracesafety); returns the shrink note ("" when not shrunk)."""
        if not 0 < seconds <= MAX_SECONDS:
            raise TimelineError(f"trace for 1 to {MAX_SECONDS} seconds")
        with self._lock:
            if self.active:
                raise TimelineError(f"{self.model} is being traced already: wait for it")
            client = TritonClient(triton_url, headers=headers)
            try:
                window, _ = safe_window(client, model, count, shrink=True)
                start_window(client, model, window.count)
            except (TritonError, ValueError) as exc:
                raise TimelineError(f"cannot turn tracing on: {exc}") from None
            self.model, self.left, self.outcome = model, window.count, ""
            self.count = window.count
            self.until = time.time() + seconds
        threading.Thread(target=self._watch, args=(client, model), daemon=True).start()
        return window.note

    def _watch(self, client: TritonClient, model: str) -> None:
        try:
            while self.left and time.time() < self.until:
                time.sleep(0.5)
                setting = client.trace_settings(model)
                if "OFF" in (setting.get("trace_level") or ["OFF"]):
                    # Not by this switch: a restarted Triton starts with tracing off.
                    self.left, self.outcome = (
                        0,
                        f"tracing of {model} went off during the window (Triton restarted, or "
                        "someone stopped it): the traces written before are shown, marked "
                        "incomplete",
                    )
                    return
                self.left = max(int(setting.get("trace_count", "0") or 0), 0)
            if self.left:
                stop_window(client, model)
                self.outcome = (
                    f"the window of {model} ended with {self.left:,} requests still to come: "
                    "the parts Triton had written are shown, marked incomplete (send more load)"
                )
            else:
                self.outcome = f"{model}: window complete, its traces are shown"
        except TritonError as exc:
            self.left, self.outcome = (
                0,
                f"lost Triton during the window ({exc}); the supervisor starts it again, and "
                "the traces written before are shown, marked incomplete",
            )
