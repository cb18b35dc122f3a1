"""The Kubernetes manifests (deployment/base, deployment/overlays/*), checked without a cluster.

Every overlay renders with `kubectl kustomize`, alone and with each optional component
(deployment/components/); every rendered object validates strictly (unknown fields and wrong types
fail) against the Kubernetes 1.30 and 1.37 OpenAPI schemas shipped in kubernetes-validate, except
the three CRDs (ServiceMonitor, PrometheusRule, KEDA ScaledObject), which no package has a schema
for and which are checked by hand here; the Orin overlay holds no CRD at all, so it applies on a
k3s without them. Then the objects are checked against each other and against the configs they
run: selectors and labels, ports, the NetworkPolicy, the Secret, volumes, the security context of
every container, pinned images, probes, the grace period against preStop and
server.shutdown_grace_s, the autoscaler and its fail-safe (a lost metric keeps the replica count,
alerts on the missing metric and on scaling at its maximum), GPU placement, the model volume and
fill Job, the Orin TensorRT init container. `validate` is also shown failing on deliberately
broken objects.

kubectl (with kustomize v5) is required: without it these tests fail, they do not skip.
"""

from __future__ import annotations

import base64
import copy
import functools
import math
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kitt_stt.config.loader import ConfigError, load_config
from kitt_stt.config.schema import AppConfig
from kitt_stt.models.sensevoice_release import OFFICIAL_SHA256
from kitt_stt.observability.metrics import Metrics

REPO = Path(__file__).resolve().parents[1]
OVERLAYS = {"rtx4090": "Deployment", "orin": "DaemonSet"}
IMAGE_SUFFIX = {"rtx4090": "gpu", "orin": "orin"}
#: The oldest Kubernetes the manifests are written for (k3s releases on JetPack lag behind), and
#: the newest kubernetes-validate knows (no API the manifests use may have been removed there).
K8S_VERSIONS = ("1.30", kubernetes_validate.latest_version())
SERVICE_UID = 10001
TRT_MOUNT = "/var/cache/kitt-stt/trt"
#: What the service itself may take to shut down after the drain (server.shutdown_grace_s):
#: cancelling the warm-up, stopping the decode workers, the end-of-turn model (~7 s).
SHUTDOWN_MARGIN_S = 10
#: Measured on Orin with the old service: a cold TensorRT build took 68 s.
TRT_COLD_BUILD_S = 68

Obj = dict[str, Any]


class ManifestError(AssertionError):
    """An object that a cluster would refuse (or that breaks our own rules)."""


# ----- rendering -------------------------------------------------------------------------------


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail("kubectl is not on PATH: the deployment tests render the overlays with `kubectl kustomize` "
                    "(kustomize v5); install kubectl (https://kubernetes.io/docs/tasks/tools/)", pytrace=False)
    return path


def kustomize(directory: Path) -> list[Obj]:
    result = subprocess.run([kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kubectl kustomize {directory} failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@functools.cache
def _rendered(overlay: str) -> tuple[Obj, ...]:
    return tuple(kustomize(REPO / "deployment" / "overlays" / overlay))


def rendered(overlay: str) -> list[Obj]:
    """The overlay's objects (a fresh copy: tests may mutate them)."""
    return copy.deepcopy(list(_rendered(overlay)))


def find(objects: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind}{' ' + name if name else ''}, found {len(found)}"
    return found[0]


def workload(objects: list[Obj], overlay: str) -> Obj:
    return one(objects, OVERLAYS[overlay], "kitt-stt")


def pod_owners(objects: list[Obj]) -> list[Obj]:
    return [o for o in objects if o["kind"] in ("Deployment", "DaemonSet", "StatefulSet", "Job")]


def containers(pod_spec: Obj) -> list[Obj]:
    return [*pod_spec.get("initContainers", []), *pod_spec["containers"]]


def server_container(objects: list[Obj], overlay: str) -> Obj:
    pod = workload(objects, overlay)["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "kitt-stt")


def command_line(container: Obj) -> list[str]:
    return [*container.get("command", []), *container.get("args", [])]


def config_of(container: Obj) -> str | None:
    """The `--config` file a container runs (an image path, /app/NAME)."""
    line = command_line(container)
    if "--config" in line:
        return line[line.index("--config") + 1]
    if line[:2] == ["/bin/sh", "-c"]:
        match = re.search(r"(?:--config[= ]|config=)(\S+)", line[2])
        return match.group(1) if match else None
    return None


def literal_env(container: Obj) -> dict[str, str]:
    """The container's KITT_STT* variables; those from a Secret get a stand-in value."""
    env = {}
    for item in container.get("env", []):
        if item["name"].startswith("KITT_STT"):
            env[item["name"]] = item.get("value", "token-from-the-secret")
    return env


def effective_config(container: Obj) -> AppConfig:
    """What the container's kitt-stt would load: the repository copy of its config, its env."""
    image_path = config_of(container)
    assert image_path is not None, f"container {container['name']} names no --config"
    assert image_path.startswith("/app/"), f"{image_path}: the images hold their configs in /app"
    local = REPO / PurePosixPath(image_path).name
    assert local.is_file(), f"{image_path}: no {local.name} in the repository (the image copies them from there)"
    return load_config(local, env=literal_env(container)).config


def mount_of(container: Obj, volume: str) -> Obj | None:
    return next((m for m in container.get("volumeMounts", []) if m["name"] == volume), None)


def under(path: Path | str, directory: str) -> bool:
    return PurePosixPath(str(path)).is_relative_to(directory)


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


# ----- validation ------------------------------------------------------------------------------


def _require(condition: bool, obj: Obj, message: str) -> None:
    if not condition:
        raise ManifestError(f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}: {message}")


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and bool(value) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items())


SERVICE_MONITOR_SPEC = {"selector", "endpoints", "namespaceSelector", "jobLabel", "targetLabels",
                        "podTargetLabels", "sampleLimit", "targetLimit", "attachMetadata"}
SERVICE_MONITOR_ENDPOINT = {"port", "targetPort", "path", "scheme", "interval", "scrapeTimeout", "honorLabels",
                            "honorTimestamps", "authorization", "tlsConfig", "relabelings", "metricRelabelings",
                            "params", "followRedirects", "enableHttp2"}


def check_service_monitor(obj: Obj) -> None:
    """monitoring.coreos.com/v1 ServiceMonitor: the fields we use, with the CRD's types."""
    spec = obj.get("spec")
    _require(isinstance(spec, dict), obj, "spec missing")
    _require(set(spec) <= SERVICE_MONITOR_SPEC, obj, f"unknown spec fields {sorted(set(spec) - SERVICE_MONITOR_SPEC)}")
    _require(_is_str_map(spec.get("selector", {}).get("matchLabels")), obj,
             "spec.selector.matchLabels must be a non-empty map of strings")
    endpoints = spec.get("endpoints")
    _require(isinstance(endpoints, list) and bool(endpoints), obj, "spec.endpoints must be a non-empty list")
    for endpoint in endpoints:
        _require(isinstance(endpoint, dict) and set(endpoint) <= SERVICE_MONITOR_ENDPOINT, obj,
                 f"unknown endpoint fields {sorted(set(endpoint) - SERVICE_MONITOR_ENDPOINT)}")
        _require(isinstance(endpoint.get("port"), str), obj, "an endpoint must name a Service port (port: <name>)")
        _require(str(endpoint.get("path", "/metrics")).startswith("/"), obj, "endpoint path must start with /")
        for duration in ("interval", "scrapeTimeout"):
            if duration in endpoint:
                _require(re.fullmatch(r"\d+(ms|s|m|h)", str(endpoint[duration])) is not None, obj,
                         f"endpoint {duration} {endpoint[duration]!r} is not a Prometheus duration")


SCALED_OBJECT_SPEC = {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval", "cooldownPeriod",
                      "idleReplicaCount", "initialCooldownPeriod", "fallback", "advanced", "triggers"}


def check_scaled_object(obj: Obj) -> None:
    """keda.sh/v1alpha1 ScaledObject: the fields we use, with the CRD's types (trigger metadata is
    a map of strings: a bare number there is refused by the API server)."""
    spec = obj.get("spec")
    _require(isinstance(spec, dict), obj, "spec missing")
    _require(set(spec) <= SCALED_OBJECT_SPEC, obj, f"unknown spec fields {sorted(set(spec) - SCALED_OBJECT_SPEC)}")
    target = spec.get("scaleTargetRef")
    _require(isinstance(target, dict) and isinstance(target.get("name"), str), obj, "scaleTargetRef.name missing")
    low, high = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
    _require(isinstance(low, int) and isinstance(high, int) and 0 <= low <= high, obj,
             "minReplicaCount <= maxReplicaCount, both integers")
    triggers = spec.get("triggers")
    _require(isinstance(triggers, list) and bool(triggers), obj, "spec.triggers must be a non-empty list")
    for trigger in triggers:
        _require(isinstance(trigger.get("type"), str), obj, "a trigger needs a type")
        _require(_is_str_map(trigger.get("metadata")), obj, "trigger metadata must be a map of strings")
        _require(trigger.get("metricType", "AverageValue") in ("AverageValue", "Value", "Utilization"), obj,
                 f"unknown metricType {trigger.get('metricType')!r}")
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
    if behavior is not None:
        # the same type as an HPA's spec.behavior: let the Kubernetes schema judge it
        hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"},
               "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 1,
                        "behavior": behavior}}
        validate(hpa)


