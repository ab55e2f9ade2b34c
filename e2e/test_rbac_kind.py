"""The checks of e2e/rbac/checks.py (the plugin's and the ComputeDomain components' rights) on kind's API
server, with the chart as Helm installed it: tokens of the chart's ServiceAccounts bound to its real
pods (so a plugin's token names its pod's node, as the plugin's own does), the calls their RBAC
refuses, and the admission policies that keep a node's plugin to its own node's ResourceSlices and
the controller to the IMEX DaemonSets it renders and the IMEX daemon to its own pod. The rest of
e2e/rbac builds a control plane of its own (the needs marker of its files says why)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.kube import Kube
from e2e.rbac.bed import DAEMON_SA
from e2e.rbac.checks import (
    CD_REFUSED_CALLS,
    REFUSED_CALLS,
    assert_controller_kept_to_imex_daemonsets,
    assert_controller_releases_an_earlier_daemonset,
    assert_daemon_patches_no_other_pod,
    assert_slices_of_its_own_node_only,
    assert_unbound_token_writes_no_slices,
)
from e2e.testbed import TestBed

pytestmark = pytest.mark.needs("kind")
NS = "dra-fake"  # the kind cluster's release namespace (e2e/kindcluster)
PLUGIN_PODS = "app.kubernetes.io/component=kubelet-plugin"


def token_api(kubeconfig: Path, token: str, path: Path) -> client.ApiClient:
    """An API client of the kind cluster with this token instead of the admin's credentials."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    cfg["users"] = [{"name": "sa", "user": {"token": token}}]
    for ctx in cfg["contexts"]:
        ctx["context"]["user"] = "sa"
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return config.new_client_from_config(config_file=str(path))


def plugin_pod(kube: Kube, node: str) -> Any:
    [pod] = [
        p
        for p in kube.core.list_namespaced_pod(
            NS, label_selector=PLUGIN_PODS, field_selector=f"spec.nodeName={node}"
        ).items
        if p.status.phase == "Running"
    ]
    return pod


def token(kube: Kube, sa: str, pod: Any | None) -> str:
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if pod is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod.metadata.name,
            "uid": pod.metadata.uid,
        }
    return str(kube.core.create_namespaced_service_account_token(sa, NS, {"spec": spec}).status.token)


@pytest.fixture(scope="module")
def plugins(
    kube: Kube, bed: TestBed, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """node -> API client with a token of the chart's plugin ServiceAccount bound to that node's pod,
    for the first two workers; "unbound" -> the same ServiceAccount's token bound to nothing."""
    tmp = tmp_path_factory.mktemp("rbac-kind")
    out: dict[str, Any] = {}
    for node in bed.workers[:2]:
        pod = plugin_pod(kube, node)
        sa = pod.spec.service_account_name
        out[node] = token_api(kubeconfig, token(kube, sa, pod), tmp / f"{node}.kubeconfig")
    out["unbound"] = token_api(kubeconfig, token(kube, sa, None), tmp / "unbound.kubeconfig")
    return out


@pytest.mark.parametrize("call", REFUSED_CALLS)
def test_everything_else_is_refused(plugins: dict[str, Any], bed: TestBed, call: Any) -> None:
    with pytest.raises(ApiException) as err:
        call(plugins[bed.workers[0]])
    assert err.value.status == 403, err.value


def test_admission_policy_keeps_a_plugin_on_its_own_node(
    plugins: dict[str, Any], kube: Kube, bed: TestBed
) -> None:
    own, other = bed.workers[:2]
    other_slice = kube.slices(node=other)[0]["metadata"]["name"]
    assert_slices_of_its_own_node_only(plugins[own], own, other, other_slice)


def test_token_without_node_binding_cannot_write_slices(plugins: dict[str, Any], bed: TestBed) -> None:
    assert_unbound_token_writes_no_slices(plugins["unbound"], bed.workers[0])


@pytest.fixture(scope="module")
def controller(kube: Kube, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> client.ApiClient:
    """A token of the controller's ServiceAccount bound to the chart's controller pod."""
    pods = kube.core.list_namespaced_pod(
        NS, label_selector="app.kubernetes.io/component=compute-domain-controller"
    )
    [pod] = [p for p in pods.items if p.status.phase == "Running"]
    path = tmp_path_factory.mktemp("rbac-kind") / "controller.kubeconfig"
    return token_api(kubeconfig, token(kube, pod.spec.service_account_name, pod), path)


def test_admission_policy_keeps_the_controller_to_imex_daemonsets_and_its_node_label(
    controller: client.ApiClient, kube: Kube, bed: TestBed
) -> None:
    node = bed.workers[0]
    [owner] = plugin_pod(kube, node).metadata.owner_references  # the chart's kubelet-plugin DaemonSet
    assert owner.kind == "DaemonSet"
    assert_controller_kept_to_imex_daemonsets(controller, owner.name, node)


def test_the_controller_releases_an_imex_daemonset_an_earlier_release_rendered(
    controller: client.ApiClient, kube: Kube
) -> None:
    assert_controller_releases_an_earlier_daemonset(controller, kube.api)


@pytest.fixture(scope="module")
def daemon(kube: Kube, kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> client.ApiClient:
    """A token of the IMEX daemon's ServiceAccount, bound to no pod."""
    path = tmp_path_factory.mktemp("rbac-kind") / "daemon.kubeconfig"
    return token_api(kubeconfig, token(kube, DAEMON_SA, None), path)


@pytest.mark.parametrize(("who", "call"), CD_REFUSED_CALLS)
def test_compute_domain_components_are_refused_the_rest(
    plugins: dict[str, Any],
    controller: client.ApiClient,
    daemon: client.ApiClient,
    bed: TestBed,
    who: str,
    call: Any,
) -> None:
    api = {"node-1": plugins[bed.workers[0]], "controller": controller, "daemon": daemon}[who]
    with pytest.raises(ApiException) as err:
        call(api)
    assert err.value.status == 403, err.value


def test_admission_policy_keeps_the_imex_daemon_to_its_own_pod(daemon: client.ApiClient, kube: Kube) -> None:
    assert_daemon_patches_no_other_pod(daemon, kube.api)
