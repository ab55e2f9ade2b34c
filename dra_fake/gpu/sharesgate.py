"""Whether the API server can honour consumable shares, decided once at start-up, before the first
slice is published (docs/sharing-design.md#13-version-gating-refuse-instead-of-a-half-working-slice).

A server without the fields silently strips `capacity` from claims (a pod asking for 20Gi would
get a whole GPU), and the 1.34 scheduler checks capacity on the wrong device; so the plugin refuses
to run instead of publishing slices that half work. NVIDIA's plugin only logs the dropped fields.
Facts: docs/reference/kubernetes-dra.md#consumable-capacity-kep-5075.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from dra_fake.core.slices import DesiredSlice, slice_manifest, slice_spec

if TYPE_CHECKING:
    from kubernetes import client

    from dra_fake.core.resourceapi import ServerInfo

log = logging.getLogger(__name__)

EVENT_REASON = "ConsumableSharesUnavailable"
FIELDS_SINCE = (1, 34)  # allowMultipleAllocations, requestPolicy, capacity requests
SCHEDULER_FIXED_IN = (1, 35)  # kubernetes/kubernetes#133705 (capacity checked on the wrong device)


def version_refusal(setting: str, version: tuple[int, int], git_version: str) -> str | None:
    """Why a server of `version` cannot serve shares, or None when only the probe can tell.
    `setting`: what turned sharing on, as the message names it (`--consumable-shares=memory`)."""
    if version < FIELDS_SINCE:
        return (
            f"{setting} needs consumable capacity (resource.k8s.io fields added in Kubernetes 1.34, "
            f"feature gate DRAConsumableCapacity); the API server is {git_version}"
        )
    if version < SCHEDULER_FIXED_IN:
        return (
            f"{setting}: the Kubernetes 1.34 scheduler checks capacity on the wrong device "
            "(kubernetes/kubernetes#133705, fixed in 1.35.0), so one full shared GPU blocks every device "
            f"of its node; use Kubernetes 1.35 or later (the API server is {git_version})"
        )
    return None


def dropped_refusal(setting: str) -> str:
    """The server accepted a shared device but dropped its fields: its gate is off."""
    return (
        f"{setting}: the API server dropped allowMultipleAllocations from a ResourceSlice: turn on the "
        "feature gate DRAConsumableCapacity on kube-apiserver and kube-scheduler (alpha and off in "
        "Kubernetes 1.34 and 1.35, on by default from 1.36)"
    )


PROBE_DEVICE: dict[str, Any] = {
    "name": "consumable-shares-probe",
    "allowMultipleAllocations": True,
    "capacity": {
        "memory": {
            "value": "1Gi",
            "requestPolicy": {"default": "1Mi", "validRange": {"min": "1Mi", "max": "1Gi", "step": "1Mi"}},
        }
    },
}


def probe_manifest(
    server: ServerInfo, driver: str, node: str, device: dict[str, Any] = PROBE_DEVICE
) -> dict[str, Any]:
    """A one-device slice of this node's pool with the fields a shared device (or `device`) needs,
    for a dry run (nothing is stored; it names this node, as the chart's admission policy requires)."""
    version = server.resource_version
    spec = slice_spec(
        DesiredSlice(devices=[device]),
        api_version=version,
        driver=driver,
        pool_name=node,
        node_name=node,
        generation=1,
        slice_count=1,
    )
    name = f"{node}-{driver}-{device['name']}"
    return slice_manifest(spec, api_version=version, name=name, owner_node_name=node, owner_node_uid=None)


def fields_kept(stored: dict[str, Any]) -> bool:
    """Whether the dry run's answer still has what a shared device needs."""
    devices = (stored.get("spec") or {}).get("devices") or []
    if not devices:
        return False
    device = devices[0].get("basic", devices[0])  # v1beta1 nests the device's fields
    memory = (device.get("capacity") or {}).get("memory") or {}
    return device.get("allowMultipleAllocations") is True and "requestPolicy" in memory


def dry_run_create(api: client.ApiClient, manifest: dict[str, Any]) -> dict[str, Any]:
    """POST the slice with dryRun=All; the object as the server would have stored it."""
    from dra_fake.core.kube import release, request

    version = manifest["apiVersion"]
    resp = request(api, "POST", f"/apis/{version}/resourceslices", query={"dry_run": "All"}, body=manifest)
    try:
        answer: dict[str, Any] = json.loads(resp.read())
    finally:
        release(resp)
    return answer


def git_version(api: client.ApiClient) -> str:
    from dra_fake.core.kube import get_json

    return str(get_json(api, "/version").get("gitVersion", "unknown"))


def server_refusal(
    setting: str, api: client.ApiClient, server: ServerInfo, driver: str, node: str, stop: threading.Event
) -> str | None:
    """Why this server cannot serve shares (the version, else what the dry run kept), or None.
    The dry run is retried while the API server is away; an answer refusing it is the reason."""
    from kubernetes.client.exceptions import ApiException

    from dra_fake.core.retry import with_backoff

    if server.version < SCHEDULER_FIXED_IN:
        return version_refusal(
            setting, server.version, with_backoff("GET /version", lambda: git_version(api), stop)
        )

    def probe() -> dict[str, Any] | str:
        try:
            return dry_run_create(api, probe_manifest(server, driver, node))
        except ApiException as err:
            if err.status is None or not 400 <= err.status < 500 or err.status == 429:
                raise  # the server is away or busy: retried
            return (
                f"{setting}: the API server refused a dry-run ResourceSlice with a shared device: "
                f"{err.status} {err.reason}"
            )

    answer = with_backoff("consumable-shares dry-run ResourceSlice", probe, stop)
    if isinstance(answer, str):
        return answer
    if not fields_kept(answer):
        return dropped_refusal(setting)
    log.info("the API server keeps shared devices' fields", extra={"setting": setting})
    return None