PROMETHEUS_RULE = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}


def _promql_shape_ok(expr: str) -> bool:
    """Brackets balance and every label matcher is name op "value" (no PromQL parser is installed:
    this catches the typos a YAML edit makes, not every invalid query)."""
    depth = {"(": 0, "{": 0, "[": 0}
    closing = {")": "(", "}": "{", "]": "["}
    for char in re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr):
        if char in depth:
            depth[char] += 1
        elif char in closing:
            depth[closing[char]] -= 1
            if depth[closing[char]] < 0:
                return False
    matchers = re.findall(r"\{([^}]*)\}", expr)
    return all(v == 0 for v in depth.values()) and all(
        re.fullmatch(r'\s*(\w+\s*(=~|!~|!=|=)\s*"[^"]*"\s*(,\s*|$))*', m) for m in matchers)


def check_prometheus_rule(obj: Obj) -> None:
    """monitoring.coreos.com/v1 PrometheusRule: groups of alerting/recording rules, the CRD's types."""
    spec = obj.get("spec")
    _require(isinstance(spec, dict) and set(spec) == {"groups"}, obj, "spec must hold exactly `groups`")
    groups = spec["groups"]
    _require(isinstance(groups, list) and bool(groups), obj, "spec.groups must be a non-empty list")
    for group in groups:
        _require(isinstance(group.get("name"), str) and set(group) <= {"name", "interval", "rules", "limit"}, obj,
                 f"bad group fields {sorted(group)}")
        rules = group.get("rules")
        _require(isinstance(rules, list) and bool(rules), obj, f"group {group.get('name')}: rules must be a list")
        for rule in rules:
            _require(set(rule) <= PROMETHEUS_RULE, obj, f"unknown rule fields {sorted(set(rule) - PROMETHEUS_RULE)}")
            _require(("alert" in rule) != ("record" in rule), obj, "a rule is either an alert or a record")
            _require(isinstance(rule.get("expr"), str) and rule["expr"].strip() != "", obj, "a rule needs an expr")
            _require(_promql_shape_ok(rule["expr"]), obj, f"malformed expr {rule['expr']!r}")
            if "for" in rule:
                _require(re.fullmatch(r"\d+(ms|s|m|h|d)", str(rule["for"])) is not None, obj,
                         f"for {rule['for']!r} is not a Prometheus duration")
            for mapping in ("labels", "annotations"):
                if mapping in rule:
                    _require(_is_str_map(rule[mapping]), obj, f"{mapping} must be a map of strings")


CRD_CHECKS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): check_service_monitor,
    ("monitoring.coreos.com/v1", "PrometheusRule"): check_prometheus_rule,
    ("keda.sh/v1alpha1", "ScaledObject"): check_scaled_object,
}


def validate(obj: Obj) -> None:
    """Raise ManifestError unless ``obj`` is valid: strict Kubernetes schema, or our CRD checks."""
    check = CRD_CHECKS.get((obj.get("apiVersion"), obj.get("kind")))
    if check is not None:
        check(obj)
        return
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(part) for part in exc.absolute_path)
            raise ManifestError(f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')} (Kubernetes {version}): "
                                f"{where}: {exc.message}") from None
        except kubernetes_validate.SchemaNotFoundError:
            raise ManifestError(f"{obj.get('apiVersion')} {obj.get('kind')}: no Kubernetes {version} schema "
                                "and no structural check here") from None


