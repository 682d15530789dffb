"""Does tracing change the time a request spends outside Triton's queue and execution?

    STACK_TRITON_VENV=... .venv/bin/python -m bench.outside_time [--model mlp_model --rate 150]

The advisor adds the time outside Triton (client, network, front end) to its server-side
prediction, taking it from traced requests: client latency less traced queue wait and
execution (``advisor.handoff.outside``). If part of tracing's cost falls outside the queue and
the execution, that overstates what untraced clients see. An untraced run gives only the
mean: the clients' mean latency less Triton's mean queue and compute per request (statistics
API). On a private Triton (the launcher's code, traces read through the exporter), each round
runs an untraced run of --seconds and a traced run of 1.5 s (within Triton 2.51's trace
window) of the same Poisson traffic, other seeds. Prints a table of the means and the traced
mean's ratio to the untraced one. Only the tuning models (model_repository/) belong here: the
held-out ones (bench/models/heldout/) are for judging the advisor, not for fitting it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from advisor.handoff import outside
from loadgen.engine.runner import RunParams, run
from loadgen.results.summary import ServerSummary
from runs.store import RunStore
from stack.supervisor import running
from stacksettings import PORTS, isolated

HELD_OUT = Path(__file__).resolve().parent / "models" / "heldout"


def inside_s(server: ServerSummary | None) -> float:
    """Triton's mean queue wait plus compute per request over a run (its statistics)."""
    if server is None or server.queue_s_per_request is None:
        raise SystemExit("a run kept no server statistics: is the model serving?")
    return server.queue_s_per_request + (server.compute_s_per_request or 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp_model", help="a model of model_repository/")
    parser.add_argument("--rate", type=float, default=150.0, help="Poisson requests/s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0, help="each untraced run")
    args = parser.parse_args(argv)
    if (HELD_OUT / args.model).exists():
        parser.error(f"{args.model} is held out (bench/models/heldout/): never tune on it")
    base = Path(tempfile.mkdtemp(prefix="outside-time-"))
    settings = isolated(base / "state")
    # The load generator finds the exporter and the key of Triton's trace API as a user's
    # does: through the stack's state folder and ports.
    os.environ["STACK_STATE_DIR"] = str(settings.state_dir)
    for name, (_, var) in PORTS.items():
        os.environ[var] = str(settings.port(name))
    rows = []
    with running(settings, only=("triton", "exporter")):
        db = str(base / "runs.sqlite3")
        params = RunParams(
            "rate",
            model=args.model,
            url=settings.url("triton_http"),
            rate=args.rate,
            poisson=True,
            duration_s=args.seconds,
            seed=1,
        )
        run(params, db=db)  # the model's first executions are slow: not measured
        for i in range(args.rounds):
            plain = run(replace(params, seed=10 + i), db=db)
            traced = run(replace(params, seed=20 + i, duration_s=1.5, trace=True), db=db)
            assert plain.run_id is not None and traced.run_id is not None
            with RunStore(db) as store:
                samples = store.load_traced_latencies(traced.run_id)
                records = store.load_records(plain.run_id)
            found = outside(samples)
            if found is None:
                raise SystemExit(f"the traced run {traced.run_id} holds no traced requests")
            latencies = [r["latency_s"] for r in records if r["outcome"] == "ok"]
            untraced = statistics.mean(latencies) - inside_s(plain.summary.server)
            traced_mean = found.median_s + statistics.mean(found.spread_s)
            rows.append((i + 1, len(latencies), len(samples), untraced, traced_mean))
    print(f"{args.model} at {args.rate:g}/s Poisson; time outside Triton, mean (ms)")
    heads = ("round", "untraced n", "traced n", "untraced", "traced", "ratio")
    print(" ".join(f"{h:>{w}}" for h, w in zip(heads, (5, 10, 8, 9, 8, 6), strict=True)))
    for i, n_plain, n_traced, untraced, traced_mean in rows:
        print(
            f"{i:>5} {n_plain:>10,} {n_traced:>8,} {untraced * 1e3:>9.3f} "
            f"{traced_mean * 1e3:>8.3f} {traced_mean / untraced:>6.2f}"
        )
    plain_median = statistics.median(r[3] for r in rows)
    traced_median = statistics.median(r[4] for r in rows)
    print(
        f"{'median':>5} {'':>10} {'':>8} {plain_median * 1e3:>9.3f} {traced_median * 1e3:>8.3f} "
        f"{traced_median / plain_median:>6.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
