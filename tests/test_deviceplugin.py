"""`dra-fake device-plugin`: NVIDIA's config and flags, resources under the MIG strategies and
sharing, Allocate per device-list strategy, preferred allocation, and the gRPC servers against a
stand-in kubelet (the real kubelet: e2e/test_device_plugin.py on kind)."""

from __future__ import annotations

import itertools
import os
import random
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_fake.core import cdi
from dra_fake.deviceplugin.allocate import AllocationError, cdi_spec, container_response
from dra_fake.deviceplugin.config import (
    ConfigError,
    Flags,
    PluginConfig,
    ReplicatedResource,
    Sharing,
    resolve,
)
from dra_fake.deviceplugin.configselect import ConfigSelectionError, ConfigSet, parse_fallbacks
from dra_fake.deviceplugin.labelwatch import ConfigLabelWatch
from dra_fake.deviceplugin.plugin import dra_plugin_registered, health_checks, load
from dra_fake.deviceplugin.preferred import PreferredAllocationError, preferred
from dra_fake.deviceplugin.resources import Resource, build_resources
from dra_fake.deviceplugin.server import DeviceHealth, DevicePlugins, unhealthy_uuids
from dra_fake.deviceplugin.topology import Link, best_effort, link_score
from dra_fake.gpu.devices import gpu_uuid
from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.nvidia_smi import NvidiaSmi, binary_bytes, library_bytes, library_dirs
from dra_fake.gpu.profiles import load_profiles
from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2 as pb
from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from e2e.standin_kubelet import StandInKubelet

