"""Request inputs made from the model's metadata, and what each answer must look like.

Two paths. Fixed-shape numeric inputs (the common case, and the add model) are made in
chunks with numpy (one vectorized step for many requests) and kept as bytes, so that
sending a request costs one slice and every request shares one encoded head; for the add
model the expected ``OUTPUT_SUM`` bytes are computed the same way, so checking an answer is
a bytes compare. Anything whose requests differ in size (BYTES inputs, a shape range,
real input data) goes through a pool of ready requests (``PoolPayloads``), each with its
own tensors, built before the run and taken in order or sampled with the seed: perf_analyzer
too makes its inputs once and reuses them.

BYTES tensors travel in Triton's serialization on both protocols (HTTP binary extension
and gRPC ``raw_input_contents``): each element a 4-byte little-endian length and its bytes.
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Mapping, Sequence
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
POOL = 256  # distinct generated requests when requests differ in size (cycled or sampled)
POOL_BYTES = 256 * 1024 * 1024  # bound on a pool's memory (a data file's too)
# Generated strings: ASCII letters and digits plus a few multi-byte characters, so that
# a text model meets real UTF-8 (lengths count characters, not bytes).
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 éüßçñ中文字日本語"

Dim = int | tuple[int, int]  # a size, or a range LO..HI (inclusive) sampled per request
Expected = bytes | dict[str, bytes]  # OUTPUT_SUM's bytes, or each validated output's


@dataclass(frozen=True)
class Tensor:
    """A tensor of one request: name, KServe datatype, full shape (with batch dimension),
    and for BYTES its serialized size (numeric sizes follow from the shape)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    size: int = -1

    @property
    def nbytes(self) -> int:
        if self.size >= 0:
            return self.size
        return math.prod(self.shape) * np.dtype(DTYPES[self.datatype]).itemsize


@dataclass(frozen=True)
class Generation:
    """How generated values are made: per input a value range [LO, HI) or zeros, and for
    BYTES inputs a length range (characters) or one given string."""

    ranges: Mapping[str, tuple[float, float]]
    zero: bool = False
    string_length: tuple[int, int] = (16, 16)
    string_data: str | None = None


def parse_dims(text: str, flag: str) -> tuple[Dim, ...]:
    """``4,8`` or ``4:64,8``: sizes, each a number or an inclusive range LO:HI."""
    dims: list[Dim] = []
    try:
        for part in text.split(","):
            if ":" in part:
                lo, hi = (int(x) for x in part.split(":"))
                dims.append(lo if lo == hi else (lo, hi))
            else:
                dims.append(int(part))
    except ValueError:
        raise LoadgenError(
            f"{flag}: {text!r} is not a comma-separated list of sizes (each N or LO:HI)"
        ) from None
    for d in dims:
        lo, hi = (d, d) if isinstance(d, int) else d
        if lo <= 0 or hi < lo:
            raise LoadgenError(f"{flag}: sizes must be positive and LO <= HI (got {text})")
    return tuple(dims)


def dims_text(dims: Sequence[Dim]) -> str:
    return ",".join(str(d) if isinstance(d, int) else f"{d[0]}:{d[1]}" for d in dims)


def _resolve(spec: TensorSpec, dims: tuple[Dim, ...] | None, dtype: str | None) -> TensorSpec:
    if dtype is not None and dtype != spec.datatype:
        raise LoadgenError(
            f"--dtype {spec.name}={dtype} does not match the model, which takes {spec.datatype}"
        )
    if spec.datatype not in DTYPES and spec.datatype != "BYTES":
        raise LoadgenError(
            f"input {spec.name} has datatype {spec.datatype}, which loadgen cannot generate"
        )
    if dims is None:
        if any(d < 0 for d in spec.shape):
            raise LoadgenError(
                f"input {spec.name} has variable dims {list(spec.shape)}: set them with "
                f"--shape {spec.name}="
                + ",".join("4" if d < 0 else str(d) for d in spec.shape)
                + " (or a range such as 4:64)"
            )
        return spec
    fits = len(dims) == len(spec.shape) and all(
        m == -1 or (isinstance(d, int) and d == m) for m, d in zip(spec.shape, dims, strict=True)
    )
    if not fits:
        raise LoadgenError(
            f"--shape {spec.name}={dims_text(dims)} does not match the model's shape "
            f"{list(spec.shape)} (-1 = any size; only those take a range)"
        )
    return TensorSpec(
        spec.name, spec.datatype, tuple(d if isinstance(d, int) else d[1] for d in dims)
    )


