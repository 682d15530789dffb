"""Load runs from the dashboard: bounded parameters, one background run at a time, results.

Plain Python over the load generator's API (``loadgen.engine.runner``) and store
(``runs.store.RunStore``). The dashboard's bounds are far below the load generator's
own: a click in a browser must never be able to overload the host that serves
the page, Triton and Prometheus.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from advisor.config import from_model_config
from loadgen.clients.target import fetch_model
from loadgen.engine.runner import LoadRun, RunParams, run
from loadgen.errors import LoadgenError
from loadgen.inputopts import InputOptions
from loadgen.reports.compare import compare as compare_runs
from loadgen.results.stored import load_run
from runs.errors import StoreError
from runs.store import RunStore

SCENARIOS = {
    "concurrency": "closed loop: N clients, each sends its next request when answered",
    "rate": "open loop: requests at a fixed rate, answered or not",
    "concurrent": "N requests sent at once (the spec's experiment)",
    "serial": "N requests one after another",
}
MAX_CONCURRENCY = 16
MAX_RATE = 500.0
MAX_DURATION_S = 30.0
MAX_REQUESTS = 64


class RunRefused(ValueError):
    """The form asks for more than the dashboard allows, or a run is already going."""


@dataclass(frozen=True)
class RunForm:
    scenario: str
    model: str
    concurrency: int = 4
    rate: float = 100.0
    duration_s: float = 5.0
    requests: int = 3
    label: str = ""
    # What the requests hold, as loadgen's options (loadgen.inputopts) take them: inputs
    # separated by spaces or semicolons ("ids=4:64 mask=4:64"), a data file's path.
    shapes: str = ""
    ranges: str = ""
    string_length: str = "16"
    input_data: str = "random"


def _items(text: str) -> list[str]:
    return [item for item in text.replace(";", " ").split() if item]


def input_options(form: RunForm) -> InputOptions:
    """The form's input fields as loadgen's options; RunRefused with loadgen's message."""
    try:
        return InputOptions.from_texts(
            shape=_items(form.shapes),
            value_range=_items(form.ranges),
            string_length=form.string_length.strip() or "16",
            input_data=form.input_data,
        )
    except LoadgenError as exc:
        raise RunRefused(str(exc)) from None


def to_params(form: RunForm, triton_url: str) -> RunParams:
    """The load generator's parameters for ``form``; RunRefused past the dashboard's bounds."""
    if form.scenario not in SCENARIOS:
        raise RunRefused(f"unknown scenario {form.scenario!r}")
    common: dict[str, Any] = {
        "scenario": form.scenario,
        "model": form.model,
        "url": triton_url,
        "label": form.label,
    }
    opts = input_options(form)
    if form.scenario == "concurrency":
        _bounded(form.concurrency, "concurrency", MAX_CONCURRENCY)
        _bounded(form.duration_s, "duration", MAX_DURATION_S, " s")
        params = RunParams(**common, concurrency=form.concurrency, duration_s=form.duration_s)
    elif form.scenario == "rate":
        _bounded(form.rate, "rate", MAX_RATE, "/s")
        _bounded(form.duration_s, "duration", MAX_DURATION_S, " s")
        params = RunParams(**common, rate=form.rate, duration_s=form.duration_s)
    else:
        _bounded(form.requests, "requests", MAX_REQUESTS)
        params = RunParams(**common, requests=form.requests)
    return opts.apply(params)


def model_inputs(triton_url: str, model: str) -> list[dict[str, str]] | str:
    """The model's inputs as the form lists them (name, datatype, dims without the batch
    dim), or why they cannot be read."""
    try:
        spec = fetch_model(triton_url, model)
    except LoadgenError as exc:
        return str(exc)
    return [
        {"input": t.name, "datatype": t.datatype, "dims": str(list(t.shape))} for t in spec.inputs
    ]


