"""check-config against the shipped repository and each broken case the issue lists."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from batchscope.main import main
from tritonapi import repocheck

ROOT = Path(__file__).resolve().parents[2]
GOOD = (ROOT / "model_repository" / "batch_add_model" / "config.pbtxt").read_text()


def make_repo(tmp_path: Path, config: str, model_file: bool = True) -> Path:
    folder = tmp_path / "repo" / "batch_add_model"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    if model_file:
        (folder / "1" / "model.py").write_text("# model\n")
    return tmp_path / "repo"


def findings(repo: Path) -> list[repocheck.Finding]:
    return [f for check in repocheck.check_repository(repo) for f in check.findings]


def test_shipped_repository_is_clean() -> None:
    checks = repocheck.check_repository(ROOT / "model_repository")
    assert {c.name for c in checks} == {"batch_add_model", "add_unbatched", "mlp_model"}
    assert [f for c in checks for f in c.findings] == []
    spec = next(c.config for c in checks if c.name == "batch_add_model")
    assert spec is not None
    assert spec.max_batch_size == 4
    assert spec.preferred_batch_sizes == (2, 4)
    assert spec.max_queue_delay_us == 500


def test_syntax_error_reports_line_and_column(tmp_path: Path) -> None:
    broken = GOOD.replace("max_batch_size: 4", "max_batch_sizes: 4")
    (finding,) = findings(make_repo(tmp_path, broken))
    line = broken.splitlines().index("max_batch_sizes: 4") + 1
    assert (finding.line, finding.column) == (line, 1)
    assert "max_batch_sizes" in finding.message
    assert str(finding).startswith(f"{finding.path}:{line}:1: error: syntax error")


def test_truncated_file_is_a_syntax_error(tmp_path: Path) -> None:
    (finding,) = findings(make_repo(tmp_path, GOOD[: GOOD.rindex("OUTPUT_SUM")]))
    assert finding.severity == "error" and "syntax error" in finding.message


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("max_batch_size: 4", "max_batch_size: 1\n"), "larger than max_batch_size 1"),
        (("preferred_batch_size: [ 2, 4 ]", "preferred_batch_size: [ 0, 4 ]"), "must be positive"),
        (("preferred_batch_size: [ 2, 4 ]", "preferred_batch_size: [ -2, 4 ]"), "must be positive"),
        (("max_batch_size: 4", "max_batch_size: 0"), "max_batch_size is 0"),
        (("max_batch_size: 4", "max_batch_size: -1"), "max_batch_size is -1"),
        (("max_queue_delay_microseconds: 500", "max_queue_delay_microseconds: -500"), "negative"),
        (('name: "batch_add_model"', 'name: "other"'), "does not match the folder name"),
    ],
)
def test_each_bad_case_is_one_clear_error(
    tmp_path: Path, change: tuple[str, str], expected: str
) -> None:
    old, new = change
    assert old in GOOD
    errors = [
        f for f in findings(make_repo(tmp_path, GOOD.replace(old, new))) if f.severity == "error"
    ]
    assert any(expected in f.message for f in errors), errors


def test_missing_model_py_and_version_folder(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD, model_file=False)
    (error,) = findings(repo)
    assert "1/model.py is missing" in error.message
    shutil.rmtree(repo / "batch_add_model" / "1")
    (error,) = findings(repo)
    assert "no version folder" in error.message


def test_missing_config_file(tmp_path: Path) -> None:
    repo = make_repo(tmp_path, GOOD)
    (repo / "batch_add_model" / "config.pbtxt").unlink()
    (error,) = findings(repo)
    assert "config.pbtxt is missing" in error.message


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", "--model-repository", str(ROOT / "model_repository")]) == 0
    repo = make_repo(tmp_path, GOOD.replace("max_batch_size: 4", "max_batch_size: 0"))
    assert main(["check-config", "--model-repository", str(repo)]) == 2
    err = capsys.readouterr().err
    assert "max_batch_size is 0" in err and "1 error(s)" in err
    assert main(["check-config", "--model-repository", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_up_refuses_to_start_on_config_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = make_repo(tmp_path, GOOD.replace("max_batch_size: 4", "max_batch_size: 1"))
    code = main(
        ["up", "--detach", "--model-repository", str(repo), "--state-dir", str(tmp_path / "state")]
    )
    assert code == 2
    assert "refusing to start" in capsys.readouterr().err
    assert not (tmp_path / "state" / "stack.json").exists()
