"""Whether the API server can honour idle-GPU lending, decided once at start-up, before the first
slice is published (docs/sharing.md). Lending without device taints would be overselling with no
reclaim: a server without them strips the lend views' taints, so every lend view would be freely
allocatable and never evicted. So the plugin refuses to run, as for consumable shares
(dra_fake.gpu.sharesgate, whose dry run it reuses).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from dra_fake.gpu.lending import SPOT_TAINT
from dra_fake.gpu.sharesgate import dry_run_create, git_version, probe_manifest

if TYPE_CHECKING:
    from kubernetes import client

    from dra_fake.core.resourceapi import ServerInfo

EVENT_REASON = "GpuLendingUnavailable"
SETTING = "--gpu-lending"
DEVICE_TAINTS_SINCE = (1, 33)  # DRADeviceTaints (alpha in 1.33, on by default from 1.36)
PROBE_DEVICE: dict[str, Any] = {
    "name": "gpu-lending-probe",
    "taints": [
        {"key": SPOT_TAINT, "value": "true", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
    ],
}


def version_refusal(version: tuple[int, int], server_version: str) -> str | None:
    if version < DEVICE_TAINTS_SINCE:
        return (
            f"{SETTING} needs device taints (feature gate DRADeviceTaints, Kubernetes 1.33+); "
            f"the API server is {server_version}"
        )
    return None


def dropped_refusal() -> str:
    return (
        f"{SETTING}: the API server dropped the taints of a ResourceSlice device: turn on the feature gate "
        "DRADeviceTaints on kube-apiserver, kube-scheduler and kube-controller-manager (alpha and off "
        "before 1.36)"
    )


def taints_kept(stored: dict[str, Any]) -> bool:
    devices = (stored.get("spec") or {}).get("devices") or []
    if not devices:
        return False
    device = devices[0].get("basic", devices[0])  # v1beta1 nests the device's fields
    return bool(device.get("taints"))


def server_refusal(
    api: client.ApiClient, server: ServerInfo, driver: str, node: str, stop: threading.Event
) -> str | None:
    """Why this server cannot serve lending (its version, else what a dry run kept), or None."""
    from kubernetes.client.exceptions import ApiException

    from dra_fake.core.retry import with_backoff

    if server.version < DEVICE_TAINTS_SINCE:
        return version_refusal(server.version, with_backoff("GET /version", lambda: git_version(api), stop))

    def probe() -> dict[str, Any] | str:
        try:
            return dry_run_create(api, probe_manifest(server, driver, node, PROBE_DEVICE))
        except ApiException as err:
            if err.status is None or not 400 <= err.status < 500 or err.status == 429:
                raise  # the server is away or busy: retried
            refused = f"{err.status} {err.reason}"
            return (
                f"{SETTING}: the API server refused a dry-run ResourceSlice with a tainted device: {refused}"
            )

    answer = with_backoff("gpu-lending dry-run ResourceSlice", probe, stop)
    if isinstance(answer, str):
        return answer
    return None if taints_kept(answer) else dropped_refusal()
