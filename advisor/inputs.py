"""The advisor's inputs, gathered in one place for every caller: the CLI, the dashboard and
the doctor.

A source is one of three: a running Triton (``url`` + ``model``: its config, a window of its
statistics, and on this machine its CPU), the exporter's counters in Prometheus over a
window, or a load run in the load generator's store. From it come the batching config, the
service times, the traffic, the costs outside the model (given, measured now, cached, or
unknown), the time outside Triton (a probe or a traced stored run; else unknown), the
batcher's hand-offs (traces), what the window measured of the served config (the present
the advisor checks first), and the shapes the requests came in where a stored run or the
probe recorded them. The probes' requests hold what ``Options.load`` says (loadgen's input
options), so that any model can be probed. The callers pass plain values (:class:`Options`);
nothing here reads argparse or the environment, and a problem is an :class:`InputError`: one
line that names it and the fix (the CLI prints it and exits 2).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from advisor import costs, handoff, storedrun
from advisor.calibrate import load_capture
from advisor.config import BatcherConfig, from_model_config
from advisor.fit import (
    SATURATED_RATE,
    batch_times_from_prometheus,
    fit_service_times,
    fit_traffic,
    received_counts,
    saturated_traffic,
    saturation,
    traffic_from_prometheus,
)
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel, Traffic
from advisor.present import Measured, PresentCheck, not_executed
from loadgen.engine import runner as loadgen_api
from loadgen.errors import LoadgenError
from loadgen.inputopts import InputOptions
from loadgen.results.params import RunParams
from loadgen.results.result import RunResult
from observe import sampler
from observe.cpu import CpuMeter, local_cores, local_server_pid, meter
from observe.prometheus import prometheus_window
from observe.sampler import Sampler, slow_reads_note
from observe.window import Window
from promapi import PromClient, PrometheusError
from stacksettings import from_env_or_default
from tritonapi.client import (
    TritonClient,
    TritonError,
    TritonHTTPError,
    TritonUnreachable,
)
from tritonapi.stats import ModelStats
from tritonapi.traces import ExporterUnavailable, read_exporter
from tritonapi.urls import default_metrics_url

UNKNOWN = "capacity: unknown (run with --probe)"
OUTSIDE_UNKNOWN = (
    "time outside Triton: not measured, so the client's latency is unknown and the p99 "
    "bound is judged server-side (--probe measures it on the running server; a stored run "
    "made with --trace carries it)"
)
# The exporter retains the last 2 minutes traced (exporter.tracing): all of them are read.
TRACES_S = 120
GIVEN_TRAFFIC = "the traffic was given (--rate or --concurrency), not fitted from the window"
RELOADED = (
    "the model was reloaded (or Triton restarted) during the window: its statistics started "
    "over, with the requests queued across the reload"
)


class InputError(ValueError):
    """An input the advisor cannot use: one line for the user (the CLI exits 2)."""


class NotExecuted(InputError):
    """The window watched saw the model execute nothing: there is no present to check, so
    nothing is advised. Not a misuse: the callers print ``check``'s line (advise exits as
    for a present that is off)."""

    def __init__(self, check: PresentCheck) -> None:
        super().__init__(check.line())
        self.check = check


@dataclass(frozen=True)
class Options:
    """Where the inputs come from and what the user gave instead, as plain values."""

    url: str = ""  # a running Triton's HTTP URL
    model: str = ""
    window_s: float = 10.0  # seconds of the server's traffic (or of Prometheus) to read
    # Triton's /metrics, whose pending-request gauge makes the window's count one of
    # requests received, not answered (``fit_window``); "" reads the answered count alone.
    metrics_url: str = ""
    prometheus: str = ""  # fit from the exporter's counters in this Prometheus instead
    store: Path | None = None  # the load generator's store, with ``runs``
    runs: tuple[int, ...] = ()  # pooled when several (storedrun.load_runs)
    # Traffic given instead of fitted.
    rate: float | None = None
    cv: float | None = None
    concurrency: int | None = None
    # Costs given instead of measured.
    calibration: Path | None = None  # a capture written by bench/advisor_calibrate.py
    cores: float | None = None
    request_us: float | None = None
    config: BatcherConfig | None = None  # given instead of read from the server or the run
    probe: bool = False  # measure costs and the time outside Triton with a short load now
    # Measure the time outside Triton alone with the same short load, when nothing else
    # gives it (advise on a live server: its p99 bound is then the clients').
    probe_outside: bool = False
    probe_s: float = 3.0
    # What the probes' and --verify's requests hold (loadgen's input options).
    load: InputOptions = field(default_factory=InputOptions)
    traces: str = ""  # the exporter whose retained traces give the hand-offs
    calibrations: Path = field(
        default_factory=lambda: from_env_or_default().state_dir / "advisor-calibrations.json"
    )


@dataclass(frozen=True)
class WindowTraffic:
    """A window's traffic: fitted from the requests Triton answered, and from those it
    received (executed + pending, from its metrics) where its metrics were read.
    The received count is the clients' traffic; the answered one lumps what a stalled
    model (a load, a long batch) answered late into a burst that was not sent."""

    answered: OpenLoop
    received: OpenLoop | None
    why_answered: str = ""  # why there is no received fit

    @property
    def traffic(self) -> OpenLoop:
        return self.received if self.received is not None else self.answered

    def describe(self) -> str:
        if self.received is not None:
            return (
                f"{self.received.describe()}, from the requests received (Triton's executed "
                f"count + pending gauge; answered alone: {self.answered.describe()})"
            )
        return f"{self.answered.describe()}, from the requests answered ({self.why_answered})"


def fit_window(window: Window) -> WindowTraffic:
    """The traffic of ``window`` as the advisor, the doctor and the autopilot read it: the
    requests received where Triton's metrics were read through the window, else those
    answered (with the reason). ValueError when the answered count cannot be fitted."""
    answered = fit_traffic(window.samples)
    if window.pending_note or not window.received:
        why = window.pending_note or "Triton's metrics not read: give --metrics-url"
        return WindowTraffic(answered, None, why)
    received = received_counts(window.received)
    try:
        return WindowTraffic(answered, fit_traffic(received))
    except ValueError as exc:
        return WindowTraffic(answered, None, f"the received count not fitted: {exc}")


@dataclass
class Inputs:
    """What a recommendation needs, and where each part came from (``notes``)."""

    config: BatcherConfig
    service: ServiceModel
    traffic: Traffic
    notes: list[str]
    server: str = ""  # the Triton the costs belong to (the cache's key)
    model: str = ""
    triton_version: str = ""
    measured: costs.Calibration | None = None  # costs measured while reading the inputs
    # ``measured`` is a probe's (the first probe of a model that had never executed measures
    # the costs too): --probe does not probe again.
    probed: bool = False
    # The time outside Triton's queue and execution (a traced stored run, or a probe), and
    # the batcher's hand-offs measured from traces (with the line that says so).
    outside: handoff.Outside | None = None
    handoffs: tuple[handoff.HandOff, str] | None = None
    run: storedrun.StoredRun | None = None  # the stored run read, when that was the source
    # Requests per shape, where a stored run or the probe recorded them (None: unknown).
    shapes: dict[str, int] | None = None
    outside_why: str = ""  # why the time outside Triton was not measured, when it was tried
    # What the window showed of the served config, under the traffic fitted from it: the
    # present the advisor checks before it predicts (advisor.present); None, with why, when
    # the window is not that of the config and traffic advised for.
    present: Measured | None = None
    present_why: str = ""


@dataclass
class Costs:
    """The CPU model used, and the line that says where it came from."""

    cpu: CpuModel
    line: str
    calibration: costs.Calibration | None = None

    @property
    def known(self) -> bool:
        return self.cpu.cores is not None


@dataclass
class Prepared:
    """The inputs with every measured cost applied: what the search runs on."""

    inputs: Inputs
    costs: Costs  # its cpu holds the hand-offs and the time outside Triton when measured
    outside_line: str  # where the time outside Triton came from, or that it is unknown

    @property
    def cpu(self) -> CpuModel:
        return self.costs.cpu

    @property
    def client_terms(self) -> bool:
        return self.inputs.outside is not None


# ---- what the user gave --------------------------------------------------------------------


def given_costs(opts: Options) -> tuple[Costs | None, ServiceModel | None]:
    """Costs the user gave: a calibration capture, or cores and a per-request cost."""
    if opts.calibration:
        try:
            service, cpu = load_capture(opts.calibration).calibrate()
        except ValueError as exc:
            raise InputError(f"--calibration: {exc}") from None
        return Costs(cpu, f"costs: from the calibration capture {opts.calibration}"), service
    if opts.request_us is not None and opts.request_us < 0:
        raise InputError("--request-us must be >= 0")
    if opts.request_us is not None and not opts.cores:
        raise InputError("--request-us needs --cores N (the cores the server has)")
    if opts.cores and opts.request_us is not None:
        cpu = CpuModel(cores=opts.cores, request_s=opts.request_us / 1e6, request_cv=1.0)
        return Costs(cpu, "costs: given on the command line (--cores, --request-us)"), None
    return None, None


def given_traffic(opts: Options) -> Traffic | None:
    if opts.rate and opts.concurrency:
        raise InputError("give --rate (open loop) or --concurrency (closed loop), not both")
    if opts.cv is not None and opts.cv < 0:
        raise InputError(f"--cv must be >= 0, got {opts.cv}")
    if opts.rate:
        return OpenLoop(opts.rate, 1.0 if opts.cv is None else opts.cv)
    if opts.concurrency:
        return ClosedLoop(opts.concurrency)
    return None


# ---- a running Triton ----------------------------------------------------------------------


def triton_problem(exc: TritonError, model: str) -> str:
    if isinstance(exc, TritonUnreachable):
        return f"{exc}: start it (./stack/up) or fix --url"
    if isinstance(exc, TritonHTTPError):
        return (
            f"{exc}: check the model name {model!r} "
            "(GET /v2/repository/index lists them), or fix --url"
        )
    return f"{exc}: is --url the HTTP port of a Triton server?"


def server_config(client: TritonClient, model: str) -> BatcherConfig:
    """The model's batching config as the server loaded it; InputError (one line) if not."""
    try:
        return from_model_config(client.model_config(model))
    except TritonError as exc:
        raise InputError(triton_problem(exc, model)) from None
    except ValueError as exc:
        raise InputError(f"{model}'s config: {exc}") from None


