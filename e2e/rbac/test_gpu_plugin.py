"""The GPU kubelet plugin with the chart's ServiceAccount: it publishes, prepares a pod's GPU, writes
its node's fault status and Events; everything else is refused, and the admission policy keeps it
to its own node's ResourceSlices and labels."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.kube import pod_with_claim_template, poll
from e2e.rbac.bed import CHART_BED, NS, forbidden, request_token
from e2e.rbac.chart import Chart
from e2e.rbac.checks import (
    REFUSED_CALLS,
    assert_slices_of_its_own_node_only,
    assert_unbound_token_writes_no_slices,
)

pytestmark = CHART_BED


def test_plugins_publish_with_the_charts_service_account(chart: Chart) -> None:
    kube, core = chart.kube, client.CoreV1Api(chart.admin)
    for node in chart.nodes:
        slices = kube.slices(node=node)
        devices = [d["name"] for s in slices for d in s["spec"]["devices"]]
        gpus = {d.split("-mig-")[0] for d in devices}  # a MIG device's name starts with its GPU's
        if node in chart.default_nodes:
            assert devices == [f"gpu-{i}" for i in range(8)], devices  # the chart's default inventory
        assert slices[0]["metadata"]["ownerReferences"][0]["name"] == node

        def labelled(node: str = node) -> dict[str, str] | None:
            labels = core.read_node(node).metadata.labels or {}
            return labels if "nvidia.com/gpu.product" in labels else None

        # GPU Feature Discovery's labels, written with the chart's rights through its policy
        labels = poll(f"GFD labels on {node}", labelled, 60)
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.count"] == str(len(gpus)), (labels, devices)


def test_pod_with_gpu_runs_and_nvidia_smi_shows_its_gpu(chart: Chart) -> None:
    kube = chart.kube
    ns = kube.namespace("rbac")
    try:
        kube.apply_yaml(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: one}\n"
            "spec:\n  spec:\n    devices:\n      requests:\n"
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n",
            ns,
        )
        pod = pod_with_claim_template("p", "one")
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": chart.default_nodes[0]}  # 8 x H100
        kube.create(pod, ns)
        kube.wait_running(ns, "p")  # prepared by a plugin running with the chart's rights
        # What the CDI spec gave the container: the nvidia-smi it mounts, run against its files.
        result = chart.bed.container(ns, "p").nvidia_smi("-L")
        assert result.code == 0, result.output
        claim = kube.claims(ns)[0]
        [(_, pool, device)] = kube.allocated_devices(claim)
        uuid = next(
            d["attributes"]["uuid"]["string"]
            for s in kube.slices(node=pool)
            for d in s["spec"]["devices"]
            if d["name"] == device
        )
        assert result.output == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {uuid})\n"
    finally:
        kube.delete_namespace(ns)


@pytest.mark.needs("slice-taints")
def test_plugin_writes_the_status_of_its_nodes_faults(chart: Chart) -> None:
    """The GPU plugin of the first node, with the chart's rights, watches its node's GpuFaults,
    writes their status and taints the device (the local cluster's plugins and kind's run with
    NVMLDeviceHealthCheck)."""
    custom = client.CustomObjectsApi(chart.admin)
    node = chart.nodes[0]
    fault = {
        "apiVersion": "dra-fake.dev/v1alpha1",
        "kind": "GpuFault",
        "metadata": {"name": "rbac-xid"},
        "spec": {"nodeName": node, "device": "gpu-3", "kind": "xid", "xid": 79, "recovery": "clear"},
    }
    custom.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault)
    try:

        def status() -> Any:
            obj = custom.get_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "rbac-xid")
            return (obj.get("status") or {}).get("phase") == "Active" and obj["status"]

        got = poll("GpuFault rbac-xid Active", status, 60)
        assert got["message"] == "on gpu-3" and got["node"] == node, got
        kube = chart.kube

        def tainted() -> list[str]:
            return [
                d["name"] for s in kube.slices(node=node) for d in s["spec"]["devices"] if d.get("taints")
            ]

        assert poll("gpu-3 tainted", tainted, 60) == ["gpu-3"]
    finally:
        custom.delete_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "rbac-xid")
    assert poll("gpu-3 no longer tainted", lambda: not tainted(), 60)


def test_a_hostile_load_annotation_gets_an_event_and_stops_nothing(chart: Chart) -> None:
    """Any pod of a node may carry the simulated-load annotations: one of 5,000 digits (Python's
    int() limit, which stopped the node's sampler) gets a SimulatedLoadIgnored Event, posted by
    the first node's plugin with the chart's rights (events create), and the node's metrics go on."""
    core = client.CoreV1Api(chart.admin)
    node = chart.nodes[0]
    container = {"name": "c", "image": "x", "imagePullPolicy": "Never", "command": ["sleep"]}
    pod = {
        "metadata": {"name": "bad-load", "annotations": {"dra-fake.dev/simulated-gpu-memory": "9" * 5000}},
        "spec": {"nodeName": node, "containers": [container]},
    }
    core.create_namespaced_pod(NS, pod)
    try:

        def load_event() -> list[str]:
            events = core.list_namespaced_event(NS, field_selector="involvedObject.name=bad-load").items
            return [e.message for e in events if e.reason == "SimulatedLoadIgnored"]

        [message] = poll("the SimulatedLoadIgnored Event on the pod", load_event, 60)
        assert "dra-fake.dev/simulated-gpu-memory" in message and "not a string of at most 64" in message
        log = chart.logs("gpu-plugin", node)
        assert not forbidden(log), forbidden(log)
    finally:
        core.delete_namespaced_pod("bad-load", NS, grace_period_seconds=0)


@pytest.mark.parametrize("call", REFUSED_CALLS)
def test_everything_else_is_refused(chart: Chart, call: Any) -> None:
    with pytest.raises(ApiException) as err:
        call(chart.api(chart.nodes[0]))
    assert err.value.status == 403, err.value


def test_admission_policy_keeps_a_plugin_on_its_own_node(chart: Chart) -> None:
    own, other = chart.nodes
    other_slice = chart.kube.slices(node=other)[0]["metadata"]["name"]
    assert_slices_of_its_own_node_only(chart.api(own), own, other, other_slice)


def test_admission_policy_limits_node_patches_to_the_own_nodes_plugin_labels(chart: Chart) -> None:
    """`nodes patch` is cluster-wide in RBAC; the chart's policy narrows it to what the plugins
    do: the resource.nvidia.com/computeDomain label and GFD's labels (with the annotation recording
    them) of their own node."""
    own, other = chart.nodes
    core = client.CoreV1Api(chart.api(own))
    label = "resource.nvidia.com/computeDomain"

    def refused(node: str, labels: dict[str, str | None]) -> str:
        with pytest.raises(ApiException) as err:
            core.patch_node(node, {"metadata": {"labels": labels}})
        assert err.value.status in (403, 422), err.value
        return str(err.value.body)

    assert f"may not modify node {other}" in refused(other, {label: "x"})
    assert f"may not modify node {other}" in refused(other, {"nvidia.com/gpu.count": "9"})
    assert "only the label resource.nvidia.com/computeDomain and GPU Feature Discovery" in refused(
        own, {"kubernetes.io/hostname": other}
    )
    assert "only the label" in refused(own, {"evil.example/owned": "yes"})
    assert "only the label" in refused(own, {"nvidia.com/gpu-evil": "yes"})  # not a GFD key
    with pytest.raises(ApiException) as err:
        core.patch_node(own, {"spec": {"unschedulable": True}})
    assert err.value.status in (403, 422) and "only the label" in str(err.value.body)
    with pytest.raises(ApiException) as err:
        core.patch_node(own, {"metadata": {"annotations": {"evil.example/note": "x"}}})
    assert err.value.status in (403, 422) and "only the label" in str(err.value.body)
    # GFD's keys and the annotation recording them: allowed on its own node
    core.patch_node(own, {"metadata": {"labels": {"nvidia.com/mig-1g.10gb.count": "1"}}})
    core.patch_node(own, {"metadata": {"labels": {"nvidia.com/mig-1g.10gb.count": None}}})
    # its own node's domain label: allowed, set and removed
    core.patch_node(own, {"metadata": {"labels": {label: "0f000000-0000-4000-8000-000000000000"}}})
    core.patch_node(own, {"metadata": {"labels": {label: None}}})
    assert label not in (client.CoreV1Api(chart.admin).read_node(own).metadata.labels or {})


def test_token_without_node_binding_cannot_write_slices(chart: Chart) -> None:
    """A token of the plugin's ServiceAccount bound to no pod."""
    [pod] = chart.kube.core.list_namespaced_pod(
        NS,
        label_selector="app.kubernetes.io/component=kubelet-plugin",
        field_selector=f"spec.nodeName={chart.nodes[0]}",
    ).items
    token = request_token(chart.admin, None, pod.spec.service_account_name)
    assert_unbound_token_writes_no_slices(chart.token_api(token, "unbound"), chart.nodes[0])
