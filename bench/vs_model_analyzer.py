"""NVIDIA's Model Analyzer against ``batchscope advise`` on one model, load and p99 bound, then
both picks and the served config measured side by side (issue 54, item 6).

    STACK_TRITON_VENV=/work/main/.venv-triton .venv/bin/python -m bench.vs_model_analyzer \\
        [MODEL_DIR] [--concurrency 8] [--p99-ms 50] [--rounds 3] [--round-s 8]

Model Analyzer (triton-model-analyzer 1.58) is installed on first use into ``.venv-ma``
(gitignored, never a project dependency) and perf_analyzer by bench/perf_analyzer_env.sh. It
launches the stack's tritonserver itself (local mode, its own ports, gRPC, CPU only) and runs
its quick search held to the closed loop of ``--concurrency``; ``advise --probe --concurrency``
gets the same model and bound on a Triton of the bench's. Each pick and the wall time to reach
it are printed; then the served config and both picks, loaded together as scratch copies, are
measured by the load generator in alternating rounds: throughput (Triton's statistics), client
p99, average batch. Goal: the same or a better pick in at most 1/10 of Model Analyzer's time.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from advisor.config import BatcherConfig, from_model_config
from bench.common import scratch_copies, stack
from bench.pacing import perf_analyzer_path
from loadgen.engine.runner import RunParams, run
from stack.triton import assemble_backends, environment, find_runtime, python_libdir
from stacksettings import ROOT, Settings
from stacksettings.ports import free_port_run
from tritonapi.client import TritonClient
from tritonapi.modelconfig import from_proto, parse_pbtxt

MA_VERSION = "1.58.0"
MA_VENV = ROOT / ".venv-ma"
DEFAULT_MODEL = ROOT / "model_repository" / "mlp_model"
WARM_UP_S = 1.0
RESULTS_CSV = Path("results") / "metrics-model-inference.csv"


def model_analyzer(venv: Path = MA_VENV) -> Path:
    """The model-analyzer command, installed into its own ``venv`` on first use."""
    binary = venv / "bin" / "model-analyzer"
    if not binary.exists():
        print(
            f"[bench] installing triton-model-analyzer=={MA_VERSION} into {venv} (first use; "
            "gitignored, never a project dependency)",
            flush=True,
        )
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, f"triton-model-analyzer=={MA_VERSION}"], check=True)
    return binary


@dataclass(frozen=True)
class TritonPaths:
    """What Model Analyzer needs to launch the stack's tritonserver."""

    server: Path
    backends: Path
    lib_path: str  # the wheel's libraries and the stub's libpython


def triton_paths(venv: Path, folder: Path) -> TritonPaths:
    runtime = find_runtime(venv)
    backends = assemble_backends(runtime, folder / "backends")
    env = environment(runtime, python_libdir(runtime.venv))
    return TritonPaths(runtime.binary, backends, env["LD_LIBRARY_PATH"])


def ma_config(
    model: str,
    repository: Path,
    work: Path,
    triton: TritonPaths,
    ports: list[int],
    perf_analyzer: str,
    concurrency: int,
    p99_ms: float,
    shapes: list[str],
) -> dict[str, object]:
    """Model Analyzer's profile config (JSON is YAML): a quick search of ``model`` held to
    ``concurrency`` clients under a p99 budget, on a tritonserver it launches on ``ports``."""
    http, grpc, metrics = ports
    flags: dict[str, object] = {
        # perf_analyzer's stability test fails at random on a shared machine (three windows
        # within 10 %); wider, Model Analyzer measures each config instead of giving up on it.
        "stability-percentage": 50,
    }
    if shapes:
        flags["shape"] = " ".join(shapes)
    return {
        "model_repository": str(repository),
        "profile_models": {model: {"cpu_only": True}},
        "triton_launch_mode": "local",
        "triton_server_path": str(triton.server),
        "triton_server_flags": {"backend-directory": str(triton.backends)},
        "triton_server_environment": {"LD_LIBRARY_PATH": triton.lib_path},
        # Ports away from the stack's: Model Analyzer refuses a port already in use.
        "triton_http_endpoint": f"localhost:{http}",
        "triton_grpc_endpoint": f"localhost:{grpc}",
        "triton_metrics_url": f"http://localhost:{metrics}/metrics",
        "client_protocol": "grpc",
        "perf_analyzer_path": perf_analyzer,
        "perf_analyzer_flags": flags,
        "run_config_search_mode": "quick",
        # Quick search sets each config's concurrency to 2 x batch x instances, clamped to
        # these: equal, every config is measured under the same closed loop as advise's.
        "run_config_search_min_concurrency": concurrency,
        "run_config_search_max_concurrency": concurrency,
        "concurrency_sweep_disable": True,
        "latency_budget": p99_ms,
        "output_model_repository_path": str(work / "output_models"),
        "override_output_model_repository": True,
        "export_path": str(work / "export"),
        "checkpoint_directory": str(work / "checkpoints"),
        "skip_detailed_reports": True,
    }


