"""Helpers for tests: free ports and settings that isolate a stack in a temp folder."""

from __future__ import annotations

import os
import socket
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from stack.settings import PORTS, Settings, from_env


def free_ports(count: int) -> list[int]:
    """Ports free right now on loopback (held open together so they differ)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def make_settings(state_dir: Path) -> Settings:
    """Settings on free ports with their own state folder and 1 s scrapes.

    Only STACK_TRITON_VENV is taken from the environment: a developer's other
    STACK_* variables must not leak into tests.
    """
    env = {k: v for k, v in os.environ.items() if k == "STACK_TRITON_VENV"}
    ports = dict(zip(PORTS, free_ports(len(PORTS)), strict=True))
    return replace(from_env(env), state_dir=state_dir, ports=ports, scrape_interval_s=1.0)


def add_inputs(a: float, b: float) -> list[httpclient.InferInput]:
    """INPUT_A and INPUT_B of the add model, one row of one value each."""
    inputs = []
    for name, value in (("INPUT_A", a), ("INPUT_B", b)):
        tensor = httpclient.InferInput(name, [1, 1], "FP32")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
        inputs.append(tensor)
    return inputs


def infer_add(client: httpclient.InferenceServerClient, model: str, a: float, b: float) -> float:
    """One request to an add model; its OUTPUT_SUM."""
    return float(client.infer(model, add_inputs(a, b)).as_numpy("OUTPUT_SUM")[0, 0])
