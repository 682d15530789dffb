"""Prometheus' HTTP API as pandas DataFrames: instant queries, range queries, alerts.

The project's one Prometheus query client: the dashboard, the advisor's fits and the
launcher's warm-up all read Prometheus through it. Plain Python, no Streamlit.
Prometheus sends every sample value as a string ("1e+00", "NaN", "+Inf"); they become
floats here, and timestamps become timezone-aware datetimes. What can go wrong becomes one of
three typed errors, each with a message that says what to do (the caller's ``hint``
names its own setting, e.g. the dashboard's DASHBOARD_PROMETHEUS_URL):

- ``PrometheusUnreachable``: nothing answered (wrong URL, server down, timeout);
- ``PrometheusQueryError``: Prometheus answered ``status: error`` (bad PromQL,
  too many points, a query timeout);
- ``PrometheusResponseError``: something answered, but not like Prometheus.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import requests
import requests.adapters

if TYPE_CHECKING:
    import pandas as pd

# pandas is imported where a frame is built, not here: the command lines import this module
# at start (the launcher's --help included), and pandas is most of their start-up
# (bench/cli_startup.py measures it).

# Prometheus refuses range queries of more than 11,000 points per series; charts
# need far fewer: a few hundred points fill a dashboard panel's width.
MAX_POINTS = 300
# Steps a person reads easily; the chosen step is the first one that keeps the
# number of points under MAX_POINTS.
NICE_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 86400)


class PrometheusError(RuntimeError):
    """Base of every error this module raises."""


DEFAULT_HINT = "start the stack with ./stack/up, or give the right Prometheus URL"


class PrometheusUnreachable(PrometheusError):
    def __init__(self, url: str, reason: str, hint: str = DEFAULT_HINT) -> None:
        super().__init__(f"Prometheus at {url} is unreachable ({reason}): {hint}")
        self.url = url


class PrometheusQueryError(PrometheusError):
    def __init__(self, error_type: str, error: str, query: str) -> None:
        super().__init__(f"Prometheus rejected the query ({error_type}: {error}): {query}")
        self.error_type = error_type
        self.error = error
        self.query = query


class PrometheusResponseError(PrometheusError):
    """The server answered, but not with a Prometheus API response."""


@dataclass(frozen=True)
class Range:
    """A query_range window, aligned to its step so that repeated refreshes hit a cache."""

    start: float
    end: float
    step_s: int

    @property
    def seconds(self) -> float:
        return self.end - self.start


def choose_step(window_s: float, min_step_s: float = 1.0, max_points: int = MAX_POINTS) -> int:
    """The smallest nice step that draws ``window_s`` in at most ``max_points`` points.

    Never below ``min_step_s`` (the scrape interval): a finer step only repeats samples.
    """
    if window_s <= 0:
        raise ValueError("the window must be positive")
    wanted = max(window_s / max_points, min_step_s)
    for step in NICE_STEPS_S:
        if step >= wanted:
            return step
    return math.ceil(wanted)


def aligned_range(
    window_s: float,
    end: float | None = None,
    min_step_s: float = 1.0,
    max_points: int = MAX_POINTS,
) -> Range:
    """The last ``window_s`` seconds up to ``end`` (now), start and end on step multiples."""
    step = choose_step(window_s, min_step_s, max_points)
    end = time.time() if end is None else end
    aligned_end = math.floor(end / step) * step
    return Range(start=aligned_end - window_s, end=aligned_end, step_s=step)


def rate_window(step_s: float, scrape_interval_s: float) -> str:
    """The range of rate()/increase() in a chart, as PromQL (see ``rate_window_s``)."""
    return promql_duration(rate_window_s(step_s, scrape_interval_s))


def rate_window_s(step_s: float, scrape_interval_s: float) -> float:
    """Seconds of rate()/increase() in a chart: at least 4 scrapes, and at least one step.

    Shorter ranges hold fewer than two samples and give gaps; this is the rule
    Grafana calls ``$__rate_interval``.
    """
    return max(step_s + scrape_interval_s, 4 * scrape_interval_s)


def promql_duration(seconds: float) -> str:
    """A PromQL duration: 300 -> "300s", 0.5 -> "500ms"."""
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    ms = int(round(seconds * 1000))
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def increase_with_new(selector: str, window: str) -> str:
    """PromQL for each counter's increase over ``window``, counting series born inside it.

    ``increase()`` needs two samples of a series in the range, so a counter whose series
    appeared during the window (a batch size the model had never formed, a model's first
    load) has none and drops out: a 10 s window over a model's first seconds of traffic read
    "executions by size: none" beside an average batch of 1.13 from the older totals. Such a
    series counted from zero when it appeared, so its last value is its increase.
    """
    born = f"(last_over_time({selector}[{window}]) unless {selector} offset {window})"
    return f"({born} or increase({selector}[{window}]))"


# ---- parsing (pure functions over the decoded JSON) ----------------------------------


def unwrap(payload: Any, query: str = "", hint: str = DEFAULT_HINT) -> Any:
    """The ``data`` of a success response; a typed error for anything else."""
    if not isinstance(payload, dict) or "status" not in payload:
        raise PrometheusResponseError(
            f"the server's answer is not a Prometheus API response: {hint}"
        )
    if payload["status"] != "success":
        raise PrometheusQueryError(
            str(payload.get("errorType", "unknown")), str(payload.get("error", "")), query
        )
    return payload.get("data")


def sample_value(text: Any) -> float:
    """A sample value as Prometheus sends it ("1e+00", "NaN", "+Inf") as a float."""
    try:
        return float(text)
    except (TypeError, ValueError):
        raise PrometheusResponseError(f"sample value {text!r} is not a number") from None


def _timestamp(seconds: Any) -> pd.Timestamp:
    import pandas as pd

    return pd.Timestamp(float(seconds), unit="s", tz="UTC")


def vector_frame(data: Any) -> pd.DataFrame:
    """An instant query's result: one row per series, its labels as columns, ``value``.

    A scalar result becomes one row without labels. An empty result is an empty frame.
    """
    import pandas as pd

    kind, result = _result(data)
    if kind == "scalar":
        ts, value = result
        return pd.DataFrame({"time": [_timestamp(ts)], "value": [sample_value(value)]})
    if kind != "vector":
        raise PrometheusResponseError(f"expected an instant vector, got {kind!r}")
    rows = [
        {**series["metric"], "time": _timestamp(series["value"][0]), "value": sample_value(v)}
        for series in result
        for v in [series["value"][1]]
    ]
    return _frame(rows)


def matrix_frame(data: Any) -> pd.DataFrame:
    """A range query's result in long form: one row per sample, labels, ``time``, ``value``."""
    kind, result = _result(data)
    if kind != "matrix":
        raise PrometheusResponseError(f"expected a range vector (matrix), got {kind!r}")
    rows = [
        {**series["metric"], "time": _timestamp(ts), "value": sample_value(value)}
        for series in result
        for ts, value in series.get("values", [])
    ]
    return _frame(rows)


