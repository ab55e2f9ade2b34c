"""What `helm template charts/dra-fake` renders (no cluster): API-version choice from the server's
capabilities, the DaemonSet contract, node pools, driver names, and inventories the plugin accepts.

Needs helm from hack/install-tools.sh (`make chart-check` builds it and runs this file); without
it the module is skipped, unless DRA_FAKE_REQUIRE_TOOLS=1 (then it fails).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.plugin import slices as cd_classes
from dra_fake.gpu.deviceclasses import spot_class
from dra_fake.gpu.inventory import build_inventory, parse_config
from dra_fake.gpu.profiles import load_profiles

REPO = Path(__file__).resolve().parents[1]
HELM = Path(os.environ.get("HELM", REPO / ".tools" / "bin" / "helm"))
CHART = REPO / "charts" / "dra-fake"
V1 = ["resource.k8s.io/v1/DeviceClass", "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"]

if not HELM.exists():
    if os.environ.get("DRA_FAKE_REQUIRE_TOOLS") == "1":
        raise RuntimeError(f"{HELM} missing: run hack/install-tools.sh")
    pytest.skip(f"needs {HELM}: run hack/install-tools.sh (make chart-check does)", allow_module_level=True)


def render(
    kube: str = "1.37.0", apis: list[str] | None = None, *, ns: str = "dra-fake", **sets: str
) -> list[dict[str, Any]]:
    args = [str(HELM), "template", "r", str(CHART), "-n", ns, "--kube-version", kube]
    for a in V1 if apis is None else apis:
        args += ["--api-versions", a]
    for k, v in sets.items():
        args += ["-f", v] if k == "values" else ["--set", f"{k}={v}"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if out.returncode:
        raise AssertionError(out.stderr)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


@pytest.mark.parametrize(
    ("kube", "apis", "expected"),
    [
        ("1.32.0", ["resource.k8s.io/v1beta1/DeviceClass"], "v1beta1"),
        ("1.33.0", ["resource.k8s.io/v1beta1/DeviceClass", "resource.k8s.io/v1beta2/DeviceClass"], "v1beta2"),
        ("1.37.0", [*V1, "resource.k8s.io/v1beta2/DeviceClass"], "v1"),
        ("1.34.0", [], "v1"),  # nothing known about the server: by its version
        ("1.32.0", [], "v1beta1"),
    ],
)
def test_deviceclass_api_version_from_capabilities(kube: str, apis: list[str], expected: str) -> None:
    classes = of_kind(render(kube, apis), "DeviceClass")
    assert [(c["apiVersion"], c["metadata"]["name"]) for c in classes] == [
        (f"resource.k8s.io/{expected}", "gpu.nvidia.com"),
        (f"resource.k8s.io/{expected}", "mig.nvidia.com"),
        (f"resource.k8s.io/{expected}", "compute-domain-daemon.nvidia.com"),
        (f"resource.k8s.io/{expected}", "compute-domain-default-channel.nvidia.com"),
    ]
    # the compute-domain classes are the plugin's own (computedomain/plugin/slices.py), at this version
    assert classes[2:] == [
        {**c, "metadata": {**c["metadata"], "labels": classes[2]["metadata"]["labels"]}}
        for c in cd_classes.device_classes(expected)  # type: ignore[arg-type]
    ]
    gpu = classes[0]["spec"]
    assert gpu["selectors"][0]["cel"]["expression"] == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    assert ("extendedResourceName" in gpu) == (expected == "v1")
    # the policies render whatever Helm knows of the server (helm template | kubectl apply, GitOps)
    assert of_kind(render(kube, apis), "ValidatingAdmissionPolicy")


def test_daemonset_contract() -> None:
    [ds] = of_kind(render(), "DaemonSet")
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    # Kubelets before 1.33 drop a driver when any of its sockets goes: no surge pod there.
    [old] = of_kind(render("1.32.0"), "DaemonSet")
    assert old["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    pod = ds["spec"]["template"]["spec"]
    ctr, _ = pod["containers"]
    assert ctr["name"] == "gpus"
    assert ctr["readinessProbe"]["grpc"] == {"port": 51516, "service": "kubelet-registered"}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in ctr["env"]}
    assert env["POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["DRIVER_NAME"] == "gpu.nvidia.com" and env["HEALTHCHECK_ADDRESS"] == "$(POD_IP)"
    assert ctr["livenessProbe"]["grpc"]["port"] == int(env["HEALTHCHECK_PORT"]) == 51516
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host == {
        "plugins-registry": "/var/lib/kubelet/plugins_registry",
        "plugins": "/var/lib/kubelet/plugins",
        "cdi": "/var/run/cdi",
    }
    mounts = {m["name"]: m["mountPath"] for m in ctr["volumeMounts"]}
    assert all(mounts[name] == path for name, path in host.items())  # same paths as on the host
    sc = ctr["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"] is True
    assert pod["serviceAccountName"] == "r-dra-fake-kubelet-plugin"
    assert "r-dra-fake-kubelet-plugin" in names(render(), "ServiceAccount")
    svc = by_name(render(), "Service", "r-dra-fake-metrics")
    assert svc["spec"]["clusterIP"] == "None"
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        (8080, "metrics"),
        (8081, "metrics-cd"),
    ]


def test_both_plugins_get_the_cpu_affinity_and_a_wrong_one_is_refused() -> None:
    def affinity(**values: str) -> list[str]:
        [ds] = of_kind(render(**values), "DaemonSet")
        containers = ds["spec"]["template"]["spec"]["containers"]
        return [next(e["value"] for e in c["env"] if e["name"] == "CPU_AFFINITY") for c in containers]

    assert affinity() == ["inherit", "inherit"]
    assert affinity(**{"kubeletPlugin.cpuAffinity": "one"}) == ["one", "one"]
    with pytest.raises(AssertionError, match="cpuAffinity"):
        render(**{"kubeletPlugin.cpuAffinity": "two"})


def names(docs: list[dict[str, Any]], kind: str) -> list[str]:
    return [d["metadata"]["name"] for d in of_kind(docs, kind)]


def by_name(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [obj] = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    return obj


def test_rbac_is_least_privilege() -> None:
    role = by_name(render(), "ClusterRole", "r-dra-fake-kubelet-plugin")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},  # own Node only (policy)
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},  # on a pod: bad annotation
        # deviceStatus (on by default): claims watched (attach), their status applied per driver
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["patch"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/driver"],
            "resourceNames": ["gpu.nvidia.com", "compute-domain.nvidia.com"],
            "verbs": ["associated-node:patch"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["list", "watch", "create", "update", "delete"],
        },
        {"apiGroups": ["dra-fake.dev"], "resources": ["gpufaults"], "verbs": ["list", "watch"]},
        {"apiGroups": ["dra-fake.dev"], "resources": ["gpufaults/status"], "verbs": ["patch"]},
    ]
    off = by_name(render(deviceStatus="false"), "ClusterRole", "r-dra-fake-kubelet-plugin")
    claims = [r for r in off["rules"] if r["resources"][0].startswith("resourceclaims")]
    assert claims == [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]}]


def test_plugins_may_post_node_events_in_the_default_namespace_only() -> None:
    """The CheckpointCorrupt Event goes to `default`, where the kubelet records Node events."""
    docs = render()
    role = by_name(docs, "Role", "r-dra-fake-kubelet-plugin-node-events")
    assert role["metadata"]["namespace"] == "default"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    binding = by_name(docs, "RoleBinding", "r-dra-fake-kubelet-plugin-node-events")
    assert binding["metadata"]["namespace"] == "default"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "r-dra-fake-kubelet-plugin", "namespace": "dra-fake"}
    ]


def affinity_terms(ds: dict[str, Any]) -> list[list[tuple[str, str, str]]]:
    aff = ds["spec"]["template"]["spec"].get("affinity", {}).get("nodeAffinity", {})
    terms = aff.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get("nodeSelectorTerms", [])
    return [[(e["key"], e["operator"], e["values"][0]) for e in t["matchExpressions"]] for t in terms]


def matches(labels: dict[str, str], terms: list[list[tuple[str, str, str]]]) -> bool:
    if not terms:
        return True

    def ok(key: str, op: str, value: str) -> bool:
        return (labels.get(key) == value) if op == "In" else (labels.get(key) != value)

    return any(all(ok(*e) for e in term) for term in terms)


def test_node_pools_give_every_node_exactly_one_plugin() -> None:
    docs = render(values=str(CHART / "ci" / "pools-values.yaml"))
    daemonsets = {d["metadata"]["name"]: affinity_terms(d) for d in of_kind(docs, "DaemonSet")}
    assert sorted(daemonsets) == [
        "r-dra-fake-a100-kubelet-plugin",
        "r-dra-fake-classic-device-plugin",
        "r-dra-fake-gb200-kubelet-plugin",
        "r-dra-fake-h100-kubelet-plugin",
        "r-dra-fake-kubelet-plugin",
    ]
    pool, zone = "dra-fake.dev/pool", "topology.kubernetes.io/zone"
    nodes = {
        "plain": ({}, "r-dra-fake-kubelet-plugin"),
        "a100": ({pool: "a100", zone: "z1"}, "r-dra-fake-a100-kubelet-plugin"),
        "a100-other-zone": ({pool: "a100", zone: "z2"}, "r-dra-fake-kubelet-plugin"),
        "h100": ({pool: "h100"}, "r-dra-fake-h100-kubelet-plugin"),
        "gb200": ({pool: "gb200", zone: "z1"}, "r-dra-fake-gb200-kubelet-plugin"),
        "classic": ({pool: "classic"}, "r-dra-fake-classic-device-plugin"),  # one mode per node
    }
    for node, (labels, expected) in nodes.items():
        assert [n for n, t in daemonsets.items() if matches(labels, t)] == [expected], node
    classes = [c["metadata"]["name"] for c in of_kind(docs, "DeviceClass")]
    assert classes[:2] == ["gpu.fake.example.com", "mig.fake.example.com"]
    for ds in of_kind(docs, "DaemonSet"):  # every DRA node also runs exactly one compute-domain plugin
        expected = (
            ["device-plugin"] if "device-plugin" in ds["metadata"]["name"] else ["gpus", "compute-domains"]
        )
        assert [c["name"] for c in ds["spec"]["template"]["spec"]["containers"]] == expected
    assert of_kind(docs, "DeviceClass")[0]["spec"]["extendedResourceName"] == "fake.example.com/gpu"


def test_rendered_inventories_are_accepted_by_the_plugin() -> None:
    docs = render(values=str(CHART / "ci" / "pools-values.yaml"))
    profiles = load_profiles()
    counts = {}
    for cm in of_kind(docs, "ConfigMap"):
        if "inventory.yaml" not in cm["data"]:
            continue  # the device plugin's own config
        raw = yaml.safe_load(cm["data"]["inventory.yaml"])
        inv = build_inventory(parse_config(raw, cm["metadata"]["name"]), "node-x", profiles)
        counts[cm["metadata"]["name"]] = (inv.gpus[0].profile.id, len(inv.gpus), len(inv.devices))
    assert counts["r-dra-fake-inventory"] == ("l40s", 2, 2)
    assert counts["r-dra-fake-a100-inventory"] == ("a100-sxm4-40gb", 4, 8)  # 2 MIG devices each
    assert counts["r-dra-fake-gb200-inventory"][:2] == ("gb200", 4)
    h100 = yaml.safe_load(
        next(c for c in of_kind(docs, "ConfigMap") if "h100" in c["metadata"]["name"])["data"][
            "inventory.yaml"
        ]
    )
    assert h100["driverVersion"] == "590.48.01" and h100["gpus"][0]["mig"] == "dynamic"
    default = yaml.safe_load(of_kind(render(), "ConfigMap")[0]["data"]["inventory.yaml"])
    assert default == {"gpus": [{"profile": "h100-sxm5-80gb", "count": 8}]}


def test_refusals() -> None:
    with pytest.raises(AssertionError, match="own namespace"):
        render(ns="default")
    render(ns="default", allowDefaultNamespace="true")
    with pytest.raises(AssertionError, match=r"compute-domain\.nvidia\.com only"):
        render(**{"driverNames.computeDomain": "compute-domain.fake.example.com"})
    render(**{"driverNames.computeDomain": "cd.fake.example.com", "computeDomains.enabled": "false"})
    with pytest.raises(AssertionError, match="imexCliqueID"):
        render(**{"computeDomains.imexCliqueID": "clique-1"})
    with pytest.raises(AssertionError, match="mig"):
        render(**{"inventory.mig": "sometimes"})
    with pytest.raises(AssertionError, match=r"additional properties|not allowed"):
        render(**{"inventory.gpuCount": "3"})


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


def kinds_and_names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


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


def test_feature_gates_reach_both_plugins_and_unknown_ones_are_refused() -> None:
    docs = render(
        **{"featureGates.NVMLDeviceHealthCheck": "true", "featureGates.TimeSlicingSettings": "true"}
    )
    ds = by_name(docs, "DaemonSet", "r-dra-fake-kubelet-plugin")
    containers = ds["spec"]["template"]["spec"]["containers"]
    # both, as NVIDIA's chart: one registry (docs/reference/nvidia-compute-domains.md#9-driver-feature-gates)
    assert [
        (c["name"], next(e["value"] for e in c["env"] if e["name"] == "FEATURE_GATES")) for c in containers
    ] == [
        ("gpus", "NVMLDeviceHealthCheck=true,TimeSlicingSettings=true"),
        ("compute-domains", "NVMLDeviceHealthCheck=true,TimeSlicingSettings=true"),
    ]
    with pytest.raises(AssertionError, match="additional properties 'Bogus' not allowed"):
        render(**{"featureGates.Bogus": "true"})


def test_consumable_shares_reach_the_gpu_plugin_only_when_set_as_nvidias_chart() -> None:
    def env(**sets: str) -> dict[str, str]:
        ds = by_name(render(**sets), "DaemonSet", "r-dra-fake-kubelet-plugin")
        return {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert "CONSUMABLE_SHARES" not in env()
    shared = env(**{"consumableShares": "memory", "featureGates.ConsumableShares": "true"})
    assert shared["CONSUMABLE_SHARES"] == "memory" and shared["FEATURE_GATES"] == "ConsumableShares=true"
    assert env(**{"consumableShares": "4"})["CONSUMABLE_SHARES"] == "4"  # --set makes it a number
    assert (env()["SHARED_MEMORY_VIEW"], env(sharedMemoryView="device")["SHARED_MEMORY_VIEW"]) == (
        "share",
        "device",
    )
    with pytest.raises(AssertionError, match="sharedMemoryView"):
        render(sharedMemoryView="both")


def test_gpu_lending_reaches_the_gpu_plugin_with_its_spot_class_only_when_enabled() -> None:
    def rendered(**sets: str) -> tuple[dict[str, str], list[str]]:
        docs = render(**sets)
        ds = by_name(docs, "DaemonSet", "r-dra-fake-kubelet-plugin")
        env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
        return env, [d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass"]

    env, classes = rendered()
    assert "GPU_LENDING" not in env and "spot.gpu.nvidia.com" not in classes
    env, classes = rendered(**{"gpuLending.enabled": "true", "gpuLending.idleFor": "15"})
    assert (env["GPU_LENDING"], env["GPU_LENDING_IDLE_THRESHOLD"], env["GPU_LENDING_IDLE_FOR"]) == (
        "true",
        "10",
        "15",
    )
    [spot] = [
        d for d in render(**{"gpuLending.enabled": "true"}) if d["metadata"]["name"] == "spot.gpu.nvidia.com"
    ]
    assert spot["spec"] == spot_class("gpu.nvidia.com")["spec"]
    with pytest.raises(AssertionError, match="idleThreshold"):
        render(**{"gpuLending.enabled": "true", "gpuLending.idleThreshold": "0"})
    for bad in ("0", "some", "-1"):
        with pytest.raises(AssertionError, match="consumableShares"):
            render(**{"consumableShares": bad})


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


def test_device_plugin_pool() -> None:
    docs = render(values=str(CHART / "ci" / "pools-values.yaml"))
    ds = by_name(docs, "DaemonSet", "r-dra-fake-classic-device-plugin")
    pod = ds["spec"]["template"]["spec"]
    [ctr] = pod["containers"]
    assert ctr["command"] == ["dra-fake", "device-plugin"]
    env = {e["name"]: e.get("value") for e in ctr["env"]}
    assert (env["MIG_STRATEGY"], env["DEVICE_LIST_STRATEGY"], env["DEVICE_ID_STRATEGY"]) == (
        "mixed",
        "envvar,cdi-cri",
        "uuid",
    )
    assert env["FAIL_ON_INIT_ERROR"] == "true" and "CONFIG_FILE" not in env
    # NVIDIA's config-manager's settings: the node label picks one of the ConfigMap's files
    assert (
        env["CONFIG_FILE_SRCDIR"],
        env["NODE_LABEL"],
        env["DEFAULT_CONFIG"],
        env["FALLBACK_STRATEGIES"],
    ) == (
        "/etc/dra-fake/device-plugin-configs",
        "nvidia.com/device-plugin.config",
        "ts-4",
        "named,single",
    )
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in ctr["volumeMounts"]}
    assert (
        host["device-plugins"] == mounts["device-plugins"]["mountPath"] == "/var/lib/kubelet/device-plugins"
    )
    assert mounts["plugins-registry"]["readOnly"] is True  # only to see a DRA plugin registered beside it
    assert all(
        mounts[n]["mountPath"] == path for n, path in host.items()
    )  # host paths, as the plugin names them
    assert pod["serviceAccountName"] == "r-dra-fake-kubelet-plugin"
    configs = by_name(docs, "ConfigMap", "r-dra-fake-device-plugin-configs")["data"]
    assert sorted(configs) == ["ts-4", "whole"]  # a mapping and a YAML string, each a file
    ts4 = yaml.safe_load(configs["ts-4"])
    assert ts4["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]
    assert yaml.safe_load(configs["whole"]) == {"version": "v1", "flags": {"migStrategy": "mixed"}}
    assert {"name": "configs", "configMap": {"name": "r-dra-fake-device-plugin-configs"}} in pod["volumes"]
    # the label watch's right, only where a device plugin has configs: watch its Node (get is there)
    watch = by_name(docs, "ClusterRole", "r-dra-fake-kubelet-plugin-node-config-label")
    assert watch["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["watch"]}]
    binding = by_name(docs, "ClusterRoleBinding", "r-dra-fake-kubelet-plugin-node-config-label")
    assert binding["subjects"][0]["name"] == "r-dra-fake-kubelet-plugin"
    assert ds["spec"]["template"]["metadata"]["labels"]["dra-fake.dev/gpu-metrics"] == "true"
    svc = by_name(docs, "Service", "r-dra-fake-dcgm-exporter")
    assert svc["spec"]["selector"]["dra-fake.dev/gpu-metrics"] == "true"  # both modes' plugins
    # the whole cluster in device-plugin mode: no DRA plugin DaemonSet at all
    only = render(mode="device-plugin")
    assert [d["metadata"]["name"] for d in of_kind(only, "DaemonSet")] == ["r-dra-fake-device-plugin"]
    assert "r-dra-fake-device-plugin-configs" not in names(only, "ConfigMap")
    assert "r-dra-fake-kubelet-plugin-node-config-label" not in names(only, "ClusterRole")  # no configs
    with pytest.raises(AssertionError, match="mode"):
        render(mode="both")


def test_device_plugin_configs_as_nvidias_chart() -> None:
    """`config.name` (an existing ConfigMap) or `config.map`, with NVIDIA's chart's checks."""
    external = render(mode="device-plugin", **{"devicePlugin.config.name": "my-configs"})
    [ds] = of_kind(external, "DaemonSet")
    assert {"name": "configs", "configMap": {"name": "my-configs"}} in ds["spec"]["template"]["spec"][
        "volumes"
    ]
    assert "r-dra-fake-device-plugin-configs" not in names(external, "ConfigMap")
    assert "r-dra-fake-kubelet-plugin-node-config-label" in names(external, "ClusterRole")
    assert "r-dra-fake-kubelet-plugin-node-config-label" not in names(
        render(**{"devicePlugin.config.name": "my-configs"}), "ClusterRole"
    )  # no device-plugin pool: no label watch
    with pytest.raises(AssertionError, match=re.escape("Only one of 'config.name' or 'config.map'")):
        render(
            mode="device-plugin",
            **{"devicePlugin.config.name": "x", "devicePlugin.config.map.a": "version: v1"},
        )
    two = {"devicePlugin.config.map.a": "version: v1", "devicePlugin.config.map.b": "version: v1"}
    with pytest.raises(AssertionError, match="A default config must be provided"):
        render(mode="device-plugin", **two)
    assert render(mode="device-plugin", **two, **{"devicePlugin.config.default": "b"})
    assert render(mode="device-plugin", **{"devicePlugin.config.map.a": "version: v1"})  # single
    with pytest.raises(AssertionError, match=re.escape('devicePlugin.config.default: "c" is not a key')):
        render(mode="device-plugin", **two, **{"devicePlugin.config.default": "c"})
    with pytest.raises(AssertionError, match="fallbackStrategies"):
        render(mode="device-plugin", **{"devicePlugin.config.fallbackStrategies": "{first}"})


# ---- hardening (issue 46, docs/security.md) -------------------------------------------------------


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
        for d in docs
        if d["kind"] in ("DaemonSet", "Deployment", "Job")
    }


def test_every_pod_sets_the_runtime_default_seccomp_profile() -> None:
    specs = pod_specs(render()) | pod_specs(render(values=str(CHART / "ci" / "pools-values.yaml")))
    assert len(specs) >= 5, sorted(specs)  # plugins, device plugin, controller, the cleanup hook
    for name, spec in specs.items():
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name


def test_the_metrics_ports_are_reachable_only_from_prometheus() -> None:
    [policy] = of_kind(render(), "NetworkPolicy")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["podSelector"]["matchExpressions"][0]["values"] == [
        "kubelet-plugin",
        "device-plugin",
        "compute-domain-controller",
    ]
    metrics, health = spec["ingress"]
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    assert sorted(p["port"] for p in metrics["ports"]) == [8080, 8080, 8081, 9400]
    assert "from" not in health and sorted(p["port"] for p in health["ports"]) == [51515, 51516]
    [custom] = of_kind(
        render(**{"networkPolicy.prometheusNamespaceSelector.matchLabels.team": "obs"}), "NetworkPolicy"
    )
    assert custom["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["team"] == "obs"
    assert not of_kind(render(**{"networkPolicy.enabled": "false"}), "NetworkPolicy")


def test_admission_policies_pin_each_account_to_its_own_objects() -> None:
    docs = render(apis=[])  # no --api-versions: rendered all the same
    policies = {p["metadata"]["name"]: p for p in of_kind(docs, "ValidatingAdmissionPolicy")}
    bindings = {b["spec"]["policyName"] for b in of_kind(docs, "ValidatingAdmissionPolicyBinding")}
    assert (
        sorted(policies)
        == sorted(bindings)
        == [
            "compute-domain-daemon-service-account-own-pod-label",
            "r-dra-fake-compute-domain-claims",
            "r-dra-fake-compute-domain-controller-imex-daemonsets",
            "r-dra-fake-compute-domain-controller-node-label",
            "r-dra-fake-gpufault-noexecute",
            "r-dra-fake-kubelet-plugin-own-node-faults",
            "r-dra-fake-kubelet-plugin-own-node-label",
            "r-dra-fake-kubelet-plugin-own-node-slices",
        ]
    )
    users = {
        name: [c["expression"] for c in p["spec"].get("matchConditions", [])] for name, p in policies.items()
    }
    assert users["r-dra-fake-compute-domain-controller-imex-daemonsets"] == [
        'request.userInfo.username == "system:serviceaccount:dra-fake:r-dra-fake-compute-domain-controller"'
    ]
    assert users["compute-domain-daemon-service-account-own-pod-label"] == [
        'request.userInfo.username == "system:serviceaccount:dra-fake:compute-domain-daemon-service-account"'
    ]
    assert users["r-dra-fake-compute-domain-claims"] == []  # every user
    noexecute = policies["r-dra-fake-gpufault-noexecute"]["spec"]["validations"][0]["expression"]
    assert '["system:masters","kubeadm:cluster-admins"]' in noexecute
    assert all(p["spec"]["failurePolicy"] == "Fail" for p in policies.values())
    assert not of_kind(render(**{"validatingAdmissionPolicy.enabled": "false"}), "ValidatingAdmissionPolicy")
    without_cd = {
        p["metadata"]["name"]
        for p in of_kind(render(**{"computeDomains.enabled": "false"}), "ValidatingAdmissionPolicy")
    }
    assert without_cd == {
        "r-dra-fake-gpufault-noexecute",
        "r-dra-fake-kubelet-plugin-own-node-faults",
        "r-dra-fake-kubelet-plugin-own-node-label",
        "r-dra-fake-kubelet-plugin-own-node-slices",
    }


def test_the_plugins_refuse_real_gpu_nodes_unless_the_values_allow_it() -> None:
    def allowed(**values: str) -> list[str]:
        docs = render(values=str(CHART / "ci" / "pools-values.yaml"), **values)
        return [
            e["value"]
            for spec in pod_specs(docs).values()
            for c in spec["containers"]
            for e in c.get("env", [])
            if e["name"] == "ALLOW_REAL_GPU_NODE"
        ]

    default = allowed()
    assert len(default) >= 2 and set(default) == {"false"}  # every GPU plugin and the device plugin
    assert set(allowed(allowRealGpuNodes="true")) == {"true"}
