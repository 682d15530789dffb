"""The troubleshooting guide as code: why isn't dynamic batching working?

Runs the checks of Triton's batching troubleshooting guide against a live Triton and its
telemetry, in the guide's order: the config (:func:`checks.check_config`), whether requests
overlap, what the batcher formed, and where latency goes. Each :class:`Finding` carries the
numbers it rests on and the fix as ``config.pbtxt`` lines; a healthy batcher gets none.

- :mod:`doctor.checks`: the checks, pure functions of a config and a window (the one
  window type, :class:`observe.window.Window`, whichever source filled it);
- :mod:`doctor.diagnosis`: one model's config, window, traces and findings;
- :mod:`doctor.report`: the text the CLI and the dashboard show;
- :mod:`doctor.checkup`: what ``batchscope doctor`` does, live or on a stored run.
"""

from doctor.checks import Finding, check
from doctor.diagnosis import Diagnosis, diagnose

__all__ = ["Diagnosis", "Finding", "check", "diagnose"]
