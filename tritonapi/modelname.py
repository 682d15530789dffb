"""What a model name may be, checked before it goes into a URL.

A Triton model name is a folder name in the model repository, and it is sent as a path
segment (``/v2/models/NAME/...``). A name that cannot be a folder, or that would change
the URL (``/``, ``?``, ``#``, ``%``), or that is longer than a file name may be, is a
typing mistake: said at once, before any request, not as an unanswered server.
"""

from __future__ import annotations

import argparse

# Linux's NAME_MAX: no longer folder name can exist in a repository.
MAX_LENGTH = 255
FORBIDDEN = set("/\\?#%")


def problem(name: str) -> str | None:
    """Why ``name`` cannot be a model's name, or None when it can."""
    if not name:
        return "is empty"
    if len(name) > MAX_LENGTH:
        return f"is {len(name):,} characters long, past a folder name's {MAX_LENGTH}"
    if name in (".", ".."):
        return "is not a folder name"
    odd = sorted({c for c in name if c in FORBIDDEN or not c.isprintable() or c.isspace()})
    if odd:
        return f"holds {', '.join(repr(c) for c in odd)}, which no model's name may"
    return None


def shown(name: str) -> str:
    """The name as an error line shows it: a long one cut."""
    return repr(name if len(name) <= 40 else name[:40] + "...")


def model_name(text: str) -> str:
    """argparse ``type=`` for a model name: one clear line (exit 2) when it cannot be one."""
    why = problem(text)
    if why is not None:
        raise argparse.ArgumentTypeError(
            f"model name {shown(text)} {why}: give the name of a folder in the model "
            "repository (letters, digits, '_', '-', '.')"
        )
    return text
