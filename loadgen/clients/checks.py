"""What makes an answer right: the outputs the metadata promises, with their datatypes and
shapes, and for the add model the exact sum (checked by the clients as a bytes compare)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from loadgen.clients.payloads import DTYPES
from loadgen.clients.target import TensorSpec

WRONG_SUM = "wrong answer: OUTPUT_SUM != INPUT_A + INPUT_B"


def wrong_output(name: str) -> str:
    """The error of an output that differs from the input data's expected value."""
    return f"wrong answer: {name} differs from the data's validation_data"


def _fits(shape: Sequence[int], expected: Sequence[int]) -> bool:
    return len(shape) == len(expected) and all(
        e in (-1, s) for s, e in zip(shape, expected, strict=True)
    )


def check_outputs(
    got: Sequence[tuple[str, str, Sequence[int], int | None]],
    expected: Sequence[TensorSpec],
    lead: tuple[int, ...],
) -> str | None:
    """``got``: (name, datatype, shape, byte size or None) per output of one response.

    Returns an error kind, or None if every expected output is there as promised.
    """
    by_name = {name: (dtype, tuple(shape), size) for name, dtype, shape, size in got}
    for spec in expected:
        if spec.name not in by_name:
            return f"bad answer: output {spec.name} missing"
        dtype, shape, size = by_name[spec.name]
        if dtype != spec.datatype:
            return f"bad answer: {spec.name} is {dtype}, metadata says {spec.datatype}"
        want = lead + spec.shape
        if not _fits(shape, want):
            return f"bad answer: {spec.name} has shape {list(shape)}, metadata says {list(want)}"
        if size is not None and dtype in DTYPES:
            if size != math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize:
                return f"bad answer: {spec.name} carries {size} bytes for shape {list(shape)}"
    return None
