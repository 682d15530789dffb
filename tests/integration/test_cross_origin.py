"""A page of another origin, in the real Chromium, can do nothing to the running stack.

The page is served by this test on another loopback port (a same-machine page reaches
loopback, so binding 127.0.0.1 alone protects nothing). From it the test tries every
write and read an attacker would: silences and alerts on Alertmanager; reload, quit,
the admin API and a query on Prometheus; Triton's repository, trace and logging APIs;
and the dashboard's websocket, replaying the very messages the dashboard's own page sent
to start a load run (which, replayed from the dashboard's own origin, start one). Each
attempt is checked on the server's side, not by what the page saw: no silence or alert
exists, Prometheus is the same process with its data, Triton's model, statistics, trace
and log settings are unchanged, no load run is stored. Then the stack still works: a
firing alert reaches Alertmanager through its basic auth.
"""

from __future__ import annotations

import base64
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from playwright.sync_api import Browser, Locator, Page, WebSocket, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from streamlit.proto.BackMsg_pb2 import BackMsg

from runs.store import RunStore
from stack.supervisor import Supervisor, is_alive, running
from stacksettings import RULES_SETTINGS, Settings, isolated
from tests.helpers import RERUN_CAUSES, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
MODEL = "batch_add_model"

# fetch() from the page; what the page could see: "error ..." (the browser refused: no
# CORS), "opaque" (sent, answer unreadable), or "status N: body" (readable).
FETCH = """
async ({url, method, body, type, mode}) => {
  const headers = type ? {'Content-Type': type} : {};
  try {
    const r = await fetch(url, {method, body, mode, headers});
    if (r.type === 'opaque') return 'opaque';
    return `status ${r.status}: ${(await r.text()).slice(0, 200)}`;
  } catch (e) {
    return `error ${e}`;
  }
}
"""
# Opens the dashboard's websocket, sends frames (base64), collects what comes back.
# Opens the dashboard's websocket from ``page``'s origin, sends ``frames``, and gathers what
# comes back: until one of the ``until`` texts has arrived and nothing more for ``quietMs``
# (the script's run is over), or ``waitMs`` in all. A page that never shows the text waits
# the whole ``waitMs``, so whatever else it would show is in the answer.
WEBSOCKET = """
async ({url, frames, waitMs, until, quietMs}) => {
  const latin1 = buf => {
    const bytes = new Uint8Array(buf); let s = '';
    for (let i = 0; i < bytes.length; i += 8192)
      s += String.fromCharCode(...bytes.subarray(i, i + 8192));
    return s;
  };
  const ws = new WebSocket(url, ['streamlit']);
  ws.binaryType = 'arraybuffer';
  const received = [];
  let seen = false, last = Date.now();
  ws.onmessage = e => {
    const text = typeof e.data === 'string' ? e.data : latin1(e.data);
    received.push(btoa(text));
    last = Date.now();
    seen = seen || until.some(u => text.includes(u));
  };
  const opened = await new Promise(done => {
    ws.onopen = () => done(true); ws.onerror = () => done(false); ws.onclose = () => done(false);
  });
  if (!opened) return {opened, received};
  for (const f of frames) ws.send(Uint8Array.from(atob(f), c => c.charCodeAt(0)));
  const start = Date.now();
  while (Date.now() - start < waitMs && !(seen && Date.now() - last >= quietMs))
    await new Promise(done => setTimeout(done, 100));
  ws.close();
  return {opened, received};
}
"""
# The answer is over once its text came and the socket was quiet this long.
QUIET_MS = 1500


