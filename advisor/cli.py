"""triton-advisor: predict a dynamic-batching config's outcome and recommend a better one.

    triton-advisor advise --url http://127.0.0.1:8000 --model batch_add_model --p99-ms 10
    triton-advisor advise --url http://127.0.0.1:8000 --model batch_add_model --p99-ms 10 --probe
    triton-advisor advise --store .stack/loadgen.sqlite3 --run 3 --p99-ms 10
    triton-advisor advise --url http://127.0.0.1:8000 --model ids --p99-ms 10 --probe \\
        --concurrency 8 --shape IDS=4:64 --range IDS=0:30000
    triton-advisor predict --max-batch-size 64 --delay-us 1000 --service-us 600,41 \\
        --concurrency 8 --cores 2 --request-us 100
"""

from __future__ import annotations

import argparse
import json
import math
import stat
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests

from advisor import advice
from advisor.advice import Advice, SearchOptions
from advisor.config import BatcherConfig
from advisor.inputs import (
    UNKNOWN,
    InputError,
    Options,
    given_costs,
    given_traffic,
    metrics_url_of,
    replay_options,
)
from advisor.model import CpuModel, ServiceModel
from advisor.predict import (
    MIN_GAIN,
    OBJECTIVES,
    REACHED,
    Prediction,
    Recommendation,
    predict,
)
from advisor.storedrun import run_ids
from autopilot import apply, verify
from autopilot import loop as autopilot_loop
from autopilot import policy as policy_mod
from loadgen import inputopts
from loadgen.errors import LoadgenError
from runs.errors import StoreError
from runs.schema import check_writable
from stacksettings import admin_headers, from_env_or_default
from tritonapi.client import TritonClient, TritonError, TritonHTTPError
from tritonapi.modelname import model_name
from tritonapi.urls import normalize_url


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


