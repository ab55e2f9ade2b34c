"""The longer RBAC and admission-policy checks of e2e/rbac, each given API clients with tokens of the
chart's ServiceAccounts: the calls each component's RBAC refuses, and what the policies keep each
account to."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.rbac.bed import DAEMON_SA, NS, refused_by_policy, resource_version, slice_body

# Calls a plugin's token is refused (403): RBAC, not the admission policies.
REFUSED_CALLS = [
    pytest.param(lambda api: client.CoreV1Api(api).list_secret_for_all_namespaces(), id="list-secrets"),
    pytest.param(lambda api: client.CoreV1Api(api).list_node(), id="list-nodes"),
    pytest.param(
        lambda api: client.CoreV1Api(api).create_namespaced_pod(
            "default", {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        ),
        id="create-pod",
    ),
    pytest.param(
        lambda api: client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "resource.k8s.io", resource_version(api), "default", "resourceclaims", "x"
        ),
        id="delete-claim",
    ),
    pytest.param(
        lambda api: client.CustomObjectsApi(api).create_cluster_custom_object(
            "resource.k8s.io",
            resource_version(api),
            "deviceclasses",
            {
                "apiVersion": f"resource.k8s.io/{resource_version(api)}",
                "kind": "DeviceClass",
                "metadata": {"name": "x"},
            },
        ),
        id="create-deviceclass",
    ),
    pytest.param(
        lambda api: client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "resource.k8s.io", resource_version(api), "default", "resourceclaims", "x", {"spec": {}}
        ),
        id="write-claim",
    ),
    pytest.param(
        lambda api: client.CustomObjectsApi(api).create_cluster_custom_object(
            "dra-fake.dev",
            "v1alpha1",
            "gpufaults",
            {
                "apiVersion": "dra-fake.dev/v1alpha1",
                "kind": "GpuFault",
                "metadata": {"name": "x"},
                "spec": {"nodeName": "node-1", "device": "gpu-0", "kind": "gpu-lost"},
            },
        ),
        id="create-gpufault",
    ),
]


def assert_slices_of_its_own_node_only(
    plugin: client.ApiClient, own: str, other: str, other_slice: str
) -> None:
    """A node's plugin (a token bound to its pod) may not create or delete another node's
    ResourceSlices, and may its own node's."""
    custom = client.CustomObjectsApi(plugin)
    version = resource_version(plugin)
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(
            "resource.k8s.io", version, "resourceslices", slice_body(other, "evil", version)
        )
    assert err.value.status in (403, 422) and f"may not modify ResourceSlices of node {other}" in str(
        err.value.body
    )
    with pytest.raises(ApiException) as err:
        custom.delete_cluster_custom_object("resource.k8s.io", version, "resourceslices", other_slice)
    assert err.value.status in (403, 422), err.value
    # its own node: allowed (and cleaned up)
    custom.create_cluster_custom_object(
        "resource.k8s.io", version, "resourceslices", slice_body(own, "own-x", version)
    )
    custom.delete_cluster_custom_object("resource.k8s.io", version, "resourceslices", "own-x")


def assert_unbound_token_writes_no_slices(unbound: client.ApiClient, node: str) -> None:
    """A token of the plugin's ServiceAccount not bound to a pod names no node: no slice at all."""
    version = resource_version(unbound)
    with pytest.raises(ApiException) as err:
        client.CustomObjectsApi(unbound).create_cluster_custom_object(
            "resource.k8s.io", version, "resourceslices", slice_body(node, "x", version)
        )
    assert err.value.status in (403, 422) and "no node name" in str(err.value.body), err.value


CD = ("resource.nvidia.com", "v1beta1")


# Calls each ComputeDomain component's token is refused (403): who is "plugin" (the first node's),
# "controller" or "daemon".
CD_REFUSED_CALLS = [
    pytest.param(
        "plugin",
        lambda api: client.CustomObjectsApi(api).create_namespaced_custom_object(
            *CD,
            "default",
            "computedomains",
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {"name": "x"},
                "spec": {"channel": {"resourceClaimTemplate": {"name": "x"}}},
            },
        ),
        id="plugin-create-computedomain",
    ),
    pytest.param(
        "plugin",
        lambda api: client.CustomObjectsApi(api).list_namespaced_custom_object(
            *CD, NS, "computedomaincliques"
        ),
        id="plugin-list-cliques",
    ),
    pytest.param("plugin", lambda api: client.CoreV1Api(api).delete_node("node-2"), id="plugin-delete-node"),
    pytest.param(
        "controller",
        lambda api: client.CoreV1Api(api).list_secret_for_all_namespaces(),
        id="controller-list-secrets",
    ),
    pytest.param(
        "controller",
        lambda api: client.AppsV1Api(api).list_namespaced_daemon_set("kube-system"),
        id="controller-daemonsets-elsewhere",
    ),
    pytest.param(
        "controller",
        lambda api: client.CoreV1Api(api).create_namespaced_pod(
            NS, {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        ),
        id="controller-create-pod",
    ),
    pytest.param(
        "controller",
        lambda api: client.CoordinationV1Api(api).read_namespaced_lease("other-lease", NS),
        id="controller-other-lease",
    ),
    pytest.param(
        "daemon",
        lambda api: client.CustomObjectsApi(api).list_cluster_custom_object(*CD, "computedomains"),
        id="daemon-list-computedomains",
    ),
    pytest.param(
        "daemon",
        lambda api: client.CustomObjectsApi(api).get_namespaced_custom_object(
            *CD, "default", "computedomaincliques", "x"
        ),
        id="daemon-cliques-elsewhere",
    ),
    pytest.param("daemon", lambda api: client.CoreV1Api(api).list_node(), id="daemon-list-nodes"),
]


