"""bench/outside_time.py refuses the held-out models before it starts anything: they judge
the advisor and are never used to decide how it fits (docs/advisor.md)."""

from __future__ import annotations

import pytest

from bench import outside_time


def test_a_held_out_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        outside_time.main(["--model", "ho_tokens"])
    assert exited.value.code == 2
    assert "ho_tokens is held out (bench/models/heldout/): never tune on it" in (
        capsys.readouterr().err
    )