def triton_version(client: TritonClient) -> str:
    try:
        return str(client.server_metadata().get("version", ""))
    except TritonError:
        return ""


def metrics_url_of(url: str) -> str:
    """Triton's ``/metrics`` beside its HTTP ``url``: the stack's (its STACK_* settings) when
    ``url`` is the stack's Triton; port 8002 of ``url``'s host when ``url`` has Triton's
    default port 8000; else "" (unknown). A Triton on other ports has its metrics
    elsewhere, and port 8002 there may be another Triton's, whose gauge would be read as
    this one's: the caller gives ``--metrics-url`` then."""
    settings = from_env_or_default()
    if url.rstrip("/") == settings.url("triton_http").rstrip("/"):
        return settings.url("triton_metrics") + "/metrics"
    try:
        port = urlsplit(url).port
    except ValueError:
        return ""
    return default_metrics_url(url) if port == 8000 else ""


def watch(url: str, model: str, window_s: float, metrics_url: str | None = None) -> Window:
    """Watch ``model`` on ``url`` for ``window_s`` through the one sampler
    (:func:`observe.sampler.watch`): its statistics, Triton's metrics after each count when
    ``metrics_url`` is given, and (here) its CPU. InputError (one line) when the server
    stops answering."""
    try:
        watched = sampler.watch(TritonClient(url), [model], window_s, metrics_url, strict=True)
    except TritonError as exc:
        raise InputError(triton_problem(exc, model)) from None
    window = watched.windows.get(model)
    if window is None:
        raise InputError(f"Triton at {url} has no statistics for {model!r}")
    return window


