"""Write generated files, or check that the committed ones match: what `batchscope rules`
and `batchscope render` share, so both report a stale file the same way."""

from __future__ import annotations

import sys
from pathlib import Path

from rules import rulegen


def write_or_check(command: str, files: dict[Path, str], check: bool) -> int:
    """Write ``files``, or with ``check`` fail (exit 1) if any differs from what is committed."""
    if not check:
        for path in rulegen.write_files(files):
            print(f"wrote {path}")
        return 0
    stale = rulegen.stale(files)
    for path in stale:
        print(f"{command}: {path} is out of date", file=sys.stderr)
    if stale:
        print(f"{command}: run `batchscope {command}` and commit the result", file=sys.stderr)
        return 1
    print(f"{command}: {len(files)} generated file(s) are up to date")
    return 0
