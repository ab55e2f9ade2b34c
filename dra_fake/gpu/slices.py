"""ResourceSlice content shaped like NVIDIA's gpu.nvidia.com driver publishes it.

Pure and deterministic: `desired_slices` turns an Inventory into slices in the v1 shape (plain,
JSON-ready dicts; dra_fake.core.slices renders them for the server). Layout
(docs/reference/nvidia-gpu-driver.md#3-resourceslices):

- no dynamic MIG on the node: every device in one slice (more slices only past 128 devices);
- dynamic MIG, server < 1.35: one slice per GPU holding its counter set and its devices;
- dynamic MIG, server >= 1.35: the counter sets first (8 per slice), then one devices-only slice
  per GPU (more only past 64 devices).

GPUs are ordered by PCI bus ID and devices by name within a GPU: stable on purpose (NVIDIA's
order changes on every start; `shuffled` imitates that on request, --device-order=shuffled).
Quantities are canonical Kubernetes strings (see `canonical_quantity`), so what the API server
returns compares equal to what was sent.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from dra_fake.core.slices import (
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_CONSUMED_COUNTERS_PER_ENTRY,
    MAX_CONSUMED_COUNTERS_PER_SLICE_BEFORE_1_35,
    MAX_COUNTER_CONSUMPTIONS_PER_DEVICE,
    MAX_COUNTER_SETS_PER_SLICE,
    MAX_COUNTERS_PER_SET,
    MAX_COUNTERS_PER_SLICE_BEFORE_1_35,
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_WITH_COUNTERS,
    PARTITIONABLE_DEVICES_SINCE,
    SPLIT_COUNTER_SLICES_SINCE,
    DesiredSlice,
    canonical_quantity,
)
from dra_fake.gpu import attach
from dra_fake.gpu.devices import AllocatableDevice
from dra_fake.gpu.inventory import MIB, Inventory, PhysicalGpu
from dra_fake.gpu.lending import LENDER_ATTRIBUTE, SPOT_TYPE
from dra_fake.gpu.profiles import GpuProfile, MigProfile
from dra_fake.gpu.shares import SharesMode, shared_capacities

STANDARD_DOMAIN = "resource.kubernetes.io"
_DRIVER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")

# MIG capacity name -> MigProfile field, in NVIDIA's CommonCapacitiesMig set.
MIG_CAPACITIES = {
    "multiprocessors": "multiprocessors",
    "copyEngines": "copy_engines",
    "decoders": "decoders",
    "encoders": "encoders",
    "jpegEngines": "jpeg_engines",
    "ofaEngines": "ofa_engines",
    "memory": "memory_mib",
}


# ---- value encoding -------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)  # a handful of versions, asked for by every device of every node
def semver(raw: str) -> str:
    """NVIDIA publishes versions as semver without leading zeros: 580.95.05 -> 580.95.5, 13.0 -> 13.0.0."""
    parts = [str(int(part)) for part in raw.split(".")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"not a version: {raw!r}")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def counter_name(capacity: str) -> str:
    """Counters are DNS labels: copyEngines -> copy-engines."""
    return re.sub(r"(?<!^)([A-Z])", r"-\1", capacity).lower()


def counter_set_name(gpu: PhysicalGpu) -> str:
    return f"{gpu.name}-counter-set"


def _quantities(values: dict[str, int]) -> dict[str, dict[str, str]]:
    return {name: {"value": canonical_quantity(v)} for name, v in sorted(values.items())}


def _capacity(values: dict[str, int], shares: SharesMode | None) -> dict[str, dict[str, Any]]:
    """A device's capacities; a shared device's with NVIDIA's request policies."""
    return _quantities(values) if shares is None else shared_capacities(values, shares)


# ---- devices ----------------------------------------------------------------------------------


def gpu_attributes(gpu: PhysicalGpu) -> dict[str, dict[str, str]]:
    """Attributes every device of this GPU carries (full GPU and MIG), without type/uuid."""
    profile = gpu.profile
    attributes = {
        "productName": {"string": profile.product_name},
        "brand": {"string": profile.brand},
        "architecture": {"string": profile.architecture},
        "cudaComputeCapability": {"version": semver(profile.cuda_compute_capability)},
        "driverVersion": {"version": semver(profile.driver_version)},
        "cudaDriverVersion": {"version": semver(profile.cuda_driver_version)},
        f"{STANDARD_DOMAIN}/pciBusID": {"string": gpu.pci_bus_id},
        f"{STANDARD_DOMAIN}/pcieRoot": {"string": gpu.pcie_root},
    }
    if profile.addressing_mode is not None:
        attributes["addressingMode"] = {"string": profile.addressing_mode}
    return attributes