class ForeignSite:
    """A page on another loopback port: the attacker's origin."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                body = b"<!doctype html><title>another site</title><p>hello</p>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def quick_rules(folder: Path) -> Path:
    """The shipped rules with 2 s `for` durations and Alertmanager flushing after 1 s."""
    data = yaml.safe_load(RULES_SETTINGS.read_text())
    data["windows"] = {"short": "5s", "long": "10s"}
    for alert in data["alerts"].values():
        alert["for"] = "2s"
    data["alertmanager"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    path = folder / "rules-settings.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Settings, Supervisor]]:
    folder = tmp_path_factory.mktemp("cross-origin")
    settings = replace(isolated(folder / "state"), rules_settings=quick_rules(folder))
    with running(settings) as supervisor:
        yield settings, supervisor


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def foreign(browser: Browser) -> Iterator[Page]:
    site = ForeignSite()
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(site.url)
        yield page
    finally:
        context.close()
        site.close()


def attempt(page: Page, url: str, method: str = "POST", body: str | None = None) -> list[str]:
    """The request as a CORS request with a JSON body (preflighted) and as a simple one
    (no preflight, the answer unreadable: what a form post does)."""
    tries = [{"mode": "cors", "type": "application/json" if body is not None else ""}]
    if method in ("GET", "POST"):
        tries.append({"mode": "no-cors", "type": "text/plain" if body is not None else ""})
    return [page.evaluate(FETCH, {"url": url, "method": method, "body": body, **t}) for t in tries]


def readable_success(outcomes: list[str]) -> list[str]:
    return [o for o in outcomes if o.startswith("status 2")]


def am(settings: Settings, path: str, **kwargs: Any) -> Any:
    response = requests.request(
        kwargs.pop("method", "GET"),
        f"{settings.url('alertmanager')}{path}",
        auth=settings.alertmanager_auth(),
        timeout=5,
        **kwargs,
    )
    response.raise_for_status()
    return response.json()


def test_alertmanager_takes_no_silence_or_alert_from_another_origin(
    stack: tuple[Settings, Supervisor], foreign: Page
) -> None:
    settings, _ = stack
    base = settings.url("alertmanager")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    # The stack's own silence, made with the password: the page will try to delete it.
    own = am(
        settings,
        "/api/v2/silences",
        method="POST",
        json={
            "matchers": [{"name": "alertname", "value": "Maintenance", "isRegex": False}],
            "startsAt": now,
            "endsAt": later,
            "createdBy": "test",
            "comment": "ours",
        },
    )["silenceID"]
    silence = (
        '{"matchers":[{"name":"alertname","value":"TritonDown","isRegex":false}],'
        f'"startsAt":"{now}","endsAt":"{later}","createdBy":"page","comment":"x"}}'
    )
    alert = '[{"labels":{"alertname":"FromAPage","severity":"critical"}}]'
    outcomes = [
        *attempt(foreign, f"{base}/api/v2/silences", body=silence),
        *attempt(foreign, f"{base}/api/v1/silences", body=silence),
        *attempt(foreign, f"{base}/api/v2/silence/{own}", method="DELETE"),
        *attempt(foreign, f"{base}/api/v2/alerts", body=alert),
        *attempt(foreign, f"{base}/api/v1/alerts", body=alert),
        *attempt(foreign, f"{base}/api/v2/alerts", method="GET"),
    ]
    assert readable_success(outcomes) == [], outcomes
    time.sleep(2)  # what was sent is applied by now
    silences = am(settings, "/api/v2/silences")
    assert [(s["id"], s["status"]["state"]) for s in silences] == [(own, "active")]
    assert am(settings, "/api/v2/alerts", params={"filter": 'alertname="FromAPage"'}) == []


def prometheus_query(settings: Settings, promql: str) -> list[Any]:
    response = requests.get(
        f"{settings.url('prometheus')}/api/v1/query", params={"query": promql}, timeout=5
    )
    response.raise_for_status()
    result: list[Any] = response.json()["data"]["result"]
    return result


def test_prometheus_cannot_be_read_reloaded_stopped_or_wiped_from_another_origin(
    stack: tuple[Settings, Supervisor], foreign: Page
) -> None:
    settings, supervisor = stack
    base = settings.url("prometheus")
    (before,) = [r for r in supervisor.read_state() if r.name == "prometheus"]
    wait_for("a scrape", lambda: prometheus_query(settings, 'up{job="exporter"}'))
    outcomes = [
        *attempt(foreign, f"{base}/api/v1/query?query=up", method="GET"),
        *attempt(foreign, f"{base}/api/v1/query", body="query=up"),
        *attempt(foreign, f"{base}/api/v1/label/model/values", method="GET"),
        *attempt(foreign, f"{base}/-/reload", body=""),
        *attempt(foreign, f"{base}/-/quit", body=""),
        *attempt(foreign, f"{base}/api/v1/admin/tsdb/snapshot", body=""),
        *attempt(foreign, f"{base}/api/v1/admin/tsdb/delete_series?match[]=up", body=""),
        *attempt(foreign, f"{base}/api/v1/admin/tsdb/clean_tombstones", body=""),
    ]
    assert readable_success(outcomes) == [], outcomes
    # The query's answer reached nobody: no CORS header for this origin.
    assert all(o.startswith("error") or o == "opaque" for o in outcomes[:6]), outcomes
    time.sleep(2)
    (after,) = [r for r in supervisor.read_state() if r.name == "prometheus"]
    assert after.pid == before.pid and is_alive(after)
    assert requests.get(f"{base}/-/ready", timeout=5).status_code == 200
    assert not (settings.state_dir / "prometheus" / "data" / "snapshots").exists()
    # Nothing deleted: the series' first samples are still there.
    assert prometheus_query(settings, 'count_over_time(up{job="exporter"}[1h]) > 1')


def triton_view(settings: Settings) -> dict[str, Any]:
    """What the page would change: the model's readiness and statistics, the trace and log
    settings, the repository's index (read with the admin key)."""
    url, headers = settings.url("triton_http"), settings.admin_headers()

    def get(path: str) -> Any:
        return requests.get(f"{url}{path}", headers=headers, timeout=5).json()

    return {
        "ready": requests.get(f"{url}/v2/models/{MODEL}/ready", timeout=5).status_code,
        "stats": get(f"/v2/models/{MODEL}/stats"),
        "trace": get(f"/v2/models/{MODEL}/trace/setting"),
        "global trace": get("/v2/trace/setting"),
        "logging": get("/v2/logging"),
        "index": requests.post(f"{url}/v2/repository/index", headers=headers, timeout=5).json(),
    }


