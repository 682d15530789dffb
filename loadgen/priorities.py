"""A load run with mixed priorities: closed-loop clients per priority level, side by side.

Each level gets its own clients, each sending one request at a time with
``"parameters": {"priority": level}`` for ``duration_s``. The result is per level: what
was sent, answered and refused (with Triton's reason), and the latency percentiles of the
answered requests. Triton reports nothing per priority (its statistics and metrics are per
model), so these client-side figures are the only per-level view.

Triton treats a priority outside 1..priority_levels as the default level without a word
(checked on 2.51: priority 3 of 2 levels is answered), so such a mix is refused here.

    batchscope load priorities --model add_priority --mix 1:2,2:4 --duration 3
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from loadgen.errors import LoadgenError
from loadgen.results.params import default_urls
from loadgen.sequences import error_kind, json_inputs, read_config
from tritonapi.client import TritonClient, TritonError
from tritonapi.modelconfig import ModelConfig

MAX_CLIENTS = 64
MAX_DURATION_S = 300.0


@dataclass(frozen=True)
class PriorityParams:
    model: str
    # (priority level, closed-loop clients at that level)
    mix: tuple[tuple[int, int], ...]
    url: str = ""
    duration_s: float = 3.0
    timeout_s: float = 10.0

    def check(self, config: ModelConfig) -> None:
        if not self.mix:
            raise LoadgenError("--mix is empty: give LEVEL:CLIENTS pairs, e.g. 1:2,2:4")
        if not 0 < self.duration_s <= MAX_DURATION_S:
            raise LoadgenError(f"--duration must be in (0, {MAX_DURATION_S:g}] seconds")
        if sum(n for _, n in self.mix) > MAX_CLIENTS:
            raise LoadgenError(f"--mix asks for more than {MAX_CLIENTS} clients in all")
        levels = config.dynamic.priority_levels if config.dynamic else 0
        if levels < 1:
            raise LoadgenError(
                f"model {config.name!r} has no priority levels (dynamic_batching "
                "{ priority_levels: N }): every request would go to the one queue"
            )
        for level, clients in self.mix:
            if not 1 <= level <= levels:
                raise LoadgenError(
                    f"--mix: priority {level} is not a level of {config.name!r} (1..{levels}); "
                    "Triton would silently queue it at the default level"
                )
            if clients < 1:
                raise LoadgenError(f"--mix: priority {level} needs at least 1 client")


@dataclass
class LevelResult:
    level: int
    sent: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)

    def quantile(self, q: float) -> float | None:
        """Nearest-rank quantile of the answered requests' latency; None without any."""
        if not self.latencies_s:
            return None
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def parse_mix(text: str) -> tuple[tuple[int, int], ...]:
    """``"1:2,2:4"`` -> ((1, 2), (2, 4)); LoadgenError naming the bad part."""
    mix = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        level, sep, clients = part.partition(":")
        if not sep or not level.strip().isdigit() or not clients.strip().isdigit():
            raise LoadgenError(f"--mix: {part!r} is not LEVEL:CLIENTS (e.g. 1:2,2:4)")
        mix.append((int(level), int(clients)))
    if len({level for level, _ in mix}) != len(mix):
        raise LoadgenError("--mix names a priority level twice")
    return tuple(mix)


def run_mix(params: PriorityParams) -> dict[int, LevelResult]:
    url = params.url or default_urls()[0]
    config = read_config(TritonClient(url, params.timeout_s), params.model)
    params.check(config)
    results = {level: LevelResult(level) for level, _ in params.mix}
    errors = {level: Counter[str]() for level, _ in params.mix}
    lock = threading.Lock()
    deadline = time.monotonic() + params.duration_s

    def client_loop(level: int, seed: int) -> None:
        client = TritonClient(url, params.timeout_s)  # one session per thread
        n = 0
        while time.monotonic() < deadline:
            # A different value per request: no response cache can answer for the batcher.
            inputs = json_inputs(config, float(seed * 1_000_003 + n))
            n += 1
            start = time.perf_counter()
            try:
                client.infer_json(config.name, inputs, {"priority": level})
            except TritonError as exc:
                with lock:
                    results[level].sent += 1
                    errors[level][error_kind(exc)] += 1
                continue
            took = time.perf_counter() - start
            with lock:
                results[level].sent += 1
                results[level].ok += 1
                results[level].latencies_s.append(took)

    threads = [
        threading.Thread(target=client_loop, args=(level, 100 * level + i), daemon=True)
        for level, clients in params.mix
        for i in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for level, result in results.items():
        result.errors = dict(errors[level].most_common())
    return results


def report(params: PriorityParams, results: dict[int, LevelResult]) -> str:
    lines = [f"{params.model}: mixed priorities for {params.duration_s:g} s"]
    for level, clients in params.mix:
        r = results[level]
        p50, p99 = r.quantile(0.5), r.quantile(0.99)
        latency = (
            f"p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms"
            if p50 is not None and p99 is not None
            else "no answer"
        )
        lines.append(f"priority {level} ({clients} clients): {r.sent} sent, {r.ok} ok, {latency}")
        lines += [f"  {n} x {kind}" for kind, n in r.errors.items()]
    return "\n".join(lines)