NODE = "node-a"
TIME_SLICING = """
version: v1
flags:
  migStrategy: none
  failOnInitError: true
  nvidiaDriverRoot: /
  plugin: {passDeviceSpecs: false, deviceListStrategy: envvar, deviceIDStrategy: uuid}
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""  # NVIDIA's documented example, with the flags section its chart writes
A100_STATIC = {
    "gpus": [
        {"profile": "h100-sxm5-80gb"},
        {
            "profile": "a100-sxm4-40gb",
            "mig": "static",
            "migDevices": [
                {"profile": "1g.5gb", "start": 0},
                {"profile": "1g.5gb", "start": 1},
                {"profile": "3g.20gb", "start": 4},
            ],
        },
    ]
}


def inventory(config: dict[str, Any] | None = None) -> Inventory:
    return build_inventory(
        parse_config(config or {"gpus": [{"profile": "h100-sxm5-80gb", "count": 8}]}, "t"),
        NODE,
        load_profiles(),
    )


# ---- configuration ------------------------------------------------------------------------------


def test_defaults_are_nvidias() -> None:
    config = resolve(Flags())
    assert (config.mig_strategy, config.fail_on_init_error, config.device_list_strategy) == (
        "none",
        True,
        ("envvar",),
    )
    assert (config.device_id_strategy, config.cdi_annotation_prefix) == ("uuid", "cdi.k8s.io/")
    assert config.sharing == Sharing()


def test_config_file_and_precedence() -> None:
    config = resolve(Flags(), TIME_SLICING)
    assert config.sharing.strategy == "time-slicing" and config.sharing.replicas("nvidia.com/gpu") == 4
    assert config.sharing.fail_requests_greater_than_one is False  # time-slicing: unset = false
    flagged = resolve(Flags(device_list_strategy="cdi-cri,envvar", mig_strategy="mixed"), TIME_SLICING)
    assert flagged.device_list_strategy == ("cdi-cri", "envvar") and flagged.mig_strategy == "mixed"
    mps = resolve(
        Flags(mps_root="/run/nvidia/mps"), "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}"
    )
    assert mps.sharing.strategy == "mps" and mps.sharing.fail_requests_greater_than_one is True  # MPS: true
    both = (
        "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 3}]},"
        " mps: {resources: [{name: gpu, replicas: 2}]}}"
    )
    assert resolve(Flags(mps_root="/m"), both).sharing.replicas("nvidia.com/gpu") == 2  # MPS wins


@pytest.mark.parametrize(
    ("flags", "text", "message"),
    [
        (Flags(), "version: v2", "unknown version: v2"),
        (Flags(mig_strategy="both"), None, "unknown MIG strategy: both"),
        (
            Flags(device_list_strategy="envvar,nfs"),
            None,
            "invalid --device-list-strategy option: invalid strategy: nfs",
        ),
        (Flags(device_id_strategy="serial"), None, "invalid --device-id-strategy option: serial"),
        (Flags(), "sharing: {timeSlicing: {renameByDefault: true}}", "no resources specified"),
        (Flags(), "sharing: {timeSlicing: {resources: [{replicas: 2}]}}", "no resource name specified"),
        (Flags(), "sharing: {timeSlicing: {resources: [{name: gpu}]}}", "no replicas specified"),
        (
            Flags(),
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}]}}",
            "number of replicas must be >= 2",
        ),
        (
            Flags(),
            "sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: some}]}}",
            "devices set as 'some' but the only valid string input is 'all'",
        ),
        (
            Flags(),
            "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}",
            "using MPS requires --mps-root to be specified",
        ),
        (
            Flags(mig_strategy="mixed", mps_root="/m"),
            "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}",
            "using --mig-strategy=mixed is not supported with MPS",
        ),
        (
            Flags(),
            "flags: {plugin: {deviceListStratgy: envvar}}",
            "flags.plugin: unknown field 'deviceListStratgy'",
        ),
        (Flags(), "sharing: [1]", "sharing: expected a mapping"),
        (Flags(), "{", "not YAML or JSON"),
    ],
)
def test_config_errors_are_nvidias_or_name_the_key(flags: Flags, text: str | None, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(flags, text)
    assert message in str(err.value)


# ---- resources ----------------------------------------------------------------------------------


def test_whole_gpus_are_nvidia_gpu_with_the_dra_views_uuids() -> None:
    [gpus] = build_resources(inventory(), PluginConfig())
    assert gpus.name == "nvidia.com/gpu" and gpus.socket_name == "nvidia-gpu.sock"
    assert [d.id for d in gpus.devices] == [gpu_uuid(NODE, i) for i in range(8)]
    assert [d.index for d in gpus.devices] == [str(i) for i in range(8)]
    assert gpus.devices[3].device.name == "gpu-3"


def test_mig_strategies() -> None:
    inv = inventory(A100_STATIC)
    none = build_resources(inv, PluginConfig(mig_strategy="none"))
    assert [(r.name, len(r.devices)) for r in none] == [("nvidia.com/gpu", 2)]  # the MIG GPU whole
    mixed = build_resources(inv, PluginConfig(mig_strategy="mixed"))
    assert [(r.name, [d.index for d in r.devices]) for r in mixed] == [
        ("nvidia.com/gpu", ["0"]),
        ("nvidia.com/mig-1g.5gb", ["1:0", "1:1"]),
        ("nvidia.com/mig-3g.20gb", ["1:2"]),
    ]
    assert all(d.id.startswith("MIG-") for r in mixed[1:] for d in r.devices)
    with pytest.raises(ConfigError, match="the same migEnabled value"):
        build_resources(inv, PluginConfig(mig_strategy="single"))
    one_profile = {
        "gpus": [
            {
                "profile": "a100-sxm4-40gb",
                "count": 2,
                "mig": "static",
                "migDevices": [{"profile": "1g.5gb", "start": 0}],
            }
        ]
    }
    [single] = build_resources(inventory(one_profile), PluginConfig(mig_strategy="single"))
    assert single.name == "nvidia.com/gpu" and [d.index for d in single.devices] == ["0:0", "1:0"]
    two = {"gpus": [A100_STATIC["gpus"][1]]}
    with pytest.raises(ConfigError, match="more than one MIG device type present on node"):
        build_resources(inventory(two), PluginConfig(mig_strategy="single"))
    with pytest.raises(ConfigError, match="dynamic MIG is a DRA driver feature"):
        build_resources(
            inventory({"gpus": [{"profile": "h100-sxm5-80gb", "mig": "dynamic"}]}), PluginConfig()
        )


def test_replicas_and_renaming() -> None:
    sharing = Sharing("time-slicing", False, False, resolve(Flags(), TIME_SLICING).sharing.resources)
    [gpus] = build_resources(
        inventory({"gpus": [{"profile": "t4", "count": 2}]}), PluginConfig(sharing=sharing)
    )
    uuid0 = gpu_uuid(NODE, 0)
    assert gpus.name == "nvidia.com/gpu" and gpus.replicas == 4
    assert [d.id for d in gpus.devices][:5] == [
        f"{uuid0}::0",
        f"{uuid0}::1",
        f"{uuid0}::2",
        f"{uuid0}::3",
        f"{gpu_uuid(NODE, 1)}::0",
    ]
    renamed = Sharing("time-slicing", True, False, sharing.resources)
    [shared] = build_resources(inventory({"gpus": [{"profile": "t4"}]}), PluginConfig(sharing=renamed))
    assert (shared.name, shared.socket_name) == ("nvidia.com/gpu.shared", "nvidia-gpu.shared.sock")


# ---- Allocate -----------------------------------------------------------------------------------


@pytest.fixture
def smi(tmp_path: Path) -> NvidiaSmi:
    inv = inventory()
    s = NvidiaSmi.from_inventory(tmp_path / "data", inv)
    s.ensure_tools()
    return s


def test_allocate_per_strategy(smi: NvidiaSmi) -> None:
    [gpus] = build_resources(inventory(), PluginConfig())
    ids = [gpus.devices[2].id, gpus.devices[5].id]
    env = container_response(gpus, ids, PluginConfig(), smi)
    assert env.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)} and not env.cdi_devices
    mounted = {m.container_path for m in env.mounts}
    assert "/usr/bin/nvidia-smi" in mounted and len([p for p in mounted if "/devices/" in p]) == 2
    assert {f"{d}/libnvidia-ml.so.1" for d in library_dirs()} <= mounted  # the same mounts as a claim's
    index = container_response(gpus, ids, PluginConfig(device_id_strategy="index"), smi)
    assert index.envs["NVIDIA_VISIBLE_DEVICES"] == "2,5"
    volumes = container_response(gpus, ids, PluginConfig(device_list_strategy=("volume-mounts",)), None)
    assert volumes.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.container_path, m.host_path) for m in volumes.mounts] == [
        (f"/var/run/nvidia-container-devices/{i}", "/dev/null") for i in ids
    ]
    both = PluginConfig(device_list_strategy=("cdi-annotations", "cdi-cri"))
    cdi_answer = container_response(gpus, ids, both, smi, annotation_id="x")
    names = [f"k8s.device-plugin.nvidia.com/gpu={i}" for i in ids]
    assert cdi_answer.cdi_devices == names and not cdi_answer.envs and not cdi_answer.mounts
    assert cdi_answer.annotations == {"cdi.k8s.io/nvidia-device-plugin_x": ",".join(names)}
    mixed = container_response(gpus, ids, PluginConfig(device_list_strategy=("envvar", "cdi-cri")), smi)
    assert mixed.envs == env.envs and mixed.cdi_devices == names and not mixed.mounts  # the spec mounts


def test_allocate_validation_and_replicas(smi: NvidiaSmi) -> None:
    shared = Sharing("time-slicing", False, True, resolve(Flags(), TIME_SLICING).sharing.resources)
    [gpus] = build_resources(inventory(), PluginConfig(sharing=shared))
    with pytest.raises(
        AllocationError,
        match=r'^invalid allocation request for "nvidia.com/gpu": invalid request: '
        r"maximum request size for shared resources is 1; found 2$",
    ):
        container_response(gpus, [gpus.devices[0].id, gpus.devices[1].id], PluginConfig(), smi)
    with pytest.raises(AllocationError, match="invalid request: unknown device: GPU-nope"):
        container_response(gpus, ["GPU-nope"], PluginConfig(), smi)
    lenient = build_resources(
        inventory(), PluginConfig(sharing=Sharing("time-slicing", False, False, shared.resources))
    )[0]
    answer = container_response(lenient, [lenient.devices[0].id, lenient.devices[1].id], PluginConfig(), smi)
    assert answer.envs["NVIDIA_VISIBLE_DEVICES"] == gpu_uuid(NODE, 0)  # two replicas of one GPU: one GPU


def test_mps_sets_the_pipe_directory(smi: NvidiaSmi) -> None:
    config = resolve(
        Flags(mps_root="/run/nvidia/mps"), "sharing: {mps: {resources: [{name: gpu, replicas: 2}]}}"
    )
    [gpus] = build_resources(inventory(), config)
    answer = container_response(gpus, [gpus.devices[0].id], config, smi)
    assert answer.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/run/nvidia/mps/gpu/pipe"


def test_cdi_spec_is_valid_and_names_devices_by_id_strategy(smi: NvidiaSmi) -> None:
    resources = build_resources(inventory(A100_STATIC), PluginConfig(mig_strategy="mixed"))
    for strategy, first in (("uuid", gpu_uuid(NODE, 0)), ("index", "0")):
        spec = cdi_spec(resources, PluginConfig(device_id_strategy=strategy), smi, None)
        cdi.validate_spec(spec)
        assert spec["kind"] == "k8s.device-plugin.nvidia.com/gpu" and spec["devices"][0]["name"] == first
        assert len(spec["devices"]) == 4  # 1 GPU + 3 MIG devices
    assert [
        d["name"] for d in cdi_spec(resources, PluginConfig(device_id_strategy="index"), smi, None)["devices"]
    ] == [
        "0",
        "1:0",
        "1:1",
        "1:2",
    ]


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


def test_health_checks_and_unhealthy_devices() -> None:
    assert health_checks("all") is None and health_checks("xids") is None
    assert health_checks("48,79") == frozenset({13, 31, 43, 45, 68, 109, 48, 79})
    inv = inventory(A100_STATIC)
    mig = next(d for d in inv.devices.values() if d.kind == "mig")
    assert unhealthy_uuids({mig.name: ("Unhealthy", "Xid 79"), "gpu-0": ("Unknown", "")}, inv.devices) == {
        mig.uuid,
        mig.gpu_uuid,  # NVIDIA maps events by the parent GPU (a whole-GPU advertisement turns unhealthy)
    }


def test_refuses_a_node_whose_dra_plugin_is_registered(tmp_path: Path) -> None:
    assert dra_plugin_registered(str(tmp_path), "gpu.nvidia.com") is None
    (tmp_path / "gpu.nvidia.com-0f1e-reg.sock").touch()
    (tmp_path / "compute-domain.nvidia.com-reg.sock").touch()
    assert dra_plugin_registered(str(tmp_path), "gpu.nvidia.com") == str(
        tmp_path / "gpu.nvidia.com-0f1e-reg.sock"
    )


# ---- the gRPC servers against a stand-in kubelet ------------------------------------------------


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="dp", dir="/tmp"))  # unix socket paths are short
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_registers_serves_and_re_registers_after_a_kubelet_restart(plugin_dir: Path, smi: NvidiaSmi) -> None:
    kubelet = StandInKubelet(plugin_dir)
    health = DeviceHealth()
    resources = build_resources(inventory(A100_STATIC), PluginConfig(mig_strategy="mixed"))
    plugins = DevicePlugins(
        resources, PluginConfig(mig_strategy="mixed"), str(plugin_dir / "kubelet.sock"), health, smi
    )
    try:
        plugins.start()
        assert [(v, e, n) for v, e, n, _ in kubelet.registered] == [
            ("v1beta1", "nvidia-gpu.sock", "nvidia.com/gpu"),
            ("v1beta1", "nvidia-mig-1g.5gb.sock", "nvidia.com/mig-1g.5gb"),
            ("v1beta1", "nvidia-mig-3g.20gb.sock", "nvidia.com/mig-3g.20gb"),
        ]
        assert kubelet.registered[0][3].get_preferred_allocation_available
        assert kubelet.first_list["nvidia.com/gpu"] == [(gpu_uuid(NODE, 0), "Healthy")]
        assert oct(os.stat(plugin_dir / "nvidia-gpu.sock").st_mode & 0o777) == "0o660"

        with grpc.insecure_channel(f"unix://{plugin_dir / 'nvidia-mig-1g.5gb.sock'}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            stream = stub.ListAndWatch(pb.Empty(), timeout=30)
            first = next(stream)
            mig0 = first.devices[0].ID
            health.mark({mig0})
            second = next(stream)
            assert [(d.ID, d.health) for d in second.devices] == [
                (mig0, "Unhealthy"),
                (first.devices[1].ID, "Healthy"),
            ]
            answer = stub.Allocate(
                pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=[mig0])])
            )
            assert answer.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == mig0
            with pytest.raises(grpc.RpcError, match="unknown device: MIG-x"):
                stub.Allocate(
                    pb.AllocateRequest(
                        container_requests=[pb.ContainerAllocateRequest(devices_ids=["MIG-x"])]
                    )
                )
            pref = stub.GetPreferredAllocation(
                pb.PreferredAllocationRequest(
                    container_requests=[
                        pb.ContainerPreferredAllocationRequest(
                            available_deviceIDs=[d.ID for d in first.devices], allocation_size=1
                        )
                    ]
                )
            )
            assert list(pref.container_responses[0].deviceIDs) == [mig0]
            with pytest.raises(grpc.RpcError, match="not enough available devices to satisfy allocation"):
                stub.GetPreferredAllocation(
                    pb.PreferredAllocationRequest(
                        container_requests=[
                            pb.ContainerPreferredAllocationRequest(
                                available_deviceIDs=[mig0], allocation_size=2
                            )
                        ]
                    )
                )

        # the kubelet restarts: its socket is re-created, the plugins serve and register again
        assert not plugins.kubelet_restarted()
        kubelet.stop()
        kubelet = StandInKubelet(plugin_dir)
        assert plugins.kubelet_restarted()
        plugins.start()
        assert len(kubelet.registered) == 3 and not plugins.kubelet_restarted()
    finally:
        health.close()
        plugins.stop()
        kubelet.stop()


def test_envvar_answer_gives_nvidia_smi_exactly_the_allocated_gpus(tmp_path: Path, smi: NvidiaSmi) -> None:
    """The mounts an envvar answer carries (what the NVIDIA runtime would add) make the in-pod
    nvidia-smi list exactly the allocated GPUs."""
    [gpus] = build_resources(inventory(), PluginConfig())
    for d in gpus.devices:
        smi.write_info(d.device, d.uuid)
    # the same device file as the DRA driver's (docs/nvml.md), from the same code
    written = smi.info_path(gpus.devices[1].device.name, gpus.devices[1].uuid).read_text()
    assert written == smi.info_text(gpus.devices[1].device, gpus.devices[1].uuid)
    assert "vbios_version=96.00.99.00.01\n" in written and "temp_shutdown=95\n" in written
    answer = container_response(gpus, [gpus.devices[6].id, gpus.devices[1].id], PluginConfig(), smi)
    root = tmp_path / "ctr"
    for m in answer.mounts:
        target = root / m.container_path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if Path(m.host_path).is_dir():
            target.symlink_to(m.host_path)
        else:
            shutil.copy(m.host_path, target)
    assert (root / "usr/bin/nvidia-smi").read_bytes() == binary_bytes()
    assert (root / library_dirs()[0].lstrip("/") / "libnvidia-ml.so.1").read_bytes() == library_bytes()
    out = subprocess.run(
        [str(root / "usr/bin/nvidia-smi"), "-L"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DRA_FAKE_ROOT": str(root)},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert out.stdout == (
        f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {gpu_uuid(NODE, 1)})\n"
        f"GPU 1: NVIDIA H100 80GB HBM3 (UUID: {gpu_uuid(NODE, 6)})\n"
    )


def test_stream_ends_when_the_plugin_stops(plugin_dir: Path, smi: NvidiaSmi) -> None:
    kubelet = StandInKubelet(plugin_dir)
    health = DeviceHealth()
    resources = build_resources(inventory(), PluginConfig())
    plugins = DevicePlugins(resources, PluginConfig(), str(plugin_dir / "kubelet.sock"), health, smi)
    plugins.start()
    started, ended = threading.Event(), threading.Event()

    def watch() -> None:
        with grpc.insecure_channel(f"unix://{plugin_dir / 'nvidia-gpu.sock'}") as channel:
            for _ in pb_grpc.DevicePluginStub(channel).ListAndWatch(pb.Empty(), timeout=60):
                started.set()
        ended.set()  # the stream ended normally: no error raised above

    threading.Thread(target=watch, daemon=True).start()
    assert started.wait(30)
    health.close()  # the plugin stops: its streams end (the kubelet then sees the plugin gone)
    assert ended.wait(30)
    plugins.stop(1)
    kubelet.stop()


def test_dra_plugin_refuses_a_node_a_device_plugin_serves() -> None:
    from dra_fake.gpu.configs import FeatureGates
    from dra_fake.gpu.devnodes import DeviceNodePolicy
    from dra_fake.gpu.plugin import GpuDriver, device_plugin_resources

    node: dict[str, Any] = {
        "metadata": {"name": NODE},
        "status": {"allocatable": {"cpu": "8", "nvidia.com/gpu": "4"}},
    }
    assert device_plugin_resources(node) == ["nvidia.com/gpu"]
    assert device_plugin_resources({"status": {"allocatable": {"nvidia.com/gpu": "0"}}}) == []
    driver = GpuDriver("gpu.nvidia.com", inventory(), FeatureGates(frozenset()), DeviceNodePolicy("never"))
    refusal = driver.refusal(node)
    assert refusal is not None and "advertises nvidia.com/gpu through a device plugin" in refusal
    allowed = GpuDriver("gpu.nvidia.com", inventory(), FeatureGates(frozenset()), DeviceNodePolicy("never"),
                        allow_device_plugin=True)  # fmt: skip
    assert allowed.refusal(node) is None and driver.refusal({"metadata": {"name": NODE}}) is None


# ---- per-node config: the node label, as NVIDIA's config-manager (B.9) ---------------------------


@pytest.fixture
def configs(tmp_path: Path) -> Path:
    """A ConfigMap volume as the kubelet lays it out: files, and `..data` entries to skip."""
    d = tmp_path / "configs"
    (d / "..2026_01_01").mkdir(parents=True)
    (d / "..data").symlink_to("..2026_01_01")
    (d / "default").write_text("version: v1\n")
    (d / "ts-4").write_text(TIME_SLICING)
    return d


def test_config_selection_as_config_manager(configs: Path) -> None:
    named = ConfigSet(configs, fallbacks=("named", "single"))
    assert named.names() == ["default", "ts-4"]
    assert named.select("ts-4") == "ts-4" and named.select("") == "default"
    assert ConfigSet(configs, default="ts-4").select("") == "ts-4"
    for label in ("nope", "..data", ".."):  # only the directory's files are names
        with pytest.raises(
            ConfigSelectionError, match=f"^specified config {re.escape(label)} does not exist$"
        ):
            named.select(label)
    with pytest.raises(ConfigSelectionError, match=r"^specified config gone does not exist$"):
        ConfigSet(configs, default="gone").select("")
    (configs / "default").unlink()
    assert ConfigSet(configs, fallbacks=("named", "single")).select("") == "ts-4"  # the only one
    (configs / "other").write_text("")
    assert ConfigSet(configs, fallbacks=("named", "single", "empty")).select("") == ""
    assert ConfigSet(configs).text("") is None and "timeSlicing" in (ConfigSet(configs).text("ts-4") or "")
    with pytest.raises(
        ConfigSelectionError, match=r"^no config was set, no default was provided, and all fallbacks failed$"
    ):
        ConfigSet(configs, fallbacks=("named", "single")).select("")
    with pytest.raises(ConfigSelectionError, match=r"^unknown fallback strategy: first$"):
        parse_fallbacks("named,first")
    assert parse_fallbacks("named, single") == ("named", "single") and parse_fallbacks("") == ()
    empty = configs.parent / "empty"
    empty.mkdir()
    with pytest.raises(ConfigSelectionError, match=r"^no configuration files available$"):
        ConfigSet(empty).select("x")
    with pytest.raises(ConfigSelectionError, match="error reading directory"):
        ConfigSet(configs.parent / "missing").select("x")


class FakeLabel:
    """A node's label values as GET and WATCH would return them."""

    key = "nvidia.com/device-plugin.config"

    def __init__(self, first: str, changes: list[str]) -> None:
        self.first, self.pending = first, changes

    def get(self) -> tuple[str, str]:
        return self.first, "1"

    def changes(self, version: str) -> Iterator[tuple[str, str]]:
        for i, value in enumerate(self.pending):
            yield value, str(i + 2)


