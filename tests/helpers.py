"""Helpers for tests: requests to the add model, and its statistics."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import tritonclient.http as httpclient

from tritonapi.client import TritonClient
from tritonapi.stats import ModelStats


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


def model_stats(url: str, model: str) -> ModelStats:
    """The model's cumulative statistics (the newest version) from Triton's statistics API."""
    return TritonClient(url).model_stats(model)


T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T], timeout_s: float = 30.0) -> T:
    """``check()``'s first truthy value, polled every 0.5 s; AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:.0f}s: {what}")
        time.sleep(0.5)
