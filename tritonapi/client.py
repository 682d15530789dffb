"""Synchronous reads (and the few writes) of Triton's HTTP/REST API.

One :class:`TritonClient` per server. It keeps a ``requests.Session`` (one connection
pool; pass your own to share it) and turns every way a call can fail into one of
three errors, each naming the server and what went wrong:

- :class:`TritonUnreachable`: nothing answered (refused, timed out, DNS);
- :class:`TritonHTTPError`: Triton answered with an error status; ``status`` and
  Triton's own ``error`` text are kept;
- :class:`TritonBadResponse`: something answered, but not like Triton (HTML, not JSON,
  the wrong shape).

All three derive from :class:`TritonError`, so a caller that only needs "it did not
work, and why" catches that one.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import requests

from tritonapi.modelconfig import ModelConfig, parse_json
from tritonapi.stats import ModelStats, parse_statistics

DEFAULT_TIMEOUT_S = 5.0


class TritonError(RuntimeError):
    """A call to Triton did not give a usable answer; the message says which and why."""

    def __init__(self, message: str, url: str = "") -> None:
        super().__init__(message)
        self.url = url


# TritonUnreachable's reason for a request that got no answer in time.
TIMED_OUT = "timed out"


class TritonUnreachable(TritonError):
    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"Triton at {url} is not answering ({reason})", url)
        self.reason = reason

    @property
    def timed_out(self) -> bool:
        """It answered nothing within the time given (it may still be up, and busy)."""
        return self.reason == TIMED_OUT


class TritonHTTPError(TritonError):
    def __init__(self, url: str, what: str, status: int, error: str) -> None:
        super().__init__(f"{what}: Triton at {url} answered {status} ({error})", url)
        self.status = status
        self.error = error


class TritonBadResponse(TritonError):
    def __init__(self, url: str, what: str, problem: str) -> None:
        super().__init__(f"{what}: the answer of {url} is not Triton's ({problem})", url)


def newest_version(versions: Iterable[str]) -> str:
    """The version Triton serves when none is named: the highest number (policy ``latest``).

    Versions that are not numbers sort below every number; "" when there is none.
    """
    ordered = sorted(versions, key=lambda v: (v.isdigit(), int(v) if v.isdigit() else 0, v))
    return ordered[-1] if ordered else ""


def _reason(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.Timeout):
        return TIMED_OUT
    text = str(exc)
    if "refused" in text:
        return "connection refused"
    if "Name or service not known" in text or "NameResolutionError" in text:
        return "unknown host"
    return type(exc).__name__


def _model_path(model: str, version: str = "") -> str:
    path = f"/v2/models/{quote(model, safe='')}"
    return path + (f"/versions/{quote(version, safe='')}" if version else "")


class TritonClient:
    """Triton's HTTP endpoint at ``url`` (``http://host:8000``)."""

    def __init__(
        self,
        url: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        session: requests.Session | None = None,
        headers: dict[str, str] | None = None,
        reuse_unchanged: bool = False,
        connections: int = 0,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = session if session is not None else requests.Session()
        if connections:
            # As many kept connections as requests a caller sends at once (requests keeps
            # 10 per host): past them each answered request's connection is discarded, with a
            # WARNING line, and the next read connects again.
            adapter = requests.adapters.HTTPAdapter(pool_maxsize=connections)
            self.session.mount("http://", adapter)
            self.session.mount("https://", adapter)
        self.headers = dict(headers or {})
        # With reuse_unchanged, an answer byte for byte the same as the last one to the same
        # request is not decoded again: the same object is returned, which callers must not
        # change. A reader that polls (the exporter) then skips what an idle Triton repeats.
        self._last: dict[tuple[str, str], tuple[bytes, Any]] | None = (
            {} if reuse_unchanged else None
        )

    # -- transport -------------------------------------------------------------------

    def _send(
        self, method: str, path: str, timeout_s: float | None, body: Any = None
    ) -> requests.Response:
        try:
            return self.session.request(
                method,
                f"{self.url}{path}",
                json=body,
                headers=self.headers,
                timeout=self.timeout_s if timeout_s is None else timeout_s,
            )
        except requests.RequestException as exc:
            raise TritonUnreachable(self.url, _reason(exc)) from None

    def request_json(
        self, method: str, path: str, timeout_s: float | None = None, body: Any = None
    ) -> Any:
        """The decoded JSON of ``method path``; a TritonError if there is none."""
        what = f"{method} {path}"
        response = self._send(method, path, timeout_s, body)
        if response.status_code >= 400:
            raise TritonHTTPError(self.url, what, response.status_code, _error_text(response))
        kept = self._last.get((method, path)) if self._last is not None else None
        if kept is not None and kept[0] == response.content:
            return kept[1]
        try:
            decoded = response.json()
            if self._last is not None:
                self._last[(method, path)] = (response.content, decoded)
            return decoded
        except ValueError:
            kind = response.headers.get("content-type", "no content type")
            raise TritonBadResponse(self.url, what, f"not JSON, {kind}") from None

    def get_json(self, path: str, timeout_s: float | None = None) -> Any:
        return self.request_json("GET", path, timeout_s)

    def _expect(self, value: Any, kind: type, what: str) -> Any:
        if not isinstance(value, kind):
            raise TritonBadResponse(self.url, what, f"expected a JSON {kind.__name__}")
        return value

    def infer_json(
        self,
        model: str,
        inputs: list[dict[str, Any]],
        parameters: dict[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """One inference with JSON tensors (KServe v2 ``inputs``, request ``parameters`` such
        as ``sequence_id`` or ``priority``). For single requests (sequences, checks); load
        runs use loadgen's binary-tensor client."""
        body: dict[str, Any] = {"inputs": inputs}
        if parameters:
            body["parameters"] = parameters
        what = f"POST {_model_path(model)}/infer"
        answer = self.request_json("POST", f"{_model_path(model)}/infer", timeout_s, body)
        return dict(self._expect(answer, dict, what))

    # -- health and metadata ------------------------------------------------------------

    def ready(self, timeout_s: float | None = None) -> bool:
        """``GET /v2/health/ready``: True when ready; False when up but not ready."""
        return self._send("GET", "/v2/health/ready", timeout_s).status_code == 200

    def is_ready(self, timeout_s: float | None = None) -> bool:
        """Like :meth:`ready`, but False (not an error) when nothing answers."""
        try:
            return self.ready(timeout_s)
        except TritonUnreachable:
            return False

    def server_metadata(self, timeout_s: float | None = None) -> dict[str, Any]:
        """``GET /v2``: name, version and extensions of the server."""
        body = self.get_json("/v2", timeout_s)
        if not isinstance(body, dict) or "version" not in body:
            raise TritonBadResponse(self.url, "GET /v2", "no server version")
        return body

    def model_metadata(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> dict[str, Any]:
        """``GET /v2/models/<m>``: versions, inputs and outputs."""
        path = _model_path(model, version)
        return self._expect(self.get_json(path, timeout_s), dict, f"GET {path}")

    def model_config_json(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> dict[str, Any]:
        """``GET /v2/models/<m>/config``: the effective configuration, as Triton sends it."""
        path = _model_path(model, version) + "/config"
        return self._expect(self.get_json(path, timeout_s), dict, f"GET {path}")

    def model_config(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> ModelConfig:
        """The effective configuration, typed (see :mod:`tritonapi.modelconfig`)."""
        body = self.model_config_json(model, version, timeout_s)
        try:
            return parse_json(body)
        except ValueError as exc:
            what = f"GET {_model_path(model, version)}/config"
            raise TritonBadResponse(self.url, what, str(exc)) from None

    def repository_index(self, timeout_s: float | None = None) -> list[Any]:
        """``POST /v2/repository/index``: every model of the repository with its state."""
        body = self.request_json("POST", "/v2/repository/index", timeout_s, body={})
        return self._expect(body, list, "POST /v2/repository/index")

    def ready_models(self, timeout_s: float | None = None) -> list[str]:
        """Names of the models whose state is READY, sorted."""
        return sorted(
            {
                str(m.get("name", ""))
                for m in self.repository_index(timeout_s)
                if isinstance(m, dict) and m.get("state") == "READY"
            }
        )

    def load_model(
        self,
        model: str,
        config: dict[str, Any] | None = None,
        files: dict[str, bytes] | None = None,
        timeout_s: float | None = 120.0,
    ) -> None:
        """``POST /v2/repository/models/<m>/load`` (explicit model control, restricted: the
        key's headers). With ``config`` (the config JSON) and ``files`` (path in the model's
        folder -> content, e.g. ``1/model.py``), Triton loads a model of that name from
        them: a scratch copy that no repository folder holds."""
        parameters: dict[str, str] = {}
        if config is not None:
            parameters["config"] = json.dumps(config)
        for path, content in (files or {}).items():
            parameters[f"file:{path}"] = base64.b64encode(content).decode()
        self._ok(
            "POST",
            f"/v2/repository/models/{quote(model, safe='')}/load",
            timeout_s,
            {"parameters": parameters},
        )

    def unload_model(self, model: str, timeout_s: float | None = 60.0) -> None:
        """``POST /v2/repository/models/<m>/unload`` (explicit model control, restricted)."""
        self._ok("POST", f"/v2/repository/models/{quote(model, safe='')}/unload", timeout_s, {})

    def _ok(self, method: str, path: str, timeout_s: float | None, body: Any) -> None:
        """A request whose answer is empty on success; TritonHTTPError otherwise."""
        response = self._send(method, path, timeout_s, body)
        if response.status_code >= 400:
            what = f"{method} {path}"
            raise TritonHTTPError(self.url, what, response.status_code, _error_text(response))

    # -- statistics ---------------------------------------------------------------------

    def statistics_json(self, model: str = "", timeout_s: float | None = None) -> Any:
        """``GET /v2/models[/<m>]/stats`` as decoded JSON (every model without ``model``)."""
        path = (_model_path(model) if model else "/v2/models") + "/stats"
        return self.get_json(path, timeout_s)

    def served_models(self, timeout_s: float | None = None) -> list[str]:
        """Names of the models Triton has loaded, from its statistics API (open on every
        Triton, where the repository index may be restricted), sorted."""
        body = self.statistics_json(timeout_s=timeout_s)
        entries = body.get("model_stats") if isinstance(body, dict) else None
        if not isinstance(entries, list):
            raise TritonBadResponse(self.url, "GET /v2/models/stats", "no model_stats")
        return sorted({str(e["name"]) for e in entries if isinstance(e, dict) and "name" in e})

    def model_stats(
        self, model: str, version: str = "", timeout_s: float | None = None
    ) -> ModelStats:
        """Cumulative statistics of one model version (the newest loaded one by default)."""
        path = _model_path(model, version) + "/stats"
        try:
            stats = parse_statistics(self.get_json(path, timeout_s))
        except ValueError as exc:
            raise TritonBadResponse(self.url, f"GET {path}", str(exc)) from None
        if not stats:
            raise TritonBadResponse(self.url, f"GET {path}", f"no statistics for {model!r}")
        newest = newest_version(s.version for s in stats)
        return next(s for s in stats if s.version == newest)

    # -- trace settings -------------------------------------------------------------------

    def trace_settings(self, model: str = "", timeout_s: float | None = None) -> dict[str, Any]:
        """``GET /v2[/models/<m>]/trace/setting``: level, rate, count, file, mode."""
        path = (_model_path(model) if model else "/v2") + "/trace/setting"
        return self._expect(self.get_json(path, timeout_s), dict, f"GET {path}")

    def update_trace_settings(
        self, settings: dict[str, Any], model: str = "", timeout_s: float | None = None
    ) -> dict[str, Any]:
        """``POST .../trace/setting``; Triton wants every value as a string or list of them.

        Returns the settings now in force. A ``None`` value clears a model's own setting,
        so that the global one applies again.
        """
        body = {k: _trace_value(v) for k, v in settings.items()}
        path = (_model_path(model) if model else "/v2") + "/trace/setting"
        return self._expect(self.request_json("POST", path, timeout_s, body), dict, f"POST {path}")


def _trace_value(value: Any) -> Any:
    if value is None or isinstance(value, list):
        return value
    return str(value)


def _error_text(response: requests.Response) -> str:
    """Triton's ``{"error": "..."}``, else the start of whatever came back."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    text = response.text.strip().replace("\n", " ")
    return text[:120] or response.reason or "no body"


def metrics_text(
    metrics_url: str, timeout_s: float = DEFAULT_TIMEOUT_S, session: requests.Session | None = None
) -> str:
    """Triton's Prometheus text (``http://host:8002/metrics``)."""
    getter: Any = session if session is not None else requests
    what = f"GET {metrics_url}"
    try:
        response = getter.get(metrics_url, timeout=timeout_s)
    except requests.RequestException as exc:
        raise TritonUnreachable(metrics_url, _reason(exc)) from None
    if response.status_code >= 400:
        raise TritonHTTPError(metrics_url, what, response.status_code, _error_text(response))
    return str(response.text)
