"""What the controller does to the API server for one ComputeDomain: ensure its objects, keep its
status, delete it in NVIDIA's order, and clean up after vanished ComputeDomains
(docs/reference/nvidia-compute-domains.md#3-controller, #4-readiness-and-status).

Idempotent throughout: every step looks before it acts and tolerates "already there" / "already
gone", so a restarted controller (or a second attempt after an error) converges.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomain.api import CD_LABEL, CLIQUE_PLURAL, FINALIZER, GROUP, PLURAL, VERSION, daemon_object_name
from computedomain.controller import objects
from dra_fake.core.kube import get_json, send_json

log = logging.getLogger("computedomain.reconcile")

# kopf's thread pool for the synchronous handlers (computedomain.controller.handlers), and the
# reconciler's pool for the second request a handler has in flight (ensure): one per handler.
HANDLER_WORKERS = 32


class NotDoneYet(Exception):
    """A step is waiting for the API server (objects still terminating): retry shortly."""


class ForeignObject(Exception):
    """An object we would create exists and is not ours: retrying cannot help until a person
    removes it (the periodic sync creates ours once it is gone)."""


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
    """Every request as plain JSON (dra_fake.core.kube.request): the typed client's models cost
    the controller more CPU than the requests themselves (a LIST of DaemonSets deserialised into
    V1DaemonSet objects was a quarter of its time in a burst of deletions). A domain's DaemonSet
    and daemon template are found by name (`daemon_object_name`), not by a LIST per step."""

    def __init__(self, api: client.ApiClient, settings: objects.DaemonSettings) -> None:
        self.api = api
        self.settings = settings
        # The workload template's create, beside the daemon's objects (ensure).
        self._side = ThreadPoolExecutor(HANDLER_WORKERS, thread_name_prefix="cd-workload-template")
        # ResourceClaimTemplates in the version the server serves (v1beta1 on 1.32, v1beta2 on 1.33).
        self.templates = f"/apis/resource.k8s.io/{settings.resource_version}"

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    # --- requests -----------------------------------------------------------------------------

    def _rct_path(self, namespace: str, name: str = "") -> str:
        return f"{self.templates}/namespaces/{namespace}/resourceclaimtemplates" + (
            f"/{name}" if name else ""
        )

    def _ds_path(self, uid: str = "") -> str:
        return f"/apis/apps/v1/namespaces/{self.namespace}/daemonsets" + (
            f"/{daemon_object_name(uid)}" if uid else ""
        )

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return get_json(self.api, path)
        except ApiException as err:
            _ignore(err, 404)
            return None

    def _list(self, path: str, label_selector: str) -> list[dict[str, Any]]:
        return list(get_json(self.api, path, {"label_selector": label_selector})["items"])

    def _delete(self, path: str) -> None:
        try:
            send_json(self.api, "DELETE", path, None)
        except ApiException as err:
            _ignore(err, 404)

    def _json_patch(self, path: str, patch: list[dict[str, Any]]) -> bool:
        """A JSON patch; False if the object is gone or its `test` failed (changed meanwhile)."""
        try:
            send_json(self.api, "PATCH", path, patch, "application/json-patch+json")
            return True
        except ApiException as err:
            _ignore(err, 404, 409, 422)
            return False

    # --- create / resume ----------------------------------------------------------------------

    def ensure(self, cd: dict[str, Any], new: bool = False) -> list[str]:
        """Daemon template + DaemonSet (if the domain has no DaemonSet), and meanwhile the workload
        template (independent of both: two requests one after the other instead of three). Returns
        the names of the objects created. For a `new` ComputeDomain (just created) the DaemonSet is
        not looked for first: a create that finds it answers 409."""
        uid = cd["metadata"]["uid"]
        workload = objects.workload_template(cd, self.settings.resource_version)
        workload_made = self._side.submit(self._create_rct, workload)  # the usual case: no GET first
        created = []
        try:
            if new or self._get(self._ds_path(uid)) is None:
                if self._create_rct(
                    objects.daemon_template(uid, self.namespace, self.settings.resource_version)
                ):
                    created.append(f"ResourceClaimTemplate {self.namespace}/{daemon_object_name(uid)}")
                try:
                    send_json(self.api, "POST", self._ds_path(), objects.daemon_set(uid, self.settings))
                    created.append(f"DaemonSet {self.namespace}/{daemon_object_name(uid)}")
                except ApiException as err:
                    _ignore(err, 409)
        finally:
            made = workload_made.result()  # also when the daemon's failed: then either error is raised
        if made:
            created.append(
                f"ResourceClaimTemplate {cd['metadata']['namespace']}/{workload['metadata']['name']}"
            )
            existing = None
        else:
            existing = self._get(
                self._rct_path(workload["metadata"]["namespace"], workload["metadata"]["name"])
            )
        if existing is not None and (existing["metadata"].get("labels") or {}).get(CD_LABEL) != uid:
            raise ForeignObject(
                f"ResourceClaimTemplate {workload['metadata']['namespace']}/{workload['metadata']['name']} "
                "exists and does not belong to this ComputeDomain"
            )
        if created:
            log.info("objects created", extra={"computeDomain": uid, "objects": created})
        return created

    def _create_rct(self, obj: dict[str, Any]) -> bool:
        """Create with compact, key-sorted JSON (False: it exists). The API server keeps opaque
        `parameters` as the raw bytes it received and compares them byte-wise on every later
        update (spec is immutable); a patch re-serialises them compact and sorted, so bytes sent
        any other way (the Python client's `json.dumps` adds spaces) would make the finalizer
        impossible to remove. Sent as application/yaml (JSON is YAML): the client's JSON path,
        taken when DirectJson cannot, would serialise the body again."""
        body = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
        try:
            send_json(
                self.api, "POST", self._rct_path(obj["metadata"]["namespace"]), body, "application/yaml"
            )
        except ApiException as err:
            _ignore(err, 409)
            return False
        return True

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
        workload_path = self._rct_path(meta["namespace"], workload) if workload else None
        if workload_path:
            existing = self._get(workload_path)
            if existing is not None and (existing["metadata"].get("labels") or {}).get(CD_LABEL) == uid:
                self._delete(workload_path)
            else:
                workload_path = None
        daemon_template = self._rct_path(self.namespace, daemon_object_name(uid))
        self._delete(self._ds_path(uid))
        self._delete(daemon_template)
        self.remove_node_labels(uid)
        remaining = []
        if workload_path and not self._release(workload_path):
            remaining.append("workload ResourceClaimTemplate")
        if not self._release(daemon_template):
            remaining.append("daemon ResourceClaimTemplate")
        if not self._release(self._ds_path(uid)):
            remaining.append("DaemonSet")
        if remaining:
            raise NotDoneYet(f"waiting for {', '.join(remaining)} to go away")
        log.info("ComputeDomain objects deleted", extra={"computeDomain": uid})

    def _release(self, path: str) -> bool:
        """Drop our finalizer from the object at `path`; True when it is gone (or going without
        our finalizer: nothing of ours holds it)."""
        obj = self._get(path)
        if obj is None:
            return True
        patch = _drop_finalizer(obj)
        return bool(patch) and self._json_patch(path, patch) and self._get(path) is None

    def remove_node_labels(self, uid: str) -> list[str]:
        removed = []
        path = "/metadata/labels/" + CD_LABEL.replace("/", "~1")
        for node in self._list("/api/v1/nodes", f"{CD_LABEL}={uid}"):
            name = str(node["metadata"]["name"])
            if self._json_patch(
                f"/api/v1/nodes/{name}",
                [{"op": "test", "path": path, "value": uid}, {"op": "remove", "path": path}],
            ):
                removed.append(name)
        if removed:
            log.info("node labels removed", extra={"computeDomain": uid, "nodes": removed})
        return removed

    # --- orphans ------------------------------------------------------------------------------

    def cleanup_orphans(self) -> dict[str, list[str]]:
        """Remove templates, DaemonSets, cliques and node labels of ComputeDomain UIDs that no
        longer exist (NVIDIA's CleanupManager). The objects are listed before the ComputeDomains:
        each is made after its domain, so a domain created meanwhile is in the second list (listed
        the other way round, a domain and clique created between the two lists looked orphaned)."""
        rcts = self._list(f"{self.templates}/resourceclaimtemplates", CD_LABEL)
        daemon_sets = self._list(self._ds_path(), CD_LABEL)
        cliques = self._list(f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{CLIQUE_PLURAL}", CD_LABEL)
        nodes = self._list("/api/v1/nodes", CD_LABEL)
        live = {
            cd["metadata"]["uid"] for cd in get_json(self.api, f"/apis/{GROUP}/{VERSION}/{PLURAL}")["items"]
        }
        done: dict[str, list[str]] = {"templates": [], "daemonSets": [], "cliques": [], "nodes": []}
        for rct in rcts:
            m = rct["metadata"]
            if m["labels"][CD_LABEL] not in live:
                path = self._rct_path(m["namespace"], m["name"])
                self._delete(path)
                self._release(path)
                done["templates"].append(f"{m['namespace']}/{m['name']}")
        for ds in daemon_sets:
            m = ds["metadata"]
            if m["labels"][CD_LABEL] not in live:
                path = f"{self._ds_path()}/{m['name']}"
                self._delete(path)
                self._release(path)
                done["daemonSets"].append(m["name"])
        for clique in cliques:
            m = clique["metadata"]
            if m["labels"][CD_LABEL] not in live:
                self._delete(
                    f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{CLIQUE_PLURAL}/{m['name']}"
                )
                done["cliques"].append(m["name"])
        for node in nodes:
            uid = node["metadata"]["labels"][CD_LABEL]
            if uid not in live and self.remove_node_labels(uid):
                done["nodes"].append(node["metadata"]["name"])
        if any(done.values()):
            log.info("orphans cleaned up", extra=done)
        return done
