"""Prometheus recording and alert rules, generated from rules/settings.yaml.

Every recording rule is built from counters with ``rate()``, which treats a
counter that goes down (Triton restarted) as a reset, so a restart never makes a
ratio negative or spike. Ratios divide by a rate filtered with ``> 0``: an idle
model gets no series instead of NaN, and no alert can fire on it.

Names follow Prometheus' ``level:metric:operations`` convention. The level
``model`` means the labels ``target, model, version``: one model version on one
Triton, summed over exporters and scrape jobs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from rules.rulesettings import RuleSettings
from stacksettings import ROOT

GENERATED_DIR = ROOT / "rules" / "generated"
BY = "target, model, version"
PREFIX = "model:triton_batching_"


def name(metric: str, operation: str, window: str) -> str:
    """A recording rule's name, e.g. name("inferences", "rate", "1m")."""
    return f"{PREFIX}{metric}:{operation}{window}"


def _rate(counter: str, window: str) -> str:
    return f"sum by ({BY}) (rate(triton_batching_{counter}[{window}]))"


def recording_rules(window: str) -> list[dict[str, str]]:
    """The recording rules over one window, in evaluation order (later ones use earlier ones)."""
    w = window
    inferences = name("inferences", "rate", w)
    executions = name("executions", "rate", w)
    average = name("average_batch_size", "ratio_rate", w)
    batch_executions = _rate("batch_executions_total", w)
    compute = (
        f"sum by ({BY}) (\n"
        f"  rate(triton_batching_compute_input_seconds_total[{w}])\n"
        f"  + rate(triton_batching_compute_infer_seconds_total[{w}])\n"
        f"  + rate(triton_batching_compute_output_seconds_total[{w}])\n"
        ")"
    )
    rules = {
        inferences: _rate("inferences_total", w),
        executions: _rate("executions_total", w),
        # Inferences per execution: 1 means no batching happened.
        average: f"{inferences}\n/ ({executions} > 0)",
        # The average batch as a fraction of the largest batch the model accepts.
        name("efficiency", "ratio_rate", w): (
            f"{average}\n/ on ({BY}) max by ({BY}) (triton_batching_max_batch_size > 0)"
        ),
        # Executions at one of the preferred sizes over all executions; 0 (not absent) when
        # none hit, absent for a model without preferred sizes.
        name("preferred_hit", "ratio_rate", w): (
            "(\n"
            f"  sum by ({BY}) (\n"
            f"    rate(triton_batching_batch_executions_total[{w}])\n"
            f"    and on ({BY}, batch_size)\n"
            '    label_replace(triton_batching_preferred_batch_size, "batch_size", "$1", '
            '"size", "(.+)")\n'
            "  )\n"
            f"  or on ({BY})\n"
            f"  0 * group by ({BY}) (triton_batching_preferred_batch_size)\n"
            ")\n"
            f"/ on ({BY}) ({batch_executions} > 0)"
        ),
        # Triton accounts queue and compute time per successful request.
        name("queue_seconds_per_request", "ratio_rate", w): (
            f"{_rate('queue_seconds_total', w)}\n/ ({_rate('requests_success_total', w)} > 0)"
        ),
        # From the batch-size distribution: the model's own time for one execution.
        name("compute_infer_seconds_per_execution", "ratio_rate", w): (
            f"{_rate('batch_compute_infer_seconds_total', w)}\n/ ({batch_executions} > 0)"
        ),
        # Seconds a request waits in the queue per second it spends in compute.
        name("queue_compute", "ratio_rate", w): (
            f"{_rate('queue_seconds_total', w)}\n/ ({compute} > 0)"
        ),
        name("failure", "ratio_rate", w): (
            f"{_rate('requests_failure_total', w)}\n"
            f"/ (sum by ({BY}) (\n"
            f"  rate(triton_batching_requests_success_total[{w}])\n"
            f"  + rate(triton_batching_requests_failure_total[{w}])\n"
            ") > 0)"
        ),
    }
    return [{"record": record, "expr": expr} for record, expr in rules.items()]


def _num(value: float) -> str:
    return f"{value:g}"


def _fill(text: str, **values: str) -> str:
    """Put settings into a Go template: <name> placeholders, since {{ }} is Go's."""
    return re.sub(r"<(\w+)>", lambda m: values[m.group(1)], text)


def _failed(up: str, window: str) -> str:
    """How many samples of an up series (0 or 1) were 0 within the window."""
    return f"(count_over_time({up}[{window}]) - sum_over_time({up}[{window}]))"


def _alert(
    s: RuleSettings, alert: str, expr: str, summary: str, description: str, runbook: str
) -> dict[str, Any]:
    cfg = s.alerts[alert]
    return {
        "alert": alert,
        "expr": expr,
        "for": cfg.for_,
        "labels": {"severity": cfg.severity},
        "annotations": {"summary": summary, "description": description, "runbook": runbook},
    }


