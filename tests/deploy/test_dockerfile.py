"""The Dockerfile, read by BuildKit's own parser (PyPI `dockerfile`), and its build steps
replayed without Docker: the dependency step's Python, and `pip install .` on the build
context that .dockerignore leaves."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import dockerfile
import pytest
from packaging.requirements import Requirement

from stacksettings import ROOT

COMMANDS = dockerfile.parse_file(str(ROOT / "Dockerfile"))


def instructions(cmd: str) -> list[dockerfile.Command]:
    return [c for c in COMMANDS if c.cmd.upper() == cmd]


def test_base_image_is_pinned_to_a_patch_release() -> None:
    (base,) = instructions("FROM")
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", base.value[0]), base.value


def test_the_services_run_as_a_numeric_non_root_user() -> None:
    # Numeric, so that Kubernetes' runAsNonRoot can check it without /etc/passwd.
    user = instructions("USER")[-1].value[0]
    assert user.isdigit() and int(user) != 0
    assert f"--uid {user}" in instructions("RUN")[-1].value[0]


def test_the_dependency_step_installs_exactly_the_project_dependencies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    step = instructions("RUN")[0].value[0]
    match = re.fullmatch(r'python -c "(.*)"', step)
    assert match, step
    installed: list[list[str]] = []
    monkeypatch.setattr(subprocess, "check_call", lambda argv: installed.append(argv))
    monkeypatch.chdir(ROOT)
    exec(match.group(1), {})  # the step's own code, with pip replaced by a recorder
    # The installed project's own metadata, read from the same pyproject.toml.
    requires = metadata.requires("triton-batchscope") or []
    deps = [r for r in requires if "extra ==" not in r]
    assert len(installed) == 1 and installed[0][:4] == [sys.executable, "-m", "pip", "install"]
    assert sorted(str(Requirement(d)) for d in installed[0][4:]) == sorted(
        str(Requirement(d)) for d in deps
    )


def _pattern(rule: str) -> re.Pattern[str]:
    """A .dockerignore line as Docker reads it: relative to the context root, `*` within one
    path element, `**/` any depth; a matched folder excludes what is inside."""
    text = re.escape(rule.strip("/"))
    text = text.replace(r"\*\*/", "(?:.*/)?").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
    return re.compile(rf"{text}(?:/.*)?")


def build_context(dest: Path) -> list[str]:
    """Copy the tracked files that .dockerignore lets into the build context."""
    rules = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    patterns = [_pattern(r) for r in rules]
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    kept = [f for f in tracked if not any(p.fullmatch(f) for p in patterns)]
    for name in kept:
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return kept


def test_the_build_context_installs_every_package(tmp_path: Path) -> None:
    context = tmp_path / "context"
    kept = build_context(context)
    assert not any(f.startswith(("tests/", ".venv", "deploy/")) for f in kept)
    assert "model_repository/batch_add_model/config.pbtxt" in kept  # for the k8s initContainer
    # `pip install --no-deps .` of the image, as a wheel, offline.
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(tmp_path / "dist"), str(context)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    ours = "stack exporter rules loadgen runs dashboard deploygen advisor batchscope".split()
    packages = [p for p in ours if (ROOT / p).is_dir()]
    for package in packages:
        modules = {n for n in names if n.startswith(f"{package}/") and n.endswith(".py")}
        assert modules == {
            str(p.relative_to(ROOT)) for p in (ROOT / package).rglob("*.py") if p.is_file()
        }, package
    assert "rules/generated/alerts.yml" in names
    # What the image runs: `batchscope exporter`, `batchscope load` (its console script).
    assert {"batchscope/commands/exporter.py", "batchscope/commands/load.py"} <= names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "batchscope = batchscope.main:main" in scripts