def test_tritons_restricted_apis_refuse_another_origin(
    stack: tuple[Settings, Supervisor], foreign: Page
) -> None:
    settings, _ = stack
    base = settings.url("triton_http")
    before = triton_view(settings)
    assert before["ready"] == 200 and before["trace"]["trace_level"] == ["OFF"]
    trace_on = '{"trace_level":["TIMESTAMPS"],"trace_rate":"1","trace_count":"-1"}'
    outcomes = [
        *attempt(foreign, f"{base}/v2/repository/index", body="{}"),
        *attempt(foreign, f"{base}/v2/repository/models/{MODEL}/unload", body="{}"),
        *attempt(foreign, f"{base}/v2/repository/models/{MODEL}/load", body="{}"),
        *attempt(foreign, f"{base}/v2/models/{MODEL}/trace/setting", body=trace_on),
        *attempt(foreign, f"{base}/v2/trace/setting", body=trace_on),
        *attempt(foreign, f"{base}/v2/logging", body='{"log_verbose_level":2}'),
        *attempt(foreign, f"{base}/v2/logging", method="GET"),
    ]
    assert readable_success(outcomes) == [], outcomes
    time.sleep(1)
    assert triton_view(settings) == before


def stored_runs(settings: Settings) -> int:
    if not settings.store.exists():
        return 0
    with RunStore(settings.store) as runs:
        return len(runs.list_runs())


def idle(settings: Settings) -> bool:
    with RunStore(settings.store) as runs:
        return all(r["status"] != "running" for r in runs.list_runs())


def is_page_rerun(frame: bytes) -> bool:
    """A rerun of the whole page (a click's, a view's), not of one fragment."""
    msg = BackMsg.FromString(frame)
    return msg.WhichOneof("type") == "rerun_script" and not msg.rerun_script.fragment_id


def rerun_as(frame: bytes, view: str) -> bytes:
    """The captured rerun message, asking for ``view`` with no widget pressed."""
    msg = BackMsg()
    msg.ParseFromString(frame)
    msg.rerun_script.query_string = f"view={view.replace(' ', '+')}"
    msg.rerun_script.widget_states.Clear()
    return msg.SerializeToString()


