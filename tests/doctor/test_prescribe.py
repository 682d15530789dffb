"""The doctor's fix lines from the advisor's search (simulated traffic, no server)."""

from __future__ import annotations

from advisor.config import from_model_config
from advisor.model import CpuModel, OpenLoop, ServiceModel
from advisor.predict import recommend
from doctor import check
from doctor.checks import CHANGE, KEEP
from doctor.diagnosis import Diagnosis
from doctor.prescribe import prescribe
from tests.doctor.test_checks import window
from tritonapi.modelconfig import parse_json

NO_DELAY = {
    "name": "m",
    "max_batch_size": 4,
    "dynamic_batching": {"preferred_batch_size": [2, 4], "max_queue_delay_microseconds": "0"},
}
# 100/s, every request alone: the rule of thumb asks for a delay of 10,000 µs.
ALONE = window(executions_by_size={1: 1000}, inferences=1000, executions=1000)


def diagnosis(config: dict[str, object]) -> Diagnosis:
    typed = parse_json(config)
    return Diagnosis("m", typed, ALONE, "traces off", check(typed, ALONE))


def test_a_kept_config_proposes_no_longer_delay() -> None:
    d = diagnosis(NO_DELAY)
    [finding] = d.findings
    assert finding.code == "delay-too-short"
    assert finding.fix == ("max_queue_delay_microseconds: 10000",)  # the checks' own
    # 100/s of 0.3 ms executions: batching cannot help, a delay only adds to the wait.
    rec = recommend(
        from_model_config(parse_json(NO_DELAY)),
        OpenLoop(100.0),
        ServiceModel(300e-6, 20e-6),
        0.010,
        CpuModel(),
        requests=1000,
        seeds=2,
    )
    assert rec.keep
    found = prescribe(d, rec)
    assert found.prescription is not None and found.prescription.verdict == KEEP
    assert "batching cannot help at this load" in found.prescription.text
    assert f"average batch {rec.current.mean_batch_size:.2f}" in found.prescription.text
    [fixed] = found.findings
    assert not any(line.startswith("max_queue_delay") for line in fixed.fix), fixed.fix
    assert fixed.proposal == found.prescription.text
    # What is wrong and why stays the checks'.
    assert fixed.explanation == finding.explanation and fixed.numbers == finding.numbers


def test_a_change_is_the_searchs_config() -> None:
    off = {"name": "m", "max_batch_size": 8}
    d = diagnosis(off)
    assert [f.code for f in d.findings] == ["batching-off"]
    # 1,600/s of 0.5 ms + 0.05 ms/item executions: alone, one instance serves under 1,000/s.
    rec = recommend(
        from_model_config(parse_json(off)),
        OpenLoop(1600.0),
        ServiceModel(500e-6, 50e-6),
        0.050,
        CpuModel(),
        requests=1000,
        seeds=2,
    )
    assert rec.best is not None and not rec.keep
    found = prescribe(d, rec)
    p = found.prescription
    assert p is not None and p.verdict == CHANGE
    assert p.config == rec.best.config.describe()
    assert found.findings[0].fix[1:] == tuple(rec.best.config.pbtxt().splitlines())
    assert p.interval is not None and p.interval[0] <= p.interval[1]
