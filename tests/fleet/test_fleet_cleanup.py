"""Nothing of a fleet is left behind: namespaces, veth pairs, hosts files, processes.

Its first test checks that no fleet is left on the machine: when it runs after
test_fleet.py (the order is shuffled), that is what the fleet fixture's teardown left.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.fleet.netns import Fleet, Server, ip, leftovers, namespaces

# One xdist worker for both fleet modules: the namespaces' names are the machine's.
pytestmark = pytest.mark.xdist_group("fleet")


def inside(pid: int, namespace: str, timeout_s: float = 10.0) -> None:
    """Wait until process ``pid`` is in network namespace ``namespace``."""
    deadline = time.monotonic() + timeout_s
    while str(pid) not in ip("netns", "pids", namespace).split():
        assert time.monotonic() < deadline, f"process {pid} never entered {namespace}"
        time.sleep(0.02)


def test_nothing_of_a_fleet_is_left_on_this_machine() -> None:
    assert leftovers() == []


def test_a_failing_body_still_removes_every_namespace_veth_and_process(tmp_path: Path) -> None:
    # Indices the fleet module does not use: a namespace's devices go a moment after the
    # namespace (the kernel's own cleanup), and test_fleet.py may start right after this.
    fleet = Fleet(tmp_path, [Server(8, {}), Server(9, {})])
    sleeper: subprocess.Popen[bytes] | None = None
    with pytest.raises(RuntimeError, match="a test failed"), fleet:
        assert {"bsfleet8", "bsfleet9"} <= set(namespaces())
        fleet.hosts(fleet.servers[0], {"triton": fleet.servers[0].address})
        # A process in a namespace, in a session of its own: the stub Triton leaves behind.
        sleeper = subprocess.Popen(
            fleet.exec_argv(fleet.servers[1], ["sleep", "600"]), start_new_session=True
        )
        # Inside the namespace before the body fails: `ip netns exec` that has not entered it
        # yet when the cleanup lists the namespace's processes finds it gone, and exits 255
        # (CI at e3d1d2b); that is not a process left behind.
        inside(sleeper.pid, "bsfleet9")
        raise RuntimeError("a test failed")
    assert leftovers() == []
    assert sleeper is not None and sleeper.wait(timeout=10) == -9
