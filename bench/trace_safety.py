"""How often a trace window takes Triton 2.51 down: the map behind tritonapi.tracesafety.

    STACK_TRITON_VENV=... .venv/bin/python -m bench.trace_safety [--windows 20]
        [--cells all|NAME,NAME] [--budget-s 5400]

A private Triton (the launcher's code, tracing off) serves batch_add_model. Each cell is one
way of asking for traces under one load: a window of ``count`` traced requests, 1 in ``rate``
traced, while the load generator sends the requests the window needs (plus one rate's worth)
over HTTP or gRPC, closed-loop at concurrency c or open-loop Poisson at R/s. Each window is a
Bernoulli trial: completed, crashed (the process died) or hung (alive but requests timed out;
killed and counted as a crash, since a user loses the server either way). After a crash
Triton is started again and the cell goes on. Windows run in rounds over the cells, so a
shared machine's drift hits all alike, until ``--budget-s`` runs out. Printed per cell: the
windows run, the crash count, the exact (Clopper-Pearson) 95 % interval of the crash
probability per window, the median window duration and the mean 1-minute load average.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import MODEL, median
from loadgen.engine.runner import RunParams, run
from loadgen.errors import LoadgenError
from stack.supervisor import Supervisor, running
from stacksettings import PORTS, ROOT, Settings, isolated
from tritonapi.client import TritonClient, TritonError
from tritonapi.traces import stop_window, window_left

# A window whose load has not finished after this long is a hung server (the slowest cell
# sends 20,000 requests at concurrency 8 in about 6 s).
HANG_S = 30.0


AFTER = 3_000  # about 1 s of closed-loop load at concurrency 8 here


@dataclass(frozen=True)
class Cell:
    name: str
    count: int  # traced requests in the window
    rate: int  # 1 in N traced
    concurrency: int = 0  # closed loop (0: open loop at load_rate)
    load_rate: float = 0.0  # open-loop Poisson requests/s
    protocol: str = "http"
    # Read the model's trace setting every poll_s during the window, as `stack trace` and
    # the exporter do (0: not during the window).
    poll_s: float = 0.0
    # Requests sent after those that fill the window: the load goes on while Triton
    # writes the window and turns tracing off (a user's load outlives the window).
    after: int = 0
    # Triton writes the window's traces every log_frequency traces (0: once, when full),
    # which keeps what was written before a crash.
    log_frequency: int = 0
    # The window made by `loadgen --trace` (request ids, the window is exactly the run,
    # read back through the exporter), as the test suite's traced runs make it.
    loadgen_trace: bool = False

    @property
    def sent(self) -> int:
        """Requests one window sends: enough to fill it, and one sampling period more."""
        if self.loadgen_trace:
            return self.count
        return self.count * self.rate + self.rate + self.after

    def load(self) -> str:
        return f"c={self.concurrency}" if self.concurrency else f"{self.load_rate:g}/s Poisson"


CELLS = [
    # The load stops when the window is full.
    Cell("n2000-c8", 2000, 1, concurrency=8),
    Cell("n5000-c8", 5000, 1, concurrency=8),
    Cell("n20000-c8", 20000, 1, concurrency=8),
    # The load goes on past the window (as it does under `stack trace` and the dashboard's
    # button), which reads the setting every 0.5 s as `stack trace` does.
    Cell("n300-c8+", 300, 1, concurrency=8, after=AFTER, poll_s=0.5),
    Cell("n1000-c8+", 1000, 1, concurrency=8, after=AFTER, poll_s=0.5),
    Cell("n2000-c8+", 2000, 1, concurrency=8, after=AFTER, poll_s=0.5),
    Cell("n5000-c8+", 5000, 1, concurrency=8, after=AFTER, poll_s=0.5),
    Cell("n5000-c8+nopoll", 5000, 1, concurrency=8, after=AFTER),
    Cell("n2000-c1+", 2000, 1, concurrency=1, after=AFTER, poll_s=0.5),
    Cell("n1000-c2+", 1000, 1, concurrency=2, after=AFTER, poll_s=0.5),
    Cell("n2000-c2+", 2000, 1, concurrency=2, after=AFTER, poll_s=0.5),
    Cell("n200-c8-r10+", 200, 10, concurrency=8, after=AFTER, poll_s=0.5),
    Cell("n500-c8-r10+", 500, 10, concurrency=8, after=AFTER, poll_s=0.5),
    Cell("n1000-800/s+", 1000, 1, load_rate=800.0, after=AFTER, poll_s=0.5),
    Cell("n2000-800/s+", 2000, 1, load_rate=800.0, after=AFTER, poll_s=0.5),
    Cell("n2000-c8-grpc+", 2000, 1, concurrency=8, protocol="grpc", after=AFTER, poll_s=0.5),
    Cell("n5000-c8-grpc+", 5000, 1, concurrency=8, protocol="grpc", after=AFTER, poll_s=0.5),
    Cell("n2000-c8-lf500+", 2000, 1, concurrency=8, log_frequency=500, after=AFTER, poll_s=0.5),
    # The stack's limit on Triton before 2.57, many windows of it (--windows 400).
    Cell("n500-c8+", 500, 1, concurrency=8, after=AFTER, poll_s=0.5, log_frequency=100),
    # As the tests trace (run with --exporter): the exporter reads the files as they come.
    Cell("n300-c4-lg", 300, 1, concurrency=4, loadgen_trace=True),
    Cell("n300-c4", 300, 1, concurrency=4),
]


@dataclass
class Tally:
    cell: Cell
    windows: int = 0
    crashes: int = 0
    hangs: int = 0
    incomplete: int = 0  # alive, but the window did not fill (fewer traced than asked)
    signals: dict[str, int] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    # Traced requests the crashed Triton had served since it started (its own windows and
    # the cells' before it): heap damage may build up over a process's life.
    lived: list[int] = field(default_factory=list)

    def add(self, record: dict[str, object]) -> None:
        """Count one window's record (as --out writes it)."""
        outcome = str(record["outcome"])
        self.windows += 1
        self.durations.append(float(record["wall_s"]))  # type: ignore[arg-type]
        self.loads.append(float(record["load1"]))  # type: ignore[arg-type]
        if outcome == "incomplete":
            self.incomplete += 1
        elif outcome != "ok":
            self.crashes += 1
            self.hangs += outcome == "hung"
            self.signals[outcome] = self.signals.get(outcome, 0) + 1
            self.lived.append(int(record["lived"]))  # type: ignore[call-overload]


