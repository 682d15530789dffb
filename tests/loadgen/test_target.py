"""Where load may go: loopback, the stack's configured Tritons, or anywhere with --allow-remote."""

from __future__ import annotations

import pytest

from loadgen.clients.target import Address, check_target, parse_address
from loadgen.errors import LoadgenError
from loadgen.results.params import RunParams, default_urls, validate


@pytest.fixture(autouse=True)
def configured(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STACK_HOST", "STACK_TRITON_HTTP_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STACK_TRITON_URLS", "http://10.213.77.2:8000,http://Triton:8000")


@pytest.mark.parametrize(
    "address",
    [Address("127.0.0.1", 8000), Address("10.213.77.2", 8000), Address("triton", 8000)],
)
def test_loopback_and_the_configured_tritons_need_no_flag(address: Address) -> None:
    check_target(address, "--url", allow_remote=False)


def test_grpc_goes_to_a_configured_tritons_host() -> None:
    check_target(Address("10.213.77.2", 8001), "--grpc-url", allow_remote=False, grpc=True)


@pytest.mark.parametrize("address", [Address("10.213.77.2", 9000), Address("10.213.77.1", 8000)])
def test_anything_else_is_refused_with_one_line_unless_allowed(address: Address) -> None:
    with pytest.raises(LoadgenError) as caught:
        check_target(address, "--url", allow_remote=False)
    message = str(caught.value)
    assert message.startswith(f"--url: {address.base_url} is neither loopback nor one of")
    assert "http://10.213.77.2:8000, http://Triton:8000" in message and "\n" not in message
    assert "--allow-remote" in message
    check_target(address, "--url", allow_remote=True)


def test_without_attached_tritons_only_the_stacks_own_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STACK_TRITON_URLS")
    monkeypatch.setenv("STACK_HOST", "triton")  # compose's loadgen service, before
    check_target(Address("triton", 8000), "--url", allow_remote=False)
    with pytest.raises(LoadgenError):
        check_target(Address("triton", 9999), "--url", allow_remote=False)


def test_in_attach_mode_the_default_grpc_address_is_the_first_attached_tritons_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STACK_TRITON_GRPC_PORT", raising=False)
    assert default_urls() == ("http://10.213.77.2:8000", "10.213.77.2:8001")
    p = validate(RunParams("concurrency", protocol="grpc"))
    assert (p.url, p.grpc_url) == ("http://10.213.77.2:8000", "10.213.77.2:8001")
    check_target(parse_address(p.grpc_url, "--grpc-url", 8001), "--grpc-url", False, grpc=True)
    monkeypatch.setenv("STACK_TRITON_GRPC_PORT", "9001")  # a server on another gRPC port
    assert default_urls()[1] == "10.213.77.2:9001"
    monkeypatch.setenv("STACK_TRITON_URLS", "http://[fd00::2]:8000")
    assert default_urls()[1] == "[fd00::2]:9001"


def test_without_attached_tritons_the_default_grpc_address_is_the_stacks_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("STACK_TRITON_URLS")
    monkeypatch.delenv("STACK_TRITON_GRPC_PORT", raising=False)
    assert default_urls() == ("http://127.0.0.1:8000", "127.0.0.1:8001")
