"""Real input data: perf_analyzer's ``--input-data`` JSON file, or a folder of ``.npy`` files.

The JSON format is perf_analyzer's, so files users already have work unchanged::

    {"data": [{"INPUT0": [1, 2, 3]},                                  # flat, row-major
              {"INPUT0": {"content": [1, 2, 3], "shape": [3]}},       # with its shape
              {"INPUT0": {"b64": "AQAAAAIAAAADAAAA"}}],               # raw little-endian
     "validation_data": [{"OUTPUT0": [1, 2, 3]}, ...]}                # optional, per entry

Each ``data`` entry is one batch-1 request (BYTES contents are strings); a request of
``--batch-size B`` stacks B consecutive entries, as perf_analyzer does. A folder holds one
``NAME.npy`` per input, its first axis the entries, and optionally one per output: the
expected answers. Expected outputs are compared byte for byte; without them answers are
checked for shape and datatype only, and the run's summary says so.
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.clients.payloads import (
    DTYPES,
    POOL_BYTES,
    PoolRequest,
    Tensor,
    tensor_bytes,
)
from loadgen.clients.target import ModelSpec, TensorSpec
from loadgen.errors import LoadgenError
from loadgen.limits import MAX_REQUEST_BYTES

Entry = dict[str, np.ndarray]


def _array(value: Any, spec: TensorSpec, given: tuple[int, ...] | None, where: str) -> np.ndarray:
    """One tensor of one entry, shaped: its own shape, else --shape, else the model's."""
    shape = None
    if isinstance(value, dict):
        if "shape" in value:
            shape = tuple(int(d) for d in value["shape"])
        if "b64" in value:
            raw = base64.b64decode(value["b64"], validate=True)
            if spec.datatype == "BYTES":
                array = np.array([raw], dtype=object)
            else:
                array = np.frombuffer(raw, DTYPES[spec.datatype])
        elif "content" in value:
            array = _from_list(value["content"], spec, where)
        else:
            raise ValueError(f"{where}: an object needs 'content' or 'b64'")
    else:
        array = _from_list(value if isinstance(value, list) else [value], spec, where)
    if shape is None:
        if array.ndim == len(spec.shape) and all(
            m in (-1, d) for m, d in zip(spec.shape, array.shape, strict=True)
        ):
            shape = tuple(array.shape)
        elif given is not None:
            shape = given
        elif all(d >= 0 for d in spec.shape):
            shape = spec.shape
        elif array.ndim > 1:
            raise ValueError(
                f"{where}: shape {list(array.shape)} does not fit the model's {list(spec.shape)}"
            )
        else:
            raise ValueError(
                f"{where}: a flat list for variable dims {list(spec.shape)} needs a "
                '"shape" next to its "content", or --shape'
            )
    if math.prod(shape) != array.size:
        raise ValueError(f"{where}: {array.size} values do not fill shape {list(shape)}")
    if len(shape) != len(spec.shape) or any(
        m not in (-1, d) for m, d in zip(spec.shape, shape, strict=True)
    ):
        raise ValueError(
            f"{where}: shape {list(shape)} does not fit the model's {list(spec.shape)}"
        )
    return array.reshape(shape)


def _from_list(content: Any, spec: TensorSpec, where: str) -> np.ndarray:
    if spec.datatype == "BYTES":
        flat = np.array(content, dtype=object).reshape(-1)
        return np.array([str(e).encode() for e in flat], dtype=object)
    array = np.array(content)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{where}: {spec.datatype} needs numbers, got {array.dtype.kind!r} values")
    target = np.dtype(DTYPES[spec.datatype])
    converted = array.astype(target)
    if not np.array_equal(converted.astype(array.dtype), array) and target.kind != "f":
        raise ValueError(f"{where}: values do not fit {spec.datatype}")
    return converted


def read_json(
    path: Path, model: ModelSpec, shapes: dict[str, tuple[int, ...]]
) -> tuple[list[Entry], list[Entry]]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise LoadgenError(f"--input-data {path}: not a readable JSON file ({exc})") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list) or not data:
        raise LoadgenError(
            f'--input-data {path}: no "data" list; the file needs perf_analyzer\'s format '
            '{"data": [{"INPUT": [...]}, ...]}'
        )
    validation = doc.get("validation_data") or []
    if validation and len(validation) != len(data):
        raise LoadgenError(
            f"--input-data {path}: {len(validation)} validation_data entries for "
            f"{len(data)} data entries (one each, or none)"
        )
    entries = [_entry(e, model.inputs, shapes, f"{path} data[{k}]") for k, e in enumerate(data)]
    expected = [
        _entry(e, model.outputs, {}, f"{path} validation_data[{k}]", partial=True)
        for k, e in enumerate(validation)
    ]
    return entries, expected


