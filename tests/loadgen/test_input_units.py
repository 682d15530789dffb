"""The input options without a server: parsing, ranges against dtypes, BYTES serialization,
perf_analyzer's JSON forms, the pool's order, and stored params keeping them."""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.clients.inputdata import data_pool
from loadgen.clients.payloads import (
    Generation,
    PoolPayloads,
    _random,
    check_range,
    generated_pool,
    parse_dims,
    serialize_bytes,
)
from loadgen.clients.target import ModelSpec, TensorSpec
from loadgen.errors import LoadgenError
from loadgen.inputopts import InputOptions
from loadgen.results.params import RunParams

IDS = ModelSpec(
    "ids", "1", 8, (TensorSpec("IDS", "INT64", (-1,)),), (TensorSpec("SUM", "INT64", (1,)),)
)
TEXT_AND_MASK = ModelSpec(
    "tm",
    "1",
    4,
    (
        TensorSpec("TEXT", "BYTES", (1,)),
        TensorSpec("A", "INT32", (-1,)),
        TensorSpec("B", "INT32", (-1,)),
    ),
    (),
)


def test_dims_and_ranges_parse() -> None:
    assert parse_dims("3,4:64", "--shape") == (3, (4, 64))
    assert parse_dims("5:5", "--shape") == (5,)
    for bad in ("0", "8:4", "a", "4:"):
        with pytest.raises(LoadgenError, match="--shape"):
            parse_dims(bad, "--shape")
    opts = InputOptions.from_texts(shape=["A=2:9 B=2:9"], value_range=["A=0:10"])
    assert opts.shapes == (("A", ((2, 9),)), ("B", ((2, 9),)))
    assert opts.ranges == (("A", (0.0, 10.0)),)
    with pytest.raises(LoadgenError, match="LO < HI"):
        InputOptions.from_texts(value_range=["A=5:5"])
    with pytest.raises(LoadgenError, match="--string-length"):
        InputOptions.from_texts(string_length="9:3")


def test_ranges_must_fit_the_dtype() -> None:
    check_range("x", "UINT8", (0, 256))
    with pytest.raises(LoadgenError, match="UINT8 holds whole numbers 0..255"):
        check_range("x", "UINT8", (0, 257))
    with pytest.raises(LoadgenError, match="outside what FP16 holds"):
        check_range("x", "FP16", (0, 70000))
    rng = np.random.default_rng(1)
    values = _random(rng, "FP16", (10000,), (-65000.0, 65000.0))
    assert np.isfinite(values).all() and values.max() < 65000
    assert np.isfinite(_random(rng, "FP16", (10000,))).all()  # the default: finite
    ints = _random(rng, "INT64", (10000,), (0, 1000))
    assert ints.min() >= 0 and ints.max() == 999


def test_bytes_serialization_and_shared_sizes() -> None:
    assert serialize_bytes([b"ab", b""]) == struct.pack("<I", 2) + b"ab" + struct.pack("<I", 0)
    shapes = {"A": ((2, 9),), "B": ((2, 9),)}
    pool = generated_pool(TEXT_AND_MASK, 2, shapes, Generation({}, string_length=(1, 5)), 7)
    assert len(pool) == 256
    for r in pool:
        text, a, b = r.tensors
        assert text.shape == (2, 1) and a.shape == b.shape  # one draw per range a request
        assert 2 <= a.shape[1] <= 9 and a.nbytes == 2 * a.shape[1] * 4
        assert len(r.inputs) == text.nbytes + a.nbytes + b.nbytes
        # Two length-prefixed UTF-8 strings of 1..5 characters.
        n = struct.unpack_from("<I", r.inputs)[0]
        first = r.inputs[4 : 4 + n].decode()
        assert 1 <= len(first) <= 5


def test_perf_analyzer_json_forms(tmp_path: Path) -> None:
    raw = base64.b64encode(np.array([5, 6], "<i8").tobytes()).decode()
    doc: dict[str, Any] = {
        "data": [
            {"IDS": {"content": [1, 2, 3], "shape": [3]}},
            {"IDS": {"b64": raw}},
            {"IDS": [[7, 8, 9, 10]]},  # nested: its own shape
        ],
        "validation_data": [{"SUM": [6]}, {"SUM": [11]}, {"SUM": [34]}],
    }
    path = tmp_path / "data.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(LoadgenError, match=r"data\[2\].IDS: shape \[1, 4\] does not fit"):
        data_pool(str(path), IDS, 1, {})
    doc["data"][2] = {"IDS": [7, 8, 9, 10]}  # flat: fits [-1]
    path.write_text(json.dumps(doc))
    pool, checks = data_pool(str(path), IDS, 1, {})
    assert [r.tensors[0].shape for r in pool] == [(1, 3), (1, 2), (1, 4)]
    assert pool[1].inputs == np.array([5, 6], "<i8").tobytes()
    assert pool[2].expected == {"SUM": np.array([[34]], "<i8").tobytes()}
    assert "SUM" in checks
    # In order, cycled; or sampled the same way for the same seed.
    ordered = PoolPayloads(pool, False, None, checks)
    assert [ordered.take(i)[2] for i in range(4)] == [p.tensors for p in (*pool, pool[0])]
    a, b = (PoolPayloads(pool, True, 5, checks) for _ in range(2))
    assert [a.take(i)[0] for i in range(50)] == [b.take(i)[0] for i in range(50)]
    # A batch stacks consecutive entries, which must share a shape.
    with pytest.raises(LoadgenError, match="differ in shape"):
        data_pool(str(path), IDS, 2, {})


def test_stored_params_keep_the_input_options() -> None:
    opts = InputOptions.from_texts(
        shape=["IDS=4:64"], value_range=["IDS=0:1000"], string_length="2:9", string_data="x"
    )
    params = opts.apply(RunParams("concurrency", model="ids"))
    data = params.to_json()
    assert data["shapes"] == {"IDS": ["4:64"]} and data["ranges"] == {"IDS": [0.0, 1000.0]}
    assert RunParams.from_json(json.loads(json.dumps(data))) == params
    # Default inputs keep the shape stores have always had.
    plain = RunParams("concurrency").to_json()
    assert not {"ranges", "input_data", "data_order", "string_length", "string_data"} & set(plain)


def test_data_runs_refuse_options_that_generate_values() -> None:
    from loadgen.engine.runner import check_given

    data = RunParams("concurrency", model="ids", input_data="data.json")
    check_given(IDS, data)
    with pytest.raises(LoadgenError, match="use one or the other"):
        check_given(IDS, replace(data, ranges=(("IDS", (0.0, 9.0)),)))
    with pytest.raises(LoadgenError, match="--dtype IDS=FP32 does not match"):
        check_given(IDS, replace(data, dtypes=(("IDS", "FP32"),)))
    with pytest.raises(LoadgenError, match="has no input 'X'"):
        check_given(IDS, replace(data, dtypes=(("X", "FP32"),)))
