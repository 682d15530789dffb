"""One typed model configuration, built from Triton's own ``ModelConfig`` protobuf.

Both sources go through the protobuf Triton itself uses
(``tritonclient.grpc.model_config_pb2``): a ``config.pbtxt`` (text format) and the
``GET /v2/models/<m>/config`` answer (protobuf JSON, where 64-bit integers such as
``max_queue_delay_microseconds`` come as strings, and fields of newer Triton releases
may appear). The launcher's ``check-config``, the exporter, the advisor and the
dashboard's config view all read a :class:`ModelConfig` from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format, text_format

if TYPE_CHECKING:
    from tritonclient.grpc import model_config_pb2

ParseError = text_format.ParseError


def _pb2() -> ModuleType:
    """Triton's protobuf module, imported on first use: its package (``tritonclient.grpc``)
    brings grpc, numpy and ml_dtypes, which every command line would otherwise load at start
    for a module most of them need only once they read a config."""
    from tritonclient.grpc import model_config_pb2

    return model_config_pb2


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: str  # Triton's TYPE_FP32 etc.
    dims: tuple[int, ...]  # without the batch dimension; -1 = variable
    ragged: bool = False  # allow_ragged_batch: requests of other shapes may share a batch


@dataclass(frozen=True)
class InstanceGroup:
    kind: str  # KIND_CPU, KIND_GPU, KIND_AUTO, KIND_MODEL
    count: int
    gpus: tuple[int, ...] = ()

    @property
    def instances(self) -> int:
        """A GPU group places ``count`` instances on each listed GPU."""
        return self.count * len(self.gpus) if self.kind == "KIND_GPU" and self.gpus else self.count


@dataclass(frozen=True)
class QueuePolicy:
    """One queue of the dynamic batcher (the default one, or one priority level's)."""

    max_queue_size: int = 0  # 0: unbounded
    timeout_action: str = "REJECT"  # or DELAY: what happens to a request past its timeout
    default_timeout_us: int = 0  # 0: requests never time out in the queue
    allow_timeout_override: bool = False

    def describe(self) -> str:
        size = f"at most {self.max_queue_size} waiting" if self.max_queue_size else "unbounded"
        if not self.default_timeout_us:
            return size
        action = "rejected" if self.timeout_action == "REJECT" else "delayed"
        return f"{size}, {action} after {self.default_timeout_us} µs in the queue"


@dataclass(frozen=True)
class SequenceBatching:
    strategy: str  # "direct" (one slot per sequence) or "oldest"
    max_sequence_idle_us: int
    # Control kind (CONTROL_SEQUENCE_START, ...) -> the model input that carries it.
    controls: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class EnsembleStep:
    model: str
    version: int  # -1: the newest


@dataclass(frozen=True)
class DynamicBatching:
    # As written, in order (duplicates and bad values kept, for check-config to report).
    preferred_batch_size: tuple[int, ...]
    max_queue_delay_us: int
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_max_queue_size: int = 0  # 0: unbounded
    default_queue_policy: QueuePolicy = QueuePolicy()
    # (priority level, its queue policy) for the levels given a policy of their own.
    priority_queue_policy: tuple[tuple[int, QueuePolicy], ...] = ()

    def queue_policies(self) -> list[tuple[str, QueuePolicy]]:
        """("default" or the level, policy) of every queue this batcher keeps."""
        if self.priority_levels <= 1:
            return [("default", self.default_queue_policy)]
        own = dict(self.priority_queue_policy)
        return [
            (str(level), own.get(level, self.default_queue_policy))
            for level in range(1, self.priority_levels + 1)
        ]

    @property
    def preferred_sizes(self) -> tuple[int, ...]:
        """The distinct preferred sizes, ascending."""
        return tuple(sorted(set(self.preferred_batch_size)))


@dataclass(frozen=True)
class ModelConfig:
    name: str
    backend: str
    platform: str
    max_batch_size: int  # 0: the model takes no batch dimension
    dynamic: DynamicBatching | None
    instance_groups: tuple[InstanceGroup, ...]
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    default_model_filename: str = ""
    sequence_batching: bool = False
    ensemble_steps: tuple[str, ...] = ()
    response_cache: bool = False
    sequence: SequenceBatching | None = None
    ensemble: tuple[EnsembleStep, ...] = ()

    @property
    def scheduler(self) -> str:
        """Which of Triton's schedulers runs the model: ensemble, sequence, dynamic or
        default (every request executes alone)."""
        if self.ensemble_steps:
            return "ensemble"
        if self.sequence_batching:
            return "sequence"
        return "dynamic" if self.dynamic is not None else "default"

    @property
    def dynamic_batching(self) -> bool:
        return self.dynamic is not None

    @property
    def preferred_batch_sizes(self) -> tuple[int, ...]:
        return self.dynamic.preferred_sizes if self.dynamic else ()

    @property
    def max_queue_delay_us(self) -> int | None:
        """None without dynamic batching: there is no queue delay then."""
        return self.dynamic.max_queue_delay_us if self.dynamic else None

    @property
    def max_queue_delay_s(self) -> float | None:
        us = self.max_queue_delay_us
        return None if us is None else us / 1e6

    @property
    def instances(self) -> int:
        """Execution instances in all (0 when the config lists no group: Triton adds one)."""
        return sum(g.instances for g in self.instance_groups)

    @property
    def instance_kinds(self) -> tuple[str, ...]:
        return tuple(sorted({g.kind for g in self.instance_groups}))

    def batching_summary(self) -> str:
        """One line: what the batcher is allowed to do with this config."""
        mbs = self.max_batch_size
        if self.dynamic is None:
            return f"max_batch_size {mbs}, no dynamic batching: every request executes alone"
        sizes = ", ".join(map(str, self.preferred_batch_sizes)) or "none"
        return (
            f"max_batch_size {mbs}, dynamic batching with preferred sizes {sizes} "
            f"and a queue delay of {self.dynamic.max_queue_delay_us} µs"
        )


def _kind(enum: Any, value: int) -> str:
    return str(enum.Name(value))


def _tensors(items: Any) -> tuple[Tensor, ...]:
    return tuple(
        Tensor(
            t.name,
            _kind(_pb2().DataType, t.data_type),
            tuple(t.dims),
            bool(getattr(t, "allow_ragged_batch", False)),  # outputs have no such field
        )
        for t in items
    )


def from_proto(config: model_config_pb2.ModelConfig) -> ModelConfig:
    dynamic = None
    if config.HasField("dynamic_batching"):
        d = config.dynamic_batching
        dynamic = DynamicBatching(
            preferred_batch_size=tuple(d.preferred_batch_size),
            max_queue_delay_us=int(d.max_queue_delay_microseconds),
            preserve_ordering=bool(d.preserve_ordering),
            priority_levels=int(d.priority_levels),
            default_priority_level=int(d.default_priority_level),
            default_max_queue_size=int(d.default_queue_policy.max_queue_size),
            default_queue_policy=_queue_policy(d.default_queue_policy),
            priority_queue_policy=tuple(
                sorted((int(k), _queue_policy(v)) for k, v in d.priority_queue_policy.items())
            ),
        )
    groups = tuple(
        InstanceGroup(
            _kind(_pb2().ModelInstanceGroup.Kind, g.kind),
            # Triton's default for an unset count is one instance.
            int(g.count) if g.count > 0 else 1,
            tuple(g.gpus),
        )
        for g in config.instance_group
    )
    return ModelConfig(
        name=config.name,
        backend=config.backend,
        platform=config.platform,
        max_batch_size=int(config.max_batch_size),
        dynamic=dynamic,
        instance_groups=groups,
        inputs=_tensors(config.input),
        outputs=_tensors(config.output),
        default_model_filename=config.default_model_filename,
        sequence_batching=config.HasField("sequence_batching"),
        ensemble_steps=tuple(s.model_name for s in config.ensemble_scheduling.step),
        response_cache=bool(config.response_cache.enable),
        sequence=_sequence(config),
        ensemble=tuple(
            EnsembleStep(s.model_name, int(s.model_version))
            for s in config.ensemble_scheduling.step
        ),
    )


def _queue_policy(policy: Any) -> QueuePolicy:
    return QueuePolicy(
        max_queue_size=int(policy.max_queue_size),
        timeout_action=_kind(_pb2().ModelQueuePolicy.TimeoutAction, policy.timeout_action),
        default_timeout_us=int(policy.default_timeout_microseconds),
        allow_timeout_override=bool(policy.allow_timeout_override),
    )


def _sequence(config: model_config_pb2.ModelConfig) -> SequenceBatching | None:
    if not config.HasField("sequence_batching"):
        return None
    seq = config.sequence_batching
    kinds = _pb2().ModelSequenceBatching.Control.Kind
    controls = tuple(
        (_kind(kinds, control.kind), item.name)
        for item in seq.control_input
        for control in item.control
    )
    return SequenceBatching(
        strategy="oldest" if seq.HasField("oldest") else "direct",
        max_sequence_idle_us=int(seq.max_sequence_idle_microseconds),
        controls=controls,
    )


def parse_pbtxt(text: str) -> model_config_pb2.ModelConfig:
    """``config.pbtxt`` text as Triton's protobuf; raises :data:`ParseError` (line, column)."""
    return text_format.Parse(text, _pb2().ModelConfig())


def to_dict(message: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """A parsed config as protobuf JSON, with the field names of config.pbtxt."""
    return dict(json_format.MessageToDict(message, preserving_proto_field_name=True))


def parse_json(payload: Any) -> ModelConfig:
    """The config endpoint's JSON; ValueError if it is not a model config.

    Fields this protobuf does not know (a newer Triton) are ignored, not fatal.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        raise ValueError("not a Triton model config (no name)")
    try:
        message = json_format.ParseDict(payload, _pb2().ModelConfig(), ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise ValueError(f"malformed model config {payload['name']!r}: {exc}") from None
    return from_proto(message)
