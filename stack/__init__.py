"""Local launcher for the batching observability stack (Triton, exporter, Prometheus, ...)."""
