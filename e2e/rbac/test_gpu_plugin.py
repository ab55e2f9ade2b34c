"""The GPU kubelet plugin with the chart's ServiceAccount: it publishes, prepares a pod's GPU, writes
its node's fault status and Events; everything else is refused, and the admission policy keeps it
to its own node's ResourceSlices and labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.harnessbed import HarnessContainer
from e2e.kube import Kube, pod_with_claim_template, poll
from e2e.localcluster import LocalCluster
from e2e.rbac.bed import NODES, NS, OWN_CONTROL_PLANE, forbidden, request_token, sa_api, token_kubeconfig
from e2e.rbac.checks import (
    REFUSED_CALLS,
    assert_slices_of_its_own_node_only,
    assert_unbound_token_writes_no_slices,
)

pytestmark = OWN_CONTROL_PLANE


def test_plugins_publish_with_the_charts_service_account(
    installed: dict[str, Path], admin: client.ApiClient
) -> None:
    kube = Kube(next(iter(installed.values())).parent / "kubeconfig")
    for node in NODES:
        slices = kube.slices(node=node)
        devices = [d["name"] for s in slices for d in s["spec"]["devices"]]
        assert devices == [f"gpu-{i}" for i in range(8)], devices  # the chart's default inventory
        assert slices[0]["metadata"]["ownerReferences"][0]["name"] == node

        def labelled(node: str = node) -> dict[str, str] | None:
            labels = client.CoreV1Api(admin).read_node(node).metadata.labels or {}
            return labels if "nvidia.com/gpu.product" in labels else None

        # GPU Feature Discovery's labels, written with the chart's rights through its policy
        labels = poll(f"GFD labels on {node}", labelled, 60)
        assert (
            labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
            and labels["nvidia.com/gpu.count"] == "8"
        )


def test_pod_with_gpu_runs_and_nvidia_smi_shows_its_gpu(
    installed: dict[str, Path], cluster: LocalCluster, tmp_path: Path
) -> None:
    kube = Kube(cluster.kubeconfig)
    ns = kube.namespace("rbac")
    try:
        kube.apply_yaml(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: one}\n"
            "spec:\n  spec:\n    devices:\n      requests:\n"
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n",
            ns,
        )
        kube.create(pod_with_claim_template("p", "one"), ns)
        pod = kube.wait_running(ns, "p")  # prepared by a plugin running with the chart's rights
        node = pod["spec"]["nodeName"]
        [record] = (cluster.node_dir(node) / "pods").glob(f"{ns}_p_*.json")
        container = json.loads(record.read_text())["containers"]["ctr"]
        assert any(m["destination"] == "/usr/bin/nvidia-smi" for m in container["mounts"]), container
        # What the CDI library told the runtime to bind-mount, run as the harness runs containers.
        result = HarnessContainer(container).nvidia_smi("-L")
        assert result.code == 0, result.output
        out = result.output
        claim = kube.claims(ns)[0]
        [(_, pool, device)] = kube.allocated_devices(claim)
        uuid = next(
            d["attributes"]["uuid"]["string"]
            for s in kube.slices(node=pool)
            for d in s["spec"]["devices"]
            if d["name"] == device
        )
        assert out == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {uuid})\n"
    finally:
        kube.delete_namespace(ns)


def test_plugin_writes_the_status_of_its_nodes_faults(
    installed: dict[str, Path], admin: client.ApiClient
) -> None:
    """The GPU plugin of node-1, with the chart's rights, watches its node's GpuFaults, writes
    their status and taints the device (the local cluster's plugins run with NVMLDeviceHealthCheck)."""
    custom = client.CustomObjectsApi(admin)
    fault = {
        "apiVersion": "dra-fake.dev/v1alpha1",
        "kind": "GpuFault",
        "metadata": {"name": "rbac-xid"},
        "spec": {"nodeName": "node-1", "device": "gpu-3", "kind": "xid", "xid": 79, "recovery": "clear"},
    }
    custom.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault)
    try:

        def status() -> Any:
            obj = custom.get_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "rbac-xid")
            return (obj.get("status") or {}).get("phase") == "Active" and obj["status"]

        got = poll("GpuFault rbac-xid Active", status, 60)
        assert got["message"] == "on gpu-3" and got["node"] == "node-1", got
        kube = Kube(next(iter(installed.values())).parent / "kubeconfig")

        def tainted() -> list[str]:
            return [
                d["name"] for s in kube.slices(node="node-1") for d in s["spec"]["devices"] if d.get("taints")
            ]

        assert poll("gpu-3 tainted", tainted, 60) == ["gpu-3"]
    finally:
        custom.delete_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "rbac-xid")


