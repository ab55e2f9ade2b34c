"""The objects the controller creates for a ComputeDomain
(docs/reference/nvidia-compute-domains.md#31-controller-objects), as pure manifest builders.

Every object carries the label and finalizer `resource.nvidia.com/computeDomain=<cdUID>` and no
ownerReference to the ComputeDomain: linkage is by label, as NVIDIA does it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from computedomain.api import (
    API_VERSION,
    CD_LABEL,
    CHANNEL_CLASS,
    CHANNEL_KIND,
    DAEMON_CLASS,
    DAEMON_KIND,
    DEFAULT_DAEMON_UID,
    DRIVER_NAME,
    FINALIZER,
    TARGET_DAEMON,
    TARGET_LABEL,
    TARGET_WORKLOAD,
    daemon_object_name,
)
from dra_fake.core.resourceapi import ResourceApiVersion, claim_spec_as

DAEMON_CLAIM_NAME = "compute-domain-daemon"
DAEMON_CONTAINER = "compute-domain-daemon"


@dataclass(frozen=True)
class DaemonSettings:
    namespace: str
    image: str
    service_account: str
    max_nodes_per_imex_domain: int
    log_level: str = "info"
    resource_version: ResourceApiVersion = "v1"  # of the claim templates: what the server serves
    daemon_uid: int = DEFAULT_DAEMON_UID
    daemon_gid: int = DEFAULT_DAEMON_UID


def _meta(name: str, namespace: str, uid: str, target: str | None = None) -> dict[str, Any]:
    labels = {CD_LABEL: uid}
    if target:
        labels[TARGET_LABEL] = target
    return {"name": name, "namespace": namespace, "labels": labels, "finalizers": [FINALIZER]}


def _opaque(parameters: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"opaque": {"driver": DRIVER_NAME, "parameters": parameters}}]


def _template(
    name: str,
    namespace: str,
    uid: str,
    target: str,
    request: str,
    device_class: str,
    parameters: dict[str, Any],
    version: ResourceApiVersion,
) -> dict[str, Any]:
    claim_spec = {
        "devices": {
            "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
            "config": _opaque(parameters),
        }
    }
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaimTemplate",
        "metadata": _meta(name, namespace, uid, target),
        "spec": {"spec": claim_spec_as(version, claim_spec)},
    }


def workload_template(cd: dict[str, Any], version: ResourceApiVersion = "v1") -> dict[str, Any]:
    """The ResourceClaimTemplate named by spec.channel.resourceClaimTemplate.name, in the CD's namespace."""
    meta, channel = cd["metadata"], cd["spec"]["channel"]
    parameters = {
        "apiVersion": API_VERSION,
        "kind": CHANNEL_KIND,
        "domainID": meta["uid"],
        "allocationMode": channel.get("allocationMode") or "Single",
    }
    return _template(
        channel["resourceClaimTemplate"]["name"],
        meta["namespace"],
        meta["uid"],
        TARGET_WORKLOAD,
        "channel",
        CHANNEL_CLASS,
        parameters,
        version,
    )


def daemon_template(uid: str, namespace: str, version: ResourceApiVersion = "v1") -> dict[str, Any]:
    parameters = {"apiVersion": API_VERSION, "kind": DAEMON_KIND, "domainID": uid}
    return _template(
        daemon_object_name(uid), namespace, uid, TARGET_DAEMON, "daemon", DAEMON_CLASS, parameters, version
    )


def _field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _probe(period: int, failures: int) -> dict[str, Any]:
    return {
        "exec": {"command": ["dra-fake", "imex-daemon", "check"]},
        "periodSeconds": period,
        "failureThreshold": failures,
    }


def daemon_set(uid: str, settings: DaemonSettings) -> dict[str, Any]:
    """One IMEX daemon per node labelled for this CD (nodeSelector = the CD label)."""
    name = daemon_object_name(uid)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, settings.namespace, uid),
        "spec": {
            "selector": {"matchLabels": {CD_LABEL: uid}},
            "template": {
                "metadata": {"labels": {CD_LABEL: uid}},
                "spec": {
                    "nodeSelector": {CD_LABEL: uid},
                    "serviceAccountName": settings.service_account,
                    # The uid the compute-domain plugin gives the domain's /imexd directory to.
                    "securityContext": {
                        "runAsNonRoot": settings.daemon_uid != 0,
                        "runAsUser": settings.daemon_uid,
                        "runAsGroup": settings.daemon_gid,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "tolerations": [
                        {"operator": "Exists", "effect": effect}
                        for effect in ("NoSchedule", "NoExecute", "PreferNoSchedule")
                    ],
                    "resourceClaims": [{"name": DAEMON_CLAIM_NAME, "resourceClaimTemplateName": name}],
                    "containers": [
                        {
                            "name": DAEMON_CONTAINER,
                            "image": settings.image,
                            "command": ["dra-fake", "imex-daemon", "run"],
                            "env": [
                                {"name": "LOG_LEVEL", "value": settings.log_level},
                                {
                                    "name": "MAX_NODES_PER_IMEX_DOMAIN",
                                    "value": str(settings.max_nodes_per_imex_domain),
                                },
                                _field_env("NODE_NAME", "spec.nodeName"),
                                _field_env("POD_IP", "status.podIP"),
                                _field_env("POD_UID", "metadata.uid"),
                                _field_env("POD_NAME", "metadata.name"),
                                _field_env("POD_NAMESPACE", "metadata.namespace"),
                                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                            ],
                            "resources": {"claims": [{"name": DAEMON_CLAIM_NAME}]},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "startupProbe": _probe(1, 1200),
                            "livenessProbe": _probe(60, 20),
                            "readinessProbe": _probe(10, 1),
                        }
                    ],
                },
            },
        },
    }
