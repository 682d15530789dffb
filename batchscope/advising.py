"""What ``batchscope advise``, ``predict`` and ``autopilot`` do with their options (the command
layer, since ``advise --apply`` acts through the autopilot above the advisor): turn
them into the advisor's inputs, run the search (and ``--verify``, ``--apply``), print the
recommendation or its JSON. A mistake is a ``UsageError``: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import stat
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import requests

from advisor import advice
from advisor.advice import Advice, SearchOptions, search_workers
from advisor.config import BatcherConfig
from advisor.inputs import (
    UNKNOWN,
    InputError,
    NotExecuted,
    Options,
    given_costs,
    given_traffic,
    metrics_url_of,
    replay_options,
)
from advisor.model import CpuModel
from advisor.predict import (
    REACHED,
    Prediction,
    Recommendation,
    predict,
)
from autopilot import apply, verify
from autopilot import loop as autopilot_loop
from autopilot import policy as policy_mod
from loadgen import inputopts
from loadgen.errors import LoadgenError
from runs.errors import StoreError
from runs.schema import check_writable
from stacksettings import admin_headers
from tritonapi.client import TritonClient, TritonError, TritonHTTPError


class UsageError(Exception):
    """Bad input: one line for the user, exit code 2."""


# advise's exit code when it recommends nothing because its simulation of the config being
# served does not reproduce what the window measured (or nothing executed in it): not a
# misuse (2), not a change that failed (1). The --help epilog and docs/advisor.md say so.
PRESENT_OFF = 3


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
        # The p99 bound is the clients': on a live server, what they spend outside Triton is
        # measured unless asked not to (a stored run carries its own, when traced).
        probe_outside=bool(args.url) and args.store is None and not args.server_side,
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
        workers=search_workers(),
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
    print(advice.present_line())
    if advice.silent:
        print(
            f"nothing recommended for {rec.current.config.describe()}: the simulation does "
            "not reproduce the present it was fitted from, so its other predictions would "
            f"stand on a wrong base (exit {PRESENT_OFF})"
        )
        return
    print(f"current: {rec.current.config.describe()}, under {rec.current.traffic.describe()}")
    print(_line(rec.current))
    print(f"  {rec.noise_line('current')}")
    bound = f"p99 latency <= {rec.p99_bound_s * 1e3:g} ms" + (
        "" if rec.current.client_terms else " (judged server-side: queue + compute)"
    )
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
    except NotExecuted as exc:
        # Nothing to stand advice on, and not a misuse: the present's line, exit 3.
        out = {"present": exc.check.to_json(), "recommended": None}
        print(json.dumps(out, indent=1) if args.json else exc.check.line())
        return PRESENT_OFF
    except InputError as exc:
        raise UsageError(str(exc)) from None
    checked = (
        run_verify(args, replay_options(opts, found.prepared.inputs), found)
        if args.verify and not found.silent
        else None
    )
    plan = apply_plan(args, found) if args.url else None
    if not args.json:
        print_recommendation(found)
        if checked is not None:
            print_verification(found.recommendation, checked)
        elif args.verify:
            print("verification: not run (nothing recommended)")
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
    if found.silent:
        return PRESENT_OFF
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
        # Why nothing is applied when the model's present is off.
        "refused": found.present_line() if found.silent else None,
    }


def print_plan(plan: dict[str, Any], applying: bool) -> None:
    if plan["refused"] is not None:
        print(f"apply: nothing applied to {plan['model']}: the model's present is off")
        return
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
    if args.json:  # the text output said it above the plan
        say(found.present_line())
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
        "present": found.present_json(),
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
        # Whose p99 the bound was judged on: the clients' where the time outside Triton was
        # measured, else Triton's side alone (queue + compute).
        "p99_bound_judged": "client" if rec.current.client_terms else "server-side",
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
