"""Classic requests through DRA (issue 16 §1): a pod that asks for `nvidia.com/gpu: N` in its limits,
written for NVIDIA's device plugin, is served from our DeviceClass's `extendedResourceName`
(Kubernetes 1.34+, gate DRAExtendedResource; docs/reference/kubernetes-dra.md#extended-resources).
The scheduler creates a claim for it, our plugin prepares it, and the container sees exactly N GPUs;
claims and classic requests on one node never get the same GPU."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.kube import Kube, workload_container
from e2e.testbed import TestBed, assert_sees_its_gpus
from e2e.workloads import devices_of, pod, template, unschedulable

EXTENDED_RESOURCE = "nvidia.com/gpu"


def classic_pod(name: str, gpus: int, node: str) -> dict[str, Any]:
    """A pod as written for NVIDIA's device plugin: no claim, a GPU count in its limits."""
    container = workload_container()
    container["resources"] = {"limits": {EXTENDED_RESOURCE: str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], "nodeSelector": {"kubernetes.io/hostname": node}},
    }


def extended_claim(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    """The claim the scheduler created for a pod's extended resources."""
    status = kube.pod(ns, name)["status"].get("extendedResourceClaimStatus")
    assert status, f"pod {name} runs without an extended-resource claim"
    assert [(m["containerName"], m["resourceName"]) for m in status["requestMappings"]] == [
        ("ctr", EXTENDED_RESOURCE)
    ]
    return kube.claim(ns, status["resourceClaimName"])


@pytest.mark.needs("extended-resource")
def test_classic_gpu_requests_and_claims_share_a_node_without_sharing_a_gpu(
    kube: Kube, ns: str, full_gpu_node: str, bed: TestBed
) -> None:
    kube.apply_yaml(template("five", "gpu.nvidia.com", count=5), ns)
    kube.create(classic_pod("classic", 3, full_gpu_node), ns)
    kube.create(pod("claimed", "five", full_gpu_node), ns)
    kube.wait_running(ns, "classic")
    kube.wait_running(ns, "claimed")
    kube.create(classic_pod("extra", 1, full_gpu_node), ns)  # after both run: the node is full

    claim = extended_claim(kube, ns, "classic")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert {(r["driver"], r["pool"]) for r in results} == {("gpu.nvidia.com", full_gpu_node)}
    classic = [r["device"] for r in results]
    claimed = devices_of(kube, ns, "claimed")
    assert len(classic) == 3 and len(claimed) == 5
    assert sorted(classic + claimed) == [f"gpu-{i}" for i in range(8)]  # none given twice
    assert "cannot allocate all claims" in unschedulable(kube, ns, "extra")
    assert_sees_its_gpus(bed, ns, "classic")
    assert_sees_its_gpus(bed, ns, "claimed")
