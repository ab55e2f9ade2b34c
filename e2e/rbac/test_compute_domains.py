"""The ComputeDomain components with the chart's RBAC: a two-node domain's whole flow with the
plugins', controller's and IMEX daemons' tokens (no 403 anywhere), and the calls each is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.computedomainbed import cd_manifest, channel_pod, create_cd, get_cd, get_template, node_statuses
from e2e.kube import Kube, poll
from e2e.localcluster import LocalCluster
from e2e.localcluster.cluster import CD_CLIQUE_ID
from e2e.rbac.bed import NODES, NS, OWN_CONTROL_PLANE, sa_api
from e2e.rbac.checks import CD_REFUSED_CALLS

pytestmark = OWN_CONTROL_PLANE


def test_compute_domain_flow_with_the_charts_rbac(
    cd_installed: dict[str, Path], cluster: LocalCluster
) -> None:
    """CD -> workload template (controller) -> 2 pods on 2 nodes: node labels (plugins), daemon
    DaemonSet (controller), daemons join their clique (daemon SA) -> channels injected -> Ready ->
    deleted: every object and label gone (controller). No 403 in any of their logs."""
    kube = Kube(cluster.kubeconfig)
    ns = kube.namespace("rbac-cd")
    try:
        uid = create_cd(kube, ns, cd_manifest("cd", "imex-channel-0", num_nodes=2))["metadata"]["uid"]
        template = poll("workload template", lambda: get_template(kube, ns, "imex-channel-0"), 60)
        assert template["metadata"]["labels"]["resource.nvidia.com/computeDomain"] == uid
        for name in ("worker-0", "worker-1"):
            kube.core.create_namespaced_pod(ns, channel_pod(name, "imex-channel-0"))
        pods = [kube.wait_running(ns, name, timeout=120) for name in ("worker-0", "worker-1")]
        assert {p["spec"]["nodeName"] for p in pods} == set(NODES)
        for pod in pods:
            record = json.loads(
                next(
                    (cluster.node_dir(pod["spec"]["nodeName"]) / "pods").glob(
                        f"{ns}_{pod['metadata']['name']}_*.json"
                    )
                ).read_text()
            )["containers"]["ctr"]
            # a read-only directory of placeholder files mounted there (computedomain/plugin/edits.py)
            channels = []
            for m in record.get("mounts", []):
                if m["destination"] == "/dev/nvidia-caps-imex-channels":
                    channels += [f"{m['destination']}/{f}" for f in sorted(os.listdir(m["source"]))]
            assert channels == ["/dev/nvidia-caps-imex-channels/channel0"]
            assert f"COMPUTE_DOMAIN_UUID={uid}" in record["env"]
        assert poll(
            "CD Ready on both nodes",
            lambda: node_statuses(kube, ns, "cd") == ("Ready", {n: "Ready" for n in NODES}),
            60,
        )
        clique = kube.custom.get_namespaced_custom_object(
            "resource.nvidia.com", "v1beta1", NS, "computedomaincliques", f"{uid}.{CD_CLIQUE_ID}"
        )
        assert sorted(d["nodeName"] for d in clique["daemons"]) == list(NODES)  # written by the daemon SA
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
        for log in [
            cluster.logs / "cd-controller.log",
            *(cluster.logs / f"cd-plugin-{n}.log" for n in NODES),
        ]:
            text = log.read_text()
            assert " 403" not in text and "Forbidden" not in text, f"{log}: {text[-3000:]}"
        for exec_log in cluster.root.glob("nodes/*/exec/*.log"):
            assert "Forbidden" not in exec_log.read_text(), exec_log
    finally:
        kube.delete_namespace(ns)


@pytest.mark.parametrize(("who", "call"), CD_REFUSED_CALLS)
def test_compute_domain_components_are_refused_the_rest(
    cd_installed: dict[str, Path], who: str, call: Any
) -> None:
    with pytest.raises(ApiException) as err:
        call(sa_api(cd_installed[who]))
    assert err.value.status == 403, err.value