MODEL = "{{ $labels.model }} (version {{ $labels.version }}) on {{ $labels.target }}"


def alert_rules(s: RuleSettings) -> list[dict[str, Any]]:
    long, short = s.long_window, s.short_window
    failed_reads = _num(s.alerts["TritonDown"]["min_failed_reads"])
    triton_up = f'up{{job="{s.triton_job}"}}'
    load = f"{name('inferences', 'rate', long)} >= {_num(s.min_load)}"
    values = {"long": long, "load": _num(s.min_load)}
    a = s.alerts
    return [
        _alert(
            s,
            "TritonDown",
            # One outage, one alert: the exporter's view while it reports on Triton (both
            # see the outage at once, under different labels); Prometheus' scrape otherwise.
            # Failed reads counted over the short window (the up series are 0 or 1), so a
            # restart within seconds pages too, and a long outage stays one alert.
            f"{_failed('triton_batching_target_up', short)} >= {failed_reads}\n"
            f"or ({_failed(triton_up, short)} >= {failed_reads}"
            " unless on() triton_batching_target_up)",
            "Triton is down",
            _fill(
                "{{ if $labels.target }}The exporter could not read Triton at "
                "{{ $labels.target }}{{ else }}Prometheus could not scrape Triton's metrics "
                "at {{ $labels.instance }}{{ end }} {{ $value }} times in the last <short>.",
                short=short,
            ),
            "Is the tritonserver process running (`batchscope status`, "
            "`.stack/logs/triton.log`)? Did it exit while loading a model (look for "
            '"failed to load" in its log)? Is the metrics port reachable from Prometheus and '
            "the HTTP port from the exporter? Inference is down with it.",
        ),
        _alert(
            s,
            "TritonEndpointDown",
            # Down through the whole short window, so that one slow read does not page; and
            # only while the target itself is read, so that an outage pages as TritonDown.
            f"max_over_time(triton_batching_endpoint_up[{short}]) == 0\n"
            "and on (target) triton_batching_target_up == 1",
            "Triton's {{ $labels.endpoint }} endpoint is down",
            _fill(
                "The exporter reads Triton at {{ $labels.target }}, but its "
                "{{ $labels.endpoint }} endpoint has not answered for <short>: the series read "
                "from it are missing, the others still flow.",
                short=short,
            ),
            "`batchscope status` shows the URL of each endpoint and why it is down (also "
            "triton_batching_endpoint_info's url and reason). metrics: is Triton started with "
            "--allow-metrics false, or its metrics port other than the HTTP port + 2? Give "
            "--triton-metrics-url. statistics, repository, config: a restricted API "
            "(--http-restricted-api) needs --triton-admin-key-file.",
        ),
        _alert(
            s,
            "ExporterDown",
            f'up{{job="{s.exporter_job}"}} == 0',
            "The batching exporter is down",
            "Prometheus cannot scrape the exporter at {{ $labels.instance }}: batch sizes, "
            "queue times and every model alert are blind until it is back.",
            "Is the exporter running (`batchscope status`, "
            "`.stack/logs/exporter.log`)? Does {{ $labels.instance }}/healthz answer? "
            "A scrape that takes longer than the scrape timeout also counts as down: "
            "check triton_batching_scrape_duration_seconds.",
        ),
        _alert(
            s,
            "AlertmanagerDown",
            f'up{{job="{s.alertmanager_job}"}} == 0',
            "Alertmanager is down",
            "Prometheus cannot scrape Alertmanager at {{ $labels.instance }}: alerts are "
            "evaluated but nobody is notified until it is back.",
            "Is prometheus-alertmanager running (`batchscope status`, "
            "`.stack/logs/alertmanager.log`)? Does {{ $labels.instance }}/-/ready answer? "
            "Prometheus resends firing alerts once it answers again.",
        ),
        _alert(
            s,
            "ModelNotReady",
            f"max by ({BY}) (triton_batching_model_ready) == 0",
            "Model {{ $labels.model }} is not ready",
            f"Triton reports {MODEL} as not ready: requests to it fail.",
            "Look for the model in Triton's log (load errors, a failed initialize() in "
            "model.py). Run `batchscope check-config`. "
            "GET /v2/repository/index on Triton shows each model's state and reason.",
        ),
        _alert(
            s,
            "BatchingIneffective",
            f"{name('average_batch_size', 'ratio_rate', long)} < "
            f"{_num(a['BatchingIneffective']['max_average_batch_size'])}\n"
            f"and on ({BY}) {load}\n"
            f"and on ({BY}) max by ({BY}) (triton_batching_max_batch_size) > 1",
            "Dynamic batching is not batching {{ $labels.model }}",
            _fill(
                "The average batch of " + MODEL + ' is {{ $value | printf "%.2f" }} '
                "over <long> under load, although it accepts batches up to "
                '{{ with printf `max(triton_batching_max_batch_size{target="%s",'
                'model="%s",version="%s"})` $labels.target $labels.model $labels.version '
                "| query }}{{ . | first | value }}{{ end }}. dynamic_batching is "
                '{{ with printf `max(triton_batching_dynamic_batching_enabled{target="%s",'
                'model="%s",version="%s"})` $labels.target $labels.model $labels.version '
                "| query }}{{ if eq (. | first | value) 1.0 }}on{{ else }}off{{ end }}"
                "{{ end }}.",
                **values,
            ),
            "1. Is dynamic_batching enabled in the model's config.pbtxt (the description "
            "says)? Without it Triton never merges requests. "
            "2. Do the requests overlap in time? Requests sent one after another (one "
            "synchronous client, concurrency 1) can never be batched: raise the client's "
            "concurrency. 3. What batch sizes are formed? See "
            "triton_batching_batch_executions_total by batch_size. "
            "4. Is max_queue_delay_microseconds too short for the arrival rate? A longer "
            "delay lets more requests join a batch, at the cost of queue time.",
        ),
        _alert(
            s,
            "LowPreferredBatchHitRatio",
            f"{name('preferred_hit', 'ratio_rate', long)} < "
            f"{_num(a['LowPreferredBatchHitRatio']['min_hit_ratio'])}\n"
            f"and on ({BY}) {load}",
            "Few batches of {{ $labels.model }} reach a preferred size",
            _fill(
                "Only {{ $value | humanizePercentage }} of the executions of "
                + MODEL
                + " over <long> ran at a preferred batch size (threshold <min>).",
                min=f"{a['LowPreferredBatchHitRatio']['min_hit_ratio']:.0%}",
                **values,
            ),
            "Which sizes are formed instead (triton_batching_batch_executions_total by "
            "batch_size)? Batches smaller than the preferred sizes mean the queue delay "
            "(max_queue_delay_microseconds) expires before enough requests arrive: raise it "
            "or the client concurrency. Are the preferred sizes reachable at all, i.e. "
            "no larger than max_batch_size and no larger than the usual number of requests "
            "in flight?",
        ),
        _alert(
            s,
            "QueueLatencyHigh",
            f"{name('queue_seconds_per_request', 'ratio_rate', long)} > "
            f"{_num(a['QueueLatencyHigh']['max_queue_seconds_per_request'])}\n"
            f"and on ({BY}) {load}",
            "Requests to {{ $labels.model }} wait long in Triton's queue",
            _fill(
                "Requests to " + MODEL + " waited {{ $value | humanizeDuration }} on average "
                "in the queue over <long> (threshold <max>).",
                max=_num(a["QueueLatencyHigh"]["max_queue_seconds_per_request"]) + "s",
                **values,
            ),
            "Compare it with max_queue_delay_microseconds: a queue time far above the delay "
            "means the model instances are saturated, so add instances (instance_group count) "
            "or hardware, or lower the load. Check the queue:compute ratio "
            "(model:triton_batching_queue_compute:ratio_rate*) and the compute time per "
            "execution: a slower model makes every request queue longer.",
        ),
        _alert(
            s,
            "PendingRequestsBacklog",
            f"max by ({BY}) (triton_batching_pending_requests) > "
            f"{_num(a['PendingRequestsBacklog']['max_pending_requests'])}",
            "Requests pile up for {{ $labels.model }}",
            _fill(
                "{{ $value }} requests are pending for " + MODEL + " (threshold <max>).",
                max=_num(a["PendingRequestsBacklog"]["max_pending_requests"]),
            ),
            "Requests arrive faster than the model executes them. Are all instances up "
            "(triton_batching_instances)? Did the compute time per execution grow? Does "
            "batching work (BatchingIneffective, average batch size)? Scale out, or shed load "
            "at the client.",
        ),
        _alert(
            s,
            "InferenceFailures",
            f"{name('failure', 'ratio_rate', long)} > "
            f"{_num(a['InferenceFailures']['max_failure_ratio'])}",
            "Inferences of {{ $labels.model }} fail",
            _fill(
                "{{ $value | humanizePercentage }} of the requests to " + MODEL + " failed "
                "over <long> (threshold <max>).",
                max=f"{a['InferenceFailures']['max_failure_ratio']:.0%}",
                **values,
            ),
            "Triton's log shows each failure. Triton counts as a failure only a request "
            "whose execution raised (an exception in model.py execute(), a backend error). "
            "Not counted: a python-backend model that returns an error response counts it "
            "as a SUCCESS, and a request Triton rejects before queueing (e.g. a missing input, "
            "HTTP 400) is counted nowhere; check client-side error rates for those.",
        ),
        _queue_full(s),
        _requests_rejected(s),
    ]


