"""Batching advisor: predict what a Triton dynamic-batching config will do, and recommend one.

The API the dashboard and the CLI use::

    from advisor import BatcherConfig, OpenLoop, ClosedLoop, CpuModel
    from advisor import fit_service_times, fit_traffic, predict, recommend

    service = fit_service_times(stats_delta)        # tritonapi.stats.ModelStats
    config = from_model_config(TritonClient(url).model_config(model))
    p = predict(config, OpenLoop(2000, cv=1.0), service, CpuModel(cores=2, request_s=1e-4))
    p.mean_batch_size, p.batch_size_distribution, p.queue_delay_p99_s, p.throughput_limit_per_s
    r = recommend(config, OpenLoop(2000), service, p99_bound_s=0.010)
    r.best.config.pbtxt(), r.gain_ratio

Modules: :mod:`advisor.config` (the batching config), :mod:`advisor.model` (service,
CPU and traffic models), :mod:`advisor.simulator` (the discrete-event batcher),
:mod:`advisor.fit` (fitting from Triton statistics or Prometheus),
:mod:`advisor.calibrate` (CPU costs from measured runs), :mod:`advisor.predict`
(predictions and the config search), :mod:`advisor.actions` (what ``batchscope advise``,
``predict`` and ``autopilot`` do).
"""

from advisor import costs, storedrun, verify
from advisor.config import BatcherConfig, from_model_config
from advisor.fit import fit_service_times, fit_traffic
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel, Traffic
from advisor.predict import Prediction, Recommendation, SearchSpace, predict, recommend

__all__ = [
    "BatcherConfig",
    "ClosedLoop",
    "CpuModel",
    "OpenLoop",
    "Prediction",
    "Recommendation",
    "SearchSpace",
    "ServiceModel",
    "Traffic",
    "costs",
    "storedrun",
    "verify",
    "fit_service_times",
    "fit_traffic",
    "from_model_config",
    "predict",
    "recommend",
]
