"""GPU panels: utilisation and memory of the GPUs Triton reports, per target.

The exporter passes Triton's nv_gpu_* gauges through (triton_batching_gpu_*{target,
gpu_uuid}); a Triton without a GPU reports none, so the queries return nothing and the
panel says so in words instead of drawing empty axes.

Data layer: ``QUERIES`` (instant PromQL) -> one DataFrame per query, as an instant query
gives it (labels as columns, ``value``) -> ``gpu_frame`` -> ``render_gpu`` (a figure) or
``NO_GPU``.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

# Column of gpu_frame -> the instant query that fills it.
QUERIES = {
    "utilization": "max by (target, gpu_uuid) (triton_batching_gpu_utilization_ratio)",
    "memory_used_bytes": "max by (target, gpu_uuid) (triton_batching_gpu_memory_used_bytes)",
    "memory_total_bytes": "max by (target, gpu_uuid) (triton_batching_gpu_memory_total_bytes)",
}
NO_GPU = (
    "No GPU on this server: Triton reports no GPU metrics (it runs on the CPU, or its GPU "
    "metrics are off)."
)
KEYS = ["target", "gpu_uuid"]
COLUMNS = [*KEYS, *QUERIES, "memory_used_ratio"]
HEIGHT = 320


def gpu_frame(results: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per GPU from the instant-query results of ``QUERIES``; empty without a GPU.

    A GPU missing one gauge keeps its row with NaN there; the memory ratio exists only
    where both memory gauges do and the total is positive.
    """
    frame = pd.DataFrame(columns=KEYS)
    for column in QUERIES:
        result = results.get(column)
        if result is None or result.empty or not set(KEYS) <= set(result.columns):
            continue
        part = result[[*KEYS, "value"]].rename(columns={"value": column})
        frame = part if frame.empty else frame.merge(part, on=KEYS, how="outer")
    if frame.empty:
        return pd.DataFrame(columns=COLUMNS)
    for column in QUERIES:
        if column not in frame:
            frame[column] = float("nan")
    total = frame["memory_total_bytes"].where(frame["memory_total_bytes"] > 0)
    frame["memory_used_ratio"] = frame["memory_used_bytes"] / total
    return frame[COLUMNS].sort_values(KEYS).reset_index(drop=True)


def _label(row: pd.Series, targets: int) -> str:
    # GPU uuids are long; the first block tells GPUs apart on one host.
    short = str(row["gpu_uuid"])[:12]
    return f"{short} @ {row['target']}" if targets > 1 else short


def render_gpu(frame: pd.DataFrame) -> go.Figure | None:
    """Utilisation and memory in use per GPU, as two bar charts in percent; None without a
    GPU (show ``NO_GPU`` then)."""
    if frame.empty:
        return None
    labels = [_label(row, frame["target"].nunique()) for _, row in frame.iterrows()]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("GPU utilisation", "GPU memory in use"))
    fig.add_trace(
        go.Bar(x=labels, y=frame["utilization"] * 100, name="utilisation", marker_color="#2ca02c"),
        row=1,
        col=1,
    )
    used_gib = frame["memory_used_bytes"] / 2**30
    total_gib = frame["memory_total_bytes"] / 2**30
    fig.add_trace(
        go.Bar(
            x=labels,
            y=frame["memory_used_ratio"] * 100,
            name="memory",
            marker_color="#1f77b4",
            customdata=list(zip(used_gib, total_gib, strict=True)),
            hovertemplate="%{y:.1f}% (%{customdata[0]:.1f} of %{customdata[1]:.1f} GiB)",
        ),
        row=1,
        col=2,
    )
    fig.update_yaxes(range=[0, 100], ticksuffix="%")
    fig.update_layout(height=HEIGHT, showlegend=False, margin={"t": 40, "b": 20})
    return fig
