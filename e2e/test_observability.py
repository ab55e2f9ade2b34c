"""What the fleet looks like to monitoring (issue 15; docs/observability.md): GPU Feature
Discovery's labels on every GPU node, and the node's dcgm-exporter-compatible /metrics, where a
pod's simulated load shows on its GPU, attributed to the pod, the same numbers as nvidia-smi in
its container, and the GPU idles again once the pod is gone. Real kubelet and containerd on kind;
the local cluster's harness kubelet here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.conftest import published
from e2e.faultcli import inject
from e2e.kube import Kube, poll
from e2e.testbed import TestBed
from e2e.workloads import devices_of, pod, template

RECORD = "dra-fake.dev/gfd-labels"


def sanitise(name: str) -> str:
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", name).split())


def attribute(device: dict[str, Any], name: str) -> Any:
    return next(iter(device["attributes"][name].values()))


def gpu_samples(text: str, metric: str, uuid: str) -> list[Any]:
    return [
        s
        for f in text_string_to_metric_families(text)
        if f.name == metric
        for s in f.samples
        if s.labels.get("UUID") == uuid
    ]


@pytest.mark.needs("node")
def test_every_gpu_node_carries_gfd_labels_of_its_inventory(kube: Kube, nodes: list[str]) -> None:
    for node in nodes:
        devices = published(kube, node).values()
        gpus = {
            attribute(d, "uuid") if attribute(d, "type") == "gpu" else attribute(d, "parentUUID")
            for d in devices
        }
        first = next(iter(devices))
        wanted = {
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": sanitise(attribute(first, "productName")),
            "nvidia.com/gpu.count": str(len(gpus)),
            "nvidia.com/gpu.family": attribute(first, "architecture").lower(),
            "nvidia.com/mig.capable": "true",
        }

        def labelled(node: str = node) -> dict[str, Any] | None:
            meta = kube.api.sanitize_for_serialization(kube.core.read_node(node))["metadata"]
            return meta if RECORD in (meta.get("annotations") or {}) else None

        meta = poll(f"GFD labels on {node}", labelled, 60)
        labels = meta["labels"]
        assert {k: labels.get(k) for k in wanted} == wanted, node
        # the slice attribute is a semantic version (580.105.8), the label NVML's string (580.105.08)
        full = labels["nvidia.com/cuda.driver-version.full"]
        assert [int(x) for x in full.split(".")] == [
            int(x) for x in attribute(first, "driverVersion").split(".")
        ]
        recorded = {"nvidia.com/" + k for k in meta["annotations"][RECORD].split(",")}
        assert recorded <= set(labels)  # every key it recorded is on the node
        assert "nvidia.com/gfd.timestamp" in recorded and wanted.keys() <= recorded


@pytest.mark.needs("node")
def test_pod_load_shows_in_the_metrics_and_nvidia_smi_then_idles(
    kube: Kube, bed: TestBed, ns: str, full_gpu_node: str
) -> None:
    kube.apply_yaml(template("one", "gpu.nvidia.com"), ns)
    manifest = pod("busy", "one", full_gpu_node)
    manifest["metadata"]["annotations"] = {
        "dra-fake.dev/simulated-gpu-utilization": "40-60",
        "dra-fake.dev/simulated-gpu-memory": "10Gi",
    }
    kube.create(manifest, ns)
    kube.wait_running(ns, "busy")
    [device] = devices_of(kube, ns, "busy")
    uuid = attribute(published(kube, full_gpu_node)[device], "uuid")

    def attributed() -> list[Any] | None:
        found = gpu_samples(bed.gpu_metrics(full_gpu_node), "DCGM_FI_DEV_GPU_UTIL", uuid)
        return found if found and all(s.labels.get("pod") == "busy" for s in found) else None

    [util] = poll(f"{device} attributed to the pod", attributed, 60)
    assert 40 <= util.value <= 60
    assert util.labels["namespace"] == ns and util.labels["container"] == "ctr"
    assert util.labels["dra_device_name"] == device and util.labels["dra_pool_name"] == full_gpu_node
    assert util.labels["Hostname"] == full_gpu_node and util.labels["modelName"] == "NVIDIA H100 80GB HBM3"
    text = bed.gpu_metrics(full_gpu_node)
    [used] = gpu_samples(text, "DCGM_FI_DEV_FB_USED", uuid)
    assert used.value == 10240
    others = [
        s
        for s in text_string_to_metric_families(text)
        for s in s.samples
        if s.labels.get("UUID", uuid) != uuid
    ]
    assert others and not any("pod" in s.labels for s in others)  # the node's other GPUs are nobody's

    smi = bed.container(ns, "busy").nvidia_smi(
        "--query-gpu=uuid,utilization.gpu,memory.used", "--format=csv,noheader,nounits"
    )
    assert smi.code == 0, smi.output
    got_uuid, got_util, got_used = smi.output.strip().split(", ")
    assert got_uuid == uuid and 40 <= int(got_util) <= 60 and got_used == "10240"

    kube.delete_pod(ns, "busy")

    def idle() -> bool:
        found = gpu_samples(bed.gpu_metrics(full_gpu_node), "DCGM_FI_DEV_GPU_UTIL", uuid)
        return [(s.value, "pod" in s.labels) for s in found] == [(0, False)]

    poll(f"{device} idle again", idle, 90)


@pytest.mark.needs("node")
def test_an_xid_fault_shows_in_the_xid_metric(
    kube: Kube,
    kubeconfig: Path,
    bed: TestBed,
    ns: str,
    full_gpu_node: str,
    faults: list[str],
) -> None:
    device = sorted(published(kube, full_gpu_node), key=lambda n: int(n.split("-")[1]))[-2]
    uuid = attribute(published(kube, full_gpu_node)[device], "uuid")
    name = f"{ns}-xid"
    faults.append(name)
    inject(kubeconfig, full_gpu_node, device, "xid", name, "--xid", "94")

    def xid() -> Any:
        [sample] = gpu_samples(bed.gpu_metrics(full_gpu_node), "DCGM_FI_DEV_XID_ERRORS", uuid)
        return sample if sample.value == 94 else None

    sample = poll("DCGM_FI_DEV_XID_ERRORS = 94", xid, 60)
    assert (sample.labels["err_code"], sample.labels["err_msg"]) == ("94", "Contained ECC error")
