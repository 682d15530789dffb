"""Triton's HTTP API, its ``/metrics`` text and its model configuration, typed.

The one place that talks to Triton over HTTP: the exporter, the load generator, the
advisor, the dashboard, the launcher and the benchmarks all read Triton through
this package, and it imports none of them.

- :mod:`tritonapi.client`: health, metadata, config, repository index, statistics and
  trace settings (:class:`TritonClient`), with one error type per way a call fails;
- :mod:`tritonapi.modelconfig`: one typed model configuration, built from Triton's own
  ``ModelConfig`` protobuf whether it comes from ``config.pbtxt`` or the config endpoint;
- :mod:`tritonapi.stats`: the statistics API as comparable values (deltas, resets);
- :mod:`tritonapi.metrics`: the series taken from Triton's Prometheus text.
"""

from tritonapi.client import (
    TritonBadResponse,
    TritonClient,
    TritonError,
    TritonHTTPError,
    TritonUnreachable,
    metrics_text,
    newest_version,
)
from tritonapi.modelconfig import ModelConfig
from tritonapi.stats import ModelStats

__all__ = [
    "ModelConfig",
    "ModelStats",
    "TritonBadResponse",
    "TritonClient",
    "TritonError",
    "TritonHTTPError",
    "TritonUnreachable",
    "metrics_text",
    "newest_version",
]
