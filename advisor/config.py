"""A dynamic-batching configuration, as the advisor sees it.

Read from Triton's model config JSON (``GET /v2/models/{m}/config``) or built by
hand. Triton normalises a ``dynamic_batching`` block without preferred sizes to
``preferred_batch_size: [max_batch_size]`` (verified on 2.51 through the config
endpoint); :meth:`BatcherConfig.effective_preferred` applies the same rule so
the simulator behaves like the server whichever form it is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tritonapi.modelconfig import ModelConfig, parse_json


@dataclass(frozen=True)
class BatcherConfig:
    max_batch_size: int
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    instances: int = 1
    dynamic_batching: bool = True
    # Only for display: where this config came from.
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.instances < 1:
            raise ValueError(f"instances must be >= 1, got {self.instances}")
        if self.max_queue_delay_us < 0:
            raise ValueError(f"max_queue_delay_us must be >= 0, got {self.max_queue_delay_us}")
        for size in self.preferred_batch_sizes:
            if not 1 <= size <= self.max_batch_size:
                raise ValueError(
                    f"preferred batch size {size} is outside 1..max_batch_size "
                    f"({self.max_batch_size})"
                )

    @property
    def effective_preferred(self) -> tuple[int, ...]:
        """The preferred sizes the scheduler uses (Triton's normalisation applied)."""
        if not self.dynamic_batching:
            return (1,)
        return tuple(sorted(set(self.preferred_batch_sizes))) or (self.max_batch_size,)

    @property
    def delay_s(self) -> float:
        return self.max_queue_delay_us / 1e6 if self.dynamic_batching else 0.0

    @property
    def batch_limit(self) -> int:
        return self.max_batch_size if self.dynamic_batching else 1

    def describe(self) -> str:
        if not self.dynamic_batching:
            return f"no dynamic batching, {self.instances} instance(s)"
        pref = list(self.preferred_batch_sizes) if self.preferred_batch_sizes else "none"
        return (
            f"max_batch_size {self.max_batch_size}, preferred {pref}, "
            f"delay {self.max_queue_delay_us} us, {self.instances} instance(s)"
        )

    def pbtxt(self) -> str:
        """The config.pbtxt lines that set this config (for a recommendation)."""
        lines = [f"max_batch_size: {self.max_batch_size}"]
        if self.dynamic_batching:
            inner = []
            if self.preferred_batch_sizes:
                sizes = ", ".join(str(s) for s in self.preferred_batch_sizes)
                inner.append(f"  preferred_batch_size: [ {sizes} ]")
            inner.append(f"  max_queue_delay_microseconds: {self.max_queue_delay_us}")
            lines += ["dynamic_batching {", *inner, "}"]
        lines.append(f"instance_group [ {{ count: {self.instances} kind: KIND_CPU }} ]")
        return "\n".join(lines)


def from_model_config(config: ModelConfig | Any) -> BatcherConfig:
    """BatcherConfig from a typed model config, or from Triton's config JSON.

    ValueError if the JSON is not a model config.
    """
    if not isinstance(config, ModelConfig):
        config = parse_json(config)
    instances = config.instances or 1
    max_batch = config.max_batch_size
    if max_batch < 1:
        return BatcherConfig(1, (), 0, instances, False, name=config.name)
    if config.dynamic is None:
        return BatcherConfig(max_batch, (), 0, instances, False, name=config.name)
    preferred = config.preferred_batch_sizes
    # Triton's normalised default ([max_batch_size]) is the same as "none" here.
    if preferred == (max_batch,):
        preferred = ()
    return BatcherConfig(
        max_batch, preferred, config.dynamic.max_queue_delay_us, instances, True, name=config.name
    )
