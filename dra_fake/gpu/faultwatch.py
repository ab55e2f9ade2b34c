"""The I/O side of simulated faults: a node's GpuFault objects in, their effects
(dra_fake.gpu.faults) handed to the slices and the kubelet's health stream, each fault's status out.

The plugin's loop (FaultWatcher): LIST the node's faults (a field selector on spec.nodeName), apply
them, then WATCH from that list's resourceVersion until something changes or the next fault starts
or ends, and again. A failing step is logged and retried with backoff
(dra_fake.core.retry.run_forever). Fleet mode feeds NodeFaults from one informer for all its nodes.
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