# ----- tests -----------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_object_is_valid(overlay: str) -> None:
    objects = rendered(overlay)
    expected = {OVERLAYS[overlay], "Namespace", "Service", "PodDisruptionBudget", "Secret", "NetworkPolicy"}
    if overlay == "rtx4090":
        expected |= {"PersistentVolumeClaim", "Job", "ScaledObject", "ServiceMonitor", "PrometheusRule"}
    assert expected <= {o["kind"] for o in objects}
    for obj in objects:
        validate(obj)
    namespace = one(objects, "Namespace")["metadata"]["name"]
    assert all(o["metadata"].get("namespace") == namespace for o in objects if o["kind"] != "Namespace")


def test_orin_applies_on_a_cluster_without_crds() -> None:
    """k3s on a Jetson has neither the Prometheus Operator nor KEDA: `kubectl apply -k` fails on any
    object whose kind the API server does not know. Every Orin object is a built-in kind."""
    for obj in rendered("orin"):
        assert (obj["apiVersion"], obj["kind"]) not in CRD_CHECKS, f"{obj['kind']} needs a CRD"
        kubernetes_validate.validate(obj, K8S_VERSIONS[0], strict=True)  # a built-in schema exists


COMPONENTS = REPO / "deployment" / "components"


def site_overlay(tmp_path: Path, overlay: str, components: list[str]) -> list[Obj]:
    """Render a site overlay (as docs/deployment.md describes) on ``overlay`` with ``components``."""
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": "kitt-stt",  # a component's objects get the namespace of the kustomization using it
        "resources": [os.path.relpath(REPO / "deployment" / "overlays" / overlay, tmp_path)],
        "components": [os.path.relpath(COMPONENTS / name, tmp_path) for name in components],
    }))
    return kustomize(tmp_path)


def test_every_component_is_a_kustomize_component() -> None:
    names = sorted(path.name for path in COMPONENTS.iterdir() if path.is_dir())
    assert names == sorted(["keda", "nvidia-runtime-class", "prometheus-operator", *INGRESS_COMPONENTS])
    for name in names:
        kustomization = yaml.safe_load((COMPONENTS / name / "kustomization.yaml").read_text())
        assert kustomization["kind"] == "Component", name
    base = yaml.safe_load((REPO / "deployment" / "base" / "kustomization.yaml").read_text())
    assert not any("servicemonitor" in r or "scaledobject" in r for r in base["resources"]), \
        "CRD objects in the base would break every overlay on a cluster without the CRDs"


def test_orin_with_the_prometheus_operator_component(tmp_path: Path) -> None:
    """Where the Prometheus Operator is installed, one component adds scraping and the alerts."""
    objects = site_overlay(tmp_path, "orin", ["prometheus-operator"])
    for obj in objects:
        validate(obj)
    assert {"ServiceMonitor", "PrometheusRule"} <= {o["kind"] for o in objects}
    assert all(o["metadata"].get("namespace") == "kitt-stt" for o in objects if o["kind"] != "Namespace")
    assert not find(objects, "ScaledObject"), "a DaemonSet is not autoscaled"


def test_rtx4090_with_the_nvidia_runtime_class_component(tmp_path: Path) -> None:
    plain = workload(rendered("rtx4090"), "rtx4090")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in plain, "optional on the 4090s: many clusters make nvidia the default runtime"
    objects = site_overlay(tmp_path, "rtx4090", ["nvidia-runtime-class"])
    for obj in objects:
        validate(obj)
    assert workload(objects, "rtx4090")["spec"]["template"]["spec"]["runtimeClassName"] == "nvidia"
    job = one(objects, "Job")["spec"]["template"]["spec"]
    assert "runtimeClassName" not in job, "the fill Job needs no GPU"


def _deployment() -> Obj:
    return workload(rendered("rtx4090"), "rtx4090")


def _break(path: str, value: Any, obj: Obj) -> Obj:
    node = obj
    *parents, last = path.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[last] = value
    return obj


BROKEN = {
    "unknown field": lambda: _break("spec.template.spec.containers.0.imagePullPolcy", "Always", _deployment()),
    "wrong type": lambda: _break("spec.replicas", "two", _deployment()),
    "probe port as a list": lambda: _break("spec.template.spec.containers.0.livenessProbe.httpGet.port", [8000],
                                           _deployment()),
    "kind without schema": lambda: {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
    "ServiceMonitor without endpoints": lambda: _break(
        "spec.endpoints", [], one(rendered("rtx4090"), "ServiceMonitor")),
    "ScaledObject with a numeric threshold": lambda: _break(
        "spec.triggers.0.metadata.threshold", 64, one(rendered("rtx4090"), "ScaledObject")),
    "ScaledObject with a bad HPA behavior": lambda: _break(
        "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds", "10m",
        one(rendered("rtx4090"), "ScaledObject")),
    "PrometheusRule with an unbalanced expr": lambda: _break(
        "spec.groups.0.rules.0.expr", 'absent(kitt_seats{namespace="kitt-stt"}',
        one(rendered("rtx4090"), "PrometheusRule")),
    "PrometheusRule with a bad `for`": lambda: _break(
        "spec.groups.0.rules.0.for", "five minutes", one(rendered("rtx4090"), "PrometheusRule")),
    "PrometheusRule with a typo in a field": lambda: _break(
        "spec.groups.0.rules.0.anotations", {}, one(rendered("rtx4090"), "PrometheusRule")),
    "NetworkPolicy with a port as a list": lambda: _break(
        "spec.ingress.0.ports.0.port", ["http"], one(rendered("rtx4090"), "NetworkPolicy")),
}


@pytest.mark.parametrize("case", BROKEN)
def test_validation_fails_on_broken_objects(case: str) -> None:
    with pytest.raises(ManifestError):
        validate(BROKEN[case]())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_selectors_labels_and_ports_agree(overlay: str) -> None:
    objects = rendered(overlay)
    work = workload(objects, overlay)
    selector = work["spec"]["selector"]["matchLabels"]
    pod_labels = work["spec"]["template"]["metadata"]["labels"]
    assert selects(selector, pod_labels), "the workload's selector does not match its own pods"

    service = one(objects, "Service", "kitt-stt")
    assert selects(service["spec"]["selector"], pod_labels), "the Service does not select the server pods"
    assert service["spec"].get("sessionAffinity", "None") == "None"
    for other in pod_owners(objects):
        if other is not work:  # e.g. the model fill Job: clients must never be sent there
            assert not selects(service["spec"]["selector"], other["spec"]["template"]["metadata"]["labels"])
    pdb = one(objects, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels), "the PDB does not cover the server pods"

    ports = {p["name"]: p for p in server_container(objects, overlay)["ports"]}
    for port in service["spec"]["ports"]:
        assert port["targetPort"] in ports, f"Service targetPort {port['targetPort']} is not a container port"
    for monitor in find(objects, "ServiceMonitor"):
        assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]), \
            "the ServiceMonitor does not select the Service (it matches Service labels, not pod labels)"
        service_ports = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= service_ports
        assert [e.get("path") for e in monitor["spec"]["endpoints"]] == ["/metrics"]


