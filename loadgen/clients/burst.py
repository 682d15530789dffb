"""Send N requests so that they reach Triton at the same instant.

Starting N threads at a barrier is not enough on a busy 2-core machine: the
requests can still arrive milliseconds apart, longer than the batcher's queue
delay, and the test would pass or fail by luck. Instead each request goes out
on its own connection, complete except for its last byte; then the last bytes
of all N are written back to back. The server can parse none of them before
the final write, so all N complete within microseconds of each other (the
"last-byte synchronisation" used for race-condition testing).
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Sequence
from typing import Any


def infer_body(inputs: dict[str, Sequence[float]], datatype: str = "FP32") -> bytes:
    """A KServe v2 JSON infer request with one row per input: shape [1, len]."""
    return json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": [1, len(values)],
                    "datatype": datatype,
                    "data": list(values),
                }
                for name, values in inputs.items()
            ]
        }
    ).encode()


def burst(
    host: str,
    port: int,
    model: str,
    bodies: Sequence[bytes],
    timeout_s: float = 30.0,
    settle_s: float = 0.05,
) -> list[dict[str, Any]]:
    """POST every body to ``model`` at once; return the decoded responses in order.

    A response with an HTTP error status is returned as ``{"error": ..., "status": N}``.
    """
    path = f"/v2/models/{model}/infer"
    conns: list[http.client.HTTPConnection] = []
    try:
        for body in bodies:
            conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
            conn.connect()
            conn.putrequest("POST", path, skip_accept_encoding=True)
            conn.putheader("Content-Type", "application/json")
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders()
            conn.send(body[:-1])
            conns.append(conn)
        # Let the server read what it can; it waits on each request's last byte.
        time.sleep(settle_s)
        for conn, body in zip(conns, bodies, strict=True):
            conn.send(body[-1:])
        results = []
        for conn in conns:
            response = conn.getresponse()
            payload = json.loads(response.read() or b"{}")
            if response.status != 200:
                payload = {"error": payload.get("error", ""), "status": response.status}
            results.append(payload)
        return results
    finally:
        for conn in conns:
            conn.close()
