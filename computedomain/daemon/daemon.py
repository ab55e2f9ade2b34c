"""The simulated IMEX daemon: what a ComputeDomain daemon pod runs (`dra-fake imex-daemon run|check`).

`run` (docs/reference/nvidia-compute-domains.md#55-daemon-run-and-check): renders the IMEX config from the
directory daemon prepare created (mounted at
/imexd), joins the ComputeDomainClique `<cdUID>.<cliqueID>` in its namespace with the smallest free
index below MAX_NODES_PER_IMEX_DOMAIN (or, off-fabric, labels its pod with an empty clique ID),
"starts IMEX" (records its state for `check`), then keeps its entry's status equal to its pod's
Ready condition until SIGTERM, when it leaves the clique. `check`, the readiness probe, is
computedomain.daemon.check.

Without a container runtime (the local dra-kubelet harness) paths are mapped to the host's
(computedomain.daemon.check.container_path).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomain import imex
from computedomain.api import (
    CD_LABEL,
    CLIQUE_LABEL,
    CLIQUE_PLURAL,
    DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
    GROUP,
    STATUS_NOT_READY,
    STATUS_READY,
    VERSION,
    clique_object_name,
)
from computedomain.daemon.check import container_path
from computedomain.plugin.edits import IMEX_CONTAINER_DIR
from dra_fake.core import logs
from dra_fake.core.atomic import atomic_write
from dra_fake.core.resourceapi import as_dict

log = logging.getLogger(__name__)

CDI_MISSING = "CDI container edits did not apply -- is CDI enabled in your container runtime?"
SYNC_SECONDS = 1.0


class DaemonError(Exception):
    pass


@dataclass(frozen=True)
class DaemonEnv:
    node: str
    pod_ip: str
    pod_name: str
    pod_namespace: str
    pod_uid: str
    clique_id: str
    cd_uid: str
    cd_name: str
    cd_namespace: str
    max_nodes: int

    @classmethod
    def from_environ(cls) -> DaemonEnv:
        env = os.environ
        if not env.get("COMPUTE_DOMAIN_UUID"):
            raise DaemonError(CDI_MISSING)
        missing = [k for k in ("NODE_NAME", "POD_NAME", "POD_NAMESPACE") if not env.get(k)]
        if missing:
            raise DaemonError(f"environment variables {', '.join(missing)} must be set (downward API)")
        return cls(
            node=env["NODE_NAME"],
            pod_ip=env.get("POD_IP", ""),
            pod_name=env["POD_NAME"],
            pod_namespace=env["POD_NAMESPACE"],
            pod_uid=env.get("POD_UID", ""),
            clique_id=env.get("CLIQUE_ID", ""),
            cd_uid=env["COMPUTE_DOMAIN_UUID"],
            cd_name=env.get("COMPUTE_DOMAIN_NAME", ""),
            cd_namespace=env.get("COMPUTE_DOMAIN_NAMESPACE", ""),
            max_nodes=int(env.get("MAX_NODES_PER_IMEX_DOMAIN") or DEFAULT_MAX_NODES_PER_IMEX_DOMAIN),
        )


def smallest_free_index(entries: list[dict[str, Any]], max_nodes: int) -> int:
    used = {e.get("index") for e in entries}
    index = next(i for i in range(len(used) + 1) if i not in used)
    if index >= max_nodes:
        raise DaemonError(f"cannot add more nodes, already at maximum ({max_nodes})")
    return index


class Clique:
    """This daemon's entry in the ComputeDomainClique, written with optimistic concurrency."""

    def __init__(self, api: client.ApiClient, env: DaemonEnv) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.env = env
        self.name = clique_object_name(env.cd_uid, env.clique_id)

    def _owner(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod", "name": self.env.pod_name, "uid": self.env.pod_uid}

    def _get(self) -> dict[str, Any] | None:
        try:
            return as_dict(
                self.custom.get_namespaced_custom_object(
                    GROUP, VERSION, self.env.pod_namespace, CLIQUE_PLURAL, self.name
                )
            )
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def upsert(self, status: str) -> dict[str, Any]:
        """Join (or refresh) with `status`; returns the entry."""
        env = self.env
        for _ in range(20):
            obj = self._get()
            if obj is None:
                entry = {
                    "nodeName": env.node,
                    "ipAddress": env.pod_ip,
                    "cliqueID": env.clique_id,
                    "index": 0,
                    "status": status,
                }
                smallest_free_index([], env.max_nodes)
                body = {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ComputeDomainClique",
                    "metadata": {
                        "name": self.name,
                        "namespace": env.pod_namespace,
                        "labels": {CD_LABEL: env.cd_uid, CLIQUE_LABEL: env.clique_id},
                        "ownerReferences": [self._owner()] if env.pod_uid else [],
                    },
                    "daemons": [entry],
                }
                try:
                    self.custom.create_namespaced_custom_object(
                        GROUP, VERSION, env.pod_namespace, CLIQUE_PLURAL, body
                    )
                    return entry
                except ApiException as err:
                    if err.status == 409:
                        continue
                    raise
            daemons: list[dict[str, Any]] = list(obj.get("daemons") or [])
            mine = next((e for e in daemons if e.get("nodeName") == env.node), None)
            if mine is None:
                mine = {"nodeName": env.node, "index": smallest_free_index(daemons, env.max_nodes)}
                daemons.append(mine)
            wanted = {**mine, "ipAddress": env.pod_ip, "cliqueID": env.clique_id, "status": status}
            owners = obj["metadata"].get("ownerReferences") or []
            if wanted == mine and (not env.pod_uid or any(o.get("uid") == env.pod_uid for o in owners)):
                return mine
            mine.clear()
            mine.update(wanted)
            if env.pod_uid and not any(o.get("uid") == env.pod_uid for o in owners):
                obj["metadata"]["ownerReferences"] = [*owners, self._owner()]
            obj["daemons"] = daemons
            try:
                self.custom.replace_namespaced_custom_object(
                    GROUP, VERSION, env.pod_namespace, CLIQUE_PLURAL, self.name, obj
                )
                return wanted
            except ApiException as err:
                if err.status in (404, 409):
                    continue
                raise
        raise DaemonError(f"ComputeDomainClique {self.name}: too many conflicting updates")

    def leave(self) -> None:
        for _ in range(20):
            obj = self._get()
            if obj is None:
                return
            daemons = [e for e in obj.get("daemons") or [] if e.get("nodeName") != self.env.node]
            if len(daemons) == len(obj.get("daemons") or []):
                return
            obj["daemons"] = daemons
            try:
                self.custom.replace_namespaced_custom_object(
                    GROUP, VERSION, self.env.pod_namespace, CLIQUE_PLURAL, self.name, obj
                )
                return
            except ApiException as err:
                if err.status in (404, 409):
                    continue
                raise

    def peers(self) -> list[tuple[str, int]]:
        obj = self._get() or {}
        return [(str(e.get("ipAddress", "")), int(e.get("index", 0))) for e in obj.get("daemons") or []]


def pod_ready(core: client.CoreV1Api, env: DaemonEnv) -> bool:
    pod = core.read_namespaced_pod(env.pod_name, env.pod_namespace)
    conditions = (pod.status.conditions if pod.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def write_state(directory: Path, state: str) -> None:
    atomic_write(
        directory / imex.STATE_NAME, json.dumps({"pid": os.getpid(), "state": state}).encode(), 0o644
    )


def run(api: client.ApiClient, stop: threading.Event) -> int:
    env = DaemonEnv.from_environ()
    directory = container_path(IMEX_CONTAINER_DIR)
    fields = {"computeDomain": env.cd_uid, "node": env.node, "cliqueID": env.clique_id or '""'}
    core = client.CoreV1Api(api)
    imex.render_config(directory, env.pod_ip)
    if not env.clique_id:
        # Not fabric-attached: no IMEX; the controller lists the pod as a non-fabric node.
        core.patch_namespaced_pod(
            env.pod_name, env.pod_namespace, {"metadata": {"labels": {CLIQUE_LABEL: ""}}}
        )
        write_state(directory, "READY")
        log.info("no clique ID: IMEX not started, daemon idle", extra=fields)
        stop.wait()
        return 0
    clique = Clique(api, env)
    entry = clique.upsert(STATUS_NOT_READY)
    imex.write_nodes(directory, env.max_nodes, clique.peers())
    write_state(directory, "READY")  # the simulated nvidia-imex is up at once (DNS names, no quorum wait)
    log.info("joined clique, IMEX started", extra={**fields, "index": entry.get("index")})
    status = STATUS_NOT_READY
    while not stop.is_set():
        try:
            wanted = STATUS_READY if pod_ready(core, env) else STATUS_NOT_READY
            entry = clique.upsert(wanted)
            if wanted != status:
                log.info("daemon status changed", extra={**fields, "status": wanted})
                status = wanted
            imex.write_nodes(directory, env.max_nodes, clique.peers())
        except Exception as err:  # the loop must outlive any one failure (API outage, full disk)
            log.warning("daemon sync failed, retrying", extra={**fields, "error": str(err)})
        stop.wait(SYNC_SECONDS)
    clique.leave()
    log.info("left clique, daemon stopped", extra=fields)
    return 0


def main(args: Any) -> int:
    logs.setup(args.log_level, args.log_format)
    from dra_fake.core.kube import load_kube_client
    from dra_fake.core.kubeconfig import StartupError

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        api = load_kube_client(args.kubeconfig)
        return run(api, stop)
    except (DaemonError, StartupError) as err:
        print(f"dra-fake imex-daemon: error: {err}", file=sys.stderr)
        return 1
