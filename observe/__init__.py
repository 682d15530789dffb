"""One way to watch a model: one sampler, one window type.

- :mod:`observe.sampler`: the one loop over Triton's statistics API (and its ``/metrics``
  after each count: the requests received, the pending gauge, GPUs), shared by the
  advisor, the doctor and the autopilot;
- :mod:`observe.window`: the one window type, whichever source filled it (the sampler,
  Prometheus, a stored load run);
- :mod:`observe.prometheus`: a window from the exporter's counters in Prometheus;
- :mod:`observe.storedrun`: stored load runs, read once, as windows;
- :mod:`observe.cpu`: the local Triton's CPU over a window;
- :mod:`observe.traces`: what Triton's trace settings and the exporter's traces say.
"""
