"""What the controller does to the API server for one ComputeDomain: ensure its objects, keep its
status, delete it in NVIDIA's order, and clean up after vanished ComputeDomains
(docs/reference/nvidia-compute-domains.md#3-controller, #4-readiness-and-status).

Idempotent throughout: every step looks before it acts and tolerates "already there" / "already
gone", so a restarted controller (or a second attempt after an error) converges.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomain.api import CD_LABEL, CLIQUE_PLURAL, FINALIZER, GROUP, PLURAL, VERSION, daemon_object_name
from computedomain.controller import objects
from dra_fake.core.resourceapi import as_dict

log = logging.getLogger("computedomain.reconcile")


class NotDoneYet(Exception):
    """A step is waiting for the API server (objects still terminating): retry shortly."""


class ForeignObject(Exception):
    """An object we would create exists and is not ours: retrying cannot help until a person
    removes it (the periodic sync creates ours once it is gone)."""


def _dicts(api: client.ApiClient, items: Any) -> list[dict[str, Any]]:
    """Typed client models -> plain JSON dicts (camelCase keys, as the API server sends them)."""
    return list(api.sanitize_for_serialization(items))  # type: ignore[no-untyped-call]


def _drop_finalizer(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """A JSON patch removing our finalizer, guarded by a test of its position (no lost updates)."""
    finalizers = obj["metadata"].get("finalizers") or []
    if FINALIZER not in finalizers:
        return []
    path = f"/metadata/finalizers/{finalizers.index(FINALIZER)}"
    return [{"op": "test", "path": path, "value": FINALIZER}, {"op": "remove", "path": path}]


def _ignore(err: ApiException, *codes: int) -> None:
    if err.status not in codes:
        raise err


class Reconciler:
    def __init__(self, api: client.ApiClient, settings: objects.DaemonSettings) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.settings = settings
        # ResourceClaimTemplates in the version the server serves (v1beta1 on 1.32, v1beta2 on 1.33).
        self.resource = ("resource.k8s.io", settings.resource_version)

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    # --- create / resume ----------------------------------------------------------------------

    def ensure(self, cd: dict[str, Any], new: bool = False) -> list[str]:
        """Daemon template + DaemonSet (if no DaemonSet for the UID), then the workload template.
        Returns the names of the objects created. For a `new` ComputeDomain (just created) the
        DaemonSet is not looked for first: a create that finds it answers 409."""
        uid = cd["metadata"]["uid"]
        created = []
        if new or not self._daemon_sets(uid):
            if self._create_rct(objects.daemon_template(uid, self.namespace, self.settings.resource_version)):
                created.append(f"ResourceClaimTemplate {self.namespace}/{daemon_object_name(uid)}")
            try:
                self.apps.create_namespaced_daemon_set(
                    self.namespace,
                    objects.daemon_set(uid, self.settings),  # type: ignore[arg-type]
                )
                created.append(f"DaemonSet {self.namespace}/{daemon_object_name(uid)}")
            except ApiException as err:
                _ignore(err, 409)
        workload = objects.workload_template(cd, self.settings.resource_version)
        if self._create_rct(workload):  # the usual case: one request, no GET first
            created.append(
                f"ResourceClaimTemplate {cd['metadata']['namespace']}/{workload['metadata']['name']}"
            )
            existing = None
        else:
            existing = self._get_rct(workload["metadata"]["namespace"], workload["metadata"]["name"])
        if existing is not None and (existing["metadata"].get("labels") or {}).get(CD_LABEL) != uid:
            raise ForeignObject(
                f"ResourceClaimTemplate {workload['metadata']['namespace']}/{workload['metadata']['name']} "
                "exists and does not belong to this ComputeDomain"
            )
        if created:
            log.info("objects created", extra={"computeDomain": uid, "objects": created})
        return created

    def _create_rct(self, obj: dict[str, Any]) -> bool:
        """Create with compact, key-sorted JSON. The API server keeps opaque `parameters` as the raw
        bytes it received and compares them byte-wise on every later update (spec is immutable);
        a patch re-serialises them compact and sorted, so bytes sent any other way (the Python
        client's `json.dumps` adds spaces) would make the finalizer impossible to remove. Sent as
        application/yaml because the client's JSON path would re-serialise the string."""
        namespace = obj["metadata"]["namespace"]
        path = f"/apis/{self.resource[0]}/{self.resource[1]}/namespaces/{namespace}/resourceclaimtemplates"
        method, url, headers, _, _ = self.api.param_serialize(
            "POST",
            path,
            header_params={"Content-Type": "application/yaml", "Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(
            method, url, header_params=headers, body=json.dumps(obj, sort_keys=True, separators=(",", ":"))
        )
        body = response.read()  # type: ignore[no-untyped-call]
        if response.status == 409:
            return False
        if response.status >= 300:
            raise ApiException(status=response.status, reason=response.reason or "", body=body)
        return True

    def _get_rct(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return as_dict(
                self.custom.get_namespaced_custom_object(
                    *self.resource, namespace, "resourceclaimtemplates", name
                )
            )
        except ApiException as err:
            _ignore(err, 404)
            return None

    def _daemon_sets(self, uid: str) -> list[dict[str, Any]]:
        found = self.apps.list_namespaced_daemon_set(self.namespace, label_selector=f"{CD_LABEL}={uid}")
        return _dicts(self.api, found.items)

    # --- delete -------------------------------------------------------------------------------

    def delete(self, cd: dict[str, Any]) -> None:
        """NVIDIA's order: workload template -> DaemonSet + daemon template -> node labels ->
        template finalizers (assert gone) -> DaemonSet / daemon template finalizers (assert gone).
        The caller removes the CD's finalizer after this returns."""
        meta = cd["metadata"]
        uid = meta["uid"]
        workload = (((cd.get("spec") or {}).get("channel") or {}).get("resourceClaimTemplate") or {}).get(
            "name"
        )
        workload_ref = (meta["namespace"], workload) if workload else None
        if workload_ref:
            existing = self._get_rct(*workload_ref)
            if existing is not None and (existing["metadata"].get("labels") or {}).get(CD_LABEL) == uid:
                self._delete_rct(*workload_ref)
            else:
                workload_ref = None
        self._delete_ds(uid)
        self._delete_rct(self.namespace, daemon_object_name(uid))
        self.remove_node_labels(uid)
        if workload_ref:
            self._release_rct(*workload_ref)
        self._release_rct(self.namespace, daemon_object_name(uid))
        self._release_ds(uid)
        remaining = []
        if workload_ref and self._get_rct(*workload_ref) is not None:
            remaining.append("workload ResourceClaimTemplate")
        if self._get_rct(self.namespace, daemon_object_name(uid)) is not None:
            remaining.append("daemon ResourceClaimTemplate")
        if self._daemon_sets(uid):
            remaining.append("DaemonSet")
        if remaining:
            raise NotDoneYet(f"waiting for {', '.join(remaining)} to go away")
        log.info("ComputeDomain objects deleted", extra={"computeDomain": uid})

    def _delete_rct(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                *self.resource, namespace, "resourceclaimtemplates", name
            )
        except ApiException as err:
            _ignore(err, 404)

    def _release_rct(self, namespace: str, name: str) -> None:
        obj = self._get_rct(namespace, name)
        patch = _drop_finalizer(obj) if obj else []
        if not patch:
            return
        try:
            self.custom.patch_namespaced_custom_object(
                *self.resource,
                namespace,
                "resourceclaimtemplates",
                name,
                patch,
                _content_type="application/json-patch+json",
            )
        except ApiException as err:
            _ignore(err, 404, 409, 422)

    def _delete_ds(self, uid: str) -> None:
        for ds in self._daemon_sets(uid):
            try:
                self.apps.delete_namespaced_daemon_set(ds["metadata"]["name"], self.namespace)
            except ApiException as err:
                _ignore(err, 404)

    def _release_ds(self, uid: str) -> None:
        for ds in self._daemon_sets(uid):
            patch = _drop_finalizer(ds)
            if patch:
                try:
                    self.apps.patch_namespaced_daemon_set(ds["metadata"]["name"], self.namespace, patch)
                except ApiException as err:
                    _ignore(err, 404, 409, 422)

    def remove_node_labels(self, uid: str) -> list[str]:
        removed = []
        for node in _dicts(self.api, self.core.list_node(label_selector=f"{CD_LABEL}={uid}").items):
            name = str(node["metadata"]["name"])
            path = "/metadata/labels/" + CD_LABEL.replace("/", "~1")
            try:
                self.core.patch_node(
                    name,
                    [{"op": "test", "path": path, "value": uid}, {"op": "remove", "path": path}],
                )
                removed.append(name)
            except ApiException as err:
                _ignore(err, 404, 409, 422)
        if removed:
            log.info("node labels removed", extra={"computeDomain": uid, "nodes": removed})
        return removed

    # --- orphans ------------------------------------------------------------------------------

    def cleanup_orphans(self) -> dict[str, list[str]]:
        """Remove templates, DaemonSets, cliques and node labels of ComputeDomain UIDs that no
        longer exist (NVIDIA's CleanupManager). The objects are listed before the ComputeDomains:
        each is made after its domain, so a domain created meanwhile is in the second list (listed
        the other way round, a domain and clique created between the two lists looked orphaned)."""
        rcts = as_dict(
            self.custom.list_cluster_custom_object(
                *self.resource, "resourceclaimtemplates", label_selector=CD_LABEL
            )
        )["items"]
        daemon_sets = _dicts(
            self.api, self.apps.list_namespaced_daemon_set(self.namespace, label_selector=CD_LABEL).items
        )
        cliques = as_dict(
            self.custom.list_namespaced_custom_object(
                GROUP, VERSION, self.namespace, CLIQUE_PLURAL, label_selector=CD_LABEL
            )
        )["items"]
        nodes = _dicts(self.api, self.core.list_node(label_selector=CD_LABEL).items)
        live = {
            cd["metadata"]["uid"]
            for cd in as_dict(self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL))["items"]
        }
        done: dict[str, list[str]] = {"templates": [], "daemonSets": [], "cliques": [], "nodes": []}
        for rct in rcts:
            m = rct["metadata"]
            if m["labels"][CD_LABEL] not in live:
                self._delete_rct(m["namespace"], m["name"])
                self._release_rct(m["namespace"], m["name"])
                done["templates"].append(f"{m['namespace']}/{m['name']}")
        for ds in daemon_sets:
            uid = ds["metadata"]["labels"][CD_LABEL]
            if uid not in live:
                self._delete_ds(uid)
                self._release_ds(uid)
                done["daemonSets"].append(ds["metadata"]["name"])
        for clique in cliques:
            if clique["metadata"]["labels"][CD_LABEL] not in live:
                try:
                    self.custom.delete_namespaced_custom_object(
                        GROUP, VERSION, self.namespace, CLIQUE_PLURAL, clique["metadata"]["name"]
                    )
                    done["cliques"].append(clique["metadata"]["name"])
                except ApiException as err:
                    _ignore(err, 404)
        for node in nodes:
            uid = node["metadata"]["labels"][CD_LABEL]
            if uid not in live and self.remove_node_labels(uid):
                done["nodes"].append(node["metadata"]["name"])
        if any(done.values()):
            log.info("orphans cleaned up", extra=done)
        return done
