"""Fixtures shared by every test: the real stack, started once per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stack.supervisor import running
from stacksettings import Settings, isolated


@pytest.fixture(scope="session")
def stack_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return isolated(tmp_path_factory.mktemp("stack"))


@pytest.fixture(scope="session")
def running_stack(stack_settings: Settings) -> Iterator[Settings]:
    """Every service of the stack, started with the launcher's own code on free ports."""
    with running(stack_settings):
        yield stack_settings


@pytest.fixture(scope="session")
def triton_url(running_stack: Settings) -> str:
    return running_stack.url("triton_http")
