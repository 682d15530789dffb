"""Load runs: start one (bounded), watch it, read it beside the server's view, compare two."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from advisor.storedrun import check_poolable
from autopilot import apply as autopilot_apply
from dashboard import access, advice, apply, charts, fmt, loadruns
from dashboard import data as cached
from dashboard.live import LiveData
from dashboard.settings import DashboardSettings
from loadgen.errors import LoadgenError
from loadgen.reports.report import input_lines
from loadgen.results.summary import LoadRun, RunSummary
from promapi import PrometheusError, Range, choose_step
from runs.errors import StoreError
from stacksettings import Settings, admin_headers
from tritonapi.client import TritonClient, TritonError

PROGRESS_EVERY_S = 0.5
DEFAULT_MODEL = "batch_add_model"


@st.cache_resource(show_spinner=False)
def manager() -> loadruns.RunManager:
    """One for the whole dashboard process: every tab sees the same run."""
    return loadruns.RunManager()


def render(cfg: DashboardSettings, models: list[str]) -> None:
    st.header("Load runs")
    unlocked = access.gate(cfg)
    if unlocked:
        render_form(cfg, models)
    st.fragment(_progress, run_every=PROGRESS_EVERY_S if manager().busy else None)()
    render_changes(cfg)
    try:
        listed = loadruns.list_runs(cfg.store)
    except (LoadgenError, StoreError) as exc:
        st.error(f"{exc}: fix or move the file and reload.", icon=":material/error:")
        return
    if listed.empty:
        st.info(
            "No load runs yet: start one with the form above, or from a shell with "
            "`.venv/bin/batchscope load concurrency --concurrency 4 --duration 5`. "
            f"Runs are stored in {cfg.store}.",
            icon=":material/hourglass_empty:",
        )
        return
    ids = [int(i) for i in listed["id"]]
    names = {
        int(r["id"]): loadruns.load(cfg.store, int(r["id"])).describe()
        for _, r in listed.head(50).iterrows()
    }
    ids = [i for i in ids if i in names]
    selected = st.session_state.get("run")
    if selected not in ids:
        st.session_state["run"] = ids[0]
    run_id = st.selectbox("Run", ids, format_func=names.__getitem__, key="run")
    run = loadruns.load(cfg.store, run_id)
    render_result(cfg, run)
    if unlocked:
        render_advice(cfg, run, ids)
    render_compare(cfg, ids, names)


def render_changes(cfg: DashboardSettings) -> None:
    """The record of `advise --apply`: each change, its outcome, and p99 before and after."""
    try:
        made = loadruns.changes(cfg.store)
    except (LoadgenError, StoreError) as exc:
        st.error(f"{exc}: fix or move the file and reload.", icon=":material/error:")
        return
    if made.empty:
        return
    with st.expander(f"Config changes by `batchscope advise --apply` ({len(made)})"):
        st.caption(
            "Each change the autopilot made on a live model, newest first: kept, rolled back "
            "(and why), failed to apply. p99 is the clients' over the window before and after "
            "(Triton's mean per request where no load run was going)."
        )
        st.dataframe(made, hide_index=True, key="changes")
        st.plotly_chart(charts.render_changes(made), key="changes_chart")


def render_form(cfg: DashboardSettings, models: list[str]) -> None:
    with st.expander("Start a load run", expanded=True):
        cols = st.columns([2, 2, 1, 1, 2])
        scenario = cols[0].selectbox(
            "Scenario",
            list(loadruns.SCENARIOS),
            key="form_scenario",
            help="\n".join(f"**{k}**: {v}" for k, v in loadruns.SCENARIOS.items()),
        )
        if st.session_state.get("form_model") not in models and DEFAULT_MODEL in models:
            st.session_state["form_model"] = DEFAULT_MODEL
        model = cols[1].selectbox("Model", models, key="form_model")
        form: dict[str, Any] = {}
        if scenario == "concurrency":
            form["concurrency"] = cols[2].number_input(
                "Concurrency", 1, loadruns.MAX_CONCURRENCY, 4, key="form_concurrency"
            )
        elif scenario == "rate":
            form["rate"] = cols[2].number_input(
                "Rate (req/s)", 1.0, loadruns.MAX_RATE, 100.0, step=10.0, key="form_rate"
            )
        else:
            form["requests"] = cols[2].number_input(
                "Requests", 1, loadruns.MAX_REQUESTS, 3, key="form_requests"
            )
        if scenario in ("concurrency", "rate"):
            form["duration_s"] = cols[3].number_input(
                "Duration (s)", 1.0, loadruns.MAX_DURATION_S, 5.0, step=1.0, key="form_duration"
            )
        label = cols[4].text_input(
            "Label (optional)", key="form_label", placeholder="e.g. batching on"
        )
        form.update(render_inputs(cfg, model))
        st.caption(
            f"Limits here: concurrency ≤ {loadruns.MAX_CONCURRENCY}, "
            f"rate ≤ {loadruns.MAX_RATE:g}/s, duration ≤ {loadruns.MAX_DURATION_S:g} s, "
            f"requests ≤ {loadruns.MAX_REQUESTS}; one run at a time. Bigger runs: "
            "`batchscope load` from a shell."
        )
        if st.button("Start run", type="primary", disabled=manager().busy, key="form_start"):
            try:
                params = loadruns.to_params(
                    loadruns.RunForm(scenario=scenario, model=model, label=label, **form),
                    cfg.triton_url,
                )
                started = manager().start(params, cfg.store)
            except loadruns.RunRefused as exc:
                st.error(str(exc), icon=":material/block:")
                return
            # Why a run did not start is this tab's to read; a run that did is every tab's.
            st.session_state["started_run"] = id(started)
            st.rerun()


@st.cache_data(ttl=30, show_spinner=False)
def _model_inputs(triton_url: str, model: str) -> list[dict[str, str]] | str:
    return loadruns.model_inputs(triton_url, model)


def render_inputs(cfg: DashboardSettings, model: str) -> dict[str, str]:
    """The chosen model's inputs, and what the requests hold: shapes (a -1 dim needs one;
    a range LO:HI is drawn per request), value ranges, string lengths, or a data file."""
    inputs = _model_inputs(cfg.triton_url, model) if model else []
    if isinstance(inputs, str):
        st.caption(f"Inputs of {model}: unknown ({inputs})")
    elif inputs:
        variable = [i["input"] for i in inputs if "-1" in i["dims"]]
        st.caption(
            f"Inputs of {model}: "
            + ", ".join(f"**{i['input']}** {i['datatype']} {i['dims']}" for i in inputs)
            + (
                f". Variable dims (-1) need a shape: e.g. `{variable[0]}=16` or a range "
                f"`{variable[0]}=4:64`."
                if variable
                else ""
            )
        )
    cols = st.columns([2, 2, 1, 3])
    out = {
        "shapes": cols[0].text_input("Shapes", key="form_shapes", placeholder="ids=4:64 mask=4:64"),
        "ranges": cols[1].text_input("Value ranges", key="form_ranges", placeholder="ids=0:30000"),
        "string_length": cols[2].text_input("String length", "16", key="form_string_length"),
    }
    upload = cols[3].file_uploader(
        "Input data (perf_analyzer JSON)", type=["json"], key="form_input_data"
    )
    if upload is not None:
        out["input_data"] = str(
            loadruns.save_upload(cfg.store.parent / "inputdata", upload.getvalue())
        )
        # Said by the server once it holds the file: a run started before this line shows
        # would send random inputs.
        st.caption(f"The requests will take their inputs from {upload.name}.")
    return out


def _progress() -> None:
    active = manager().current
    if active is None:
        return
    if not active.done.is_set():
        p = active.progress
        fraction = float(p.get("fraction", 0.0))
        st.progress(
            fraction,
            text=f"Running {active.params.describe()} on {active.params.model}: "
            f"{p.get('sent', 0)} sent, {p.get('ok', 0)} ok, {p.get('failed', 0)} failed, "
            f"{p.get('in_flight', 0)} in flight",
        )
        if st.button("Stop the run", key="stop_run"):
            manager().stop()
        return
    if active.status == "error":
        if st.session_state.get("started_run") != id(active):
            return  # another tab's refused run: nothing ran, nothing to show here
        st.error(f"The run did not start: {active.error}", icon=":material/error:")
    elif active.status != "ok":
        st.warning(f"Run #{active.run_id} ended {active.status}.", icon=":material/warning:")
    if active.note:
        st.warning(active.note, icon=":material/database:")
    if not st.session_state.get(f"shown_{id(active)}"):
        # Once: the full page reloads to show the new run, compared with the one before.
        st.session_state[f"shown_{id(active)}"] = True
        if active.run_id is not None:
            previous = st.session_state.get("run")
            st.session_state["run"] = active.run_id
            st.session_state["compare_b"] = active.run_id
            if previous is not None and previous != active.run_id:
                st.session_state["compare_a"] = previous
        st.rerun(scope="app")


def render_result(cfg: DashboardSettings, run: LoadRun) -> None:
    c = run.summary.client
    server = run.summary.server
    missed = c.schedule_missed()
    if missed:  # the figures below are of a different arrival process than the one asked
        st.warning(f"Run #{run.run_id}: {missed}.", icon=":material/schedule:")
    cols = st.columns(6)
    cols[0].metric("Throughput (req/s)", fmt.number(c.throughput_per_s))
    cols[1].metric("Sent", fmt.count(c.sent))
    cols[2].metric("Failed / timed out", f"{c.failed} / {c.timed_out}")
    cols[3].metric("p99 latency", fmt.millis(c.latency_s.p99))
    cols[4].metric("Model executions", fmt.count(server.executions if server else None))
    cols[5].metric(
        "Average batch size", fmt.number(server.average_batch_size if server else None, 2)
    )
    inputs = input_lines(run)
    if inputs:
        st.caption("  \n".join(line.strip() for line in inputs))

    window = run_window(run, cfg.scrape_interval_s)
    data, problem = server_data(cfg, run, window)
    preferred = data.preferred_sizes if data is not None else []
    client, serverside = st.columns(2)
    with client:
        st.subheader("Client side")
        st.dataframe(
            fmt.table(loadruns.latency_table(run), {"ms": "{:.2f}"}),
            hide_index=True,
        )
        if c.send_lateness_s is not None:
            st.dataframe(
                fmt.table(loadruns.lateness_table(run), {"us": "{:,.0f}"}),
                hide_index=True,
            )
            st.caption(
                "Send lateness: how long after its due time each request went out "
                "(open-loop runs). Past 1 ms at p99 the run did not keep its schedule."
            )
        st.plotly_chart(
            charts.render_run_timeline(loadruns.timeline(cfg.store, run.run_id or 0)),
            key="run_timeline",
        )
        st.caption(charts.RUN_CAPTIONS["timeline"])
        st.plotly_chart(
            charts.render_run_batches(loadruns.executions_by_size(run), preferred),
            key="run_batches",
        )
        st.caption(charts.RUN_CAPTIONS["batches"])
        st.dataframe(_server_calls(run.summary), hide_index=True)
    with serverside:
        st.subheader("Server side (Prometheus)")
        if window.end > time.time():
            st.info(
                "Prometheus has not scraped the end of this run yet; the charts fill in within "
                f"{2 * cfg.scrape_interval_s:g} s (reload the page).",
                icon=":material/hourglass_empty:",
            )
        if data is None:
            st.error(problem, icon=":material/error:")
            return
        st.plotly_chart(charts.render_throughput(data), key="run_server_throughput")
        st.plotly_chart(charts.render_batch_size(data), key="run_server_batch_size")
        st.plotly_chart(charts.render_distribution(data), key="run_server_distribution")
        st.caption(charts.RUN_CAPTIONS["server"])


def _server_calls(summary: RunSummary) -> pd.DataFrame:
    columns = ["server calls (Triton statistics)", "value"]
    server = summary.server
    if server is None:
        return pd.DataFrame([("unknown", summary.server_error)], columns=columns)
    rows = [
        (
            "requests (success / failure)",
            f"{server.requests_success} / {server.requests_failure}",
        ),
        ("inferences", str(server.inferences)),
        ("executions", str(server.executions)),
        ("queue per request", fmt.millis(server.queue_s_per_request)),
        ("compute per request", fmt.millis(server.compute_s_per_request)),
        ("request per request (server)", fmt.millis(server.request_s_per_request)),
    ]
    return pd.DataFrame(rows, columns=columns)


def run_window(run: LoadRun, scrape_interval_s: float) -> Range:
    """The run's time, padded by two scrapes each side, on step boundaries."""
    pad = 2 * scrape_interval_s
    length = run.finished_at - run.started_at + 2 * pad
    step = choose_step(length, min_step_s=scrape_interval_s)
    start = math.floor((run.started_at - pad) / step) * step
    end = math.ceil((run.finished_at + pad) / step) * step
    return Range(start, end, step)