def _entry(
    item: Any,
    specs: tuple[TensorSpec, ...],
    shapes: dict[str, tuple[int, ...]],
    where: str,
    partial: bool = False,
) -> Entry:
    if isinstance(item, list):
        raise LoadgenError(f"--input-data {where}: a list of steps is a sequence model's data")
    if not isinstance(item, dict):
        raise LoadgenError(f"--input-data {where}: each entry must be an object NAME -> values")
    by_name = {s.name: s for s in specs}
    unknown = sorted(set(item) - set(by_name))
    if unknown:
        raise LoadgenError(
            f"--input-data {where}: the model has no tensor {unknown[0]!r} "
            f"(it has {', '.join(sorted(by_name))})"
        )
    missing = [] if partial else [n for n in by_name if n not in item]
    if missing:
        raise LoadgenError(f"--input-data {where}: no values for input {missing[0]!r}")
    out = {}
    for name, value in item.items():
        try:
            out[name] = _array(value, by_name[name], shapes.get(name), f"{where}.{name}")
        except (ValueError, TypeError, OverflowError) as exc:
            raise LoadgenError(f"--input-data {exc}") from None
    return out


def read_folder(path: Path, model: ModelSpec) -> tuple[list[Entry], list[Entry]]:
    """``NAME.npy`` per input (first axis: the entries), and per output where expected."""
    arrays: dict[str, np.ndarray] = {}
    for spec in (*model.inputs, *model.outputs):
        file = path / f"{spec.name}.npy"
        if not file.exists():
            if spec in model.inputs:
                raise LoadgenError(
                    f"--input-data {path}: no {file.name} for input {spec.name} "
                    "(the folder needs one NAME.npy per input, first axis the requests)"
                )
            continue
        try:
            array = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise LoadgenError(f"--input-data {file}: not a .npy file ({exc})") from None
        if array.ndim != len(spec.shape) + 1 or any(
            m not in (-1, d) for m, d in zip(spec.shape, array.shape[1:], strict=True)
        ):
            raise LoadgenError(
                f"--input-data {file}: shape {list(array.shape)} is not N requests of the "
                f"model's {list(spec.shape)}"
            )
        if spec.datatype == "BYTES":
            if array.dtype.kind not in "SU":
                raise LoadgenError(f"--input-data {file}: {spec.name} is BYTES; save strings")
            array = np.vectorize(
                lambda s: s.encode() if isinstance(s, str) else bytes(s), otypes=[object]
            )(array)
        elif array.dtype != np.dtype(DTYPES[spec.datatype]):
            raise LoadgenError(
                f"--input-data {file}: dtype {array.dtype} is not the model's {spec.datatype}"
            )
        arrays[spec.name] = array
    counts = {len(a) for a in arrays.values()}
    if len(counts) != 1 or 0 in counts:
        raise LoadgenError(f"--input-data {path}: the .npy files hold different numbers of rows")
    n = counts.pop()
    inputs = {s.name for s in model.inputs}
    entries = [{k: a[i] for k, a in arrays.items() if k in inputs} for i in range(n)]
    expected = [{k: a[i] for k, a in arrays.items() if k not in inputs} for i in range(n)]
    return entries, expected if any(expected) else []


def data_pool(
    source: str, model: ModelSpec, batch_size: int, shapes: dict[str, tuple[int, ...]]
) -> tuple[list[PoolRequest], str]:
    """The requests a data file or folder makes, and what their answers are checked for."""
    path = Path(source)
    if path.is_dir():
        entries, expected = read_folder(path, model)
    elif path.is_file():
        entries, expected = read_json(path, model, shapes)
    else:
        raise LoadgenError(f"--input-data {source}: no such file or folder (or use random or zero)")
    lead = model.max_batch_size > 0
    pool, total, n = [], 0, len(entries)
    for j in range(n):
        rows = [(j * batch_size + r) % n for r in range(batch_size)]
        tensors, parts = [], []
        for spec in model.inputs:
            arrays = [entries[r][spec.name] for r in rows]
            if len({a.shape for a in arrays}) > 1:
                raise LoadgenError(
                    f"--input-data {source}: entries {rows[0]}..{rows[-1]} of {spec.name} differ "
                    f"in shape, so they cannot share a request of --batch-size {batch_size}"
                )
            array = np.stack(arrays) if lead else arrays[0]
            data = tensor_bytes(spec.datatype, array)
            tensors.append(Tensor(spec.name, spec.datatype, tuple(array.shape), len(data)))
            parts.append(data)
        inputs = b"".join(parts)
        if len(inputs) > MAX_REQUEST_BYTES:
            raise LoadgenError(
                f"--input-data {source}: request {j} carries {len(inputs)} bytes, past the "
                f"{MAX_REQUEST_BYTES} bound"
            )
        total += len(inputs)
        if total > POOL_BYTES:
            raise LoadgenError(f"--input-data {source}: more than {POOL_BYTES} bytes of requests")
        want: dict[str, bytes] = {}
        if expected:
            for spec in model.outputs:
                arrays = [expected[r][spec.name] for r in rows if spec.name in expected[r]]
                if len(arrays) == len(rows):
                    array = np.stack(arrays) if lead else arrays[0]
                    want[spec.name] = tensor_bytes(spec.datatype, array)
        pool.append(PoolRequest(tuple(tensors), inputs, want))
    checks = (
        f"outputs against the data's expected values ({', '.join(sorted(pool[0].expected))})"
        if expected and isinstance(pool[0].expected, dict) and pool[0].expected
        else ""
    )
    return pool, checks
