"""Validate the advisor against the real Triton, as a user runs it: predicted vs measured, with
the p99 queue wait from Triton's own traces, and each recommendation checked by experiment.

    STACK_TRITON_VENV=... .venv/bin/python -m bench.advisor_validation [--seconds 4] [--traced 4000]
        [--models batch_add_model,var_add,mlp_model]

Three models on one private stack (Triton + the exporter, which serves the traces):
  * ``batch_add_model``, the spec's (max_batch_size 4, preferred [2, 4], 500 us);
  * ``var_add``, the issue's unseen model: Y = 2X + 1 over a variable-length FP32 vector,
    max_batch_size 16, preferred [8, 16], 2,000 us, 2 CPU instances (made here; requests
    of 16 values);
  * ``mlp_model``, the compute-heavy one (max_batch_size 16, 1,000 us).

Each at three Poisson rates. At each rate, what ``advise --url`` does: a traced run of the
model's own config, during which the service times (statistics delta, each size executed
often enough with its own mean), the costs (the server process's CPU), the traffic (the
run's send times) and the batcher's hand-offs (the run's traces: ``advisor.handoff``) are
measured; then the
prediction for the own config, and a recommendation (objective p99 latency, bound
``--p99-ms``, noise over 3 seeds). When the advice is not "keep it", the recommended config
is loaded as a scratch copy (``advisor.verify``), gets the same traffic, traced, and is
unloaded. Every run's p99 queue wait comes from Triton's traces of that run (a count-bounded
window inside the server's safe region, ``tritonapi.tracesafety``: runs are sized under
it, so on Triton before 2.57 each traced run holds only a few hundred requests), the
average batch from the statistics API delta.

Criteria (the issue's): average batch within 10 % at every point; p99 queue wait within 25 %
at >= 5 of the (up to 6) points per model; a recommendation's measured gain (client p99
latency, own / recommended) at least 80 % of its predicted gain, counted on the improvement:
measured - 1 >= 0.8 x (predicted - 1).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from advisor import costs, handoff, storedrun, verify  # noqa: E402
from advisor.config import BatcherConfig, from_model_config  # noqa: E402
from advisor.fit import fit_service_times  # noqa: E402
from advisor.model import CpuModel, OpenLoop, ServiceModel  # noqa: E402
from advisor.predict import Prediction, predict, recommend  # noqa: E402
from bench.common import stack  # noqa: E402
from loadgen.engine.runner import RunParams, RunResult, run  # noqa: E402
from loadgen.errors import LoadgenError  # noqa: E402
from stacksettings import PORTS, ROOT, Settings  # noqa: E402
from tritonapi.client import TritonClient, TritonError  # noqa: E402
from tritonapi.tracesafety import safe_count, server_version  # noqa: E402

VAR_CONFIG = """name: "var_add"
backend: "python"
max_batch_size: 16
input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 8, 16 ]
  max_queue_delay_microseconds: 2000
}
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
VAR_MODEL = """import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = (2 * x + 1).astype(np.float32)
            out.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("Y", y)]))
        return out
"""
RATES = {
    "batch_add_model": (200.0, 500.0, 1000.0),
    "var_add": (300.0, 800.0, 1500.0),
    "mlp_model": (100.0, 250.0, 500.0),
}
SHAPES = {"var_add": (("X", (16,)),)}
WARM_UP_S = 1.0
# A point whose run Triton did not serve whole is run again, at most this many times in all.
ATTEMPTS = 3


def repository(folder: Path) -> Path:
    repo = folder / "models"
    repo.mkdir()
    for name in ("batch_add_model", "mlp_model"):
        shutil.copytree(ROOT / "model_repository" / name, repo / name)
    (repo / "var_add" / "1").mkdir(parents=True)
    (repo / "var_add" / "config.pbtxt").write_text(VAR_CONFIG)
    (repo / "var_add" / "1" / "model.py").write_text(VAR_MODEL)
    return repo


