"""Every rule of the plugin's role is needed: the plugin given the chart's rules minus one runs
into a 403 (and with all of them works), the device plugin's per-node config label rules too."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e.kube import poll
from e2e.localcluster.processes import spawn
from e2e.rbac.bed import (
    CHART_BED,
    NS,
    REPO,
    SA,
    VALUES,
    forbidden,
    helm_template,
    resource_version,
    sa_api,
    served,
)
from e2e.rbac.chart import Chart

pytestmark = CHART_BED

PROBE_SA = "rbac-probe"


@pytest.fixture(scope="module")
def probe_node(chart: Chart) -> Iterator[str]:
    """A Node object no kubelet runs, for the probes: a plugin started here (a process of this
    machine, beside the bed's own plugins) with the chart's rules minus one, a ServiceAccount the
    admission policy does not cover and a driver name of its own. Its own Node, so the labels it
    writes do not touch a node the bed's plugins label; tainted, so no pod is scheduled there."""
    core = client.CoreV1Api(chart.admin)
    name = "rbac-probe"
    taint = {"key": "dra-fake.dev/rbac-probe", "effect": "NoSchedule"}
    core.create_node({"metadata": {"name": name}, "spec": {"taints": [taint]}})
    try:
        yield name
    finally:
        core.delete_node(name)
        with contextlib.suppress(ApiException):  # created by the first probe
            core.delete_namespaced_service_account(PROBE_SA, NS)


def without(rules: list[dict[str, Any]], resource: str, verb: str) -> list[dict[str, Any]]:
    out = []
    for r in rules:
        verbs = [v for v in r["verbs"] if not (resource in r["resources"] and v == verb)]
        if verbs:
            out.append({**r, "verbs": verbs})
    return out


@pytest.mark.parametrize(
    ("resource", "verb"),
    [
        ("", ""),
        ("nodes", "get"),
        ("resourceslices", "list"),
        ("resourceslices", "watch"),
        ("resourceslices", "create"),
        ("gpufaults", "list"),
        ("gpufaults", "watch"),
        ("nodes", "patch"),
        ("pods", "list"),
        ("pods", "watch"),
    ],
    ids=[
        "all-rules-publish",
        "nodes-get",
        "slices-list",
        "slices-watch",
        "slices-create",
        "faults-list",
        "faults-watch",
        "nodes-patch",
        "pods-list",
        "pods-watch",
    ],
)
def test_each_startup_rule_is_needed(
    chart: Chart,
    probe_node: str,
    rendered: list[dict[str, Any]],
    tmp_path: Path,
    resource: str,
    verb: str,
) -> None:
    """The plugin, given the chart's rules minus one, runs into a 403 on the startup path (and
    with all of them publishes). Not proven here: resourceslices update/delete (used when the
    inventory changes, dra_fake/core/publisher.py) and resourceclaims get (every prepare). A separate
    ServiceAccount, which the admission policy does not cover, and a separate driver name keep
    this apart from the running plugins."""
    [role] = [o for o in rendered if o["kind"] == "ClusterRole" and o["metadata"]["name"] == SA]
    rbac = client.RbacAuthorizationV1Api(chart.admin)
    core = client.CoreV1Api(chart.admin)
    name = f"probe-{resource or 'all'}-{verb or 'all'}"
    driver = f"{(resource or 'all')[:6]}-{verb or 'all'}.example.com"
    short = Path(tempfile.mkdtemp(prefix="rbac", dir="/tmp"))  # unix socket paths are short
    with contextlib.suppress(ApiException):
        core.create_namespaced_service_account(NS, {"metadata": {"name": PROBE_SA}})
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": without(role["rules"], resource, verb)})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "subjects": [{"kind": "ServiceAccount", "name": PROBE_SA, "namespace": NS}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        }
    )
    token = core.create_namespaced_service_account_token(PROBE_SA, NS, {"spec": {"expirationSeconds": 600}})
    kc = chart.token_kubeconfig(str(token.status.token), name)
    args = [
        sys.executable,
        "-m",
        "dra_fake",
        "gpu-kubelet-plugin",
        f"--node-name={probe_node}",
        f"--driver-name={driver}",
        f"--kubeconfig={kc}",
        f"--kubelet-registrar-directory-path={short / 'registry'}",
        f"--kubelet-plugins-directory-path={short / 'plugins'}",
        f"--cdi-root={short / 'cdi'}",
        "--log-level=debug",
        "--log-format=json",
        # GFD's labels (nodes patch), other than those the node has (a MIG strategy), so it patches;
        # the pod watch of the metrics runs anyway
        "--node-labels=true",
        "--mig-strategy=mixed",
    ]
    # so the probe's labels differ from the node's (an earlier probe may have written them)
    core.patch_node(probe_node, {"metadata": {"labels": {"nvidia.com/mig.strategy": None}}})
    proc = spawn(name, args, tmp_path / "logs", cwd=REPO)
    log = Path(proc.log)
    try:
        if not resource:
            poll(f"{driver} slices published", lambda: chart.kube.slices(driver=driver), 60)
            assert not forbidden(log.read_text()), forbidden(log.read_text())
        else:
            poll(f"an API call refused with 403 in {log}", lambda: forbidden(log.read_text()), 60)
            # Without a watch it publishes, but misses changes made by others; faults, node labels
            # and the pod watch of the metrics are beside publishing.
            if (
                verb != "watch"
                and resource not in ("gpufaults", "pods")
                and (resource, verb) != ("nodes", "patch")
            ):
                assert not chart.kube.slices(driver=driver)
    finally:
        proc.stop()
        shutil.rmtree(short, ignore_errors=True)
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
        for s in chart.kube.slices(driver=driver):
            client.CustomObjectsApi(chart.admin).delete_cluster_custom_object(
                "resource.k8s.io", resource_version(chart.admin), "resourceslices", s["metadata"]["name"]
            )