def assert_controller_kept_to_imex_daemonsets(
    controller: client.ApiClient, plugin_ds: str, node: str
) -> None:
    """The controller's token may not touch the plugin's DaemonSet, create a DaemonSet it would not
    render, or label a node with anything but the ComputeDomain label."""
    apps, core = client.AppsV1Api(controller), client.CoreV1Api(controller)
    refused_by_policy(
        lambda: apps.patch_namespaced_daemon_set(plugin_ds, NS, {"metadata": {"labels": {"x": "y"}}}),
        "may change only IMEX daemon DaemonSets",
    )
    refused_by_policy(
        lambda: apps.delete_namespaced_daemon_set(plugin_ds, NS), "may change only IMEX daemon DaemonSets"
    )
    label = {"resource.nvidia.com/computeDomain": "0f000000-0000-4000-8000-000000000000"}
    rogue = {
        "metadata": {"name": "rogue", "labels": label},
        "spec": {
            "selector": {"matchLabels": label},
            "template": {
                "metadata": {"labels": label},
                "spec": {
                    "serviceAccountName": DAEMON_SA,
                    "hostPID": True,
                    "containers": [
                        {"name": "c", "image": "x", "command": ["dra-fake", "imex-daemon", "run"]}
                    ],
                },
            },
        },
    }
    refused_by_policy(
        lambda: apps.create_namespaced_daemon_set(NS, rogue), "may create only IMEX daemon DaemonSets"
    )
    refused_by_policy(
        lambda: core.patch_node(node, {"metadata": {"labels": {"evil.example/owned": "yes"}}}),
        "may change only the label resource.nvidia.com/computeDomain",
    )


def assert_controller_releases_an_earlier_daemonset(
    controller: client.ApiClient, admin: client.ApiClient
) -> None:
    """After an upgrade the IMEX DaemonSets of existing domains still run the previous release's
    image: the controller may still drop its finalizer from one (else the domain never goes), and
    still may not change its spec."""
    apps_admin, apps = client.AppsV1Api(admin), client.AppsV1Api(controller)
    label = {"resource.nvidia.com/computeDomain": "0e000000-0000-4000-8000-000000000000"}
    name = "computedomain-daemon-0e000000-0000-4000-8000-000000000000"
    container = {"name": "d", "image": "dra-fake:0.0.1", "command": ["dra-fake", "imex-daemon", "run"]}
    old = {
        "metadata": {"name": name, "labels": label, "finalizers": ["resource.nvidia.com/computeDomain"]},
        "spec": {
            "selector": {"matchLabels": label},
            "template": {
                "metadata": {"labels": label},
                "spec": {
                    "serviceAccountName": DAEMON_SA,
                    "containers": [container],
                    "nodeSelector": {"dra-fake.dev/e2e": "no-such-node"},  # no pods on kind
                },
            },
        },
    }
    apps_admin.create_namespaced_daemon_set(NS, old)
    try:
        new_image = {"spec": {"template": {"spec": {"containers": [{**container, "image": "x"}]}}}}
        refused_by_policy(
            lambda: apps.patch_namespaced_daemon_set(name, NS, new_image),
            "may change only the metadata of an IMEX daemon DaemonSet",
        )
        drop = [
            {"op": "test", "path": "/metadata/finalizers/0", "value": "resource.nvidia.com/computeDomain"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ]
        released = apps.patch_namespaced_daemon_set(name, NS, drop)  # a list: a JSON patch
        assert not released.metadata.finalizers
    finally:
        apps_admin.delete_namespaced_daemon_set(name, NS)


def assert_daemon_patches_no_other_pod(daemon: client.ApiClient, admin: client.ApiClient) -> None:
    """The daemon's `pods patch` is for its own pod's clique label: a token not bound to that pod
    (the credentials here) patches no pod."""
    plugin_pod = (
        client.CoreV1Api(admin)
        .list_namespaced_pod(NS, label_selector="app.kubernetes.io/component=kubelet-plugin")
        .items[0]
    )
    refused_by_policy(
        lambda: client.CoreV1Api(daemon).patch_namespaced_pod(
            plugin_pod.metadata.name,
            NS,
            {"metadata": {"labels": {"resource.nvidia.com/computeDomain.cliqueID": ""}}},
        ),
        "may not modify pod " + plugin_pod.metadata.name,
    )