@dataclass
class Point:
    model: str
    rate: float
    which: str  # own | recommended
    config: BatcherConfig
    predicted: Prediction
    batch: float | None
    queue_p99_s: float | None
    client_p99_s: float | None
    traced: int
    sent: int


def traced_run(settings: Settings, model: str, rate: float, seconds: float, seed: int) -> RunResult:
    version = server_version(TritonClient(settings.url("triton_http")))
    duration = min(seconds, 0.95 * safe_count(version, None) / rate)
    params = RunParams(
        "rate",
        model=model,
        url=settings.url("triton_http"),
        rate=rate,
        poisson=True,
        duration_s=duration,
        seed=seed,
        shapes=SHAPES.get(model.split(verify.SUFFIX)[0], ()),
        trace=True,
        exporter_url=settings.url("exporter"),
        label="advisor validation",
    )
    warm = replace(params, trace=False, duration_s=WARM_UP_S, seed=seed + 1000)
    run(warm)
    return checked(run(params))


class RunFault(RuntimeError):
    """A traced run that Triton did not serve whole (its tracing can crash it: README)."""


def checked(result: RunResult) -> RunResult:
    client = result.summary.client
    lost = client.failed + client.timed_out
    traced = result.trace.traced if result.trace else 0
    if lost or traced < client.sent:
        raise RunFault(
            f"{lost} of {client.sent} requests failed, {traced} traced"
            + (f" ({next(iter(client.errors))})" if client.errors else "")
        )
    return result


def restart_triton(url: str, timeout_s: float = 120.0) -> None:
    """Kill the private Triton (a crashed one is gone already; a hung one still answers
    health checks but no inference) and wait for the supervisor's restart."""
    old = costs.local_server_pid(url)
    if old is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(old, signal.SIGKILL)
    client, deadline = TritonClient(url), time.monotonic() + timeout_s
    while not (client.is_ready(2.0) and costs.local_server_pid(url) not in (None, old)):
        if time.monotonic() > deadline:
            raise SystemExit(f"Triton at {url} did not come back within {timeout_s:.0f} s")
        time.sleep(0.5)


def observed(result: RunResult) -> tuple[float | None, float | None, float | None, int, int]:
    server, client = result.summary.server, result.summary.client
    trace = result.trace
    p99 = trace.queue_wait_s.get("p99") if trace else None
    return (
        server.average_batch_size if server else None,
        p99,
        client.latency_s.p99,
        trace.traced if trace else 0,
        client.sent,
    )


def measure_own(
    settings: Settings,
    model: str,
    config: BatcherConfig,
    rate: float,
    seconds: float,
    seed: int,
    handoffs: bool = True,
) -> tuple[RunResult, ServiceModel, CpuModel, OpenLoop, str]:
    """The own config's traced run, and what the advisor learns from watching it."""
    url = settings.url("triton_http")
    client = TritonClient(url)
    pid = costs.local_server_pid(url)
    assert pid is not None, "the private Triton's process is not visible"
    meter = costs.CpuMeter(pid)
    before = client.model_stats(model)
    meter.start()
    result = traced_run(settings, model, rate, seconds, seed)
    cpu_used = meter.stop()
    delta = client.model_stats(model).minus(before)
    service = fit_service_times(delta)
    calibration = costs.from_process_cpu(cpu_used, meter.cores, delta, service, "the run")
    due = sorted(float(r[1]) for r in result.records())
    traffic = storedrun.traffic_from_run(result.params, due)
    assert isinstance(traffic, OpenLoop)
    cpu = calibration.cpu
    measured = ""
    if handoffs:  # the batcher's hand-offs, from this run's own traces
        found = handoff.measure(result.traced_requests or [], config, handoff.timer_slack(pid))
        cpu, measured = found.apply(cpu), f"; {found.describe()}"
        # What the client waits beyond Triton's queue and execution, less the CPU the
        # simulator already charges there: waiting that costs no server CPU.
        latency = {int(r[0]): float(r[2]) for r in result.records()}  # by record seq
        seq_of = result.recorder.seq_of or {}  # a request's index -> its record's seq
        outside = handoff.outside(
            (latency[seq], t.queue_wait_s, t.compute_s)
            for t in result.traced or []
            if (seq := seq_of.get(t.index)) is not None and seq in latency
        )
        if outside is not None:
            cpu, measured = outside.apply(cpu), f"{measured}; {outside.describe()}"
    note = (
        f"service {service.base_s * 1e6:.0f} us + {service.per_item_s * 1e6:.1f} us/item "
        f"(measured sizes {len(service.measured)}), "
        f"{calibration.request_s * 1e6:.0f} us CPU/request on {calibration.cores:g} cores, "
        f"traffic {traffic.rate_per_s:.0f}/s cv {traffic.cv:.2f} (Triton pid {pid}: "
        f"{cpu_used.own_s:.2f} s own CPU, {cpu_used.children_s:.2f} s in its stubs, "
        f"{delta.inference_count} requests){measured}"
    )
    return result, service, cpu, traffic, note


