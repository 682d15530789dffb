"""Where the dashboard reads its URLs: the DASHBOARD_* variables, else the stack's STACK_*."""

from __future__ import annotations

from dashboard import settings


def test_without_dashboard_variables_the_stacks_own_are_read_each_time() -> None:
    one = settings.from_env({"STACK_TRITON_URLS": "http://10.213.77.2:8000,http://triton:8000"})
    assert one.triton_url == "http://10.213.77.2:8000"
    assert one.triton_urls == ("http://10.213.77.2:8000", "http://triton:8000")
    # Another environment in the same process: nothing of the first one is kept.
    other = settings.from_env({"STACK_STATE_DIR": "/srv/stack", "STACK_PROMETHEUS_PORT": "19090"})
    assert other.triton_urls == (other.triton_url,) and "10.213.77.2" not in other.triton_url
    assert other.prometheus_url.endswith(":19090")
    assert str(other.store).startswith("/srv/stack/")


def test_the_dashboards_own_variables_come_first() -> None:
    env = {
        "STACK_TRITON_URLS": "http://10.213.77.2:8000",
        "DASHBOARD_TRITON_URL": "http://127.0.0.1:18000",
        "DASHBOARD_TRITON_URLS": "http://127.0.0.1:18000,http://127.0.0.1:28000",
        "DASHBOARD_MODEL_REPOSITORY": "",
    }
    cfg = settings.from_env(env)
    assert cfg.triton_urls == ("http://127.0.0.1:18000", "http://127.0.0.1:28000")
    assert cfg.model_repository is None  # set but empty: attach mode
