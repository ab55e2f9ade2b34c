"""`dra-fake fleet`: simulate N GPU nodes from one process.

Creates N Nodes (or adopts existing ones, e.g. KWOK's, by label) and keeps the ResourceSlices
of every one of them equal to its inventory, so the real scheduler can place GPU claims on a
fleet far larger than one machine can host as real nodes. Optionally marks pods bound to
fleet nodes Running (and finishes their deletion), as a kubelet would.

Design (scales to thousands of nodes with a handful of threads):
- one LIST+WATCH of this driver's ResourceSlices feeds a shared `SliceCache`;
- one LIST+WATCH of the fleet's Nodes (by label) decides which nodes are managed;
- a `WorkQueue` of node names and a pool of worker threads; a worker plans and writes one
  node's pool with the same code as the per-node plugin (`Publisher.sync` over `plan_pool`),
  reading existing slices from the cache instead of a LIST per node;
- every write goes into the cache as soon as the server answers, so events caused by our own
  writes are recognised and cause no re-sync.

The command is dra_fake.fleet.main; its options, dra_fake.fleet.options; the API client,
dra_fake.fleet.client; a node's publishing, dra_fake.fleet.publishing; the Nodes it creates,
dra_fake.fleet.nodes.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.core.informer import lister, run_informer
from dra_fake.core.kube import (
    send_json,
)
from dra_fake.core.publisher import Instance
from dra_fake.core.resourceapi import (
    RESOURCE_GROUP,
    ResourceApi,
    ServerInfo,
    discover,
)
from dra_fake.core.slices import DesiredSlice
from dra_fake.fleet.client import CountingApiClient
from dra_fake.fleet.core import (
    FLEET_LABEL,
    NodeTemplate,
    SliceCache,
    WorkQueue,
    node_names,
    pod_running_status,
)
from dra_fake.fleet.leases import NodeLeases
from dra_fake.fleet.nodes import create_untainted_node, node_template
from dra_fake.fleet.options import FleetOptions
from dra_fake.fleet.publishing import CachedCustom, NodeApi, NodePublisher
from dra_fake.gpu.api import (
    Effects,
    GpuProfile,
    Host,
    Inventory,
    InventoryConfig,
    Node,
    NodeRuntime,
    NodeSettings,
    build_inventory,
    desired_slices,
    servable_taints,
)

log = logging.getLogger("dra_fake.fleet")


class Fleet:
    def __init__(
        self,
        api: CountingApiClient,
        inventory: InventoryConfig,
        profiles: dict[str, GpuProfile],
        options: FleetOptions,
    ) -> None:
        self.api = api
        self.inventory = inventory
        self.profiles = profiles
        self.options = options
        self.custom = client.CustomObjectsApi(api)
        # One process: every node's publisher is this instance (asked once, not per node: it
        # reads the boot ID from /proc, a thousand reads at a thousand nodes).
        self.instance = Instance.current()
        self.cache = SliceCache()
        self.queue = WorkQueue()
        self.stop_event = threading.Event()
        self.leases = NodeLeases(api, options.workers)
        self.info: ServerInfo | None = None
        self.node_api: NodeApi | None = None
        self._lock = threading.Lock()
        self._publishers: dict[str, NodePublisher] = {}
        self._desired: dict[str, list[DesiredSlice]] = {}
        self._synced: set[str] = set()
        self._failures: Counter[str] = Counter()
        self.slices_synced = threading.Event()
        self.nodes_listed = threading.Event()
        self.pods_marked = 0
        self.phases: dict[str, float] = {}  # how long start-up steps took
        self._threads: list[threading.Thread] = []
        # Each node's services (dra_fake.gpu.runtime) over the fleet's shared parts: one GpuFault
        # informer (--feature-gates=NVMLDeviceHealthCheck=true), one metrics endpoint. Nodes are
        # created with their GFD labels (node_template).
        settings = NodeSettings(
            options.driver,
            faults=options.health_check,
            ignored_xids=options.ignored_xids,
            dcgm_port=options.dcgm_port,
            mig_strategy=options.mig_strategy,
        )
        self.host = Host(settings, lambda: api, self.stop_event, many_nodes=True)
        self._runtimes: dict[str, NodeRuntime] = {}
        self._taints: dict[str, dict[str, list[dict[str, str]]]] = {}  # what each node's faults give

    # ---- what each node should publish -------------------------------------------------------
    def desired(self, node: str) -> list[DesiredSlice]:
        with self._lock:
            cached = self._desired.get(node)
        if cached is None:
            if self.info is None:
                raise RuntimeError("fleet: slices asked for before API discovery")
            inv = self._inventory(node)
            with self._lock:
                taints = servable_taints(self._taints.get(node, {}), self.info.version)
            cached = desired_slices(inv, self.options.driver, self.info.version, taints)
            with self._lock:
                self._desired[node] = cached
        return cached

    def _inventory(self, node: str) -> Inventory:
        return build_inventory(self.inventory, node, self.profiles, source=f"node {node}")

    @property
    def selector(self) -> str:
        return self.options.adopt_selector or f"{FLEET_LABEL}={self.options.fleet}"

    def managed(self) -> list[str]:
        with self._lock:
            return sorted(self._publishers)

    def synced_count(self) -> int:
        with self._lock:
            return len(self._synced)

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.info = discover(self.api)
        version = ResourceApi(self.api, self.info).version
        self.node_api = NodeApi(version, CachedCustom(self.custom, self.cache))
        loops: list[tuple[Callable[[], None], str]] = [
            (self._slice_informer, "fleet-slices"),
            (self._node_informer, "fleet-nodes"),
        ]
        loops += [(self._worker, f"fleet-worker-{i}") for i in range(self.options.workers)]
        if self.options.mark_pods_running:
            loops.append((self._pod_loop, "fleet-pods"))
        loops.append((self._resync_loop, "fleet-resync"))
        self.host.start()
        for target, name in loops:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        if self.options.nodes:  # the workers publish each node's slices as soon as it exists
            t0 = time.monotonic()
            self.create_nodes()
            self.phases["createNodesSeconds"] = round(time.monotonic() - t0, 3)

    def start_heartbeats(self) -> None:
        """Renew every managed node's Lease at the kubelet's cadence (dra_fake.fleet.leases), so a
        node lifecycle controller keeps the nodes Ready."""
        t = threading.Thread(
            target=self.leases.run, args=(self.stop_event,), name="fleet-leases", daemon=True
        )
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self.stop_event.set()
        self.queue.shutdown()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """Every managed node synced once and nothing left to do."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.stop_event.is_set():
            if self.nodes_listed.is_set():
                managed = set(self.managed())
                with self._lock:
                    done = managed <= self._synced
                if done and self.queue.idle():
                    return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            self.stop_event.wait(0.05)
        return False

    # ---- nodes ---------------------------------------------------------------------------------
    def create_nodes(self) -> None:
        template = node_template(self.options, self.inventory, self.profiles)
        names = node_names(self.options.prefix, self.options.nodes)
        with ThreadPoolExecutor(self.options.workers, thread_name_prefix="fleet-create") as pool:
            for _ in pool.map(lambda n: self._create_node(n, template), names):
                pass
        log.info("nodes created", extra={"nodes": len(names)})

    def _create_node(self, name: str, template: NodeTemplate) -> None:
        create_untainted_node(self.api, name, template, on_created=self._adopt)

    def _node_informer(self) -> None:
        def on_list(items: list[dict[str, Any]]) -> None:
            names = {n["metadata"]["name"]: n["metadata"]["uid"] for n in items}
            with self._lock:
                stopped = [self._forget(gone) for gone in set(self._publishers) - set(names)]
            for runtime in stopped:
                if runtime is not None:
                    runtime.stop()
            for name, uid in names.items():
                self._adopt(name, uid)
            self.nodes_listed.set()

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            name, uid = obj["metadata"]["name"], obj["metadata"]["uid"]
            if kind == "DELETED":
                with self._lock:
                    runtime = self._forget(name)
                if runtime is not None:
                    runtime.stop()
            else:
                self._adopt(name, uid)

        run_informer(
            self.stop_event,
            "nodes",
            lister(self.api, "/api/v1/nodes", metadata_only=True),  # names and uids are all it uses
            {"label_selector": self.selector},
            on_list,
            on_event,
        )

    def _adopt(self, name: str, uid: str) -> None:
        with self._lock:
            current = self._publishers.get(name)
            if current is not None and current.node_uid == uid:
                return
            self._publishers[name] = NodePublisher(self, name, uid)
            self._synced.discard(name)
            runtime = self._new_runtime(name) if name not in self._runtimes else None
        self.leases.track(name, uid)
        self.queue.add(name)
        if runtime is not None:
            runtime.start()  # its services: faults listed before the node was are applied now
            with self._lock:
                forgotten = self._runtimes.get(name) is not runtime
            if forgotten:  # deleted while starting
                runtime.stop()

    def _new_runtime(self, name: str) -> NodeRuntime | None:
        """Lock held. A new node's runtime, kept if it runs a service (it runs none without
        health checks and metrics: nothing is kept per node then)."""
        runtime = self.host.node(Node(name, lambda: self._inventory(name)))
        if not runtime.services:
            return None
        runtime.on_faults(self._taint_applier(name))
        self._runtimes[name] = runtime
        return runtime

    def _forget(self, name: str) -> NodeRuntime | None:
        """Lock held. The slices go with the Node (owner reference, garbage collector). Returns the
        node's runtime, for the caller to stop once the lock is released (its services may be
        applying the node's faults, which takes the lock)."""
        self._publishers.pop(name, None)
        self.leases.forget(name)
        self._desired.pop(name, None)
        self._synced.discard(name)
        self._taints.pop(name, None)
        return self._runtimes.pop(name, None)

    # ---- slices --------------------------------------------------------------------------------
    def _slice_informer(self) -> None:
        if self.node_api is None:
            raise RuntimeError("fleet: slice informer started before API discovery")
        version = self.node_api.version

        def on_list(items: list[dict[str, Any]]) -> None:
            for node in self.cache.replace_all(items):
                self._maybe_enqueue(node)
            self.slices_synced.set()

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            node = self.cache.observe(kind, obj)
            if node is not None:
                self._maybe_enqueue(node)

        run_informer(
            self.stop_event,
            "resourceslices",
            lister(self.api, f"/apis/{RESOURCE_GROUP}/{version}/resourceslices"),
            {"field_selector": f"spec.driver={self.options.driver}"},
            on_list,
            on_event,
        )

    def _maybe_enqueue(self, node: str) -> None:
        with self._lock:
            ours = node in self._publishers
        if ours:
            self.queue.add(node)

    def _worker(self) -> None:
        self.slices_synced.wait()
        while not self.stop_event.is_set():
            node = self.queue.get()
            if node is None:
                return
            try:
                with self._lock:
                    pub = self._publishers.get(node)
                if pub is not None:
                    pub.sync()
                    with self._lock:
                        self._synced.add(node)
                        self._failures.pop(node, None)
            except Exception as err:
                with self._lock:
                    self._failures[node] += 1
                    delay = min(0.5 * 2 ** (self._failures[node] - 1), 30.0)
                log.warning(
                    "publishing a node's ResourceSlices failed, retrying",
                    extra={"node": node, "error": str(err)[:300], "retryIn": delay},
                )
                timer = threading.Timer(delay, self.queue.add, args=(node,))
                timer.daemon = True
                timer.start()
            finally:
                self.queue.done(node)

    def _resync_loop(self) -> None:
        while not self.stop_event.wait(self.options.resync_seconds):
            for node in self.managed():
                self.queue.add(node)

    # ---- faults --------------------------------------------------------------------------------
    def _taint_applier(self, node: str) -> Callable[[Effects], None]:
        """What a node's faults do here (its runtime's services apply them): its slices tainted."""

        def apply(effects: Effects) -> None:
            with self._lock:
                self._taints[node] = effects.taints
                self._desired.pop(node, None)
            self.queue.add(node)

        return apply

    # ---- pods ----------------------------------------------------------------------------------
    def _pod_loop(self) -> None:
        def handle(obj: dict[str, Any]) -> None:
            node = obj.get("spec", {}).get("nodeName", "")
            with self._lock:
                ours = node in self._publishers
            if not ours:
                return
            meta = obj["metadata"]
            try:
                path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
                if meta.get("deletionTimestamp"):
                    options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
                    send_json(self.api, "DELETE", path, options)
                    return
                now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                patch = pod_running_status(obj, now)
                if patch is not None:
                    send_json(
                        self.api,
                        "PATCH",
                        f"{path}/status",
                        patch,
                        "application/strategic-merge-patch+json",
                    )
                    with self._lock:
                        self.pods_marked += 1
            except ApiException as err:
                if err.status not in (404, 409):
                    log.warning(
                        "updating a fleet pod failed", extra={"pod": meta["name"], "status": err.status}
                    )

        def on_list(items: list[dict[str, Any]]) -> None:
            for pod in items:
                handle(pod)

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            if kind != "DELETED":
                handle(obj)

        self.nodes_listed.wait()
        run_informer(
            self.stop_event,
            "pods",
            lister(self.api, "/api/v1/pods"),
            {"field_selector": "spec.nodeName!="},
            on_list,
            on_event,
        )

    # ---- report --------------------------------------------------------------------------------
    def summary(self, started: float) -> dict[str, Any]:
        """What the run did (printed as JSON), `started` its monotonic start time."""
        return {
            "wallSeconds": round(time.monotonic() - started, 3),
            "nodes": len(self.managed()),
            "nodesSynced": self.synced_count(),
            "slices": sum(len(self.cache.existing(n)) for n in self.managed()),
            "apiRequests": dict(self.api.requests),
            "apiRequestsTotal": sum(self.api.requests.values()),
            "podsMarkedRunning": self.pods_marked,
            "leases": dict(self.leases.counts),
            "phases": self.phases,
            "rssBytes": current_rss(),
            "maxRssBytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        }


def current_rss() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
