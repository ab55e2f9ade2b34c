"""Whether the API server keeps binding conditions, decided once at start-up before the first slice
by the shared probe of dra_fake.core.fieldgate; this module is its data.

A server without DRADeviceBindingConditions (or DRAResourceClaimDeviceStatus) silently drops
`bindsToNode`, `bindingConditions` and `bindingFailureConditions` from a slice: the scheduler would
then bind pods to fabric-attached GPUs that were never attached. The plugin refuses to run instead.
Facts: docs/reference/kubernetes-dra.md#binding-conditions.
"""

from __future__ import annotations

from typing import Any

from dra_fake.core.fieldgate import FieldGate
from dra_fake.gpu import attach

SETTING = "the inventory's attach (fabric-attached GPUs)"

PROBE_DEVICE: dict[str, Any] = {
    "name": "binding-conditions-probe",
    "capacity": {"memory": {"value": "1Gi"}},
    **attach.slice_fields(),
}


def _binding_conditions_kept(device: dict[str, Any]) -> bool:
    return bool(device.get("bindingConditions")) and device.get("bindsToNode") is True


GATE = FieldGate(
    event_reason="BindingConditionsUnavailable",
    name="binding-conditions",
    probe_device=PROBE_DEVICE,
    device_kept=_binding_conditions_kept,
    too_old=(
        (
            attach.FIELDS_SINCE,
            "{setting} needs binding conditions (resource.k8s.io fields added in Kubernetes 1.34, "
            "feature gates DRADeviceBindingConditions and DRAResourceClaimDeviceStatus); the API "
            "server is {server}",
        ),
    ),
    dropped=(
        "{setting}: the API server dropped bindingConditions from a ResourceSlice: turn on the "
        "feature gates DRADeviceBindingConditions and DRAResourceClaimDeviceStatus on kube-apiserver "
        "and kube-scheduler (alpha and off in Kubernetes 1.34 and 1.35, beta and on from 1.36)"
    ),
    probe_noun="binding conditions",
    kept_noun="binding conditions",
)
