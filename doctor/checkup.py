"""``batchscope doctor``: the checks against a live server or a stored run, and the report.

``batchscope.commands.doctor`` declares the flags and gives the local stack's addresses as
``Defaults``; a mistake is a ``UsageError`` (or the ``TritonError`` of a server that does
not answer), which the command turns into its error line.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from advisor.advice import SearchOptions, search_workers
from advisor.inputs import Options, metrics_url_of
from advisor.storedrun import check_poolable
from doctor import report
from doctor.checks import ShapeMix, check
from doctor.diagnosis import Diagnosis, diagnose
from doctor.prescribe import searched
from loadgen.errors import LoadgenError
from loadgen.results.params import default_db
from loadgen.results.stored import load_run
from loadgen.results.summary import RunSummary
from observe.prometheus import prometheus_window
from observe.sampler import watch
from observe.storedrun import window as stored_window
from observe.window import Window, summed
from promapi import PromClient, PrometheusError
from runs.errors import StoreError
from runs.store import RunStore
from stacksettings import admin_headers
from tritonapi import TritonClient, TritonError, TritonHTTPError
from tritonapi.modelconfig import parse_json

SAMPLE_S = 10.0  # the statistics API window without Prometheus
P99_MS = 10.0  # the search's default bound, the dashboard's too
MAX_P99_MS = 3_600_000.0  # an hour: past it a bound says nothing about a batcher
PROMETHEUS_S = 300.0
MAX_SAMPLE_S = 600.0
MAX_PROMETHEUS_S = 7 * 86400.0

EPILOG = f"""\
Checks, in the order of the troubleshooting guide: the config (dynamic batching on,
max_batch_size >= every preferred size, instances); whether requests overlap (arrival
rate x time inside Triton, pending requests; batch traces are not read yet); which
batch sizes form and how often a preferred one; where latency goes (queue against
compute, rejections, the GPU when Triton reports one). Every finding gives the numbers
it rests on and the fix as config.pbtxt lines.

Traffic comes from Prometheus (the exporter's counters over the last --window seconds,
{PROMETHEUS_S:g} by default; the arrival rate is that of the seconds with traffic) when
--prometheus is given, or when --url is the local stack's Triton and the stack's
Prometheus answers; otherwise the doctor watches Triton's statistics API for --window seconds
({SAMPLE_S:g} by default): send load meanwhile.