def _queue_full(s: RuleSettings) -> dict[str, Any]:
    """Triton 2.51 counts a request rejected by a full queue nowhere (checked: neither the
    statistics' failures nor nv_inference_request_failure{reason="REJECTED"} move), so the
    alert compares the pending requests with the smallest bound of the model's queues."""
    short = s.short_window
    return _alert(
        s,
        "QueueFull",
        f"max by ({BY}) (max_over_time(triton_batching_pending_requests[{short}]))\n"
        f">= on ({BY}) min by ({BY}) (triton_batching_max_queue_size)",
        "The queue of {{ $labels.model }} is full",
        "Requests to " + MODEL + " fill its bounded queue"
        '{{ with printf `min(triton_batching_max_queue_size{target="%s",model="%s",'
        'version="%s"})` $labels.target $labels.model $labels.version | query }}'
        " (max_queue_size {{ . | first | value }}){{ end }}: Triton answers every new "
        "request at once with HTTP 503 'Exceeds maximum queue size'. Triton 2.51 counts "
        "these rejections nowhere (not as failures, not as reason REJECTED): only the "
        "clients see them.",
        "Count the rejections at the clients (the load generator reports them as "
        "'HTTP 503: ... Exceeds maximum queue size'). The instances do not keep up with the "
        "arrivals: add instances (instance_group count) or hardware, or raise "
        "max_queue_size if the latency allows. With priority levels, only the queue of one "
        "level may be full (triton_batching_max_queue_size by priority): keep "
        "latency-sensitive requests at the level with room.",
    )


