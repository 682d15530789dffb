"""Model config view: each model's config.pbtxt as parsed, as Triton loaded it, and the
findings of ``batchscope check-config``."""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from dashboard import data as cached
from dashboard import features
from dashboard import queries as q
from dashboard.settings import DashboardSettings
from promapi import PrometheusError
from tritonapi import repocheck
from tritonapi.client import TritonClient, TritonError
from tritonapi.modelconfig import ModelConfig


def render(cfg: DashboardSettings) -> None:
    st.header("Model configuration")
    if cfg.model_repository is None:
        render_served(cfg)
        return
    try:
        checks = repocheck.check_repository(cfg.model_repository)
    except FileNotFoundError as exc:
        st.error(f"{exc}: set DASHBOARD_MODEL_REPOSITORY to the model repository Triton serves.")
        return
    problems = repocheck.errors(checks)
    if problems:
        st.error(
            f"check-config found {len(problems)} error(s) in {cfg.model_repository}: Triton "
            "refuses or misuses these models; fix them and restart the stack.",
            icon=":material/error:",
        )
    else:
        st.success(
            f"check-config: {len(checks)} model(s) OK in {cfg.model_repository}",
            icon=":material/check_circle:",
        )
    triton = TritonClient(cfg.triton_url)
    triton_up = triton.is_ready(timeout_s=2.0)
    if not triton_up:
        st.warning(
            f"Triton at {cfg.triton_url} is not answering: only the files are shown. Start the "
            "stack with ./stack/up to see the configuration as Triton loaded it.",
            icon=":material/warning:",
        )
    configs = _configs(checks)
    cache = server_cache(cfg, next(iter(configs), ""))
    for check in checks:
        render_model(cfg, triton, check, triton_up, configs, cache)


def render_served(cfg: DashboardSettings) -> None:
    """Attach mode: no repository here; the configs the chosen server serves, checked."""
    try:
        checks = repocheck.check_server(TritonClient(cfg.triton_url, 3.0))
    except TritonError as exc:
        st.warning(
            f"{exc}: the configs come from the server itself, and it does not answer.",
            icon=":material/warning:",
        )
        return
    problems = repocheck.errors(checks)
    summary = f"check-config: {len(checks)} model(s) served by {cfg.triton_url}"
    if problems:
        st.error(f"{summary}, {len(problems)} error(s)", icon=":material/error:")
    else:
        st.success(f"{summary}, no error", icon=":material/check_circle:")
    configs = _configs(checks)
    cache = server_cache(cfg, next(iter(configs), ""))
    for check in checks:
        model_header(check, configs, cache)
        st.caption(f"as Triton loaded it: {check.folder}/config")
        st.json(check.parsed, expanded=False)


def _configs(checks: list[repocheck.ModelCheck]) -> dict[str, ModelConfig]:
    return {c.name: c.config for c in checks if c.config is not None}


def server_cache(cfg: DashboardSettings, model: str) -> bool | None:
    """Whether the server has a response cache, as the exporter saw it; None if unknown."""
    if not model:
        return None
    expr = q.build(features.CACHE_CONFIGURED, q.selector(model, cfg.triton_url))
    try:
        frame = cached.instant(cfg.prometheus_url, expr)
    except PrometheusError:
        return None
    return None if frame.empty else bool(frame["value"].iloc[0])


def model_header(
    check: repocheck.ModelCheck,
    configs: Mapping[str, ModelConfig] | None = None,
    server_cache: bool | None = None,
) -> None:
    """The model's name, its check-config findings and what its batcher may do."""
    st.subheader(check.name)
    for finding in check.findings:
        show = st.error if finding.severity == repocheck.ERROR else st.warning
        show(str(finding))
    if check.config is not None:
        st.markdown(check.config.batching_summary())
        for note in features.config_notes(check.config, configs, server_cache):
            st.markdown(note)


def render_model(
    cfg: DashboardSettings,
    triton: TritonClient,
    check: repocheck.ModelCheck,
    triton_up: bool,
    configs: Mapping[str, ModelConfig] | None = None,
    cache: bool | None = None,
) -> None:
    model_header(check, configs, cache)
    left, right = st.columns(2)
    with left:
        st.caption(f"{check.folder}/config.pbtxt, parsed with Triton's ModelConfig")
        if check.config is None:
            st.write("(does not parse; see the finding above)")
        else:
            st.json(check.parsed, expanded=False)
    with right:
        st.caption(f"as Triton loaded it: {cfg.triton_url}/v2/models/{check.name}/config")
        if not triton_up:
            st.write("(Triton is not answering)")
            return
        try:
            st.json(triton.model_config_json(check.name), expanded=False)
        except TritonError as exc:
            st.write(f"Triton did not load this model ({exc}); see {cfg.logs_dir / 'triton.log'}")
