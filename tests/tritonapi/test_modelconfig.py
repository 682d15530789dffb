"""The typed model config, from real captures of this project's Triton (tests/exporter/data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tritonapi.client import newest_version
from tritonapi.modelconfig import from_proto, parse_json, parse_pbtxt

DATA = Path(__file__).resolve().parent.parent / "exporter" / "data" / "load"
ROOT = Path(__file__).resolve().parents[2]


def captured(name: str) -> dict[str, object]:
    return dict(json.loads((DATA / f"config.{name}.json").read_text()))


def test_the_spec_model_as_triton_sends_it() -> None:
    config = parse_json(captured("batch_add_model"))
    assert config.name == "batch_add_model"
    assert config.backend == "python"
    assert config.max_batch_size == 4
    assert config.dynamic_batching
    assert config.preferred_batch_sizes == (2, 4)
    # Triton sends 64-bit integers as strings in JSON; the protobuf reads them back as numbers.
    assert config.max_queue_delay_us == 500
    assert config.max_queue_delay_s == pytest.approx(0.0005)
    assert config.instances == 1
    assert config.instance_kinds == ("KIND_CPU",)
    assert [(t.name, t.data_type, t.dims) for t in config.inputs] == [
        ("INPUT_A", "TYPE_FP32", (1,)),
        ("INPUT_B", "TYPE_FP32", (1,)),
    ]
    assert [t.name for t in config.outputs] == ["OUTPUT_SUM"]
    assert "preferred sizes 2, 4 and a queue delay of 500 µs" in config.batching_summary()


def test_a_model_without_dynamic_batching() -> None:
    config = parse_json(captured("add_unbatched"))
    assert not config.dynamic_batching
    assert config.preferred_batch_sizes == ()
    assert config.max_queue_delay_us is None and config.max_queue_delay_s is None
    assert "no dynamic batching" in config.batching_summary()


def test_the_file_and_the_endpoint_give_the_same_batching_fields() -> None:
    text = (ROOT / "model_repository" / "batch_add_model" / "config.pbtxt").read_text()
    from_file = from_proto(parse_pbtxt(text))
    from_server = parse_json(captured("batch_add_model"))
    assert from_file.max_batch_size == from_server.max_batch_size
    assert from_file.dynamic == from_server.dynamic
    assert from_file.inputs == from_server.inputs


def test_fields_of_a_newer_triton_are_ignored() -> None:
    payload = captured("batch_add_model")
    payload["a_field_from_triton_99"] = {"anything": [1, 2]}
    assert parse_json(payload).preferred_batch_sizes == (2, 4)


@pytest.mark.parametrize(
    "payload",
    [
        {"error": "Request for unknown model: 'x' is not found"},
        ["not", "a", "config"],
        {"name": "m", "max_batch_size": "four"},
    ],
)
def test_what_is_not_a_config_is_a_value_error(payload: object) -> None:
    with pytest.raises(ValueError):
        parse_json(payload)


def test_gpu_groups_count_an_instance_per_listed_gpu() -> None:
    payload = captured("batch_add_model")
    payload["instance_group"] = [
        {"kind": "KIND_GPU", "count": 2, "gpus": [0, 1]},
        {"kind": "KIND_CPU", "count": 1},
    ]
    config = parse_json(payload)
    assert config.instances == 5
    assert config.instance_kinds == ("KIND_CPU", "KIND_GPU")


def test_newest_version_is_the_highest_number() -> None:
    assert newest_version(["1", "10", "9"]) == "10"
    assert newest_version(["2", "latest"]) == "2"
    assert newest_version([]) == ""
