"""Prometheus exporter for Triton's dynamic batcher."""
