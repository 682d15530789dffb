"""The Grafana dashboard marks each config change of ``batchscope advise --apply``: an
annotation on the exporter's counter of changes, evaluated by promtool on recorded series."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from exporter import catalog
from tests.deploygen.test_grafana import board, filled

SERIES = (
    'triton_batching_config_changes_total{target="http://127.0.0.1:8000",model="m",outcome="%s"}'
)


def annotation() -> dict:
    (found,) = [a for a in board()["annotations"]["list"] if a["name"].startswith("Config")]
    return found


def test_the_annotation_reads_the_exported_counter_of_the_chosen_server_and_model() -> None:
    found = annotation()
    assert found["enable"] is True
    assert found["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    exposed = {f.exposed for f in catalog.families()}
    assert "triton_batching_config_changes_total" in exposed
    assert found["expr"].startswith("changes(triton_batching_config_changes_total{")
    assert 'target=~"$target"' in found["expr"] and 'model=~"$model"' in found["expr"]


def test_promtool_marks_the_step_where_a_change_was_recorded(tmp_path: Path) -> None:
    expr = filled(annotation()["expr"], "http://127.0.0.1:8000", "m").replace("$__interval", "1m")
    (tmp_path / "none.yml").write_text(yaml.safe_dump({"groups": []}))
    tests = {
        "rule_files": ["none.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": SERIES % "rolled_back", "values": "0 0 1 1 1"},
                    {"series": SERIES % "kept", "values": "0 0 0 0 1"},
                ],
                "promql_expr_test": [
                    # 1m -> 2m: the rollback was recorded; 2m -> 3m: nothing new.
                    {
                        "expr": expr,
                        "eval_time": "2m",
                        "exp_samples": [
                            {"labels": SERIES.split("_total", 1)[1] % "rolled_back", "value": 1}
                        ],
                    },
                    {"expr": expr, "eval_time": "3m", "exp_samples": []},
                    {
                        "expr": expr,
                        "eval_time": "4m",
                        "exp_samples": [
                            {"labels": SERIES.split("_total", 1)[1] % "kept", "value": 1}
                        ],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump(tests))
    out = subprocess.run(
        ["promtool", "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout
