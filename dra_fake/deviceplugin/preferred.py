"""GetPreferredAllocation as NVIDIA's device plugin answers it. Pure. Facts:
docs/reference/nvidia-device-plugin.md#b5-getpreferredallocation--options.

- Whole GPUs (every device of the resource a full GPU, no requested ID a replica `::n`): the
  aligned policy, go-gpuallocator's best effort over the GPUs' links (dra_fake.deviceplugin.topology).
- Replicas and MIG devices: a greedy pick, one device at a time, by how many of its GPU's devices
  are in use: `distributed` (NVIDIA's default) prefers the least used GPU, `packed` the most used;
  between equals the GPU picked least often in this answer; the must-include devices first.

Where NVIDIA leaves the order to Go's map iteration (ties, the kubelet's unsorted lists), ours is the
devices' numeric order (GPU index, MIG index, replica: dra_fake.deviceplugin.resources.order_key),
so answers are reproducible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from dra_fake.deviceplugin.resources import REPLICA_SEPARATOR, PluginDevice, Resource, order_key
from dra_fake.deviceplugin.topology import best_effort, link_score, pcie_link

DISTRIBUTED, PACKED = "distributed", "packed"  # config.ALLOCATION_POLICIES
ERROR_PREFIX = "error getting list of preferred allocation devices"


class PreferredAllocationError(ValueError):
    """NVIDIA's plugin answers the kubelet with this error (its message)."""


def preferred(
    resource: Resource,
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    policy: str = DISTRIBUTED,
) -> list[str]:
    known = resource.by_id()
    if aligned_supported(resource) and not any(REPLICA_SEPARATOR in i for i in available):
        return _aligned(known, available, must_include, size)
    return _greedy(resource, known, available, must_include, size, policy)


def aligned_supported(resource: Resource) -> bool:
    """NVIDIA's condition: every device of the resource is a full GPU (no MIG index `g:m`)."""
    return all(":" not in d.index for d in resource.devices)


def gpu_pair_score(a: PluginDevice, b: PluginDevice) -> int:
    """go-gpuallocator's score of two of our GPUs: their PCIe link only. Our NVLink profiles
    (telemetry.nvlink: SXM boards on HGX baseboards) reach each other through NVSwitches, and NVML
    names the switch, not the peer GPU, as each link's remote end, so go-gpuallocator finds no
    NVLink between them (its code: "TODO: Handle NVSwitch semantics"). Were it counted, every pair
    of a node would get the same NV18 score, which changes no choice."""
    return link_score(pcie_link(a.pcie_root, b.pcie_root))


def _aligned(
    known: dict[str, PluginDevice], available: Sequence[str], must_include: Sequence[str], size: int
) -> list[str]:
    for what, ids in (("available", available), ("required", must_include)):
        for device_id in ids:
            if device_id not in known:
                why = f"unable to retrieve list of {what} devices: no device with uuid: {device_id}"
                raise PreferredAllocationError(f"{ERROR_PREFIX}: {why}")
    ordered = sorted(dict.fromkeys(available), key=lambda i: order_key(known[i]))
    return best_effort(
        ordered, list(dict.fromkeys(must_include)), size, lambda a, b: gpu_pair_score(known[a], known[b])
    )


def _greedy(
    resource: Resource,
    known: dict[str, PluginDevice],
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    policy: str,
) -> list[str]:
    required = list(must_include)
    candidates = sorted(
        {i for i in available if i in known} - set(required), key=lambda i: order_key(known[i])
    )
    needed = size - len(required)
    if len(candidates) < needed:
        raise PreferredAllocationError(f"{ERROR_PREFIX}: not enough available devices to satisfy allocation")
    # per GPU (or MIG device): all its advertised devices, and those still free to pick
    total = Counter(d.uuid for d in resource.devices)
    free = Counter(known[i].uuid for i in candidates)
    picked: Counter[str] = Counter()
    sign = -1 if policy == PACKED else 1

    def rank(device_id: str) -> tuple[int, int, tuple[int, ...]]:
        uuid = known[device_id].uuid
        return sign * (total[uuid] - free[uuid]), picked[uuid], order_key(known[device_id])

    chosen = []
    for _ in range(max(needed, 0)):
        best = min(candidates, key=rank)
        candidates.remove(best)
        uuid = known[best].uuid
        picked[uuid] += 1
        free[uuid] -= 1
        chosen.append(best)
    return required + chosen
