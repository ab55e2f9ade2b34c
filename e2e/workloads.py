"""Manifests and reads of the GPU workloads the e2e tests run: claim templates and claims (with an
opaque config), pods that use them, the devices a pod's claim got, why a pod does not schedule or
prepare, a published device's attribute."""

from __future__ import annotations

from typing import Any

import yaml

from e2e.kindcluster.cluster import NVML_CONSUMERS_IMAGE
from e2e.kube import Kube, poll, workload_container


def template(
    name: str,
    device_class: str,
    selector: str | None = None,
    count: int = 1,
    match_attribute: str | None = None,
) -> str:
    exactly: dict[str, Any] = {
        "deviceClassName": device_class,
        "allocationMode": "ExactCount",
        "count": count,
    }
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    devices: dict[str, Any] = {"requests": [{"name": "req", "exactly": exactly}]}
    if match_attribute:
        devices["constraints"] = [{"requests": ["req"], "matchAttribute": match_attribute}]
    return yaml.safe_dump(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": {"devices": devices}},
        }
    )


def pod(name: str, template_name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template_name}],
        "containers": [workload_container(claims=["dev"])],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def devices_of(kube: Kube, ns: str, pod_name: str) -> list[str]:
    p = kube.pod(ns, pod_name)
    claim = kube.claim(ns, p["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
    return [device for _, _, device in kube.allocated_devices(claim)]


def running_on_one_gpu(kube: Kube, ns: str, node: str, name: str) -> str:
    """Pod `name` on `node` with a claim of one GPU (template `one`), once Running; its device."""
    kube.apply_yaml(template("one", "gpu.nvidia.com"), ns)
    kube.create(pod(name, "one", node), ns)
    kube.wait_running(ns, name)
    [device] = devices_of(kube, ns, name)
    return device


def unschedulable(kube: Kube, ns: str, name: str) -> str:
    return poll(f"pod {name} Unschedulable", lambda: kube.unschedulable(ns, name), 60)


def attr(device: dict[str, Any], name: str) -> Any:
    value = device["attributes"][name]
    return next(iter(value.values()))


def claim_with_config(name: str, parameters: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
                    "config": [
                        {
                            "requests": ["gpu"],
                            "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters},
                        }
                    ],
                }
            },
        }
    )


def pod_for_claim(name: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [workload_container(claims=["gpu"])],
        },
    }


def prepare_failure(kube: Kube, ns: str, pod: str, expected: str) -> str:
    """The kubelet's FailedPrepareDynamicResources event whose message contains `expected` (the
    kubelet retries, so earlier events may carry other transient errors)."""

    def event() -> str | None:
        for e in kube.events(ns, pod):
            if e.get("reason") == "FailedPrepareDynamicResources" and expected in str(e.get("message")):
                return str(e.get("message"))
        return None

    return poll(f"FailedPrepareDynamicResources event of {pod} with {expected!r}", event, 60)


def consumer_pod(name: str, template_name: str, node: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A pod of the consumers image that stays up (the programs run in it by exec)."""
    manifest = pod(name, template_name, node)
    manifest["metadata"]["annotations"] = annotations
    manifest["spec"]["containers"][0] |= {
        "image": NVML_CONSUMERS_IMAGE,
        "imagePullPolicy": "IfNotPresent",  # loaded into the kind nodes, never pulled
        "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"],
    }
    return manifest