def test_label_changes_restart_with_the_selected_config(configs: Path) -> None:
    (configs / "ts-2").write_text(TIME_SLICING.replace("replicas: 4", "replicas: 2"))
    restarts: list[str] = []
    # started with ts-4; the label then names an unknown config (kept), ts-4 again (nothing to do),
    # is removed (the default), and finally names ts-2
    label = FakeLabel("ts-4", ["nope", "ts-4", "", "ts-2"])
    watch = ConfigLabelWatch(
        label,
        ConfigSet(configs, fallbacks=("named",)),
        "ts-4",
        restarts.append,
    )
    watch.step(threading.Event())
    assert restarts == ["default", "ts-2"] and watch.current == "ts-2"
    # the first GET already differs from the config the plugin started with
    first: list[str] = []
    ConfigLabelWatch(FakeLabel("", []), ConfigSet(configs, default="ts-2"), "ts-4", first.append).step(
        threading.Event()
    )
    assert first == ["ts-2"]


def test_the_selected_config_is_loaded(configs: Path) -> None:
    from dra_fake.cli import build_parser

    args = build_parser().parse_args(
        [
            "device-plugin",
            "--node-name",
            NODE,
            f"--config-file-srcdir={configs}",
            "--config-file=/nonexistent",
        ]
    )
    config, _, [gpus] = load(args, "ts-4")  # the label's config, not CONFIG_FILE
    assert config.sharing.replicas("nvidia.com/gpu") == 4 and len(gpus.devices) == 32
    config, _, [gpus] = load(args, "default")
    assert config.sharing.strategy == "" and len(gpus.devices) == 8
    assert (args.node_label, args.default_config, args.fallback_strategies) == (
        "nvidia.com/device-plugin.config",
        "",
        "",
    )  # config-manager's defaults


