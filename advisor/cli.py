"""triton-advisor: predict a dynamic-batching config's outcome and recommend a better one.

    triton-advisor advise --url http://127.0.0.1:8000 --model batch_add_model --p99-ms 10
    triton-advisor advise --url http://127.0.0.1:8000 --model batch_add_model --p99-ms 10 --probe
    triton-advisor advise --store .stack/loadgen.sqlite3 --run 3 --p99-ms 10
    triton-advisor predict --max-batch-size 64 --delay-us 1000 --service-us 600,41 \\
        --concurrency 8 --cores 2 --request-us 100
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import requests

from advisor import costs, handoff, storedrun, verify
from advisor.calibrate import load_capture
from advisor.config import BatcherConfig, from_model_config
from advisor.fit import (
    batch_times_from_prometheus,
    fit_service_times,
    fit_traffic,
    traffic_from_prometheus,
)
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel, Traffic
from advisor.predict import (
    MIN_GAIN,
    OBJECTIVES,
    REACHED,
    UNITS,
    Prediction,
    Recommendation,
    SearchSpace,
    predict,
    recommend,
)
from loadgen import api as loadgen_api
from loadgen.errors import LoadgenError
from loadgen.params import RunParams
from stacksettings import admin_headers, from_env_or_default
from tritonapi.client import TritonClient, TritonError, TritonHTTPError, TritonUnreachable
from tritonapi.modelname import model_name
from tritonapi.stats import ModelStats
from tritonapi.traces import ExporterUnavailable, read_exporter


class UsageError(Exception):
    """Bad input: one line for the user, exit code 2."""


# No flag of the advisor means anything past this (a rate, a window, a count): a bigger
# number is a typing slip, and would only make the simulator run for ever.
MAX_NUMBER = 1e9


def _positive(kind: type, what: str, zero_ok: bool = False) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}: {text!r} is not a number") from None
        in_range = (0 <= value if zero_ok else 0 < value) and value < math.inf  # not NaN
        if not in_range:
            wanted = "0 or more" if zero_ok else "a positive number"
            raise argparse.ArgumentTypeError(f"{what} must be {wanted}, got {text}")
        if value > MAX_NUMBER:
            raise argparse.ArgumentTypeError(
                f"{what} {text} is past the bound of {MAX_NUMBER:g}; give a smaller number"
            )
        return value

    return parse


def _non_negative_int(what: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what}: {text!r} is not a whole number") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"{what} must be 0 or more, got {text}")
        return value

    return parse


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"preferred sizes: {text!r} is not a comma-separated list of integers"
        ) from None
    return sizes


def _instance_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(sorted({int(s) for s in text.split(",") if s.strip()}))
    except ValueError:
        counts = ()
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError(
            f"instance counts: {text!r} is not a comma-separated list of positive integers "
            "(e.g. 1,2)"
        )
    return counts


def _service(text: str) -> ServiceModel:
    try:
        base, per_item = (float(x) for x in text.split(","))
        return ServiceModel(base / 1e6, per_item / 1e6)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"--service-us: {text!r} must be BASE,PER_ITEM microseconds, e.g. 600,41 ({exc})"
        ) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="triton-advisor",
        description="Predict what a Triton dynamic-batching config does; recommend a better one.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    common = argparse.ArgumentParser(add_help=False)
    traffic = common.add_argument_group("traffic (default: fitted from the server's own traffic)")
    traffic.add_argument("--rate", type=_positive(float, "--rate"), help="open-loop requests/s")
    traffic.add_argument(
        "--cv",
        type=_positive(float, "--cv", zero_ok=True),
        default=None,
        help="burstiness: coefficient of variation of inter-arrival times (1 = Poisson)",
    )
    traffic.add_argument(
        "--concurrency", type=_positive(int, "--concurrency"), help="closed-loop clients"
    )
    costs = common.add_argument_group(
        "costs outside the model (default: measured from a local Triton's CPU, or cached)"
    )
    costs.add_argument(
        "--calibration",
        type=Path,
        help="capture written by bench/advisor_calibrate.py (sets the CPU model)",
    )
    costs.add_argument("--cores", type=_positive(float, "--cores"), help="CPU cores the server has")
    costs.add_argument(
        "--request-us", type=float, help="CPU microseconds per request outside the model"
    )
    common.add_argument("--json", action="store_true", help="machine-readable output")

    search = argparse.ArgumentParser(add_help=False)
    search.add_argument(
        "--p99-ms", type=_positive(float, "--p99-ms"), required=True, help="p99 latency bound"
    )
    search.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default="auto",
        help="auto (default): p99 latency under open-loop traffic, throughput under "
        "closed-loop clients; headroom: capacity over the offered rate (needs costs)",
    )
    search.add_argument(
        "--seeds",
        type=_positive(int, "--seeds"),
        default=5,
        help="random seeds per finalist: the noise interval (default 5)",
    )
    search.add_argument(
        "--requests",
        type=_positive(int, "--requests"),
        default=5000,
        help="simulated requests per config tried (default 5000; fewer is faster, noisier)",
    )
    search.add_argument(
        "--max-batch-limit",
        type=_positive(int, "--max-batch-limit"),
        default=64,
        help="largest max_batch_size the model accepts (default 64)",
    )
    search.add_argument(
        "--min-gain",
        type=_positive(float, "--min-gain"),
        default=MIN_GAIN,
        metavar="X",
        help=f"smallest predicted gain worth a change (default {MIN_GAIN:g}: a p99 latency "
        "measured over 2,000 requests moves by up to 20 %% between runs of one config)",
    )
    search.add_argument(
        "--try-instances",
        type=_instance_counts,
        default=(),
        metavar="N,N",
        help="instance counts to search, e.g. 1,2 (default: the current count only; the "
        "hand-offs are measured with it, and other counts are extrapolated)",
    )

    config_flags = argparse.ArgumentParser(add_help=False)
    group = config_flags.add_argument_group("batching config (advise reads it from --url)")
    group.add_argument("--max-batch-size", type=_positive(int, "--max-batch-size"))
    group.add_argument("--preferred", type=_sizes, default=(), help="e.g. 2,4")
    group.add_argument("--delay-us", type=_non_negative_int("--delay-us"), default=0)
    group.add_argument("--instances", type=_positive(int, "--instances"), default=1)

    advise = sub.add_parser(
        "advise",
        parents=[common, search, config_flags],
        help="predict and recommend from a running Triton or a stored load run",
    )
    advise.add_argument("--url", help="Triton HTTP base URL (config, statistics, traffic)")
    advise.add_argument("--model", type=model_name, help="model name (with --url)")
    advise.add_argument(
        "--window",
        type=_positive(float, "--window"),
        default=10.0,
        help="seconds to watch the server's traffic (default 10)",
    )
    advise.add_argument(
        "--prometheus",
        help="Prometheus URL: fit from the exporter's counters over --window instead",
    )
    advise.add_argument("--store", type=Path, help="the load generator's SQLite store")
    advise.add_argument(
        "--run", type=_positive(int, "--run"), help="run id in --store (python -m loadgen runs)"
    )
    advise.add_argument(
        "--probe",
        action="store_true",
        help="measure the costs with a short closed-loop load on --url now (a few seconds "
        "of load on the server)",
    )
    advise.add_argument(
        "--probe-s",
        type=_positive(float, "--probe-s"),
        default=3.0,
        help="seconds of probe load (default 3)",
    )
    advise.add_argument(
        "--verify",
        action="store_true",
        help="check by experiment: load each config as a scratch copy of the model "
        "(repository API), replay the traffic, compare with the prediction, unload",
    )
    advise.add_argument(
        "--verify-s",
        type=_positive(float, "--verify-s"),
        default=5.0,
        help="seconds of replayed traffic per config (default 5)",
    )
    advise.add_argument(
        "--model-repository",
        type=Path,
        default=from_env_or_default().model_repository,
        help="where the model's files are, for --verify's scratch copy "
        "(default: the project's model_repository)",
    )
    advise.add_argument(
        "--admin-key-file",
        type=Path,
        default=from_env_or_default().admin_key_file,
        help="key of Triton's restricted APIs, for --verify (default .stack/triton-admin.key)",
    )
    advise.add_argument(
        "--traces",
        metavar="EXPORTER_URL",
        help="measure the batcher's hand-offs (dispatch, timer slack, release, execution "
        "spread) from the exporter's retained traces of --model; trace every request first: "
        "python -m stack trace --model M",
    )
    advise.add_argument(
        "--calibrations",
        type=Path,
        default=from_env_or_default().state_dir / "advisor-calibrations.json",
        help="cache of measured costs per server, model and Triton version "
        "(default .stack/advisor-calibrations.json)",
    )

    pred = sub.add_parser(
        "predict", parents=[common, config_flags], help="predict one config, no server"
    )
    pred.add_argument(
        "--service-us", type=_service, required=True, help="BASE,PER_ITEM execution microseconds"
    )
    return parser


# ---- inputs --------------------------------------------------------------------------------


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
    # A traced stored run: the time outside Triton's queue and execution, and the
    # batcher's hand-offs measured from its traces (with the line that says so).
    outside: handoff.Outside | None = None
    handoffs: tuple[handoff.HandOff, str] | None = None


@dataclass
class Costs:
    """The CPU model used, and the line that says where it came from."""

    cpu: CpuModel
    line: str
    calibration: costs.Calibration | None = None

    @property
    def known(self) -> bool:
        return self.cpu.cores is not None


UNKNOWN = "capacity: unknown (run with --probe)"


def given_costs(args: argparse.Namespace) -> tuple[Costs | None, ServiceModel | None]:
    """Costs the user gave: a calibration capture, or --cores and --request-us."""
    if args.calibration:
        try:
            service, cpu = load_capture(args.calibration).calibrate()
        except ValueError as exc:
            raise UsageError(f"--calibration: {exc}") from None
        return Costs(cpu, f"costs: from the calibration capture {args.calibration}"), service
    if args.request_us is not None and args.request_us < 0:
        raise UsageError("--request-us must be >= 0")
    if args.request_us is not None and not args.cores:
        raise UsageError("--request-us needs --cores N (the cores the server has)")
    if args.cores and args.request_us is not None:
        cpu = CpuModel(cores=args.cores, request_s=args.request_us / 1e6, request_cv=1.0)
        return Costs(cpu, "costs: given on the command line (--cores, --request-us)"), None
    return None, None


def given_traffic(args: argparse.Namespace) -> Traffic | None:
    if args.rate and args.concurrency:
        raise UsageError("give --rate (open loop) or --concurrency (closed loop), not both")
    if args.cv is not None and args.cv < 0:
        raise UsageError(f"--cv must be >= 0, got {args.cv}")
    if args.rate:
        return OpenLoop(args.rate, 1.0 if args.cv is None else args.cv)
    if args.concurrency:
        return ClosedLoop(args.concurrency)
    return None


def read_server(
    client: TritonClient, model: str, window_s: float
) -> tuple[ModelStats, list[tuple[float, float]], ModelStats]:
    """Stats delta over the window, request-count samples, cumulative stats."""
    # 20 bins per window, enough to estimate burstiness; at most 1 s each.
    step_s = min(window_s / 20, 1.0)
    try:
        first = last = client.model_stats(model)
        samples = [(time.monotonic(), float(first.inference_count))]
        deadline = samples[0][0] + window_s
        while time.monotonic() < deadline:
            time.sleep(step_s)
            last = client.model_stats(model)
            samples.append((time.monotonic(), float(last.inference_count)))
    except TritonError as exc:
        raise UsageError(_triton_problem(exc, model)) from None
    return last.minus(first), samples, last


def server_config(client: TritonClient, model: str) -> BatcherConfig:
    """The model's batching config as the server loaded it; UsageError (one line) if not."""
    try:
        return from_model_config(client.model_config(model))
    except TritonError as exc:
        raise UsageError(_triton_problem(exc, model)) from None