def from_server(
    opts: Options,
    calibrated: ServiceModel | None,
    traffic: Traffic | None,
    window: Window | None = None,
) -> Inputs:
    """Config, service times and traffic from a running Triton over a window (watched now,
    or the caller's); on this machine, its CPU over the same window gives the costs."""
    if not opts.model:
        raise InputError("--url needs --model")
    client = TritonClient(opts.url)
    config = opts.config or server_config(client, opts.model)
    if opts.probe and calibrated is None and window is None and never_executed(client, opts.model):
        return first_probe(opts, client, config, traffic)
    if window is None:
        window = watch(opts.url, opts.model, opts.window_s, opts.metrics_url or None)
    delta, cumulative = window.delta, window.cumulative
    if delta is None or cumulative is None:
        raise InputError(f"{window.source}: not Triton's statistics, so no service times")
    notes = []
    if calibrated is not None:
        # Measured at low CPU contention: a busy window's compute times include the
        # contention the simulator adds itself.
        service = calibrated
        notes.append("service times from the calibration capture")
    elif delta.execution_count > 0:
        service = fit_service_times(delta)
        notes.append(f"service times fitted from {delta.execution_count} executions in the window")
    elif cumulative.execution_count > 0:
        service = fit_service_times(cumulative)
        notes.append("no executions in the window: service times fitted since server start")
    else:
        raise NotExecuted(
            not_executed(note=f"{opts.model} has never executed: send load while advise watches")
        )
    present, present_why = None, GIVEN_TRAFFIC
    if traffic is None and delta.execution_count == 0:
        raise NotExecuted(not_executed(note="send load while advise watches, or widen --window"))
    if traffic is None:
        try:
            seen = fit_window(window)
        except ValueError as exc:
            slow = slow_reads_note(window.slow_reads)
            raise InputError(
                f"{exc}{f' ({slow})' if slow else ''}; give the traffic with --rate or "
                "--concurrency instead"
            ) from None
        # A saturated model's counts show its capacity, not the offered rate: advised for
        # a multiple of the rate it answered, whichever count was read.
        saturated = saturation(delta, config.delay_s)
        traffic = saturated_traffic(seen.answered) if saturated else seen.traffic
        if saturated:
            present_why = "the model is saturated: advised for more than the rate it answered"
        elif window.reset:
            present_why = RELOADED
        else:
            present, present_why = Measured.from_window(window), ""
        if window.slow_reads:
            notes.append(slow_reads_note(window.slow_reads))
        notes.append(
            f"traffic fitted from the window: {seen.describe()}"
            + (
                f"; the model is saturated ({saturated}): advised for {traffic.describe()}, "
                f"x{SATURATED_RATE:g} the rate it answered"
                if saturated
                else ""
            )
        )
    inputs = Inputs(config, service, traffic, notes, opts.url, opts.model, triton_version(client))
    inputs.present, inputs.present_why = present, present_why
    if window.cpu is not None and window.cores is not None:
        source = f"the local Triton's CPU over the {window.seconds:.0f} s window"
        try:
            inputs.measured = costs.from_process_cpu(
                window.cpu, window.cores, delta, service, source
            )
        except ValueError as exc:
            notes.append(f"costs not measured from the window: {exc}")
    return inputs