@dataclass(frozen=True)
class MARow:
    """One line of Model Analyzer's results table (metrics-model-inference.csv)."""

    variant: str  # the folder of its config in the output repository
    concurrency: int
    satisfies: bool
    throughput_per_s: float
    p99_ms: float


def ma_rows(export: Path) -> list[MARow]:
    """Model Analyzer's results table, in its own order (its best first)."""
    with (export / RESULTS_CSV).open(newline="") as f:
        return [
            MARow(
                variant=row["Model Config Path"],
                concurrency=int(row["Concurrency"]),
                satisfies=row["Satisfies Constraints"].strip() == "Yes",
                throughput_per_s=float(row["Throughput (infer/sec)"]),
                p99_ms=float(row["p99 Latency (ms)"]),
            )
            for row in csv.DictReader(f)
        ]


def config_of(pbtxt: str) -> BatcherConfig:
    """The batching config that a config.pbtxt (or a fragment of one) sets."""
    return from_model_config(from_proto(parse_pbtxt(pbtxt)))


def ma_pick(work: Path) -> tuple[MARow, BatcherConfig]:
    """The top of Model Analyzer's table and the config it generated for it."""
    rows = ma_rows(work / "export")
    if not rows:
        raise RuntimeError(f"Model Analyzer measured no config: see {work / 'export'}")
    top = rows[0]
    text = (work / "output_models" / top.variant / "config.pbtxt").read_text()
    return top, config_of(text)


def keep_results(work: Path, rows: list[MARow], target: Path) -> None:
    """Model Analyzer's config, results table and the configs it measured, copied to
    ``target`` in the layout :func:`ma_pick` reads (tests/fixtures/model_analyzer)."""
    (target / "export" / RESULTS_CSV).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(work / "export" / RESULTS_CSV, target / "export" / RESULTS_CSV)
    shutil.copy2(work / "ma.yaml", target)
    for row in rows:
        folder = target / "output_models" / row.variant
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work / "output_models" / row.variant / "config.pbtxt", folder)


