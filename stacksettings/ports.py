"""Free loopback ports for private stacks (tests and benchmarks beside a user's stack)."""

from __future__ import annotations

import fcntl
import secrets
import socket
import tempfile
from contextlib import ExitStack
from pathlib import Path

# free_ports hands out listening ports from below the kernel's ephemeral range, where no
# outgoing connection takes one between the pick and the server's bind (a test run on four
# workers lost a stack's start that way: a port picked free was "already in use" a moment
# later), and one after another through a file under a lock, so two processes picking at
# once (xdist's workers) never get the same.
_PORT_POOL_START = 20000
_PORT_COUNTER = "batchscope-free-ports"


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """Ports free right now on loopback, distinct, each handed out once in turn on this
    machine (see _PORT_POOL_START); from the kernel's own pick where the ephemeral range
    leaves no room below it."""
    end = _ephemeral_start()
    if end - _PORT_POOL_START < 1000:
        with ExitStack() as stack:
            socks = [stack.enter_context(socket.socket()) for _ in range(count)]
            for sock in socks:
                sock.bind(("127.0.0.1", 0))
            return [sock.getsockname()[1] for sock in socks]
    pool = end - _PORT_POOL_START
    with open(Path(tempfile.gettempdir()) / _PORT_COUNTER, "a+") as counter:
        fcntl.flock(counter, fcntl.LOCK_EX)
        counter.seek(0)
        text = counter.read().strip()
        at = int(text) if text.isdigit() else secrets.randbelow(pool)
        ports: list[int] = []
        for _ in range(pool):
            port = _PORT_POOL_START + at % pool
            at += 1
            if _bindable(port):
                ports.append(port)
                if len(ports) == count:
                    break
        counter.seek(0)
        counter.truncate()
        counter.write(str(at % pool))
    if len(ports) < count:
        raise OSError(f"no {count} free ports on 127.0.0.1 between {_PORT_POOL_START} and {end}")
    return ports


def free_port_run(count: int, tries: int = 50) -> list[int]:
    """``count`` consecutive free ports, as a Triton lays its own out (HTTP, gRPC, metrics)."""
    for _ in range(tries):
        ports = free_ports(count)
        if ports == list(range(ports[0], ports[0] + count)):
            return ports
    raise OSError(f"no {count} consecutive free ports on 127.0.0.1 in {tries} tries")