def socket(
    page: Page, settings: Settings, frames: list[bytes], until: tuple[str, ...]
) -> tuple[bool, bytes]:
    """What the dashboard answers ``frames`` sent from ``page``'s origin: everything until
    one of ``until`` came and the socket was quiet for QUIET_MS, or 8 s."""
    url = settings.url("dashboard").replace("http://", "ws://") + "/_stcore/stream"
    encoded = [base64.b64encode(f).decode() for f in frames]
    got = page.evaluate(
        WEBSOCKET,
        {"url": url, "frames": encoded, "waitMs": 8000, "until": until, "quietMs": QUIET_MS},
    )
    return got["opened"], b"".join(base64.b64decode(m) for m in got["received"])


class PageNotShown(AssertionError):
    """:func:`shown`'s failure: what the page and the dashboard's log showed, and the
    modules of the dashboard's own ``/static/js/`` that the page said it could not fetch."""

    def __init__(self, message: str, nodeid: str, modules: list[str]) -> None:
        super().__init__(message)
        self.nodeid = nodeid
        self.modules = modules


# What Streamlit's page writes where a widget's code could not be imported.
MODULE_FAILED = re.compile(r"TypeError: Failed to fetch dynamically imported module: (\S+)")


def streamlit_modules_missing(error: BaseException | None = None) -> bool:
    """The rerun condition of the dashboard's test: its page could not fetch one of
    Streamlit's own modules from the dashboard (``/static/js/``), so a form never showed.

    Seen in a full run of the suite on 2026-12-05 (session 48): the heading came, and the
    form's widgets' modules failed to load in the browser ("Failed to fetch dynamically
    imported module"), the dashboard's log quiet; a run before (session 47) met the same
    symptom, its page's text not yet recorded. Not met alone, nor in 18 page loads beside
    three busy loops. Streamlit's static files and Chromium's module loader are no code of this
    project; the test's subject is what another origin can do. The rerun is listed with
    the browser's reasons and counts toward the session's cap (tests/conftest.py)."""
    if not isinstance(error, PageNotShown) or not error.modules:
        return False
    RERUN_CAUSES[error.nodeid] = (
        f"the dashboard's page could not fetch Streamlit's modules {error.modules}; "
        f"the test failed with {str(error)[:600]!r}"
    )
    return True


def heading(page: Page, name: str, settings: Settings, nodeid: str, failed: list[str]) -> None:
    """Wait for the page's heading ``name``; on a timeout, fail with what the page and the
    dashboard's log showed (CI at e3d1d2b once waited 60 s for it in vain)."""
    element = page.get_by_role("heading", name=name)
    shown(element, f"heading {name!r}", page, settings, nodeid, failed)


def shown(
    element: Locator, what: str, page: Page, settings: Settings, nodeid: str, failed: list[str]
) -> None:
    """Wait up to 60 s for ``element``; on a timeout, fail (:class:`PageNotShown`) with what
    the page, the browser (``failed``: the page's failed requests and error answers) and
    the dashboard's log showed. The form's fields too: in one CI run (session 47) the
    heading came and the "Concurrency" field did not within Playwright's 30 s."""
    try:
        element.wait_for(timeout=60_000)
    except PlaywrightTimeout:
        log = settings.log_file("dashboard")
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else "(no log)"
        body = page.inner_text("body")
        static = f"{settings.url('dashboard')}/static/js/"
        modules = sorted({m for m in MODULE_FAILED.findall(body) if m.startswith(static)})
        raise PageNotShown(
            f"no {what} in 60 s; the page showed {body[:800]!r}; the browser's failed "
            f"requests: {failed[:10]}; the dashboard's log ends {tail!r}",
            nodeid,
            modules,
        ) from None