def run_model_analyzer(binary: Path, config: dict[str, object], work: Path) -> float:
    """Runs ``model-analyzer profile``; its wall time. Its log goes to work/ma.log."""
    (work / "export").mkdir(parents=True, exist_ok=True)
    path = work / "ma.yaml"
    path.write_text(json.dumps(config, indent=1))
    started = time.monotonic()
    with (work / "ma.log").open("w") as log:
        done = subprocess.run(
            [str(binary), "profile", "-f", str(path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=work,
            check=False,
        )
    wall = time.monotonic() - started
    if done.returncode != 0:
        tail = (work / "ma.log").read_text()[-1500:]
        raise RuntimeError(f"model-analyzer exited {done.returncode}:\n{tail}")
    return wall


def advise_pick(
    s: Settings, model: str, concurrency: int, p99_ms: float, shapes: list[str], work: Path
) -> tuple[BatcherConfig | None, dict, float]:
    """``batchscope advise --probe --concurrency`` on the served model: its pick (None: keep
    the served config), its JSON and its wall time (the command, start to exit)."""
    argv = [
        sys.executable,
        "-m",
        "batchscope",
        "advise",
        "--url",
        s.url("triton_http"),
        "--metrics-url",
        f"{s.url('triton_metrics')}/metrics",
        "--model",
        model,
        "--p99-ms",
        f"{p99_ms:g}",
        "--concurrency",
        str(concurrency),
        "--probe",
        "--json",
        "--calibrations",
        str(work / "calibrations.json"),
    ]
    for shape in shapes:
        argv += ["--shape", shape]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"advise exited {done.returncode}: {done.stderr.strip()[-1500:]}")
    out = json.loads(done.stdout)
    pbtxt = out.get("recommended_pbtxt")
    return (config_of(pbtxt) if pbtxt else None), out, wall


@dataclass
class Contender:
    role: str  # served / Model Analyzer / advise (roles joined when two are one config)
    config: BatcherConfig
    served_as: str = ""
    throughput: list[float] = field(default_factory=list)  # Triton's inferences per second
    p99_ms: list[float] = field(default_factory=list)  # the load generator's client p99
    batch: list[float] = field(default_factory=list)  # Triton's inferences / executions


def key(c: BatcherConfig) -> tuple[int, tuple[int, ...], int, int]:
    return (c.max_batch_size, c.effective_preferred, c.max_queue_delay_us, c.instances)


def contenders(picks: list[tuple[str, BatcherConfig]]) -> list[Contender]:
    """One contender per distinct config; a config two tools picked carries both roles."""
    found: dict[tuple[int, tuple[int, ...], int, int], Contender] = {}
    for role, config in picks:
        if key(config) in found:
            found[key(config)].role += " = " + role
        else:
            found[key(config)] = Contender(role, config)
    return list(found.values())


def shapes_param(shapes: list[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple(
        (name, tuple(int(d) for d in dims.split(",")))
        for name, dims in (s.split("=", 1) for s in shapes)
    )


def measure_round(s: Settings, c: Contender, concurrency: int, seconds: float, seed: int, shapes):
    url = s.url("triton_http")
    params = RunParams(
        "concurrency",
        model=c.served_as,
        url=url,
        concurrency=concurrency,
        duration_s=seconds,
        seed=seed,
        shapes=shapes,
        label="vs model analyzer",
    )
    run(RunParams(**{**params.__dict__, "duration_s": WARM_UP_S, "seed": seed + 1000}))
    result = run(params)
    client, server = result.summary.client, result.summary.server
    if client.failed or client.timed_out or client.latency_s.p99 is None or server is None:
        raise RuntimeError(f"{c.served_as}: {client.failed + client.timed_out} failed")
    c.throughput.append(server.inferences / client.duration_s)
    c.p99_ms.append(client.latency_s.p99 * 1e3)
    c.batch.append(server.average_batch_size or 0.0)


def side_by_side(
    s: Settings,
    model: str,
    entries: list[Contender],
    concurrency: int,
    rounds: int,
    seconds: float,
    shapes: list[str],
) -> None:
    """Each contender loaded (the served one is the model itself, the others scratch copies
    through the repository API), then measured in rounds of one run each, in turn."""
    admin = TritonClient(s.url("triton_http"), headers=s.admin_headers())
    served = [None if e.role.startswith("served") else e.config for e in entries]
    with scratch_copies(s, admin, model, served, "vs") as names:
        for entry, name in zip(entries, names, strict=True):
            entry.served_as = name
        for k in range(rounds):
            for entry in entries:
                measure_round(s, entry, concurrency, seconds, 11 + k, shapes_param(shapes))
                print(
                    f"  round {k + 1}: {entry.role:<28} {entry.throughput[-1]:8.0f}/s "
                    f"p99 {entry.p99_ms[-1]:7.2f} ms  batch {entry.batch[-1]:.2f}",
                    flush=True,
                )


def spread(values: list[float], digits: int) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


def table(entries: list[Contender]) -> list[str]:
    lines = [
        "| config | picked by | throughput/s, median (range) | client p99 ms, median (range) "
        "| average batch |",
        "|---|---|---|---|---|",
    ]
    for e in entries:
        lines.append(
            f"| {e.config.describe()} | {e.role} | {spread(e.throughput, 0)} | "
            f"{spread(e.p99_ms, 2)} | {statistics.median(e.batch):.2f} |"
        )
    return lines


def verdict(advise: Contender, ma: Contender) -> str:
    """Advise's pick against Model Analyzer's: the same config, else for throughput and p99
    the ratio of medians, whether the rounds' ranges lie apart (else within noise), and in
    how many rounds advise's run did better than Model Analyzer's run beside it."""
    if advise is ma:
        return "the same config"

    def compare(a: list[float], b: list[float], higher_better: bool) -> str:
        better, worse = ("higher", "lower") if higher_better else ("lower", "higher")
        sign = 1 if higher_better else -1  # compared as "higher is better" from here
        a_, b_ = [sign * x for x in a], [sign * x for x in b]
        apart = better if min(a_) > max(b_) else worse if max(a_) < min(b_) else "within noise"
        wins = sum(x > y for x, y in zip(a_, b_, strict=True))
        ratio = statistics.median(a) / statistics.median(b)
        return f"x{ratio:.2f} ({apart}; {better} in {wins} of {len(a)} rounds)"

    return (
        f"throughput {compare(advise.throughput, ma.throughput, True)}, "
        f"client p99 {compare(advise.p99_ms, ma.p99_ms, False)}"
    )


def model_repository(model_dir: Path, folder: Path) -> tuple[str, Path]:
    """A repository of the one model (its config.pbtxt names it)."""
    name = from_proto(parse_pbtxt((model_dir / "config.pbtxt").read_text())).name or model_dir.name
    repo = folder / "models"
    shutil.copytree(model_dir, repo / model_dir.name, ignore=shutil.ignore_patterns("__pycache__"))
    if model_dir.name != name:
        (repo / model_dir.name).rename(repo / name)
    return name, repo


def ms(us: float | None) -> str:
    return "unknown" if us is None else f"{us / 1e3:.2f} ms"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", nargs="?", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--concurrency", type=int, default=8, help="closed-loop clients (8)")
    parser.add_argument("--p99-ms", type=float, default=50.0, help="the p99 bound (50 ms)")
    parser.add_argument("--rounds", type=int, default=3, help="side-by-side rounds (3)")
    parser.add_argument("--round-s", type=float, default=8.0, help="seconds per run (8)")
    parser.add_argument(
        "--shape", action="append", default=[], help="NAME=D1,D2 for a variable-dims input"
    )
    parser.add_argument("--keep", type=Path, help="copy Model Analyzer's results and configs here")
    args = parser.parse_args()
    if not (args.model_dir / "config.pbtxt").is_file():
        parser.error(f"{args.model_dir}: no config.pbtxt (give a Python-backend model folder)")
    if args.concurrency < 1 or args.rounds < 1 or args.round_s <= 0 or args.p99_ms <= 0:
        parser.error("--concurrency, --rounds, --round-s and --p99-ms must be positive")
    os.environ.setdefault("STACK_TRITON_VENV", str(ROOT / ".venv-triton"))
    binary = model_analyzer()
    perf = perf_analyzer_path()
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; load average {load_average()} at the start")
    with tempfile.TemporaryDirectory(prefix="bench-vs-ma-") as tmp:
        work = Path(tmp)
        model, repo = model_repository(args.model_dir, work)
        triton = triton_paths(Path(os.environ["STACK_TRITON_VENV"]), work)
        config = ma_config(
            model,
            repo,
            work,
            triton,
            free_port_run(3),
            perf,
            args.concurrency,
            args.p99_ms,
            args.shape,
        )
        print(
            f"Model Analyzer {MA_VERSION}: quick search of {model} at concurrency "
            f"{args.concurrency}, p99 budget {args.p99_ms:g} ms ...",
            flush=True,
        )
        ma_s = run_model_analyzer(binary, config, work)
        top, ma_config_pick = ma_pick(work)
        rows = ma_rows(work / "export")
        if args.keep:
            keep_results(work, rows, args.keep)
        print(
            f"  {len(rows)} configs measured in {ma_s:.0f} s; its pick: {top.variant} "
            f"({ma_config_pick.describe()}), {top.throughput_per_s:.0f}/s, p99 "
            f"{top.p99_ms:.1f} ms, {'within' if top.satisfies else 'OVER'} the budget",
            flush=True,
        )
        with stack(services=("triton",), model_repository=repo) as s:
            admin = TritonClient(s.url("triton_http"), headers=s.admin_headers())
            served = from_model_config(admin.model_config(model))
            print("batchscope advise --probe --concurrency ...", flush=True)
            advised, out, advise_s = advise_pick(
                s, model, args.concurrency, args.p99_ms, args.shape, work
            )
            pick = advised or served
            if args.keep:
                (args.keep / "advise.json").write_text(json.dumps(out, indent=1))
            predicted = out["recommended"] or out["current"]
            print(
                f"  advise predicted {predicted['throughput_per_s']:.0f}/s, client p99 "
                f"{ms(predicted['client_latency_p99_us'])} for its pick",
                flush=True,
            )
            print(
                f"  in {advise_s:.0f} s: {'keep it' if advised is None else pick.describe()}"
                f" ({out.get('gain') or 'no gain'})",
                flush=True,
            )
            entries = contenders(
                [("served", served), ("Model Analyzer", ma_config_pick), ("advise", pick)]
            )
            print(
                f"side by side: {args.rounds} rounds of {args.round_s:g} s each at "
                f"concurrency {args.concurrency}",
                flush=True,
            )
            side_by_side(s, model, entries, args.concurrency, args.rounds, args.round_s, args.shape)
    by_role = {role: e for e in entries for role in e.role.split(" = ")}
    print()
    print(f"model {model} at concurrency {args.concurrency}, p99 bound {args.p99_ms:g} ms")
    print(
        f"Model Analyzer: {ma_s:.0f} s, {len(rows)} configs measured; advise: {advise_s:.0f} s "
        f"(x{advise_s / ma_s:.3f} of Model Analyzer's time; goal <= 0.10)"
    )
    print("\n".join(table(entries)))
    print(
        f"advise's pick against Model Analyzer's: "
        f"{verdict(by_role['advise'], by_role['Model Analyzer'])}"
    )
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; load average {load_average()} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
