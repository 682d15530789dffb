"""The tracing-crash version gate and the safe region, on recorded ``GET /v2`` answers.

The fixtures (``data/server_v2/``, see its README) are Triton's answers in its own format;
the gate reads the ``version`` field. Windows are planned against the limits the module
holds (from bench/trace_safety.py's map), so the assertions follow the limits, not copies
of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.tracing import Sampler
from tritonapi.client import TritonClient
from tritonapi.tracesafety import (
    BOUND,
    MAX_COUNT,
    Load,
    UnsafeTrace,
    continuous_allowed,
    has_fix,
    parse_version,
    plan,
    safe_count,
)

DATA = Path(__file__).parent / "data" / "server_v2"
# Release -> whether it has server PR #8144 (first shipped in 2.57.0, container 25.04).
RELEASES = {"2.51.0": False, "2.56.0": False, "2.57.0": True, "2.58.0": True, "2.63.0": True}


def answer(release: str) -> dict[str, object]:
    body = json.loads((DATA / f"triton-{release}.json").read_text())
    assert body["name"] == "triton" and "trace" in body["extensions"]
    return body


@pytest.mark.parametrize(("release", "fixed"), sorted(RELEASES.items()))
def test_the_gate_opens_from_2_57_on(release: str, fixed: bool) -> None:
    version = str(answer(release)["version"])
    assert has_fix(version) is fixed
    why = continuous_allowed(version)
    if fixed:
        assert why == ""
    else:
        assert version in why and "2.57" in why and "\n" not in why


@pytest.mark.parametrize("text", ["", "triton", "v2", "2", "latest"])
def test_an_unreadable_version_counts_as_unfixed(text: str) -> None:
    assert parse_version(text) is None
    assert not has_fix(text)
    assert continuous_allowed(text)


def test_versions_compare_as_numbers_not_text() -> None:
    assert parse_version("2.9.0") == (2, 9, 0) and not has_fix("2.9.0")
    assert parse_version("2.100") == (2, 100, 0) and has_fix("2.100")
    assert has_fix("3.0.0")


def test_a_fixed_release_takes_any_window_up_to_the_disk_bound() -> None:
    version = str(answer("2.63.0")["version"])
    assert plan(version, Load.closed(64), MAX_COUNT, shrink=False).count == MAX_COUNT
    with pytest.raises(UnsafeTrace, match="give 1 to"):
        plan(version, None, MAX_COUNT + 1)


@pytest.mark.parametrize("load", [None, Load.closed(1), Load.closed(8), Load.closed(256)])
def test_2_51_shrinks_a_window_past_the_safe_region_or_refuses_it(load: Load | None) -> None:
    version = str(answer("2.51.0")["version"])
    limit = safe_count(version, load)
    assert 1 <= limit < MAX_COUNT
    inside = plan(version, load, limit, shrink=False)
    assert (inside.count, inside.note) == (limit, "")
    shrunk = plan(version, load, limit + 1, shrink=True)
    assert shrunk.count == limit
    assert "shrunk" in shrunk.note and "2.51.0" in shrunk.note and "2.57" in shrunk.note
    with pytest.raises(UnsafeTrace) as refused:
        plan(version, load, limit + 1, shrink=False)
    line = str(refused.value)
    # One line naming the version, the bound and the fix.
    assert "\n" not in line and "2.51.0" in line and f"{BOUND:.0%}" in line and "2.57" in line


def test_sampling_does_not_lengthen_a_2_51_window() -> None:
    """The limit is on traced requests: 1 in N traces the same count over N times the load."""
    limit = safe_count("2.51.0", Load.closed(8))
    assert plan("2.51.0", Load.closed(8), limit, rate=100).count == limit
    with pytest.raises(UnsafeTrace):
        plan("2.51.0", Load.closed(8), limit + 1, rate=100, shrink=False)


def test_heavier_load_never_gets_a_larger_window() -> None:
    counts = [safe_count("2.51.0", Load(in_flight)) for in_flight in (0, 1, 2, 4, 8, 16, 256)]
    assert counts == sorted(counts, reverse=True)
    assert safe_count("2.51.0", None) == min(counts)


@pytest.mark.parametrize(("release", "fixed"), sorted(RELEASES.items()))
def test_the_sampler_asks_only_a_fixed_release(release: str, fixed: bool) -> None:
    """Nothing listens at the client's URL: a sampler that asked would record the error."""
    version = str(answer(release)["version"])
    client = TritonClient("http://127.0.0.1:9", timeout_s=0.5)
    sampler = Sampler(client, 100, version_of=lambda: version)
    sampler.ensure(now=0.0)
    assert not sampler.on
    if fixed:
        assert sampler.state.startswith("trace sampling not set:")
    else:
        assert sampler.state == continuous_allowed(version)