ALERT_COLUMNS = ["alertname", "state", "severity", "summary", "description", "active_at", "value"]


def alerts_frame(data: Any) -> pd.DataFrame:
    """/api/v1/alerts: one row per alert (firing and pending), firing first."""
    if not isinstance(data, dict) or not isinstance(data.get("alerts"), list):
        raise PrometheusResponseError("the alerts answer has no list of alerts")
    import pandas as pd

    rows = []
    for alert in data["alerts"]:
        labels = alert.get("labels", {})
        notes = alert.get("annotations", {})
        rows.append(
            {
                "alertname": labels.get("alertname", ""),
                "state": alert.get("state", ""),
                "severity": labels.get("severity", ""),
                "summary": notes.get("summary", ""),
                "description": notes.get("description", ""),
                "active_at": pd.Timestamp(alert["activeAt"]) if alert.get("activeAt") else pd.NaT,
                "value": sample_value(alert.get("value", "NaN")),
                "labels": labels,
            }
        )
    frame = pd.DataFrame(rows, columns=[*ALERT_COLUMNS, "labels"])
    rank = frame["state"].map({"firing": 0, "pending": 1}).fillna(2)
    order = sorted(range(len(frame)), key=lambda i: (rank.iloc[i], frame["alertname"].iloc[i]))
    return frame.iloc[order].reset_index(drop=True)


def _result(data: Any) -> tuple[str, Any]:
    if not isinstance(data, dict) or "resultType" not in data or "result" not in data:
        raise PrometheusResponseError("the query answer has no resultType/result")
    return str(data["resultType"]), data["result"]


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    if not rows:
        return pd.DataFrame({"time": pd.Series(dtype="datetime64[ns, UTC]"), "value": []})
    return pd.DataFrame(rows)


# ---- the client ----------------------------------------------------------------------


class PromClient:
    """Reads one Prometheus server. Thread-safe: each call makes its own request."""

    def __init__(self, base_url: str, timeout_s: float = 5.0, hint: str = DEFAULT_HINT) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        # What the user can do when Prometheus does not answer usably (names their setting).
        self.hint = hint
        self._session = requests.Session()
        # The live view runs its queries concurrently (up to 8); keep a connection each.
        adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=16)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

    def query(self, expr: str, at: float | None = None) -> pd.DataFrame:
        params: dict[str, str] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return vector_frame(self._get("/api/v1/query", params, expr))

    def query_range(self, expr: str, window: Range) -> pd.DataFrame:
        params = {
            "query": expr,
            "start": f"{window.start:.3f}",
            "end": f"{window.end:.3f}",
            "step": str(window.step_s),
        }
        return matrix_frame(self._get("/api/v1/query_range", params, expr))

    def alerts(self) -> pd.DataFrame:
        return alerts_frame(self._get("/api/v1/alerts", {}, ""))

    def scalar(self, expr: str, at: float | None = None) -> float | None:
        """The one value of a query that yields at most one series; None when it has none."""
        frame = self.query(expr, at)
        if frame.empty:
            return None
        if len(frame) > 1:
            raise PrometheusResponseError(f"expected one series, got {len(frame)}: {expr}")
        return float(frame["value"].iloc[0])

    def _get(self, path: str, params: dict[str, str], query: str) -> Any:
        url = f"{self.base_url}{path}"
        try:
            # POST-style form bodies are not needed: queries here are short.
            response = self._session.get(url, params=params, timeout=self.timeout_s)
        except requests.Timeout:
            raise PrometheusUnreachable(
                self.base_url, f"no answer within {self.timeout_s:g} s", self.hint
            ) from None
        except requests.RequestException as exc:
            raise PrometheusUnreachable(self.base_url, _reason(exc), self.hint) from None
        try:
            payload = response.json()
        except ValueError:
            raise PrometheusResponseError(
                f"{url} answered HTTP {response.status_code} with a body that is not JSON: "
                f"{self.hint}"
            ) from None
        return unwrap(payload, query, self.hint)


def _reason(exc: requests.RequestException) -> str:
    text = str(exc)
    if "Connection refused" in text:
        return "connection refused"
    if "Name or service not known" in text or "Failed to resolve" in text:
        return "unknown host"
    return type(exc).__name__
