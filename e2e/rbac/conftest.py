"""The chart the e2e/rbac tests check (`chart`, chart.py): on kind the cluster's Helm release; on
the harness a dedicated control plane and the chart installed on it, with the plugins, the
ComputeDomain controller and the IMEX daemons' credentials. Package fixtures, started once for
every file of e2e/rbac (e2e/rbac/__init__.py says how)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.harnessbed import HarnessBed
from e2e.kube import Kube, poll
from e2e.localcluster import DEFAULT_ROOT, LocalCluster
from e2e.localcluster.processes import Process, free_port, spawn, wait_for
from e2e.rbac.bed import (
    CONTROLLER_SA,
    DAEMON_SA,
    HELM,
    KUBECONFORM,
    NODES,
    NS,
    REPO,
    SA,
    VALUES,
    apply_all,
    helm_template,
    request_token,
    served,
    token_kubeconfig,
)
from e2e.rbac.chart import Chart, kind_chart


@pytest.fixture(scope="package", autouse=True)
def tools() -> None:
    if not (HELM.exists() and KUBECONFORM.exists()):
        reason = f"needs {HELM} and {KUBECONFORM}: run hack/install-tools.sh (make chart-check does)"
        if os.environ.get("DRA_FAKE_REQUIRE_TOOLS") == "1":
            raise RuntimeError(reason)
        pytest.skip(reason)


@pytest.fixture(scope="package")
def cluster() -> Iterator[LocalCluster]:
    root = Path(str(Path(os.environ.get("LOCAL_CLUSTER_DIR", DEFAULT_ROOT)).resolve()) + "-rbac")
    c = LocalCluster(root, nodes=len(NODES), with_plugins=False)
    if c.is_up():
        c.down()
    shutil.rmtree(root, ignore_errors=True)  # a fresh etcd: this package creates fixed names
    # IMEX daemon pods run with the daemon ServiceAccount's token, written by `cd_installed`.
    c = LocalCluster(
        root, nodes=len(NODES), with_plugins=False, exec_kubeconfig=root / "sa-daemon.kubeconfig"
    )
    c.up()
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="package")
def chart_kubeconfig(request: pytest.FixtureRequest) -> Path:
    """The admin's kubeconfig: the kind cluster's, else the dedicated control plane's."""
    if os.environ.get("KUBECONFIG"):
        return Path(os.environ["KUBECONFIG"])
    return request.getfixturevalue("cluster").kubeconfig  # type: ignore[no-any-return]


@pytest.fixture(scope="package")
def admin(chart_kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(chart_kubeconfig))


