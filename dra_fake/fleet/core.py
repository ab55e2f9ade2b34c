"""The pure parts of fleet mode (`dra-fake fleet`): node manifests, the shared slice cache, the
work queue and the pod status patch. No API calls here, so all of it is unit-tested."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_fake.core.poolsync import ExistingSlice

FLEET_LABEL = "dra-fake.dev/fleet"
# Fleet nodes have no kubelet: a pod scheduled there never runs unless the fleet plays the kubelet
# for it (--mark-pods-running). The taint keeps other workloads off; pods meant for the fleet
# tolerate it (docs/security.md).
FLEET_TAINT = {"key": FLEET_LABEL, "effect": "NoSchedule"}
FLEET_TOLERATION = {"key": FLEET_LABEL, "operator": "Exists", "effect": "NoSchedule"}


def node_names(prefix: str, count: int) -> list[str]:
    width = max(4, len(str(count - 1)))
    return [f"{prefix}{i:0{width}d}" for i in range(count)]


@dataclass(frozen=True)
class NodeTemplate:
    """What a simulated Node carries: labels and capacity (= allocatable)."""

    fleet: str = "fleet"
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(
        default_factory=lambda: {"cpu": "224", "memory": "2Ti", "pods": "110", "ephemeral-storage": "30Ti"}
    )


def node_manifest(name: str, template: NodeTemplate) -> dict[str, Any]:
    """A Ready Node, tainted FLEET_TAINT (value: the fleet's name), so only pods that tolerate it
    land there. The API server accepts status on Node create; the NodeTaint admission plugin still
    adds `node.kubernetes.io/not-ready`, see `untaint_patch`."""
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "dra-fake-fleet",
        FLEET_LABEL: template.fleet,
        **template.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"dra-fake.dev/simulated": "true", **template.annotations},
        },
        "spec": {"taints": [{**FLEET_TAINT, "value": template.fleet}]},
        "status": {
            "capacity": dict(template.capacity),
            "allocatable": dict(template.capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "FleetNodeReady",
                    "message": "simulated by dra-fake fleet",
                }
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "dra-fake-fleet",
                "bootID": "",
                "containerRuntimeVersion": "",
                "kernelVersion": "",
                "kubeProxyVersion": "",
                "machineID": "",
                "osImage": "",
                "systemUUID": "",
            },
        },
    }


def untaint_patch(node: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """A JSON patch removing the taints admission adds to a new node (no node-lifecycle
    controller will), or None when there are none. `test` guards against a concurrent change."""
    taints = node.get("spec", {}).get("taints") or []
    keep = [t for t in taints if not str(t.get("key", "")).startswith("node.kubernetes.io/")]
    if len(keep) == len(taints):
        return None
    return [
        {"op": "test", "path": "/spec/taints", "value": taints},
        {"op": "replace", "path": "/spec/taints", "value": keep},
    ]


def _rv(obj: Mapping[str, Any]) -> int:
    raw = str(obj.get("metadata", {}).get("resourceVersion") or "0")
    return int(raw) if raw.isdigit() else 0


class SliceCache:
    """One driver's ResourceSlices of every node, fed by one watch and by our own writes.

    Writes go in as soon as the server answers (write-through), so a worker re-planning a node
    sees its own writes even before the watch delivers them; an event changes the cache (and
    asks for a re-sync of its node) only when it is newer than what is cached. etcd resource
    versions are integers; this relies on that as client-go's mutation cache does.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_node: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        self._node_of: dict[str, str] = {}
        self._deleted_rv: dict[str, int] = {}  # name -> rv at which we deleted it

    def existing(self, node: str) -> list[ExistingSlice]:
        with self._lock:
            objs = list(self._by_node.get(node, {}).values())
        return [
            ExistingSlice(
                o["metadata"]["name"], o["metadata"]["uid"], o["metadata"]["resourceVersion"], o["spec"]
            )
            for o in objs
        ]

    def nodes(self) -> list[str]:
        with self._lock:
            return [n for n, s in self._by_node.items() if s]

    def count(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._by_node.values())

    def replace_all(self, objs: Iterable[Mapping[str, Any]]) -> set[str]:
        """A fresh LIST: returns every node whose slices changed (or vanished)."""
        fresh: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        for o in objs:
            fresh[o["spec"].get("nodeName", "")][o["metadata"]["name"]] = dict(o)
        with self._lock:
            changed = {
                n
                for n in set(fresh) | set(self._by_node)
                if {k: _rv(v) for k, v in fresh.get(n, {}).items()}
                != {k: _rv(v) for k, v in self._by_node.get(n, {}).items()}
            }
            self._by_node = fresh
            self._node_of = {name: n for n, s in fresh.items() for name in s}
            self._deleted_rv.clear()
        return changed

    def observe(self, event_type: str, obj: Mapping[str, Any]) -> str | None:
        """Apply a watch event; returns the node to re-sync, or None when nothing changed."""
        name = str(obj["metadata"]["name"])
        node = str(obj.get("spec", {}).get("nodeName", ""))
        rv = _rv(obj)
        with self._lock:
            current = self._by_node.get(node, {}).get(name)
            if event_type == "DELETED":
                if current is None:
                    return None
                if _rv(current) > rv:
                    return None
                del self._by_node[node][name]
                self._node_of.pop(name, None)
                return node
            if current is not None and _rv(current) >= rv:
                return None
            if current is None and self._deleted_rv.get(name, -1) >= rv:
                return None  # an old event of a slice we deleted since
            self._by_node[node][name] = dict(obj)
            self._node_of[name] = node
            return node

    def wrote(self, obj: Mapping[str, Any]) -> None:
        """Our create or update succeeded with this stored object."""
        self.observe("MODIFIED", obj)

    def deleted(self, name: str, rv: str) -> None:
        """Our delete succeeded (or the slice was gone)."""
        with self._lock:
            node = self._node_of.pop(name, None)
            if node is not None:
                self._by_node[node].pop(name, None)
            self._deleted_rv[name] = int(rv) if rv.isdigit() else 0


class WorkQueue:
    """A de-duplicating work queue with client-go semantics: a key is never handed to two
    workers at once; a key added while it is being processed is queued again when done."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[str] = []
        self._dirty: set[str] = set()
        self._processing: set[str] = set()
        self._shutdown = False

    def add(self, key: str) -> None:
        with self._cond:
            if key in self._dirty:
                return
            self._dirty.add(key)
            if key not in self._processing:
                self._queue.append(key)
                self._cond.notify()

    def get(self, timeout: float | None = None) -> str | None:
        """The next key, or None on shutdown or timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._queue or self._shutdown, timeout):
                return None
            if self._shutdown:
                return None
            key = self._queue.pop(0)
            self._dirty.discard(key)
            self._processing.add(key)
            return key

    def done(self, key: str) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def idle(self) -> bool:
        with self._cond:
            return not self._queue and not self._processing

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._processing)

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()


def pod_running_status(pod: Mapping[str, Any], now: str) -> dict[str, Any] | None:
    """The status patch that makes a bound, pending pod Running with Ready containers, as a
    kubelet would after starting it; None when the pod is not pending or not bound."""
    spec = pod.get("spec", {})
    status = pod.get("status", {})
    if not spec.get("nodeName") or status.get("phase", "Pending") != "Pending":
        return None
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return None

    def running(c: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": now}},
        }

    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    return {
        "status": {
            "phase": "Running",
            "startTime": now,
            "hostIP": "10.255.0.1",
            "podIP": "10.254.0.1",
            "conditions": conditions,
            "containerStatuses": [running(c) for c in spec.get("containers", [])],
        }
    }
