"""deploy/k8s/loadgen: the Indexed Job of load-generator pods, validated as the stack's
manifests are (kustomize, Kubernetes' strict schemas), and its command read by the load
generator's own parser with the values Kubernetes would put in."""

from __future__ import annotations

import re
from typing import Any

import kubernetes_validate
import pytest

from batchscope.main import parse
from loadgen import actions
from loadgen.clients.target import check_target, parse_address
from loadgen.results.params import default_urls
from tests.deploy.test_k8s import K8S, VERSIONS, kustomize

LOADGEN = K8S / "loadgen"


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in kustomize(LOADGEN)}


@pytest.fixture(scope="module")
def stack() -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in kustomize()}


def pod(objects: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = objects[("Job", "loadgen")]["spec"]["template"]["spec"]
    return spec


def test_renders_a_job_and_its_policy_in_the_stacks_namespace(
    objects: dict[tuple[str, str], dict[str, Any]], stack: dict[tuple[str, str], dict[str, Any]]
) -> None:
    assert set(objects) == {("Job", "loadgen"), ("NetworkPolicy", "loadgen")}
    namespace = stack[("Namespace", "triton-batchscope")]["metadata"]["name"]
    assert {o["metadata"]["namespace"] for o in objects.values()} == {namespace}
    (c,) = pod(objects)["containers"]
    assert c["image"] == "triton-batchscope:0.1.0"  # the stack's own image and tag


@pytest.mark.parametrize("version", VERSIONS)
def test_strict_schema_validation(
    objects: dict[tuple[str, str], dict[str, Any]], version: str
) -> None:
    for (kind, name), obj in objects.items():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{kind}/{name} against {version}: {exc.message}")


def test_an_indexed_job_of_pods_env_count_at_once(
    objects: dict[tuple[str, str], dict[str, Any]],
) -> None:
    spec = objects[("Job", "loadgen")]["spec"]
    assert spec["completionMode"] == "Indexed"
    (c,) = pod(objects)["containers"]
    env = {e["name"]: e for e in c["env"]}
    pods = int(env["PODS"]["value"])
    assert spec["completions"] == spec["parallelism"] == pods
    assert spec["backoffLimit"] == 0 and pod(objects)["restartPolicy"] == "Never"
    index = env["JOB_COMPLETION_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert index == "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def expanded(c: dict[str, Any], index: int) -> list[str]:
    """The container's args as Kubernetes expands $(VAR) from its env."""
    values = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    values["JOB_COMPLETION_INDEX"] = str(index)
    return [re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], a) for a in c["args"]]


def test_each_pod_runs_a_load_the_cli_accepts_printing_mergeable_json(
    objects: dict[tuple[str, str], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    (c,) = pod(objects)["containers"]
    args = expanded(c, 2)
    assert args[:2] == ["batchscope", "load"]
    parsed = parse(args[1:])
    assert parsed.json and parsed.db.startswith("/tmp/")  # its own store, on its emptyDir
    (params,) = actions.params_from(parsed.command, parsed)
    assert params.label == "pod 2 of 4" and params.concurrency == 8
    # The input options, empty by default: loadgen's defaults.
    assert (params.shapes, params.ranges, params.input_data) == ((), (), "random")
    given = {"SHAPES": "ids=4:64 mask=4:64", "RANGES": "ids=0:30000"}
    with_inputs = [
        re.sub(r"\$\((\w+)\)", lambda m: given.get(m.group(1), f"$({m.group(1)})"), a)
        for a in c["args"]
    ]
    (shaped,) = actions.params_from(
        parsed.command, parse(expanded({**c, "args": with_inputs}, 2)[1:])
    )
    assert shaped.shapes == (("ids", ((4, 64),)), ("mask", ((4, 64),)))
    assert shaped.ranges == (("ids", (0.0, 30000.0)),)
    # The target: the triton Service, accepted without --allow-remote as the stack's Triton.
    env = {e["name"]: e.get("value") for e in c["env"]}
    monkeypatch.setenv("STACK_TRITON_URLS", env["STACK_TRITON_URLS"])
    url, _ = default_urls()
    assert url == "http://triton:8000"
    check_target(parse_address(url, "--url", 8000), "--url", allow_remote=False)
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts["/tmp"] == "tmp"
    assert {"name": "tmp", "emptyDir": {}} in pod(objects)["volumes"]


def test_the_pods_are_hardened_and_limited(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    spec = pod(objects)
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["runAsNonRoot"] is True
    (c,) = spec["containers"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(c["resources"]["limits"])


def test_the_policy_lets_the_pods_reach_triton_and_dns_only(
    objects: dict[tuple[str, str], dict[str, Any]], stack: dict[tuple[str, str], dict[str, Any]]
) -> None:
    policy = objects[("NetworkPolicy", "loadgen")]["spec"]
    job_labels = objects[("Job", "loadgen")]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= job_labels.items()
    assert policy["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in policy
    to_triton, to_dns = policy["egress"]
    # The selector picks the pods behind the triton Service, on the ports it serves.
    triton_pod = stack[("Deployment", "triton")]["spec"]["template"]["metadata"]["labels"]
    assert to_triton["to"][0]["podSelector"]["matchLabels"].items() <= triton_pod.items()
    service_ports = {p["port"] for p in stack[("Service", "triton")]["spec"]["ports"]}
    assert {p["port"] for p in to_triton["ports"]} == {8000, 8001} <= service_ports
    assert {(p["port"], p["protocol"]) for p in to_dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    # And Triton's own ingress policy lets them in on those ports.
    ingress = stack[("NetworkPolicy", "triton")]["spec"]["ingress"][0]
    assert ingress["from"] == [{"namespaceSelector": {}}]
    assert {p["port"] for p in ingress["ports"]} == {8000, 8001}
