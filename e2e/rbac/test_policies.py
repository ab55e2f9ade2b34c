"""The admission policies, each account on its own objects (issue 46, docs/security.md): each refuses
what RBAC alone would let the plugin, a GpuFault author, the controller, the IMEX daemon or a tenant
do."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from e2e.rbac.bed import CHART_BED, NS, refused_by_policy, resource_version
from e2e.rbac.chart import Chart
from e2e.rbac.checks import (
    assert_controller_kept_to_imex_daemonsets,
    assert_controller_releases_an_earlier_daemonset,
    assert_daemon_patches_no_other_pod,
)

pytestmark = CHART_BED


def test_admission_policy_keeps_a_plugin_to_its_own_nodes_fault_status(chart: Chart) -> None:
    """`gpufaults/status patch` is cluster-wide in RBAC: the first node's plugin may not write the
    status of another node's GpuFault (a node without a plugin, so no one else acts on it)."""
    custom = client.CustomObjectsApi(chart.admin)
    fault = {
        "apiVersion": "dra-fake.dev/v1alpha1",
        "kind": "GpuFault",
        "metadata": {"name": "rbac-elsewhere"},
        "spec": {"nodeName": "node-9", "device": "gpu-0", "kind": "gpu-lost"},
    }
    custom.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault)
    try:
        plugin = client.CustomObjectsApi(chart.api(chart.nodes[0]))
        refused_by_policy(
            lambda: plugin.patch_cluster_custom_object_status(
                "dra-fake.dev", "v1alpha1", "gpufaults", "rbac-elsewhere", {"status": {"phase": "Failed"}}
            ),
            "may not write the status of GpuFaults of node node-9",
        )
    finally:
        custom.delete_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "rbac-elsewhere")


def test_only_admins_create_a_noexecute_gpufault(chart: Chart) -> None:
    """A GpuFault with effect NoExecute evicts every pod on the device: a user allowed to create
    GpuFaults, outside validatingAdmissionPolicy.adminGroups, may create other faults but not that one."""
    rbac, core = client.RbacAuthorizationV1Api(chart.admin), client.CoreV1Api(chart.admin)
    name = "fault-author"
    core.create_namespaced_service_account(NS, {"metadata": {"name": name}})
    rule = {"apiGroups": ["dra-fake.dev"], "resources": ["gpufaults"], "verbs": ["create", "delete"]}
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": [rule]})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        }
    )
    token = core.create_namespaced_service_account_token(name, NS, {"spec": {"expirationSeconds": 600}})
    author = client.CustomObjectsApi(chart.token_api(str(token.status.token), name))

    def fault(effect: str) -> dict[str, Any]:
        spec = {"nodeName": "node-9", "device": "gpu-0", "kind": "gpu-lost", "effect": effect}
        return {
            "apiVersion": "dra-fake.dev/v1alpha1",
            "kind": "GpuFault",
            "metadata": {"name": f"by-author-{effect.lower()}"},
            "spec": spec,
        }

    try:
        refused_by_policy(
            lambda: author.create_cluster_custom_object(
                "dra-fake.dev", "v1alpha1", "gpufaults", fault("NoExecute")
            ),
            "a GpuFault with effect NoExecute evicts other tenants' pods",
        )
        author.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault("NoSchedule"))
        author.delete_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "by-author-noschedule")
        admin_custom = client.CustomObjectsApi(chart.admin)  # the cluster's admin: an admin group
        admin_custom.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault("NoExecute"))
        admin_custom.delete_cluster_custom_object(
            "dra-fake.dev", "v1alpha1", "gpufaults", "by-author-noexecute"
        )
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
        core.delete_namespaced_service_account(name, NS)


def test_admission_policy_keeps_the_controller_to_imex_daemonsets_and_its_node_label(chart: Chart) -> None:
    """The controller's `daemonsets create, patch, delete` would reach the kubelet plugin's
    DaemonSet (root, host paths), its `nodes patch` every label: the policies allow only the
    DaemonSets it renders and the ComputeDomain label."""
    assert_controller_kept_to_imex_daemonsets(chart.api("controller"), chart.plugin_ds, chart.nodes[0])


def test_the_controller_releases_an_imex_daemonset_an_earlier_release_rendered(chart: Chart) -> None:
    assert_controller_releases_an_earlier_daemonset(chart.api("controller"), chart.admin)


def test_admission_policy_keeps_the_imex_daemon_to_its_own_pod(chart: Chart) -> None:
    assert_daemon_patches_no_other_pod(chart.api("daemon"), chart.admin)


@pytest.mark.parametrize("kind", ["resourceclaims", "resourceclaimtemplates"])
@pytest.mark.parametrize(
    "device_class", ["compute-domain-default-channel.nvidia.com", "compute-domain-daemon.nvidia.com"]
)
def test_compute_domain_devices_are_claimed_only_through_the_controllers_templates(
    chart: Chart, kind: str, device_class: str
) -> None:
    """A tenant's claim of a node's one daemon or channel device, in a namespace without the
    ComputeDomain, would block every ComputeDomain on that node: refused at admission, before any
    allocation, though RBAC lets the tenant create claims there; a GPU claim passes. (The
    controller's own templates pass: the ComputeDomain flow of test_compute_domains.py ran with this
    policy.)"""
    kube = chart.kube
    ns = kube.namespace("tenant")
    rbac, core = client.RbacAuthorizationV1Api(chart.admin), client.CoreV1Api(chart.admin)
    try:
        core.create_namespaced_service_account(ns, {"metadata": {"name": "tenant"}})
        rule = {"apiGroups": ["resource.k8s.io"], "resources": [kind], "verbs": ["create"]}
        rbac.create_namespaced_role(ns, {"metadata": {"name": "tenant"}, "rules": [rule]})
        rbac.create_namespaced_role_binding(
            ns,
            {
                "metadata": {"name": "tenant"},
                "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            },
        )
        token = core.create_namespaced_service_account_token(
            "tenant", ns, {"spec": {"expirationSeconds": 600}}
        )
        tenant = client.CustomObjectsApi(chart.token_api(str(token.status.token), ns))

        version = resource_version(chart.admin)

        def body(name: str, device_class: str) -> dict[str, Any]:
            request: dict[str, Any] = {"name": "r", "exactly": {"deviceClassName": device_class}}
            if version == "v1beta1":  # no `exactly` before v1beta2
                request = {"name": "r", "deviceClassName": device_class}
            spec = {"devices": {"requests": [request]}}
            return {
                "apiVersion": f"resource.k8s.io/{version}",
                "kind": "ResourceClaim" if kind == "resourceclaims" else "ResourceClaimTemplate",
                "metadata": {"name": name},
                "spec": spec if kind == "resourceclaims" else {"spec": spec},
            }

        refused_by_policy(
            lambda: tenant.create_namespaced_custom_object(
                "resource.k8s.io", version, ns, kind, body("grab", device_class)
            ),
            "are claimed only through the templates the ComputeDomain controller creates",
        )
        tenant.create_namespaced_custom_object(
            "resource.k8s.io", version, ns, kind, body("gpu", "gpu.nvidia.com")
        )
    finally:
        kube.delete_namespace(ns)
