"""`dra-fake device-plugin`'s preferred allocation, as NVIDIA's (docs/reference/nvidia-device-plugin.md
B.5): whole GPUs aligned by PCIe links and NVLink, NVIDIA's best-effort search, replicas, MIG devices,
and its errors."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from dra_fake.deviceplugin.allocate import cdi_spec, container_response
from dra_fake.deviceplugin.config import (
    ConfigError,
    Flags,
    PluginConfig,
    ReplicatedResource,
    Sharing,
    resolve,
)
from dra_fake.deviceplugin.preferred import PreferredAllocationError, preferred
from dra_fake.deviceplugin.resources import Resource, build_resources
from dra_fake.deviceplugin.topology import Link, best_effort, link_score
from tests.devicepluginnode import A100_STATIC, inventory

# ---- preferred allocation (NVIDIA's, docs/reference/nvidia-device-plugin.md B.5) ------------------


def ids_of(resource: Resource, *indices: int | str) -> list[str]:
    """Device IDs by GPU index (whole GPUs) or "<gpu>::<replica>" (replicas)."""
    by_key = {(d.index if d.replica is None else f"{d.index}::{d.replica}"): d.id for d in resource.devices}
    return [by_key[str(i)] for i in indices]


H100S = build_resources(inventory(), PluginConfig())[0]  # 8 GPUs, two per PCIe root: 0-1, 2-3, 4-5, 6-7


@pytest.mark.parametrize(
    ("available", "must", "size", "expected"),
    [
        pytest.param(range(8), [], 1, [0], id="one: the first"),
        pytest.param(range(8), [], 2, [0, 1], id="two: a pair on one root"),
        pytest.param([1, 2, 3, 5], [], 2, [2, 3], id="two: the split keeping 2-3 together wins"),
        pytest.param([0, 2, 4, 6], [], 2, [0, 2], id="no pair shares a root: the first"),
        pytest.param(range(8), [3], 2, [2, 3], id="must-include 3: its root partner"),
        pytest.param(range(8), [1, 2], 2, [1, 2], id="must-include fills the size"),
        pytest.param(range(8), [], 4, [0, 1, 2, 3], id="four: two whole roots"),
        pytest.param(
            [0, 2, 3, 5, 6, 7], [], 4, [0, 2, 3, 5], id="four of six: the split's padded pair 6-7 scores too"
        ),
        pytest.param(range(8), [5], 3, [3, 4, 5], id="three with padding, must-include 5: first best split"),
        pytest.param(range(1, 8), [0], 2, [], id="must-include not available: nothing"),
        pytest.param(range(8), [0, 1, 2], 2, [], id="more must-include than the size: nothing"),
        pytest.param([0, 1], [], 3, [], id="fewer available than the size: nothing"),
        pytest.param(range(8), [], 0, [], id="size 0: nothing"),
    ],
)
def test_whole_gpus_aligned_by_pcie_links(
    available: Any, must: list[int], size: int, expected: list[int]
) -> None:
    shuffled = list(reversed(ids_of(H100S, *available)))  # the kubelet's order is unspecified
    got = preferred(H100S, shuffled, ids_of(H100S, *must), size)
    assert got == ids_of(H100S, *expected)


def test_best_effort_aligns_on_nvlink() -> None:
    """The policy on NVIDIA's own example of a PCIe node with NVLink bridges (k8s-device-plugin
    issue #546, `nvidia-smi topo -m`: NV12 between 0-2, 1-3, 4-5, 6-7, SYS elsewhere)."""
    bridged = {frozenset(p) for p in ((0, 2), (1, 3), (4, 5), (6, 7))}

    def score(a: str, b: str) -> int:
        links = [Link.CROSS_CPU] + ([Link.nvlinks(12)] if frozenset((int(a), int(b))) in bridged else [])
        return sum(link_score(link) for link in links)

    gpus = [str(i) for i in range(8)]
    assert best_effort(gpus, [], 2, score) == ["0", "2"]
    assert best_effort(["0", "1", "4", "5"], [], 2, score) == ["4", "5"]
    assert best_effort(gpus, ["3"], 2, score) == ["1", "3"]
    assert best_effort(gpus, [], 4, score) == ["0", "1", "2", "3"]
    assert link_score(Link.nvlinks(18)) == 1800 and link_score(Link.SAME_BOARD) == 60
    with pytest.raises(ValueError, match="1 to 18"):
        Link.nvlinks(19)


def nvidia_best_effort(available: list[str], required: list[str], size: int, score: Any) -> list[str]:
    """go-gpuallocator's search as it is written: every split in its order, the first best kept
    (B.5), for checking our memoised one; padded sets are never answered (ours neither)."""
    n = len(available)
    if size <= 0 or n < size or len(required) > size or len(required) > n:
        return []
    places = list(range(n)) + [n] * ((-n) % size)  # n: an empty place
    padding = places.count(n)

    def set_score(group: list[int]) -> int:
        real = [available[p] for p in group if p < n]
        return sum(score(a, b) for i, a in enumerate(real) for b in real[i + 1 :])

    def holds(group: list[int]) -> bool:
        return all(available.index(r) in group for r in required) if required else True

    best: tuple[int, list[list[int]]] | None = None

    def walk(left: list[int], acc: list[list[int]]) -> None:
        nonlocal best
        if len(left) == size:
            split = [*acc, left]
            if any(holds(g) and n not in g for g in split):
                total = sum(set_score(g) for g in split)
                if best is None or total > best[0]:
                    best = (total, split)
            return
        for partners in itertools.combinations(range(1, len(left)), size - 1):
            group = [left[0], *(left[i] for i in partners)]
            if group.count(n) not in (0, padding):
                continue
            walk([p for i, p in enumerate(left) if i and i not in partners], [*acc, group])

    walk(places, [])
    if best is None or any(r not in available for r in required):
        return []
    sets = [g for g in best[1] if holds(g) and n not in g]
    return [available[p] for p in max(sets, key=set_score)] if sets else []


