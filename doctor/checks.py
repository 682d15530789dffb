"""The troubleshooting guide's checks, in its order: config, overlap, formed batches, latency.

Each check reads the model's configuration as Triton loaded it and one :class:`Window`
of traffic, and returns findings. A finding names the numbers it rests on and the fix
as ``config.pbtxt`` lines. A healthy batcher gets no finding. The thresholds are the
defaults of the alert rules (``rules/settings.yaml``) where one exists, so the
doctor and the alerts agree on what "too much" is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from observe.window import Window
from tritonapi.modelconfig import ModelConfig

# Fewer requests than this in the window: the traffic checks have nothing to go on.
MIN_REQUESTS = 20
# Below this average batch size batching is "not in effect" (the alert uses 1.1 over
# 10 minutes; a short window is noisier, so the doctor looks a little higher).
WEAK_AVERAGE_BATCH = 1.5
# The arrivals expected during one queue delay (rate x delay) under which the delay
# is too short to gather a second request.
MIN_ARRIVALS_PER_DELAY = 0.2
# Independent arrivals at the measured rate would put this share of requests in a
# batch of two or more; observing less than this fraction of it means they never overlap.
OVERLAP_EVIDENCE = 0.2
# The longest queue delay the doctor proposes: beyond it batching costs more latency
# than most services allow.
MAX_PROPOSED_DELAY_US = 10_000
MIN_HIT_RATIO = 0.5  # LowPreferredBatchHitRatio
MAX_QUEUE_S_PER_REQUEST = 0.1  # QueueLatencyHigh
MAX_FAILURE_RATIO = 0.01
GPU_SATURATED = 0.9

CONFIG, OVERLAP, FORMED, LATENCY = "config", "overlap", "formed batches", "latency"


@dataclass(frozen=True)
class ShapeMix:
    """The shapes a stored load run of the model sent (loadgen's ``shapes`` per run)."""

    run_id: int
    shapes: dict[str, int]  # "IDS[1,12]" -> requests
    average_batch: float | None  # the server's, over that run


@dataclass(frozen=True)
class Finding:
    check: str  # CONFIG, OVERLAP, FORMED or LATENCY
    code: str  # stable name, e.g. "batching-off"
    title: str
    numbers: tuple[tuple[str, str], ...]  # (what, value) the finding rests on
    explanation: str  # what is wrong and why
    fix: tuple[str, ...]  # config.pbtxt lines; comments start with #
    # What the fix would do, in words ("" : the fix lines say it). The checks' own rule of
    # thumb; the advisor's search replaces it (doctor.prescribe) where it ran.
    proposal: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "check": self.check,
            "code": self.code,
            "title": self.title,
            "numbers": dict(self.numbers),
            "explanation": self.explanation,
            "proposal": self.proposal,
            "fix": list(self.fix),
        }


@dataclass(frozen=True)
class Prescription:
    """The advisor's one search for a model and window, as the doctor shows it: keep the
    config, change it (``config`` and its ``pbtxt``), or nothing meets the bound."""

    verdict: str  # KEEP, CHANGE or NONE
    config: str  # the config proposed (the current one when kept), described
    pbtxt: tuple[str, ...]  # the lines to write ("" for a kept config)
    text: str  # the sentence with the numbers it rests on
    # The proposed config's objective over the search's seeds, (low, high) in its unit (ms
    # for latency): configs whose ranges overlap are equivalent to the search.
    interval: tuple[float, float] | None = None
    # The search's present, simulated against measured, in one line (advisor.advice.Advice.
    # present_line): what every verdict stands on.
    present: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "verdict": self.verdict,
            "config": self.config,
            "pbtxt": list(self.pbtxt),
            "text": self.text,
            "interval": list(self.interval) if self.interval else None,
            "present": self.present,
        }


# OFF: the search's simulation does not reproduce the present, so it proposes nothing.
KEEP, CHANGE, NONE, OFF = "keep", "change", "none", "present off"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.2f} ms"


def pct(ratio: float) -> str:
    if 0 < ratio < 0.005:
        return "<1 %"
    return f"{ratio * 100:.0f} %"


def per_s(value: float) -> str:
    return f"{value:,.1f}/s"