#: Who may reach the server pods, per overlay: (namespace, pod labels or None for the whole namespace).
INGRESS_PEERS = {
    "rtx4090": {("ingress-nginx", (("app.kubernetes.io/name", "ingress-nginx"),)), ("monitoring", None)},
    "orin": {("kube-system", (("app.kubernetes.io/name", "traefik"),)), ("monitoring", None)},
}


#: The components that name the ingress controller or gateway (deployment/components/from-*):
#: the peer each one admits, in place of the overlay's.
INGRESS_COMPONENTS = {
    "from-ingress-nginx": ("ingress-nginx", (("app.kubernetes.io/name", "ingress-nginx"),)),
    "from-traefik": ("traefik", (("app.kubernetes.io/name", "traefik"),)),
    "from-traefik-k3s": ("kube-system", (("app.kubernetes.io/name", "traefik"),)),
    "from-envoy-gateway": ("envoy-gateway-system", (("app.kubernetes.io/component", "proxy"),
                                                    ("app.kubernetes.io/managed-by", "envoy-gateway"),
                                                    ("app.kubernetes.io/name", "envoy"))),
    "from-istio-ingressgateway": ("istio-system", (("istio", "ingressgateway"),)),
}


def policy_peers(policy: Obj) -> set[tuple[str, tuple[tuple[str, str], ...] | None]]:
    """(namespace, sorted pod labels or None for the whole namespace) of every peer, each on port http."""
    peers = set()
    for rule in policy["spec"]["ingress"]:
        assert [(p["port"], p["protocol"]) for p in rule["ports"]] == [("http", "TCP")]
        for peer in rule["from"]:
            assert set(peer) <= {"namespaceSelector", "podSelector"} and "namespaceSelector" in peer, \
                "a peer without namespaceSelector means this namespace only; no ipBlock"
            namespace = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            pods = peer.get("podSelector", {}).get("matchLabels")
            peers.add((namespace, tuple(sorted(pods.items())) if pods else None))
    return peers


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("component", ["from-traefik", "from-envoy-gateway"])
def test_a_component_admits_another_ingress_controller(tmp_path: Path, overlay: str, component: str) -> None:
    """A site on Traefik or a Gateway swaps the controller's peer with one component; Prometheus
    stays admitted and nothing else changes."""
    objects = site_overlay(tmp_path, overlay, [component])
    [policy] = find(objects, "NetworkPolicy")
    validate(policy)
    assert policy_peers(policy) == {INGRESS_COMPONENTS[component], ("monitoring", None)}
    [shipped] = find(rendered(overlay), "NetworkPolicy")
    assert policy["spec"]["ingress"][1:] == shipped["spec"]["ingress"][1:]
    assert [o for o in objects if o["kind"] != "NetworkPolicy"] == \
        [o for o in rendered(overlay) if o["kind"] != "NetworkPolicy"]


