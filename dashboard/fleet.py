"""The fleet overview: one row per server and model, the worst batcher first.

Plain Python over Prometheus (``promapi.PromClient``): the same raw counters and
window as the live view's KPIs, grouped ``by (target, model)`` instead of summed.
A server that stopped answering keeps its rows (its models are remembered over the
window) with ``up`` 0, so a dead server is the first thing the table shows. A server
that is read with one endpoint down (its metrics port, a restricted API) names it in
``endpoints_down``; :func:`endpoint_table` says where each endpoint is read from.
:func:`search` narrows the table to the rows a person asks for, in the same order.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from dashboard import queries as q
from dashboard.live import run_concurrently
from exporter.scrape import FIXES
from promapi import PromClient

BY = "target, model"

# Every (server, model) seen in the window, even if its server is down now.
ROWS = f"group by ({BY}) (last_over_time(triton_batching_max_batch_size[${{w}}]))"
REQUESTS_PER_S = {
    "success": f"sum by ({BY}) (rate(triton_batching_requests_success_total[${{w}}]))",
    "failure": f"sum by ({BY}) (rate(triton_batching_requests_failure_total[${{w}}]))",
}
AVERAGE_BATCH_SIZE = (
    f"sum by ({BY}) (increase(triton_batching_inferences_total[${{w}}]))"
    f" / (sum by ({BY}) (increase(triton_batching_executions_total[${{w}}])) > 0)"
)
MAX_BATCH_SIZE = f"max by ({BY}) (triton_batching_max_batch_size)"
PREFERRED_EXECUTIONS = (
    f"sum by ({BY}) (increase(triton_batching_batch_executions_total[${{w}}])"
    " and on (target, model, version, batch_size)"
    " label_replace(triton_batching_preferred_batch_size,"
    ' "batch_size", "$1", "size", "(.*)"))'
)
HAS_PREFERRED = f"group by ({BY}) (triton_batching_preferred_batch_size)"
EXECUTIONS = f"sum by ({BY}) (increase(triton_batching_executions_total[${{w}}]))"
QUEUE_SECONDS_PER_REQUEST = (
    f"sum by ({BY}) (increase(triton_batching_queue_seconds_total[${{w}}]))"
    f" / (sum by ({BY}) (increase(triton_batching_requests_success_total[${{w}}])) > 0)"
)
FIRING = 'ALERTS{alertstate="firing"}'
# Shown in its own column (endpoints_down), not among the alerts: an endpoint that cannot be
# read says nothing about the batcher, so it does not rank a server as a worse one.
ENDPOINT_ALERT = "TritonEndpointDown"

COLUMNS = [
    "target",
    "model",
    "up",
    "endpoints_down",
    "requests_per_s",
    "average_batch_size",
    "max_batch_size",
    "batch_efficiency",
    "preferred_hit_ratio",
    "queue_s_per_request",
    "alerts",
]


def _values(frame: pd.DataFrame) -> dict[tuple[str, str], float]:
    if frame.empty or "model" not in frame or "target" not in frame:
        return {}
    # Lists, not the Series themselves: a fleet's answers have thousands of rows, and
    # iterating a Series boxes every element.
    targets, models = frame["target"].astype(str).tolist(), frame["model"].astype(str).tolist()
    values = frame["value"].astype(float).tolist()
    return dict(zip(zip(targets, models, strict=True), values, strict=True))


def fetch(client: PromClient, window_s: int, at: float | None = None) -> pd.DataFrame:
    """The overview over the last ``window_s`` seconds, sorted worst first (see ``rank``)."""
    w = f"{int(window_s)}s"

    def job(expr: str) -> Callable[[], object]:
        return lambda: client.query(expr.replace("${w}", w), at)

    jobs: dict[str, Callable[[], object]] = {
        "rows": job(ROWS),
        "success": job(REQUESTS_PER_S["success"]),
        "failure": job(REQUESTS_PER_S["failure"]),
        "average": job(AVERAGE_BATCH_SIZE),
        "max": job(MAX_BATCH_SIZE),
        "preferred": job(PREFERRED_EXECUTIONS),
        "has_preferred": job(HAS_PREFERRED),
        "executions": job(EXECUTIONS),
        "queue": job(QUEUE_SECONDS_PER_REQUEST),
        "up": job(q.TARGETS_UP),
        "endpoints": job(q.ENDPOINTS),
        "alerts": job(FIRING),
    }
    results = run_concurrently(jobs)
    frames = {name: value for name, value in results.items() if isinstance(value, pd.DataFrame)}
    return overview(frames)


def overview(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The table from the queries' answers (one frame per name of ``fetch``'s jobs)."""
    rows = set(_values(frames["rows"]))
    success, failure = _values(frames["success"]), _values(frames["failure"])
    average, largest = _values(frames["average"]), _values(frames["max"])
    preferred, executions = _values(frames["preferred"]), _values(frames["executions"])
    has_preferred = set(_values(frames["has_preferred"]))
    queue = _values(frames["queue"])
    up_frame = frames["up"]
    up = (
        {str(t): float(v) for t, v in zip(up_frame["target"], up_frame["value"], strict=True)}
        if "target" in up_frame
        else {}
    )
    alerts = _alerts(frames["alerts"])
    endpoints = endpoint_table(frames.get("endpoints", pd.DataFrame()))
    down = {
        target: ", ".join(
            f"{e} ({r})" for e, r in zip(group["endpoint"], group["reason"], strict=True)
        )
        for target, group in endpoints[~endpoints["up"]].groupby("target")
    }
    # A server down since before the window has no model rows: it still gets one.
    rows |= {(t, "") for t in up if not any(r[0] == t for r in rows)}
    records = []
    for target, model in rows:
        key = (target, model)
        requests = (
            success.get(key, math.nan) + failure.get(key, 0.0) if key in success else math.nan
        )
        avg = average.get(key, math.nan)
        mbs = largest.get(key, math.nan)
        hits = math.nan
        if key in has_preferred and executions.get(key, 0.0) > 0:
            hits = preferred.get(key, 0.0) / executions[key]
        records.append(
            {
                "target": target,
                "model": model,
                "up": up.get(target, 0.0) == 1.0,
                "endpoints_down": down.get(target, ""),
                "requests_per_s": requests,
                "average_batch_size": avg,
                "max_batch_size": mbs,
                "batch_efficiency": avg / mbs if mbs and mbs > 0 else math.nan,
                "preferred_hit_ratio": hits,
                "queue_s_per_request": queue.get(key, math.nan),
                "alerts": ", ".join(
                    sorted(alerts.get(key, set()) | alerts.get((target, ""), set()))
                ),
            }
        )
    return rank(pd.DataFrame(records, columns=COLUMNS))