def check(config: ModelConfig, window: Window | None, mix: ShapeMix | None = None) -> list[Finding]:
    """Every finding for one model, in the guide's order."""
    findings = check_config(config, window)
    if mix is not None:
        findings += check_shapes(config, mix)
    if window is None or config.dynamic is None:
        return findings
    if window.requests >= MIN_REQUESTS:
        findings += check_overlap(config, window)
        findings += check_formed(config, window)
    findings += check_latency(config, window)
    return findings


# ---- 1. the config ---------------------------------------------------------------------


def check_config(config: ModelConfig, window: Window | None) -> list[Finding]:
    mbs = config.max_batch_size
    seen = _seen(window)
    if mbs == 0:
        return [
            Finding(
                CONFIG,
                "no-batch-dimension",
                "the model takes no batch dimension, so Triton cannot batch it",
                (("max_batch_size", "0"), *seen),
                "With max_batch_size 0 every request is executed alone, whatever the "
                "scheduler; the model must accept a leading batch dimension first.",
                (
                    "max_batch_size: 8",
                    "# and drop the batch dimension from every input's and output's dims",
                    "dynamic_batching { }",
                ),
            )
        ]
    if config.dynamic is None:
        if config.sequence_batching or config.ensemble_steps:
            return []  # another scheduler decides; the dynamic batcher does not apply
        return [
            Finding(
                CONFIG,
                "batching-off",
                "dynamic batching is off: every request executes alone",
                (("max_batch_size", str(mbs)), ("dynamic_batching", "absent"), *seen),
                "The model accepts batches of up to max_batch_size, but without a "
                "dynamic_batching block Triton never merges requests.",
                ("dynamic_batching {", "  max_queue_delay_microseconds: 100", "}"),
            )
        ]
    too_big = [s for s in config.preferred_batch_sizes if s > mbs]
    if too_big:
        keep = [s for s in config.preferred_batch_sizes if s <= mbs]
        return [
            Finding(
                CONFIG,
                "preferred-above-max",
                "a preferred batch size is above max_batch_size and can never form",
                (
                    ("max_batch_size", str(mbs)),
                    ("preferred_batch_size", _sizes(config.preferred_batch_sizes)),
                ),
                "A batch never holds more than max_batch_size requests.",
                (
                    f"max_batch_size: {max(too_big)}",
                    f"# or keep max_batch_size {mbs}: preferred_batch_size: [ {_list(keep)} ]",
                ),
            )
        ]
    return []


# ---- 2. do requests overlap? --------------------------------------------------------------


def check_overlap(config: ModelConfig, window: Window) -> list[Finding]:
    average = window.average_batch
    if average is None or average >= WEAK_AVERAGE_BATCH:
        return []
    assert config.dynamic is not None
    rate = window.arrival_rate
    delay_s = config.dynamic.max_queue_delay_us / 1e6
    arrivals = rate * delay_s  # expected arrivals during one queue delay
    expected_share = 1 - math.exp(-arrivals)  # Poisson: another request within the delay
    batched = window.batched_share or 0.0
    numbers = [
        ("arrival rate", per_s(rate)),
        ("max_queue_delay_microseconds", str(config.dynamic.max_queue_delay_us)),
        ("arrivals per queue delay (rate x delay)", f"{arrivals:.2f}"),
        ("average batch size", f"{average:.2f}"),
        ("requests in a batch of 2 or more", pct(batched)),
        *_service(window),
        ("instances", str(config.instances or 1)),
    ]
    if window.pending_max is not None:
        numbers.append(("pending requests, most seen", f"{window.pending_max:g}"))
    if arrivals >= MIN_ARRIVALS_PER_DELAY and batched < OVERLAP_EVIDENCE * expected_share:
        return [
            Finding(
                OVERLAP,
                "no-overlap",
                "requests never overlap: they arrive one after another",
                (
                    *numbers,
                    ("share that independent arrivals would batch", pct(expected_share)),
                ),
                f"At this rate independent requests would find company within the "
                f"{config.dynamic.max_queue_delay_us} µs delay {pct(expected_share)} of the "
                f"time; these found it {pct(batched)} of the time, so each is sent only after "
                "the previous one returned (one client waiting for each answer). No delay "
                "can batch them: send requests concurrently (several clients, or async "
                "requests), or batch on the client.",
                (
                    "# nothing to change in config.pbtxt: the client must overlap its requests",
                    f"# (a longer max_queue_delay_microseconds only adds {us(delay_s)} or more "
                    "to every request)",
                ),
            )
        ]
    if arrivals < MIN_ARRIVALS_PER_DELAY:
        target = _target_size(config)
        wanted_us = (target - 1) / rate * 1e6 if rate > 0 else math.inf
        proposed = int(min(MAX_PROPOSED_DELAY_US, max(100, math.ceil(wanted_us / 100) * 100)))
        gathered = 1 + rate * proposed / 1e6
        capped = wanted_us > MAX_PROPOSED_DELAY_US
        return [
            Finding(
                OVERLAP,
                "delay-too-short",
                "the queue delay is too short to gather a second request",
                tuple(numbers),
                (
                    "With a delay of 0 the batcher never waits for a second request: it "
                    "merges only requests that queued while every instance was busy."
                    if delay_s == 0
                    else f"During one {config.dynamic.max_queue_delay_us} µs delay about "
                    f"{arrivals:.2f} other requests arrive, so the batcher sends almost every "
                    "request alone."
                ),
                (f"max_queue_delay_microseconds: {proposed}",),
                f"A delay of {proposed:,} µs would gather about "
                f"{gathered:.1f} requests per batch"
                + (
                    f" (a batch of {target} would need {wanted_us:,.0f} µs: more latency than "
                    "most services allow; batching pays little at this rate)"
                    if capped
                    else f", at the cost of up to {proposed:,} µs more latency per request"
                )
                + ".",
            )
        ]
    return []