@pytest.mark.flaky(reruns=1, condition=streamlit_modules_missing)
def test_the_dashboard_obeys_no_page_of_another_origin(
    stack: tuple[Settings, Supervisor],
    browser: Browser,
    foreign: Page,
    request: pytest.FixtureRequest,
) -> None:
    settings, _ = stack
    nodeid = request.node.nodeid
    # The dashboard's own page starts a load run; its websocket messages are recorded.
    own = browser.new_context().new_page()
    failed: list[str] = []  # what the browser could not fetch, for a failure's message
    own.on("requestfailed", lambda r: failed.append(f"{r.url} {r.failure}"))
    own.on("response", lambda r: failed.append(f"{r.url} {r.status}") if r.status >= 400 else None)
    sent: list[bytes | str] = []

    def record(ws: WebSocket) -> None:
        def keep(payload: bytes | str) -> None:
            sent.append(payload)

        ws.on("framesent", keep)

    own.on("websocket", record)
    own.goto(f"{settings.url('dashboard')}/?view=Load+runs")
    heading(own, "Load runs", settings, nodeid, failed)
    for name, value in (("Concurrency", "1"), ("Duration (s)", "1")):
        shown(own.get_by_label(name), f"field {name!r}", own, settings, nodeid, failed)
        own.get_by_label(name).fill(value)
        own.get_by_label(name).press("Enter")
    own.wait_for_timeout(1000)  # let Streamlit take the inputs before the click
    before_click, runs = len(sent), stored_runs(settings)
    own.get_by_role("button", name="Start run").click()
    wait_for("the page's own run", lambda: stored_runs(settings) == runs + 1, 60)
    # Playwright's sync API hands events over only while it is called: the poll above made
    # no call, so the frames sent since wait in its queue until this one.
    own.wait_for_timeout(500)
    frames = [bytes(f) for f in sent[before_click:] if isinstance(f, bytes)]
    # The click's rerun is the first of the whole page; the progress fragment's own reruns
    # (every 0.5 s while the run goes) follow it and are no click.
    reruns = [f for f in frames if is_page_rerun(f)]
    assert reruns, "no rerun message recorded for the click"
    click = frames[: frames.index(reruns[0]) + 1]
    wait_for("the run's end", lambda: idle(settings))

    # Replayed from the dashboard's own origin, the messages start a run: the replay works.
    opened, answer = socket(own, settings, click, ("Start run",))
    assert opened and b"Start run" in answer
    wait_for("the replayed run", lambda: stored_runs(settings) == runs + 2, 60)
    wait_for("the run's end", lambda: idle(settings))
    # ... and the advisor's button and the trace switch are offered to it.
    _, runs_view = socket(
        own, settings, [rerun_as(reruns[0], "Load runs")], ("Ask the advisor about this run",)
    )
    assert b"Ask the advisor about this run" in runs_view
    _, timeline_view = socket(
        own, settings, [rerun_as(reruns[0], "Batch timeline")], ("Trace the next",)
    )
    assert b"Trace the next" in timeline_view

    # From the other origin: refused before any widget exists, nothing started.
    trace_before = triton_view(settings)["trace"]
    for frames in (
        click,
        [rerun_as(reruns[0], "Load runs")],
        [rerun_as(reruns[0], "Batch timeline")],
    ):
        # Waits for the refusal; a page that shows no refusal is read for the whole 8 s.
        _, answer = socket(foreign, settings, frames, ("Refused: the page at ",))
        assert b"Refused: the page at " in answer
        for widget in (b"Start run", b"Ask the advisor", b"Trace the next"):
            assert widget not in answer
    time.sleep(3)
    assert stored_runs(settings) == runs + 2
    assert triton_view(settings)["trace"] == trace_before
    own.context.close()


def test_the_stack_still_works_and_alerts_reach_alertmanager(
    stack: tuple[Settings, Supervisor],
) -> None:
    settings, supervisor = stack
    exporter = requests.get(f"{settings.url('exporter')}/metrics", timeout=10)
    assert exporter.status_code == 200 and "triton_batching" in exporter.text
    wait_for(
        "Prometheus to scrape Alertmanager with its password",
        lambda: (
            [r["value"][1] for r in prometheus_query(settings, 'up{job="alertmanager"}')] == ["1"]
        ),
    )
    supervisor.stop_service("exporter")
    try:
        wait_for(
            "ExporterDown to reach Alertmanager",
            lambda: am(settings, "/api/v2/alerts", params={"filter": 'alertname="ExporterDown"'}),
            60,
        )
    finally:
        supervisor.start_service("exporter")
    # Alertmanager refuses the same request without the password.
    anonymous = requests.get(f"{settings.url('alertmanager')}/api/v2/alerts", timeout=5)
    assert anonymous.status_code == 401
