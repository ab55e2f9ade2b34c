"""What `helm template charts/dra-fake` renders (no cluster): API-version choice from the server's
capabilities, the DaemonSet contract, node pools, driver names, inventories the plugin accepts, the
features' values and the device plugin pool. ComputeDomains, metrics and node labels, and hardening
are in tests/test_chart_computedomain.py, test_chart_metrics.py and test_chart_hardening.py; the
rendering in tests/chartrender.py.

Needs helm from hack/install-tools.sh (`make chart-check` builds it and runs these files); without
it the module is skipped, unless DRA_FAKE_REQUIRE_TOOLS=1 (then it fails).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from computedomain.plugin import slices as cd_classes
from dra_fake.gpu.deviceclasses import spot_class
from dra_fake.gpu.inventory import build_inventory, parse_config
from dra_fake.gpu.profiles import load_profiles
from tests.chartrender import CHART, V1, by_name, names, of_kind, render


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
