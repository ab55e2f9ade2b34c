"""ComputeDomain status from watches: informers on ComputeDomains (all namespaces) and on the
daemons' cliques and pods (driver namespace) keep caches; a change to any of them queues its
ComputeDomain, whose status is computed from the caches (no request) and patched only when it
differs. Every `resync` seconds each ComputeDomain is queued again, from the caches, as NVIDIA's
controller rebuilds status every `cdStatusSyncInterval` from its informers
(docs/computedomain.md#controller)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client

from computedomain.api import CD_LABEL, CLIQUE_PLURAL, GROUP, PLURAL, VERSION
from computedomain.controller import status
from dra_fake.core.informer import lister, run_informer
from dra_fake.core.kube import merge_patch
from dra_fake.core.retry import run_forever

log = logging.getLogger(__name__)

Object = dict[str, Any]


class _Cache:
    """Objects of one kind by UID, and which ComputeDomain each belongs to."""

    def __init__(self, domain_of: Any) -> None:
        self.objects: dict[str, Object] = {}
        self._domain_of = domain_of

    def replace(self, items: Iterable[Object]) -> set[str]:
        """A fresh list; returns the ComputeDomains whose objects may have changed."""
        before = {self._domain_of(o) for o in self.objects.values()}
        self.objects = {o["metadata"]["uid"]: o for o in items}
        return before | {self._domain_of(o) for o in self.objects.values()}

    def apply(self, kind: str, obj: Object) -> str:
        uid = obj["metadata"]["uid"]
        if kind == "DELETED":
            self.objects.pop(uid, None)
        else:
            self.objects[uid] = obj
        return str(self._domain_of(obj))

    def of(self, domain: str) -> list[Object]:
        return [o for o in self.objects.values() if self._domain_of(o) == domain]


def _labelled(obj: Object) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(CD_LABEL, ""))


def _uid(obj: Object) -> str:
    return str(obj["metadata"]["uid"])


class StatusSync:
    def __init__(self, api: client.ApiClient, namespace: str, resync: float) -> None:
        self.api = api
        self.namespace = namespace
        self.resync = resync
        self._lock = threading.Condition()
        self._domains = _Cache(_uid)
        self._cliques = _Cache(_labelled)
        self._pods = _Cache(_labelled)
        self._queue: set[str] = set()
        self._sent: dict[str, tuple[str | None, Object]] = {}  # uid -> (resourceVersion patched, status)

    # --- informers -------------------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        ns = self.namespace
        watches: tuple[tuple[str, str, dict[str, str], _Cache], ...] = (
            ("computedomains", f"/apis/{GROUP}/{VERSION}/{PLURAL}", {}, self._domains),
            ("cliques", f"/apis/{GROUP}/{VERSION}/namespaces/{ns}/{CLIQUE_PLURAL}", {}, self._cliques),
            ("daemon pods", f"/api/v1/namespaces/{ns}/pods", {"label_selector": CD_LABEL}, self._pods),
        )
        for what, path, query, cache in watches:
            threading.Thread(
                target=run_informer,
                args=(
                    stop,
                    what,
                    lister(self.api, path),
                    query,
                    lambda items, c=cache: self._changed(lambda: c.replace(items)),
                    lambda kind, obj, c=cache: self._changed(lambda: {c.apply(kind, obj)}),
                ),
                name=f"watch-{what}",
                daemon=True,
            ).start()
        threading.Thread(target=self._work, args=(stop,), name="status-sync", daemon=True).start()
        threading.Thread(
            target=run_forever,
            args=(
                "status resync",
                lambda: self._changed(lambda: list(self._domains.objects)),
                stop,
                self.resync,
            ),
            name="status-resync",
            daemon=True,
        ).start()

    def _changed(self, change: Callable[[], Iterable[str]]) -> None:
        """Apply a cache change under the lock and queue the ComputeDomains it touched."""
        with self._lock:
            self._queue.update(d for d in change() if d)
            self._lock.notify()

    def _resync(self) -> None:
        self._changed(lambda: list(self._domains.objects))

    # --- the worker ------------------------------------------------------------------------------

    def _work(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._lock:
                self._lock.wait_for(lambda: bool(self._queue) or stop.is_set(), timeout=1.0)
                batch, self._queue = self._queue, set()
            for uid in batch:
                try:
                    self.sync(uid)
                except Exception as err:  # the next event or resync tries again
                    log.warning("status sync failed", extra={"computeDomain": uid, "error": str(err)[:300]})

    def wanted(self, uid: str) -> tuple[Object, Object] | None:
        """The ComputeDomain as cached and the status it should have, from one look at the
        caches; None if it is gone or going."""
        with self._lock:
            cd = self._domains.objects.get(uid)
            cliques, pods = self._cliques.of(uid), self._pods.of(uid)
        if cd is None or cd["metadata"].get("deletionTimestamp"):
            return None
        node_list = status.nodes(cliques, pods)
        num_nodes = int((cd.get("spec") or {}).get("numNodes") or 0)
        return cd, {"status": status.global_status(num_nodes, node_list), "nodes": node_list}

    def sync(self, uid: str) -> bool:
        """Patch the status when it differs from the wanted one; returns whether it patched."""
        found = self.wanted(uid)
        if found is None:
            self._sent.pop(uid, None)
            return False
        cd, wanted = found
        current = cd.get("status") or {}
        if current.get("status") == wanted["status"] and (current.get("nodes") or []) == wanted["nodes"]:
            return False
        meta = cd["metadata"]
        if self._sent.get(uid) == (meta.get("resourceVersion"), wanted):
            return False  # patched already; the watch has not brought the result back yet
        merge_patch(
            self.api,
            f"/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/{PLURAL}/{{name}}/status",
            {"status": wanted},
            namespace=meta["namespace"],
            name=meta["name"],
        )
        self._sent[uid] = (meta.get("resourceVersion"), wanted)
        log.info(
            "status updated",
            extra={
                "computeDomain": uid,
                "status": wanted["status"],
                "nodes": [f"{n['name']}={n['status']}" for n in wanted["nodes"]],
            },
        )
        return True
