"""What the HTTP and gRPC clients share: the request in flight, and the slot interface the
scenarios drive.

A *slot* is one place a request can be in flight (an HTTP keep-alive connection, or a share
of one gRPC channel). A scenario calls :meth:`Client.send` on an idle slot; when the
request's outcome is recorded the client calls ``on_done(slot)`` to hand the slot back.

A client records each request's outcome into an ``Outcomes`` (the run's recorder,
``loadgen.results.recorder.Recorder``); the outcome codes and the request ids a traced run
puts on the wire are defined here, with the clients that produce them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from loadgen.clients.payloads import Expected, Payloads, PoolPayloads, Tensor
from loadgen.clients.target import Address, ModelSpec, TensorSpec

OK, FAILED, TIMED_OUT = 0, 1, 2  # a request's outcome, as clients record it
ID_DIGITS = 10  # fixed width: the HTTP client's request head keeps its length


def request_id(token: str, index: int) -> str:
    return f"{token}-{index:0{ID_DIGITS}d}"


class Outcomes(Protocol):
    """What a client records into: the run's clock, each send and each outcome."""

    done: int

    def now(self) -> float: ...

    def mark_sent(self, at: float) -> None: ...

    def record(
        self, start: float, outcome: int, error: str | None = None, index: int = -1
    ) -> None: ...

    @property
    def in_flight(self) -> int: ...


class Pending:
    """A request in flight: its index (which inputs), when it was due, what its answer must
    hold (OUTPUT_SUM's bytes, or each validated output's bytes; empty: shapes only)."""

    __slots__ = ("index", "start", "expected")

    def __init__(self, index: int, start: float, expected: Expected) -> None:
        self.index = index
        self.start = start
        self.expected = expected


class Client:
    def __init__(
        self,
        address: Address,
        model: ModelSpec,
        tensors: list[Tensor],
        outputs: list[TensorSpec],
        payloads: Payloads | PoolPayloads,
        recorder: Outcomes,
        timeout_s: float,
        id_token: str = "",
    ) -> None:
        self.address = address
        self.model = model
        self.tensors = tensors
        self.outputs = outputs
        self.lead = (tensors[0].shape[0],) if model.max_batch_size and tensors else ()
        self.payloads = payloads
        self.recorder = recorder
        self.timeout_s = timeout_s
        # With a token every request carries the id "<token>-<index>" (traced runs).
        self.id_token = id_token
        self.on_done: Callable[[Any], None] = lambda slot: None
        self.closing = False

    async def open_slots(self, n: int) -> list[Any]:
        raise NotImplementedError

    def send(self, slot: Any, index: int, start: float) -> None:
        raise NotImplementedError

    async def burst(self, slots: list[Any], first_index: int) -> None:
        """One request per slot, arriving together; returns when all are recorded."""
        raise NotImplementedError

    def abandon_all(self, error: str) -> None:
        """Record every request still in flight as failed (a second Ctrl-C)."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


async def wait_idle(recorder: Outcomes, poll_s: float = 0.005) -> None:
    while recorder.in_flight:
        await asyncio.sleep(poll_s)
