"""Batches per shape: a shape mix splits the arrivals, so each shape's batches are smaller
than one stream's would be."""

from __future__ import annotations

from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, OpenLoop, ServiceModel
from advisor.predict import predict
from advisor.shapes import by_shape, split

CONFIG = BatcherConfig(16, (), 2000)
SERVICE = ServiceModel(0.0004, 0.00005)


def test_each_shape_gets_its_share_of_the_arrivals() -> None:
    assert split(OpenLoop(1000, 1.0), 0.25) == OpenLoop(250, 1.0)
    assert split(ClosedLoop(8), 0.25) == ClosedLoop(2)
    assert split(ClosedLoop(8), 0.01) == ClosedLoop(1)


def test_four_shapes_batch_smaller_than_one() -> None:
    traffic = OpenLoop(2000, 1.0)
    one = predict(CONFIG, traffic, SERVICE, requests=5000, with_limit=False)
    mix = by_shape(CONFIG, traffic, SERVICE, {"a": 40, "b": 30, "c": 20, "d": 10})
    assert [s.shape for s in mix.shares] == ["a", "b", "c", "d"]
    assert [round(s.share, 2) for s in mix.shares] == [0.4, 0.3, 0.2, 0.1]
    # Each stream carries a quarter of the rate on average: its batches fill more slowly.
    assert mix.mean_batch_size < 0.7 * one.mean_batch_size
    assert all(s.prediction.mean_batch_size < one.mean_batch_size for s in mix.shares)
    assert "arrivals split by each shape's share" in mix.lines()[0]
    assert mix.to_json()["shapes"][0]["shape"] == "a"  # type: ignore[index]
