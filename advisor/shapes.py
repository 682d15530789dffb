"""Batches per shape: Triton's dynamic batcher groups only requests of the same shape (unless
the inputs allow ragged batching), so traffic of several shapes is several streams, each
batching alone.

The split is simple, and the lines it prints say so: each shape gets the arrivals in its
share of the requests (an open loop's rate times the share, a closed loop's clients times
the share, at least one), and each stream is simulated on its own with the model's service
times (the simulation does not know a shape's own cost) and all of the model's instances
(in Triton the shapes share them, so queueing between shapes is left out: the split is an
upper bound on the batches each shape forms, not on its latency).
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.config import BatcherConfig
from advisor.model import ClosedLoop, CpuModel, OpenLoop, ServiceModel, Traffic
from advisor.predict import Prediction, predict

SHOWN = 8  # shapes listed; the rest are summed into the combined figures only
METHOD = (
    "arrivals split by each shape's share of the requests, each shape simulated alone with "
    "the model's service times and all its instances (queueing between shapes left out)"
)


@dataclass(frozen=True)
class ShapeShare:
    shape: str
    share: float
    prediction: Prediction


@dataclass(frozen=True)
class ShapeSplit:
    shares: tuple[ShapeShare, ...]
    mean_batch_size: float  # over all shapes' executions
    worst_p99_s: float  # the largest per-shape p99: the mix's p99 is at most about this

    def lines(self) -> list[str]:
        out = [
            f"batches per shape ({len(self.shares)} shapes; {METHOD}): mean batch "
            f"{self.mean_batch_size:.2f} over all shapes, worst shape's p99 "
            f"{self.worst_p99_s * 1e3:.2f} ms"
        ]
        for s in self.shares[:SHOWN]:
            p = s.prediction
            out.append(
                f"  {s.shape}: {s.share:.0%} of requests, {p.traffic.describe()}, mean batch "
                f"{p.mean_batch_size:.2f}, p99 {p.latency_p99_s * 1e3:.2f} ms"
            )
        return out

    def to_json(self) -> dict[str, object]:
        return {
            "method": METHOD,
            "mean_batch_size": round(self.mean_batch_size, 3),
            "worst_p99_us": round(self.worst_p99_s * 1e6, 1),
            "shapes": [
                {"shape": s.shape, "share": round(s.share, 4), **s.prediction.summary()}
                for s in self.shares
            ],
        }


def split(traffic: Traffic, share: float) -> Traffic:
    if isinstance(traffic, OpenLoop):
        return OpenLoop(traffic.rate_per_s * share, traffic.cv)
    assert isinstance(traffic, ClosedLoop)
    return ClosedLoop(max(1, round(traffic.concurrency * share)), traffic.think_s)


def by_shape(
    config: BatcherConfig,
    traffic: Traffic,
    service: ServiceModel,
    shapes: dict[str, int],
    cpu: CpuModel | None = None,
    requests: int = 5_000,
    seed: int = 1,
) -> ShapeSplit:
    """Each shape's stream simulated alone (see the module doc)."""
    total = sum(shapes.values())
    shares = []
    for shape, n in sorted(shapes.items(), key=lambda kv: -kv[1]):
        share = n / total
        stream = split(traffic, share)
        count = max(200, int(requests * share))
        p = predict(config, stream, service, cpu, count, seed, with_limit=False)
        shares.append(ShapeShare(shape, share, p))
    served = sum(s.prediction.throughput_per_s for s in shares)
    executions = sum(
        s.prediction.throughput_per_s / s.prediction.mean_batch_size
        for s in shares
        if s.prediction.mean_batch_size > 0
    )
    mean = served / executions if executions else 0.0
    worst = max(s.prediction.latency_p99_s for s in shares)
    return ShapeSplit(tuple(shares), mean, worst)
