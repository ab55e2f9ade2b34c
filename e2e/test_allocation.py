"""The real scheduler allocates our ResourceSlices as hardware would (issue 3 §7): capacity
limits, MIG placements and their counters, and CEL selectors from NVIDIA's documentation; each
container then sees exactly its devices."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_fake.core.slices import PARTITIONABLE_DEVICES_SINCE, slice_manifest, slice_spec
from dra_fake.gpu.inventory import load_inventory
from dra_fake.gpu.slices import desired_slices
from e2e.conftest import E2E_NODE_CONFIGS, published, require
from e2e.kube import Kube
from e2e.testbed import TestBed, assert_sees_its_gpus
from e2e.workloads import attr, devices_of, pod, template, unschedulable

DRIVER = "gpu.nvidia.com"


@pytest.fixture
def dynamic_mig_gpu(kube: Kube, nodes: list[str]) -> tuple[str, dict[str, Any]]:
    """(node, full GPU device) of a GPU whose MIG devices are created on demand."""
    for node in nodes:
        for d in published(kube, node).values():
            if "-mig-" not in d["name"] and d.get("consumesCounters"):
                return node, d
    require(False, "a GPU with dynamic MIG")
    raise AssertionError


def test_eight_gpus_fit_and_a_ninth_claim_pends(
    kube: Kube, ns: str, full_gpu_node: str, bed: TestBed
) -> None:
    kube.apply_yaml(template("one", "gpu.nvidia.com"), ns)
    for i in range(8):
        kube.create(pod(f"p{i}", "one", full_gpu_node), ns)
    running = [kube.wait_running(ns, f"p{i}") for i in range(8)]
    kube.create(pod("p8", "one", full_gpu_node), ns)  # after the eight: which pods get GPUs is then certain
    assert {running[0]["spec"]["nodeName"]} == {p["spec"]["nodeName"] for p in running} == {full_gpu_node}
    assert sorted(d for i in range(8) for d in devices_of(kube, ns, f"p{i}")) == sorted(
        f"gpu-{i}" for i in range(8)
    )
    assert "cannot allocate all claims" in unschedulable(kube, ns, "p8")
    seen = [assert_sees_its_gpus(bed, ns, f"p{i}") for i in range(8)]
    assert len(set(seen)) == 8  # each container sees its own GPU, no two the same


@pytest.mark.needs("partitionable")
def test_dynamic_mig_placements_exclude_each_other_and_the_full_gpu(
    kube: Kube, ns: str, dynamic_mig_gpu: tuple[str, dict[str, Any]], bed: TestBed
) -> None:
    node, gpu = dynamic_mig_gpu
    bus = attr(gpu, "resource.kubernetes.io/pciBusID")
    on_gpu = f"device.attributes['resource.kubernetes.io'].pciBusID == '{bus}'"
    kube.apply_yaml(
        template(
            "small", "mig.nvidia.com", f"{on_gpu} && device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
        ),
        ns,
    )
    kube.apply_yaml(template("whole", "gpu.nvidia.com", on_gpu), ns)

    # The eighth pod only after seven run: created together, the scheduler may give the last
    # placement to m7 while m6 waits in back-off (seen in CI under load).
    for i in range(7):
        kube.create(pod(f"m{i}", "small", node), ns)
    for i in range(7):
        kube.wait_running(ns, f"m{i}")
    kube.create(pod("m7", "small", node), ns)
    assert "cannot allocate all claims" in unschedulable(kube, ns, "m7")
    names = sorted(d for i in range(7) for d in devices_of(kube, ns, f"m{i}"))
    # Seven 1g.10gb placements, one per memory slice 0..6: none overlaps another.
    assert [int(n.rsplit("-", 1)[1]) for n in names] == list(range(7)), names
    assert all(n.startswith(gpu["name"] + "-mig-1g10gb-") for n in names), names

    # A partition is allocated: the full GPU is not available.
    kube.create(pod("full", "whole", node), ns)
    unschedulable(kube, ns, "full")

    # prepare "created" each MIG device: the container sees one MIG device of that GPU
    output = assert_sees_its_gpus(bed, ns, "m0")
    assert "MIG 1g.10gb" in output and attr(gpu, "uuid") in output, output

    # Release every partition (the pending one too): the full GPU becomes allocatable, and then
    # a partition is not.
    for i in range(8):
        kube.core.delete_namespaced_pod(f"m{i}", ns)
    kube.wait_running(ns, "full", timeout=120)
    assert devices_of(kube, ns, "full") == [gpu["name"]]
    kube.create(pod("late", "small", node), ns)
    unschedulable(kube, ns, "late")


CEL_CASES = [
    # (template name, class, selector, check on the allocated device)
    (
        "product",
        "gpu.nvidia.com",
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
        lambda d: attr(d, "productName") == "NVIDIA H100 80GB HBM3",
    ),
    (
        "compute",
        "gpu.nvidia.com",
        "device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('9.0.0')) >= 0",
        lambda d: attr(d, "cudaComputeCapability") == "9.0.0",
    ),
    (
        "memory",
        "gpu.nvidia.com",
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('79Gi')) >= 0",
        lambda d: d["capacity"]["memory"]["value"] in ("81559Mi", "81152Mi"),
    ),
    (
        "mig-size",
        "mig.nvidia.com",
        "device.capacity['gpu.nvidia.com'].multiprocessors.isGreaterThan(quantity('10')) && "
        "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('10Gi'))",
        lambda d: int(d["capacity"]["multiprocessors"]["value"]) > 10 and attr(d, "type") == "mig",
    ),
]


@pytest.mark.parametrize("case", CEL_CASES, ids=[c[0] for c in CEL_CASES])
def test_nvidia_cel_selectors_pick_matching_devices(
    kube: Kube, ns: str, case: tuple[Any, ...], bed: TestBed
) -> None:
    name, device_class, selector, check = case
    kube.apply_yaml(template(name, device_class, selector), ns)
    kube.create(pod("p", name), ns)
    running = kube.wait_running(ns, "p")
    [device] = devices_of(kube, ns, "p")
    assert check(published(kube, running["spec"]["nodeName"])[device]), device
    assert_sees_its_gpus(bed, ns, "p")


@pytest.mark.parametrize(
    "selector",
    [
        "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-40GB'",
        # As on real hardware: NVML reports 81559 MiB for an "80GB" H100, which is less than 80Gi.
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0",
    ],
    ids=["other-model", "h100-is-not-80Gi"],
)
def test_selector_matching_no_device_pends(kube: Kube, ns: str, selector: str) -> None:
    kube.apply_yaml(template("none", "gpu.nvidia.com", selector), ns)
    kube.create(pod("p", "none"), ns)
    assert "cannot allocate all claims" in unschedulable(kube, ns, "p")


@pytest.mark.needs("partitionable", "counter-rollback")
def test_match_attribute_parent_uuid_keeps_mig_devices_on_one_gpu(
    kube: Kube, ns: str, dynamic_mig_gpu: tuple[str, dict[str, Any]], bed: TestBed
) -> None:
    kube.apply_yaml(
        template(
            "pair",
            "mig.nvidia.com",
            "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
            count=2,
            match_attribute="gpu.nvidia.com/parentUUID",
        ),
        ns,
    )
    kube.create(pod("p", "pair"), ns)
    running = kube.wait_running(ns, "p")
    devs = published(kube, running["spec"]["nodeName"])
    parents = {attr(devs[d], "parentUUID") for d in devices_of(kube, ns, "p")}
    assert len(parents) == 1, parents
    assert_sees_its_gpus(bed, ns, "p")


@pytest.mark.parametrize("api_version", ["v1", "v1beta2", "v1beta1"])
def test_slices_round_trip_unchanged_through_the_api_server(
    kube: Kube, api_version: str, tmp_path: Path
) -> None:
    """Every slice we would publish is accepted by the real API server and read back identical."""
    server = kube.info.version
    doc = yaml.safe_load(E2E_NODE_CONFIGS["node-2"].read_text())
    if server < PARTITIONABLE_DEVICES_SINCE:  # no counters before 1.33: no dynamic MIG
        doc["gpus"] = [g for g in doc["gpus"] if g.get("mig") != "dynamic"]
    pool = f"roundtrip-{api_version}"
    config = tmp_path / "inventory.yaml"
    config.write_text(yaml.safe_dump(doc))
    inventory = load_inventory(config, pool)
    desired = desired_slices(inventory, DRIVER, server)
    created = []
    try:
        for i, d in enumerate(desired):
            spec = slice_spec(
                d,
                api_version=api_version,
                driver=DRIVER,
                pool_name=pool,
                node_name=pool,
                generation=1,
                slice_count=len(desired),
            )
            obj = slice_manifest(
                spec, api_version=api_version, name=f"{pool}-{i}", owner_node_name=pool, owner_node_uid=None
            )
            stored = kube.custom.create_cluster_custom_object(
                "resource.k8s.io", api_version, "resourceslices", obj
            )
            created.append(obj["metadata"]["name"])
            assert stored["spec"] == spec  # type: ignore[index]
            read = kube.custom.get_cluster_custom_object(
                "resource.k8s.io", api_version, "resourceslices", obj["metadata"]["name"]
            )
            assert read["spec"] == spec  # type: ignore[index]
    finally:
        for name in created:
            kube.custom.delete_cluster_custom_object("resource.k8s.io", api_version, "resourceslices", name)