# ---- 3. what the batcher formed -------------------------------------------------------------


def check_formed(config: ModelConfig, window: Window) -> list[Finding]:
    preferred = config.preferred_batch_sizes
    hit = window.hit_ratio(preferred)
    average = window.average_batch
    # A low hit ratio is the overlap check's business while batching is not in effect.
    if hit is None or hit >= MIN_HIT_RATIO or average is None or average < WEAK_AVERAGE_BATCH:
        return []
    formed = window.distribution()
    common = sorted(formed, key=lambda s: -formed[s])[:2]
    return [
        Finding(
            FORMED,
            "preferred-missed",
            "most batches miss the preferred sizes",
            (
                ("preferred_batch_size", _sizes(preferred)),
                ("executions at a preferred size", pct(hit)),
                ("batch sizes formed (share of executions)", _distribution(formed)),
                ("average batch size", f"{average:.2f}"),
                ("max_batch_size", str(config.max_batch_size)),
            ),
            "Triton sends a batch at once when it reaches a preferred size; sizes the "
            "traffic does not reach make every batch wait the full queue delay instead.",
            (
                "# drop the preferred sizes (Triton then sends full batches at once), or set",
                f"preferred_batch_size: [ {_list(sorted(common))} ]",
            ),
        )
    ]


# ---- 4. where latency goes --------------------------------------------------------------


def check_latency(config: ModelConfig, window: Window) -> list[Finding]:
    findings = []
    # A full queue shows however few requests got in: the rejected ones are not counted.
    if _queue_full(config, window):
        findings.append(_queue_full_finding(config, window))
    if window.requests < MIN_REQUESTS:
        return findings
    failure = window.failure_ratio
    if failure is not None and failure > MAX_FAILURE_RATIO:
        findings.append(_failures(config, window, failure))
    queue = window.queue_per_request_s
    compute = window.compute_per_request_s
    if queue is not None and compute is not None and queue > MAX_QUEUE_S_PER_REQUEST:
        findings.append(_queue_latency(config, window, queue, compute))
    return findings


def _queue_full(config: ModelConfig, window: Window) -> bool:
    """The bounded queue reached its bound: from then on Triton rejected new requests.

    Triton 2.51 counts those rejections nowhere (neither the statistics' failures nor
    ``nv_inference_request_failure{reason="REJECTED"}``): the pending count is the
    server's only trace of them.
    """
    limit = _queue_bound(config)
    return bool(limit) and window.pending_max is not None and window.pending_max >= limit


def _queue_bound(config: ModelConfig) -> int:
    """The smallest bound of the model's queues (one per priority level); 0: unbounded.

    The pending count covers every queue, so with priority levels reaching the smallest
    bound means that queue may be full, not that it is.
    """
    if config.dynamic is None:
        return 0
    bounds = [p.max_queue_size for _, p in config.dynamic.queue_policies() if p.max_queue_size]
    return min(bounds, default=0)


