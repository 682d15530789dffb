"""Many models from a few: a real capture (tests/exporter/data) served under other names.

The stand-in Triton is tests/exporter/replay.py's replay server; this gives it the replies of
a server that serves ``len(names)`` models, each a renamed copy of one captured model (taken
in turn), with its statistics, metrics, index entry and config. The numbers stay the
captured ones, so a copy of ``add_unbatched`` batches as badly as the original did.
"""

from __future__ import annotations

import json
from itertools import cycle

from tests.exporter.replay import DATA, Reply, captured_replies

# The captured models, in the order the copies take them.
CAPTURED = ("add_unbatched", "batch_add_model", "add_max_batch_0")


def origin(names: list[str]) -> dict[str, str]:
    """Each new name -> the captured model it copies."""
    return dict(zip(names, cycle(CAPTURED), strict=False))


def replies(moment: str, names: list[str]) -> dict[tuple[str, str], Reply]:
    """The replies of the capture ``moment`` with ``names`` as its models."""
    copies = origin(names)
    captured = captured_replies(moment)
    folder = DATA / moment
    stats = json.loads((folder / "stats.json").read_text())["model_stats"]
    by_name = {entry["name"]: entry for entry in stats}
    index = {entry["name"]: entry for entry in json.loads((folder / "index.json").read_text())}
    out = {key: reply for key, reply in captured.items() if not key[1].startswith("/v2/models/")}
    out[("GET", "/v2/models/stats")] = Reply(
        200,
        json.dumps(
            {"model_stats": [{**by_name[o], "name": n} for n, o in copies.items()]}
        ).encode(),
    )
    out[("POST", "/v2/repository/index")] = Reply(
        200, json.dumps([{**index[o], "name": n} for n, o in copies.items()]).encode()
    )
    for name, source in copies.items():
        config = json.loads((folder / f"config.{source}.json").read_text())
        out[("GET", f"/v2/models/{name}/config")] = Reply(
            200, json.dumps({**config, "name": name}).encode()
        )
    out[("GET", "/metrics")] = Reply(
        200, metrics(captured[("GET", "/metrics")].body.decode(), copies).encode(), "text/plain"
    )
    return out


def metrics(text: str, copies: dict[str, str]) -> str:
    """Triton's /metrics text with each captured model's lines once per copy."""
    lines: list[str] = []
    for line in text.splitlines():
        sources = [o for o in CAPTURED if f'model="{o}"' in line]
        if not sources:
            lines.append(line)
            continue
        for name, source in copies.items():
            if source == sources[0]:
                lines.append(line.replace(f'model="{source}"', f'model="{name}"'))
    return "\n".join(lines) + "\n"
