"""``bench/vs_model_analyzer.py`` without Triton or Model Analyzer: the profile config it writes,
and its reading of a real Model Analyzer 1.58 run (tests/fixtures/model_analyzer, captured by
``bench.vs_model_analyzer --keep``), so that a change of either side's format fails here."""

from __future__ import annotations

import json
from pathlib import Path

from advisor.config import BatcherConfig
from bench.vs_model_analyzer import (
    Contender,
    TritonPaths,
    contenders,
    ma_config,
    ma_pick,
    ma_rows,
    verdict,
)

CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "model_analyzer"


def test_the_profile_config_holds_model_analyzer_to_the_stacks_server_and_one_closed_loop(
    tmp_path: Path,
) -> None:
    triton = TritonPaths(Path("/v/tritonserver"), Path("/s/backends"), "/v/libs:/py/lib")
    config = ma_config(
        "m", tmp_path / "models", tmp_path, triton, [28000, 28001, 28002], "/pa", 8, 50.0, []
    )
    assert json.loads(json.dumps(config)) == config  # JSON, which Model Analyzer reads as YAML
    assert config["profile_models"] == {"m": {"cpu_only": True}}
    assert config["triton_launch_mode"] == "local"
    assert config["triton_server_path"] == "/v/tritonserver"
    assert config["triton_server_flags"] == {"backend-directory": "/s/backends"}
    assert config["triton_server_environment"] == {"LD_LIBRARY_PATH": "/v/libs:/py/lib"}
    assert config["triton_http_endpoint"] == "localhost:28000"
    assert config["triton_grpc_endpoint"] == "localhost:28001"
    assert config["triton_metrics_url"] == "http://localhost:28002/metrics"
    assert config["client_protocol"] == "grpc"
    assert config["run_config_search_mode"] == "quick"
    assert config["run_config_search_min_concurrency"] == 8
    assert config["run_config_search_max_concurrency"] == 8
    assert config["latency_budget"] == 50.0
    assert "shape" not in config["perf_analyzer_flags"]  # type: ignore[operator]
    shaped = ma_config("m", tmp_path, tmp_path, triton, [1, 2, 3], "/pa", 8, 50.0, ["X=16"])
    assert shaped["perf_analyzer_flags"]["shape"] == "X=16"  # type: ignore[index]


def test_the_captured_run_was_configured_as_the_bench_configures_it_now(tmp_path: Path) -> None:
    captured = json.loads((CAPTURE / "ma.yaml").read_text())
    triton = TritonPaths(Path("/t"), Path("/b"), "")
    ours = ma_config("mlp_model", tmp_path, tmp_path, triton, [1, 2, 3], "/pa", 8, 50.0, [])
    assert set(ours) == set(captured)
    paths = {k for k, v in ours.items() if isinstance(v, str) and v.startswith(("/", "http"))}
    paths |= {"triton_http_endpoint", "triton_grpc_endpoint", "triton_server_flags"}
    paths |= {"triton_server_environment"}
    assert {k: v for k, v in ours.items() if k not in paths} == {
        k: v for k, v in captured.items() if k not in paths
    }


def test_the_captured_run_reads_as_the_table_model_analyzer_printed() -> None:
    rows = ma_rows(CAPTURE / "export")
    lines = (CAPTURE / "export" / "results" / "metrics-model-inference.csv").read_text()
    assert len(rows) == len(lines.strip().splitlines()) - 1
    for row in rows:
        assert row.throughput_per_s > 0 and row.p99_ms > 0
        assert row.variant in lines
    # The search was held to the bench's closed loop, all but the served config's run: Model
    # Analyzer measures it at 2 x max_batch_size x instances, past the clamp (16 x 2 here).
    assert {(r.variant.endswith("_default"), r.concurrency) for r in rows} == {
        (True, 32),
        (False, 8),
    }
    # Model Analyzer ranks those within the budget first.
    satisfied = [r.satisfies for r in rows]
    assert satisfied == sorted(satisfied, reverse=True)


def test_the_pick_is_the_top_row_with_the_config_model_analyzer_generated_for_it() -> None:
    top, config = ma_pick(CAPTURE)
    assert top == ma_rows(CAPTURE / "export")[0]
    text = (CAPTURE / "output_models" / top.variant / "config.pbtxt").read_text()
    assert f"max_batch_size: {config.max_batch_size}\n" in text
    assert f"count: {config.instances}\n" in text


def contender(role: str, throughput: list[float], p99_ms: list[float]) -> Contender:
    return Contender(role, BatcherConfig(8), "m", throughput, p99_ms, [1.0])


def test_a_config_both_tools_picked_is_measured_once_under_both_names() -> None:
    served, other = BatcherConfig(16, (), 1000), BatcherConfig(8, (), 0, 2)
    entries = contenders([("served", served), ("Model Analyzer", other), ("advise", other)])
    assert [e.role for e in entries] == ["served", "Model Analyzer = advise"]
    assert verdict(entries[1], entries[1]) == "the same config"


def test_the_verdict_calls_a_difference_only_when_the_rounds_do_not_overlap() -> None:
    ma = contender("Model Analyzer", [1000, 1100, 1050], [10.0, 12.0, 11.0])
    better = contender("advise", [1200, 1300, 1250], [8.0, 9.0, 8.5])
    assert verdict(better, ma) == (
        "throughput x1.19 (higher; higher in 3 of 3 rounds), "
        "client p99 x0.77 (lower; lower in 3 of 3 rounds)"
    )
    close = contender("advise", [1080, 900, 1000], [11.5, 13.0, 12.0])
    assert verdict(close, ma) == (
        "throughput x0.95 (within noise; higher in 1 of 3 rounds), "
        "client p99 x1.09 (within noise; lower in 0 of 3 rounds)"
    )
    worse = contender("advise", [700, 800, 750], [20.0, 22.0, 21.0])
    assert verdict(worse, ma) == (
        "throughput x0.71 (lower; higher in 0 of 3 rounds), "
        "client p99 x1.91 (higher; lower in 0 of 3 rounds)"
    )