# ---- the interval -------------------------------------------------------------------------


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The exact two-sided (1 - alpha) interval of a binomial proportion k/n."""
    if n == 0:
        return 0.0, 1.0

    def solve(f: Callable[[float], float], target: float) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            if f(mid) > target:  # f decreases with p: the root lies above mid
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    # P(X >= k | p) = alpha/2, i.e. P(X <= k - 1 | p) = 1 - alpha/2 (decreasing in p).
    lower = 0.0 if k == 0 else solve(lambda p: binom_cdf(k - 1, n, p), 1 - alpha / 2)
    upper = 1.0 if k == n else solve(lambda p: binom_cdf(k, n, p), alpha / 2)
    return lower, upper


def poisson_cdf(k: int, mean: float) -> float:
    term = total = math.exp(-mean)
    for i in range(1, k + 1):
        term *= mean / i
        total += term
    return total


def poisson_upper(k: int, alpha: float = 0.05) -> float:
    """The exact upper (1 - alpha/2) limit of a Poisson mean after ``k`` events."""
    lo, hi = 0.0, 10.0 * (k + 2)
    for _ in range(80):
        mid = (lo + hi) / 2
        if poisson_cdf(k, mid) > alpha / 2:
            lo = mid
        else:
            hi = mid
    return hi


def pooled(tallies: list[Tally], bound: float) -> None:
    """Crashes per traced request, pooled over the cells of one kind of load.

    If each traced request carries the same small risk h (the upstream bug is a race
    that each trace's release can lose), a window of n traced requests crashes with
    probability 1 - (1 - h)^n, and all windows of one load bound h together, far more
    tightly than 20 windows of one cell can.
    """
    kinds: dict[str, list[Tally]] = {}
    for t in tallies:
        c = t.cell
        kind = (f"closed c={c.concurrency}" if c.concurrency else f"open {c.load_rate:g}/s") + (
            "" if c.protocol == "http" else f" {c.protocol}"
        )
        kind += "" if c.rate == 1 else f" 1/{c.rate}"
        kinds.setdefault(kind, []).append(t)
    print(
        f"\n{'load':<20}{'windows':>8}{'traced':>10}{'crashes':>8}{'per 100k':>9}"
        f"{'95% upper':>10}{f'n at {bound:.0%}':>9}"
    )
    kinds["all loads"] = list(tallies)
    for kind, group in sorted(kinds.items(), key=lambda kv: (kv[0] == "all loads", kv[0])):
        windows = sum(t.windows for t in group)
        traced = sum(t.windows * t.cell.count for t in group)
        crashes = sum(t.crashes for t in group)
        upper = poisson_upper(crashes) / traced if traced else float("inf")
        n_safe = math.log(1 - bound) / math.log(1 - upper) if upper < 1 else 0
        print(
            f"{kind:<20}{windows:>8}{traced:>10,}{crashes:>8}{crashes / traced * 1e5:>9.2f}"
            f"{upper * 1e5:>10.2f}{n_safe:>9,.0f}"
        )
    print("per 100k: crashes per 100,000 traced requests; n: the largest window whose crash")
    print(f"probability stays under {bound:.0%} at the 95 % upper limit of that rate")


# ---- one window ---------------------------------------------------------------------------


def triton_proc(supervisor: Supervisor) -> tuple[int, object]:
    proc = supervisor.children["triton"]
    return proc.pid, proc


def clear_traces(settings: Settings) -> None:
    folder = settings.trace_file.parent
    for path in folder.glob(settings.trace_file.name + ".*"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def restart(supervisor: Supervisor) -> None:
    supervisor.stop_service("triton")
    supervisor.start_service("triton")


def one_window(supervisor: Supervisor, settings: Settings, cell: Cell) -> tuple[str, float]:
    """('ok' | 'incomplete' | 'hung' | 'SIGNAME'), and the window's wall time."""
    url = settings.url("triton_http")
    admin = TritonClient(url, headers=settings.admin_headers())
    proc = supervisor.children["triton"]
    clear_traces(settings)
    params = RunParams(
        "concurrency" if cell.concurrency else "rate",
        model=MODEL,
        protocol=cell.protocol,
        url=url,
        grpc_url=settings.grpc_address,
        concurrency=max(cell.concurrency, 1),
        requests=cell.sent if cell.concurrency else None,
        rate=cell.load_rate,
        poisson=True,
        duration_s=600.0 if cell.concurrency else cell.sent / max(cell.load_rate, 1.0),
        timeout_s=5.0,
        trace=cell.loadgen_trace,
        exporter_url=settings.url("exporter") if cell.loadgen_trace else "",
    )
    t0 = time.monotonic()
    if not cell.loadgen_trace:
        # Not tritonapi.traces.start_window: the map must reach past the bound it enforces.
        admin.update_trace_settings(
            {
                "trace_level": ["TIMESTAMPS"],
                "trace_rate": cell.rate,
                "trace_count": cell.count,
                "log_frequency": cell.log_frequency,
            },
            model=MODEL,
        )
    timed_out = 0
    done, stop, hung = threading.Event(), threading.Event(), threading.Event()
    poller = threading.Thread(target=poll, args=(url, settings, cell.poll_s, done))
    if cell.poll_s:
        poller.start()
    # A dead Triton's stubs keep its listening sockets: connections then hang instead of
    # failing, so the run is stopped from here when the process dies or stalls.
    watchdog = threading.Thread(target=watch, args=(proc, done, stop, hung))
    watchdog.start()
    try:
        result = run(params, stop=stop)
        timed_out = result.summary.client.timed_out
    except LoadgenError:
        pass  # a Triton gone mid-run: decided below from the process
    finally:
        done.set()
        for thread in (poller, watchdog):
            if thread.is_alive():
                thread.join()
    wall = time.monotonic() - t0
    left = -1
    deadline = time.monotonic() + 5
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            left = window_left(admin, MODEL)
        except TritonError:
            left = -1
        if left == 0:
            break
        time.sleep(0.2)
    code = proc.poll()
    if code is not None:
        outcome = _signal_name(code)
        restart(supervisor)
    elif timed_out or hung.is_set():
        outcome = "hung"
        restart(supervisor)
    elif left != 0:
        outcome = "incomplete"
        with contextlib.suppress(TritonError):
            stop_window(admin, MODEL)
    else:
        outcome = "ok"
    clear_traces(settings)
    return outcome, wall


def watch(
    proc: subprocess.Popen[bytes],
    done: threading.Event,
    stop: threading.Event,
    hung: threading.Event,
) -> None:
    deadline = time.monotonic() + HANG_S
    while not done.wait(0.2):
        if proc.poll() is not None:
            stop.set()
            return
        if time.monotonic() > deadline:
            hung.set()
            stop.set()
            return


def poll(url: str, settings: Settings, every_s: float, done: threading.Event) -> None:
    client = TritonClient(url, headers=settings.admin_headers(), timeout_s=2.0)
    while not done.wait(every_s):
        with contextlib.suppress(TritonError):
            client.trace_settings(MODEL)


def _signal_name(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return signal.Signals(-code).name
        return f"signal {-code}"
    return f"exit {code}"


# ---- the run ------------------------------------------------------------------------------


def report(tallies: list[Tally], args: argparse.Namespace, started: str, wall_s: float) -> None:
    print(
        f"\ntrace_safety: Triton 2.51 (nvidia-pytriton 0.7.0), {MODEL}, started {started}, "
        f"{wall_s / 60:.0f} min; target {args.windows} windows per cell"
    )
    head = (
        f"{'cell':<17}{'count':>6}{'1/N':>5}{'load':>15}{'after':>6}{'poll':>5}{'proto':>6}"
        f"{'windows':>8}"
        f"{'crashes':>8}{'P(crash)':>9}{'95% CI':>17}{'win s':>7}{'load1':>6}  how"
    )
    print(head)
    for t in tallies:
        c = t.cell
        lo, hi = clopper_pearson(t.crashes, t.windows)
        p = t.crashes / t.windows if t.windows else float("nan")
        how = ", ".join(f"{k} {v}" for k, v in sorted(t.signals.items()))
        if t.lived:
            how += f"; traced since start <= {', '.join(f'{n:,}' for n in t.lived)}"
        if t.incomplete:
            how += f"{', ' if how else ''}window not filled {t.incomplete}"
        load = sum(t.loads) / len(t.loads) if t.loads else float("nan")
        print(
            f"{c.name:<17}{c.count:>6}{c.rate:>5}{c.load():>15}{c.after:>6}{c.poll_s:>5g}"
            f"{c.protocol:>6}{t.windows:>8}"
            f"{t.crashes:>8}{p:>9.1%}{f'[{lo:.1%}, {hi:.1%}]':>17}"
            f"{median(t.durations):>7.1f}{load:>6.1f}  {how}"
        )
    pooled(tallies, 0.01)
    short = [t.cell.name for t in tallies if t.windows < args.windows]
    if short:
        print(f"fewer than {args.windows} windows (the time budget ran out): {', '.join(short)}")


def report_file(args: argparse.Namespace) -> int:
    records = [json.loads(line) for line in args.report.read_text().splitlines() if line]
    tallies = {c.name: Tally(c) for c in CELLS}
    for record in records:
        tallies[record["cell"]].add(record)
    shown = [t for t in tallies.values() if t.windows]
    span = f"{records[0]['at']} to {records[-1]['at']} UTC" if records else "nothing"
    report(shown, args, f"{args.report.name}: {span}", 0.0)
    return 0


# Method notes (the module doc's summary). The trace file is in Triton's state folder. The
# load generator (its Python API) sends exactly count x rate requests plus one rate's worth,
# so that the window surely fills. A crashed window keeps the process's exit signal. After a
# crash Triton is started again by the supervisor's own stop/start, with no backoff. When
# ``--budget-s`` runs out the last round is the last, and the table says how many windows each
# cell got; the load average is the mean of the 1-minute one at the windows' starts.
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=20, help="windows per cell (default 20)")
    parser.add_argument(
        "--cells",
        default="all",
        help="comma-separated cell names (default all: " + ", ".join(c.name for c in CELLS) + ")",
    )
    parser.add_argument(
        "--budget-s", type=float, default=5400.0, help="no new round after this (default 5400)"
    )
    parser.add_argument(
        "--exporter",
        action="store_true",
        help="run the stack's exporter beside Triton, reading the trace files as they come "
        "(the *-lg cells need it)",
    )
    parser.add_argument(
        "--out", type=Path, help="append each window's outcome to this file (JSON lines)"
    )
    parser.add_argument(
        "--report",
        type=Path,
        help="print the table of the windows recorded in this file (--out), run nothing",
    )
    args = parser.parse_args()
    if args.report:
        return report_file(args)
    out = args.out
    # SIGTERM ends the run like Ctrl-C: the private Triton is stopped on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    cells = CELLS if args.cells == "all" else [c for c in CELLS if c.name in args.cells.split(",")]
    if not cells:
        parser.error(f"--cells {args.cells}: none of {', '.join(c.name for c in CELLS)}")
    os.environ.setdefault("STACK_TRITON_VENV", str(ROOT / ".venv-triton"))
    tallies = [Tally(c) for c in cells]
    started, t_start = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.monotonic()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-trace-safety-{os.getpid()}"
    try:
        settings = isolated(tmp / "state")
        services = {"triton", "exporter"} if args.exporter else {"triton"}
        with running(settings, only=services) as supervisor:
            # loadgen --trace opens the trace settings with this stack's key, as a user's
            # loadgen finds the ./stack/up stack's.
            os.environ["STACK_STATE_DIR"] = str(settings.state_dir)
            for name, (_, var) in PORTS.items():
                os.environ[var] = str(settings.port(name))
            # Warm-up: the first requests pay for the stub's start.
            run(
                RunParams(
                    "concurrency",
                    model=MODEL,
                    url=settings.url("triton_http"),
                    concurrency=8,
                    requests=2000,
                    duration_s=60,
                )
            )
            since_start = 0
            for r in range(args.windows):
                round_start = time.monotonic()
                for t in tallies:
                    load1 = os.getloadavg()[0]
                    outcome, wall = one_window(supervisor, settings, t.cell)
                    since_start += t.cell.count
                    record = {
                        "cell": t.cell.name,
                        "outcome": outcome,
                        "wall_s": round(wall, 3),
                        "load1": load1,
                        "lived": since_start,
                        "at": time.strftime("%H:%M:%S", time.gmtime()),
                    }
                    t.add(record)
                    if outcome not in ("ok", "incomplete"):
                        since_start = 0
                    if out is not None:
                        with out.open("a") as f:
                            f.write(json.dumps(record) + "\n")
                    print(
                        f"round {r + 1} {t.cell.name:<17} {outcome:<10} {wall:5.1f} s "
                        f"load {load1:.1f}",
                        flush=True,
                    )
                used = time.monotonic() - t_start
                per_round = time.monotonic() - round_start
                if used + per_round > args.budget_s and r + 1 < args.windows:
                    print(f"budget: stopping after round {r + 1} ({used:.0f} s used)", flush=True)
                    break
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(tallies, args, started, time.monotonic() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
