"""The benchmarks' claims: created already allocated to a node's devices, as the scheduler would
write them, so a driver can prepare them without a scheduler or a kubelet."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.common import poll
from bench.driver import DEVICES

NAMESPACE = "bench-prepare"


Manifests = tuple[dict[str, Any], dict[str, Any]]  # a claim, and the status that allocates it


def claim_manifests(name: str, driver: str, node: str, devices: list[str]) -> Manifests:
    """A claim of `devices` of `driver` on `node`, and its allocation."""
    spec = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "labels": {"dra-fake.dev/bench": "prepare"}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": driver,
                            "allocationMode": "ExactCount",
                            "count": len(devices),
                        },
                    }
                ]
            }
        },
    }
    status = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": driver, "pool": node, "device": d} for d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
        }
    }
    return spec, status


def make_claims(
    custom: client.CustomObjectsApi, driver: str, node: str, per_claim: int
) -> list[dict[str, str]]:
    """DEVICES / per_claim allocated claims on `node`, together holding every device once."""
    refs = []
    for i in range(DEVICES // per_claim):
        name = f"{node}-d{per_claim}-{i:03d}"
        devices = [f"gpu-{i * per_claim + j}" for j in range(per_claim)]
        refs.append(create_allocated(custom, name, *claim_manifests(name, driver, node, devices)))
    return refs


def create_allocated(
    custom: client.CustomObjectsApi, name: str, spec: dict[str, Any], status: dict[str, Any]
) -> dict[str, str]:
    """The claim created (again, if one of that name is left from an earlier run) with `status`
    as its allocation, as the scheduler would write it; its reference for drabench."""
    obj: Any
    try:
        obj = custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", spec
        )
    except ApiException as err:
        if err.status != 409:
            raise
        custom.delete_namespaced_custom_object("resource.k8s.io", "v1", NAMESPACE, "resourceclaims", name)
        obj = poll(
            f"claim {name} re-created",
            lambda: custom.create_namespaced_custom_object(
                "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", spec
            ),
            30,
            0.2,
        )
    custom.patch_namespaced_custom_object_status(
        "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", name, status
    )
    return {"uid": obj["metadata"]["uid"], "namespace": NAMESPACE, "name": name}
