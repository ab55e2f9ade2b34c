"""What `helm template charts/dra-fake` renders for metrics and node labels (no cluster;
tests/chartrender.py; docs/observability.md): the dcgm-exporter endpoint, Service and ServiceMonitor,
the Grafana dashboard, and the node labels' rights, policy and uninstall hook.
"""

from __future__ import annotations

import json
from typing import Any

from tests.chartrender import V1, by_name, kinds_and_names, names, of_kind, render

# --- metrics and node labels (docs/observability.md) -----------------------------------------------

SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
NODE_LABEL_POLICY = {
    ("ValidatingAdmissionPolicy", "r-dra-fake-kubelet-plugin-own-node-label"),
    ("ValidatingAdmissionPolicyBinding", "r-dra-fake-kubelet-plugin-own-node-label"),
}


def gpu_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    [ds] = of_kind(docs, "DaemonSet")
    ctr: dict[str, Any] = ds["spec"]["template"]["spec"]["containers"][0]
    return ctr


def plugin_rules(docs: list[dict[str, Any]]) -> dict[str, list[str]]:
    role = by_name(docs, "ClusterRole", "r-dra-fake-kubelet-plugin")
    return {r["resources"][0]: r["verbs"] for r in role["rules"] if r["apiGroups"] == [""]}


def test_dcgm_exporter_endpoint_service_and_service_monitor() -> None:
    docs = render(apis=[*V1, SERVICE_MONITOR_API])
    ctr = gpu_container(docs)
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert (env["DCGM_EXPORTER_PORT"], env["NODE_LABELS"], env["MIG_STRATEGY"]) == ("9400", "true", "none")
    assert {"name": "dcgm-metrics", "containerPort": 9400, "protocol": "TCP"} in ctr["ports"]
    svc = by_name(docs, "Service", "r-dra-fake-dcgm-exporter")
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 9400, "targetPort": "dcgm-metrics", "protocol": "TCP"}
    ]
    assert svc["spec"]["selector"]["dra-fake.dev/gpu-metrics"] == "true"
    monitor = by_name(docs, "ServiceMonitor", "r-dra-fake-dcgm-exporter")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert plugin_rules(docs)["pods"] == ["list", "watch"]
    # without the Prometheus Operator's CRD no ServiceMonitor; disabled: no port, no pod watch
    assert not of_kind(render(), "ServiceMonitor")
    off = render(**{"dcgmExporter.enabled": "false"})
    env = {e["name"]: e.get("value") for e in gpu_container(off)["env"]}
    assert env["DCGM_EXPORTER_PORT"] == "-1" and "pods" not in plugin_rules(off)
    assert "r-dra-fake-dcgm-exporter" not in names(off, "Service")


def test_grafana_dashboard_config_map() -> None:
    assert "r-dra-fake-gpu-dashboard" not in names(render(), "ConfigMap")
    docs = render(**{"dcgmExporter.grafanaDashboard.enabled": "true"})
    cm = by_name(docs, "ConfigMap", "r-dra-fake-gpu-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["dra-fake-gpus.json"])
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p.get("targets", []))
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"):
        assert metric in exprs
    assert 'pod!=""' in exprs  # per-pod panels


def test_node_labels_rights_policy_and_uninstall_hook() -> None:
    docs = render()
    assert plugin_rules(docs)["nodes"] == ["get", "patch"]
    assert kinds_and_names(docs) >= NODE_LABEL_POLICY
    hook = [d for d in docs if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    assert {(d["kind"], d["metadata"]["annotations"]["helm.sh/hook"]) for d in hook} == {
        ("ServiceAccount", "pre-delete"),
        ("ClusterRole", "pre-delete"),
        ("ClusterRoleBinding", "pre-delete"),
        ("Job", "pre-delete"),
    }
    job = by_name(docs, "Job", "r-dra-fake-node-labels-cleanup")
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"] == ["dra-fake", "node-labels", "remove"]
    assert pod["serviceAccountName"] == "r-dra-fake-node-labels-cleanup"
    role = by_name(docs, "ClusterRole", "r-dra-fake-node-labels-cleanup")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "patch"]}]
    policy = by_name(docs, "ValidatingAdmissionPolicy", "r-dra-fake-kubelet-plugin-own-node-label")
    own = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "ownLabels")
    assert "resource.nvidia.com/computeDomain" in own and "nvidia[.]com/(gfd[.]|gpu[.]" in own
    off = render(**{"nodeLabels.enabled": "false"})
    assert plugin_rules(off)["nodes"] == ["get"] and "Job" not in {d["kind"] for d in off}
    policy = by_name(off, "ValidatingAdmissionPolicy", "r-dra-fake-kubelet-plugin-own-node-label")
    own = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "ownLabels")
    assert "gpu[.]" not in own  # only the ComputeDomain label left
    neither = render(**{"nodeLabels.enabled": "false", "computeDomains.enabled": "false"})
    assert not kinds_and_names(neither) & NODE_LABEL_POLICY
