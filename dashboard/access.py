"""Who may start work from the dashboard: load runs and the advisor cost the server CPU.

On loopback only this machine's users reach the page, and both are open. Anywhere else
(compose, Kubernetes, ``up --host ... --expose``) the page asks for a token first; with
no token configured those actions stay off. Reading charts never needs one. Streamlit's
own XSRF and CORS protections (set by the launcher and the deploy files) keep another
site's page from driving the form through the user's browser.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

import streamlit as st

from dashboard.settings import DashboardSettings
from stacksettings import is_loopback, read_secret

OPEN, TOKEN, CLOSED = "open", "token", "closed"
UNLOCKED = "access_unlocked"


def policy(address: str, token: str | None) -> str:
    """``open`` on loopback without a token; ``token`` when one is set; else ``closed``."""
    if token:
        return TOKEN
    return OPEN if address and is_loopback(address) else CLOSED


def accepts(given: str, token: str | None) -> bool:
    return bool(token) and hmac.compare_digest(given.strip().encode(), str(token).encode())


def expected_token(cfg: DashboardSettings) -> str | None:
    return cfg.token or read_secret(cfg.token_file)


def gate(cfg: DashboardSettings) -> bool:
    """Render the token prompt when one is needed; True when work may be started."""
    token = expected_token(cfg)
    address = str(st.get_option("server.address") or "")
    rule = policy(address, token)
    if rule == OPEN or st.session_state.get(UNLOCKED):
        return True
    if rule == CLOSED:
        st.warning(
            f"This dashboard listens on {address or 'every interface'}, and no access token "
            "is set: load runs and the advisor are off. Set DASHBOARD_TOKEN_FILE (the stack "
            "writes .stack/dashboard.token with `up --expose`) and restart it.",
            icon=":material/lock:",
        )
        return False
    given = st.text_input(
        "Access token (load runs and the advisor)",
        type="password",
        key="access_token",
        help="The stack keeps it in its state folder: .stack/dashboard.token",
    )
    if given and accepts(given, token):
        st.session_state[UNLOCKED] = True
        return True
    if given:
        st.error("That token is not the one configured: copy it again.", icon=":material/lock:")
    else:
        st.info(
            "This dashboard is reachable from the network: enter the access token to start "
            "load runs or ask the advisor.",
            icon=":material/lock:",
        )
    return False


def foreign_origin(headers: Mapping[str, str], bound_to_loopback: bool) -> str | None:
    """Why this session comes from another site's page, or None when it is the dashboard's own.

    Streamlit's CORS check compares host names only, so a page served on any other
    port of 127.0.0.1 may open the dashboard's websocket and drive its widgets (start a
    load run, the advisor, the trace switch). Every script run therefore checks the
    websocket's ``Origin`` against its ``Host``; on loopback the host must also be a
    loopback name, so that a DNS-rebound name (evil.example -> 127.0.0.1) is foreign too.
    No Origin (a non-browser client, which no web page can be) passes.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    origin, host = lowered.get("origin"), lowered.get("host", "")
    if origin is None:
        return None
    if urlsplit(origin).netloc.lower() != host.lower():
        return f"the page at {origin} is not this dashboard ({host})"
    if bound_to_loopback and not is_loopback(urlsplit(f"//{host}").hostname or ""):
        return f"{host} is not a loopback name, and this dashboard listens on loopback only"
    return None


def refuse_foreign_pages() -> None:
    """Stop the script run (nothing below it runs) when another site's page opened it."""
    address = str(st.get_option("server.address") or "")
    why = foreign_origin(dict(st.context.headers), bool(address) and is_loopback(address))
    if why:
        st.error(f"Refused: {why}. Open the dashboard at its own address.")
        st.stop()
