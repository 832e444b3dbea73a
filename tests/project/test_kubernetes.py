"""The Kubernetes manifests (``deploy/kubernetes``): valid against the Kubernetes schemas (offline, with
``kubernetes-validate``), and consistent with the code they run. Validated here, never applied to a cluster."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from django.core.management import get_commands
from django.urls import resolve

from runs.dispatcher_figures import DispatcherFigures
from tests.monitoring.test_metrics import scrape, value

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.37.0"
CUSTOM_KINDS = {("kustomize.config.k8s.io/v1beta1", "Kustomization"), ("keda.sh/v1alpha1", "ScaledObject")}
"""Kinds the Kubernetes schemas do not hold (a CRD and kustomize's own file): checked by the tests below instead."""


def _kustomization() -> dict[str, Any]:
    return dict(yaml.safe_load((K8S / "kustomization.yaml").read_text()))


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for name in _kustomization()["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            if doc:
                docs.append((name, doc))
    return docs


def _by_kind(kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in _documents() if doc["kind"] == kind}


def _containers(deployment: dict[str, Any]) -> list[dict[str, Any]]:
    return list(deployment["spec"]["template"]["spec"]["containers"])


def test_kustomization_lists_every_manifest_and_each_exists() -> None:
    listed = set(_kustomization()["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


@pytest.mark.parametrize(
    ("name", "doc"),
    [(n, d) for n, d in _documents() if (d["apiVersion"], d["kind"]) not in CUSTOM_KINDS],
    ids=lambda v: v if isinstance(v, str) else v["kind"],
)
def test_each_resource_validates_against_the_kubernetes_schema(name: str, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_a_broken_manifest_is_refused_by_the_validator() -> None:
    """The check can fail: an unknown field in a container is refused in strict mode."""
    web = _by_kind("Deployment")["web"]
    _containers(web)[0]["readinesProbe"] = {"httpGet": {"path": "/readyz", "port": "http"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(web, KUBERNETES_VERSION, strict=True)


def test_the_web_probes_hit_our_health_endpoints() -> None:
    (web,) = _containers(_by_kind("Deployment")["web"])
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe"):
        assert resolve(web[probe]["httpGet"]["path"]).func.__name__ == web[probe]["httpGet"]["path"].strip("/")
    host = web["readinessProbe"]["httpGet"]["httpHeaders"][0]["value"]
    allowed = _by_kind("ConfigMap")["chat-serving-config"]["data"]["DJANGO_ALLOWED_HOSTS"].split(",")
    assert host in allowed  # else Django answers the probe 400 (DisallowedHost)


def _manage_py_commands(node: Any) -> set[str]:
    """Every ``manage.py <command>`` in ``node``: in argv lists and in shell strings."""
    found: set[str] = set()
    if isinstance(node, dict):
        for child in node.values():
            found |= _manage_py_commands(child)
    elif isinstance(node, list):
        for i, child in enumerate(node):
            if child == "manage.py" and i + 1 < len(node):
                found.add(str(node[i + 1]))
            found |= _manage_py_commands(child)
    elif isinstance(node, str):
        found |= set(re.findall(r"manage\.py ([a-z_]+)", node))
    return found


def test_every_manage_py_command_the_manifests_run_exists() -> None:
    used = set().union(*(_manage_py_commands(doc) for _, doc in _documents()))
    assert used >= {"migrate", "prepare_model", "run_dispatcher", "healthcheck", "worker_drain"}
    assert used <= set(get_commands()), used - set(get_commands())


def test_a_worker_pod_outlives_its_drain() -> None:
    """The grace period covers the preStop drain (up to the drain deadline) plus the warm shutdown after it."""
    config = _by_kind("ConfigMap")["chat-serving-config"]["data"]
    for worker in (d for d in _by_kind("Deployment").values() if d["metadata"]["name"].startswith("worker-")):
        spec = worker["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        drain = container["lifecycle"]["preStop"]["exec"]["command"]
        assert drain[:3] == ["python", "manage.py", "worker_drain"]
        timeout = float(drain[drain.index("--timeout") + 1])
        assert timeout >= float(config["DEPLOYMENT_DRAIN_DEADLINE_S"])
        assert spec["terminationGracePeriodSeconds"] >= timeout + 30
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1


@pytest.mark.django_db
@pytest.mark.usefixtures("clean_redis")
def test_the_scaler_scales_a_worker_deployment_on_a_metric_we_export() -> None:
    deployments = _by_kind("Deployment")
    for scaler in _by_kind("ScaledObject").values():
        target = deployments[scaler["spec"]["scaleTargetRef"]["name"]]
        (container,) = _containers(target)
        served = next(e["value"] for e in container["env"] if e["name"] == "WORKER_DEPLOYMENT")
        (trigger,) = scaler["spec"]["triggers"]
        assert trigger["type"] == "prometheus"
        query = trigger["metadata"]["query"]
        assert query == f'sum(chat_queued_tokens{{deployment="{served}"}})'
        assert 1 <= scaler["spec"]["minReplicaCount"] <= scaler["spec"]["maxReplicaCount"]
        float(trigger["metadata"]["threshold"])
        # The web's /metrics exports exactly that series once the dispatcher has seen a backlog for it.
        figures = DispatcherFigures(deployment=served, write_interval_s=0.0)
        figures.queued({served: (3, 1200)})
        figures.ticked({}, {})
        assert value(scrape(), "chat_queued_tokens", deployment=served) == 1200
