"""The stack's state as the dashboard sees it, and a clear message for each bad state."""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from dashboard import data as cached
from dashboard import fleet
from dashboard import queries as q
from dashboard.settings import DashboardSettings
from promapi import PrometheusError, PrometheusUnreachable
from tritonapi.client import TritonUnreachable


@dataclass
class StackState:
    prometheus_error: str | None = None
    prometheus_unreachable: bool = False
    triton_ready: bool = False
    models: list[str] = field(default_factory=list)
    # Targets the exporter could not read (its triton_batching_target_up is 0).
    targets_down: list[str] = field(default_factory=list)
    # Scrape jobs Prometheus could not reach (up == 0).
    jobs_down: list[str] = field(default_factory=list)
    # Endpoints of targets that are read, down on their own (fleet.endpoint_table's rows).
    endpoints_down: list[dict[str, str]] = field(default_factory=list)


def read(cfg: DashboardSettings) -> StackState:
    state = StackState(triton_ready=cached.triton_ready(cfg.triton_url))
    try:
        state.models = cached.models(cfg.prometheus_url)
        targets = cached.instant(cfg.prometheus_url, q.TARGETS_UP)
        jobs = cached.instant(cfg.prometheus_url, q.SCRAPE_UP)
        endpoints = fleet.endpoint_table(cached.instant(cfg.prometheus_url, q.ENDPOINTS))
    except PrometheusUnreachable as exc:
        state.prometheus_error, state.prometheus_unreachable = str(exc), True
        return state
    except PrometheusError as exc:
        state.prometheus_error = str(exc)
        return state
    if "target" in targets:
        state.targets_down = sorted(targets.loc[targets["value"] == 0, "target"])
    if "job" in jobs:
        state.jobs_down = sorted(jobs.loc[jobs["value"] == 0, "job"])
    state.endpoints_down = [
        {str(k): str(v) for k, v in row.items()}
        for row in endpoints[~endpoints["up"]].to_dict("records")
    ]
    return state


def show_problems(cfg: DashboardSettings, state: StackState) -> None:
    """One message per problem, each saying what to do. Nothing when all is well."""
    if state.prometheus_error:
        st.error(state.prometheus_error, icon=":material/error:")
    if not state.triton_ready:
        st.warning(
            f"{TritonUnreachable(cfg.triton_url, 'not ready')}: start the stack with ./stack/up, "
            f"or see {cfg.logs_dir / 'triton.log'} for why it stopped",
            icon=":material/warning:",
        )
    for target in state.targets_down:
        why = cached.triton_problem(target)
        st.warning(
            f"The exporter cannot read Triton at {target}"
            + (f" ({why})" if why else "")
            + ": is that Triton running? The charts show data up to when it stopped.",
            icon=":material/warning:",
        )
    for row in state.endpoints_down:
        st.warning(
            f"Triton at {row['target']}: its {row['endpoint']} endpoint ({row['url']}) is "
            f"down ({row['reason']}); the series read from it are missing: {row['fix']}.",
            icon=":material/warning:",
        )
    for job in state.jobs_down:
        st.warning(
            f"Prometheus cannot scrape its `{job}` job: see {cfg.prometheus_url}/targets, and "
            f"the log in {cfg.logs_dir / (job + '.log')}",
            icon=":material/warning:",
        )


def show_no_models(cfg: DashboardSettings) -> None:
    st.info(
        "No data yet: Prometheus has no series from the exporter (triton_batching_*). If the "
        "stack has just started, wait for the first scrapes (a few seconds). Otherwise check "
        f"that the exporter is running and scraped: {cfg.prometheus_url}/targets",
        icon=":material/hourglass_empty:",
    )
