"""The ComputeDomain components with the chart's RBAC: a two-node domain's whole flow with the
plugins', controller's and IMEX daemons' tokens (no 403 anywhere), and the calls each is refused."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.computedomainbed import (
    cd_manifest,
    channel_pod,
    channels_seen,
    create_cd,
    get_cd,
    get_template,
    node_statuses,
)
from e2e.kube import poll
from e2e.rbac.bed import CHART_BED, NS
from e2e.rbac.chart import Chart
from e2e.rbac.checks import CD_REFUSED_CALLS

pytestmark = CHART_BED


def test_compute_domain_flow_with_the_charts_rbac(chart: Chart) -> None:
    """CD -> workload template (controller) -> 2 pods on 2 nodes: node labels (plugins), daemon
    DaemonSet (controller), daemons join their clique (daemon SA) -> channels injected -> Ready ->
    deleted: every object and label gone (controller). No 403 in any of their logs."""
    kube = chart.kube
    ns = kube.namespace("rbac-cd")
    try:
        uid = create_cd(kube, ns, cd_manifest("cd", "imex-channel-0", num_nodes=2))["metadata"]["uid"]
        template = poll("workload template", lambda: get_template(kube, ns, "imex-channel-0"), 60)
        assert template["metadata"]["labels"]["resource.nvidia.com/computeDomain"] == uid
        for name in ("worker-0", "worker-1"):
            kube.core.create_namespaced_pod(ns, channel_pod(name, "imex-channel-0"))
        pods = [kube.wait_running(ns, name, timeout=120) for name in ("worker-0", "worker-1")]
        assert {p["spec"]["nodeName"] for p in pods} == set(chart.nodes)
        for pod in pods:
            name = pod["metadata"]["name"]
            # a read-only directory of placeholder files mounted there (computedomain/plugin/edits.py)
            assert channels_seen(chart.bed, ns, name) == ["channel0"]
            assert chart.bed.container(ns, name).env()["COMPUTE_DOMAIN_UUID"] == uid
        assert poll(
            "CD Ready on both nodes",
            lambda: node_statuses(kube, ns, "cd") == ("Ready", {n: "Ready" for n in chart.nodes}),
            60,
        )
        [clique] = [
            c
            for c in kube.custom.list_namespaced_custom_object(
                "resource.nvidia.com", "v1beta1", NS, "computedomaincliques"
            )["items"]
            if c["metadata"]["name"].startswith(f"{uid}.")
        ]
        # written by the daemon SA
        assert sorted(d["nodeName"] for d in clique["daemons"]) == sorted(chart.nodes)
        daemons = chart.logs("imex-daemons", None)  # before their pods go
        for name in ("worker-0", "worker-1"):
            kube.delete_pod(ns, name)
        kube.custom.delete_namespaced_custom_object(
            "resource.nvidia.com", "v1beta1", ns, "computedomains", "cd"
        )

        def gone() -> bool:
            try:
                get_cd(kube, ns, "cd")
                return False
            except ApiException as err:
                return err.status == 404

        poll("ComputeDomain deleted by the controller", gone, 90)
        apps = client.AppsV1Api(kube.api)
        assert not apps.list_namespaced_daemon_set(
            NS, label_selector=f"resource.nvidia.com/computeDomain={uid}"
        ).items
        assert not [
            n.metadata.name
            for n in kube.core.list_node(label_selector=f"resource.nvidia.com/computeDomain={uid}").items
        ]
        for component in ("cd-controller", "cd-plugin"):
            text = chart.logs(component, None)
            assert text and " 403" not in text and "Forbidden" not in text, f"{component}: {text[-3000:]}"
        assert daemons and "Forbidden" not in daemons, daemons[-3000:]
    finally:
        kube.delete_namespace(ns)


@pytest.mark.parametrize(("who", "call"), CD_REFUSED_CALLS)
def test_compute_domain_components_are_refused_the_rest(chart: Chart, who: str, call: Any) -> None:
    with pytest.raises(ApiException) as err:
        call(chart.api(chart.nodes[0] if who == "plugin" else who))
    assert err.value.status == 403, err.value