def triton_version(client: TritonClient) -> str:
    try:
        return str(client.server_metadata().get("version", ""))
    except TritonError:
        return ""


def _triton_problem(exc: TritonError, model: str) -> str:
    if isinstance(exc, TritonUnreachable):
        return f"{exc}: start it (./stack/up) or fix --url"
    if isinstance(exc, TritonHTTPError):
        return (
            f"{exc}: check the model name {model!r} "
            "(GET /v2/repository/index lists them), or fix --url"
        )
    return f"{exc}: is --url the HTTP port of a Triton server?"


def flag_config(args: argparse.Namespace) -> BatcherConfig:
    if args.max_batch_size is None:
        raise UsageError("give the config: --max-batch-size N [--preferred A,B] [--delay-us D]")
    try:
        return BatcherConfig(args.max_batch_size, args.preferred, args.delay_us, args.instances)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _meter(url: str) -> costs.CpuMeter | None:
    pid = costs.local_server_pid(url)
    try:
        return costs.CpuMeter(pid) if pid is not None else None
    except OSError:  # gone meanwhile
        return None


def live_inputs(
    args: argparse.Namespace, calibrated: ServiceModel | None, traffic: Traffic | None
) -> Inputs:
    """Config, service times and traffic from a running Triton; on this machine, its CPU
    over the same window gives the costs."""
    if not args.model:
        raise UsageError("--url needs --model")
    client = TritonClient(args.url)
    config = server_config(client, args.model)
    meter = _meter(args.url)
    if meter is not None:
        meter.start()
    delta, samples, cumulative = read_server(client, args.model, args.window)
    cpu = meter.stop() if meter is not None else None
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
        raise UsageError(
            f"model {args.model!r} has never executed: send load first or give --calibration"
        )
    if traffic is None:
        try:
            traffic = fit_traffic(samples)
        except ValueError as exc:
            raise UsageError(
                f"{exc}; give the traffic with --rate or --concurrency instead"
            ) from None
        notes.append(f"traffic fitted from the window: {traffic.describe()}")
    inputs = Inputs(config, service, traffic, notes, args.url, args.model, triton_version(client))
    if meter is not None and cpu is not None:
        source = f"the local Triton's CPU over the {args.window:g} s window"
        try:
            inputs.measured = costs.from_process_cpu(cpu, meter.cores, delta, service, source)
        except ValueError as exc:
            notes.append(f"costs not measured from the window: {exc}")
    return inputs


