"""What `helm template charts/dra-fake` renders (no cluster): API-version choice from the server's
capabilities, the DaemonSet contract, node pools, driver names, and inventories the plugin accepts.

Needs helm from hack/install-tools.sh (`make chart-check` builds it and runs this file); without
it the module is skipped, unless DRA_FAKE_REQUIRE_TOOLS=1 (then it fails).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_fake.inventory import build_inventory, parse_config
from dra_fake.profiles import load_profiles

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
    ]
    gpu = classes[0]["spec"]
    assert gpu["selectors"][0]["cel"]["expression"] == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
    )
    assert ("extendedResourceName" in gpu) == (expected == "v1")
    assert bool(of_kind(render(kube, apis), "ValidatingAdmissionPolicy")) == (
        "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy" in apis
    )


def test_daemonset_contract() -> None:
    [ds] = of_kind(render(), "DaemonSet")
    assert ds["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    pod = ds["spec"]["template"]["spec"]
    [ctr] = pod["containers"]
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
    assert pod["serviceAccountName"] == of_kind(render(), "ServiceAccount")[0]["metadata"]["name"]
    [svc] = of_kind(render(), "Service")
    assert svc["spec"]["ports"][0]["port"] == 8080 and svc["spec"]["clusterIP"] == "None"


def test_rbac_is_least_privilege() -> None:
    [role] = of_kind(render(), "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["list", "watch", "create", "update", "delete"],
        },
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
    }
    for node, (labels, expected) in nodes.items():
        assert [n for n, t in daemonsets.items() if matches(labels, t)] == [expected], node
    classes = [c["metadata"]["name"] for c in of_kind(docs, "DeviceClass")]
    assert classes == ["gpu.fake.example.com", "mig.fake.example.com"]
    assert of_kind(docs, "DeviceClass")[0]["spec"]["extendedResourceName"] == "fake.example.com/gpu"


def test_rendered_inventories_are_accepted_by_the_plugin() -> None:
    docs = render(values=str(CHART / "ci" / "pools-values.yaml"))
    profiles = load_profiles()
    counts = {}
    for cm in of_kind(docs, "ConfigMap"):
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
    with pytest.raises(AssertionError, match="not part of this chart yet"):
        render(**{"computeDomains.enabled": "true"})
    with pytest.raises(AssertionError, match="mig"):
        render(**{"inventory.mig": "sometimes"})
    with pytest.raises(AssertionError, match=r"additional properties|not allowed"):
        render(**{"inventory.gpuCount": "3"})
