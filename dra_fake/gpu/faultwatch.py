"""The I/O side of simulated faults: a node's GpuFault objects in, their effects
(dra_fake.gpu.faults) handed to the slices and the kubelet's health stream, each fault's status out.

A plugin's loop (FaultWatcher): LIST the node's faults (a field selector on spec.nodeName), apply
them, then WATCH from that list's resourceVersion until something changes or the next fault starts
or ends, and again. A failing step is logged and retried with backoff
(dra_fake.core.retry.run_forever). A process serving many nodes (fleet mode) feeds their NodeFaults
from one informer of every GpuFault instead (FaultInformer).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dra_fake.core.informer import lister, run_informer
from dra_fake.core.kube import REQUEST_TIMEOUT
from dra_fake.core.retry import run_forever
from dra_fake.gpu.faults import (
    GROUP,
    PLURAL,
    VERSION,
    Effects,
    Fault,
    FaultError,
    FaultTracker,
    parse_fault,
    rfc3339,
)

log = logging.getLogger(__name__)

WATCH_SECONDS = 60
RETRY_SECONDS = 5.0  # FaultInformer: a node whose status write failed is reconciled again after this
TIMER_SECONDS = 60.0  # FaultInformer: the longest its timer sleeps


class NodeFaults:
    """One node's faults: applied through `apply`, each one's status written back. Fed the node's
    GpuFault objects by a watch (FaultWatcher in the plugin, an informer in fleet mode)."""

    def __init__(
        self,
        api: client.ApiClient,
        node: str,
        tracker: FaultTracker,
        apply: Callable[[Effects], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.node, self.tracker, self.apply, self.clock = node, tracker, apply, clock
        self._applied: Effects | None = None

    def reconcile(self, objects: list[dict[str, Any]]) -> float | None:
        """Apply the faults; returns when the next one starts or ends."""
        now = self.clock()
        faults: list[Fault] = []
        invalid: dict[str, str] = {}
        for obj in objects:
            try:
                faults.append(parse_fault(obj))
            except FaultError as err:
                invalid[obj["metadata"]["name"]] = str(err)
        effects, status = self.tracker.effects(faults, now)
        if effects != self._applied:
            log.info(
                "device faults changed",
                extra={
                    "node": self.node,
                    "tainted": {d: [t["key"] for t in ts] for d, ts in effects.taints.items()},
                    "health": {d: h for d, (h, _) in effects.health.items()},
                },
            )
            self.apply(effects)
            self._applied = effects
        for obj in objects:
            name = obj["metadata"]["name"]
            phase, message = ("Failed", invalid[name]) if name in invalid else status[name]
            self._write_status(obj, phase, message, now)
        changes = [t for f in faults if (t := f.next_change(now)) is not None]
        return min(changes) if changes else None

    def _write_status(self, obj: dict[str, Any], phase: str, message: str, now: float) -> None:
        old = obj.get("status") or {}
        if (old.get("phase"), old.get("message")) == (phase, message):
            return
        status: dict[str, Any] = {"phase": phase, "message": message, "node": self.node}
        if phase == "Active":
            status["activeSince"] = old.get("activeSince") or rfc3339(now)
        if phase == "Recovered":
            status["activeSince"] = old.get("activeSince")
            status["recoveredAt"] = old.get("recoveredAt") or rfc3339(now)
        try:
            self.custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                PLURAL,
                obj["metadata"]["name"],
                {"status": status},
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as err:
            if err.status != 404:  # deleted meanwhile
                raise


class FaultWatcher:
    """The GPU plugin's loop over its node's faults."""

    def __init__(self, faults: NodeFaults, stop: threading.Event) -> None:
        self.faults, self.stop = faults, stop
        self.custom, self.node = faults.custom, faults.node

    def start(self) -> threading.Thread:
        thread = threading.Thread(
            target=run_forever, args=("GpuFault watch", self.step, self.stop, 0.0), name="faults", daemon=True
        )
        thread.start()
        return thread

    def step(self) -> None:
        """One pass: list, apply, watch until the next change."""
        objects, version = self._list()
        next_change = self.faults.reconcile(objects)
        if self.stop.is_set():
            return
        clock = self.faults.clock
        wait = WATCH_SECONDS if next_change is None else max(1, math.ceil(next_change - clock()))
        self._watch(version, min(wait, WATCH_SECONDS))

    def _list(self) -> tuple[list[dict[str, Any]], str]:
        result: dict[str, Any] = self.custom.list_cluster_custom_object(  # type: ignore[assignment]
            GROUP,
            VERSION,
            PLURAL,
            field_selector=f"spec.nodeName={self.node}",
            _request_timeout=REQUEST_TIMEOUT,
        )
        return list(result.get("items") or []), str(result.get("metadata", {}).get("resourceVersion", ""))

    def _watch(self, version: str, seconds: int) -> None:
        w = watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for _ in w.stream(  # type: ignore[no-untyped-call]
                self.custom.list_cluster_custom_object,
                GROUP,
                VERSION,
                PLURAL,
                field_selector=f"spec.nodeName={self.node}",
                resource_version=version,
                timeout_seconds=seconds,
                _request_timeout=(REQUEST_TIMEOUT[0], seconds + 15),
            ):
                return  # any change: list again (a node has few faults)
        except ApiException as err:
            if err.status != 410:  # 410 Gone: the version is too old; the next list starts afresh
                raise
        finally:
            w.stop()  # type: ignore[no-untyped-call]


class FaultInformer:
    """The GpuFaults of many nodes served by one process (fleet mode): one LIST + WATCH of every
    GpuFault, each node's applied by its NodeFaults, and a timer that applies a node's again when
    one of them starts or ends. A node's NodeFaults is built when it first has a fault."""

    def __init__(self, api: client.ApiClient, stop: threading.Event) -> None:
        self.api, self.stop = api, stop
        self._objects: dict[str, dict[str, dict[str, Any]]] = {}  # node -> name -> GpuFault
        self._makers: dict[str, Callable[[], NodeFaults]] = {}  # the nodes served
        self._faults: dict[str, NodeFaults] = {}
        self._next_change: dict[str, float] = {}
        self._lock = threading.Lock()
        self._reconcile_lock = threading.Lock()  # one reconciliation at a time
        self._wake = threading.Event()

    def start(self) -> None:
        for target, name in ((self._informer, "gpufaults"), (self._timer, "gpufault-timer")):
            threading.Thread(target=target, name=name, daemon=True).start()

    def add(self, node: str, make: Callable[[], NodeFaults]) -> None:
        """Serve `node`'s faults (`make` builds its NodeFaults when it first has one)."""
        with self._lock:
            self._makers[node] = make
        self.reconcile(node)  # faults listed before their node was

    def remove(self, node: str) -> None:
        with self._lock:
            self._makers.pop(node, None)
            self._faults.pop(node, None)
            self._next_change.pop(node, None)

    def reconcile(self, node: str) -> None:
        """Apply one node's faults; nodes not served are someone else's."""
        with self._lock:
            make = self._makers.get(node)
            faults = self._faults.get(node)
            objects = list(self._objects.get(node, {}).values())
        if make is None or not (objects or faults is not None):
            return
        with self._reconcile_lock:
            if faults is None:
                built = make()
                with self._lock:
                    if node not in self._makers:
                        return  # removed meanwhile
                    faults = self._faults.setdefault(node, built)
            try:
                next_change = faults.reconcile(objects)
            except Exception as err:  # a status write failed: try again soon
                log.warning("applying a node's faults failed", extra={"node": node, "error": str(err)[:300]})
                next_change = time.time() + RETRY_SECONDS
        with self._lock:
            if next_change is None or node not in self._makers:  # removed meanwhile: nothing to time
                self._next_change.pop(node, None)
            else:
                self._next_change[node] = next_change
        self._wake.set()

    def listed(self, items: list[dict[str, Any]]) -> None:
        """The informer's LIST: every GpuFault."""
        by_node: dict[str, dict[str, dict[str, Any]]] = {}
        for obj in items:
            by_node.setdefault(obj.get("spec", {}).get("nodeName", ""), {})[obj["metadata"]["name"]] = obj
        with self._lock:
            touched = set(self._objects) | set(by_node)
            self._objects = by_node
        for node in touched:
            self.reconcile(node)

    def changed(self, kind: str, obj: dict[str, Any]) -> None:
        """One WATCH event."""
        node, name = obj.get("spec", {}).get("nodeName", ""), obj["metadata"]["name"]
        with self._lock:
            objects = self._objects.setdefault(node, {})
            if kind == "DELETED":
                objects.pop(name, None)
            else:
                objects[name] = obj
        self.reconcile(node)

    def _informer(self) -> None:
        faults = lister(self.api, f"/apis/{GROUP}/{VERSION}/{PLURAL}")
        run_informer(self.stop, "gpufaults", faults, {}, self.listed, self.changed)

    def _timer(self) -> None:
        """Faults start and end on their own: reconcile each node when its next change is due."""
        while not self.stop.is_set():
            with self._lock:
                due = min(self._next_change.values(), default=None)
            self._wake.wait(TIMER_SECONDS if due is None else min(TIMER_SECONDS, max(0.0, due - time.time())))
            self._wake.clear()
            now = time.time()
            with self._lock:
                ready = [n for n, t in self._next_change.items() if t <= now]
            for node in ready:
                self.reconcile(node)
