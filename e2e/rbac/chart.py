"""The installed chart the e2e/rbac tests check, on either bed: this package's own control plane
(the harness: release `rbac`, its plugins, controller and IMEX daemons as host processes with
tokens of the chart's ServiceAccounts; conftest.py) or the Helm release of a kind cluster of ours
(`make kind-up`: the chart's real pods, whose ServiceAccounts the tokens here are issued for)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from kubernetes import client

from e2e.kube import Kube, poll
from e2e.rbac.bed import DAEMON_SA, NS, request_token, sa_api, token_kubeconfig
from e2e.testbed import TestBed

PLUGIN_PODS = "app.kubernetes.io/component in (kubelet-plugin,device-plugin)"
# Kind's pods: a node's kubelet plugins (one pod, a container per driver), the controller, the
# IMEX daemons (the label the controller puts on their DaemonSets' pods).
KIND_LOGS = {
    "gpu-plugin": ("app.kubernetes.io/component=kubelet-plugin", "gpus"),
    "cd-plugin": ("app.kubernetes.io/component=kubelet-plugin", "compute-domains"),
    "cd-controller": ("app.kubernetes.io/component=compute-domain-controller", None),
    "imex-daemons": ("resource.nvidia.com/computeDomain", None),
}


@dataclass(frozen=True)
class Chart:
    kubeconfig: Path  # the cluster admin's
    nodes: tuple[str, str]  # the first two GPU nodes, each with a GPU and a compute-domain plugin
    default_nodes: tuple[str, ...]  # those with the chart's default inventory (8 x H100)
    plugin_ds: str  # the kubelet-plugin DaemonSet of the first node
    credentials: dict[str, Path]  # node, "controller", "daemon" -> kubeconfig with that component's token
    bed: TestBed  # what a pod's container got
    logs: Callable[[str, str | None], str]  # (component, node) -> its log: KIND_LOGS' components
    relabel: Callable[[], None]  # after the uninstall hook: the plugins write their GFD labels again
    tmp: Path

    @cached_property
    def admin(self) -> client.ApiClient:
        return sa_api(self.kubeconfig)

    @property
    def kube(self) -> Kube:
        return Kube(self.kubeconfig)

    def api(self, who: str) -> client.ApiClient:
        """An API client with the token of a node's plugin, the controller or the IMEX daemon."""
        return sa_api(self.credentials[who])

    def token_kubeconfig(self, token: str, name: str) -> Path:
        return token_kubeconfig(self.kubeconfig, token, self.tmp / f"{name}.kubeconfig")

    def token_api(self, token: str, name: str) -> client.ApiClient:
        return sa_api(self.token_kubeconfig(token, name))


def kind_chart(bed: TestBed, kubeconfig: Path, tmp: Path) -> Chart:
    """The kind cluster's release: tokens bound to the chart's real plugin pods of the first two
    workers and to its controller pod (so a plugin's token names its pod's node, as the plugin's
    own does), and the IMEX daemon ServiceAccount's token bound to no pod."""
    kube = bed.kube
    admin = kube.api

    def running(selector: str, node: str | None = None) -> list[Any]:
        field = f"spec.nodeName={node}" if node else None
        pods = kube.core.list_namespaced_pod(NS, label_selector=selector, field_selector=field).items
        return [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]

    def bound(pod: Any) -> dict[str, Any]:
        return admin.sanitize_for_serialization(pod)  # type: ignore[no-any-return]

    nodes = (bed.workers[0], bed.workers[1])
    credentials = {}
    for node in nodes:
        [pod] = running(KIND_LOGS["gpu-plugin"][0], node)
        token = request_token(admin, bound(pod), pod.spec.service_account_name)
        credentials[node] = token_kubeconfig(kubeconfig, token, tmp / f"sa-{node}.kubeconfig")
    [controller] = running(KIND_LOGS["cd-controller"][0])
    token = request_token(admin, bound(controller), controller.spec.service_account_name)
    credentials["controller"] = token_kubeconfig(kubeconfig, token, tmp / "sa-controller.kubeconfig")
    token = request_token(admin, None, DAEMON_SA)
    credentials["daemon"] = token_kubeconfig(kubeconfig, token, tmp / "sa-daemon.kubeconfig")
    [owner] = running(KIND_LOGS["gpu-plugin"][0], nodes[0])[0].metadata.owner_references

    def logs(component: str, node: str | None = None) -> str:
        selector, container = KIND_LOGS[component]
        return "".join(
            kube.core.read_namespaced_pod_log(p.metadata.name, NS, container=container, _request_timeout=30)
            for p in running(selector, node)
        )

    def relabel() -> None:
        """Each plugin writes its node's GFD labels when it starts: restart them all."""
        pods = running(PLUGIN_PODS)
        for pod in pods:
            kube.core.delete_namespaced_pod(pod.metadata.name, NS, _request_timeout=30)
        old = {p.metadata.name for p in pods}
        nodes_of = {p.spec.node_name for p in pods}

        def labelled() -> bool:
            fresh = [p for p in running(PLUGIN_PODS) if p.metadata.name not in old]
            ready = {
                p.spec.node_name for p in fresh if all(s.ready for s in p.status.container_statuses or [])
            }
            return ready >= nodes_of and all(
                "nvidia.com/gpu.count" in (kube.core.read_node(n).metadata.labels or {}) for n in nodes_of
            )

        poll("every plugin restarted and its node labelled again", labelled, 180)

    return Chart(
        kubeconfig=kubeconfig,
        nodes=nodes,
        default_nodes=nodes[:1],
        plugin_ds=owner.name,
        credentials=credentials,
        bed=bed,
        logs=logs,
        relabel=relabel,
        tmp=tmp,
    )