def within(predicted: float | None, measured: float | None, tolerance: float) -> bool:
    if predicted is None or not measured:
        return False
    return abs(predicted - measured) <= tolerance * measured


def pct(predicted: float | None, measured: float | None) -> str:
    if predicted is None or not measured:
        return "n/a"
    return f"{(predicted - measured) / measured:+.0%}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=4.0,
        help="per traced run at least (default 4), longer at low rates: see --traced",
    )
    parser.add_argument(
        "--traced",
        type=int,
        default=4000,
        help="requests per traced run at least, within Triton's window bound (default 4,000: "
        "a p99 over 2,000 requests moved by 20 %% between runs of one config)",
    )
    parser.add_argument("--models", default=",".join(RATES))
    parser.add_argument("--p99-ms", type=float, default=20.0, help="the recommendations' bound")
    parser.add_argument("--requests", type=int, default=4000, help="simulated per config")
    parser.add_argument(
        "--no-handoffs",
        action="store_true",
        help="leave the batcher's hand-offs and the time outside Triton (both measured from "
        "the traces) out of the simulation",
    )
    args = parser.parse_args()

    models = args.models.split(",")
    points: list[Point] = []
    gains: list[tuple[str, float, float | None, float | None]] = []
    retried: list[str] = []
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="bench-advisor-") as tmp,
        stack(
            services=("triton", "exporter"),
            model_repository=repository(Path(tmp)),
            supervise=True,
        ) as s,
    ):
        url = s.url("triton_http")
        # loadgen's trace window opens the local stack's restricted APIs with its key: this
        # private stack is "the local stack" for the load generator.
        os.environ["STACK_STATE_DIR"] = str(s.state_dir)
        for name, (_, var) in PORTS.items():
            os.environ[var] = str(s.port(name))
        admin = TritonClient(url, headers=s.admin_headers())
        for model in models:
            config = from_model_config(admin.model_config(model))
            for i, rate in enumerate(RATES[model]):
                for attempt in range(1, ATTEMPTS + 1):
                    try:
                        found, gain = one_rate(args, s, admin, model, config, i, rate)
                    except (RunFault, TritonError, LoadgenError) as exc:
                        if attempt == ATTEMPTS:
                            raise SystemExit(f"{model} at {rate:g}/s: {exc}") from None
                        print(f"{model} at {rate:g}/s: {exc}: run again", flush=True)
                        retried.append(f"{model} {rate:g}/s: {exc}")
                        restart_triton(url)
                        continue
                    points.extend(found)
                    gains.append(gain)
                    break
    report(points, gains, models, time.monotonic() - started, retried)
    return 0