def server_data(cfg: DashboardSettings, run: LoadRun, window: Range) -> tuple[LiveData | None, str]:
    """Prometheus' view of the run's window, or None and what went wrong."""
    try:
        data = cached.live_data(
            cfg.prometheus_url,
            run.params.model,
            window.start,
            window.end,
            window.step_s,
            cfg.scrape_interval_s,
            window.end,
        )
    except PrometheusError as exc:
        return None, str(exc)
    return data, ""


@st.cache_data(ttl=600, max_entries=16, show_spinner=False)
def cached_advice(db: str, run_ids: tuple[int, ...], triton_url: str) -> advice.Advice:
    return advice.advise(Path(db), run_ids, triton_url)


def poolable(cfg: DashboardSettings, run: LoadRun, ids: list[int]) -> list[int]:
    """The other listed runs that ``advise --run`` would pool with ``run``: one model,
    server, config and traffic (``advisor.storedrun.check_poolable``)."""
    found = []
    for other_id in ids:
        if other_id == run.run_id:
            continue
        try:
            check_poolable([(run.run_id or 0, run), (other_id, loadruns.load(cfg.store, other_id))])
        except (ValueError, LoadgenError, StoreError):
            continue
        found.append(other_id)
    return found


def render_advice(cfg: DashboardSettings, run: LoadRun, ids: list[int]) -> None:
    st.subheader("Advisor: predicted vs measured, and a recommendation")
    scenario = run.params.scenario
    if scenario not in ("concurrency", "rate", "serial"):
        st.caption(
            f"The advisor models steady traffic; a {scenario!r} run has none. Ask it "
            "about a concurrency or rate run."
        )
        return
    others = poolable(cfg, run, ids)
    pooled: list[int] = []
    if others:
        pooled = st.multiselect(
            "Pool with other runs of this model, server, config and traffic",
            others,
            key=f"pool_{run.run_id}",
            help="As `batchscope advise --run A,B,C` and `batchscope doctor --run A,B,C`: "
            "the service times, traffic, hand-offs and time outside Triton over all of them. "
            "One short run's fit moves from run to run; several hold it steadier.",
        )
    run_ids = (run.run_id or 0, *sorted(pooled))
    key = f"advise_{run.run_id}"
    if not st.session_state.get(key):
        st.caption(
            "The advisor simulates Triton's batcher with the service times and traffic of this "
            "run, compares its prediction with what was measured, and searches for a better "
            "config (p99 latency ≤ 10 ms), the same search as `advisor advise --store`. It takes "
            "seconds to a minute of simulation."
        )
        if st.button("Ask the advisor about this run", key=f"ask_{run.run_id}"):
            st.session_state[key] = True
        else:
            return
    try:
        with st.spinner("Simulating the batcher..."):
            a = cached_advice(str(cfg.store), run_ids, cfg.triton_url)
    except (ValueError, TritonError) as exc:
        st.error(f"The advisor cannot model this run: {exc}", icon=":material/error:")
        return
    st.markdown(f"Current config: **{a.current}** ({a.config_source}), under {a.traffic}.")
    st.caption(f"Fitted on {a.describe}.")
    if a.capacity_known:
        st.caption(f"Costs outside the model: {a.costs}.")
    else:
        st.caption(
            "Capacity: unknown (run with --probe): no measured costs for this server, model "
            "and Triton version. A concurrency run on this machine calibrates them, and so "
            "does `batchscope advise --url ... --probe`."
        )
    st.caption(
        f"Latency predicted for the current config: {a.predicted.latency_line()}. {a.outside}."
    )
    if a.shapes is not None:
        # Several shapes batch apart in Triton: the split says how much each one batches.
        st.caption("  \n".join(a.shapes.lines()))
    st.dataframe(
        fmt.table(
            advice.predicted_vs_measured(a),
            {"predicted": "{:,.2f}", "measured": "{:,.2f}", "measured / predicted": "{:.2f}x"},
        ),
        hide_index=True,
    )
    rec = a.recommendation
    st.markdown(f"`{a.present}`")
    if a.silent:
        st.warning(
            "Nothing recommended: the advisor's simulation does not reproduce what this run "
            "measured for the config it was served with, so its predictions of other configs "
            "would stand on a wrong base.",
            icon=":material/warning:",
        )
        return
    st.caption(f"Current, over {rec.seeds} simulation seeds: {rec.noise_line('current')}.")
    unreached = rec.current.unreached_preferred()
    if unreached:
        st.caption(
            f"Preferred size(s) {list(unreached)} are not reached by the predicted batches "
            "(under 1 %): they change nothing."
        )
    if rec.best is None:
        st.warning(
            f"No config of the {rec.considered} tried meets p99 ≤ {rec.p99_bound_s * 1e3:g} ms.",
            icon=":material/warning:",
        )
    elif rec.keep:
        st.success(
            f"Keep it: none of the {rec.considered} configs tried (with its instance "
            f"count) beats it on {rec.objective} beyond the simulation's noise "
            f"({rec.seeds} seeds) and by x{rec.min_gain:g} or more (a measured p99 moves "
            f"by up to 20 % between runs of one config) with p99 ≤ "
            f"{rec.p99_bound_s * 1e3:g} ms.",
            icon=":material/check_circle:",
        )
    else:
        st.info(
            f"Recommended ({rec.objective}, p99 ≤ {rec.p99_bound_s * 1e3:g} ms, "
            f"{rec.considered} configs tried): **{rec.best.config.describe()}**, predicted "
            f"gain: {rec.gain_line()} (x{rec.gain_ratio:.2f}); "
            f"{rec.noise_line('best')}.",
            icon=":material/lightbulb:",
        )
        st.code(rec.best.config.pbtxt(), language="protobuf")
        render_apply(cfg, run, a)
    render_verification(cfg, run, a)