@pytest.mark.parametrize("seed", range(12))
def test_best_effort_matches_nvidias_search(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 8)
    gpus = [f"g{i}" for i in range(n)]
    links = {
        frozenset(p): rng.choice([10, 20, 30, 50, 100, 200, 1210]) for p in itertools.combinations(gpus, 2)
    }

    def score(a: str, b: str) -> int:
        return links[frozenset((a, b))]

    for size in range(1, n + 1):
        required = rng.sample(gpus, rng.randint(0, min(size, 2)))
        assert best_effort(gpus, required, size, score) == nvidia_best_effort(gpus, required, size, score), (
            seed,
            size,
            required,
        )


def replicated(count: int, replicas: int, policy: str = "distributed") -> Resource:
    sharing = Sharing("time-slicing", False, False, (ReplicatedResource("nvidia.com/gpu", replicas),))
    config = PluginConfig(sharing=sharing, shared_devices_allocation_policy=policy)
    [resource] = build_resources(inventory({"gpus": [{"profile": "t4", "count": count}]}), config)
    return resource


TWELVE = replicated(2, 12)  # 2 GPUs, 12 replicas each: IDs ::0 .. ::11


@pytest.mark.parametrize(
    ("available", "must", "size", "policy", "expected"),
    [
        pytest.param(None, [], 3, "distributed", ["0::0", "1::0", "0::1"], id="distributed: alternate GPUs"),
        pytest.param(
            [f"0::{r}" for r in range(10, 12)] + [f"1::{r}" for r in range(12)],
            [],
            3,
            "distributed",
            ["1::0", "1::1", "1::2"],
            id="distributed: the least used GPU",
        ),
        pytest.param(["0::2", "0::10", "0::11"], [], 1, "distributed", ["0::2"], id="replica 2 before 10"),
        pytest.param(
            [f"0::{r}" for r in range(5, 12)] + [f"1::{r}" for r in range(12)],
            [],
            2,
            "packed",
            ["0::5", "0::6"],
            id="packed: the most used GPU",
        ),
        pytest.param(None, [], 2, "packed", ["0::0", "0::1"], id="packed: none used, one GPU"),
        pytest.param(
            None, ["1::3"], 2, "distributed", ["1::3", "0::0"], id="must-include first, counts as used"
        ),
        pytest.param(
            None,
            ["1::3", "1::4", "0::1"],
            2,
            "distributed",
            ["1::3", "1::4", "0::1"],
            id="more must than size",
        ),
    ],
)
def test_replicas_greedy_as_nvidia(
    available: list[str] | None, must: list[str], size: int, policy: str, expected: list[str]
) -> None:
    offered = list(reversed(ids_of(TWELVE, *available))) if available else [d.id for d in TWELVE.devices]
    assert preferred(TWELVE, offered, ids_of(TWELVE, *must), size, policy) == ids_of(TWELVE, *expected)


def test_numeric_order_past_ten() -> None:
    """GPU 10 after 9 and replica ::10 after ::9: in ListAndWatch, preferred allocations, the CDI spec."""
    assert [d.id.rsplit("::", 1)[1] for d in TWELVE.devices[:12]] == [str(r) for r in range(12)]
    twelve_gpus = build_resources(inventory({"gpus": [{"profile": "t4", "count": 12}]}), PluginConfig())[0]
    assert [d.index for d in twelve_gpus.devices] == [str(i) for i in range(12)]
    # two replicas each, GPU 2 and 10 each with one in use: equal, so the lower index
    pairs = replicated(12, 2)
    assert preferred(pairs, ids_of(pairs, "10::1", "2::1"), [], 1) == ids_of(pairs, "2::1")
    # t4s on four roots: 0-3 pci0000:00, 4-7 pci0001:00, 8-11 pci0002:00; 9 and 10 share one
    assert preferred(twelve_gpus, ids_of(twelve_gpus, 10, 2, 9), [], 2) == ids_of(twelve_gpus, 9, 10)
    spec = cdi_spec([twelve_gpus], PluginConfig(device_id_strategy="index"), None, None)
    assert [d["name"] for d in spec["devices"]] == [str(i) for i in range(12)]
    # Allocate keeps the kubelet's order, as NVIDIA does for UUIDs
    answer = container_response(
        twelve_gpus, ids_of(twelve_gpus, 10, 2), PluginConfig(device_id_strategy="index"), None
    )
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == "10,2"


def test_mig_devices_and_errors() -> None:
    mixed = build_resources(inventory(A100_STATIC), PluginConfig(mig_strategy="mixed"))
    small = next(r for r in mixed if r.name == "nvidia.com/mig-1g.5gb")
    migs = [d.id for d in small.devices]
    assert preferred(small, list(reversed(migs)), [], 1) == [migs[0]]  # MIG: greedy, not aligned
    with pytest.raises(
        PreferredAllocationError,
        match=r"^error getting list of preferred allocation devices: "
        r"not enough available devices to satisfy allocation$",
    ):
        preferred(small, migs, [], 3)
    with pytest.raises(
        PreferredAllocationError,
        match="unable to retrieve list of available devices: no device with uuid: GPU-x",
    ):
        preferred(H100S, ["GPU-x"], [], 1)
    with pytest.raises(ConfigError, match=r"^invalid --shared-devices-allocation-policy option: spread$"):
        resolve(Flags(shared_devices_allocation_policy="spread"))
    assert (
        resolve(
            Flags(), "flags: {plugin: {sharedDevicesAllocationPolicy: packed}}"
        ).shared_devices_allocation_policy
        == "packed"
    )