def mig_capacity_values(mig: MigProfile) -> dict[str, int]:
    """The seven MIG capacities of a GI profile (memory in bytes)."""
    values: dict[str, int] = {}
    for capacity, attr in MIG_CAPACITIES.items():
        value = getattr(mig, attr)
        if value is None:
            raise ValueError(f"{mig.name}: {capacity} unknown; the inventory should have refused it")
        values[capacity] = value * MIB if capacity == "memory" else value
    return values


def max_mig_capacities(profile: GpuProfile) -> dict[str, int]:
    """Per-dimension maxima over all GI profiles: the dynamic-MIG full GPU and its counter set."""
    maxima: dict[str, int] = {}
    for mig in profile.mig_profiles:
        for name, value in mig_capacity_values(mig).items():
            maxima[name] = max(maxima.get(name, 0), value)
    return maxima


def memory_slice_count(profile: GpuProfile) -> int:
    """N in memory-slice-0..N-1: the largest placement size."""
    return max(p.size for mig in profile.mig_profiles for p in mig.placements)


def counter_set(gpu: PhysicalGpu) -> dict[str, Any]:
    return {"name": counter_set_name(gpu), "counters": _quantities(_all_counters(gpu))}


def _all_counters(gpu: PhysicalGpu) -> dict[str, int]:
    counters = {counter_name(k): v for k, v in max_mig_capacities(gpu.profile).items()}
    counters.update({f"memory-slice-{i}": 1 for i in range(memory_slice_count(gpu.profile))})
    return counters


def full_gpu_device(gpu: PhysicalGpu, device: AllocatableDevice) -> dict[str, Any]:
    attributes = gpu_attributes(gpu) | {"type": {"string": "gpu"}, "uuid": {"string": gpu.uuid}}
    if device.lends is not None:  # a lend view (dra_fake.gpu.lending): out of NVIDIA's classes
        attributes |= {"type": {"string": SPOT_TYPE}, LENDER_ATTRIBUTE: {"string": device.lends}}
    result: dict[str, Any] = {"name": device.name, "attributes": dict(sorted(attributes.items()))}
    if gpu.mig_mode == "dynamic":
        result["capacity"] = _capacity(max_mig_capacities(gpu.profile), device.shares)
        result["consumesCounters"] = [
            {"counterSet": counter_set_name(gpu), "counters": _quantities(_all_counters(gpu))}
        ]
    else:
        result["capacity"] = _capacity({"memory": gpu.profile.memory_mib * MIB}, device.shares)
    return result


def mig_device(gpu: PhysicalGpu, device: AllocatableDevice) -> dict[str, Any]:
    placement = device.mig
    mig = gpu.profile.mig_profile(placement.profile) if placement else None
    if placement is None or mig is None:
        raise ValueError(f"{device.name}: MIG device without a known placement")
    attributes = gpu_attributes(gpu) | {
        "type": {"string": "mig"},
        "parentUUID": {"string": gpu.uuid},
        "profile": {"string": mig.name},
    }
    if device.uuid is not None:  # a dynamic MIG device has no UUID until it is created
        attributes["uuid"] = {"string": device.uuid}
    capacity = mig_capacity_values(mig)
    result: dict[str, Any] = {"name": device.name, "attributes": dict(sorted(attributes.items()))}
    if device.dynamic:
        counters = {counter_name(k): v for k, v in capacity.items()}
        counters.update({f"memory-slice-{i}": 1 for i in placement.memory_slices()})
        result["capacity"] = _capacity(capacity, device.shares)
        result["consumesCounters"] = [
            {"counterSet": counter_set_name(gpu), "counters": _quantities(counters)}
        ]
    else:
        capacity.update({f"memorySlice{i}": 1 for i in placement.memory_slices()})
        result["capacity"] = _capacity(capacity, device.shares)
    return result


def device_entry(
    gpu: PhysicalGpu, device: AllocatableDevice, taints: Mapping[str, list[dict[str, str]]] | None = None
) -> dict[str, Any]:
    entry = full_gpu_device(gpu, device) if device.kind == "gpu" else mig_device(gpu, device)
    if taints and taints.get(device.name):
        entry["taints"] = [dict(t) for t in taints[device.name]]
    if device.shares is not None:  # NVIDIA's ConsumableShares: every GPU and MIG device
        entry["allowMultipleAllocations"] = True
    if gpu.attach is not None:  # fabric-attached: binds only once attached (dra_fake.gpu.attach)
        entry.update(attach.slice_fields())
    _check_device_limits(entry)
    return entry


