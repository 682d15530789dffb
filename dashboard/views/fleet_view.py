"""The fleet view: every watched server and model in one table, the worst batcher first."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from dashboard import data as cached
from dashboard import fleet
from dashboard import queries as q
from dashboard.settings import DashboardSettings
from promapi import PrometheusError

WINDOWS = {"5 minutes": 300, "15 minutes": 900, "1 hour": 3600}
# About 15 rows; a fleet of hundreds scrolls inside the table (it draws only what shows).
TABLE_HEIGHT_PX = 560


def render(cfg: DashboardSettings) -> None:
    st.header("Fleet")
    left, right = st.columns([1, 3])
    window = left.selectbox("Time range", list(WINDOWS), key="fleet_window")
    wanted = right.text_input(
        "Search",
        key="fleet_search",
        placeholder="a model or a server; several words must all match",
    )
    try:
        frame = cached.fleet(cfg.prometheus_url, WINDOWS[window], _step(cfg))
    except PrometheusError as exc:
        st.error(str(exc), icon=":material/error:")
        return
    if frame.empty:
        st.info(
            "No server reports yet: Prometheus has no series from the exporter. Wait for the "
            f"first scrapes, or check {cfg.prometheus_url}/targets.",
            icon=":material/hourglass_empty:",
        )
        return
    for target in sorted(set(frame.loc[~frame["up"], "target"])):
        st.error(
            f"The exporter cannot read Triton at {target}: it is down or unreachable "
            "(triton_batching_target_up is 0); its models keep their rows.",
            icon=":material/error:",
        )
    endpoints = _endpoints(cfg)
    for row in endpoints[~endpoints["up"]].itertuples():
        st.warning(
            f"Triton at {row.target}: its {row.endpoint} endpoint ({row.url}) is down "
            f"({row.reason}); the series read from it are missing, the others still flow: "
            f"{row.fix}.",
            icon=":material/warning:",
        )
    shown = fleet.search(frame, wanted)
    st.caption(f"{len(shown):,} of {_rows(len(frame))}, worst first")
    if shown.empty:
        st.info(f"No server or model matches {wanted!r}.", icon=":material/search_off:")
    else:
        st.dataframe(
            display(shown),
            hide_index=True,
            use_container_width=True,
            height=TABLE_HEIGHT_PX,
            key="fleet_table",
        )
    if not endpoints.empty:
        with st.expander("Where each server is read from"):
            st.dataframe(
                endpoints.assign(up=endpoints["up"].map({True: "up", False: "DOWN"})),
                hide_index=True,
                use_container_width=True,
                key="fleet_endpoints",
            )
    st.caption(
        f"Over the last {window}, per server and model: worst first (down, alerting, then "
        "the lowest batch efficiency among models with traffic). A dash: no traffic in the "
        "window, or no preferred sizes."
    )


def display(frame: pd.DataFrame) -> pd.DataFrame:
    """The overview as shown: readable column names and units."""
    return pd.DataFrame(
        {
            "server": frame["target"],
            "model": frame["model"],
            "up": frame["up"].map({True: "up", False: "DOWN"}),
            "endpoints down": frame["endpoints_down"],
            "requests/s": frame["requests_per_s"].round(2),
            "avg batch": frame["average_batch_size"].round(2),
            "max batch": frame["max_batch_size"],
            "batch efficiency %": (frame["batch_efficiency"] * 100).round(1),
            "preferred hits %": (frame["preferred_hit_ratio"] * 100).round(1),
            "queue ms/request": (frame["queue_s_per_request"] * 1000).round(2),
            "firing alerts": frame["alerts"],
        }
    )


def _rows(n: int) -> str:
    return f"{n:,} row" + ("" if n == 1 else "s")


def _endpoints(cfg: DashboardSettings) -> pd.DataFrame:
    try:
        return fleet.endpoint_table(cached.instant_at(cfg.prometheus_url, q.ENDPOINTS, _step(cfg)))
    except PrometheusError:  # the overview above already said so
        return fleet.endpoint_table(pd.DataFrame())


def _step(cfg: DashboardSettings) -> float:
    """Now, on a scrape boundary: refreshes within one scrape share the cache."""
    return time.time() // cfg.scrape_interval_s * cfg.scrape_interval_s