@pytest.mark.parametrize(
    ("verb"), ["", "get", "watch"], ids=["all-rules-follow-the-label", "nodes-get", "nodes-watch"]
)
def test_device_plugin_config_label_rules(
    chart: Chart, probe_node: str, rendered: list[dict[str, Any]], tmp_path: Path, verb: str
) -> None:
    """The device plugin's per-node config (NVIDIA's config-manager: docs/classic-requests.md) with
    the chart's rules for a device-plugin pool with configs: the plugin role plus the label watch's
    `nodes watch`. With all of them it follows its Node's label (GET, then WATCH by field selector);
    without `nodes get` or `nodes watch` it runs into a 403; listing Nodes stays refused."""
    [base] = [o for o in rendered if o["kind"] == "ClusterRole" and o["metadata"]["name"] == SA]
    pool = helm_template(
        client.VersionApi(chart.admin).get_code().git_version.lstrip("v"),
        served(chart.admin),
        *VALUES,
        "--set", "mode=device-plugin", "--set", "devicePlugin.config.map.default=version: v1",
    )  # fmt: skip
    [label_role] = [
        o for o in pool if o["kind"] == "ClusterRole" and o["metadata"]["name"] == f"{SA}-node-config-label"
    ]
    rules = base["rules"] + label_role["rules"]
    rbac = client.RbacAuthorizationV1Api(chart.admin)
    core = client.CoreV1Api(chart.admin)
    name = f"probe-dp-label-{verb or 'all'}"
    short = Path(tempfile.mkdtemp(prefix="rbdp", dir="/tmp"))  # unix socket paths are short
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\n")
    (configs / "ts-2").write_text(
        "version: v1\nsharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}\n"
    )
    with contextlib.suppress(ApiException):
        core.create_namespaced_service_account(NS, {"metadata": {"name": PROBE_SA}})
    rbac.create_cluster_role(
        {"metadata": {"name": name}, "rules": without(rules, "nodes", verb) if verb else rules}
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "subjects": [{"kind": "ServiceAccount", "name": PROBE_SA, "namespace": NS}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        }
    )
    token = core.create_namespaced_service_account_token(PROBE_SA, NS, {"spec": {"expirationSeconds": 600}})
    kc = chart.token_kubeconfig(str(token.status.token), name)
    args = [
        sys.executable, "-m", "dra_fake", "device-plugin", f"--node-name={probe_node}", f"--kubeconfig={kc}",
        f"--kubelet-socket={short / 'kubelet.sock'}",
        f"--kubelet-registrar-directory-path={short / 'registry'}", f"--cdi-root={short / 'cdi'}",
        f"--data-dir={short / 'data'}", f"--config-file-srcdir={configs}",
        "--fallback-strategies=named", "--log-format=json",
    ]  # fmt: skip
    proc = spawn(name, args, tmp_path / "logs", cwd=REPO)
    log = Path(proc.log)
    try:
        if verb:
            poll(f"an API call refused with 403 in {log}", lambda: forbidden(log.read_text()), 60)
        else:
            poll("the label watch started", lambda: "Waiting for change" in log.read_text(), 60)
            core.patch_node(probe_node, {"metadata": {"labels": {"nvidia.com/device-plugin.config": "ts-2"}}})
            poll("the relabel followed", lambda: "Updating to config: ts-2" in log.read_text(), 60)
            assert not forbidden(log.read_text()), forbidden(log.read_text())
            with pytest.raises(ApiException) as err:
                client.CoreV1Api(sa_api(kc)).list_node()
            assert err.value.status == 403
    finally:
        proc.stop()
        core.patch_node(probe_node, {"metadata": {"labels": {"nvidia.com/device-plugin.config": None}}})
        shutil.rmtree(short, ignore_errors=True)
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
