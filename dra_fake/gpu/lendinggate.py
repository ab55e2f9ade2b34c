"""Whether the API server can honour idle-GPU lending, decided once at start-up, before the first
slice is published (docs/sharing.md), by the shared probe of dra_fake.core.fieldgate; this module
is its data. Lending without device taints would be overselling with no reclaim: a server without
them strips the lend views' taints, so every lend view would be freely allocatable and never
evicted. So the plugin refuses to run, as for consumable shares (dra_fake.gpu.sharesgate).
"""

from __future__ import annotations

from typing import Any

from dra_fake.core.fieldgate import FieldGate
from dra_fake.gpu.lending import SPOT_TAINT

SETTING = "--gpu-lending"
DEVICE_TAINTS_SINCE = (1, 33)  # DRADeviceTaints (alpha in 1.33, on by default from 1.36)
PROBE_DEVICE: dict[str, Any] = {
    "name": "gpu-lending-probe",
    "taints": [
        {"key": SPOT_TAINT, "value": "true", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
    ],
}

GATE = FieldGate(
    event_reason="GpuLendingUnavailable",
    name="gpu-lending",
    probe_device=PROBE_DEVICE,
    device_kept=lambda device: bool(device.get("taints")),
    too_old=(
        (
            DEVICE_TAINTS_SINCE,
            "{setting} needs device taints (feature gate DRADeviceTaints, Kubernetes 1.33+); "
            "the API server is {server}",
        ),
    ),
    dropped=(
        "{setting}: the API server dropped the taints of a ResourceSlice device: turn on the feature gate "
        "DRADeviceTaints on kube-apiserver, kube-scheduler and kube-controller-manager (alpha and off "
        "before 1.36)"
    ),
    probe_noun="a tainted device",
    kept_noun="device taints",
)