def save_upload(folder: Path, data: bytes) -> Path:
    """An uploaded input data file, kept by its content's hash beside the store."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.json"
    if not path.exists():
        path.write_bytes(data)
    return path


def _bounded(value: float, what: str, cap: float, unit: str = "") -> None:
    if not value > 0:
        raise RunRefused(f"{what} must be greater than 0")
    if value > cap:
        raise RunRefused(
            f"{what} {value:g}{unit} is above the dashboard's limit of {cap:g}{unit}; "
            "for bigger runs use `batchscope load` from a shell"
        )


@dataclass
class ActiveRun:
    params: RunParams
    started: float = field(default_factory=time.time)
    progress: dict[str, Any] = field(default_factory=dict)
    run_id: int | None = None
    status: str = "running"  # running | ok | interrupted | failed | error
    error: str = ""
    note: str = ""  # the store could not take the run: where it was saved instead
    done: threading.Event = field(default_factory=threading.Event)


class RunManager:
    """At most one load run at a time for the whole dashboard process (every browser tab).

    The run happens in a thread; the page polls ``current`` for progress.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.current: ActiveRun | None = None

    @property
    def busy(self) -> bool:
        return self.current is not None and not self.current.done.is_set()

    def start(self, params: RunParams, db: Path) -> ActiveRun:
        with self._lock:
            if self.busy:
                raise RunRefused("a load run is already going: wait for it to finish")
            active = ActiveRun(params)
            self.current = active
            self._stop.clear()
        thread = threading.Thread(
            target=self._run, args=(active, db), name="dashboard-loadrun", daemon=True
        )
        thread.start()
        return active

    def stop(self) -> None:
        self._stop.set()

    def _run(self, active: ActiveRun, db: Path) -> None:
        def progress(snapshot: dict[str, Any]) -> None:
            active.progress = snapshot

        try:
            result = run(active.params, db=str(db), stop=self._stop, progress=progress)
            active.run_id, active.status = result.run_id, result.status
            active.note = result.store_note
        except (LoadgenError, StoreError) as exc:
            active.status, active.error = "error", str(exc)
        except Exception as exc:  # the thread must always finish and say why
            active.status, active.error = "error", f"{type(exc).__name__}: {exc}"
        finally:
            active.done.set()


# ---- reading the store ----------------------------------------------------------------


def list_runs(db: Path) -> pd.DataFrame:
    """Newest first; an empty frame when there is no store yet."""
    if not db.exists():
        return pd.DataFrame()
    with RunStore(db) as runs:
        return runs.runs_frame()


CHANGE_COLUMNS = [
    "id",
    "time (UTC)",
    "model",
    "outcome",
    "from",
    "to",
    "p99 before (ms)",
    "p99 after (ms)",
    "why",
]


def _config_text(config: dict[str, Any]) -> str:
    try:
        return from_model_config(config).describe()
    except ValueError:
        return "unreadable config"


def changes(db: Path, limit: int = 50) -> pd.DataFrame:
    """The config changes `advise --apply` made (the store's record), newest first: what was
    changed, the clients' p99 (or Triton's mean, as the record says) before and after, the
    outcome and why. Empty without a store or a change."""
    if not db.exists():
        return pd.DataFrame(columns=CHANGE_COLUMNS)
    with RunStore(db) as store:
        listed = store.list_changes(limit=limit)
    rows = [
        [
            c.id,
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(c.at)),
            c.model,
            c.outcome,
            _config_text(c.old_config),
            _config_text(c.new_config),
            _ms(c.before.get("client_p99_s") or c.before.get("server_mean_s")),
            _ms(c.after.get("client_p99_s") or c.after.get("server_mean_s")),
            c.reason,
        ]
        for c in listed
    ]
    return pd.DataFrame(rows, columns=CHANGE_COLUMNS)


def load(db: Path, run_id: int) -> LoadRun:
    with RunStore(db) as runs:
        return load_run(runs, run_id)


def timeline(db: Path, run_id: int) -> pd.DataFrame:
    with RunStore(db) as runs:
        return runs.timeline_frame(run_id)


def latency_table(run: LoadRun) -> pd.DataFrame:
    """Client-side latency percentiles in milliseconds."""
    latency = asdict(run.summary.client.latency_s)  # p50, p90, p95, p99, max, mean
    rows = [(name, _ms(seconds)) for name, seconds in latency.items()]
    return pd.DataFrame(rows, columns=["percentile", "ms"])


def lateness_table(run: LoadRun) -> pd.DataFrame:
    """Open-loop runs: how late the sends went out after their due times, in microseconds
    (p50, p99, max); empty for closed-loop runs and runs stored before it was kept."""
    late = run.summary.client.send_lateness_s
    if late is None:
        return pd.DataFrame(columns=["send lateness", "us"])
    rows = [
        (name, None if v is None else v * 1e6)
        for name, v in (("p50", late.p50), ("p99", late.p99), ("max", late.max))
    ]
    return pd.DataFrame(rows, columns=["send lateness", "us"])


def compare(a: LoadRun, b: LoadRun) -> pd.DataFrame:
    """``loadgen.reports.compare`` as a frame: one row per measure, A, B and the ratio B / A."""
    rows = [
        {"measure": r.measure, "A": r.a, "B": r.b, "B / A": r.b_over_a}
        for r in compare_runs(a.summary, b.summary)
    ]
    # None -> NaN: a missing value stays missing (shown as a dash), never a zero.
    return pd.DataFrame(rows).astype({"A": float, "B": float, "B / A": float})


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def executions_by_size(run: LoadRun) -> pd.DataFrame:
    """What the server formed during the run: batch size and executions (statistics deltas)."""
    server = run.summary.server
    sizes = server.executions_by_batch_size if server else {}
    return pd.DataFrame(sorted(sizes.items()), columns=["batch_size", "executions"])
