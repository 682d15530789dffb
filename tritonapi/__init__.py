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

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

# Each name is imported from its module when first asked for, so that a module that needs
# only a small one (``tritonapi.modelname``, ``tritonapi.urls``) does not load the HTTP client
# and its dependencies: a command's flags are parsed before any of that is needed.
_HOME = {
    "TritonBadResponse": "tritonapi.client",
    "TritonClient": "tritonapi.client",
    "TritonError": "tritonapi.client",
    "TritonHTTPError": "tritonapi.client",
    "TritonUnreachable": "tritonapi.client",
    "metrics_text": "tritonapi.client",
    "newest_version": "tritonapi.client",
    "ModelConfig": "tritonapi.modelconfig",
    "ModelStats": "tritonapi.stats",
}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'tritonapi' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


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
