"""The API objects of the kill soak (e2e/soak.py) on its kubelet-less node: a ComputeDomain with
its clique Ready, claims with the pods that use them, and their removal when no controller may be
left to remove finalizers."""

from __future__ import annotations

import contextlib
from typing import Any

from kubernetes.client.exceptions import ApiException

from computedomain.api import (
    API_VERSION,
    CD_LABEL,
    CLIQUE_LABEL,
    CLIQUE_PLURAL,
    GROUP,
    PLURAL,
    STATUS_READY,
    VERSION,
    clique_object_name,
)
from computedomain.api import DRIVER_NAME as CD_DRIVER
from dra_fake.core.resourceapi import as_dict
from e2e.kube import Kube
from e2e.localcluster.cluster import CD_CLIQUE_ID, CD_NAMESPACE

GPU_DRIVER = "gpu.nvidia.com"
# A claim the soak makes: (namespace, claim and pod name, device class, opaque config kind or None).
Wanted = tuple[str, str, str, str | None]
SHARE_REQUEST = {
    "deviceClassName": GPU_DRIVER,
    "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
    "capacity": {"requests": {"memory": "20Gi"}},
}
SHARE_CONFIG = {
    "opaque": {
        "driver": GPU_DRIVER,
        "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
        },
    }
}


def create_domain(kube: Kube, namespace: str, node: str) -> str:
    """A ComputeDomain in the soak namespace, and its clique with this node's daemon Ready (what
    the IMEX daemon would write): a channel prepare finds the daemon Ready at once."""
    cd = as_dict(
        kube.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            {
                "apiVersion": API_VERSION,
                "kind": "ComputeDomain",
                "metadata": {"name": "soak"},
                "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "soak-channel"}}},
            },
        )
    )
    uid = str(cd["metadata"]["uid"])
    daemon = {"nodeName": node, "ipAddress": "192.0.2.1", "cliqueID": CD_CLIQUE_ID, "index": 0}
    kube.custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        CD_NAMESPACE,
        CLIQUE_PLURAL,
        {
            "apiVersion": API_VERSION,
            "kind": "ComputeDomainClique",
            "metadata": {
                "name": clique_object_name(uid, CD_CLIQUE_ID),
                "labels": {CD_LABEL: uid, CLIQUE_LABEL: CD_CLIQUE_ID},
            },
            "daemons": [{**daemon, "status": STATUS_READY}],
        },
    )
    return uid


def claim_with_pod(kube: Kube, node: str, domain_uid: str, wanted: Wanted, share: bool = False) -> None:
    """A claim of one device of `device_class` (with the domain's opaque config unless
    `config_kind` is None; a share of the shared GPU with its time slice if `share`) and a pod
    bound to this node that uses it, both called `name`."""
    namespace, name, device_class, config_kind = wanted
    exactly = SHARE_REQUEST if share else {"deviceClassName": device_class}
    devices: dict[str, Any] = {"requests": [{"name": "dev", "exactly": exactly}]}
    if share:
        devices["config"] = [SHARE_CONFIG]
    if config_kind is not None:
        parameters = {"apiVersion": API_VERSION, "kind": config_kind, "domainID": domain_uid}
        devices["config"] = [{"opaque": {"driver": CD_DRIVER, "parameters": parameters}}]
    kube.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": devices},
        },
        namespace,
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [{"operator": "Exists"}],  # the node is never Ready
                "resourceClaims": [{"name": "dev", "resourceClaimName": name}],
                "containers": [{"name": "c", "image": "none", "resources": {"claims": [{"name": "dev"}]}}],
            },
        },
        namespace,
    )


def delete_custom(kube: Kube, group: str, version: str, namespace: str, plural: str, name: str) -> None:
    """Delete an object, its finalizers first: no controller may be left to remove them."""
    with contextlib.suppress(ApiException):
        kube.custom.patch_namespaced_custom_object(
            group, version, namespace, plural, name, {"metadata": {"finalizers": None}}
        )
    with contextlib.suppress(ApiException):
        kube.custom.delete_namespaced_custom_object(group, version, namespace, plural, name)


def remove_domain(kube: Kube, soak_namespace: str, domain_uid: str) -> None:
    """The domain, its clique and what a ComputeDomain controller may have made for it (claim
    templates, a DaemonSet): a controller may run during the soak, or have stopped before this."""
    selector = f"{CD_LABEL}={domain_uid}"
    delete_custom(kube, GROUP, VERSION, soak_namespace, PLURAL, "soak")
    kinds = [
        (GROUP, VERSION, CLIQUE_PLURAL),
        (*kube.resource, "resourceclaimtemplates"),
        ("apps", "v1", "daemonsets"),
    ]
    for group, version, plural in kinds:
        for namespace in (soak_namespace, CD_NAMESPACE):
            found = as_dict(
                kube.custom.list_namespaced_custom_object(
                    group, version, namespace, plural, label_selector=selector
                )
            )
            for item in found["items"]:
                delete_custom(kube, group, version, namespace, plural, item["metadata"]["name"])
