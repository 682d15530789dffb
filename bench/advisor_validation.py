"""Validate the advisor against the real Triton: predicted vs measured, open-loop Poisson load.

    STACK_TRITON_VENV=... .venv/bin/python -m bench.advisor_validation

For each config (the spec's, and a tuned one that batches more) and each arrival
rate, a fresh Triton is started by the launcher's code on free ports with a temporary
model repository (a fresh server, so Triton's latency summaries hold only this
point's requests). ``bench/poisson.py`` sends Poisson arrivals for a fixed time.

Measured:
  * average batch size: inferences / executions from the statistics API delta;
  * mean queue delay: ``queue`` ns / count from the same delta;
  * p99 queue delay: Triton's ``nv_inference_queue_summary_us{quantile="0.99"}``
    (the launcher starts Triton with ``summary_latencies=true``).
Predicted: ``advisor.predict`` with the costs calibrated from
tests/advisor/data/calibration.json and the traffic fitted from the sender's actual
send times (rate and coefficient of variation of the gaps), not the nominal rate.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
from dataclasses import replace
from pathlib import Path

from advisor.calibrate import load_capture
from advisor.config import BatcherConfig
from advisor.model import OpenLoop
from advisor.predict import predict
from bench.poisson import poisson_load
from bench.tritonrun import (
    MODEL,
    own_cpu_seconds,
    queue_p99_us,
    triton,
    triton_pids,
    wait_until_quiet,
)
from loadgen.burst import infer_body
from stacksettings import procstat
from tritonapi.client import TritonClient

CAPTURE = Path(__file__).resolve().parent.parent / "tests" / "advisor" / "data" / "calibration.json"
# A point during which other processes used more CPU than this is measured again.
NOISY_CORES = 0.5
CONFIGS = {
    "spec": BatcherConfig(4, (2, 4), 500),
    "tuned": BatcherConfig(8, (), 1000),
}


def warm_up(host: str, port: int, requests_n: int = 5) -> None:
    """A few serial requests: the stub's first executions are slow. Few, because
    Triton's queue summary keeps them and they must stay under 1 % of the point."""
    conn = http.client.HTTPConnection(host, port, timeout=30)
    body = infer_body({"INPUT_A": [1.0], "INPUT_B": [2.0]})
    for _ in range(requests_n):
        conn.request("POST", f"/v2/models/{MODEL}/infer", body)
        conn.getresponse().read()
    conn.close()


def measure(
    config: BatcherConfig, rate: float, duration_s: float, quiet_wait_s: float
) -> dict[str, float]:
    with triton(config) as settings:
        host, port = settings.host, settings.port("triton_http")
        warm_up(host, port)
        # Other work on this shared machine distorts every figure: wait (bounded) for
        # a calmer moment, and measure how much CPU the rest used during the point.
        wait_until_quiet(0.5, quiet_wait_s)
        url = settings.url("triton_http")
        pids = triton_pids(settings)
        before = TritonClient(url).model_stats(MODEL)
        busy0, own0 = procstat.machine_busy_seconds(), own_cpu_seconds(pids)
        sent = poisson_load(host, port, MODEL, rate, duration_s)
        busy1, own1 = procstat.machine_busy_seconds(), own_cpu_seconds(pids)
        delta = TritonClient(url).model_stats(MODEL).minus(before)
        p99 = queue_p99_us(f"{settings.url('triton_metrics')}/metrics")
    span = sent.send_times[-1] - sent.send_times[0]
    other_cores = max(0.0, ((busy1 - busy0) - (own1 - own0)) / span)
    gaps = [b - a for a, b in zip(sent.send_times, sent.send_times[1:], strict=False)]
    return {
        "rate": 1 / statistics.mean(gaps),
        "cv": statistics.pstdev(gaps) / statistics.mean(gaps),
        "batch": delta.inference_count / delta.execution_count,
        "queue_mean_us": delta.phase("queue").ns / delta.phase("queue").count / 1e3,
        "queue_p99_us": p99,
        "client_p99_ms": sorted(sent.latencies_s)[int(0.99 * len(sent.latencies_s))] * 1e3,
        "other_cores": other_cores,
        "client_cpu_us": sent.client_cpu_s / len(sent.send_times) * 1e6,
        "dropped": sent.dropped,
        "errors": sent.errors,
    }


def pct(predicted: float, measured: float) -> str:
    return f"{(predicted - measured) / measured:+.0%}" if measured else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,500,1000", help="requests/s, comma-separated")
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per point, at least")
    parser.add_argument(
        "--min-requests",
        type=int,
        default=5000,
        help="longer points at low rates: a p99 needs enough requests in its tail (50 here)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help=f"measure a point again if other processes used over {NOISY_CORES} cores",
    )
    parser.add_argument(
        "--quiet-wait",
        type=float,
        default=30.0,
        help="seconds to wait at most for other processes to calm down before a point",
    )
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    service, cpu = load_capture(CAPTURE).calibrate()
    print(
        f"model: service {service.base_s * 1e6:.0f} us + {service.per_item_s * 1e6:.1f} us/item, "
        f"{cpu.cores:g} cores, {cpu.request_s * 1e6:.0f} us CPU/request, "
        f"timer slack {cpu.timer_slack_s * 1e6:.0f} us + exp({cpu.timer_slack_tail_s * 1e6:.0f} us)"
    )
    header = (
        f"{'config':<6} {'rate':>6} {'sent/s':>7} {'cv':>5} | {'batch pred':>10} {'meas':>6} "
        f"{'err':>5} | {'q mean pred':>11} {'meas':>7} | {'q p99 pred':>10} {'meas':>7} "
        f"{'err':>6} | {'client p99 ms':>13} {'other cores':>11}"
    )
    print(header)
    print("-" * len(header))
    for name, config in CONFIGS.items():
        for rate in rates:
            duration = max(args.duration, args.min_requests / rate)
            m = measure(config, rate, duration, args.quiet_wait)
            for _ in range(args.retries):
                if m["other_cores"] <= NOISY_CORES:
                    break
                m = measure(config, rate, duration, args.quiet_wait)
            # The cores left to this stack while others ran: contention made explicit.
            left = replace(cpu, cores=max(0.25, (cpu.cores or 2.0) - m["other_cores"]))
            p = predict(config, OpenLoop(m["rate"], m["cv"]), service, left, with_limit=False)
            print(
                f"{name:<6} {rate:>6.0f} {m['rate']:>7.0f} {m['cv']:>5.2f} | "
                f"{p.mean_batch_size:>10.2f} {m['batch']:>6.2f} "
                f"{pct(p.mean_batch_size, m['batch']):>5} | "
                f"{p.queue_delay_mean_s * 1e6:>11.0f} {m['queue_mean_us']:>7.0f} | "
                f"{p.queue_delay_p99_s * 1e6:>10.0f} {m['queue_p99_us']:>7.0f} "
                f"{pct(p.queue_delay_p99_s * 1e6, m['queue_p99_us']):>6} | "
                f"{m['client_p99_ms']:>13.1f} {m['other_cores']:>11.2f}"
                + ("  NOISY" if m["other_cores"] > NOISY_CORES else "")
                + (f"  dropped {m['dropped']:.0f}" if m["dropped"] else "")
                + (f"  errors {m['errors']:.0f}" if m["errors"] else ""),
                flush=True,
            )


if __name__ == "__main__":
    main()