def never_executed(client: TritonClient, model: str) -> bool:
    try:
        return client.model_stats(model).execution_count == 0
    except TritonError as exc:
        raise InputError(triton_problem(exc, model)) from None


def probe_params(opts: Options, model: str, url: str, concurrency: int, label: str) -> RunParams:
    """A probe's load: closed loop for ``opts.probe_s``, its requests as ``opts.load`` says."""
    return opts.load.apply(
        RunParams(
            "concurrency",
            model=model,
            url=url,
            concurrency=concurrency,
            duration_s=opts.probe_s,
            label=label,
        )
    )


def probed(
    client: TritonClient, model: str, params: RunParams, cpu: CpuMeter | None = None
) -> tuple[RunResult, Window]:
    """A probe's load, and the window of ``model`` over it (the one sampler, read at its
    start and end; ``cpu``: the local server's meter over it). InputError (one line) when
    the load or the statistics fail."""
    sampler = Sampler(client, [model], strict=True, cpu=cpu)
    try:
        sampler.start()
        result = loadgen_api.run(params, db=None)
        window = sampler.finish().get(model)
    except LoadgenError as exc:
        raise InputError(f"--probe: {exc}") from None
    except TritonError as exc:
        raise InputError(triton_problem(exc, model)) from None
    if window is None:
        raise InputError(f"Triton at {client.url} has no statistics for {model!r}")
    return result, window


