"""ResourceSlices of any driver: what to publish (DesiredSlice, in the resource.k8s.io/v1 shape),
rendered for the version the server serves, the API's limits and version facts, and quantities
written as the server stores them (so what it returns compares equal to what was sent).
Limits and versions: docs/reference/kubernetes-dra.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

ApiVersion = Literal["v1", "v1beta2", "v1beta1"]
API_VERSIONS: tuple[ApiVersion, ...] = ("v1", "v1beta2", "v1beta1")
RESOURCE_GROUP = "resource.k8s.io"

# Limits from k8s.io/api resource types (docs/reference/kubernetes-dra.md#limits).
MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_COUNTERS = 64  # when any device consumes counters or has taints
MAX_ATTRIBUTES_AND_CAPACITIES = 32  # per device
MAX_COUNTERS_PER_SLICE_BEFORE_1_35 = 32  # sum over all counter sets of one slice
MAX_CONSUMED_COUNTERS_PER_SLICE_BEFORE_1_35 = 1024
MAX_COUNTER_SETS_PER_SLICE = 8  # 1.35+
MAX_COUNTERS_PER_SET = 32  # 1.35+
MAX_COUNTER_CONSUMPTIONS_PER_DEVICE = 2  # 1.35+
MAX_CONSUMED_COUNTERS_PER_ENTRY = 32

PARTITIONABLE_DEVICES_SINCE = (1, 33)  # sharedCounters / consumesCounters exist
SPLIT_COUNTER_SLICES_SINCE = (1, 35)  # counters and devices may no longer share a slice


@dataclass(frozen=True)
class DesiredSlice:
    """One ResourceSlice's devices and shared counter sets, in the resource.k8s.io/v1 shape."""

    devices: list[dict[str, Any]] = field(default_factory=list)
    shared_counters: list[dict[str, Any]] = field(default_factory=list)


# ---- value encoding -------------------------------------------------------------------------


def canonical_quantity(value: int) -> str:
    """The string the API server stores for this integer quantity, so it round-trips unchanged.

    Multiples of 1024 use binary suffixes (`81559Mi`, `80Gi`), as Go's BinarySI quantities
    print; anything else is a plain integer (`132`), with decimal suffixes only for multiples
    of 1000, which is how the server canonicalises a quantity written without suffix.
    """
    if value < 0:
        raise ValueError(f"negative quantity {value}")
    if value and value % 1024 == 0:
        return _with_suffix(value, 1024, ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))
    return _with_suffix(value, 1000, ("", "k", "M", "G", "T", "P", "E"))


def decimal_quantity(value: int) -> str:
    """A count written as a DecimalSI quantity (`4`, `1k`), as the API server stores a quantity
    its writer made decimal (NVIDIA's `shares` capacity), whatever its factors of 1024."""
    if value < 0:
        raise ValueError(f"negative quantity {value}")
    return _with_suffix(value, 1000, ("", "k", "M", "G", "T", "P", "E"))


def _with_suffix(value: int, base: int, suffixes: Sequence[str]) -> str:
    exponent = 0
    while value and value % base == 0 and exponent < len(suffixes) - 1:
        value //= base
        exponent += 1
    return f"{value}{suffixes[exponent]}"


# ---- API objects ----------------------------------------------------------------------------


def slice_spec(
    desired: DesiredSlice,
    *,
    api_version: ApiVersion,
    driver: str,
    pool_name: str,
    node_name: str,
    generation: int,
    slice_count: int,
) -> dict[str, Any]:
    """`spec` of a ResourceSlice in `api_version`. Empty `devices` / `sharedCounters` are left out,
    as the server omits them when reading back (v1beta1 before 1.35 may return `devices: null`)."""
    if api_version not in API_VERSIONS:
        raise ValueError(f"unsupported api version {api_version!r}; one of {API_VERSIONS}")
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node_name,
        "pool": {"generation": generation, "name": pool_name, "resourceSliceCount": slice_count},
    }
    if desired.shared_counters:
        spec["sharedCounters"] = list(desired.shared_counters)
    if desired.devices:
        spec["devices"] = [_device_in(api_version, d) for d in desired.devices]
    return spec


def _device_in(api_version: ApiVersion, device: dict[str, Any]) -> dict[str, Any]:
    """The device as `api_version` has it. Its parts are the desired slice's own, not copies (a
    copy of every device cost fleet mode an eighth of its CPU): nothing writes to a built spec or
    a desired slice."""
    if api_version != "v1beta1":
        return device  # v1beta2 and v1 share the flat device shape
    basic = {k: v for k, v in device.items() if k != "name"}
    return {"name": device["name"], "basic": basic}  # v1beta1: everything but the name under `basic`


def slice_manifest(
    spec: dict[str, Any],
    *,
    api_version: ApiVersion,
    name: str,
    owner_node_name: str,
    owner_node_uid: str | None,
) -> dict[str, Any]:
    """A ResourceSlice object owned by its Node (garbage-collected with it), as the Go helper
    publishes it. `owner_node_uid=None` leaves ownerReferences out (no cluster to ask for it)."""
    metadata: dict[str, Any] = {"name": name}
    if owner_node_uid is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": owner_node_name,
                "uid": owner_node_uid,
                "controller": True,
            }
        ]
    return {
        "apiVersion": f"{RESOURCE_GROUP}/{api_version}",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": dict(spec),  # its own top level; nested parts shared
    }
