"""The shipped rules: generated files in sync, valid for promtool/amtool, unit-tested."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchscope.main import main
from rules import alertmanager_config, rulegen, rulesettings
from rules.generated import generated_files
from rules.rulesettings import THRESHOLDS, RuleSettingsError
from stack import prometheus
from stacksettings import ROOT, RULES_SETTINGS, isolated

RULE_TESTS = sorted((ROOT / "tests" / "rules").glob("*_test.yml"))


def tool(*argv: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which(argv[0])
    assert binary, f"{argv[0]} is missing: ./stack/test installs it"
    return subprocess.run(
        [binary, *argv[1:]], capture_output=True, text=True, timeout=60, check=False
    )


def test_committed_files_match_the_generator() -> None:
    files = generated_files(RULES_SETTINGS)
    assert set(files) == {"recording.yml", "alerts.yml", "alertmanager.yml"}
    for name, text in files.items():
        committed = (rulegen.GENERATED_DIR / name).read_text()
        assert committed == text, f"{name} is stale: run `batchscope rules` and commit"


def test_rules_check_command_finds_drift(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["rules", "--output", str(tmp_path), "--check"]) == 1
    assert main(["rules", "--output", str(tmp_path)]) == 0
    assert main(["rules", "--output", str(tmp_path), "--check"]) == 0
    (tmp_path / "alerts.yml").write_text("edited by hand\n")
    assert main(["rules", "--output", str(tmp_path), "--check"]) == 1
    assert "alerts.yml is out of date" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["recording.yml", "alerts.yml"])
def test_promtool_accepts_the_rules(name: str) -> None:
    out = tool("promtool", "check", "rules", str(rulegen.GENERATED_DIR / name))
    assert out.returncode == 0, out.stdout + out.stderr


def test_amtool_accepts_the_alertmanager_config() -> None:
    out = tool("amtool", "check-config", str(rulegen.GENERATED_DIR / "alertmanager.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_accepts_the_prometheus_config_the_launcher_writes(tmp_path: Path) -> None:
    settings = isolated(tmp_path)
    path = prometheus.write_config(settings)
    body = yaml.safe_load(path.read_text())
    assert body["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        f"127.0.0.1:{settings.port('alertmanager')}"
    ]
    assert [Path(p).name for p in body["rule_files"]] == ["recording.yml", "alerts.yml"]
    # check config also loads and checks every rule file it names.
    out = tool("promtool", "check", "config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 18 rules found" in out.stdout and "SUCCESS: 12 rules found" in out.stdout


def test_no_alerting_section_when_alertmanager_is_skipped(tmp_path: Path) -> None:
    settings = replace(isolated(tmp_path), skip=frozenset({"alertmanager"}))
    body = yaml.safe_load(prometheus.write_config(settings).read_text())
    assert "alerting" not in body and len(body["rule_files"]) == 2


@pytest.mark.parametrize("path", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_rule_unit_tests(path: Path) -> None:
    out = tool("promtool", "test", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_unit_test_that_fires_it() -> None:
    fired = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                if check["exp_alerts"]:
                    fired.add(check["alertname"])
    assert fired == set(THRESHOLDS)


def test_every_alert_carries_severity_summary_description_runbook() -> None:
    rules = rulegen.alert_rules(rulesettings.load())
    assert [r["alert"] for r in rules] == list(THRESHOLDS)
    for rule in rules:
        assert rule["labels"]["severity"] in rulesettings.SEVERITIES
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}


def defaults() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(RULES_SETTINGS.read_text())
    return data


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_thresholds_and_windows_come_from_the_settings_file(tmp_path: Path) -> None:
    data = defaults()
    data["windows"] = {"short": "30s", "long": "2m"}
    data["alerts"]["BatchingIneffective"].update({"for": "3m", "max_average_batch_size": 1.5})
    data["alerts"]["InferenceFailures"]["severity"] = "warning"
    s = rulesettings.load(write(tmp_path, data))
    text = "".join(rulegen.render(s).values())
    assert "model:triton_batching_average_batch_size:ratio_rate30s" in text
    assert "model:triton_batching_average_batch_size:ratio_rate2m < 1.5" in text
    assert "rate1m" not in text and "rate5m" not in text
    alerts = {r["alert"]: r for r in rulegen.alert_rules(s)}
    assert alerts["BatchingIneffective"]["for"] == "3m"
    assert alerts["InferenceFailures"]["labels"]["severity"] == "warning"


def test_webhooks_go_to_the_receiver_of_their_severity(tmp_path: Path) -> None:
    data = defaults()
    data["alertmanager"]["webhooks"]["critical"] = ["http://127.0.0.1:1/hook"]
    config = alertmanager_config.config(rulesettings.load(write(tmp_path, data)))
    routes = {r["matchers"][0]: r["receiver"] for r in config["route"]["routes"]}
    assert routes == {f'severity="{s}"': s for s in ("critical", "warning", "info")}
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers["critical"]["webhook_configs"] == [
        {"url": "http://127.0.0.1:1/hook", "send_resolved": True}
    ]
    assert "webhook_configs" not in receivers["warning"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["alerts"]["QueueLatencyHigh"].update(max_queue_seconds=1), "unknown key"),
        (lambda d: d["alerts"]["TritonDown"].update({"for": "5 minutes"}), "Prometheus duration"),
        (lambda d: d["alerts"]["TritonDown"].update(severity="page"), "use one of critical"),
        (lambda d: d["alerts"]["InferenceFailures"].pop("max_failure_ratio"), "missing key"),
        (lambda d: d["alerts"]["InferenceFailures"].update(max_failure_ratio="5%"), "a number"),
        (lambda d: d["alertmanager"]["webhooks"].update(critical="x"), "http(s) URLs"),
        (lambda d: d.pop("windows"), "missing key 'windows'"),
    ],
)
def test_bad_settings_are_one_clear_error(tmp_path: Path, edit: Any, message: str) -> None:
    data = defaults()
    edit(data)
    path = write(tmp_path, data)
    with pytest.raises(RuleSettingsError) as raised:
        rulesettings.load(path)
    assert message in str(raised.value) and str(path) in str(raised.value)
    assert "\n" not in str(raised.value) and raised.value.exit_code == 2


def test_rules_command_reports_bad_settings_without_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    settings = tmp_path / "broken.yaml"
    settings.write_text("windows: [")
    out = tmp_path / "out"
    assert main(["rules", "--settings", str(settings), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("batchscope rules: error: ") and "not valid YAML" in err
    assert len(err.splitlines()) == 1 and err.endswith(" (see 'batchscope rules --help')")
    assert not out.exists()


def test_up_refuses_bad_rule_settings_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    state = tmp_path / "state"
    bad = write(tmp_path, {**defaults(), "windows": {"short": "1m", "long": "five minutes"}})
    assert main(["up", "--state-dir", str(state), "--rules-settings", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"batchscope up: error: {bad}: windows.long is 'five minutes'; use a "
        "Prometheus duration such as 30s, 5m or 1h (see 'batchscope up --help')"
    ]
    assert not (state / "stack.json").exists()