Exit status: 0 no finding, 1 findings, 2 misuse (bad URL, unknown model, a server
that does not answer)."""


@dataclass(frozen=True)
class Defaults:
    triton_url: str
    metrics_url: str
    prometheus_url: str  # used only if it answers and --url is the stack's Triton
    exporter_url: str = ""  # its /api/traces: batch traces, when the stack's Triton is traced
    # Headers that open the stack's Triton's restricted APIs (its repository index).
    admin_headers: dict[str, str] = field(default_factory=dict)


class UsageError(ValueError):
    """Bad input: one line, exit 2."""


def _check_url(url: str, flag: str) -> str:
    if len(url) > MAX_URL:
        raise UsageError(f"{flag} {url[:40]!r}... is {len(url):,} characters long; give the URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{flag} {url!r} is not an http:// URL (e.g. http://127.0.0.1:8000)")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise UsageError(f"{flag} {url!r} has a bad port") from None
    return url.rstrip("/")


def _metrics_url(url: str, args: argparse.Namespace, defaults: Defaults) -> str | None:
    """--metrics-url, else the stack's for the stack's Triton, else as ``advise`` guesses
    it (port 8002 beside port 8000; None otherwise: pending requests unknown)."""
    if args.metrics_url:
        return _check_url(args.metrics_url, "--metrics-url")
    if url == defaults.triton_url.rstrip("/"):
        return defaults.metrics_url
    return metrics_url_of(url) or None


def _headers(args: argparse.Namespace, url: str, defaults: Defaults) -> dict[str, str]:
    """The restricted APIs' key: --admin-key-file's, else the stack's for the stack's Triton
    (another server gets no header it did not ask for)."""
    if args.admin_key_file:
        headers = admin_headers(args.admin_key_file)
        if not headers:
            raise UsageError(f"--admin-key-file: cannot read a key from {args.admin_key_file!r}")
        return headers
    return defaults.admin_headers if url == defaults.triton_url.rstrip("/") else {}


def _models(client: TritonClient, wanted: str | None) -> list[str]:
    try:
        ready = client.ready_models()
    except TritonHTTPError as exc:
        if exc.status != 403:
            raise UsageError(f"{exc}: is Triton running, is --url right?") from None
        return _model_without_index(client, wanted)
    except TritonError as exc:
        raise UsageError(f"{exc}: is Triton running, is --url right?") from None
    if wanted is None:
        if not ready:
            raise UsageError(f"Triton at {client.url} has no ready model")
        return ready
    if wanted not in ready:
        known = ", ".join(ready) or "none"
        raise UsageError(
            f"--model {wanted!r}: no such ready model at {client.url} (ready: {known})"
        )
    return [wanted]


def _model_without_index(client: TritonClient, wanted: str | None) -> list[str]:
    """The repository index is restricted here: check the one model asked for instead."""
    if wanted is None:
        raise UsageError(
            f"Triton at {client.url} keeps its repository index behind a key: give --model, "
            "or --admin-key-file (the stack's is .stack/triton-admin.key)"
        )
    try:
        client.model_config(wanted)
    except TritonError as exc:
        raise UsageError(
            f"--model {wanted!r}: no such ready model at {client.url} ({exc})"
        ) from None
    return [wanted]


def _prometheus(
    args: argparse.Namespace, url: str, defaults: Defaults
) -> tuple[PromClient | None, list[str]]:
    if args.prometheus:
        return PromClient(_check_url(args.prometheus, "--prometheus"), timeout_s=5.0), []
    if url != defaults.triton_url.rstrip("/"):
        return None, []
    prom = PromClient(defaults.prometheus_url, timeout_s=2.0)
    try:
        prom.query("vector(1)")
    except PrometheusError:
        return None, [f"the stack's Prometheus at {defaults.prometheus_url} is not running"]
    return prom, []


@dataclass(frozen=True)
class Source:
    """Where a model's window came from, for the advisor's search over the same window."""

    options: Options
    server: Window | None = None  # a sampled window, the advisor's inputs too


def windows(
    args: argparse.Namespace, client: TritonClient, models: list[str], defaults: Defaults
) -> tuple[dict[str, Window], list[str], dict[str, Source]]:
    """Each model's window, from Prometheus when there is one with its series, else sampled;
    and each one's source for the advisor."""
    prom, notes = _prometheus(args, client.url, defaults)
    if prom is not None:
        seconds = args.window or PROMETHEUS_S
        if not 0 < seconds <= MAX_PROMETHEUS_S:
            raise UsageError(f"--window {seconds:g}: between 1 and {MAX_PROMETHEUS_S:g} seconds")
        try:
            # The exporter labels series with the Triton URL it reads (target), which may
            # be another name for --url (a service name in compose): then the model's
            # series of every target are summed, and the output says so.
            found = {m: prometheus_window(prom, m, seconds, client.url) for m in models}
            if args.prometheus and not any(found.values()):
                found = {m: prometheus_window(prom, m, seconds) for m in models}
                notes.append(f"no series with target={client.url}: every target's are summed")
        except PrometheusError as exc:
            raise UsageError(str(exc)) from None
        got = {m: w for m, w in found.items() if w is not None}
        if len(got) == len(models):
            return (
                got,
                notes,
                {
                    m: Source(Options(client.url, m, seconds, prometheus=prom.base_url))
                    for m in models
                },
            )
        notes.append(f"Prometheus at {prom.base_url} has no exporter series for every model")
    seconds = args.window or SAMPLE_S
    if not 0 < seconds <= MAX_SAMPLE_S:
        raise UsageError(f"--window {seconds:g}: between 1 and {MAX_SAMPLE_S:g} seconds")
    if not args.json:
        print(f"watching Triton's statistics API for {seconds:g} s ...", file=sys.stderr)
    watched = watch(client, models, seconds, _metrics_url(client.url, args, defaults))
    sampled = watched.windows
    sources = {m: Source(Options(client.url, m, seconds), sampled.get(m)) for m in models}
    return sampled, notes + watched.notes, sources


def search_options(args: argparse.Namespace) -> SearchOptions:
    """The search's options: misuse is one line."""
    if not 0 < args.p99_ms <= MAX_P99_MS:  # NaN too
        raise UsageError(
            f"--p99-ms {args.p99_ms:g}: give a positive bound in ms, at most {MAX_P99_MS:,.0f}"
        )
    if args.seeds < 1 or args.requests < 100:
        raise UsageError("--seeds must be 1 or more and --requests 100 or more")
    return SearchOptions(
        p99_bound_s=args.p99_ms / 1e3,
        seeds=args.seeds,
        requests=args.requests,
        workers=search_workers(),
    )


def prescribed(
    d: Diagnosis, source: Source | None, search: SearchOptions, quiet: bool
) -> Diagnosis:
    if source is None:
        return d
    if not quiet:
        print(f"searching batching configs for {d.model} ...", file=sys.stderr)
    return searched(d, source.options, search, source.server)


RUNS_READ = 20  # the newest runs of the default store looked at for a model's shape mix