def _http_url(what: str) -> Any:
    """The URL rule (``tritonapi.urls.normalize_url``), as an argparse type."""

    def parse(text: str) -> str:
        try:
            return normalize_url(text, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


METRICS_URL_HELP = (
    "Triton's /metrics: its pending-request gauge, read beside each count, makes the traffic "
    "that of the requests received, not answered (default: the stack's with the stack's "
    "--url, port 8002 of --url's host when --url has port 8000, else none; unread, the "
    "answered count is fitted, and the output says so)"
)


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


def _add_costs(parser: argparse.ArgumentParser) -> None:
    costs = parser.add_argument_group(
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
    _add_costs(common)
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
    advise.add_argument("--metrics-url", type=_http_url("--metrics-url"), help=METRICS_URL_HELP)
    advise.add_argument(
        "--prometheus",
        help="Prometheus URL: fit from the exporter's counters over --window instead",
    )
    advise.add_argument("--store", type=Path, help="the load generator's SQLite store")
    advise.add_argument(
        "--run",
        type=run_ids,
        help="run id in --store (batchscope load runs); several of one model, config and "
        "traffic, comma-separated (3,4,5), are pooled: one short traced run's fit moves "
        "from run to run",
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
    applying = advise.add_argument_group(
        "apply the recommendation to the live model (dry run without --apply)"
    )
    applying.add_argument(
        "--apply",
        action="store_true",
        help="load the recommended config on --model as a config override (repository "
        "API, with --admin-key-file; config.pbtxt is not touched), watch a window before "
        "and after, and roll back by itself when clients fare worse; exit 1 when the "
        "change is not kept",
    )
    applying.add_argument(
        "--watch-s",
        type=_positive(float, "--watch-s"),
        help="seconds of each window before and after the change (default: long enough "
        f"for {apply.WATCH_REQUESTS:,} requests at the current rate, "
        f"{apply.MIN_WATCH_S:g}..{apply.MAX_WATCH_S:g} s)",
    )
    applying.add_argument(
        "--db",
        type=Path,
        default=from_env_or_default().store,
        help="load-run store: the change is recorded there, and the clients' latencies of "
        "the model's load runs going on meanwhile are read from it "
        "(default .stack/loadgen.sqlite3)",
    )
    advise.add_argument(
        "--traces",
        metavar="EXPORTER_URL",
        help="measure the batcher's hand-offs (dispatch, timer slack, release, execution "
        "spread) from the exporter's retained traces of --model; trace every request first: "
        "batchscope trace --model M",
    )
    loads = advise.add_argument_group(
        "what --probe's and --verify's requests hold (as in batchscope load; --verify "
        "replays a stored run's own when none is given)"
    )
    inputopts.add_arguments(loads)
    advise.add_argument(
        "--calibrations",
        type=Path,
        default=from_env_or_default().state_dir / "advisor-calibrations.json",
        help="cache of measured costs per server, model and Triton version "
        "(default .stack/advisor-calibrations.json)",
    )

    _add_autopilot(sub, search)

    pred = sub.add_parser(
        "predict", parents=[common, config_flags], help="predict one config, no server"
    )
    pred.add_argument(
        "--service-us", type=_service, required=True, help="BASE,PER_ITEM execution microseconds"
    )
    return parser


def _add_autopilot(sub: Any, search: argparse.ArgumentParser) -> None:
    pilot = sub.add_parser(
        "autopilot",
        parents=[search],
        help="watch a live model's traffic, re-advise when it shifts, apply within a policy",
        description="Each --interval-s: re-apply the last kept config if Triton no longer "
        "serves it (a restart forgets overrides); measure the traffic; when it has shifted "
        f"(rate beyond x{autopilot_loop.RATE_RATIO:g} or burstiness beyond +/-"
        f"{autopilot_loop.CV_CHANGE:g}, for {autopilot_loop.SUSTAINED} intervals running) "
        "from what the current config was chosen for, advise within the policy and apply the "
        "change with advise --apply's watch and rollback. A dry run unless --apply.",
    )
    pilot.add_argument("--url", required=True, help="Triton HTTP base URL")
    pilot.add_argument("--model", type=model_name, required=True, help="the model to pilot")
    pilot.add_argument("--metrics-url", type=_http_url("--metrics-url"), help=METRICS_URL_HELP)
    pilot.add_argument(
        "--policy",
        type=Path,
        help="YAML policy: bounds on the delay, max_batch_size, preferred sizes and "
        "instances, min_minutes_between_changes, never_touch (default: no bounds, one "
        f"change per {policy_mod.DEFAULT_MINUTES:g} min)",
    )
    pilot.add_argument(
        "--apply",
        action="store_true",
        help="make the changes (default: print what would be done, one line per decision)",
    )
    pilot.add_argument(
        "--interval-s",
        type=_positive(float, "--interval-s"),
        default=autopilot_loop.DEFAULT_INTERVAL_S,
        help=f"seconds of traffic per step (default {autopilot_loop.DEFAULT_INTERVAL_S:g})",
    )
    bounded = pilot.add_mutually_exclusive_group()
    bounded.add_argument(
        "--for-s",
        type=_positive(float, "--for-s"),
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    bounded.add_argument(
        "--once", action="store_true", help="one step: measure one interval, decide, exit"
    )
    pilot.add_argument(
        "--watch-s",
        type=_positive(float, "--watch-s"),
        help="seconds of each window before and after a change (default: as advise --apply)",
    )
    pilot.add_argument(
        "--db",
        type=Path,
        default=from_env_or_default().store,
        help="load-run store: the changes' record (the last kept config is read from it) "
        "and the clients' latencies (default .stack/loadgen.sqlite3)",
    )
    pilot.add_argument(
        "--admin-key-file",
        type=Path,
        default=from_env_or_default().admin_key_file,
        help="key of Triton's restricted APIs (default .stack/triton-admin.key)",
    )
    pilot.add_argument(
        "--calibrations",
        type=Path,
        default=from_env_or_default().state_dir / "advisor-calibrations.json",
        help="cache of measured costs (default .stack/advisor-calibrations.json)",
    )
    _add_costs(pilot)


# ---- flags to options ----------------------------------------------------------------------


def flag_config(args: argparse.Namespace) -> BatcherConfig:
    if args.max_batch_size is None:
        raise UsageError("give the config: --max-batch-size N [--preferred A,B] [--delay-us D]")
    try:
        return BatcherConfig(args.max_batch_size, args.preferred, args.delay_us, args.instances)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def input_options(args: argparse.Namespace) -> inputopts.InputOptions:
    """What the probe's and --verify's requests hold (loadgen's input options)."""
    try:
        return inputopts.InputOptions.from_args(args)
    except LoadgenError as exc:
        raise UsageError(str(exc)) from None


def options_from(args: argparse.Namespace) -> Options:
    """The inputs' options from ``advise``'s flags (the rest never sees argparse)."""
    return Options(
        url=args.url or "",
        model=args.model or "",
        window_s=args.window,
        metrics_url=args.metrics_url or (metrics_url_of(args.url) if args.url else ""),
        prometheus=args.prometheus or "",
        store=args.store,
        runs=args.run or (),
        rate=args.rate,
        cv=args.cv,
        concurrency=args.concurrency,
        calibration=args.calibration,
        cores=args.cores,
        request_us=args.request_us,
        # Flags override the server's or the run's config only when given; a live server's
        # config is always its own.
        config=flag_config(args) if args.max_batch_size is not None and not args.url else None,
        probe=args.probe,
        probe_s=args.probe_s,
        traces=args.traces or "",
        calibrations=args.calibrations,
        load=input_options(args),
    )


def search_options(args: argparse.Namespace) -> SearchOptions:
    return SearchOptions(
        p99_bound_s=args.p99_ms / 1e3,
        objective=args.objective,
        seeds=args.seeds,
        requests=args.requests,
        max_batch_limit=args.max_batch_limit,
        min_gain=args.min_gain,
        try_instances=args.try_instances,
    )


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
        f"p99 {p.queue_delay_p99_s * 1e6:,.0f} us\n"
        f"  latency: {p.latency_line()}"
        + ("; SATURATED: the queue grows" if p.saturated else "")
        + (
            f"\n  preferred size(s) {list(unreached)} not reached (under "
            f"{REACHED:.0%} of batches): they change nothing"
            if unreached
            else ""
        )
    )


def print_recommendation(advice: Advice) -> None:
    rec, prepared = advice.recommendation, advice.prepared
    for note in advice.notes:
        print(note)
    print(prepared.costs.line)
    print(prepared.outside_line)
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
    try:  # checked whether or not --apply uses it: a bad path is a slip either way
        check_writable(args.db)
    except StoreError as exc:
        raise UsageError(str(exc)) from None
    if args.traces:
        probe_traces(args.traces)
    if args.apply:
        if not args.url or not args.model:
            raise UsageError("--apply needs --url and --model: the live model to change")
        try:  # refused before minutes of watching, not after
            apply.check_access(live_client(args))
        except apply.ApplyRefused as exc:
            raise UsageError(str(exc)) from None
    opts = options_from(args)
    try:
        found = advice.advise(opts, search_options(args))
    except InputError as exc:
        raise UsageError(str(exc)) from None
    checked = (
        run_verify(args, replay_options(opts, found.prepared.inputs), found)
        if args.verify
        else None
    )
    plan = apply_plan(args, found) if args.url else None
    if not args.json:
        print_recommendation(found)
        if checked is not None:
            print_verification(found.recommendation, checked)
        if plan is not None:
            print_plan(plan, args.apply)
    result = run_apply(args, found, plan) if args.apply and plan is not None else None
    if args.json:
        out = recommendation_json(found)
        out["by_shape"] = found.shapes.to_json() if found.shapes else None
        out["verification"] = checked.to_json(found.recommendation.objective) if checked else None
        out["apply"] = plan_json(plan, result, args.apply) if plan is not None else None
        print(json.dumps(out, indent=1))
    elif result is not None:
        print(result.line())
    return 0 if result is None or result.change.outcome == "kept" else 1


# ---- --apply ---------------------------------------------------------------------------------


def live_client(args: argparse.Namespace) -> TritonClient:
    return TritonClient(args.url, headers=admin_headers(args.admin_key_file))


def apply_plan(args: argparse.Namespace, found: Advice) -> dict[str, Any]:
    """What --apply does (or would do): the change, the prediction, the window, the rule."""
    rec = found.recommendation
    rate = rec.current.throughput_per_s
    if args.watch_s is not None:
        seconds, why = args.watch_s, apply.given_length(args.watch_s, rate)
    else:
        seconds, why = apply.watch_length(rate)
    change = rec.best if rec.best is not None and not rec.keep else None
    return {
        "model": args.model,
        "server": args.url,
        "current": rec.current.config.describe(),
        "new": change.config.describe() if change else None,
        "predicted": change.latency_line() if change else None,
        "watch_s": seconds,
        "watch_why": why,
        "rule": apply.rollback_rule(seconds),
        "prediction": change,
    }


def print_plan(plan: dict[str, Any], applying: bool) -> None:
    if plan["new"] is None:
        print(f"apply: nothing to apply to {plan['model']} (no change recommended)")
        return
    print(
        ("apply" if applying else "apply (dry run; --apply does it)")
        + f": load on the live model {plan['model']} at {plan['server']}, as a config "
        "override in Triton's memory (config.pbtxt is not touched; a restarted Triton "
        "serves it again)"
    )
    print(f"  change: {plan['current']} -> {plan['new']}")
    print(f"  predicted: {plan['predicted']}")
    print(f"  watch: {plan['watch_s']:g} s before and after the change ({plan['watch_why']})")
    print(f"  rule: {plan['rule']}")


def plan_json(plan: dict[str, Any], result: apply.Result | None, applying: bool) -> dict[str, Any]:
    out = {k: v for k, v in plan.items() if k != "prediction"}
    out["dry_run"] = not applying
    if result is not None:
        c = result.change
        out.update(
            outcome=c.outcome, reason=c.reason, change_id=c.id, before=c.before, after=c.after
        )
    return out


def run_apply(args: argparse.Namespace, found: Advice, plan: dict[str, Any]) -> apply.Result | None:
    prediction = plan["prediction"]
    if prediction is None:
        return None
    client = live_client(args)
    say = (lambda line: print(line, file=sys.stderr)) if args.json else print
    try:
        old = client.model_config_json(args.model)
        new = apply.override(old, prediction.config, args.model)
        return apply.apply_and_watch(
            client,
            args.model,
            old,
            new,
            apply.Predicted.of(prediction),
            plan["watch_s"],
            store=args.db,
            say=say,
        )
    except apply.ApplyRefused as exc:
        raise UsageError(str(exc)) from None
    except TritonError as exc:
        raise UsageError(f"--apply: {exc}; nothing was changed") from None


def run_verify(
    args: argparse.Namespace, load: inputopts.InputOptions, found: Advice
) -> verify.Verification:
    inputs, rec = found.prepared.inputs, found.recommendation
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
            inputs=load,
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
    name, unit = rec.measure_name()
    return {"measure": name, "unit": unit, "mean": mean, "low": low, "high": high}


def recommendation_json(found: Advice) -> dict[str, Any]:
    rec, cost = found.recommendation, found.prepared.costs
    return {
        "notes": found.notes,
        "costs": cost.line,
        "time_outside_triton": found.prepared.outside_line,
        "client_terms": found.prepared.client_terms,
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
    try:
        given, _ = given_costs(
            Options(calibration=args.calibration, cores=args.cores, request_us=args.request_us)
        )
        traffic = given_traffic(Options(rate=args.rate, cv=args.cv, concurrency=args.concurrency))
    except InputError as exc:
        raise UsageError(str(exc)) from None
    cpu = given.cpu if given is not None else CpuModel()
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


def autopilot_command(args: argparse.Namespace) -> int:
    check_path(args.admin_key_file, "--admin-key-file", folder=False)
    check_path(args.calibrations, "--calibrations", folder=False)
    try:
        check_writable(args.db)
        policy = policy_mod.load(args.policy) if args.policy else policy_mod.Policy()
    except (StoreError, policy_mod.PolicyError) as exc:
        raise UsageError(str(exc)) from None
    inputs = Options(
        url=args.url,
        model=args.model,
        window_s=args.interval_s,
        metrics_url=args.metrics_url or metrics_url_of(args.url),
        calibration=args.calibration,
        cores=args.cores,
        request_us=args.request_us,
        calibrations=args.calibrations,
    )
    opts = autopilot_loop.PilotOptions(
        url=args.url,
        model=args.model,
        policy=policy,
        search=replace(search_options(args), policy=policy),
        inputs=inputs,
        apply=args.apply,
        interval_s=args.interval_s,
        store=args.db,
        watch_s=args.watch_s,
        headers=admin_headers(args.admin_key_file),
    )
    try:
        ran = autopilot_loop.run(opts, once=args.once, for_s=args.for_s)
    except autopilot_loop.Refused as exc:
        raise UsageError(str(exc)) from None
    # As advise --apply: 1 when a change made in this run did not end as it should.
    return 0 if all(r.change.outcome in ("kept", "reapplied") for r in ran.results) else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "advise":
            return advise(args)
        if args.command == "autopilot":
            return autopilot_command(args)
        return predict_command(args)
    except UsageError as exc:
        for line in str(exc).splitlines():  # one line per problem (a policy's fields)
            print(f"triton-advisor: error: {line}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
