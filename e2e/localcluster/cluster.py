"""A real Kubernetes control plane on 127.0.0.1, without containers.

etcd, kube-apiserver, kube-scheduler and kube-controller-manager are the upstream binaries
built by `make cluster-build` (e2e/localcluster/controlplane.py); every simulated node is one
dra-kubelet harness process (the kubelet's own plugin manager and DRA manager) plus our GPU and
ComputeDomain kubelet plugins; beside them the ComputeDomain controller, KWOK and fleets.
"""

from __future__ import annotations

import logging
import shutil
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from dra_fake.core.featuregates import gate_string
from dra_fake.fleet.kwok import kwok_args
from dra_fake.fleet.workload import WorkloadProfile, stages_yaml
from e2e.localcluster import values as chart_values
from e2e.localcluster.controlplane import BIN_DIR, CONTROLLERS, REPO, STARTUP_TIMEOUT, ControlPlane, State
from e2e.localcluster.processes import Process, free_port, spawn, wait_for
from e2e.localcluster.values import CD_CLIQUE_ID as CD_CLIQUE_ID  # where the test beds import it from
from e2e.localcluster.values import Values

log = logging.getLogger("localcluster")

DEFAULT_ROOT = REPO / ".local-cluster"

CD_NAMESPACE = "nvidia-dra-driver-gpu"  # the driver namespace of NVIDIA's docs
# Every CDI spec the plugins write in the tests is schema-checked (dra_fake.core.cdi.checked).
CHECKED_SPECS = {"DRA_FAKE_CHECK_CDI_SPECS": "1"}


def node_name(i: int) -> str:
    return f"node-{i}"