def test_an_index_answer_is_refused_at_allocate_while_the_host_shows_a_real_gpu(
    plugin_dir: Path, smi: NvidiaSmi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deviceIDStrategy index hands out NVIDIA_VISIBLE_DEVICES=0,1, which NVIDIA's runtime on a real
    GPU node serves as the real GPUs: decided at every Allocate (a driver may load after start)."""
    from dra_fake.core import nvidiahost

    pci, modules = tmp_path / "pci", tmp_path / "module"
    (pci / "0000:00:01.0").mkdir(parents=True)
    (pci / "0000:00:01.0" / "vendor").write_text("0x8086\n")
    (modules / "ext4").mkdir(parents=True)
    monkeypatch.setattr(nvidiahost, "HOST", nvidiahost.HostPaths(pci, modules, tmp_path / "proc-nvidia"))
    StandInKubelet(plugin_dir)
    config = PluginConfig(device_id_strategy="index")
    resources = build_resources(inventory(), config)
    plugins = DevicePlugins(resources, config, str(plugin_dir / "kubelet.sock"), DeviceHealth(), smi)
    ids = [resources[0].devices[0].id]
    request = pb.AllocateRequest(container_requests=[pb.ContainerAllocateRequest(devices_ids=ids)])
    try:
        plugins.start()
        with grpc.insecure_channel(f"unix://{plugin_dir / 'nvidia-gpu.sock'}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            assert (
                stub.Allocate(request, timeout=30).container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"]
                == "0"
            )
            (modules / "nvidia").mkdir()  # the real driver loads
            with pytest.raises(
                grpc.RpcError, match="deviceIDStrategy index refused: the NVIDIA driver is loaded"
            ):
                stub.Allocate(request, timeout=30)
    finally:
        plugins.stop()
