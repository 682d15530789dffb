"""Every file `batchscope rules` writes, from the one settings file: the recording and alert
rules and alertmanager.yml, as compose and Kubernetes use them from rules/generated/."""

from __future__ import annotations

from pathlib import Path

from rules import alertmanager_config, rulegen, rulesettings


def generated_files(settings_path: Path) -> dict[str, str]:
    """File name -> text of the rule files and alertmanager.yml for ``settings_path``."""
    settings = rulesettings.load(settings_path)
    return {**rulegen.render(settings), "alertmanager.yml": alertmanager_config.render(settings)}