def run_mix(run_id: int, summary: RunSummary) -> ShapeMix | None:
    """The shapes a stored run sent, when it sent several (runs made before loadgen recorded
    shapes have none)."""
    shapes = summary.client.shapes
    if not shapes or len(shapes) < 2:
        return None
    average = summary.server.average_batch_size if summary.server else None
    return ShapeMix(run_id, shapes, average)


def shape_mix(model: str) -> tuple[ShapeMix | None, list[str]]:
    """For a live diagnosis: the shapes the newest run of ``model`` with several shapes in
    the default load-run store sent (LOADGEN_DB or .stack/loadgen.sqlite3). None when there
    is no store or no such run; a store that cannot be read is a note, not an error (the
    user did not name it)."""
    path = Path(default_db())
    if not path.is_file():
        return None, []
    try:
        with RunStore(path) as store:
            for row in store.list_runs(RUNS_READ):
                if row["model"] != model:
                    continue
                mix = run_mix(int(row["id"]), load_run(store, int(row["id"])).summary)
                if mix is not None:
                    return mix, []
    except (LoadgenError, StoreError, sqlite3.Error) as exc:
        return None, [f"shape mix not read from the load-run store {path}: {exc}"]
    return None, []


def stored(args: argparse.Namespace) -> Diagnosis:
    """The checks and the search on stored load runs (``--store --run A[,B...]``): one run's
    statistics, or several runs' summed (runs that cannot be pooled are refused, as the
    advisor refuses them)."""
    if args.run is None:
        raise UsageError("--store needs --run ID (batchscope load runs lists them)")
    ids: tuple[int, ...] = args.run
    try:
        with RunStore(args.store) as store:
            runs = [(run_id, load_run(store, run_id)) for run_id in ids]
        check_poolable(runs)
    except (LoadgenError, StoreError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    windows = []
    for run_id, run in runs:
        if run.model_config is None or run.summary.server is None:
            raise UsageError(
                f"run {run_id} was stored without its model config or the server's "
                "statistics: diagnose the live server instead (--url)"
            )
        windows.append(stored_window(run, run.summary.server))
    seconds = sum(w.seconds for w in windows)
    named = f"run {ids[0]}" if len(ids) == 1 else f"runs {', '.join(map(str, ids))}"
    window = summed(windows, f"stored {named} of {args.store} ({seconds:.1f} s)")
    run_id, run = runs[0]
    assert run.model_config is not None  # checked above
    config = parse_json(run.model_config)
    d = Diagnosis(
        run.params.model,
        config,
        window,
        "stored run (its traces are the advisor's business)",
        check(config, window, run_mix(run_id, run.summary)),
    )
    opts = Options(store=args.store, runs=ids)
    if not args.json:
        print(f"searching batching configs for {d.model} ...", file=sys.stderr)
    return searched(d, opts, search_options(args))


MAX_URL = 2048


def _check_inputs(args: argparse.Namespace) -> None:
    """Every flag checked before the first request, so a mistake is named as itself (not
    hidden behind a Triton that does not answer)."""
    for flag in ("metrics_url", "prometheus", "exporter_url"):
        value = getattr(args, flag)
        if value:
            _check_url(value, f"--{flag.replace('_', '-')}")
    if args.window is not None and not 0 < args.window <= MAX_PROMETHEUS_S:
        raise UsageError(
            f"--window {args.window:g}: between 1 and {MAX_PROMETHEUS_S:g} seconds "
            f"({MAX_SAMPLE_S:g} without Prometheus)"
        )
    if args.admin_key_file:
        try:
            Path(args.admin_key_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(
                f"--admin-key-file {args.admin_key_file}: cannot read a key from it ({exc}); "
                "give the file with the key of Triton's restricted APIs"
            ) from None


def run(args: argparse.Namespace, defaults: Defaults) -> int:
    """Diagnose and print; raises UsageError or TritonError on misuse (exit 2)."""
    if args.store is not None:
        return show(args, [stored(args)])
    _check_inputs(args)
    search = search_options(args)  # misuse is named before Triton is asked
    url = _check_url(args.url, "--url")
    client = TritonClient(url, timeout_s=5.0, headers=_headers(args, url, defaults))
    models = _models(client, args.model)
    found, notes, sources = windows(args, client, models, defaults)
    exporter = args.exporter_url or (defaults.exporter_url if url == defaults.triton_url else "")
    diagnoses: list[Diagnosis] = []
    for m in models:
        mix, more = shape_mix(m)
        d = diagnose(client, m, found.get(m), [*notes, *more], exporter, mix)
        diagnoses.append(prescribed(d, sources.get(m), search, args.json))
    return show(args, diagnoses)


def show(args: argparse.Namespace, diagnoses: list[Diagnosis]) -> int:
    if args.json:
        print(json.dumps(report.to_json(diagnoses), indent=2))
    else:
        print(report.text(diagnoses))
    return 1 if any(d.findings for d in diagnoses) else 0