def _requests_rejected(s: RuleSettings) -> dict[str, Any]:
    """What Triton 2.51 does count as REJECTED (checked): a request that waited in a queue
    past its timeout (default_timeout_microseconds with timeout_action REJECT)."""
    long = s.long_window
    return _alert(
        s,
        "RequestsRejected",
        f"sum by ({BY}) (\n"
        f'  rate(triton_batching_request_failures_by_reason_total{{reason="REJECTED"}}[{long}])\n'
        ") > 0",
        "Triton rejects requests to {{ $labels.model }}",
        _fill(
            "Triton rejected {{ $value | humanize }} requests/s to " + MODEL + " over <long> "
            "(failure reason REJECTED): on Triton 2.51 these are requests that waited in a "
            "queue past its timeout (default_timeout_microseconds, timeout_action REJECT). "
            "A full queue's rejections are not counted there (see QueueFull).",
            long=long,
        ),
        "The clients got HTTP 503 'Request timeout expired'. Which queue? "
        "triton_batching_queue_timeout_seconds by priority. The instances do not serve that "
        "level fast enough: add instances, lower the load of higher levels, or allow a "
        "longer timeout (or timeout_action DELAY) where the latency allows.",
    )


def groups(s: RuleSettings) -> dict[str, list[dict[str, Any]]]:
    """File name -> rule groups; the shape of a Prometheus rules file and a PrometheusRule."""
    return {
        "recording.yml": [
            {"name": f"triton_batching_recording_{window}", "rules": recording_rules(window)}
            for window in s.windows
        ],
        "alerts.yml": [{"name": "triton_batching_alerts", "rules": alert_rules(s)}],
    }


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line expressions as literal blocks, so that the files read like hand-written rules.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump(body: Any, source: Path, command: str = "batchscope rules") -> str:
    try:
        origin = source.resolve().relative_to(ROOT)
    except ValueError:
        origin = source
    header = f"# Generated by `{command}` from {origin}; do not edit by hand.\n"
    return header + yaml.dump(body, Dumper=_Dumper, sort_keys=False, width=100)


def render(s: RuleSettings) -> dict[str, str]:
    """File name -> text of every generated rules file."""
    return {file: dump({"groups": body}, s.source) for file, body in groups(s).items()}


def write(files: dict[str, str], folder: Path) -> list[Path]:
    """Write each file atomically (a reader never sees half a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for file, text in files.items():
        path = folder / file
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)
        paths.append(path)
    return paths


def write_files(files: dict[Path, str]) -> list[Path]:
    """Write generated files (path -> text), each atomically as :func:`write` does."""
    for path, text in files.items():
        write({path.name: text}, path.parent)
    return list(files)


def stale(files: dict[Path, str]) -> list[Path]:
    """The files whose committed text differs from ``files``."""
    return [path for path, text in files.items() if _read(path) != text]


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
