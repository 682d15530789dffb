"""The "Why isn't batching working?" panel: the doctor's checks over the chosen window."""

from __future__ import annotations

import streamlit as st

from dashboard import data as cached
from dashboard.settings import DashboardSettings
from doctor import report
from doctor.prescribe import SEARCHED
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
    key = f"doctor_search_{model}_{window_s}"
    if st.session_state.get(key):
        try:
            with st.spinner("Searching batching configs (the advisor's simulation)..."):
                d = cached.prescribed(
                    cfg.prometheus_url, cfg.triton_url, model, window_s, cfg.exporter_url
                )
        except (PrometheusError, TritonError) as exc:
            st.warning(f"The search needs Prometheus and Triton: {exc}", icon=":material/warning:")
    st.caption(
        "The spec's troubleshooting checks (`batchscope doctor` runs the same), over "
        "the chosen time range: " + " · ".join(report.facts(d))
    )
    for note in d.notes:
        st.caption(note)
    p = d.prescription
    if p is not None:
        if p.present:
            st.markdown(f"`{p.present}`")
        st.markdown(f"**Config ({p.verdict})**, the same search as the advisor's: {p.text}.")
        if p.pbtxt:
            st.code("\n".join(p.pbtxt), language="protobuf")
    elif not st.session_state.get(key):
        st.caption(
            "Which config to write comes from the advisor's search over this window (the "
            "same as `batchscope doctor` and `batchscope advise`); it takes "
            "seconds of simulation."
        )
        if st.button("Which config? Ask the advisor's search", key=f"ask_{key}"):
            st.session_state[key] = True
            st.rerun()
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
            if p is None and f.code in SEARCHED and not st.session_state.get(key):
                st.caption(
                    "The checks' rule of thumb, until the search answers: "
                    + " ".join(line for line in f.fix)
                )
            else:
                st.code("\n".join(f.fix), language="protobuf")
