"""A lock that many hold shared or one holds alone, across the session's xdist workers (and
any other pytest on the machine that names the same files).

Two files: the room, held shared by the many and exclusively by the one; and a turnstile,
taken by everyone on the way in and kept by the one waiting to be alone, so that a stream of
shared holders cannot starve it.
"""

from __future__ import annotations

import fcntl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# Chromium drops the requests it has in flight (net::ERR_NETWORK_CHANGED) when a link or an
# address of the host's network namespace changes: the fleet's veth pairs are such changes,
# and a page that lost its Streamlit modules never showed its form. Machine-wide, since the
# links are.
HOST_NETWORK = Path(tempfile.gettempdir()) / "batchscope-tests-host-network"


@contextmanager
def room(path: Path, alone: bool) -> Iterator[None]:
    """Hold the room at ``path`` (two files beside it: ``.turnstile``, ``.room``) alone or
    shared, until the block ends."""
    with (
        open(path.with_name(path.name + ".turnstile"), "a") as turnstile,
        open(path.with_name(path.name + ".room"), "a") as held,
    ):
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(held, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
