"""The one sampler: counts stamped at the middle of their read, slow reads left out, and the
requests received dropped from a window whose metrics read failed partway."""

from __future__ import annotations

import random
from typing import Any

from advisor.fit import fit_traffic
from observe.sampler import SLOW_READ_S, Sampler, count_sample, slow_reads_note
from tests.advisor.test_fit import poisson
from tritonapi.client import TritonUnreachable


def polled(rng: random.Random, slow_at: int, slow_s: float) -> list[tuple[float, float, float]]:
    """``advise --url``'s 20 reads of a 300/s Poisson count at 0.2 s steps, as ``(asked,
    answered, count)``; read ``slow_at`` takes ``slow_s`` (Triton loading a model) and
    Triton took its count as the read began."""
    reads, t, n = [], 0.0, 0.0
    for i in range(21):
        took = slow_s if i == slow_at else 0.002
        reads.append((t, t + took, n))
        gap = took + 0.2
        t += gap
        n += poisson(rng, 300.0 * gap)
    return reads


def test_a_count_read_slowly_is_left_out_so_poisson_stays_poisson() -> None:
    # While Triton loads or unloads a model a statistics read here takes 1.3 s (2 ms
    # otherwise). Stamped at the middle of its read, one such count read Poisson as a
    # burst; left out, its neighbours' bin holds the rate times its length again.
    rng = random.Random(11)
    kept, left_out = [], []
    for _ in range(100):
        reads = polled(rng, slow_at=5, slow_s=1.3)
        kept.append(fit_traffic([((a + b) / 2, n) for a, b, n in reads]).cv)
        samples = [s for a, b, n in reads if (s := count_sample(a, b, n)) is not None]
        assert len(samples) == 20
        left_out.append(fit_traffic(samples).cv)
    kept.sort()
    left_out.sort()
    assert kept[50] > 2.5  # the mechanism: one slow read's count misplaced by 0.65 s
    assert 0.8 < left_out[50] < 1.2
    assert left_out[95] < 1.5


def test_a_quick_read_is_stamped_at_its_middle_and_only_slow_ones_are_noted() -> None:
    assert count_sample(1.0, 1.004, 7.0) == (1.002, 7.0)
    assert count_sample(1.0, 1.0 + SLOW_READ_S * 2, 7.0) is None
    assert slow_reads_note(0) == ""
    assert "2 read(s)" in slow_reads_note(2) and "loading or unloading" in slow_reads_note(2)


class FakeTriton:
    """A Triton whose request count grows by 10 a read, whose ``/metrics`` answer the
    first ``metrics_ok`` reads and then fail."""

    url = "http://127.0.0.1:1"

    def __init__(self, metrics_ok: int) -> None:
        self.count = 0
        self.metrics_ok = metrics_ok
        self.session = self

    def statistics_json(self, model: str = "", timeout_s: float | None = None) -> Any:
        self.count += 10
        return {
            "model_stats": [
                {
                    "name": "m",
                    "version": "1",
                    "inference_count": self.count,
                    "execution_count": self.count,
                    "inference_stats": {},
                    "batch_stats": [],
                }
            ]
        }

    def get(self, url: str, timeout: float) -> Any:  # the metrics, through the session
        if self.metrics_ok <= 0:
            raise TritonUnreachable(url, "refused")
        self.metrics_ok -= 1
        text = (
            f'nv_inference_count{{model="m",version="1"}} {self.count}\n'
            'nv_inference_pending_request_count{model="m",version="1"} 2\n'
        )
        return type("Response", (), {"status_code": 200, "text": text})()


def ticking(step: float = 0.001) -> Any:
    now = [0.0]

    def clock() -> float:
        now[0] += step
        return now[0]

    return clock


def test_the_sampler_stamps_each_count_at_the_middle_of_its_read() -> None:
    sampler = Sampler(FakeTriton(99), ["m"], "http://m/metrics", clock=ticking())  # type: ignore[arg-type]
    sampler.start()
    sampler.poll()
    window = sampler.finish()["m"]
    assert [n for _, n in window.samples] == [10.0, 20.0, 30.0]
    assert window.samples[0][0] == 0.0015  # asked at 1 ms, answered at 2 ms
    assert [n for _, n in window.received] == [12.0, 22.0, 32.0]  # executed + pending
    assert not window.pending_note and window.pending_max == 2.0
    assert window.delta is not None and window.delta.inference_count == 20


def test_a_window_whose_metrics_read_failed_partway_drops_its_received_count() -> None:
    sampler = Sampler(FakeTriton(2), ["m"], "http://m/metrics", clock=ticking())  # type: ignore[arg-type]
    sampler.start()
    sampler.poll()
    sampler.poll()
    window = sampler.finish()["m"]
    assert len(window.samples) == 4 and window.received == []
    assert window.pending_note.startswith("Triton's metrics at http://m/metrics not read")
    assert window.pending_max is None
    assert any(n.startswith(window.pending_note) for n in sampler.notes)


def test_a_slow_read_is_left_out_of_the_counts_and_counted() -> None:
    sampler = Sampler(FakeTriton(0), ["m"], clock=ticking(SLOW_READ_S * 2))  # type: ignore[arg-type]
    sampler.start()
    window = sampler.finish()["m"]
    assert window.samples == [] and window.slow_reads == 2
    assert window.pending_note == "Triton's metrics not read: give --metrics-url"