def stored_inputs(
    args: argparse.Namespace, calibrated: ServiceModel | None, traffic: Traffic | None
) -> Inputs:
    """Service times, traffic and (for runs stored since it is kept) the config and Triton
    version from a stored load run; a closed-loop run's throughput gives the costs."""
    if args.run is None:
        raise UsageError("--store needs --run ID (python -m loadgen runs lists them)")
    try:
        run = storedrun.load(args.store, args.run)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except sqlite3.DatabaseError as exc:
        raise UsageError(
            f"--store {args.store} is not a load-run store ({exc}); give the SQLite file "
            "that loadgen writes (.stack/loadgen.sqlite3)"
        ) from None
    notes = [f"from stored {run.describe}"]
    if run.config is not None and args.max_batch_size is None:
        config = run.config
        notes.append(
            f"config as Triton {run.triton_version or '(version unknown)'} reported it "
            "when the run began"
        )
    elif args.url and args.max_batch_size is None:
        config = server_config(TritonClient(args.url), run.model)
        notes.append(f"config read from {args.url} now (the run was stored without it)")
    else:
        config = flag_config(args)
    service = calibrated or run.service
    notes.append(
        "service times from the calibration capture"
        if calibrated
        else "service times fitted from the run's statistics"
    )
    if traffic is None:
        traffic = run.traffic
        notes.append(f"traffic of the run: {traffic.describe()}")
    if run.measured_batch_size:
        notes.append(f"measured average batch size in the run: {run.measured_batch_size:.2f}")
    inputs = Inputs(config, service, traffic, notes, run.server, run.model, run.triton_version)
    if run.outside is not None:
        inputs.outside = run.outside
        notes.append(
            f"time outside Triton's queue and execution: {run.outside.median_s * 1e6:,.0f} us "
            f"median, p99 {run.outside.quantile_s(0.99) * 1e6:,.0f} us (the run's "
            f"{run.outside.requests:,} traced requests; the spread is simulated)"
        )
    if run.handoff is not None:
        inputs.handoffs = (
            run.handoff,
            f"{run.handoff.describe()} (the run's {run.traced_requests:,} traced requests)",
        )
    if run.concurrency and run.measured_throughput_per_s:
        cores = args.cores or costs.local_cores(run.server)
        if cores is None:
            notes.append("costs not fitted from the run: give --cores N (the server's cores)")
        else:
            try:
                fitted = replace(run, service=service)
                inputs.measured = storedrun.calibration(fitted, config, cores)
            except ValueError as exc:
                notes.append(f"costs not fitted from the run: {exc}")
    return inputs


