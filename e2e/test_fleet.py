"""Fleet mode on a real control plane: `dra-fake fleet --nodes 3 --mark-pods-running` creates
Nodes, publishes their slices, keeps them published, and the real scheduler places a GPU
claim on a fleet node whose pod the fleet marks Running; deleting the pod finishes too."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from dra_fake.fleet.core import FLEET_TAINT, FLEET_TOLERATION, NodeTemplate, node_manifest
from e2e.fleetrun import running_fleet
from e2e.kube import Kube, gpu_claim_template, pod_with_claim_template, poll
from e2e.localcluster.processes import free_port

NODES = 3
# A process of the test machine creating Nodes: a cluster of ours (the harness or kind, whose node
# lifecycle controller sees the heartbeats the fleet renews for the nodes it creates).
pytestmark = pytest.mark.needs("node", reason="creates Nodes and marks their pods Running: a cluster of ours")


class Fleet(NamedTuple):
    name: str
    metrics_port: int  # its dcgm-exporter-compatible endpoint

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as resp:
            return resp.read().decode()  # type: ignore[no-any-return]


@pytest.fixture
def fleet(kubeconfig: Path, kube: Kube, tmp_path: Path) -> Iterator[Fleet]:
    name = f"e2efleet{uuid.uuid4().hex[:5]}"
    port = free_port()
    flags = (
        "--mark-pods-running",
        "--feature-gates=NVMLDeviceHealthCheck=true",
        f"--dcgm-exporter-port={port}",
    )
    with running_fleet(kube, kubeconfig, tmp_path / "fleet.log", name, NODES, *flags):
        yield Fleet(name, port)


def _ready_untainted(kube: Kube, fleet: str) -> list[str]:
    listed: Any = kube.core.list_node(label_selector=f"dra-fake.dev/fleet={fleet}", _preload_content=False)
    nodes = json.loads(listed.data)["items"]
    ok = sorted(
        str(n["metadata"]["name"])
        for n in nodes
        if n["spec"].get("taints") == [{**FLEET_TAINT, "value": fleet}]  # admission's taints removed
        and any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
    )
    return ok if len(ok) == NODES else []


def test_fleet_publishes_keeps_slices_and_runs_pods(kube: Kube, fleet: Fleet, ns: str) -> None:
    nodes = poll(
        "fleet nodes Ready, with only the fleet taint", lambda: _ready_untainted(kube, fleet.name), 60
    )
    for node in nodes:

        def node_slices(node: str = node) -> list[dict[str, Any]]:
            return kube.slices(node=node)

        slices = poll(f"slices of {node}", node_slices, 60)
        assert len(slices[0]["spec"]["devices"]) == 8
        assert slices[0]["metadata"]["ownerReferences"][0]["name"] == node
        labels = kube.core.read_node(node).metadata.labels  # GPU Feature Discovery's, as on plugin nodes
        assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.count"]) == (
            "NVIDIA-H100-80GB-HBM3",
            "8",
        )

    # One dcgm-exporter-compatible endpoint for the whole fleet, one Hostname per node.
    def per_node() -> dict[str, int]:
        counts: dict[str, int] = {}
        for family in text_string_to_metric_families(fleet.metrics()):
            if family.name == "DCGM_FI_DEV_GPU_TEMP":
                for s in family.samples:
                    counts[s.labels["Hostname"]] = counts.get(s.labels["Hostname"], 0) + 1
        return counts if set(nodes) <= set(counts) else {}

    assert {n: c for n, c in poll("fleet metrics", per_node, 60).items() if n in nodes} == dict.fromkeys(
        nodes, 8
    )

    # Keeps them up to date: a deleted slice comes back.
    victim = kube.slices(node=nodes[0])[0]["metadata"]
    kube.delete_slice(victim["name"])

    def restored() -> bool:  # the same name, a new object
        return any(
            s["metadata"]["name"] == victim["name"] and s["metadata"]["uid"] != victim["uid"]
            for s in kube.slices(node=nodes[0])
        )

    poll(f"slice {victim['name']} re-created", restored, 60)

    # The real scheduler allocates a fleet GPU; the fleet marks the pod Running.
    kube.create(gpu_claim_template("fleet-gpu"), ns)
    pod = pod_with_claim_template("on-fleet", "fleet-gpu")
    pod["spec"]["nodeSelector"] = {"dra-fake.dev/fleet": fleet.name}
    pod["spec"]["tolerations"] = [FLEET_TOLERATION]  # fleet nodes are tainted (no kubelet)
    kube.create(pod, ns)
    running = kube.wait_running(ns, "on-fleet", 90)
    assert running["spec"]["nodeName"] in nodes
    claim = kube.claims(ns)[0]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert results[0]["driver"] == "gpu.nvidia.com" and results[0]["pool"] == running["spec"]["nodeName"]

    # Deleting the pod completes (the fleet plays the kubelet's final delete).
    kube.core.delete_namespaced_pod("on-fleet", ns)

    def gone() -> bool:
        try:
            kube.pod(ns, "on-fleet")
        except ApiException as err:
            return bool(err.status == 404)
        return False

    poll("pod on-fleet deleted", gone, 60)


def test_fleet_adopts_and_forgets_nodes_its_watch_sees(kube: Kube, fleet: Fleet) -> None:
    """A Node with the fleet's label created after the fleet started reaches it only through its
    Node watch (metadata only, PartialObjectMetadata): the fleet publishes its slices and serves
    its metrics; deleted, it is forgotten (its metrics go)."""
    poll("fleet nodes Ready, with only the fleet taint", lambda: _ready_untainted(kube, fleet.name), 60)
    name = f"{fleet.name}-late"
    kube.core.create_node(node_manifest(name, NodeTemplate(fleet=fleet.name)))

    def hostnames() -> set[str]:
        return {
            s.labels["Hostname"]
            for f in text_string_to_metric_families(fleet.metrics())
            if f.name == "DCGM_FI_DEV_GPU_TEMP"
            for s in f.samples
        }

    slices = poll(f"slices of {name}", lambda: kube.slices(node=name), 60)
    assert len(slices[0]["spec"]["devices"]) == 8
    poll(f"metrics of {name}", lambda: name in hostnames(), 60)
    kube.core.delete_node(name)
    poll(f"metrics of {name} gone", lambda: name not in hostnames(), 60)


@pytest.mark.needs("slice-taints")
def test_fleet_nodes_apply_gpu_faults(kube: Kube, fleet: Fleet) -> None:
    """A GpuFault naming a fleet node taints that node's device (NVMLDeviceHealthCheck on) and gets
    its status from the fleet; a fault that ends with recovery `clear` removes the taint."""
    node = poll(
        "fleet nodes Ready, with only the fleet taint", lambda: _ready_untainted(kube, fleet.name), 60
    )[1]
    poll(f"slices of {node}", lambda: kube.slices(node=node), 60)
    name = f"{fleet.name}-lost"
    fault = {
        "apiVersion": "dra-fake.dev/v1alpha1",
        "kind": "GpuFault",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "device": "gpu-2",
            "kind": "gpu-lost",
            "durationSeconds": 20,
            "recovery": "clear",
        },
    }
    kube.custom.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault)
    try:

        def tainted() -> list[str]:
            return sorted(
                d["name"] for s in kube.slices(node=node) for d in s["spec"]["devices"] if d.get("taints")
            )

        assert poll("every device of the node tainted gpu-lost", tainted, 60) == [
            f"gpu-{i}" for i in range(8)
        ]

        def lost_gpu_metrics() -> list[tuple[str, float]] | None:
            found = [
                (f.name, s.value)
                for f in text_string_to_metric_families(fleet.metrics())
                for s in f.samples
                if s.labels.get("Hostname") == node and s.labels.get("gpu") == "2"
            ]
            return found if len(found) == 1 else None

        # the lost GPU reports nothing but its Xid (79: fallen off the bus)
        assert poll("the lost GPU's metrics", lost_gpu_metrics, 60) == [("DCGM_FI_DEV_XID_ERRORS", 79)]

        def phase() -> str:
            obj: Any = kube.custom.get_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", name)
            return str((obj.get("status") or {}).get("phase", ""))

        poll("fault Active", lambda: phase() == "Active", 30)
        poll("fault Recovered after its 20 s", lambda: phase() == "Recovered", 60)
        poll("taints gone", lambda: not tainted(), 30)
        others = [n for n in _ready_untainted(kube, fleet.name) if n != node]
        assert not [
            d for n in others for s in kube.slices(node=n) for d in s["spec"]["devices"] if d.get("taints")
        ]
    finally:
        kube.custom.delete_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", name)
