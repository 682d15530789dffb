"""Where the load goes: the server's address (loopback unless allowed), and the model's
inputs and outputs as Triton's metadata describes them."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from loadgen.errors import LoadgenError
from stacksettings import from_env_or_default
from tritonapi.client import (
    TritonClient,
    TritonError,
    TritonHTTPError,
    TritonUnreachable,
    newest_version,
)


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def parse_address(text: str, flag: str, default_port: int) -> Address:
    """``http://host:port``, ``host:port`` or ``host`` -> Address; error on anything else."""
    raw = text if "://" in text else f"http://{text}"
    try:
        parts = urlsplit(raw)
        port = parts.port or default_port
    except ValueError:
        raise LoadgenError(f"{flag}: {text!r} is not host:port or http://host:port") from None
    if parts.scheme not in ("http", "grpc") or not parts.hostname or parts.path not in ("", "/"):
        raise LoadgenError(f"{flag}: {text!r} is not host:port or http://host:port (no path)")
    return Address(parts.hostname, port)


def is_loopback(host: str) -> bool:
    """True if every address ``host`` resolves to is on this machine's loopback."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def configured_hosts() -> dict[str, set[int]]:
    """Host -> HTTP ports of the Tritons the stack is configured to watch (STACK_TRITON_URLS,
    or the stack's own Triton): the load targets allowed without --allow-remote."""
    hosts: dict[str, set[int]] = {}
    for url in from_env_or_default().triton_targets:
        try:
            address = parse_address(url, "STACK_TRITON_URLS", 80)
        except LoadgenError:
            continue
        hosts.setdefault(address.host.lower(), set()).add(address.port)
    return hosts


def is_configured(address: Address, grpc: bool) -> bool:
    """True if ``address`` is one of the stack's configured Tritons: its HTTP endpoint, or
    for gRPC the same host (the configuration names HTTP URLs only)."""
    ports = configured_hosts().get(address.host.lower())
    return ports is not None and (grpc or address.port in ports)


def check_target(address: Address, flag: str, allow_remote: bool, grpc: bool = False) -> None:
    if allow_remote or is_loopback(address.host) or is_configured(address, grpc):
        return
    raise LoadgenError(
        f"{flag}: {address.base_url} is neither loopback nor one of the stack's Tritons "
        f"({', '.join(from_env_or_default().triton_targets)}); load runs can flood a server, "
        "so other hosts need --allow-remote"
    )


@dataclass(frozen=True)
class TensorSpec:
    name: str
    datatype: str  # KServe v2 name: FP32, INT64, ...
    shape: tuple[int, ...]  # without the batch dimension; -1 = variable


@dataclass(frozen=True)
class ModelSpec:
    name: str
    version: str
    max_batch_size: int  # 0: the model takes no batch dimension
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def is_add_model(self) -> bool:
        """The reference add model (and its twins): OUTPUT_SUM must equal INPUT_A + INPUT_B."""
        names = {t.name for t in self.inputs}
        outs = {t.name: t for t in self.outputs}
        a = next((t for t in self.inputs if t.name == "INPUT_A"), None)
        return (
            names == {"INPUT_A", "INPUT_B"}
            and "OUTPUT_SUM" in outs
            and a is not None
            and all(t.datatype == a.datatype for t in (*self.inputs, outs["OUTPUT_SUM"]))
        )


def _tensors(items: Any, batched: bool) -> tuple[TensorSpec, ...]:
    out = []
    for item in items or []:
        shape = tuple(int(d) for d in item["shape"])
        out.append(
            TensorSpec(str(item["name"]), str(item["datatype"]), shape[1:] if batched else shape)
        )
    return tuple(out)


def fetch_model(base_url: str, model: str, timeout_s: float = 5.0) -> ModelSpec:
    """The model's metadata and config; one clear error if the server or model is missing."""
    client = TritonClient(base_url, timeout_s)
    try:
        meta = client.model_metadata(model)
        config = client.model_config(model)
    except TritonUnreachable as exc:
        raise LoadgenError(f"{exc}; start it with `./stack/up` or pass --url") from None
    except TritonHTTPError as exc:
        if exc.status not in (400, 404):
            raise LoadgenError(str(exc)) from None
        raise LoadgenError(
            f"--model: Triton at {base_url} has no model {model!r}{_ready_models(client)}"
        ) from None
    except TritonError as exc:
        raise LoadgenError(str(exc)) from None
    if config.sequence is not None:
        raise LoadgenError(
            f"--model: {model!r} is stateful (sequence batching): each request needs a "
            "sequence ID and the first a START flag; send sequences with "
            f"`batchscope load sequences --model {model}`"
        )
    batched = config.max_batch_size > 0
    try:
        return ModelSpec(
            name=model,
            version=newest_version(str(v) for v in meta.get("versions") or []),
            max_batch_size=config.max_batch_size,
            inputs=_tensors(meta.get("inputs"), batched),
            outputs=_tensors(meta.get("outputs"), batched),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise LoadgenError(
            f"Triton at {base_url} sent unreadable metadata for {model!r}: {exc}"
        ) from None


def admin_client(url: str, timeout_s: float = 5.0) -> TritonClient:
    """A client that opens Triton's restricted APIs (repository index, trace settings) with
    the local stack's key, found in its state folder (STACK_STATE_DIR), when ``url`` is the
    local stack's Triton; another server never gets the key."""
    stack = from_env_or_default()
    headers = stack.admin_headers() if url.rstrip("/") == stack.url("triton_http") else {}
    return TritonClient(url, timeout_s, headers=headers)


def _ready_models(client: TritonClient) -> str:
    # The repository index is restricted: the local stack's key opens it.
    client = admin_client(client.url, client.timeout_s)
    try:
        return f" (ready models: {', '.join(client.ready_models()) or 'none'})"
    except TritonError:
        return ""
