"""free_ports: the ports private stacks (tests, benchmarks) listen on."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

from stacksettings.ports import _PORT_POOL_START, _ephemeral_start, free_ports

PICK = "import json; from stacksettings import free_ports; print(json.dumps(free_ports(40)))"


def test_processes_picking_at_once_get_ports_apart_from_each_other_and_the_ephemeral_range():
    """Four processes, as xdist's workers, pick 40 ports each at the same moment."""
    pickers = [
        subprocess.Popen([sys.executable, "-c", PICK], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    picked = [json.loads(p.communicate(timeout=60)[0]) for p in pickers]
    every = [port for ports in picked for port in ports]
    assert len(set(every)) == len(every) == 160
    assert all(_PORT_POOL_START <= port < _ephemeral_start() for port in every)


def test_a_port_something_listens_on_is_passed_over():
    first = free_ports(1)[0]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first + 1))
        taken.listen()
        # The next picks run on from `first`, unless another process picked in between.
        assert first + 1 not in free_ports(3)
