"""The configuration files of the compose and Kubernetes deployments, generated from the
local stack's own sources so that the three ways to run cannot drift apart.

- ``deploy/compose/prometheus.yml``: ``rules.prometheus_config.config()``, which the launcher
  writes at start, with the compose network's targets. compose.yaml mounts it beside
  ``rules/generated/`` (the rules and alertmanager.yml, as they are).
- ``deploy/k8s/generated/``: every rule group of ``rules.rulegen`` as a PrometheusRule; the
  same scrape jobs, interval and timeout as a ServiceMonitor; the Grafana dashboard as a
  ConfigMap labelled for the Grafana sidecar of kube-prometheus-stack.
- ``deploy/grafana/``: the dashboard (:mod:`deploygen.grafana`) and the provisioning files
  compose mounts into Grafana: a Prometheus datasource whose ``timeInterval`` is the scrape
  interval, so that ``$__rate_interval`` spans four scrapes as the Streamlit charts do.

``batchscope render`` writes them; commit them (a test checks they match).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from deploygen import grafana
from rules import prometheus_config, rulegen, rulesettings
from rules.rulesettings import RuleSettings
from stacksettings import ROOT, Settings

COMPOSE_DIR = ROOT / "deploy" / "compose"
K8S_GENERATED_DIR = ROOT / "deploy" / "k8s" / "generated"
GRAFANA_DIR = ROOT / "deploy" / "grafana"
GRAFANA_DASHBOARD = GRAFANA_DIR / "dashboards" / "triton-batching.json"
# Where compose.yaml mounts deploy/grafana/dashboards/ in the Grafana container.
GRAFANA_DASHBOARDS_MOUNT = "/var/lib/grafana/dashboards/triton-batchscope"
COMPOSE_PROMETHEUS_URL = "http://prometheus:9090"
# kube-prometheus-stack's Grafana sidecar loads every ConfigMap with this label.
GRAFANA_SIDECAR_LABEL = {"grafana_dashboard": "1"}

# Service name and port of each scrape job on the compose network (compose.yaml).
COMPOSE_ALERTMANAGER = "alertmanager:9093"
COMPOSE_TARGETS = {
    "triton": "triton:8002",
    "exporter": "exporter:9733",
    "alertmanager": COMPOSE_ALERTMANAGER,
}
# Alertmanager's password as compose.yaml hands it to Prometheus (a compose secret).
COMPOSE_ALERTMANAGER_PASSWORD = "/run/secrets/alertmanager_password"
# Where compose.yaml mounts rules/generated/ in the Prometheus container.
COMPOSE_RULES_DIR = "/etc/prometheus/rules"

# Labels of the Kubernetes objects (deploy/k8s/triton.yaml uses the same).
PART_OF = {"app.kubernetes.io/part-of": "triton-batchscope"}
# Both Services of the Triton pods (Triton itself, the exporter beside it) carry this label;
# the ServiceMonitor picks their ports by name.
K8S_SELECTOR = {"app.kubernetes.io/name": "triton"}
K8S_PORTS = {"triton": "metrics", "exporter": "exporter"}


def compose_prometheus(settings: Settings, rules: RuleSettings) -> dict[str, Any]:
    """The local config with the compose network's hosts in place of 127.0.0.1."""
    local = prometheus_config.local_targets(settings)
    targets = {job: [COMPOSE_TARGETS[job]] for job in local}
    files = [f"{COMPOSE_RULES_DIR}/{name}" for name in rulegen.groups(rules)]
    return prometheus_config.config(
        targets,
        settings.scrape_interval_s,
        rule_files=files,
        alertmanagers=[COMPOSE_ALERTMANAGER],
        alertmanager_password_file=COMPOSE_ALERTMANAGER_PASSWORD,
    )


def prometheus_rule(rules: RuleSettings) -> dict[str, Any]:
    groups = [group for body in rulegen.groups(rules).values() for group in body]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "triton-batching", "labels": dict(PART_OF)},
        "spec": {"groups": groups},
    }


