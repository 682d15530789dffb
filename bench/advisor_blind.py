"""The advisor checked blind on any model folders: its present, then three other configs.

    .venv/bin/python -m bench.advisor_blind MODEL_DIR... [--quick] [--probe] [--save FILE]
    .venv/bin/python -m bench.advisor_blind --table FILE     # a saved run's table again

Each folder (config.pbtxt, 1/model.py) is copied into a scratch repository of the bench's own
Triton, and everything is read from its config, never its name. A closed loop at concurrency 1
gives the service time of a batch of 1, which sets rates that keep the instances ``--busy``.
At each rate the present is watched and read as ``advise --url --window`` reads it
(``advisor.inputs.watch``, ``gather``), and checked (``advisor.present.check_present``) at
the traffic sent (:func:`offered`); the calibrated model predicts the served config and three
others (delay, max batch, preferred sizes). Each is then written into the copy's config.pbtxt,
reloaded and measured at the same rates by the load generator, the served config first (the
machine's repeatability). The goals are issue 54's (docs/validation/advisor-blind.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format

from advisor.config import BatcherConfig, from_model_config
from advisor.fit import batch_times, fit_service_times, saturation
from advisor.inputs import InputError, Options, fit_window, gather, probed, watch
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel, Traffic
from advisor.predict import predict
from advisor.present import (
    BATCH_BOUND,
    QUEUE_BOUND,
    QUEUE_FLOOR_S,
    Figure,
    Measured,
    check_present,
)
from autopilot.verify import scratch_config
from bench.common import stack
from loadgen.engine.runner import run
from loadgen.errors import LoadgenError
from loadgen.inputopts import InputOptions
from loadgen.results.params import RunParams
from loadgen.results.result import RunResult
from observe.window import Window
from stacksettings import Settings
from tritonapi.client import TritonClient, TritonError
from tritonapi.modelconfig import ModelConfig, ParseError, parse_pbtxt, to_dict

PRESENT = "present"
# The served config measured again like the others, judged against the present simulated:
# what the machine's repeatability leaves to any prediction.
AGAIN = "again"
OTHERS = ("delay", "max batch", "preferred")


@dataclass(frozen=True)
class Plan:
    """How long each part runs."""

    probe_s: float  # the service-time probe, concurrency 1
    warm_s: float  # unmeasured load before each measured one (a reloaded model's start)
    window_s: float  # the present's watched window
    seconds: float  # each other config's measured run
    requests: int  # simulated per prediction


FULL = Plan(probe_s=3.0, warm_s=1.0, window_s=10.0, seconds=6.0, requests=10_000)
QUICK = Plan(probe_s=1.5, warm_s=0.5, window_s=4.0, seconds=3.0, requests=5_000)
# The present's load runs this long on each side of the watched window.
EDGE_S = 0.5
# How long past the load's end the watching process may take to hand its window back.
WATCH_GRACE_S = 30.0


@dataclass
class Row:
    """One config at one rate: simulated or predicted against measured."""

    model: str
    rate: float
    which: str  # PRESENT, AGAIN or one of OTHERS
    config: str
    batch: tuple[float, float | None]  # (simulated, measured)
    queue_s: tuple[float, float | None]
    p99_s: tuple[float | None, float | None]
    busy: float | None = None  # present: share of the instances' time in executions
    status: str = ""  # present: the check's verdict
    inferred_s: float | None = None  # present: the time inferred after each execution
    note: str = ""  # present: the check's line
    fit: str = ""  # present: what the advisor fitted from the window (service, traffic, costs)
    # present: what its check was given, for bench.present_replay
    inputs: dict[str, Any] = field(default_factory=dict)

    def figures(self) -> tuple[Figure, Figure]:
        """Average batch and mean queue as the present check judges them."""
        return (
            Figure("average batch", self.batch[0], self.batch[1] or 0.0, BATCH_BOUND),
            Figure(
                "mean queue", self.queue_s[0], self.queue_s[1] or 0.0, QUEUE_BOUND, QUEUE_FLOOR_S
            ),
        )

    @property
    def measured(self) -> bool:
        return bool(self.batch[1])

    @property
    def met(self) -> bool:
        """The goal of its kind: the present's batch and queue, another config's batch."""
        batch, queue = self.figures()
        if not self.measured:
            return False
        return batch.within and (queue.within if self.which == PRESENT else True)


@dataclass
class Capture:
    """A run: its rows, what could not be run, the command and the load averages."""

    command: list[str]
    started: str
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float] = (0.0, 0.0, 0.0)
    wall_s: float = 0.0
    rows: list[Row] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Capture:
        rows = [
            Row(**{**r, **{k: tuple(r[k]) for k in ("batch", "queue_s", "p99_s")}})
            for r in data["rows"]
        ]
        return cls(
            command=list(data["command"]),
            started=data["started"],
            load_start=tuple(data["load_start"]),
            load_end=tuple(data["load_end"]),
            wall_s=float(data["wall_s"]),
            rows=rows,
            skipped=list(data.get("skipped", [])),
        )


# ---- what a check was given, as JSON (for bench.present_replay) -----------------------------


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


@dataclass(frozen=True)
class Inputs:
    """What one point's present check was given, and the predictions' seed and requests."""

    config: BatcherConfig
    traffic: Traffic
    service: ServiceModel
    measured: Measured
    cpu: CpuModel
    seed: int
    requests: int

    def to_json(self) -> dict[str, Any]:
        """As plain JSON: the traffic's kind named, the batch-size shares as pairs."""
        kind = "open" if isinstance(self.traffic, OpenLoop) else "closed"
        shares = list(self.measured.size_shares.items())
        return {
            "config": asdict(self.config),
            "traffic": {"kind": kind, **asdict(self.traffic)},
            "service": asdict(self.service),
            "measured": {**asdict(self.measured), "size_shares": shares},
            "cpu": asdict(self.cpu),
            "seed": self.seed,
            "requests": self.requests,
        }

    @classmethod
    def decode(cls, data: dict[str, Any]) -> Inputs:
        traffic = dict(data["traffic"])
        kind = traffic.pop("kind")
        measured = dict(data["measured"])
        measured["size_shares"] = {int(k): float(v) for k, v in measured["size_shares"]}
        return cls(
            config=BatcherConfig(**{k: _tuples(v) for k, v in data["config"].items()}),
            traffic=OpenLoop(**traffic) if kind == "open" else ClosedLoop(**traffic),
            service=ServiceModel(**{k: _tuples(v) for k, v in data["service"].items()}),
            measured=Measured(**measured),
            cpu=CpuModel(**{k: _tuples(v) for k, v in data["cpu"].items()}),
            seed=int(data["seed"]),
            requests=int(data["requests"]),
        )