def check_names(model: ModelSpec, flag: str, given: Sequence[str]) -> None:
    names = {t.name for t in model.inputs}
    unknown = sorted(set(given) - names)
    if unknown:
        raise LoadgenError(
            f"{flag}: model {model.name!r} has no input {unknown[0]!r} "
            f"(inputs: {', '.join(sorted(names))})"
        )


def check_batch(model: ModelSpec, batch_size: int) -> None:
    if model.max_batch_size == 0 and batch_size != 1:
        raise LoadgenError(f"--batch-size: model {model.name!r} does not batch (max_batch_size 0)")
    if model.max_batch_size and not 1 <= batch_size <= model.max_batch_size:
        raise LoadgenError(
            f"--batch-size {batch_size} is outside 1..{model.max_batch_size} "
            f"(the max_batch_size of {model.name!r})"
        )


def request_tensors(
    model: ModelSpec,
    batch_size: int,
    shapes: Mapping[str, tuple[Dim, ...]],
    dtypes: Mapping[str, str],
    generation: Generation | None = None,
) -> tuple[list[Tensor], list[TensorSpec]]:
    """Each input of one request, checked against the metadata; and the expected outputs.
    With shape ranges the tensors are the largest request's (what the size bound checks)."""
    check_names(model, "--shape", list(shapes))
    check_names(model, "--dtype", list(dtypes))
    check_batch(model, batch_size)
    gen = generation or Generation({})
    check_names(model, "--range", list(gen.ranges))
    lead = (batch_size,) if model.max_batch_size else ()
    tensors = []
    for spec in model.inputs:
        resolved = _resolve(spec, shapes.get(spec.name), dtypes.get(spec.name))
        shape = lead + resolved.shape
        size = -1
        if spec.datatype == "BYTES":
            longest = (
                len(gen.string_data.encode())
                if gen.string_data is not None
                else 4 * gen.string_length[1]  # at most 4 UTF-8 bytes a character
            )
            size = math.prod(shape) * (4 + longest)
        elif spec.name in gen.ranges:
            check_range(spec.name, spec.datatype, gen.ranges[spec.name])
        tensors.append(Tensor(spec.name, spec.datatype, shape, size))
    total = sum(t.nbytes for t in tensors)
    if total > MAX_REQUEST_BYTES:
        raise LoadgenError(
            f"one request would carry {total} bytes, past the {MAX_REQUEST_BYTES} bound"
        )
    return tensors, list(model.outputs)


def check_range(name: str, datatype: str, bounds: tuple[float, float]) -> None:
    """A --range must fit the input's datatype: LO < HI, values LO..HI-1 representable."""
    lo, hi = bounds
    flag = f"--range {name}={lo:g}:{hi:g}"
    if datatype == "BYTES":
        raise LoadgenError(f"{flag}: {name} is a BYTES input; use --string-length for strings")
    if not lo < hi:
        raise LoadgenError(f"{flag}: LO must be below HI (values are drawn from [LO, HI))")
    dtype = np.dtype(DTYPES[datatype])
    if dtype.kind == "f":
        top = float(np.finfo(dtype).max)
        if not (math.isfinite(lo) and math.isfinite(hi)) or max(abs(lo), abs(hi)) > top:
            raise LoadgenError(f"{flag}: outside what {datatype} holds (±{top:g})")
        return
    if dtype.kind == "b":
        low, high = 0, 1
    else:
        info = np.iinfo(dtype)
        low, high = int(info.min), int(info.max)
    if lo != int(lo) or hi != int(hi) or lo < low or hi - 1 > high:
        raise LoadgenError(
            f"{flag}: {datatype} holds whole numbers {low}..{high}, so LO:HI must lie in "
            f"{low}:{high + 1}"
        )


