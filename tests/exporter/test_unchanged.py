"""A read that finds nothing changed costs no parsing, no rendering and no compressing again
(issue 55: the exporter's cost grows with the models that change, not per scrape).

The work is counted, not timed: a real capture (tests/exporter/data/) repeated under 60 model
names (bench.standin, as the scrape benchmark's stand-ins serve it), read again and again,
with one model changed at a time. What is exported stays what a fresh collector exports.
"""

from __future__ import annotations

import copy
import gzip
import json
from dataclasses import replace

from bench.standin import Capture, varied
from exporter.collector import BatchingCollector, Work
from exporter.exposition import Gzip, render, texts
from exporter.scrape import Fetcher, Snapshot
from exporter.targets import Target
from tests.exporter.replay import Reply, captured_replies, replay_server, standin_capture

TARGETS = [
    Target(f"http://127.0.0.1:{8000 + i}", f"http://127.0.0.1:{8002 + i}/m") for i in (0, 10)
]
MODELS = 60
# Series that are new on every read: how long it took, how old it is.
PER_READ = ("triton_batching_scrape_duration_seconds", "triton_batching_data_age_seconds")


FLEET = varied(standin_capture("after_load"), MODELS)


def snapshot(capture: Capture) -> Snapshot:
    """As freshly decoded: equal to the last answer, never the same objects."""
    fresh = copy.deepcopy(capture)
    return Snapshot(fresh.metrics, fresh.stats, fresh.index, fresh.configs, fresh.ready == 200)


class Source:
    def __init__(self) -> None:
        self.capture = FLEET

    def __call__(self, _target: Target, _timeout_s: float) -> Snapshot:
        return snapshot(self.capture)


def exported(collector: BatchingCollector) -> str:
    text = render(collector.collect()).decode()
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith(PER_READ))


def fresh_export(capture: Capture) -> str:
    return exported(BatchingCollector(TARGETS, fetch=lambda _t, _s: snapshot(capture)))


def since(before: Work, after: Work) -> tuple[int, int, int, int]:
    return (
        after.metrics_parsed - before.metrics_parsed,
        after.models_parsed - before.models_parsed,
        after.configs_parsed - before.configs_parsed,
        after.models_rendered - before.models_rendered,
    )


def busier(capture: Capture, model: str) -> Capture:
    """``model`` after two more inferences in one execution of batch size 2."""
    stats = copy.deepcopy(capture.stats)
    entry = next(e for e in stats["model_stats"] if e["name"] == model)
    entry["inference_count"] += 2
    entry["execution_count"] += 1
    return replace(capture, stats=stats)


def test_reading_unchanged_answers_again_parses_and_renders_nothing() -> None:
    collector = BatchingCollector(TARGETS, fetch=Source())
    first = exported(collector)
    assert first == fresh_export(FLEET)
    assert first.count("triton_batching_executions_total{") == len(TARGETS) * MODELS
    start = collector.work()
    assert since(Work(0, 0, 0, 0), start) == (2, 2 * MODELS, 2 * MODELS, 2 * MODELS)
    for _ in range(3):
        assert exported(collector) == first
    assert since(start, collector.work()) == (0, 0, 0, 0)


def test_one_changed_model_is_the_only_one_parsed_and_rendered_again() -> None:
    source = Source()
    collector = BatchingCollector(TARGETS, fetch=source)
    exported(collector)
    model = FLEET.stats["model_stats"][7]["name"]
    source.capture = busier(FLEET, model)
    before = collector.work()
    text = exported(collector)
    # One model on each of the two targets: its statistics entry, nothing else.
    assert since(before, collector.work()) == (0, 2, 0, 2)
    assert text == fresh_export(source.capture)
    assert text != fresh_export(FLEET)


def test_a_changed_pending_count_reparses_metrics_and_rerenders_that_model_only() -> None:
    source = Source()
    collector = BatchingCollector(TARGETS, fetch=source)
    exported(collector)
    model = FLEET.stats["model_stats"][3]["name"]
    line = f'nv_inference_pending_request_count{{model="{model}",version="1"}} 0'
    assert line in FLEET.metrics
    source.capture = replace(FLEET, metrics=FLEET.metrics.replace(line, line[:-1] + "5"))
    before = collector.work()
    text = exported(collector)
    assert since(before, collector.work()) == (2, 0, 0, 2)
    assert text == fresh_export(source.capture)
    labels = f'model="{model}",target="{TARGETS[0].url}",version="1"'
    assert f"triton_batching_pending_requests{{{labels}}} 5.0" in text


def test_gzip_compresses_only_the_families_whose_text_changed() -> None:
    source = Source()
    collector = BatchingCollector(TARGETS, fetch=source)
    squeeze = Gzip()
    first = texts(collector.collect())
    assert gzip.decompress(squeeze.compress(first)).decode() == "".join(first)
    assert squeeze.pieces_compressed == len(first)
    again = texts(collector.collect())
    before = squeeze.pieces_compressed
    assert gzip.decompress(squeeze.compress(again)).decode() == "".join(again)
    changed = set(again) - set(first)
    # Only the per-read families (the read's duration, the data's age) have new text.
    assert squeeze.pieces_compressed - before == len(changed) == 2


def test_an_answer_the_same_byte_for_byte_is_not_decoded_again() -> None:
    """Over HTTP (the replay server): the fetcher's client hands back the last decoded
    statistics for the same bytes, and a new object once they differ."""
    replies = captured_replies("after_load")
    with replay_server(replies) as server:
        fetch = Fetcher()
        first = fetch(server.target, 2.0)
        again = fetch(server.target, 2.0)
        assert again.stats is first.stats
        assert again.index is first.index
        stats = json.loads(replies[("GET", "/v2/models/stats")].body)
        stats["model_stats"][0]["inference_count"] += 1
        replies[("GET", "/v2/models/stats")] = Reply(200, json.dumps(stats).encode())
        changed = fetch(server.target, 2.0)
        assert changed.stats is not first.stats
        assert changed.stats == stats