# ---- what a model's config says ------------------------------------------------------------


def input_options(config: ModelConfig, var_dim: int) -> InputOptions:
    """The load's inputs from the model's config: every variable dim at ``var_dim`` (one
    size for all requests: Triton batches only requests of one shape)."""
    shapes = tuple(
        (t.name, tuple(var_dim if d < 0 else d for d in t.dims))
        for t in config.inputs
        if any(d < 0 for d in t.dims)
    )
    return InputOptions(shapes=shapes)


def alternatives(config: BatcherConfig) -> list[tuple[str, BatcherConfig]]:
    """Three other configs of a batching model, one change each from the served one (dynamic
    batching on where it was off): the queue delay (x4, or 1 ms from none; /4 past 5 ms), the
    max batch (halved from 4 up, else x4) and the preferred sizes (none where there were some,
    else a quarter of the max batch)."""
    base = config if config.dynamic_batching else replace(config, dynamic_batching=True)
    delay = base.max_queue_delay_us
    delay = 1000 if delay == 0 else delay // 4 if delay > 5000 else delay * 4
    size = base.max_batch_size
    size = size // 2 if size >= 4 else size * 4
    preferred = () if base.preferred_batch_sizes else (max(2, base.max_batch_size // 4),)
    if preferred and preferred[0] > base.max_batch_size:
        preferred = (base.max_batch_size,)
    return [
        ("delay", replace(base, max_queue_delay_us=delay)),
        (
            "max batch",
            replace(
                base,
                max_batch_size=size,
                preferred_batch_sizes=tuple(p for p in base.preferred_batch_sizes if p <= size),
            ),
        ),
        ("preferred", replace(base, preferred_batch_sizes=preferred)),
    ]


def rates_for(
    batch1_s: float, instances: int, busy: Sequence[float], max_rate: float
) -> list[float]:
    """The rates that keep ``instances`` busy by each share of ``busy`` at a batch of 1
    (batching makes them less busy than that), all scaled down alike where the highest
    would pass ``max_rate``, so that they stay apart."""
    rates = [u * instances / batch1_s for u in busy]
    scale = min(1.0, max_rate / max(rates))
    return [round(r * scale, 1) for r in rates]


def with_config(text: str, config: BatcherConfig, name: str) -> str:
    """``config.pbtxt``'s text with ``config``'s batching (the rest kept)."""
    message = parse_pbtxt(text)
    changed = scratch_config(to_dict(message), config, name)
    return text_format.MessageToString(json_format.ParseDict(changed, type(message)()))


def busy_share(window: Window, instances: int) -> float | None:
    """The share of the instances' time the window's executions took."""
    if window.delta is None or window.seconds <= 0:
        return None
    seconds = sum(t for _, t in batch_times(window.delta).values())
    return seconds / window.seconds / instances


# ---- running ------------------------------------------------------------------------------


class ModelFault(RuntimeError):
    """A model this bench cannot measure: one line, and the bench goes on to the next."""


def load_params(model: str, url: str, rate: float, seconds: float, seed: int) -> RunParams:
    return RunParams(
        "rate",
        model=model,
        url=url,
        rate=rate,
        poisson=True,
        duration_s=seconds,
        seed=seed,
        label="advisor blind",
    )


def checked(result: RunResult) -> RunResult:
    client = result.summary.client
    lost = client.failed + client.timed_out
    if lost:
        first = next(iter(client.errors), "")
        raise ModelFault(f"{lost} of {client.sent} requests failed ({first})")
    return result


def service_probe(url: str, model: str, load: InputOptions, plan: Plan) -> float:
    """The fitted service time of a batch of 1, from a closed loop at concurrency 1."""
    params = load.apply(
        RunParams(
            "concurrency",
            model=model,
            url=url,
            concurrency=1,
            duration_s=plan.probe_s,
            label="advisor blind probe",
        )
    )
    # A freshly loaded model's first requests pay for its start.
    checked(run(replace(params, duration_s=plan.warm_s)))
    result, window = probed(TritonClient(url), model, params)
    checked(result)
    if window.delta is None or window.delta.execution_count == 0:
        raise ModelFault("the probe executed nothing")
    return fit_service_times(window.delta).time_s(1)


@dataclass(frozen=True)
class Predicted:
    """Another config, predicted by the model calibrated at one rate."""

    which: str
    config: BatcherConfig
    batch: float
    queue_s: float
    p99_s: float | None


def _watch(url: str, model: str, window_s: float, metrics_url: str) -> Window | InputError:
    """The advisor's window from ``EDGE_S`` after the load starts (in the watching process)."""
    time.sleep(EDGE_S)
    try:
        return watch(url, model, window_s, metrics_url)
    except InputError as exc:
        return exc


def present(
    s: Settings,
    model: str,
    load: InputOptions,
    rate: float,
    plan: Plan,
    scratch: Path,
    seed: int,
    probe: bool = False,
) -> tuple[Row, list[Predicted]]:
    """The present at ``rate`` (the check's row), and the other configs predicted from it
    (the served one first, as simulated for the present). ``probe``: as ``advise --probe``."""
    url = s.url("triton_http")
    metrics_url = s.url("triton_metrics") + "/metrics"
    params = load.apply(load_params(model, url, rate, plan.window_s + 2 * EDGE_S, seed))
    checked(run(replace(params, duration_s=plan.warm_s, seed=seed + 1000)))
    # The window is watched from a process of its own, forked before the load starts: a
    # thread beside the load generator's waited for the interpreter at the highest rates,
    # and read its two snapshots late (a window's traffic then read as bursts that were not
    # sent).
    with multiprocessing.get_context("fork").Pool(1) as pool:
        pending = pool.apply_async(_watch, (url, model, plan.window_s, metrics_url))
        result = checked(run(params))
        window = pending.get(timeout=plan.window_s + 2 * EDGE_S + WATCH_GRACE_S)
    if isinstance(window, InputError):
        raise ModelFault(f"the window: {window}")
    opts = Options(
        url=url,
        model=model,
        window_s=plan.window_s,
        metrics_url=metrics_url,
        load=load,
        calibrations=scratch / "calibrations.json",
        probe=probe,
        probe_s=plan.probe_s,
    )
    try:
        prepared = gather(opts, window)
    except InputError as exc:
        raise ModelFault(f"advise's inputs: {exc}") from None
    inputs = prepared.inputs
    assert window.delta is not None  # a window of the statistics API
    measured = Measured.from_stats(window.delta, window.seconds)
    traffic, saturated = offered(window, inputs.traffic, inputs.config)
    check = check_present(inputs.config, traffic, inputs.service, measured, prepared.cpu)
    cpu = check.cpu or prepared.cpu

    def predicted(config: BatcherConfig):
        return predict(config, traffic, inputs.service, cpu, plan.requests, seed=seed)

    now = predicted(inputs.config)
    batch, queue = (
        (check.figure("average batch").simulated, check.figure("mean queue").simulated)
        if check.figures
        else (now.mean_batch_size, now.queue_delay_mean_s)
    )
    row = Row(
        model,
        rate,
        PRESENT,
        inputs.config.describe(),
        (batch, measured.avg_batch),
        (queue, measured.mean_queue_s),
        (now.client_latency_p99_s, result.summary.client.latency_s.p99),
        busy=busy_share(window, inputs.config.instances),
        status=check.status,
        inferred_s=check.inferred[0][1] if check.inferred else None,
        note=check.line(),
        fit=(
            f"service {inputs.service.base_s * 1e6:.0f} us + "
            f"{inputs.service.per_item_s * 1e6:.1f} us/item; traffic "
            f"{traffic.describe()}; {prepared.costs.line}"
            + (f"; saturated by advise's rule ({saturated})" if saturated else "")
        ),
        inputs=Inputs(
            inputs.config, traffic, inputs.service, measured, prepared.cpu, seed, plan.requests
        ).to_json(),
    )
    others = [Predicted(AGAIN, inputs.config, batch, queue, now.client_latency_p99_s)]
    for which, config in alternatives(inputs.config):
        p = predicted(config)
        others.append(
            Predicted(
                which, config, p.mean_batch_size, p.queue_delay_mean_s, p.client_latency_p99_s
            )
        )
    return row, others


def offered(window: Window, advised: Traffic, config: BatcherConfig) -> tuple[Traffic, str]:
    """The traffic the clients sent over ``window`` (``fit_window``: the requests received),
    and why advise's rule calls the window saturated ("" when it does not). On a saturated
    window ``gather`` advises for twice the rate answered (headroom to drain a backlog): a
    policy for the advice, not the present, which is checked and predicted at the rate sent.
    ``advised`` where the window's counts cannot be fitted."""
    assert window.delta is not None  # a window of the statistics API
    saturated = saturation(window.delta, config.delay_s)
    try:
        return fit_window(window).traffic, saturated
    except ValueError:
        return advised, saturated


def measure(
    url: str, model: str, load: InputOptions, rate: float, plan: Plan, seed: int
) -> tuple[float | None, float | None, float | None]:
    """(average batch, mean queue, client p99) of an open-loop run at ``rate``."""
    params = load.apply(load_params(model, url, rate, plan.seconds, seed))
    checked(run(replace(params, duration_s=plan.warm_s, seed=seed + 1000)))
    result = checked(run(params))
    server = result.summary.server
    if server is None:
        raise ModelFault("no statistics over the run")
    return (
        server.average_batch_size,
        server.queue_s_per_request,
        result.summary.client.latency_s.p99,
    )


def one_model(
    s: Settings, admin: TritonClient, repo: Path, folder: Path, opts: argparse.Namespace
) -> list[Row]:
    """Every row of one model (see the module doc): copied into ``repo``, loaded, measured,
    unloaded."""
    plan = QUICK if opts.quick else FULL
    name = folder.name
    url = s.url("triton_http")
    shutil.copytree(folder, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    pbtxt = repo / name / "config.pbtxt"
    original = pbtxt.read_text()
    admin.load_model(name)
    try:
        typed = admin.model_config(name)
        if typed.max_batch_size < 1:
            raise ModelFault("max_batch_size 0: the model does not batch, no config to compare")
        if typed.sequence_batching or typed.ensemble_steps:
            raise ModelFault("a sequence or ensemble model: the advisor models the dynamic batcher")
        config = from_model_config(typed)
        load = input_options(typed, opts.var_dim)
        batch1_s = service_probe(url, name, load, plan)
        rates = rates_for(batch1_s, config.instances, opts.busy, opts.max_rate)
        print(
            f"{name}: {config.describe()}; a batch of 1 in {batch1_s * 1e3:.3f} ms; "
            f"rates {', '.join(f'{r:g}' for r in rates)}/s",
            flush=True,
        )
        rows: list[Row] = []
        predicted: dict[tuple[str, float], Predicted] = {}
        for k, rate in enumerate(rates):
            row, others = present(
                s, name, load, rate, plan, Path(opts.scratch), 100 + k, opts.probe
            )
            rows.append(row)
            print(f"  {rate:g}/s: busy {row.busy or 0:.0%}, {row.note}\n    {row.fit}", flush=True)
            predicted.update({(p.which, rate): p for p in others})
        for which in (AGAIN, *OTHERS):
            if which != AGAIN:  # the served config is loaded already
                pbtxt.write_text(with_config(original, predicted[(which, rates[0])].config, name))
                admin.load_model(name)
            for k, rate in enumerate(rates):
                p = predicted[(which, rate)]
                batch, queue, p99 = measure(url, name, load, rate, plan, seed=200 + k)
                rows.append(
                    Row(
                        name,
                        rate,
                        which,
                        p.config.describe(),
                        (p.batch, batch),
                        (p.queue_s, queue),
                        (p.p99_s, p99),
                    )
                )
        return rows
    finally:
        pbtxt.write_text(original)
        admin.unload_model(name)


# ---- the table ----------------------------------------------------------------------------


def _err(f: Figure) -> str:
    return f"{f.error:+.0%}" if f.measured else "n/a"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.2f}"


def table(capture: Capture) -> str:
    """The one table, the share of points met and the load averages."""
    head = (
        f"{'model':<16}{'rate/s':>8}{'busy':>6}  {'config':<10}| {'batch sim':>9}{'meas':>7}"
        f"{'err':>6}  | {'queue ms sim':>12}{'meas':>7}{'err':>6}  | {'p99 ms sim':>10}"
        f"{'meas':>7} | met"
    )
    lines = [head, "-" * len(head)]
    for r in capture.rows:
        batch, queue = r.figures()
        mark = "yes" if r.met else "NO"
        if r.which == PRESENT and r.status:
            mark += f" ({r.status})"
        lines.append(
            f"{r.model:<16}{r.rate:>8.0f}"
            f"{'' if r.busy is None else f'{r.busy:.0%}':>6}  {r.which:<10}| "
            f"{batch.simulated:>9.2f}{batch.measured:>7.2f}{_err(batch):>6}"
            f"{'' if batch.within else '*':<2}| "
            f"{_ms(queue.simulated):>12}{_ms(queue.measured):>7}{_err(queue):>6}"
            f"{'' if queue.within else '*':<2}| "
            f"{_ms(r.p99_s[0]):>10}{_ms(r.p99_s[1]):>7} | {mark}"
        )
    lines.append("")
    lines.append(
        f"* outside its bound (batch ±{BATCH_BOUND:.0%}, queue ±{QUEUE_BOUND:.0%} of the "
        f"measured, or of {QUEUE_FLOOR_S * 1e6:.0f} us when shorter); a present's p99 is "
        "predicted only when the time outside Triton is known"
    )
    lines.extend(summary(capture.rows))
    for skipped in capture.skipped:
        lines.append(f"not run: {skipped}")
    lines.append(
        f"load average (1, 5, 15 min) {_loads(capture.load_start)} at the start, "
        f"{_loads(capture.load_end)} at the end; wall time {capture.wall_s:.0f} s; "
        f"started {capture.started}"
    )
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> list[str]:
    """The share of points met, against each goal."""
    present_rows = [r for r in rows if r.which == PRESENT]
    other_rows = [r for r in rows if r.which in OTHERS]
    again_rows = [r for r in rows if r.which == AGAIN]
    out = []
    if present_rows:
        met = sum(r.met for r in present_rows)
        out.append(
            f"present (batch ±{BATCH_BOUND:.0%} and queue ±{QUEUE_BOUND:.0%} at every point): "
            f"{met}/{len(present_rows)} points met ({met / len(present_rows):.0%}): "
            + ("MET" if met == len(present_rows) else "NOT met")
        )
    if other_rows:
        met = sum(r.met for r in other_rows)
        share = met / len(other_rows)
        out.append(
            f"other configs (batch ±{BATCH_BOUND:.0%} at >= 80 % of points): "
            f"{met}/{len(other_rows)} points met ({share:.0%}): "
            + ("MET" if share >= 0.8 else "NOT met")
        )
    if again_rows:
        met = sum(r.met for r in again_rows)
        out.append(
            f"the served config measured again, against its simulated present (no goal: the "
            f"machine's repeatability): batch ±{BATCH_BOUND:.0%} at {met}/{len(again_rows)} "
            f"points ({met / len(again_rows):.0%})"
        )
    first = {(r.model, r.rate): r.batch[1] for r in present_rows}
    pairs = []
    for r in again_rows:
        once, twice = first.get((r.model, r.rate)), r.batch[1]
        if once and twice:
            pairs.append((once, twice))
    if pairs:
        close = sum(abs(b - a) <= BATCH_BOUND * a for a, b in pairs)
        out.append(
            f"the served config's second measurement within ±{BATCH_BOUND:.0%} of its first "
            f"(the window's) average batch: {close}/{len(pairs)} points ({close / len(pairs):.0%}"
            "): a prediction can do no better than the measurement repeats"
        )
    models = list(dict.fromkeys(r.model for r in rows))
    if len(models) > 1:
        out.append("per model (present, other configs, again):")
        for model in models:
            mine = [r for r in rows if r.model == model]
            parts = []
            for kinds in ((PRESENT,), OTHERS, (AGAIN,)):
                some = [r for r in mine if r.which in kinds]
                parts.append(f"{sum(r.met for r in some)}/{len(some)}")
            out.append(f"  {model}: {', '.join(parts)}")
    return out


def _loads(loads: Sequence[float]) -> str:
    return " ".join(f"{v:.2f}" for v in loads)


# ---- the command --------------------------------------------------------------------------


def shares(text: str) -> tuple[float, ...]:
    """``--busy``: shares of the instances' time, each in (0, 1)."""
    try:
        found = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give shares such as 0.35,0.55,0.75") from None
    if not found or not all(0 < v < 1 for v in found):
        raise argparse.ArgumentTypeError(f"{text!r}: each share between 0 and 1")
    return found


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.advisor_blind",
        description=__doc__.split("\n\n")[0].replace("\n", " "),
    )
    p.add_argument(
        "models", nargs="*", metavar="MODEL_DIR", help="model folders (config.pbtxt, 1/model.py)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"shorter runs: a {QUICK.window_s:g} s window, {QUICK.seconds:g} s per other "
        f"config (default {FULL.window_s:g} s, {FULL.seconds:g} s)",
    )
    p.add_argument(
        "--busy",
        type=shares,
        default=(0.35, 0.55, 0.75),
        metavar="U,U,U",
        help="the instances' busy shares at a batch of 1 that set the rates (0.35,0.55,0.75)",
    )
    p.add_argument(
        "--max-rate",
        type=float,
        default=2000.0,
        help="the highest rate sent, requests/s (2000: the client shares the machine)",
    )
    p.add_argument("--var-dim", type=int, default=16, help="the size of every variable dim (16)")
    p.add_argument(
        "--probe",
        action="store_true",
        help="read each present as `advise --probe` does: a short closed loop after the "
        "window measures the costs and the time outside Triton (the client p99 is then "
        "predicted)",
    )
    p.add_argument("--save", type=Path, help="write the run's rows here (JSON)")
    p.add_argument(
        "--table", type=Path, metavar="FILE", help="print a saved run's table; run nothing"
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options, with every model folder checked before anything starts (exit 2)."""
    p = parser()
    args = p.parse_args(argv)
    if args.table is not None:
        if args.models:
            p.error("--table prints a saved run: give no MODEL_DIR with it")
        return args
    if not args.models:
        p.error("give at least one MODEL_DIR (a folder holding config.pbtxt and 1/model.py)")
    if args.max_rate <= 0 or args.var_dim < 1:
        p.error("--max-rate must be > 0 and --var-dim >= 1")
    names: set[str] = set()
    for text in args.models:
        problem = folder_problem(Path(text))
        if problem:
            p.error(problem)
        name = Path(text).resolve().name
        if name in names:
            p.error(f"{text}: a second model named {name!r}; give each name once")
        names.add(name)
    args.models = [Path(m).resolve() for m in args.models]
    return args


def folder_problem(folder: Path) -> str:
    """Why ``folder`` is not a model folder this bench can load ("" when it is)."""
    pbtxt = folder / "config.pbtxt"
    if not pbtxt.is_file() or not (folder / "1" / "model.py").is_file():
        return f"{folder}: not a model folder; give one holding config.pbtxt and 1/model.py"
    try:
        config = parse_pbtxt(pbtxt.read_text())
    except (ParseError, UnicodeDecodeError) as exc:
        return f"{pbtxt}: not a model config ({exc}); fix it or leave the folder out"
    if config.name and config.name != folder.resolve().name:
        return f"{pbtxt}: name {config.name!r} is not the folder's ({folder.resolve().name!r})"
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table is not None:
        try:
            capture = Capture.from_json(json.loads(args.table.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parser().error(f"--table {args.table}: not a saved run ({exc})")
        print(table(capture))
        return 0
    started = time.monotonic()
    capture = Capture(
        command=["python", "-m", "bench.advisor_blind", *(argv or sys.argv[1:])],
        started=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        load_start=os.getloadavg(),
    )
    print(f"load average {_loads(capture.load_start)} at the start", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-blind-") as tmp:
        repo = Path(tmp) / "models"
        repo.mkdir()
        args.scratch = tmp
        with stack(copies=None, services=("triton",), model_repository=repo) as s:
            admin = TritonClient(s.url("triton_http"), headers=s.admin_headers())
            for folder in args.models:
                try:
                    capture.rows.extend(one_model(s, admin, repo, folder, args))
                except (ModelFault, TritonError, LoadgenError) as exc:
                    print(f"{folder.name}: not run: {exc}", flush=True)
                    capture.skipped.append(f"{folder.name}: {exc}")
    capture.load_end = os.getloadavg()
    capture.wall_s = time.monotonic() - started
    if args.save is not None:
        args.save.write_text(json.dumps(capture.to_json(), indent=1) + "\n")
    print("\n" + table(capture))
    return 0


if __name__ == "__main__":
    sys.exit(main())