@st.cache_resource(show_spinner=False)
def applier() -> apply.ApplyManager:
    """One for the whole dashboard process: one change watched at a time, seen by every tab."""
    return apply.ApplyManager()


def render_apply(cfg: DashboardSettings, run: LoadRun, a: advice.Advice) -> None:
    """ "Apply with rollback": the recommendation on the live model, as `advise --apply`."""
    rec = a.recommendation
    assert rec.best is not None
    seconds, why = autopilot_apply.watch_length(rec.current.throughput_per_s)
    cols = st.columns([1, 3])
    watch = float(
        cols[0].number_input(
            "Watch (s)",
            apply.MIN_WATCH_S,
            apply.MAX_WATCH_S,
            float(seconds),
            key=f"apply_watch_{run.run_id}",
            help=f"Default: {why}.",
        )
    )
    if watch != seconds:
        cols[1].caption(autopilot_apply.given_length(watch, rec.current.throughput_per_s))
    st.caption(
        f"Apply with rollback: loads this config on the live model {a.model} at "
        f"{cfg.triton_url} as a config override (config.pbtxt is not touched: a restarted "
        f"Triton serves it again), watches {watch:g} s before and after, and will "
        f"{autopilot_apply.rollback_rule(watch)}. The same as `batchscope advise --url "
        f"{cfg.triton_url} --model {a.model} --apply`; the change goes on the record above."
    )
    if st.button(
        "Apply with rollback", key=f"apply_{run.run_id}", disabled=applier().busy, type="primary"
    ):
        client = TritonClient(cfg.triton_url, headers=admin_headers(cfg.admin_key_file))
        try:
            started = applier().start(client, a.model, rec.best, watch, cfg.store)
        except apply.ApplyRefused as exc:
            st.error(f"Not applied: {exc}", icon=":material/block:")
            return
        st.session_state["started_change"] = id(started)
    st.fragment(_apply_progress, run_every=PROGRESS_EVERY_S if applier().busy else None)()


