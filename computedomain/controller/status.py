"""ComputeDomain status (docs/reference/nvidia-compute-domains.md#42-global-status-formula), pure:
`status.nodes` from cliques and daemon pods, and NVIDIA's
global formula."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from computedomain.api import CLIQUE_LABEL, STATUS_NOT_READY, STATUS_READY


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def running_daemons(pods: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Node name -> its daemon pod, for pods running and not being deleted."""
    out = {}
    for pod in pods:
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        if meta.get("deletionTimestamp") or status.get("phase") != "Running" or not spec.get("nodeName"):
            continue
        out[spec["nodeName"]] = pod
    return out


def nodes(cliques: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fabric nodes from the cliques' daemons, non-fabric ones from daemon pods labelled with an
    empty clique ID; only nodes with a running daemon pod. A node is Ready when its daemon says so
    and its pod is Ready (a daemon that died cannot report NotReady itself)."""
    running = running_daemons(pods)
    entries: dict[str, dict[str, Any]] = {}
    for clique in cliques:
        for d in clique.get("daemons") or []:
            pod = running.get(d.get("nodeName", ""))
            if pod is None:
                continue
            ready = d.get("status") == STATUS_READY and pod_ready(pod)
            entries[d["nodeName"]] = {
                "name": d["nodeName"],
                "ipAddress": d.get("ipAddress", ""),
                "cliqueID": d.get("cliqueID", ""),
                "index": d.get("index", 0),
                "status": STATUS_READY if ready else STATUS_NOT_READY,
            }
    for node, pod in running.items():
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if node in entries or labels.get(CLIQUE_LABEL) != "":
            continue
        entries[node] = {
            "name": node,
            "ipAddress": (pod.get("status") or {}).get("podIP", ""),
            "cliqueID": "",
            "index": -1,
            "status": STATUS_READY if pod_ready(pod) else STATUS_NOT_READY,
        }
    return [entries[n] for n in sorted(entries)]


def global_status(num_nodes: int, node_list: Sequence[dict[str, Any]]) -> str:
    """NVIDIA's calculateGlobalStatus: fewer nodes than numNodes, or any node NotReady -> NotReady."""
    if len(node_list) < num_nodes:
        return STATUS_NOT_READY
    if any(n.get("status") != STATUS_READY for n in node_list):
        return STATUS_NOT_READY
    return STATUS_READY
