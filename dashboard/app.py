"""The dashboard's Streamlit entry: `streamlit run dashboard/app.py`.

Data sources come from DASHBOARD_* environment variables (dashboard/settings.py);
the launcher's `dashboard` row sets them.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import streamlit as st

# The icon is a file of this repository: Streamlit serves a local image from the dashboard
# itself, where a ":material/...:" icon made every page load fetch it from fonts.gstatic.com
# (a request off the machine, failing on hosts without the internet).
st.set_page_config(
    page_title="Triton batching",
    page_icon=str(Path(__file__).with_name("icon.png")),
    layout="wide",
)

# `streamlit run dashboard/app.py` puts dashboard/ first on sys.path, not the repository:
# make `import dashboard` work from any checkout, installed or not, and put the repository
# ahead of dashboard/, whose modules would shadow its packages (dashboard/runs.py hid runs/).
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT in sys.path:
    sys.path.remove(_ROOT)
sys.path.insert(0, _ROOT)

# set_page_config must run before these imports.
from dashboard import access, settings  # noqa: E402
from dashboard import data as cached  # noqa: E402
from dashboard.views import (  # noqa: E402
    config_view,
    fleet_view,
    live_view,
    runs_view,
    status,
    timeline_view,
)
from tritonapi import repocheck  # noqa: E402

VIEWS = ["Live", "Fleet", "Batch timeline", "Load runs", "Model config"]
DEFAULT_MODEL = "batch_add_model"


def repository_models(cfg: settings.DashboardSettings) -> list[str]:
    """The models on disk, or without a local repository (attach mode) those the chosen
    server has loaded."""
    if cfg.model_repository is None:
        return cached.served_models(cfg.triton_url)
    try:
        return [c.name for c in repocheck.check_repository(cfg.model_repository)]
    except FileNotFoundError:
        return []


def choose_server(cfg: settings.DashboardSettings) -> settings.DashboardSettings:
    """The sidebar's server selector (with several Tritons): the pages read the chosen one."""
    if len(cfg.triton_urls) < 2:
        return cfg
    st.session_state.setdefault("server", cfg.triton_urls[0])
    if st.session_state["server"] not in cfg.triton_urls:
        st.session_state["server"] = cfg.triton_urls[0]
    with st.sidebar:
        server = st.selectbox("Server", cfg.triton_urls, key="server")
    return replace(cfg, triton_url=server)


def main() -> None:
    # Before any widget: another site's page must not drive this one (dashboard/access.py).
    access.refuse_foreign_pages()
    try:
        cfg = settings.from_env()
    except settings.SettingsError as exc:
        st.error(f"{exc}: fix the variable and restart the dashboard.")
        return
    # ?view=Load+runs links straight to a view, and the address follows the choice.
    linked = st.query_params.get("view")
    st.session_state.setdefault("view", linked if linked in VIEWS else VIEWS[0])
    st.session_state.setdefault("window", "5 minutes")
    st.session_state.setdefault("auto_refresh", True)

    with st.sidebar:
        st.title("Triton batching")
        view = st.radio("View", VIEWS, key="view")
    st.query_params["view"] = view
    if view == "Fleet":
        fleet_view.render(cfg)
        return
    cfg = choose_server(cfg)
    # With several servers the live view shows the chosen one's series.
    target = cfg.triton_url if len(cfg.triton_urls) > 1 else None

    if view == "Model config":
        config_view.render(cfg)
        return

    state = status.read(cfg)
    status.show_problems(cfg, state)
    if view == "Batch timeline":
        timeline_view.render(cfg, state.models or repository_models(cfg))
        return
    if view == "Load runs":
        # Without Prometheus the runs still work (they talk to Triton); name models from disk.
        runs_view.render(cfg, state.models or repository_models(cfg))
        return
    if state.prometheus_error:
        return
    if not state.models:
        status.show_no_models(cfg)
        # The alerts say most when nothing else can be shown (Triton down, say).
        live_view.render_alerts(cfg)
        return
    with st.sidebar:
        models = state.models
        st.session_state.setdefault(
            "model", DEFAULT_MODEL if DEFAULT_MODEL in models else models[0]
        )
        if st.session_state["model"] not in models:
            st.session_state["model"] = models[0]
        model = st.selectbox("Model", models, key="model")
        window = st.selectbox("Time range", list(live_view.TIME_RANGES), key="window")
        auto = st.toggle(f"Auto-refresh every {cfg.refresh_s:g} s", key="auto_refresh")
    st.header(f"Live: {model}")
    live_view.render(cfg, model, live_view.TIME_RANGES[window], auto, target)


main()