def service_monitor(settings: Settings, rules: RuleSettings) -> dict[str, Any]:
    """One endpoint per scrape job; ``job`` is set to the name the rules expect, whatever
    the Services are called."""
    body = prometheus_config.config({}, settings.scrape_interval_s)["global"]
    jobs = {"triton": rules.triton_job, "exporter": rules.exporter_job}
    endpoints = [
        {
            "port": K8S_PORTS[name],
            "path": "/metrics",
            "interval": body["scrape_interval"],
            "scrapeTimeout": body["scrape_timeout"],
            "relabelings": [{"targetLabel": "job", "replacement": job}],
        }
        for name, job in jobs.items()
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": "triton-batching", "labels": dict(PART_OF)},
        "spec": {"selector": {"matchLabels": dict(K8S_SELECTOR)}, "endpoints": endpoints},
    }


def scrape_interval(settings: Settings) -> str:
    body = prometheus_config.config({}, settings.scrape_interval_s)
    return str(body["global"]["scrape_interval"])


def grafana_datasource(settings: Settings) -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "datasources": [
            {
                "name": "Prometheus",
                "uid": "prometheus",
                "type": "prometheus",
                "access": "proxy",
                "url": COMPOSE_PROMETHEUS_URL,
                "isDefault": True,
                "editable": False,
                "jsonData": {"timeInterval": scrape_interval(settings)},
            }
        ],
    }


def grafana_provider() -> dict[str, Any]:
    return {
        "apiVersion": 1,
        "providers": [
            {
                "name": "triton-batchscope",
                "type": "file",
                "disableDeletion": True,
                "allowUiUpdates": False,
                "options": {"path": GRAFANA_DASHBOARDS_MOUNT},
            }
        ],
    }


def grafana_configmap(dashboard_json: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "grafana-dashboard-triton-batching",
            "labels": {**PART_OF, **GRAFANA_SIDECAR_LABEL},
        },
        "data": {GRAFANA_DASHBOARD.name: dashboard_json},
    }


def render(settings: Settings | None = None) -> dict[Path, str]:
    """Path -> text of every generated deployment file, from the default settings."""
    settings = settings or Settings()
    rules = rulesettings.load(settings.rules_settings)
    origin = "rules/prometheus_config.py and rules/settings.yaml"
    header = f"# Generated by `batchscope render` from {origin}; do not edit by hand.\n"
    dashboard_json = grafana.render()
    from_queries = (
        "# Generated by `batchscope render` from deploygen/grafana.py and "
        "dashboard/queries.py; do not edit by hand.\n"
    )
    return {
        COMPOSE_DIR / "prometheus.yml": header
        + yaml.safe_dump(compose_prometheus(settings, rules), sort_keys=False),
        K8S_GENERATED_DIR / "prometheusrule.yaml": rulegen.dump(
            prometheus_rule(rules), rules.source, command="batchscope render"
        ),
        K8S_GENERATED_DIR / "servicemonitor.yaml": header
        + yaml.safe_dump(service_monitor(settings, rules), sort_keys=False),
        GRAFANA_DASHBOARD: dashboard_json,
        GRAFANA_DIR / "provisioning" / "datasources" / "prometheus.yml": header
        + yaml.safe_dump(grafana_datasource(settings), sort_keys=False),
        GRAFANA_DIR / "provisioning" / "dashboards" / "triton-batchscope.yml": from_queries
        + yaml.safe_dump(grafana_provider(), sort_keys=False),
        K8S_GENERATED_DIR / "grafana-dashboard.yaml": from_queries
        + yaml.dump(grafana_configmap(dashboard_json), Dumper=_BlockDumper, sort_keys=False),
    }


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks: the ConfigMap's JSON stays readable in review."""


def _block(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    )


_BlockDumper.add_representer(str, _block)