def _random(
    rng: np.random.Generator,
    datatype: str,
    shape: tuple[int, ...],
    bounds: tuple[float, float] | None = None,
    zero: bool = False,
) -> np.ndarray:
    dtype = np.dtype(DTYPES[datatype])
    if zero and bounds is None:
        return np.zeros(shape, dtype)
    if bounds is not None:
        lo, hi = bounds
        if dtype.kind == "f":
            # [LO, HI) in float64, then clipped: rounding to FP16 must not reach HI or inf.
            values = rng.uniform(lo, hi, shape).astype(dtype)
            return np.clip(values, dtype.type(lo), np.nextafter(dtype.type(hi), dtype.type(lo)))
        return rng.integers(int(lo), int(hi), shape).astype(dtype)
    if dtype.kind == "f":
        # Finite values of moderate size: the sum of two stays finite in FP16 too.
        return (rng.standard_normal(shape) * 100).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    info = np.iinfo(dtype)
    # A quarter of the range each, so that INPUT_A + INPUT_B cannot overflow.
    lo, hi = max(info.min // 4, -(2**30)), min(info.max // 4, 2**30)
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


def serialize_bytes(elements: Sequence[bytes]) -> bytes:
    """Triton's BYTES serialization: per element a 4-byte little-endian length, then it."""
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


def _strings(rng: np.random.Generator, count: int, gen: Generation) -> list[bytes]:
    if gen.string_data is not None:
        return [gen.string_data.encode()] * count
    lo, hi = gen.string_length
    if gen.zero:
        return [b"0" * lo] * count
    lengths = rng.integers(lo, hi, count, endpoint=True)
    picks = rng.integers(0, len(ALPHABET), int(lengths.sum()))
    out, at = [], 0
    for n in lengths:
        out.append("".join(ALPHABET[k] for k in picks[at : at + n]).encode())
        at += n
    return out


def tensor_bytes(datatype: str, array: np.ndarray) -> bytes:
    """One tensor's wire bytes: numeric little-endian row-major, BYTES serialized."""
    if datatype == "BYTES":
        flat = array.reshape(-1)
        return serialize_bytes([e if isinstance(e, bytes) else str(e).encode() for e in flat])
    return np.ascontiguousarray(array, DTYPES[datatype]).tobytes()


class Payloads:
    """Request ``i``'s input bytes (all inputs back to back, in metadata order) and, for the
    add model, the bytes its ``OUTPUT_SUM`` must have. Fixed-shape numeric inputs only."""

    varies = False

    def __init__(
        self,
        model: ModelSpec,
        tensors: list[Tensor],
        seed: int | None = None,
        generation: Generation | None = None,
    ) -> None:
        self.tensors = tensors
        self.generation = generation or Generation({})
        self.verify_sum = model.is_add_model
        self.request_bytes = sum(t.nbytes for t in tensors)
        self.rng = np.random.default_rng(seed)
        self._chunk = -1
        self._inputs = b""
        self._sums = b""
        self._sum_bytes = tensors[0].nbytes if self.verify_sum else 0
        self.taken = 0
        # Large requests come in smaller steps: 1,024 requests of 16 MiB would be 16 GiB.
        self.chunk = max(1, min(CHUNK, CHUNK_BYTES // max(1, self.request_bytes)))

    def _make(self, chunk: int) -> None:
        size, gen = self.chunk, self.generation
        arrays = {
            t.name: _random(
                self.rng, t.datatype, (size, *t.shape), gen.ranges.get(t.name), gen.zero
            )
            for t in self.tensors
        }
        rows = [arrays[t.name].reshape(size, -1).view(np.uint8) for t in self.tensors]
        self._inputs = np.hstack(rows).tobytes()
        if self.verify_sum:
            a, b = arrays["INPUT_A"], arrays["INPUT_B"]
            self._sums = (a + b).astype(a.dtype).tobytes()
        self._chunk = chunk

    def take(self, i: int) -> tuple[bytes, bytes, None]:
        """Request ``i``'s input bytes, its expected OUTPUT_SUM bytes (empty if not the add
        model) and None (every request has the client's tensors). Indices must not go
        backwards: chunks are made once, in order."""
        chunk, k = divmod(i, self.chunk)
        if chunk != self._chunk:
            self._make(chunk)
        self.taken += 1
        n, m = self.request_bytes, self._sum_bytes
        return self._inputs[k * n : (k + 1) * n], self._sums[k * m : (k + 1) * m], None

    def shapes_sent(self) -> dict[str, int]:
        return {shape_key(self.tensors): self.taken} if self.taken else {}


def shape_key(tensors: Sequence[Tensor]) -> str:
    """A request's shapes, as the report shows them: ``ids[1,12] mask[1,12]``."""
    return " ".join(f"{t.name}{list(t.shape)}".replace(" ", "") for t in tensors)


@dataclass(frozen=True)
class PoolRequest:
    tensors: tuple[Tensor, ...]
    inputs: bytes
    expected: Expected


class PoolPayloads:
    """Ready requests of differing sizes, taken in order (cycled) or sampled with the seed."""

    varies = True

    def __init__(
        self, pool: Sequence[PoolRequest], sample: bool, seed: int | None, checks: str
    ) -> None:
        self.pool = list(pool)
        self.sample = sample
        self.rng = np.random.default_rng(seed)
        self.checks = checks
        self.verify_sum = False
        self.counts: Counter[str] = Counter()
        self.keys = [shape_key(r.tensors) for r in self.pool]

    def take(self, i: int) -> tuple[bytes, Expected, tuple[Tensor, ...] | None]:
        k = int(self.rng.integers(len(self.pool))) if self.sample else i % len(self.pool)
        self.counts[self.keys[k]] += 1
        r = self.pool[k]
        return r.inputs, r.expected, r.tensors

    def shapes_sent(self) -> dict[str, int]:
        return dict(self.counts.most_common())


def generated_pool(
    model: ModelSpec,
    batch_size: int,
    shapes: Mapping[str, tuple[Dim, ...]],
    gen: Generation,
    seed: int | None,
) -> list[PoolRequest]:
    """Up to POOL generated requests with their shapes drawn from the ranges: inputs given
    the same range draw the same size in a request (token ids and their attention mask)."""
    rng = np.random.default_rng(seed)
    lead = (batch_size,) if model.max_batch_size else ()
    pool: list[PoolRequest] = []
    total = 0
    ranged = any(not isinstance(d, int) for dims in shapes.values() for d in dims)
    for _ in range(POOL if ranged or gen.string_length[0] != gen.string_length[1] else 16):
        drawn: dict[tuple[int, int], int] = {}
        tensors, parts = [], []
        for spec in model.inputs:
            dims = shapes.get(spec.name) or spec.shape
            shape = []
            for d in dims:
                if isinstance(d, int):
                    shape.append(d)
                else:
                    if d not in drawn:
                        drawn[d] = int(rng.integers(d[0], d[1], endpoint=True))
                    shape.append(drawn[d])
            full = lead + tuple(shape)
            if spec.datatype == "BYTES":
                data = serialize_bytes(_strings(rng, math.prod(full), gen))
            else:
                data = tensor_bytes(
                    spec.datatype,
                    _random(rng, spec.datatype, full, gen.ranges.get(spec.name), gen.zero),
                )
            tensors.append(Tensor(spec.name, spec.datatype, full, len(data)))
            parts.append(data)
        inputs = b"".join(parts)
        total += len(inputs)
        pool.append(PoolRequest(tuple(tensors), inputs, b""))
        if total > POOL_BYTES:
            break
    return pool