def _queue_full_finding(config: ModelConfig, window: Window) -> Finding:
    assert config.dynamic is not None
    limit = _queue_bound(config)
    queues = config.dynamic.queue_policies()
    numbers = (
        ("max_queue_size", str(limit)),
        *(
            (f"queue of priority {level}", policy.describe())
            for level, policy in queues
            if len(queues) > 1
        ),
        ("pending requests, most seen", f"{window.pending_max:g}"),
        ("answered requests", per_s(window.requests_ok / window.seconds)),
        *_service(window),
        ("instances", str(config.instances or 1)),
    )
    return Finding(
        LATENCY,
        "queue-full",
        "the queue is full: Triton rejects new requests",
        numbers,
        f"Once {limit} requests wait, Triton answers every new one at once with HTTP 503 "
        "'Exceeds maximum queue size' (Triton 2.51 counts these nowhere, neither in the "
        "statistics nor in /metrics: only the clients see them). The instances do not "
        "keep up with the arrivals: add instances (or GPUs), or let more requests wait if "
        "the latency allows; priority levels keep latency-sensitive requests ahead of the "
        "rest.",
        (
            _instances_line(config),
            f"dynamic_batching {{ default_queue_policy {{ max_queue_size: {limit * 4} }} }}",
            "# or: dynamic_batching { priority_levels: 2 default_priority_level: 2 }",
        ),
    )


def _failures(config: ModelConfig, window: Window, failure: float) -> Finding:
    numbers = (
        ("failed requests", per_s(window.requests_failed / window.seconds)),
        ("failed share", pct(failure)),
        *_service(window),
    )
    return Finding(
        LATENCY,
        "failures",
        "requests fail inside Triton",
        numbers,
        "Triton counted these as failures (an exception in the model, a cancelled or "
        "timed-out request): its log names them. A python-backend error response counts "
        "as a success, so the model's own errors can be more." + _timeout_note(config),
        ("# nothing to change in config.pbtxt before the cause is known",),
    )


def _timeout_note(config: ModelConfig) -> str:
    """Queues whose requests time out: Triton 2.51 counts those as failures (REJECTED)."""
    if config.dynamic is None:
        return ""
    timed = [
        level
        for level, policy in config.dynamic.queue_policies()
        if policy.default_timeout_us and policy.timeout_action == "REJECT"
    ]
    if not timed:
        return ""
    who = "Requests" if timed == ["default"] else f"Requests of priority {', '.join(timed)}"
    return (
        f" {who} time out in the queue: each one past its "
        "default_timeout_microseconds is a failure with reason REJECTED (HTTP 503 'Request "
        "timeout expired' at the client)."
    )


def _queue_latency(config: ModelConfig, window: Window, queue: float, compute: float) -> Finding:
    assert config.dynamic is not None
    delay_s = config.dynamic.max_queue_delay_us / 1e6
    gpu = window.gpu_utilization
    numbers: list[tuple[str, str]] = [
        ("queue per request", ms(queue)),
        ("compute per request", ms(compute)),
        ("queue : compute", f"{queue / compute:.1f}" if compute > 0 else "n/a"),
        ("max_queue_delay_microseconds", str(config.dynamic.max_queue_delay_us)),
        ("instances", str(config.instances or 1)),
        ("GPU utilisation", _gpu_text(window)),
    ]
    if window.pending_max is not None:
        numbers.append(("pending requests, most seen", f"{window.pending_max:g}"))
    fix: tuple[str, ...]
    if delay_s >= queue / 2:
        fix = (f"max_queue_delay_microseconds: {max(100, int(queue * 1e6 / 4) // 100 * 100)}",)
        why = "Most of the queue time is the batcher's own delay: shorten it."
    elif gpu is not None and gpu >= GPU_SATURATED:
        fix = ("# the GPU is saturated: more instances will not help; add GPUs or replicas",)
        why = f"Requests wait for a busy GPU ({pct(gpu)} utilised): the server is at its limit."
    else:
        fix = (
            _instances_line(config),
            "# and for latency-sensitive requests: priority_levels: 2 default_priority_level: 2",
        )
        why = (
            "Requests wait far longer than the batcher's delay: they wait for a busy "
            "instance. Another instance runs batches in parallel"
            + (" while the GPU has room" if gpu is not None else "")
            + "."
        )
    return Finding(
        LATENCY,
        "queue-latency",
        f"requests wait {ms(queue)} in the queue, {queue / compute:.1f}x their compute time"
        if compute > 0
        else f"requests wait {ms(queue)} in the queue",
        tuple(numbers),
        why,
        fix,
    )