def _apply_progress() -> None:
    active = applier().current
    if active is None:
        return
    if not active.done.is_set():
        st.info(
            f"Applying {active.new} to {active.model}: " + (active.lines or ["starting"])[-1],
            icon=":material/hourglass_top:",
        )
        return
    if active.error:
        if st.session_state.get("started_change") == id(active):
            st.error(f"Not applied: {active.error}", icon=":material/block:")
        return
    assert active.result is not None
    line = active.result.line()
    if active.result.change.outcome == "kept":
        st.success(line, icon=":material/check_circle:")
    else:
        st.warning(line, icon=":material/undo:")


def render_verification(cfg: DashboardSettings, run: LoadRun, a: advice.Advice) -> None:
    key = f"verified_{run.run_id}"
    if key not in st.session_state:
        st.caption(
            "Check it by experiment: each config is loaded as a scratch copy of the model on "
            f"the server, gets {advice.VERIFY_S:g} s of this run's traffic, and is unloaded."
        )
        if not st.button("Verify by experiment", key=f"verify_{run.run_id}"):
            return
        try:
            with st.spinner("Loading scratch copies and replaying the traffic..."):
                st.session_state[key] = advice.check(
                    a,
                    cfg.triton_url,
                    admin_headers(cfg.admin_key_file),
                    cfg.model_repository or Settings().model_repository,
                )
        except (ValueError, TritonError, LoadgenError) as exc:
            st.error(f"The verification could not run: {exc}", icon=":material/error:")
            return
    checked = st.session_state[key]
    st.markdown("**Verification** (scratch copies, the run's traffic replayed):")
    st.dataframe(
        fmt.table(
            advice.verification_frame(checked),
            {"predicted": "{:,.2f}", "measured": "{:,.2f}"},
        ),
        hide_index=True,
    )
    gain = checked.measured_gain(a.recommendation.objective)
    if gain is not None:
        st.caption(
            f"Measured gain x{gain:.2f} {a.recommendation.objective}, predicted "
            f"x{a.recommendation.gain_ratio:.2f}."
        )


