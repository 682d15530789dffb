"""Model config view: each model's config.pbtxt as parsed, as Triton loaded it, and the
findings of ``python -m stack check-config``."""

from __future__ import annotations

from typing import Any

import requests
import streamlit as st
from google.protobuf import json_format

from dashboard import tritoninfo
from dashboard.settings import DashboardSettings
from stack import checkconfig


def batching_summary(config: dict[str, Any]) -> str:
    """One line: what the batcher is allowed to do with this config."""
    mbs = int(config.get("maxBatchSize", config.get("max_batch_size", 0)) or 0)
    dyn = config.get("dynamicBatching", config.get("dynamic_batching"))
    if dyn is None:
        return f"max_batch_size {mbs}, no dynamic batching: every request executes alone"
    preferred = dyn.get("preferredBatchSize", dyn.get("preferred_batch_size", []))
    delay = int(dyn.get("maxQueueDelayMicroseconds", dyn.get("max_queue_delay_microseconds", 0)))
    return (
        f"max_batch_size {mbs}, dynamic batching with preferred sizes "
        f"{', '.join(map(str, preferred)) or 'none'} and a queue delay of {delay} µs"
    )


def render(cfg: DashboardSettings) -> None:
    st.header("Model configuration")
    try:
        checks = checkconfig.check_repository(cfg.model_repository)
    except FileNotFoundError as exc:
        st.error(f"{exc}: set DASHBOARD_MODEL_REPOSITORY to the model repository Triton serves.")
        return
    problems = checkconfig.errors(checks)
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
    triton_up = tritoninfo.is_ready(cfg.triton_url)
    if not triton_up:
        st.warning(
            f"Triton at {cfg.triton_url} is not answering: only the files are shown. Start the "
            "stack with ./stack/up to see the configuration as Triton loaded it.",
            icon=":material/warning:",
        )
    for check in checks:
        render_model(cfg, check, triton_up)


def render_model(cfg: DashboardSettings, check: checkconfig.ModelCheck, triton_up: bool) -> None:
    st.subheader(check.name)
    for finding in check.findings:
        show = st.error if finding.severity == checkconfig.ERROR else st.warning
        show(str(finding))
    parsed = (
        json_format.MessageToDict(check.config, preserving_proto_field_name=True)
        if check.config is not None
        else None
    )
    if parsed is not None:
        st.markdown(batching_summary(parsed))
    left, right = st.columns(2)
    with left:
        st.caption(f"{check.folder / 'config.pbtxt'}, parsed with Triton's ModelConfig")
        if parsed is None:
            st.write("(does not parse; see the finding above)")
        else:
            st.json(parsed, expanded=False)
    with right:
        st.caption(f"as Triton loaded it: {cfg.triton_url}/v2/models/{check.name}/config")
        if not triton_up:
            st.write("(Triton is not answering)")
            return
        try:
            st.json(tritoninfo.model_config(cfg.triton_url, check.name), expanded=False)
        except (tritoninfo.TritonUnreachable, requests.RequestException) as exc:
            st.write(f"Triton did not load this model ({exc}); see .stack/logs/triton.log")
