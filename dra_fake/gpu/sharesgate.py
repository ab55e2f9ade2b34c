"""Whether the API server can honour consumable shares, decided once at start-up, before the first
slice is published (docs/sharing-design.md#13-version-gating-refuse-instead-of-a-half-working-slice),
by the shared probe of dra_fake.core.fieldgate; this module is its data.

A server without the fields silently strips `capacity` from claims (a pod asking for 20Gi would
get a whole GPU), and the 1.34 scheduler checks capacity on the wrong device; so the plugin refuses
to run instead of publishing slices that half work. NVIDIA's plugin only logs the dropped fields.
Facts: docs/reference/kubernetes-dra.md#consumable-capacity-kep-5075.
"""

from __future__ import annotations

from typing import Any

from dra_fake.core.fieldgate import FieldGate

FIELDS_SINCE = (1, 34)  # allowMultipleAllocations, requestPolicy, capacity requests
SCHEDULER_FIXED_IN = (1, 35)  # kubernetes/kubernetes#133705 (capacity checked on the wrong device)

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


def _shared_device_kept(device: dict[str, Any]) -> bool:
    memory = (device.get("capacity") or {}).get("memory") or {}
    return device.get("allowMultipleAllocations") is True and "requestPolicy" in memory


GATE = FieldGate(
    event_reason="ConsumableSharesUnavailable",
    name="consumable-shares",
    probe_device=PROBE_DEVICE,
    device_kept=_shared_device_kept,
    too_old=(
        (
            FIELDS_SINCE,
            "{setting} needs consumable capacity (resource.k8s.io fields added in Kubernetes 1.34, "
            "feature gate DRAConsumableCapacity); the API server is {server}",
        ),
        (
            SCHEDULER_FIXED_IN,
            "{setting}: the Kubernetes 1.34 scheduler checks capacity on the wrong device "
            "(kubernetes/kubernetes#133705, fixed in 1.35.0), so one full shared GPU blocks every device "
            "of its node; use Kubernetes 1.35 or later (the API server is {server})",
        ),
    ),
    dropped=(
        "{setting}: the API server dropped allowMultipleAllocations from a ResourceSlice: turn on the "
        "feature gate DRAConsumableCapacity on kube-apiserver and kube-scheduler (alpha and off in "
        "Kubernetes 1.34 and 1.35, on by default from 1.36)"
    ),
    probe_noun="a shared device",
    kept_noun="shared devices' fields",
)
