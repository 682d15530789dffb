"""The troubleshooting guide as code: why isn't dynamic batching working?

Runs the checks of Triton's batching troubleshooting guide against a live Triton and its
telemetry, in the guide's order: the config (:func:`checks.check_config`), whether requests
overlap, what the batcher formed, and where latency goes. Each :class:`Finding` carries the
numbers it rests on and the fix as ``config.pbtxt`` lines; a healthy batcher gets none.

- :mod:`doctor.window`: one window of traffic, whichever source it comes from;
- :mod:`doctor.checks`: the checks, pure functions of a config and a window;
- :mod:`doctor.observe`: reads the server (statistics API, ``/metrics``, Prometheus);
- :mod:`doctor.report`: the text the CLI and the dashboard show;
- :mod:`doctor.checkup`: what ``batchscope doctor`` does, live or on a stored run.
"""

from doctor.checks import Finding, check
from doctor.observe import (
    TRACES_OFF,
    Diagnosis,
    StatisticsSampler,
    diagnose,
    prometheus_window,
    sample_statistics,
)
from doctor.window import Window, from_statistics

__all__ = [
    "TRACES_OFF",
    "Diagnosis",
    "Finding",
    "StatisticsSampler",
    "Window",
    "check",
    "diagnose",
    "from_statistics",
    "prometheus_window",
    "sample_statistics",
]
