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
        "Share of the window's executions at each batch size (preferred sizes in blue). A "
        "single bar at 1 means no batching; bars at the preferred sizes mean the batcher forms "
        "what you asked."
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
            y=dist["share"] * 100.0,
            marker_color=colors,
            name="share of executions",
            text=[f"{s:.0%}" for s in dist["share"]],
            textposition="auto",
        )
    )
    fig.update_xaxes(title="batch size", type="category")
    fig.update_yaxes(ticksuffix="%")
    return _layout(fig, "Batch sizes formed (share of executions in the window)", "share")


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


RUN_CAPTIONS = {
    "timeline": (
        "Client side, per second of the run: requests answered (bars) and their p50/p99 "
        "latency (lines, right axis). A latency climb with flat bars means the server saturated."
    ),
    "batches": (
        "Server side, from Triton's statistics before and after the run: executions per batch "
        "size. Requests that overlapped in time were merged into the larger sizes."
    ),
    "server": (
        "Prometheus over the run's window (padded by two scrapes): the same charts as the live "
        "view, so the client's numbers can be read against what the server did."
    ),
}


def render_run_timeline(timeline: pd.DataFrame) -> go.Figure:
    fig = go.Figure()
    fig.add_trace(
        go.Bar(x=timeline["second"], y=timeline["ok"], name="ok/s", marker_color=COLORS["batch"])
    )
    for column, name, color in (
        ("p50_s", "p50", COLORS["inferences"]),
        ("p99_s", "p99", COLORS["queue"]),
    ):
        fig.add_trace(
            go.Scatter(
                x=timeline["second"],
                y=timeline[column] * 1000.0,
                name=f"{name} latency (ms)",
                mode="lines+markers",
                line={"color": color},
                yaxis="y2",
            )
        )
    fig.update_layout(
        yaxis2={"overlaying": "y", "side": "right", "title": "ms", "rangemode": "tozero"}
    )
    fig.update_xaxes(title="second of the run")
    return _layout(fig, "Per second of the run", "requests answered")


def render_run_batches(frame: pd.DataFrame, preferred: list[int]) -> go.Figure:
    colors = [
        COLORS["preferred"] if s in preferred else COLORS["batch"] for s in frame["batch_size"]
    ]
    fig = go.Figure(
        go.Bar(
            x=frame["batch_size"].astype(str),
            y=frame["executions"],
            marker_color=colors,
            text=frame["executions"].astype(str),
            textposition="auto",
            name="executions",
        )
    )
    fig.update_xaxes(title="batch size", type="category")
    return _layout(fig, "Batch sizes the server formed", "executions")


def render_comparison(table: pd.DataFrame, label_a: str, label_b: str) -> go.Figure:
    """The ratio B / A of each measure as horizontal bars around 1."""
    rows = table.dropna(subset=["B / A"])
    fig = go.Figure(
        go.Bar(
            x=rows["B / A"],
            y=rows["measure"],
            orientation="h",
            marker_color=[COLORS["batch"] if r >= 1 else COLORS["queue"] for r in rows["B / A"]],
            text=[f"{r:.2f}x" for r in rows["B / A"]],
            textposition="auto",
        )
    )
    fig.add_vline(x=1.0, line={"color": COLORS["limit"], "dash": "dot"})
    fig.update_layout(yaxis={"autorange": "reversed"})
    return _layout(fig, f"B / A  (A: {label_a}, B: {label_b})", "")


def render_changes(changes: pd.DataFrame) -> go.Figure:
    """The p99 before and after each config change of ``advise --apply``, side by side."""
    labels = [
        f"#{i} {m} ({o})"
        for i, m, o in zip(changes["id"], changes["model"], changes["outcome"], strict=True)
    ]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=labels, y=changes["p99 before (ms)"], name="before"))
    fig.add_trace(go.Bar(x=labels, y=changes["p99 after (ms)"], name="after"))
    fig.update_layout(
        barmode="group",
        yaxis_title="p99 (ms)",
        height=300,
        margin={"t": 20, "b": 20},
    )
    return fig