def probe_concurrency(config: BatcherConfig) -> int:
    return min(64, max(8, 2 * config.instances * config.batch_limit))


def first_probe(
    opts: Options, client: TritonClient, config: BatcherConfig, traffic: Traffic | None
) -> Inputs:
    """``--probe`` on a model that has never executed: a first probe load, so that there
    are executions to fit the service times from (no window to wait for: nothing runs yet,
    so the traffic must be given). The same load measures the costs and the time outside
    Triton (:func:`probe_costs`), so that ``--probe`` does not load the model twice."""
    if traffic is None:
        raise InputError(
            f"model {opts.model!r} has never executed, so it has no traffic to watch: "
            "give the traffic with --rate or --concurrency"
        )
    cpu_meter = costs_meter(opts, opts.url)
    concurrency = probe_concurrency(config)
    params = probe_params(opts, opts.model, opts.url, concurrency, "advisor first probe")
    result, window = probed(client, opts.model, params, cpu_meter)
    delta = window.delta
    assert delta is not None  # a window of the statistics API
    if delta.execution_count == 0:
        raise InputError(f"--probe: model {opts.model!r} executed nothing under load")
    notes = [
        f"model had never executed: service times fitted from a first {opts.probe_s:g} s "
        f"probe ({delta.execution_count} executions; no window watched)"
    ]
    inputs = Inputs(
        config,
        fit_service_times(delta),
        traffic,
        notes,
        opts.url,
        opts.model,
        triton_version(client),
    )
    inputs.shapes = result.summary.client.shapes
    inputs.present_why = "no window of the traffic watched (the model had never executed)"
    measured = probe_costs(opts, inputs, concurrency, result, window, cpu_meter)
    inputs.measured, inputs.outside, inputs.probed = measured.calibration, measured.outside, True
    return inputs


# ---- a stored load run ---------------------------------------------------------------------


