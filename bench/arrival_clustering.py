"""How open-loop arrivals reach Triton: clustering of the gaps between traced arrivals, and
the share of executions that hold up the front end (``advisor.handoff``), from Triton's own
traces of Poisson runs of the load generator.

    STACK_TRITON_VENV=... .venv/bin/python -m bench.arrival_clustering [--rates 500,800]

Issue 25 asked which of these the advisor learned from Triton and which from the load
generator's old pacing (sends on asyncio's 1 ms tick): run this on both and compare. Each
row also prints the run's p99 send lateness (how well the schedule was kept) and the load
average.
"""

from __future__ import annotations

import argparse
import os

from advisor.handoff import clustering, measure
from advisor.storedrun import stored_config
from bench.common import stack
from loadgen.engine.runner import RunParams, run
from stacksettings import PORTS

TRACED = 4000  # requests per traced run (Triton 2.51's window bound is 5,000)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="batch_add_model")
    ap.add_argument("--rates", default="500,800")
    args = ap.parse_args()
    with stack(copies=None, services=("triton", "exporter")) as s:
        # loadgen opens trace settings with the stack's admin key, found as a user's is.
        os.environ["STACK_STATE_DIR"] = str(s.state_dir)
        for name, (_, var) in PORTS.items():
            os.environ[var] = str(s.port(name))
        url, exporter = s.url("triton_http"), s.url("exporter")
        run(RunParams("rate", url=url, rate=200, duration_s=1, seed=3))  # warm-up
        for rate in (float(r) for r in args.rates.split(",")):
            result = run(
                RunParams(
                    "rate",
                    args.model,
                    url=url,
                    rate=rate,
                    poisson=True,
                    duration_s=TRACED / rate,
                    seed=5,
                    trace=True,
                    exporter_url=exporter,
                )
            )
            config = stored_config(result.model_config)
            assert config is not None, "the model's config could not be read"
            h = measure(result.traced_requests or [], config)
            late = result.summary.client.send_lateness_s
            server = result.summary.server
            onsets = ", ".join(f"{x * 1e6:.0f}" for x in h.cpu.hold_onsets[:3]) or "-"
            print(
                f"{args.model} {rate:g}/s Poisson: "
                f"{clustering(h.cpu.arrival_gaps) if h.cpu.arrival_gaps else 'no gaps'}; "
                f"front end held by {h.cpu.hold_share:.0%} of executions (onsets us: {onsets}); "
                f"average batch {server.average_batch_size if server else None}; "
                f"p99 send lateness "
                f"{'-' if late is None or late.p99 is None else f'{late.p99 * 1e6:.0f} us'}; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
