"""Figures for Triton's other batching features, on a private Triton serving the feature
models of tests/features/repository/ (with a 1 MiB response cache):

    .venv/bin/python -m bench.features

1. max_queue_size: 100 requests/s for 2 s at add_slow_queue (capacity about 40/s): what
   the load generator saw, and what Triton's statistics and failure reasons counted.
2. Priorities: closed-loop clients 1:3,2:9 at add_priority for 3 s, latency per level.
3. The response cache: 10 identical requests and 2 new ones at add_cached.
4. The ensemble: concurrency 8 for 2 s at add_pipeline; each step's own average batch.
5. Sequences: 16 sequences of 6 at seq_accumulate, 4 in flight; the batch sizes formed.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from loadgen.engine.runner import RunParams, run
from loadgen.priorities import PriorityParams, report, run_mix
from loadgen.sequences import SequenceParams, run_sequences
from stack.supervisor import running
from stacksettings import ROOT, Settings, isolated
from tritonapi import ModelStats, TritonClient
from tritonapi.client import metrics_text
from tritonapi.metrics import parse_metrics

FEATURES = ROOT / "tests" / "features" / "repository"
ADD = ROOT / "model_repository" / "batch_add_model"
# Feature models that run batch_add_model's code under a config of their own.
ADD_CODE = ("add_cached", "add_ordered")
# Feature models that run add_slow_queue's code (50 ms per batch): slow enough to queue.
SLOW_CODE = ("add_priority",)
CACHE_BYTES = 1 << 20


def build_repository(target: Path, models: tuple[str, ...] | None = None) -> Path:
    """The feature models (all, or ``models``) and batch_add_model, which the ensemble uses
    (with ``models``, only if named)."""
    skip = shutil.ignore_patterns("__pycache__")
    for folder in sorted(FEATURES.iterdir()):
        if models is None or folder.name in models:
            shutil.copytree(folder, target / folder.name, ignore=skip)
    for names, code in ((ADD_CODE, ADD), (SLOW_CODE, FEATURES / "add_slow_queue")):
        for name in names:
            if (target / name).exists():
                (target / name / "1").mkdir(exist_ok=True)
                shutil.copy(code / "1" / "model.py", target / name / "1" / "model.py")
    if models is None or "batch_add_model" in models:
        shutil.copytree(ADD, target / "batch_add_model", ignore=skip)
    return target


def _stats(client: TritonClient, model: str) -> ModelStats:
    return client.model_stats(model)


def _failures(metrics: str, model: str) -> dict[str, float]:
    found = parse_metrics(metrics).failures
    return {reason: v for (m, _, reason), v in found.items() if m == model}


def figures(settings: Settings) -> None:
    url = settings.url("triton_http")
    client = TritonClient(url)
    metrics_url = settings.url("triton_metrics") + "/metrics"
    before = _stats(client, "add_slow_queue")
    reasons_before = _failures(metrics_text(metrics_url), "add_slow_queue")
    summary = run(
        RunParams(scenario="rate", model="add_slow_queue", url=url, rate=100.0, duration_s=2.0)
    ).summary
    delta = _stats(client, "add_slow_queue").minus(before)
    reasons = _failures(metrics_text(metrics_url), "add_slow_queue")
    c = summary.client
    print("1. max_queue_size 2 at 100 requests/s for 2 s (add_slow_queue)")
    print(f"   client: {c.sent} sent, {c.ok} ok; errors: {c.errors}")
    print(
        f"   Triton statistics: success +{delta.phase('success').count}, "
        f"fail +{delta.phase('fail').count}; failure reasons "
        f"{ {r: reasons[r] - reasons_before.get(r, 0) for r in sorted(reasons)} }"
    )

    mix = PriorityParams("add_priority", ((1, 3), (2, 9)), url, 3.0)
    before = _stats(client, "add_priority")
    reasons_before = _failures(metrics_text(metrics_url), "add_priority")
    print("2. " + report(mix, run_mix(mix)).replace("\n", "\n   "))
    delta = _stats(client, "add_priority").minus(before)
    reasons = _failures(metrics_text(metrics_url), "add_priority")
    print(
        f"   Triton statistics: success +{delta.phase('success').count}, "
        f"fail +{delta.phase('fail').count}; failure reasons "
        f"{ {r: reasons[r] - reasons_before.get(r, 0) for r in sorted(reasons)} }"
    )

    before = _stats(client, "add_cached")
    inputs = [
        {"name": "INPUT_A", "datatype": "FP32", "shape": [1, 1], "data": [1.5]},
        {"name": "INPUT_B", "datatype": "FP32", "shape": [1, 1], "data": [2.0]},
    ]
    for _ in range(10):
        client.infer_json("add_cached", inputs)
    for a in (10.0, 20.0):
        inputs[0]["data"] = [a]
        client.infer_json("add_cached", inputs)
    d = _stats(client, "add_cached").minus(before)
    print(
        f"3. response cache, 12 requests (10 identical): hits {d.phase('cache_hit').count}, "
        f"misses {d.phase('cache_miss').count}, success {d.phase('success').count}, "
        f"inferences {d.inference_count}, executions {d.execution_count}"
    )

    steps = ("add_pipeline", "preprocess", "batch_add_model")
    before_steps = {m: _stats(client, m) for m in steps}
    ok = run(
        RunParams(
            scenario="concurrency", model="add_pipeline", url=url, concurrency=8, duration_s=2.0
        )
    ).summary.client.ok
    print(f"4. ensemble add_pipeline at concurrency 8 for 2 s: {ok} answered")
    for m in steps:
        d = _stats(client, m).minus(before_steps[m])
        average = d.inference_count / d.execution_count if d.execution_count else float("nan")
        print(
            f"   {m}: inferences {d.inference_count}, executions {d.execution_count} "
            f"(average batch {average:.2f}), sizes {d.executions_by_size()}"
        )

    before = _stats(client, "seq_accumulate")
    result = run_sequences(SequenceParams("seq_accumulate", url, 16, 6, 4, first_id=5000))
    d = _stats(client, "seq_accumulate").minus(before)
    print(
        f"5. sequences 16 x 6, 4 in flight: {result.ok} ok, errors {result.errors}; Triton: "
        f"inferences {d.inference_count}, executions {d.execution_count}, "
        f"sizes {d.executions_by_size()}"
    )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-features-") as tmp:
        settings = replace(
            isolated(Path(tmp) / "state"),
            model_repository=build_repository(Path(tmp) / "models"),
            triton_cache_bytes=CACHE_BYTES,
        )
        with running(settings, only={"triton"}):
            figures(settings)


if __name__ == "__main__":
    main()