def from_store(opts: Options, calibrated: ServiceModel | None, traffic: Traffic | None) -> Inputs:
    """Service times, traffic, the time outside Triton, the hand-offs and (for runs stored
    since it is kept) the config and Triton version from stored load runs (several of one
    traffic pooled), each read once; a closed-loop run's throughput gives the costs. The
    timer slack of the server's threads is read when it runs on this machine."""
    if opts.store is None or not opts.runs:
        raise InputError("--store needs --run ID (batchscope load runs lists them)")
    try:
        run = storedrun.load_runs(
            opts.store,
            opts.runs,
            lambda url: handoff.timer_slack(local_server_pid(opts.url or url)),
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    except sqlite3.DatabaseError as exc:
        raise InputError(
            f"--store {opts.store} is not a load-run store ({exc}); give the SQLite file "
            "that loadgen writes (.stack/loadgen.sqlite3)"
        ) from None
    notes = [f"from stored {run.describe}"]
    if opts.config is not None:
        config = opts.config
    elif run.config is not None:
        config = run.config
        notes.append(
            f"config as Triton {run.triton_version or '(version unknown)'} reported it "
            "when the run began"
        )
    elif opts.url:
        config = server_config(TritonClient(opts.url), run.model)
        notes.append(f"config read from {opts.url} now (the run was stored without it)")
    else:
        raise InputError("give the config: --max-batch-size N [--preferred A,B] [--delay-us D]")
    service = calibrated or run.service
    notes.append(
        "service times from the calibration capture"
        if calibrated
        else f"service times fitted from {service_source(run)}"
    )
    given = traffic
    if traffic is None:
        traffic = run.traffic
        source = "run" if len(run.run_ids) < 2 else f"{len(run.run_ids)} runs' arrival gaps"
        notes.append(f"traffic of the {source}: {traffic.describe()}")
    if run.measured_batch_size:
        notes.append(f"measured average batch size in the run: {run.measured_batch_size:.2f}")
    inputs = Inputs(
        config,
        service,
        traffic,
        notes,
        run.server,
        run.model,
        run.triton_version,
        run=run,
        shapes=run.shapes,
    )
    if opts.config is not None:
        inputs.present_why = "the config was given by flags: it may not be the one the runs had"
    elif given is not None:
        inputs.present_why = GIVEN_TRAFFIC
    else:
        inputs.present = run.present
    inputs.outside = run.outside
    if run.handoff is not None:
        inputs.handoffs = (
            run.handoff,
            f"{run.handoff.describe()} (the {run.whose} {run.traced_requests:,} traced requests)",
        )
    if run.concurrency and run.measured_throughput_per_s:
        cores = opts.cores or local_cores(run.server)
        if cores is None:
            notes.append("costs not fitted from the run: give --cores N (the server's cores)")
        else:
            try:
                inputs.measured = storedrun.calibration(
                    replace(run, service=service), config, cores
                )
            except ValueError as exc:
                notes.append(f"costs not fitted from the run: {exc}")
    return inputs


def service_source(run: storedrun.StoredRun) -> str:
    """Whose statistics the service times are: the untraced runs' when some were traced."""
    if run.service_runs == run.run_ids or len(run.run_ids) < 2:
        return f"the {run.whose} statistics"
    ids = ", ".join(map(str, run.service_runs))
    plural = "s" if len(run.service_runs) > 1 else ""
    return f"the statistics of untraced run{plural} {ids} (tracing costs time in every execution)"


# ---- Prometheus ----------------------------------------------------------------------------


def from_prometheus(
    opts: Options, calibrated: ServiceModel | None, traffic: Traffic | None
) -> Inputs:
    """Service times and traffic from the exporter's counters in Prometheus."""
    if not opts.model:
        raise InputError("--prometheus needs --model")
    window = f"{max(1, round(opts.window_s))}s"
    given = traffic
    notes = [f"fitted from the exporter's counters in {opts.prometheus} over {window}"]
    try:
        service = calibrated or fit_service_times(
            batch_times_from_prometheus(opts.prometheus, opts.model, window)
        )
        if traffic is None:
            step = max(1.0, opts.window_s / 20)
            traffic = traffic_from_prometheus(opts.prometheus, opts.model, opts.window_s, step)
            notes.append(f"traffic: {traffic.describe()}")
    except ValueError as exc:
        raise InputError(str(exc)) from None
    version = ""
    if opts.config is not None:
        config = opts.config
    elif opts.url:
        client = TritonClient(opts.url)
        config = server_config(client, opts.model)
        version = triton_version(client)
    else:
        raise InputError("give the config: --url URL, or --max-batch-size N [--preferred A,B]")
    inputs = Inputs(config, service, traffic, notes, opts.url, opts.model, version)
    if given is not None:
        inputs.present_why = GIVEN_TRAFFIC
    elif opts.config is not None:
        inputs.present_why = "the config was given by flags: it may not be the one served"
    else:
        inputs.present, inputs.present_why = prometheus_present(opts)
    return inputs


def prometheus_present(opts: Options) -> tuple[Measured | None, str]:
    """What the exporter's counters showed over the window, or why they could not."""
    try:
        prom = PromClient(opts.prometheus, timeout_s=10.0, hint="check --prometheus")
        window = prometheus_window(prom, opts.model, opts.window_s)
    except PrometheusError as exc:
        return None, f"the exporter's counters not read ({exc})"
    if window is None:
        return None, f"Prometheus has no exporter series for {opts.model}"
    return Measured.from_window(window), ""


# ---- costs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What a short closed-loop load measured: the costs, and the time outside Triton."""

    calibration: costs.Calibration
    outside: handoff.Outside | None


def costs_meter(opts: Options, url: str) -> CpuMeter | None:
    """The CPU meter of the server a probe loads (None: not on this machine, and then
    ``--cores`` must say its cores); InputError (one line) when neither is there."""
    cpu_meter = meter(url)
    if cpu_meter is None and not opts.cores:
        raise InputError(
            f"--probe on {url}, whose CPU cannot be read from here, needs --cores N "
            "(the server's CPU cores)"
        )
    return cpu_meter


def probe(opts: Options, inputs: Inputs) -> Probe:
    """Measure the costs and the time outside Triton with a short closed-loop load."""
    url = opts.url or inputs.server
    if not url:
        raise InputError("--probe needs --url (the Triton to probe)")
    concurrency = probe_concurrency(inputs.config)
    cpu_meter = costs_meter(opts, url)
    client = TritonClient(url)
    params = probe_params(opts, inputs.model, url, concurrency, "advisor probe")
    result, window = probed(client, inputs.model, params, cpu_meter)
    return probe_costs(opts, inputs, concurrency, result, window, cpu_meter)


def probe_costs(
    opts: Options,
    inputs: Inputs,
    concurrency: int,
    result: RunResult,
    window: Window,
    cpu_meter: CpuMeter | None,
) -> Probe:
    """The costs and the time outside Triton that one probe's load measured: the local
    server's CPU over it where ``cpu_meter`` read it, else the per-request cost that makes
    the simulator serve its throughput on ``--cores``."""
    config = inputs.config
    cpu, delta = window.cpu, window.delta
    assert delta is not None  # a window of the statistics API
    inputs.shapes = result.summary.client.shapes or inputs.shapes
    measured = result.summary.client.throughput_per_s or 0.0
    source = f"a {opts.probe_s:g} s probe at concurrency {concurrency} ({measured:,.0f}/s)"
    try:
        if cpu_meter is not None and cpu is not None:
            calibration = costs.from_process_cpu(
                cpu, cpu_meter.cores, delta, inputs.service, source
            )
        else:
            request_s = costs.fit_request_cost(
                config, inputs.service, concurrency, measured, float(opts.cores or 0)
            )
            calibration = costs.Calibration(
                float(opts.cores or 0),
                request_s,
                source + ", fitted",
                time.time(),
                delta.inference_count,
            )
    except ValueError as exc:
        raise InputError(f"--probe: {exc}") from None
    return Probe(calibration, probe_outside(result.summary.client.latency_s.mean, delta, source))


def probe_outside(
    client_mean_s: float | None, delta: ModelStats, source: str
) -> handoff.Outside | None:
    """The mean time outside Triton over a probe: the clients' mean latency less Triton's
    mean queue and execution per request (its statistics over the same requests)."""
    ok = delta.phase("success").count
    if client_mean_s is None or ok <= 0:
        return None
    inside = (
        delta.phase("queue").seconds
        + sum(delta.phase(p).seconds for p in ("compute_input", "compute_infer", "compute_output"))
    ) / ok
    return handoff.Outside(max(client_mean_s - inside, 0.0), (), source)


def outside_probe(opts: Options, inputs: Inputs) -> tuple[handoff.Outside | None, str]:
    """The time outside Triton measured by :func:`probe`'s load (its costs left as they
    are), or None and why it could not be (the server stopped answering, the load failed)."""
    url = opts.url or inputs.server
    concurrency = probe_concurrency(inputs.config)
    params = probe_params(opts, inputs.model, url, concurrency, "advisor outside probe")
    try:
        result, window = probed(TritonClient(url), inputs.model, params)
    except InputError as exc:
        return None, str(exc)
    assert window.delta is not None  # a window of the statistics API
    measured = result.summary.client.throughput_per_s or 0.0
    source = f"a {opts.probe_s:g} s probe at concurrency {concurrency} ({measured:,.0f}/s)"
    found = probe_outside(result.summary.client.latency_s.mean, window.delta, source)
    return found, "" if found is not None else "the probe's requests were not answered"


def replay_options(opts: Options, inputs: Inputs) -> InputOptions:
    """What ``--verify``'s replayed requests hold: ``opts.load`` when any input option was
    given, else (none given) the stored run's own, so that a run is replayed alike."""
    run = inputs.run
    if opts.load == InputOptions() and run is not None and run.inputs is not None:
        return run.inputs
    return opts.load


def resolve_costs(opts: Options, given: Costs | None, inputs: Inputs) -> Costs:
    """Given costs, else measured now (probe or window), else cached, else unknown. A probe
    also measures the time outside Triton (``inputs.outside``) when none is known."""
    if given is not None:
        return given
    cache = costs.CalibrationCache(opts.calibrations)
    measured = inputs.measured
    if opts.probe and not inputs.probed:
        probed = probe(opts, inputs)
        measured = probed.calibration
        if inputs.outside is None and probed.outside is not None:
            inputs.outside = probed.outside
    elif opts.probe_outside and inputs.outside is None:
        inputs.outside, inputs.outside_why = outside_probe(opts, inputs)
    if measured is not None:
        measured = replace(
            measured,
            server=inputs.server,
            model=inputs.model,
            triton_version=inputs.triton_version,
        )
        if inputs.server:
            try:
                cache.put(measured)
            except OSError as exc:
                inputs.notes.append(f"costs not cached in {opts.calibrations}: {exc.strerror}")
        return Costs(measured.cpu, f"costs: measured: {measured.describe()}", measured)
    cached = (
        cache.get(inputs.server, inputs.model, inputs.triton_version) if inputs.server else None
    )
    if cached is not None:
        age_h = (time.time() - cached.measured_at) / 3600
        return Costs(cached.cpu, f"costs: cached ({age_h:.1f} h old): {cached.describe()}", cached)
    return Costs(CpuModel(), f"costs: not measured; {UNKNOWN}")


def traced_handoffs(
    exporter_url: str, model: str, config: BatcherConfig, server: str | None = None
) -> tuple[handoff.HandOff, str]:
    """The hand-offs measured from the exporter's retained traces of ``model``, and the line
    that says so; InputError (one line) when there are not enough complete ones. The timer
    slack of ``server``'s threads is read when it runs on this machine."""
    try:
        window = read_exporter(exporter_url, model, TRACES_S)
    except ExporterUnavailable as exc:
        raise InputError(
            f"--traces: {exc}; give the exporter's URL (port 9733 by default)"
        ) from None
    if window.trace_rate not in (None, 1):
        raise InputError(
            f"--traces: {model} is traced 1 request in {window.trace_rate}: a batch's other "
            "requests are missing; trace every request (batchscope trace --rate 1)"
        )
    if len(window.requests) < handoff.MIN_REQUESTS:
        raise InputError(
            f"--traces: the exporter holds {len(window.requests)} traced requests of {model}, "
            f"fewer than {handoff.MIN_REQUESTS}: trace some first "
            f"(batchscope trace --model {model})"
        )
    pid = local_server_pid(server) if server else None
    found = handoff.measure(window.requests, config, handoff.timer_slack(pid))
    return found, f"{found.describe()} ({len(window.requests):,} traced requests)"


# ---- all of it -----------------------------------------------------------------------------


def gather(opts: Options, window: Window | None = None) -> Prepared:
    """The inputs from the source ``opts`` names, with every measured cost applied.

    ``window``: a window of the server the caller has already watched (the doctor's), used
    instead of watching again."""
    given, calibrated = given_costs(opts)
    traffic = given_traffic(opts)
    if opts.store is not None:
        inputs = from_store(opts, calibrated, traffic)
    elif opts.prometheus:
        inputs = from_prometheus(opts, calibrated, traffic)
    elif opts.url:
        inputs = from_server(opts, calibrated, traffic, window)
    else:
        raise InputError(
            "give --url URL --model M (a running Triton), --prometheus URL --model M, "
            "or --store DB --run ID"
        )
    cost = resolve_costs(opts, given, inputs)
    notes = inputs.notes
    if inputs.outside is not None:
        cost = replace(cost, cpu=inputs.outside.apply(cost.cpu))
        outside_line = inputs.outside.describe()
    elif inputs.outside_why:
        outside_line = (
            f"time outside Triton: not measured ({inputs.outside_why}), so the p99 bound is "
            "judged server-side (queue + compute)"
        )
    else:
        outside_line = OUTSIDE_UNKNOWN
    measured = (
        traced_handoffs(opts.traces, inputs.model, inputs.config, opts.url or inputs.server)
        if opts.traces
        else inputs.handoffs
    )
    if measured is not None:
        cost = replace(cost, cpu=measured[0].apply(cost.cpu))
        notes.append(measured[1])
    else:
        notes.append(
            "hand-offs: not measured, left out (the batcher's dispatch and timer slack: "
            "give --traces EXPORTER_URL after `batchscope trace --model M`, or a run "
            "made with --trace)"
        )
    if not inputs.config.dynamic_batching:
        notes.append("dynamic batching is off in the current config")
    service = inputs.service
    notes.append(f"service {service.base_s * 1e6:.0f} us + {service.per_item_s * 1e6:.1f} us/item")
    return Prepared(inputs, cost, outside_line)
