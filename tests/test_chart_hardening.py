"""What `helm template charts/dra-fake` renders to harden the driver (no cluster; tests/chartrender.py;
docs/security.md): seccomp, who reaches the metrics ports, admission policies pinning each account
to its own objects, and the refusal of real GPU nodes.
"""

from __future__ import annotations

from typing import Any

from tests.chartrender import CHART, of_kind, render

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
