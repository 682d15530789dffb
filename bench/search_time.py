"""The advisor's search time by arrival rate: one table, every rate in one run.

A search simulates each config of the default space (``advisor.predict.SearchSpace``) on
5,000 requests, then its finalists on five more seeds. Its time should not depend on the
rate: at low rates a run covers hours of simulated time, and a simulator that slows down
there (a timer that re-armed at the same instant once the clock grew large) shows as one
row far above the others. Run: ``.venv/bin/python -m bench.search_time``.
"""

from __future__ import annotations

import argparse
import time

from advisor.config import BatcherConfig
from advisor.model import CpuModel, OpenLoop, ServiceModel
from advisor.predict import recommend

# batch_add_model's shape of costs: a few ms per execution, a front end on 2 cores.
SERVICE = ServiceModel(0.0028, 0.0002)
CPU = CpuModel(cores=2, request_s=2e-4)
CURRENT = BatcherConfig(4, (2, 4), 500)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rates", type=float, nargs="+", default=[0.05, 1.0, 50.0, 200.0], help="requests/s"
    )
    args = parser.parse_args(argv)
    rows = []
    for rate in args.rates:
        started = time.perf_counter()
        rec = recommend(CURRENT, OpenLoop(rate), SERVICE, 0.010, cpu=CPU, budget_s=600)
        wall = time.perf_counter() - started
        rows.append((rate, wall, rec.considered, rec.cut_note() or "-"))
    fastest = min(r[1] for r in rows)
    print(f"{'rate (req/s)':>12} {'search (s)':>10} {'x fastest':>9} {'configs':>7}  cut")
    for rate, wall, considered, cut in rows:
        print(f"{rate:>12g} {wall:>10.1f} {wall / fastest:>9.2f} {considered:>7}  {cut}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