class LocalCluster(ControlPlane):
    def __init__(
        self,
        root: Path = DEFAULT_ROOT,
        *,
        nodes: int = 1,
        inventory_config: Path | None = None,
        node_configs: dict[str, Path] | None = None,
        node_labels: dict[str, dict[str, str]] | None = None,
        with_plugins: bool = True,
        exec_kubeconfig: Path | None = None,
        node_lifecycle: bool = False,
        values: Values | None = None,
        kwok: WorkloadProfile | None = None,
        fleet_nodes: int = 0,
    ) -> None:
        self.root = root.resolve()
        # The credentials of exec'd containers (the IMEX daemon pods): admin unless given, e.g. a
        # token of the chart's daemon ServiceAccount (e2e/rbac; the file may come later).
        self.exec_kubeconfig = exec_kubeconfig
        self.node_count = nodes
        self.with_plugins = with_plugins
        # KWOK fleets: KWOK's controller with this workload (None: none), and `dra-fake fleet` nodes.
        self.kwok = kwok
        self.fleet_nodes = fleet_nodes
        # The node lifecycle controller marks nodes without heartbeats Unknown: off by default (the
        # harness nodes have no kubelet to renew Leases); on where fleet heartbeats are measured.
        self.controllers = CONTROLLERS + (",node-lifecycle-controller" if node_lifecycle else "")
        # A running cluster is described by its saved state (reused by the e2e suite and the demo);
        # `up` starts exactly what was asked for here, never an earlier cluster's inventories.
        # Bad values fail here, before anything starts (ValuesError, naming the value).
        chart_values.check(values or {})
        self._requested = State(
            root=str(self.root),
            inventory_config=str(inventory_config.resolve()) if inventory_config else None,
            node_configs={node: str(path.resolve()) for node, path in (node_configs or {}).items()},
            node_labels=dict(node_labels or {}),
            values=dict(values or {}),
        )
        # Until one is started here, a cluster is what was asked for.
        self.state = State.load(self.root) or State(**asdict(self._requested))

    @property
    def values(self) -> Values:
        """The chart values the plugins run with: the chart's defaults, the test bed's, the user's."""
        return chart_values.effective(self.state.values)

    def node_values(self, node: str) -> Values:
        """The values the node's GPU plugin runs with: `values`, then the node's own (set_node_values)."""
        return chart_values.effective(
            chart_values.coalesce(self.state.values, self.state.node_values.get(node, {}))
        )

    def set_node_values(self, node: str, values: Values) -> None:
        """Values for the node's GPU plugin from its next start on ({}: none); checked as the user's
        are (ValuesError, naming the value)."""
        chart_values.check(chart_values.coalesce(self.state.values, values))
        if values:
            self.state.node_values[node] = dict(values)
        else:
            self.state.node_values.pop(node, None)
        self.state.save()

    # ---- lifecycle ---------------------------------------------------------------------
    def up(self) -> None:
        if self.is_up():
            raise RuntimeError(f"a local cluster is already running under {self.root} (make cluster-down)")
        missing = [
            b
            for b in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "dra-kubelet")
            if not (BIN_DIR / b).exists()
        ]
        if missing:
            raise RuntimeError(f"missing binaries {missing} in {BIN_DIR}: run `make cluster-build` first")
        self.root.mkdir(parents=True, exist_ok=True)
        # A new cluster starts empty: etcd data and node state (checkpoints, CDI specs) of an
        # earlier cluster would not match it. Logs of the previous run are kept, appended to.
        for stale in ("etcd", "nodes", "pki"):
            shutil.rmtree(self.root / stale, ignore_errors=True)
        self.state = State(
            root=str(self.root),
            inventory_config=self._requested.inventory_config,
            node_configs=dict(self._requested.node_configs),
            node_labels=dict(self._requested.node_labels),
            values=dict(self._requested.values),
        )
        if self.with_plugins:
            log.info(
                "feature gates of the plugins: %s (the test bed's %s with yours on top)",
                gate_string(self.values["featureGates"]),
                gate_string(chart_values.TEST_BED_VALUES["featureGates"]),
            )
        try:
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            self._start_controllers()
            if self.with_plugins:
                self._install_cluster_objects()
            for i in range(1, self.node_count + 1):
                self.add_node(node_name(i))
            if self.with_plugins:
                self.start_cd_controller()
            if self.kwok is not None:
                self.start_kwok(self.kwok)
            if self.fleet_nodes:
                self.start_fleet(self.fleet_nodes)
        except BaseException:
            log.error("cluster start-up failed; stopping what was started (logs in %s)", self.logs)
            self.down()
            raise

    def add_node(self, node: str) -> None:
        if node not in self.state.nodes:
            self.state.nodes.append(node)
        self.start_harness(node)
        if self.with_plugins:
            self.start_plugin(node)
            self.start_cd_plugin(node)

    def _install_cluster_objects(self) -> None:
        """What a cluster admin installs once: the DeviceClasses (the chart does this on kind)."""
        from e2e.localcluster.objects import install_device_classes

        install_device_classes(self.kubeconfig)
        self._install_compute_domain_objects()

    # ---- nodes -------------------------------------------------------------------------
    def start_harness(self, node: str) -> Process:
        nd = self.node_dir(node)
        nd.mkdir(parents=True, exist_ok=True)
        proc = self._track(
            spawn(
                f"dra-kubelet-{node}",
                [
                    str(BIN_DIR / "dra-kubelet"),
                    f"--kubeconfig={self.kubeconfig}",
                    f"--node-name={node}",
                    f"--state-dir={nd}",
                    "--labels="
                    + ",".join(f"{k}={v}" for k, v in self.state.node_labels.get(node, {}).items()),
                    "--v=2",
                    # The ComputeDomain daemon pods' `dra-fake imex-daemon` runs as a local process.
                    f"--exec=dra-fake={sys.executable} -m dra_fake",
                    f"--exec-env=KUBECONFIG={self.exec_kubeconfig or self.kubeconfig}",
                    f"--exec-dir={REPO}",
                ],
                self.logs,
            )
        )
        wait_for(
            f"node {node} Ready", lambda: self._node_ready(node), STARTUP_TIMEOUT, alive=proc.check_alive
        )
        return proc

    def stop_harness(self, node: str) -> None:
        self._stop(f"dra-kubelet-{node}")

    def _node(self, node: str) -> dict[str, Any]:
        return self.api_json(f"/api/v1/nodes/{node}")

    def _node_ready(self, node: str) -> bool:
        obj = self._node(node)
        conds = obj.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds) and not obj["spec"].get(
            "taints"
        )

    def inventory_file(self, node: str) -> Path:
        """The node's inventory: its own file (node_configs), else its node pool's of the values, else
        the node's own `inventory` value (set_node_values), else CONFIG, else the values'
        `inventory`; the last two are the chart's `inventory.config` and `inventory`, so a pool wins
        over either, as in the chart."""
        if node in self.state.node_configs:
            return Path(self.state.node_configs[node])
        values = self.node_values(node)
        own = "inventory" in self.state.node_values.get(node, {})
        labels = self._node(node)["metadata"].get("labels", {}) if values["nodePools"] else {}
        pool, document = chart_values.node_inventory(values, labels)
        if not pool and not own and self.state.inventory_config:
            return Path(self.state.inventory_config)
        path = self.root / "inventories" / f"{pool or (node if own else 'default')}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        source = f"nodePools {pool}" if pool else "inventory"
        path.write_text(
            f"# the chart values' {source}, as the chart's ConfigMap\n"
            + yaml.safe_dump(document, sort_keys=False)
        )
        return path

    def plugin_args(self, node: str) -> list[str]:
        """The GPU plugin's command line: the node's paths and ports, then what the chart's values
        set (e2e/localcluster/values.py)."""
        nd = self.node_dir(node)
        values = self.node_values(node)
        dcgm = (
            self.state.ports.setdefault(f"dcgm-{node}", free_port())
            if values["dcgmExporter"]["enabled"]
            else -1
        )
        return [
            sys.executable,
            "-m",
            "dra_fake",
            "gpu-kubelet-plugin",
            f"--node-name={node}",
            f"--kubeconfig={self.kubeconfig}",
            f"--kubelet-registrar-directory-path={nd / 'plugins_registry'}",
            f"--kubelet-plugins-directory-path={nd / 'plugins'}",
            f"--cdi-root={nd / 'cdi'}",
            "--healthcheck-port=0",  # the plugin binds a free port itself: no race with a port picked here
            f"--metrics-port={self.state.ports.setdefault(f'metrics-{node}', free_port())}",
            # dcgm-exporter's metrics (e2e/test_observability.py)
            f"--dcgm-exporter-port={dcgm}",
            f"--config={self.inventory_file(node)}",
            *chart_values.as_flags("gpu-kubelet-plugin", chart_values.plugin_env(values, "gpus")),
        ]

    def start_plugin(self, node: str, wait: bool = True) -> Process:
        proc = self._track(
            spawn(f"gpu-plugin-{node}", self.plugin_args(node), self.logs, env=CHECKED_SPECS, cwd=REPO)
        )
        if wait:
            wait_for(
                f"GPU plugin on {node} registered and publishing",
                lambda: self.plugin_ready(node),
                STARTUP_TIMEOUT,
                every=0.5,
                alive=proc.check_alive,
            )
        return proc

    def stop_plugin(self, node: str, kill: bool = False) -> None:
        self._stop(f"gpu-plugin-{node}", kill=kill)

    def plugin_ready(self, node: str) -> bool:
        """Registered by the node's kubelet (the plugin's dra_fake_kubelet_registered gauge) and slices
        published."""
        from e2e.localcluster.objects import node_slices

        url = f"http://127.0.0.1:{self.state.ports[f'metrics-{node}']}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            registered = "dra_fake_kubelet_registered 1.0" in resp.read().decode()
        return registered and bool(node_slices(self.kubeconfig, node, "gpu.nvidia.com"))

    # ---- ComputeDomains (docs/computedomain.md) -----------------------------------------
    def _install_compute_domain_objects(self) -> None:
        from e2e.localcluster.install import install
        from e2e.localcluster.objects import api_client

        with api_client(self.kubeconfig) as api:
            install(api, CD_NAMESPACE)

    def cd_plugin_args(self, node: str) -> list[str]:
        nd = self.node_dir(node)
        env = chart_values.plugin_env(self.values, "compute-domains")
        return [
            sys.executable,
            "-m",
            "dra_fake",
            "compute-domain-kubelet-plugin",
            f"--node-name={node}",
            f"--kubeconfig={self.kubeconfig}",
            f"--kubelet-registrar-directory-path={nd / 'plugins_registry'}",
            f"--kubelet-plugins-directory-path={nd / 'plugins'}",
            f"--cdi-root={nd / 'cdi'}",
            f"--namespace={CD_NAMESPACE}",
            f"--metrics-port={self.state.ports.setdefault(f'cd-metrics-{node}', free_port())}",
            f"--config={self.inventory_file(node)}",  # the clique ID, unless computeDomains.imexCliqueID
            *chart_values.as_flags("compute-domain-kubelet-plugin", env),
        ]

    def start_cd_plugin(self, node: str, wait: bool = True) -> Process:
        from e2e.localcluster.objects import node_slices

        proc = self._track(
            spawn(f"cd-plugin-{node}", self.cd_plugin_args(node), self.logs, env=CHECKED_SPECS, cwd=REPO)
        )
        if wait:
            wait_for(
                f"compute-domain plugin on {node} publishing",
                lambda: bool(node_slices(self.kubeconfig, node, "compute-domain.nvidia.com")),
                STARTUP_TIMEOUT,
                every=0.5,
                alive=proc.check_alive,
            )
        return proc

    def stop_cd_plugin(self, node: str, kill: bool = False) -> None:
        self._stop(f"cd-plugin-{node}", kill=kill)

    def start_cd_controller(self, name: str = "cd-controller", extra: Sequence[str] = ()) -> Process:
        """The controller; `name` and `extra` flags for more replicas (e2e/test_soak.py)."""
        args = [
            sys.executable,
            "-m",
            "dra_fake",
            "compute-domain-controller",
            f"--kubeconfig={self.kubeconfig}",
            f"--namespace={CD_NAMESPACE}",
            "--status-sync-seconds=1",
            *extra,
        ]
        return self._track(spawn(name, args, self.logs, cwd=REPO))

    def stop_cd_controller(self, kill: bool = False, name: str = "cd-controller") -> None:
        self._stop(name, kill=kill)

    # ---- KWOK fleets (docs/local-cluster.md#kwok-fleets) --------------------------------
    def start_kwok(self, workload: WorkloadProfile | None = None) -> Process:
        """KWOK's controller, playing the kubelet of every Node labelled dra-fake.dev/fleet (the
        fleet's; harness nodes have no such label): the pods bound there start, run and finish as
        `workload` says (its Stages, dra_fake.fleet.workload). It holds no Leases: the fleet renews
        its nodes' as a kubelet does (with Leases, KWOK would manage only the nodes whose Lease it
        holds, and hold none another holder renews); its flags: dra_fake.fleet.kwok, as in a cluster.
        Replaces a running one (another profile)."""
        self.stop_kwok()
        binary = BIN_DIR / "kwok"
        if not binary.exists():
            raise RuntimeError(f"missing binary {binary}: run `make cluster-build` first")
        stages = self.root / "kwok" / "stages.yaml"
        stages.parent.mkdir(parents=True, exist_ok=True)
        stages.write_text(stages_yaml(workload or WorkloadProfile()))
        proc = self._track(
            spawn("kwok", [str(binary), *kwok_args(str(stages), str(self.kubeconfig))], self.logs)
        )
        # It logs "Watch nodes" once its flags and Stages are accepted (a bad one: it exits, its error shown).
        wait_for(
            "kwok started", lambda: "Watch nodes" in proc.tail(50), STARTUP_TIMEOUT, alive=proc.check_alive
        )
        return proc

    def stop_kwok(self) -> None:
        self._stop("kwok")

    def start_fleet(self, nodes: int, extra: Sequence[str] = ()) -> Process:
        """`dra-fake fleet --nodes N`: Nodes labelled dra-fake.dev/fleet=fleet, each with the slices of
        8 x H100 (or CONFIG's inventory), their Leases renewed."""
        args = [
            sys.executable,
            "-m",
            "dra_fake",
            "fleet",
            f"--nodes={nodes}",
            f"--kubeconfig={self.kubeconfig}",
            *([f"--config={self.state.inventory_config}"] if self.state.inventory_config else []),
            *extra,
        ]
        proc = self._track(spawn("fleet", args, self.logs, cwd=REPO))
        # It logs "fleet running" once every Node exists (their slices follow).
        wait_for(
            f"fleet of {nodes} nodes created",
            lambda: "fleet running" in proc.tail(50),
            STARTUP_TIMEOUT + nodes / 10,
            every=0.5,
            alive=proc.check_alive,
        )
        return proc

    def stop_fleet(self) -> None:
        self._stop("fleet")