def prometheus_inputs(
    args: argparse.Namespace, calibrated: ServiceModel | None, traffic: Traffic | None
) -> Inputs:
    """Service times and traffic from the exporter's counters in Prometheus."""
    if not args.model:
        raise UsageError("--prometheus needs --model")
    window = f"{max(1, round(args.window))}s"
    notes = [f"fitted from the exporter's counters in {args.prometheus} over {window}"]
    try:
        service = calibrated or fit_service_times(
            batch_times_from_prometheus(args.prometheus, args.model, window)
        )
        if traffic is None:
            step = max(1.0, args.window / 20)
            traffic = traffic_from_prometheus(args.prometheus, args.model, args.window, step)
            notes.append(f"traffic: {traffic.describe()}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    version = ""
    if args.url:
        client = TritonClient(args.url)
        config = server_config(client, args.model)
        version = triton_version(client)
    else:
        config = flag_config(args)
    return Inputs(config, service, traffic, notes, args.url or "", args.model, version)


def probe(args: argparse.Namespace, inputs: Inputs) -> costs.Calibration:
    """Measure the costs with a short closed-loop load (``--probe``)."""
    url = args.url or inputs.server
    if not url:
        raise UsageError("--probe needs --url (the Triton to probe)")
    config = inputs.config
    concurrency = min(64, max(8, 2 * config.instances * config.batch_limit))
    meter = _meter(url)
    if meter is None and not args.cores:
        raise UsageError(
            f"--probe on {url}, whose CPU cannot be read from here, needs --cores N "
            "(the server's CPU cores)"
        )
    client = TritonClient(url)
    params = RunParams(
        "concurrency",
        model=inputs.model,
        url=url,
        concurrency=concurrency,
        duration_s=args.probe_s,
        label="advisor probe",
    )
    try:
        before = client.model_stats(inputs.model)
        if meter is not None:
            meter.start()
        result = loadgen_api.run(params, db=None)
        cpu = meter.stop() if meter is not None else None
        delta = client.model_stats(inputs.model).minus(before)
    except LoadgenError as exc:
        raise UsageError(f"--probe: {exc}") from None
    except TritonError as exc:
        raise UsageError(_triton_problem(exc, inputs.model)) from None
    measured = result.summary.client.throughput_per_s or 0.0
    source = f"a {args.probe_s:g} s probe at concurrency {concurrency} ({measured:,.0f}/s)"
    try:
        if meter is not None and cpu is not None:
            return costs.from_process_cpu(cpu, meter.cores, delta, inputs.service, source)
        request_s = costs.fit_request_cost(
            config, inputs.service, concurrency, measured, float(args.cores)
        )
    except ValueError as exc:
        raise UsageError(f"--probe: {exc}") from None
    return costs.Calibration(
        float(args.cores), request_s, source + ", fitted", time.time(), delta.inference_count
    )


def resolve_costs(args: argparse.Namespace, given: Costs | None, inputs: Inputs) -> Costs:
    """Given costs, else measured now (probe or window), else cached, else unknown."""
    if given is not None:
        return given
    cache = costs.CalibrationCache(args.calibrations)
    measured = probe(args, inputs) if args.probe else inputs.measured
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
                inputs.notes.append(f"costs not cached in {args.calibrations}: {exc.strerror}")
        return Costs(measured.cpu, f"costs: measured: {measured.describe()}", measured)
    cached = (
        cache.get(inputs.server, inputs.model, inputs.triton_version) if inputs.server else None
    )
    if cached is not None:
        age_h = (time.time() - cached.measured_at) / 3600
        return Costs(
            cached.cpu,
            f"costs: cached ({age_h:.1f} h old): {cached.describe()}",
            cached,
        )
    return Costs(CpuModel(), f"costs: not measured; {UNKNOWN}")


# ---- output --------------------------------------------------------------------------------


def capacity_text(p: Prediction) -> str:
    if p.throughput_limit_per_s is None:
        return UNKNOWN
    return f"capacity {p.throughput_limit_per_s:,.0f}/s"


def _line(p: Prediction) -> str:
    dist = ", ".join(f"{s}: {f:.0%}" for s, f in p.batch_size_distribution.items() if f >= 0.01)
    unreached = p.unreached_preferred()
    return (
        f"  throughput {p.throughput_per_s:,.0f}/s ({capacity_text(p)}), "
        f"average batch {p.mean_batch_size:.2f} [{dist}]\n"
        f"  queue delay p50 {p.queue_delay_p50_s * 1e6:,.0f} us, "
        f"p99 {p.queue_delay_p99_s * 1e6:,.0f} us; latency p99 {p.latency_p99_s * 1e3:.2f} ms"
        + ("; SATURATED: the queue grows" if p.saturated else "")
        + (
            f"\n  preferred size(s) {list(unreached)} not reached (under "
            f"{REACHED:.0%} of batches): they change nothing"
            if unreached
            else ""
        )
    )


def print_recommendation(rec: Recommendation, notes: list[str], cost: Costs) -> None:
    for note in notes:
        print(note)
    print(cost.line)
    print(f"current: {rec.current.config.describe()}, under {rec.current.traffic.describe()}")
    print(_line(rec.current))
    print(f"  {rec.noise_line('current')}")
    bound = f"p99 latency <= {rec.p99_bound_s * 1e3:g} ms"
    if rec.best is None:
        print(f"no config of the {rec.considered} tried meets {bound}")
        return
    if rec.keep:
        print(
            f"keep it: none of the {rec.considered} configs tried beats it on "
            f"{rec.objective} beyond the simulation's noise ({rec.seeds} seeds) and by "
            f"x{rec.min_gain:g} or more (--min-gain) under {bound}"
        )
        return
    print(f"recommended ({rec.objective}, {bound}, {rec.considered} configs tried):")
    print("  " + rec.best.config.describe())
    print(_line(rec.best))
    print(f"  {rec.noise_line('best')}")
    print(f"  predicted gain: {rec.gain_line()} (x{rec.gain_ratio:.2f})")
    print("config.pbtxt:")
    print("\n".join("  " + line for line in rec.best.config.pbtxt().splitlines()))


def probe_traces(url: str) -> None:
    """--traces must be the exporter, and answer, before the minutes of watching begin."""
    try:
        response = requests.get(f"{url.rstrip('/')}/api/traces", timeout=5)
        body = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise UsageError(
            f"--traces: {url}: the exporter's trace API did not answer usably "
            f"({type(exc).__name__}); give the exporter's URL (port 9733 by default)"
        ) from None
    if not (isinstance(body, dict) and ("requests" in body or "error" in body)):
        raise UsageError(
            f"--traces: {url}: that is not the exporter (its /api/traces answered "
            f"{response.status_code}); give the exporter's URL (port 9733 by default)"
        )


def check_path(path: Path, flag: str, folder: bool) -> None:
    """A path the advisor may read later, checked now: missing is fine (the default may not
    exist yet), anything else must be a folder or a readable text file as ``folder`` says."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot be read ({exc.strerror or exc})") from None
    wanted = "a folder" if folder else "a file"
    if (stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)) is False:
        raise UsageError(f"{flag} {path} is not {wanted}; give {wanted}'s path")
    if not folder:
        try:
            path.read_text()
        except (OSError, UnicodeDecodeError):
            raise UsageError(f"{flag} {path} is not a readable text file") from None


def advise(args: argparse.Namespace) -> int:
    check_path(args.model_repository, "--model-repository", folder=True)
    check_path(args.admin_key_file, "--admin-key-file", folder=False)
    check_path(args.calibrations, "--calibrations", folder=False)
    if args.traces:
        probe_traces(args.traces)
    given, calibrated_service = given_costs(args)
    traffic = given_traffic(args)
    if args.store:
        inputs = stored_inputs(args, calibrated_service, traffic)
    elif args.prometheus:
        inputs = prometheus_inputs(args, calibrated_service, traffic)
    elif args.url:
        inputs = live_inputs(args, calibrated_service, traffic)
    else:
        raise UsageError(
            "give --url URL --model M (a running Triton), --prometheus URL --model M, "
            "or --store DB --run ID"
        )
    cost = resolve_costs(args, given, inputs)
    config, service, notes = inputs.config, inputs.service, inputs.notes
    cost = replace(cost, cpu=storedrun.with_outside(cost.cpu, inputs.outside))
    measured = (
        traced_handoffs(args.traces, inputs.model, config, args.url or inputs.server)
        if args.traces
        else None
    )
    if measured is None:
        measured = inputs.handoffs
    if measured is not None:
        cost = replace(cost, cpu=measured[0].apply(cost.cpu))
        notes.append(measured[1])
    else:
        notes.append(
            "hand-offs: not measured, left out (the batcher's dispatch and timer slack: "
            "give --traces EXPORTER_URL after `python -m stack trace --model M`, or a run "
            "made with --trace)"
        )
    if not config.dynamic_batching:
        notes.append("dynamic batching is off in the current config")
    space = SearchSpace(
        max_batch_sizes=tuple(
            m for m in SearchSpace().max_batch_sizes if m <= args.max_batch_limit
        ),
        instances=args.try_instances,
    )
    notes.append(f"a change must gain at least x{args.min_gain:g} to be recommended (--min-gain)")
    counts = space.instance_counts(config)
    notes.append(
        f"instance counts searched: {', '.join(map(str, counts))}"
        + (
            f" (the current; others with --try-instances, extrapolated from {config.instances})"
            if not args.try_instances
            else f" (hand-offs measured with {config.instances}: other counts are extrapolated)"
        )
    )
    notes.append(f"service {service.base_s * 1e6:.0f} us + {service.per_item_s * 1e6:.1f} us/item")
    try:
        rec = recommend(
            config,
            inputs.traffic,
            service,
            args.p99_ms / 1e3,
            cost.cpu,
            args.objective,
            space,
            requests=args.requests,
            seeds=args.seeds,
            min_gain=args.min_gain,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    checked = run_verify(args, inputs, rec) if args.verify else None
    if args.json:
        out = recommendation_json(rec, notes, cost)
        out["verification"] = checked.to_json(rec.objective) if checked else None
        print(json.dumps(out, indent=1))
    else:
        print_recommendation(rec, notes, cost)
        if checked is not None:
            print_verification(rec, checked)
    return 0


# The exporter retains the last 2 minutes traced (exporter.tracing): all of them are read.
TRACES_S = 120


def traced_handoffs(
    exporter_url: str, model: str, config: BatcherConfig, server: str | None = None
) -> tuple[handoff.HandOff, str]:
    """The hand-offs measured from the exporter's retained traces of ``model``, and the line
    that says so; UsageError (one line) when there are not enough complete ones. The timer
    slack of ``server``'s threads is read when it runs on this machine."""
    try:
        window = read_exporter(exporter_url, model, TRACES_S)
    except ExporterUnavailable as exc:
        raise UsageError(
            f"--traces: {exc}; give the exporter's URL (port 9733 by default)"
        ) from None
    if window.trace_rate not in (None, 1):
        raise UsageError(
            f"--traces: {model} is traced 1 request in {window.trace_rate}: a batch's other "
            "requests are missing; trace every request (python -m stack trace --rate 1)"
        )
    if len(window.requests) < handoff.MIN_REQUESTS:
        raise UsageError(
            f"--traces: the exporter holds {len(window.requests)} traced requests of {model}, "
            f"fewer than {handoff.MIN_REQUESTS}: trace some first "
            f"(python -m stack trace --model {model})"
        )
    pid = costs.local_server_pid(server) if server else None
    found = handoff.measure(window.requests, config, handoff.timer_slack(pid))
    return found, f"{found.describe()} ({len(window.requests):,} traced requests)"


def run_verify(
    args: argparse.Namespace, inputs: Inputs, rec: Recommendation
) -> verify.Verification:
    url = args.url or inputs.server
    if not url:
        raise UsageError("--verify needs --url (the Triton to load the scratch copies on)")
    try:
        return verify.verify(
            url,
            admin_headers(args.admin_key_file),
            inputs.model,
            args.model_repository,
            rec,
            args.verify_s,
        )
    except ValueError as exc:
        raise UsageError(f"--verify: {exc}") from None
    except LoadgenError as exc:
        raise UsageError(f"--verify: {exc}") from None
    except TritonHTTPError as exc:
        hint = (
            "give --admin-key-file (the key of its restricted APIs)"
            if exc.status == 403
            else "the server must run with --model-control-mode=explicit"
        )
        raise UsageError(f"--verify: {exc}; {hint}") from None
    except TritonError as exc:
        raise UsageError(f"--verify: {exc}") from None


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def print_verification(rec: Recommendation, checked: verify.Verification) -> None:
    print(
        f"verification: each config loaded as a scratch copy, {checked.seconds:g} s of "
        "the same traffic each, then unloaded"
    )
    print(f"  {'':<13}{'':<22}{'predicted':>11}{'measured':>11}")
    for check in checked.checks:
        for i, (name, predicted, measured) in enumerate(check.rows()):
            label = check.which if i == 0 else ""
            digits = 2 if "batch" in name or "ms" in name else 0
            print(
                f"  {label:<13}{name:<22}{_num(predicted, digits):>11}{_num(measured, digits):>11}"
            )
    gain = checked.measured_gain(rec.objective)
    if gain is not None:
        print(f"  measured gain x{gain:.2f} {rec.objective}, predicted x{rec.gain_ratio:.2f}")


def _interval_json(rec: Recommendation, which: str) -> dict[str, Any] | None:
    interval = rec.current_interval if which == "current" else rec.best_interval
    if interval is None:
        return None
    mean, low, high = interval.user_terms()
    name, unit = UNITS[rec.objective]
    return {"measure": name, "unit": unit, "mean": mean, "low": low, "high": high}


def recommendation_json(rec: Recommendation, notes: list[str], cost: Costs) -> dict[str, Any]:
    return {
        "notes": notes,
        "costs": cost.line,
        "calibration": cost.calibration.to_json() if cost.calibration else None,
        "capacity_known": cost.known,
        "current": rec.current.summary(),
        "current_interval": _interval_json(rec, "current"),
        "current_unreached_preferred": list(rec.current.unreached_preferred()),
        "keep": rec.keep,
        "recommended": rec.best.summary() if rec.best and not rec.keep else None,
        "recommended_interval": _interval_json(rec, "best"),
        "recommended_pbtxt": rec.best.config.pbtxt() if rec.best and not rec.keep else None,
        "objective": rec.objective,
        "gain_ratio": rec.gain_ratio if rec.best else None,
        "gain": rec.gain_line() or None,
        "p99_bound_ms": rec.p99_bound_s * 1e3,
        "configs_tried": rec.considered,
        "seeds": rec.seeds,
    }


def predict_command(args: argparse.Namespace) -> int:
    given, _ = given_costs(args)
    cpu = given.cpu if given is not None else CpuModel()
    traffic = given_traffic(args)
    if traffic is None:
        raise UsageError("predict needs the traffic: --rate R [--cv X] or --concurrency C")
    try:
        config = BatcherConfig(args.max_batch_size, args.preferred, args.delay_us, args.instances)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    p = predict(config, traffic, args.service_us, cpu)
    if args.json:
        print(json.dumps(p.summary(), indent=1))
    else:
        print(f"{config.describe()}, under {traffic.describe()}")
        print(_line(p))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "advise":
            return advise(args)
        return predict_command(args)
    except UsageError as exc:
        print(f"triton-advisor: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
