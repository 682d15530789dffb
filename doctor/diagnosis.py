"""One model's diagnosis: its config as Triton loaded it, a window of its traffic (from
:mod:`observe`), what its traces say, and the findings of every check.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from doctor.checks import Finding, Prescription, ShapeMix, check
from observe.traces import trace_state, traces_read
from observe.window import Window
from tritonapi import ModelConfig, TritonClient


@dataclass
class Diagnosis:
    model: str
    config: ModelConfig
    window: Window | None
    traces: str
    findings: list[Finding]
    notes: list[str] = field(default_factory=list)
    # The one search's answer for this model and window (doctor.prescribe), which the
    # batching findings' fix lines come from; None when the search did not run.
    prescription: Prescription | None = None


def diagnose(
    client: TritonClient,
    model: str,
    window: Window | None,
    notes: Iterable[str] = (),
    exporter_url: str = "",
    mix: ShapeMix | None = None,
) -> Diagnosis:
    """Run every check on one model (its config as Triton loaded it) and its window.

    With ``exporter_url``, the batch traces the exporter holds for the model (if any) are
    summarised beside the trace setting. ``mix``: the shapes a stored load run of the model
    sent, for the shape-fragmentation check.
    """
    config = client.model_config(model)
    traces = trace_state(client, model)
    if exporter_url:
        traces = traces_read(exporter_url, config) or traces
    return Diagnosis(model, config, window, traces, check(config, window, mix), list(notes))
