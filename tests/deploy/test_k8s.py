"""deploy/k8s: rendered by kustomize (`kubectl kustomize`), the built-in kinds validated
against Kubernetes' own schemas (kubernetes-validate, strict), and the Prometheus Operator
objects, for which kubernetes-validate has no schema, checked with promtool and against
the Services they select."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from batchscope.main import parse
from deploygen import deployfiles
from exporter.options import options_from
from rules import prometheus_config, rulegen, rulesettings
from stack import exporter as exporter_row
from stacksettings import ROOT, Settings
from tests.deploy.tools import promtool, run_tool

K8S = ROOT / "deploy" / "k8s"
ADAPTER = K8S / "prometheus-adapter" / "values.yaml"
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
# The oldest Kubernetes minor still commonly run, and the newest the validator knows.
VERSIONS = ["1.27.0", kubernetes_validate.latest_version()]


def kustomize(folder: Path = K8S) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is missing: ./stack/test installs Debian's kubernetes-client"
    out = run_tool([kubectl, "kustomize", str(folder)])
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in kustomize()}


def container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    pod = deployment["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] + pod.get("initContainers", []) if c["name"] == name)


def test_kustomize_renders_every_object(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert set(objects) == {
        ("Namespace", "triton-batchscope"),
        ("Deployment", "triton"),
        ("Service", "triton"),
        ("Service", "exporter"),
        ("Deployment", "dashboard"),
        ("Service", "dashboard"),
        ("PersistentVolumeClaim", "loadgen-store"),
        ("HorizontalPodAutoscaler", "triton"),
        ("NetworkPolicy", "default-deny-ingress"),
        ("NetworkPolicy", "triton"),
        ("NetworkPolicy", "dashboard"),
        ("ServiceMonitor", "triton-batching"),
        ("PrometheusRule", "triton-batching"),
        ("ConfigMap", "grafana-dashboard-triton-batching"),
    }
    for (kind, name), obj in objects.items():
        if kind != "Namespace":
            assert obj["metadata"]["namespace"] == "triton-batchscope", (kind, name)
    images = {
        c["image"]
        for kind, _ in objects
        if kind == "Deployment"
        for d in [objects[(kind, _)]]
        for c in d["spec"]["template"]["spec"]["containers"]
        + d["spec"]["template"]["spec"].get("initContainers", [])
    }
    assert images == {"nvcr.io/nvidia/tritonserver:25.11-py3", "triton-batchscope:0.1.0"}


@pytest.mark.parametrize("version", VERSIONS)
def test_builtin_kinds_pass_strict_schema_validation(
    objects: dict[tuple[str, str], dict[str, Any]], version: str
) -> None:
    for (kind, name), obj in objects.items():
        if kind in OPERATOR_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{kind}/{name} against {version}: {exc.message}")


def test_the_validator_has_no_operator_schemas_so_they_are_checked_below(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """Stated, not assumed: if a future kubernetes-validate ships them, use them here."""
    for kind in OPERATOR_KINDS:
        obj = objects[(kind, "triton-batching")]
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)


def test_a_broken_manifest_is_refused() -> None:
    """The validator is real: a misspelt field and a wrong type fail strict validation."""
    bad = yaml.safe_load((K8S / "hpa.yaml").read_text())
    bad["spec"]["maxReplica"] = bad["spec"].pop("maxReplicas")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_generated_files_are_committed_as_generated() -> None:
    for path, text in deployfiles.render().items():
        assert path.read_text() == text, f"{path} is stale: run `batchscope render`"


def test_grafana_dashboard_configmap_for_the_sidecar(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """kube-prometheus-stack's Grafana sidecar loads ConfigMaps labelled grafana_dashboard."""
    cm = objects[("ConfigMap", "grafana-dashboard-triton-batching")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    [(name, text)] = cm["data"].items()
    assert name == deployfiles.GRAFANA_DASHBOARD.name
    assert text == deployfiles.GRAFANA_DASHBOARD.read_text()
    assert json.loads(text)["uid"] == "triton-batchscope"


def test_prometheus_rule_has_the_local_rules(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    """No drift: the same groups as rules/generated/, which the local stack uses."""
    rule = objects[("PrometheusRule", "triton-batching")]
    local = [
        group
        for name in rulegen.groups(rulesettings.load())
        for group in yaml.safe_load((rulegen.GENERATED_DIR / name).read_text())["groups"]
    ]
    assert rule["spec"]["groups"] == local


def test_promtool_accepts_the_prometheus_rule(
    objects: dict[tuple[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    rule = objects[("PrometheusRule", "triton-batching")]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    out = promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 30 rules found" in out.stdout


def test_service_monitor_scrapes_both_jobs_like_the_local_stack(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    monitor = objects[("ServiceMonitor", "triton-batching")]["spec"]
    local = prometheus_config.config({}, Settings().scrape_interval_s)["global"]
    rules = rulesettings.load()
    selector = monitor["selector"]["matchLabels"]
    services = [
        obj
        for (kind, _), obj in objects.items()
        if kind == "Service" and selector.items() <= obj["metadata"]["labels"].items()
    ]
    assert {s["metadata"]["name"] for s in services} == {"triton", "exporter"}
    ports = {p["name"]: p for s in services for p in s["spec"]["ports"]}
    jobs = {}
    for endpoint in monitor["endpoints"]:
        assert endpoint["port"] in ports, endpoint["port"]
        assert endpoint["interval"] == local["scrape_interval"]
        assert endpoint["scrapeTimeout"] == local["scrape_timeout"]
        (relabel,) = endpoint["relabelings"]
        jobs[relabel["replacement"]] = ports[endpoint["port"]]["port"]
    # The job names the alert rules use (up{job="triton"}, up{job="exporter"}).
    assert jobs == {rules.triton_job: 8002, rules.exporter_job: 9733}


def test_services_select_the_pods_that_serve_their_ports(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    for (kind, name), service in objects.items():
        if kind != "Service":
            continue
        selector = service["spec"]["selector"]
        pods = [
            d["spec"]["template"]
            for (k, _), d in objects.items()
            if k == "Deployment"
            and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(pods) == 1, name
        named = {
            p["name"]: p["containerPort"]
            for c in pods[0]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert named[port["targetPort"]] == port["port"], (name, port)


def test_triton_requests_a_gpu_and_reads_the_model_repository(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deployment = objects[("Deployment", "triton")]
    triton = container(deployment, "triton")
    assert triton["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "--metrics-config=summary_latencies=true" in triton["args"]
    assert triton["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    mounts = {m["mountPath"]: m for m in triton["volumeMounts"]}
    assert mounts["/models"]["readOnly"] is True and "/dev/shm" in mounts
    init = container(deployment, "model-repository")
    assert "/app/model_repository/." in " ".join(init["command"])
    # The Dockerfile copies the repository into /app (the initContainer's source).
    dockerignore = (ROOT / ".dockerignore").read_text().split()
    assert "model_repository" not in dockerignore


def test_the_exporter_sidecar_reads_its_own_replica(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    sidecar = container(objects[("Deployment", "triton")], "exporter")
    assert sidecar["args"][:2] == ["batchscope", "exporter"]
    # Kubernetes expands $(POD_IP) from the container's env; give the parser what it would see.
    assert sidecar["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    args = [a.replace("$(POD_IP)", "10.1.2.3") for a in sidecar["args"][1:]]
    opts = options_from(parse(args), {})
    assert [(t.url, t.metrics_url) for t in opts.targets] == [
        ("http://10.1.2.3:8000", "http://10.1.2.3:8002/metrics")
    ]
    assert (opts.host, opts.port) == ("0.0.0.0", 9733)
    assert opts.timeout_s == exporter_row.triton_timeout_s(Settings())


def adapter_rule() -> dict[str, Any]:
    (rule,) = yaml.safe_load(ADAPTER.read_text())["rules"]["custom"]
    return rule


def test_hpa_scales_triton_on_the_adapter_metric(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    hpa = objects[("HorizontalPodAutoscaler", "triton")]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "triton",
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == adapter_rule()["name"]["as"]
    # Scale out before QueueLatencyHigh fires.
    threshold = rulesettings.load().alerts["QueueLatencyHigh"]["max_queue_seconds_per_request"]
    target = metric["pods"]["target"]["averageValue"]
    assert target.endswith("m") and int(target[:-1]) / 1000 < threshold


def adapter_query(labels: str, group_by: str) -> str:
    """The adapter's metricsQuery as it sends it, templates filled as the adapter does."""
    query: str = adapter_rule()["metricsQuery"]
    return query.replace("<<.LabelMatchers>>", labels).replace("<<.GroupBy>>", group_by)


def test_adapter_rule_reads_the_exporter_series_per_pod() -> None:
    rule = adapter_rule()
    assert rule["resources"]["overrides"] == {
        "namespace": {"resource": "namespace"},
        "pod": {"resource": "pod"},
    }
    assert rule["seriesQuery"].startswith("triton_batching_queue_seconds_total{")
    # Its rate window is the rules' short window, which holds enough scrapes.
    assert f"[{rulesettings.load().short_window}]" in rule["metricsQuery"]


def test_adapter_query_computes_queue_seconds_per_request(tmp_path: Path) -> None:
    """promtool evaluates the query on series shaped like the exporter's, per pod:
    pod a waits 0.03 s per request (0.9 s of queue over 30 requests per 30 s),
    pod b is idle (no value, no division by zero), another model is filtered out."""
    labels = 'namespace="ml",pod=~"triton-a|triton-b",model="batch_add_model"'
    query = adapter_query(labels, "pod")
    series = {
        'triton_batching_queue_seconds_total{namespace="ml",pod="triton-a",'
        'model="batch_add_model",version="1"}': "0+0.9x10",
        'triton_batching_requests_success_total{namespace="ml",pod="triton-a",'
        'model="batch_add_model",version="1"}': "0+30x10",
        'triton_batching_queue_seconds_total{namespace="ml",pod="triton-b",'
        'model="batch_add_model",version="1"}': "5+0x10",
        'triton_batching_requests_success_total{namespace="ml",pod="triton-b",'
        'model="batch_add_model",version="1"}': "100+0x10",
        'triton_batching_queue_seconds_total{namespace="ml",pod="triton-a",'
        'model="other",version="1"}': "0+90x10",
        'triton_batching_requests_success_total{namespace="ml",pod="triton-a",'
        'model="other",version="1"}': "0+30x10",
    }
    (tmp_path / "adapter.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "adapter", "rules": [{"record": "q", "expr": query}]}]})
    )
    test = {
        "rule_files": ["adapter.yml"],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "promql_expr_test": [
                    {
                        # In milliseconds, rounded: float division is not exact.
                        "expr": "round(q * 1000)",
                        "eval_time": "5m",
                        "exp_samples": [{"labels": '{pod="triton-a"}', "value": 30}],
                    }
                ],
            }
        ],
    }
    (tmp_path / "adapter_test.yml").write_text(yaml.safe_dump(test))
    out = promtool("test", "rules", str(tmp_path / "adapter_test.yml"))
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_pod_is_hardened_and_limited(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deployments = [obj for (kind, _), obj in objects.items() if kind == "Deployment"]
    assert len(deployments) == 2
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"] + pod.get("initContainers", []):
            where = f"{deployment['metadata']['name']}/{c['name']}"
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, where
            assert sc["allowPrivilegeEscalation"] is False, where
            assert sc["capabilities"]["drop"] == ["ALL"], where
            assert sc["runAsNonRoot"] is True or pod["securityContext"].get("runAsNonRoot"), where
            assert {"cpu", "memory"} <= set(c["resources"]["limits"]), where


def test_network_policies_close_ingress_but_for_what_is_served(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deny = objects[("NetworkPolicy", "default-deny-ingress")]["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    triton = objects[("NetworkPolicy", "triton")]["spec"]["ingress"]
    ports = [sorted(p["port"] for p in rule["ports"]) for rule in triton]
    assert ports == [[8000, 8001], [8002, 9733], [9733]]
    assert triton[1]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    # The dashboard's batch timeline reads the exporter's /api/traces.
    assert triton[2]["from"] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "dashboard"}}}
    ]


def test_triton_writes_traces_where_its_exporter_sidecar_reads_them(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deployment = objects[("Deployment", "triton")]
    triton, exporter = container(deployment, "triton"), container(deployment, "exporter")
    (file_arg,) = [a for a in triton["args"] if a.startswith("--trace-config=triton,file=")]
    trace_file = file_arg.split("file=", 1)[1]
    assert "--trace-config=level=OFF" in triton["args"]
    assert f"--trace-file={trace_file}" in exporter["args"]
    folder = trace_file.rsplit("/", 1)[0]
    for c in (triton, exporter):
        mount = next(m for m in c["volumeMounts"] if m["mountPath"] == folder)
        assert mount["name"] == "traces" and not mount.get("readOnly")
    volume = next(
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "traces"
    )
    assert "emptyDir" in volume


def test_triton_admin_apis_need_the_secret_key(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    deployment = objects[("Deployment", "triton")]
    triton = container(deployment, "triton")
    restricted = [a for a in triton["args"] if "restricted" in a]
    assert len(restricted) == 2
    for arg in restricted:
        assert arg.endswith(
            "model-repository,shared-memory,trace,logging:x-batchscope-admin-key=$(TRITON_ADMIN_KEY)"
        )
    (env,) = [e for e in triton["env"] if e["name"] == "TRITON_ADMIN_KEY"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "triton-admin-key", "key": "key"}
    exporter = container(deployment, "exporter")
    key_file = next(e["value"] for e in exporter["env"] if e["name"] == "TRITON_ADMIN_KEY_FILE")
    mount = next(m for m in exporter["volumeMounts"] if m["name"] == "admin-key")
    assert key_file.startswith(mount["mountPath"] + "/")
    dashboard = container(objects[("Deployment", "dashboard")], "dashboard")
    assert "--server.enableXsrfProtection=true" in dashboard["args"]
    assert "--server.enableCORS=true" in dashboard["args"]
    assert any(e["name"] == "DASHBOARD_TOKEN" for e in dashboard["env"])
