"""Request inputs generated from the model's metadata, random for every request, and what
each answer must look like.

Inputs are made in chunks with numpy (one vectorized step for many requests) and kept as
bytes, so that sending a request costs one slice. For the add model the expected
``OUTPUT_SUM`` bytes are computed the same way, so checking an answer is a bytes compare.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from loadgen.clients.target import ModelSpec, TensorSpec
from loadgen.errors import LoadgenError
from loadgen.limits import MAX_REQUEST_BYTES

DTYPES: dict[str, str] = {
    "BOOL": "?",
    "UINT8": "<u1",
    "UINT16": "<u2",
    "UINT32": "<u4",
    "UINT64": "<u8",
    "INT8": "<i1",
    "INT16": "<i2",
    "INT32": "<i4",
    "INT64": "<i8",
    "FP16": "<f2",
    "FP32": "<f4",
    "FP64": "<f8",
}
CHUNK = 1024  # requests generated per vectorized step...
CHUNK_BYTES = 8 * 1024 * 1024  # ...or fewer, so that one step holds at most about this much


@dataclass(frozen=True)
class Tensor:
    """A tensor of one request: name, KServe datatype, full shape (with batch dimension)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(DTYPES[self.datatype]).itemsize


def parse_dims(text: str, flag: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        raise LoadgenError(f"{flag}: {text!r} is not a comma-separated list of sizes") from None
    if any(d <= 0 for d in dims):
        raise LoadgenError(f"{flag}: sizes must be positive (got {text})")
    return dims


def _resolve(spec: TensorSpec, dims: tuple[int, ...] | None, dtype: str | None) -> TensorSpec:
    if dtype is not None and dtype != spec.datatype:
        raise LoadgenError(
            f"--dtype {spec.name}={dtype} does not match the model, which takes {spec.datatype}"
        )
    if spec.datatype not in DTYPES:
        raise LoadgenError(
            f"input {spec.name} has datatype {spec.datatype}, which loadgen cannot generate"
        )
    if dims is None:
        if any(d < 0 for d in spec.shape):
            raise LoadgenError(
                f"input {spec.name} has variable dims {list(spec.shape)}: set them with "
                f"--shape {spec.name}=" + ",".join("4" if d < 0 else str(d) for d in spec.shape)
            )
        return spec
    fits = len(dims) == len(spec.shape) and all(
        m in (-1, d) for m, d in zip(spec.shape, dims, strict=True)
    )
    if not fits:
        raise LoadgenError(
            f"--shape {spec.name}={','.join(map(str, dims))} does not match the model's shape "
            f"{list(spec.shape)} (-1 = any size)"
        )
    return TensorSpec(spec.name, spec.datatype, dims)


def request_tensors(
    model: ModelSpec,
    batch_size: int,
    shapes: Mapping[str, tuple[int, ...]],
    dtypes: Mapping[str, str],
) -> tuple[list[Tensor], list[TensorSpec]]:
    """Each input of one request, checked against the metadata; and the expected outputs."""
    names = {t.name for t in model.inputs}
    for flag, given in (("--shape", shapes), ("--dtype", dtypes)):
        unknown = sorted(set(given) - names)
        if unknown:
            raise LoadgenError(
                f"{flag}: model {model.name!r} has no input {unknown[0]!r} "
                f"(inputs: {', '.join(sorted(names))})"
            )
    if model.max_batch_size == 0 and batch_size != 1:
        raise LoadgenError(f"--batch-size: model {model.name!r} does not batch (max_batch_size 0)")
    if model.max_batch_size and not 1 <= batch_size <= model.max_batch_size:
        raise LoadgenError(
            f"--batch-size {batch_size} is outside 1..{model.max_batch_size} "
            f"(the max_batch_size of {model.name!r})"
        )
    lead = (batch_size,) if model.max_batch_size else ()
    tensors = []
    for spec in model.inputs:
        resolved = _resolve(spec, shapes.get(spec.name), dtypes.get(spec.name))
        tensors.append(Tensor(spec.name, spec.datatype, lead + resolved.shape))
    total = sum(t.nbytes for t in tensors)
    if total > MAX_REQUEST_BYTES:
        raise LoadgenError(
            f"one request would carry {total} bytes, past the {MAX_REQUEST_BYTES} bound"
        )
    return tensors, list(model.outputs)


def _random(rng: np.random.Generator, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    dtype = np.dtype(DTYPES[datatype])
    if dtype.kind == "f":
        # Finite values of moderate size: the sum of two stays finite in FP16 too.
        return (rng.standard_normal(shape) * 100).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    info = np.iinfo(dtype)
    # A quarter of the range each, so that INPUT_A + INPUT_B cannot overflow.
    lo, hi = max(info.min // 4, -(2**30)), min(info.max // 4, 2**30)
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


class Payloads:
    """Request ``i``'s input bytes (all inputs back to back, in metadata order) and, for the
    add model, the bytes its ``OUTPUT_SUM`` must have."""

    def __init__(self, model: ModelSpec, tensors: list[Tensor], seed: int | None = None) -> None:
        self.tensors = tensors
        self.verify_sum = model.is_add_model
        self.request_bytes = sum(t.nbytes for t in tensors)
        self.rng = np.random.default_rng(seed)
        self._chunk = -1
        self._inputs = b""
        self._sums = b""
        self._sum_bytes = tensors[0].nbytes if self.verify_sum else 0
        # Large requests come in smaller steps: 1,024 requests of 16 MiB would be 16 GiB.
        self.chunk = max(1, min(CHUNK, CHUNK_BYTES // max(1, self.request_bytes)))

    def _make(self, chunk: int) -> None:
        size = self.chunk
        arrays = {t.name: _random(self.rng, t.datatype, (size, *t.shape)) for t in self.tensors}
        rows = [arrays[t.name].reshape(size, -1).view(np.uint8) for t in self.tensors]
        self._inputs = np.hstack(rows).tobytes()
        if self.verify_sum:
            a, b = arrays["INPUT_A"], arrays["INPUT_B"]
            self._sums = (a + b).astype(a.dtype).tobytes()
        self._chunk = chunk

    def take(self, i: int) -> tuple[bytes, bytes]:
        """Request ``i``'s input bytes and its expected OUTPUT_SUM bytes (empty if not the add
        model). Indices must not go backwards: chunks are made once, in order."""
        chunk, k = divmod(i, self.chunk)
        if chunk != self._chunk:
            self._make(chunk)
        n, m = self.request_bytes, self._sum_bytes
        return self._inputs[k * n : (k + 1) * n], self._sums[k * m : (k + 1) * m]
