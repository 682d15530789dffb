"""The live view as a Grafana dashboard, built with Grafana's own Python SDK.

Every panel's PromQL is a template of :mod:`dashboard.queries` (or :data:`dashboard.gpu.QUERIES`)
filled in for Grafana: ``${sel}`` becomes the ``$target`` and ``$model`` variables,
``${w}`` becomes ``$__rate_interval`` for the charts (the same rule as
:func:`promapi.rate_window`) and for the KPIs that are the charts' last point (a range query
of the same step, reduced to its last value), and ``$__range`` for the KPIs over the time
range and the batch-size distribution, as in the Streamlit view. So the two dashboards cannot
drift: change a query in ``queries.py`` and ``batchscope render`` changes the Grafana
JSON (a test fails until the committed file follows).

The alerts are the one query the Streamlit view does not have (it reads
``/api/v1/alerts``): Prometheus' ``ALERTS`` series of the selected server and model,
firing and pending. The config changes of ``batchscope advise --apply`` are an annotation
on every chart (``triton_batching_config_changes_total`` moved).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from grafana_foundation_sdk.builders import barchart, common, stat, table, timeseries
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BigValueGraphMode,
    LegendDisplayMode,
    LegendPlacement,
    StackingMode,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from dashboard import gpu, live, queries
from promapi import MAX_POINTS

UID = "triton-batchscope"
TITLE = "Triton dynamic batching"
# The datasource variable: every panel and variable reads the Prometheus chosen there.
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
# What ${sel} becomes. "All" servers is the regex .* (allValue), a single one its URL.
SELECTOR = 'target=~"$target", model=~"$model"'
MODEL_ONLY = 'model=~"$model"'
# Each config change `batchscope advise --apply` made (kept, rolled back, ...), marked on
# every chart: the counter moved in the step.
CHANGES = f"changes(triton_batching_config_changes_total{{{SELECTOR}}}[$__interval]) > 0"
RANGE = "$__range"  # the dashboard's time range: the KPIs
RATE = "$__rate_interval"  # one point of a chart
# Alerts of the chosen server and model; "|" also matches alerts without that label
# (TritonDown, ExporterDown concern every model).
ALERTS = 'ALERTS{target=~"$target|", model=~"$model|"}'
VARIABLES = ("datasource", "target", "model")


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""


def kpi(template: str) -> str:
    return queries.build(template, SELECTOR, RANGE)


def chart(template: str) -> str:
    return queries.build(template, SELECTOR, RATE)


def per_target(expr: str) -> str:
    """A GPU query of the live view, narrowed to the chosen server."""
    narrowed = re.sub(r"\b(triton_batching_gpu_\w+)\b", r'\1{target=~"$target"}', expr)
    if narrowed == expr:
        raise ValueError(f"no GPU series to narrow in {expr!r}")
    return narrowed


# ---- what the panels show (title, unit, queries) -----------------------------------------

# One stat panel per KPI of the live view that is the charts' last point
# (dashboard.live.LATEST_QUERIES), in its order.
LATEST_PANELS: dict[str, tuple[str, str, str]] = {
    "inferences_per_s": ("Inferences/s", "ops", "batch elements per second"),
    "executions_per_s": ("Executions/s", "ops", "formed batches (model executions) per second"),
    "average_batch_size": ("Average batch size", "none", "inferences per execution"),
    "queue_s_per_request": ("Queue per request", "s", "seconds a request waited in the queue"),
    "compute_s_per_request": (
        "Compute per request",
        "s",
        "input + infer + output seconds of the batch a request ran in",
    ),
    "requests_per_s": ("Requests/s", "reqps", "answered and failed"),
}
# Said under each: the stat and the chart below have the same query and step. Requests/s
# has no chart: it covers the same seconds as the charts' last point.
LATEST_ABOUT = "; the last point of the chart below (a rate over $__rate_interval)"
UNCHARTED_ABOUT = "; over the $__rate_interval of the charts' last point"

# One stat panel per KPI of the live view over the time range (dashboard.live.KPI_QUERIES).
KPI_PANELS: dict[str, tuple[str, str, str]] = {
    "max_batch_size": ("max_batch_size", "none", "the config's limit, as Triton loaded it"),
    "batch_efficiency": (
        "Batch efficiency over the time range",
        "percentunit",
        "average batch / max_batch_size",
    ),
    "preferred_hit_ratio": (
        "Preferred-size hit ratio over the time range",
        "percentunit",
        "executions at a preferred batch size / all executions",
    ),
    "p99_request_s": (
        "p99 request latency, recent",
        "s",
        "Triton's own summary (summary_latencies=true), its recent window; Triton's series "
        "carry no target label, so this is the highest of every server's",
    ),
    "pending_requests": ("Pending requests now", "short", "queued now"),
    "failure_ratio": (
        "Failed requests over the time range",
        "percentunit",
        "failed / all, as Triton counts them (a python-backend error response is a success, "
        "a request rejected by a full queue is not counted)",
    ),
}


def _kpi_query(name: str) -> str:
    template = live.KPI_QUERIES[name]
    # As in the live view: Triton's own latency summary has no target label.
    sel = MODEL_ONLY if template is queries.P99_REQUEST_SECONDS else SELECTOR
    return queries.build(template, sel, RANGE)


LATEST_KPIS: list[tuple[str, str, list[Query], str]] = [
    (
        title,
        unit,
        [Query(chart(live.LATEST_QUERIES[name]))],
        about + (LATEST_ABOUT if name in live.SERIES_QUERIES else UNCHARTED_ABOUT),
    )
    for name, (title, unit, about) in LATEST_PANELS.items()
]
KPIS: list[tuple[str, str, list[Query], str]] = [
    (title, unit, [Query(_kpi_query(name))], about)
    for name, (title, unit, about) in KPI_PANELS.items()
]

CHARTS: list[tuple[str, str, list[Query], str]] = [
    (
        "Inferences/s against executions/s",
        "ops",
        [
            Query(chart(live.SERIES_QUERIES["inferences_per_s"]), "inferences/s"),
            Query(chart(live.SERIES_QUERIES["executions_per_s"]), "executions/s"),
        ],
        "The gap between the lines is batching at work.",
    ),
    (
        "Average batch size over time",
        "none",
        [
            Query(chart(live.SERIES_QUERIES["average_batch_size"]), "average batch size"),
            Query(chart(queries.MAX_BATCH_SIZE), "max_batch_size"),
            Query(chart(queries.PREFERRED_BATCH_SIZES), "preferred {{size}}"),
        ],
        "Inferences per execution, with max_batch_size and the preferred sizes as lines.",
    ),
    (
        "Queue against compute per request",
        "s",
        [
            Query(chart(live.SERIES_QUERIES["queue_s_per_request"]), "queue"),
            Query(chart(live.SERIES_QUERIES["compute_s_per_request"]), "compute"),
        ],
        "Seconds per successful request, stacked: where the latency goes.",
    ),
]

DISTRIBUTION = Query(kpi(queries.BATCH_SIZE_DISTRIBUTION), "{{batch_size}}")
GPU_CHARTS: list[tuple[str, str, Query]] = [
    (
        "GPU utilisation",
        "percentunit",
        Query(per_target(gpu.QUERIES["utilization"]), "{{gpu_uuid}}"),
    ),
    (
        "GPU memory used",
        "bytes",
        Query(per_target(gpu.QUERIES["memory_used_bytes"]), "{{gpu_uuid}}"),
    ),
]


def _target(q: Query, ref: str, instant: bool = False, table_format: bool = False) -> gp.Dataquery:
    target = gp.Dataquery().expr(q.expr).ref_id(ref).datasource(DATASOURCE)
    target = target.instant() if instant else target.range()
    if q.legend:
        target = target.legend_format(q.legend)
    if table_format:
        target = target.format(PromQueryFormat.TABLE)
    return target


def _refs(qs: list[Query], **kw: bool) -> list[gp.Dataquery]:
    return [_target(q, chr(ord("A") + i), **kw) for i, q in enumerate(qs)]


def _legend() -> common.VizLegendOptions:
    return (
        common.VizLegendOptions()
        .display_mode(LegendDisplayMode.LIST)
        .placement(LegendPlacement.BOTTOM)
        .show_legend(True)
    )


def variables() -> list[gd.DatasourceVariable | gd.QueryVariable]:
    server = (
        gd.QueryVariable("target")
        .label("Triton server")
        .datasource(DATASOURCE)
        .query("label_values(triton_batching_model_ready, target)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .include_all(True)
        .all_value(".*")
    )
    model = (
        gd.QueryVariable("model")
        .label("Model")
        .datasource(DATASOURCE)
        .query('label_values(triton_batching_model_ready{target=~"$target"}, model)')
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
    )
    return [
        gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus"),
        server,
        model,
    ]


def build() -> gd.Dashboard:
    board = (
        gd.Dashboard(TITLE)
        .uid(UID)
        .description(
            "What Triton's dynamic batcher forms and what it costs, from the exporter of "
            "triton-batchscope. Generated by `batchscope render` from "
            "dashboard/queries.py; do not edit by hand."
        )
        .tags(["triton", "batching"])
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .time("now-1h", "now")
        .refresh("30s")
    )
    for variable in variables():
        board = board.with_variable(variable)
    board = board.annotation(
        gd.AnnotationQuery()
        .name("Config changes (advise --apply)")
        .datasource(DATASOURCE)
        .expr(CHANGES)
        .enable(True)
        .icon_color("orange")
    )
    board = board.with_row(gd.Row("KPIs now: the charts' last point"))
    for title, unit, qs, about in LATEST_KPIS:
        board = board.with_panel(
            _stat(title, unit, about)
            .targets(_refs(qs))  # type: ignore[arg-type]
            # The charts' step: the same points, so the last one is the chart's.
            .max_data_points(MAX_POINTS)
            .reduce_options(common.ReduceDataOptions().calcs(["last"]))
        )
    board = board.with_row(gd.Row("KPIs over the time range"))
    for title, unit, qs, about in KPIS:
        board = board.with_panel(
            _stat(title, unit, about)
            .targets(_refs(qs, instant=True))  # type: ignore[arg-type]
            .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
        )
    board = board.with_row(gd.Row("Batching over time"))
    for title, unit, qs, about in CHARTS:
        panel = (
            timeseries.Panel()
            .title(title)
            .description(about)
            .unit(unit)
            .datasource(DATASOURCE)
            .targets(_refs(qs))  # type: ignore[arg-type]
            .max_data_points(MAX_POINTS)
            .legend(_legend())
            .height(8)
            .span(12)
        )
        if title.startswith("Queue"):
            panel = panel.stacking(common.StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(
                40
            )
        board = board.with_panel(panel)
    board = board.with_panel(
        barchart.Panel()
        .title("Batch sizes formed in the time range")
        .description(
            "Executions at each batch size over the time range (increase() estimates: "
            "compare the bars, not the totals)."
        )
        .datasource(DATASOURCE)
        .targets(_refs([DISTRIBUTION], instant=True, table_format=True))  # type: ignore[arg-type]
        .x_field("batch_size")
        .unit("short")
        .height(8)
        .span(12)
    )
    board = board.with_row(gd.Row("GPU and alerts"))
    for title, unit, q in GPU_CHARTS:
        board = board.with_panel(
            timeseries.Panel()
            .title(title)
            .description("Per GPU of the chosen server; empty on a server without a GPU.")
            .unit(unit)
            .datasource(DATASOURCE)
            .targets(_refs([q]))  # type: ignore[arg-type]
            .no_value("no GPU reported")
            .height(8)
            .span(6)
        )
    board = board.with_panel(
        table.Panel()
        .title("Alerts (firing and pending)")
        .description("Prometheus' alert rules (rules/settings.yaml) for this server and model.")
        .datasource(DATASOURCE)
        .targets(_refs([Query(ALERTS)], instant=True, table_format=True))  # type: ignore[arg-type]
        .no_value("no alert is firing or pending")
        .height(8)
        .span(12)
    )
    return _numbered(board)


def _stat(title: str, unit: str, about: str) -> stat.Panel:
    """A KPI's stat panel, without its query."""
    return (
        stat.Panel()
        .title(title)
        .description(about)
        .unit(unit)
        .datasource(DATASOURCE)
        .graph_mode(BigValueGraphMode.NONE)
        .height(4)
        .span(4)
    )


def _numbered(board: gd.Dashboard) -> gd.Dashboard:
    """Stable panel ids, 1.. in layout order (Grafana keys links and state on them)."""
    built = board.build()
    for number, panel in enumerate(built.panels or [], start=1):
        panel.id_val = number
    return board


def panel_queries() -> dict[str, list[str]]:
    """Panel title -> its PromQL, in the order of the dashboard (for the tests)."""
    out = {title: [q.expr for q in qs] for title, _, qs, _ in LATEST_KPIS + KPIS}
    out.update({title: [q.expr for q in qs] for title, _, qs, _ in CHARTS})
    out["Batch sizes formed in the time range"] = [DISTRIBUTION.expr]
    out.update({title: [q.expr] for title, _, q in GPU_CHARTS})
    out["Alerts (firing and pending)"] = [ALERTS]
    return out


def render() -> str:
    """The dashboard's JSON, as Grafana provisions it."""
    return json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