def test_every_ingress_component_renders_and_the_overlays_use_them(tmp_path: Path) -> None:
    for index, component in enumerate(sorted(INGRESS_COMPONENTS)):
        site = tmp_path / str(index)
        site.mkdir()
        [policy] = find(site_overlay(site, "rtx4090", [component]), "NetworkPolicy")
        assert INGRESS_COMPONENTS[component] in policy_peers(policy), component
    assert INGRESS_COMPONENTS["from-ingress-nginx"] in INGRESS_PEERS["rtx4090"], "the base's default"
    assert INGRESS_COMPONENTS["from-traefik-k3s"] in INGRESS_PEERS["orin"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policy_admits_only_the_ingress_and_prometheus(overlay: str) -> None:
    objects = rendered(overlay)
    [policy] = find(objects, "NetworkPolicy")
    spec = policy["spec"]
    pod_labels = workload(objects, overlay)["spec"]["template"]["metadata"]["labels"]
    assert selects(spec["podSelector"]["matchLabels"], pod_labels)
    for other in pod_owners(objects):
        if other["kind"] == "Job":  # the fill Job needs egress to GitHub and takes no connections
            assert not selects(spec["podSelector"]["matchLabels"], other["spec"]["template"]["metadata"]["labels"])
    assert spec["policyTypes"] == ["Ingress"], "egress stays open (the model download)"
    server_ports = {p["name"]: p["containerPort"] for p in server_container(objects, overlay)["ports"]}
    service = one(objects, "Service")
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(server_ports) - {"liveness"}  # kubelet only
    assert server_ports["http"] == 8000
    peers = policy_peers(policy)
    assert peers == INGRESS_PEERS[overlay]
    scaled = find(objects, "ScaledObject")
    for trigger in (t for s in scaled for t in s["spec"]["triggers"]):
        host = re.match(r"https?://[\w-]+\.([\w-]+)\.svc", trigger["metadata"]["serverAddress"])
        assert host and (host.group(1), None) in peers, "the Prometheus the autoscaler reads must be admitted"


def _prestop_sleep_s(container: Obj) -> int:
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    match = re.fullmatch(r"sleep (\d+)", command[-1] if command[:2] == ["/bin/sh", "-c"] else shlex.join(command))
    assert match, f"preStop is not a plain sleep: {command}"
    return int(match.group(1))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_grace_period_covers_prestop_and_drain(overlay: str) -> None:
    objects = rendered(overlay)
    server = server_container(objects, overlay)
    sleep_s = _prestop_sleep_s(server)
    assert 5 <= sleep_s <= 15, "preStop should give the endpoints a few seconds to drop the pod, no more"
    drain_s = effective_config(server).server.shutdown_grace_s
    grace_s = workload(objects, overlay)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace_s > sleep_s + drain_s + SHUTDOWN_MARGIN_S, (
        f"terminationGracePeriodSeconds {grace_s} must exceed preStop {sleep_s} s + server.shutdown_grace_s "
        f"{drain_s} s + {SHUTDOWN_MARGIN_S} s of shutdown, or the kubelet kills sessions mid-flush")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_container_runs_a_valid_config_and_env(overlay: str) -> None:
    """Configs exist in the repository and accept the KITT_STT__ variables the manifests set."""
    for owner in pod_owners(rendered(overlay)):
        for container in containers(owner["spec"]["template"]["spec"]):
            if command_line(container)[:1] == ["kitt-stt"] or config_of(container):
                effective_config(container)
            else:
                assert not literal_env(container), f"{container['name']}: KITT_STT variables but no kitt-stt"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_security_context_of_every_container(overlay: str) -> None:
    for owner in pod_owners(rendered(overlay)):
        pod = owner["spec"]["template"]["spec"]
        pod_context = pod.get("securityContext", {})
        assert pod_context.get("fsGroup") == SERVICE_UID, f"{owner['kind']}: fsGroup"
        assert pod.get("automountServiceAccountToken") is False, f"{owner['kind']}: no API token needed"
        assert pod.get("hostNetwork") is not True and pod.get("hostPID") is not True
        for container in containers(pod):
            effective = {**pod_context, **container.get("securityContext", {})}
            where = f"{owner['kind']}/{container['name']}"
            assert effective.get("runAsNonRoot") is True, where
            assert effective.get("runAsUser") == SERVICE_UID and effective.get("runAsGroup") == SERVICE_UID, where
            assert effective.get("readOnlyRootFilesystem") is True, where
            assert effective.get("allowPrivilegeEscalation") is False, where
            assert effective.get("privileged") is not True, where
            assert effective.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not effective.get("capabilities", {}).get("add"), where
            assert effective.get("seccompProfile", {}).get("type") == "RuntimeDefault", where


def _project_version() -> str:
    match = re.search(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert match, "pyproject.toml: no project version"
    return match.group(1)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned(overlay: str) -> None:
    """Every image has a tag (never latest): the image built from this tree, for this target."""
    for owner in pod_owners(rendered(overlay)):
        for container in containers(owner["spec"]["template"]["spec"]):
            image = container["image"]
            name, _, tag = image.rpartition(":")
            assert "@sha256:" in image or (name and "/" not in tag), f"{image}: no tag"
            assert tag != "latest", f"{image}: :latest is not a version"
            assert tag == f"{_project_version()}-{IMAGE_SUFFIX[overlay]}", (
                f"{image}: expected the tag {_project_version()}-{IMAGE_SUFFIX[overlay]} (pyproject version)")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_volumes_and_writable_paths(overlay: str) -> None:
    objects = rendered(overlay)
    claims = {o["metadata"]["name"] for o in find(objects, "PersistentVolumeClaim")}
    for owner in pod_owners(objects):
        pod = owner["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounted = set()
        for container in containers(pod):
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{container['name']}: volumeMount {mount['name']} names no volume"
                mounted.add(mount["name"])
            if command_line(container)[:1] == ["kitt-stt"] or config_of(container):
                tmp = mount_of(container, "tmp")
                assert tmp and tmp["mountPath"] == "/tmp" and not tmp.get("readOnly"), \
                    f"{container['name']}: kitt-stt needs a writable /tmp (the root filesystem is read-only)"
        assert mounted == set(volumes), f"{owner['kind']}: volumes nobody mounts: {set(volumes) - mounted}"
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
            if "hostPath" in volume:
                assert overlay == "orin", "host paths only on the Orin devices"
                assert volume["hostPath"]["type"] == "Directory", "a missing directory must fail, not appear root-owned"

    server = server_container(objects, overlay)
    config = effective_config(server)
    models = mount_of(server, "models")
    assert models and models.get("readOnly") is True, "the server only reads the model volume"
    assert under(config.asr.model, models["mountPath"]), f"asr.model {config.asr.model} is not on the model volume"
    trt = mount_of(server, "trt-cache")
    assert trt and trt["mountPath"] == TRT_MOUNT and not trt.get("readOnly")
    for path in (config.asr.tensorrt.engine_root(), config.asr.tensorrt.timing_root()):
        assert under(path, TRT_MOUNT), f"{path}: TensorRT caches belong on the {TRT_MOUNT} volume"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_referenced_secret_keys_exist(overlay: str) -> None:
    objects = rendered(overlay)
    secrets = {s["metadata"]["name"]: {**s.get("data", {}), **s.get("stringData", {})}
               for s in find(objects, "Secret")}
    references = [item["valueFrom"]["secretKeyRef"]
                  for owner in pod_owners(objects) for c in containers(owner["spec"]["template"]["spec"])
                  for item in c.get("env", []) if "secretKeyRef" in item.get("valueFrom", {})]
    assert references, "the auth token must come from a Secret"
    for ref in references:
        assert ref["name"] in secrets, f"no Secret {ref['name']}"
        assert ref["key"] in secrets[ref["name"]], f"Secret {ref['name']} has no key {ref['key']}"
    server_env = {e["name"]: e for e in server_container(objects, overlay)["env"]}
    assert "secretKeyRef" in server_env["KITT_STT__SERVER__AUTH_TOKEN"]["valueFrom"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_shipped_auth_token_is_empty_so_the_service_refuses_to_start(overlay: str) -> None:
    """No usable token is published in the repository; an unedited deployment fails closed."""
    objects = rendered(overlay)
    ref = server_container(objects, overlay)["env"][0]["valueFrom"]["secretKeyRef"]
    value = base64.b64decode(one(objects, "Secret", ref["name"])["data"][ref["key"]]).decode()
    assert value == ""
    with pytest.raises(ConfigError, match="empty auth token"):
        load_config(REPO / "config-k8s.yaml", env={"KITT_STT__SERVER__AUTH_TOKEN": value})


def test_a_site_overlay_replaces_the_token(tmp_path: Path) -> None:
    """The way docs/deployment.md tells users to set the token renders, and rolls the pods."""
    (tmp_path / "auth-token").write_text("s3cret-token")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize takes bases by relative path only
        "resources": [os.path.relpath(REPO / "deployment" / "overlays" / "rtx4090", tmp_path)],
        "secretGenerator": [{"name": "kitt-stt-auth", "namespace": "kitt-stt", "behavior": "replace",
                             "files": ["auth-token"]}],
    }))
    objects = kustomize(tmp_path)
    [secret] = find(objects, "Secret")
    assert base64.b64decode(secret["data"]["auth-token"]).decode() == "s3cret-token"
    ref = server_container(objects, "rtx4090")["env"][0]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == secret["metadata"]["name"] != one(rendered("rtx4090"), "Secret")["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_and_resources(overlay: str) -> None:
    objects = rendered(overlay)
    server = server_container(objects, overlay)
    port_names = {p["name"] for p in server["ports"]}
    probes = {kind: server[kind] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    # liveness off the event loop, on the port the config serves it on (server.liveness_port)
    assert probes["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "liveness"}
    liveness_port = {p["name"]: p["containerPort"] for p in server["ports"]}["liveness"]
    assert effective_config(server).server.liveness_port == liveness_port
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # /healthz answers while the engine is built; "started" means the engine is ready
    assert probes["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert all(p["httpGet"]["port"] in port_names for p in probes.values())
    startup_s = probes["startupProbe"]["periodSeconds"] * probes["startupProbe"]["failureThreshold"]
    assert startup_s >= (4 if overlay == "orin" else 2) * TRT_COLD_BUILD_S, f"startup allows only {startup_s} s"

    for owner in pod_owners(objects):
        for container in containers(owner["spec"]["template"]["spec"]):
            resources = container.get("resources", {})
            assert "memory" in resources.get("requests", {}) and "memory" in resources.get("limits", {}), \
                f"{container['name']}: memory request and limit"
    limits = server["resources"]["limits"]
    if overlay == "rtx4090":
        assert str(limits.get("nvidia.com/gpu")) == "1"
    else:
        # Orin: memory shared by CPU and GPU; the TensorRT builder workspace must leave room
        assert effective_config(server).asr.tensorrt.max_workspace_mb <= 2048
        # and no container's limit may take what the OS, k3s and the GPU allocations its cgroup
        # may not count need on the smallest (8 GB) module (docs/deployment.md, "Jetson Orin")
        for owner in pod_owners(objects):
            for container in containers(owner["spec"]["template"]["spec"]):
                limit = _gib(container["resources"]["limits"]["memory"])
                assert limit <= ORIN_8GB_USABLE_GIB - ORIN_RESERVE_GIB, f"{container['name']}: limit {limit:.2f} GiB"


#: An 8 GB Orin module's memory in GiB (8e9 bytes), and what a pod must leave of it: the OS and
#: k3s (~1-1.5 GiB) and the GPU allocations L4T may not charge to the container's cgroup (the
#: engine and its activations, ~0.7 GiB; docs/deployment.md, "Jetson Orin (k3s)").
ORIN_8GB_USABLE_GIB = 8e9 / 2**30
ORIN_RESERVE_GIB = 2.5


def _gib(quantity: str) -> float:
    """A Kubernetes memory quantity (binary or decimal suffix) in GiB."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", quantity)
    assert match, f"{quantity}: not a memory quantity this test reads"
    scale = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
    return float(match.group(1)) * scale.get(match.group(2) or "", 1) / 2**30


def _kitt_metrics() -> set[str]:
    return {family.name for family in Metrics().registry.collect()}


def fail_safe_problems(scaled: Obj) -> list[str]:
    """Ways a ScaledObject could turn a lost metric into a scale-in that drains live sessions."""
    problems = []
    if "fallback" in scaled["spec"]:
        problems.append("fallback: a fixed replica count on errors may be a scale-in")
    for trigger in scaled["spec"]["triggers"]:
        if trigger["type"] == "prometheus" and trigger["metadata"].get("ignoreNullValues", "true") != "false":
            problems.append("ignoreNullValues is not \"false\": an empty result reads as 0 seats")
    return problems


def test_rtx4090_a_lost_metric_keeps_the_replica_count() -> None:
    scaled = one(rendered("rtx4090"), "ScaledObject")
    assert fail_safe_problems(scaled) == []
    broken = copy.deepcopy(scaled)
    del broken["spec"]["triggers"][0]["metadata"]["ignoreNullValues"]  # KEDA's default is "true"
    broken["spec"]["fallback"] = {"failureThreshold": 3, "replicas": 2}
    assert len(fail_safe_problems(broken)) == 2


def _selector(expr: str, metric: str) -> dict[str, str]:
    match = re.search(rf"\b{metric}\{{([^}}]*)\}}", expr)
    assert match, f"{metric}{{...}} not in {expr!r}"
    return dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))


def test_alerts_on_a_missing_seat_metric_and_on_scaling_at_its_maximum() -> None:
    objects = rendered("rtx4090")
    scaled = one(objects, "ScaledObject")
    alerts = {rule["alert"]: rule for group in one(objects, "PrometheusRule")["spec"]["groups"]
              for rule in group["rules"] if "alert" in rule}
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]

    absent = alerts["KittSttSeatsMetricAbsent"]
    assert absent["expr"].startswith("absent(kitt_seats{") and "kitt_seats" in _kitt_metrics()
    assert _selector(absent["expr"], "kitt_seats") == _selector(query, "kitt_seats"), \
        "the alert must watch exactly the series the autoscaler reads"
    assert absent["labels"]["severity"] == "critical"

    at_max = alerts["KittSttScalingAtMax"]
    hpa = f"keda-hpa-{scaled['metadata']['name']}"  # the HPA KEDA creates for the ScaledObject
    for metric in ("kube_horizontalpodautoscaler_status_current_replicas",
                   "kube_horizontalpodautoscaler_spec_max_replicas"):
        assert _selector(at_max["expr"], metric) == {
            "namespace": scaled["metadata"]["namespace"], "horizontalpodautoscaler": hpa}
    assert ">=" in at_max["expr"]
    for rule in alerts.values():
        assert int(rule["for"].rstrip("m")) >= 5, "no page for one missed scrape"
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_rtx4090_autoscaling_on_seats_per_pod() -> None:
    objects = rendered("rtx4090")
    scaled = one(objects, "ScaledObject")
    target = scaled["spec"]["scaleTargetRef"]
    deployment = one(objects, target.get("kind", "Deployment"), target["name"])
    assert target.get("apiVersion", "apps/v1") == deployment["apiVersion"]
    assert "replicas" not in deployment["spec"], "the autoscaler owns the replica count; `apply` would reset it"
    assert scaled["spec"]["minReplicaCount"] >= 2
    assert scaled["spec"]["maxReplicaCount"] > scaled["spec"]["minReplicaCount"]
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] < scaled["spec"]["minReplicaCount"]

    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    query = trigger["metadata"]["query"]
    metric = re.match(r"sum\((\w+)\{", query)
    assert metric and metric.group(1) == "kitt_seats" and "kitt_seats" in _kitt_metrics(), query
    labels = dict(re.findall(r'(\w+)="([^"]*)"', query))
    assert labels == {"namespace": deployment["metadata"]["namespace"],
                      "service": one(objects, "Service")["metadata"]["name"]}, \
        "the query must select this namespace's Service (the labels the ServiceMonitor gives its targets)"
    assert float(trigger["metadata"]["threshold"]) > 0
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 300, "scale-in drains sessions: slowly"
    assert all(p["type"] == "Pods" and p["value"] == 1 for p in behavior["scaleDown"]["policies"])


def test_rtx4090_pods_only_on_rtx_4090_nodes() -> None:
    """Required node affinity on the GPU product label, which docs/deployment.md names."""
    pod = workload(rendered("rtx4090"), "rtx4090")["spec"]["template"]["spec"]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    [expression] = term["matchExpressions"]
    assert expression == {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-GeForce-RTX-4090"]}
    docs = (REPO / "docs" / "deployment.md").read_text()
    assert "nvidia.com/gpu.product=NVIDIA-GeForce-RTX-4090" in docs, "document the label (and how to set it)"


def test_rtx4090_model_volume_and_fill_job() -> None:
    objects = rendered("rtx4090")
    claim = one(objects, "PersistentVolumeClaim", "kitt-stt-models")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"], "written by the Job, read by pods on many nodes"
    server = server_container(objects, "rtx4090")
    model_dir = str(effective_config(server).asr.model)

    job = one(objects, "Job")
    [pull] = job["spec"]["template"]["spec"]["containers"]
    assert command_line(pull)[-1].rstrip().splitlines()[-1].split()[:5] == \
        ["exec", "kitt-stt", "models", "pull", "sensevoice"], "the write probe, then the pull"
    fill_mount = mount_of(pull, "models")
    assert fill_mount and not fill_mount.get("readOnly")
    job_volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "models")
    assert job_volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    cache = literal_env(pull)["KITT_STT__MODELS__CACHE_DIR"]
    assert cache == fill_mount["mountPath"]
    assert effective_config(pull).models.sensevoice_sha256 == OFFICIAL_SHA256, "the fill Job installs a checked archive"
    # the Job installs <cache>/sensevoice; the server reads asr.model at the same place
    assert model_dir == str(PurePosixPath(mount_of(server, "models")["mountPath"]) / "sensevoice")
    assert effective_config(pull).models.cache_dir == Path(cache)

    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    [wait] = pod["initContainers"]
    wait_env = {e["name"]: e["value"] for e in wait["env"]}
    assert wait_env["MODEL_MARKER"] == f"{model_dir}/.complete", "the servers wait for the finished install"
    deadline_s = one(objects, "Deployment")["spec"]["progressDeadlineSeconds"]
    assert 0 < int(wait_env["WAIT_TIMEOUT_S"]) < deadline_s, "bounded, and said before the rollout is marked failed"
    [server_claim] = [v for v in pod["volumes"] if v["name"] == "models"]
    assert server_claim["persistentVolumeClaim"] == {"claimName": claim["metadata"]["name"], "readOnly": True}


def _script(container: Obj) -> str:
    line = command_line(container)
    assert line[:2] == ["/bin/sh", "-c"], f"{container['name']}: not a shell script"
    return line[2]


def _run_script(script: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    sh = shutil.which("dash") or shutil.which("sh")
    assert sh is not None
    return subprocess.run([sh, "-c", script], env={"PATH": os.environ["PATH"], **env}, capture_output=True,
                          text=True, timeout=timeout)


def test_rtx4090_the_wait_for_the_model_is_bounded(tmp_path: Path) -> None:
    """wait-for-model gives up after WAIT_TIMEOUT_S with exit 1 and says where to look (run here
    with a 2 s bound), and returns at once when the install is complete."""
    pod = one(rendered("rtx4090"), "Deployment")["spec"]["template"]["spec"]
    [wait] = pod["initContainers"]
    marker = tmp_path / "sensevoice" / ".complete"
    env = {"MODEL_MARKER": str(marker), "WAIT_TIMEOUT_S": "2", "WAIT_INTERVAL_S": "1"}
    started = time.monotonic()
    result = _run_script(_script(wait), env)
    assert result.returncode == 1
    assert time.monotonic() - started < 10
    assert f"ERROR: {marker} did not appear within 2 s" in result.stderr
    assert "kubectl -n kitt-stt logs job/kitt-stt-model-fill" in result.stderr
    assert "waiting for" in result.stdout
    marker.parent.mkdir()
    marker.write_text("")
    done = _run_script(_script(wait), env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_rtx4090_the_fill_job_names_the_storage_fix_on_an_unwritable_volume(tmp_path: Path) -> None:
    """Where kubelet did not apply fsGroup (in-tree NFS, CSI without fsGroupPolicy File), the Job
    fails with the fixes, not with the pull's EACCES; on a writable volume it runs the pull."""
    [pull] = one(rendered("rtx4090"), "Job")["spec"]["template"]["spec"]["containers"]
    script = _script(pull)
    blocker = tmp_path / "read-only"  # a file: nothing can be created below it, not even by root
    blocker.write_text("")
    result = _run_script(script, {"KITT_STT__MODELS__CACHE_DIR": str(blocker / "models")})
    assert result.returncode == 1
    message = " ".join(result.stderr.split())
    for fix in ("is not writable by uid", "fsGroupPolicy: File", "chown 10001:10001", "ReadWriteOnceWithFSType",
                ".complete included"):
        assert fix in message
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "kitt-stt").write_text('#!/bin/sh\necho "kitt-stt $*"\n')
    (fake / "kitt-stt").chmod(0o755)
    volume = tmp_path / "models"
    volume.mkdir()
    ran = subprocess.run([shutil.which("sh") or "sh", "-c", script], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{fake}:{os.environ['PATH']}", "KITT_STT__MODELS__CACHE_DIR": str(volume)})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["kitt-stt", *command_line(pull)[-1].split("exec kitt-stt", 1)[1].split()]
    assert not any(volume.iterdir()), "the probe leaves nothing behind"


def test_orin_daemonset_one_pod_per_device_with_a_prebuilt_engine() -> None:
    objects = rendered("orin")
    daemonset = one(objects, "DaemonSet")
    assert daemonset["spec"]["updateStrategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}, \
        "never two pods (two TensorRT builds) on one device"
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["kitt-stt/accelerator"] == "jetson-orin"
    assert pod["nodeSelector"]["kubernetes.io/arch"] == "arm64"
    assert pod["runtimeClassName"] == "nvidia"

    server = server_container(objects, "orin")
    config = effective_config(server)
    assert config.asr.provider.value == "tensorrt"
    # no fixed EP-context path: the server finds the keyed build (GPU, versions, model sha256, options)
    assert config.asr.tensorrt.ep_context_model is None and under(config.asr.tensorrt.cache_dir, TRT_MOUNT)

    init = {c["name"]: c for c in pod["initContainers"]}
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-model", "trt-build"]
    fetch = init["fetch-model"]
    assert command_line(fetch)[:4] == ["kitt-stt", "models", "pull", "sensevoice"]
    assert str(config.asr.model) == literal_env(fetch)["KITT_STT__MODELS__CACHE_DIR"] + "/sensevoice"
    assert effective_config(fetch).models.sensevoice_sha256 == OFFICIAL_SHA256, "the device installs a checked archive"
    assert not mount_of(fetch, "models").get("readOnly")

    build = init["trt-build"]
    line = command_line(build)
    assert line[-5:] == ["kitt-stt", "trt", "build", "--config", "/app/config-k3s-orin.yaml"], \
        "the init container builds into the keyed cache the server's config looks in"
    assert effective_config(build).asr.tensorrt == config.asr.tensorrt, "build and serve with the same options"
    trt = mount_of(build, "trt-cache")
    assert trt and trt["mountPath"] == TRT_MOUNT and not trt.get("readOnly")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["trt-cache"]["hostPath"]["path"] != volumes["models"]["hostPath"]["path"]


def test_orin_tensorrt_profile_is_sized_from_the_longest_segment() -> None:
    """The profile's longest input is exactly what vad.max_segment_ms lets through (60 ms LFR
    frames): not less (start-up refuses that), not more (activation memory on an 8 GB module)."""
    config = effective_config(server_container(rendered("orin"), "orin"))
    needed = math.ceil(config.vad.max_segment_ms / 60)
    assert config.asr.tensorrt.profile_max_frames == needed == 500
    assert config.asr.tensorrt.profile_opt_frames <= needed


def test_the_orin_configs_comments_match_its_settings() -> None:
    """The seat arithmetic in config-k3s-orin.yaml's comment is the config's own."""
    config = effective_config(server_container(rendered("orin"), "orin"))
    text = (REPO / "config-k3s-orin.yaml").read_text()
    match = re.search(r"up to (\d+) connections of up to (\d+) seats each.*?up to (\d+) seats", text, re.DOTALL)
    assert match, "config-k3s-orin.yaml: the VAD comment's seat count"
    connections, seats, total = map(int, match.groups())
    assert (connections, seats, total) == (config.server.max_connections, config.server.max_seats,
                                           config.server.max_connections * config.server.max_seats)


def test_the_documented_ingress_is_valid_and_routes_only_the_websocket() -> None:
    """docs/deployment.md's Ingress example: valid, and aimed at the Service's port and path."""
    docs = (REPO / "docs" / "deployment.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", docs, re.DOTALL)]
    [ingress] = [b for b in blocks if isinstance(b, dict) and b.get("kind") == "Ingress"]
    validate(ingress)
    objects = rendered("rtx4090")
    service = one(objects, "Service")
    assert ingress["metadata"]["namespace"] == service["metadata"]["namespace"]
    annotations = ingress["metadata"]["annotations"]
    for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
        assert int(annotations[f"nginx.ingress.kubernetes.io/{timeout}"]) > 60, "above the 60 s default"
    ws_path = effective_config(server_container(objects, "rtx4090")).server.path
    paths = [p for rule in ingress["spec"]["rules"] for p in rule["http"]["paths"]]
    assert [(p["path"], p["pathType"]) for p in paths] == [(ws_path, "Exact")], "never expose /metrics, /debug"
    backend = paths[0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] in {p["name"] for p in service["spec"]["ports"]}


#: nginx variables that hold the query string (nginx's core and http modules' variable index).
NGINX_QUERY_VARIABLES = re.compile(r"\$(request|request_uri|args|query_string|arg_\w+)\b")


def test_the_documented_ingress_nginx_log_format_drops_query_strings() -> None:
    """docs/deployment.md's ConfigMap for ingress-nginx: a `?token=` never reaches the controller's
    log, and the line still has the method, the path and the status."""
    docs = (REPO / "docs" / "deployment.md").read_text()
    blocks = [yaml.safe_load(block) for block in re.findall(r"```yaml\n(.*?)```", docs, re.DOTALL)]
    [config] = [b for b in blocks if isinstance(b, dict) and b.get("kind") == "ConfigMap"]
    validate(config)
    assert config["metadata"]["namespace"] == INGRESS_COMPONENTS["from-ingress-nginx"][0]
    line = config["data"]["log-format-upstream"]
    assert not NGINX_QUERY_VARIABLES.search(line), line
    assert {"$request_method", "$uri", "$status", "$upstream_addr"} <= set(re.findall(r"\$\w+", line))
    assert NGINX_QUERY_VARIABLES.search('"$request" $status'), "the check sees the default's $request"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_shell_scripts_parse(overlay: str) -> None:
    """The /bin/sh -c scripts (preStop, waits, the TensorRT build) are valid POSIX shell."""
    sh = shutil.which("dash") or shutil.which("sh")
    assert sh is not None
    for owner in pod_owners(rendered(overlay)):
        for container in containers(owner["spec"]["template"]["spec"]):
            for line in (command_line(container), container.get("lifecycle", {}).get("preStop", {})
                         .get("exec", {}).get("command", [])):
                if line[:2] == ["/bin/sh", "-c"]:
                    result = subprocess.run([sh, "-n", "-c", line[2]], capture_output=True, text=True)
                    assert result.returncode == 0, f"{container['name']}: {result.stderr}"