def _check_device_limits(entry: dict[str, Any]) -> None:
    fields = len(entry["attributes"]) + len(entry.get("capacity", {}))
    if fields > MAX_ATTRIBUTES_AND_CAPACITIES:
        raise ValueError(
            f"{entry['name']}: {fields} attributes+capacities, limit {MAX_ATTRIBUTES_AND_CAPACITIES}"
        )
    consumptions = entry.get("consumesCounters", [])
    if len(consumptions) > MAX_COUNTER_CONSUMPTIONS_PER_DEVICE:
        raise ValueError(f"{entry['name']}: more than {MAX_COUNTER_CONSUMPTIONS_PER_DEVICE} consumesCounters")
    for consumption in consumptions:
        if len(consumption["counters"]) > MAX_CONSUMED_COUNTERS_PER_ENTRY:
            raise ValueError(
                f"{entry['name']}: more than {MAX_CONSUMED_COUNTERS_PER_ENTRY} consumed counters"
            )


# ---- slices -------------------------------------------------------------------------------------


def desired_slices(
    inventory: Inventory,
    driver_name: str,
    server_version: tuple[int, int],
    taints: Mapping[str, list[dict[str, str]]] | None = None,
) -> list[DesiredSlice]:
    """The node pool's slices, in publishing order. Always at least one (maybe empty) slice.
    `taints`: device name -> its device taints (dra_fake.gpu.faults)."""
    if not _DRIVER_NAME.match(driver_name) or len(driver_name) > 63:
        raise ValueError(
            f"invalid driver name {driver_name!r}: a lower-case DNS subdomain of at most 63 chars"
        )
    gpus = sorted(inventory.gpus, key=lambda g: g.pci_bus_id)
    per_gpu = [(gpu, [device_entry(gpu, d, taints) for d in inventory.devices_of(gpu)]) for gpu in gpus]
    if not any(gpu.mig_mode == "dynamic" for gpu in gpus):
        devices = [entry for _, entries in per_gpu for entry in entries]
        return [DesiredSlice(devices=chunk) for chunk in _chunks(devices, _device_limit(devices))] or [
            DesiredSlice()
        ]
    if server_version < PARTITIONABLE_DEVICES_SINCE:
        raise ValueError(
            "dynamic MIG needs partitionable devices (Kubernetes 1.33+ with DRAPartitionableDevices);"
            f" server is {server_version[0]}.{server_version[1]}"
        )
    if server_version < SPLIT_COUNTER_SLICES_SINCE:
        return [
            _combined_slice(gpu, entries) for gpu, entries in per_gpu if entries or gpu.mig_mode == "dynamic"
        ]
    counter_sets = [counter_set(gpu) for gpu, _ in per_gpu if gpu.mig_mode == "dynamic"]
    for counters in counter_sets:
        if len(counters["counters"]) > MAX_COUNTERS_PER_SET:
            raise ValueError(f"{counters['name']}: more than {MAX_COUNTERS_PER_SET} counters")
    slices = [DesiredSlice(shared_counters=c) for c in _chunks(counter_sets, MAX_COUNTER_SETS_PER_SLICE)]
    for _, entries in per_gpu:
        slices += [DesiredSlice(devices=chunk) for chunk in _chunks(entries, _device_limit(entries))]
    return slices


def shuffled(slices: list[DesiredSlice], seed: int) -> list[DesiredSlice]:
    """Each slice's devices in an order fixed by `seed`: NVIDIA's plugin lists them in a new order
    on every start (docs/reference/nvidia-gpu-driver.md#8-observed-in-captures-v041), and a test
    that depends on the order should fail here too. One seed per plugin start, so the slices do
    not churn between syncs."""
    rng = random.Random(seed)
    return [replace(s, devices=rng.sample(s.devices, len(s.devices))) for s in slices]


def _combined_slice(gpu: PhysicalGpu, entries: list[dict[str, Any]]) -> DesiredSlice:
    """Before 1.35 a device may only consume counters of its own slice: one GPU, one slice."""
    counters = [counter_set(gpu)] if gpu.mig_mode == "dynamic" else []
    total_counters = sum(len(c["counters"]) for c in counters)
    consumed = sum(len(c["counters"]) for e in entries for c in e.get("consumesCounters", []))
    if len(entries) > MAX_DEVICES_PER_SLICE or total_counters > MAX_COUNTERS_PER_SLICE_BEFORE_1_35:
        raise ValueError(f"{gpu.name}: too many devices or counters for one slice on a server before 1.35")
    if consumed > MAX_CONSUMED_COUNTERS_PER_SLICE_BEFORE_1_35:
        raise ValueError(f"{gpu.name}: {consumed} consumed counters in one slice, limit 1024")
    return DesiredSlice(devices=entries, shared_counters=counters)


def _device_limit(entries: Iterable[dict[str, Any]]) -> int:
    advanced = any("consumesCounters" in e or "taints" in e for e in entries)
    return MAX_DEVICES_PER_SLICE_WITH_COUNTERS if advanced else MAX_DEVICES_PER_SLICE


def _chunks(items: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
