"""Ports, paths, secrets and /proc for every package of the stack; it imports none of them.

``settings`` holds the one ``Settings`` object and how it is read from flags and the
environment, ``auth`` the stack's secrets, ``ports`` free loopback ports for private stacks,
``procstat`` the /proc readings.
"""

from stacksettings.auth import ADMIN_KEY_HEADER as ADMIN_KEY_HEADER
from stacksettings.auth import ADMIN_KEY_NAME as ADMIN_KEY_NAME
from stacksettings.auth import ALERTMANAGER_PASSWORD_NAME as ALERTMANAGER_PASSWORD_NAME
from stacksettings.auth import ALERTMANAGER_USER as ALERTMANAGER_USER
from stacksettings.auth import DASHBOARD_TOKEN_NAME as DASHBOARD_TOKEN_NAME
from stacksettings.auth import RESTRICTED_APIS as RESTRICTED_APIS
from stacksettings.auth import admin_headers as admin_headers
from stacksettings.auth import ensure_secret as ensure_secret
from stacksettings.auth import read_secret as read_secret
from stacksettings.ports import free_port_run as free_port_run
from stacksettings.ports import free_ports as free_ports
from stacksettings.settings import MAX_SCRAPE_INTERVAL_S as MAX_SCRAPE_INTERVAL_S
from stacksettings.settings import PORTS as PORTS
from stacksettings.settings import ROOT as ROOT
from stacksettings.settings import RULES_SETTINGS as RULES_SETTINGS
from stacksettings.settings import STORE_NAME as STORE_NAME
from stacksettings.settings import Settings as Settings
from stacksettings.settings import SettingsError as SettingsError
from stacksettings.settings import env_list as env_list
from stacksettings.settings import from_env as from_env
from stacksettings.settings import from_env_or_default as from_env_or_default
from stacksettings.settings import is_loopback as is_loopback
from stacksettings.settings import isolated as isolated
from stacksettings.settings import parse_port as parse_port
from stacksettings.settings import parse_seconds as parse_seconds
