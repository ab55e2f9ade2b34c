"""NVML programs in a pod (issue 41, docs/nvml.md): NVIDIA's Python bindings (hack/nvml/probe.py),
gpustat, nvitop and a go-nvml program see exactly the GPUs of their claim through the library the
claim's CDI edits mount, with the values the node's metrics endpoint serves at that moment (the
load the pod's annotations ask for); a MIG device as a MIG device; an Xid as an NVML event and a
lost GPU as NVML's GPU_IS_LOST. On kind the consumers run in a pod of the consumers image; on the
local cluster on the host against the container's mounts (e2e/nvmlview.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from e2e.conftest import published
from e2e.faultcli import inject
from e2e.kube import Kube, poll
from e2e.nvmlview import (
    CONSUMERS,
    XID_WAIT,
    Background,
    GpuView,
    MetricsGpu,
    differences,
    metrics_gpus,
    printed,
    run_consumer,
)
from e2e.testbed import Container, TestBed, expected_gpus, pod_claims
from e2e.workloads import attr, consumer_pod, devices_of, template

UTIL, MEMORY_MIB = 75, 10240
LOAD = {
    "dra-fake.dev/simulated-gpu-utilization": str(UTIL),
    "dra-fake.dev/simulated-gpu-memory": f"{MEMORY_MIB}Mi",
}


def start(
    kube: Kube, bed: TestBed, ns: str, manifest: dict[str, Any]
) -> tuple[Container, set[str], set[str]]:
    """Create and wait for the pod: its container, and the GPU and MIG UUIDs of its claims."""
    kube.create(manifest, ns)
    name = manifest["metadata"]["name"]
    kube.wait_running(ns, name)
    gpus, migs, _ = expected_gpus(kube, ns, pod_claims(kube.pod(ns, name), "ctr"))
    return bed.container(ns, name), gpus, migs


def matched(views: list[GpuView], gpus: dict[str, MetricsGpu]) -> dict[str, GpuView]:
    """The GPUs a consumer printed by UUID (by bus ID for nvitop, which prints no UUID)."""
    by_bus = {g.bus_id: u for u, g in gpus.items()}
    return {v.uuid or by_bus.get(v.bus_id or "", f"unknown bus {v.bus_id}"): v for v in views}


def agrees(bed: TestBed, node: str, view: Container, consumer: str, uuids: set[str]) -> list[str]:
    """What the consumer printed that is not the metrics of the sample it read (empty: all agrees).
    A scrape before and one after bracket the run: the consumer read one of the two samples (a
    rare second sample in between: tried again)."""
    problems: list[str] = []
    for _ in range(3):
        before = metrics_gpus(bed.gpu_metrics(node))
        views = printed(view, consumer)
        after = metrics_gpus(bed.gpu_metrics(node))
        seen = matched(views, before)
        if len(views) != len(uuids) or set(seen) != uuids:
            return [f"printed GPUs {sorted(seen)}, the claim's {sorted(uuids)}"]
        problems = []
        for uuid, v in seen.items():
            diff = min(differences(v, before[uuid]), differences(v, after[uuid]), key=len)
            problems += [f"{uuid}: {d}" for d in diff]
        if not problems:
            return []
    return problems


@pytest.mark.needs("node")
def test_every_consumer_prints_the_claims_gpus_with_the_metrics_values(
    kube: Kube, bed: TestBed, ns: str, full_gpu_node: str
) -> None:
    kube.apply_yaml(template("two", "gpu.nvidia.com", count=2), ns)
    view, uuids, _ = start(kube, bed, ns, consumer_pod("nvml", "two", full_gpu_node, LOAD))
    assert len(uuids) == 2

    def loaded() -> dict[str, MetricsGpu] | None:
        gpus = metrics_gpus(bed.gpu_metrics(full_gpu_node))
        values = [gpus[u].values for u in uuids]
        ok = all(v["DCGM_FI_DEV_GPU_UTIL"] == UTIL and v["DCGM_FI_DEV_FB_USED"] == MEMORY_MIB for v in values)
        return gpus if ok else None

    poll("the pod's load in the metrics", loaded, 60)
    problems = {c: agrees(bed, full_gpu_node, view, c, uuids) for c in CONSUMERS}
    assert not any(problems.values()), problems


@pytest.mark.needs("node")
def test_a_mig_device_is_a_mig_device_to_every_consumer(
    kube: Kube, bed: TestBed, ns: str, nodes: list[str]
) -> None:
    # a pre-created 1g.10gb MIG device (its UUID is published; the MIG node's inventory has them)
    node, device = next(
        (node, d)
        for node in nodes
        for d in sorted(published(kube, node).values(), key=lambda d: str(d["name"]))
        if attr(d, "type") == "mig" and "uuid" in d["attributes"] and attr(d, "profile") == "1g.10gb"
    )
    mig_uuid = attr(device, "uuid")
    selector = f'device.attributes["gpu.nvidia.com"].uuid == "{mig_uuid}"'
    kube.apply_yaml(template("mig", "mig.nvidia.com", selector=selector), ns)
    load = {"dra-fake.dev/simulated-gpu-memory": "2Gi"}
    view, uuids, migs = start(kube, bed, ns, consumer_pod("mig", "mig", node, load))
    assert migs == {mig_uuid}
    [parent] = uuids

    def mig_metrics() -> MetricsGpu | None:
        gpu = metrics_gpus(bed.gpu_metrics(node)).get(parent)
        on = gpu and [m for m in gpu.migs.values() if m.get("DCGM_FI_DEV_FB_USED") == 2048]
        return gpu if on else None

    gpu = poll("the MIG device's memory in the metrics", mig_metrics, 60)
    [(gi, sample)] = [(gi, m) for gi, m in gpu.migs.items() if m.get("DCGM_FI_DEV_FB_USED") == 2048]
    total = int(sample["DCGM_FI_DEV_FB_USED"] + sample["DCGM_FI_DEV_FB_FREE"])
    profile = attr(device, "profile")
    for consumer in CONSUMERS:
        views = matched(printed(view, consumer), {parent: gpu})
        assert list(views) == [parent], (consumer, views)
        v = views[parent]
        # NVML answers no utilization for a GPU in MIG mode, as on a real one
        assert v.utilization is None, (consumer, v)
        if consumer == "gpustat":  # it lists physical GPUs only
            continue
        [m] = v.migs
        assert (m.gi, m.ci, m.profile) == (gi, 0, profile), (consumer, m)
        assert m.uuid in (None, mig_uuid) and m.memory_total_mib == total, (consumer, m, total)
        assert m.memory_used_mib in (None, 2048), (consumer, m)


@pytest.mark.needs("node")
def test_an_xid_is_an_nvml_event_and_a_lost_gpu_is_lost_to_every_consumer(
    kube: Kube,
    kubeconfig: Path,
    bed: TestBed,
    ns: str,
    full_gpu_node: str,
    faults: list[str],
) -> None:
    kube.apply_yaml(template("two", "gpu.nvidia.com", count=2), ns)
    view, uuids, _ = start(kube, bed, ns, consumer_pod("faulty", "two", full_gpu_node, {}))
    devices = published(kube, full_gpu_node)
    names = {attr(devices[d], "uuid"): d for d in devices_of(kube, ns, "faulty")}
    xid_gpu, lost_gpu = sorted(uuids)

    with Background(view, "python", "-c", XID_WAIT, "120000") as waiter:
        poll("the event set registered", lambda: "registered" in waiter.output(), 60)
        faults.append(f"{ns}-xid")
        inject(kubeconfig, full_gpu_node, names[xid_gpu], "xid", f"{ns}-xid", "--xid", "94")

        def event() -> dict[str, Any] | None:
            lines = waiter.output().splitlines()
            return json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None

        got = poll("the Xid event", event, 60)
    assert got == {"uuid": xid_gpu, "type": pynvml.nvmlEventTypeXidCriticalError, "xid": 94}

    faults.append(f"{ns}-lost")
    inject(kubeconfig, full_gpu_node, names[lost_gpu], "gpu-lost", f"{ns}-lost")

    def lost_to_the_probe() -> list[GpuView] | None:
        views = printed(view, "probe")
        return views if any(v.lost for v in views) else None

    poll("the lost GPU in NVML", lost_to_the_probe, 60)
    # the lost GPU still counts and has no handle; the other answers (NVML index = bus ID order)
    bus = {u: g.bus_id for u, g in metrics_gpus(bed.gpu_metrics(full_gpu_node)).items()}
    alive = next(u for u in uuids if u != lost_gpu)
    lost_index = sorted(uuids, key=lambda u: bus[u]).index(lost_gpu)
    for consumer in ("probe", "gpustat", "nvitop"):
        views = printed(view, consumer)
        assert [v.lost for v in views] == [i == lost_index for i in range(2)], (consumer, views)
        other = views[1 - lost_index]
        assert other.uuid in (alive, None) and other.bus_id in (bus[alive], None), (consumer, views)
    # go-nvml's program stops at the handle it cannot get, with NVML's message
    result = run_consumer(view, "gonvml")
    assert result.code == 1 and f"DeviceGetHandleByIndex({lost_index}): GPU is lost" in result.output, (
        result.output
    )
