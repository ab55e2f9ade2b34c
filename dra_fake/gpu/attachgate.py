"""Whether the API server keeps binding conditions, decided once at start-up before the first slice
(as dra_fake.gpu.sharesgate does for shared devices).

A server without DRADeviceBindingConditions (or DRAResourceClaimDeviceStatus) silently drops
`bindsToNode`, `bindingConditions` and `bindingFailureConditions` from a slice: the scheduler would
then bind pods to fabric-attached GPUs that were never attached. The plugin refuses to run instead.
Facts: docs/reference/kubernetes-dra.md#binding-conditions.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from dra_fake.gpu import attach

if TYPE_CHECKING:
    from kubernetes import client

    from dra_fake.core.resourceapi import ServerInfo

log = logging.getLogger(__name__)

EVENT_REASON = "BindingConditionsUnavailable"
SETTING = "the inventory's attach (fabric-attached GPUs)"

PROBE_DEVICE: dict[str, Any] = {
    "name": "binding-conditions-probe",
    "capacity": {"memory": {"value": "1Gi"}},
    **attach.slice_fields(),
}


def version_refusal(version: tuple[int, int], git_version: str) -> str | None:
    if version < attach.FIELDS_SINCE:
        return (
            f"{SETTING} needs binding conditions (resource.k8s.io fields added in Kubernetes 1.34, "
            f"feature gates DRADeviceBindingConditions and DRAResourceClaimDeviceStatus); the API "
            f"server is {git_version}"
        )
    return None


def dropped_refusal() -> str:
    return (
        f"{SETTING}: the API server dropped bindingConditions from a ResourceSlice: turn on the "
        "feature gates DRADeviceBindingConditions and DRAResourceClaimDeviceStatus on kube-apiserver "
        "and kube-scheduler (alpha and off in Kubernetes 1.34 and 1.35, beta and on from 1.36)"
    )


def fields_kept(stored: dict[str, Any]) -> bool:
    devices = (stored.get("spec") or {}).get("devices") or []
    if not devices:
        return False
    device = devices[0].get("basic", devices[0])  # v1beta1 nests the device's fields
    return bool(device.get("bindingConditions")) and device.get("bindsToNode") is True


def server_refusal(
    api: client.ApiClient, server: ServerInfo, driver: str, node: str, stop: threading.Event
) -> str | None:
    """Why this server cannot serve fabric-attached GPUs, or None (the dry run retried while the
    API server is away; one refusing it is the reason)."""
    from kubernetes.client.exceptions import ApiException

    from dra_fake.core.retry import with_backoff
    from dra_fake.gpu.sharesgate import dry_run_create, git_version, probe_manifest

    if server.version < attach.FIELDS_SINCE:
        return version_refusal(server.version, with_backoff("GET /version", lambda: git_version(api), stop))

    def probe() -> dict[str, Any] | str:
        try:
            return dry_run_create(api, probe_manifest(server, driver, node, PROBE_DEVICE))
        except ApiException as err:
            if err.status is None or not 400 <= err.status < 500 or err.status == 429:
                raise
            return (
                f"{SETTING}: the API server refused a dry-run ResourceSlice with binding conditions: "
                f"{err.status} {err.reason}"
            )

    answer = with_backoff("binding-conditions dry-run ResourceSlice", probe, stop)
    if isinstance(answer, str):
        return answer
    if not fields_kept(answer):
        return dropped_refusal()
    log.info("the API server keeps binding conditions")
    return None
