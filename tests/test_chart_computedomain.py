"""What `helm template charts/dra-fake` renders for ComputeDomains (no cluster; tests/chartrender.py):
on by default and off when disabled, the plugin container, the controller's Deployment, its RBAC,
and the chart's CRDs.
"""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

from tests.chartrender import CHART, HELM, REPO, by_name, kinds_and_names, of_kind, render

# --- ComputeDomains -----------------------------------------------------------------------------

CD_OBJECTS = {
    ("ServiceAccount", "r-dra-fake-compute-domain-controller"),
    ("ServiceAccount", "compute-domain-daemon-service-account"),
    ("Deployment", "r-dra-fake-compute-domain-controller"),
    ("ClusterRole", "r-dra-fake-kubelet-plugin-compute-domains"),
    ("ClusterRoleBinding", "r-dra-fake-kubelet-plugin-compute-domains"),
    ("Role", "r-dra-fake-kubelet-plugin-compute-domains"),
    ("RoleBinding", "r-dra-fake-kubelet-plugin-compute-domains"),
    ("ClusterRole", "r-dra-fake-compute-domain-controller"),
    ("ClusterRoleBinding", "r-dra-fake-compute-domain-controller"),
    ("Role", "r-dra-fake-compute-domain-controller"),
    ("RoleBinding", "r-dra-fake-compute-domain-controller"),
    ("Role", "r-dra-fake-compute-domain-daemon"),
    ("RoleBinding", "r-dra-fake-compute-domain-daemon"),
    ("DeviceClass", "compute-domain-daemon.nvidia.com"),
    ("DeviceClass", "compute-domain-default-channel.nvidia.com"),
    *(
        (kind, name)
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        for name in (
            "r-dra-fake-compute-domain-controller-imex-daemonsets",
            "r-dra-fake-compute-domain-controller-node-label",
            "compute-domain-daemon-service-account-own-pod-label",
            "r-dra-fake-compute-domain-claims",
        )
    ),
}


def test_compute_domains_on_by_default_and_off_when_disabled() -> None:
    on, off = render(), render(**{"computeDomains.enabled": "false"})
    assert kinds_and_names(on) >= CD_OBJECTS
    assert kinds_and_names(on) - kinds_and_names(off) == CD_OBJECTS
    node_events = {"r-dra-fake-kubelet-plugin-node-events"}
    assert all(
        obj["metadata"].get("namespace") in (None, "dra-fake")
        or (obj["metadata"]["name"] in node_events and obj["metadata"]["namespace"] == "default")
        for obj in on
    )
    [ds] = of_kind(off, "DaemonSet")
    assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == ["gpus"]
    svc = by_name(off, "Service", "r-dra-fake-metrics")
    assert [p["port"] for p in svc["spec"]["ports"]] == [8080]


