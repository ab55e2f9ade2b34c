"""Keeps this node's ResourceSlices in the API server equal to the inventory.

Watches its own slices and re-syncs on every change (the kubelet wipes a node's slices when
it starts and 30 s after a driver deregisters), retries with backoff when the API server is
away, and detects fields the server dropped (a feature gate off) instead of looping.

Two plugin instances of one node run at once during a rolling update (the new pod starts before
the old one ends). If their inventories differ, each would rewrite the other's slices on every
watch event, bumping the pool generation each time. So every slice names the instance that wrote
it, and an instance that finds slices of a newer instance of the same node stops writing: the
newest wins, and the old one is about to end anyway.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from dra_fake.core import metrics
from dra_fake.core.checkpointstore import DEFAULT_BOOT_ID_PATH
from dra_fake.core.kube import REQUEST_TIMEOUT
from dra_fake.core.poolsync import ExistingSlice, PoolPlan, Spec, plan_pool
from dra_fake.core.resourceapi import RESOURCE_GROUP, ResourceApi, as_dict
from dra_fake.core.retry import Backoff
from dra_fake.core.slices import DesiredSlice, slice_manifest, slice_spec

WATCH_SECONDS = 60  # server-side timeout of the slice watch; the read timeout allows it
PUBLISHER_ANNOTATION = "dra-fake.dev/publisher"

log = logging.getLogger(__name__)

# Fields a server drops when a feature gate is off, and the gate that governs them.
_GATED_FIELDS = {
    "sharedCounters": "DRAPartitionableDevices",
    "consumesCounters": "DRAPartitionableDevices",
    "perDeviceNodeSelection": "DRAPartitionableDevices",
    "taints": "DRADeviceTaints",
    "bindingConditions": "DRADeviceBindingConditions",
    "bindingFailureConditions": "DRADeviceBindingConditions",
    "bindsToNode": "DRADeviceBindingConditions",
    "allowMultipleAllocations": "DRAConsumableCapacity",
}


def _keys(obj: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            found.add(k)
            found |= _keys(v)
    elif isinstance(obj, list):
        for v in obj:
            found |= _keys(v)
    return found


def dropped_features(sent: Spec, stored: Spec) -> list[str]:
    """Feature gates whose fields were in `sent` but are missing from `stored`."""
    lost = _keys(sent) - _keys(stored)
    return sorted({_GATED_FIELDS[k] for k in lost if k in _GATED_FIELDS} or ({"unknown"} if lost else set()))


@dataclass(frozen=True, order=True)
class Instance:
    """One plugin process, ordered by start time on the node's boot clock (every container of a
    node shares the kernel, so CLOCK_BOOTTIME is one clock for all of them and never jumps)."""

    boot_id: str
    started_ns: int
    pid: int

    @classmethod
    def current(cls) -> Instance:
        try:
            boot_id = DEFAULT_BOOT_ID_PATH.read_text().strip()
        except OSError:
            boot_id = ""
        return cls(boot_id, time.clock_gettime_ns(time.CLOCK_BOOTTIME), os.getpid())

    def render(self) -> str:
        return f"{self.boot_id}/{self.started_ns}/{self.pid}"

    @classmethod
    def parse(cls, text: str) -> Instance | None:
        parts = text.split("/")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            return None
        return cls(parts[0], int(parts[1]), int(parts[2]))

    def superseded_by(self, annotation: str) -> bool:
        """True when `annotation` names a newer instance of this boot (one of an earlier boot
        is long gone)."""
        other = Instance.parse(annotation)
        return other is not None and other.boot_id == self.boot_id and other > self


class Publisher:
    def __init__(
        self,
        api: ResourceApi,
        driver: str,
        node_name: str,
        node_uid: str,
        desired: Callable[[], list[DesiredSlice]],
        resync_seconds: float = 300.0,
        instance: Instance | None = None,
    ) -> None:
        self.api = api
        self.instance = instance or Instance.current()
        self.superseded = False
        self.driver = driver
        self.node_name = node_name
        self.node_uid = node_uid
        self.desired = desired
        self.resync_seconds = resync_seconds
        self.synced = threading.Event()  # set after the first successful sync
        self._trigger = threading.Event()
        self._stop = threading.Event()
        self._accepted: dict[str, tuple[str, str]] = {}  # slice name -> (sent spec, stored spec) after drops
        self._warned: set[str] = set()
        self._foreign: set[str] = set()  # slices of this driver and node not written by dra-fake
        self._threads: list[threading.Thread] = []

    # ---- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        for target, name in ((self._sync_loop, "publisher"), (self._watch_loop, "publisher-watch")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        self._trigger.set()

    def stop(self) -> None:
        self._stop.set()
        self._trigger.set()

    def resync(self) -> None:
        self._trigger.set()

    # ---- loops -------------------------------------------------------------------------
    def _sync_loop(self) -> None:
        backoff = Backoff()
        while not self._stop.is_set():
            self._trigger.wait(self.resync_seconds)
            if self._stop.is_set():
                return
            self._trigger.clear()
            try:
                self.sync()
                self.synced.set()
                backoff.reset()
            except Exception as err:
                delay = backoff.next()
                log.warning(
                    "publishing ResourceSlices failed, retrying", extra={"error": str(err), "retryIn": delay}
                )
                self._stop.wait(delay)
                self._trigger.set()

    def _watch_loop(self) -> None:
        backoff = Backoff()
        resource_version: str | None = None
        while not self._stop.is_set():
            try:
                resource_version = self._watch_once(resource_version)
                backoff.reset()
            except Exception as err:
                if isinstance(err, ApiException) and err.status == 410:
                    resource_version = None  # it left the server's window: list and watch anew
                log.debug("slice watch ended", extra={"error": str(err)})
                self._stop.wait(backoff.next())
                self._trigger.set()  # we may have missed events

    def _watch_once(self, resource_version: str | None) -> str | None:
        """One watch of this node's slices from `resource_version` (None: from now, every slice
        arriving as ADDED); every change triggers a sync. Returns the version to resume from, so
        the next watch neither re-lists nor misses what changed in between (client-go's reflector
        does the same); bookmarks keep it fresh while nothing changes."""
        w = watch.Watch()  # type: ignore[no-untyped-call]
        resume = {} if resource_version is None else {"resource_version": resource_version}
        seen = resource_version
        try:
            for event in w.stream(  # type: ignore[no-untyped-call]
                self.api.custom.list_cluster_custom_object,
                RESOURCE_GROUP,
                self.api.version,
                "resourceslices",
                field_selector=self._selector(),
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                _request_timeout=(REQUEST_TIMEOUT[0], WATCH_SECONDS + 15),
                **resume,
            ):
                if self._stop.is_set():
                    break
                seen = event["raw_object"].get("metadata", {}).get("resourceVersion") or seen
                if event["type"] in ("DELETED", "MODIFIED", "ADDED"):
                    self._trigger.set()
        finally:
            w.stop()  # type: ignore[no-untyped-call]
        return seen

    def _selector(self) -> str:
        return f"spec.nodeName={self.node_name},spec.driver={self.driver}"

    # ---- one reconciliation ------------------------------------------------------------
    def existing(self) -> list[ExistingSlice]:
        """This node's slices of this driver that a dra-fake plugin wrote (PUBLISHER_ANNOTATION).
        Others, such as those of NVIDIA's real driver of the same name on a mixed cluster, are
        never updated or deleted: logged once, and left alone (docs/security.md)."""
        objs = as_dict(
            self.api.custom.list_cluster_custom_object(
                RESOURCE_GROUP, self.api.version, "resourceslices", field_selector=self._selector()
            )
        )
        ours, foreign = [], []
        for o in objs["items"]:
            publisher = (o["metadata"].get("annotations") or {}).get(PUBLISHER_ANNOTATION, "")
            if not publisher:
                foreign.append(o["metadata"]["name"])
                continue
            ours.append(
                ExistingSlice(
                    o["metadata"]["name"],
                    o["metadata"]["uid"],
                    o["metadata"]["resourceVersion"],
                    o["spec"],
                    publisher,
                )
            )
        if foreign and set(foreign) != self._foreign:
            log.warning(
                "ResourceSlices of this driver and node that dra-fake did not write are left alone "
                "(another driver of the same name?)",
                extra={"driver": self.driver, "node": self.node_name, "slices": sorted(foreign)},
            )
        self._foreign = set(foreign)
        return ours

    def _manifest(self, spec: Spec, name: str) -> dict[str, Any]:
        obj = slice_manifest(
            spec,
            api_version=self.api.version,
            name=name,
            owner_node_name=self.node_name,
            owner_node_uid=self.node_uid,
        )
        obj["metadata"]["annotations"] = {PUBLISHER_ANNOTATION: self.instance.render()}
        return obj

    def sync(self) -> PoolPlan:
        desired = self.desired()
        version = self.api.version
        existing = self.existing()
        newer = next((e.publisher for e in existing if self.instance.superseded_by(e.publisher)), None)
        if newer is not None:
            if not self.superseded:
                log.warning(
                    "a newer instance of this plugin publishes this node's ResourceSlices; this one "
                    "stops writing them",
                    extra={"instance": self.instance.render(), "newer": newer},
                )
            self.superseded = True
            return PoolPlan(generation=max((e.generation for e in existing), default=0))
        self.superseded = False

        def build(index: int, generation: int) -> Spec:
            return slice_spec(
                desired[index],
                api_version=version,
                driver=self.driver,
                pool_name=self.node_name,
                node_name=self.node_name,
                generation=generation,
                slice_count=len(desired),
            )

        plan = plan_pool(existing, len(desired), build, self.driver, self.node_name, same=self._same)
        for e in plan.deletes:
            self._delete(e)
        for e, spec in plan.updates:
            obj = self._manifest(spec, e.name)
            obj["metadata"]["resourceVersion"] = e.resource_version
            stored = as_dict(
                self.api.custom.replace_cluster_custom_object(
                    RESOURCE_GROUP, version, "resourceslices", e.name, obj
                )
            )
            self._check_stored(e.name, spec, stored["spec"])
        for name, spec in plan.creates:
            obj = self._manifest(spec, name)
            try:
                stored = as_dict(
                    self.api.custom.create_cluster_custom_object(
                        RESOURCE_GROUP, version, "resourceslices", obj
                    )
                )
            except ApiException as err:
                if err.status == 409:  # created meanwhile (by an earlier instance): next sync updates it
                    self._trigger.set()
                    continue
                raise
            self._check_stored(name, spec, stored["spec"])
        if not plan.empty:
            log.info(
                "ResourceSlices published",
                extra={
                    "generation": plan.generation,
                    "slices": len(desired),
                    "createdSlices": len(plan.creates),
                    "updatedSlices": len(plan.updates),
                    "deletedSlices": len(plan.deletes),
                    "apiVersion": version,
                },
            )
        metrics.PUBLISHED_DEVICES.set(sum(len(d.devices) for d in desired))
        return plan

    def _delete(self, e: ExistingSlice) -> None:
        try:
            self.api.custom.delete_cluster_custom_object(
                RESOURCE_GROUP,
                self.api.version,
                "resourceslices",
                e.name,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(uid=e.uid, resource_version=e.resource_version)
                ),
            )
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    def _same(self, existing: ExistingSlice, spec: Spec) -> bool:
        if existing.spec == spec:
            return True
        accepted = self._accepted.get(existing.name)
        return accepted is not None and accepted == (_canon(spec), _canon(existing.spec))

    def _check_stored(self, name: str, sent: Spec, stored: Spec) -> None:
        if stored == sent:
            self._accepted.pop(name, None)
            return
        # The server changed what we wrote. Remember the pair so we do not rewrite it forever.
        self._accepted[name] = (_canon(sent), _canon(stored))
        for feature in dropped_features(sent, stored):
            if feature not in self._warned:
                self._warned.add(feature)
                log.warning(
                    "the API server dropped ResourceSlice fields: feature gate %s is probably disabled "
                    "there; publishing what it accepts",
                    feature,
                    extra={"slice": name, "feature": feature},
                )


def _canon(spec: Spec) -> str:
    return json.dumps(spec, sort_keys=True)