# ---- helpers ---------------------------------------------------------------------------


def _seen(window: Window | None) -> list[tuple[str, str]]:
    if window is None or window.average_batch is None:
        return []
    return [("average batch size in the window", f"{window.average_batch:.2f}")]


def _service(window: Window) -> list[tuple[str, str]]:
    out = []
    if window.compute_per_request_s is not None:
        out.append(("service time (compute per request)", ms(window.compute_per_request_s)))
    if window.queue_per_request_s is not None:
        out.append(("queue per request", ms(window.queue_per_request_s)))
    if window.in_server is not None:
        out.append(
            ("requests inside Triton at once (rate x time inside)", f"{window.in_server:.2f}")
        )
    return out


def _target_size(config: ModelConfig) -> int:
    """The batch worth gathering: the smallest preferred size above 1, else 2."""
    bigger = [s for s in config.preferred_batch_sizes if s > 1]
    return min(bigger) if bigger else min(2, max(config.max_batch_size, 1))


def _instances_line(config: ModelConfig) -> str:
    kind = config.instance_kinds[0] if len(config.instance_kinds) == 1 else "KIND_GPU"
    if kind in ("KIND_AUTO", "KIND_MODEL"):
        kind = "KIND_GPU"
    return f"instance_group [ {{ count: {(config.instances or 1) + 1} kind: {kind} }} ]"


def _gpu_text(window: Window) -> str:
    if window.gpu_utilization is not None:
        return f"{pct(window.gpu_utilization)} over {window.gpus or 1} GPU(s)"
    return "no GPU reported" if window.gpus == 0 else "not read"


def _sizes(sizes: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, sizes)) + "]" if sizes else "none"


def _list(sizes: list[int]) -> str:
    return ", ".join(map(str, sizes))


def _distribution(formed: dict[int, float]) -> str:
    return ", ".join(f"{size}: {pct(share)}" for size, share in formed.items())


# ---- shapes: batches form only within a shape ----------------------------------------------


def check_shapes(config: ModelConfig, mix: ShapeMix) -> list[Finding]:
    """Triton's dynamic batcher puts only same-shape requests in a batch unless the inputs
    allow ragged batching: a run that sent several shapes splits its traffic into as many
    streams, each batching alone."""
    if config.dynamic is None or len(mix.shapes) < 2:
        return []
    variable = [t for t in config.inputs if any(d < 0 for d in t.dims)]
    if variable and all(t.ragged for t in variable):
        return []
    total = sum(mix.shapes.values())
    top = max(mix.shapes.values())
    numbers = [
        (f"shapes sent in load run #{mix.run_id}", f"{len(mix.shapes):,}"),
        ("the commonest shape's share", pct(top / total)),
    ]
    if mix.average_batch is not None:
        numbers.append(("average batch in that run", f"{mix.average_batch:.2f}"))
    names = [t.name for t in variable] or [t.name for t in config.inputs]
    return [
        Finding(
            FORMED,
            "shape-fragmentation",
            f"Requests come in {len(mix.shapes):,} shapes: batches form only within a shape",
            tuple(numbers),
            "Triton's dynamic batcher groups only requests whose inputs have the same shape, "
            "unless the inputs allow ragged batching; each shape is then its own stream with a "
            "fraction of the rate, so batches stay small and the queue delay waits longer for "
            "them. Pad on the client to a few fixed lengths (buckets), or, where the backend "
            "can take a ragged batch (it then reads each request's length from a batch_input), "
            "allow ragged batching on the variable inputs.",
            (
                "# either pad on the client: send a few fixed shapes (e.g. lengths 16, 32, 64)",
                "# or, where the backend takes ragged input (python backend, TensorRT with a",
                "# batch_input such as BATCH_ACCUMULATED_ELEMENT_COUNT):",
                *(f'input {{ name: "{n}" allow_ragged_batch: true ... }}' for n in names),
            ),
        )
    ]
