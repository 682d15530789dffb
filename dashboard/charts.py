"""Plotly figures of the live view and of load runs. Each ``render_*`` returns a figure."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.live import LiveData

HEIGHT = 320
COLORS = {
    "inferences": "#1f77b4",
    "executions": "#ff7f0e",
    "batch": "#2ca02c",
    "queue": "#d62728",
    "compute": "#9467bd",
    "limit": "#7f7f7f",
    "preferred": "#17becf",
}

# One line under each chart: what it shows and how to read it.
CAPTIONS = {
    "throughput": (
        "Inferences/s (requests' batch elements) against executions/s (model runs). "
        "The gap between the lines is batching at work: equal lines mean every request "
        "ran alone."
    ),
    "batch_size": (
        "Average formed batch size over time (inferences / executions). The grey line is "
        "max_batch_size, the dotted lines the preferred sizes: a batcher that works sits "
        "near them under load."
    ),
    "distribution": (
        "How many executions had each batch size in the selected window. Bars only at 1 "
        "mean no batching; bars at the preferred sizes mean the batcher forms what you asked."
    ),
    "queue_compute": (
        "Per request: seconds waiting in Triton's queue (bottom) and computing (top), "
        "stacked. A growing queue band is the price paid for larger batches, or overload."
    ),
}


def _layout(fig: go.Figure, title: str, y_title: str, data: LiveData | None = None) -> go.Figure:
    if data is not None:
        # The whole selected window, even where there is no data yet: charts side by side
        # share one time axis.
        start = pd.Timestamp(data.window.start, unit="s", tz="UTC")
        end = pd.Timestamp(data.window.end, unit="s", tz="UTC")
        fig.update_xaxes(range=[start, end])
    fig.update_layout(
        title=title,
        height=HEIGHT,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": -0.2},
        yaxis_title=y_title,
        hovermode="x unified",
    )
    # Rates, sizes and times start at zero: a y axis from 10 to 30 would exaggerate noise.
    fig.update_yaxes(rangemode="tozero")
    return fig


def _line(frame: pd.DataFrame, name: str, color: str, **kwargs: object) -> go.Scatter:
    return go.Scatter(
        x=frame["time"], y=frame["value"], name=name, mode="lines", line={"color": color}, **kwargs
    )


def render_throughput(data: LiveData) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(_line(data.series["inferences_per_s"], "inferences/s", COLORS["inferences"]))
    fig.add_trace(_line(data.series["executions_per_s"], "executions/s", COLORS["executions"]))
    return _layout(fig, "Inferences/s vs executions/s", "per second", data)


def render_batch_size(data: LiveData) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(_line(data.series["average_batch_size"], "average batch size", COLORS["batch"]))
    limit = data.kpis.get("max_batch_size")
    if limit:
        fig.add_hline(
            y=limit,
            line={"color": COLORS["limit"], "width": 2},
            annotation_text=f"max_batch_size {limit:g}",
            annotation_position="top left",
        )
    for size in data.preferred_sizes:
        fig.add_hline(
            y=size,
            line={"color": COLORS["preferred"], "dash": "dot"},
            annotation_text=f"preferred {size}",
            annotation_position="bottom right",
        )
    top = max([limit or 1.0, *data.preferred_sizes, *data.series["average_batch_size"]["value"]])
    fig.update_yaxes(range=[0, top * 1.15])
    return _layout(fig, "Average batch size", "inferences per execution", data)


def render_distribution(data: LiveData) -> go.Figure:
    dist = data.distribution
    preferred = set(data.preferred_sizes)
    colors = [
        COLORS["preferred"] if size in preferred else COLORS["batch"] for size in dist["batch_size"]
    ]
    fig = go.Figure(
        go.Bar(
            x=dist["batch_size"].astype(str),
            y=dist["executions"],
            marker_color=colors,
            name="executions",
            text=dist["executions"].round(0).astype(int).astype(str),
            textposition="auto",
        )
    )
    fig.update_xaxes(title="batch size", type="category")
    return _layout(fig, "Batch sizes formed (executions in the window)", "executions")


def render_queue_compute(data: LiveData) -> go.Figure:
    fig = go.Figure()
    queue = _ms(data.series["queue_s_per_request"])
    compute = _ms(data.series["compute_s_per_request"])
    fig.add_trace(_line(queue, "queue", COLORS["queue"], stackgroup="per_request", fill="tonexty"))
    fig.add_trace(
        _line(compute, "compute", COLORS["compute"], stackgroup="per_request", fill="tonexty")
    )
    return _layout(fig, "Queue vs compute time per request", "milliseconds", data)


def _ms(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(value=frame["value"] * 1000.0)