def _alerts(frame: pd.DataFrame) -> dict[tuple[str, str], set[str]]:
    """Firing alert names by (target, model); model "" for a server-wide one (TritonDown)."""
    found: dict[tuple[str, str], set[str]] = {}
    if frame.empty or "alertname" not in frame or "target" not in frame:
        return found
    models = frame["model"] if "model" in frame else pd.Series([""] * len(frame))
    for target, model, name in zip(frame["target"], models, frame["alertname"], strict=True):
        if isinstance(target, str) and target and name != ENDPOINT_ALERT:
            found.setdefault((target, model if isinstance(model, str) else ""), set()).add(
                str(name)
            )
    return found


def rank(frame: pd.DataFrame) -> pd.DataFrame:
    """Worst first: servers that are down, then firing alerts, then the lowest batch
    efficiency among models with traffic, the highest queue time per request; idle models
    (no efficiency in the window) last."""
    if frame.empty:
        return frame
    key = pd.DataFrame(
        {
            "down": ~frame["up"].astype(bool),
            "alerting": frame["alerts"] != "",
            "idle": frame["batch_efficiency"].isna(),
            "efficiency": frame["batch_efficiency"].fillna(math.inf),
            "queue": -frame["queue_s_per_request"].fillna(0.0),
        }
    )
    order = key.sort_values(
        ["down", "alerting", "idle", "efficiency", "queue"],
        ascending=[False, False, True, True, True],
        kind="stable",
    ).index
    return frame.loc[order].reset_index(drop=True)


def search(frame: pd.DataFrame, text: str) -> pd.DataFrame:
    """The rows whose server or model holds every word of ``text`` (any case), worst first
    still; every row for a blank text."""
    words = text.lower().split()
    if not words or frame.empty:
        return frame
    haystack = (
        frame["target"].astype(str).str.lower() + " " + frame["model"].astype(str).str.lower()
    )
    hit = pd.Series(True, index=frame.index)
    for word in words:
        hit &= haystack.str.contains(word, regex=False)
    return frame[hit].reset_index(drop=True)


ENDPOINT_COLUMNS = ["target", "endpoint", "url", "up", "reason", "fix"]


def endpoint_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per endpoint of each server (``queries.ENDPOINTS``' answer): the URL it is
    read from, whether it answered, why not and what fixes it."""
    if frame.empty or "endpoint" not in frame:
        return pd.DataFrame(columns=ENDPOINT_COLUMNS).astype({"up": bool})
    reasons = frame["reason"] if "reason" in frame else pd.Series([""] * len(frame))
    table = pd.DataFrame(
        {
            "target": frame["target"].astype(str),
            "endpoint": frame["endpoint"].astype(str),
            "url": frame["url"].astype(str),
            "up": frame["value"].astype(float) == 1.0,
            "reason": reasons.fillna("").astype(str).to_numpy(),
        }
    )
    table["fix"] = [
        "" if up else FIXES.get(e, "") for e, up in zip(table["endpoint"], table["up"], strict=True)
    ]
    return table.sort_values(["target", "endpoint"], kind="stable").reset_index(drop=True)