def test_compute_domain_plugin_container() -> None:
    [ds] = of_kind(render(), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    gpus, cd = pod["containers"]
    assert cd["name"] == "compute-domains"
    assert cd["command"] == ["dra-fake", "compute-domain-kubelet-plugin"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in cd["env"]}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["DRIVER_NAME"] == "compute-domain.nvidia.com" and env["NAMESPACE"] == "dra-fake"
    assert env["HEALTHCHECK_ADDRESS"] == "$(POD_IP)" and env["METRICS_PORT"] == "8081"
    assert cd["livenessProbe"]["grpc"]["port"] == int(env["HEALTHCHECK_PORT"]) == 51515
    assert "DRA_FAKE_IMEX_CLIQUE_ID" not in env  # from the inventory unless set
    # same host paths and mounts as the GPU plugin; its security context plus CHOWN only (it hands
    # each domain's IMEX directory to the daemon's group), and the daemon's uid/gid
    assert cd["volumeMounts"] == gpus["volumeMounts"]
    assert {k: v for k, v in cd["securityContext"].items() if k != "capabilities"} == {
        k: v for k, v in gpus["securityContext"].items() if k != "capabilities"
    }
    assert gpus["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert cd["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert (env["DAEMON_RUN_AS_USER"], env["DAEMON_RUN_AS_GROUP"]) == ("65532", "65532")
    assert ds["spec"]["updateStrategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    clique = "0b0f0c2d-6c67-4bba-9b6b-2a2f1e7ef7a1.7"
    [ds] = of_kind(render(**{"computeDomains.imexCliqueID": clique}), "DaemonSet")
    cd = ds["spec"]["template"]["spec"]["containers"][1]
    assert {"name": "DRA_FAKE_IMEX_CLIQUE_ID", "value": clique} in cd["env"]


def test_compute_domain_controller_deployment() -> None:
    deploy = by_name(render(), "Deployment", "r-dra-fake-compute-domain-controller")
    pod = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 1
    assert pod["serviceAccountName"] == "r-dra-fake-compute-domain-controller"
    [ctr] = pod["containers"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in ctr["env"]}
    assert ctr["command"] == ["dra-fake", "compute-domain-controller"]
    assert env["NAMESPACE"] == "dra-fake" and env["LEADER_ELECT"] == "false"
    assert env["IMAGE_NAME"] == "dra-fake:0.1.0" and env["MAX_NODES_PER_IMEX_DOMAIN"] == "18"
    assert ctr["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    assert ctr["securityContext"]["runAsNonRoot"] is True
    # the flags the environment feeds exist (a renamed flag would silently fall back to its default)
    from dra_fake.cli import build_parser

    args = build_parser().parse_args(["compute-domain-controller"])
    for name in ("namespace", "daemon_image", "max_nodes_per_imex_domain", "leader_elect", "metrics_port"):
        assert hasattr(args, name), name
    docs = render(
        **{
            "computeDomains.controller.replicas": "2",
            "computeDomains.controller.leaderElection.enabled": "true",
            "computeDomains.controller.metricsPort": "9090",
            "computeDomains.controller.daemonImage": "example.com/dra-fake:1",
        }
    )
    deploy = by_name(docs, "Deployment", "r-dra-fake-compute-domain-controller")
    [ctr] = deploy["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert deploy["spec"]["replicas"] == 2 and env["LEADER_ELECT"] == "true"
    assert env["METRICS_PORT"] == "9090" and ctr["ports"][0]["containerPort"] == 9090
    assert env["IMAGE_NAME"] == "example.com/dra-fake:1"
    lease_rules = [
        r
        for r in by_name(docs, "Role", "r-dra-fake-compute-domain-controller")["rules"]
        if "leases" in r["resources"]
    ]
    assert lease_rules == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["compute-domain-controller"],
            "verbs": ["get", "update"],
        },
    ]


def rules(obj: dict[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [
        (g, res, tuple(r["verbs"])) for r in obj["rules"] for g in r["apiGroups"] for res in r["resources"]
    ]


def test_compute_domain_rbac_is_least_privilege() -> None:
    docs = render()
    plugin = "r-dra-fake-kubelet-plugin-compute-domains"
    ctrl = "r-dra-fake-compute-domain-controller"
    assert rules(by_name(docs, "ClusterRole", plugin)) == [
        ("resource.nvidia.com", "computedomains", ("get", "list", "watch")),
        ("", "nodes", ("get", "patch")),
    ]
    assert rules(by_name(docs, "Role", plugin)) == [("resource.nvidia.com", "computedomaincliques", ("get",))]
    assert rules(by_name(docs, "ClusterRole", ctrl)) == [
        ("resource.nvidia.com", "computedomains", ("list", "watch", "patch")),
        ("resource.nvidia.com", "computedomains/status", ("patch",)),
        ("resource.k8s.io", "resourceclaimtemplates", ("get", "list", "create", "delete", "patch")),
        ("", "nodes", ("list", "patch")),
        ("", "events", ("create",)),
    ]
    assert rules(by_name(docs, "Role", ctrl)) == [  # leader election off: no Lease rules
        ("apps", "daemonsets", ("get", "list", "create", "delete", "patch")),
        ("resource.nvidia.com", "computedomaincliques", ("list", "watch", "delete")),
        ("", "pods", ("list", "watch")),
    ]
    assert rules(by_name(docs, "Role", "r-dra-fake-compute-domain-daemon")) == [
        ("resource.nvidia.com", "computedomaincliques", ("get", "create", "update")),
        ("", "pods", ("get", "patch")),
    ]
    subjects = {
        (b["kind"], b["metadata"]["name"]): [(s["name"], s["namespace"]) for s in b["subjects"]]
        for b in of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding")
    }
    assert subjects[("ClusterRoleBinding", plugin)] == [("r-dra-fake-kubelet-plugin", "dra-fake")]
    assert subjects[("RoleBinding", plugin)] == [("r-dra-fake-kubelet-plugin", "dra-fake")]
    assert subjects[("RoleBinding", "r-dra-fake-compute-domain-daemon")] == [
        ("compute-domain-daemon-service-account", "dra-fake")
    ]
    for kind in ("ClusterRole", "Role"):  # no wildcards anywhere
        for obj in of_kind(docs, kind):
            assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in obj["rules"]), obj


def test_chart_crds_are_the_repositorys() -> None:
    """helm installs the chart's crds/ (not rendered by `helm template` without --include-crds)."""
    args = [
        str(HELM),
        "template",
        "r",
        str(CHART),
        "-n",
        "dra-fake",
        "--kube-version",
        "1.37.0",
        "--include-crds",
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=True).stdout
    crds = {
        d["metadata"]["name"]: d
        for d in yaml.safe_load_all(out)
        if d and d["kind"] == "CustomResourceDefinition"
    }
    repo = {
        d["metadata"]["name"]: d
        for d in (yaml.safe_load(p.read_text()) for p in sorted((REPO / "crds").glob("*.yaml")))
    }
    assert crds == repo
