"""What the dashboard asks Triton directly: is it up, and how did it load each model."""

from __future__ import annotations

from typing import Any

import requests


class TritonUnreachable(RuntimeError):
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(
            f"Triton at {url} is not answering ({reason}): start the stack with ./stack/up, "
            "or look at .stack/logs/triton.log for why it stopped"
        )


def is_ready(url: str, timeout_s: float = 2.0) -> bool:
    try:
        return requests.get(f"{url}/v2/health/ready", timeout=timeout_s).status_code == 200
    except requests.RequestException:
        return False


def _get_json(url: str, path: str, timeout_s: float) -> Any:
    try:
        response = requests.get(f"{url}{path}", timeout=timeout_s)
    except requests.RequestException as exc:
        reason = "connection refused" if "refused" in str(exc) else type(exc).__name__
        raise TritonUnreachable(url, reason) from None
    response.raise_for_status()
    return response.json()


def model_config(url: str, model: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """The configuration as Triton loaded it (defaults filled in), from /v2/models/M/config."""
    config: dict[str, Any] = _get_json(url, f"/v2/models/{model}/config", timeout_s)
    return config
