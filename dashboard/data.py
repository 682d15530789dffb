"""Streamlit's caches around the data layer: one client per URL, queries cached briefly.

Everything cached here takes plain, hashable arguments (URLs, names, numbers),
so a cache key is the question asked. Live data is keyed by the window's
step-aligned end: refreshes within one step share an entry, the next step asks
Prometheus again.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from advisor.advice import SearchOptions
from advisor.inputs import Options
from dashboard import fleet as fleet_data
from dashboard import live
from doctor import Diagnosis, diagnose
from doctor.prescribe import searched
from observe.prometheus import prometheus_window
from promapi import PromClient, Range
from tritonapi.client import TritonClient, TritonError

# What to do when Prometheus does not answer usably, in the dashboard's terms.
PROMETHEUS_HINT = (
    "start the stack with ./stack/up, or point the dashboard at the right server with "
    "DASHBOARD_PROMETHEUS_URL"
)

# Long enough to serve every refresh within a step, short enough to stay bounded.
QUERY_TTL_S = 60
STATE_TTL_S = 5


@st.cache_resource(show_spinner=False)
def client(url: str) -> PromClient:
    return PromClient(url, hint=PROMETHEUS_HINT)


@st.cache_data(ttl=QUERY_TTL_S, max_entries=64, show_spinner=False)
def live_data(
    url: str,
    model: str,
    start: float,
    end: float,
    step_s: int,
    scrape_interval_s: float,
    at: float,
    target: str | None = None,
) -> live.LiveData:
    window = Range(start, end, step_s)
    return live.fetch_range(client(url), model, window, scrape_interval_s, target, at=at)


@st.cache_data(ttl=STATE_TTL_S, show_spinner=False)
def models(url: str) -> list[str]:
    return live.models(client(url))


@st.cache_data(ttl=STATE_TTL_S, show_spinner=False)
def alerts(url: str) -> pd.DataFrame:
    return client(url).alerts()


@st.cache_data(ttl=STATE_TTL_S, show_spinner=False)
def instant(url: str, expr: str) -> pd.DataFrame:
    return client(url).query(expr)


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def instant_at(url: str, expr: str, at: float) -> pd.DataFrame:
    return client(url).query(expr, at)


@st.cache_data(ttl=QUERY_TTL_S, show_spinner=False)
def scalar_at(url: str, expr: str, at: float) -> float | None:
    return client(url).scalar(expr, at)


@st.cache_data(ttl=STATE_TTL_S, max_entries=16, show_spinner=False)
def fleet(url: str, window_s: int, at: float) -> pd.DataFrame:
    return fleet_data.fetch(client(url), window_s, at)


@st.cache_data(ttl=STATE_TTL_S, show_spinner=False)
def served_models(url: str) -> list[str]:
    """The models a Triton has loaded (its statistics API, open on every Triton); none when
    it does not answer."""
    try:
        return TritonClient(url, timeout_s=2.0).served_models()
    except TritonError:
        return []


@st.cache_data(ttl=STATE_TTL_S, show_spinner=False)
def triton_problem(url: str) -> str:
    """Why a Triton does not answer usably, as the dashboard sees it from here ("" if it does):
    names the server that is down and why."""
    try:
        ready = TritonClient(url, timeout_s=2.0).ready()
    except TritonError as exc:
        return str(exc)
    return "" if ready else f"Triton at {url} answers but is not ready (models still loading?)"


@st.cache_data(ttl=STATE_TTL_S, show_spinner=False)
def triton_ready(url: str) -> bool:
    return TritonClient(url, timeout_s=2.0).is_ready()


DOCTOR_TTL_S = 30


@st.cache_data(ttl=DOCTOR_TTL_S, max_entries=16, show_spinner=False)
def diagnosis(
    prometheus_url: str, triton_url: str, model: str, window_s: int, exporter_url: str = ""
) -> Diagnosis:
    """The doctor's checks on ``model`` over the last ``window_s`` of Prometheus' data."""
    window = prometheus_window(client(prometheus_url), model, window_s)
    notes = [] if window is not None else ["Prometheus has no exporter series for this model"]
    triton = TritonClient(triton_url, timeout_s=3.0)
    return diagnose(triton, model, window, notes, exporter_url)


SEARCH_TTL_S = 120


@st.cache_data(ttl=SEARCH_TTL_S, max_entries=16, show_spinner=False)
def prescribed(
    prometheus_url: str, triton_url: str, model: str, window_s: int, exporter_url: str = ""
) -> Diagnosis:
    """The checks with their config from the advisor's search over the same window, with
    the CLI's defaults, so that the panel, `stack doctor` and `advisor advise` give one
    config. Seconds of simulation: asked for, not run on every refresh."""
    found = diagnosis(prometheus_url, triton_url, model, window_s, exporter_url)
    opts = Options(triton_url, model, window_s, prometheus=prometheus_url)
    return searched(replace(found, notes=list(found.notes)), opts, SearchOptions())
