"""What the compute-domain kubelet plugin reads and writes in the API server: ComputeDomains (by
UID), this node's `resource.nvidia.com/computeDomain` label and the node's daemon entry
(docs/reference/nvidia-compute-domains.md#43-per-node-readiness-gate)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomain.api import (
    CD_LABEL,
    CLIQUE_PLURAL,
    GROUP,
    PLURAL,
    STATUS_READY,
    VERSION,
    clique_object_name,
)
from dra_fake.core.informer import lister, run_informer
from dra_fake.core.resourceapi import as_dict

log = logging.getLogger(__name__)

# NVIDIA's messages (docs/reference/nvidia-compute-domains.md#52-node-label, #72-channel-claims).
LABEL_OWNED = "label already exists for a different ComputeDomain"
NAMESPACE_MISMATCH = "the ResourceClaim's namespace is different than the ComputeDomain's namespace"


class NodeOwnedError(Exception):
    """The node carries the label of another ComputeDomain."""


@dataclass(frozen=True)
class DomainRef:
    uid: str
    name: str
    namespace: str


def _ref(cd: dict[str, Any]) -> DomainRef:
    meta = cd["metadata"]
    return DomainRef(str(meta["uid"]), str(meta["name"]), str(meta["namespace"]))


def _label_path(key: str) -> str:
    return "/metadata/labels/" + key.replace("~", "~0").replace("/", "~1")


class ComputeDomainApi:
    def __init__(self, api: client.ApiClient, driver_namespace: str) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.driver_namespace = driver_namespace
        self._refs: dict[str, DomainRef] = {}  # by UID, from the watch (start_watch)
        self._lock = threading.Lock()

    def start_watch(self, stop: threading.Event) -> None:
        """Keep the UID -> ComputeDomain index from a watch, so a prepare does not LIST every
        ComputeDomain of the cluster (`get_by_uid`)."""
        threading.Thread(
            target=run_informer,
            args=(
                stop,
                "computedomains",
                lister(self.api, f"/apis/{GROUP}/{VERSION}/{PLURAL}"),
                {},
                self._listed,
                self._event,
            ),
            name="watch-computedomains",
            daemon=True,
        ).start()

    def _listed(self, items: list[dict[str, Any]]) -> None:
        refs = {ref.uid: ref for ref in map(_ref, items)}
        with self._lock:
            self._refs = refs

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        ref = _ref(obj)
        with self._lock:
            if kind == "DELETED":
                self._refs.pop(ref.uid, None)
            else:
                self._refs[ref.uid] = ref

    def get_by_uid(self, uid: str) -> DomainRef | None:
        """The ComputeDomain with this UID, in any namespace (None if there is none): from the
        watch's index; a UID it does not have (created a moment ago, or no watch running) is
        looked up with one LIST, which also refreshes the index."""
        with self._lock:
            ref = self._refs.get(uid)
        if ref is not None:
            return ref
        self._listed(as_dict(self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL))["items"])
        with self._lock:
            return self._refs.get(uid)

    def add_node_label(self, node: str, uid: str) -> None:
        """Label the node with the CD's UID; NodeOwnedError if another CD owns it. The patch tests
        the label's previous state, so two plugins or CDs cannot both win."""
        for _ in range(5):
            meta = self.core.read_node(node).metadata
            labels = (meta.labels if meta else None) or {}
            current = labels.get(CD_LABEL)
            if current == uid:
                return
            if current:
                raise NodeOwnedError(LABEL_OWNED)
            patch: list[dict[str, Any]] = []
            if not labels:
                patch.append({"op": "add", "path": "/metadata/labels", "value": {}})
            else:
                patch.append({"op": "test", "path": "/metadata/labels", "value": labels})
            patch.append({"op": "add", "path": _label_path(CD_LABEL), "value": uid})
            try:
                self.core.patch_node(node, patch)
            except ApiException as err:
                if err.status in (409, 422):  # changed meanwhile: look again
                    continue
                raise
            log.info("node labelled", extra={"node": node, "computeDomain": uid})
            return
        raise RuntimeError(f"node {node}: labels kept changing while adding {CD_LABEL}")

    def remove_node_label(self, node: str, uid: str) -> bool:
        """Remove the label if (and only if) it carries this UID. Returns whether it was removed."""
        try:
            self.core.patch_node(
                node,
                [
                    {"op": "test", "path": _label_path(CD_LABEL), "value": uid},
                    {"op": "remove", "path": _label_path(CD_LABEL)},
                ],
            )
        except ApiException as err:
            if err.status in (404, 409, 422):  # node gone, label absent or another CD's
                return False
            raise
        log.info("node label removed", extra={"node": node, "computeDomain": uid})
        return True

    def node_entry(self, uid: str, clique_id: str, node: str) -> dict[str, Any] | None:
        """This node's daemon entry: in the clique `<uid>.<cliqueID>` (fabric nodes) or in the
        CD's status.nodes (non-fabric nodes)."""
        if clique_id:
            try:
                clique = as_dict(
                    self.custom.get_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        self.driver_namespace,
                        CLIQUE_PLURAL,
                        clique_object_name(uid, clique_id),
                    )
                )
            except ApiException as err:
                if err.status == 404:
                    return None
                raise
            entries = clique.get("daemons") or []
            key = "nodeName"
        else:
            ref = self.get_by_uid(uid)
            if ref is None:
                return None
            cd = as_dict(
                self.custom.get_namespaced_custom_object(GROUP, VERSION, ref.namespace, PLURAL, ref.name)
            )
            entries = (cd.get("status") or {}).get("nodes") or []
            key = "name"
        return next((e for e in entries if e.get(key) == node), None)

    def node_ready(self, uid: str, clique_id: str, node: str) -> bool:
        entry = self.node_entry(uid, clique_id, node)
        return entry is not None and entry.get("status") == STATUS_READY