@pytest.fixture(scope="package")
def chart(
    request: pytest.FixtureRequest, chart_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Chart:
    tmp = tmp_path_factory.mktemp("rbac")
    if os.environ.get("KUBECONFIG"):
        return kind_chart(request.getfixturevalue("bed"), chart_kubeconfig, tmp)
    cluster: LocalCluster = request.getfixturevalue("cluster")
    credentials: dict[str, Path] = request.getfixturevalue("cd_installed")

    def logs(component: str, node: str | None = None) -> str:
        if component == "imex-daemons":  # the harness execs them; their output is kept per node
            return "".join(log.read_text() for log in cluster.root.glob("nodes/*/exec/*.log"))
        names = [component] if component == "cd-controller" else [f"{component}-{n}" for n in NODES]
        if node:
            names = [f"{component}-{node}"]
        return "".join((cluster.logs / f"{name}.log").read_text() for name in names)

    return Chart(
        kubeconfig=chart_kubeconfig,
        nodes=NODES,
        default_nodes=NODES,
        plugin_ds=SA,  # the DaemonSet is named as its ServiceAccount
        credentials=credentials,
        bed=HarnessBed(Kube(chart_kubeconfig), cluster),
        logs=logs,
        relabel=lambda: None,  # the uninstall hook's test is the package's last
        tmp=tmp,
    )


@pytest.fixture(scope="package")
def rendered(admin: client.ApiClient) -> list[dict[str, Any]]:
    version = client.VersionApi(admin).get_code().git_version.lstrip("v")
    return helm_template(version, served(admin), "--include-crds", *VALUES)


@pytest.fixture(scope="package")
def installed(
    cluster: LocalCluster, admin: client.ApiClient, rendered: list[dict[str, Any]]
) -> dict[str, Path]:
    """The chart applied, and each node's plugin running with its SA kubeconfig. -> node: kubeconfig"""
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": NS}})
    apply_all(admin, rendered)
    [cm] = [o for o in rendered if o["kind"] == "ConfigMap"]
    inventory = cluster.root / "chart-inventory.yaml"
    inventory.write_text(cm["data"]["inventory.yaml"])
    core = client.CoreV1Api(admin)

    def ds_pod(node: str) -> dict[str, Any] | None:
        pods = core.list_namespaced_pod(
            NS,
            field_selector=f"spec.nodeName={node}",
            label_selector="app.kubernetes.io/component=kubelet-plugin",
        ).items
        running = [p for p in pods if p.status.phase == "Running"]
        return admin.sanitize_for_serialization(running[0]) if running else None  # type: ignore[no-any-return]

    kubeconfigs = {}
    for node in NODES:
        pod = poll(
            f"kubelet-plugin pod of the chart's DaemonSet Running on {node}", lambda n=node: ds_pod(n), 90
        )
        assert pod["spec"]["serviceAccountName"] == SA
        kc = token_kubeconfig(
            cluster.kubeconfig, request_token(admin, pod), cluster.root / f"sa-{node}.kubeconfig"
        )
        kubeconfigs[node] = kc
        args = [a for a in cluster.plugin_args(node) if not a.startswith(("--kubeconfig=", "--config="))]
        args += [f"--kubeconfig={kc}", f"--config={inventory}"]
        proc = cluster._track(spawn(f"gpu-plugin-{node}", args, cluster.logs, cwd=REPO))
        wait_for(
            f"GPU plugin on {node} publishing with the chart's ServiceAccount",
            lambda n=node: cluster.plugin_ready(n),
            120,
            every=0.5,
            alive=proc.check_alive,
        )
    return kubeconfigs


@pytest.fixture(scope="package")
def cd_installed(
    installed: dict[str, Path], cluster: LocalCluster, admin: client.ApiClient
) -> dict[str, Path]:
    """The compute-domain plugins (the plugin pods' tokens), the controller (a token bound to the
    chart's controller pod) and the daemon credentials. -> role or node: kubeconfig"""
    core = client.CoreV1Api(admin)
    token_kubeconfig(
        cluster.kubeconfig, request_token(admin, None, DAEMON_SA), cluster.root / "sa-daemon.kubeconfig"
    )
    for node in NODES:
        args = [
            a for a in cluster.cd_plugin_args(node) if not a.startswith(("--kubeconfig=", "--namespace="))
        ]
        args += [f"--kubeconfig={installed[node]}", f"--namespace={NS}"]
        proc = cluster._track(spawn(f"cd-plugin-{node}", args, cluster.logs, cwd=REPO))
        wait_for(
            f"compute-domain plugin on {node} publishing with the chart's ServiceAccount",
            lambda n=node: Kube(cluster.kubeconfig).slices(driver="compute-domain.nvidia.com", node=n),
            120,
            every=0.5,
            alive=proc.check_alive,
        )

    def controller_pod() -> dict[str, Any] | None:
        pods = core.list_namespaced_pod(
            NS, label_selector="app.kubernetes.io/component=compute-domain-controller"
        ).items
        running = [p for p in pods if p.status.phase == "Running"]
        return admin.sanitize_for_serialization(running[0]) if running else None  # type: ignore[no-any-return]

    pod = poll("the chart's controller pod Running", controller_pod, 90)
    assert pod["spec"]["serviceAccountName"] == CONTROLLER_SA
    kc = token_kubeconfig(
        cluster.kubeconfig,
        request_token(admin, pod, CONTROLLER_SA),
        cluster.root / "sa-controller.kubeconfig",
    )
    args = [
        sys.executable,
        "-m",
        "dra_fake",
        "compute-domain-controller",
        f"--kubeconfig={kc}",
        f"--namespace={NS}",
        "--status-sync-seconds=1",
        "--leader-elect=true",
        f"--leader-elect-identity={pod['metadata']['name']}",
        # the chart's daemon image: its admission policy pins the DaemonSets to it
        *(
            f"--daemon-image={e['value']}"
            for e in pod["spec"]["containers"][0]["env"]
            if e["name"] == "IMAGE_NAME"
        ),
        f"--metrics-port={free_port()}",
    ]
    ctrl: Process = cluster._track(spawn("cd-controller", args, cluster.logs, cwd=REPO))
    coord = client.CoordinationV1Api(admin)

    def leader() -> str | None:
        ctrl.check_alive()
        try:
            return coord.read_namespaced_lease("compute-domain-controller", NS).spec.holder_identity  # type: ignore[no-any-return]
        except ApiException:
            return None

    assert poll("controller holds the Lease", leader, 60) == pod["metadata"]["name"]
    return {**installed, "controller": kc, "daemon": cluster.root / "sa-daemon.kubeconfig"}
