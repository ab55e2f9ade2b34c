"""Node heartbeats for fleet nodes: a Lease per node in `kube-node-lease`, renewed at the
kubelet's cadence, so the node lifecycle controller keeps the nodes Ready
(docs/benchmarks/history.md#scale-mode-dra-fake-fleet).

The kubelet's defaults (docs/reference/kubernetes-dra.md#node-heartbeats): a Lease named
after the node, holder the node, `leaseDurationSeconds` 40 (`nodeLeaseDurationSeconds`), renewed
every quarter of that (10 s), owned by the Node. The node lifecycle controller counts a renewal as
a heartbeat and marks a node whose heartbeat is older than its grace period Unknown (tainted
unreachable). Renewals are spread over the interval, not all nodes at the same moment.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.core.kube import send_json

log = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
RENEW_INTERVAL = LEASE_DURATION_SECONDS / 4  # the kubelet's renewInterval: 10 s
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NAMESPACE}/leases"


def micro_time(t: float) -> str:
    """Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_manifest(node: str, node_uid: str, now: float) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}],
        },
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": micro_time(now),
        },
    }


def first_due(node: str, now: float) -> float:
    """When a node's first renewal is due: spread over one interval by its name (a thousand nodes
    created at once do not renew in the same second forever after)."""
    return now + (zlib.crc32(node.encode()) % 1000) / 1000 * RENEW_INTERVAL


class NodeLeases:
    """Renews the Leases of the nodes it tracks, `workers` requests at a time."""

    def __init__(self, api: client.ApiClient, workers: int, clock: Callable[[], float] = time.time) -> None:
        self.api = api
        self.workers = workers
        self.clock = clock
        self.counts: Counter[str] = Counter()  # renewed, created, failed
        self._lock = threading.Lock()
        self._uids: dict[str, str] = {}
        self._due: list[tuple[float, str]] = []  # heap of (due time, node)

    def track(self, node: str, uid: str) -> None:
        with self._lock:
            known = node in self._uids
            self._uids[node] = uid
            if not known:
                heapq.heappush(self._due, (first_due(node, self.clock()), node))

    def forget(self, node: str) -> None:
        with self._lock:
            self._uids.pop(node, None)  # its heap entry is dropped when it comes due

    def take_due(self, now: float) -> list[tuple[str, str]]:
        """The (node, uid) pairs due at `now`, each rescheduled one interval later."""
        out = []
        with self._lock:
            while self._due and self._due[0][0] <= now:
                due, node = heapq.heappop(self._due)
                uid = self._uids.get(node)
                if uid is None:
                    continue
                out.append((node, uid))
                heapq.heappush(self._due, (max(due + RENEW_INTERVAL, now), node))
        return out

    def renew(self, node: str, uid: str) -> None:
        now = self.clock()
        try:
            send_json(
                self.api,
                "PATCH",
                f"{LEASES}/{{name}}",
                {"spec": {"holderIdentity": node, "renewTime": micro_time(now)}},
                "application/merge-patch+json",
                name=node,
            )
            self._count("renewed")
        except ApiException as err:
            if err.status != 404:
                raise
            send_json(self.api, "POST", LEASES, lease_manifest(node, uid, now))
            self._count("created")

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def run(self, stop: threading.Event) -> None:
        with ThreadPoolExecutor(self.workers, thread_name_prefix="fleet-lease") as pool:
            while not stop.wait(0.25):
                for node, uid in self.take_due(self.clock()):
                    pool.submit(self._renew_logged, node, uid)

    def _renew_logged(self, node: str, uid: str) -> None:
        try:
            self.renew(node, uid)
        except Exception as err:  # the next renewal tries again; the grace period is 4 intervals
            self._count("failed")
            log.warning("node lease renewal failed", extra={"node": node, "error": str(err)[:300]})
