"""The browser fixtures of the dashboard's browser tests, for the fleet's browser test."""

from tests.dashboard.test_browser import browser, page  # noqa: F401
