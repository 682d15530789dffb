"""The "Why isn't batching working?" panel: the doctor's checks over the chosen window."""

from __future__ import annotations

import streamlit as st

from dashboard import data as cached
from dashboard.settings import DashboardSettings
from doctor import report
from promapi import PrometheusError
from tritonapi import TritonError

TITLE = "Why isn't batching working?"


def render(cfg: DashboardSettings, model: str, window_s: int) -> None:
    st.subheader(TITLE)
    try:
        d = cached.diagnosis(cfg.prometheus_url, cfg.triton_url, model, window_s, cfg.exporter_url)
    except (PrometheusError, TritonError) as exc:
        st.warning(f"The checks need Prometheus and Triton: {exc}", icon=":material/warning:")
        return
    st.caption(
        "The spec's troubleshooting checks (`python -m stack doctor` runs the same), over "
        "the chosen time range: " + " · ".join(report.facts(d))
    )
    for note in d.notes:
        st.caption(note)
    p = d.prescription
    if p is not None:
        st.markdown(f"**Config ({p.verdict})**, the same search as the advisor's: {p.text}.")
        if p.pbtxt:
            st.code("\n".join(p.pbtxt), language="protobuf")
    if not d.findings:
        st.success(
            "No finding: the batcher does what its config asks.", icon=":material/check_circle:"
        )
        return
    for f in d.findings:
        with st.container(border=True):
            st.markdown(f"**{f.title}** ({f.check})")
            st.table({"measured": dict(f.numbers)})
            st.markdown(f.explanation + (f" {f.proposal}" if f.proposal else ""))
            st.code("\n".join(f.fix), language="protobuf")