def test_a_hostile_load_annotation_gets_an_event_and_stops_nothing(
    installed: dict[str, Path], admin: client.ApiClient, cluster: LocalCluster
) -> None:
    """Any pod of a node may carry the simulated-load annotations: one of 5,000 digits (Python's
    int() limit, which stopped the node's sampler) gets a SimulatedLoadIgnored Event, posted by
    node-1's plugin with the chart's rights (events create), and the node's metrics go on."""
    core = client.CoreV1Api(admin)
    pod = {
        "metadata": {"name": "bad-load", "annotations": {"dra-fake.dev/simulated-gpu-memory": "9" * 5000}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "x", "command": ["sleep"]}]},
    }
    core.create_namespaced_pod(NS, pod)
    try:

        def load_event() -> list[str]:
            events = core.list_namespaced_event(NS, field_selector="involvedObject.name=bad-load").items
            return [e.message for e in events if e.reason == "SimulatedLoadIgnored"]

        [message] = poll("the SimulatedLoadIgnored Event on the pod", load_event, 60)
        assert "dra-fake.dev/simulated-gpu-memory" in message and "not a string of at most 64" in message
        log = cluster.logs / "gpu-plugin-node-1.log"
        assert not forbidden(log), forbidden(log)
    finally:
        core.delete_namespaced_pod("bad-load", NS, grace_period_seconds=0)


@pytest.mark.parametrize("call", REFUSED_CALLS)
def test_everything_else_is_refused(installed: dict[str, Path], call: Any) -> None:
    with pytest.raises(ApiException) as err:
        call(sa_api(installed["node-1"]))
    assert err.value.status == 403, err.value


def test_admission_policy_keeps_a_plugin_on_its_own_node(
    installed: dict[str, Path], admin: client.ApiClient
) -> None:
    other = Kube(installed["node-2"].parent / "kubeconfig").slices(node="node-2")[0]
    assert_slices_of_its_own_node_only(
        sa_api(installed["node-1"]), "node-1", "node-2", other["metadata"]["name"]
    )


def test_admission_policy_limits_node_patches_to_the_own_nodes_plugin_labels(
    installed: dict[str, Path], admin: client.ApiClient
) -> None:
    """`nodes patch` is cluster-wide in RBAC; the chart's policy narrows it to what the plugins
    do: the resource.nvidia.com/computeDomain label and GFD's labels (with the annotation recording
    them) of their own node."""
    core = client.CoreV1Api(sa_api(installed["node-1"]))
    label = "resource.nvidia.com/computeDomain"

    def refused(node: str, labels: dict[str, str | None]) -> str:
        with pytest.raises(ApiException) as err:
            core.patch_node(node, {"metadata": {"labels": labels}})
        assert err.value.status in (403, 422), err.value
        return str(err.value.body)

    assert "may not modify node node-2" in refused("node-2", {label: "x"})
    assert "may not modify node node-2" in refused("node-2", {"nvidia.com/gpu.count": "9"})
    assert "only the label resource.nvidia.com/computeDomain and GPU Feature Discovery" in refused(
        "node-1", {"kubernetes.io/hostname": "node-2"}
    )
    assert "only the label" in refused("node-1", {"evil.example/owned": "yes"})
    assert "only the label" in refused("node-1", {"nvidia.com/gpu-evil": "yes"})  # not a GFD key
    with pytest.raises(ApiException) as err:
        core.patch_node("node-1", {"spec": {"unschedulable": True}})
    assert err.value.status in (403, 422) and "only the label" in str(err.value.body)
    with pytest.raises(ApiException) as err:
        core.patch_node("node-1", {"metadata": {"annotations": {"evil.example/note": "x"}}})
    assert err.value.status in (403, 422) and "only the label" in str(err.value.body)
    # GFD's keys and the annotation recording them: allowed on its own node
    core.patch_node("node-1", {"metadata": {"labels": {"nvidia.com/mig-1g.10gb.count": "1"}}})
    core.patch_node("node-1", {"metadata": {"labels": {"nvidia.com/mig-1g.10gb.count": None}}})
    # its own node's domain label: allowed, set and removed
    core.patch_node("node-1", {"metadata": {"labels": {label: "0f000000-0000-4000-8000-000000000000"}}})
    core.patch_node("node-1", {"metadata": {"labels": {label: None}}})
    assert label not in (client.CoreV1Api(admin).read_node("node-1").metadata.labels or {})


def test_token_without_node_binding_cannot_write_slices(
    installed: dict[str, Path], admin: client.ApiClient, cluster: LocalCluster
) -> None:
    kc = token_kubeconfig(cluster, request_token(admin, None), cluster.root / "sa-unbound.kubeconfig")
    assert_unbound_token_writes_no_slices(sa_api(kc), "node-1")
