"""What the ComputeDomain e2e tests share (e2e/test_computedomain.py, e2e/test_release_upgrade.py,
e2e/rbac/test_compute_domains.py): a ComputeDomain's manifest and a pod of its channel, reading
the domain's status, node labels and what the workload's container sees, and deleting a domain
until nothing of it is left."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomain.api import CD_LABEL, CLIQUE_PLURAL, GROUP, PLURAL, VERSION, daemon_object_name
from e2e.kube import WORKLOAD_IMAGE, Kube, poll
from e2e.testbed import TestBed

CHANNELS = "/dev/nvidia-caps-imex-channels"
# How long a two-node domain's workload may take to run: its node's IMEX daemon starts first
# (e2e/test_computedomain.py's two-node test; 18 s on kind 1.36 at 4692bab). 300 s hid two faults
# of the plugin for a while (docs/kind.md#version-matrix): back to 180 s.
DOMAIN_WORKLOAD_SECONDS = 180


def cd_manifest(
    name: str, template: str, mode: str | None = None, num_nodes: int | None = None
) -> dict[str, Any]:
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": template}}
    if mode:
        channel["allocationMode"] = mode
    spec: dict[str, Any] = {"channel": channel}
    if num_nodes is not None:
        spec["numNodes"] = num_nodes
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ComputeDomain",
        "metadata": {"name": name},
        "spec": spec,
    }


def create_cd(kube: Kube, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)  # type: ignore[no-any-return]


def get_cd(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return kube.custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)  # type: ignore[no-any-return]


def get_template(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.custom.get_namespaced_custom_object(*kube.resource, ns, "resourceclaimtemplates", name)  # type: ignore[no-any-return]
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def channel_pod(name: str, template: str, node: str | None = None, app: str = "mnnvl") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "resourceClaims": [{"name": "imex-channel", "resourceClaimTemplateName": template}],
        "containers": [
            {
                "name": "ctr",
                "image": WORKLOAD_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", f"ls {CHANNELS}; trap 'exit 0' TERM; sleep 2147483647 & wait"],
                "resources": {"claims": [{"name": "imex-channel"}]},
            }
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    else:  # one pod per node, as multi-node NVLink workloads run
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": spec,
    }


def channels_seen(bed: TestBed, ns: str, pod: str) -> list[str]:
    """What `ls /dev/nvidia-caps-imex-channels` shows in the pod's container."""
    result = bed.container(ns, pod).run("ls", CHANNELS)
    assert result.code == 0, result.output
    return result.output.split()


def node_statuses(kube: Kube, ns: str, name: str) -> tuple[str, dict[str, str]]:
    status = get_cd(kube, ns, name).get("status") or {}
    return status.get("status", ""), {n["name"]: n["status"] for n in status.get("nodes") or []}


def node_labels(kube: Kube) -> dict[str, str | None]:
    return {n.metadata.name: (n.metadata.labels or {}).get(CD_LABEL) for n in kube.core.list_node().items}


def prepare_failures(kube: Kube, ns: str, pod: str) -> str:
    """The pod's FailedPrepareDynamicResources messages. A retryable error comes when the plugin's
    retries in the kubelet's call end, ~44 s after the call began (docs/computedomain.md#prepare-retries)."""

    def failed() -> str | None:
        msgs = [
            e.get("message", "")
            for e in kube.events(ns, pod)
            if e.get("reason") == "FailedPrepareDynamicResources"
        ]
        return "\n".join(msgs) or None

    return poll(f"FailedPrepareDynamicResources on {ns}/{pod}", failed, 120)


def leftovers(kube: Kube, driver_ns: str, uid: str) -> list[str]:
    """Every object or label the ComputeDomain with this UID caused that still exists."""
    selector = f"{CD_LABEL}={uid}"
    found = [
        f"template {t['metadata']['namespace']}/{t['metadata']['name']}"
        for t in kube.custom.list_cluster_custom_object(
            *kube.resource, "resourceclaimtemplates", label_selector=selector
        )["items"]
    ]
    found += [
        f"daemonset {d.metadata.name}"
        for d in kube_apps(kube).list_namespaced_daemon_set(driver_ns, label_selector=selector).items
    ]
    found += [
        f"clique {c['metadata']['name']}"
        for c in kube.custom.list_namespaced_custom_object(
            GROUP, VERSION, driver_ns, CLIQUE_PLURAL, label_selector=selector
        )["items"]
    ]
    found += [
        f"daemon pod {p.metadata.name}"
        for p in kube.core.list_namespaced_pod(driver_ns, label_selector=selector).items
    ]
    found += [f"label on {n}" for n, v in node_labels(kube).items() if v == uid]
    return found


def kube_apps(kube: Kube) -> client.AppsV1Api:
    return client.AppsV1Api(kube.api)


def wait_for_objects(kube: Kube, bed: TestBed, ns: str, channel_template: str, uid: str) -> None:
    """The domain's objects: its workload template, the daemon's template and its DaemonSet. The
    controller makes the daemon's two beside the workload template, not before it."""
    poll("workload template", lambda: get_template(kube, ns, channel_template))
    poll("daemon template", lambda: get_template(kube, bed.driver_namespace, daemon_object_name(uid)))
    poll(
        "daemon DaemonSet",
        lambda: (
            kube_apps(kube)
            .list_namespaced_daemon_set(bed.driver_namespace, label_selector=f"{CD_LABEL}={uid}")
            .items
        ),
    )


def delete_cd_and_wait_clean(bed: TestBed, ns: str, name: str, uid: str) -> None:
    kube = bed.kube
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)

    def gone() -> bool:
        try:
            get_cd(kube, ns, name)
            return False
        except ApiException as err:
            return err.status == 404

    poll(f"ComputeDomain {ns}/{name} gone", gone, 90)
    poll(
        f"nothing left of ComputeDomain {uid}",
        lambda: not leftovers(kube, bed.driver_namespace, uid) or None,
        90,
    )