def render_compare(cfg: DashboardSettings, ids: list[int], names: dict[int, str]) -> None:
    st.subheader("Compare two runs")
    if len(ids) < 2:
        st.info(
            "Start a second run to compare it with the first (e.g. concurrency 1 vs 4, "
            "or batch_add_model vs add_unbatched).",
            icon=":material/hourglass_empty:",
        )
        return
    for key, default in (("compare_a", ids[1]), ("compare_b", ids[0])):
        if st.session_state.get(key) not in ids:
            st.session_state[key] = default
    left, right = st.columns(2)
    a = left.selectbox("A", ids, format_func=names.__getitem__, key="compare_a")
    b = right.selectbox("B", ids, format_func=names.__getitem__, key="compare_b")
    run_a, run_b = loadruns.load(cfg.store, a), loadruns.load(cfg.store, b)
    table = loadruns.compare(run_a, run_b)
    st.dataframe(
        fmt.table(table, {"A": "{:,.2f}", "B": "{:,.2f}", "B / A": "{:.2f}x"}),
        hide_index=True,
        # Every row visible: the table is the point of the section.
        height=36 * (len(table) + 1) + 3,
    )
    st.plotly_chart(charts.render_comparison(table, f"#{a}", f"#{b}"), key="compare_chart")
    st.caption(
        "Each bar is run B's value divided by run A's: above 1 B has more of it (more "
        "throughput is better, more latency is worse). Serial vs concurrent, or a batching "
        "model vs its unbatched twin, shows what the batcher buys and what it costs."
    )
