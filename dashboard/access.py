"""Who may start work from the dashboard: load runs and the advisor cost the server CPU.

On loopback only this machine's users reach the page, and both are open. Anywhere else
(compose, Kubernetes, ``up --host ... --expose``) the page asks for a token first; with
no token configured those actions stay off. Reading charts never needs one. Streamlit's
own XSRF and CORS protections (set by the launcher and the deploy files) keep another
site's page from driving the form through the user's browser.
"""

from __future__ import annotations

import hmac

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