def one_rate(
    args: argparse.Namespace,
    s: Settings,
    admin: TritonClient,
    model: str,
    config: BatcherConfig,
    i: int,
    rate: float,
) -> tuple[list[Point], tuple[str, float, float | None, float | None]]:
    """The own config's run, the prediction and recommendation, and the recommended
    config's run (unless "keep it") at one rate."""
    seed = 7 + i
    seconds = max(args.seconds, args.traced / rate)
    result, service, cpu, traffic, note = measure_own(
        s, model, config, rate, seconds, seed, not args.no_handoffs
    )
    print(f"{model} at {rate:g}/s: {note}", flush=True)
    own_predicted = predict(config, traffic, service, cpu, args.requests, with_limit=False)
    own = Point(model, rate, "own", config, own_predicted, *observed(result))
    rec = recommend(
        config, traffic, service, args.p99_ms / 1e3, cpu, requests=args.requests, seeds=3
    )
    if rec.best is None or rec.keep:
        return [own], (f"{model} {rate:g}/s: keep it", 1.0, None, None)
    name = f"{model}{verify.SUFFIX}recommended"
    scratch = verify.scratch_config(admin.model_config_json(model), rec.best.config, name)
    admin.load_model(name, scratch, verify.model_files(s.model_repository, model))
    try:
        tried = traced_run(s, name, rate, seconds, seed)
    finally:
        with contextlib.suppress(TritonError):
            admin.unload_model(name)
    best = Point(model, rate, "recommended", rec.best.config, rec.best, *observed(tried))
    own_p99, best_p99 = own.client_p99_s, best.client_p99_s
    measured_gain = own_p99 / best_p99 if own_p99 and best_p99 else None
    what = f"{model} {rate:g}/s: {rec.best.config.describe()}"
    return [own, best], (what, rec.gain_ratio, measured_gain, best_p99)


def report(
    points: list[Point],
    gains: list[tuple[str, float, float | None, float | None]],
    models: list[str],
    wall_s: float,
    retried: list[str],
) -> None:
    header = (
        f"{'model':<16}{'rate':>6} {'config':<12}| {'batch pred':>10}{'meas':>7}{'err':>6} | "
        f"{'q p99 pred us':>13}{'traced us':>10}{'err':>6} | "
        f"{'client p99 pred us':>18}{'meas us':>8}{'err':>6} | {'traced':>7}/{'sent':<6}"
    )
    print("\n" + header)
    print("-" * len(header))
    for p in points:
        q_pred = p.predicted.queue_delay_p99_s
        print(
            f"{p.model:<16}{p.rate:>6.0f} {p.which:<12}| {p.predicted.mean_batch_size:>10.2f}"
            f"{(p.batch or 0):>7.2f}{pct(p.predicted.mean_batch_size, p.batch):>6} | "
            f"{q_pred * 1e6:>13.0f}{(p.queue_p99_s or 0) * 1e6:>10.0f}"
            f"{pct(q_pred, p.queue_p99_s):>6} | "
            f"{p.predicted.latency_p99_s * 1e6:>18.0f}{(p.client_p99_s or 0) * 1e6:>8.0f}"
            f"{pct(p.predicted.latency_p99_s, p.client_p99_s):>6} | {p.traced:>7}/{p.sent:<6}"
        )
    print("\ncriteria per model:")
    for model in models:
        mine = [p for p in points if p.model == model]
        batch_ok = sum(within(p.predicted.mean_batch_size, p.batch, 0.10) for p in mine)
        queue_ok = sum(within(p.predicted.queue_delay_p99_s, p.queue_p99_s, 0.25) for p in mine)
        print(
            f"  {model}: average batch within 10 % at {batch_ok}/{len(mine)} points; "
            f"p99 queue wait within 25 % of the traces at {queue_ok}/{len(mine)}"
        )
    print("\nrecommendations (gain in client p99 latency under the same traffic):")
    for what, predicted, measured, _ in gains:
        if measured is None and predicted == 1.0:
            print(f"  {what}")
            continue
        ok = measured is not None and measured - 1 >= 0.8 * (predicted - 1)
        shown = "n/a" if measured is None else f"x{measured:.2f}"
        print(
            f"  {what}: predicted x{predicted:.2f}, measured {shown}"
            f" -> {'met' if ok else 'NOT met'}"
        )
    if retried:
        print(f"\nrun again after a fault ({len(retried)}; Triton 2.51's tracing, see README):")
        for line in retried:
            print(f"  {line}")
    print(f"\nwall time {wall_s:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
